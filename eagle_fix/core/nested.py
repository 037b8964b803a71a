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
from dataclasses import asdict, dataclass, fields

from scipy import stats as _st

from eagle_fix.core.significance import STD_NORMAL

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
class Block:
    """One launch pair's rounds: log(new / base) per round, and which side's engine was started first."""

    index: int
    log_ratios: tuple[float, ...]
    base_first: bool | None = None

    @property
    def mean(self) -> float:
        return sum(self.log_ratios) / len(self.log_ratios)

    @property
    def rounds(self) -> int:
        return len(self.log_ratios)


def blocks_of(pairs: list[dict], metric: str) -> list[Block]:
    """The blocks of an `eagle-fix ab` point's pairs, for `metric` (rounds where both sides measured it)."""
    grouped: dict[int, list[float]] = {}
    first: dict[int, bool | None] = {}
    for p in pairs:
        b, n = (p.get("base") or {}).get(metric), (p.get("new") or {}).get(metric)
        if not b or not n or b <= 0 or n <= 0:
            continue
        block = int(p.get("block") or 0)
        grouped.setdefault(block, []).append(math.log(n / b))
        order = p.get("start_order")
        first.setdefault(block, None if not order else order[0] == "base")
    return [Block(i, tuple(grouped[i]), first[i]) for i in sorted(grouped) if grouped[i]]


# The confidence of the launch sd's upper bound the plans use (eagle_fix.gate.replay shows what it holds).
UPPER_CONFIDENCE = 0.95
# The launch sd a plan assumes where both upper bounds at UPPER_CONFIDENCE are 0 (the F statistic in its own lower
# tail): the data then reject a launch effect of any size at that level, but a plan made for no launch noise at all
# buys rounds where launches are needed. 0.5%: below every positive bound the committed records give (0.9-3.0%),
# under the eager EAGLE3 pool's point estimate on 8d487f (0.67%, issue 53). A floor, not an estimate.
LAUNCH_SD_FLOOR = 0.005


@dataclass(frozen=True)
class Components:
    """The variance components of one point kind on one machine, in log units (0.01 is about 1%), with the
    one-way analysis of variance they come from (the test pools `block_var` with its degrees of freedom)."""

    sigma_launch: float  # sd of a block's mean beyond its rounds' scatter: the launch pair's offset
    sigma_round: float  # sd of one round's log ratio within a block
    start_order: float  # half the difference of base-started-first minus new-started-first block means (fitted)
    trials: int
    blocks: int
    rounds: int
    # the upper bound of sigma_launch at UPPER_CONFIDENCE the plans assume: the larger of the exact F bound and the
    # generalized pivotal one (robust to unequal round spread), or LAUNCH_SD_FLOOR where both are 0 (upper_is_floor)
    sigma_launch_upper: float = math.nan
    block_var: float = math.nan  # mean square of the block means around their fit (intercept and start order)
    df_launch: int = 0  # its degrees of freedom: blocks - 2
    df_round: int = 0  # sigma_round^2's degrees of freedom (the rounds' ABBA units within blocks)
    rounds_per_block: float = math.nan  # the blocks' rounds, harmonic mean
    f_stat: float = math.nan  # block_var / (sigma_round^2 / rounds_per_block): 1 on average without launch noise
    f_p_low: float = math.nan  # P(F <= f_stat | sigma_L = 0): below 1 - UPPER_CONFIDENCE the F bound is 0
    f_upper: float = math.nan  # the exact F bound (launch_upper_bound: equal round spread)
    pivotal_upper: float = math.nan  # the generalized pivotal bound (pivotal_upper_bound: each block its own spread)
    upper_is_floor: bool = False  # both bounds were 0: sigma_launch_upper is LAUNCH_SD_FLOOR

    @classmethod
    def from_dict(cls, d: dict) -> Components:
        """From a record's metric entry (older records lack the analysis of variance: NaN and 0 there)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: (math.nan if v is None else v) for k, v in d.items() if k in names})

    def block_variance(self, rounds: int) -> float:
        """A block mean's variance at `rounds` rounds with the launch sd at its upper bound: what plans assume."""
        return self.launch**2 + self.sigma_round**2 / max(rounds, 1)

    def block_variance_estimate(self, rounds: float) -> tuple[float, float]:
        """(estimate, degrees of freedom) of a block mean's variance at `rounds` rounds a block, as a test pools
        it. At or above the calibration's rounds per block R_c, block_var itself (df_launch): a launch pair of
        more rounds varies no more, so the estimate errs high, never toward a test over rounds. Below R_c,
        block_var + sigma_R^2 (1/rounds - 1/R_c), both terms positive, on Satterthwaite's degrees of freedom.
        (NaN, 0) without an analysis of variance."""
        if not (self.df_launch >= 1 and math.isfinite(self.block_var)):
            return math.nan, 0
        if rounds >= self.rounds_per_block or not (self.df_round >= 1 and math.isfinite(self.rounds_per_block)):
            return self.block_var, self.df_launch
        add = (1 / rounds - 1 / self.rounds_per_block) * self.sigma_round**2
        est = self.block_var + add
        return est, est**2 / (self.block_var**2 / self.df_launch + add**2 / self.df_round)

    @property
    def launch(self) -> float:
        """The launch sd the plans use: the upper bound where there is one."""
        return self.sigma_launch_upper if not math.isnan(self.sigma_launch_upper) else self.sigma_launch

    def as_dict(self) -> dict:
        return asdict(self)


