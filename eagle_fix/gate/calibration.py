"""The gate's calibration, read back: how often `eagle-fix ab` raised an alarm on identical sides
(false alarms) and on a side slowed by a known amount (detections), and the noise floor the A/A
trials show. `scripts/calibrate.sh` writes the trials (one `eagle-fix ab` file each, under
results/calibration/gate/); the docs' tables and tests/gate/test_calibration.py read them through here,
so the threshold and rounds the gate defaults to and the numbers quoted for them have one source.
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from pathlib import Path
from typing import Any

from eagle_fix.core import significance, stats
from eagle_fix.core.paths import results_dir
from eagle_fix.core.point import Point
from eagle_fix.fix.clock import INJECT_SLOWDOWN_ENV
from eagle_fix.gate import verdict
from eagle_fix.gate.ab_result import point_rounds, ratios_by_start_order, read_ab
from eagle_fix.machine.fingerprint import fingerprint
from eagle_fix.pairs.profiles import PROFILES

GATE = results_dir("calibration", "gate")


# What issue 22 asked a calibration to cover: the gate's defaults held to 0 false alarms on identical
# sides and at least 90% of MIN_DETECTABLE caught, over at least GOAL_TRIALS trials of each, at these
# points of the cpu-quick profile (context, mode, arm). coverage_table says which are met, on which machine.
GOAL_POINTS = (
    (8192, "eager", "eagle3"),
    (8192, "eager", "baseline"),
    (8192, "compile", "eagle3"),
    (8192, "compile", "baseline"),
    (32768, "eager", "eagle3"),
)
# at least this many trials a side: fewer could not tell 90% detection from a coin's luck
GOAL_TRIALS = 10
GOAL_DETECTION = 0.9


def trial(path: str | Path) -> dict[str, Any]:
    """One trial: the slowdown the new side carried, what the gate said, and the paired numbers."""
    data = read_ab(path)
    new_env, base_env = data["new"].get("env") or {}, data["base"].get("env") or {}
    if base_env.get(INJECT_SLOWDOWN_ENV):
        raise ValueError(f"{path}: the base side carries {INJECT_SLOWDOWN_ENV}; a calibration slows the new side only")
    slowdown = float(new_env.get(INJECT_SLOWDOWN_ENV) or 0.0)
    out: dict[str, Any] = {
        "file": Path(path).name,
        "slowdown": slowdown,
        "by_start_order": {},
        "threshold": data["threshold"],
        "alpha": data["alpha"],
        "machine": (data.get("machine") or {}).get("name") or data["machine_id"],
        "alarm": data["summary"]["exit_code"] != 0,
        "flagged": [],
        "ratios": {},
        "samples": {},
    }
    out["minutes"] = _minutes(data)
    out["schema"] = data.get("schema")
    for entry in data["points"]:
        out["identity"] = entry["identity"]
        # judged with another machine's record of the point kind (none of its own): the test's words say whose
        gated = (entry["verdicts"].get(entry.get("gated_metric") or "") or {}).get("test") or ""
        out["borrowed"] = "borrowed" in gated
        out["rounds"], out["blocks"] = point_rounds(data, entry)
        out["design"] = entry.get("design")  # schema 6: the plan the point ran (else the fixed rounds and blocks)
        out["pinned"] = all((p or {}).get("pinned") for p in (entry.get("pinning") or {"?": None}).values())
        # significant in either direction, whatever the threshold (an A/A's "improved" is as false as a regression)
        out["significant"] = any(
            (entry["verdicts"].get(m) or {}).get("verdict") in ("regression", "improved") for m in verdict.PAIRED
        )
        for metric, v in entry["verdicts"].items():
            if v["verdict"] in verdict.FAILING:
                out["flagged"].append(metric)
            if "ratios" in v:
                out["ratios"][metric] = v["ratios"]
        for metric in verdict.PAIRED:  # schema 6 verdicts keep no ratios: the pairs have them
            if metric not in out["ratios"]:
                pairs = [
                    p for p in entry["pairs"] if (p.get("base") or {}).get(metric) and (p.get("new") or {}).get(metric)
                ]
                if pairs:
                    out["ratios"][metric] = [p["new"][metric] / p["base"][metric] for p in pairs]
        for metric in verdict.PAIRED:
            out["samples"][metric] = {
                side: [
                    p[side][metric]
                    for p in entry["pairs"]
                    if isinstance(p.get(side), dict) and p[side].get(metric) is not None
                ]
                for side in ("base", "new")
            }
            # the paired ratios by which side's engine was started first (files before blocks: the
            # file's one start order, base unless it says otherwise)
            by = ratios_by_start_order(entry["pairs"], metric, data.get("start_order") or ["base"])
            if by:
                out["by_start_order"][metric] = by
    return out


def _minutes(data: dict[str, Any]) -> float | None:
    """What the trial took, start to finish, in minutes."""
    try:
        span = _dt.datetime.fromisoformat(data["finished"]) - _dt.datetime.fromisoformat(data["started"])
    except (KeyError, TypeError, ValueError):
        return None
    return span.total_seconds() / 60


def trials(folder: str | Path = GATE) -> list[dict[str, Any]]:
    """Every trial of a calibration folder (files being written, *.partial, are not trials yet); a
    folder not made yet has none (the docs name it before its first trial lands, and git keeps no
    empty folder)."""
    return [trial(p) for p in sorted(Path(folder).glob("*.json"))]


def off_defaults(t: dict[str, Any]) -> str | None:
    """None when a trial ran with `ab`'s defaults (rounds, blocks, sample length for its profile,
    threshold, alpha, pinned engines), else what differs: only such trials calibrate the defaults."""
    profile = PROFILES.get(t["identity"]["profile"])
    length = min(profile.output_len, verdict.DEFAULT_SAMPLE_TOKENS or profile.output_len) if profile else None
    want = {
        "rounds": verdict.default_rounds(t["identity"]["mode"]),
        "blocks": verdict.DEFAULT_BLOCKS,
        "threshold": verdict.DEFAULT_THRESHOLD,
        "alpha": verdict.DEFAULT_ALPHA,
    }
    have = {k: t[k] for k in want}
    off = [f"{k} {have[k]:g} (default {v:g})" for k, v in want.items() if have[k] != v]
    if t["identity"]["output_len"] != length:
        off.append(f"{t['identity']['output_len']}-token samples (default {length})")
    if not t["pinned"]:
        off.append("engines not pinned")
    return ", ".join(off) or None


def one_machine(ts: list[dict[str, Any]]) -> None:
    """A ValueError when the trials ran on several machines. A rate is one machine's: machines of
    this kind differ in speed and in noise, and pooling them would state a power that no machine has."""
    machines = sorted({t["machine"] for t in ts})
    if len(machines) > 1:
        raise ValueError(
            f"these trials ran on {len(machines)} machines ({', '.join(machines)}); a calibration is one "
            f"machine's: keep each machine's trials in their own folder (CALIBRATE_OUT)"
        )


def resume_check(folder: str | Path, machine_name: str) -> str | None:
    """scripts/calibrate.sh's guard: None when this machine may add trials to FOLDER, else the
    one-line reason (FOLDER holds another machine's trials) with the fix."""
    ts = trials(folder)
    theirs = sorted({t["machine"] for t in ts} - {machine_name})
    if not theirs:
        return None
    return (
        f"{folder} holds trials of {', '.join(theirs)} and this is {machine_name}; a calibration is one "
        f"machine's: CALIBRATE_OUT={str(folder).rstrip('/')}-{machine_name} starts this machine's own"
    )


def rates(ts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per slowdown: trials, alarms, the alarm rate and its 95% Wilson interval, and the median
    paired ratio of the model step (what the knob really did) over the trials."""
    one_machine(ts)
    out = []
    for s in sorted({t["slowdown"] for t in ts}):
        group = [t for t in ts if t["slowdown"] == s]
        alarms = sum(t["alarm"] for t in group)
        lo, hi = stats.wilson(alarms, len(group)) or (0.0, 1.0)
        step = [statistics.median(t["ratios"]["step_ms"]) for t in group if t["ratios"].get("step_ms")]
        out.append(
            {
                "slowdown": s,
                "trials": len(group),
                "alarms": alarms,
                "rate": alarms / len(group),
                "rate_ci95": (lo, hi),
                "step_ratio_median": statistics.median(step) if step else None,
                "step_ratio_range": (min(step), max(step)) if step else None,
                "flagged": sorted({m for t in group for m in t["flagged"]}),
                "significant": sum(bool(t.get("significant")) for t in group),
                "minutes_median": statistics.median(m)
                if (m := [t["minutes"] for t in group if t.get("minutes")])
                else None,
            }
        )
    return out


def floor(ts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The noise floor of the A/A trials, per paired metric: the CV of one side's samples within a
    trial (median over trials), the CV of the paired ratios (all rounds pooled), and the spread of
    the trials' median ratios (what the verdict reads)."""
    one_machine(ts)
    aa = [t for t in ts if t["slowdown"] == 0]
    out = []
    for metric in verdict.PAIRED:
        ratios = [r for t in aa for r in t["ratios"].get(metric, [])]
        sample_cv = [
            c for t in aa for side in ("base", "new") if (c := stats.cv(t["samples"].get(metric, {}).get(side, [])))
        ]
        medians = [statistics.median(t["ratios"][metric]) for t in aa if t["ratios"].get(metric)]
        if not ratios:
            continue
        out.append(
            {
                "metric": metric,
                "trials": len(aa),
                "rounds": len(ratios),
                "sample_cv": statistics.median(sample_cv) if sample_cv else None,
                "ratio_cv": stats.cv(ratios),
                "ratio_robust_cv": stats.robust_cv(ratios),
                "median_ratio_range": (min(medians), max(medians)),
                "median_ratio_sd": statistics.pstdev(medians) if len(medians) > 1 else None,
            }
        )
    return out


def resampled(
    ts: list[dict[str, Any]],
    rounds: tuple[int, ...] = (16, 32, 48, 64, 96, 128),
    shifts: tuple[float, ...] = (0.0, verdict.MIN_DETECTABLE),
    *,
    metric: str = "step_ms",
    threshold: float = verdict.DEFAULT_THRESHOLD,
    alpha: float = verdict.DEFAULT_ALPHA,
    draws: int = 400,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """What other round counts would have done on this noise: rounds drawn (with replacement) from
    the A/A trials' paired ratios of `metric`, multiplied by 1 + shift, judged by the gate's rule.
    A model of the gate, not a measurement of it: it keeps the noise's shape but not its order in
    time, and judges one metric where `ab` alarms on any."""
    import random

    pool = [r for t in ts if t["slowdown"] == 0 for r in t["ratios"].get(metric, [])]
    if not pool:
        return []
    rng = random.Random(seed)
    out = []
    for n in rounds:
        row: dict[str, Any] = {"rounds": n, "metric": metric, "pool": len(pool), "draws": draws}
        for s in shifts:
            hits = 0
            for _ in range(draws):
                new = [rng.choice(pool) * (1 + s) for _ in range(n)]
                j = significance.judge(
                    [1.0] * n, new, higher_is_better=False, threshold=threshold, alpha=alpha, paired=True
                )
                hits += j["verdict"] == "regression"
            row[s] = hits / draws
        out.append(row)
    return out


def _tally() -> dict[str, Any]:
    """One point's trials on one machine: their folders, the alarms of each kind, other slowdowns."""
    return {"folders": [], "aa": [], "slow": [], "other": set()}


def coverage(folders) -> list[dict[str, Any]]:
    """One row per calibrated point and machine (trials at `ab`'s defaults only, from every folder
    given; a parent folder stands for its gate* subfolders), then one row per GOAL_POINTS point no
    folder covers. Each row says whether the goal holds there: `met`, `missed` (a false alarm, or
    fewer than GOAL_DETECTION caught over GOAL_TRIALS or more), `not yet` (too few trials), `not started`."""
    dirs = []
    for f in map(Path, folders):
        dirs += sorted(d for d in f.glob("gate*") if d.is_dir()) or [f]
    groups: dict[tuple, dict[str, Any]] = {}
    for d in dirs:
        for t in trials(d):
            if off_defaults(t):
                continue
            i = t["identity"]
            key = (i["profile"], i["context_len"], i["mode"], i["arm"], t["machine"])
            g = groups.setdefault(key, _tally())
            if d.as_posix() not in g["folders"]:
                g["folders"].append(d.as_posix())
            if t["slowdown"] == 0:
                g["aa"].append(t["alarm"])
            elif math.isclose(t["slowdown"], verdict.MIN_DETECTABLE):
                g["slow"].append(t["alarm"])
            else:
                g["other"].add(t["slowdown"])
    covered = {key[1:4] for key in groups if key[0] == "cpu-quick"}
    for point in GOAL_POINTS:  # a goal point no folder covers: an empty tally on no machine
        if point not in covered:
            groups[("cpu-quick", *point, None)] = _tally()
    rows = []
    for (profile, ctx, mode, arm, machine), g in groups.items():
        false_alarms, caught, n_aa, n_slow = sum(g["aa"]), sum(g["slow"]), len(g["aa"]), len(g["slow"])
        if machine is None:
            status = "not started"
        elif false_alarms:
            status = f"missed: {false_alarms} false alarm{'s' if false_alarms > 1 else ''}"
        elif n_aa >= GOAL_TRIALS and n_slow >= GOAL_TRIALS:
            status = "met" if caught >= GOAL_DETECTION * n_slow else f"missed: {caught} of {n_slow} caught"
        else:
            status = f"not yet: {max(GOAL_TRIALS - n_aa, 0)} A/A and {max(GOAL_TRIALS - n_slow, 0)} slowed trials to go"
        rows.append(
            {
                "point": Point(ctx, mode, arm).words("short"),
                "profile": profile,
                "context_len": ctx,
                "mode": mode,
                "arm": arm,
                "machine": machine,
                "aa": n_aa,
                "false_alarms": false_alarms,
                "slow": n_slow,
                "caught": caught,
                "other_slowdowns": sorted(g["other"]),
                "status": status,
                "folders": g["folders"],
            }
        )
    goal = {p: i for i, p in enumerate(GOAL_POINTS)}
    return sorted(
        rows,
        key=lambda r: (
            r["profile"] != "cpu-quick",
            goal.get((r["context_len"], r["mode"], r["arm"]), len(goal)),
            r["context_len"],
            r["mode"],
            r["arm"],
            r["machine"] or "",
        ),
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m eagle_fix.gate.calibration --resume-check FOLDER`: exit 2 with one line when FOLDER
    holds another machine's trials (scripts/calibrate.sh runs it before any engine starts)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m eagle_fix.gate.calibration")
    parser.add_argument("--resume-check", metavar="FOLDER", required=True)
    args = parser.parse_args(argv)
    why = resume_check(args.resume_check, fingerprint()["name"])
    if why:
        print(f"calibrate: {why}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
