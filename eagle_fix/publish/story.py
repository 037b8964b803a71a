"""The dashboard's first view: per machine its newest fix A/B, most complete curve and newest run, told above asv's grid."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from eagle_fix.core import arms, paths, record
from eagle_fix.publish import answers
from eagle_fix.publish import break_even as to_pay
from eagle_fix.publish.labels import LABELLED, withheld, workload_label
from eagle_fix.store.fleet import jobs

STORY_ID = "eagle-fix-story"
STORY_PNG = "eagle-fix-story.png"
REGIMES_ID = "eagle-fix-regimes"
REGIMES_PNG = "eagle-fix-regimes.png"
REGIME_STYLE = {answers.REALISTIC: "tab:green", answers.CEILING: "tab:purple"}
FIX_STYLE = {"on": ("tab:blue", "-"), "upstream": ("tab:orange", "--"), "off": ("tab:red", ":")}


def _story_candidates(results_dir: Path, root: Path) -> dict[str, list[dict]]:
    """Per machine, its labelled asv runs with the records behind them: one run per (commit, measured or
    replayed, engine), so a fix A/B's arms (one asv file each) are one run and replayed releases are not."""
    out: dict[str, list[dict]] = {}
    for machine_dir in sorted(p for p in results_dir.iterdir() if (p / "machine.json").is_file()):
        runs: dict[tuple, dict] = {}
        for f in sorted(machine_dir.glob(f"*-{LABELLED}*.json")):
            data = json.loads(f.read_text(encoding="utf-8"))
            params, extra = data.get("params") or {}, data.get("eagle_fix") or {}
            if not extra.get("records_file"):
                continue
            key = (data["commit_hash"], params.get("source") or "measured", params.get("engine") or "?")
            run = runs.setdefault(
                key,
                {
                    "machine": machine_dir.name,
                    "commit": key[0],
                    "source": key[1],
                    "engine": key[2],
                    "date": 0,
                    "files": [],
                },
            )
            run["date"] = max(run["date"], int(data.get("date") or 0))
            path = Path(extra["records_file"])
            path = path if path.is_absolute() else root / path
            if path not in run["files"]:
                run["files"].append(path)
        found = []
        for run in runs.values():
            run["records"] = [r for path in run.pop("files") for r in record.read(path, missing_ok=True)]
            if run["records"]:
                run["workload"] = workload_label(run["records"])
                found.append(run)
        if found:
            out[machine_dir.name] = found
    return out


def _fixes(run: dict) -> list[str]:
    return sorted({r.get("fix") or "on" for r in run["records"] if arms.takes_fix(r.get("arm"))})


def _is_fix_ab(run: dict) -> bool:
    """A run that measured the bug: a fix arm other than `on` (alone or beside `on`)."""
    return any(not arms.is_fix_on(f) for f in _fixes(run))


def _contexts(run: dict) -> int:
    return len({r["context_len"] for r in run["records"] if r.get("status") == "ok"})


STORY_ROLES = ("newest fix A/B", "most complete curve", "newest run")


def story_runs(results_dir: Path, root: Path, *, max_machines: int = 6) -> list[dict]:
    """What the first view tells, whatever was run last. Per machine: its newest fix A/B (failures and
    their causes), its most complete context curve (replayed or measured), and its newest measured run
    where that is something else; each run labelled with its roles, workload, fix arms, commit and source.
    Machines newest first, at most `max_machines`, but never without the machine holding the newest fix
    A/B of all or the most complete curve of all."""
    shown: dict[str, list[dict]] = {}
    for machine, runs in _story_candidates(results_dir, root).items():
        picks: dict[int, list[str]] = {}
        fix_ab = [r for r in runs if _is_fix_ab(r)]
        if fix_ab:
            picks.setdefault(id(max(fix_ab, key=lambda r: r["date"])), []).append(STORY_ROLES[0])
        # ties go to the measured, then to the newest run: a one-context machine shows one row
        curve = max(runs, key=lambda r: (_contexts(r), r["source"] == "measured", r["date"]))
        picks.setdefault(id(curve), []).append(STORY_ROLES[1])
        measured = [r for r in runs if r["source"] == "measured"] or runs
        picks.setdefault(id(max(measured, key=lambda r: r["date"])), []).append(STORY_ROLES[2])
        chosen = []
        for run in runs:
            if id(run) in picks:
                run["roles"] = picks[id(run)]
                run["label"] = story_label(run)
                chosen.append(run)
        shown[machine] = sorted(chosen, key=lambda r: -r["date"])
    newest = sorted(shown, key=lambda m: -max(r["date"] for r in shown[m]))
    keep = newest[:max_machines]
    for role in STORY_ROLES[:2]:  # the story of the whole fleet: the newest fix A/B, the longest curve
        holders = [(r, m) for m in shown for r in shown[m] if role in r["roles"]]
        if not holders:
            continue
        if role == STORY_ROLES[0]:
            best = max(holders, key=lambda rm: rm[0]["date"])[1]
        else:
            best = max(holders, key=lambda rm: (_contexts(rm[0]), rm[0]["date"]))[1]
        if best not in keep:
            keep = keep[:-1] + [best] if len(keep) >= max_machines else keep + [best]
    return [r for m in newest if m in keep for r in shown[m]]


