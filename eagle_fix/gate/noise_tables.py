"""The gate's noise as the docs show it: each machine's recorded components and plan (results/gate/), and the
replay of the committed A/A trials by the old rule and the launch-level one (`eagle-fix noise --replay`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle_fix.core import metrics, nested
from eagle_fix.core.errors import EagleFixError
from eagle_fix.gate import components
from eagle_fix.gate.calibration_tables import _md, _pct


def _files(paths, pattern: str) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.glob(pattern)) if p.is_dir() else [p]
    return out


def _records(paths) -> list[dict[str, Any]]:
    found = []
    for f in _files(paths, "*/*.json"):
        if "-aa-" in f.name:
            continue
        data = json.loads(f.read_text())
        if data.get("kind") == components.KIND:
            found.append(data)
    if not found:
        raise EagleFixError(f"no `eagle-fix noise` records in {' '.join(map(str, paths))}: run eagle-fix noise")
    return found


def _sorted_records(paths) -> list[dict[str, Any]]:
    return sorted(_records(paths), key=lambda d: (components.PointKind(**d["point"]).name, d["machine"]))


def _component_cells(m: dict[str, Any]) -> list[str]:
    """A metric's launch sd (with its upper bound), round sd and start-order effect, as the tables show them."""
    return [
        f"{_pct(m['sigma_launch'], 2)} (≤ {_pct(m['sigma_launch_upper'], 2)})",
        _pct(m["sigma_round"]),
        f"{m['start_order']:+.2%}",
    ]


def _minutes(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 60:.0f} min"


def _plan(plan: dict[str, Any] | None) -> str:
    if not plan:
        return "– (no costs)"
    return (
        f"{plan['rounds']} rounds x up to {plan['max_blocks']} launch pairs, a look every {plan['look_every']}; "
        f"catches {_pct(plan['detectable'])} (90%) in at most {_minutes(plan['expected_s'])}"
    )


def components_table(paths) -> str:
    """One row per machine and point kind: the launch and round sd of the model step, the start-order effect,
    what a launch pair and a round cost, and the plan `ab` runs (and what catching 3% would take)."""
    rows = []
    for d in _sorted_records(paths):
        m = d["metrics"][components.PLANNED_METRIC]
        costs = d.get("costs") or {}
        rows.append(
            [
                components.PointKind(**d["point"]).name,
                f"`{d['machine']}`",
                f"{m['blocks']} ({m['trials']} trials, {m['rounds']} rounds)",
                *_component_cells(m),
                f"{costs['launch_s']:.0f} s, {costs['round_s']:.1f} s" if costs else "–",
                _plan(d.get("plan")),
                _plan(d.get("plan_3pct")),
            ]
        )
    head = [
        "point",
        "machine",
        "launch pairs",
        f"launch sd ({nested.UPPER_CONFIDENCE:.0%} upper)",
        "round sd",
        "started first",
        "a launch pair, a round",
        "plan for 5%",
        "plan for 3%",
    ]
    return (
        "`step_ms`, log scale: the sd of a launch pair's offset, of one round's ratio within a launch, and the "
        "mean offset of the launches whose new engine started first\n\n" + _md(head, rows)
    )


def clocks_table(paths) -> str:
    """The model step on each clock it was read on, from the same rounds of the same launches: the components,
    and the plan each would buy at the record's costs (the gate plans with the wall clock, step_ms)."""
    rows = []
    for d in _sorted_records(paths):
        for metric, clock in metrics.CLOCKS.items():
            if metric not in d["metrics"]:
                continue
            m = d["metrics"][metric]
            rows.append(
                [
                    components.PointKind(**d["point"]).name,
                    f"`{d['machine']}`",
                    f"`{metric}` ({clock})",
                    f"{m['blocks']} ({m['rounds']} rounds)",
                    *_component_cells(m),
                    _plan(components.plan_for(d, metric) if d.get("costs") else None),
                ]
            )
    head = [
        "point",
        "machine",
        "metric (clock)",
        "launch pairs",
        f"launch sd ({nested.UPPER_CONFIDENCE:.0%} upper)",
        "round sd",
        "started first",
        "plan for 5% with this clock",
    ]
    return (
        "the model step of the same rounds on each clock, log scale (wall: `time.perf_counter`; thread_cpu: "
        "`time.thread_time` of the stepping thread)\n\n" + _md(head, rows)
    )


def replay_table(paths) -> str:
    """One row per replayed pool: how often each rule calls identical sides different (its real alpha) and how
    often it catches 5%, and what a verdict costs."""
    rows = []
    n = None
    for f in _files(paths, "*.json"):
        data = json.loads(f.read_text())
        if data.get("kind") != "eagle-fix replay":
            raise EagleFixError(f"{f}: not an `eagle-fix noise --replay` file")
        for p in data["points"]:
            n = p["n"]
            kind = components.PointKind(**p["point"])
            fixed = {(r["shift"], r["alpha"]): r for r in p["fixed"]}
            seq = {(r["shift"], r["alpha"]): r for r in p["sequential"]}
            old_cost = p["launches"] * p["costs"]["launch_s"] + p["rounds"] * p["costs"]["round_s"]
            plan = p["plans"]["0.01"]

            def rate(row, key, digits=1):
                return f"{_pct(row[key], digits)} [{_pct(row[key + '_ci95'][0], digits)}, {_pct(row[key + '_ci95'][1], digits)}]"

            rows.append(
                [
                    f"{kind.name} on `{data['machine']}`",
                    f"{p['components']['blocks']} x {p['rounds']}",
                    rate(fixed[(0.0, 0.01)], "round_level"),
                    rate(fixed[(0.0, 0.05)], "round_level"),
                    f"{_pct(fixed[(0.05, 0.01)]['round_level'], 0)}, {_minutes(old_cost)}",
                    f"{plan['rounds']} x ≤ {plan['max_blocks']}",
                    rate(seq[(0.0, 0.01)], "significant"),
                    rate(seq[(0.0, 0.05)], "significant"),
                    f"{_pct(seq[(0.05, 0.01)]['regression'], 0)}, {_pct(seq[(0.03, 0.01)]['regression'], 0)}",
                    f"{_minutes(seq[(0.0, 0.01)]['median_cost_s'])}, {_minutes(seq[(0.05, 0.01)]['median_cost_s'])}",
                ]
            )
    head = [
        "pool",
        "A/A launch pairs x rounds",
        "old rule: A/A significant at 1% [95%]",
        "at 5%",
        "old rule: +5% caught, cost",
        "plan: rounds x launch pairs",
        "plan: A/A significant at 1% [95%]",
        "at 5%",
        "plan: +5%, +3% caught",
        "plan: median cost A/A, +5%",
    ]
    return (
        f"{n} replayed trials per cell, seeded, each judged by the old rule (the sign test over the rounds of 2 "
        "launch pairs, the pool's own design) and by the plan `ab` runs (launch-level test, looks, early stop); "
        "significant: p below the level in either direction, whatever the threshold\n\n" + _md(head, rows)
    )
