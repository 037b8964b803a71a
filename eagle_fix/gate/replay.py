"""The gate's calibration by replay, out of sample: `eagle-fix ab` trials drawn from the committed A/A pairs,
without an engine. Leave one run out: for each committed run of the pool, the components and the plan come from
the other runs (the record `ab` would have had), and the trials are drawn from the held-out run's blocks alone (a
block with replacement for each launch, keeping its start order so the orders alternate as `ab` alternates them,
then its rounds without replacement), every round's new/base ratio multiplied by (1 + shift), and judged by the
old rule (the sign test over all rounds) and by the launch-level test pooled with the others' calibration. A pool
of one run is split into its consecutive launch-pair pairs, each held out in turn. Each rate comes with the
number of distinct trials behind it: a held-out run of 2 launch pairs of 32 rounds replayed as 2 x 32 holds
few."""

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
    return pool_named(files, kind, metric)[0]


def pool_named(
    files: list[Path], kind: components.PointKind, metric: str = components.PLANNED_METRIC
) -> tuple[list[list[nested.Block]], list[str]]:
    """The A/A trials of `kind` in the files and, aligned with them, the file each came from (the replay names
    its held-out runs by them)."""
    trials, names = [], []
    for f in files:
        got, _ = components.trials_from([f], kind, metric)
        trials += got
        names += [str(f)] * len(got)
    return trials, names


def draw(
    rng: random.Random,
    blocks: list[nested.Block],
    *,
    launches: int,
    rounds: int,
    shift: float,
    replace: bool = True,
) -> list[nested.Block]:
    """One replayed trial: `launches` blocks, start orders alternating base-first / new-first where the pool
    records them, each `rounds` rounds drawn without replacement from a drawn block, every ratio x (1 + shift).
    replace=False: each block at most once (a held-out run cannot lend more launches than it had)."""
    by_order = {True: [b for b in blocks if b.base_first is True], False: [b for b in blocks if b.base_first is False]}
    left = list(blocks)
    add = math.log1p(shift)
    out = []
    for i in range(launches):
        want = i % 2 == 0
        choices = [b for b in (left if not replace else blocks) if b.base_first is want] or (
            left if not replace else (by_order[want] or blocks)
        )
        src = rng.choice(choices)
        if not replace:
            left.remove(src)
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
    t = nested.launch_test(trial, c, alpha_look=alpha)
    return t.p is not None and t.p < alpha


def sequential(
    trial: list[nested.Block], c: nested.Components, design: nested.Plan, threshold: float
) -> tuple[str, int, bool]:
    """`ab`'s sequential rule on a replayed trial: (the verdict, the launches it used, whether any look up to
    the stop was significant at its level in either direction, whatever the threshold)."""
    significant = False
    for looked in range(design.look_every, design.max_blocks + 1, design.look_every):
        final = looked == design.max_blocks
        t = nested.launch_test(trial[:looked], c, alpha_look=design.alpha_look)
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


def held_out_runs(trials: list[list[nested.Block]], sources: list[str] | None = None) -> list[tuple[str, list, list]]:
    """(name, held-out blocks, the other runs) for each run of the pool; a pool of one run split into its
    consecutive launch-pair pairs (so both start orders stay in each part)."""
    if len(trials) >= 2:
        names = sources if sources and len(sources) == len(trials) else [f"run {i + 1}" for i in range(len(trials))]
        return [(names[i], trials[i], trials[:i] + trials[i + 1 :]) for i in range(len(trials))]
    blocks = trials[0] if trials else []
    parts = [blocks[i : i + 2] for i in range(0, len(blocks) - 1, 2)]
    out = []
    for i, part in enumerate(parts):
        rest = [b for j, p in enumerate(parts) if j != i for b in p]
        name = (sources[0] if sources else "run 1") + f" launch pairs {2 * i + 1}-{2 * i + 2}"
        out.append((name, part, [rest]))
    return out


