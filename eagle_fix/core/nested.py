"""Nested measurements: rounds within an engine launch, launches within a comparison.

`eagle-fix ab` measures a point in blocks; each block starts both sides' engines afresh and measures R paired
rounds. One launch of an engine runs a little faster or slower than another for its whole life, so the rounds
of one block share that launch's offset: the unit is the launch:

  block mean  m_b = mean over the block's rounds of log(new / base)
  Var(m_b)    = sigma_L^2 + sigma_R^2 / R     (sigma_L: the launch pair's offset, sigma_R: one round's scatter)

`estimate` measures the components from A/A blocks as a one-way random-effects model with the start order as
a fixed effect: the block means' mean square around their fit (intercept and start order: 2 degrees of freedom
charged) against the rounds' mean square within blocks; sigma_L's upper bound is the exact F bound
(`launch_upper_bound`). `launch_test` judges a comparison by a t-test on the mean of its block means whose
variance pools the calibration's block-mean variance (its own degrees of freedom, Satterthwaite where rounds per
block differ) with the run's own: nothing recorded is taken as known, and no path tests over rounds. `plan`
chooses rounds per block and blocks (Kalibera & Jones, ISMM 2013) and `decide` is the sequential rule.
Distributions are scipy.stats'.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import asdict, dataclass

from scipy import stats as _st

from eagle_fix.core.significance import STD_NORMAL
from eagle_fix.core.variance import (  # noqa: F401  (the estimate's names, used through nested as before)
    LAUNCH_SD_FLOOR,
    UPPER_CONFIDENCE,
    Block,
    Components,
    _sign,
    block_round_variances,
    blocks_of,
    estimate,
    fit_block_means,
    launch_upper_bound,
    pivotal_upper_bound,
    pooled_round_variance,
)

NORMAL = STD_NORMAL  # the standard normal (scipy.stats.norm), for the verdicts that read a z


def quantile(q: float) -> float:
    """The standard normal quantile (scipy.stats.norm.ppf)."""
    return float(_st.norm.ppf(q))


@functools.lru_cache(maxsize=4096)
def t_ppf(q: float, df: float) -> float:
    """Student t's quantile (scipy.stats.t.ppf), cached: the sequential rule asks for the same few."""
    return float(_st.t.ppf(q, df))


def t_quantile(confidence: float, df: float) -> float:
    """The two-sided Student t quantile: P(|T| <= t) = confidence with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"t needs at least 1 degree of freedom, got {df}")
    return t_ppf(0.5 + confidence / 2, df)


@dataclass(frozen=True)
class Test:
    """A comparison's evidence at one look: the estimate (log ratio new/base), its standard error, the
    interval at the look's level, the p-value, which test made them, and the reference's degrees of freedom."""

    estimate: float
    se: float | None
    ci: tuple[float, float] | None
    p: float | None
    test: str
    blocks: int
    rounds: int
    df: float | None = None


def sign_flip_p(means: list[float]) -> float:
    """Exact two-sided p of the sign-flip (randomisation) test that the block means are centred on 0 (its floor
    is 2 / 2^B); kept for the replay's comparisons."""
    observed = abs(sum(means))
    n = len(means)
    hits = sum(
        1
        for signs in itertools.product((1, -1), repeat=n)
        if abs(sum(s * m for s, m in zip(signs, means))) >= observed - 1e-15
    )
    return hits / 2**n


def run_df(blocks: int) -> int:
    """The degrees of freedom a run's own block means give its variance: the start order is fitted from 4
    launch pairs (alternating orders) up, below that only the mean."""
    return blocks - 2 if blocks >= 4 else blocks - 1


def _as_components(calibration) -> Components | None:
    if isinstance(calibration, Components):
        return calibration
    if isinstance(calibration, dict):
        return Components.from_dict(calibration)
    return None


