"""The answers a user opens the dashboard or the report for, from the committed files, each with its source:
does the fix matter on this engine (the newest fix A/B and its causes), does speculation pay at this context
(the realistic regime, the chat pair on chat text, beside the best case, the tiny pair on its copy workload),
where does serving stop paying (a served map), and what can the gate see on this machine (its recorded noise
and the plan `eagle-fix ab` would run). The report's summary, the first view and scripts/bench.sh's last
lines all read these."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from eagle_fix.core import acceptance, record
from eagle_fix.core.arms import FIX_ON, is_baseline, is_eagle3, is_fix_on, takes_fix
from eagle_fix.core.errors import EagleFixError
from eagle_fix.gate import components
from eagle_fix.pairs import profiles
from eagle_fix.publish.frame import fill_speedup, latest
from eagle_fix.publish.labels import workload_label
from eagle_fix.publish.tables import median_label
from eagle_fix.served.summary import break_even, read_map, summarize
from eagle_fix.store.results import load_results

REALISTIC, CEILING = "chat", "copy"  # the record's `workload` of each regime
# The real target's workload and folder (issue 55: SmolLM2-135M-Instruct, pretrained, and its own EAGLE3 draft on
# held-out chat, results/real-target/runs): the answer the first view and the report lead with.
REAL, REAL_FOLDER = "chat-real", "real-target"
REGIME_WORDS = {
    REALISTIC: "realistic: chat pair, workload `chat`",
    CEILING: "ceiling: tiny pair, workload `copy`",
}
# Record folders that are history or evidence of a bug, not a machine's current answer; and the method axis'
# runs (results/runs/methods: EAGLE3, n-gram and the baseline side by side), whose answer is their own table
# (docs/methods.md), not the newest EAGLE3 rows of the regimes.
SET_ASIDE = ("extra", "calibration", "methods")


INTEGERS = ("context_len", "output_len", "num_speculative_tokens", "batch_size", "tensor_parallel_size")


def _plain(v: Any, column: str = "") -> Any:
    """A frame's cell as the record had it: NaN as None, counts as ints (pandas makes them floats)."""
    if isinstance(v, float) and math.isnan(v):
        return None
    return int(v) if column in INTEGERS and isinstance(v, float) else v


def _rows(results: Path, *, by_file: bool = False) -> list[dict[str, Any]]:
    """The newest row per point of every `eagle-fix run` file under results/runs (speedups filled in), the
    set-aside folders left out; [] when there is none. `by_file`: the newest per point within each file (a
    fix A/B keeps its own `on` rows when a later run measured the same point)."""

    runs = results / "runs"
    if not runs.is_dir():
        return []
    try:
        df = load_results([runs])
    except EagleFixError:
        return []
    keep = [not any(part in SET_ASIDE for part in Path(str(o)).parts) for o in df["origin"]]
    df = df[keep]
    df = fill_speedup(latest(df, by=("origin",) if by_file else ()))
    return [{k: _plain(v, k) for k, v in r.items()} for r in df.to_dict("records")]


def interval(r: dict[str, Any], metric: str) -> tuple[float, float] | None:
    c = ((r.get("ci95") or {}) if isinstance(r.get("ci95"), dict) else {}).get(metric)
    try:
        return (float(c[0]), float(c[1])) if c and c[0] is not None and c[1] is not None else None
    except (TypeError, ValueError, IndexError):
        return None


def speedup_bounds(eagle: dict[str, Any], base: dict[str, Any] | None) -> tuple[float, float] | None:
    """The speedup's bounds from both arms' decode-throughput intervals (EAGLE3's low over the baseline's
    high, and the reverse): wider than an interval of the ratio itself, never narrower."""
    e, b = interval(eagle, "decode_throughput_tok_s"), interval(base or {}, "decode_throughput_tok_s")
    if not e or not b or b[0] <= 0 or b[1] <= 0:
        return None
    return e[0] / b[1], e[1] / b[0]


def _greedy(r: dict[str, Any]) -> bool:
    return not r.get("temperature") and r.get("synthetic_acceptance") is not True


def _pair(profile: Any) -> str | None:
    """The regime a profile's pair makes with its workload: the chat pair's realistic one, the tiny pair's
    ceiling; None for any other pair (random weights, real shapes) or an unknown profile."""

    try:
        target = profiles.get_profile(str(profile)).target
    except EagleFixError:
        return None
    if target == profiles.chat_pair()[0]:
        return REALISTIC
    return CEILING if target == profiles.tiny_pair()[0] else None


