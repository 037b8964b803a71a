"""The decision rule's two choices that cut across points (docs/benchmarks.md, "What fails the gate: one
question, one alpha"): which one speed metric a point is gated on, and how the rows of one question share one
alpha over a run (Holm's step-down procedure). eagle_fix.gate.verdict re-exports them."""

from __future__ import annotations

import math
from collections.abc import Callable

from eagle_fix.core import metrics

# One speed metric is gated per point (docs/benchmarks.md, "What fails the gate"): step_ms, the model step
# timed inside the engine's worker, which leaves out the front end's scheduling and RPCs and is a median over a
# run's steps (the quietest clock of the model's work); TPOT and decode throughput time the same steps with the
# front end added (decode throughput is TPOT's reciprocal: the same |z|), so gating them too would spend alpha
# three times on one question. Where step_ms is not measured on both sides or is read on a clock that carries
# no verdict (the host clock on CUDA), TPOT stands in. Every other speed metric is shown, not gated.
GATED_SPEED = ("step_ms", "tpot_ms")
# The family-wise rule: each question (is it slower: the gated speed metric; did the drafter get worse: the
# acceptance test) gets one alpha over all the points of a run, by Holm's step-down procedure on the rows'
# p-values; a row of `ab` that looked L times enters with min(1, L * p) (alpha spent evenly over its looks).
FAMILY_RULE = "holm"


def gated_speed(measured: Callable[[str], bool], clocks: dict[str, str] | None = None) -> str | None:
    """The one speed metric a point is gated on: the first of GATED_SPEED both sides measured (MEASURED(metric))
    on a clock that carries a verdict; None when neither was."""
    for m in GATED_SPEED:
        if measured(m) and (clocks or {}).get(m) not in metrics.UNGATED_CLOCKS:
            return m
    return None


def holm(pvalues: list[float], alpha: float) -> tuple[list[bool], list[float]]:
    """Holm's step-down procedure (statsmodels' multipletests): which of PVALUES are rejected with the
    family-wise error at ALPHA, and their adjusted p-values."""
    if not pvalues:
        return [], []
    import gc

    from statsmodels.stats.multitest import multipletests  # imported here: seconds, and only a verdict needs it

    # statsmodels' Holm branch ends in a full gc.collect(): 0.03-0.5 s a call in a process that holds vLLM's
    # and torch's heap, paid per verdict (200 verdicts took 117 s in CI's test process). gc.collect is made a
    # no-op for the call; the procedure itself is statsmodels'.
    collect = gc.collect
    gc.collect = _no_collect
    try:
        reject, adjusted, _, _ = multipletests(pvalues, alpha=alpha, method="holm")
    finally:
        gc.collect = collect
    return [bool(r) for r in reject], [float(a) for a in adjusted]


def _no_collect(*_args: object) -> int:
    """gc.collect during holm(): nothing collected (the cyclic collector still runs on its own schedule)."""
    return 0


def family_verdict(
    current: str, *, reject: bool, change: float | None, threshold: float, higher_is_better: bool
) -> str:
    """A row's verdict once the family has spoken: a regression (improvement) only where Holm rejects its
    hypothesis and the change is beyond the threshold the wrong (right) way; a row Holm does not reject is
    within noise; verdicts that make no claim (inconclusive, same, not gated, failed) stay."""
    if current not in ("regression", "improved", "within noise"):
        return current
    if reject and change is not None and not math.isnan(change):
        worse = -change if higher_is_better else change
        if worse > threshold:
            return "regression"
        if worse < -threshold:
            return "improved"
    return "within noise"
