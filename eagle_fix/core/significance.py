"""Significance tests and the verdict: Mann-Whitney, the sign test, count tests, test floors and sizes, judge.

Why this module exists: a fixed percentage threshold on one sample per side flaps on shared
machines (docs/statistics.md). Following asv, a change counts only when it is both larger than a
threshold *and* statistically significant (Mann-Whitney U on the repeats; the sign test on the
ratios of paired rounds). Below the sample size at which a test can reach its level at all,
nothing is claimed: the verdict is `inconclusive` and names the size needed (an interval-overlap
fallback would call noise a change far more often than its nominal level says). Every judgement
also says what it could have detected (`detectable_shift`), so "within noise" never passes for "no
change". EAGLE acceptance comes as counts, so its changes are judged by a count test
(`acceptance_change_p`), not by repeats. The summaries and intervals these build on are in
eagle_fix.core.stats.

Implementation: normal quantiles and tails from scipy.stats (a base dependency). The exact Mann-Whitney distribution is computed: without ties from the Gaussian-binomial
generating function of U (eagle_fix.core.stats), with ties by enumerating the conditional
(permutation) distribution of the mid-rank sum over tie groups; the tests check both against
scipy.stats.mannwhitneyu.

Everything takes plain lists of numbers; None and non-finite values (a failed repeat) are ignored.
"""

from __future__ import annotations

import math

from scipy import stats as _st

from eagle_fix.core.stats import (
    EXACT_MAX_N,
    binom_half_cdf,
    clean,
    gaussian_binomial_counts,
    median,
    paired_ratios,
    ratio_summary,
    shift_ci,
)

__all__ = [
    "detectable_shift",
    "judge",
    "mann_whitney_floor",
    "mann_whitney_p",
    "pairs_needed",
    "samples_needed",
    "sign_test_floor",
]

# Exact Mann-Whitney up to these sizes (EXACT_MAX_N a side without ties, from eagle_fix.core.stats); beyond
# them the normal approximation (with tie and continuity corrections, as scipy's "asymptotic" method) is
# accurate and the exact one is slow.
EXACT_TIES_MAX_TOTAL = 40  # both sides together, with ties (tie-group enumeration)


class _Normal:
    """The standard normal (scipy.stats.norm) under the names its callers use: cdf, inv_cdf."""

    @staticmethod
    def cdf(x: float) -> float:
        return float(_st.norm.cdf(x))

    @staticmethod
    def inv_cdf(q: float) -> float:
        return float(_st.norm.ppf(q))


STD_NORMAL = _Normal()


# ----------------------------------------------------------------------------- helpers


def two_sided_normal_p(z: float) -> float:
    """P(|Z| >= |z|) for a standard normal Z (scipy.stats.norm.sf: no cancellation in the far tail)."""
    return min(1.0, 2.0 * float(_st.norm.sf(abs(z))))


# ----------------------------------------------------------------------------- tests


def _ranks(values: list[float]) -> tuple[list[int], list[int]]:
    """Doubled mid-ranks (integers) of values, and the tie-group sizes."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks2 = [0] * len(values)
    groups = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        r2 = (i + 1) + (j + 1)  # twice the mid-rank of positions i..j (1-based)
        for t in range(i, j + 1):
            ranks2[order[t]] = r2
        groups.append(j - i + 1)
        i = j + 1
    return ranks2, groups


def _mw_exact_ties(a: list[float], b: list[float]) -> float:
    """Exact conditional (permutation) two-sided p with ties: enumerate, over tie groups, how
    many of sample a's members fall in each group, and the resulting mid-rank sum."""
    m, n = len(a), len(b)
    values = a + b
    ranks2, _ = _ranks(values)
    r_obs2 = sum(ranks2[:m])
    groups: dict[int, int] = {}
    for r2 in ranks2:
        groups[r2] = groups.get(r2, 0) + 1
    # dp[j] = {doubled rank sum: ways} choosing j members of a so far
    dp: list[dict[int, int]] = [{} for _ in range(m + 1)]
    dp[0][0] = 1
    for r2, g in groups.items():
        new: list[dict[int, int]] = [{} for _ in range(m + 1)]
        for j in range(m + 1):
            if not dp[j]:
                continue
            for t in range(min(g, m - j) + 1):
                w = math.comb(g, t)
                tgt = new[j + t]
                add = t * r2
                for s, ways in dp[j].items():
                    tgt[s + add] = tgt.get(s + add, 0) + ways * w
        dp = new
    centre2 = m * (m + n + 1)  # twice the null mean of the rank sum
    obs_dev = abs(r_obs2 - centre2)
    total = extreme = 0
    for s, ways in dp[m].items():
        total += ways
        if abs(s - centre2) >= obs_dev:
            extreme += ways
    return min(1.0, extreme / total)


