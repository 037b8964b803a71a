"""`eagle-fix run` without an engine: bad input is one line before anything starts, and the plan."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from eagle_fix.plan import Point, RunArgs, plan, prompt_len, resolve


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagle_fix.cli", "run", *argv], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.fixture
def existing(tmp_path):
    path = tmp_path / "done.jsonl"
    path.write_text('{"context_len": 8192}\n')
    return path


@pytest.mark.parametrize("argv, message", [
    (["--profile", "nope"], r"unknown profile 'nope': choose one of cpu-quick, cpu, gpu-tiny, gpu-dummy, gpu"),
    (["--profile", "cpu-quick", "--modes", "fast"], r"--modes fast: unknown; choose from eager,compile"),
    (["--profile", "cpu-quick", "--arms", "medusa"], r"--arms medusa: unknown"),
    (["--profile", "cpu-quick", "--fix", "maybe"], r"--fix maybe: unknown; choose from on,off,upstream"),
    (["--profile", "cpu-quick", "--contexts", "8192,abc"], r"--contexts 'abc' is not a number"),
    (["--profile", "cpu-quick", "--contexts", "-1"], r"--contexts '-1' must be positive"),
    (["--profile", "cpu-quick", "--contexts", "200000"], r"beyond the target's limit \(131072 positions\)"),
    (["--profile", "cpu-quick", "--contexts", "100"], r"leaves no room for a prompt"),
    (["--profile", "cpu-quick", "--out", "/nonexistent/x.jsonl"], r"folder /nonexistent does not exist"),
    (["--profile", "gpu"], r"pass both --target DIR and --draft DIR"),
    (["--profile", "cpu-quick", "--repeats", "0"], r"--repeats '0' must be positive"),
    (["--profile", "cpu-quick", "--ttft-repeats", "x"], r"--ttft-repeats 'x' is not a number"),
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


def test_identity_of_a_point_is_the_records_identity():
    from eagle_fix import record

    run = resolve(RunArgs(profile="cpu-quick", contexts=(8192,), fixes=("on",)))
    eagle, base = Point(8192, "eager", "eagle3", "on"), Point(8192, "eager", "baseline", None)
    assert tuple(run.identity(eagle)) == record.IDENTITY
    assert record.baseline_key(run.identity(eagle)) == record.key(run.identity(base))


def test_a_full_filesystem_is_refused_before_any_engine(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from eagle_fix.errors import EagleFixError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(EagleFixError, match=r"--out .*only 0.0 MiB free on that filesystem"):
        resolve(RunArgs(profile="cpu-quick", out=tmp_path / "x.jsonl"))


def test_run_with_out_on_a_full_filesystem_is_one_line(tmp_path):
    """A real (1 MiB) filesystem: refused before any engine starts, one line, no traceback."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        (mnt / "filler").write_bytes(b"x" * (900 << 10))  # what is left: ~100 KiB
        out = run_cli("--profile", "cpu-quick", "--out", str(mnt / "run.jsonl"))
        assert out.returncode == 1
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert re.search(r"--out .*small: only 0.\d MiB free on that filesystem", lines[0]), lines[0]
        assert not (mnt / "run.jsonl").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
