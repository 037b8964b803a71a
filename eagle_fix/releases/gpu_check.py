"""`eagle-fix gpu-check` (scripts/gpu-check.sh): the first GPU run, rehearsed.

No GPU has run this suite: every CUDA statement in README and docs rests on vLLM's CUDA wheel read line by
line, its config classes and fakes. On one GPU with vLLM's CUDA build this command answers them in minutes
and writes one summary file: each check, the claim it tests, where the docs make it, and passed / failed /
not run with the figures it read. Steps: the hook test, the doctor, gpu-tiny's fix A/B at 8K (every fix arm,
eager and compiled), one gpu-dummy point eager and compiled (memory, NVML, CUDA graphs, the step clock), the gate's noise, a
damaged drafter, the machine's fingerprint and measured limits, and the probe that needs torch but no vLLM
(NVML's structs, CUDA events).

`--rehearse` runs the same steps on a CPU machine with the CPU twin (cpu-quick for gpu-tiny and gpu-dummy);
the CUDA-only judgements say so. `--records STEP=FILE` judges records a run already made instead of running
that step (CI reuses the fix A/B its engine tests ran), `--only` / `--skip` pick steps, `--torch-only` is
the probe alone (a lent GPU box with torch and no vLLM).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.core.paths import results_dir
from eagle_fix.core.settings import INJECT_DRAFT_ERRORS_ENV
from eagle_fix.machine.fingerprint import fingerprint
from eagle_fix.pairs.profiles import cuda_available, real_shape_configs
from eagle_fix.releases.gpu_claims import CHECKS, DAMAGE, DRAFT_POSITIONS, FAILED, NOT_RUN, PASSED, StepRun, judge

SUMMARY_DIR = results_dir("gpu-check")
WORK_DIR = Path(".gpu-check")  # step outputs (records, engine logs): ignored; the summary keeps the figures
CONTEXT = 8192
MODES = ("eager", "compile")
ENGINE_STEPS = ("fix-ab", "damage", "dummy")  # the steps that start engines in both modes (damage: eager only)
# On CUDA a step of a few engine starts takes minutes: its watchdog is the GPU's, not the 2-core CPU's (683 s
# per 8K point, 1,800 s per engine start there), so a hung step costs a lent GPU minutes, not half an hour.
GPU_POINT_TIMEOUT_S = 180
GPU_TIMEOUTS = {"hooks": 120, "doctor": 120, "fix-ab": 480, "damage": 240, "dummy": 480, "machine": 180}
GPU_TIMEOUTS |= {"probe": 120, "noise": 480}
STOP_GRACE_S = 20  # a stopped step's SIGTERM, then SIGKILL: the sweep kills its engines on SIGTERM at once

# `--only` groups, in the order of their value to a first GPU visit; each is sized for one call of at most
# 5 minutes on one GPU (an estimate until a GPU measures it: docs/gpu-check.md). name -> (steps, modes)
GROUPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "setup": (("hooks", "doctor"), MODES),
    "fix-eager": (("fix-ab", "damage"), ("eager",)),
    "fix-compile": (("fix-ab",), ("compile",)),
    "memory": (("dummy", "machine", "probe"), MODES),
    "noise": (("noise",), MODES),
}


@dataclass(frozen=True)
class Step:
    """One command of the check; a step with `records` writes its JSON lines to WORK/<name>.jsonl."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    records: bool = False
    timeout_s: int = 900


def records_file(work: Path, step: str) -> Path:
    return work / f"{step}.jsonl"


