"""One point of a sweep, defined once: its identity, its metrics (unit, direction, noisy or exact,
the lower-is-better form asv tracks), the speedup, and the JSON-lines file that holds points.

Every other stage (sweep, results, report, compare, benchmarks/) reads these definitions instead
of spelling a point's keys again: a point's identity written in several places drifts.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eagle_fix.core import arms, stats
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.metrics import METRICS, ROOFLINE_SHARES
from eagle_fix.core.point import Point

# A point's record assembled from the engine's reply lives in record_assembly (this module stays under the
# layering test's 500 lines); its names are re-exported here, so record.summarize etc. work as before.
from eagle_fix.core.record_assembly import (  # noqa: F401 - re-exported
    ACCEPTANCE_COLUMNS,
    ENGINE_MEMORY,
    POINT_MEMORY,
    gpu_memory_scope,
    peaks_comparable,
    summarize,
    worker_memory,
)

# 1: the first records (no schema key, one sample per point).
# 2: `schema`, `samples`/`ci95`, acceptance counts, `machine`, relative `engine_log`.
SCHEMA_VERSION = 2

ENGINE_MODES = ("eager", "compile")  # how the engine runs: enforce_eager, or torch.compile
# names only, for older callers: the registries (eagle_fix.core.arms) say what each name is
ARMS = arms.DEFAULT_ARMS  # what a sweep runs unless told otherwise
FIX_ARMS = tuple(arms.FIX_ARMS)  # the fix A/B arms of an arm that takes the fix (arms.FixArm: its plugin mode)

# What makes two records the same point: matched by --resume, compare, ab, the report and asv.
# `workload` and `temperature` make the regime (older records: the copy workload, greedy; see upgrade())
IDENTITY = (
    "profile",
    "context_len",
    "mode",
    "arm",
    "fix",
    "batch_size",
    "output_len",
    "num_speculative_tokens",
    "workload",
    "temperature",
)
# Where it ran: two records of one point from different machines or engines are not one history.
ENVIRONMENT = ("machine_id", "vllm_version")


# Fields the sweep writes on every record (None where a point has no such number). Records of
# schema 1 lack some; `upgrade()` fills them so every reader sees one shape.
FIELDS = (
    "schema",
    *IDENTITY,
    "prompt_len",
    "status",
    "error",
    *(m.column for m in METRICS),
    "per_position_acceptance",
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "accepted_per_position",
    "drafter_steps",
    "drafter_proposals",
    # n-gram: proposer calls that drafted nothing (no match); None where a method's proposer always drafts
    "drafter_empty_proposals",
    "max_seq_len_drafted",
    # drafter calls damaged by the acceptance gate's calibration knobs (eagle_fix.fix.damage); 0 without
    "drafter_calls_damaged",
    # vLLM's tensor_parallel_size (1 before it was recorded); above 1, each rank's drafter counters and step
    # clock, and the counters on which they differ (the headline figures are rank 0's)
    "tensor_parallel_size",
    "memory_ranks",
    "drafter_ranks",
    "drafter_ranks_disagree",
    # the first request's greedy tokens of the first decode run: the eager/compile parity check's input
    "output_token_ids",
    # and per token the margin of its top two logprobs (nats): where a flip is a near-tie (eagle_fix.core.parity)
    "output_logprob_margins",
    # profiles that score output realism before end-of-sequence (decode ignores it): distinct 4-grams of the
    # first output before its first EOS token, and that token's index (None: none came, or not scored)
    "output_distinct_4grams_before_eos",
    "eos_at",
    # set where the eager and compiled twins' outputs differ only from a near-tie on (shown, not a flag)
    "parity_near_tie",
    "samples",
    "ci95",
    "repeats",
    "ttft_repeats",
    "acceptance_method",
    "startup_s",
    "compile_s",
    "machine_id",
    "machine",
    "limits",
    "vllm_version",
    "torch_version",
    "model_runner",
    "fix_state",
    "doctor_error",
    "draft_rotary_positions",
    "flags",
    "device",
    "git_commit",
    "synthetic_acceptance",
    "env",
    # the clock each timed metric was read on (eagle_fix.core.metrics.CLOCKS; None before they were named)
    "clocks",
    "sol_decode_tok_s_baseline",
    "sol_decode_tok_s_eagle3",
    "load_avg_1m",
    "load_avg_mean",
    "load_avg_max",
    "other_busy_cores",
    "machine_name",
    "engine_log",
    "timestamp",
    # where the engine's processes ran: the frontend and engine core moved off the workers' cores
    # (eagle_fix.machine.pinning.pin_off_workers), or why not
    "pinning",
    "roofline_flags",
    # memory: what peak_gpu_memory_bytes covers (process | device) or why it is null; the worker's own
    # peaks over the point (torch's CUDA allocator; the host peak, and whether it is the point's or
    # the process's lifetime); vLLM's figures of the engine; nulls' reasons by field
    # (`none` where no GPU figure was read: a CPU engine, or an NVML failure named in gpu_memory_error)
    "gpu_memory_scope",
    "gpu_memory_error",
    # False on a compiled point whose engine captured CUDA graphs: graph replays allocate nothing, so its
    # GPU peaks are not comparable with its eager twin's (True on a GPU point without graphs; None on CPU)
    "gpu_peak_comparable_across_modes",
    # vLLM's KV-cache usage share at its peak over the point (peak_kv_memory_bytes is it in bytes)
    "kv_cache_usage_peak",
    "torch_peak_allocated_bytes",
    "torch_peak_reserved_bytes",
    "worker_host_peak_bytes",
    "worker_host_peak_scope",
    "vllm_weights_bytes",
    "vllm_kv_cache_bytes",
    "vllm_activation_peak_bytes",
    "vllm_cudagraph_pool_bytes",
    "vllm_cudagraph_estimate_bytes",
    "memory_null_reasons",
    # the engine's settings: the KV budget and device share asked for, and the compilation, CUDA-graph
    # and attention choices vLLM really made
    "kv_cache_memory_bytes",
    "gpu_memory_utilization",
    "compilation_mode",
    "cudagraph_mode",
    "attention_backend",
    "dtype",  # the models' dtype vLLM ran (None: a record from before it was kept)
    # --prompts N: one entry per held-out prompt (seed, acceptance counts, output realism, output ids), the
    # first the timed decode's; prompts_error where the engine died before the last
    "prompts",
    "prompts_error",
)


def new(**values: Any) -> dict[str, Any]:
    """A record with every field present (None where unknown); unknown names are a bug, not data."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise KeyError(f"not a record field: {sorted(unknown)}")
    rec = dict.fromkeys(FIELDS)
    rec["schema"] = SCHEMA_VERSION
    rec.update(values)
    return rec


