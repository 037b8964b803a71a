"""The asv suite end to end on the real engine: `asv run` of the cpu-quick profile with the fix on and
with it off (the original bug, on purpose), read back by our loader, gated by `eagle-fix compare`, and
marked by asv's own `asv compare` (every benchmark is lower-is-better, a failed point is a failed
benchmark).

Runs in a scratch results folder (a copy of asv.conf.json pointing at this checkout), so the
committed results/ are never touched by a test run.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, asv_conf

pytestmark = pytest.mark.engine

ASV = str(Path(sys.executable).with_name("asv"))
# CI-sized samples: 3 decode repeats of 128 tokens per point (the profile's own: 5 x 512).
KNOBS = {"EAGLE_FIX_PROFILE": "cpu-quick", "EAGLE_FIX_REPEATS": "3", "EAGLE_FIX_OUTPUT_LEN": "128"}


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()


@pytest.fixture(scope="session")
def asv_runs(tmp_path_factory):
    """Two asv runs recorded under two commits of main: HEAD with the fix on, HEAD~1 with it off."""
    from eagle_fix.asv_suite import asv_machine_name

    tmp = tmp_path_factory.mktemp("asv")
    results = tmp / "results" / "asv"
    conf = asv_conf(tmp, results, tmp / "html")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "asv_machine.py")], check=True, capture_output=True, cwd=ROOT)
    machine = asv_machine_name()
    commits = {"on": _git("rev-parse", "HEAD"), "off": _git("rev-parse", "HEAD~1")}
    outs = {}
    for fix, commit in commits.items():
        out = tmp / "results" / "runs" / f"{machine}-{commit[:8]}-cpu-quick{'' if fix == 'on' else '-fix-off'}.jsonl"
        env = {**os.environ, **KNOBS, "EAGLE_FIX_ASV_FIX": fix, "EAGLE_FIX_RUN_OUT": str(out)}
        run = subprocess.run([ASV, "--config", str(conf), "run", "-E", f"existing:{sys.executable}", "--set-commit-hash",
                              commit, "--launch-method", "spawn"], capture_output=True, text=True, env=env,
                             cwd=ROOT, timeout=3600)
        # asv run exits 2 when a benchmark failed: with the fix off the compiled EAGLE3 point must
        expected = 0 if fix == "on" else 2
        assert run.returncode == expected, run.stdout[-4000:] + run.stderr[-4000:]
        outs[fix] = out
    return tmp, results, conf, commits, outs


def test_asv_records_every_tracked_number_of_the_quick_profile(asv_runs):
    from eagle_fix.results import load_asv_commit

    _, results, _, commits, _ = asv_runs
    rows = load_asv_commit(results, commits["on"])
    got = {(r["context_len"], r["mode"]): r for r in rows}
    assert set(got) == {(8192, "eager"), (8192, "compile")}  # 16K..128K are skipped (NaN), not points
    for mode in ("eager", "compile"):
        r = got[(8192, mode)]
        assert r["status"] == "ok", r["error"]
        for column in ("output_throughput_tok_s", "tpot_ms", "ttft_s", "acceptance_length", "speedup",
                       "drafter_coverage", "peak_host_memory_bytes", "decode_pct_of_bandwidth"):
            value = r.get(column)
            assert value is not None and not math.isnan(value), (mode, column, r)
        assert r["acceptance_length"] > 1.0 and r["drafter_coverage"] > 0.9 and r["speedup"] > 0
        # the record of the sweep behind asv supplies identity and samples
        assert r["profile"] == "cpu-quick" and r["output_len"] == 128 and len(r["samples"]["tpot_ms"]) == 3


def test_fix_off_records_the_compiled_crash_as_a_failed_benchmark(asv_runs):
    from eagle_fix.results import load_asv_commit

    _, results, _, commits, outs = asv_runs
    got = {(r["context_len"], r["mode"]): r for r in load_asv_commit(results, commits["off"])}
    assert got[(8192, "compile")]["status"] == "failed"
    assert "index out of bounds" in got[(8192, "compile")]["error"]  # the sweep's cause, carried to asv's row
    assert got[(8192, "eager")]["status"] == "ok" and got[(8192, "eager")]["acceptance_length"] < 1.5


@pytest.mark.parametrize("kind", ["asv", "jsonl"])
def test_eagle_fix_compare_fails_the_gate_on_the_crash(asv_runs, kind):
    _, results, _, commits, outs = asv_runs
    base, new = (commits["on"][:8], commits["off"][:8]) if kind == "asv" else (str(outs["on"]), str(outs["off"]))
    proc = subprocess.run([sys.executable, "-m", "eagle_fix.cli", "compare", base, new, "--results-dir",
                           str(results.parent)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"8192\s+compile\s+eagle3\s+-\s+status.*index out of bounds.*FAILED", proc.stdout), proc.stdout
    assert re.search(r"8192\s+eager\s+eagle3\s+-\s+acceptance_length.*REGRESSION", proc.stdout), proc.stdout
    assert "fix A/B: BASE fix on, NEW fix off" in proc.stdout


def test_asv_compare_marks_acceptance_and_drafter_benchmarks_worse_or_failed(asv_runs):
    _, _, conf, commits, _ = asv_runs
    proc = subprocess.run([ASV, "--config", str(conf), "compare", commits["on"], commits["off"]],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    # asv 0.6.6 prints a GitHub table: | Change | Before | After | Ratio | Benchmark (Parameter) |
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in proc.stdout.splitlines()
            if line.startswith("|") and "bench_eagle." in line]
    marks = {row[-1]: row[0] for row in rows}
    tracked = {name: mark for name, mark in marks.items()
               if re.search(r"track_(target_passes_per_token|drafter_skipped_share|per_position_rejection)", name)}
    assert tracked, proc.stdout
    assert "-" not in tracked.values(), tracked  # never "better"
    assert marks["bench_eagle.Sweep.track_target_passes_per_token(8192, 'eager')"] == "+", marks  # 1/acceptance up: worse
    assert marks["bench_eagle.Sweep.track_target_passes_per_token(8192, 'compile')"] == "!", marks  # failed
