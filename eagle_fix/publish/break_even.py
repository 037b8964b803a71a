"""The acceptance needed to pay, shown (#54 item 3): the break-even acceptance tau* of every drafted point
with a baseline twin in its run file (eagle_fix.core.break_even), as a docs table and as one picture per
profile: speedup against acceptance length, a predicted line per context and mode crossing 1 at tau*, the
measured points on it. The report, the dashboard's first view and docs/results.md read these."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from eagle_fix.core import break_even, record
from eagle_fix.core.arms import is_fix_on
from eagle_fix.core.errors import EagleFixError

# The damage-knob check (EAGLE_FIX_INJECT_DRAFT_ERRORS at several shares, each run with its baseline twin).
CHECK = Path("calibration") / "break-even"
SET_ASIDE = ("extra", "calibration")  # under results/runs: history or evidence of a bug, not a current answer


# The acceptance a drafter needs for EAGLE3 to pay at a context, and without a point to say it.
NEEDED = "acceptance needed to pay (break-even τ* = speculative step / plain step, both arms' `step_ms`)"
NEEDED_NONE = "acceptance needed to pay: no run file holds a drafted point beside its baseline's step samples"
PNG = "eagle-fix-break-even-{name}.png"  # the first view's pictures, one per profile and machine


def _k(c: int) -> str:
    return f"{c / 1024:g}K"


def file_points(path: Path) -> list[dict[str, Any]]:
    """The figures of one run file, each naming it."""
    return [{**p, "file": str(path)} for p in break_even.points(record.read(path))]


def committed(results: Path) -> list[dict[str, Any]]:
    """Every point of the run files under results/runs (set-aside folders left out) and of the damage check
    (results/calibration/break-even), the check's points marked `check`."""
    files = []
    runs = results / "runs"
    if runs.is_dir():
        files += [
            (f, False)
            for f in sorted(runs.rglob("*.jsonl"))
            if not any(p in SET_ASIDE for p in f.relative_to(runs).parts[:-1])
        ]
    if (results / CHECK).is_dir():
        files += [(f, True) for f in sorted((results / CHECK).glob("*.jsonl"))]
    out = []
    for f, check in files:
        try:
            out += [{**p, "check": check} for p in file_points(f)]
        except (OSError, ValueError, EagleFixError):
            continue
    return out


