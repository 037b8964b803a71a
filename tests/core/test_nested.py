"""eagle_fix.core.nested: the launch as the unit. On data drawn from the nested model itself (a launch offset
per block, a scatter per round) the estimates find the components, the F bound is scipy's, the launch-level
t-test keeps its level where the sign test over rounds does not, no calibration ever turns it back into a test
over rounds, and the plan buys the rule's power where it is cheapest."""

import dataclasses
import math
import random
import statistics

import pytest

from eagle_fix.core import nested, stats, variance


@pytest.fixture(autouse=True)
def _fewer_pivot_draws(monkeypatch):
    """The pivotal bound's draws cut to 400 here (records use variance.PIVOT_DRAWS): hundreds of pools in seconds."""
    monkeypatch.setattr(variance, "PIVOT_DRAWS", 400)


def simulate(rng, *, blocks, rounds, sigma_l, sigma_r, gamma=0.0, shift=0.0):
    """One A/B run from the model: block b's offset ~ N(start order x gamma, sigma_l), its rounds around it."""
    out = []
    for b in range(blocks):
        base_first = b % 2 == 0
        offset = math.log1p(shift) + (gamma if base_first else -gamma) + rng.gauss(0, sigma_l)
        out.append(nested.Block(b, tuple(offset + rng.gauss(0, sigma_r) for _ in range(rounds)), base_first))
    return out


def test_the_components_come_back_from_the_model():
    rng = random.Random(1)
    trials = [simulate(rng, blocks=4, rounds=32, sigma_l=0.02, sigma_r=0.10, gamma=-0.01) for _ in range(300)]
    c = nested.estimate(trials)
    assert c.sigma_launch == pytest.approx(0.02, rel=0.15)
    assert c.sigma_round == pytest.approx(0.10, rel=0.05)
    assert c.start_order == pytest.approx(-0.01, abs=0.002)
    assert c.sigma_launch_upper >= c.sigma_launch and c.launch == c.sigma_launch_upper
    assert (c.trials, c.blocks, c.rounds) == (300, 1200, 1200 * 32)
    # the intercept and the start order are charged: 2 degrees of freedom of the block means
    assert (c.df_launch, c.df_round, c.rounds_per_block) == (1198, 1200 * 15, 32)


def test_the_upper_bound_is_the_exact_f_bound_of_scipy_or_the_pivotal_one():
    """f_upper = sqrt(block_var / F_0.05 - sigma_R^2 / R) by hand from scipy's F quantile, F's lower-tail
    probability, and the bound the plans use is the larger of it and the generalized pivotal bound."""
    st = pytest.importorskip("scipy.stats")
    rng = random.Random(3)
    c = nested.estimate([simulate(rng, blocks=8, rounds=16, sigma_l=0.01, sigma_r=0.08)])
    share = c.sigma_round**2 / 16
    want = math.sqrt(max(0.0, c.block_var / st.f.ppf(0.05, 6, 56) - share))
    assert (c.df_launch, c.df_round) == (6, 56)
    assert c.f_upper == pytest.approx(want, rel=1e-9)
    assert c.sigma_launch_upper == max(c.f_upper, c.pivotal_upper) and c.pivotal_upper > 0
    assert c.f_stat == pytest.approx(c.block_var / share) and c.f_p_low == pytest.approx(st.f.cdf(c.f_stat, 6, 56))


def test_a_bound_of_zero_only_where_the_data_reject_a_launch_effect_and_then_the_floor():
    """The F bound is 0 exactly when F sits in its own lower 5% tail; the floor is taken only where the pivotal
    bound is 0 too, and the record then says so: plans assume the stated floor, never 0."""
    rng = random.Random(4)
    seen = {True: 0, False: 0}
    for _ in range(200):
        c = nested.estimate([simulate(rng, blocks=8, rounds=16, sigma_l=0.0, sigma_r=0.08)])
        seen[c.upper_is_floor] += 1
        assert (c.f_upper == 0) == (c.f_p_low < 1 - nested.UPPER_CONFIDENCE)
        assert c.upper_is_floor == (c.f_upper == 0 and c.pivotal_upper == 0)
        if c.upper_is_floor:
            assert c.sigma_launch_upper == nested.LAUNCH_SD_FLOOR
        else:
            assert c.sigma_launch_upper > 0
    assert 0 < seen[True] < 0.05 * 200  # under 5% of A/A pools without launch noise


