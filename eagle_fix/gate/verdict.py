"""The gate's verdict, once, for `eagle-fix compare` and `eagle-fix ab`.

Both commands judge the same kinds of numbers: a point's status, noisy speed metrics on samples
(compare: two runs' repeats, unpaired; ab: alternating rounds, paired), acceptance on vLLM's counts,
and exact fields. The rules, the threshold and the level (alpha), what each row could have seen,
and the text table live here, so the two commands cannot drift apart. The statistics themselves are
in eagle_fix.core.stats and eagle_fix.core.significance.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from scipy import stats as sps

from eagle_fix.core import acceptance as counts
from eagle_fix.core import metrics, nested, significance, stats

# the one gated speed metric and the family-wise rule live in eagle_fix.gate.family
from eagle_fix.gate.family import (  # noqa: F401 - re-exported: compare and ab read every rule here
    FAMILY_RULE,
    GATED_SPEED,
    family_verdict,
    gated_speed,
    holm,
)

# The threshold and the paired rounds of `eagle-fix ab` are the settings the gate's calibration ran
# with (results/calibration/gate/, docs/statistics.md), which says how often they raised a false alarm
# and how often they caught MIN_DETECTABLE; tests/gate/test_calibration.py fails when these drift from the
# committed trials. The threshold sits above how far identical sides' median ratios wander; the sign
# test could speak from 8 rounds (significance.pairs_needed), but on this noise 8 rounds catch little.
DEFAULT_THRESHOLD = 0.03
DEFAULT_ALPHA = 0.01
DEFAULT_ROUNDS = 64
# Compiled engines are noisier here: at 64 rounds compiled 8K EAGLE3 caught 8 of 10 trials at the
# stated minimum, at 128 all 10 with no false alarm (docs/statistics.md), so a compiled point gets
# more rounds by default. A mode not named here gets DEFAULT_ROUNDS.
ROUNDS_BY_MODE = {"compile": 128}
# ab's other calibrated settings: each sample decodes at most DEFAULT_SAMPLE_TOKENS tokens (None: the
# profile's output length), and a point's rounds run in DEFAULT_BLOCKS blocks, each with both engines
# started afresh in the order opposite to the block before (one engine instance can run a few percent
# slower than another for its whole life; on identical sides the engine started first did).
DEFAULT_SAMPLE_TOKENS: int | None = 128
DEFAULT_BLOCKS = 2
# The smallest slowdown the README says the gate can see. A comparison whose rows could not have
# detected it says so in one line, so a pass is never read as "no regression of that size".
MIN_DETECTABLE = 0.05

FAILING = ("regression", "failed", "missing")
# Noisy metrics the sweep keeps every repeat of: the only noisy ones a test can judge. Memory and
# speedup are one number per point (the speedup is a ratio of two medians), so they are shown but
# never gated: "inconclusive" forever would read as a gate that looked.
SAMPLED = tuple(m.column for m in metrics.METRICS if m.sampled)
# Metrics `ab` measures in every round, judged on the paired ratios (the registry says which).
PAIRED = tuple(m.column for m in metrics.METRICS if m.paired)
# The paired metrics that may be the gated one (the registry's `gated` leaves out the second step clock).
GATED = tuple(m for m in GATED_SPEED if m in PAIRED and metrics.METRIC[m].gated)
SHOWN = "shown, not gated"
# Under the table where a speed row's columns come from its samples: what the three columns are.
COLUMNS_LINE = (
    "columns: a speed row's base and new are geometric means (ab: over the launches, each launch's rounds "
    "averaged first) and its change is their ratio, the estimate the test judges; other rows show the values "
    "as recorded"
)
# The smallest p-value printed as a number: below it the normal and t tails are at the end of float precision.
P_FLOOR = 1e-12
NOT_GATED = "not gated"
CONFIDENCE = 0.95  # of the intervals shown; the verdicts use alpha


@dataclass
class Verdict:
    """One metric of one point: the verdict, the evidence behind it and what it could have seen."""

    verdict: str  # regression | improved | within noise | inconclusive | same | not gated | n/a | failed | fixed | failed-both | missing
    change: float | None = None  # (new - base) / |base|; paired: median ratio - 1
    evidence: str = ""  # the p-value, interval, test or reason
    power: str = ""  # what this row could have detected, in words
    detectable: float | None = None  # smallest relative slowdown it could call (speed rows); None: none
    speed: bool = False  # a gated speed row: counts toward the MIN_DETECTABLE line
    detail: dict[str, Any] = field(default_factory=dict)  # the statistics, for JSON


def p_text(p: float) -> str:
    """A p-value as the table prints it: `p < 1e-12` below P_FLOOR (never `p=0`), else three digits."""
    return f"p < {P_FLOOR:g}" if p < P_FLOOR else f"p={p:.3g}"


def shown_only(v: Verdict, why: str) -> Verdict:
    """V with its change kept and its claim dropped: a metric shown beside the gated ones (WHY: not gated,
    or read on a clock that cannot carry a verdict, such as the host clock on CUDA)."""
    return dataclasses.replace(v, verdict=NOT_GATED, evidence=f"{v.evidence}; {why}", speed=False)


def ungated_why(clock: str | None, *, gated: bool = True) -> str | None:
    """Why a metric read on CLOCK (GATED: one the gate judges) is shown without a verdict; None when it is judged."""
    if clock in metrics.UNGATED_CLOCKS:
        return f"{clock} clock, shown only"
    return None if gated else "observed, not gated"


def default_rounds(mode: str) -> int:
    """`eagle-fix ab`'s paired rounds for a point in MODE when --rounds is not given: the calibrated ones."""
    return ROUNDS_BY_MODE.get(mode, DEFAULT_ROUNDS)


