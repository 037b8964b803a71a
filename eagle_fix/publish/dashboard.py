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
import subprocess
import sys
from pathlib import Path
from typing import Any

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.settings import PROFILE_ENV
from eagle_fix.machine.fingerprint import git_commit, versions
from eagle_fix.pairs.profiles import default_profile
from eagle_fix.publish.labels import engine_label, label_result, unlabelled_files
from eagle_fix.publish.localize import localize_dashboard
from eagle_fix.publish.report import print_report
from eagle_fix.publish.story import add_story
from eagle_fix.store import asv as asv_suite

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
    parser.add_argument(
        "--records",
        help="JSON lines behind the run (default: $EAGLE_FIX_ASV_RECORDS when replayed, else the sweep's output file)",
    )
    parser.add_argument("--no-report", action="store_true", help="publish the dashboard only")


def _conf(path: Path) -> dict:
    # asv here, not at the top: `eagle-fix --help` imports this module and stays fast
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
    conf = _conf(Path(args.config))
    results_dir, html_dir = conf["results_dir"], conf["html_dir"]
    commit = args.commit or os.environ.get("ASV_COMMIT") or git_commit(conf["repo"]) or ""
    name = asv_suite.asv_machine_name()
    replay = os.environ.get(asv_suite.RECORDS_ENV)
    records_path = Path(
        args.records
        or replay
        or asv_suite.run_out_path(os.environ.get(PROFILE_ENV) or default_profile("dashboard"), conf_dir=conf["repo"])
    )
    files = unlabelled_files(results_dir, name, commit) if commit else []
    if files:
        records = record.read(records_path, missing_ok=True)
        vers = versions()
        for f in files:
            out = label_result(
                f,
                records,
                engine=engine_label(vers["vllm_distribution"], vers["vllm"]),
                fix=asv_suite.asv_fix(),
                source="replayed" if replay else "measured",
                records_file=_relative(records_path, conf["repo"]),
            )
            print(f"publish: {out.relative_to(results_dir)} labelled ({len(records)} records from {records_path})")
    asv = Path(sys.executable).with_name("asv")
    proc = subprocess.run(
        [str(asv), "--config", str(conf["path"]), "publish"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise EagleFixError(f"asv publish exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    for line in (proc.stdout + proc.stderr).splitlines():
        if "Skipping" in line or "Couldn't find" in line:
            print(f"publish: asv: {line.strip()}")
    print(f"publish: dashboard self-contained ({localize_dashboard(html_dir)} CDN references replaced)")
    shown = add_story(html_dir, results_dir, conf["repo"])
    print(
        f"publish: the first view tells {shown} run(s): per machine its newest fix A/B, most complete curve "
        f"and newest run"
    )
    dropped = prune_empty_graphs(html_dir)
    if dropped:
        print(f"publish: {len(dropped)} graph(s) with no data on any machine left out: {', '.join(dropped)}")
    if args.no_report:
        return 0
    print_report([str(results_dir.parent)], html_dir / "eagle-fix")
    return 0