def _loop(r: dict[str, Any]) -> bool:

    return acceptance.drafts_a_loop(r)


def regimes(results: Path) -> list[dict[str, Any]]:
    """Per machine and engine release that measured the realistic regime: per context and mode, the speedup
    (with bounds) and acceptance (with its 95% interval) of the chat pair and of the best case at the same
    output length and k, greedy, fix on, one device; and the files behind them. Machines that measured only
    the best case come after, with their best case alone."""
    rows = _rows(results)
    base = {(record.baseline_key(r), record.environment(r)): r for r in rows if is_baseline(r["arm"])}
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if (
            not is_eagle3(r["arm"])
            or r.get("workload") not in (REALISTIC, CEILING)
            or _pair(r.get("profile")) != r.get("workload")
            or not is_fix_on(r.get("fix"), unnamed_is_on=True)
            or not _greedy(r)
            or (r.get("tensor_parallel_size") or 1) > 1
        ):
            continue
        g = groups.setdefault(
            (r["machine_name"], str(r.get("vllm_version"))),
            {"machine": r["machine_name"], "engine": f"vLLM {r.get('vllm_version')}", "rows": []},
        )
        b = base.get((record.baseline_key(r), record.environment(r)))
        g["rows"].append({**r, "_base": b})
    out = []
    for g in groups.values():
        chat = [r for r in g["rows"] if r["workload"] == REALISTIC]
        # the best case at the realistic regime's settings where there is one: same output length and k
        same = {(r.get("output_len"), r.get("num_speculative_tokens")) for r in chat}
        copy = [
            r
            for r in g["rows"]
            if r["workload"] == CEILING and (not same or (r.get("output_len"), r.get("num_speculative_tokens")) in same)
        ]
        if not copy and not chat:
            continue
        cells: dict[str, dict[tuple[int, str], dict[str, Any]]] = {REALISTIC: {}, CEILING: {}}
        files: dict[str, set[str]] = {REALISTIC: set(), CEILING: set()}
        for r in chat + copy:
            cells[r["workload"]][(int(r["context_len"]), str(r["mode"]))] = r
            for src in (r, r["_base"] or {}):
                if src.get("origin"):
                    files[r["workload"]].add(str(src["origin"]))
        out.append(
            {
                "machine": g["machine"],
                "engine": g["engine"],
                "cells": cells,
                "files": {w: sorted(f) for w, f in files.items()},
                "contexts": sorted({c for w in cells.values() for c, _ in w}),
                "modes": sorted({m for w in cells.values() for _, m in w}, key=lambda m: m != "eager"),
            }
        )
    # the machines with the realistic regime first, then by how many contexts they cover
    return sorted(out, key=lambda g: (not g["cells"][REALISTIC], -len(g["contexts"]), g["machine"]))


def cell_speedup(r: dict[str, Any] | None) -> str:
    """`1.02x [0.93, 1.19]` (bounds from both arms' intervals), `failed`, or `–`; a point whose output is a
    loop (a best case even on chat text) says so."""
    if r is None:
        return "–"
    if r.get("status") != "ok":
        return "failed"
    s = r.get("speedup")
    if s is None:
        return "–"
    b = speedup_bounds(r, r.get("_base"))
    loop = " (loop)" if r.get("workload") == REALISTIC and _loop(r) else ""
    return f"{s:.2f}x" + (f" [{b[0]:.2f}, {b[1]:.2f}]" if b else "") + loop


def cell_acceptance(r: dict[str, Any] | None) -> str:
    if r is None or r.get("status") != "ok" or r.get("acceptance_length") is None:
        return "–"
    c = interval(r, "acceptance_length")
    return f"{r['acceptance_length']:.2f}" + (f" [{c[0]:.2f}, {c[1]:.2f}]" if c else "")


def span(values: list[float], unit: str = "x") -> str:
    """`0.62x–1.12x` (or one value); with unit `%`, shares as whole percents."""
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    f = (lambda v: f"{v:.0%}") if unit == "%" else (lambda v: f"{v:.2f}{unit}")
    return f(lo) if f(lo) == f(hi) else f"{f(lo)}–{f(hi)}"


def kilo(c: int) -> str:
    return f"{c / 1024:g}K"


