"""Reading and judging a map file: the records of `eagle-fix map` per cell (context, load, mode, fix), the
paired EAGLE3 / baseline ratios of vLLM's served throughput and TPOT with their intervals, and the
break-even concurrency per context."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eagle_fix.core import arms, nested, record, stats
from eagle_fix.core.errors import EagleFixError

# Written by eagle-fix map on every record (eagle_fix.served.map).
KIND = "eagle-fix map"
# Identity of a measurement's cell (the rounds of one cell pair up).
CELL = ("profile", "context_len", "load", "mode", "fix")
# The paired ratios of a cell: EAGLE3 / baseline of vLLM bench's throughput and TPOT, and the server's TPOT.
RATIOS = {
    "throughput_ratio": "output_throughput",
    "tpot_ratio": "median_tpot_ms",
    "server_tpot_ratio": "server_tpot_ms",
}


def load_label(max_concurrency: int | None, request_rate: float | None) -> str:
    """ "c4" (--max-concurrency 4, all sent at once) or "r0.5" (--request-rate 0.5, Poisson)."""
    return f"r{request_rate:g}" if request_rate else f"c{max_concurrency}"


def parse_load(label: str) -> tuple[int | None, float | None]:
    if label.startswith("r"):
        return None, float(label[1:])
    return int(label[1:]), None


def read_map(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a map file (a torn last line, from a killed run, is dropped)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise EagleFixError(f"{path}: cannot read ({exc.strerror or exc})", exit_code=2) from None
    except UnicodeDecodeError:
        raise EagleFixError(
            f"{path}: not UTF-8 text; give a map file written by `eagle-fix map --out`", exit_code=2
        ) from None
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):
                break
            raise EagleFixError(f"{path}:{i}: not a JSON line", exit_code=2) from None
        if not isinstance(rec, dict) or rec.get("kind") != KIND:
            raise EagleFixError(f"{path}:{i}: not an `eagle-fix map` record", exit_code=2)
        out.append(rec)
    return out


def num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def ratio_summary(per_launch: dict[int, list[float]], confidence: float = 0.95) -> dict[str, Any]:
    """One paired ratio of a cell from its rounds, grouped by server launch. With 2 launches or more the
    launch is the unit: the ratio is exp(mean of the launches' mean log ratios) and the interval a t
    interval over those means (`nested.launch_interval`), as the gate's tests count launches, not rounds.
    With one launch (maps made before launches) it is the median of the rounds and their distribution-free
    interval, which carries no launch-to-launch noise (`basis` says which)."""
    launches = {n: [x for x in stats.clean(v) if x > 0] for n, v in per_launch.items()}
    launches = {n: v for n, v in launches.items() if v}
    rounds = [x for v in launches.values() for x in v]
    if len(launches) >= 2:
        m, (lo, hi) = nested.launch_interval(
            [sum(math.log(x) for x in v) / len(v) for v in launches.values()], confidence
        )
        return {
            "n": len(rounds),
            "launches": len(launches),
            "basis": "launches",
            "ratio": math.exp(m),
            "ci95": [math.exp(lo), math.exp(hi)],
            "coverage": confidence,
        }
    s = stats.ratio_summary(rounds, confidence)
    return {"n": s["n"], "launches": len(launches), "basis": "rounds", "ratio": s["median"], **s}


def ratio_label(s: dict[str, Any]) -> str:
    """How a ratio's interval reads: "95% t, 4 launches", or for one launch its rounds' coverage."""
    if s.get("basis") == "launches":
        return f"{s['coverage']:.0%} t, {s['launches']} launches"
    return f"{stats.interval_label(s.get('coverage'))}, 1 launch"


def summarize(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell (context, load, mode, fix): the paired EAGLE3 / baseline ratios of vLLM's
    output_throughput and median_tpot_ms, and of the engine's own TPOT (server_tpot_ms), over the
    rounds where both arms ran, with their launch-level interval (`ratio_summary`), acceptance per
    round, drafter coverage, failures with causes."""
    recs = list(records)
    base = {
        (r["profile"], r["context_len"], r["load"], r["mode"], r.get("launch", 0), r["round"]): r
        for r in recs
        if arms.is_baseline(r["arm"])
    }
    cells: dict[tuple, dict[str, Any]] = {}
    for r in recs:
        if not arms.is_eagle3(r["arm"]):  # a cell's key has no arm: the map is EAGLE3's against the baseline
            continue
        key = (r["profile"], r["context_len"], r["load"], r["mode"], r.get("fix"))
        c = cells.setdefault(
            key,
            {
                **dict(zip(CELL, key)),
                "pairs": {name: {} for name in RATIOS},
                "acceptance": [],
                "coverage": [],
                "failed": [],
                "rounds": 0,
                "eagle3_output_throughput": [],
                "baseline_output_throughput": [],
                "kv_max_concurrency": None,
                "kv_room_eagle3": None,
                "kv_room_baseline": None,
            },
        )
        c["rounds"] += 1
        launch = r.get("launch", 0)
        b = base.get((r["profile"], r["context_len"], r["load"], r["mode"], launch, r["round"]))
        for side in (r, b):
            if side is not None and side.get("status") != "ok":
                where = f"launch {launch} round {side['round']}" if launch else f"round {side['round']}"
                c["failed"].append(f"{side['arm']} {where}: {record.cause(side.get('error'))}")
        if r.get("status") == "ok":
            c["eagle3_output_throughput"].append(r.get("output_throughput"))
            if num(r.get("spec_decode_acceptance_length")) is not None:
                c["acceptance"].append(r["spec_decode_acceptance_length"])
            if num(r.get("drafter_coverage")) is not None:
                c["coverage"].append(r["drafter_coverage"])
            c["kv_max_concurrency"] = r.get("kv_max_concurrency") or c["kv_max_concurrency"]
        for side in (r, b):
            # how many requests of this context the server's KV cache holds at once, with the draft's
            # KV (EAGLE3) and without it (baseline): vLLM's capacity in tokens over the context
            if side is not None and num(side.get("kv_cache_capacity_tokens")):
                c[f"kv_room_{side['arm']}"] = int(side["kv_cache_capacity_tokens"] // side["context_len"])
        if b is not None and b.get("status") == "ok":
            c["baseline_output_throughput"].append(b.get("output_throughput"))
        if r.get("status") == "ok" and b is not None and b.get("status") == "ok":
            for name, metric in RATIOS.items():
                c["pairs"][name].setdefault(launch, []).extend(
                    stats.paired_ratios([num(b.get(metric)) or 0.0], [num(r.get(metric)) or 0.0])
                )
    out = []
    for c in cells.values():
        pairs = c.pop("pairs")
        c.update({name: ratio_summary(pairs[name]) for name in RATIOS})
        c["tau_star"] = served_tau_star(c)
        out.append(c)
    return sorted(out, key=lambda c: (c["profile"], c["mode"], str(c["fix"]), c["context_len"], _load_order(c["load"])))


def served_tau_star(cell: dict[str, Any]) -> dict[str, Any] | None:
    """The break-even acceptance of a served cell (issue #54): a drafted engine step emits tau tokens a request
    for the price of the speculative step, so its TPOT over the plain one is (spec step / plain step) / tau and
    tau* = tau x (server TPOT ratio, EAGLE3 / baseline), per context and load, from the engine's own TPOT.
    Its interval is the ratio's (launches as the unit) times the median acceptance: acceptance's own spread
    over the rounds is left out. None without acceptance or a ratio."""
    ratio = cell.get("server_tpot_ratio") or {}
    acc = [float(x) for x in cell.get("acceptance") or [] if num(x) is not None]
    if not acc or ratio.get("ratio") is None:
        return None
    tau = stats.median(acc)
    ci = ratio.get("ci95")
    return {
        "estimate": tau * ratio["ratio"],
        "ci95": [tau * ci[0], tau * ci[1]] if ci else None,
        "acceptance": tau,
    }


def _load_order(load: str) -> tuple[int, float]:
    conc, rate = parse_load(load)
    return (0, conc) if conc else (1, rate or 0.0)


def break_even(summary: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """Per (profile, mode, fix, context): the lowest --max-concurrency at which EAGLE3's output
    throughput is below the baseline's with the whole interval of the paired ratio below 1 (None:
    not reached in the grid), and the lowest at which the ratio's estimate is below 1."""
    out: dict[tuple, dict[str, Any]] = {}
    for c in summary:
        conc, rate = parse_load(c["load"])
        if rate:
            continue
        key = (c["profile"], c["mode"], c["fix"], c["context_len"])
        entry = out.setdefault(key, {"interval": None, "ratio": None, "concurrencies": []})
        entry["concurrencies"].append(conc)
        s = c["throughput_ratio"]
        if s["ci95"] and s["ci95"][1] < 1 and (entry["interval"] is None or conc < entry["interval"]):
            entry["interval"] = conc
        if s["ratio"] is not None and s["ratio"] < 1 and (entry["ratio"] is None or conc < entry["ratio"]):
            entry["ratio"] = conc
    return out


def format_summary(summary: list[dict[str, Any]]) -> str:
    lines = []
    for c in summary:
        t, p, sp = c["throughput_ratio"], c["tpot_ratio"], c["server_tpot_ratio"]

        def iv(s):
            if s["ratio"] is None:
                return "-"
            ci = f" [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}] {ratio_label(s)}" if s["ci95"] else ""
            return f"{s['ratio']:.3f}{ci}"

        acc = stats.median(c["acceptance"]) if c["acceptance"] else None
        lines.append(
            f"{c['mode']} fix {c['fix']} context {c['context_len']} {c['load']}: throughput x{iv(t)}, "
            f"TPOT x{iv(p)} (client), x{iv(sp)} (server)" + (f", acceptance {acc:.2f}" if acc is not None else "")
        )
        for f in c["failed"]:
            lines.append(f"  failed: {f}")
    return "\n".join(lines)
