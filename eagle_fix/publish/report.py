"""`eagle-fix report`: markdown tables and PNG plots per profile from asv results and run JSON lines."""

from __future__ import annotations

import argparse
import html
import re
from pathlib import Path

from eagle_fix.core import acceptance, arms, parity
from eagle_fix.core.break_even import INTERVAL
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.paths import results_dir
from eagle_fix.core.point import Point
from eagle_fix.gate import acceptance_power
from eagle_fix.machine.fingerprint import fingerprint
from eagle_fix.publish import break_even as to_pay
from eagle_fix.publish import summary
from eagle_fix.publish.docs import DOC_TABLES, FILE_TABLES, render_table, update_docs
from eagle_fix.publish.file_tables import map_table
from eagle_fix.publish.frame import fill_speedup, latest, release_key, workload_text
from eagle_fix.publish.plots import PLOTS, map_heatmap, save_plot
from eagle_fix.publish.tables import fix_ab_table, markdown_table
from eagle_fix.served.summary import read_map
from eagle_fix.store.results import load_results

DEFAULT_OUT = Path("html") / "eagle-fix"  # next to asv's dashboard (html_dir in asv.conf.json)


def write_report(paths, out: Path, *, machine: str | None = None) -> dict:
    """Write report.md, index.html and PNGs per profile into out; returns {profile: [files]}. The report opens
    with the summary (eagle_fix.publish.summary) of the first results folder among paths, for `machine` (default:
    this one's fingerprint name); the detailed tables follow."""
    out.mkdir(parents=True, exist_ok=True)
    map_md = map_report_section(paths, out)  # eagle-fix map files (.ndjson), at the report's end
    folders = [Path(p) for p in paths if Path(p).is_dir()]
    needed_md = break_even_section(folders[0], out) if folders else []  # after the map section
    paths = [p for p in paths if Path(p).suffix != ".ndjson"]
    df = fill_speedup(latest(load_results(paths))) if paths or not map_md else None
    md = ["# eagle-fix report", ""]
    if folders:
        md += summary.summary_markdown(folders[0], machine or fingerprint()["name"])
    md += [
        "## Details",
        "",
        "The tables and plots behind the summary, one section each: "
        + "; ".join(
            [f"Profile `{p}`" for p in (sorted(df["profile"].astype(str).unique()) if df is not None else [])]
            + [line[4:] for line in map_md + needed_md if line.startswith("### ")]
        )
        + ".",
        "",
        (
            "Newest measurement per profile, machine, vLLM version and point. asv results carry the EAGLE3 arm; "
            "`eagle-fix run` files carry every arm, and where both hold one measurement the run's row (with its "
            "samples) is shown once. Speedup is EAGLE3 decode throughput over the baseline's at the same point: "
            "from the same run where it ran both arms, else from the newest baseline of the same profile, "
            "machine, vLLM and device. Plots draw one line per machine, workload (output tokens, k), vLLM "
            "release, arm, mode and fix arm."
        ),
        "",
    ]
    written: dict[str, list[Path]] = {}
    for profile, pdf in df.groupby("profile") if df is not None else ():
        pdir = out / str(profile)
        pdir.mkdir(parents=True, exist_ok=True)
        files = [p for spec in PLOTS if (p := save_plot(pdf, pdir, *spec)) is not None]
        written[str(profile)] = files
        md.append(f"### Profile `{profile}`")
        for version, vdf in sorted(pdf.groupby("vllm_version"), key=lambda kv: (release_key(str(kv[0])), kv[0])):
            machines = ", ".join(f"`{m}`" for m in sorted(vdf["machine_name"].unique()))
            shared = workload_text(vdf)
            md += [
                "",
                f"vLLM {version}, {len(vdf)} points ({(vdf['status'] != 'ok').sum()} failed) on {machines}"
                + (f"; {shared}" if shared else ""),
                "",
                markdown_table(vdf),
            ]
            notes = _notes(vdf)
            if notes:
                md += [""] + notes
            ab = fix_ab_table(vdf)
            if ab:
                md += [
                    "",
                    "Fix A/B (EAGLE3 arm): acceptance length / drafter coverage, or why the point failed",
                    "",
                    ab,
                ]
        md.append("")
        md += [f"![{p.stem}]({profile}/{p.name})" for p in files]
        md.append("")
    if map_md:
        md += map_md
        written["map"] = sorted((out / "map").glob("*.png"))
    if needed_md:
        md += needed_md
        written["break-even"] = sorted((out / "break-even").glob("*.png"))
    text = "\n".join(md) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    (out / "index.html").write_text(_html(text), encoding="utf-8")
    return written


