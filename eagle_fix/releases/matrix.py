"""`eagle-fix matrix`'s plan: its arguments checked once (MatrixArgs) and every step they ask for (steps()), decided before any runs."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.core.settings import PROFILE_ENV
from eagle_fix.pairs.profiles import DEFAULT_PROFILES
from eagle_fix.releases import registry
from eagle_fix.releases.registry import Release
from eagle_fix.store.asv import run_out_path

# The doctor's pair: the original report's real shapes (configs only, no weights).
CONFIGS = Path("eagle_fix") / "data" / "configs"
DOCTOR_TARGET = CONFIGS / "llama-3.1-8b-instruct"
DOCTOR_DRAFT = CONFIGS / "eagle3-llama3.1-instruct-8b"
DOCTOR_LEN = 8192
# Past the draft's 2048 positions, short enough to run every fix arm on CPU.
FIX_AB_CONTEXT = 4096
AB_CONTEXT = 8192
# --ab's rounds default to ab's own (per mode, as its calibration chose: docs/statistics.md), so the
# release A/B can detect what the README says the gate detects; fewer are faster and say less (each
# verdict states its power).
DEFAULT_PROFILE = DEFAULT_PROFILES["matrix"]
# --quick: the CI's sample sizes, unless the environment sets its own.
QUICK = {"EAGLE_FIX_REPEATS": "3", "EAGLE_FIX_OUTPUT_LEN": "128"}
# The pass rule: an EAGLE3 fix-on point ran its drafter past the draft's positions when the drafter
# proposed on at least this share of the decode steps that asked for a draft. Below it the engine
# skipped drafting (zero-filled drafts) for part of the run, which is the bug, not noise.
MIN_DRAFTER_COVERAGE = 0.9
# The engine modes of every engine step: `--modes` of `eagle-fix run` and `eagle-fix ab`.
ENGINE_MODES_ARG = "eager,compile"
# The flags that choose what runs in each release: one at most.
ONLY = ("--build-only", "--no-asv", "--sweep-only", "--replay", "--fix-ab-only", "--ab-only")
# What a step is; a release's come in this order, then the `ab`s between releases. `publish` labels
# the asv results of the step before it (eagle-fix publish).
KINDS = ("doctor", "hooks", "config-tests", "asv", "sweep", "replay", "publish", "fix-ab", "ab")
# The hooked names of both model runners (every release), and the config-level tests (no engine) a
# CUDA build gets on a box without a GPU.
HOOK_TESTS = ("tests/fix/test_hooks.py",)
CONFIG_TESTS = ("tests/fix/test_config_classes.py", "tests/fix/test_doctor.py", "tests/fix/test_plugin.py")


def drafter_ran(rec: dict) -> bool:
    """The pass rule of one record (the matrix's and tests/releases/test_releases.py's)."""
    cov = rec.get("drafter_coverage")
    return rec.get("status") == "ok" and cov is not None and cov >= MIN_DRAFTER_COVERAGE


# --------------------------------------------------------------------------- the arguments


@dataclass(frozen=True)
class MatrixArgs:
    """The matrix's arguments (scripts/matrix.sh passes its own through untouched); every check is in
    from_cli_args() and each error names its flag."""

    releases: tuple[Release, ...]
    build_only: bool = False
    no_asv: bool = False
    no_doctor: bool = False
    sweep_only: bool = False
    replay: bool = False
    fix_ab_only: bool = False
    no_fix_ab: bool = False
    ab: bool = False  # --ab, or --ab-only
    ab_only: bool = False
    rounds: int | None = None  # None: ab's own
    quick: bool = False
    dry_run: bool = False
    unbuilt: tuple[str, ...] = ()  # scripts/matrix.sh: the releases whose venv it could not make
    check_venv: Release | None = None  # scripts/matrix.sh: is this release's venv there (and just built)?
    build_started: float | None = None
    # From the environment: the asv profile ($EAGLE_FIX_PROFILE) and the sample sizes
    # ($EAGLE_FIX_REPEATS, $EAGLE_FIX_OUTPUT_LEN, else --quick's; None: the profile's).
    profile: str = DEFAULT_PROFILE
    repeats: int | None = None
    output_len: int | None = None

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> MatrixArgs:
        env = os.environ if environ is None else environ
        chosen = [flag for flag in ONLY if getattr(args, _dest(flag), False)]
        if len(chosen) > 1:
            raise EagleFixError(f"{chosen[0]} and {chosen[1]}: choose one of {', '.join(ONLY)}", exit_code=2)
        if args.fix_ab_only and args.no_fix_ab:
            raise EagleFixError("--fix-ab-only and --no-fix-ab: choose one", exit_code=2)
        rels = tuple(_flagged("--releases", registry.parse, args.releases))
        rounds = None
        if args.rounds is not None:
            try:
                rounds = int(args.rounds)
                if rounds < 1:
                    raise ValueError
            except ValueError:
                raise EagleFixError(f"--rounds {args.rounds!r}: a positive number of rounds", exit_code=2) from None
            if not (args.ab or args.ab_only):
                raise EagleFixError(
                    f"--rounds {rounds}: the rounds of `eagle-fix ab`; add --ab or --ab-only", exit_code=2
                )
        unbuilt = tuple(t for t in (getattr(args, "unbuilt", None) or "").split(",") if t)
        strays = [t for t in unbuilt if t not in {r.tag for r in rels}]
        if strays:
            raise EagleFixError(
                f"--unbuilt {strays[0]}: not one of --releases ({','.join(r.tag for r in rels)})", exit_code=2
            )
        check = getattr(args, "check_venv", None)
        started = getattr(args, "build_started", None)
        if started is not None and not check:
            raise EagleFixError("--build-started: only with --check-venv TAG", exit_code=2)
        knobs = {}
        for name, quick in QUICK.items():
            value = env.get(name) or (quick if args.quick else None)
            knobs[name] = parse_positive_int(value, name) if value else None
        return cls(
            releases=rels,
            build_only=args.build_only,
            no_asv=args.no_asv,
            no_doctor=args.no_doctor,
            sweep_only=args.sweep_only,
            replay=args.replay,
            fix_ab_only=args.fix_ab_only,
            no_fix_ab=args.no_fix_ab,
            ab=bool(args.ab or args.ab_only),
            ab_only=args.ab_only,
            rounds=rounds,
            quick=args.quick,
            dry_run=args.dry_run,
            unbuilt=unbuilt,
            check_venv=_flagged("--check-venv", registry.release, check) if check else None,
            build_started=float(started) if started is not None else None,
            profile=env.get(PROFILE_ENV) or DEFAULT_PROFILE,
            repeats=knobs["EAGLE_FIX_REPEATS"],
            output_len=knobs["EAGLE_FIX_OUTPUT_LEN"],
        )


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _flagged(flag: str, parse, value):
    """parse(value), its error naming the flag."""
    try:
        return parse(value)
    except EagleFixError as exc:
        text = str(exc)
        raise EagleFixError(text if text.startswith(flag) else f"{flag}: {text}", exit_code=2) from None


def environment(args: MatrixArgs) -> dict[str, str]:
    """What every step's environment sets: the profile, fix on for asv, the sample sizes."""
    env = {"EAGLE_FIX_PROFILE": args.profile, "EAGLE_FIX_ASV_FIX": "on"}
    for name, value in (("EAGLE_FIX_REPEATS", args.repeats), ("EAGLE_FIX_OUTPUT_LEN", args.output_len)):
        if value:
            env[name] = str(value)
    return env


