"""Eager and compiled engines must agree: at one point of one run, greedy decoding gives the same
tokens in both modes, and the drafter, fed the same target, accepts as often. A compiled drafter that
drafts differently (a graph that reads a stale buffer, a rotary table sized at trace time) shows here
first, while its speed looks fine. Checked by the sweep as each point's twin (the same point in the
other mode) is recorded; a mismatch is a flag on the later record, so the report shows it and
`eagle-fix compare` fails where it is new.

Tolerance: the tokens must be identical, except at a near-tie. Each record keeps, per token of its
first request, the margin between the top two logprobs (`output_logprob_margins`, from vLLM's own
logprobs of the first decode run). Where the outputs first differ and either mode's margin there is
below NEAR_TIE_NATS, the two modes' numerics (bf16 rounding, another kernel order) may pick either
token: that is a near-tie, recorded on the record (`parity_near_tie`) and not a flag. Otherwise, or
where no margin was recorded (records before margins), a flip is the `parity` flag with its position.
The acceptance lengths' 95% intervals (count-based, eagle_fix.core.stats) must overlap.

Under sampling the tokens are draws and are not compared, and acceptance is a random quantity whose launches
scatter more than their drafts' counts say (the sampled A/A in results/calibration: launch sd 0.089 where the
counts imply 0.058). So sampled twins are judged only with a calibrated launch `spread` (the sd of one
launch's acceptance length at that point, from eagle_fix.gate.acceptance_power, which the sweep cannot read:
`eagle-fix compare` and the report judge them): the lengths must lie within 2.58 launch sds of each other
(z = difference / (spread x sqrt 2)), and each draft position's rate too, its Wilson interval widened by the
same factor over the counts' own sd (a drafter that gains at one position and loses at another can keep its
mean). Without a spread a sampled pair gets no claim."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from eagle_fix.core import stats
from eagle_fix.core.record import ENGINE_MODES, IDENTITY

# The flag's name (the part before the colon is what compare and the report show).
FLAG = "parity"
# vLLM logprobs asked for on the first decode run: the chosen token and its runner-up.
LOGPROBS = 2
# A flip where the top two logprobs lie closer than this (nats) is a near-tie. bf16 keeps 8 bits of mantissa:
# logits of a few units round by ~0.01-0.03, and eager and compiled kernels may round them apart, so a margin
# under 0.1 nats can flip by numerics alone; a real divergence (a stale buffer, a wrong table) shows at
# positions where the target was sure.
NEAR_TIE_NATS = 0.1
# Sampled twins differ when their acceptance lengths lie this many launch sds apart (two-sided 1%).
SAMPLED_Z = 2.576


def twin_key(rec: dict[str, Any]) -> tuple:
    """A point's identity without its mode: eager and compiled twins share it."""
    return tuple(rec.get(k) for k in IDENTITY if k != "mode")


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (a shorter list differs where it ends), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _interval(rec: dict[str, Any]) -> tuple[float, float] | None:
    ci = (rec.get("ci95") or {}).get("acceptance_length")
    return (float(ci[0]), float(ci[1])) if isinstance(ci, list | tuple) and len(ci) == 2 else None


