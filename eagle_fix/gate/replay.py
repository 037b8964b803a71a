"""The gate's calibration by replay: thousands of `eagle-fix ab` trials drawn from the committed A/A pairs,
without an engine. A trial draws its launches from the committed blocks of one point kind (a hierarchical
bootstrap: a block with replacement for each launch, keeping its start order so the orders alternate as
`ab` alternates them, then its rounds without replacement: resampling the rounds with replacement too would
add their scatter to the block means twice, a known bias of two-stage bootstraps), multiplies every round's
new/base ratio by (1 + shift), and is judged twice: by the old rule (the sign test over all rounds, the rounds of one launch
counted as independent) and by the launch-level test (eagle_fix.core.nested with the components estimated
from the same blocks). The A/A rejection rates say whether each test's alpha is true; the shifted ones are
the power, beside the trial's cost in seconds."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from eagle_fix.core import nested, significance, stats
from eagle_fix.gate import components
from eagle_fix.gate.verdict import DEFAULT_THRESHOLD

SHIFTS = (0.0, 0.03, 0.05)
ALPHAS = (0.01, 0.05)


def pool(
    files: list[Path], kind: components.PointKind, metric: str = components.PLANNED_METRIC
) -> list[list[nested.Block]]:
    """The A/A trials (each a list of blocks) of `kind` in the files."""
    trials, _ = components.trials_from(files, kind, metric)
    return trials


def draw(
    rng: random.Random, blocks: list[nested.Block], *, launches: int, rounds: int, shift: float
) -> list[nested.Block]:
    """One replayed trial: `launches` blocks, start orders alternating base-first / new-first where the pool
    records them, each `rounds` rounds drawn without replacement from a drawn block, every ratio x (1 + shift)."""
    by_order = {True: [b for b in blocks if b.base_first is True], False: [b for b in blocks if b.base_first is False]}
    add = math.log1p(shift)
    out = []
    for i in range(launches):
        choices = by_order[i % 2 == 0] or blocks
        src = rng.choice(choices)
        rs = tuple(x + add for x in rng.sample(src.log_ratios, min(rounds, src.rounds)))
        out.append(nested.Block(i, rs, src.base_first))
    return out


def round_level_rejects(trial: list[nested.Block], alpha: float) -> bool:
    """The old rule's test: the exact sign test over every round of the trial, p < alpha (either direction)."""
    ratios = [x for b in trial for x in b.log_ratios]
    above, below = sum(x > 0 for x in ratios), sum(x < 0 for x in ratios)
    n = above + below
    p = 1.0 if n == 0 else min(1.0, 2.0 * stats.binom_half_cdf(n, min(above, below)))
    return p < alpha


def launch_level_rejects(trial: list[nested.Block], c: nested.Components, alpha: float) -> bool:
    """The launch-level test at one look (a fixed design), p < alpha (either direction)."""
    t = nested.launch_test(trial, c.launch, alpha_look=alpha, sigma_round=c.sigma_round)
    return t.p is not None and t.p < alpha


def sequential(
    trial: list[nested.Block], c: nested.Components, design: nested.Plan, threshold: float
) -> tuple[str, int, bool]:
    """`ab`'s sequential rule on a replayed trial: (the verdict, the launches it used, whether any look up to
    the stop was significant at its level in either direction, whatever the threshold)."""
    significant = False
    for looked in range(design.look_every, design.max_blocks + 1, design.look_every):
        final = looked == design.max_blocks
        t = nested.launch_test(trial[:looked], c.launch, alpha_look=design.alpha_look, sigma_round=c.sigma_round)
        significant = significant or (t.p is not None and t.p < design.alpha_look)
        verdict, _ = nested.decide(
            t, threshold=threshold, higher_is_better=False, alpha_look=design.alpha_look, final=final
        )
        if verdict != "continue":
            return verdict, looked, significant
    return "inconclusive", design.max_blocks, significant


def wilson(k: int, n: int) -> list[float] | None:
    ci = stats.wilson(k, n)
    return list(ci) if ci else None