def story_label(run: dict) -> str:
    """A run in words: what it is on this view, its workload, fix arms, commit, engine and source."""
    contexts = sorted({r["context_len"] for r in run["records"]})
    span = "–".join(dict.fromkeys(f"{c / 1024:g}K" for c in (contexts[:1] + contexts[-1:]))) or "no contexts"
    return (
        f"{' + '.join(run['roles'])}: {run['workload']}, {span}, fix {'/'.join(_fixes(run)) or '–'}, "
        f"commit {run['commit'][:8]}, {run['engine']}, {run['source']}"
    )


# Panels that show one value at every point carry no information: said in a line of text instead.
FOLDABLE = {"acceptance_length": ("acceptance length", "{:.2f}"), "drafter_coverage": ("drafter coverage", "{:.0%}")}


def constant_panels(runs: list[dict]) -> dict[str, str]:
    """{column: its one value, as shown} for each foldable panel whose drafted points all show the same value."""
    out = {}
    for column, (_, fmt) in FOLDABLE.items():
        shown = {
            fmt.format(r[column])
            for run in runs
            for r in run["records"]
            if arms.is_eagle3(r.get("arm"))
            and r.get("status") == "ok"
            and r.get(column) is not None
            and not withheld(r, column)
        }
        if len(shown) == 1:
            out[column] = shown.pop()
    return out