def _mann_whitney(a: list[float], b: list[float]) -> tuple[float, str] | None:
    """(two-sided p, method) or None when a side has < 2 values."""
    a, b = clean(a), clean(b)
    m, n = len(a), len(b)
    if m < 2 or n < 2:
        return None
    if len(set(a + b)) == 1:
        return 1.0, "exact"  # all values identical: no evidence of any shift
    ranks2, groups = _ranks(a + b)
    ties = any(g > 1 for g in groups)
    u1_2 = sum(ranks2[:m]) - m * (m + 1)  # twice U of sample a
    if not ties and max(m, n) <= EXACT_MAX_N:
        counts = gaussian_binomial_counts(min(m, n), max(m, n))
        u = max(u1_2, 2 * m * n - u1_2) // 2  # the larger of U1, U2
        sf = sum(counts[u:]) / sum(counts)
        return min(1.0, 2.0 * sf), "exact"
    if ties and m + n <= EXACT_TIES_MAX_TOTAL:
        return _mw_exact_ties(a, b), "exact (ties, permutation)"
    big_n = m + n
    tie_term = sum(g**3 - g for g in groups) / (big_n * (big_n - 1))
    var = m * n / 12.0 * ((big_n + 1) - tie_term)
    if var <= 0:
        return 1.0, "normal approx."
    dev = abs(u1_2 / 2.0 - m * n / 2.0) - 0.5  # continuity correction
    if dev <= 0:
        return 1.0, "normal approx."
    return two_sided_normal_p(dev / math.sqrt(var)), "normal approx."


