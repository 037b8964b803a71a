"""Descriptive statistics and intervals: medians, spreads, order-statistic, Wilson and Moses intervals.

Why this module exists: on shared machines two runs of the same code differ by tens of percent on
a throughput point, and machines of one "kind" differ several-fold (docs/statistics.md has the
measurements), so one sample per side says nothing: the suite summarises repeats by their median
and attaches a distribution-free interval (order statistics, binomial(n, 1/2); Moses' interval for
a shift) whose real coverage it states. EAGLE acceptance is different: it comes as counts (drafts,
accepted per position), which support binomial-type (Wilson) intervals instead of repeats. The
tests and the verdict built on these are in eagle_fix.core.significance.

Implementation: quantiles from scipy.stats (a base dependency). The exact null distribution of
Mann-Whitney's U as integer counts (which Moses' interval and the critical U need, and scipy does not
expose) is computed here from the Gaussian-binomial generating function of U; the tests check it
against scipy.stats.mannwhitneyu's exact p-values.

Everything takes plain lists of numbers; None and non-finite values (a failed repeat) are ignored.
"""

from __future__ import annotations

import functools
import math

__all__ = [
    "acceptance_interval",
    "binom_half_cdf",
    "check_length",
    "clean",
    "cv",
    "drafts_for_halfwidth",
    "gaussian_binomial_counts",
    "interval_label",
    "median",
    "median_ci",
    "median_ci_coverage",
    "paired_ratios",
    "ratio_summary",
    "robust_cv",
    "shift_ci",
    "wilson",
]

# The exact U distribution up to this size a side; beyond it the normal approximation is accurate
# and the exact one is slow.
EXACT_MAX_N = 50  # per side, no ties (Gaussian-binomial counts: ~m*m*n integer operations)


# ----------------------------------------------------------------------------- helpers


def clean(xs) -> list[float]:
    """Finite real numbers only: a failed repeat (None/NaN/inf) must not move a median."""
    out = []
    for x in xs or ():
        if x is None or isinstance(x, bool):
            continue
        try:
            v = float(x)
        except (TypeError, ValueError):
            continue
        if math.isfinite(v):
            out.append(v)
    return out


@functools.cache
def _z(confidence: float) -> float:
    """Two-sided normal quantile for a confidence level (1.959964 for 0.95). scipy is imported here, not at the
    top: every record reader imports this module, and asv starts one process per benchmark parameter."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2.0))


def binom_half_cdf(n: int, j: int) -> float:
    """P(B <= j) for B ~ Binomial(n, 1/2), exact in integers."""
    if j < 0:
        return 0.0
    if j >= n:
        return 1.0
    return sum(math.comb(n, i) for i in range(j + 1)) / 2**n


def _median_sorted(s: list[float]) -> float:
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def _median_ci_rank(n: int, confidence: float) -> tuple[int, float]:
    """(j, coverage): the interval is the j-th smallest .. j-th largest order statistic.

    Coverage of (X_(j), X_(n+1-j)) is P(j <= B <= n-j) = 1 - 2 P(B <= j-1), B ~ Bin(n, 1/2):
    the number of samples below the true median is binomial whatever the distribution.
    The largest j whose coverage is still >= confidence gives the narrowest such interval;
    when even j = 1 (min, max) falls short, j = 1 is returned with its real coverage.
    """
    _z(confidence)  # validates
    j = 1
    while j + 1 <= (n + 1) // 2 and 1.0 - 2.0 * binom_half_cdf(n, j) >= confidence:
        j += 1
    return j, 1.0 - 2.0 * binom_half_cdf(n, j - 1)


# ----------------------------------------------------------------------------- medians


def median(xs: list[float]) -> float | None:
    """Median of the finite values; None for none. The median, not the mean: one slow repeat
    (a page-cache miss, a noisy neighbour) must not move the summary."""
    s = sorted(clean(xs))
    return _median_sorted(s) if s else None


def cv(xs: list[float]) -> float | None:
    """Coefficient of variation (population sd over mean) of the finite values; None below 2."""
    s = clean(xs)
    if len(s) < 2:
        return None
    mean = math.fsum(s) / len(s)
    return math.sqrt(math.fsum((x - mean) ** 2 for x in s) / len(s)) / mean if mean else None


def robust_cv(xs: list[float]) -> float | None:
    """1.4826 x the median absolute deviation over the median: the CV a normal sample would show,
    blind to the seconds-long bursts a shared machine has now and then."""
    s = sorted(clean(xs))
    if len(s) < 2:
        return None
    med = _median_sorted(s)
    return 1.4826 * _median_sorted(sorted(abs(x - med) for x in s)) / med if med else None


def median_ci(xs: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free interval of the median from order statistics (binomial(n, 1/2)).

    The narrowest symmetric pair of order statistics with coverage >= confidence; when n is too
    small for that (n = 5 reaches at most 93.75%) it is (min, max), whose real coverage
    median_ci_coverage(n) reports. None for fewer than 2 values. No distributional assumption:
    benchmark timings are skewed and heavy-tailed, so mean +- t*sd intervals would lie.
    """
    s = sorted(clean(xs))
    n = len(s)
    if n < 2:
        return None
    j, _ = _median_ci_rank(n, confidence)
    return (s[j - 1], s[n - j])


