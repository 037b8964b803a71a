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
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.core.settings import INJECT_DRAFT_ERRORS_ENV
from eagle_fix.machine.fingerprint import fingerprint
from eagle_fix.pairs.profiles import cuda_available, real_shape_configs
from eagle_fix.releases.gpu_claims import CHECKS, DAMAGE, DRAFT_POSITIONS, FAILED, NOT_RUN, PASSED, StepRun, judge

SUMMARY_DIR = Path("results") / "gpu-check"
WORK_DIR = Path(".gpu-check")  # step outputs (records, engine logs): ignored; the summary keeps the figures
CONTEXT = 8192


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


def steps(cuda: bool, work: Path, context: int = CONTEXT, python: str = sys.executable) -> list[Step]:
    tiny, dummy = ("gpu-tiny", "gpu-dummy") if cuda else ("cpu-quick", "cpu-quick")
    target, draft = real_shape_configs()
    cli = (python, "-m", "eagle_fix.cli")
    hooks = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m"] + ["not engine", "tests/fix/test_hooks.py"]
    doctor = f"doctor --target {target} --draft {draft} --max-model-len {context} --json".split()

    def sweep(name: str, flags: str, **kw: Any) -> Step:
        """`eagle-fix run` of the EAGLE3 arm at the context, its records in the work folder."""
        run = f"run --contexts {context} --arms eagle3 --repeats 2 {flags} --out".split()
        return Step(name, (*cli, *run, str(records_file(work, name))), records=True, **kw)

    return [
        Step("hooks", (python, *hooks)),
        Step("doctor", (*cli, *doctor), env={"EAGLE_FIX_MODE": "off"}, timeout_s=300),  # the engine as installed
        sweep(
            "fix-ab", f"--profile {tiny} --modes eager,compile --fix on,off,upstream --output-len 128", timeout_s=1800
        ),
        sweep("dummy", f"--profile {dummy} --modes eager,compile --fix on --output-len 64", timeout_s=1200),
        sweep(
            "damage", f"--profile {tiny} --modes eager --fix on --output-len 128", env={INJECT_DRAFT_ERRORS_ENV: DAMAGE}
        ),
        Step(
            "noise",
            (
                *cli,
                *f"noise --profile {tiny} --context {context} --blocks 2 --rounds 4 --folder".split(),
                str(work / "gate"),
            ),
            timeout_s=1800,
        ),
        Step("machine", (*cli, "machine", "--json", "--refresh"), timeout_s=300),
        Step("probe", (python, "-m", "eagle_fix.machine.cuda_probe"), timeout_s=300),
    ]


STEP_NAMES = tuple(s.name for s in steps(False, WORK_DIR))


# ------------------------------------------------------------------------------ running


