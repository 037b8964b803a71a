"""Runs the matrix's plan in order, each step judged by its kind's rule, failures recorded and the rest still run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from eagle_fix.core import arms, record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.point import Point
from eagle_fix.engine.spec import PLUGIN_MODE_OF_ARM
from eagle_fix.releases import registry
from eagle_fix.releases.matrix import (
    DOCTOR_DRAFT,
    DOCTOR_LEN,
    DOCTOR_TARGET,
    MatrixArgs,
    Step,
    describe,
    drafter_ran,
    environment,
    shown,
)
from eagle_fix.releases.registry import Release
from eagle_fix.releases.venvs import cost

# EAGLE_FIX_MODE -> the fix arm it is (the doctor's report keeps both).
ARM_OF_PLUGIN_MODE = {mode: arm for arm, mode in PLUGIN_MODE_OF_ARM.items()}


class Runner:
    """Executes a plan (eagle_fix.releases.steps.steps) or, with --dry-run, prints it."""

    def __init__(self, args: MatrixArgs, root: Path, *, commit: str | None = None, machine: str | None = None):
        self.args, self.root, self.commit, self.machine = args, root, commit, machine
        self.env = {**os.environ, **environment(args)}
        self.failed: list[str] = []
        self.doctors: dict[str, dict] = {}  # TAG -> doctor-TAG.json so far
        self.doctor_s: dict[str, float] = {}

    def main(self, plan: list[Step]) -> int:
        """Every step in order; 1 when one failed (listed), else 0."""
        a = self.args
        self.failed = [f"{r.tag}:build" for r in a.releases if r.tag in a.unbuilt]
        if a.dry_run:
            common = " ".join(f"{k}={v}" for k, v in environment(a).items())
            print(f"matrix: every step runs with {common}", flush=True)
        handlers = {
            "doctor": self.doctor,
            "hooks": self.pytest,
            "config-tests": self.pytest,
            "asv": self.asv,
            "sweep": self.sweep,
            "replay": self.replay,
            "publish": self.publish,
            "fix-ab": self.fix_ab,
            "ab": self.ab,
        }
        for step in plan:
            if step.needs and step.needs in self.failed:
                continue
            if step.blocked:
                self.say(step.release, step.blocked, err=True)
                ok = False
            elif a.dry_run:
                print("\n".join(describe(step, self.root)), flush=True)
                ok = True
            else:
                ok = handlers[step.kind](step)
            if not ok and step.fails_as and step.fails_as not in self.failed:
                self.failed.append(step.fails_as)
        if self.failed:
            self.say(None, f"failed: {' '.join(self.failed)}", err=True)
            return 1
        self.say(
            None,
            f"{'dry run ' if a.dry_run else ''}done ({' '.join(r.tag for r in a.releases)}); wall times in "
            f"{registry.RESULTS}/cost-*.json",
        )
        return 0

    # ---- plumbing
    def say(self, r: Release | None, text: str, *, err: bool = False) -> None:
        print(f"matrix: {r.engine + ': ' if r else ''}{text}", file=sys.stderr if err else sys.stdout, flush=True)

    def title(self, step: Step) -> None:
        print(f"matrix: {step.title}", flush=True)

    def rel(self, path: Path) -> str:
        return shown(path, self.root)

    def run(self, step: Step, *, progress: str | None = None) -> subprocess.CompletedProcess:
        """The step's command, in the repository root, with the matrix's and the step's variables."""
        env = {**self.env, **step.env, **({"EAGLE_FIX_PROGRESS": progress} if progress else {})}
        return self.call(list(step.argv), env=env, log=step.log, capture=step.capture)

    def call(
        self, argv: list[str], *, env: dict | None = None, log: Path | None = None, capture: bool = False
    ) -> subprocess.CompletedProcess:
        try:
            if log is not None:
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "w") as out:
                    return subprocess.run(
                        argv, env=env or self.env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT, check=False
                    )
            return subprocess.run(
                argv, env=env or self.env, cwd=self.root, capture_output=capture, text=True, check=False
            )
        except OSError as exc:  # a venv without the executable: that step fails, the matrix goes on
            self.say(None, f"cannot run {argv[0]}: {exc}", err=True)
            return subprocess.CompletedProcess(argv, 127, "", str(exc))

    def fresh(self, step: Step) -> None:
        """An earlier file of the step's records' name is kept beside it as .old."""
        if step.keep_old and step.out is not None and step.out.exists():
            step.out.rename(step.out.with_name(f"{step.out.name}.{int(time.time())}.old"))

    def grid_cost(self, step: Step, kind: str, secs: float, rc: int) -> None:
        """The grid's cost line (asv run or --sweep-only): what ran, where, with which samples."""
        a = self.args
        cost(
            step.release,
            self.root,
            **{f"{kind}_s": secs, f"{kind}_rc": rc},
            commit=self.commit,
            machine=self.machine,
            profile=a.profile,
            repeats=a.repeats,
            output_len=a.output_len,
            records=self.rel(step.out),
        )

    def records(self, r: Release, path: Path, refusal: str) -> list[dict] | None:
        try:
            return record.read(path)
        except EagleFixError:
            self.say(r, f"{refusal}: no records at {self.rel(path)}")
            return None

    def check_records(self, r: Release, path: Path) -> bool:
        """One line per EAGLE3 fix-on point; False when a drafter did not run past the draft's positions."""
        recs = self.records(r, path, "REFUSED")
        if recs is None:
            return False
        bad = 0
        for x in recs:
            if not arms.takes_fix(x.get("arm")) or not arms.is_fix_on(x.get("fix")):
                continue
            ok = drafter_ran(x)
            bad += not ok
            err = f" ({record.cause(x.get('error'), 200)})" if x.get("error") else ""
            self.say(
                r,
                f"{x['context_len']} {x['mode']} eagle3 fix on: status {x.get('status')}, vllm "
                f"{x.get('vllm_version')}, drafter coverage {x.get('drafter_coverage')}, acceptance "
                f"{x.get('acceptance_length')}, max_seq_len_drafted {x.get('max_seq_len_drafted')}"
                + ("" if ok else f"  <- REFUSED: the drafter did not run past the draft's positions{err}"),
            )
        return not bad

    @contextlib.contextmanager
    def progress(self) -> Iterator[str]:
        """A file the sweep writes its progress to, followed on this terminal while asv runs."""
        fd, path = tempfile.mkstemp(prefix="eagle-fix-progress.")
        os.close(fd)
        follower = subprocess.Popen(["tail", "-n", "+1", "-f", path])
        try:
            yield path
        finally:
            follower.terminate()
            follower.wait()
            os.unlink(path)

    # ---- one handler per kind: run the step, record its cost, return its verdict
    def doctor(self, step: Step) -> bool:
        """One verdict into doctor-TAG.json; False when the release's code differs from what
        eagle_fix/releases/registry.py says of it."""
        r, mode = step.release, step.env["EAGLE_FIX_MODE"]
        t0 = time.monotonic()
        proc = self.run(step)
        try:
            rep = json.loads(proc.stdout)
        except ValueError:
            rep = {"verdict": "error", "error": (proc.stderr or "").strip()[-500:]}
        rep["exit_code"], rep["fix_arm"] = proc.returncode, ARM_OF_PLUGIN_MODE[mode]
        doc = self.doctors.setdefault(
            r.tag,
            {
                "release": r.tag,
                "max_model_len": DOCTOR_LEN,
                "target": str(DOCTOR_TARGET),
                "draft": str(DOCTOR_DRAFT),
                "modes": {},
            },
        )
        doc["modes"][mode] = rep
        self.say(
            r,
            f"doctor EAGLE_FIX_MODE={mode} (fix {ARM_OF_PLUGIN_MODE[mode]}): {rep['verdict']}"
            + (
                f" ({rep['vllm_version']}, runner {rep.get('model_runner')})"
                if "vllm_version" in rep
                else f": {rep.get('error')}"
            ),
        )
        differs = doctor_differences(r, mode, rep)
        for line in differs:
            self.say(r, f"doctor EAGLE_FIX_MODE={mode}: {line}", err=True)
        step.out.parent.mkdir(parents=True, exist_ok=True)
        step.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        self.doctor_s[r.tag] = self.doctor_s.get(r.tag, 0.0) + time.monotonic() - t0
        cost(r, self.root, doctor_s=round(self.doctor_s[r.tag], 1))
        return not differs

    def pytest(self, step: Step) -> bool:
        """The hook test or the config-level tests: their summary -> results/releases/KIND-TAG.txt."""
        r, key = step.release, step.kind.replace("-", "_")
        self.title(step)
        t0 = time.monotonic()
        proc = self.run(step)
        cost(r, self.root, **{f"{key}_s": round(time.monotonic() - t0, 1), f"{key}_rc": proc.returncode})
        have = self.call(
            [step.argv[0], "-c", "import vllm; print('vllm', vllm.__version__)"], capture=True
        ).stdout.strip()
        lines = [
            line[:300]
            for line in (proc.stdout + proc.stderr).splitlines()
            if line.startswith(("FAILED", "ERROR", "SKIPPED")) or "passed" in line or "failed" in line
        ][-40:]
        step.out.parent.mkdir(parents=True, exist_ok=True)
        step.out.write_text(
            "\n".join([f"# {r.tag}: {have.splitlines()[-1] if have else ''}, exit {proc.returncode}", *lines]) + "\n"
        )
        self.say(r, f"{step.kind} exit {proc.returncode}: {lines[-1] if lines else ''}")
        return proc.returncode == 0

    def asv(self, step: Step) -> bool:
        """The suite, fix on, in the release's venv; its sweep's records in results/releases/."""
        r = step.release
        self.fresh(step)
        self.title(step)
        t0 = time.monotonic()
        with self.progress() as progress:
            proc = self.run(step, progress=progress)
        secs = round(time.monotonic() - t0, 1)
        self.grid_cost(step, "asv", secs, proc.returncode)
        self.say(r, f"asv run exit {proc.returncode} in {secs}s (log: {self.rel(step.log)})")
        return self.check_records(r, step.out)

    def sweep(self, step: Step) -> bool:
        """`eagle-fix run` of the EAGLE3 arm, fix on; its records checked before their replay."""
        r = step.release
        self.fresh(step)
        self.title(step)
        t0 = time.monotonic()
        proc = self.run(step)
        secs = round(time.monotonic() - t0, 1)
        self.grid_cost(step, "sweep", secs, proc.returncode)
        self.say(r, f"eagle-fix run exit {proc.returncode} in {secs}s (log: {self.rel(step.log)})")
        return self.check_records(r, step.out)

    def replay(self, step: Step) -> bool:
        """asv records the release's sweep records (no engine)."""
        r, path = step.release, step.out
        if not path.is_file() or not path.stat().st_size:
            self.say(r, f"no records at {self.rel(path)} to replay; run --sweep-only first", err=True)
            return False
        self.title(step)
        t0 = time.monotonic()
        proc = self.run(step)
        cost(r, self.root, asv_replay_s=round(time.monotonic() - t0, 1), asv_replay_rc=proc.returncode)
        if proc.returncode != 0:
            self.say(r, f"asv replay exit {proc.returncode} (log: {self.rel(step.log)})", err=True)
            return False
        self.say(r, "asv results in results/asv/ (replayed)")
        return True

    def publish(self, step: Step) -> bool:
        """Label asv's results; a failure is said, the matrix goes on."""
        proc = self.run(step)
        if proc.returncode != 0:
            self.say(step.release, f"eagle-fix publish exit {proc.returncode}", err=True)
        return True

    def fix_ab(self, step: Step) -> bool:
        """The fix A/B: one line per point; every fix-on point's drafter must have run past 2048."""
        r = step.release
        self.fresh(step)
        self.title(step)
        t0 = time.monotonic()
        proc = self.run(step)
        cost(
            r,
            self.root,
            fix_ab_s=round(time.monotonic() - t0, 1),
            fix_ab_rc=proc.returncode,
            fix_ab_records=self.rel(step.out),
        )
        recs = self.records(r, step.out, "fix A/B")
        if recs is None:
            return False
        for x in recs:
            err = f", {record.cause(x.get('error'), 160)}" if x.get("error") else ""
            self.say(
                r,
                f"fix A/B {Point.of(x).words()}: {x['status']}, coverage "
                f"{x.get('drafter_coverage')}, acceptance {x.get('acceptance_length')}, flags {x.get('flags') or []}{err}",
            )
        on = [x for x in recs if arms.is_fix_on(x.get("fix"))]
        return bool(on) and all(drafter_ran(x) for x in on)

    def ab(self, step: Step) -> bool:
        """Both releases' engines up at once, alternating rounds -> results/releases/ab-BASE-NEW.json."""
        self.title(step)
        t0 = time.monotonic()
        proc = self.run(step)
        cost(
            step.release, self.root, ab_s=round(time.monotonic() - t0, 1), ab_rc=proc.returncode, ab_base=step.base.tag
        )
        # exit 1: a regression or a failed side, already printed; the file is written either way
        return step.out.is_file() and step.out.stat().st_size > 0