def median_ci_coverage(n: int, confidence: float = 0.95) -> float:
    """Actual coverage of the interval median_ci returns for n values (0.0 when n < 2: no interval).

    Can exceed `confidence` (order statistics are discrete) or fall short of it (too few values).
    """
    if n < 2:
        return 0.0
    return _median_ci_rank(n, confidence)[1]


# ----------------------------------------------------------------------------- proportions


def _wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson score interval for an observed proportion p over n units (p may come from a
    non-integer success count)."""
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = z / denom * math.sqrt(max(p * (1.0 - p), 0.0) / n + z2 / (4.0 * n * n))
    lo = 0.0 if p <= 0.0 else max(0.0, centre - half)  # exact ends, not 1e-17 off
    hi = 1.0 if p >= 1.0 else min(1.0, centre + half)
    return lo, hi


def wilson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval for successes/n; None for n = 0.

    Wilson, not Wald: it stays inside [0, 1] and keeps a non-zero width at 0/n and n/n, which is
    exactly where acceptance counters live (position 1 near 1.0, deep positions near 0).
    """
    if n == 0:
        return None
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    return _wilson_bounds(successes / n, n, _z(confidence))


def wilson_rate(rate: float, n: float, confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of an observed rate over n units, n possibly fractional: the effective units of
    a sample whose units are not independent (n divided by its design effect). None for n <= 0."""
    return _wilson_bounds(rate, n, _z(confidence)) if n > 0 else None


def acceptance_interval(num_drafts: int, accepted_per_pos: list[int], confidence: float = 0.95) -> dict | None:
    """EAGLE acceptance from vLLM's counters (num_drafts, num_accepted_tokens_per_pos), with intervals.

    acceptance_length = 1 + sum(accepted) / drafts (the bonus token plus the accepted ones).
    Per position i: Wilson on accepted_i of drafts (each draft proposes position i once).
    Mean length: the k tokens of one draft are not independent (position 2 is only accepted after
    position 1), so the *draft* is the unit: p = accepted / (k * drafts) with n = drafts in a
    Wilson score interval, mapped back as 1 + k * p. This is valid (conservative) because a
    per-draft count X in [0, k] with mean mu has Var(X) <= mu (k - mu) (Bhatia-Davis), i.e.
    Var(X/k) <= p (1 - p), the Bernoulli variance Wilson assumes. Like Wilson, it keeps a
    non-zero width when every draft was fully accepted. None when drafts == 0.
    """
    if num_drafts == 0:
        return None
    k = len(accepted_per_pos)
    if num_drafts < 0 or k == 0:
        raise ValueError(f"need num_drafts > 0 and at least one position, got {num_drafts}, {accepted_per_pos!r}")
    for a in accepted_per_pos:
        if a < 0 or a > num_drafts:
            raise ValueError(f"accepted count {a} outside [0, {num_drafts}]")
    z = _z(confidence)
    total = sum(accepted_per_pos)
    p = total / (k * num_drafts)
    lo, hi = _wilson_bounds(p, num_drafts, z)
    per_ci = [list(_wilson_bounds(a / num_drafts, num_drafts, z)) for a in accepted_per_pos]
    return {
        "acceptance_length": 1.0 + total / num_drafts,
        "ci95": [1.0 + k * lo, 1.0 + k * hi],
        "per_position": [a / num_drafts for a in accepted_per_pos],
        "per_position_ci95": per_ci,
        "method": "Wilson score per position; draft-level Wilson (Bhatia-Davis bound) for the mean length",
    }


def check_length(acceptance_length: float, k: int) -> float:
    """p = (L - 1) / k, validated to [0, 1]."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    p = (acceptance_length - 1.0) / k
    if not -1e-12 <= p <= 1.0 + 1e-12:
        raise ValueError(f"acceptance length {acceptance_length} outside [1, {1 + k}] for k={k}")
    return min(1.0, max(0.0, p))


def drafts_for_halfwidth(halfwidth: float, acceptance_length: float, k: int, confidence: float = 0.95) -> int:
    """Fewest drafts for which acceptance_interval's half-width (the larger of the two sides,
    in acceptance-length units) is <= halfwidth at that acceptance length. Sizes a run.

    Searches n upward (doubling, then bisection: the score interval at a fixed observed
    proportion is nested in n, so the half-width only shrinks as n grows).
    """
    if halfwidth <= 0:
        raise ValueError(f"halfwidth must be > 0, got {halfwidth}")
    p = check_length(acceptance_length, k)
    z = _z(confidence)

    def hw(n: int) -> float:
        lo, hi = _wilson_bounds(p, n, z)
        return k * max(p - lo, hi - p)

    hi_n = 1
    while hw(hi_n) > halfwidth:
        hi_n *= 2
    lo_n = hi_n // 2  # hw(lo_n) > halfwidth, or lo_n == 0
    while hi_n - lo_n > 1:
        mid = (lo_n + hi_n) // 2
        if hw(mid) <= halfwidth:
            hi_n = mid
        else:
            lo_n = mid
    return hi_n


# ----------------------------------------------------------------------------- Mann-Whitney's U under no shift


def gaussian_binomial_counts(m: int, n: int) -> list[int]:
    """Number of arrangements with each U = 0..m*n for sizes m, n without ties: the
    coefficients of the Gaussian binomial [m+n choose m]_q = prod_i (1 - q^(n+i)) / (1 - q^i)."""
    poly = [1]
    for i in range(1, m + 1):
        # multiply by (1 - q^(n+i))
        shift = n + i
        poly = poly + [0] * shift
        for u in range(len(poly) - 1, shift - 1, -1):
            poly[u] -= poly[u - shift]
        # divide by (1 - q^i): b[u] = a[u] + b[u - i]
        for u in range(i, len(poly)):
            poly[u] += poly[u - i]
        # the quotient is a polynomial of degree i*n; drop the zero tail
        del poly[i * n + 1 :]
    return poly


# ----------------------------------------------------------------------------- paired rounds and shifts


def paired_ratios(base: list[float], new: list[float]) -> list[float]:
    """new_i / base_i for the pairs (rounds of an A/B) where both are positive finite numbers.

    Ratios of back-to-back pairs cancel machine drift that falls on both sides of a round.
    """
    if len(base) != len(new):
        raise ValueError(f"paired samples differ in length: {len(base)} vs {len(new)}")
    out = []
    for b, n in zip(base, new):
        cb, cn = clean([b]), clean([n])
        if cb and cn and cb[0] > 0 and cn[0] > 0:
            out.append(cn[0] / cb[0])
    return out


def ratio_summary(ratios: list[float], confidence: float = 0.95) -> dict:
    """{"n", "median", "ci95": [lo, hi] or None, "coverage"} of ratios, via median_ci.

    coverage is the real coverage of ci95 (below `confidence` with few ratios, e.g. 0.9375 for 5);
    None when there is no interval (n < 2).
    """
    r = clean(ratios)
    ci = median_ci(r, confidence)
    return {
        "n": len(r),
        "median": median(r),
        "ci95": list(ci) if ci is not None else None,
        "coverage": median_ci_coverage(len(r), confidence) if ci is not None else None,
    }


def shift_ci(base: list[float], new: list[float], confidence: float = 0.95) -> tuple[list[float], float] | None:
    """Distribution-free interval of the relative change new vs base, and its coverage.

    Moses' interval (the inversion of Mann-Whitney): order statistics of the m*n pairwise
    ratios new_j / base_i (all values positive), or of the differences divided by |median(base)|
    otherwise, cut at the exact U null distribution (normal approximation for large samples).
    With too few samples for `confidence` it is the full range, with its real coverage.
    """
    m, n = len(base), len(new)
    mb = median(base)
    if m < 2 or n < 2 or mb is None or mb == 0:
        return None
    positive = min(base) > 0 and min(new) > 0
    if positive:
        d = sorted(y / x - 1.0 for x in base for y in new)
    else:
        d = sorted((y - x) / abs(mb) for x in base for y in new)
    mn = m * n
    if max(m, n) <= EXACT_MAX_N:
        counts = gaussian_binomial_counts(min(m, n), max(m, n))
        total = sum(counts)
        tail = (1.0 - confidence) / 2.0 * total
        # [d[c], d[mn-1-c]] covers with probability 1 - 2 P(U <= c): take the largest such c
        # with P(U <= c) <= (1 - confidence)/2; if even c = 0 falls short, the full range.
        c, cdf = -1, 0
        while c + 1 <= (mn - 1) // 2 and cdf + counts[c + 1] <= tail:
            c += 1
            cdf += counts[c]
        if c < 0:
            c, cdf = 0, counts[0]
        return [d[c], d[mn - 1 - c]], 1.0 - 2.0 * cdf / total
    k = math.floor(mn / 2.0 - _z(confidence) * math.sqrt(mn * (m + n + 1) / 12.0))
    k = min(max(k, 1), (mn + 1) // 2)
    return [d[k - 1], d[mn - k]], confidence


# ----------------------------------------------------------------------------- labels


def interval_label(coverage: float | None, confidence: float = 0.95) -> str:
    """How to name an interval: "95% ci" when its real coverage reaches `confidence`, else
    "range, 75% cov" -- with few samples the distribution-free interval is the (min, max) range
    and covers less than asked, and a "95%" heading over it would overstate it."""
    if coverage is None:
        return "no interval"
    if coverage >= confidence - 1e-12:
        return f"{confidence:.0%} ci"
    return f"range, {100.0 * coverage:.4g}% cov"
