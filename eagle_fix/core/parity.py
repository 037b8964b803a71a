"""Eager and compiled engines must agree: at one point of one run, greedy decoding gives the same
tokens in both modes, and the drafter, fed the same target, accepts as often. A compiled drafter that
drafts differently (a graph that reads a stale buffer, a rotary table sized at trace time) shows here
first, while its speed looks fine. Checked by the sweep as each point's twin (the same point in the
other mode) is recorded; a mismatch is a flag on the later record, so the report shows it and
`eagle-fix compare` fails where it is new.

Tolerance: the tokens must be identical (the committed pairs run in fp32/bf16 on one machine, and a
near-tie at some position would flip every later token, so a flip is reported with its position, for
a reader to tell a tie from a divergence in the engine logs; the records keep no logits); the
acceptance lengths' 95% intervals (count-based, eagle_fix.core.stats) must overlap."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eagle_fix.core.record import ENGINE_MODES, IDENTITY

# The flag's name (the part before the colon is what compare and the report show).
FLAG = "parity"


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


def mismatch(rec: dict[str, Any], twin: dict[str, Any]) -> str | None:
    """The parity flag between a record and its twin in the other mode, or None where they agree (or
    cannot be compared: a failed point, no tokens recorded, the same mode)."""
    if rec.get("mode") == twin.get("mode") or twin_key(rec) != twin_key(twin):
        return None
    if rec.get("status") != "ok" or twin.get("status") != "ok":
        return None
    eager, compiled = (rec, twin) if rec.get("mode") == ENGINE_MODES[0] else (twin, rec)
    a, b = eager.get("output_token_ids"), compiled.get("output_token_ids")
    if a is not None and b is not None:
        at = first_difference(list(a), list(b))
        if at is not None:
            shown = lambda ids: ids[at] if at < len(ids) else "end"
            return (
                f"{FLAG}: eager and compiled greedy outputs differ from token {at} of {max(len(a), len(b))} "
                f"({shown(a)} vs {shown(b)}): a near-tie of the target's top two logits there, or a compiled "
                "engine that computes something else"
            )
    ia, ib = _interval(eager), _interval(compiled)
    if ia and ib and (ia[1] < ib[0] or ib[1] < ia[0]):
        return (
            f"{FLAG}: acceptance eager {eager['acceptance_length']:.2f} [{ia[0]:.2f}, {ia[1]:.2f}] and compiled "
            f"{compiled['acceptance_length']:.2f} [{ib[0]:.2f}, {ib[1]:.2f}] do not overlap: the drafter drafts "
            "differently in one mode"
        )
    return None


def flags(rec: dict[str, Any], earlier: Iterable[dict[str, Any]]) -> list[str]:
    """The parity flag of a new record against its twin among the run's earlier records (the latest
    twin wins, as a re-run point replaces the earlier one)."""
    twins = [r for r in earlier if r.get("mode") != rec.get("mode") and twin_key(r) == twin_key(rec)]
    found = mismatch(rec, twins[-1]) if twins else None
    return [found] if found else []
