"""The arguments of `eagle-fix ab` (one dataclass, checked where each flag is read) and the probe of a side's
interpreter: what vLLM, torch and eagle-fix it has, asked before any engine starts."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.gate import verdict
from eagle_fix.machine.fingerprint import git_commit
from eagle_fix.pairs.profiles import default_profile
from eagle_fix.sweep.plan import RunArgs, csv, refuse_injected_delay

DEFAULT_THRESHOLD = verdict.DEFAULT_THRESHOLD
DEFAULT_ALPHA = verdict.DEFAULT_ALPHA
DEFAULT_ROUNDS = verdict.DEFAULT_ROUNDS
DEFAULT_BLOCKS = verdict.DEFAULT_BLOCKS
DEFAULT_SAMPLE_TOKENS = verdict.DEFAULT_SAMPLE_TOKENS


@dataclass(frozen=True)
class ABArgs:
    """Arguments of one A/B; checks happen in `from_cli_args` / `side_info`, each naming its flag."""

    base_python: str
    new_python: str
    base_env: dict[str, str] = field(default_factory=dict)
    new_env: dict[str, str] = field(default_factory=dict)
    run: RunArgs = field(default_factory=RunArgs)
    rounds: int | None = None  # None: the recorded plan's (or the mode's old default without one)
    blocks: int | None = None  # None: the recorded plan's (its looks can stop early)
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA
    strict: bool = False
    out: Path | None = None
    # greedy acceptance's prompts a drafted point decodes per side (verdict.acceptance_over_prompts)
    acceptance_prompts: int = verdict.ACCEPTANCE_PROMPTS

    def rounds_for(self, mode: str) -> int:
        """The paired rounds a point in MODE gets without a plan: --rounds, else the mode's old default."""
        return self.rounds or verdict.default_rounds(mode)

    @property
    def fixed(self) -> bool:
        """--rounds or --blocks given: that design, judged once at its end (no early stop)."""
        return self.rounds is not None or self.blocks is not None

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ABArgs:
        run = RunArgs(
            profile=args.profile,
            contexts=tuple(parse_positive_int(c, "--contexts") for c in csv(args.contexts)) if args.contexts else None,
            modes=tuple(csv(args.modes)),
            arms=tuple(csv(args.arms)),
            fixes=tuple(csv(args.fix)),
            output_len=parse_positive_int(args.output_len, "--output-len") if args.output_len else None,
            repeats=1,
            ttft_repeats=1,
            progress=False,
        )
        out = Path(args.out) if args.out else None
        if out is not None and (out.is_dir() or not out.parent.is_dir()):
            raise EagleFixError(f"--out {out}: give a file path in an existing folder", exit_code=2)
        if not 0 <= args.threshold < 1:
            raise EagleFixError(f"--threshold must be in [0, 1), got {args.threshold}", exit_code=2)
        base_env, new_env = _env_pairs(args.base_env, "--base-env"), _env_pairs(args.new_env, "--new-env")
        # a knob in this process's environment reaches both sides and is in no side's recorded env:
        # never under results/; one given per side is recorded in the file, so results/calibration/ may hold it
        refuse_injected_delay(out, exit_code=2)
        refuse_injected_delay(out, base_env, calibration_ok=True, where=" in --base-env", exit_code=2)
        refuse_injected_delay(out, new_env, calibration_ok=True, where=" in --new-env", exit_code=2)
        # absolute (not resolved: a venv's python is a symlink whose target has no venv): engines and
        # the probe run from other folders
        return cls(
            base_python=os.path.abspath(args.base_python),
            new_python=os.path.abspath(args.new_python),
            base_env=base_env,
            new_env=new_env,
            run=run,
            rounds=parse_positive_int(args.rounds, "--rounds") if args.rounds else None,
            blocks=parse_positive_int(args.blocks, "--blocks") if getattr(args, "blocks", None) else None,
            threshold=args.threshold,
            strict=args.strict,
            out=out,
            acceptance_prompts=parse_positive_int(args.acceptance_prompts, "--acceptance-prompts")
            if getattr(args, "acceptance_prompts", None) is not None
            else verdict.ACCEPTANCE_PROMPTS,
        )


