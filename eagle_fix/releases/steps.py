"""The steps of `eagle-fix matrix`, decided before anything runs: per release the doctor, the hook and config
tests, the grid (asv, a sweep or a replay), the fix A/B and its publish, then ab between neighbours."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine.spec import PLUGIN_MODE_OF_ARM
from eagle_fix.releases import registry
from eagle_fix.releases.matrix import (
    AB_CONTEXT,
    CONFIG_TESTS,
    DOCTOR_DRAFT,
    DOCTOR_LEN,
    DOCTOR_TARGET,
    ENGINE_MODES_ARG,
    FIX_AB_CONTEXT,
    HOOK_TESTS,
    MIN_DRAFTER_COVERAGE,
    MatrixArgs,
    Step,
    knobs,
    records_path,
    shown,
)
from eagle_fix.releases.registry import Release


def steps(args: MatrixArgs, releases: Sequence[Release], *, root: Path, gpu: bool, commit: str | None) -> list[Step]:
    """Every step of the run, in order: per release (not in args.unbuilt) the doctor, the hook test,
    then the config-level tests (a CUDA build without a GPU: nothing else) or the grid and the fix
    A/B; then the `ab`s. Runs nothing and writes nothing (--replay looks its records up)."""
    plan: list[Step] = []
    if not args.build_only and not args.ab_only:
        for r in releases:
            if r.tag not in args.unbuilt:
                plan += _Release(args, r, root, commit).steps(gpu)
    if args.ab and not args.build_only:
        plan += [ab_step(args, base, new, root) for base, new in registry.adjacent(list(releases))]
    return plan


def ab_step(args: MatrixArgs, base: Release, new: Release, root: Path) -> Step:
    """`eagle-fix ab` of the project's venv: both releases' engines up at once, alternating rounds."""
    out = registry.ab_file(base, new, root)
    rounds = ("--rounds", str(args.rounds)) if args.rounds else ()
    argv = (
        str(Path(sys.executable).with_name("eagle-fix")),
        "ab",
        "--base-python",
        str(root / base.venv / "bin" / "python"),
        "--new-python",
        str(root / new.venv / "bin" / "python"),
        "--profile",
        args.profile,
        "--contexts",
        str(AB_CONTEXT),
        "--modes",
        ENGINE_MODES_ARG,
        "--arms",
        "eagle3,baseline",
        "--fix",
        "on",
        *rounds,
        *knobs(args, "--output-len"),
        "--out",
        str(out),
    )
    many = f"{args.rounds} rounds" if args.rounds else "the recorded plan's rounds"
    return Step(
        new,
        "ab",
        argv,
        base=base,
        out=out,
        writes=(out, new.files(root)["cost"]),
        title=f"eagle-fix ab {base.tag} -> {new.tag} ({AB_CONTEXT}, {ENGINE_MODES_ARG}, eagle3+baseline, "
        f"fix on, {many}) -> {shown(out, root)}",
        check=f"{shown(out, root)} is written (exit 1: a regression or a failed side, in that file)",
        fails_as=f"{base.tag}-{new.tag}:ab",
    )


@dataclass(frozen=True)
class _Release:
    """The steps of one release, in its venv."""

    args: MatrixArgs
    r: Release
    root: Path
    commit: str | None

    def steps(self, gpu: bool) -> list[Step]:
        a, tag = self.args, self.r.tag
        plan = [] if a.no_doctor else [self.doctor(arm, mode) for arm, mode in PLUGIN_MODE_OF_ARM.items()]
        plan.append(self.pytest("hooks", HOOK_TESTS))
        if self.r.config_only(gpu):  # the CUDA build on a CPU box: no engine
            return plan + [self.pytest("config-tests", CONFIG_TESTS)]
        if a.fix_ab_only:
            return plan + [self.fix_ab()]
        if a.replay:
            plan += self.replay(self.replay_file(), fails_as=f"{tag}:replay")
        elif a.sweep_only:
            plan += self.sweep()
        elif not a.no_asv:
            plan += self.asv()
        if not a.no_fix_ab and not a.replay and not a.no_asv:
            plan.append(self.fix_ab())
        return plan

    # ---- names
    def bin(self, name: str) -> str:
        return str(self.root / self.r.venv / "bin" / name)

    @property
    def sha(self) -> str:
        if not self.commit:
            raise EagleFixError(
                f"`git rev-parse HEAD` fails in {self.root}: the matrix names asv's run and the "
                "records by the commit; run it in a git checkout"
            )
        return self.commit

    def records(self, kind: str | None) -> Path:
        return records_path(self.r, kind, profile=self.args.profile, commit=self.sha, root=self.root)

    def file(self, kind: str) -> Path:
        return self.r.files(self.root)[kind]

    def log(self, name: str) -> Path:
        return self.root / registry.VENVS / f"{name}-{self.r.tag}.log"

    def shown(self, path: Path) -> str:
        return shown(path, self.root)

    def replay_file(self) -> Path | None:
        """The release's newest committed EAGLE3 sweep of this profile."""
        mine = [
            p
            for p in registry.record_files(self.r, self.root)
            if p.name.endswith(f"-{self.args.profile}-eagle3-vllm-{self.r.tag}.jsonl")
        ]
        return mine[-1] if mine else None

    def drafter_check(self, out: Path, which: str = "every EAGLE3 fix-on point") -> str:
        return f"{which} of {self.shown(out)} has drafter coverage >= {MIN_DRAFTER_COVERAGE}"

    # ---- the steps
    def doctor(self, arm: str, mode: str) -> Step:
        """One of the doctor's three verdicts (-> doctor-TAG.json, compared with the registry)."""
        argv = (
            self.bin("eagle-fix"),
            "doctor",
            "--json",
            "--max-model-len",
            str(DOCTOR_LEN),
            "--target",
            str(DOCTOR_TARGET),
            "--draft",
            str(DOCTOR_DRAFT),
        )
        return Step(
            self.r,
            "doctor",
            argv,
            env={"EAGLE_FIX_MODE": mode},
            capture=True,
            title=f"{self.r.engine}: doctor EAGLE_FIX_MODE={mode} (fix {arm})",
            out=self.file("doctor"),
            writes=(self.file("doctor"), self.file("cost")),
            check="its verdict, override and block table are what eagle_fix/releases/registry.py declares",
            fails_as=f"{self.r.tag}:doctor",
        )

    def pytest(self, kind: str, tests: tuple[str, ...]) -> Step:
        """The hook test (every hooked name still there, import-level) or the config-level tests, in the
        release's venv -> results/releases/KIND-TAG.txt."""
        argv = (self.bin("python"), "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "-m", "not engine", *tests)
        return Step(
            self.r,
            kind,
            argv,
            env={"HF_HUB_OFFLINE": "1"},
            capture=True,
            title=f"{self.r.engine}: {kind} ({' '.join(tests)}, -m 'not engine')",
            out=self.file(kind),
            writes=(self.file(kind), self.file("cost")),
            check=f"pytest exits 0 (its summary -> {self.shown(self.file(kind))})",
            fails_as=f"{self.r.tag}:{kind}",
        )

    def asv_argv(self) -> tuple[str, ...]:
        return (
            self.bin("asv"),
            "run",
            "-E",
            f"existing:{self.bin('python')}",
            "--set-commit-hash",
            self.sha,
            "--launch-method",
            "spawn",
            "--show-stderr",
        )

    def asv(self) -> list[Step]:
        """The suite, fix on; its sweep's records in results/releases/; then publish labels asv's results."""
        a, out = self.args, self.records(None)
        grid = Step(
            self.r,
            "asv",
            self.asv_argv(),
            env={"EAGLE_FIX_RUN_OUT": str(out)},
            progress=True,
            title=f"{self.r.engine}: asv run ({a.profile}, fix on, repeats {a.repeats or 'profile'}, output "
            f"{a.output_len or 'profile'}) -> {self.shown(out)}",
            log=self.log("asv"),
            out=out,
            writes=(out, self.file("cost")),
            keep_old=True,
            check=self.drafter_check(out),
            fails_as=f"{self.r.tag}:asv",
        )
        return [grid, self.publish(out, {}, needs=None)]

    def sweep(self) -> list[Step]:
        """`eagle-fix run` of the EAGLE3 arm, fix on (no asv, no baseline), then its asv replay."""
        a, out, fails = self.args, self.records("eagle3"), f"{self.r.tag}:sweep"
        argv = (
            self.bin("eagle-fix"),
            "run",
            "--profile",
            a.profile,
            "--modes",
            ENGINE_MODES_ARG,
            "--arms",
            "eagle3",
            "--fix",
            "on",
            *knobs(a),
            "--out",
            str(out),
        )
        run = Step(
            self.r,
            "sweep",
            argv,
            log=self.log("sweep"),
            out=out,
            writes=(out, self.file("cost")),
            keep_old=True,
            title=f"{self.r.engine}: eagle-fix run ({a.profile}, eagle3, fix on, {ENGINE_MODES_ARG}) -> "
            f"{self.shown(out)}",
            check=self.drafter_check(out),
            fails_as=fails,
        )
        return [run, *self.replay(out, fails_as=fails, needs=fails)]

    def replay(self, path: Path | None, *, fails_as: str, needs: str | None = None) -> list[Step]:
        """asv records the release's sweep records (no engine) at HEAD, every release at one commit, so
        the dashboard shows engines side by side (the records keep the commit that measured them); then
        publish labels them."""
        if path is None:
            return [
                Step(
                    self.r,
                    "replay",
                    (),
                    title=f"{self.r.engine}: asv replay",
                    fails_as=fails_as,
                    blocked=f"no results/releases/*-{self.args.profile}-eagle3-vllm-{self.r.tag}.jsonl to replay; "
                    "run --sweep-only first",
                )
            ]
        env = {"EAGLE_FIX_ASV_RECORDS": str(path)}
        # asv exits 2 when a benchmark failed; the arms the sweep did not run are skipped (n/a), not failed
        step = Step(
            self.r,
            "replay",
            self.asv_argv(),
            env=env,
            log=self.log("asv-replay"),
            out=path,
            writes=(self.file("cost"),),
            title=f"{self.r.engine}: asv records {self.shown(path)} at {self.sha[:8]} (no engine)",
            check="asv exits 0",
            fails_as=fails_as,
            needs=needs,
        )
        return [step, self.publish(path, env, needs=fails_as)]

    def publish(self, records: Path, env: Mapping[str, str], *, needs: str | None) -> Step:
        """eagle-fix publish labels this asv run's results with the release and its records (a failure
        is reported, not counted)."""
        argv = (self.bin("eagle-fix"), "publish", "--commit", self.sha, "--records", str(records), "--no-report")
        return Step(
            self.r,
            "publish",
            argv,
            env=dict(env),
            out=records,
            needs=needs,
            title=f"{self.r.engine}: eagle-fix publish (asv's results labelled from {self.shown(records)})",
        )

    def fix_ab(self) -> Step:
        """The fix A/B past the draft's positions: every fix arm, eager and compile."""
        a, out = self.args, self.records("fix-ab")
        # exit 1 is expected: fix off under compile fails on the rotary bound (that is the bug)
        argv = (
            self.bin("eagle-fix"),
            "run",
            "--profile",
            a.profile,
            "--contexts",
            str(FIX_AB_CONTEXT),
            "--modes",
            ENGINE_MODES_ARG,
            "--arms",
            "eagle3",
            "--fix",
            ",".join(PLUGIN_MODE_OF_ARM),
            *knobs(a),
            "--out",
            str(out),
        )
        return Step(
            self.r,
            "fix-ab",
            argv,
            log=self.log("fix-ab"),
            out=out,
            writes=(out, self.file("cost")),
            keep_old=True,
            title=f"{self.r.engine}: fix A/B at {FIX_AB_CONTEXT} (eagle3, "
            f"{'/'.join(PLUGIN_MODE_OF_ARM)}, {ENGINE_MODES_ARG}) -> {self.shown(out)}",
            check=self.drafter_check(out, "every fix-on point"),
            fails_as=f"{self.r.tag}:fix-ab",
        )
