"""`eagle-fix ab`: the same points measured in two environments side by side, in alternating rounds.

Two venvs with different vLLM releases, one venv with different environment variables (e.g.
EAGLE_FIX_MODE), or two checkouts: both sides' engines are kept up at once (one per side per
(mode, arm, fix)), and each round measures the point once on each side, so machine drift falls on
both. The order within a round alternates ABBA (even rounds base then new, odd rounds new then base,
see `round_order`; each round's order is recorded in the file): whatever the second measurement of a
round inherits from the first (a warm cache, a load spike that fades, the resumed engine's first
step) then falls on each side equally often, instead of always on new. A point runs `--rounds`
rounds, by default its mode's calibrated count (`verdict.default_rounds`: compiled engines are
noisier here and get more), recorded on the point. A point's rounds are split
into blocks (`--blocks`, default `verdict.DEFAULT_BLOCKS`): each block after the first closes both engines and starts them
afresh in the order opposite to the block before (recorded per pair: `block`, `start_order`), because one
engine instance can run a few percent slower than another for its whole life (on identical sides the
engine started first did), and with one pair of engines per point that would be in every ratio. Each
sample decodes at most `verdict.DEFAULT_SAMPLE_TOKENS` tokens (when set) unless --output-len says otherwise: a
short sample keeps both of a round's samples in one of the machine's seconds-long states. The side not
being measured is paused (SIGSTOP of its process group):
an idle vLLM worker busy-polls for a second after each step, which on a few cores lands on the other
side's measurement. The verdict is on the paired ratios (new / base per round) per metric and
point, by the rule `eagle-fix compare` uses (eagle_fix.gate.verdict: beyond the threshold and the sign
test at p < alpha; fewer rounds than the test needs to reach alpha are `inconclusive`), with each
row's power. Acceptance is judged on counts, coverage and status exactly. Exit codes as
`eagle-fix compare`.

How the two sides share the machine is decided before any engine starts (`sharing_plan`) and
recorded in the file (`sharing`, `sharing_reason`): on CPU both engines stay up and the idle one is
paused ("paused"); on one GPU each side gets half the device and a KV budget sized to the points
("split-memory": vLLM refuses to start an engine whose gpu_memory_utilization exceeds the free
share, so two engines at the profiles' 0.9 could never both start), or, when two engines cannot
fit or the device's memory is unknown, one side's engine at a time, stopped and started around
each measurement ("one-at-a-time"). When a side's engine cannot start, the point is recorded as
failed with the engine's cause.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.engine import lifecycle
from eagle_fix.engine.lifecycle import Interrupted
from eagle_fix.engine.offline import CHILD_MODULE, EngineDied, EngineProcess
from eagle_fix.engine.protocol import PointReply
from eagle_fix.gate import verdict
from eagle_fix.gate.ab_result import PAIRED, format_ab, summary, verdicts
from eagle_fix.gate.sharing import (
    engine_need_bytes,
    measure_alone,
    one_engine_up,
    restart,
    sharing_plan,
)
from eagle_fix.machine import device
from eagle_fix.machine.fingerprint import fingerprint, git_commit
from eagle_fix.pairs.profiles import default_profile
from eagle_fix.sweep.loop import groups
from eagle_fix.sweep.plan import RunArgs, csv, plan, point_timeout, refuse_injected_delay, resolve

# 2: the verdicts follow eagle_fix.gate.verdict (sign test at alpha, power per row); `alpha` and
# `min_detectable` recorded. Files of schema 1 kept the verdicts of a 95%-interval rule.
# 3: the order within a round alternates (ABBA), recorded per pair (`order`) and for the file
# (`order`: "abba"); files of schema 1 and 2 measured base first in every round.
# 4: a point's rounds run in `blocks`, each with freshly started engines, the start order alternating
# (per pair: `block`, `start_order`); files of schema 3 and before kept one pair of engines per group,
# started in the file's `start_order`.
# 5: each point records its own `rounds` and `blocks` (the default rounds depend on the mode:
# verdict.default_rounds); the file's `rounds` is the --rounds given, or null for the defaults.
# Files of schema 4 and before ran every point with the file's `rounds`.
SCHEMA = 5
# The order of the two sides in round r: base first in even rounds, new first in odd ones.
ORDER = "abba"
# Which side's engine starts first in a group's first block (both stay up, paused in turn); each later
# block of a point restarts both in the opposite order. Recorded in every file and pair: the engine started first
# can run slower than the other on identical sides (docs/statistics.md).
START_ORDER = ("base", "new")
# Metrics judged on the paired rounds: (record column, higher is better).
DEFAULT_THRESHOLD = verdict.DEFAULT_THRESHOLD
DEFAULT_ALPHA = verdict.DEFAULT_ALPHA
DEFAULT_ROUNDS = verdict.DEFAULT_ROUNDS
DEFAULT_BLOCKS = verdict.DEFAULT_BLOCKS
DEFAULT_SAMPLE_TOKENS = verdict.DEFAULT_SAMPLE_TOKENS


@dataclass(frozen=True)
class ABArgs:
    """Arguments of one A/B; checks happen in `from_cli_args` / `_side_info`, each naming its flag."""

    base_python: str
    new_python: str
    base_env: dict[str, str] = field(default_factory=dict)
    new_env: dict[str, str] = field(default_factory=dict)
    run: RunArgs = field(default_factory=RunArgs)
    rounds: int | None = None  # None: each point's mode's calibrated rounds (verdict.default_rounds)
    blocks: int = DEFAULT_BLOCKS
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA
    strict: bool = False
    out: Path | None = None

    def rounds_for(self, mode: str) -> int:
        """The paired rounds a point in MODE gets: --rounds, else the mode's calibrated default."""
        return self.rounds or verdict.default_rounds(mode)

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
            blocks=parse_positive_int(getattr(args, "blocks", None) or str(DEFAULT_BLOCKS), "--blocks"),
            threshold=args.threshold,
            strict=args.strict,
            out=out,
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
print(json.dumps({"versions": versions(), "machine_id": fingerprint()["id"], "child_module": CHILD_MODULE}))
"""


def _side_info(python: str, env: dict[str, str], flag: str) -> dict[str, Any]:
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
    return {"python": python, "env": env, **info}


def block_of(r: int, rounds: int, blocks: int) -> int:
    """The block round r of `rounds` falls in: `blocks` runs of consecutive rounds, as equal as the
    division allows (never more blocks than rounds)."""
    return r * min(blocks, rounds) // rounds


def round_order(r: int) -> tuple[str, str]:
    """Which side round r measures first: ABBA, so each side goes first in half the rounds (an even
    number of rounds balances exactly) and no order effect can pose as a change between the sides."""
    return ("base", "new") if r % 2 == 0 else ("new", "base")


def run_ab(args: ABArgs) -> dict[str, Any]:
    """Measure every point on both sides in alternating rounds; returns the whole result (every pair)."""
    lifecycle.install_signal_handlers()  # engines never outlive the command, on both sides
    run = resolve(args.run)
    if args.run.output_len is None and DEFAULT_SAMPLE_TOKENS and run.output_len > DEFAULT_SAMPLE_TOKENS:
        # the calibrated sample length; a profile whose own is shorter keeps its own
        run = resolve(dataclasses.replace(args.run, output_len=DEFAULT_SAMPLE_TOKENS))
    sides = {
        "base": _side_info(args.base_python, args.base_env, "--base-python"),
        "new": _side_info(args.new_python, args.new_env, "--new-python"),
    }
    fp = fingerprint()
    log_dir = (args.out.parent / f"{args.out.stem}-logs") if args.out else Path("runs") / "ab-logs"
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": "eagle-fix ab",
        "machine": fp,
        "machine_id": fp["id"],
        "git_commit": git_commit(),
        "base": sides["base"],
        "new": sides["new"],
        # --rounds, or None: each point's mode's default; every point records the rounds and blocks it ran
        "rounds": args.rounds,
        "blocks": args.blocks,
        "output_len": run.output_len,
        "threshold": args.threshold,
        "alpha": args.alpha,
        "min_detectable": verdict.MIN_DETECTABLE,
        "started": _now(),
        "points": [],
        # the side not being measured is paused (SIGSTOP), or stopped under "one-at-a-time"; files
        # without this key ran both at once
        "idle_side": "paused",
        # the order within each round (round_order); files without this key measured base first
        "order": ORDER,
        # a group's first block; each later block of a point swaps it, each pair says its own.
        # Files without this key started base first too
        "start_order": list(START_ORDER),
    }
    started = time.monotonic()
    total, total_error = device.gpu_total_bytes() if run.profile.device == "cuda" else (None, None)
    try:
        for group in groups(plan(run)):
            spec = run.engine_spec(group[0])
            share = sharing_plan(run.profile.device, engine_need_bytes(run, spec), total, total_error)
            if share.get("gpu_memory_utilization"):
                spec = dataclasses.replace(spec, gpu_memory_utilization=share["gpu_memory_utilization"])
            # the first group's plan is the file's; a group that differs is recorded on its points
            result.setdefault("sharing", share["sharing"])
            result.setdefault("sharing_reason", share["reason"])
            if share["sharing"] == "one-at-a-time":
                result["idle_side"] = "stopped"
            engines: dict[str, Any] = {"base": None, "new": None}
            # the order the engines now up were started in; a point's later blocks restart and swap it
            start_order = list(START_ORDER)
            try:
                if share["sharing"] != "one-at-a-time":
                    for side in start_order:
                        engines[side] = _start(spec, log_dir, side, group[0], sides)
                for p in group:
                    entry = _measure(
                        run, p, engines, args, spec, log_dir, sides, sharing=share["sharing"], start_order=start_order
                    )
                    if share["sharing"] != result["sharing"]:
                        entry["sharing"], entry["sharing_reason"] = share["sharing"], share["reason"]
                    result["points"].append(entry)
                    _progress(entry, started)
            finally:
                for e in engines.values():
                    if e is not None and not isinstance(e, Exception):
                        e.close()
    except Interrupted as exc:
        raise Interrupted(f"{exc}: {len(result['points'])} points measured, nothing written", exc.signum) from None
    result["finished"] = _now()
    result["summary"] = summary(result, strict=args.strict)
    return result


def _start(spec, log_dir: Path, side: str, p, sides, suffix: str = "") -> Any:
    """One side's engine, or the EngineDied that says why it could not start."""
    log = log_dir / f"{side}-{p.mode}-{p.arm}-{p.fix or 'none'}-{int(time.time())}{suffix}.log"
    try:
        return _engine(spec, log, sides[side])
    except EngineDied as exc:
        return exc