def rounds_text(by_mode: dict[str, int] | None = None) -> str:
    """Rounds per mode in words ("64 rounds eager, 128 compile"); by default, `ab`'s defaults."""
    by_mode = {"eager": DEFAULT_ROUNDS, **ROUNDS_BY_MODE} if by_mode is None else by_mode
    counts = sorted(set(by_mode.values()))
    if len(counts) == 1:
        return f"{counts[0]} rounds"
    return ", ".join(
        f"{n}{' rounds' if i == 0 else ''} {'/'.join(m for m in by_mode if by_mode[m] == n)}"
        for i, n in enumerate(counts)
    )


def failing(strict: bool = False) -> tuple[str, ...]:
    """Verdicts that fail the gate; --strict adds inconclusive."""
    return FAILING + (("inconclusive",) if strict else ())


def status(ok_base: bool, ok_new: bool, error: str = "") -> Verdict | None:
    """A point that failed on a side: failed (new only), fixed (base only), failed-both. None if both ran."""
    if ok_base and ok_new:
        return None
    verdict = {(True, False): "failed", (False, True): "fixed"}.get((ok_base, ok_new), "failed-both")
    return Verdict(verdict, evidence=error)


def exact(base: float, new: float, *, higher_is_better: bool) -> Verdict:
    """Counts, coverage, capacity: any wrong-way change is a regression."""
    change = relative_change(base, new)
    if new == base:
        return Verdict("same", change, "exact", "sees any change")
    better = (new > base) == higher_is_better
    return Verdict("improved" if better else "regression", change, "exact", "sees any change")


