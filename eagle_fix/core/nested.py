"""Nested measurements: rounds within an engine launch, launches within a comparison.

`eagle-fix ab` measures a point in blocks; each block starts both sides' engines afresh and measures R paired
rounds. One launch of an engine runs a little faster or slower than another for its whole life, so the rounds
of one block share that launch's offset: they are not independent experiments, and a test that counts them as
such (a sign test over all rounds) claims far more certainty than it has. Here the unit is the launch:

  block mean  m_b = mean over the block's rounds of log(new / base)
  Var(m_b)    = sigma_L^2 + sigma_R^2 / R     (sigma_L: the launch pair's offset, sigma_R: one round's scatter)

`estimate` measures sigma_L, sigma_R and the start-order effect from A/A blocks (every block mean is 0 but
for noise there, so their spread beyond the rounds' share is the launch's). `launch_test` judges a comparison
from its block means with sigma_L known (recorded for the machine) and sigma_R from the run itself, a z-test
on the mean of the block means; without a recorded sigma_L it falls back to an exact sign-flip test over the
blocks (8 blocks can reach 0.01). `plan` chooses rounds per block and blocks for a target (Kalibera & Jones,
"Rigorous benchmarking in reasonable time", ISMM 2013), and `decide` is the group-sequential rule that lets
`ab` stop once the verdict is settled, its error rates kept by splitting alpha over the looks (Bonferroni).
Pure Python: the engine's venv need not carry scipy.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from statistics import NormalDist

_N = NormalDist()
NORMAL = _N  # the standard normal, for the verdicts that read a z


def quantile(q: float) -> float:
    """The standard normal quantile."""
    return _N.inv_cdf(q)


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


@dataclass(frozen=True)
class Components:
    """The variance components of one point kind on one machine, in log units (0.01 is about 1%)."""

    sigma_launch: float  # sd of a block's mean beyond its rounds' scatter: the launch pair's offset
    sigma_round: float  # sd of one round's log ratio within a block
    start_order: float  # half the mean difference of base-started-first minus new-started-first blocks
    trials: int
    blocks: int
    rounds: int
    # the one-sided UPPER_CONFIDENCE upper bound of sigma_launch (from the blocks' chi-square): what the tests
    # use, since a launch variance estimated from a few dozen blocks may well be low, and a test that takes
    # it too low calls noise a change
    sigma_launch_upper: float = math.nan

    def block_variance(self, rounds: int) -> float:
        return self.launch**2 + self.sigma_round**2 / max(rounds, 1)

    @property
    def launch(self) -> float:
        """The launch sd the tests and plans use: the upper bound where there is one."""
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


def estimate(trials: list[list[Block]]) -> Components:
    """From A/A runs (both sides identical, so every block mean is 0 but for noise): sigma_R from the rounds
    within blocks, the start-order effect from runs holding both orders, and sigma_L from the block means'
    spread around 0 beyond their rounds' share. Every block counts, so an offset a whole run shares (a
    machine's state that day) is launch noise too: a test that uses sigma_L then holds across runs, which
    is how the replay (eagle_fix.gate.replay) draws its trials."""
    all_blocks = [b for t in trials for b in t]
    var_r, _ = pooled_round_variance(all_blocks)
    var_r = 0.0 if math.isnan(var_r) else var_r
    order = []
    for t in trials:
        bf = [b.mean for b in t if b.base_first is True]
        nf = [b.mean for b in t if b.base_first is False]
        if bf and nf:
            order.append((sum(bf) / len(bf) - sum(nf) / len(nf)) / 2)
    gamma = sum(order) / len(order) if order else 0.0
    excess = []
    for b in all_blocks:
        s = 0 if b.base_first is None else (1 if b.base_first else -1)
        excess.append((b.mean - s * gamma) ** 2 - var_r / b.rounds)
    var_l = max(0.0, sum(excess) / len(excess)) if excess else math.nan
    upper = math.nan
    if excess:
        total = sum(e + var_r / b.rounds for e, b in zip(excess, all_blocks)) / len(excess)  # E[(m - s gamma)^2]
        df = len(excess)
        total_up = total * df / chi2_quantile(1 - UPPER_CONFIDENCE, df)
        upper = math.sqrt(max(0.0, total_up - sum(var_r / b.rounds for b in all_blocks) / df))
    return Components(
        sigma_launch=math.sqrt(var_l) if not math.isnan(var_l) else math.nan,
        sigma_round=math.sqrt(var_r),
        start_order=gamma,
        trials=len(trials),
        blocks=len(all_blocks),
        rounds=sum(b.rounds for b in all_blocks),
        sigma_launch_upper=upper,
    )


# The confidence of the launch sd's upper bound the tests use (eagle_fix.gate.replay shows what it holds).
UPPER_CONFIDENCE = 0.95


def chi2_quantile(q: float, df: int) -> float:
    """The chi-square quantile (Wilson-Hilferty: within about 1% from a few degrees of freedom up)."""
    z = _N.inv_cdf(q)
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@dataclass(frozen=True)
class Test:
    """A comparison's evidence at one look: the estimate (log ratio new/base), its standard error, the
    interval at the look's level, the p-value, and which test made them."""

    estimate: float
    se: float | None
    ci: tuple[float, float] | None
    p: float | None
    test: str
    blocks: int
    rounds: int