def groups(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per profile and machine: its points (one picture each)."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in points:
        by.setdefault((str(p["profile"]), str(p["machine"])), []).append(p)
    return [{"profile": k[0], "machine": k[1], "points": v} for k, v in sorted(by.items())]


def several_arms(points: list[dict[str, Any]]) -> bool:
    """Whether the points hold more than one speculative arm (EAGLE3 and n-gram): then each is named."""
    return len({str(p["arm"]) for p in points}) > 1


def needed_words(points: list[dict[str, Any]]) -> str:
    """`8K eager 2.61 [2.23, 2.87] (accepts 2.57)` per context and mode (and workload, and arm where there are
    several) of the newest undamaged, greedy, fix-on points."""
    newest: dict[tuple, dict[str, Any]] = {}
    for p in points:
        if p["damage"] or not is_fix_on(p["fix"], unnamed_is_on=True) or p["temperature"]:
            continue
        at = (p["context_len"], p["mode"] != "eager", str(p["workload"]), str(p["arm"]))
        if at not in newest or p["timestamp"] > newest[at]["timestamp"]:
            newest[at] = p
    several = len({w for _, _, w, _ in newest}) > 1
    arms = several_arms(list(newest.values()))
    said = []
    for (_, _, w, a), p in sorted(newest.items()):
        acc = f" (accepts {p['acceptance']:.2f})" if p["acceptance"] is not None else ""
        said.append(
            (f"`{w}` " if several else "")
            + (f"{a} " if arms else "")
            + f"{_k(p['context_len'])} {p['mode']} {p['tau_star']:.2f}{break_even.interval_words(p['tau_star_ci'])}{acc}"
        )
    return "; ".join(said)


def check_words(points: list[dict[str, Any]]) -> str:
    """How the damage check's predictions fared: agreeing points out of judged ones, and where they part."""
    judged = [p for p in points if p["agree"] is not None]
    parted = [p for p in judged if not p["agree"]]
    words = f"predicted and measured speedup agree within their intervals at {len(judged) - len(parted)} of {len(judged)} points"
    if parted:
        words += "; they part at " + ", ".join(
            f"{_k(p['context_len'])} {p['mode']} damage {p['damage']:g} (predicted {p['predicted']:.2f}, measured {p['measured']:.2f})"
            for p in parted
        )
    return words


def _cell(v: float | None, ci: tuple[float, float] | None) -> str:
    return "–" if v is None else f"{v:.2f}{break_even.interval_words(ci)}"


def table(paths: list[Path]) -> str:
    """The docs table: per drafted point of the named run files (or folders of them) with a baseline twin in
    its file: the step times, tau*, acceptance, predicted and measured speedup with intervals."""
    files = [f for p in paths for f in (sorted(Path(p).glob("*.jsonl")) if Path(p).is_dir() else [Path(p)])]
    if not files:
        raise EagleFixError(
            f"--table break-even: no run files in {' '.join(map(str, paths))}; name .jsonl files or folders"
        )
    points = [p for f in files for p in file_points(f)]
    if not points:
        raise EagleFixError("--table break-even: no drafted point has a baseline twin with step samples in its file")
    return points_table(points)


def _order(p: dict[str, Any]) -> tuple:
    return (str(p["profile"]), p["context_len"], p["mode"] != "eager", p["damage"], str(p["workload"]), str(p["arm"]))


def points_table(points: list[dict[str, Any]]) -> str:
    """The figures of `points` as a markdown table, one row each (an `arm` column where there are several)."""
    arms = several_arms(points)
    head = [
        "profile",
        *(["arm"] if arms else []),
        "context",
        "mode",
        "workload",
        "damage",
        "plain step ms",
        "spec step ms",
        "tau* (break-even)",
        "acceptance",
        "predicted speedup",
        "measured speedup",
        "agree",
    ]
    rows = [
        [
            str(p["profile"]),
            *([str(p["arm"])] if arms else []),
            _k(p["context_len"]),
            str(p["mode"]),
            str(p["workload"] or "copy"),
            f"{p['damage']:g}",
            f"{p['plain_step_ms']:.2f}",
            f"{p['spec_step_ms']:.2f}",
            _cell(p["tau_star"], p["tau_star_ci"]),
            _cell(p["acceptance"], p["acceptance_ci"]),
            _cell(p["predicted"], p["predicted_ci"]),
            _cell(p["measured"], p["measured_ci"]),
            {True: "yes", False: "**no**", None: "–"}[p["agree"]],
        ]
        for p in sorted(points, key=_order)
    ]
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    )