def upgrade(rec: dict[str, Any]) -> dict[str, Any]:
    """Any schema's record in this schema's shape (older files stay readable; nothing is invented:
    a schema-1 record has no samples, so its noisy metrics cannot be judged, only shown)."""
    out = dict.fromkeys(FIELDS)
    out.update(rec)
    out["schema"] = rec.get("schema", 1)
    if out["machine_id"] is None and isinstance(rec.get("machine"), dict):
        out["machine_id"] = rec["machine"].get("id")
    if out["tpot_ms"] is None and rec.get("decode_throughput_tok_s") and out["schema"] == 1:
        # schema 1 measured decode as tokens after the first over the engine's decode span
        out["tpot_ms"] = 1000.0 * (rec.get("batch_size") or 1) / rec["decode_throughput_tok_s"]
    if out["flags"] is None:
        out["flags"] = []
    if out["workload"] is None:  # every record before the chat workload ran the copy workload, greedily
        out["workload"], out["temperature"] = "copy", 0.0 if out["temperature"] is None else out["temperature"]
    if out["tensor_parallel_size"] is None:  # every record before it was recorded ran on one worker
        out["tensor_parallel_size"] = 1
    out["gpu_memory_scope"] = gpu_memory_scope(out)  # every record says what its GPU figure covers
    if out["gpu_peak_comparable_across_modes"] is None:
        out["gpu_peak_comparable_across_modes"] = peaks_comparable(out)
    if out["clocks"] is None and out["step_ms"] is not None:  # step_ms was read on the wall clock from the start
        out["clocks"] = {"step_ms": "wall"}
    out["roofline_flags"] = list(out["roofline_flags"] or [])
    for column, limit in ROOFLINE_SHARES.items():  # records written before shares above 100% were withheld
        value, why = roofline_share(column, out[column], limit)
        if why:
            out[column] = value
            out["roofline_flags"].append(why)
    if (
        out["accepted_per_position"] is None
        and out["num_drafts"]
        and isinstance(rec.get("per_position_acceptance"), list)
    ):
        # schema 1 kept the rates; the counts behind them are rate x drafts
        out["accepted_per_position"] = [round(x * out["num_drafts"]) for x in rec["per_position_acceptance"]]
    if out["num_drafts"] and out["accepted_per_position"] and not (out["ci95"] or {}).get("acceptance_length"):
        acc = stats.acceptance_interval(out["num_drafts"], out["accepted_per_position"])
        out["ci95"] = {
            **(out["ci95"] or {}),
            "acceptance_length": acc["ci95"],
            "per_position_acceptance": acc["per_position_ci95"],
        }
        out["acceptance_method"] = out["acceptance_method"] or acc["method"]
    return out