def _engine(spec, log: Path, side: dict[str, Any]) -> EngineProcess:
    """A side's engine, run by the side's interpreter as its own checkout's engine child."""
    return EngineProcess(
        spec, log, python=side["python"], env=side["env"], child_module=side.get("child_module") or CHILD_MODULE
    )


def _measure(
    run, p, engines, args: ABArgs, spec, log_dir, sides, sharing: str = "paused", start_order: list[str] | None = None
) -> dict[str, Any]:
    """One point: `rounds` rounds, each measuring both sides in round_order(r) (the pair keeps its
    `order`; the ratio is new / base whichever went first), in `blocks` blocks: each block after the
    first closes both engines and starts them in the order opposite to `start_order` (the order the
    engines now up were started in, updated in place). A side whose engine died is restarted once
    per point. Under "one-at-a-time" the other side's engine is stopped before a side's is started,
    so one engine at a time holds the GPU."""
    identity = run.identity(p)
    rounds = args.rounds_for(p.mode)
    entry: dict[str, Any] = {
        "identity": identity,
        "rounds": rounds,
        "blocks": min(args.blocks, rounds),
        "status": {},
        "error": {},
        "pairs": [],
    }
    alone = sharing == "one-at-a-time"
    start_order = list(START_ORDER) if start_order is None else start_order

    def unusable(side: str) -> None:
        entry["status"][side], entry["error"][side] = "failed", str(engines[side]).splitlines()[0][:500]

    for side in ("base", "new"):
        if not alone and isinstance(engines[side], Exception):  # one-at-a-time tries a fresh start per point
            unusable(side)
    block = 0
    for r in range(rounds):
        fresh_block = block_of(r, rounds, args.blocks) != block
        if fresh_block:
            block += 1
            if not alone:
                start_order[:] = start_order[::-1]
                restart(
                    engines,
                    start_order,
                    lambda side, block=block: _start(spec, log_dir, side, p, sides, suffix=f"-block{block}"),
                )
                for side in ("base", "new"):
                    if entry["status"].get(side) != "failed" and isinstance(engines[side], Exception):
                        unusable(side)
        order = round_order(r)
        pair = {"round": r, "order": list(order), "block": block}
        if not alone:
            pair["start_order"] = list(start_order)
        for side in order:
            if entry["status"].get(side) == "failed":
                continue
            if alone:
                one_engine_up(engines, side, lambda side=side: _start(spec, log_dir, side, p, sides))
                if isinstance(engines[side], Exception):
                    unusable(side)
                    continue
            # a fresh engine has no cached prompt: it pays its prefill in a TTFT run first
            fresh = r == 0 or fresh_block or alone
            cmd = run.command(p, repeats=1, ttft_repeats=1 if fresh else 0)
            measure_alone(engines, side)
            try:
                res = engines[side].run_point(cmd, timeout_s=point_timeout(run, p))
            except EngineDied as exc:
                entry["status"][side], entry["error"][side] = "failed", str(exc).splitlines()[0][:500]
                log = log_dir / f"{side}-{p.mode}-{p.arm}-{p.fix or 'none'}-{int(time.time())}-restart.log"
                try:  # the next point gets a fresh engine
                    engines[side] = _engine(spec, log, sides[side])
                except EngineDied as again:
                    engines[side] = again
                continue
            pair[side] = _pair_numbers(res)
        entry["pairs"].append(pair)
    for side in ("base", "new"):
        entry["status"].setdefault(side, "ok")
    entry["pinning"] = {
        side: (getattr(e, "ready", None) or {}).get("pinning")
        for side, e in engines.items()
        if e is not None and not isinstance(e, Exception)
    }
    synthetic = run.profile.synthetic_acceptance_length is not None
    entry["verdicts"] = verdicts(
        entry, args.threshold, k=identity["num_speculative_tokens"], alpha=args.alpha, synthetic=synthetic
    )
    return entry