def regime_figures(g: dict[str, Any], workload: str) -> dict[str, Any]:
    """A regime's speedups and acceptance over every context and mode: their spans and context range."""
    cells = [r for r in g["cells"][workload].values() if r.get("status") == "ok"]
    contexts = sorted({int(r["context_len"]) for r in cells})
    loops = [r for r in cells if workload == REALISTIC and _loop(r)]
    cells = [r for r in cells if r not in loops]  # a loop's figure is a best case: not the realistic one
    return {
        "loops": [f"{kilo(int(r['context_len']))} {r['mode']}" for r in loops],
        "speedup": [r["speedup"] for r in cells if r.get("speedup") is not None],
        "acceptance": [r["acceptance_length"] for r in cells if r.get("acceptance_length") is not None],
        "coverage": [r["drafter_coverage"] for r in cells if r.get("drafter_coverage") is not None],
        "contexts": f"{kilo(contexts[0])}–{kilo(contexts[-1])}" if contexts else "no context",
    }


def headline(g: dict[str, Any]) -> str:
    """The realistic figure first, the ceiling named as the ceiling."""
    real, ceil = regime_figures(g, REALISTIC), regime_figures(g, CEILING)
    parts = []
    if real["speedup"]:
        parts.append(
            f"Realistic regime (chat pair on chat text, greedy) on `{g['machine']}`, {g['engine']}: EAGLE3 decodes "
            f"{span(real['speedup'])} as fast as no speculation over {real['contexts']}, accepting "
            f"{span(real['acceptance'], '')} tokens a step"
            + (f" (leaving out {', '.join(real['loops'])}, whose output is a loop)" if real["loops"] else "")
            + "."
        )
    else:
        parts.append(f"Realistic regime (chat pair): not measured on `{g['machine']}`, {g['engine']}.")
    if ceil["speedup"]:
        parts.append(
            f"The ceiling (tiny pair on its copy workload, acceptance {span(ceil['acceptance'], '')}): "
            f"{span(ceil['speedup'])} over {ceil['contexts']}; a best case, not what a user's text gets."
        )
    return " ".join(parts)


def constant_lines(g: dict[str, Any]) -> list[str]:
    """Figures that carry no information as a panel (the same value at every point), said in one line each."""
    lines = []
    for w in (REALISTIC, CEILING):
        f = regime_figures(g, w)
        if f["coverage"] and span(f["coverage"], "%") == span([f["coverage"][0]], "%"):
            lines.append(f"{REGIME_WORDS[w]}: drafter coverage {f['coverage'][0]:.0%} at every point")
        if f["acceptance"] and len(f["acceptance"]) > 1 and span(f["acceptance"], "") == span([f["acceptance"][0]], ""):
            lines.append(f"{REGIME_WORDS[w]}: acceptance {f['acceptance'][0]:.2f} at every point")
    return lines


def regime_rows(g: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Side by side per context: the realistic regime's speedup and acceptance per mode, then the ceiling's."""
    head = ["context"]
    for w in (REALISTIC, CEILING):
        for m in g["modes"]:
            head += [f"`{w}`{' (ceiling)' if w == CEILING else ''} {m}: speedup", "acceptance"]
    rows = []
    for c in g["contexts"]:
        row = [kilo(c)]
        for w in (REALISTIC, CEILING):
            for m in g["modes"]:
                r = g["cells"][w].get((c, m))
                row += [cell_speedup(r), cell_acceptance(r)]
        rows.append(row)
    return head, rows


def interval_note(g: dict[str, Any]) -> str:
    """What the speedup bounds and acceptance intervals of a group are: the decode intervals' real coverage
    (few samples make a range that covers less than 95%), and the acceptance's count interval."""
    labels = sorted(
        {
            median_label(side, "decode_throughput_tok_s")
            for w in (REALISTIC, CEILING)
            for r in g["cells"][w].values()
            for side in (r, r.get("_base") or {})
            if interval(side, "decode_throughput_tok_s")
        }
    )
    return (
        f"speedup bounds: EAGLE3's decode interval over the baseline's ({'; '.join(labels) or 'none'}); "
        "acceptance: 95% interval of vLLM's counts"
    )


def md_table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    )


# --------------------------------------------------------------------------- the real target