def test_the_upper_bound_covers_the_launch_sd_with_unequal_round_spread():
    """Per-block round sds from 1% to 16% and heavy-tailed rounds (t, 4 df), sigma_L 0.5-1%: the 95% bound covers
    the true launch sd in at least 93% of pools (a small version of results/simulation's coverage)."""
    rng = random.Random(5)
    n, covered = 200, 0
    for i in range(n):
        sigma_l = (0.005, 0.01)[i % 2]
        blocks = []
        for b in range(8):
            sd = math.exp(rng.uniform(math.log(0.01), math.log(0.16)))
            off = rng.gauss(0, sigma_l) + (0.01 if b % 2 == 0 else -0.01)
            rs = tuple(
                off + sd * rng.gauss(0, 1) / math.sqrt(rng.gammavariate(2, 0.5)) / math.sqrt(2) for _ in range(16)
            )
            blocks.append(nested.Block(b, rs, b % 2 == 0))
        c = nested.estimate([blocks])
        covered += sigma_l <= c.sigma_launch_upper
    assert covered / n >= 0.93, covered / n  # (195 of 200 here)


def test_the_abba_swing_between_rounds_is_not_round_noise():
    """What the second measurement of a round inherits shows as an alternating swing that every block mean
    cancels: it must not be counted as the rounds' scatter."""
    swing = [0.05 if r % 2 == 0 else -0.05 for r in range(32)]
    block = nested.Block(0, tuple(swing))
    var, df = nested.pooled_round_variance([block])
    assert var == pytest.approx(0.0) and df == 15


def _rejects_round_level(trial, alpha):
    ratios = [x for b in trial for x in b.log_ratios]
    above, below = sum(x > 0 for x in ratios), sum(x < 0 for x in ratios)
    return 2 * stats.binom_half_cdf(above + below, min(above, below)) < alpha


def test_the_launch_level_test_keeps_its_level_where_rounds_counted_alone_do_not():
    """A calibration of 8 A/A launch pairs pooled with runs of 2 launch pairs: the t-test on their degrees of
    freedom holds its level over fresh calibrations and runs; the sign test over the same rounds does not."""
    rng = random.Random(2)
    n, alpha = 1500, 0.05
    launch = rounds = 0
    for i in range(n):
        if i % 30 == 0:
            cal = nested.estimate([simulate(rng, blocks=8, rounds=32, sigma_l=0.03, sigma_r=0.10, gamma=0.01)])
        trial = simulate(rng, blocks=2, rounds=32, sigma_l=0.03, sigma_r=0.10, gamma=0.01)
        t = nested.launch_test(trial, cal, alpha_look=alpha)
        assert t.df == pytest.approx(1 + cal.df_launch)
        launch += t.p < alpha
        rounds += _rejects_round_level(trial, alpha)
    lo, hi = stats.wilson(launch, n)
    assert lo <= alpha <= hi, launch / n
    assert rounds / n > 3 * alpha  # 64 rounds of 2 launches counted as 64 experiments


@pytest.mark.parametrize(
    "calibration",
    [
        None,
        0.0,
        math.nan,
        nested.Components(sigma_launch=0.0, sigma_round=0.08, start_order=0.0, trials=1, blocks=8, rounds=128),
        {
            "sigma_launch": 0.0,
            "sigma_launch_upper": 0.0,
            "sigma_round": 0.08,
            "start_order": 0.0,
            "trials": 1,
            "blocks": 8,
            "rounds": 128,
        },
        "zero-launch",
    ],
)
def test_no_calibration_turns_the_test_into_a_test_over_rounds(calibration):
    """sigma_L = 0 recorded, NaN, missing, a bare sd, a record without its analysis of variance, or an estimate
    of exactly 0: the variance comes from block means (the run's and the calibration's), never from the rounds'
    scatter. Rounds identical within each launch (no round scatter at all) but launch means apart: a test over
    rounds would see se 0 and p 0; this one sees the launches' spread."""
    if calibration == "zero-launch":
        rng = random.Random(6)
        while True:  # a calibration whose launch sd estimate is exactly 0
            calibration = nested.estimate([simulate(rng, blocks=8, rounds=16, sigma_l=0.0, sigma_r=0.08)])
            if calibration.sigma_launch == 0.0:
                break
    means = [0.03, 0.04, 0.00, 0.01]
    blocks = [nested.Block(i, (m,) * 32, i % 2 == 0) for i, m in enumerate(means)]
    t = nested.launch_test(blocks, calibration, alpha_look=0.01)
    assert "t-test" in t.test and t.se > 0.004 and t.p > 1e-4
    cal_df = getattr(calibration, "df_launch", 0)
    assert t.df == pytest.approx(2 + cal_df)  # 4 launches less the mean and the start order, plus the calibration's
    # one launch and no calibration: no test at all, and the verdict says so
    alone = nested.launch_test(blocks[:1], None, alpha_look=0.01)
    assert alone.p is None and alone.se is None
    assert nested.decide(alone, threshold=0.03, higher_is_better=False, alpha_look=0.01, final=True)[0] == (
        "inconclusive"
    )


