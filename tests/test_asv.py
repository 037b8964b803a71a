"""The asv suite end to end on the real engine: `asv run` of the cpu-quick profile, results read back.

Runs in a scratch results folder (a copy of asv.conf.json pointing at this checkout), so the
committed results/ are never touched by a test run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, asv_conf

pytestmark = pytest.mark.engine


@pytest.fixture(scope="session")
def asv_quick(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("asv")
    conf = asv_conf(tmp, tmp / "results", tmp / "html")
    asv = str(Path(sys.executable).with_name("asv"))
    env = {**os.environ, "EAGLE_FIX_PROFILE": "cpu-quick", "EAGLE_FIX_RUN_OUT": str(tmp / "run.jsonl")}
    subprocess.run([sys.executable, str(ROOT / "scripts" / "asv_machine.py")], check=True, env=env,
                   capture_output=True, cwd=ROOT)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()
    run = subprocess.run([asv, "--config", str(conf), "run", "-E", f"existing:{sys.executable}", "--set-commit-hash", head,
                          "--launch-method", "spawn", "--bench", "Sweep"], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=3600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return tmp, head, run.stdout


def test_asv_records_every_tracked_number_of_the_quick_profile(asv_quick):
    from eagle_fix.results import load_asv_commit

    tmp, head, _ = asv_quick
    rows = load_asv_commit(tmp / "results", head)
    got = {(r["context_len"], r["mode"]): r for r in rows}
    for mode in ("eager", "compile"):
        r = got[(8192, mode)]
        for column in ("output_throughput_tok_s", "decode_throughput_tok_s", "ttft_s", "acceptance_length",
                       "speedup", "drafter_coverage", "kv_cache_capacity_tokens"):
            value = r.get(column)
            assert value is not None and not math.isnan(value), (mode, column, r)
        assert r["acceptance_length"] > 1.0 and r["drafter_coverage"] > 0.9
    # contexts the profile does not run are skipped, not failed
    assert (131072, "eager") not in got or got[(131072, "eager")].get("acceptance_length") is None or \
        math.isnan(got[(131072, "eager")]["acceptance_length"])


def test_the_sweep_behind_asv_wrote_its_json_lines(asv_quick):
    tmp, _, _ = asv_quick
    lines = [json.loads(x) for x in (tmp / "run.jsonl").read_text().splitlines()]
    assert {(r["mode"], r["arm"]) for r in lines} == {(m, a) for m in ("eager", "compile") for a in ("eagle3", "baseline")}
    assert all(r["status"] == "ok" and r["profile"] == "cpu-quick" for r in lines)