def real_target(results: Path) -> dict[str, Any] | None:
    """The real target's EAGLE3 points (fix on, each speedup against the baseline of the same point) of the
    machine and engine that measured most of them, from results/real-target/runs; None without one."""
    rows = [r for r in _rows(results / REAL_FOLDER) if r.get("workload") == REAL and is_eagle3(r["arm"])]
    rows = [r for r in rows if is_fix_on(r.get("fix"), unnamed_is_on=True) and r.get("status") == "ok"]
    if not rows:
        return None
    env = Counter((r["machine_name"], str(r.get("vllm_version"))) for r in rows).most_common(1)[0][0]
    mine = [r for r in rows if (r["machine_name"], str(r.get("vllm_version"))) == env]
    return {
        "machine": env[0],
        "engine": f"vLLM {env[1]}",
        "rows": mine,
        "files": sorted({str(r["origin"]) for r in mine}),
    }


def real_headline(g: dict[str, Any]) -> str:
    """The real model's figure, greedy and sampled: what speculation does to chat text on this engine."""
    said = []
    for temp in sorted({r.get("temperature") or 0.0 for r in g["rows"]}):
        rs = [r for r in g["rows"] if (r.get("temperature") or 0.0) == temp]
        speed = [r["speedup"] for r in rs if r.get("speedup") is not None]
        acc = [r["acceptance_length"] for r in rs if r.get("acceptance_length") is not None]
        ctx = sorted({int(r["context_len"]) for r in rs})
        said.append(
            ("greedy" if not temp else f"at T = {temp:g}")
            + f" over {kilo(ctx[0])}–{kilo(ctx[-1])}, "
            + (f"EAGLE3 decodes {span(speed)} as fast as no speculation, " if speed else "")
            + f"accepting {span(acc, '')} tokens a step"
        )
    cov = [r["drafter_coverage"] for r in g["rows"] if r.get("drafter_coverage") is not None]
    return (
        f"Real target (SmolLM2-135M-Instruct, pretrained, with the EAGLE3 draft trained for it, on held-out chat) "
        f"on `{g['machine']}`, {g['engine']}: "
        + "; ".join(said)
        + (f"; the drafter ran in {span(cov, '%')} of decode steps" if cov else "")
        + "."
    )


# --------------------------------------------------------------------------- the fix A/B


def fix_ab(results: Path) -> dict[str, Any] | None:
    """The newest fix A/B (a run with a fix arm other than `on`) among the committed run files: per fix arm
    and mode, what happened past the draft's 2048 positions, with the failures' causes; None without one."""
    rows = [
        r
        for r in _rows(results, by_file=True)
        if takes_fix(r["arm"]) and r.get("workload") in (None, CEILING, REALISTIC, REAL)
    ]
    by_file: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_file.setdefault(str(r.get("origin")), []).append(r)
    ab = {
        f: rs for f, rs in by_file.items() if {r.get("fix") or FIX_ON.name for r in rs} - {FIX_ON.name} and len(rs) > 2
    }
    if not ab:
        return None
    newest = max(ab, key=lambda f: max(str(r.get("timestamp") or "") for r in ab[f]))
    rs = ab[newest]
    arms = []
    for fix in ("off", "upstream", "on"):
        said = []
        for mode in sorted({str(r["mode"]) for r in rs}):
            past = sorted(
                (r for r in rs if (r.get("fix") or "on") == fix and r["mode"] == mode and r["context_len"] > 2048),
                key=lambda r: r["context_len"],
            )
            if not past:
                continue
            failed = [r for r in past if r.get("status") != "ok"]
            ok = [r for r in past if r.get("status") == "ok"]
            words = []
            if failed:
                words.append(
                    f"failed at {', '.join(kilo(int(r['context_len'])) for r in failed)}: {record.cause(failed[0].get('error'), 90)}"
                )
            if ok:
                acc = [r["acceptance_length"] for r in ok if r.get("acceptance_length") is not None]
                cov = [r["drafter_coverage"] for r in ok if r.get("drafter_coverage") is not None]
                words.append(
                    f"acceptance {span(acc, '')}" + (f", drafter ran in {span(cov, '%')} of steps" if cov else "")
                )
            said.append((mode, "; ".join(words)))
        if said:  # modes that did the same are said once
            same: dict[str, list[str]] = {}
            for mode, words in said:
                same.setdefault(words, []).append(mode)
            arms.append(f"fix `{fix}`: " + "; ".join(f"{' and '.join(m)} {w}" for w, m in same.items()))
    return {
        "file": newest,
        "machine": rs[0]["machine_name"],
        "engine": f"vLLM {rs[0].get('vllm_version')}",
        "workload": workload_label(rs),
        "contexts": sorted({int(r["context_len"]) for r in rs}),
        "arms": arms,
    }


