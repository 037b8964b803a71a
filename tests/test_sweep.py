"""`eagle-fix run` without an engine: bad input, the plan, the records on disk, the flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from eagle_fix.sweep import Point, RunArgs, _flags, append_record, plan, prompt_len, read_records, resolve


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagle_fix.cli", "run", *argv], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.fixture
def existing(tmp_path):
    path = tmp_path / "done.jsonl"
    path.write_text('{"context_len": 8192}\n')
    return path


@pytest.mark.parametrize("argv, message", [
    (["--profile", "nope"], r"unknown profile 'nope': choose one of cpu-quick, cpu, gpu-dummy, gpu"),
    (["--profile", "cpu-quick", "--modes", "fast"], r"--modes fast: unknown; choose from eager,compile"),
    (["--profile", "cpu-quick", "--arms", "medusa"], r"--arms medusa: unknown"),
    (["--profile", "cpu-quick", "--fix", "maybe"], r"--fix maybe: unknown; choose from on,off,upstream"),
    (["--profile", "cpu-quick", "--contexts", "8192,abc"], r"--contexts 'abc' is not a number"),
    (["--profile", "cpu-quick", "--contexts", "-1"], r"--contexts '-1' must be positive"),
    (["--profile", "cpu-quick", "--contexts", "200000"], r"beyond the target's limit \(131072 positions\)"),
    (["--profile", "cpu-quick", "--contexts", "100"], r"leaves no room for a prompt"),
    (["--profile", "cpu-quick", "--out", "/nonexistent/x.jsonl"], r"folder /nonexistent does not exist"),
    (["--profile", "gpu"], r"pass both --target DIR and --draft DIR"),
    (["--profile", "cpu-quick", "--target", "/nonexistent-model"], r"/nonexistent-model"),
])
def test_bad_input_is_one_line_before_any_engine(argv, message):
    import re

    out = run_cli(*argv)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert re.search(message, lines[0]), lines[0]


def test_existing_out_is_never_touched_without_resume(existing):
    before = existing.read_bytes()
    out = run_cli("--profile", "cpu-quick", "--out", str(existing))
    assert out.returncode == 1 and "add --resume" in out.stderr
    assert existing.read_bytes() == before


def test_plan_runs_baselines_first_and_one_engine_group_per_mode_arm_fix():
    run = resolve(RunArgs(profile="cpu-quick", contexts=(16384, 8192), fixes=("on", "off")))
    points = plan(run)
    assert points[:2] == [Point(8192, "eager", "baseline", None), Point(16384, "eager", "baseline", None)]
    assert len(points) == 2 * (2 + 2 * 2)  # modes x (baseline + eagle3 x fixes) x contexts
    assert prompt_len(8192, run) == 8192 - run.output_len - 3 - 1


def test_records_survive_a_torn_last_line(tmp_path):
    path = tmp_path / "run.jsonl"
    append_record(path, {"context_len": 8192, "status": "ok"})
    append_record(path, {"context_len": 16384, "status": "failed"})
    with open(path, "a") as f:
        f.write('{"context_len": 32768, "sta')  # a sweep killed mid-write
    assert [r["context_len"] for r in read_records(path)] == [8192, 16384]


def test_flags_name_what_the_counters_hide():
    zero = {"num_drafts": 31, "drafter_coverage": 0.0, "num_speculative_tokens": 3}
    assert [f.split(":")[0] for f in _flags(zero)] == ["zero_filled_drafts"]
    overrun = {"num_drafts": 31, "drafter_coverage": 1.0, "draft_rotary_positions": 2048, "max_seq_len_drafted": 4093,
               "num_speculative_tokens": 3}
    assert [f.split(":")[0] for f in _flags(overrun)] == ["rotary_cache_overrun"]
    fine = dict(overrun, draft_rotary_positions=8192)
    assert _flags(fine) == []