def _env_pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for item in values or []:
        if "=" not in item or not item.split("=", 1)[0]:
            raise EagleFixError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {flag} EAGLE_FIX_MODE=off", exit_code=2)
        k, v = item.split("=", 1)
        out[k] = v
    return out


# Runs in the side's own interpreter, whose eagle-fix may be another checkout's (a merge base): what it has,
# and the module its engine child runs as (a checkout from before the stage sub-packages has eagle_fix.child).
_PROBE = """
import json
try:
    from eagle_fix.engine.offline import CHILD_MODULE
    from eagle_fix.fix.clock import inject_delay_s
    from eagle_fix.machine.fingerprint import fingerprint, versions
except ImportError:
    import eagle_fix.machine as m, eagle_fix.plugin as p
    CHILD_MODULE, inject_delay_s, fingerprint, versions = "eagle_fix.child", p.inject_delay_s, m.fingerprint, m.versions
inject_delay_s()
import eagle_fix
print(json.dumps({"versions": versions(), "machine_id": fingerprint()["id"], "child_module": CHILD_MODULE,
                  "eagle_fix_path": eagle_fix.__file__}))
"""


def side_info(python: str, env: dict[str, str], flag: str) -> dict[str, Any]:
    """What the side's interpreter has (vLLM, torch, eagle-fix), checked before any engine starts."""
    path = Path(python)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise EagleFixError(f"{flag} {python}: not an executable Python; give e.g. .venv/bin/python", exit_code=2)
    try:
        # from a neutral folder: `-c` puts the working folder first on sys.path (a checkout there would
        # answer for the side's own environment)
        proc = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
            cwd=tempfile.gettempdir(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise EagleFixError(f"{flag} {python}: did not answer in 120 s", exit_code=2) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EagleFixError(
            f"{flag} {python}: cannot import eagle_fix there ({last}); install it: {python} -m pip install -e .",
            exit_code=2,
        )
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if info.get("eagle_fix_path"):  # which checkout answers for this side (a merge base's, in the PR gate)
        info["git_commit"] = git_commit(Path(info["eagle_fix_path"]).parent)
    return {"python": python, "env": env, **info}


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-python", required=True, help="interpreter of the base environment (e.g. .venv/bin/python)"
    )
    parser.add_argument("--new-python", required=True, help="interpreter of the new environment")
    parser.add_argument("--base-env", action="append", metavar="K=V", help="environment variable for the base side")
    parser.add_argument("--new-env", action="append", metavar="K=V", help="environment variable for the new side")
    parser.add_argument("--profile", default=default_profile("ab"), help="profile (default %(default)s)")
    parser.add_argument("--contexts", help="comma-separated contexts (default: the profile's)")
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--arms", default="eagle3,baseline")
    parser.add_argument("--fix", default="on")
    parser.add_argument(
        "--output-len",
        help="tokens per sample (default: the profile's"
        + (f", at most {DEFAULT_SAMPLE_TOKENS}, the calibrated sample length)" if DEFAULT_SAMPLE_TOKENS else ")"),
    )
    parser.add_argument(
        "--rounds",
        help="alternating rounds per point, in all its blocks: a fixed design judged at its end (default: the "
        "plan `eagle-fix noise` recorded for this machine and point kind, which stops as soon as the verdict "
        f"is settled; without one, {verdict.rounds_text()})",
    )
    parser.add_argument(
        "--blocks",
        default=None,
        help="launch pairs (blocks) a point's rounds are split into, each with both engines started afresh in the "
        f"order opposite to the block before: a fixed design (default: the recorded plan's; without one "
        f"{DEFAULT_BLOCKS})",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"relative change that can fail (default {DEFAULT_THRESHOLD * 100:g}%%, from the calibration)",
    )
    parser.add_argument(
        "--acceptance-prompts",
        default=None,
        help="greedy acceptance is judged over this many seeded prompts a drafted point, the prompt as the unit: "
        f"the speed rounds' own and N - 1 more, each one prefill a side (default {verdict.ACCEPTANCE_PROMPTS})",
    )
    parser.add_argument("--strict", action="store_true", help="an inconclusive metric fails too")
    parser.add_argument("--out", help="write the whole result (every pair) as JSON here")