def doctor_differences(r: Release, mode: str, rep: dict) -> list[str]:
    """Where a doctor report differs from what the registry declares of its release; for a release
    the registry does not declare, the line to add there."""
    if "vllm_version" not in rep:
        return [f"no report: {rep.get('error')}"]
    fix = rep.get("upstream_fix") or {}
    got = (fix.get("max_position_embeddings_override"), fix.get("drafter_block_table"), rep.get("model_runner"))
    if not r.known:
        return [
            (
                f"{r.engine} is not in eagle_fix/releases/registry.py; its line would be Release({r.version!r}, "
                f"{r.package!r}, {got[0]!r}, {got[1]!r}, runner={got[2]!r})"
            )
        ]
    out = []
    if rep.get("vllm_version") != r.version:
        out.append(f"the venv's vLLM is {rep.get('vllm_version')}, not {r.version}")
    # The registry's verdicts are those of its runner; which runner vLLM picks depends on the machine
    # (a CUDA build with a GPU picks another), so the verdict compared is that runner's.
    judged = next((b for b in rep.get("by_runner") or [] if b.get("runner") == r.runner), None)
    verdict = judged.get("verdict") if judged else rep.get("verdict") if got[2] == r.runner else None
    want = r.doctor_verdicts.get(mode)
    if want and verdict is not None and verdict != want:
        out.append(f"verdict {verdict} on runner {r.runner}, expected {want}")
    for name, have, expected in zip(("override", "block table"), got, (r.override, r.block_table)):
        if expected is not None and have != expected:
            out.append(f"{name} {have}, eagle_fix/releases/registry.py says {expected}")
    return out
