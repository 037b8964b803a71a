"""How `eagle-fix ab` measures and judges a point: the plan `eagle-fix noise` recorded for the machine and the
point's kind (rounds per launch pair, launch pairs at most, looks), the launch variance it judges by, or the
fixed design --rounds/--blocks ask for."""

from __future__ import annotations

import math
from typing import Any

from eagle_fix.core import nested
from eagle_fix.gate import components, simulate
from eagle_fix.gate.ab_args import DEFAULT_BLOCKS, ABArgs
from eagle_fix.gate.ab_result import PAIRED


def design_for(args: ABArgs, run: Any, p: Any, machine_name: str) -> tuple[nested.Plan, dict[str, Any]]:
    """How a point is measured and judged: the plan recorded for this machine and point kind (`eagle-fix noise`),
    the analysis of variance its test pools and its looks; --rounds/--blocks a fixed design judged once; without a record of the point
    kind for this machine, the nearest one components.find gives (said so), else the old default design judged
    by the launch-level test alone (which two launches cannot settle: said so)."""
    kind = components.PointKind(run.profile.name, p.context_len, p.mode, p.arm)
    data, source = components.find(machine_name, kind)
    # each metric's recorded analysis of variance (its mean squares and degrees of freedom), which the launch
    # test pools with the run's own block means (nested.launch_test): no recorded sd is taken as known
    sigma = {m: components.calibration(data, m) for m, _ in PAIRED}
    rounds = {m: (data["metrics"].get(m) or {}).get("sigma_round") for m, _ in PAIRED} if data else {}
    curve = None
    if args.fixed or data is None or not data.get("plan"):
        blocks = args.blocks or DEFAULT_BLOCKS
        per_block = max(1, args.rounds_for(p.mode) // blocks)
        design = nested.Plan(
            rounds=per_block,
            max_blocks=blocks,
            look_every=blocks,
            alpha=args.alpha,
            detectable=math.nan,
            power=components.POWER,
            expected_s=None,
        )
        if args.fixed:
            why = "--rounds/--blocks: a fixed design, judged at its end"
        elif data is None:
            why = (
                f"no plan recorded for {kind.name} on any machine (eagle-fix noise): the old design, judged at its end"
            )
        else:
            why = f"the record {source} has no plan (no costs): the old design, judged at its end"
    else:
        plan = data["plan"]
        design = nested.Plan(
            rounds=plan["rounds"],
            max_blocks=plan["max_blocks"],
            look_every=plan["look_every"],
            alpha=args.alpha,
            detectable=plan["detectable"],
            power=plan["power"],
            expected_s=plan.get("expected_s"),
        )
        why = f"the plan {source}"
        # what the rule itself could detect on this plan: its simulated operating curve (simulate.could_detect),
        # only where one was simulated for the record's plan at this run's threshold and level
        detect = simulate.could_detect(data["machine"], kind.name, threshold=args.threshold, alpha=args.alpha)
        curve = {"machine": data["machine"], "point": kind.name, "detect_90": detect}
    launch = {
        "sigma": sigma,
        "sigma_round": rounds,
        "source": source or "",
        "alpha_look": design.alpha_look,
        "design_source": why,
    }
    if curve is not None:
        launch["curve"] = curve
    return design, launch
