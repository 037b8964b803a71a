"""The gate's calibration as the docs show it: alarm rates with their Wilson intervals, the noise floor, the
start-order effect, resampled rounds, the coverage of the goal points and the machines' own noise."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from eagle_fix.gate import verdict
from eagle_fix.gate.calibration import GOAL_DETECTION, GOAL_TRIALS, coverage, floor, rates, resampled, trial, trials


def _pct(v: float | None, digits: int = 1) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.{digits}f}%"


def _md(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    )


def _setting(ts: list[dict[str, Any]]) -> str:
    ident = ts[0]["identity"]
    machines = sorted({t["machine"] for t in ts})
    plans = sorted({(t["design"]["rounds"], t["design"]["max_blocks"]) for t in ts if t.get("design")})
    if plans:
        used = sorted({t["blocks"] for t in ts})
        rounds = (
            "the recorded plan, "
            + ", ".join(f"{r} rounds x up to {b} launch pairs" for r, b in plans)
            + f" ({'–'.join(map(str, (used[0], used[-1])) if len(used) > 1 else map(str, used))} launch pairs run)"
        )
    else:
        rounds = f"{', '.join(sorted({str(t['rounds']) for t in ts}))} rounds"
    return (
        f"{ident['profile']}, {ident['context_len']} tokens, {ident['mode']}, {ident['arm']}; "
        f"`eagle-fix ab` with {', '.join(sorted({str(t['identity']['output_len']) for t in ts}))}-token samples, "
        f"{rounds}"
        + (
            f" in {', '.join(sorted({str(t['blocks']) for t in ts}))} blocks"
            if any(t["blocks"] > 1 for t in ts) and not plans
            else ""
        )
        + ", threshold "
        f"{', '.join(sorted({_pct(t['threshold'], 0) for t in ts}))}, alpha {ts[0]['alpha']:g}; "
        f"{len(ts)} trial{'s' if len(ts) != 1 else ''} on {', '.join(f'`{m}`' for m in machines)}"
    )


def _load(paths) -> list[dict[str, Any]]:
    """The trials of folders and files (a folder not made yet has none: see `trials`)."""
    return [t for p in paths for t in ([trial(p)] if Path(p).is_file() else trials(p))]


def rates_table(paths) -> str:
    """How often the gate alarmed, per injected slowdown (0: identical sides)."""
    ts = _load(paths)
    if not ts:  # a folder placed in the docs before its first trial lands
        return "no trials yet in " + ", ".join(f"`{Path(p).name}/`" for p in paths)
    rows = [
        [
            _pct(r["slowdown"], 0) if r["slowdown"] else "0 (A/A)",
            str(r["trials"]),
            str(r["alarms"]),
            f"{_pct(r['rate'], 0)} [{_pct(r['rate_ci95'][0], 0)}, {_pct(r['rate_ci95'][1], 0)}]",
            f"{r['step_ratio_median']:.3f} ({r['step_ratio_range'][0]:.3f} – {r['step_ratio_range'][1]:.3f})"
            if r["step_ratio_median"]
            else "–",
            ", ".join(r["flagged"]) or "–",
            str(r["significant"]),
            f"{r['minutes_median']:.1f}" if r["minutes_median"] else "–",
        ]
        for r in rates(ts)
    ]
    return (
        _setting(ts)
        + "\n\n"
        + _md(
            [
                "injected slowdown",
                "trials",
                "alarms (exit 1)",
                "alarm rate [95% Wilson]",
                "model-step ratio new/base: median of trials (range)",
                "metrics flagged",
                "significant either way",
                "minutes a trial (median)",
            ],
            rows,
        )
    )


# The rule whose real trials are pooled: ab files of this schema or later (the launch-level t-test, one gated
# metric, Holm); earlier files ran other rules and stay in their own tables.
POOLED_SCHEMA = 7
# What issue #53 asks of the pool: trials at identical sides and at the stated minimum slowdown.
POOL_GOAL = {0.0: 40, verdict.MIN_DETECTABLE: 20}


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a rate k / n (scipy.stats.binomtest)."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def pooled_table(paths) -> str:
    """`eagle-fix ab`'s real trials with today's rule (schema >= POOLED_SCHEMA, `ab`'s defaults), pooled across
    machines and days: per slowdown, each machine's trials and alarms (how many judged with a borrowed record)
    and the pool's alarm rate with its exact 95% interval, beside the goal."""
    ts = [t for t in _load(paths) if (t.get("schema") or 0) >= POOLED_SCHEMA]
    if not ts:
        return "no trials of today's rule yet in " + ", ".join(f"`{Path(p).name}/`" for p in paths)
    rows = []
    for s in sorted({t["slowdown"] for t in ts}):
        group = [t for t in ts if t["slowdown"] == s]
        alarms = sum(t["alarm"] for t in group)
        lo, hi = clopper_pearson(alarms, len(group))
        by_machine = {}
        for t in group:
            m = by_machine.setdefault(t["machine"], [0, 0, 0])
            m[0], m[1], m[2] = m[0] + 1, m[1] + t["alarm"], m[2] + bool(t.get("borrowed"))
        goal = POOL_GOAL.get(s)
        rows.append(
            [
                _pct(s, 0) if s else "0 (A/A)",
                "; ".join(
                    f"`{m}` {n} ({a} alarm{'s' if a != 1 else ''}{f', {b} borrowed' if b else ''})"
                    for m, (n, a, b) in sorted(by_machine.items())
                ),
                f"{alarms} of {len(group)}",
                f"{_pct(alarms / len(group), 0)} [{_pct(lo, 1)}, {_pct(hi, 1)}]",
                f"{len(group)} of {goal}" if goal else "–",
                f"{statistics.median(mins):.1f}"
                if (mins := [t["minutes"] for t in group if t.get("minutes")])
                else "–",
            ]
        )
    point = ts[0]["identity"]
    return (
        f"{point['profile']}, {point['context_len']} tokens, {point['mode']}, {point['arm']}; `eagle-fix ab`'s "
        f"defaults, ab files of schema {POOLED_SCHEMA} and later; an alarm is exit 1; borrowed: judged with "
        "another machine's record of the point kind (the machine had none)\n\n"
        + _md(
            [
                "injected slowdown",
                "trials by machine",
                "alarms, pooled",
                "alarm rate [95% Clopper-Pearson]",
                "goal",
                "minutes a trial (median)",
            ],
            rows,
        )
    )


def floor_table(paths) -> str:
    """The A/A trials' noise floor, per paired metric."""
    ts = _load(paths)
    rows = [
        [
            f["metric"],
            str(f["trials"]),
            str(f["rounds"]),
            _pct(f["sample_cv"]),
            _pct(f["ratio_cv"]),
            _pct(f["ratio_robust_cv"]),
            f"{f['median_ratio_range'][0]:.3f} – {f['median_ratio_range'][1]:.3f}",
        ]
        for f in floor(ts)
    ]
    return _md(
        [
            "metric",
            "A/A trials",
            "rounds",
            "CV of a side's samples (median)",
            "CV of paired ratios",
            "robust CV of paired ratios (MAD)",
            "trials' median ratio",
        ],
        rows,
    )


def start_order_table(paths, metric: str = "step_ms") -> str:
    """Each trial's median paired ratio of `metric` over the rounds whose engines were started base
    first, over those started new first, and over all: on identical sides an engine that runs slower
    for being started first shows as the two straddling 1."""
    ts = _load(paths)
    rows = []
    for t in ts:
        by = t["by_start_order"].get(metric) or {}
        cell = lambda rs: f"{statistics.median(rs):.3f} ({len(rs)})" if rs else "–"
        rows.append(
            [
                f"`{t['file']}`",
                _pct(t["slowdown"], 0) if t["slowdown"] else "0 (A/A)",
                cell(by.get("base")),
                cell(by.get("new")),
                cell(t["ratios"].get(metric) or []),
            ]
        )
    return f"`{metric}` ratio new/base, median (rounds)\n\n" + _md(
        ["trial", "injected slowdown", "base's engine started first", "new's engine started first", "all rounds"], rows
    )


def resampled_table(paths) -> str:
    """The gate's rule on A/A ratios resampled at other round counts, with and without the stated
    minimum slowdown (`resampled`)."""
    ts = _load(paths)
    rows = resampled(ts)
    if not rows:
        return "no A/A trials"
    head = ["rounds", "alarms on identical sides", f"alarms at +{verdict.MIN_DETECTABLE:.0%}"]
    default = verdict.default_rounds(ts[0]["identity"]["mode"])
    return (
        f"{rows[0]['draws']} draws a cell from the {rows[0]['pool']} `{rows[0]['metric']}` ratios of the A/A trials, "
        f"threshold {verdict.DEFAULT_THRESHOLD:.0%}, alpha {verdict.DEFAULT_ALPHA:g}, seeded\n\n"
        + _md(
            head,
            [
                [
                    str(r["rounds"]) + (f" (default, {ts[0]['identity']['mode']})" if r["rounds"] == default else ""),
                    _pct(r[0.0], 0),
                    _pct(r[verdict.MIN_DETECTABLE], 0),
                ]
                for r in rows
            ],
        )
    )


def coverage_table(paths) -> str:
    """Which points the gate's defaults are calibrated at, on which machine, and how far each got."""
    rows = coverage(paths)
    md = _md(
        [
            "point",
            "machine",
            "A/A trials: false alarms",
            f"+{verdict.MIN_DETECTABLE:.0%} trials: caught",
            "other slowdowns tried",
            "goal",
            "folder",
        ],
        [
            [
                r["point"],
                f"`{r['machine']}`" if r["machine"] else "–",
                f"{r['aa']}: {r['false_alarms']}" if r["aa"] else "–",
                f"{r['slow']}: {r['caught']}" if r["slow"] else "–",
                ", ".join(_pct(s, 0) for s in r["other_slowdowns"]) or "–",
                r["status"],
                ", ".join(f"`{Path(f).name}/`" for f in r["folders"]) or "–",
            ]
            for r in rows
        ],
    )
    return (
        f"`eagle-fix ab`'s defaults ({verdict.rounds_text()}; {verdict.DEFAULT_SAMPLE_TOKENS}-token samples in "
        f"{verdict.DEFAULT_BLOCKS} blocks, threshold {verdict.DEFAULT_THRESHOLD:.0%}, alpha {verdict.DEFAULT_ALPHA:g}); "
        f"goal: no false alarm and at least {GOAL_DETECTION:.0%} of the +{verdict.MIN_DETECTABLE:.0%} trials caught, "
        f"over at least {GOAL_TRIALS} trials of each\n\n" + md
    )


def machine_noise_table(paths) -> str:
    """scripts/machine_noise.py's files: the machine's own noise, compute and memory, no engine."""
    import json

    rows = []
    for p in paths:
        d = json.loads(Path(p).read_text())
        for name, what in (
            ("matmul_512_x20_ms", "fp32 matmul, one thread (compute)"),
            ("copy_64mib_ms", "64 MiB copy (memory bandwidth)"),
        ):
            m = d[name]
            rows.append(
                [
                    f"`{d['machine']}`",
                    what,
                    str(len(m["window_medians"])),
                    _pct(m["cv"]),
                    f"{m['min']:.2f} – {m['max']:.2f} ms",
                ]
            )
    return _md(["machine", "loop", "one-second windows", "CV of the windows' medians", "range"], rows)