def _key(trial: list[nested.Block]) -> tuple:
    return tuple(b.log_ratios for b in trial)


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
    sources: list[str] | None = None,
) -> dict[str, Any]:
    """Rejection rates of both tests at each shift and alpha (a fixed design of `launches` x `rounds`, as the old
    `ab`, the rounds at most half a block's so that draws differ), and the sequential plan's verdicts and cost,
    from about `n` trials each, leave one run out: each run held out in turn gets n / runs of them, judged with
    the components and plan of the other runs, its launches drawn without replacement (a plan needing more
    launch pairs than the held-out run has is not replayed there: `folds` says how many runs were). Every
    rate carries the count of distinct trials drawn; `held_out` lists each held-out run, its blocks and plan."""
    rng = random.Random(seed)
    c_all = nested.estimate(trials)
    folds = held_out_runs(trials, sources)
    if not folds:
        raise ValueError("a replay needs at least one run of two launch pairs")
    per = max(1, n // len(folds))
    total = per * len(folds)
    most = min(b.rounds for t in trials for b in t)  # a replayed launch has at most its block's rounds
    rounds = min(rounds or most, most)
    fold_plans = []
    for name, held, rest in folds:
        c = nested.estimate(rest)
        designs = {
            alpha: nested.plan(
                c,
                launch_s=launch_s,
                round_s=round_s,
                detect=components.DETECT,
                power=components.POWER,
                alpha=alpha,
                threshold=threshold,
                max_rounds=min(b.rounds for b in held),
            )
            for alpha in alphas
        }
        fold_plans.append((name, held, c, designs))
    out: dict[str, Any] = {
        "components": c_all.as_dict(),
        "launch": c_all.launch,
        "rounds": rounds,
        "launches": launches,
        "n": total,
        "seed": seed,
        "threshold": threshold,
        "out_of_sample": "leave one run out" if len(trials) >= 2 else "leave one pair of launch pairs out",
        "held_out": [
            {
                "run": name,
                "blocks": len(held),
                "rounds": [b.rounds for b in held],
                "plan": d[components.ALPHA].as_dict(),
            }
            for name, held, _, d in fold_plans
            if components.ALPHA in d
        ],
        "fixed": [],
        "plan": None,
        "plans": {},
        "sequential": [],
    }
    if components.ALPHA in alphas:  # the plan of the whole pool (what the record holds), for the tables
        out["plans"] = {
            str(a): nested.plan(
                c_all,
                launch_s=launch_s,
                round_s=round_s,
                detect=components.DETECT,
                power=components.POWER,
                alpha=a,
                threshold=threshold,
            ).as_dict()
            for a in alphas
        }
        out["plan"] = out["plans"][str(components.ALPHA)]
    for shift in shifts:
        fixed = {a: [0, 0] for a in alphas}
        seen_fixed: set = set()
        seq: dict[float, list] = {a: [] for a in alphas}
        seen_seq: dict[float, set] = {a: set() for a in alphas}
        for _, held, c, designs in fold_plans:
            r = min(rounds, min(b.rounds for b in held) // 2 or 1)
            k = min(launches, len(held))
            for _ in range(per):
                t = draw(rng, held, launches=k, rounds=r, shift=shift, replace=False)
                seen_fixed.add(_key(t))
                for a in alphas:
                    fixed[a][0] += round_level_rejects(t, a)
                    fixed[a][1] += launch_level_rejects(t, c, a)
            for a, design in designs.items():
                if design.max_blocks > len(held):  # the held-out run has too few launches for this plan
                    continue
                for _ in range(per):
                    t = draw(rng, held, launches=design.max_blocks, rounds=design.rounds, shift=shift, replace=False)
                    seen_seq[a].add(_key(t))
                    verdict_, used, significant = sequential(t, c, design, threshold)
                    cost = nested.design_cost_s(used, design.rounds, launch_s=launch_s, round_s=round_s)
                    seq[a].append((verdict_, used, significant, cost))
        for a in alphas:
            old, new = fixed[a]
            out["fixed"].append(
                {
                    "shift": shift,
                    "alpha": a,
                    "round_level": old / total,
                    "round_level_ci95": wilson(old, total),
                    "launch_level": new / total,
                    "launch_level_ci95": wilson(new, total),
                    "distinct": len(seen_fixed),
                }
            )
            m = len(seq[a])
            verdicts = [v for v, _, _, _ in seq[a]]
            used = sorted(u for _, u, _, _ in seq[a])
            cost = sorted(x for _, _, _, x in seq[a])
            sig = sum(s for _, _, s, _ in seq[a])
            out["sequential"].append(
                {
                    "shift": shift,
                    "alpha": a,
                    "n": m,
                    "folds": m // per,
                    "regression": verdicts.count("regression") / m if m else None,
                    "improved": verdicts.count("improved") / m if m else None,
                    "within noise": verdicts.count("within noise") / m if m else None,
                    "inconclusive": verdicts.count("inconclusive") / m if m else None,
                    "alarm_ci95": wilson(verdicts.count("regression"), m),
                    "significant": sig / m if m else None,
                    "significant_ci95": wilson(sig, m),
                    "median_launches": used[len(used) // 2] if m else None,
                    "median_cost_s": cost[len(cost) // 2] if m else None,
                    "distinct": len(seen_seq[a]),
                }
            )
    return out


def power_curve(
    trials: list[list[nested.Block]],
    *,
    launch_s: float,
    round_s: float,
    detects: tuple[float, ...] = (0.02, 0.03, 0.05, 0.08),
    threshold: float = DEFAULT_THRESHOLD,
) -> list[dict[str, Any]]:
    """The cheapest plan for each slowdown to catch (90% power, alpha 0.01, the rule's threshold), from the
    components: the cost of seeing smaller changes (NaN detectable: not within 64 launch pairs)."""
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
            threshold=threshold,
            max_blocks=64,
        )
        out.append(
            {
                "detect": d,
                "rounds": p.rounds,
                "launches": p.max_blocks,
                "looks": p.looks,
                "detectable": None if math.isnan(p.detectable) else p.detectable,
                "cost_s": p.expected_s,
            }
        )
    return out


def significance_floor_note(alpha: float) -> str:
    """Why two launches cannot settle a data-only test: the sign-flip test's floor."""
    return f"2 launches: the sign-flip floor is {significance.sign_test_floor(2):.2g} > alpha {alpha:g}"