def plain(value: Any) -> Any:
    """NaN (a missing number once it passed through pandas) is None; 8192.0 is 8192."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer():
            return int(value)
    return value


def key(rec: dict[str, Any]) -> tuple:
    """The point's identity as a tuple (for matching)."""
    return tuple(plain(rec.get(k)) for k in IDENTITY)


def fix_arm(rec: dict[str, Any]) -> str | None:
    """A record's fix arm: the EAGLE3 arm's (`on` for a record made before the fix A/B, which ran with the
    fix and says nothing), None on the baseline, which has none."""
    return (rec.get("fix") or arms.FIX_ON.name) if arms.takes_fix(rec.get("arm")) else None


def is_point(rec: dict[str, Any], *, context_len: int, mode: str, arm: str, fix: str | None = None) -> bool:
    """Whether `rec` is the point (context, mode, arm) and, on the EAGLE3 arm, of fix arm `fix` (None:
    `on`). The one matcher of a point to its record for asv, the dashboard and the report."""
    want = (fix or arms.FIX_ON.name) if arms.takes_fix(arm) else None
    return (plain(rec.get("context_len")), rec.get("mode"), rec.get("arm")) == (context_len, mode, arm) and fix_arm(
        rec
    ) == want


def describe(point_key: tuple) -> str:
    """A point's identity in words, for errors and tables."""
    return Point.of(dict(zip(IDENTITY, point_key)), profile=True).words()


def environment(rec: dict[str, Any]) -> tuple:
    return tuple(plain(rec.get(k)) for k in ENVIRONMENT)


def speedup(rec: dict[str, Any], baseline: dict[str, Any] | None) -> float | None:
    """Decode throughput over the baseline's at the same point (medians of their samples): prefill is
    the same work in both arms, so decode is where speculation can pay."""
    if not baseline or not rec.get("decode_throughput_tok_s") or not baseline.get("decode_throughput_tok_s"):
        return None
    return rec["decode_throughput_tok_s"] / baseline["decode_throughput_tok_s"]


def baseline_key(rec: dict[str, Any]) -> tuple:
    """The identity of the baseline point an EAGLE3 record's speedup divides by."""
    return key({**rec, "arm": "baseline", "fix": None, "num_speculative_tokens": None})


def busy(rec: dict[str, Any]) -> str | None:
    """Why a record's speed cannot be judged: the machine's 1-minute load was above twice its cores
    during the point (one engine loads a 2-core box to about 2; other runs make it 20 and more). The
    maximum sampled over the point (`load_avg_max`) where the record has it: a run that came and went
    while the point measured is gone from a reading at its end. Older records: that end reading."""
    during = rec.get("load_avg_max")
    load = during if during is not None else rec.get("load_avg_1m")
    machine = rec.get("machine") if isinstance(rec.get("machine"), dict) else {}
    device = rec.get("device") if isinstance(rec.get("device"), dict) else {}
    cores = (machine.get("cpu") or {}).get("cores") or device.get("cores")
    if load is None or not cores:
        return None
    if load <= 2 * cores:
        return None
    if during is not None:
        return f"machine busy (load up to {load:.1f} during the point on {cores} cores)"
    return f"machine busy (load {load:.1f} on {cores} cores)"


def flags(rec: dict[str, Any]) -> list[str]:
    """What vLLM's counters alone would hide, named so a reader (and the tests) can see it."""
    out = []
    if rec.get("num_drafts") and rec.get("drafter_coverage") == 0:
        out.append("zero_filled_drafts: the counters counted drafts but the drafter never ran")
    proposals, empty = rec.get("drafter_proposals"), rec.get("drafter_empty_proposals")
    if proposals and empty == proposals:
        out.append(f"empty_drafts: the proposer ran {proposals} times and drafted nothing (no speculation happened)")
    rotary, reached = rec.get("draft_rotary_positions"), rec.get("max_seq_len_drafted")
    k = rec.get("num_speculative_tokens") or 0
    if rotary and reached and reached + k > rotary:
        out.append(
            f"rotary_cache_overrun: drafter fed positions up to {reached + k - 1} with a {rotary}-position rotary cache"
        )
    if rec.get("doctor_error"):
        out.append("doctor_failed: the fix state of this arm is unknown")
    counters = ("drafter_steps", "drafter_proposals")
    if rec.get("num_drafts") is not None and all(c in rec for c in counters) and None in (rec[c] for c in counters):
        # the worker reports a counter as None when its hook is missing on the runner in use (a
        # record always has both fields; a partial dict without them says nothing about hooks)
        out.append(
            f"missing_hook: the drafter counters are not hooked on model runner {rec.get('model_runner') or '?'} "
            "(the engine log's eagle-fix line names the release, runner and hook): drafter coverage unmeasured"
        )
    if rec.get("drafter_ranks_disagree"):
        out.append(
            f"ranks_disagree: the tensor-parallel ranks' drafter counters differ ({', '.join(rec['drafter_ranks_disagree'])}); "
            f"the headline is rank 0's, drafter_ranks has each"
        )
    out.extend(implausible(rec))
    return out