def story_figure(runs: list[dict], path: Path) -> list[str]:
    """Per machine one row, per context on the x axis: decode time per token of both arms, the speedup,
    acceptance length and drafter coverage of every fix arm; a failed point is an x with its cause below.
    A panel with one value everywhere is left out; returns the lines of text that say those values."""
    folded = constant_panels(runs)
    # matplotlib here, not at the top: `eagle-fix --help` imports this module and stays fast
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = tuple(
        (column, title)
        for column, title in (
            ("tpot_ms", "decode ms / token\n(lower is better)"),
            ("speedup", "speedup vs no speculation\n(above 1: pays)"),
            ("acceptance_length", "acceptance length\n(tokens per step)"),
            ("drafter_coverage", "drafter coverage\n(share of steps drafted)"),
        )
        if column not in folded
    )
    fig, axes = plt.subplots(len(runs), len(panels), figsize=(4.2 * len(panels), 3.2 * len(runs)), squeeze=False)
    for row, run in zip(axes, runs):
        recs = run["records"]
        row_constant = constant_panels([run])
        for ax, (column, title) in zip(row, panels):
            if column in row_constant:  # one value on this row: a line of text, not a flat line on an axis
                ax.axis("off")
                ax.text(
                    0.5,
                    0.5,
                    f"{FOLDABLE[column][0]}:\n{row_constant[column]} at every drafted point",
                    ha="center",
                    va="center",
                    fontsize=10,
                    transform=ax.transAxes,
                )
                continue
            series: dict[tuple, list] = {}
            for r in recs:
                if column != "tpot_ms" and not arms.is_eagle3(r.get("arm")):
                    continue
                label = (
                    ("no speculation", None)
                    if arms.is_baseline(r.get("arm"))
                    else (f"EAGLE3 fix {r.get('fix') or 'on'}", r.get("fix") or "on")
                )
                series.setdefault((label, r.get("mode")), []).append(r)
            for ((label, fix), mode), rs in sorted(series.items(), key=lambda kv: str(kv[0])):
                rs = sorted(rs, key=lambda r: r["context_len"])
                color, style = FIX_STYLE.get(fix, ("black", "-"))
                marker = "o" if mode == "eager" else "s"
                ok = [
                    r for r in rs if r.get("status") == "ok" and r.get(column) is not None and not withheld(r, column)
                ]
                xs = [r["context_len"] for r in ok]
                ys = [r[column] for r in ok]
                ci = [((r.get("ci95") or {}).get(column) or [None, None]) for r in ok]
                err = [
                    [max(0.0, y - (c[0] if c[0] is not None else y)) for y, c in zip(ys, ci)],
                    [max(0.0, (c[1] if c[1] is not None else y) - y) for y, c in zip(ys, ci)],
                ]
                ax.errorbar(
                    xs,
                    ys,
                    yerr=err if any(map(any, err)) else None,
                    color=color,
                    linestyle=style,
                    marker=marker,
                    capsize=3,
                    label=f"{label}, {mode}",
                )
                failed = [r["context_len"] for r in rs if r.get("status") != "ok"]
                if failed:
                    ax.plot(
                        failed,
                        [0] * len(failed),
                        "x",
                        color=color,
                        markersize=12,
                        mew=3,
                        label=f"{label}, {mode}: FAILED",
                    )
            ax.set_xscale("log", base=2)
            contexts = sorted({r["context_len"] for r in recs})
            ax.set_xticks(contexts, [f"{c / 1024:g}K" for c in contexts])
            ax.minorticks_off()
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("context (tokens)", fontsize=8)
            ax.tick_params(labelsize=7)
            if column == "speedup":
                ax.axhline(1.0, color="grey", linewidth=0.8)
            # whole scales, so that matplotlib never zooms an axis onto one value (3.92-4.00 read as a change)
            if column == "acceptance_length":
                k = max((r.get("num_speculative_tokens") or 3) for r in recs)
                ax.set_ylim(0.9, k + 1.1)
            elif column == "drafter_coverage":
                ax.set_ylim(-0.05, 1.05)
        row[0].set_ylabel(
            f"{run['machine']}\n{' + '.join(run.get('roles') or ['run'])}\n{run['commit'][:8]}, {run['source']}",
            fontsize=8,
        )
        seen = {}
        for ax in row:  # every series of the row once, whichever panels were folded
            handles, labels = ax.get_legend_handles_labels()
            seen.update({lab: h for lab, h in zip(labels, handles) if lab not in seen})
        row[-1].legend(seen.values(), seen.keys(), fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return [f"{FOLDABLE[c][0]}: {v} at every drafted point shown (no panel)" for c, v in folded.items()]


def regimes_figure(groups: list[dict], path: Path) -> None:
    """Per machine and engine one row: speedup and acceptance per context of the realistic regime beside the
    ceiling, each line labelled by its workload, with the speedup's bounds and acceptance's 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("speedup", "speedup vs no speculation\n(above 1: pays)"),
        ("acceptance", "acceptance length\n(tokens per step)"),
    )
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.4 * len(groups)), squeeze=False)
    for row, g in zip(axes, groups):
        for ax, (what, title) in zip(row, panels):
            for w in (answers.REALISTIC, answers.CEILING):
                for mode in g["modes"]:
                    rs = sorted(
                        (r for (_, m), r in g["cells"][w].items() if m == mode and r.get("status") == "ok"),
                        key=lambda r: r["context_len"],
                    )
                    ys, lo, hi = [], [], []
                    for r in rs:
                        y = r.get("speedup") if what == "speedup" else r.get("acceptance_length")
                        b = (
                            answers.speedup_bounds(r, r.get("_base"))
                            if what == "speedup"
                            else answers.interval(r, "acceptance_length")
                        )
                        ys.append(y)
                        lo.append(max(0.0, y - b[0]) if (b and y is not None) else 0.0)
                        hi.append(max(0.0, b[1] - y) if (b and y is not None) else 0.0)
                    pts = [(r["context_len"], y, a, c) for r, y, a, c in zip(rs, ys, lo, hi) if y is not None]
                    if not pts:
                        continue
                    ax.errorbar(
                        [p[0] for p in pts],
                        [p[1] for p in pts],
                        yerr=[[p[2] for p in pts], [p[3] for p in pts]],
                        color=REGIME_STYLE[w],
                        linestyle="-" if mode == "eager" else "--",
                        marker="o" if mode == "eager" else "s",
                        capsize=3,
                        label=f"{answers.REGIME_WORDS[w].replace('`', '')}, {mode}",
                    )
            if what == "speedup":
                ax.axhline(1.0, color="grey", linewidth=0.8)
                ax.set_ylim(bottom=0)
            else:
                ax.set_ylim(0.9, 4.1)
            ax.set_xscale("log", base=2)
            ax.set_xticks(g["contexts"], [f"{c / 1024:g}K" for c in g["contexts"]])
            ax.minorticks_off()
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("context (tokens)", fontsize=8)
            ax.tick_params(labelsize=7)
        row[0].set_ylabel(f"{g['machine']}\n{g['engine']}", fontsize=8)
        row[-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)


def regimes_html(
    groups: list[dict], abs_: list[dict], maps: list[dict], needed: list[str] = (), pictures: list[str] = (), real=None
) -> str:
    """The first view's answers: the real target's figure (`real`, answers.real_target) and the realistic one as
    headlines, the newest fix A/Bs with their causes (the real target's first), then
    per machine and engine the realistic regime beside the ceiling (a table per context with intervals, the
    figure), the served break-even where a map exists, and the acceptance needed to pay (`needed`: lines of
    break_even.needed; `pictures`: its figures, one per profile)."""
    esc = html.escape

    def code(text: str) -> str:
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))

    realistic = [g for g in groups if g["cells"][answers.REALISTIC]]
    head = (f"<p style='font-size:15px'><b>{code(answers.real_headline(real))}</b></p>" if real else "") + (
        f"<p style='font-size:15px'><b>{code(answers.headline(realistic[0]))}</b></p>"
        if realistic
        else "<p><b>Realistic regime (chat pair, workload <code>chat</code>): not measured in these results; what "
        "follows is the best case.</b></p>"
    )
    fix = "".join(
        f"<p><b>Fix A/B</b> (newest: {esc(ab['machine'])}, {esc(ab['engine'])}, {esc(ab['workload'])}; <code>{esc(Path(ab['file']).name)}"
        f"</code>), past the draft's 2048 positions: {code('; '.join(ab['arms']))}.</p>"
        for ab in abs_
    )
    blocks = []
    for g in realistic:
        cols, rows = answers.regime_rows(g)
        table = (
            "<table class='table table-condensed' style='font-size:12px;width:auto'><tr>"
            + "".join(f"<th>{code(c)}</th>" for c in cols)
            + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
            + "</table>"
        )
        served = [m for m in maps if m["machine"] == g["machine"]]
        lines = (
            answers.constant_lines(g)
            + [f"served break-even, workload `{m['workload']}`: {m['line']}" for m in served]
            + (
                [f"{to_pay.NEEDED}: " + "; ".join(x for x in needed if g["machine"] in x or "check" in x)]
                if needed
                else [to_pay.NEEDED_NONE]
            )
        )
        blocks.append(
            f"<h3>{esc(g['machine'])}, {esc(g['engine'])}: realistic regime beside the ceiling</h3>"
            f"<p style='font-size:12px'>Greedy, fix on; {esc(answers.interval_note(g))}; (loop): an output that "
            "repeats itself, so a best case.</p>"
            f"{table}<ul style='font-size:12px'>{''.join(f'<li>{code(x)}</li>' for x in lines)}</ul>"
        )
    figure = (
        f"<img src='{REGIMES_PNG}' alt='speedup and acceptance per context: realistic regime (workload chat) "
        f"beside the ceiling (workload copy)' style='max-width:100%'>"
        if realistic
        else ""
    )
    figure += "".join(
        f"<img src='{esc(src)}' alt='speedup against acceptance length: a predicted line per context and mode "
        f"(tau x plain / speculative step, crossing 1 at the break-even tau*), the measured points on it' "
        f"style='max-width:100%'>"
        for src in pictures
    )
    return f"<div id='{REGIMES_ID}'>{head}{fix}{''.join(blocks)}{figure}</div>"


def fleet_html(fleet: list[dict]) -> str:
    """The machines of a CI matrix, one row per job: a machine whose job failed or uploaded nothing is named
    here, where its series would otherwise just stop."""
    if not fleet:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(j.get('kind', '?'))}</td><td>{html.escape(', '.join(j.get('machines') or []) or '–')}</td>"
        f"<td style='color:{'inherit' if j.get('status') == 'success' else '#c00'}'><b>"
        f"{'ok' if j.get('status') == 'success' else html.escape(j.get('status', '?'))}</b></td>"
        f"<td>{html.escape(j.get('reason') or '')}</td></tr>"
        for j in fleet
    )
    return (
        "<p>Machines of the last CI run:</p><table class='table table-condensed' style='font-size:12px;width:auto'>"
        f"<tr><th>machine kind</th><th>asv machine</th><th>job</th><th>why</th></tr>{rows}</table>"
    )


def story_html(
    runs: list[dict], fleet: list[dict] | None = None, *, answers_html: str = "", folded: list[str] = ()
) -> str:
    """The block above asv's grid: the CI matrix's machines and how each job ended, which runs it tells and
    why, the figure, every failed point with its cause, and where to look next."""

    def row(run: dict, r: dict, why: str) -> str:
        return (
            f"<tr><td>{html.escape(run['machine'])}</td><td>{run['commit'][:8]} ({run['source']})</td>"
            f"<td>{r['context_len']}</td><td>{r.get('mode')}</td><td>{r.get('arm')}</td>"
            f"<td>{r.get('fix') or '–'}</td><td>{html.escape(why)}</td></tr>"
        )

    told = "".join(f"<li><b>{html.escape(run['machine'])}</b>: {html.escape(run['label'])}</li>" for run in runs)
    fails = []
    for run in runs:
        for r in sorted(run["records"], key=lambda r: (r["context_len"], r.get("mode"), str(r.get("fix")))):
            if r.get("status") != "ok":
                fails.append(row(run, r, record.cause(r.get("error"), 200)))
            busy = record.busy(r) if r.get("status") == "ok" else None
            if busy:
                fails.append(row(run, r, f"speed withheld: {busy}"))
            for f in record.implausible(r):
                fails.append(row(run, r, f"withheld: {f}"))
    table = (
        "<table class='table table-condensed' style='font-size:12px;width:auto'><tr><th>machine</th><th>run</th>"
        "<th>context</th><th>mode</th><th>arm</th><th>fix</th><th>failed or withheld: cause</th></tr>"
        + "".join(fails)
        + "</table>"
        if fails
        else "<p>No point failed.</p>"
    )
    per_context = "?x-axis=context_len"
    links = " · ".join(
        f"<a href='#bench_eagle.{b}{per_context}'>{t}</a>"
        for b, t in (
            ("Sweep.track_tpot", "EAGLE3 decode ms/token"),
            ("Baseline.track_tpot", "no-speculation decode ms/token"),
            ("Sweep.track_relative_decode_time", "relative decode time"),
            ("Sweep.track_target_passes_per_token", "passes per token"),
            ("Sweep.track_drafter_skipped_share", "drafter skipped share"),
        )
    )
    figure = (
        f"<img src='{STORY_PNG}' alt='decode time, speedup, acceptance and drafter coverage per context' "
        f"style='max-width:100%'>"
        if runs
        else ""
    )
    return (
        f"<div id='{STORY_ID}' style='padding:10px 20px'><h2>EAGLE3 at long context: what each machine has "
        f"shown</h2>{answers_html}{fleet_html(fleet or [])}<h3>Every machine's runs</h3><p>Per machine, its newest fix A/B, its most complete context curve and its newest run "
        f"(one row each where they differ):</p><ul style='font-size:12px'>{told}</ul>"
        + "".join(f"<p style='font-size:12px'>{html.escape(x)}.</p>" for x in folded)
        + f"{figure}{table}<p>Per context in asv's graphs: {links}. Every asv graph below is lower "
        f"is better; replayed results carry <code>source-replayed</code>, workloads their own "
        f"<code>workload</code> label. More tables and plots: <a href='eagle-fix/index.html'>the report</a>.</p></div>"
    )


def add_story(html_dir: Path, results_dir: Path, repo: Path) -> int:
    """Put the story above asv's grid (asv appends its grid to the same element). Returns how many runs it tells."""
    runs = story_runs(results_dir, repo)
    fleet = jobs(Path(results_dir).parent)  # results/fleet beside results/asv: a CI matrix's jobs, merged
    # the run files, maps and gate records beside results/asv, else the repository's committed ones
    root = Path(results_dir).parent if (Path(results_dir).parent / "runs").is_dir() else paths.results_dir(root=repo)
    groups = [g for g in answers.regimes(root) if g["cells"][answers.REALISTIC]]
    real = answers.real_target(root)
    if not runs and not fleet and not groups and not real:
        return 0
    folded = story_figure(runs, html_dir / STORY_PNG) if runs else []
    if groups:
        regimes_figure(groups, html_dir / REGIMES_PNG)
    machines = [g["machine"] for g in groups]
    pictures = to_pay.pictures(root, machines, html_dir)
    told = regimes_html(
        groups, answers.fix_abs(root), answers.served(root), to_pay.needed(root, machines or None), pictures, real
    )
    index = html_dir / "index.html"
    text = index.read_text(encoding="utf-8")
    text = re.sub(
        rf"<div id='{STORY_ID}'.*?</div>(?=<!-- /{STORY_ID} -->)<!-- /{STORY_ID} -->", "", text, flags=re.DOTALL
    )
    anchor = '<div id="summarygrid-display"'
    at = text.index(anchor)
    at = text.index(">", at) + 1
    text = text[:at] + story_html(runs, fleet, answers_html=told, folded=folded) + f"<!-- /{STORY_ID} -->" + text[at:]
    index.write_text(text, encoding="utf-8")
    return len(runs)
