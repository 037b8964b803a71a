"""The gate's statistics checked by simulation under the committed noise (results/gate records), without an engine:
how often the launch sd's 95% upper bound covers the true launch sd (coverage), and the decision rule's operating
curve per point kind (the chance `ab` exits 1 against a true slowdown of 0-8%), whose 90% point is what a verdict
could detect. Written to results/simulation/ by `python -m eagle_fix.gate.simulate`; the docs' tables read them
(eagle_fix.gate.noise_tables)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as st

from eagle_fix.core import nested, variance
from eagle_fix.gate import components
from eagle_fix.gate.verdict import DEFAULT_THRESHOLD

OUT = components.FOLDER.parent / "simulation"
COVERAGE_FILE, CURVE_FILE = "launch-bound-coverage.json", "operating-curves.json"
SHIFTS = tuple(i / 100 for i in range(9))  # 0% .. 8%
# The true launch sds the coverage is checked at (log units), and the round scatter's shapes.
LAUNCH_SDS = (0.005, 0.01, 0.02)
SHAPES = ("normal, equal spread", "t(4) rounds, block sds x1/4-x4")


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> list[float]:
    ci = st.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return [float(ci.low), float(ci.high)]


def records(folder: Path | None = None) -> list[dict[str, Any]]:
    """The committed `eagle-fix noise` records (not their A/A files), by point kind and machine."""
    out = []
    for p in sorted((folder or components.FOLDER).glob("*/*.json")):
        if "-aa-" in p.name:
            continue
        data = json.loads(p.read_text())
        if data.get("kind") == components.KIND:
            out.append(data)
    return out


def _blocks(
    rng: np.random.Generator, *, blocks: int, rounds: int, sigma_l: float, sigma_r: float, gamma: float, shape: str
) -> list[nested.Block]:
    """One run from the nested model: alternating start orders (+-gamma), a launch offset ~ N(0, sigma_l) per
    block, rounds around it; the second shape draws each block's round sd log-uniformly between sigma_r / 4 and
    4 sigma_r (a 16-fold range, as issue 53's 1-16%) and its rounds from t with 4 degrees of freedom (unit variance)."""
    signs = np.where(np.arange(blocks) % 2 == 0, 1.0, -1.0)
    offsets = signs * gamma + rng.normal(0.0, sigma_l, blocks) if sigma_l > 0 else signs * gamma
    if shape == SHAPES[0]:
        sds = np.full(blocks, sigma_r)
        noise = rng.normal(0.0, 1.0, (blocks, rounds))
    else:
        sds = sigma_r * np.exp(rng.uniform(math.log(0.25), math.log(4.0), blocks))
        noise = rng.standard_t(4, (blocks, rounds)) / math.sqrt(2.0)
    x = offsets[:, None] + sds[:, None] * noise
    return [nested.Block(b, tuple(x[b].tolist()), bool(signs[b] > 0)) for b in range(blocks)]


# The pivotal bound's draws in the coverage simulation (records use variance.PIVOT_DRAWS): thousands of pools.
COVERAGE_DRAWS = 1000


def coverage(
    recs: list[dict[str, Any]], *, n: int = 1000, seed: int = 0, only: set[int] | None = None
) -> dict[str, Any]:
    """For each record's measuring design (its blocks and their rounds, step_ms's round sd and start order) and
    each true launch sd of LAUNCH_SDS and shape of SHAPES: the share of n simulated pools whose exact F bound
    alone covers the true launch sd, the share whose bound as used (the larger of F and pivotal, the floor where
    both are 0) does, and the share that took the floor (the pivotal bound from COVERAGE_DRAWS draws). Each record
    draws from its own seeded stream, so `only` (record indices) splits the work without changing a cell."""
    rows = []
    keep, variance.PIVOT_DRAWS = variance.PIVOT_DRAWS, COVERAGE_DRAWS
    for i, rec in enumerate(recs):
        if only is not None and i not in only:
            continue
        rng = np.random.default_rng([seed, i])
        m = rec["metrics"][components.PLANNED_METRIC]
        blocks = m["blocks"]
        rounds = round(m["rounds_per_block"])
        for shape in SHAPES:
            for sigma_l in LAUNCH_SDS:
                f_cover = used_cover = floors = 0
                for _ in range(n):
                    run = _blocks(
                        rng,
                        blocks=blocks,
                        rounds=rounds,
                        sigma_l=sigma_l,
                        sigma_r=m["sigma_round"],
                        gamma=m["start_order"],
                        shape=shape,
                    )
                    c = nested.estimate([run])
                    f_cover += sigma_l <= c.f_upper
                    used_cover += sigma_l <= c.sigma_launch_upper
                    floors += c.upper_is_floor
                rows.append(
                    {
                        "machine": rec["machine"],
                        "point": components.PointKind(**rec["point"]).name,
                        "blocks": blocks,
                        "rounds": rounds,
                        "sigma_round": m["sigma_round"],
                        "shape": shape,
                        "sigma_launch": sigma_l,
                        "n": n,
                        "f_bound_covers": f_cover / n,
                        "f_bound_covers_ci95": clopper_pearson(f_cover, n),
                        "as_used_covers": used_cover / n,
                        "floor": floors / n,
                    }
                )
    variance.PIVOT_DRAWS = keep
    return {
        "kind": "eagle-fix bound coverage",
        "pivot_draws": COVERAGE_DRAWS,
        "confidence": nested.UPPER_CONFIDENCE,
        "floor": nested.LAUNCH_SD_FLOOR,
        "seed": seed,
        "rows": rows,
    }


def _sequential(run: list[nested.Block], c: nested.Components, plan: nested.Plan, threshold: float) -> tuple:
    for looked in range(plan.look_every, plan.max_blocks + 1, plan.look_every):
        t = nested.launch_test(run[:looked], c, alpha_look=plan.alpha_look)
        verdict, _ = nested.decide(
            t,
            threshold=threshold,
            higher_is_better=False,
            alpha_look=plan.alpha_look,
            final=looked == plan.max_blocks,
        )
        if verdict != "continue":
            return verdict, looked
    return "inconclusive", plan.max_blocks


def operating_curve(
    rec: dict[str, Any], *, n: int = 1000, seed: int = 0, threshold: float = DEFAULT_THRESHOLD
) -> dict[str, Any]:
    """The rule `ab` runs on this record's plan (launch_test pooled with the record's step_ms calibration, decide
    at each look, alpha split over the looks) on n runs a shift drawn from the model at the record's noise: the
    launch sd at its upper bound (what the plan assumes), the round sd and start order measured. Exit 1 is a
    "regression" verdict of the gated metric."""
    rng = np.random.default_rng(seed)
    m = rec["metrics"][components.PLANNED_METRIC]
    c = nested.Components.from_dict(m)
    p = rec["plan"]
    plan = nested.Plan(
        p["rounds"], p["max_blocks"], p["look_every"], p["alpha"], p["detectable"], p["power"], p["expected_s"]
    )
    costs = rec["costs"]
    rows = []
    for shift in SHIFTS:
        exits, used = 0, []
        for _ in range(n):
            run = _blocks(
                rng,
                blocks=plan.max_blocks,
                rounds=plan.rounds,
                sigma_l=c.launch,
                sigma_r=c.sigma_round,
                gamma=c.start_order,
                shape=SHAPES[0],
            )
            run = [nested.Block(b.index, tuple(x + math.log1p(shift) for x in b.log_ratios), b.base_first) for b in run]
            verdict, looked = _sequential(run, c, plan, threshold)
            exits += verdict == "regression"
            used.append(looked)
        used.sort()
        rows.append(
            {
                "shift": shift,
                "exit_1": exits / n,
                "exit_1_ci95": clopper_pearson(exits, n),
                "median_launches": used[n // 2],
                "median_cost_s": nested.design_cost_s(
                    used[n // 2], plan.rounds, launch_s=costs["launch_s"], round_s=costs["round_s"]
                ),
            }
        )
    return {
        "machine": rec["machine"],
        "point": components.PointKind(**rec["point"]).name,
        "plan": plan.as_dict(),
        "launch_sd": c.launch,
        "sigma_round": c.sigma_round,
        "threshold": threshold,
        "n": n,
        "rows": rows,
        "detect_90": detectable(rows),
    }


def detectable(rows: list[dict[str, Any]], power: float = 0.9) -> float | None:
    """The smallest slowdown the curve calls a regression with `power` (linear between its points; None when
    the curve does not reach it by its last point)."""
    prev = None
    for r in rows:
        if r["exit_1"] >= power:
            if prev is None or r["exit_1"] == prev["exit_1"]:
                return r["shift"]
            w = (power - prev["exit_1"]) / (r["exit_1"] - prev["exit_1"])
            return prev["shift"] + w * (r["shift"] - prev["shift"])
        prev = r
    return None


def curves(recs: list[dict[str, Any]], *, n: int = 1000, seed: int = 0) -> dict[str, Any]:
    return {
        "kind": "eagle-fix operating curves",
        "seed": seed,
        "shifts": list(SHIFTS),
        "curves": [operating_curve(r, n=n, seed=seed + i) for i, r in enumerate(recs) if r.get("plan")],
    }


def could_detect(
    machine: str,
    point: str,
    folder: Path | None = None,
    *,
    threshold: float | None = None,
    alpha: float | None = None,
) -> float | None:
    """What the committed operating curve says a verdict on this machine and point kind could detect (90% of
    runs exit 1), or None where no curve was simulated, or (given `threshold`/`alpha`) where it was simulated
    for another threshold or level than the run's: the verdicts' "could detect" comes from here."""
    path = (folder or OUT) / CURVE_FILE
    if not path.is_file():
        return None
    for c in json.loads(path.read_text())["curves"]:
        if (c["machine"], c["point"]) == (machine, point):
            if threshold is not None and not math.isclose(c["threshold"], threshold):
                return None
            if alpha is not None and not math.isclose(c["plan"]["alpha"], alpha):
                return None
            return c["detect_90"]
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle_fix.gate.simulate", description=__doc__)
    parser.add_argument("--n", type=int, default=1000, help="simulated runs per curve point (default %(default)s)")
    parser.add_argument("--n-coverage", type=int, default=400, help="simulated pools per cell (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=("curves", "coverage"), help="write one of the two files")
    parser.add_argument("--out", default=str(OUT), help="folder (default results/simulation)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recs = records()
    if args.only in (None, "curves"):
        (out / CURVE_FILE).write_text(json.dumps(curves(recs, n=args.n, seed=args.seed), indent=1) + "\n")
    if args.only in (None, "coverage"):
        data = coverage(recs, n=args.n_coverage, seed=args.seed)
        (out / COVERAGE_FILE).write_text(json.dumps(data, indent=1) + "\n")
    print(f"simulate: wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