def mann_whitney_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided Mann-Whitney U p-value (asv's test; no normality assumption).

    Exact for small samples: without ties (per side <= 50) from the exact U distribution, so
    5 vs 5 fully separated gives 2/252; with ties (<= 40 values in all) the exact conditional
    permutation distribution of the mid-rank sum. Larger samples: normal approximation with tie
    and continuity corrections. All values identical -> 1.0. None if a side has < 2 values.
    """
    res = _mann_whitney(a, b)
    return None if res is None else res[0]


# ----------------------------------------------------------------------------- direction


def _direction(change: float, threshold: float, higher_is_better: bool) -> str | None:
    """'worse' / 'better' when the change is beyond the threshold in that direction, else None."""
    if change > threshold:
        return "better" if higher_is_better else "worse"
    if change < -threshold:
        return "worse" if higher_is_better else "better"
    return None


# ----------------------------------------------------------------------------- what a test can see


def mann_whitney_floor(m: int, n: int) -> float:
    """Smallest two-sided p the exact Mann-Whitney test can give for sizes m and n: the two samples
    fully separated, 2 / C(m+n, m). 1.0 when a side is empty."""
    if m < 1 or n < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(m + n, m))


def sign_test_floor(n: int) -> float:
    """Smallest two-sided p the exact sign test can give on n pairs (all on one side): 2 / 2^n.
    Wilcoxon's signed-rank test has the same floor, so no paired rank test escapes it."""
    return min(1.0, 2.0 / 2**n) if n >= 1 else 1.0


def check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def samples_needed(alpha: float) -> int:
    """Fewest samples a side (equal sizes) for which Mann-Whitney can reach p < alpha at all."""
    check_alpha(alpha)
    n = 1
    while mann_whitney_floor(n, n) >= alpha:
        n += 1
    return n


def pairs_needed(alpha: float) -> int:
    """Fewest pairs for which the sign test can reach p < alpha at all."""
    check_alpha(alpha)
    n = 1
    while sign_test_floor(n) >= alpha:
        n += 1
    return n


def _mw_critical_u(m: int, n: int, alpha: float) -> int | None:
    """Smallest U (counted for the side that moved) whose two-sided p is below alpha, from the
    no-ties null distribution (exact up to EXACT_MAX_N a side, normal approximation beyond);
    None when the sizes cannot reach alpha."""
    if mann_whitney_floor(m, n) >= alpha:
        return None
    mn = m * n
    if max(m, n) <= EXACT_MAX_N:
        counts = gaussian_binomial_counts(min(m, n), max(m, n))
        total = sum(counts)
        upper = 0
        for u in range(mn, -1, -1):
            upper += counts[u]
            if 2.0 * upper / total >= alpha:
                return u + 1
        return 0
    sd = math.sqrt(mn * (m + n + 1) / 12.0)
    z = STD_NORMAL.inv_cdf(1.0 - alpha / 2.0)
    return min(mn, math.floor(mn / 2.0 + 0.5 + z * sd) + 1)


def _sign_critical(n: int, alpha: float) -> int | None:
    """Largest count c on the minority side for which the two-sided sign test on n pairs gives
    p < alpha; None when n pairs cannot reach alpha."""
    if sign_test_floor(n) >= alpha:
        return None
    c = 0
    while c + 1 <= n // 2 and 2.0 * binom_half_cdf(n, c + 1) < alpha:
        c += 1
    return c


def detectable_shift(
    base: list[float],
    new: list[float],
    *,
    higher_is_better: bool,
    alpha: float,
    paired: bool = False,
) -> float | None:
    """The smallest constant relative shift in the worse direction that the test would have called
    significant at `alpha`, given the samples' own spread. None when the sizes cannot reach alpha.

    Unpaired: the new samples are moved so that their median is the base's, then shifted by s (times
    1 - s for a higher-is-better metric, 1 + s otherwise); the answer is the smallest s at which at
    least U* of the m*n pairs are worse, U* being the smallest U whose exact two-sided Mann-Whitney
    p is below alpha. The pairwise thresholds are closed-form, so this is the U*-th smallest of
    them, not a search. Non-positive values shift additively (in units of the base median).
    Paired: the ratios new/base are divided by their median, then shifted by s; the answer is the
    smallest s that puts enough ratios on the worse side of 1 for the sign test to reach alpha.
    Both are the shift the test *just* catches (about half the time, as the noise falls), a floor
    on what it can see rather than a power-80% design figure.
    """
    check_alpha(alpha)
    if paired:
        ratios = paired_ratios(base, new)
        c = _sign_critical(len(ratios), alpha)
        if c is None:
            return None
        med = median(ratios)
        if higher_is_better:  # r/med * (1 - s) < 1  <=>  s > 1 - med/r
            q = sorted(1.0 - med / r for r in ratios)
        else:  # r/med * (1 + s) > 1  <=>  s > med/r - 1
            q = sorted(med / r - 1.0 for r in ratios)
        return max(0.0, q[len(ratios) - c - 1])
    b, x = clean(base), clean(new)
    u = _mw_critical_u(len(b), len(x), alpha)
    if u is None:
        return None
    mb, mx = median(b), median(x)
    if min(b) > 0 and min(x) > 0:
        xs = [v * mb / mx for v in x]
        if higher_is_better:  # x (1 - s) < b  <=>  s > 1 - b/x
            d = sorted(1.0 - bi / xj for bi in b for xj in xs)
        else:  # x (1 + s) > b  <=>  s > b/x - 1
            d = sorted(bi / xj - 1.0 for bi in b for xj in xs)
    else:
        scale = abs(mb) or 1.0
        xs = [v - mx + mb for v in x]
        sign = 1.0 if higher_is_better else -1.0
        d = sorted(sign * (xj - bi) / scale for bi in b for xj in xs)
    return max(0.0, d[u - 1])


# ----------------------------------------------------------------------------- the verdict


def judge(
    base: list[float],
    new: list[float],
    *,
    higher_is_better: bool,
    threshold: float,
    alpha: float = 0.01,
    paired: bool = False,
) -> dict:
    """The gate's verdict on one noisy metric (throughput, TPOT, ...) between two sets of repeats.

    Returns {"verdict", "change", "p", "ci95", "coverage", "test", "alpha", "needed", "detectable"}:
    verdict is "regression", "improved", "within noise" or "inconclusive"; change the relative change
    (new - base) / |base| of the medians (paired: median ratio - 1); p the test's p-value (or None);
    ci95 a distribution-free interval of the relative change (or None) and coverage its real
    coverage (below 0.95 when it is the full range of too few samples: label it with
    interval_label); test names the test; needed the sample size (a side, or pairs) the test needs
    to reach alpha, when it had fewer (else None); detectable the smallest relative change in the
    worse direction this comparison could have called a regression: max(detectable_shift,
    threshold), None when it could call none.

    One rule for both forms (None/non-finite samples are dropped first): a change is a regression
    (an improvement) only when |change| > threshold in the worse (better) direction -- down for
    higher_is_better, up otherwise -- AND the test gives p < alpha. When the sizes cannot reach
    alpha at all the verdict is "inconclusive" and `needed` says how many samples would do; a
    significant-looking separation of 2 vs 2 is p = 1/3, not evidence.
    * Unpaired: the exact two-sided Mann-Whitney U test (floor 2 / C(m+n, m): 5 vs 5 reach
      2/252 < 0.01, 4 vs 4 only 2/70). ci95 is Moses' interval of the relative shift (pairwise
      ratios new_j / base_i), for information.
    * Paired (base_i and new_i measured back to back, e.g. interleaved A/B rounds): the ratios
      new_i / base_i of pairs with both values positive; the exact two-sided sign test of median
      ratio = 1 (floor 2 / 2^n: 8 pairs reach 2/256 < 0.01). ci95 is the distribution-free interval
      of the median ratio (median_ci at 0.95), minus 1, for information.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    check_alpha(alpha)

    def detectable(shift: float | None) -> float | None:
        return None if shift is None else max(shift, threshold)

    if paired:
        ratios = paired_ratios(base, new)
        summ = ratio_summary(ratios)
        change = summ["median"] - 1.0 if summ["median"] is not None else None
        test = "paired sign test on the ratios"
        ci95 = [summ["ci95"][0] - 1.0, summ["ci95"][1] - 1.0] if summ["ci95"] else None
        out = {
            "change": change,
            "p": None,
            "ci95": ci95,
            "coverage": summ["coverage"],
            "alpha": alpha,
            "needed": None,
            "detectable": None,
        }
        floor = sign_test_floor(summ["n"])
        if floor >= alpha:
            needed = pairs_needed(alpha)
            return {
                **out,
                "verdict": "inconclusive",
                "needed": needed,
                "test": f"{test}: {summ['n']} pairs cannot reach p < {alpha:g} (needs {needed})",
            }
        above = sum(r > 1.0 for r in ratios)
        below = sum(r < 1.0 for r in ratios)
        n_sign = above + below
        p = 1.0 if n_sign == 0 else min(1.0, 2.0 * binom_half_cdf(n_sign, min(above, below)))
        out["p"] = p
        out["detectable"] = detectable(
            detectable_shift(base, new, higher_is_better=higher_is_better, alpha=alpha, paired=True)
        )
    else:
        b, nw = clean(base), clean(new)
        mb, mn = median(b), median(nw)
        change = (mn - mb) / abs(mb) if mb is not None and mn is not None and mb != 0 else None
        out = {
            "change": change,
            "p": None,
            "ci95": None,
            "coverage": None,
            "alpha": alpha,
            "needed": None,
            "detectable": None,
        }
        if len(b) < 2 or len(nw) < 2 or change is None:
            why = "fewer than 2 samples on a side" if len(b) < 2 or len(nw) < 2 else "zero base median"
            needed = samples_needed(alpha) if len(b) < 2 or len(nw) < 2 else None
            return {**out, "verdict": "inconclusive", "needed": needed, "test": f"none ({why})"}
        p, method = _mann_whitney(b, nw)
        shift = shift_ci(b, nw)
        if shift is not None:
            out["ci95"], out["coverage"] = shift
        out["p"] = p
        test = f"mann-whitney U ({method})"
        floor = mann_whitney_floor(len(b), len(nw))
        if floor >= alpha:
            needed = samples_needed(alpha)
            return {
                **out,
                "verdict": "inconclusive",
                "needed": needed,
                "test": f"{test}: {len(b)} vs {len(nw)} cannot reach p < {alpha:g} "
                f"(floor {floor:.3g}; needs {needed} a side)",
            }
        out["detectable"] = detectable(detectable_shift(b, nw, higher_is_better=higher_is_better, alpha=alpha))
    direction = _direction(change, threshold, higher_is_better)
    if direction is not None and p < alpha:
        verdict = "regression" if direction == "worse" else "improved"
    else:
        verdict = "within noise"
    return {**out, "verdict": verdict, "test": test}
