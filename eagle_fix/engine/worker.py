"""The worker extension every engine gets (`LLM(worker_extension_cls=WORKER_EXTENSION)`, every arm): the
plugin's drafter counters and step clock next to the memory figures, read with `collective_rpc`. The figures
of a tensor-parallel engine come one reply per worker; they are merged here, once, for the offline engine
and the server alike."""

from __future__ import annotations

from typing import Any

from eagle_fix.engine.memory import WorkerMemoryExtension
from eagle_fix.fix.plugin import MODE_ENV, DrafterStatsExtension

# The one place naming the extension's import path (engines of this release load it from here).
WORKER_EXTENSION = "eagle_fix.engine.worker.WorkerExtension"
# The drafter counters summed over workers (a counter unknown on one worker is unknown in the sum).
SUMMED_COUNTERS = ("spec_steps", "fits_steps", "proposals")


class WorkerExtension(DrafterStatsExtension, WorkerMemoryExtension):
    """The drafter's counters and step times (eagle_fix.fix.plugin), and the memory figures."""


def combine_workers(per_worker: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine's figures from its workers' (tensor parallel: sums of bytes, the first worker's
    labels); `workers` keeps each one."""
    if not per_worker:
        return {}
    first = per_worker[0]
    out = {k: v for k, v in first.items() if k not in ("pid",)}
    for key in first:
        if key.endswith(("_bytes", "_blocks")):
            values = [w.get(key) for w in per_worker]
            out[key] = None if any(v is None for v in values) else sum(values)
    if len(per_worker) > 1:
        out["workers"] = per_worker
    return out


def merge_drafter_stats(per_worker: list[dict[str, Any]]) -> dict[str, Any]:
    """The drafter's counters of an engine from its workers': the first worker's fields (its step times:
    tensor-parallel workers run every step together), the counters summed, the furthest position drafted
    the largest, the missing hooks of all. A counter whose hook is missing on a worker is None there
    (unknown), and so is the sum."""
    total: dict[str, Any] = dict(per_worker[0]) if per_worker else {}
    for other in per_worker[1:]:
        for key in SUMMED_COUNTERS:
            total[key] = None if total.get(key) is None or other.get(key) is None else total[key] + other[key]
        mine, theirs = total.get("max_seq_len_drafted"), other.get("max_seq_len_drafted")
        total["max_seq_len_drafted"] = None if mine is None or theirs is None else max(mine, theirs)
        total["missing_hooks"] = list(
            dict.fromkeys((total.get("missing_hooks") or []) + (other.get("missing_hooks") or []))
        )
    return total


def plugin_missing(per_worker: list[dict[str, Any]], front_end_mode: str | None = "not asked") -> str | None:
    """Why the eagle-fix plugin is not running in this engine (a worker, or the front end, that never
    registered it), or None. An engine without it would run without the fix's backport, without the
    drafter's counters and step times, and record numbers that look like ours: it must not start."""
    absent = [str(w.get("pid", "?")) for w in per_worker if isinstance(w, dict) and not w.get("plugin_mode")]
    where = []
    if not per_worker:
        where.append("no worker answered the eagle-fix RPC")
    if absent:
        where.append(f"worker pid {', '.join(absent)}")
    if front_end_mode is None:
        where.append("the front end")
    if not where:
        return None
    return (
        f"the eagle-fix plugin did not register in the engine ({'; '.join(where)}): vLLM loads it from the "
        f"`vllm.general_plugins` entry point `eagle_fix` of this environment; reinstall eagle-fix here "
        f"(pip install -e .), and if VLLM_PLUGINS is set it must name eagle_fix ({MODE_ENV} picks its mode)"
    )