def fix_abs(results: Path) -> list[dict[str, Any]]:
    """The fix A/Bs the first view and the report show: the real target's first, then the newest of the
    other pairs' (fix_ab of each folder, those that have one)."""
    return [ab for ab in (fix_ab(results / REAL_FOLDER), fix_ab(results)) if ab]


# --------------------------------------------------------------------------- the served map


def served(results: Path) -> list[dict[str, Any]]:
    """Per machine and workload, the newest `eagle-fix map` file (by its records' timestamps) and its break-even
    per mode and context: the lowest concurrency at which EAGLE3's output throughput is below the baseline's
    with the whole interval below 1 (eagle_fix.served.summary.break_even), in one line."""

    newest: dict[tuple[str, str], tuple[str, Path, list[dict[str, Any]]]] = {}
    for f in sorted((results / "map").glob("*.ndjson")) if (results / "map").is_dir() else []:
        try:
            recs = read_map(f)
        except (OSError, ValueError, EagleFixError):
            continue
        if not recs:
            continue
        key = (str(recs[0].get("machine_name") or "?"), str(recs[0].get("workload") or CEILING))
        stamp = max(str(r.get("timestamp") or "") for r in recs)
        if key not in newest or stamp > newest[key][0]:
            newest[key] = (stamp, f, recs)
    out = []
    for (machine, workload), (_, f, recs) in sorted(newest.items(), key=lambda kv: (kv[0][1] != REALISTIC, kv[0])):
        said = []
        for (_, mode, fix, context), e in sorted(break_even(summarize(recs)).items(), key=lambda kv: str(kv[0])):
            grid = "/".join(str(c) for c in sorted(e["concurrencies"]))
            if e["interval"] is not None:
                what = f"loses from concurrency {e['interval']}"
            elif e["ratio"] is not None:
                what = f"never clearly loses ({grid}; estimate below 1 from {e['ratio']})"
            else:
                what = f"pays or ties at every concurrency ({grid})"
            said.append(
                f"{kilo(int(context))} {mode}{'' if is_fix_on(fix, unnamed_is_on=True) else f' fix {fix}'}: {what}"
            )
        out.append({"machine": machine, "workload": workload, "file": f, "line": "; ".join(said)})
    return out


# --------------------------------------------------------------------------- the gate on this machine


def gate_lines(machine: str) -> list[str]:
    """For each point kind of `eagle-fix ab`'s default grid: this machine's recorded noise (or whose record
    `ab` borrows, eagle_fix.gate.components.find), and the plan ab would run with its stated power and
    false-alarm rate, one line each."""

    profile = profiles.get_profile(profiles.default_profile("ab"))
    lines = []
    for context in profile.contexts:
        for mode in ("eager", "compile"):
            for arm in ("eagle3", "baseline"):
                kind = components.PointKind(profile.name, context, mode, arm)
                data, _ = components.find(machine, kind)
                if data is None:
                    lines.append(f"{kind.name}: no noise recorded on any machine; `ab` runs its fixed design")
                    continue
                sigma = components.launch_sigma(data, components.PLANNED_METRIC)
                rnd = (data["metrics"].get(components.PLANNED_METRIC) or {}).get("sigma_round")
                noise = (f"launch sd ≤ {sigma:.1%}" if sigma is not None else "launch sd not measured") + (
                    f", round sd {rnd:.1%}" if rnd is not None else ""
                )
                whose = "recorded here" if data["machine"] == machine else f"borrowed from `{data['machine']}`"
                plan = data.get("plan")
                if plan:
                    minutes = f", about {plan['expected_s'] / 60:.0f} min" if plan.get("expected_s") else ""
                    said = (
                        f"{plan['rounds']} rounds x ≤ {plan['max_blocks']} launch pairs{minutes}; catches "
                        f"{plan['detectable']:.1%} with {plan['power']:.0%} power, false alarms {plan['alpha']:.0%}"
                    )
                else:
                    said = "no plan (no costs recorded): `ab` runs its fixed design"
                lines.append(f"{kind.name}: {noise} ({whose}); plan {said}")
    return lines
