"""`eagle-fix run`: measure each point of the sweep on the real engine, one JSON line per point.

One engine per (mode, arm, fix) serves every context length (its max_model_len covers the largest),
in its own process; a point that kills its engine is recorded as failed and the engine restarted
for the rest. Each finished point is appended to --out at once (one write per line), so a kill -9
of the sweep loses nothing finished, and --resume skips what is there.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from eagle_fix.errors import EagleFixError

MODES = ("eager", "compile")
ARMS = ("eagle3", "baseline")
FIXES = ("on", "off", "upstream")
# An engine start includes loading, KV allocation, torch.compile and a warm-up generate.
STARTUP_TIMEOUT_S = 1800.0
# Keys that identify a point: --resume and `eagle-fix compare` match on them.
POINT_KEYS = ("profile", "context_len", "mode", "arm", "fix", "batch_size", "output_len", "num_speculative_tokens")
RECORD_KEYS = (
    *POINT_KEYS, "prompt_len", "status", "error", "output_throughput_tok_s", "decode_throughput_tok_s", "ttft_s",
    "acceptance_length", "per_position_acceptance", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
    "drafter_coverage", "drafter_steps", "drafter_proposals", "max_seq_len_drafted", "speedup",
    "peak_gpu_memory_bytes", "kv_cache_capacity_tokens", "peak_host_memory_bytes", "startup_s", "compile_s",
    "vllm_version", "model_runner", "fix_state", "torch_version", "device", "git_commit", "synthetic_acceptance",
    "draft_rotary_positions", "flags", "engine_log", "timestamp",
)


@dataclass(frozen=True)
class RunArgs:
    """Arguments of one sweep; every check happens in `resolved()` and each error names its flag."""

    profile: str | None = None  # None: eagle_fix.models.default_profile_name()
    target: Path | None = None
    draft: Path | None = None
    contexts: tuple[int, ...] | None = None  # None: the profile's
    modes: tuple[str, ...] = MODES
    arms: tuple[str, ...] = ARMS
    fixes: tuple[str, ...] = ("on",)
    batch_size: int = 1
    output_len: int | None = None  # None: the profile's
    num_speculative_tokens: int = 3
    out: Path | None = None
    resume: bool = False
    point_timeout_s: float | None = None  # None: scaled with the context
    log_dir: Path | None = None
    seed: int = 0
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "RunArgs":
        from eagle_fix.doctor import parse_positive_int

        return cls(
            profile=args.profile,
            target=Path(args.target) if args.target else None,
            draft=Path(args.draft) if args.draft else None,
            contexts=tuple(parse_positive_int(c, "--contexts") for c in _csv(args.contexts)) if args.contexts else None,
            modes=tuple(_csv(args.modes)),  # checked with the Python API's input, in resolve()
            arms=tuple(_csv(args.arms)),
            fixes=tuple(_csv(args.fix)),
            batch_size=parse_positive_int(args.batch_size, "--batch-size"),
            output_len=parse_positive_int(args.output_len, "--output-len") if args.output_len else None,
            num_speculative_tokens=parse_positive_int(args.num_speculative_tokens, "--num-speculative-tokens"),
            out=Path(args.out) if args.out else None,
            resume=args.resume,
            point_timeout_s=float(parse_positive_int(args.point_timeout, "--point-timeout")) if args.point_timeout else None,
            log_dir=Path(args.log_dir) if args.log_dir else None,
            seed=int(args.seed),
            progress=not args.no_progress,
        )


@dataclass(frozen=True)
class Point:
    context_len: int
    mode: str
    arm: str
    fix: str | None

    def key(self, run: "Resolved") -> tuple:
        return (run.profile.name, self.context_len, self.mode, self.arm, self.fix, run.args.batch_size,
                run.output_len, run.args.num_speculative_tokens)


@dataclass(frozen=True)
class Resolved:
    args: RunArgs
    profile: Any  # eagle_fix.models.Profile
    contexts: tuple[int, ...]
    output_len: int
    out: Path | None
    log_dir: Path


def resolve(args: RunArgs) -> Resolved:
    """Validate everything before any engine starts; nothing already written is touched."""
    from eagle_fix.models import default_profile_name, get_profile, validate_pair

    for name, values, allowed in (("--modes", args.modes, MODES), ("--arms", args.arms, ARMS), ("--fix", args.fixes, FIXES)):
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise EagleFixError(f"{name} {','.join(bad) or '(empty)'}: unknown; choose from {','.join(allowed)}")
    name = args.profile or default_profile_name(models_named=args.target is not None and args.draft is not None)
    profile = get_profile(name, target=args.target, draft=args.draft)
    target, draft = Path(profile.target), Path(profile.draft)
    validate_pair(target, draft, load_format=profile.load_format)
    contexts = tuple(args.contexts or profile.contexts)
    for c in contexts:
        if c <= 0:
            raise EagleFixError(f"--contexts {c}: must be positive, e.g. --contexts 8192,16384")
    limit = _target_limit(target)
    over = [c for c in contexts if limit is not None and c > limit]
    if over:
        raise EagleFixError(f"--contexts {over[0]} is beyond the target's limit ({limit} positions); use --contexts up to {limit}")
    output_len = args.output_len or profile.output_len
    k = args.num_speculative_tokens
    short = [c for c in contexts if c <= output_len + k + 64]
    if short:
        raise EagleFixError(f"--contexts {short[0]} leaves no room for a prompt with --output-len {output_len}; use a longer context")
    out = args.out
    if out is not None:
        _check_out(out, args.resume)
    log_dir = args.log_dir or ((out.parent / f"{out.stem}-logs") if out else Path("runs") / "logs")
    return Resolved(args=args, profile=profile, contexts=contexts, output_len=output_len, out=out, log_dir=log_dir)


def plan(run: Resolved) -> list[Point]:
    """Baselines first, so each EAGLE3 point can carry its speedup when it is written."""
    points = []
    arms = sorted(run.args.arms, key=lambda a: a != "baseline")
    for mode in run.args.modes:
        for arm in arms:
            for fix in ([None] if arm == "baseline" else run.args.fixes):
                points += [Point(c, mode, arm, fix) for c in sorted(run.contexts)]
    return points


def run_sweep(args: RunArgs) -> list[dict[str, Any]]:
    """Run the sweep; returns every record of this sweep (resumed ones included)."""
    from eagle_fix.engine import EngineDied, EngineProcess
    from eagle_fix.memory import MemorySampler, device_info

    run = resolve(args)
    points = plan(run)
    done = {tuple(r.get(k) for k in POINT_KEYS): r for r in read_records(run.out)} if (run.out and args.resume) else {}
    todo = [p for p in points if p.key(run) not in done]
    records: list[dict[str, Any]] = [done[p.key(run)] for p in points if p.key(run) in done]
    baselines = {(r["context_len"], r["mode"]): r for r in records if r.get("arm") == "baseline" and r.get("status") == "ok"}
    common = _common_fields(run, device_info())
    sampler = MemorySampler()
    bar = _progress(len(points), len(points) - len(todo), args.progress)
    try:
        for group in _groups(todo):
            spec = _engine_spec(run, group[0])
            doctor = _fix_state(run, group[0])
            pending = list(group)
            while pending:
                log = run.log_dir / f"{group[0].mode}-{group[0].arm}-{group[0].fix or 'none'}-{int(time.time())}.log"
                bar.set_description(f"start {group[0].mode}/{group[0].arm}/{group[0].fix or '-'}")
                sampler.reset_peaks()
                try:
                    engine = EngineProcess(spec, log, startup_timeout_s=STARTUP_TIMEOUT_S)
                except EngineDied as exc:
                    for p in pending:  # an engine that cannot start fails all its points the same way
                        rec = _record(run, p, common, doctor, status="failed", error=str(exc), engine_log=str(log))
                        records.append(_emit(run, rec, bar))
                    break
                sampler.watch(engine.pid)
                ready = engine.ready
                try:
                    while pending:
                        p = pending[0]
                        bar.set_description(f"{p.mode}/{p.arm}/{p.fix or '-'} @ {p.context_len}")
                        sampler.reset_peaks()
                        cmd = {"op": "point", "prompt_len": prompt_len(p.context_len, run), "batch_size": args.batch_size,
                               "output_len": run.output_len, "seed": args.seed}
                        try:
                            result = engine.run_point(cmd, timeout_s=_point_timeout(run, p))
                        except EngineDied as exc:
                            pending.pop(0)
                            rec = _record(run, p, common, doctor, status="failed", error=str(exc), ready=ready,
                                          memory=sampler.peaks(), engine_log=str(log))
                            records.append(_emit(run, rec, bar))
                            break  # restart the engine for the remaining points
                        pending.pop(0)
                        rec = _record(run, p, common, doctor, status="ok", result=result, ready=ready,
                                      memory=sampler.peaks(), engine_log=str(log))
                        if p.arm == "baseline":
                            baselines[(p.context_len, p.mode)] = rec
                        else:
                            rec["speedup"] = speedup(rec, baselines.get((p.context_len, p.mode)))
                        records.append(_emit(run, rec, bar))
                finally:
                    engine.close()
                    sampler.watch(None)
    finally:
        bar.close()
        sampler.close()
    return records


def prompt_len(context_len: int, run: Resolved) -> int:
    """The prompt that makes the sequence end at `context_len`: the engine's length is the context,
    and drafting past the prompt needs room for the output and the k draft positions."""
    return context_len - run.output_len - run.args.num_speculative_tokens - 1


# --------------------------------------------------------------------------- records

def append_record(path: Path, record: dict[str, Any]) -> None:
    """One os.write of one whole line with O_APPEND, then fsync: a killed sweep leaves whole lines."""
    line = (json.dumps(record, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_records(path: Path | None) -> list[dict[str, Any]]:
    """The whole lines of a JSON-lines file (a torn last line is ignored)."""
    if path is None or not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _emit(run: Resolved, record: dict[str, Any], bar: Any) -> dict[str, Any]:
    if run.out is not None:
        append_record(run.out, record)
    bar.update(1)
    if record["status"] != "ok":
        bar.write(f"FAILED {record['mode']}/{record['arm']}/{record['fix'] or '-'} @ {record['context_len']}: "
                  f"{record['error'].splitlines()[0][:200]}")
    return record


def _record(run: Resolved, p: Point, common: dict[str, Any], doctor: dict[str, Any] | None, *, status: str, result: dict | None = None,
            error: str | None = None, ready: dict | None = None, memory: dict | None = None, engine_log: str | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = dict.fromkeys(RECORD_KEYS)
    rec.update(common)
    rec.update(context_len=p.context_len, mode=p.mode, arm=p.arm, fix=p.fix, status=status, error=error,
               prompt_len=prompt_len(p.context_len, run),
               engine_log=engine_log, timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    if p.arm == "baseline":
        rec["num_speculative_tokens"] = None
    if ready:
        for key in ("startup_s", "compile_s", "kv_cache_capacity_tokens", "vllm_version", "torch_version", "model_runner"):
            rec[key] = ready.get(key)
    if memory:
        rec.update(memory)
    if result:
        for key in RECORD_KEYS:
            if key in result:
                rec[key] = result[key]
    if doctor:
        rec["fix_state"] = doctor.get("verdict")
        rec["draft_rotary_positions"] = (doctor.get("draft") or {}).get("effective_max_position_embeddings")
    rec["flags"] = _flags(rec)
    return rec


def _flags(rec: dict[str, Any]) -> list[str]:
    """What vLLM's counters alone would hide, named so a reader (and the tests) can see it."""
    flags = []
    if rec.get("num_drafts") and rec.get("drafter_coverage") == 0:
        flags.append("zero_filled_drafts: the counters counted drafts but the drafter never ran")
    rotary, reached = rec.get("draft_rotary_positions"), rec.get("max_seq_len_drafted")
    if rotary and reached and reached + (rec.get("num_speculative_tokens") or 0) > rotary:
        flags.append(f"rotary_cache_overrun: drafter fed positions up to {reached + rec['num_speculative_tokens'] - 1} "
                     f"with a {rotary}-position rotary cache")
    return flags


