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
# The drafter counters every tensor-parallel rank keeps (each runs every step with its shard of the draft).
RANK_COUNTERS = ("spec_steps", "fits_steps", "proposals", "empty_proposals", "max_seq_len_drafted", "damaged")
# The rank whose counters and step clock a record's headline figures are: vLLM's driver worker, the
# first reply of `collective_rpc`.
HEADLINE_RANK = 0


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
    """The drafter's counters of an engine from its workers'. Tensor-parallel ranks run every step
    together, each with its own shard of the draft, so each counts the same steps: the headline is
    HEADLINE_RANK's (summing would count one step once per rank), every rank's own figures stay in
    `ranks`, and the counters on which ranks differ are named in `ranks_disagree` (a rank whose hooks
    did not install, or that drafted less). The missing hooks are every rank's."""
    if not per_worker:
        return {}
    total: dict[str, Any] = dict(per_worker[HEADLINE_RANK])
    total["missing_hooks"] = list(dict.fromkeys(h for w in per_worker for h in (w.get("missing_hooks") or [])))
    if len(per_worker) > 1:
        total["ranks"] = per_worker
        total["ranks_disagree"] = [k for k in RANK_COUNTERS if len({repr(w.get(k)) for w in per_worker}) > 1]
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
