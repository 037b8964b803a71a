"""What gating a grid costs on a machine with the plans `eagle-fix noise` recorded: per point, the record `ab`
would use (eagle_fix.gate.components.find), its plan, the minutes of its first look (where identical sides and
clear regressions mostly stop) and of the whole plan. A point whose record is another context's is costed at
that context's launch and round (a longer context costs more: a lower bound there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle_fix.core import nested
from eagle_fix.core.errors import EagleFixError
from eagle_fix.gate import components
from eagle_fix.gate.calibration_tables import _md
from eagle_fix.pairs.profiles import PROFILES

# The grids the docs cost: (label, profile, contexts or None for the profile's own).
GRIDS = (("cpu-quick", "cpu-quick", None), ("cpu 8K–32K", "cpu", (8192, 16384, 32768)))
MODES, ARMS = ("eager", "compile"), ("eagle3", "baseline")


def point_cost(machine: str, kind: components.PointKind) -> dict[str, Any]:
    data, source = components.find(machine, kind)
    if not data or not data.get("plan") or not data.get("costs"):
        return {"kind": kind, "source": source or "no record on any machine", "look_s": None, "plan_s": None}
    plan, costs = data["plan"], data["costs"]

    def cost(blocks: int) -> float:
        return nested.design_cost_s(blocks, plan["rounds"], launch_s=costs["launch_s"], round_s=costs["round_s"])

    return {
        "kind": kind,
        "source": source,
        "plan": plan,
        "look_s": cost(plan["look_every"]),
        "plan_s": cost(plan["max_blocks"]),
    }


def grid_cost(machine: str, profile: str, contexts: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
    if profile not in PROFILES:
        raise EagleFixError(f"profile {profile!r}: unknown; choose one of {', '.join(PROFILES)}")
    cs = contexts or PROFILES[profile].contexts
    return [point_cost(machine, components.PointKind(profile, c, m, a)) for c in cs for m in MODES for a in ARMS]


def cost_table(paths) -> str:
    """The minutes `ab` takes to gate each grid of GRIDS on the machine whose folder of records is given
    (results/gate/<machine>): a first look per point (the usual stop) and every plan run to its end."""
    if len(paths) != 1 or not Path(paths[0]).is_dir():
        raise EagleFixError("--table gate-cost takes one folder of records: results/gate/<machine>")
    machine = Path(paths[0]).name
    rows = []
    for label, profile, contexts in GRIDS:
        points = grid_cost(machine, profile, contexts)
        known = [p for p in points if p["look_s"] is not None]
        own = sum(p["source"] == f"recorded for {machine}" for p in known)
        near = sum(p["source"].startswith(f"recorded for {machine} as ") for p in known)
        whose = [f"{own} its own", f"{near} its own of another point", f"{len(known) - own - near} another machine's"]
        rows.append(
            [
                label,
                str(len(points)),
                f"{len(known)}: " + ", ".join(w for w in whose if not w.startswith("0 ")),
                f"{sum(p['look_s'] for p in known) / 60:.0f}",
                f"{sum(p['plan_s'] for p in known) / 60:.0f}",
            ]
        )
    head = ["grid", "points", "with a plan (whose)", "minutes: a first look each", "minutes: every plan to its end"]
    return (
        f"on `{machine}`: the launch pairs and rounds of each point's plan at its record's costs (a record of "
        "another context is that context's: a lower bound for a longer one)\n\n" + _md(head, rows)
    )
