"""The gate's noise as the docs show it: each machine's recorded components and plan (results/gate/), the replay
of the committed A/A trials out of sample by the old rule and the launch-level one (`eagle-fix noise --replay`),
and the simulations under the committed noise (results/simulation/: the bound's coverage, the operating curves)."""

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


def _bound(m: dict[str, Any]) -> str:
    """The launch sd's upper bound as the plans use it: the larger of F and pivotal, or the stated floor."""
    if m.get("upper_is_floor"):
        return f"floor {_pct(m['sigma_launch_upper'], 2)} (F p {m['f_p_low']:.3f})"
    if m.get("f_upper") is None:
        return _pct(m["sigma_launch_upper"], 2)
    return f"{_pct(m['sigma_launch_upper'], 2)} (F {_pct(m['f_upper'], 2)}, pivotal {_pct(m['pivotal_upper'], 2)})"


def _component_cells(m: dict[str, Any]) -> list[str]:
    """A metric's launch sd (with its upper bound), round sd and start-order effect, as the tables show them."""
    return [
        f"{_pct(m['sigma_launch'], 2)} ≤ {_bound(m)}",
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
                f"{m['blocks']} ({m['trials']} trials, {m['rounds']} rounds; {m.get('df_launch')} df)",
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
        f"launch sd ≤ {nested.UPPER_CONFIDENCE:.0%} upper",
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
    """One row per replayed pool, out of sample (leave one run out): how often each rule calls identical sides
    different over 2 launch pairs, how often it catches 5%, from how many distinct trials and held-out runs, and
    how the plan fared in the held-out runs long enough to replay it."""
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
            plan = p["plans"]["0.01"]

            def rate(row, key, digits=1):
                if row.get(key) is None:
                    return "–"
                lo, hi = row[key + "_ci95"]
                return f"{_pct(row[key], digits)} [{_pct(lo, digits)}, {_pct(hi, digits)}]"

            aa, caught = seq[(0.0, 0.01)], seq[(0.05, 0.01)]
            rows.append(
                [
                    f"{kind.name} on `{data['machine']}`",
                    f"{len(p['held_out'])} ({p.get('out_of_sample', 'in sample')})",
                    f"{p['launches']} x {p['rounds']}; {fixed[(0.0, 0.01)].get('distinct', '?')}",
                    rate(fixed[(0.0, 0.01)], "round_level"),
                    rate(fixed[(0.0, 0.01)], "launch_level"),
                    f"{_pct(fixed[(0.05, 0.01)]['round_level'], 0)}, {_pct(fixed[(0.05, 0.01)]['launch_level'], 0)}",
                    f"{plan['rounds']} x ≤ {plan['max_blocks']}",
                    f"{aa.get('folds', '?')} of {len(p['held_out'])}",
                    rate(aa, "significant") if aa.get("n") else "–",
                    _pct(caught["regression"], 0) if caught.get("n") else "–",
                ]
            )
    head = [
        "pool",
        "held-out runs",
        "fixed design: launch pairs x rounds; distinct trials",
        "old rule: A/A significant at 1% [95%]",
        "launch t-test: A/A significant at 1% [95%]",
        "+5% caught: old, launch t-test",
        "plan of the whole pool",
        "held-out runs long enough for their plan",
        "there: A/A significant at a look [95%]",
        "there: +5% exit 1",
    ]
    return (
        f"{n} replayed trials per cell, seeded, leave one run out: each run held out in turn, judged with the "
        "components and plan of the others; a trial draws launch pairs without replacement from the held-out run, "
        "so the held-out runs, not the trials, are the independent outcomes; significant: p below the level in "
        "either direction, whatever the threshold\n\n" + _md(head, rows)
    )


def _load(paths, kind: str) -> dict[str, Any]:
    if len(paths) != 1 or not Path(paths[0]).is_file():
        raise EagleFixError(f"this table takes one file of results/simulation/ ({kind})")
    data = json.loads(Path(paths[0]).read_text())
    if data.get("kind") != kind:
        raise EagleFixError(f"{paths[0]}: not an `{kind}` file (python -m eagle_fix.gate.simulate)")
    return data


def coverage_table(paths) -> str:
    """How often the launch sd's 95% upper bound covers the true launch sd, per record design and noise shape,
    simulated under the record's round sd and start order (results/simulation/launch-bound-coverage.json)."""
    data = _load(paths, "eagle-fix bound coverage")
    sds = sorted({r["sigma_launch"] for r in data["rows"]})
    cells: dict[tuple, dict] = {}
    for r in data["rows"]:
        cells.setdefault((r["point"], r["machine"], r["blocks"], r["rounds"], r["shape"]), {})[r["sigma_launch"]] = r
    rows = []
    for (point, machine, blocks, rounds, shape), by in cells.items():
        rows.append(
            [
                f"{point} `{machine}`",
                f"{blocks} x {rounds}",
                shape,
                *(f"{_pct(by[s]['as_used_covers'], 0)} (F {_pct(by[s]['f_bound_covers'], 0)})" for s in sds),
            ]
        )
    worst = min(r["as_used_covers"] for r in data["rows"])
    head = ["design of", "launch pairs x rounds", "rounds", *(f"true launch sd {_pct(s, 1)}" for s in sds)]
    return (
        f"share of {data['rows'][0]['n']} simulated pools per cell whose bound as used (the larger of the F and "
        f"pivotal bounds, the {_pct(data['floor'], 1)} floor where both are 0) covers the true launch sd; in "
        f"brackets the F bound alone; smallest cell {_pct(worst, 0)}\n\n" + _md(head, rows)
    )


def operating_table(paths) -> str:
    """The decision rule's operating curve per point kind: the chance `ab` exits 1 against a true slowdown,
    simulated under each record's noise and plan (results/simulation/operating-curves.json)."""
    data = _load(paths, "eagle-fix operating curves")
    shifts = data["shifts"]
    rows = []
    for c in data["curves"]:
        plan = c["plan"]
        rows.append(
            [
                f"{c['point']} `{c['machine']}`",
                f"{plan['rounds']} x ≤ {plan['max_blocks']}",
                *(_pct(r["exit_1"], 0) for r in c["rows"]),
                "–" if c["detect_90"] is None else _pct(c["detect_90"], 1),
                _minutes(c["rows"][0]["median_cost_s"]),
            ]
        )
    head = ["point kind", "plan", *(f"{s:.0%}" for s in shifts), "90% exit 1 at", "median cost, A/A"]
    n = data["curves"][0]["n"] if data["curves"] else 0
    return (
        f"chance of exit 1 (a regression of `step_ms`) against a true slowdown, {n} simulated runs a cell at each "
        "record's launch sd bound, round sd and start order, judged by `ab`'s rule (launch t-test pooled with the "
        "record, threshold 3%, alpha 0.01 split over the looks)\n\n" + _md(head, rows)
    )