def launch_test(
    blocks: list[Block],
    calibration: Components | dict | float | None = None,
    *,
    alpha_look: float,
    sigma_round: float | None = None,
    source: str = "",
) -> Test:
    """The launch-level t-test of one metric: t = mean of the block means / sqrt(V / B) on df degrees of
    freedom, V pooling the run's own block means' mean square (run_df) with the calibration's block-mean
    variance at this run's rounds (Components.block_variance_estimate: its own degrees of freedom). Without a
    calibration (None, or a bare launch sd, which carries no degrees of freedom: `sigma_round` likewise is
    ignored) V is the run's own; with fewer than 1 degree of freedom in all, or V = 0, there is no test (p None). Every
    variance here comes from block means, so no path tests over rounds."""
    del sigma_round  # a recorded sd is never taken as known
    means = [b.mean for b in blocks]
    rounds = sum(b.rounds for b in blocks)
    n = len(means)
    if not means:
        return Test(math.nan, None, None, None, "no rounds", 0, 0)
    est = sum(means) / n
    signs = [_sign(b) for b in blocks] if n >= 4 else [0] * n
    rss, df_r, _ = fit_block_means(means, signs)
    df_r = max(df_r, 0)
    cal = _as_components(calibration)
    r_run = n / sum(1 / b.rounds for b in blocks)
    v_c, df_c = cal.block_variance_estimate(r_run) if cal is not None else (math.nan, 0)
    if not df_c or not math.isfinite(v_c):
        df_c, v_c = 0, 0.0
    df = df_r + df_c
    where = f"; {source}" if source else ""
    if df < 1:
        why = "no recorded calibration" if cal is None else "a calibration without an analysis of variance"
        return Test(est, None, None, None, f"no test: {n} launch(es) and {why}{where}", n, rounds)
    var = (rss + df_c * v_c) / df
    if not (var > 0 and math.isfinite(var)):  # launches that agree exactly (fakes, a coarse clock) show no spread:
        # a zero variance estimated from so few df is no evidence that the spread is 0, so it settles nothing
        why = f"the launch means agree exactly (a variance of 0 on {df:.0f} df says nothing of the spread)"
        return Test(est, None, None, None, f"no test: {n} launch(es), {why}{where}", n, rounds)
    se = math.sqrt(var / n)
    half = t_ppf(1 - alpha_look / 2, df) * se
    p = float(2 * _st.t.sf(abs(est) / se, df))
    parts = f"{n} launches: {df_r} df" + (f" + calibration {df_c:.1f} df" if df_c else ", no calibration")
    test = f"launch-level t-test on {df:.1f} df ({parts}{where})"
    return Test(est, se, (est - half, est + half), p, test, n, rounds, df)


def limits(threshold: float, higher_is_better: bool) -> tuple[float, float]:
    """(slower, faster) in the slowdown's coordinate (log new/base, sign turned so that slower is positive):
    what a change must pass to be beyond the relative threshold as the metric reads it (a time up by more
    than it, a throughput down by more than it)."""
    if higher_is_better:
        return -math.log1p(-threshold), -math.log1p(threshold)
    return math.log1p(threshold), math.log1p(-threshold)


# The confidence of the bound that stops a point "within noise" before its last look: a slowdown of the threshold
# would have put the estimate above that bound with this probability (the plans' power). Stopping to keep the
# code adds no false alarm, so this bound need not be at the looks' level.
FUTILITY_CONFIDENCE = 0.9