def pooled_round_variance(blocks: list[Block]) -> tuple[float, int]:
    """The rounds' variance within blocks (pooled, unbiased) and its degrees of freedom, from their ABBA units:
    `ab` measures base first in even rounds and new first in odd ones, and what the second measurement of a
    round inherits from the first shows as a swing between consecutive rounds that every block mean cancels
    (its rounds pair up). The units' variance, doubled, is the variance of a round as far as a block mean
    sees it; a block with an odd round out leaves that round out."""
    ss, df = 0.0, 0
    for b in blocks:
        units = [(b.log_ratios[i] + b.log_ratios[i + 1]) / 2 for i in range(0, b.rounds - 1, 2)]
        if len(units) < 2:
            continue
        m = sum(units) / len(units)
        ss += sum((u - m) ** 2 for u in units)
        df += len(units) - 1
    return (2 * ss / df if df else math.nan), df


def fit_block_means(means: list[float], signs: list[int]) -> tuple[float, int, float]:
    """(residual sum of squares, residual degrees of freedom, start-order effect) of the block means regressed on
    an intercept and the start order (+1 base first, -1 new first, 0 unknown); the order is fitted only where
    both orders occur, so its degree of freedom is charged only where it is spent."""
    n = len(means)
    both = any(s > 0 for s in signs) and any(s < 0 for s in signs)
    if not both:
        m = sum(means) / n if n else math.nan
        return sum((x - m) ** 2 for x in means), n - 1, 0.0
    sx, sxx = sum(signs), sum(s * s for s in signs)
    sy, sxy = sum(means), sum(s * y for s, y in zip(signs, means))
    det = n * sxx - sx * sx
    gamma = (n * sxy - sx * sy) / det
    mu = (sy - gamma * sx) / n
    rss = sum((y - mu - gamma * s) ** 2 for y, s in zip(means, signs))
    return rss, n - 2, gamma


def _sign(b: Block) -> int:
    return 0 if b.base_first is None else (1 if b.base_first else -1)


def launch_upper_bound(
    block_var: float, df_launch: int, var_round: float, df_round: int, rounds: float, confidence: float
) -> tuple[float, float, float]:
    """(upper bound of sigma_L, F, P(F <= observed | sigma_L = 0)): the exact one-way random-effects bound.
    block_var / (sigma_L^2 + sigma_R^2/R) ~ chi2(df_launch)/df_launch and var_round / sigma_R^2 ~
    chi2(df_round)/df_round, so F / (1 + R sigma_L^2/sigma_R^2) ~ F(df_launch, df_round), and
    sigma_L^2 <= (block_var / F_{1-confidence} - var_round / R) with probability `confidence` (var_round / R
    standing for sigma_R^2 / R). 0 exactly when F falls in its own lower 1 - confidence tail. Without a round
    variance, all of the block means' spread is counted as launch noise (chi-square bound)."""
    a = 1 - confidence
    if df_round < 1 or not math.isfinite(var_round):
        return math.sqrt(block_var * df_launch / float(_st.chi2.ppf(a, df_launch))), math.nan, math.nan
    share = var_round / rounds
    f = block_var / share if share > 0 else math.inf
    p_low = float(_st.f.cdf(f, df_launch, df_round))
    upper2 = block_var / float(_st.f.ppf(a, df_launch, df_round)) - share
    return math.sqrt(max(0.0, upper2)), f, p_low


# Draws of the generalized pivotal quantity (seeded: a record recomputes to the same bound).
PIVOT_DRAWS = 2000


def block_round_variances(blocks: list[Block]) -> tuple[list[float], list[int]]:
    """Each block's own share of round scatter in its mean (its ABBA units' variance / units) and its degrees of
    freedom (units - 1); a block of fewer than 2 units takes the pooled round variance's share."""
    pooled, df = pooled_round_variance(blocks)
    v, k = [], []
    for b in blocks:
        units = [(b.log_ratios[i] + b.log_ratios[i + 1]) / 2 for i in range(0, b.rounds - 1, 2)]
        if len(units) >= 2:
            m = sum(units) / len(units)
            v.append(sum((u - m) ** 2 for u in units) / (len(units) - 1) / len(units))
            k.append(len(units) - 1)
        else:
            v.append((pooled if df else 0.0) / b.rounds)
            k.append(max(df, 1))
    return v, k