def knobs(args: MatrixArgs, *flags: str) -> list[str]:
    """`eagle-fix run` flags for the sample sizes --quick (or the environment) set (of `flags`, if given)."""
    values = {"--repeats": args.repeats, "--output-len": args.output_len}
    return [x for flag, v in values.items() if v and (not flags or flag in flags) for x in (flag, str(v))]


# --------------------------------------------------------------------------- the steps


@dataclass(frozen=True)
class Step:
    """One subprocess of the matrix, as decided before anything runs."""

    release: Release  # whose venv runs it; for `ab` the newer release (its cost file gets the time)
    kind: str  # one of KINDS
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # set on top of environment(args)
    title: str = ""  # what it does, in words (printed as it starts)
    log: Path | None = None  # its stdout and stderr; None: captured (capture) or the terminal's
    capture: bool = False  # the runner reads its output (the doctor's JSON, pytest's summary)
    out: Path | None = None  # what its verdict reads: the file it writes, or (replay, publish) the records it reads
    writes: tuple[Path, ...] = ()  # every file it writes but its log (asv's and publish's own results besides)
    keep_old: bool = False  # an earlier `out` is kept beside it as NAME.EPOCH.old (the records files)
    progress: bool = False  # the sweep's progress goes to a file followed on the terminal (EAGLE_FIX_PROGRESS)
    check: str = ""  # its verdict, in words
    fails_as: str | None = None  # recorded when its verdict fails (TAG:KIND); None: reported only
    needs: str | None = None  # run only while this failure is not recorded (the replay after its sweep)
    base: Release | None = None  # `ab`: the older release
    blocked: str | None = None  # why it cannot run: nothing runs, fails_as is recorded


# --------------------------------------------------------------------------- naming and showing


def records_path(r: Release, kind: str | None, *, profile: str, commit: str, root: Path) -> Path:
    """results/releases/<machine>-<sha8>-<profile>[-KIND]-vllm-TAG.jsonl: the asv sidecar's name
    (eagle_fix.store.asv.run_out_path, so `eagle-fix publish` and the report find it beside its asv
    run), one file per release and kind so releases at one commit keep their own."""
    with _environ(EAGLE_FIX_RUN_OUT=None, ASV_COMMIT=commit, EAGLE_FIX_ASV_FIX="on"):
        sidecar = run_out_path(profile, conf_dir=root)
    return root / registry.RESULTS / f"{sidecar.stem}{'-' + kind if kind else ''}-vllm-{r.tag}.jsonl"


@contextlib.contextmanager
def _environ(**values: str | None) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def shown(path: Path, root: Path) -> str:
    """A path as the matrix prints it: relative to the repository when inside it."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def describe(step: Step, root: Path) -> list[str]:
    """--dry-run's lines of a step: what it does, the command (with the variables it sets on top of
    every step's, and where its output goes) and its verdict."""
    env = {**step.env, **({"EAGLE_FIX_PROGRESS": "PROGRESS_FILE"} if step.progress else {})}
    sets = "".join(f"{k}={shlex.quote(str(v))} " for k, v in env.items())
    lines = [
        f"matrix: {step.title}" + (f" (unless {step.needs} failed)" if step.needs else ""),
        f"matrix: would run: {sets}{shlex.join(step.argv)}" + (f" > {shown(step.log, root)} 2>&1" if step.log else ""),
    ]
    return lines + ([f"matrix: would check: {step.check}"] if step.check else [])
