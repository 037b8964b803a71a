"""The launch variance of one point kind on one machine, estimated from A/A blocks (eagle_fix.core.nested judges
with it): a one-way random-effects analysis of variance of the block means, the start order a fixed effect, and
two upper bounds of the launch sd, the exact F bound and a generalized pivotal one that lets every block keep its
own round spread. Distributions are scipy.stats'."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from scipy import stats as _st


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

    draws = PIVOT_DRAWS
    rng = np.random.default_rng(seed)
    m, sg = np.asarray(means, float), np.asarray(signs, float)
    both = bool((sg > 0).any() and (sg < 0).any())
    df = len(m) - (2 if both else 1)
    kk = np.asarray(k, float)
    vstar = np.maximum(np.asarray(v, float), 1e-14) * kk / rng.chisquare(kk, size=(draws, len(m)))
    c = rng.chisquare(df, size=draws)

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

    zero = excess(np.zeros(draws)) <= 0
    lo = np.zeros(draws)
    hi = np.full(draws, float(((m - m.mean()) ** 2).sum())) / np.maximum(c, 1e-12) + 1e-12
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