def run_step(step: Step, work: Path, root: Path) -> StepRun:
    env = {**os.environ, **step.env}
    t0 = time.monotonic()
    print(f"gpu-check: {step.name}: {' '.join(step.argv[1:])}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(
            step.argv, cwd=root, env=env, capture_output=True, text=True, timeout=step.timeout_s, check=False
        )
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, _text(exc.stdout), _text(exc.stderr) + f"\ntimed out after {step.timeout_s} s"
    run = StepRun(rc=rc, seconds=round(time.monotonic() - t0, 1), tail=(stdout + stderr)[-4000:])
    (work / f"{step.name}.log").write_text(stdout + stderr)
    if step.records:
        run.records = record.read(records_file(work, step.name), missing_ok=True)
    elif stdout.strip().startswith("{"):
        try:
            run.report = json.loads(stdout.strip().splitlines()[-1])
        except json.JSONDecodeError:
            pass
    print(f"gpu-check: {step.name}: exit {rc} in {run.seconds} s", file=sys.stderr, flush=True)
    return run


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
    work: Path
    dry_run: bool
    context: int = CONTEXT

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> GpuCheckArgs:
        def names(raw: str | None, flag: str) -> tuple[str, ...]:
            got = tuple(n.strip() for n in (raw or "").split(",") if n.strip())
            bad = [n for n in got if n not in STEP_NAMES]
            if bad:
                raise EagleFixError(f"{flag} {','.join(bad)}: no such step; give some of {','.join(STEP_NAMES)}")
            return got

        records: dict[str, tuple[Path, ...]] = {}
        for item in a.records or []:
            step, _, files = item.partition("=")
            if step not in ("fix-ab", "dummy", "damage") or not files:
                raise EagleFixError(f"--records {item}: give STEP=FILE[,FILE...] with STEP fix-ab, dummy or damage")
            paths = tuple(Path(f) for f in files.split(","))
            missing = [str(p) for p in paths if not p.is_file()]
            if missing:
                raise EagleFixError(f"--records {item}: no such file {', '.join(missing)}")
            records[step] = paths
        only, skip = names(a.only, "--only"), names(a.skip, "--skip")
        if a.torch_only:
            only = ("probe",)
        context = parse_positive_int(a.context, "--context")
        if context <= DRAFT_POSITIONS:
            raise EagleFixError(f"--context {context}: the checks need a context past the draft's {DRAFT_POSITIONS}")
        out = Path(a.out) if a.out else None
        return cls(a.rehearse, a.torch_only, only, skip, records, out, Path(a.work), a.dry_run, context)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rehearse", action="store_true", help="no GPU: the same steps with the CPU twin (cpu-quick)")
    parser.add_argument(
        "--torch-only", action="store_true", help="only the probe (NVML structs, CUDA events): torch, no vLLM"
    )
    parser.add_argument("--only", help=f"comma-separated steps: {','.join(STEP_NAMES)}")
    parser.add_argument("--skip", help="comma-separated steps to leave out")
    parser.add_argument(
        "--records",
        action="append",
        metavar="STEP=FILE[,FILE]",
        help="judge these records instead of running STEP (fix-ab, dummy, damage)",
    )
    parser.add_argument("--out", help=f"the summary file (default {SUMMARY_DIR}/<machine>-<cuda|rehearsal>.json)")
    parser.add_argument(
        "--work", default=str(WORK_DIR), help="where the steps' records and logs go (default %(default)s)"
    )
    parser.add_argument("--context", default=str(CONTEXT), help="the points' context, past 2048 (default %(default)s)")
    parser.add_argument("--dry-run", action="store_true", help="print the steps and the checks; run nothing")


def cli_main(args: argparse.Namespace) -> int:
    a = GpuCheckArgs.from_cli_args(args)
    cuda = cuda_available()
    if not cuda and not a.rehearse and not a.dry_run and not a.torch_only:
        raise EagleFixError(
            "no CUDA device here (torch.cuda.is_available() is False); on a CPU machine run it with --rehearse"
        )
    root = Path(__file__).resolve().parents[2]
    work = a.work if a.work.is_absolute() else root / a.work
    plan = {s.name: s for s in steps(cuda, work, a.context)}
    chosen = [s for s in plan.values() if (not a.only or s.name in a.only) and s.name not in a.skip]
    if a.dry_run:
        for s in chosen:
            src = a.records.get(s.name)
            print(f"{s.name}: " + (f"records {','.join(map(str, src))}" if src else " ".join(s.argv[1:])))
        for c in CHECKS:
            print(f"  check {c.name} ({c.step}{', CUDA only' if c.cuda_only else ''}): {c.claim}")
        return 0
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    runs: dict[str, StepRun] = {}
    for s in plan.values():
        if s.name in a.records:
            runs[s.name] = StepRun(records=[r for p in a.records[s.name] for r in record.read(p)])
        elif s not in chosen:
            runs[s.name] = StepRun(why_not="step not chosen (--only/--skip)")
        else:
            runs[s.name] = run_step(s, work, root)
    rows = judge(runs, cuda)
    summary = {
        "schema": 1,
        "kind": "cuda" if cuda else "rehearsal",
        "machine": _machine_name(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.monotonic() - t0, 1),
        "steps": {
            name: {
                "command": short_command(plan[name].argv[1:]),
                "env": dict(plan[name].env),
                "exit": r.rc,
                "seconds": r.seconds,
                "from_records": [str(p) for p in a.records.get(name, ())],
                "why_not": r.why_not,
                "records": [excerpt(x) for x in r.records or []],
                "report": r.report,
            }
            for name, r in runs.items()
        },
        "checks": rows,
    }
    out = a.out or root / SUMMARY_DIR / f"{summary['machine']}-{summary['kind']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    for row in rows:
        print(f"{row['status']:>7}  {row['check']}: {row['line']}")
    failed = [r["check"] for r in rows if r["status"] == FAILED]
    counts = {s: sum(r["status"] == s for r in rows) for s in (PASSED, FAILED, NOT_RUN)}
    print(
        f"gpu-check: {counts[PASSED]} passed, {counts[FAILED]} failed, {counts[NOT_RUN]} not run -> {out}",
        file=sys.stderr,
    )
    return 1 if failed else 0


def _machine_name() -> str:
    return str(fingerprint()["name"])