def test_the_calibration_moves_to_the_runs_rounds_by_satterthwaite():
    """Below the calibration's rounds per block the block variance grows by sigma_R^2 (1/R - 1/R_c), on
    Satterthwaite's degrees of freedom (between the two parts'); at or above R_c it stays block_var (it errs high)."""
    rng = random.Random(7)
    c = nested.estimate([simulate(rng, blocks=10, rounds=32, sigma_l=0.01, sigma_r=0.10)])
    assert c.block_variance_estimate(64) == (c.block_var, c.df_launch)
    v, df = c.block_variance_estimate(8)
    add = c.sigma_round**2 * (1 / 8 - 1 / 32)
    assert v == pytest.approx(c.block_var + add)
    assert min(c.df_launch, c.df_round) <= df <= c.df_launch + c.df_round
    assert df == pytest.approx(v**2 / (c.block_var**2 / c.df_launch + add**2 / c.df_round))


def test_the_sign_flip_test_is_exact_and_has_a_floor():
    assert nested.sign_flip_p([0.01, 0.02, 0.03]) == pytest.approx(2 / 8)
    assert nested.sign_flip_p([0.01, -0.01]) == 1.0
    assert nested.sign_flip_p([0.01] * 8) == pytest.approx(2 / 256)  # 8 launches can reach 0.01


@pytest.mark.parametrize(
    ("estimate", "half", "want"),
    [
        (0.10, 0.02, "regression"),
        (0.01, 0.005, "within noise"),
        (-0.10, 0.02, "improved"),
        (0.02, 0.06, "continue"),
    ],
)
def test_decide(estimate, half, want):
    t = nested.Test(estimate, half / 2.58, (estimate - half, estimate + half), 0.001, "z", 4, 128)
    verdict, why = nested.decide(t, threshold=0.03, higher_is_better=False, alpha_look=0.01, final=False)
    assert verdict == want, why
    if want == "continue":
        assert (
            nested.decide(t, threshold=0.03, higher_is_better=False, alpha_look=0.01, final=True)[0] == "within noise"
        )
        # the data-only test (no launch variance) over 4 launches cannot reach 0.01 (its floor is 1/8)
        alone = nested.Test(estimate, None, (estimate - half, estimate + half), 0.125, "sign-flip", 4, 128)
        assert nested.decide(alone, threshold=0.03, higher_is_better=False, alpha_look=0.01, final=True)[0] == (
            "inconclusive"
        )
    # a higher-is-better metric reads the other way round: a throughput up 2% is no slowdown, whatever the spread
    flipped = nested.decide(t, threshold=0.03, higher_is_better=True, alpha_look=0.01, final=False)[0]
    assert flipped == {"regression": "improved", "improved": "regression", "continue": "within noise"}.get(want, want)


def test_a_point_stops_within_noise_once_a_slowdown_of_the_threshold_would_have_shown():
    """Before the last look: within noise once estimate + z(0.9) x se is below the threshold's slowdown; an
    estimate of 0 with se 2.5% is not there yet (0 + 1.28 x 2.5% > 3%), with se 1% it is."""
    for se, want in ((0.025, "continue"), (0.01, "within noise")):
        t = nested.Test(0.0, se, (-2.58 * se, 2.58 * se), 1.0, "z", 2, 64)
        assert nested.decide(t, threshold=0.03, higher_is_better=False, alpha_look=0.01, final=False)[0] == want


def _calibrated(sigma_l, sigma_r, seed=8):
    rng = random.Random(seed)
    return nested.estimate([simulate(rng, blocks=20, rounds=32, sigma_l=sigma_l, sigma_r=sigma_r)])