def replay(
    trials: list[list[nested.Block]],
    *,
    n: int = 2000,
    seed: int = 0,
    rounds: int | None = None,
    launches: int = 2,
    launch_s: float,
    round_s: float,
    threshold: float = DEFAULT_THRESHOLD,
    shifts: tuple[float, ...] = SHIFTS,
    alphas: tuple[float, ...] = ALPHAS,
) -> dict[str, Any]:
    """Rejection rates of both tests at each shift and alpha (a fixed design of `launches` x `rounds`, as
    today's `ab`), and the sequential plan's verdicts and cost, from `n` replayed trials each."""
    rng = random.Random(seed)
    c = nested.estimate(trials)
    blocks = [b for t in trials for b in t]
    most = min(b.rounds for b in blocks)  # a replayed launch has at most its block's rounds
    rounds = min(rounds or most, most)
    designs = {
        alpha: nested.plan(
            c,
            launch_s=launch_s,
            round_s=round_s,
            detect=components.DETECT,
            power=components.POWER,
            alpha=alpha,
            max_rounds=most,
        )
        for alpha in alphas
    }
    out: dict[str, Any] = {
        "components": c.as_dict(),
        "launch": c.launch,
        "rounds": rounds,
        "launches": launches,
        "n": n,
        "seed": seed,
        "threshold": threshold,
        "fixed": [],
        "plan": designs[components.ALPHA].as_dict() if components.ALPHA in designs else None,
        "plans": {str(a): d.as_dict() for a, d in designs.items()},
        "sequential": [],
    }
    for shift in shifts:
        draws = [draw(rng, blocks, launches=launches, rounds=rounds, shift=shift) for _ in range(n)]
        for alpha in alphas:
            old = sum(round_level_rejects(t, alpha) for t in draws)
            new = sum(launch_level_rejects(t, c, alpha) for t in draws)
            out["fixed"].append(
                {
                    "shift": shift,
                    "alpha": alpha,
                    "round_level": old / n,
                    "round_level_ci95": wilson(old, n),
                    "launch_level": new / n,
                    "launch_level_ci95": wilson(new, n),
                }
            )
        for alpha, design in designs.items():
            seq = [draw(rng, blocks, launches=design.max_blocks, rounds=design.rounds, shift=shift) for _ in range(n)]
            verdicts, used, significant = zip(*(sequential(t, c, design, threshold) for t in seq))
            cost = [nested.design_cost_s(u, design.rounds, launch_s=launch_s, round_s=round_s) for u in used]
            out["sequential"].append(
                {
                    "shift": shift,
                    "alpha": alpha,
                    "regression": verdicts.count("regression") / n,
                    "improved": verdicts.count("improved") / n,
                    "within noise": verdicts.count("within noise") / n,
                    "inconclusive": verdicts.count("inconclusive") / n,
                    "alarm_ci95": wilson(verdicts.count("regression"), n),
                    "significant": sum(significant) / n,
                    "significant_ci95": wilson(sum(significant), n),
                    "median_launches": sorted(used)[len(used) // 2],
                    "median_cost_s": sorted(cost)[len(cost) // 2],
                }
            )
    return out


def power_curve(
    trials: list[list[nested.Block]],
    *,
    launch_s: float,
    round_s: float,
    detects: tuple[float, ...] = (0.02, 0.03, 0.05, 0.08),
) -> list[dict[str, Any]]:
    """The cheapest plan for each slowdown to catch (90% power, alpha 0.01), from the components: the cost
    of seeing smaller changes."""
    c = nested.estimate(trials)
    out = []
    for d in detects:
        p = nested.plan(
            c,
            launch_s=launch_s,
            round_s=round_s,
            detect=d,
            power=components.POWER,
            alpha=components.ALPHA,
            max_blocks=64,
        )
        out.append(
            {
                "detect": d,
                "rounds": p.rounds,
                "launches": p.max_blocks,
                "looks": p.looks,
                "detectable": p.detectable,
                "cost_s": p.expected_s,
            }
        )
    return out


def significance_floor_note(alpha: float) -> str:
    """Why two launches cannot settle a data-only test: the sign-flip test's floor."""
    return f"2 launches: the sign-flip floor is {significance.sign_test_floor(2):.2g} > alpha {alpha:g}"