def sign_flip_p(means: list[float]) -> float:
    """Exact two-sided p of the sign-flip (randomisation) test that the block means are centred on 0: only
    what the design randomised per launch pair is permuted, so it holds at any number of blocks (its floor
    is 2 / 2^B)."""
    observed = abs(sum(means))
    n = len(means)
    hits = sum(
        1
        for signs in itertools.product((1, -1), repeat=n)
        if abs(sum(s * m for s, m in zip(signs, means))) >= observed - 1e-15
    )
    return hits / 2**n


def launch_test(
    blocks: list[Block],
    sigma_launch: float | None,
    *,
    alpha_look: float,
    sigma_round: float | None = None,
    source: str = "",
) -> Test:
    """The launch-level test of one metric. With `sigma_launch` known (recorded for this machine and point
    kind): z = mean of the block means / sqrt((sigma_L^2 + sigma_R^2 / R) / B), sigma_R from this run's rounds
    (or `sigma_round` when the run has too few), the interval at 1 - alpha_look. Without it: the exact
    sign-flip test over the block means, and the interval from their spread (t with B - 1 degrees of
    freedom is not at hand: the interval is the range of the block means, labelled as such)."""
    means = [b.mean for b in blocks]
    rounds = sum(b.rounds for b in blocks)
    if not means:
        return Test(math.nan, None, None, None, "no rounds", 0, 0)
    est = sum(means) / len(means)
    if sigma_launch is not None and not math.isnan(sigma_launch):
        var_r, df = pooled_round_variance(blocks)
        if df < 10 and sigma_round is not None:
            var_r = sigma_round**2
        elif math.isnan(var_r):
            var_r = 0.0
        r_bar = rounds / len(means)
        se = math.sqrt((sigma_launch**2 + var_r / r_bar) / len(means))
        z = est / se if se > 0 else math.inf
        p = 2 * (1 - _N.cdf(abs(z)))
        half = _N.inv_cdf(1 - alpha_look / 2) * se
        test = (
            f"launch-level z-test ({len(means)} launches; launch sd {sigma_launch:.2%}{' ' + source if source else ''})"
        )
        return Test(est, se, (est - half, est + half), p, test, len(means), rounds)
    p = sign_flip_p(means)
    ci = (min(means), max(means)) if len(means) > 1 else None
    test = f"sign-flip test over {len(means)} launches (no launch variance recorded{': ' + source if source else ''})"
    return Test(est, None, ci, p, test, len(means), rounds)


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
    the point stops "within noise" once the estimate's upper bound at FUTILITY_CONFIDENCE is below a slowdown of
    the threshold (a slowdown that large would have shown above it nine times in ten), else "continue". At the
    last look an unsettled metric is "within noise", with the power its row states (the plan was sized for
    it), unless the test could never reach its level there (the sign-flip floor over too few launches):
    "inconclusive"."""
    if test.ci is None or test.p is None or math.isnan(test.estimate):
        return ("inconclusive" if final else "continue"), "no interval yet"
    sign = -1.0 if higher_is_better else 1.0  # a slowdown as a positive number
    slow = sign * test.estimate
    lo, hi = sorted((sign * test.ci[0], sign * test.ci[1]))
    slower, faster = limits(threshold, higher_is_better)
    if test.se is None:  # the data-only test: its p decides significance, the range only describes
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
    if slow + quantile(FUTILITY_CONFIDENCE) * test.se < slower:
        return "within noise", f"the {FUTILITY_CONFIDENCE:.0%} upper bound excludes a slowdown of {threshold:.0%}"
    if final:
        return "within noise", "not significant at the last look; the row's power says what it could see"
    return "continue", "the upper bound still holds a slowdown of the threshold"


@dataclass(frozen=True)
class Plan:
    """How `eagle-fix ab` measures a point kind on a machine: rounds per launch pair, launch pairs at most,
    a look after every `look_every` of them, each look at alpha / looks."""

    rounds: int
    max_blocks: int
    look_every: int
    alpha: float
    detectable: float  # the slowdown caught with `power` at the last look
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


def power_at(c: Components, *, rounds: int, blocks: int, shift: float, alpha_look: float) -> float:
    """The chance the last look's interval lies wholly above 0 for a true slowdown `shift` (log units)."""
    se = math.sqrt(c.block_variance(rounds) / blocks)
    z = _N.inv_cdf(1 - alpha_look / 2)
    return 1 - _N.cdf(z - shift / se)


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
    look_every: int = 2,
    max_blocks: int = 16,
    max_rounds: int = 256,
) -> Plan:
    """The cheapest design that catches a slowdown of `detect` with `power` at `alpha` (split over its looks):
    rounds per launch pair near sqrt((launch cost / round cost) x (sigma_R^2 / sigma_L^2)) (Kalibera & Jones),
    then the fewest launch pairs (a multiple of `look_every`, balancing which side starts first) that reach
    the power; the search tries the rounds around that optimum and keeps the cheapest."""
    shift = math.log1p(detect)
    best = None
    ratio = (launch_s / max(round_s, 1e-9)) * (c.sigma_round**2 / max(c.launch**2, 1e-12))
    centre = max(2, round(math.sqrt(ratio)))
    tried = {max(2, int(centre * f)) for f in (0.25, 0.5, 0.75, 1, 1.5, 2, 3)} | {8, 16, 32, 64}
    for rounds in sorted({min(r, max_rounds) for r in tried}):
        for blocks in range(look_every, max_blocks + 1, look_every):
            looks = blocks // look_every
            if power_at(c, rounds=rounds, blocks=blocks, shift=shift, alpha_look=alpha / looks) >= power:
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
        detectable=detectable_at(c, rounds=rounds, blocks=blocks, power=power, alpha_look=alpha / looks),
        power=power,
        expected_s=cost,
    )


