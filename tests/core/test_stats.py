"""eagle_fix.core.stats and eagle_fix.core.significance: hand-computed values, brute-force enumerations, and scipy
cross-checks (scipy is a base dependency: they run everywhere)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from eagle_fix.core import acceptance as counts
from eagle_fix.core import significance as sig
from eagle_fix.core import stats as s

Z95 = 1.959963984540054


# ----------------------------------------------------------------------------- medians


def test_median():
    assert s.median([3.0, 1.0, 2.0]) == 2.0
    assert s.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert s.median([]) is None
    assert s.median([None, float("nan")]) is None
    assert s.median([1.0, None, 5.0, float("nan"), 3.0]) == 3.0  # failed repeats are ignored


def test_cv_and_robust_cv_by_hand():
    # mean 5, population sd 2 (the textbook 2,4,4,4,5,5,7,9): CV 0.4
    assert s.cv([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == pytest.approx(0.4, abs=1e-15)
    assert s.cv([3.0, None, 3.0, float("nan")]) == 0.0  # failed repeats are ignored
    assert s.cv([1.0]) is None and s.cv([]) is None
    # median 4.5, absolute deviations 2.5,0.5,0.5,0.5,0.5,0.5,2.5,4.5 -> MAD 0.5
    assert s.robust_cv([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == pytest.approx(1.4826 * 0.5 / 4.5, abs=1e-15)
    # one burst moves the CV, not the robust CV
    calm = [10.0, 10.1, 9.9, 10.0, 10.05, 9.95]
    assert s.robust_cv(calm + [30.0]) == pytest.approx(s.robust_cv(calm + [10.0]), rel=0.5)
    assert s.cv(calm + [30.0]) > 10 * s.cv(calm + [10.0])


def test_median_ci_1_to_10_uses_order_statistics_2_and_9():
    xs = [7.0, 3.0, 10.0, 1.0, 5.0, 9.0, 2.0, 8.0, 4.0, 6.0]
    assert s.median_ci(xs) == (2.0, 9.0)
    # P(2 <= B <= 8), B ~ Bin(10, 1/2) = 1 - 2 * (1 + 10) / 1024
    assert s.median_ci_coverage(10) == pytest.approx(1 - 22 / 1024)
    assert s.median_ci_coverage(10) == pytest.approx(0.978515625)
    # the next pair in (3 and 8) would cover only 1 - 2 * 56 / 1024 = 0.89
    assert s.median_ci(xs, confidence=0.89) == (3.0, 8.0)


def test_median_ci_small_n_falls_back_to_range():
    assert s.median_ci([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0)
    assert s.median_ci_coverage(5) == pytest.approx(0.9375)  # 1 - 2/32 < 0.95
    assert s.median_ci([2.0, 1.0]) == (1.0, 2.0)
    assert s.median_ci_coverage(2) == pytest.approx(0.5)
    assert s.median_ci([1.0]) is None
    assert s.median_ci([]) is None
    assert s.median_ci_coverage(1) == 0.0


def test_median_ci_n20_by_hand():
    # P(B <= 5) for Bin(20, 1/2) = 21700/2^20 = 0.0207 -> pair (6, 15) covers 0.9586;
    # (7, 14) would cover 1 - 2 * 60460/2^20 = 0.885.
    xs = list(range(1, 21))
    assert s.median_ci(xs) == (6, 15)
    assert s.median_ci_coverage(20) == pytest.approx(1 - 2 * 21700 / 2**20)


# ----------------------------------------------------------------------------- Wilson / acceptance


def test_wilson_8_of_10():
    lo, hi = s.wilson(8, 10)
    assert round(lo, 3) == 0.490
    assert round(hi, 3) == 0.943


def test_wilson_edges():
    assert s.wilson(0, 0) is None
    lo, hi = s.wilson(0, 10)
    assert lo == 0.0 and 0.2 < hi < 0.35  # 3.84/13.84 = 0.2775
    assert hi == pytest.approx(Z95**2 / (10 + Z95**2))
    lo, hi = s.wilson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(10 / (10 + Z95**2))
    with pytest.raises(ValueError):
        s.wilson(11, 10)
    lo99, hi99 = s.wilson(8, 10, confidence=0.99)
    assert lo99 < 0.490 and hi99 > 0.943


def test_acceptance_interval_all_accepted_does_not_collapse():
    r = s.acceptance_interval(64, [64, 64, 64])
    assert r["acceptance_length"] == 4.0
    lo, hi = r["ci95"]
    assert hi == 4.0
    assert 3.8 < lo < 4.0
    # Wilson at p = 1, n = 64 drafts: lower = n / (n + z^2); mapped back 1 + 3 * lower
    assert lo == pytest.approx(1 + 3 * 64 / (64 + Z95**2))
    assert r["per_position"] == [1.0, 1.0, 1.0]
    for plo, phi in r["per_position_ci95"]:
        assert phi == 1.0 and plo == pytest.approx(64 / (64 + Z95**2))
    assert "Wilson" in r["method"] and "Bhatia" in r["method"]


def test_acceptance_interval_values():
    r = s.acceptance_interval(100, [80, 50, 20])
    assert r["acceptance_length"] == pytest.approx(2.5)
    assert r["per_position"] == pytest.approx([0.8, 0.5, 0.2])
    # per position: plain Wilson on accepted_i of drafts
    for (plo, phi), a in zip(r["per_position_ci95"], [80, 50, 20]):
        assert (plo, phi) == pytest.approx(s.wilson(a, 100))
    # mean length: Wilson on p = 150/300 with n = 100 drafts (not 300 tokens) -> 1 + 3 * (lo, hi)
    lo, hi = s.wilson(50, 100)
    assert r["ci95"] == pytest.approx([1 + 3 * lo, 1 + 3 * hi])
    # with the draft as the unit the interval is wider than a (wrong) per-token one
    tlo, thi = s.wilson(150, 300)
    assert r["ci95"][1] - r["ci95"][0] > 3 * (thi - tlo)
    assert s.acceptance_interval(0, [0, 0, 0]) is None
    with pytest.raises(ValueError):
        s.acceptance_interval(10, [11, 0])


@pytest.mark.parametrize("halfwidth", [0.3, 0.1, 0.05])
@pytest.mark.parametrize("length", [1.0, 3.0, 4.0])
def test_drafts_for_halfwidth_matches_acceptance_interval(halfwidth, length):
    k = 3
    n = s.drafts_for_halfwidth(halfwidth, length, k)
    accepted = {1.0: [0, 0, 0], 3.0: [1, 1, 0], 4.0: [1, 1, 1]}[length]

    def half(d):
        r = s.acceptance_interval(d, [a * d for a in accepted])
        assert r["acceptance_length"] == pytest.approx(length)
        lo, hi = r["ci95"]
        return max(length - lo, hi - length)

    assert half(n) <= halfwidth + 1e-12
    if n > 1:
        assert half(n - 1) > halfwidth  # and it is the smallest such n


def test_drafts_for_halfwidth_by_hand():
    # L = 4 (p = 1): half-width = 3 * z^2 / (n + z^2) <= 0.1  <=>  n >= 29 z^2 = 111.4
    assert s.drafts_for_halfwidth(0.1, 4.0, 3) == math.ceil(29 * Z95**2)
    with pytest.raises(ValueError):
        s.drafts_for_halfwidth(0.1, 4.5, 3)


# ----------------------------------------------------------------------------- Mann-Whitney


def _brute_mw_p(a, b):
    """Two-sided exact permutation p of the rank sum (mid-ranks), by enumerating all splits."""
    pooled = a + b
    srt = sorted(pooled)
    rank = {}
    for v in set(pooled):
        first = srt.index(v) + 1
        last = len(srt) - srt[::-1].index(v)
        rank[v] = (first + last) / 2
    m = len(a)
    centre = m * (len(pooled) + 1) / 2
    obs = abs(sum(rank[v] for v in a) - centre)
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), m):
        total += 1
        if abs(sum(rank[pooled[i]] for i in idx) - centre) >= obs - 1e-9:
            hits += 1
    return hits / total


def test_mann_whitney_exact_5v5_separated():
    a = [1.0, 2.0, 3.0, 4.0, 5.0]
    b = [6.0, 7.0, 8.0, 9.0, 10.0]
    assert sig.mann_whitney_p(a, b) == pytest.approx(2 / 252)
    assert sig.mann_whitney_p(b, a) == pytest.approx(2 / 252)
    assert sig.mann_whitney_p(a[:3], b[:3]) == pytest.approx(0.1)  # 2/20: 3v3 can never reach 0.01
    assert sig.mann_whitney_p(a[:4], b[:4]) == pytest.approx(2 / 70)


def test_mann_whitney_small_cases():
    assert sig.mann_whitney_p([1.0], [2.0, 3.0]) is None
    assert sig.mann_whitney_p([1.0, 2.0], []) is None
    assert sig.mann_whitney_p([1.0, 1.0, 1.0], [1.0, 1.0]) == 1.0
    # one swap at the boundary: U = 1 -> P(U <= 1) = 2/252, two-sided 4/252
    assert sig.mann_whitney_p([1, 2, 3, 4, 6], [5, 7, 8, 9, 10]) == pytest.approx(4 / 252)


def test_mann_whitney_matches_brute_force():
    rng = random.Random(7)
    for _ in range(25):
        m, n = rng.randint(2, 6), rng.randint(2, 6)
        a = [rng.random() for _ in range(m)]
        b = [rng.random() + rng.choice([0, 0.3]) for _ in range(n)]
        assert sig.mann_whitney_p(a, b) == pytest.approx(_brute_mw_p(a, b))
    for _ in range(25):  # ties: the exact conditional distribution
        m, n = rng.randint(2, 6), rng.randint(2, 6)
        a = [rng.randint(0, 3) for _ in range(m)]
        b = [rng.randint(1, 4) for _ in range(n)]
        if len(set(a + b)) == 1:
            continue
        assert sig.mann_whitney_p(a, b) == pytest.approx(_brute_mw_p(a, b))


def test_mann_whitney_large_samples_normal_approx():
    rng = random.Random(3)
    a = [rng.gauss(0, 1) for _ in range(60)]
    b = [rng.gauss(0.8, 1) for _ in range(60)]
    p = sig.mann_whitney_p(a, b)
    assert p < 1e-3
    same = sig.mann_whitney_p(a, [x + 1e-9 for x in a])
    assert same > 0.5


# ----------------------------------------------------------------------------- count tests


def test_two_proportion_by_hand():
    # 45/100 vs 30/100: pooled 0.375, se = sqrt(0.375 * 0.625 * (1/100 + 1/100)) = 0.0684653,
    # z = 0.15 / 0.0684653 = 2.19089, two-sided p = 2 * (1 - Phi(2.19089)) = 0.028460
    assert counts.two_proportion_p(45, 100, 30, 100) == pytest.approx(0.028460, abs=2e-6)
    assert counts.two_proportion_p(30, 100, 45, 100) == pytest.approx(0.028460, abs=2e-6)
    # unequal n: 20/50 vs 50/200: pooled 0.28, se = sqrt(.28*.72*(1/50+1/200)) = 0.0709930,
    # z = 0.15/0.0709930 = 2.11289, p = 0.034607
    assert counts.two_proportion_p(20, 50, 50, 200) == pytest.approx(0.034607, abs=2e-5)


def test_two_proportion_edges():
    assert counts.two_proportion_p(0, 10, 0, 20) == 1.0
    assert counts.two_proportion_p(10, 10, 20, 20) == 1.0
    assert counts.two_proportion_p(5, 10, 10, 20) == 1.0
    assert counts.two_proportion_p(1, 0, 1, 2) is None
    assert counts.two_proportion_p(0, 10, 10, 10) < 1e-4
    # float successes are allowed
    assert counts.two_proportion_p(33.5, 100, 20.25, 100) == pytest.approx(_z_test(33.5, 100, 20.25, 100))
    with pytest.raises(ValueError):
        counts.two_proportion_p(11, 10, 1, 10)


def _z_test(x1, n1, x2, n2):
    p = (x1 + x2) / (n1 + n2)
    z = (x1 / n1 - x2 / n2) / math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return math.erfc(abs(z) / math.sqrt(2))


def test_acceptance_change_p_uses_draft_as_unit_without_rounding():
    k = 3
    # 250 of 300 drafts' tokens vs 200: x = accepted / k as floats, n = drafts
    p = counts.acceptance_change_p(100, 250, 100, 200, k)
    assert p == pytest.approx(_z_test(250 / 3, 100, 200 / 3, 100))
    assert p != pytest.approx(_z_test(83, 100, 67, 100))  # not rounded
    assert p != pytest.approx(_z_test(250, 300, 200, 300))  # not tokens as the unit
    assert counts.acceptance_change_p(100, [90, 80, 80], 100, [80, 70, 50], k) == pytest.approx(p)
    assert counts.acceptance_change_p(0, 0, 100, 200, k) is None
    assert counts.acceptance_change_p(64, [64, 64, 64], 32, [32, 32, 32], k) == 1.0


def test_drafts_to_detect():
    # by hand: p1 = 0.5, p2 = 0.4333, pbar = 0.4667; z_.995 = 2.5758, z_.8 = 0.8416:
    # (2.5758 * 0.70553 + 0.8416 * 0.70396)^2 / 0.06667^2 = 1306.6 -> 1307
    n = counts.drafts_to_detect(-0.2, 2.5, 3)
    assert n == 1307
    assert counts.drafts_to_detect(0.2, 2.5, 3) == 1307  # symmetric around p = 1/2
    # at that size the expected counts are significant at alpha; at a quarter of it they are not
    acc1, acc2 = 1.5, 1.3  # accepted per draft at L = 2.5 and 2.3
    assert counts.acceptance_change_p(n, acc1 * n, n, acc2 * n, 3) < 0.01
    q = n // 4
    assert counts.acceptance_change_p(q, acc1 * q, q, acc2 * q, 3) > 0.01
    # smaller changes need more drafts; a looser alpha fewer
    assert counts.drafts_to_detect(-0.1, 2.5, 3) > n
    assert counts.drafts_to_detect(-0.2, 2.5, 3, alpha=0.05) < n
    with pytest.raises(ValueError):
        counts.drafts_to_detect(0.5, 3.8, 3)  # beyond 1 + k
    with pytest.raises(ValueError):
        counts.drafts_to_detect(0.0, 2.5, 3)


# ----------------------------------------------------------------------------- ratios / judge


def test_paired_ratios_and_summary():
    assert s.paired_ratios([10.0, 0.0, 5.0, None, 4.0], [5.0, 3.0, 5.0, 2.0, -1.0]) == [0.5, 1.0]
    with pytest.raises(ValueError):
        s.paired_ratios([1.0], [1.0, 2.0])
    r = s.ratio_summary([0.9, 0.8, 1.0, 0.85, 0.95, 0.7, 0.75, 0.88])
    assert r["n"] == 8
    assert r["median"] == pytest.approx((0.85 + 0.88) / 2)
    assert r["ci95"] == [0.7, 1.0]  # n = 8: only (min, max) reaches 0.95 ...
    assert r["coverage"] == pytest.approx(1 - 2 / 256)  # ... and it covers 0.992
    assert s.ratio_summary([1.0]) == {"n": 1, "median": 1.0, "ci95": None, "coverage": None}


BASE5 = [100.0, 101.0, 99.0, 100.5, 99.5]


def test_judge_identical_is_within_noise():
    for hib in (True, False):
        r = sig.judge(BASE5, list(BASE5), higher_is_better=hib, threshold=0.05)
        assert r["verdict"] == "within noise"
        assert r["change"] == 0.0
        assert r["p"] == pytest.approx(1.0)
    r = sig.judge([7.0] * 5, [7.0] * 5, higher_is_better=True, threshold=0.05)
    assert r["verdict"] == "within noise" and r["p"] == 1.0


def test_judge_separated_5v5():
    drop = [x * 0.9 for x in BASE5]
    r = sig.judge(BASE5, drop, higher_is_better=True, threshold=0.05)  # throughput dropped 10%
    assert r["verdict"] == "regression"
    assert r["change"] == pytest.approx(-0.1)
    assert r["p"] == pytest.approx(2 / 252)
    assert "mann-whitney" in r["test"].lower()
    lo, hi = r["ci95"]
    assert lo <= -0.1 <= hi < 0
    r = sig.judge(BASE5, drop, higher_is_better=False, threshold=0.05)  # time dropped 10%
    assert r["verdict"] == "improved"
    rise = [x * 1.2 for x in BASE5]
    assert sig.judge(BASE5, rise, higher_is_better=False, threshold=0.05)["verdict"] == "regression"
    assert sig.judge(BASE5, rise, higher_is_better=True, threshold=0.05)["verdict"] == "improved"
    # significant, but smaller than the threshold: not a regression
    small = [x * 0.97 for x in BASE5]
    r = sig.judge(BASE5, small, higher_is_better=True, threshold=0.05)
    assert r["p"] < 0.01 and abs(r["change"]) < 0.05
    assert r["verdict"] == "within noise"


def test_judge_big_but_noisy_change_is_within_noise():
    base = [100.0, 60.0, 140.0, 90.0, 110.0]
    new = [70.0, 130.0, 50.0, 120.0, 80.0]
    r = sig.judge(base, new, higher_is_better=True, threshold=0.05)
    assert r["change"] == pytest.approx(-0.2)
    assert r["p"] > 0.1
    assert r["verdict"] == "within noise"
    lo, hi = r["ci95"]
    assert lo < 0 < hi


def test_judge_too_few_samples_is_inconclusive():
    r = sig.judge([100.0], [50.0], higher_is_better=True, threshold=0.05)
    assert r["verdict"] == "inconclusive"
    assert r["p"] is None and r["ci95"] is None
    assert r["change"] == pytest.approx(-0.5)
    assert sig.judge([], [1.0, 2.0], higher_is_better=True, threshold=0.05)["verdict"] == "inconclusive"
    assert sig.judge([1.0, None], [1.0, 2.0], higher_is_better=True, threshold=0.05)["verdict"] == "inconclusive"


def test_judge_below_the_test_floor_is_inconclusive_and_names_the_size():
    """3 vs 3 used to fall back to non-overlap of the medians' intervals, so fully separated
    samples were a "regression" although Mann-Whitney cannot go below p = 0.1 there (2 vs 2:
    1/3). Below the size at which the test can reach alpha nothing is claimed."""
    base, new = [100.0, 101.0, 99.0], [90.0, 91.0, 89.0]
    r = sig.judge(base, new, higher_is_better=True, threshold=0.05)
    assert r["verdict"] == "inconclusive"
    assert r["p"] == pytest.approx(0.1)  # reported, but 3v3 can never go below 0.1
    assert r["needed"] == 5 and "cannot reach p < 0.01" in r["test"] and r["detectable"] is None
    assert r["coverage"] == pytest.approx(0.9)  # the full range of the 9 pairwise ratios
    overlapping = [90.0, 91.0, 100.5]
    assert sig.judge(base, overlapping, higher_is_better=True, threshold=0.05)["verdict"] == "inconclusive"
    r = sig.judge([100.0, 101.0], [79.0, 79.8], higher_is_better=True, threshold=0.05)
    assert (r["verdict"], r["p"], r["needed"]) == ("inconclusive", pytest.approx(1 / 3), 5)
    # 4 vs 4 reaches 2/70 only: a looser alpha makes it enough
    r = sig.judge(
        [100.0, 101.0, 99.0, 100.5], [90.0, 91.0, 89.0, 90.5], higher_is_better=True, threshold=0.05, alpha=0.05
    )
    assert (r["verdict"], r["needed"]) == ("regression", None)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_small_samples_never_say_regression(n):
    rng = random.Random(n)
    for _ in range(200):
        base = [rng.lognormvariate(0, 0.2) for _ in range(n)]
        new = [rng.lognormvariate(rng.choice([0, -0.5, -2]), 0.2) for _ in range(n)]
        assert sig.judge(base, new, higher_is_better=True, threshold=0.05)["verdict"] == "inconclusive"
        assert sig.judge(base, new, higher_is_better=True, threshold=0.05, paired=True)["verdict"] == "inconclusive"


def test_floors_and_sizes_needed():
    assert sig.mann_whitney_floor(5, 5) == pytest.approx(2 / 252)
    assert sig.mann_whitney_floor(2, 2) == pytest.approx(1 / 3)
    assert sig.mann_whitney_floor(3, 3) == pytest.approx(0.1)
    assert sig.mann_whitney_floor(0, 5) == 1.0
    assert sig.sign_test_floor(8) == pytest.approx(2 / 256) and sig.sign_test_floor(5) == pytest.approx(1 / 16)
    assert (sig.samples_needed(0.01), sig.samples_needed(0.05)) == (5, 4)
    assert (sig.pairs_needed(0.01), sig.pairs_needed(0.05)) == (8, 6)
    for alpha in (0.001, 0.01, 0.05, 0.1):
        n = sig.samples_needed(alpha)
        assert sig.mann_whitney_floor(n, n) < alpha <= sig.mann_whitney_floor(n - 1, n - 1)
        k = sig.pairs_needed(alpha)
        assert sig.sign_test_floor(k) < alpha <= sig.sign_test_floor(k - 1)
    with pytest.raises(ValueError):
        sig.samples_needed(0.0)


def test_interval_label_says_its_real_coverage():
    assert s.interval_label(s.median_ci_coverage(2)) == "range, 50% cov"
    assert s.interval_label(s.median_ci_coverage(3)) == "range, 75% cov"
    assert s.interval_label(s.median_ci_coverage(5)) == "range, 93.75% cov"
    assert s.interval_label(s.median_ci_coverage(8)) == "95% ci"  # (min, max) of 8 covers 99.2%
    assert s.interval_label(None) == "no interval"


def _worse(values, s_, higher_is_better):
    return [v * (1 - s_) if higher_is_better else v * (1 + s_) for v in values]


@pytest.mark.parametrize("higher_is_better", [True, False])
@pytest.mark.parametrize("m, n, alpha", [(5, 5, 0.01), (6, 4, 0.05), (7, 9, 0.01), (12, 12, 0.001)])
def test_detectable_shift_is_the_smallest_shift_the_test_calls(higher_is_better, m, n, alpha):
    """Brute force: the samples shifted just past the answer are significant, just short are not."""
    rng = random.Random(m * 100 + n)
    base = [rng.lognormvariate(3, 0.15) for _ in range(m)]
    new = [rng.lognormvariate(3.05, 0.15) for _ in range(n)]
    d = sig.detectable_shift(base, new, higher_is_better=higher_is_better, alpha=alpha)
    assert d is not None and d > 0
    moved = [v * s.median(base) / s.median(new) for v in new]
    assert sig.mann_whitney_p(base, _worse(moved, d * (1 + 1e-9) + 1e-12, higher_is_better)) < alpha
    assert sig.mann_whitney_p(base, _worse(moved, d * (1 - 1e-6), higher_is_better)) >= alpha
    # the verdict at that shift (beyond the threshold) is a regression, and the judge reports it
    shifted = _worse(moved, d * 1.001, higher_is_better)
    r = sig.judge(base, shifted, higher_is_better=higher_is_better, threshold=min(0.01, d / 2), alpha=alpha)
    assert r["verdict"] == "regression"
    assert r["detectable"] == pytest.approx(max(d, min(0.01, d / 2)), rel=1e-6)


def test_detectable_shift_5v5_is_one_minus_min_over_max():
    """5 vs 5 at 0.01 needs full separation: the smallest throughput drop caught is 1 - min/max."""
    base = [45.0, 51.3, 51.6, 53.6, 56.1]
    assert sig.detectable_shift(base, base, higher_is_better=True, alpha=0.01) == pytest.approx(1 - 45.0 / 56.1)
    assert sig.detectable_shift(base, base, higher_is_better=False, alpha=0.01) == pytest.approx(56.1 / 45.0 - 1)
    assert sig.detectable_shift(base[:3], base[:3], higher_is_better=True, alpha=0.01) is None
    r = sig.judge(base, base, higher_is_better=True, threshold=0.05)
    assert r["detectable"] == pytest.approx(1 - 45.0 / 56.1)
    tight = [100.0, 100.1, 99.9, 100.05, 99.95]
    assert sig.judge(tight, tight, higher_is_better=True, threshold=0.05)["detectable"] == 0.05  # the threshold binds


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_paired_detectable_shift_by_brute_force(higher_is_better):
    rng = random.Random(5)
    base = [rng.uniform(9, 11) for _ in range(10)]
    new = [b * rng.uniform(0.97, 1.05) for b in base]
    alpha = 0.05
    d = sig.detectable_shift(base, new, higher_is_better=higher_is_better, alpha=alpha, paired=True)
    ratios = s.paired_ratios(base, new)
    med = s.median(ratios)

    def sign_p(shift):
        moved = _worse([r / med for r in ratios], shift, higher_is_better)
        above, below = sum(r > 1 for r in moved), sum(r < 1 for r in moved)
        return 2 * sum(math.comb(above + below, i) for i in range(min(above, below) + 1)) / 2 ** (above + below)

    assert sign_p(d + 1e-9) < alpha <= sign_p(d - 1e-6)
    assert sig.detectable_shift(base[:5], new[:5], higher_is_better=True, alpha=alpha, paired=True) is None


def test_acceptance_detectable_drop_by_brute_force():
    drop = counts.acceptance_detectable_drop(128, 384, 128, 3, 0.01)  # 4.0 over 128 drafts (the 8K profile)
    assert 0 < drop < 0.5
    x1 = 384 / 3
    assert counts.two_proportion_p(x1, 128, (384 - 3 * 128 * drop / 3 - 1e-6) / 3, 128) < 0.01
    assert counts.two_proportion_p(x1, 128, (384 - 3 * 128 * drop / 3 * 0.999) / 3, 128) >= 0.01
    assert counts.acceptance_detectable_drop(1, 1, 1, 3, 0.01) is None  # one draft a side: nothing is significant


def test_judge_paired():
    base = [100.0, 120.0, 90.0, 110.0, 95.0, 105.0, 130.0, 80.0]  # drifting machine
    factors = [0.85, 0.86, 0.84, 0.85, 0.855, 0.845, 0.86, 0.84]
    new = [b * f for b, f in zip(base, factors)]
    r = sig.judge(base, new, higher_is_better=True, threshold=0.05, paired=True)
    assert r["verdict"] == "regression"
    assert r["change"] == pytest.approx(0.85 - 1, abs=0.006)
    assert r["coverage"] == pytest.approx(1 - 2 / 256)
    assert r["ci95"] == pytest.approx([0.84 - 1, 0.86 - 1])
    assert r["p"] == pytest.approx(2 / 256)  # sign test: all 8 below 1
    # the same numbers as times: they got faster
    assert sig.judge(base, new, higher_is_better=False, threshold=0.05, paired=True)["verdict"] == "improved"
    # times that got slower by ~15%
    slower = [b / f for b, f in zip(base, factors)]
    assert sig.judge(base, slower, higher_is_better=False, threshold=0.05, paired=True)["verdict"] == "regression"
    # the interval straddles 1: within noise
    mixed = [b * f for b, f in zip(base, [0.9, 1.1, 0.95, 1.05, 1.0, 0.97, 1.03, 0.99])]
    assert sig.judge(base, mixed, higher_is_better=True, threshold=0.05, paired=True)["verdict"] == "within noise"
    # too few pairs
    r = sig.judge(base[:2], new[:2], higher_is_better=True, threshold=0.05, paired=True)
    assert r["verdict"] == "inconclusive"


def test_judge_paired_small_band_is_within_noise():
    base = [100.0] * 8
    new = [97.0, 97.5, 96.5, 97.2, 96.8, 97.1, 96.9, 97.3]  # a real 3% drop, inside a 5% band
    r = sig.judge(base, new, higher_is_better=True, threshold=0.05, paired=True)
    assert r["verdict"] == "within noise"


# ----------------------------------------------------------------------------- scipy cross-checks


def test_cross_check_against_scipy():
    st = pytest.importorskip("scipy.stats")
    # normal quantile and Wilson
    assert s._z(0.95) == pytest.approx(st.norm.ppf(0.975), rel=1e-12)
    assert s._z(0.99) == pytest.approx(st.norm.ppf(0.995), rel=1e-12)
    for x, n in [(8, 10), (0, 7), (7, 7), (33, 64), (1, 3)]:
        ci = st.binomtest(x, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert s.wilson(x, n) == pytest.approx((ci.low, ci.high), abs=1e-9)
    # median interval coverage from the binomial
    for n in range(2, 40):
        sorted_xs = list(range(n))
        lo, _hi = s.median_ci(sorted_xs)
        j = int(lo) + 1
        assert s.median_ci_coverage(n) == pytest.approx(1 - 2 * st.binom.cdf(j - 1, n, 0.5))
    # Mann-Whitney: exact without ties, asymptotic for large samples
    rng = random.Random(11)
    for _ in range(30):
        m, n = rng.randint(2, 12), rng.randint(2, 12)
        a = [rng.random() for _ in range(m)]
        b = [rng.random() + rng.choice([0, 0.4]) for _ in range(n)]
        ref = st.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue
        assert sig.mann_whitney_p(a, b) == pytest.approx(ref, rel=1e-9)
    a = [rng.gauss(0, 1) for _ in range(70)]
    b = [round(rng.gauss(0.3, 1), 1) for _ in range(80)]  # ties too
    ref = st.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic", use_continuity=True).pvalue
    assert sig.mann_whitney_p(a, b) == pytest.approx(ref, rel=1e-9)
    # pooled two-proportion z-test == chi-square on the 2x2 table without continuity correction
    for x1, n1, x2, n2 in [(45, 100, 30, 100), (20, 50, 50, 200), (3, 40, 9, 41)]:
        chi = st.chi2_contingency([[x1, n1 - x1], [x2, n2 - x2]], correction=False)
        assert counts.two_proportion_p(x1, n1, x2, n2) == pytest.approx(chi.pvalue, rel=1e-9)


def test_judge_zero_base_median_is_inconclusive_without_a_size():
    r = sig.judge([0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0], higher_is_better=False, threshold=0.05)
    assert (r["verdict"], r["needed"], r["detectable"]) == ("inconclusive", None, None)
    from eagle_fix.gate import verdict

    v = verdict.noisy([0.0] * 5, [1.0, 2.0, 3.0, 4.0, 5.0], metric="tpot_ms")
    assert (v.verdict, v.power) == ("inconclusive", "could detect nothing")


# ----------------------------------------------------------------------------- a loop's acceptance
def test_distinct_ngrams_tells_a_loop_from_text():
    assert counts.distinct_ngrams([1, 2, 3, 4] * 64) == pytest.approx(4 / 253)
    assert counts.distinct_ngrams(list(range(256))) == 1.0


def test_a_drafted_point_whose_output_loops_is_told():
    loop = {"output_token_ids": list(range(40)) * 7, "acceptance_length": 3.43}  # period 40 over 280 tokens
    assert counts.output_diversity(loop) == pytest.approx(40 / 277)
    assert counts.drafts_a_loop(loop)
    varied = {"output_token_ids": list(range(100)) * 2 + list(range(200, 280)), "acceptance_length": 2.5}
    assert counts.output_diversity(varied) > counts.LOOP_DISTINCT_4GRAMS and not counts.drafts_a_loop(varied)
    assert not counts.drafts_a_loop({**loop, "acceptance_length": None})  # a baseline drafts nothing
    assert not counts.drafts_a_loop({**loop, "acceptance_length": float("nan")})  # nor in a table's frame
    assert not counts.drafts_a_loop({**loop, "output_token_ids": [1, 2] * 20})  # too short to tell
    assert not counts.drafts_a_loop({"acceptance_length": 3.0})  # an older record keeps no tokens