def figure(group: dict[str, Any], path: Path) -> Path | None:
    """Speedup against acceptance length for one profile: per context and mode the predicted line
    tau x plain / speculative (its crossing of 1 is tau*), the measured points with their intervals on it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in group["points"] if p["acceptance"] is not None]
    if not pts:
        return None
    k = max(int(p["k"] or 3) for p in pts)
    contexts = sorted({p["context_len"] for p in pts})
    colors = {c: plt.get_cmap("viridis")(i / max(1, len(contexts) - 1) * 0.85) for i, c in enumerate(contexts)}
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    # each line's tau*: the median of its undamaged points', else of its damaged ones; one line per arm where
    # there are several (each method's speculative step costs its own)
    arms = several_arms(pts)
    undamaged: dict[tuple[int, str, str], list[float]] = {}
    damaged: dict[tuple[int, str, str], list[float]] = {}
    for p in pts:
        at = (p["context_len"], p["mode"], str(p["arm"]) if arms else "")
        (damaged if p["damage"] else undamaged).setdefault(at, []).append(p["tau_star"])
    lines = {**damaged, **undamaged}
    xs = [1.0, k + 1.0]
    first = min(a for _, _, a in lines)
    for (c, mode, a), taus in sorted(lines.items()):
        t = sorted(taus)[len(taus) // 2]
        # eager solid, compiled dashed; a second arm's lines dotted / dash-dotted
        style = ("-" if mode == "eager" else "--") if a == first else (":" if mode == "eager" else "-.")
        label = f"{_k(c)} {mode}{' ' + a if a else ''}: τ* {t:.2f}"
        ax.plot(xs, [x / t for x in xs], style, color=colors[c], linewidth=1, label=label)
        ax.plot([t], [1.0], "|", color=colors[c], markersize=12)
    for p in pts:
        marker = {"chat": "o", "copy": "s"}.get(str(p["workload"] or "copy"), "^")
        if p["damage"]:
            marker = "D"
        xerr = (
            [[p["acceptance"] - p["acceptance_ci"][0]], [p["acceptance_ci"][1] - p["acceptance"]]]
            if p["acceptance_ci"]
            else None
        )
        yerr = (
            [[p["measured"] - p["measured_ci"][0]], [p["measured_ci"][1] - p["measured"]]] if p["measured_ci"] else None
        )
        ax.errorbar(
            p["acceptance"],
            p["measured"],
            xerr=xerr,
            yerr=yerr,
            fmt=marker,
            color=colors[p["context_len"]],
            markerfacecolor="none" if p["mode"] != "eager" else colors[p["context_len"]],
            capsize=2,
            markersize=5,
        )
        if arms:
            ax.annotate(
                str(p["arm"]), (p["acceptance"], p["measured"]), fontsize=6, xytext=(3, 3), textcoords="offset points"
            )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlim(0.9, k + 1.1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("acceptance length τ (tokens a step)")
    ax.set_ylabel("speedup vs no speculation")
    ax.set_title(
        f"{group['profile']} on {group['machine']}\nlines predicted (τ x plain / speculative step), "
        "points measured (o chat, s copy, D damaged; hollow compiled)",
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def needed(results: Path, machines: list[str] | None = None) -> list[str]:
    """One line per profile (of `machines`, default every one) naming tau* per context and mode with its
    interval and the acceptance measured there, then one line for the damage-knob check; [] without a point."""
    points = committed(results)
    lines = []
    for g in groups([p for p in points if not p["check"]]):
        if machines is not None and g["machine"] not in machines:
            continue
        words = needed_words(g["points"])
        if words:
            lines.append(f"`{g['profile']}` on `{g['machine']}`: {words}")
    check = [p for p in points if p["check"]]
    if check:
        lines.append(
            f"damage-knob check (`results/{CHECK.as_posix()}`, tau x plain / speculative step against the "
            f"measured speedup): {check_words(check)}"
        )
    return lines


def summary(results: Path, machines: list[str] | None = None) -> list[str]:
    """The report summary's lines: tau* per profile of the headline machines and the damage check."""
    lines = needed(results, machines)
    if not lines:
        return [f"- **{NEEDED_NONE[0].upper() + NEEDED_NONE[1:]}**."]
    return [f"- **{NEEDED[0].upper() + NEEDED[1:]}**; {break_even.INTERVAL}:"] + [f"  - {x}" for x in lines]


def pictures(results: Path, machines: list[str], folder: Path) -> list[str]:
    """The first view's pictures of `machines` (one per profile), written into `folder`; their file names."""
    names = []
    for g in groups([p for p in committed(results) if not p["check"]]):
        if g["machine"] in machines:
            name = PNG.format(name=re.sub(r"[^A-Za-z0-9_.-]", "_", f"{g['profile']}-{g['machine']}"))
            if figure(g, folder / name) is not None:
                names.append(name)
    return names