def decide(test: Test, *, threshold: float, higher_is_better: bool, alpha_look: float, final: bool) -> tuple[str, str]:
    """(verdict, why) at one look. A slowdown is a regression when the interval at the look's level lies wholly
    on the slower side of 1 and the estimate beyond the threshold; "improved" mirrors it. Before the last look
    the point stops "within noise" once the estimate's upper bound at FUTILITY_CONFIDENCE (t on the test's
    degrees of freedom) is below a slowdown of the threshold, else "continue". At the last look an unsettled
    metric is "within noise"; with no test at all, "inconclusive"."""
    if test.ci is None or test.p is None or math.isnan(test.estimate):
        return ("inconclusive" if final else "continue"), "no interval yet"
    sign = -1.0 if higher_is_better else 1.0  # a slowdown as a positive number
    slow = sign * test.estimate
    lo, hi = sorted((sign * test.ci[0], sign * test.ci[1]))
    slower, faster = limits(threshold, higher_is_better)
    if test.se is None:  # a data-only test without a standard error: its p decides, the range only describes
        if test.p < alpha_look and slow > slower:
            return "regression", f"p {test.p:.3g} < {alpha_look:.3g} and slower by more than {threshold:.0%}"
        if test.p < alpha_look and slow < faster:
            return "improved", f"p {test.p:.3g} < {alpha_look:.3g} and faster by more than {threshold:.0%}"
        if not final:
            return "continue", "the launches alone cannot settle it yet"
        if 2 / 2**test.blocks >= alpha_look:
            return "inconclusive", f"{test.blocks} launches alone cannot reach p < {alpha_look:.3g}"
        return "within noise", "not significant at the last look"
    if lo > 0 and slow > slower:
        return "regression", f"the interval excludes no slowdown and the estimate is beyond {threshold:.0%}"
    if hi < 0 and slow < faster:
        return "improved", f"the interval excludes no speed-up and the estimate is beyond {threshold:.0%}"
    q = t_ppf(FUTILITY_CONFIDENCE, test.df) if test.df else quantile(FUTILITY_CONFIDENCE)
    if slow + q * test.se < slower:
        return "within noise", f"the {FUTILITY_CONFIDENCE:.0%} upper bound excludes a slowdown of {threshold:.0%}"
    if final:
        return "within noise", "not significant at the last look; the operating curve says what it could see"
    return "continue", "the upper bound still holds a slowdown of the threshold"


@dataclass(frozen=True)
class Plan:
    """How `eagle-fix ab` measures a point kind on a machine: rounds per launch pair, launch pairs at most,
    a look after every `look_every` of them, each look at alpha / looks."""

    rounds: int
    max_blocks: int
    look_every: int
    alpha: float
    detectable: float  # the slowdown the rule calls a regression with `power` at the last look
    power: float
    expected_s: float | None  # the cost of the full plan (launch and round costs recorded with it)

    @property
    def looks(self) -> int:
        return self.max_blocks // self.look_every

    @property
    def alpha_look(self) -> float:
        # Bonferroni over the looks, the same spending as the decision half's family rule
        # (eagle_fix.gate.family, ab_result.apply_family): a row enters Holm with min(1, looks * p), and
        # p < alpha / looks at a look is looks * p < alpha, so a point stopped at a look is always kept.
        return self.alpha / self.looks

    def as_dict(self) -> dict:
        return {**asdict(self), "looks": self.looks, "alpha_look": self.alpha_look}


# The chi-square grid power_at integrates the estimated variance over (midpoint quantiles).
_GRID = 48


def power_at(
    c: Components, *, rounds: int, blocks: int, shift: float, alpha_look: float, threshold: float = 0.0
) -> float:
    """The chance the rule calls a true slowdown `shift` (log units) a regression at one look of `blocks` launch
    pairs of `rounds` rounds: the t interval clears 0 and the estimate is beyond log(1 + threshold). The true
    block variance is the plan's (launch sd at its upper bound); the test's variance pools the run's estimate of
    it (run_df) with the calibration's (Components.block_variance_estimate: at R_c where rounds exceed it), whose
    expectation is taken at the same launch sd, its scatter integrated over its chi-square law."""
    import numpy as np

    true = c.block_variance(rounds)
    _, df_c = c.block_variance_estimate(rounds)
    df_c = df_c if math.isfinite(df_c) else 0
    df_r = max(run_df(blocks), 0)
    df = df_r + df_c
    if df < 1 or not math.isfinite(true):
        return 0.0
    at_c = c.block_variance(min(rounds, c.rounds_per_block)) if df_c else true
    expected = (df_r * true + df_c * at_c) / df
    se = math.sqrt(true / blocks)
    crit = t_ppf(1 - alpha_look / 2, df) * math.sqrt(expected / blocks)
    x = _st.chi2.ppf((np.arange(_GRID) + 0.5) / _GRID, df) / df
    bar = np.maximum(math.log1p(threshold), crit * np.sqrt(x))
    return float(np.mean(_st.norm.sf((bar - shift) / se)))


