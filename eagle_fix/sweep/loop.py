"""The run loop of `eagle-fix run`: measure each planned point on the real engine and append its record.

One engine per (mode, arm, fix) serves every context length (its max_model_len covers the largest),
in its own process group; a point that kills its engine is recorded as failed and the engine restarted
for the rest. Each finished point is appended to --out at once (one write per line), so a kill -9
of the sweep loses nothing finished, and --resume skips what is there.
"""

from __future__ import annotations

import copy
import datetime as _dt
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from eagle_fix.core import acceptance, arms, metrics, parity, record
from eagle_fix.core.arms import arm
from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine import lifecycle
from eagle_fix.engine.lifecycle import Interrupted
from eagle_fix.engine.logs import open_log
from eagle_fix.engine.memory import MemorySampler
from eagle_fix.engine.offline import EngineDied, EngineProcess
from eagle_fix.engine.protocol import PointReply
from eagle_fix.engine.spec import PLUGIN_MODE_OF_ARM
from eagle_fix.fix.checkpoint import read_config
from eagle_fix.fix.plugin import MODE_ENV
from eagle_fix.machine.device import device_info
from eagle_fix.machine.fingerprint import fingerprint, git_commit
from eagle_fix.machine.limits import limits as machine_limits
from eagle_fix.machine.roofline import point_work, roofline
from eagle_fix.sweep.load import LoadSampler, limits_with_age
from eagle_fix.sweep.plan import Point, Resolved, RunArgs, injected, plan, point_timeout, resolve
from eagle_fix.sweep.progress import Progress

# An engine start includes loading, KV allocation, torch.compile and a warm-up generate.
STARTUP_TIMEOUT_S = 1800.0


def run_sweep(args: RunArgs) -> list[dict[str, Any]]:
    """Run the sweep; returns every record of this sweep (resumed ones included)."""
    lifecycle.install_signal_handlers()  # before the doctor's subprocess and the first engine
    run = resolve(args)
    points = plan(run)
    done = record.index(record.read(run.out, missing_ok=True)) if (run.out and args.resume) else {}
    ident = {p: record.key(run.identity(p)) for p in points}
    todo = [p for p in points if ident[p] not in done]
    records: list[dict[str, Any]] = [done[ident[p]] for p in points if ident[p] in done]
    baselines = {record.key(r): r for r in records if arms.is_baseline(r.get("arm")) and r.get("status") == "ok"}
    _check_before_measuring(run, todo)
    check_resumed_settings(run, [done[ident[p]] for p in points if ident[p] in done])
    common = _common_fields(run)
    sampler = MemorySampler()
    load = LoadSampler()
    progress = Progress(len(points), len(points) - len(todo), args.progress)
    try:
        for group in groups(todo):
            spec = run.engine_spec(group[0])
            doctor, doctor_error = _fix_state(run, group[0])
            pending = list(group)
            while pending:
                engine_words = replace(group[0], context_len=None)
                log = run.log_dir / f"{engine_words.words('engine')}-{int(time.time())}.log"
                progress.status(f"start {engine_words.words()}")
                sampler.reset_peaks()
                fields = {"common": common, "doctor": doctor, "doctor_error": doctor_error, "log": log, "spec": spec}
                try:
                    engine = EngineProcess(spec, log, startup_timeout_s=STARTUP_TIMEOUT_S)
                except EngineDied as exc:
                    for p in pending:  # an engine that cannot start fails all its points the same way
                        records.append(
                            _emit(run, _record(run, p, fields, status="failed", error=str(exc)), progress, records)
                        )
                    break
                sampler.watch(engine.pid)
                try:
                    while pending:
                        p = pending.pop(0)
                        progress.status(p.words())
                        sampler.reset_peaks()
                        load.start(engine.pid)
                        died = None
                        try:
                            result = engine.run_point(run.command(p), timeout_s=point_timeout(run, p))
                        except EngineDied as exc:
                            died = exc
                        finally:
                            during = load.stop()
                        if died is not None:
                            rec = _record(
                                run,
                                p,
                                fields,
                                status="failed",
                                error=str(died),
                                ready=engine.ready,
                                memory=sampler.peaks(),
                                load=during,
                            )
                            records.append(_emit(run, rec, progress, records))
                            break  # restart the engine for the remaining points
                        rec = _record(
                            run,
                            p,
                            fields,
                            status="ok",
                            result=result,
                            ready=engine.ready,
                            memory=sampler.peaks(),
                            load=during,
                        )
                        died = _more_prompts(run, p, engine, rec, result, progress) if run.args.prompts > 1 else None
                        if arms.is_baseline(p.arm):
                            baselines[record.key(rec)] = rec
                        else:
                            rec["speedup"] = record.speedup(rec, baselines.get(record.baseline_key(rec)))
                            rec["flags"] = record.flags(rec)  # the speedup's bound is checked too
                        records.append(_emit(run, rec, progress, records))
                        if died is not None:
                            break  # the point is kept with the prompts it measured; restart for the rest
                finally:
                    engine.close()
                    sampler.watch(None)
    except Interrupted as exc:
        raise Interrupted(f"{exc}: {_finished(records, points, run)}", exc.signum) from None
    except EagleFixError as exc:  # e.g. a log or the results file that cannot be written
        raise EagleFixError(f"{exc}; {_finished(records, points, run)}", exit_code=exc.exit_code) from None
    finally:
        load.stop()
        progress.close()
        sampler.close()
    return records