def implausible(rec: dict[str, Any]) -> list[str]:
    """Numbers no engine can produce: a verified step yields at most k + 1 tokens, so neither the
    acceptance length nor the decode speedup can pass k + 1, and coverage is a share. Such a point is
    kept in the records with this flag and left out of the gate and the dashboard."""
    out = []
    k = rec.get("num_speculative_tokens")
    bounds = {"drafter_coverage": 1.0}
    if k:
        bounds.update(acceptance_length=k + 1.0, speedup=k + 1.0)
    for column, bound in bounds.items():
        value = rec.get(column)
        if isinstance(value, (int, float)) and not math.isnan(value) and value > bound * (1 + 1e-9):
            out.append(f"implausible: {column} {value:.3g} above its bound {bound:g}")
    return out


def roofline_share(column: str, pct: Any, limit: str) -> tuple[float | None, str | None]:
    """A %-of-roofline share as it may be published, and why not where it may not: a point cannot
    run above a limit of its machine, so a share above 100% means the limit was measured on other
    kernels than the engine's. The share is then withheld (None), never shown or tracked as a
    negative "unused" share, and the reason keeps the number."""
    if not isinstance(pct, (int, float)) or isinstance(pct, bool) or math.isnan(pct) or pct <= 100:
        return pct, None
    name = {"prefill_pct_of_peak_flops": "prefill_above_peak", "decode_pct_of_bandwidth": "decode_above_bandwidth"}.get(
        column, f"{column}_above_100"
    )
    return None, (
        f"{name}: {column} would be {pct:.0f}% of {limit}; the limit is not one of the "
        f"kernels this engine ran, so the share is withheld"
    )


def cause(error: str | None, width: int = 160) -> str:
    """The telling part of a failed point's error for one line: what died and why (the engine's
    `cause: ...` when its log named one), without the log's tail."""
    first = str(error or "").splitlines()[0] if error else ""
    parts = [p for p in first.split("; ") if not p.startswith("log: ")]
    why = [p[len("cause: ") :] for p in parts if p.startswith("cause: ")]
    who = [p for p in parts if not p.startswith("cause: ")][:1]
    return "; ".join(who + why)[:width]


# --------------------------------------------------------------------------- JSON lines


def append(path: Path, rec: dict[str, Any]) -> None:
    """One os.write of one whole line with O_APPEND, then fsync: a killed sweep leaves whole lines.
    A full or unwritable disk is one line naming the file; the lines already there stay."""
    line = (json.dumps(rec, default=str) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            if written != len(line):
                os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - written)  # never leave half a line
                raise OSError(28, "short write (no space left on device?)")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise EagleFixError(
            f"cannot write {path}: {exc.strerror or exc}; the lines already in it are kept — "
            f"free space or choose another --out, then add --resume"
        ) from None


def read(path: str | os.PathLike, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """The records of one JSON-lines file, upgraded to this schema. A torn *last* line (a run killed
    mid-write) is dropped with a warning; a bad line anywhere else is an error naming file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        if missing_ok:
            return []
        raise EagleFixError(f"{path}: no such file", exit_code=2) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EagleFixError(f"{path}: cannot read ({exc})", exit_code=2) from None
    while lines and not lines[-1].strip():
        lines.pop()
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines):
                warnings.warn(f"{path}:{i}: torn last line dropped ({exc.msg})", stacklevel=2)
                break
            raise EagleFixError(
                f"{path}:{i}: not a JSON line ({exc.msg}); is this an `eagle-fix run` output file?", exit_code=2
            ) from None
        if not isinstance(rec, dict) or "context_len" not in rec or "mode" not in rec:
            raise EagleFixError(f"{path}:{i}: not an `eagle-fix run` record (needs context_len and mode)", exit_code=2)
        records.append(upgrade(rec))
    return records


def index(records: Iterable[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """Points by identity; a later line wins (a resumed or re-run point replaces the earlier one)."""
    return {key(r): r for r in records}