def pivotal_upper_bound(
    means: list[float], signs: list[int], v: list[float], k: list[int], confidence: float, *, seed: int = 0
) -> float:
    """The generalized pivotal (Weerahandi) upper bound of sigma_L where every block has its own round spread: a
    draw takes each block's round share as v_b k_b / chi2(k_b) and a chi2(B - p) for the weighted residual sum of
    squares, and solves sum_b (m_b - fit)^2 / (sigma_L^2 + v_b*) = chi2* for sigma_L^2 (the fit weighted alike:
    intercept, and the start order where both occur); 0 where even sigma_L = 0 leaves the sum below the draw. The
    bound is the draws' `confidence` quantile. Robust to unequal round spread, which the F bound is not."""
    import numpy as np

    rng = np.random.default_rng(seed)
    m, sg = np.asarray(means, float), np.asarray(signs, float)
    both = bool((sg > 0).any() and (sg < 0).any())
    df = len(m) - (2 if both else 1)
    kk = np.asarray(k, float)
    vstar = np.maximum(np.asarray(v, float), 1e-14) * kk / rng.chisquare(kk, size=(PIVOT_DRAWS, len(m)))
    c = rng.chisquare(df, size=PIVOT_DRAWS)

    def excess(sig2):
        w = 1 / (sig2[:, None] + vstar)
        sw, swm = w.sum(1), (w * m).sum(1)
        if not both:
            r = m - (swm / sw)[:, None]
        else:
            sws, swss, swsm = (w * sg).sum(1), (w * sg * sg).sum(1), (w * sg * m).sum(1)
            det = sw * swss - sws**2
            b0, b1 = (swss * swm - sws * swsm) / det, (sw * swsm - sws * swm) / det
            r = m - b0[:, None] - b1[:, None] * sg
        return (w * r * r).sum(1) - c

    zero = excess(np.zeros(PIVOT_DRAWS)) <= 0
    lo = np.zeros(PIVOT_DRAWS)
    hi = np.full(PIVOT_DRAWS, float(((m - m.mean()) ** 2).sum())) / np.maximum(c, 1e-12) + 1e-12
    for _ in range(40):
        mid = (lo + hi) / 2
        above = excess(mid) > 0
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    sol = np.where(zero, 0.0, (lo + hi) / 2)
    return math.sqrt(float(np.quantile(sol, confidence)))


def estimate(trials: list[list[Block]], confidence: float = UPPER_CONFIDENCE) -> Components:
    """From A/A runs (both sides identical): sigma_R from the rounds within blocks, the start order and the block
    means' mean square from their fit (intercept and start order over every block: an offset a whole run shares,
    a machine's state that day, counts as launch noise, so a test that uses it holds across runs), sigma_L by
    moments (clamped at 0), its exact F upper bound (f_upper: equal round spread assumed) and the generalized
    pivotal one (each block its own round spread); the plans use the larger. Where both are 0 the data reject any
    launch effect at that level (F in its own lower tail), the record says so (upper_is_floor) and plans assume
    LAUNCH_SD_FLOOR."""
    blocks = [b for t in trials for b in t]
    var_r, df_r = pooled_round_variance(blocks)
    n = len(blocks)
    nan = math.nan
    if n < 3:
        return Components(nan, math.sqrt(var_r) if df_r else nan, 0.0, len(trials), n, sum(b.rounds for b in blocks))
    rss, df_l, gamma = fit_block_means([b.mean for b in blocks], [_sign(b) for b in blocks])
    r_h = n / sum(1 / b.rounds for b in blocks)
    block_var = rss / df_l
    var_l = max(0.0, block_var - (var_r / r_h if df_r else 0.0))
    f_upper, f, p_low = launch_upper_bound(block_var, df_l, var_r, df_r, r_h, confidence)
    v, k = block_round_variances(blocks)
    pivotal = pivotal_upper_bound([b.mean for b in blocks], [_sign(b) for b in blocks], v, k, confidence)
    upper = max(pivotal, f_upper)
    floor = upper == 0.0
    return Components(
        sigma_launch=math.sqrt(var_l),
        sigma_round=math.sqrt(var_r) if df_r else nan,
        start_order=gamma,
        trials=len(trials),
        blocks=n,
        rounds=sum(b.rounds for b in blocks),
        sigma_launch_upper=LAUNCH_SD_FLOOR if floor else upper,
        block_var=block_var,
        df_launch=df_l,
        df_round=df_r,
        rounds_per_block=r_h,
        f_stat=f,
        f_p_low=p_low,
        f_upper=f_upper,
        pivotal_upper=pivotal,
        upper_is_floor=floor,
    )


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
    ignored) V is the run's own; with fewer than 1 degree of freedom in all there is no test (p None). Every
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
    se = math.sqrt(var / n)
    half = t_ppf(1 - alpha_look / 2, df) * se
    p = float(2 * _st.t.sf(abs(est) / se, df)) if se > 0 else (0.0 if est else 1.0)
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
    centre = max(2, round(math.sqrt(ratio)))
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