def _more_prompts(
    run: Resolved, p: Point, engine: EngineProcess, rec: dict, first: PointReply, progress
) -> EngineDied | None:
    """--prompts N: N - 1 more held-out prompts of the point on the same engine (seeds after the run's), each
    one prefill and one decode; the record's `prompts` lists every prompt, the timed one first. Their times
    are not speed samples. Returns the EngineDied that stopped them (the record keeps those measured)."""
    seed = int(run.args.seed)
    rec["prompts"] = [_prompt_entry(run, seed, first)]
    for j in range(1, run.args.prompts):
        progress.status(f"{p.words()}, prompt {j + 1} of {run.args.prompts}")
        try:
            res = engine.run_point(
                run.command(p, repeats=1, ttft_repeats=1, seed=seed + j), timeout_s=point_timeout(run, p)
            )
        except EngineDied as exc:
            rec["prompts_error"] = f"prompt {j + 1} (seed {seed + j}): {exc}"[:300]
            return exc
        rec["prompts"].append(_prompt_entry(run, seed + j, res))
    return None


def _prompt_entry(run: Resolved, seed: int, res: PointReply) -> dict[str, Any]:
    """One prompt of a point: its acceptance counts and its output's realism (distinct 4-grams over every token,
    and before the first end-of-sequence where the profile scores so), with the output ids to re-score."""
    ids = res.output_token_ids
    entry = {"seed": seed, "ttft_s": ((res.samples or {}).get("ttft_s") or [None])[0]}
    for k in ("num_drafts", "num_accepted_tokens", "acceptance_length", "drafter_coverage"):
        entry[k] = getattr(res, k)
    entry["output_distinct_4grams"] = round(acceptance.distinct_ngrams(ids, 4), 4) if ids and len(ids) >= 4 else None
    if run.profile.score_before_eos:
        entry.update(acceptance.before_eos(ids, run.profile.eos_token_ids()))
    entry["output_token_ids"] = ids
    return entry


def _check_before_measuring(run: Resolved, todo: list[Point]) -> None:
    """What would fail at the first engine start, checked before the machine's limits are measured
    (seconds on a fresh machine, not spent on a run that cannot start): each engine's spec (what the
    profile refuses here) and the log folder, tried with a file that is removed again."""
    for group in groups(todo):
        run.engine_spec(group[0])
    if todo:
        probe = run.log_dir / ".eagle-fix-write-check.log"
        open_log(probe).close()
        probe.unlink(missing_ok=True)


def _finished(records: list, points: list, run: Resolved) -> str:
    where = f" in {run.out}" if run.out else ""
    return (
        f"{len(records)} of {len(points)} points finished{where}; resume with "
        f"`eagle-fix run ... --out {run.out} --resume`"
    )