def design_cost_s(blocks: int, rounds: int, *, launch_s: float, round_s: float) -> float:
    """What `blocks` launch pairs of `rounds` rounds each cost, in seconds: each pair's start, then its rounds."""
    return blocks * (launch_s + rounds * round_s)


def plan(
    c: Components,
    *,
    launch_s: float,
    round_s: float,
    detect: float = 0.05,
    power: float = 0.9,
    alpha: float = 0.01,
    threshold: float = 0.0,
    look_every: int = 2,
    max_blocks: int = 16,
    max_rounds: int = 256,
) -> Plan:
    """The cheapest design whose last look calls a slowdown of `detect` a regression with `power` at `alpha` (split
    over its looks) under the rule's `threshold`: rounds per launch pair around sqrt((launch cost / round cost) x
    (sigma_R^2 / sigma_L^2)) (Kalibera & Jones), then the fewest launch pairs (a multiple of `look_every`,
    balancing which side starts first) that reach the power; the search keeps the cheapest."""
    shift = math.log1p(detect)
    best = None
    ratio = (launch_s / max(round_s, 1e-9)) * (c.sigma_round**2 / max(c.launch**2, 1e-12))
    # a launch sd no data bound (one file of 2 launch pairs: no degree of freedom left after the start order) gives
    # no power anywhere: the fallback below, whose detectable is NaN, says so instead of a made-up plan
    centre = max(2, round(math.sqrt(ratio))) if math.isfinite(ratio) else 16
    tried = {max(2, int(centre * f)) for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 3)} | {8, 16, 32, 64}
    for rounds in sorted({min(r, max_rounds) for r in tried}):
        for blocks in range(look_every, max_blocks + 1, look_every):
            looks = blocks // look_every
            p = power_at(c, rounds=rounds, blocks=blocks, shift=shift, alpha_look=alpha / looks, threshold=threshold)
            if p >= power:
                cost = design_cost_s(blocks, rounds, launch_s=launch_s, round_s=round_s)
                if best is None or cost < best[0]:
                    best = (cost, rounds, blocks)
                break
    if best is None:  # no design within max_blocks: the most powerful one, said so by its detectable
        rounds, blocks = min(max(centre, 16), max_rounds), max_blocks
        best = (design_cost_s(blocks, rounds, launch_s=launch_s, round_s=round_s), rounds, blocks)
    cost, rounds, blocks = best
    looks = blocks // look_every
    return Plan(
        rounds=rounds,
        max_blocks=blocks,
        look_every=look_every,
        alpha=alpha,
        detectable=detectable_at(
            c, rounds=rounds, blocks=blocks, power=power, alpha_look=alpha / looks, threshold=threshold
        ),
        power=power,
        expected_s=cost,
    )


def detectable_at(
    c: Components, *, rounds: int, blocks: int, power: float, alpha_look: float, threshold: float = 0.0
) -> float:
    """The relative slowdown the rule calls a regression with `power` (power_at solved by bisection; NaN where
    no slowdown up to 100% is)."""
    lo, hi = 0.0, math.log(2.0)
    if power_at(c, rounds=rounds, blocks=blocks, shift=hi, alpha_look=alpha_look, threshold=threshold) < power:
        return math.nan
    for _ in range(40):
        mid = (lo + hi) / 2
        ok = power_at(c, rounds=rounds, blocks=blocks, shift=mid, alpha_look=alpha_look, threshold=threshold) >= power
        lo, hi = (lo, mid) if ok else (mid, hi)
    return math.expm1(hi)


def launch_interval(means: list[float], confidence: float = 0.95) -> tuple[float, tuple[float, float]] | None:
    """The mean of per-launch means and its t interval (df = launches - 1): the launch is the unit, so the
    spread of the launch means carries both the launch's offset and its rounds' scatter, and no launch
    variance need be recorded beforehand. None with fewer than 2 launches."""
    n = len(means)
    if n < 2:
        return None
    m = sum(means) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in means) / (n - 1))
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    return m, (m - half, m + half)