def detectable_at(c: Components, *, rounds: int, blocks: int, power: float, alpha_look: float) -> float:
    """The relative slowdown caught with `power` by `blocks` launch pairs of `rounds` rounds."""
    se = math.sqrt(c.block_variance(rounds) / blocks)
    return math.expm1((_N.inv_cdf(1 - alpha_look / 2) + _N.inv_cdf(power)) * se)


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t quantile: P(|T| <= t) = confidence with `df` degrees of freedom, from the
    closed form of the t distribution at integer df (Abramowitz & Stegun 26.7.3-4) by bisection."""
    if df < 1:
        raise ValueError(f"t needs at least 1 degree of freedom, got {df}")

    def inside(t: float) -> float:
        theta = math.atan(t / math.sqrt(df))
        c2, s = math.cos(theta) ** 2, math.sin(theta)
        if df % 2:
            term, acc = math.cos(theta), 0.0
            for j in range(1, (df - 1) // 2 + 1):  # cos, (2/3) cos^3, (2*4)/(3*5) cos^5, ...
                acc += term
                term *= c2 * (2 * j) / (2 * j + 1)
            return 2 / math.pi * (theta + s * acc)
        term, acc = 1.0, 0.0
        for j in range(1, df // 2 + 1):  # 1, (1/2) cos^2, (1*3)/(2*4) cos^4, ...
            acc += term
            term *= c2 * (2 * j - 1) / (2 * j)
        return s * acc

    lo, hi = 0.0, 1.0
    while inside(hi) < confidence:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if inside(mid) < confidence else (lo, mid)
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2


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