def speedup(rec: dict[str, Any], baseline: dict[str, Any] | None) -> float | None:
    """Decode throughput over the baseline's at the same point: prefill is the same work in both arms."""
    if not baseline or not rec.get("decode_throughput_tok_s") or not baseline.get("decode_throughput_tok_s"):
        return None
    return rec["decode_throughput_tok_s"] / baseline["decode_throughput_tok_s"]


def _common_fields(run: Resolved, device: dict[str, Any]) -> dict[str, Any]:
    return {
        "profile": run.profile.name,
        "batch_size": run.args.batch_size,
        "output_len": run.output_len,
        "num_speculative_tokens": run.args.num_speculative_tokens,
        "device": device,
        "git_commit": _git_commit(),
        "synthetic_acceptance": run.profile.synthetic_acceptance_length is not None,
    }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --------------------------------------------------------------------------- engines

def _groups(points: Iterable[Point]) -> list[list[Point]]:
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        groups.setdefault((p.mode, p.arm, p.fix), []).append(p)
    return list(groups.values())


def _engine_spec(run: Resolved, p: Point):
    from eagle_fix.engine import EngineSpec

    prof = run.profile
    return EngineSpec(
        target=str(prof.target),
        draft=str(prof.draft) if p.arm == "eagle3" else None,
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
    )