def _notes(df) -> list[str]:
    """What a reader must know about some rows: synthetic acceptance, twins that disagree, acceptance
    of a loop, rows only asv holds."""
    notes = []
    if (df["synthetic_acceptance"] == True).any():
        notes.append(
            "Rows marked synthetic acceptance ran with an acceptance rate given to the engine "
            "(random weights accept nothing): their acceptance and speedup are not measurements."
        )
    rows = [r.to_dict() for _, r in df.iterrows()]
    for r in rows:  # eager and compiled twins that disagree (eagle_fix.core.parity)
        said = [
            f for f in (r.get("flags") if isinstance(r.get("flags"), list) else []) if str(f).startswith(parity.FLAG)
        ]
        tie = r.get("parity_near_tie")  # twins that differ only from a near-tie on: told, not flagged
        said += [tie] if isinstance(tie, str) and tie else []
        # sampled twins: judged here with their calibrated launch spread (the sweep could not)
        said += [found] if (found := acceptance_power.sampled_parity(r, rows)) else []
        notes += [f"Parity, {_point(r)}: {x}." for x in said]
    drafted = [r for r in rows if acceptance.output_diversity(r) is not None and arms.speculates(r["arm"])]
    loops = [r for r in drafted if acceptance.drafts_a_loop(r)]  # drafts of a loop: not acceptance on varied text
    if loops:
        shares = [acceptance.output_diversity(r) for r in loops]
        which = (
            f"every drafted point ({len(loops)}) repeats itself (distinct 4-grams {min(shares):.2f}-{max(shares):.2f}"
            if len(loops) == len(drafted)
            else f"{len(loops)} of {len(drafted)} drafted points repeats itself (distinct 4-grams "
            + ", ".join(f"{_point(r)} {x:.2f}" for r, x in zip(loops, shares))
        )
        notes.append(
            f"Loops: the output of {which}; under {acceptance.LOOP_DISTINCT_4GRAMS}): a draft that has seen "
            "the loop predicts it, so that acceptance is a best case, not that of varied text."
        )
    asv = df[df["source"] == "asv"] if "source" in df else df.iloc[:0]
    if len(asv):
        replayed = (asv.get("asv_source") == "replayed").sum() if "asv_source" in asv else 0
        notes.append(
            f"{len(asv)} row(s) come from asv results alone (no `eagle-fix run` file holds them)"
            + (f", {replayed} of them replayed from earlier records" if replayed else "")
            + "."
        )
    return notes


def _point(r: dict) -> str:
    """A row's point in a note: context, arm, fix arm where it has one, mode."""
    return Point.of(r).words("note")