def test_the_plan_buys_the_rules_power_where_it_is_cheapest():
    quiet, loud = _calibrated(0.005, 0.10), _calibrated(0.02, 0.10)
    p_quiet = nested.plan(quiet, launch_s=60, round_s=3, threshold=0.03)
    p_loud = nested.plan(loud, launch_s=60, round_s=3, threshold=0.03, max_blocks=32)
    assert p_loud.max_blocks > p_quiet.max_blocks  # launch noise is beaten with launches, not rounds
    for p, c in ((p_quiet, quiet), (p_loud, loud)):
        assert p.detectable <= 0.05 + 1e-9 and p.max_blocks % p.look_every == 0
        power = nested.power_at(
            c, rounds=p.rounds, blocks=p.max_blocks, shift=math.log1p(0.05), alpha_look=p.alpha_look, threshold=0.03
        )
        assert power >= 0.9
    # the threshold costs power: a rule that also needs the estimate beyond 3% catches 4% less often
    args = {"rounds": 32, "blocks": 4, "shift": math.log1p(0.04), "alpha_look": 0.01}
    assert nested.power_at(quiet, **args, threshold=0.03) < nested.power_at(quiet, **args)


def test_power_at_is_what_the_rule_does():
    """power_at's integral against the rule itself (launch_test, then decide at the last look) on trials drawn
    from the model at the launch sd power_at assumes (here the calibration's own estimate)."""
    c = _calibrated(0.01, 0.08)
    c = dataclasses.replace(c, sigma_launch_upper=c.sigma_launch)
    rng = random.Random(9)
    n, hits, shift = 600, 0, math.log1p(0.04)
    for _ in range(n):
        run = simulate(rng, blocks=4, rounds=16, sigma_l=c.launch, sigma_r=c.sigma_round, shift=0.04)
        t = nested.launch_test(run, c, alpha_look=0.01)
        hits += nested.decide(t, threshold=0.03, higher_is_better=False, alpha_look=0.01, final=True)[0] == (
            "regression"
        )
    want = nested.power_at(c, rounds=16, blocks=4, shift=shift, alpha_look=0.01, threshold=0.03)
    lo, hi = stats.wilson(hits, n, 0.99)
    assert lo <= want <= hi, (hits / n, want)


@pytest.mark.parametrize(
    ("confidence", "df", "table"),
    [
        (0.95, 1, 12.7062),
        (0.95, 2, 4.3027),
        (0.95, 3, 3.1824),
        (0.95, 4, 2.7764),
        (0.95, 10, 2.2281),
        (0.99, 3, 5.8409),
    ],
)
def test_t_quantile_matches_the_table(confidence, df, table):
    assert nested.t_quantile(confidence, df) == pytest.approx(table, abs=1e-4)


def test_the_quantiles_are_scipys():
    st = pytest.importorskip("scipy.stats")
    assert nested.t_quantile(0.99, 7) == pytest.approx(st.t.ppf(0.995, 7), rel=1e-12)
    assert nested.quantile(0.9) == pytest.approx(st.norm.ppf(0.9), rel=1e-12)
    assert nested.NORMAL.cdf(1.5) == pytest.approx(st.norm.cdf(1.5), rel=1e-12)


def test_t_quantile_tends_to_the_normal():
    assert nested.t_quantile(0.95, 2000) == pytest.approx(nested.quantile(0.975), abs=2e-3)
    with pytest.raises(ValueError, match="degree of freedom"):
        nested.t_quantile(0.95, 0)


def test_launch_interval_is_a_t_interval_over_the_launch_means():
    means = [0.01, -0.02, 0.03, 0.0]
    m, (lo, hi) = nested.launch_interval(means)
    sd = statistics.stdev(means)
    assert m == pytest.approx(0.005)
    assert (lo, hi) == pytest.approx((0.005 - 3.18245 * sd / 2, 0.005 + 3.18245 * sd / 2), abs=1e-5)
    assert nested.launch_interval([0.1]) is None


def test_two_identical_launches_are_no_test_and_two_apart_are_t_on_one_df():
    """With no record, two launches leave 1 df: launches that agree exactly estimate a variance of 0, which says
    nothing of the spread, so there is no test (never p = 0); launches 1% apart give Student t on 1 df."""
    from scipy import stats as st

    same = [nested.Block(i, (0.2,) * 32, i % 2 == 0) for i in range(2)]
    t = nested.launch_test(same, None, alpha_look=0.01)
    assert t.p is None and t.se is None and t.ci is None and "agree exactly" in t.test
    apart = [nested.Block(i, (m,) * 32, i % 2 == 0) for i, m in enumerate((0.195, 0.205))]
    t = nested.launch_test(apart, None, alpha_look=0.01)
    assert t.df == 1 and t.se == pytest.approx(0.005)
    assert t.p == pytest.approx(2 * st.t.sf(0.2 / 0.005, 1))