def _pair_numbers(res: PointReply) -> dict[str, Any]:
    """What one side's measurement of one round keeps: the first sample of each paired metric, the TTFT
    where it paid one, and the acceptance counts."""
    s = res.samples or {}
    out = {m: (s.get(m) or [None])[0] for m, _ in PAIRED}
    if s.get("ttft_s"):
        out["ttft_s"] = s["ttft_s"][0]
    for k in ("num_drafts", "num_accepted_tokens", "acceptance_length", "drafter_coverage", "output_token_ids_head"):
        if getattr(res, k) is not None:
            out[k] = getattr(res, k)
    return out


def _progress(entry: dict[str, Any], started: float) -> None:
    d = entry["identity"]
    tp = entry["verdicts"].get("tpot_ms", {})
    print(
        f"[eagle-fix ab] {d['context_len']} {d['mode']} {d['arm']}{' fix ' + d['fix'] if d['fix'] else ''}: "
        f"{time.monotonic() - started:.0f} s, tpot {tp.get('verdict', entry['verdicts'].get('status', {}).get('verdict'))}",
        file=sys.stderr,
        flush=True,
    )


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


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
        help=f"alternating rounds per point (default: the gate's calibrated setting, "
        f"{verdict.rounds_text()}; docs/statistics.md says what it catches; more rounds "
        f"see smaller changes)",
    )
    parser.add_argument(
        "--blocks",
        default=str(DEFAULT_BLOCKS),
        help="blocks a point's rounds are split into, each with both engines started afresh in the "
        "order opposite to the block before (default %(default)s, as calibrated)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"relative change that can fail (default {DEFAULT_THRESHOLD * 100:g}%%, from the calibration)",
    )
    parser.add_argument("--strict", action="store_true", help="an inconclusive metric fails too")
    parser.add_argument("--out", help="write the whole result (every pair) as JSON here")


def cli_main(args: argparse.Namespace) -> int:
    """Exit 0: no regression; 1: a regression or a point that failed only on the new side; 2: unusable input."""
    ab = ABArgs.from_cli_args(args)
    result = run_ab(ab)
    if ab.out:
        ab.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(format_ab(result, strict=ab.strict))
    return result["summary"]["exit_code"]