def acceptance(
    drafts_base: int,
    accepted_base,
    drafts_new: int,
    accepted_new,
    *,
    base_length: float,
    new_length: float,
    k: int,
    alpha: float = DEFAULT_ALPHA,
    launch_sd: float | None = None,
    launch_df: int | None = None,
) -> Verdict:
    """Acceptance length on vLLM's counts (two-proportion test, the draft as the unit, p < alpha).
    Under greedy sampling acceptance is exact, so no threshold applies. A sampled point (`launch_sd` given:
    acceptance's spread from launch to launch, measured by the sampled A/A) is judged by the launch instead:
    its drafts share one path of draws, so the counts test claims more than it has."""
    if launch_sd is not None:
        return _sampled_acceptance(base_length, new_length, launch_sd, alpha, launch_df)
    p = counts.acceptance_change_p(drafts_base, accepted_base, drafts_new, accepted_new, k)
    drop = counts.acceptance_detectable_drop(drafts_base, accepted_base, drafts_new, k, alpha)
    power = f"could detect a drop >= {drop:.2g} tokens" if drop is not None else "could detect no drop"
    return Verdict(
        _acceptance_call(p, alpha, base_length, new_length),
        relative_change(base_length, new_length),
        f"{p_text(p)} (counts)" if p is not None else "",
        power,
        detail={"p": p, "alpha": alpha, "detectable_drop": drop},
    )


# Greedy acceptance, judged over prompts (`eagle-fix ab`): each side decodes ACCEPTANCE_PROMPTS seeded prompts of the
# point (the speed rounds' own first, then seeds after it), so one prompt whose greedy path parts at a near-tie
# (the committed 32K eager and compiled twins parted at token 4 and accepted 1.82 and 3.43) is one unit of eight,
# not the whole verdict. A drop is called where the prompts' mean log ratio is significant and the change is
# beyond ACCEPTANCE_THRESHOLD: the damage calibration's smallest drops caught by the old counts test were 15-24%
# (docs/statistics.md), and a tenth of acceptance length moves a point's speedup by about a tenth.
ACCEPTANCE_PROMPTS = 8
ACCEPTANCE_THRESHOLD = 0.10


def acceptance_over_prompts(
    base: list[float], new: list[float], *, alpha: float = DEFAULT_ALPHA, threshold: float = ACCEPTANCE_THRESHOLD
) -> Verdict:
    """Greedy acceptance length with the prompt as the unit: log(new / base) per prompt, a one-sample t-test
    on its n - 1 degrees of freedom (scipy.stats); the verdict as the speed rows' (beyond the threshold and
    p < alpha; Holm over a run's points applies the threshold again). Identical lengths on every prompt:
    "same" (greedy decoding is exact, so identical sides give identical counts)."""
    both = [(b, n) for b, n in zip(base, new) if b and n and b > 0 and n > 0]
    detail: dict[str, Any] = {"alpha": alpha, "threshold": threshold, "prompts": len(both), "unit": "prompt"}
    if not both:
        return Verdict("inconclusive", None, "no prompt measured on both sides", "could detect no drop", detail=detail)
    logs = [math.log(n / b) for b, n in both]
    mean = sum(logs) / len(logs)
    change = math.expm1(mean)  # the ratio of the two sides' geometric means: the base and new columns agree
    detail.update(base_lengths=[b for b, _ in both], new_lengths=[n for _, n in both], log_ratios=logs)
    if all(x == 0.0 for x in logs):
        return Verdict("same", 0.0, f"exact on {len(both)} prompts (greedy)", "sees any change", detail=detail)
    if len(both) < 2:
        return Verdict("inconclusive", change, "1 prompt: no spread over prompts", "needs >= 2 prompts", detail=detail)
    df = len(both) - 1
    sd = statistics.stdev(logs)
    if sd == 0.0:  # every prompt moved by the same factor: no spread to doubt it
        p, lo, hi = 0.0, mean, mean
    else:
        res = sps.ttest_1samp(logs, 0.0)
        p = float(res.pvalue)
        ci = res.confidence_interval(CONFIDENCE)
        lo, hi = float(ci.low), float(ci.high)
    se = sd / math.sqrt(len(both))
    # the drop the rule calls in 90% of runs: beyond the threshold and significant (t on df, normal-free)
    needed = max(threshold, float(sps.t.ppf(1 - alpha / 2, df) + sps.t.ppf(0.9, df)) * se) if sd else threshold
    call = "within noise"
    if p < alpha and abs(change) > threshold:
        call = "improved" if change > 0 else "regression"
    detail.update(p=p, df=df, ci95=[math.expm1(lo), math.expm1(hi)], detectable_drop=needed)
    return Verdict(
        call,
        change,
        f"{p_text(p)} [{math.expm1(lo):+.1%}, {math.expm1(hi):+.1%}] (t over {len(both)} prompts, df {df})",
        f"could detect a drop >= {needed:.0%} (t on df {df}, threshold {threshold:.0%})",
        detail=detail,
    )


