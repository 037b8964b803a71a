"""eagle_fix.core.nested: the launch as the unit. On data drawn from the nested model itself (a launch offset
per block, a scatter per round) the estimates find the components, the launch-level test keeps its level
where the sign test over rounds does not, and the plan buys power where it is cheapest."""

import math
import random
import statistics

import pytest

from eagle_fix.core import nested, stats


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
    rng = random.Random(2)
    c = nested.Components(sigma_launch=0.03, sigma_round=0.10, start_order=0.0, trials=1, blocks=1, rounds=1)
    n, alpha = 2000, 0.05
    launch = rounds = 0
    for _ in range(n):
        trial = simulate(rng, blocks=4, rounds=32, sigma_l=0.03, sigma_r=0.10)
        t = nested.launch_test(trial, c.sigma_launch, alpha_look=alpha)
        launch += t.p < alpha
        rounds += _rejects_round_level(trial, alpha)
    lo, hi = stats.wilson(launch, n)
    assert lo <= alpha <= hi, launch / n
    assert rounds / n > 3 * alpha  # 128 rounds of 4 launches counted as 128 experiments


def test_the_sign_flip_test_is_exact_and_has_a_floor():
    assert nested.sign_flip_p([0.01, 0.02, 0.03]) == pytest.approx(2 / 8)
    assert nested.sign_flip_p([0.01, -0.01]) == 1.0
    assert nested.sign_flip_p([0.01] * 8) == pytest.approx(2 / 256)  # 8 launches can reach 0.01
    t = nested.launch_test([nested.Block(i, (0.1, 0.1)) for i in range(2)], None, alpha_look=0.01)
    assert t.se is None and t.p == 0.5 and "sign-flip" in t.test


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


def test_the_plan_buys_power_where_it_is_cheapest():
    quiet = nested.Components(sigma_launch=0.005, sigma_round=0.10, start_order=0.0, trials=10, blocks=20, rounds=640)
    loud = nested.Components(sigma_launch=0.03, sigma_round=0.10, start_order=0.0, trials=10, blocks=20, rounds=640)
    p_quiet = nested.plan(quiet, launch_s=60, round_s=3)
    p_loud = nested.plan(loud, launch_s=60, round_s=3)
    assert p_loud.max_blocks > p_quiet.max_blocks  # launch noise is beaten with launches, not rounds
    for p, c in ((p_quiet, quiet), (p_loud, loud)):
        assert p.detectable <= 0.05 + 1e-9 and p.max_blocks % p.look_every == 0
        assert (
            nested.power_at(c, rounds=p.rounds, blocks=p.max_blocks, shift=math.log1p(0.05), alpha_look=p.alpha_look)
            >= 0.9
        )
    # rounds are cheap next to a launch: more of them per launch
    assert nested.plan(loud, launch_s=600, round_s=3).rounds >= p_loud.rounds


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