def _pair(rec: dict[str, Any], twin: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(eager, compiled) where the two can be compared: twins in the two modes, both finished."""
    if rec.get("mode") == twin.get("mode") or twin_key(rec) != twin_key(twin):
        return None
    if rec.get("status") != "ok" or twin.get("status") != "ok":
        return None
    return (rec, twin) if rec.get("mode") == ENGINE_MODES[0] else (twin, rec)


def _flip(eager: dict[str, Any], compiled: dict[str, Any]) -> int | None:
    if (eager.get("temperature") or 0) > 0:  # sampled tokens are draws: under sampling only acceptance is compared
        return None
    a, b = eager.get("output_token_ids"), compiled.get("output_token_ids")
    return None if a is None or b is None else first_difference(list(a), list(b))


def mismatch(rec: dict[str, Any], twin: dict[str, Any], *, spread: float | None = None) -> str | None:
    """The parity flag between a record and its twin in the other mode, or None where they agree, differ
    only from a near-tie on, or cannot be compared (a failed point, no tokens recorded, the same mode, a
    sampled pair without a calibrated launch `spread`)."""
    pair = _pair(rec, twin)
    if pair is None:
        return None
    eager, compiled = pair
    if (eager.get("temperature") or 0) > 0:
        return _sampled_apart(eager, compiled, spread)
    at = _flip(eager, compiled)
    if at is not None and near_tie(eager, compiled, at) is None:
        a, b = eager["output_token_ids"], compiled["output_token_ids"]
        shown = lambda ids: ids[at] if at < len(ids) else "end"
        margin = _margin(eager, at)
        return (
            f"{FLAG}: eager and compiled greedy outputs differ from token {at} of {max(len(a), len(b))} "
            f"({shown(a)} vs {shown(b)})"
            + (
                f" where the target was sure (top-two logprob margin {margin:.2f} nats): a compiled engine that "
                "computes something else"
                if margin is not None
                else ": no logprob margins recorded to tell a near-tie from a divergence"
            )
        )
    if at is not None:  # a near-tie flipped a token: from there the modes decode different text, whose
        return None  # acceptance is not comparable (the chat regime's 32K twins: 1.82 vs 3.43)
    ia, ib = _interval(eager), _interval(compiled)
    if ia and ib and _apart(ia, ib):
        return (
            f"{FLAG}: acceptance eager {eager['acceptance_length']:.2f} [{ia[0]:.2f}, {ia[1]:.2f}] and compiled "
            f"{compiled['acceptance_length']:.2f} [{ib[0]:.2f}, {ib[1]:.2f}] do not overlap: the drafter drafts "
            "differently in one mode"
        )
    return None


def _apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] < b[0] or b[1] < a[0]


def widening(rec: dict[str, Any], spread: float) -> float:
    """How much wider than its drafts' counts say a sampled launch scatters: the launch spread over the sd
    the record's count interval implies (at least 1)."""
    ci = _interval(rec)
    counts_sd = (ci[1] - ci[0]) / (2 * 1.96) if ci else 0.0
    return max(1.0, spread / counts_sd) if counts_sd > 0 else 1.0


def _sampled_apart(eager: dict[str, Any], compiled: dict[str, Any], spread: float | None) -> str | None:
    """Sampled twins: their acceptance lengths by the launch spread, then each draft position's rate by its
    Wilson interval with the drafts discounted by the squared widening (a design effect); the flag, or None
    where they agree, no spread is calibrated or no counts were recorded."""
    if spread is None or not math.isfinite(spread) or spread <= 0:
        return None
    t = f"{FLAG}: sampled (T={eager.get('temperature'):g})"
    a, b = eager.get("acceptance_length"), compiled.get("acceptance_length")
    if a is not None and b is not None:
        z = abs(a - b) / (spread * math.sqrt(2))
        if z > SAMPLED_Z:
            return (
                f"{t}, acceptance eager {a:.2f} and compiled {b:.2f} lie {z:.1f} launch sds apart (sd {spread:.3f}, "
                "calibrated): the drafter drafts differently in one mode"
            )
    counts = [(r.get("accepted_per_position"), r.get("num_drafts")) for r in (eager, compiled)]
    if not all(acc and n for acc, n in counts):
        return None
    (pa, na), (pb, nb) = counts
    wa, wb = widening(eager, spread) ** 2, widening(compiled, spread) ** 2
    for i, (x, y) in enumerate(zip(pa, pb), start=1):
        ia, ib = _wilson(x, na, wa), _wilson(y, nb, wb)
        if ia and ib and _apart(ia, ib):
            return (
                f"{t}, draft position {i} accepted {x / na:.0%} [{ia[0]:.0%}, {ia[1]:.0%}] eager and {y / nb:.0%} "
                f"[{ib[0]:.0%}, {ib[1]:.0%}] compiled (intervals widened x{math.sqrt(max(wa, wb)):.2f} by the launch "
                "spread): the drafter drafts differently in one mode"
            )
    return None


def _wilson(accepted: float, drafts: float, design_effect: float) -> tuple[float, float] | None:
    """The 95% Wilson interval of a rate from `drafts / design_effect` effective drafts."""
    return stats.wilson_rate(accepted / drafts, drafts / design_effect)


def _margin(rec: dict[str, Any], at: int) -> float | None:
    margins = rec.get("output_logprob_margins") or []
    return margins[at] if at < len(margins) and margins[at] is not None else None


def near_tie(eager: dict[str, Any], compiled: dict[str, Any], at: int) -> str | None:
    """Where the outputs first differ at `at`: the near-tie note when either mode's top two logprobs there
    lie within NEAR_TIE_NATS, else None (no margins recorded: not a near-tie, the flip stays a flag)."""
    margins = {mode: _margin(r, at) for mode, r in (("eager", eager), ("compiled", compiled))}
    known = [m for m in margins.values() if m is not None]
    if not known or min(known) >= NEAR_TIE_NATS:
        return None
    shown = ", ".join(f"{mode} {m:.3f}" if m is not None else f"{mode} n/a" for mode, m in margins.items())
    return (
        f"outputs differ from token {at}, a near-tie there (top-two logprob margin {shown} nats < {NEAR_TIE_NATS});"
        " acceptance not compared: the modes decode different text from there"
    )


def twin_of(rec: dict[str, Any], earlier: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The latest twin of a record among the run's earlier ones (a re-run point replaces the earlier one)."""
    twins = [r for r in earlier if r.get("mode") != rec.get("mode") and twin_key(r) == twin_key(rec)]
    return twins[-1] if twins else None


def flags(rec: dict[str, Any], earlier: Iterable[dict[str, Any]]) -> list[str]:
    """The parity flag of a new record against its twin among the run's earlier records."""
    twin = twin_of(rec, earlier)
    found = mismatch(rec, twin) if twin is not None else None
    return [found] if found else []


def tie_note(rec: dict[str, Any], earlier: Iterable[dict[str, Any]]) -> str | None:
    """The near-tie a new record's outputs differ from its twin's by, if that is all they differ by (the sweep
    keeps it on the record as `parity_near_tie`, shown, not a flag)."""
    twin = twin_of(rec, earlier)
    pair = _pair(rec, twin) if twin is not None else None
    at = _flip(*pair) if pair is not None else None
    return None if at is None else near_tie(*pair, at)