def _acceptance_call(p: float | None, alpha: float, base_length: float, new_length: float) -> str:
    """The verdict of either acceptance test: a direction where p < alpha and the length moved."""
    moved = new_length != base_length
    if p is not None and p < alpha and moved:
        return "improved" if new_length > base_length else "regression"
    return "within noise" if moved else "same"


def _sampled_acceptance(
    base_length: float, new_length: float, launch_sd: float, alpha: float, df: int | None = None
) -> Verdict:
    """One launch a side against the calibrated launch spread: (new - base) / (sd sqrt 2), referred to Student's
    t on the spread's `df` (the calibration's undamaged runs less one), so a spread from 10 runs is not taken
    as known; without a df (an older calibration's figure), the normal. An infinite sd: no calibration for the
    setting, so no claim."""
    change = relative_change(base_length, new_length)
    if math.isinf(launch_sd):
        return Verdict(
            _acceptance_call(None, alpha, base_length, new_length),
            change,
            "sampled, no launch spread calibrated for this setting (CALIBRATE_TEMPERATURE=T scripts/calibrate_acceptance.sh)",
            "could detect no drop",
            detail={"p": None, "alpha": alpha, "launch_sd": None},
        )
    se = launch_sd * math.sqrt(2.0)
    moved = new_length != base_length
    ref = sps.t(df) if df else sps.norm()
    p = float(2 * ref.sf(abs(new_length - base_length) / se)) if se > 0 else float(not moved)
    drop = float(ref.ppf(1.0 - alpha / 2.0)) * se
    on = f", t on {df} df" if df else ", normal"
    return Verdict(
        _acceptance_call(p, alpha, base_length, new_length),
        change,
        f"{p_text(p)} (sampled: one launch a side, launch spread {launch_sd:.3f} from the sampled A/A{on})",
        f"could detect a drop >= {drop:.2g} tokens",
        detail={"p": p, "alpha": alpha, "launch_sd": launch_sd, "launch_df": df, "detectable_drop": drop},
    )


def noisy(
    base: list,
    new: list,
    *,
    metric: str,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    paired: bool = False,
    busy: str | None = None,
) -> Verdict:
    """A speed metric on its samples (significance.judge): beyond the threshold and p < alpha, or no claim.
    `busy` (why the machine was not quiet) makes it inconclusive whatever the samples say."""
    m = metrics.METRIC[metric]
    if metric not in SAMPLED:
        return Verdict(NOT_GATED, evidence="no samples")
    if busy:  # other work on the machine moves speed more than code does: not evidence either way
        return Verdict("inconclusive", evidence=busy, power="sees nothing on a busy machine", speed=True)
    unit = "rounds" if paired else "samples a side"
    if not paired and (len(stats.clean(base)) < 2 or len(stats.clean(new)) < 2):
        needed = significance.samples_needed(alpha)
        return Verdict(
            "inconclusive",
            evidence=f"samples {len(base)} vs {len(new)}",
            power=f"needs >= {needed} {unit}",
            speed=True,
            detail={"alpha": alpha, "needed": needed, "detectable": None},
        )
    j = significance.judge(
        base, new, higher_is_better=m.higher_is_better, threshold=threshold, alpha=alpha, paired=paired
    )
    parts = []
    if j.get("p") is not None:
        parts.append(p_text(j["p"]))
    if j.get("ci95"):
        lo, hi = j["ci95"]
        parts.append(f"[{lo:+.1%}, {hi:+.1%}] {stats.interval_label(j.get('coverage'), CONFIDENCE)}")
    parts.append("(sign test)" if paired else "(Mann-Whitney)")
    if j.get("needed"):
        power = f"needs >= {j['needed']} {unit}"
    elif j.get("detectable") is None:  # e.g. a zero base median: no relative change to speak of
        power = "could detect nothing"
    else:
        power = f"could detect >= {j['detectable']:.1%}"
    return Verdict(j["verdict"], j["change"], " ".join(parts), power, j.get("detectable"), speed=True, detail=j)