def _fix_state(run: Resolved, p: Point) -> dict[str, Any] | None:
    """The doctor's report for this arm, from a child process (the plugin mode is per process)."""
    if p.arm == "baseline":
        return None
    from eagle_fix.engine import FIX_MODES

    env = {**os.environ, "EAGLE_FIX_MODE": FIX_MODES[p.fix or "on"], "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "eagle_fix.cli", "doctor", "--json", "--target", str(run.profile.target),
           "--draft", str(run.profile.draft), "--max-model-len", str(max(run.contexts)),
           "--num-speculative-tokens", str(run.args.num_speculative_tokens)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        return json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _point_timeout(run: Resolved, p: Point) -> float:
    """Our own watchdog per point (asv's timeout never fires while an engine keeps logging)."""
    if run.args.point_timeout_s:
        return run.args.point_timeout_s
    # Generous for a 2-core CPU, whose prefill grows ~quadratically: 131072 tokens ~ 1 h allowed.
    return 300.0 + 3300.0 * (p.context_len / 131072) ** 2 + 0.01 * p.context_len


def _target_limit(target: Path) -> int | None:
    try:
        cfg = json.loads((target / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        return None
    value = cfg.get("max_position_embeddings")
    return int(value) if value else None


def _check_out(out: Path, resume: bool) -> None:
    if out.is_dir():
        raise EagleFixError(f"--out {out} is a folder; give a file path such as {out / 'run.jsonl'}")
    if out.exists() and not resume:
        raise EagleFixError(f"--out {out} already exists; add --resume to continue it, or choose another file")
    if not out.parent.is_dir():
        raise EagleFixError(f"--out {out}: folder {out.parent} does not exist; create it or choose another path")
    if not os.access(out if out.exists() else out.parent, os.W_OK):
        raise EagleFixError(f"--out {out} is not writable; choose a path you can write to")


class _NoBar:
    def update(self, n: int = 1) -> None: ...
    def set_description(self, text: str) -> None: ...
    def write(self, text: str) -> None: print(text, file=sys.stderr)
    def close(self) -> None: ...


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="point", dynamic_ncols=True, file=sys.stderr)


def _csv(value: str) -> list[str]:
    return [v.strip() for v in str(value).split(",") if v.strip()]


# --------------------------------------------------------------------------- CLI

SUMMARY_COLUMNS = ["context_len", "mode", "arm", "fix", "status", "output_throughput_tok_s", "decode_throughput_tok_s",
                   "ttft_s", "acceptance_length", "drafter_coverage", "speedup", "peak_host_memory_bytes"]


def summary_table(records: list[dict[str, Any]]) -> str:
    import pandas as pd

    if not records:
        return "(no points)"
    df = pd.DataFrame(records)
    cols = [c for c in SUMMARY_COLUMNS if c in df.columns]
    df = df[cols].copy()
    if "peak_host_memory_bytes" in df:
        df["peak_host_memory_bytes"] = (df["peak_host_memory_bytes"] / 2**30).round(2)
        df = df.rename(columns={"peak_host_memory_bytes": "host_GiB"})
    return df.to_string(index=False, float_format=lambda v: f"{v:.3g}", na_rep="-")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", help="cpu-quick | cpu | gpu-dummy | gpu (default: cpu here, gpu-dummy on CUDA)")
    parser.add_argument("--target", help="target model folder (profile gpu, or to override the profile's)")
    parser.add_argument("--draft", help="EAGLE3 draft folder")
    parser.add_argument("--contexts", help="comma-separated context lengths, e.g. 8192,16384 (default: the profile's)")
    parser.add_argument("--modes", default=",".join(MODES), help="eager,compile")
    parser.add_argument("--arms", default=",".join(ARMS), help="eagle3,baseline")
    parser.add_argument("--fix", default="on", help="on,off,upstream: the fix A/B arms of the eagle3 arm")
    parser.add_argument("--batch-size", default="1")
    parser.add_argument("--output-len", help="tokens generated per request (default: the profile's)")
    parser.add_argument("--num-speculative-tokens", default="3")
    parser.add_argument("--out", help="JSON-lines file, one line per point (default: runs/<profile>-<time>.jsonl)")
    parser.add_argument("--resume", action="store_true", help="continue --out, skipping the points it holds")
    parser.add_argument("--point-timeout", help="watchdog per point in seconds (default: scaled with the context)")
    parser.add_argument("--log-dir", help="engine logs (default: next to --out)")
    parser.add_argument("--seed", default="0")
    parser.add_argument("--no-progress", action="store_true")


def cli_main(args: argparse.Namespace) -> int:
    run_args = RunArgs.from_cli_args(args)
    if run_args.out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path("runs") / f"{run_args.profile or 'default'}-{stamp}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        run_args = replace(run_args, out=out)
    records = run_sweep(run_args)
    print(summary_table(records))
    failed = sum(r["status"] != "ok" for r in records)
    print(f"\n{len(records)} points ({failed} failed) in {run_args.out}", file=sys.stderr)
    if failed:
        print(f"re-run failed points with: eagle-fix run ... --out {run_args.out} --resume (after removing their lines)",
              file=sys.stderr)
    return 0