# --------------------------------------------------------------------------- records


def _record(
    run: Resolved,
    p: Point,
    fields: dict[str, Any],
    *,
    status: str,
    result: PointReply | None = None,
    error: str | None = None,
    ready: dict | None = None,
    memory: dict | None = None,
    load: dict | None = None,
) -> dict[str, Any]:
    rec = record.new(
        **run.identity(p),
        **fields["common"],
        prompt_len=run.prompt_len(p.context_len),
        status=status,
        error=error,
        engine_log=_relative(fields["log"], run),
        load_avg_1m=os.getloadavg()[0],  # a busy machine's speed is not evidence (compare)
        timestamp=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    spec = fields.get("spec")
    if spec is not None:  # what was asked of the engine, recorded on failed points too
        # CPU: the VLLM_CPU_KVCACHE_SPACE budget, in the same unit (it is per rank: the engine's is the sum)
        rec["kv_cache_memory_bytes"] = spec.kv_cache_memory_bytes or (
            int(spec.kv_cache_gib * 2**30) * spec.tensor_parallel_size if spec.kv_cache_gib else None
        )
        rec["gpu_memory_utilization"] = spec.gpu_memory_utilization
        rec["tensor_parallel_size"] = spec.tensor_parallel_size
        # the synthetic sampler stands in for a random-weight draft only (eagle_fix.sweep.road): n-gram's is real
        rec["synthetic_acceptance"] = spec.synthetic_acceptance_length is not None
    if ready:
        for k in (
            "startup_s",
            "compile_s",
            "kv_cache_capacity_tokens",
            "vllm_version",
            "torch_version",
            "model_runner",
            "compilation_mode",
            "cudagraph_mode",
            "attention_backend",
            "dtype",
            "vllm_cudagraph_pool_bytes",
            "pinning",
        ):
            rec[k] = ready.get(k)
    if memory:
        rec.update(memory)
    record.worker_memory(rec, (ready or {}).get("startup_memory"), result.worker_memory if result else None)
    if load:  # the load over the point (LoadSampler); load_avg_1m stays the reading at its end
        rec.update(load)
    if result:
        record.summarize(rec, result.samples, result.acceptance())
        rec["output_token_ids"] = result.output_token_ids
        rec["output_logprob_margins"] = result.output_logprob_margins
        if run.profile.score_before_eos:  # realism before the answer ends; speed still over every token
            rec.update(acceptance.before_eos(result.output_token_ids, run.profile.eos_token_ids()))
        _roofline(rec, run)
    doctor = fields.get("doctor")
    if arms.takes_fix(p.arm):  # the doctor judges the draft of an arm that takes the fix
        rec["doctor_error"] = fields.get("doctor_error")
        if doctor:
            rec["fix_state"] = doctor.get("verdict")
            rec["draft_rotary_positions"] = (doctor.get("draft") or {}).get("effective_max_position_embeddings")
    rec["flags"] = record.flags(rec)
    return rec


def check_resumed_settings(run: Resolved, done: list[dict[str, Any]]) -> None:
    """--resume of a file whose compiled points ran with another compilation or CUDA-graph mode
    than this run asks for: refused in one line (the point identity does not carry the modes, so
    the two would pass for one measurement)."""
    asked = dict(zip(("compilation_mode", "cudagraph_mode"), run.compile_settings()))
    for rec in done:
        if rec.get("mode") != "compile":
            continue
        for key, want in asked.items():
            if want is not None and rec.get(key) is not None and rec[key] != want:
                raise EagleFixError(
                    f"--resume {run.out}: its compiled points ran with {key} {rec[key]}, this run "
                    f"asks for {want}; write to another --out"
                )


def _relative(path: Path, run: Resolved) -> str:
    """Records carry no absolute paths of the machine they ran on: logs relative to the output file."""
    base = run.out.parent if run.out else Path.cwd()
    return os.path.relpath(path, base)


def _emit(run: Resolved, rec: dict[str, Any], progress: Progress, earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """Write a point (flagged where it disagrees with its twin in the other mode) and show it."""
    rec["flags"] = [*rec.get("flags", []), *parity.flags(rec, earlier)]
    rec["parity_near_tie"] = parity.tie_note(rec, earlier)
    if run.out is not None:
        record.append(run.out, rec)
    progress.point(rec)
    return rec


def _common_fields(run: Resolved) -> dict[str, Any]:
    """Where every point of this sweep runs: the machine's fingerprint and its measured limits
    (before any engine starts, cached per fingerprint for a day), the code, the knobs."""
    fp = fingerprint()
    env = injected() or None
    device = device_info()
    return {
        "device": device,
        "git_commit": git_commit(),
        "env": env,
        "clocks": metrics.clocks_on((device or {}).get("kind")),
        "machine": fp,
        "machine_id": fp["id"],
        "machine_name": fp["name"],
        "limits": limits_with_age(machine_limits()),
        "synthetic_acceptance": run.profile.synthetic_acceptance_length is not None,
    }


def _roofline(rec: dict[str, Any], run: Resolved) -> None:
    """%-of-roofline of a measured point against the limits measured in the same run."""
    if not rec.get("limits"):
        return
    work = point_work(
        run.profile.target_config(),  # the profile's hf_overrides applied (reduced depth)
        {**read_config(run.profile.draft, "draft"), **run.profile.dtype_override()}
        if arms.is_eagle3(rec["arm"])
        else None,  # the work model is EAGLE3's
        context_len=rec["context_len"],
        batch_size=rec["batch_size"],
        k=rec["num_speculative_tokens"] or run.args.num_speculative_tokens,
    )
    roof = roofline(
        work,
        rec["limits"],
        ttft_s=rec.get("ttft_s"),
        decode_tok_s=rec.get("decode_throughput_tok_s"),
        acceptance_length=rec.get("acceptance_length") if arms.is_eagle3(rec["arm"]) else None,
        batch_size=rec["batch_size"],
    )
    for k in (
        "prefill_pct_of_peak_flops",
        "decode_pct_of_bandwidth",
        "sol_decode_tok_s_baseline",
        "sol_decode_tok_s_eagle3",
        "roofline_flags",
    ):
        rec[k] = roof.get(k)


# --------------------------------------------------------------------------- engines


def groups(points: Iterable[Point]) -> list[list[Point]]:
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        groups.setdefault((p.mode, p.arm, p.fix), []).append(p)
    return list(groups.values())


def _fix_state(run: Resolved, p: Point) -> tuple[dict[str, Any] | None, str | None]:
    """The doctor's report for this arm, from a child process (the plugin mode is per process), or
    why it could not be had (recorded on the record: a doctor failure is not swallowed). Only an arm that
    takes the fix has a fix state (the doctor reads the EAGLE draft)."""
    if not arm(p.arm).takes_fix:
        return None, None
    mode = PLUGIN_MODE_OF_ARM[p.fix or "on"]
    cmd = [
        sys.executable,
        "-m",
        "eagle_fix.cli",
        "doctor",
        "--json",
        "--target",
        str(run.profile.target),
        "--draft",
        str(run.profile.draft),
        "--max-model-len",
        str(max(run.contexts)),
        "--num-speculative-tokens",
        str(run.args.num_speculative_tokens),
    ]
    knobs = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("EAGLE_FIX_", "VLLM_"))))
    doctor, error = _doctor(tuple(cmd), mode, knobs)
    return copy.deepcopy(doctor), error


@functools.lru_cache(maxsize=16)
def _doctor(
    cmd: tuple[str, ...], mode: str, knobs: tuple[tuple[str, str], ...]
) -> tuple[dict[str, Any] | None, str | None]:
    """One doctor child per plugin mode, pair and knobs: the eager and compiled groups of a fix arm ask the same
    question (the doctor reads configs, not the compilation), and each answer costs a vLLM import."""
    env = {**os.environ, MODE_ENV: mode, "HF_HUB_OFFLINE": "1"}
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=300, env=env, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"doctor did not run: {exc}"
    try:
        return json.loads(out.stdout), None
    except ValueError:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"doctor exited {out.returncode}: {tail[:300]}"