def launches(
    blocks: list[nested.Block],
    *,
    metric: str,
    sigma_launch: float | None,
    sigma_round: float | None = None,
    source: str = "",
    threshold: float = DEFAULT_THRESHOLD,
    alpha_look: float = DEFAULT_ALPHA,
    final: bool = True,
    curve: dict[str, Any] | None = None,
) -> Verdict:
    """A speed metric of `eagle-fix ab` judged with the launch as the unit (eagle_fix.core.nested.launch_test: a
    t-test on the block means, pooled with the recorded analysis of variance where there is one), at
    `alpha_look`, the level of one look of the plan. `final`: the plan's last look, where an unsettled verdict
    is inconclusive rather than "continue". `curve` ({machine, point, detect_90}, from simulate.could_detect):
    the rule's operating curve for the plan run, which the "could detect" reads; without one the power stated
    is the test's, which ignores the threshold and the looks, and says so."""
    m = metrics.METRIC[metric]
    if metric not in SAMPLED:
        return Verdict(NOT_GATED, evidence="no samples")
    t = nested.launch_test(blocks, sigma_launch, alpha_look=alpha_look, sigma_round=sigma_round, source=source)
    decided, why = nested.decide(
        t, threshold=threshold, higher_is_better=m.higher_is_better, alpha_look=alpha_look, final=final
    )
    change = math.expm1(t.estimate) if not math.isnan(t.estimate) else None
    parts = []
    if t.p is not None:
        parts.append(p_text(t.p))
    if t.ci:
        lo, hi = (math.expm1(x) for x in t.ci)
        label = f"{1 - alpha_look:.4g} interval" if t.se is not None else "range of the launches"
        parts.append(f"[{lo:+.1%}, {hi:+.1%}] {label}")
    parts.append(f"({t.blocks} launches x {t.rounds // max(t.blocks, 1)} rounds)")
    if t.se is not None and curve and curve.get("detect_90") is not None:
        detectable = curve["detect_90"]
        power = f"could detect >= {detectable:.1%} (the rule's operating curve, {curve['machine']}'s plan)"
    elif t.se is not None:
        df = t.df or math.inf
        shift = (nested.t_ppf(1 - alpha_look / 2, df) + nested.t_ppf(0.9, df)) * t.se
        detectable = max(math.expm1(shift), threshold)
        power = f"could detect >= {detectable:.1%} (the test's 90% power on {df:.1f} df, not the rule's)"
    else:
        detectable = None
        power = "needs more launches or a recorded launch variance: eagle-fix noise"
    detail = {
        "p": t.p,
        "ci": list(t.ci) if t.ci else None,
        "se": t.se,
        "test": t.test,
        "alpha_look": alpha_look,
        "launches": t.blocks,
        "rounds": t.rounds,
        "why": why,
        "detectable": detectable,
    }
    return Verdict(decided, change, " ".join(parts), power, detectable, speed=True, detail=detail)


SYNTHETIC = "synthetic acceptance: a rate given to the engine, not measured"


def synthetic_acceptance() -> Verdict:
    """Acceptance where vLLM's synthetic sampler set it (dummy weights accept nothing): shown, never
    judged, since a change there is a change of the setting, not of the drafter."""
    return Verdict(NOT_GATED, evidence=SYNTHETIC)


def relative_change(base: float, new: float) -> float:
    """(new - base) / |base|, with a zero base giving 0 or a signed infinity."""
    if base == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return (new - base) / abs(base)


