"""`eagle-fix noise`: the gate's noise on this machine, measured once per point kind, and the plan `eagle-fix
ab` then runs: identical sides (this interpreter twice) in many short launch pairs, the variance between
launches, between rounds and within a sample estimated from them (eagle_fix.core.nested), with what a launch
pair and a round cost, written to results/gate/<machine>/<point>.json (eagle_fix.gate.components). With
--from, the estimate comes from earlier A/A files instead (the committed calibration), no engine started.
--pool, from every committed A/A file of this machine and point kind (a record grows as trials come).
--replay judges thousands of trials drawn from those files out of sample, leave one run out
(eagle_fix.gate.replay).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from eagle_fix.core.errors import EagleFixError, parse_positive_int
from eagle_fix.core.record import ARMS, ENGINE_MODES
from eagle_fix.gate import components, replay
from eagle_fix.gate.ab import ABArgs, run_ab
from eagle_fix.gate.ab_result import read_ab
from eagle_fix.machine.fingerprint import fingerprint
from eagle_fix.pairs.profiles import default_profile
from eagle_fix.sweep.plan import RunArgs, resolve

# The design of a measuring run: many launch pairs of few rounds, so the launch variance has degrees of freedom.
MEASURE_BLOCKS = 8
MEASURE_ROUNDS = 16


def files_of(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.glob("*.json"))
        elif p.is_file():
            out.append(p)
        else:
            raise EagleFixError(f"--from {p}: no such file or folder", exit_code=2)
    return out


def kinds_in(files: list[Path]) -> list[components.PointKind]:
    found = []
    for f in files:
        for entry in read_ab(f)["points"]:
            k = components.PointKind.of(entry["identity"])
            if k not in found:
                found.append(k)
    return found


def machine_of(files: list[Path]) -> dict[str, Any]:
    machines = {json.dumps(read_ab(f)["machine"], sort_keys=True) for f in files}
    if len(machines) != 1:
        names = sorted({json.loads(m).get("name") for m in machines})
        raise EagleFixError(
            f"--from holds {len(machines)} machines ({', '.join(map(str, names))}): give one machine's files",
            exit_code=2,
        )
    return json.loads(machines.pop())


def measure(args: argparse.Namespace, folder: Path) -> Path:
    """An A/A `eagle-fix ab` of one point in the measuring design, written beside the components."""
    # every argument checked before a word is announced or a folder made (#56)
    for flag, value, allowed in (("--mode", args.mode, ENGINE_MODES), ("--arm", args.arm, ARMS)):
        if value not in allowed:
            raise EagleFixError(f"{flag} {value}: unknown; choose {' or '.join(allowed)}", exit_code=2)
    for flag, value, default in (("--blocks", args.blocks, MEASURE_BLOCKS), ("--rounds", args.rounds, MEASURE_ROUNDS)):
        if value < 1:
            raise EagleFixError(f"{flag} {value}: must be at least 1, such as {default}", exit_code=2)
    run = RunArgs(
        profile=args.profile,
        contexts=(parse_positive_int(args.context, "--context"),),
        modes=(args.mode,),
        arms=(args.arm,),
        fixes=("on",),
        repeats=1,
        ttft_repeats=1,
        progress=False,
    )
    resolve(run)  # the profile, its pair and the context's room, before anything is written
    fp = fingerprint()
    kind = components.PointKind(args.profile, run.contexts[0], args.mode, args.arm)
    out = folder / fp["name"] / f"{kind.name}-aa-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    ab = ABArgs(
        base_python=sys.executable,
        new_python=sys.executable,
        run=run,
        rounds=args.blocks * args.rounds,
        blocks=args.blocks,
        out=out,
        acceptance_prompts=1,  # the launches' speed is the question: no extra prompts for acceptance
    )
    print(
        f"noise: {kind.name} on {fp['name']}: {args.blocks} launch pairs x {args.rounds} rounds, identical sides",
        file=sys.stderr,
        flush=True,
    )
    result = run_ab(ab)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return out


def pooled(args: argparse.Namespace) -> list[Path]:
    """--pool: every committed A/A file of this machine (--machine, else this one's fingerprint) and the point kind
    of --profile/--context/--mode/--arm (components.pool_files), so a record grows as A/A trials are committed."""
    kind = components.PointKind(args.profile, parse_positive_int(args.context, "--context"), args.mode, args.arm)
    name = args.machine or fingerprint()["name"]
    files = components.pool_files(name, kind)
    if not files:
        raise EagleFixError(
            f"--pool: no A/A file of {kind.name} on {name} under results/: run `eagle-fix noise` there first",
            exit_code=2,
        )
    return [f.relative_to(Path.cwd()) if f.is_relative_to(Path.cwd()) else f for f in files]


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=default_profile("ab"), help="profile (default %(default)s)")
    parser.add_argument("--context", default="8192", help="context length (default %(default)s)")
    parser.add_argument("--mode", default="eager", help="eager or compile (default %(default)s)")
    parser.add_argument("--arm", default="eagle3", help="eagle3 or baseline (default %(default)s)")
    parser.add_argument("--blocks", type=int, default=MEASURE_BLOCKS, help="launch pairs (default %(default)s)")
    parser.add_argument(
        "--rounds", type=int, default=MEASURE_ROUNDS, help="rounds per launch pair (default %(default)s)"
    )
    parser.add_argument(
        "--from",
        dest="sources",
        nargs="+",
        metavar="PATH",
        help="estimate from these A/A ab files or folders (one machine) instead of measuring",
    )
    parser.add_argument(
        "--pool",
        action="store_true",
        help="estimate from every committed A/A file of this machine and point kind (results/gate, results/calibration)",
    )
    parser.add_argument("--machine", help="with --pool: the machine's name (default: this machine's fingerprint)")
    parser.add_argument(
        "--launch-s", type=float, help="seconds a launch pair costs (default: timed in the files, or from their spans)"
    )
    parser.add_argument(
        "--round-s",
        type=float,
        help="seconds a round costs (default: timed in the files; files before schema 6 of one design need it)",
    )
    parser.add_argument("--folder", default=str(components.FOLDER), help="where components go (default: results/gate)")
    parser.add_argument("--replay", metavar="OUT", help="with --from: replay trials from the files, write OUT (JSON)")
    parser.add_argument("--trials", type=int, default=2000, help="replayed trials per shift (default %(default)s)")


def cli_main(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if args.sources:
        files = files_of(args.sources)
    elif args.pool:
        files = pooled(args)
    else:
        files = [measure(args, folder)]
    costs = (
        {"launch_s": args.launch_s, "round_s": args.round_s, "from": "given (--launch-s, --round-s)"}
        if args.launch_s and args.round_s
        else None
    )
    machine = machine_of(files)
    if args.replay:
        out = {
            "kind": "eagle-fix replay",
            "machine": machine.get("name"),
            "sources": [str(f) for f in files],
            "points": [],
        }
        for kind in kinds_in(files):
            trials, names = replay.pool_named(files, kind)
            if not trials:
                continue
            rec = components.record(machine, kind, files, costs=costs, round_s=args.round_s)
            c = rec["costs"]
            if not c:
                raise EagleFixError(
                    f"--replay: the files of {kind.name} do not say what a launch pair and a round cost: "
                    "give --round-s (and --launch-s), or files of two designs",
                    exit_code=2,
                )
            out["points"].append(
                {
                    "point": kind.__dict__,
                    "costs": c,
                    "sources": rec["sources"],
                    **replay.replay(trials, n=args.trials, launch_s=c["launch_s"], round_s=c["round_s"], sources=names),
                    "power_curve": replay.power_curve(trials, launch_s=c["launch_s"], round_s=c["round_s"]),
                }
            )
            print(f"noise: replayed {kind.name}: {args.trials} trials per shift", file=sys.stderr)
        Path(args.replay).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
        print(f"noise: wrote {args.replay}")
        return 0
    for kind in kinds_in(files):
        rec = components.record(machine, kind, files, costs=costs, round_s=args.round_s)
        path = components.write(rec, folder)
        m = rec["metrics"][components.PLANNED_METRIC]
        plan = rec.get("plan")
        catches = (plan or {}).get("detectable")
        print(
            f"noise: {kind.name}: launch sd {_pct(m.get('sigma_launch'))} (upper {_pct(m.get('sigma_launch_upper'))}), "
            f"round sd {_pct(m.get('sigma_round'))}, start order {_pct(m.get('start_order'), '+.2%')}"
            + (
                f"; plan {plan['rounds']} rounds x up to {plan['max_blocks']} launches, catches "
                + (
                    f"{catches:.1%}"
                    if catches is not None and math.isfinite(catches)
                    else "nothing it can state (too few launch pairs to bound the launch sd: measure more blocks)"
                )
                if plan
                else "; no costs: no plan (give --launch-s and --round-s)"
            )
            + f" -> {path}"
        )
    return 0


def _pct(value: float | None, spec: str = ".2%") -> str:
    """A figure in percent, or 'not estimable' where the files leave it None or NaN (too few launch pairs)."""
    return format(value, spec) if value is not None and math.isfinite(value) else "not estimable"
