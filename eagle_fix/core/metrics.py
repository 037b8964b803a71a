"""The metric registry: every number a point carries, defined once (unit, direction, noisy or exact, the
lower-is-better form asv tracks, what its graph says), and the keys of vLLM's bench client beside ours.
The sweep, the gate, asv's glue, the report and the dashboard all read it from here."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """A number a point carries. `noisy` metrics are judged with samples and statistics; exact ones
    (counts, coverage) compare as they are. `asv` names the lower-is-better form asv tracks
    (asv assumes lower is better for every benchmark) and `to_asv` derives it from the column."""

    column: str
    label: str
    unit: str
    higher_is_better: bool
    noisy: bool
    asv: str | None = None
    asv_unit: str | None = None
    to_asv: Callable[[float], float] | None = None
    # What the asv graph of this metric shows, in words (its title and its tooltip): every asv form
    # is lower-is-better, and the graph says so.
    asv_title: str | None = None
    asv_doc: str | None = None
    # The sweep keeps every repeat of it (the gate can judge it on samples), and `ab` measures it in
    # every round (judged on the paired ratios). Memory and the speedup are one number per point.
    sampled: bool = False
    paired: bool = False
    # A paired metric `ab` records in every round and `eagle-fix noise` measures the noise of, but whose
    # verdict is shown, never gated (a second clock of the model step, kept beside the gated one).
    gated: bool = True
    # The clock a time is read on (CLOCKS says what each means); every record and ab file names it.
    clock: str | None = None


def _inverse(scale: float = 1.0) -> Callable[[float], float]:
    return lambda v: scale / v if v else math.inf


def _complement(v: float) -> float:
    return 1.0 - v


def _unused_pct(v: float) -> float:
    return 100.0 - v


METRICS: tuple[Metric, ...] = (
    Metric("decode_throughput_tok_s", "decode throughput", "tok/s", True, True, sampled=True, paired=True),
    Metric(
        "tpot_ms",
        "time per output token",
        "ms",
        False,
        True,
        "track_tpot",
        "ms",
        asv_title="decode: time per output token",
        asv_doc="Milliseconds per output token after the first (median of the decode samples); "
        "the decode cost speculation exists to lower.",
        sampled=True,
        paired=True,
    ),
    # timed inside the engine's worker (eagle_fix.fix.plugin), so the front end's scheduling, detokenizing
    # and RPCs are not in it, and a median over hundreds of steps shrugs off a burst of other work; no
    # asv benchmark name: asv's history of the existing benchmarks stays as it is
    Metric(
        "step_ms",
        "model step time (decode)",
        "ms",
        False,
        True,
        asv_title="decode: model step time",
        asv_doc="Milliseconds per model step during decode, timed in the engine's worker (execute_model "
        "and the sampling and drafting that complete it), median over the steps of a decode run "
        "(steps carrying prompt tokens left out); a step emits 1 to k+1 tokens a request.",
        sampled=True,
        paired=True,
        clock="wall",
    ),
    # The same steps on the stepping thread's CPU clock: time the thread was descheduled (another
    # process, a VM's steal) is not in it, time its OpenMP team spent on other cores is not either.
    # Observed beside step_ms to see whether it is the quieter clock (docs/statistics.md); not gated,
    # no asv benchmark: no series changes what it means.
    Metric(
        "step_cpu_ms",
        "model step thread-CPU time (decode)",
        "ms",
        False,
        True,
        sampled=True,
        paired=True,
        gated=False,
        clock="thread_cpu",
    ),
    Metric(
        "output_throughput_tok_s",
        "output throughput",
        "tok/s",
        True,
        True,
        "track_e2e_ms_per_token",
        "ms",
        _inverse(1000.0),
        asv_title="end to end: ms per output token",
        asv_doc="1000 / output tokens per second, prefill included: what one request costs per token.",
        sampled=True,
    ),
    Metric(
        "ttft_s",
        "TTFT",
        "s",
        False,
        True,
        "track_ttft",
        "seconds",
        asv_title="time to first token",
        asv_doc="Seconds to the first token: the prefill of the whole context.",
        sampled=True,
    ),
    Metric(
        "speedup",
        "speedup vs baseline",
        "x",
        True,
        True,
        "track_relative_decode_time",
        "fraction",
        _inverse(),
        asv_title="EAGLE3 decode time / no-speculation decode time",
        asv_doc="1 / speedup at the same point: below 1 speculation pays, above 1 it costs. At most k+1 "
        "tokens a step, so below 1/(k+1) is impossible and withheld.",
    ),
    Metric(
        "acceptance_length",
        "acceptance length",
        "tokens",
        True,
        False,
        "track_target_passes_per_token",
        "passes/token",
        _inverse(),
        asv_title="target passes per output token (1 / acceptance length)",
        asv_doc="1 / acceptance length from vLLM's counters: 1 means every draft was rejected, "
        "1/(k+1) every draft accepted.",
    ),
    Metric(
        "drafter_coverage",
        "drafter coverage",
        "fraction",
        True,
        False,
        "track_drafter_skipped_share",
        "fraction",
        _complement,
        asv_title="share of decode steps the drafter skipped",
        asv_doc="1 - drafter coverage, counted in the engine: vLLM's own counters count zero-filled "
        "drafts as drafts, so only this says whether speculation ran.",
    ),
    Metric(
        "peak_gpu_memory_bytes",
        "peak GPU memory",
        "bytes",
        False,
        True,
        "track_peak_gpu_memory",
        "bytes",
        asv_title="peak GPU memory",
        asv_doc="Peak GPU memory of the point (CUDA profiles only).",
    ),
    Metric(
        "peak_host_memory_bytes",
        "peak host memory",
        "bytes",
        False,
        True,
        "track_peak_host_memory",
        "bytes",
        asv_title="peak host memory",
        asv_doc="Peak resident memory of the engine's process tree.",
    ),
    # vLLM's own KV-cache usage at its peak over the point x the KV cache's size (eagle_fix.engine.measure.kv_in_use):
    # the bytes the point's context holds, where vllm_kv_cache_bytes is the budget reserved up front for the
    # longest context. Shown beside memory, never gated: it follows the context and the block size, not speed.
    Metric("peak_kv_memory_bytes", "KV cache in use (peak)", "bytes", False, False, gated=False),
    Metric("kv_cache_capacity_tokens", "KV cache capacity", "tokens", True, False),
    # %-of-roofline against the limits measured in the same run (eagle_fix.machine.roofline); asv tracks the
    # share left unused
    Metric(
        "decode_pct_of_bandwidth",
        "decode % of bandwidth",
        "%",
        True,
        True,
        "track_decode_bandwidth_unused_pct",
        "%",
        _unused_pct,
        asv_title="decode: % of memory bandwidth left unused",
        asv_doc="100 - decode's share of the memory bandwidth measured on this machine.",
    ),
    Metric(
        "prefill_pct_of_peak_flops",
        "prefill % of peak FLOP/s",
        "%",
        True,
        True,
        "track_prefill_flops_unused_pct",
        "%",
        _unused_pct,
        asv_title="prefill: % of peak FLOP/s left unused",
        asv_doc="100 - prefill's share of the matmul rate measured on this machine.",
    ),
)
METRIC = {m.column: m for m in METRICS}
# What each clock is; a record's and an ab file's `clocks` maps each timed metric to one of these.
CLOCK_MEANING = {
    "wall": "time.perf_counter in the engine's worker: elapsed time, whatever else ran",
    "thread_cpu": "time.thread_time of the worker's stepping thread: its own CPU time, not time descheduled",
}
CLOCK_MEANING["host"] = (
    "time.perf_counter in the worker on a CUDA device: the step's kernels run asynchronously (async scheduling), so "
    "it times their launch on the host, not the GPU's work; shown, never gated"
)
# Clocks whose times are shown but never gated (a record or ab file names its clocks).
UNGATED_CLOCKS = frozenset({"host"})
CLOCKS = {m.column: m.clock for m in METRICS if m.clock}


def clocks_on(device_kind: str | None) -> dict[str, str]:
    """The clock of each timed metric on this device: the worker's wall clock reads host time on CUDA."""
    return {k: ("host" if device_kind == "cuda" and v == "wall" else v) for k, v in CLOCKS.items()}


