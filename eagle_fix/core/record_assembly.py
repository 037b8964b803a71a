"""A point's record assembled from what the engine sent back (the sweep calls these, nothing else fills them):
the worker's memory figures with the reason for every null, what the GPU figure covers, and the headline
numbers from the raw samples. Split from eagle_fix.core.record (over the 500-line limit), which re-exports them."""

from __future__ import annotations

from typing import Any

from eagle_fix.core import stats
from eagle_fix.core.metrics import METRIC


def gpu_memory_scope(rec: dict[str, Any]) -> str | None:
    """What peak_gpu_memory_bytes covers: NVML's per-process figure (`process`), the whole device above its idle
    level (`device`), or `none` where no GPU figure was read (records before the scope was written on CPU)."""
    scope = rec.get("gpu_memory_scope")
    if scope is None and rec.get("peak_gpu_memory_bytes") is None:
        return "none"
    return scope


def peaks_comparable(rec: dict[str, Any]) -> bool | None:
    """Whether a GPU point's peaks compare with its eager/compiled twin's: not where the engine captured CUDA
    graphs (their replays allocate nothing, their capture pool is set aside up front). None without a GPU
    figure; None where a compiled GPU point does not say its CUDA-graph mode."""
    on_gpu = rec.get("peak_gpu_memory_bytes") is not None or rec.get("torch_peak_allocated_bytes") is not None
    if not on_gpu:
        return None
    graphs = str(rec.get("cudagraph_mode") or "").upper()
    if rec.get("mode") == "eager" or graphs == "NONE":
        return True
    return False if graphs else None


# --------------------------------------------------------------------------- assembly
# A point's record from what the engine sent back: the sweep calls these, nothing else fills them.

# The worker's figures of the engine (read once at its start) and of the point (reset before it).
ENGINE_MEMORY = (
    "vllm_weights_bytes",
    "vllm_kv_cache_bytes",
    "vllm_activation_peak_bytes",
    "vllm_cudagraph_estimate_bytes",
)
POINT_MEMORY = (
    "torch_peak_allocated_bytes",
    "torch_peak_reserved_bytes",
    "worker_host_peak_bytes",
    "worker_host_peak_scope",
    "peak_kv_memory_bytes",
    "kv_cache_usage_peak",
)


def worker_memory(rec: dict[str, Any], engine: dict[str, Any] | None, point: dict[str, Any] | None) -> None:
    """Memory from inside the worker onto the record; every null keeps its reason in
    `memory_null_reasons` (an RPC that failed names itself for all of its fields)."""
    why: dict[str, str] = {}
    for source, keys, what in ((engine, ENGINE_MEMORY, "engine start"), (point, POINT_MEMORY, "point")):
        source = source or {}
        for k in keys:
            rec[k] = source.get(k)
            if rec[k] is None:
                reason = (
                    (source.get("null_reasons") or {}).get(k)
                    or source.get("error")
                    or f"no worker memory figures from the {what}"
                )
                why[k] = reason
    # tensor parallel: each rank's figures (the fields above are the engine's: bytes summed over ranks)
    ranks = [
        {"rank": i, **{k: w.get(k) for k in (*ENGINE_MEMORY, *POINT_MEMORY) if k in w}}
        for i, w in enumerate((point or {}).get("workers") or [])
    ]
    for i, w in enumerate((engine or {}).get("workers") or []):
        if i < len(ranks):
            ranks[i].update({k: w.get(k) for k in ENGINE_MEMORY if k in w})
    rec["memory_ranks"] = ranks or None
    point = point or {}
    if point.get("worker_host_peak_scope") not in (None, "point"):  # a figure, but the process's lifetime
        why["worker_host_peak_scope"] = (point.get("null_reasons") or {}).get("worker_host_peak_scope", "not reset")
    if point.get("reset_error"):
        why["worker_host_peak_scope"] = point["reset_error"]
    if rec.get("vllm_cudagraph_pool_bytes") is None:
        why["vllm_cudagraph_pool_bytes"] = "no CUDA graphs captured (eager, CPU) or vLLM logged no capture line"
    if rec.get("peak_gpu_memory_bytes") is None and rec.get("gpu_memory_error"):
        why["peak_gpu_memory_bytes"] = rec["gpu_memory_error"]
    rec["gpu_memory_scope"] = gpu_memory_scope(rec)
    rec["gpu_peak_comparable_across_modes"] = peaks_comparable(rec)
    rec["memory_null_reasons"] = why or None


# The acceptance counts a point's record takes from the engine's reply (the reply, eagle_fix.engine.protocol,
# also carries the worker's missing_hooks, which the record does not keep).
ACCEPTANCE_COLUMNS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "accepted_per_position",
    "acceptance_length",
    "per_position_acceptance",
    "drafter_steps",
    "drafter_proposals",
    "drafter_empty_proposals",
    "drafter_coverage",
    "max_seq_len_drafted",
    "drafter_calls_damaged",
    "drafter_ranks",
    "drafter_ranks_disagree",
)


def summarize(rec: dict[str, Any], samples: dict[str, list[float]], acceptance: dict[str, Any]) -> None:
    """Headline numbers from the engine's raw samples: the median of each noisy metric with its
    distribution-free 95% interval, acceptance (vLLM's counts and the drafter's, EAGLE3 only) with its
    count-based interval."""
    samples = {k: v for k, v in (samples or {}).items() if v}
    rec["samples"] = samples
    rec["repeats"] = len(samples.get("decode_wall_s") or [])
    rec["ttft_repeats"] = len(samples.get("ttft_s") or [])
    ci = {}
    for column, values in samples.items():
        if column in METRIC:
            rec[column] = stats.median(values)
            ci[column] = stats.median_ci(values)
    for k in ACCEPTANCE_COLUMNS:
        if k in acceptance:
            rec[k] = acceptance[k]
    if rec.get("num_drafts") and rec.get("accepted_per_position"):
        acc = stats.acceptance_interval(rec["num_drafts"], rec["accepted_per_position"])
        ci["acceptance_length"] = acc["ci95"]
        ci["per_position_acceptance"] = acc["per_position_ci95"]
        rec["acceptance_method"] = acc["method"]
    rec["ci95"] = ci