def blind(verdicts: Iterable[Verdict], minimum: float = MIN_DETECTABLE) -> list[Verdict]:
    """The gated speed rows that could not have detected a slowdown of `minimum`."""
    return [v for v in verdicts if v.speed and (v.detectable is None or v.detectable > minimum + 1e-12)]


def power_line(verdicts: Iterable[Verdict], minimum: float = MIN_DETECTABLE) -> str | None:
    """One line when some speed row could not see `minimum`; None when every one could."""
    verdicts = list(verdicts)
    speed = [v for v in verdicts if v.speed]
    bad = blind(speed, minimum)
    if not bad:
        return None
    seen = sorted(v.detectable for v in bad if v.detectable is not None)
    parts = []
    if seen:
        parts.append(
            f"{len(seen)} could detect >= {seen[0]:.1%}" + (f" to {seen[-1]:.1%}" if seen[-1] != seen[0] else "")
        )
    unseen = len(bad) - len(seen)
    if unseen:
        needs = sorted({v.power for v in bad if v.detectable is None and v.power})
        parts.append(f"{unseen} could detect nothing" + (f" ({'; '.join(needs)})" if needs else ""))
    return (
        f"power: {len(bad)} of {len(speed)} speed rows could not detect a {minimum:.0%} slowdown, the gate's "
        f"stated minimum: " + "; ".join(parts)
    )


def verdict_cell(verdict: str, power: str = "", *, strict: bool = False, note: str = "") -> str:
    """The verdict column: the verdict (upper case when it fails the gate), then its power."""
    text = verdict.upper() if verdict in failing(strict) else verdict
    if power:
        text += f", {power}"
    return text + note


def change_cell(change: float | None) -> str:
    if change is None:
        return "-"
    return "inf" if math.isinf(change) else f"{change:+.1%}"


def number_cell(v: float | None) -> str:
    if v is None:
        return "-"
    if float(v).is_integer() and abs(v) >= 100:
        return f"{v:.0f}" if abs(v) < 1e6 else f"{v:.4g}"
    return f"{v:.4g}" if abs(v) < 100 or abs(v) >= 1e6 else f"{v:.1f}"


HEADER = ("context", "mode", "arm", "fix", "metric", "base", "new", "change", "evidence", "verdict")


def table(rows: Iterable[tuple]) -> list[str]:
    """The text table of both commands: one row per point and metric, as HEADER, padded columns.
    A row is (identity dict, metric, base cell, new cell, change cell, evidence, verdict cell)."""
    cells = [HEADER]
    for identity, metric, base, new, change, evidence, verdict in rows:
        cells.append(
            (
                str(identity.get("context_len")),
                str(identity.get("mode")),
                str(identity.get("arm")),
                str(identity.get("fix") or "-"),
                metric,
                base,
                new,
                change,
                evidence,
                verdict,
            )
        )
    widths = [max(len(r[i]) for r in cells) for i in range(len(HEADER))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in cells]


def summary_line(
    n_points: int, verdicts: Iterable[str], *, threshold: float, alpha: float, strict: bool, what: str = "points"
) -> str:
    """'9 points: 1 regression, ... (threshold 5%, alpha 0.01 ...)': the counts and the rule that made them."""
    verdicts = list(verdicts)
    order = (
        "regression",
        "failed",
        "missing",
        "improved",
        "fixed",
        "within noise",
        "inconclusive",
        "same",
        NOT_GATED,
        "n/a",
        "failed-both",
    )
    counts = [(v, sum(x == v for x in verdicts)) for v in order]
    counts += sorted((v, verdicts.count(v)) for v in set(verdicts) - set(order))
    return (
        f"{n_points} {what}: "
        + ", ".join(f"{n} {v}" for v, n in counts if n)
        + f" (threshold {threshold:.0%}, alpha {alpha:g} per question over all points, Holm: the one gated "
        f"speed metric fails only beyond the threshold and significant"
        + ("; --strict: inconclusive fails" if strict else "")
        + ")"
    )