def _html(markdown: str) -> str:
    """The report as a static page next to asv's dashboard; no markdown library on purpose."""
    body, table = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            rows = [r.strip("|").split("|") for r in table if not r.startswith("|---")]
            body.append(
                "<table>"
                + "".join(
                    "<tr>" + "".join(f"<{t}>{html.escape(c.strip())}</{t}>" for c in r) + "</tr>"
                    for t, r in zip(["th"] + ["td"] * len(rows), rows)
                )
                + "</table>"
            )
            table = []
        if line.startswith("!["):
            src = line[line.index("(") + 1 : -1]
            body.append(f'<img src="{html.escape(src)}" alt="{html.escape(src)}">')
        elif line.startswith("### "):
            body.append(f"<h3>{_inline(line[4:])}</h3>")
        elif line.startswith("## "):
            body.append(f"<h2>{_inline(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    style = "body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
    return (
        f"<!doctype html><meta charset=utf-8><title>eagle-fix report</title><style>{style}</style>\n"
        + "\n".join(body)
        + "\n"
    )


def _inline(text: str) -> str:
    """A line's **bold** and `code` as HTML, the rest escaped."""
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def _map_files(paths) -> list[Path]:
    """The `eagle-fix map` files (.ndjson) among the report's inputs (in folders too)."""
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(p.rglob("*.ndjson"))
        elif p.suffix == ".ndjson":
            found.append(p)
    return found


def map_report_section(paths, out: Path) -> list[str]:
    """The report's map section: per map file, the heatmap, its table and the break-even per context."""
    md = []
    for f in _map_files(paths):
        png = map_heatmap(read_map(f), out / "map" / f"{f.stem}.png")
        md += [
            f"### Served map `{f.name}`",
            "",
            (
                "EAGLE3 / no-speculation ratios of vLLM bench's output_throughput and "
                "median_tpot_ms per context and load (paired alternating rounds), and the break-even concurrency."
            ),
            "",
            map_table([f]),
            "",
        ]
        if png is not None:
            md += [f"![{png.stem}](map/{png.name})", ""]
    return md


def break_even_section(results: Path, out: Path) -> list[str]:
    """The acceptance needed to pay (eagle_fix.core.break_even): per profile and machine its tau* per context
    and mode and the picture of speedup against acceptance length; the damage-knob check's table."""
    points = to_pay.committed(results)
    if not points:
        return []
    md = [
        "### Acceptance needed to pay",
        "",
        (
            "Break-even acceptance length τ* = speculative step / plain step (both arms' `step_ms` in one run file); "
            f"a draft accepting τ tokens a step is predicted to decode τ / τ* as fast. {INTERVAL}."
        ),
        "",
    ]
    for g in to_pay.groups([p for p in points if not p["check"]]):
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{g['profile']}-{g['machine']}")
        png = to_pay.figure(g, out / "break-even" / f"{name}.png")
        md += [
            f"`{g['profile']}` on `{g['machine']}`: {to_pay.needed_words(g['points']) or 'no greedy fix-on point'}.",
            "",
        ]
        md += [f"![{name}](break-even/{png.name})", ""] if png else []
    check = [p for p in points if p["check"]]
    if check:
        md += [
            (
                f"Damage-knob check (`results/{to_pay.CHECK.as_posix()}`: EAGLE_FIX_INJECT_DRAFT_ERRORS at several "
                f"shares, each run beside its baseline): {to_pay.check_words(check)}."
            ),
            "",
            to_pay.points_table(check),
            "",
        ]
        for g in to_pay.groups(check):
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"check-{g['profile']}-{g['machine']}")
            png = to_pay.figure(g, out / "break-even" / f"{name}.png")
            md += [f"![{name}](break-even/{png.name})", ""] if png else []
    return md


# --------------------------------------------------------------------------- CLI


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results",
        nargs="*",
        metavar="RESULTS",
        default=[str(results_dir())],
        help="`eagle-fix run` .jsonl files, asv results .json files, or folders (default: results/)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    parser.add_argument(
        "--table",
        metavar="KIND",
        help=f"print one table of RESULTS: {', '.join(DOC_TABLES)}; "
        f"or of the files named: {', '.join(FILE_TABLES)} "
        "(key=value arguments filter the rows of the first kind, e.g. profile=cpu)",
    )
    parser.add_argument(
        "--docs",
        action="store_true",
        help="regenerate the tables in README.md and docs/ from the committed files each one names",
    )
    parser.add_argument("--check", action="store_true", help="with --docs: change nothing, exit 1 if a table differs")


def cli_main(args: argparse.Namespace) -> int:
    if args.check and not args.docs:  # alone it would write a whole report and pass
        raise EagleFixError(
            "--check: only with --docs (eagle-fix report --docs --check checks the docs' tables)", exit_code=2
        )
    if args.table:
        print(render_table(args.table, list(args.results)))
        return 0
    if args.docs:
        stale = update_docs(check=args.check)
        for line in stale:
            print(("stale: " if args.check else "updated: ") + line)
        return 1 if (stale and args.check) else 0
    print_report(args.results, args.out)
    return 0


def print_report(paths, out: Path) -> None:
    """write_report, then print where its plots and pages went; an error when there was nothing to report."""
    written = write_report(paths, out)
    if not written:
        raise EagleFixError("no results to report")
    for profile, files in written.items():
        print(f"profile {profile}: {len(files)} plot(s) in {out / profile}/")
    print(f"report: {out / 'report.md'} and {out / 'index.html'}")
