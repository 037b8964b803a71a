"""The run loop of `eagle-fix run`: measure each planned point on the real engine and append its record.

One engine per (mode, arm, fix) serves every context length (its max_model_len covers the largest),
in its own process group; a point that kills its engine is recorded as failed and the engine restarted
for the rest. Each finished point is appended to --out at once (one write per line), so a kill -9
of the sweep loses nothing finished, and --resume skips what is there.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from eagle_fix.core import record
from eagle_fix.sweep.plan import Point, Resolved, RunArgs, injected, plan, point_timeout, prompt_len, resolve

# An engine start includes loading, KV allocation, torch.compile and a warm-up generate.
STARTUP_TIMEOUT_S = 1800.0
# Progress lines (one per point) also go here when set: asv shows a benchmark's output only at its
# end, so scripts/bench.sh points this at a file it follows on the terminal.
PROGRESS_ENV = "EAGLE_FIX_PROGRESS"


def run_sweep(args: RunArgs) -> list[dict[str, Any]]:
    """Run the sweep; returns every record of this sweep (resumed ones included)."""
    from eagle_fix.engine import lifecycle
    from eagle_fix.engine.process import EngineDied, EngineProcess
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.engine.lifecycle import Interrupted
    from eagle_fix.engine.memory import MemorySampler

    lifecycle.install_signal_handlers()  # before the doctor's subprocess and the first engine
    run = resolve(args)
    points = plan(run)
    done = record.index(record.read(run.out, missing_ok=True)) if (run.out and args.resume) else {}
    ident = {p: record.key(run.identity(p)) for p in points}
    todo = [p for p in points if ident[p] not in done]
    records: list[dict[str, Any]] = [done[ident[p]] for p in points if ident[p] in done]
    baselines = {record.key(r): r for r in records if r.get("arm") == "baseline" and r.get("status") == "ok"}
    _check_before_measuring(run, todo)
    check_resumed_settings(run, [done[ident[p]] for p in points if ident[p] in done])
    common = _common_fields(run)
    sampler = MemorySampler()
    load = LoadSampler()
    progress = _Progress(len(points), len(points) - len(todo), args.progress)
    try:
        for group in groups(todo):
            spec = engine_spec(run, group[0])
            doctor, doctor_error = _fix_state(run, group[0])
            pending = list(group)
            while pending:
                log = run.log_dir / f"{group[0].mode}-{group[0].arm}-{group[0].fix or 'none'}-{int(time.time())}.log"
                progress.status(f"start {group[0].mode}/{group[0].arm}/{group[0].fix or '-'}")
                sampler.reset_peaks()
                fields = {"common": common, "doctor": doctor, "doctor_error": doctor_error, "log": log, "spec": spec}
                try:
                    engine = EngineProcess(spec, log, startup_timeout_s=STARTUP_TIMEOUT_S)
                except EngineDied as exc:
                    for p in pending:  # an engine that cannot start fails all its points the same way
                        records.append(_emit(run, _record(run, p, fields, status="failed", error=str(exc)), progress))
                    break
                sampler.watch(engine.pid)
                try:
                    while pending:
                        p = pending.pop(0)
                        progress.status(f"{p.mode}/{p.arm}/{p.fix or '-'} @ {p.context_len}")
                        sampler.reset_peaks()
                        cmd = {"op": "point", "prompt_len": prompt_len(p.context_len, run), "batch_size": run.args.batch_size,
                               "output_len": run.output_len, "seed": args.seed, "repeats": args.repeats,
                               "ttft_repeats": args.ttft_repeats}
                        load.start(engine.pid)
                        died = None
                        try:
                            result = engine.run_point(cmd, timeout_s=point_timeout(run, p))
                        except EngineDied as exc:
                            died = exc
                        finally:
                            during = load.stop()
                        if died is not None:
                            rec = _record(run, p, fields, status="failed", error=str(died), ready=engine.ready,
                                          memory=sampler.peaks(), load=during)
                            records.append(_emit(run, rec, progress))
                            break  # restart the engine for the remaining points
                        rec = _record(run, p, fields, status="ok", result=result, ready=engine.ready,
                                      memory=sampler.peaks(), load=during)
                        if p.arm == "baseline":
                            baselines[record.key(rec)] = rec
                        else:
                            rec["speedup"] = record.speedup(rec, baselines.get(record.baseline_key(rec)))
                            rec["flags"] = record.flags(rec)  # the speedup's bound is checked too
                        records.append(_emit(run, rec, progress))
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


def _check_before_measuring(run: Resolved, todo: list[Point]) -> None:
    """What would fail at the first engine start, checked before the machine's limits are measured
    (seconds on a fresh machine, not spent on a run that cannot start): each engine's spec (what the
    profile refuses here) and the log folder, tried with a file that is removed again."""
    from eagle_fix.engine.process import open_log

    for group in groups(todo):
        engine_spec(run, group[0])
    if todo:
        probe = run.log_dir / ".eagle-fix-write-check.log"
        open_log(probe).close()
        probe.unlink(missing_ok=True)


def _finished(records: list, points: list, run: Resolved) -> str:
    where = f" in {run.out}" if run.out else ""
    return (f"{len(records)} of {len(points)} points finished{where}; resume with "
            f"`eagle-fix run ... --out {run.out} --resume`")


# --------------------------------------------------------------------------- records


def _record(run: Resolved, p: Point, fields: dict[str, Any], *, status: str, result: dict | None = None,
            error: str | None = None, ready: dict | None = None, memory: dict | None = None,
            load: dict | None = None) -> dict[str, Any]:
    rec = record.new(**run.identity(p), **fields["common"], prompt_len=prompt_len(p.context_len, run),
                     status=status, error=error, engine_log=_relative(fields["log"], run),
                     load_avg_1m=os.getloadavg()[0],  # a busy machine's speed is not evidence (compare)
                     timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    spec = fields.get("spec")
    if spec is not None:  # what was asked of the engine, recorded on failed points too
        # CPU: the VLLM_CPU_KVCACHE_SPACE budget, in the same unit
        rec["kv_cache_memory_bytes"] = spec.kv_cache_memory_bytes or (int(spec.kv_cache_gib * 2**30) if spec.kv_cache_gib else None)
        rec["gpu_memory_utilization"] = spec.gpu_memory_utilization
    if ready:
        for k in ("startup_s", "compile_s", "kv_cache_capacity_tokens", "vllm_version", "torch_version", "model_runner",
                  "compilation_mode", "cudagraph_mode", "attention_backend", "vllm_cudagraph_pool_bytes", "pinning"):
            rec[k] = ready.get(k)
    if memory:
        rec.update(memory)
    record.worker_memory(rec, (ready or {}).get("startup_memory"), (result or {}).get("worker_memory"))
    if load:  # the load over the point (LoadSampler); load_avg_1m stays the reading at its end
        rec.update(load)
    if result:
        record.summarize(rec, result)
        _roofline(rec, run)
    doctor = fields.get("doctor")
    if p.arm == "eagle3":
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
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.sweep.plan import compile_settings

    asked = dict(zip(("compilation_mode", "cudagraph_mode"), compile_settings(run)))
    for rec in done:
        if rec.get("mode") != "compile":
            continue
        for key, want in asked.items():
            if want is not None and rec.get(key) is not None and rec[key] != want:
                raise EagleFixError(f"--resume {run.out}: its compiled points ran with {key} {rec[key]}, this run "
                                    f"asks for {want}; write to another --out")


def _relative(path: Path, run: Resolved) -> str:
    """Records carry no absolute paths of the machine they ran on: logs relative to the output file."""
    base = run.out.parent if run.out else Path.cwd()
    return os.path.relpath(path, base)


def _emit(run: Resolved, rec: dict[str, Any], progress: "_Progress") -> dict[str, Any]:
    if run.out is not None:
        record.append(run.out, rec)
    progress.point(rec)
    return rec


def _common_fields(run: Resolved) -> dict[str, Any]:
    """Where every point of this sweep runs: the machine's fingerprint and its measured limits
    (before any engine starts, cached per fingerprint for a day), the code, the knobs."""
    from eagle_fix.machine import host as machine
    from eagle_fix.machine.device import device_info

    fp = machine.fingerprint()
    env = injected() or None
    return {"device": device_info(), "git_commit": machine.git_commit(), "env": env, "machine": fp,
            "machine_id": fp["id"], "machine_name": fp["name"], "limits": limits_with_age(machine.limits()),
            "synthetic_acceptance": run.profile.synthetic_acceptance_length is not None}


def limits_with_age(limits: Any, now: _dt.datetime | None = None) -> Any:
    """The limits as measured, with how old they were when this sweep started (`age_s`) beside
    `cached`: a figure cached hours ago says nothing of the contention of this run, and a reader
    has to see that it was cached, and when it was measured, to know what it stands for."""
    if not isinstance(limits, dict):
        return limits
    out = dict(limits)
    out.setdefault("cached", None)
    try:
        measured = _dt.datetime.fromisoformat(str(out.get("measured_at")))
        if measured.tzinfo is None:
            measured = measured.replace(tzinfo=_dt.timezone.utc)
        now = now or _dt.datetime.now(_dt.timezone.utc)
        out["age_s"] = max(0, round((now - measured).total_seconds()))
    except ValueError:
        out["age_s"] = None  # no or unreadable measured_at: the age is unknown, not zero
    return out


class LoadSampler:
    """The machine's load over one point, sampled by a background thread of the sweep's process
    while the engine measures: the 1-minute load average every `interval_s` (its mean and maximum
    over the point, not one reading at its end, which misses a run that came and went mid-point), and
    the cores other processes kept busy on average (from /proc/stat, less the CPU time of this
    process and of the engine's process tree). A process of the tree that exits during the point
    takes its time with it, so `other_busy_cores` can only overstate others' work, never hide it."""

    def __init__(self, interval_s: float = 1.0):
        self.interval_s = interval_s
        self._thread: threading.Thread | None = None
        self._result: dict[str, Any] | None = None

    def start(self, pid: int | None) -> None:
        self.stop()
        self._pid, self._result = pid, None
        self._samples = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._t0, self._busy0, self._own0 = time.monotonic(), _machine_busy_s(), self._own_cpu()
        self._thread = threading.Thread(target=self._loop, name="eagle-fix-load", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._samples.append(os.getloadavg()[0])

    def stop(self) -> dict[str, Any] | None:
        """Stop sampling; the record fields of the point (None when nothing was started). Idempotent."""
        if self._thread is None:
            return self._result
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._samples.append(os.getloadavg()[0])
        elapsed = time.monotonic() - self._t0
        busy1, own1 = _machine_busy_s(), self._own_cpu()
        others = None
        if self._busy0 is not None and busy1 is not None and elapsed > 0:
            own = sum(own1.get(k, 0.0) - self._own0.get(k, 0.0) for k in own1)
            others = round(max(0.0, (busy1 - self._busy0 - own) / elapsed), 2)
        self._result = {"load_avg_mean": round(sum(self._samples) / len(self._samples), 2),
                        "load_avg_max": round(max(self._samples), 2), "other_busy_cores": others}
        return self._result

    def _own_cpu(self) -> dict[Any, float]:
        """CPU seconds of this process and of the engine's process tree, by process."""
        t = os.times()
        out: dict[Any, float] = {"self": t.user + t.system}
        if self._pid is None:
            return out
        try:
            import psutil

            root = psutil.Process(self._pid)
            procs = [root] + root.children(recursive=True)
        except Exception:  # noqa: BLE001 -- no psutil, or the engine already gone: the machine's figure alone
            return out
        for proc in procs:
            try:
                c = proc.cpu_times()
                out[(proc.pid, proc.create_time())] = c.user + c.system
            except Exception:  # noqa: BLE001 -- exited between listing and reading
                continue
        return out


def _machine_busy_s() -> float | None:
    """CPU seconds the whole machine spent busy since boot (/proc/stat: user, nice, system, irq,
    softirq; steal is the host's, not a process's); None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _roofline(rec: dict[str, Any], run: Resolved) -> None:
    """%-of-roofline of a measured point against the limits measured in the same run."""
    from eagle_fix.machine import host as machine
    from eagle_fix.fix.checkpoint import read_config

    if not rec.get("limits"):
        return
    work = machine.point_work(run.profile.target_config(),  # the profile's hf_overrides applied (reduced depth)
                              read_config(run.profile.draft, "draft") if rec["arm"] == "eagle3" else None,
                              context_len=rec["context_len"], batch_size=rec["batch_size"],
                              k=rec["num_speculative_tokens"] or run.args.num_speculative_tokens)
    roof = machine.roofline(work, rec["limits"], ttft_s=rec.get("ttft_s"), decode_tok_s=rec.get("decode_throughput_tok_s"),
                            acceptance_length=rec.get("acceptance_length") if rec["arm"] == "eagle3" else None,
                            batch_size=rec["batch_size"])
    for k in ("prefill_pct_of_peak_flops", "decode_pct_of_bandwidth", "sol_decode_tok_s_baseline", "sol_decode_tok_s_eagle3",
              "roofline_flags"):
        rec[k] = roof.get(k)


# --------------------------------------------------------------------------- engines

def groups(points: Iterable[Point]) -> list[list[Point]]:
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        groups.setdefault((p.mode, p.arm, p.fix), []).append(p)
    return list(groups.values())


def engine_spec(run: Resolved, p: Point):
    from eagle_fix.engine.process import EngineSpec
    from eagle_fix.sweep.plan import compile_settings

    prof = run.profile
    prof.check_runs_here()  # what this engine refuses (the synthetic sampler on CPU): one line, no engine start
    compilation_mode, cudagraph_mode = compile_settings(run)
    return EngineSpec(
        target=str(Path(prof.target).resolve()),  # the engine runs in its log's folder
        draft=str(Path(prof.draft).resolve()) if p.arm == "eagle3" else None,
        mode=p.mode,
        fix=p.fix,
        max_model_len=max(run.contexts),
        num_speculative_tokens=run.args.num_speculative_tokens,
        load_format=prof.load_format,
        synthetic_acceptance_length=prof.synthetic_acceptance_length,
        max_num_batched_tokens=getattr(prof, "max_num_batched_tokens", None),
        kv_cache_gib=prof.kv_cache_gib if prof.device == "cpu" else None,
        max_num_seqs=max(run.args.batch_size, 1),
        gpu_memory_utilization=getattr(prof, "gpu_memory_utilization", None),
        seed=run.args.seed,
        hf_overrides=prof.hf_overrides_dict(),
        compilation_mode=compilation_mode,
        cudagraph_mode=cudagraph_mode,
        kv_cache_memory_bytes=kv_budget(run, p) if prof.device == "cuda" else None,
    )


def kv_budget(run: Resolved, p: Point) -> int:
    """A CUDA engine's KV budget: the profile's, else what this sweep's longest sequence needs
    (target and, on the EAGLE3 arm, draft layers) for the batch (eagle_fix.machine.host.kv_budget_bytes)."""
    from eagle_fix.fix.checkpoint import read_config
    from eagle_fix.machine.host import kv_budget_bytes

    prof = run.profile
    if getattr(prof, "kv_cache_memory_bytes", None):
        return int(prof.kv_cache_memory_bytes)
    draft = read_config(prof.draft, "draft") if p.arm == "eagle3" else None
    return kv_budget_bytes(prof.target_config(), draft, max_model_len=max(run.contexts),
                           max_num_seqs=max(run.args.batch_size, 1))



def _fix_state(run: Resolved, p: Point) -> tuple[dict[str, Any] | None, str | None]:
    """The doctor's report for this arm, from a child process (the plugin mode is per process), or
    why it could not be had (recorded on the record: a doctor failure is not swallowed)."""
    if p.arm == "baseline":
        return None, None
    from eagle_fix.engine.process import FIX_MODES

    env = {**os.environ, "EAGLE_FIX_MODE": FIX_MODES[p.fix or "on"], "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "eagle_fix.cli", "doctor", "--json", "--target", str(run.profile.target),
           "--draft", str(run.profile.draft), "--max-model-len", str(max(run.contexts)),
           "--num-speculative-tokens", str(run.args.num_speculative_tokens)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"doctor did not run: {exc}"
    try:
        return json.loads(out.stdout), None
    except ValueError:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"doctor exited {out.returncode}: {tail[:300]}"


# --------------------------------------------------------------------------- progress


class _Progress:
    """A tqdm bar on the terminal and one plain line per finished point (context, mode, arm,
    elapsed, decode tok/s), also appended to $EAGLE_FIX_PROGRESS when set."""

    def __init__(self, total: int, initial: int, enabled: bool):
        self.start = time.monotonic()
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="point", dynamic_ncols=True, file=sys.stderr)
        self.path = os.environ.get(PROGRESS_ENV)

    def status(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description(text)

    def point(self, rec: dict[str, Any]) -> None:
        decode = rec.get("decode_throughput_tok_s")
        line = (f"[eagle-fix] {rec['context_len']} {rec['mode']} {rec['arm']}{' fix ' + rec['fix'] if rec.get('fix') else ''}: "
                f"{rec['status']}, {time.monotonic() - self.start:.0f} s elapsed"
                + (f", decode {decode:.1f} tok/s" if decode else "")
                + (f", acceptance {rec['acceptance_length']:.2f}" if rec.get("acceptance_length") else ""))
        if rec["status"] != "ok":
            line += f": {record.cause(rec.get('error'), 200)}"
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)
        if self.path:
            try:
                with open(self.path, "a") as f:
                    f.write(line + "\n")
            except OSError as exc:
                print(f"[eagle-fix] progress file {self.path}: {exc.strerror}", file=sys.stderr)
                self.path = None

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