def steps(
    cuda: bool,
    work: Path,
    context: int = CONTEXT,
    python: str = sys.executable,
    modes: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Step]:
    """The steps in the order of their value (a deadline cuts the last ones); `modes` narrows an engine
    step to some of eager/compile (an `--only` group). CPU (the rehearsal) keeps the CPU's watchdogs."""
    tiny, dummy = ("gpu-tiny", "gpu-dummy") if cuda else ("cpu-quick", "cpu-quick")
    target, draft = real_shape_configs()
    cli = (python, "-m", "eagle_fix.cli")
    hooks = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m"] + ["not engine", "tests/fix/test_hooks.py"]
    doctor = f"doctor --target {target} --draft {draft} --max-model-len {context} --json".split()
    modes = modes or {}

    def timeout(name: str, cpu_s: int) -> dict[str, int]:
        return {"timeout_s": GPU_TIMEOUTS[name] if cuda else cpu_s}

    def sweep(name: str, flags: str, cpu_s: int, **kw: Any) -> Step:
        """`eagle-fix run` of the EAGLE3 arm at the context, its records in the work folder."""
        chosen = ",".join(modes.get(name, MODES)) if name != "damage" else "eager"
        watchdog = f" --point-timeout {GPU_POINT_TIMEOUT_S}" if cuda else ""
        run = f"run --contexts {context} --arms eagle3 --repeats 2 --modes {chosen} {flags}{watchdog} --out".split()
        return Step(name, (*cli, *run, str(records_file(work, name))), records=True, **timeout(name, cpu_s), **kw)

    noise = f"noise --profile {tiny} --context {context} --blocks 2 --rounds 4 --folder".split()
    return [
        Step("hooks", (python, *hooks), **timeout("hooks", 900)),
        Step("doctor", (*cli, *doctor), env={"EAGLE_FIX_MODE": "off"}, **timeout("doctor", 300)),  # as installed
        sweep("fix-ab", f"--profile {tiny} --fix on,off,upstream --output-len 128", 1800),
        sweep("damage", f"--profile {tiny} --fix on --output-len 128", 900, env={INJECT_DRAFT_ERRORS_ENV: DAMAGE}),
        sweep("dummy", f"--profile {dummy} --fix on --output-len 64", 1200),
        Step("machine", (*cli, "machine", "--json", "--refresh"), **timeout("machine", 300)),
        Step("probe", (python, "-m", "eagle_fix.machine.cuda_probe"), **timeout("probe", 300)),
        Step("noise", (*cli, *noise, str(work / "gate")), **timeout("noise", 1800)),
    ]


STEP_NAMES = tuple(s.name for s in steps(False, WORK_DIR))


# ------------------------------------------------------------------------------ running