# The %-of-roofline columns and what each is a share of.
ROOFLINE_SHARES = {"prefill_pct_of_peak_flops": "the matmul peak", "decode_pct_of_bandwidth": "the copy bandwidth"}
# Per draft position (1..k): vLLM's accepted_per_pos / drafts; asv tracks the rejected share.
PER_POSITION = Metric(
    "per_position_acceptance",
    "per-position acceptance",
    "rate",
    True,
    False,
    "track_per_position_rejection",
    "rate",
    _complement,
    asv_title="rejected share per draft position",
    asv_doc="1 - vLLM's accepted_per_pos / drafts, per draft position 1..k.",
)


@dataclass(frozen=True)
class BenchMetric:
    """A key of `vllm bench serve`'s result JSON, under vLLM's own name (eagle-fix map keeps that JSON
    as it is), with our column for the same quantity where the sweep has one and how the two differ."""

    key: str
    label: str
    unit: str
    higher_is_better: bool
    ours: str | None = None  # our name of the same quantity (METRIC / PER_POSITION), or None
    differs: str = ""  # how vLLM's number differs from ours, in words


VLLM_BENCH_METRICS: tuple[BenchMetric, ...] = (
    BenchMetric(
        "output_throughput",
        "output throughput (served)",
        "tok/s",
        True,
        "output_throughput_tok_s",
        "all requests' output tokens / the benchmark's wall time, concurrent requests included; ours is one "
        "batch's output tokens / (TTFT + decode span)",
    ),
    BenchMetric(
        "total_token_throughput",
        "total token throughput (served)",
        "tok/s",
        True,
        None,
        "input and output tokens / the benchmark's wall time",
    ),
    BenchMetric("request_throughput", "request throughput", "req/s", True),
    BenchMetric(
        "median_tpot_ms",
        "median time per output token (served)",
        "ms",
        False,
        "tpot_ms",
        "median over requests of (latency - TTFT) / (output tokens - 1), measured by the client over HTTP",
    ),
    BenchMetric("mean_tpot_ms", "mean time per output token (served)", "ms", False, "tpot_ms"),
    BenchMetric("p99_tpot_ms", "p99 time per output token (served)", "ms", False, None),
    BenchMetric(
        "median_ttft_ms",
        "median time to first token (served)",
        "ms",
        False,
        "ttft_s",
        "milliseconds, queueing behind other requests included; ours is seconds of one uncached prefill",
    ),
    BenchMetric("p99_ttft_ms", "p99 time to first token (served)", "ms", False, None),
    BenchMetric(
        "median_itl_ms",
        "median inter-token latency",
        "ms",
        False,
        None,
        "gap between streamed chunks: a verified step of speculation streams several tokens at once",
    ),
    BenchMetric("p99_itl_ms", "p99 inter-token latency", "ms", False, None),
    BenchMetric("median_e2el_ms", "median end-to-end latency", "ms", False, None),
    BenchMetric(
        "spec_decode_acceptance_length",
        "acceptance length (served)",
        "tokens",
        True,
        "acceptance_length",
        "the same formula (1 + accepted / drafts) on the server's /metrics deltas over the whole benchmark",
    ),
    BenchMetric(
        "spec_decode_acceptance_rate", "draft acceptance rate", "%", True, None, "accepted / draft tokens, in percent"
    ),
    BenchMetric(
        "spec_decode_per_position_acceptance_rates",
        "per-position acceptance (served)",
        "rate",
        True,
        "per_position_acceptance",
        "the same formula, over the whole benchmark",
    ),
    BenchMetric("spec_decode_num_drafts", "drafts", "count", True, None, "counted as ours (num_drafts)"),
)
VLLM_BENCH_METRIC = {m.key: m for m in VLLM_BENCH_METRICS}