class Stopped(Exception):
    """gpu-check itself got SIGTERM, SIGINT or SIGHUP: the current step is stopped, the summary written."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, frame: Any) -> None:
    raise Stopped(signum)


def run_step(step: Step, work: Path, root: Path, *, until: float | None = None, deadline: int | None = None) -> StepRun:
    """Run one step; stop it at its own watchdog, at `until` (the --deadline, a monotonic time) or when
    gpu-check is signalled: SIGTERM (the sweep kills its engines and exits), SIGKILL after a grace. What it
    wrote before (one record per finished point) is read either way."""
    env = {**os.environ, **step.env}
    t0 = time.monotonic()
    limit, cut = float(step.timeout_s), None
    if until is not None and until - t0 < limit:
        limit = max(0.0, until - t0)
    print(f"gpu-check: {step.name}: {' '.join(step.argv[1:])}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(step.argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped: Stopped | None = None
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        if until is not None and limit < step.timeout_s:
            cut = f"cut by the deadline (--deadline {deadline} s)"
        timed_out = cut is None
        stdout, stderr = _stop(proc)
        stderr += f"\n{cut or f'timed out after {step.timeout_s} s'}"
    except Stopped as exc:
        stopped, cut = exc, f"stopped by {exc} to gpu-check"
        stdout, stderr = _stop(proc)
    rc = 124 if timed_out else proc.returncode
    run = StepRun(rc=rc, seconds=round(time.monotonic() - t0, 1), tail=(stdout + stderr)[-4000:], cut=cut)
    (work / f"{step.name}.log").write_text(stdout + stderr)
    if step.records:
        run.records = record.read(records_file(work, step.name), missing_ok=True)
    elif stdout.strip().startswith("{") and cut is None:
        try:
            run.report = json.loads(stdout.strip().splitlines()[-1])
        except json.JSONDecodeError:
            pass
    print(
        f"gpu-check: {step.name}: exit {rc} in {run.seconds} s{'; ' + cut if cut else ''}", file=sys.stderr, flush=True
    )
    if stopped is not None:
        stopped.run = run  # type: ignore[attr-defined]
        raise stopped
    return run


def _stop(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM the step (the sweep's handlers kill its engines), SIGKILL it after the grace; its output."""
    proc.terminate()
    try:
        out, err = proc.communicate(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return _text(out), _text(err)


def short_command(argv: tuple[str, ...] | list[str]) -> str:
    """A step's command as the summary shows it: without the interpreter, paths from the checkout down (the
    same on every machine)."""
    return re.sub(r"(?<!\S)/\S*?/(?=(?:eagle_fix|\.gpu-check)/)", "", " ".join(argv))


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def excerpt(rec: dict[str, Any]) -> dict[str, Any]:
    """What a claim rests on, of one record (the records themselves stay in the work folder)."""
    keys = (
        "profile", "context_len", "mode", "arm", "fix", "status", "model_runner", "device", "vllm_version",
        "acceptance_length", "num_drafts", "drafter_proposals", "drafter_coverage", "max_seq_len_drafted",
        "drafter_calls_damaged", "flags", "clocks", "step_ms", "decode_throughput_tok_s", "peak_gpu_memory_bytes",
        "gpu_memory_scope", "gpu_memory_error", "torch_peak_allocated_bytes", "vllm_kv_cache_bytes",
        "vllm_weights_bytes", "worker_host_peak_bytes",
    )  # fmt: skip
    out = {k: rec.get(k) for k in keys}
    out["cause"] = record.cause(rec.get("error")) if rec.get("error") else None
    return out


@dataclass(frozen=True)
class GpuCheckArgs:
    rehearse: bool
    torch_only: bool
    only: tuple[str, ...]
    skip: tuple[str, ...]
    records: dict[str, tuple[Path, ...]]
    out: Path | None
    work: Path | None
    dry_run: bool
    context: int = CONTEXT
    deadline: int | None = None
    modes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # engine steps narrowed by an --only group
    label: str = "all"  # names the default work folder and summary of a partial run

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> GpuCheckArgs:
        def names(raw: str | None, flag: str, groups: bool) -> tuple[str, ...]:
            got = tuple(n.strip() for n in (raw or "").split(",") if n.strip())
            known = (*STEP_NAMES, *GROUPS) if groups else STEP_NAMES
            bad = [n for n in got if n not in known]
            if bad:
                some = ",".join(STEP_NAMES) + (f" or a group {','.join(GROUPS)}" if groups else "")
                raise EagleFixError(f"{flag} {','.join(bad)}: no such step; give some of {some}")
            return got

        records: dict[str, tuple[Path, ...]] = {}
        for item in a.records or []:
            step, _, files = item.partition("=")
            if step not in ENGINE_STEPS or not files:
                raise EagleFixError(f"--records {item}: give STEP=FILE[,FILE...] with STEP fix-ab, dummy or damage")
            paths = tuple(Path(f) for f in files.split(","))
            missing = [str(p) for p in paths if not p.is_file()]
            if missing:
                raise EagleFixError(f"--records {item}: no such file {', '.join(missing)}")
            records[step] = paths
        raw_only = names(a.only, "--only", groups=True)
        skip = names(a.skip, "--skip", groups=False)
        only, modes = expand_only(raw_only)
        if a.torch_only:
            only, modes, raw_only = ("probe",), {}, ("probe",)
        context = parse_positive_int(a.context, "--context")
        if context <= DRAFT_POSITIONS:
            raise EagleFixError(f"--context {context}: the checks need a context past the draft's {DRAFT_POSITIONS}")
        deadline = None
        if a.deadline is not None:
            if not str(a.deadline).isdigit() or int(a.deadline) < 1:
                raise EagleFixError(f"--deadline {a.deadline}: give seconds, a positive integer such as 270")
            deadline = int(a.deadline)
        out = Path(a.out) if a.out else None
        if out is not None:
            check_out(out)
        if a.work:
            check_work(Path(a.work))
        work = Path(a.work).absolute() if a.work else None
        label = "+".join(raw_only) if raw_only else "all"
        return cls(a.rehearse, a.torch_only, only, skip, records, out, work, a.dry_run, context, deadline, modes, label)


def expand_only(tokens: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """`--only` names (steps and groups) -> the steps, and the modes of each engine step (the union of the
    names that chose it: a step named by itself runs both modes)."""
    steps_: list[str] = []
    modes: dict[str, set[str]] = {}
    for t in tokens:
        names_, step_modes = GROUPS.get(t, ((t,), MODES))
        for n in names_:
            steps_ += [n] if n not in steps_ else []
            modes.setdefault(n, set()).update(step_modes)
    return tuple(steps_), {n: tuple(m for m in MODES if m in ms) for n, ms in modes.items()}


def check_out(out: Path) -> None:
    """The summary's path, checked before anything runs (the probe's result is never lost at its write)."""
    if out.is_dir():
        raise EagleFixError(f"--out {out} is a folder; give a file path such as {out / 'gpu-check.json'}")
    parent = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise EagleFixError(f"--out {out} is not writable; choose a path you can write to")


def check_work(work: Path) -> None:
    """A named work folder must be new or empty: the checks judge only this run's records."""
    if work.exists() and not work.is_dir():
        raise EagleFixError(f"--work {work} is a file; give a new or empty folder")
    if work.is_dir() and any(work.iterdir()):
        raise EagleFixError(
            f"--work {work} holds another run's records; give a new or empty folder, or leave --work out "
            f"(each run then gets its own folder under {WORK_DIR}/)"
        )


def fresh_work(base: Path, label: str) -> Path:
    """A folder of this run's own under `base`: a second run in the same checkout never reads the first's."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    safe = re.sub(r"[^A-Za-z0-9+-]", "_", label)
    for n in range(1000):
        work = base / f"{stamp}-{safe}" if n == 0 else base / f"{stamp}-{safe}-{n}"
        try:
            work.mkdir(parents=True)
            return work
        except FileExistsError:
            continue
    raise EagleFixError(f"cannot make a fresh folder under {base}; clear it or give --work")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rehearse", action="store_true", help="no GPU: the same steps with the CPU twin (cpu-quick)")
    parser.add_argument(
        "--torch-only", action="store_true", help="only the probe (NVML structs, CUDA events): torch, no vLLM"
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated steps ({','.join(STEP_NAMES)}) or groups, one call each on a first GPU visit, "
        f"in order of value: {','.join(GROUPS)}",
    )
    parser.add_argument("--skip", help="comma-separated steps to leave out")
    parser.add_argument(
        "--records",
        action="append",
        metavar="STEP=FILE[,FILE]",
        help="judge these records instead of running STEP (fix-ab, dummy, damage)",
    )
    parser.add_argument(
        "--out",
        help=f"the summary file (default {SUMMARY_DIR}/<machine>-<cuda|rehearsal>[-<--only>].json), rewritten "
        "after every step",
    )
    parser.add_argument(
        "--work", help=f"a new or empty folder for the steps' records and logs (default: a fresh one in {WORK_DIR}/)"
    )
    parser.add_argument("--context", default=str(CONTEXT), help="the points' context, past 2048 (default %(default)s)")
    parser.add_argument(
        "--deadline",
        metavar="SECONDS",
        help="stop the step running at this many seconds from the start, write the summary, run no more steps",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the steps and the checks; run nothing")


def cli_main(args: argparse.Namespace) -> int:
    t0 = time.monotonic()  # the deadline counts from here: the checks of the arguments and the machine included
    a = GpuCheckArgs.from_cli_args(args)
    cuda = cuda_available()
    if not cuda and not a.rehearse and not a.dry_run and not a.torch_only:
        raise EagleFixError(
            "no CUDA device here (torch.cuda.is_available() is False); on a CPU machine run it with --rehearse"
        )
    root = Path(__file__).resolve().parents[2]
    base = a.work or WORK_DIR / "<fresh>"
    plan = steps(cuda, base if base.is_absolute() else root / base, a.context, modes=a.modes)
    chosen = [s.name for s in plan if (not a.only or s.name in a.only) and s.name not in a.skip]
    if a.dry_run:
        for s in plan:
            if s.name in chosen or s.name in a.records:
                src = a.records.get(s.name)
                print(f"{s.name}: " + (f"records {','.join(map(str, src))}" if src else " ".join(s.argv[1:])))
        for c in CHECKS:
            print(f"  check {c.name} ({c.step}{', CUDA only' if c.cuda_only else ''}): {c.claim}")
        return 0
    if a.work is not None:
        work = a.work
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = fresh_work(root / WORK_DIR, a.label)
    plan = steps(cuda, work, a.context, modes=a.modes)
    machine = _machine_name()
    kind = "cuda" if cuda else "rehearsal"
    suffix = "" if a.label == "all" else f"-{re.sub(r'[^A-Za-z0-9+-]', '_', a.label)}"
    out = a.out or root / SUMMARY_DIR / f"{machine}-{kind}{suffix}.json"
    print(f"gpu-check: records and logs in {work}; the summary, rewritten after every step: {out}", file=sys.stderr)
    return execute(plan, chosen, a, work=work, root=root, out=out, cuda=cuda, machine=machine, t0=t0)


def execute(
    plan: list[Step],
    chosen: list[str],
    a: GpuCheckArgs,
    *,
    work: Path,
    root: Path,
    out: Path,
    cuda: bool,
    machine: str,
    run: Any = run_step,
    t0: float | None = None,
) -> int:
    """Run the chosen steps in order, judging every check and rewriting the summary after each step; a
    deadline (from `t0`, a monotonic time) or a signal stops the step running and names the steps it left."""
    t0 = time.monotonic() if t0 is None else t0
    until = t0 + a.deadline if a.deadline else None
    runs: dict[str, StepRun] = {}
    for s in plan:
        if s.name in a.records:
            runs[s.name] = StepRun(records=[r for p in a.records[s.name] for r in record.read(p)])
        elif s.name not in chosen:
            runs[s.name] = StepRun(why_not="step not chosen (--only/--skip)")
        else:
            runs[s.name] = StepRun(why_not="not reached: gpu-check stopped before this step (killed, or still running)")
    write_summary(out, plan, runs, a, cuda=cuda, machine=machine, t0=t0)
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    stopped: Stopped | None = None
    try:
        for s in plan:
            if s.name not in chosen or s.name in a.records:
                continue
            if stopped is not None:
                runs[s.name] = StepRun(why_not=f"gpu-check was stopped by {stopped}")
            elif until is not None and until - time.monotonic() < 1:
                runs[s.name] = StepRun(why_not=f"the deadline (--deadline {a.deadline} s) came first")
            else:
                try:
                    runs[s.name] = run(s, work, root, until=until, deadline=a.deadline)
                except (Stopped, KeyboardInterrupt) as exc:
                    stopped = exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)
                    got = getattr(exc, "run", None)
                    runs[s.name] = got or StepRun(why_not=f"gpu-check was stopped by {stopped}", cut="stopped")
            write_summary(out, plan, runs, a, cuda=cuda, machine=machine, t0=t0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    rows = write_summary(out, plan, runs, a, cuda=cuda, machine=machine, t0=t0)
    for row in rows:
        print(f"{row['status']:>7}  {row['check']}: {row['line']}")
    counts = {s: sum(r["status"] == s for r in rows) for s in (PASSED, FAILED, NOT_RUN)}
    print(
        f"gpu-check: {counts[PASSED]} passed, {counts[FAILED]} failed, {counts[NOT_RUN]} not run -> {out}",
        file=sys.stderr,
    )
    if stopped is not None:
        return 128 + stopped.signum
    return 1 if counts[FAILED] else 0


def write_summary(
    out: Path,
    plan: list[Step],
    runs: dict[str, StepRun],
    a: GpuCheckArgs,
    *,
    cuda: bool,
    machine: str,
    t0: float,
) -> list[dict[str, Any]]:
    """Judge every check on what the steps wrote so far and replace the summary atomically (a file written
    beside it, then renamed): a run cut at any point leaves a whole summary of the steps it finished."""
    rows = judge(runs, cuda)
    by_name = {s.name: s for s in plan}
    summary = {
        "schema": 1,
        "kind": "cuda" if cuda else "rehearsal",
        "machine": machine,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.monotonic() - t0, 1),
        "only": a.label,
        "deadline_s": a.deadline,
        "steps": {
            name: {
                "command": short_command(by_name[name].argv[1:]),
                "env": dict(by_name[name].env),
                "exit": r.rc,
                "seconds": r.seconds,
                "from_records": [str(p) for p in a.records.get(name, ())],
                "why_not": r.why_not,
                "cut": r.cut,
                "records": [excerpt(x) for x in r.records or []],
                "report": r.report,
            }
            for name, r in runs.items()
        },
        "checks": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, out)
    return rows


def _machine_name() -> str:
    return str(fingerprint()["name"])
