"""Bad input, as a new user types it (#56): each refusal is one line on stderr naming the problem and the fix,
a non-zero exit, and nothing written before it. None of these starts an engine: the checks come first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from eagle_fix.core.errors import EagleFixError, parse_positive_int

RUN_FILE = ROOT / "results" / "runs" / "cpu-intel-f6m207-2c-2215d0-c2142001-cpu.jsonl"


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def refused(cmd: list[str], cwd: Path, *, expect_rc: int | None = None, **env: str) -> str:
    """Run CMD in CWD (a tmp folder holding only its inputs); its one stderr line, after checking the exit,
    the empty stdout and that CWD holds what it held before."""
    before = _tree(cwd)
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env={**os.environ, **env}, check=False
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and (expect_rc is None or proc.returncode == expect_rc), (proc.returncode, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not proc.stdout.strip(), proc.stdout[-2000:]
    assert _tree(cwd) == before, f"written before the refusal: {sorted(set(_tree(cwd)) - set(before))}"
    return lines[0]


def eagle_fix(*args: str) -> list[str]:
    return [sys.executable, "-m", "eagle_fix.cli", *args]


# --------------------------------------------------------------------------- eagle-fix map (cases 1-4)


def test_map_port_out_of_range(tmp_path):
    line = refused(eagle_fix("map", "--port", "99999", "--out", str(tmp_path / "m.ndjson")), tmp_path, expect_rc=2)
    assert "--port 99999" in line and "65535" in line


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("garbage.ndjson", b"{garbage\n", "no `eagle-fix map` records"),
        ("empty.ndjson", b"", "no `eagle-fix map` records"),
        ("latin1.ndjson", b'{"kind": "caf\xe9"}\n', "not UTF-8"),
        ("list.ndjson", b"[1, 2]\n{}\n", "not an `eagle-fix map` record"),
    ],
)
def test_map_summary_of_a_file_that_is_no_map(tmp_path, name, content, words):
    (tmp_path / name).write_bytes(content)
    line = refused(eagle_fix("map", "--summary", name), tmp_path, expect_rc=2)
    assert words in line and name in line, line


# --------------------------------------------------------------------------- eagle-fix report (cases 5, 6)


def test_report_table_filter_on_a_key_the_rows_lack(tmp_path):
    line = refused(eagle_fix("report", "--table", "summary", str(RUN_FILE), "nosuchkey=1"), tmp_path)
    assert "'nosuchkey'" in line and "profile" in line, line


def test_report_check_without_docs_writes_no_report(tmp_path):
    out = tmp_path / "report"
    line = refused(eagle_fix("report", "--check", "--out", str(out), str(RUN_FILE)), tmp_path, expect_rc=2)
    assert "--check" in line and "--docs" in line and not out.exists()


# --------------------------------------------------------------------------- train-chat, train-tiny (case 7)


@pytest.mark.parametrize("command", ["train-chat", "train-tiny"])
def test_training_with_zero_threads(tmp_path, command):
    line = refused(eagle_fix(command, "--threads", "0", "--out", str(tmp_path / "pair")), tmp_path, expect_rc=2)
    assert "--threads 0" in line and "at least 1" in line


# --------------------------------------------------------------------------- scripts/merge_results.py (8-10)


def _upload(tmp: Path, benchmarks: bytes) -> Path:
    tree = tmp / "upload" / "results"
    (tree / "asv" / "m1").mkdir(parents=True)
    (tree / "asv" / "m1" / "machine.json").write_text('{"machine": "m1"}')
    (tree / "asv" / "benchmarks.json").write_bytes(benchmarks)
    return tmp / "upload"


@pytest.mark.parametrize(
    "benchmarks, expect, words",
    [
        (b'{"version": 2}', "a/b", "machine kind 'a/b'"),  # refused only after the copies, once
        (b"{not json", "", "not JSON"),
        (b'{"caf\xe9": 1}', "", "not UTF-8"),
    ],
)
def test_merge_refuses_before_copying(tmp_path, benchmarks, expect, words):
    _upload(tmp_path, benchmarks)
    argv = [sys.executable, str(ROOT / "scripts" / "merge_results.py"), "merge", "upload", "--into", "merged"]
    line = refused([*argv, *(["--expect", expect] if expect else [])], tmp_path, expect_rc=2)
    assert words in line and not (tmp_path / "merged").exists(), line


# --------------------------------------------------------------------------- scripts/calibrate.sh (11-13)


@pytest.mark.parametrize("trials", ["abc", "0", "-3", "100"])
def test_calibrate_refuses_trials_that_are_no_count(tmp_path, trials):
    line = refused(
        ["bash", str(ROOT / "scripts" / "calibrate.sh"), trials], tmp_path, CALIBRATE_OUT=str(tmp_path / "c")
    )
    assert f"TRIALS '{trials}'" in line and "such as 10" in line


def test_calibrate_refuses_a_slowdown_that_is_no_number(tmp_path):
    line = refused(
        ["bash", str(ROOT / "scripts" / "calibrate.sh"), "2"],
        tmp_path,
        CALIBRATE_OUT=str(tmp_path / "c"),
        CALIBRATE_SLOWDOWNS="0.05 fast",
    )
    assert "'fast'" in line


# --------------------------------------------------------------------------- eagle-fix noise (case 14)


@pytest.mark.parametrize(
    "args, words",
    [
        (("--mode", "turbo"), "--mode turbo: unknown; choose eager or compile"),
        (("--arm", "medusa"), "--arm medusa"),
        (("--rounds", "0"), "--rounds 0"),
        (("--profile", "nosuch"), "nosuch"),
    ],
)
def test_noise_refuses_before_announcing_or_making_its_folder(tmp_path, args, words):
    line = refused(eagle_fix("noise", *args, "--folder", str(tmp_path / "gate")), tmp_path)
    assert words in line, line


# --------------------------------------------------------------------------- the fair cases


def test_matrix_warns_of_an_unregistered_release_in_one_line(tmp_path):
    proc = subprocess.run(
        eagle_fix("matrix", "--releases", "9.9.9", "--dry-run"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "9.9.9" in warnings[0] and "registry.py" in warnings[0], proc.stderr


def test_matrix_says_nothing_of_registered_releases():
    proc = subprocess.run(
        eagle_fix("matrix", "--dry-run"), cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-2000:]


def test_pr_gate_without_arguments_prints_its_usage_before_building(tmp_path):
    line = refused(
        ["bash", str(ROOT / "scripts" / "pr_gate.sh")], tmp_path, expect_rc=2, PR_GATE_DIR=str(tmp_path / "g")
    )
    assert "usage: scripts/pr_gate.sh" in line


@pytest.mark.parametrize(
    "flag, unit",
    [
        ("--repeats", "a count such as 5"),
        ("--rounds", "a count such as 5"),
        ("--launches", "a count such as 5"),
        ("--concurrency", "concurrent requests"),
        ("--output-len", "output tokens"),
        ("--contexts", "tokens such as 8192"),
    ],
)
def test_a_hint_names_the_arguments_own_unit(flag, unit):
    for bad in ("x", "0"):
        with pytest.raises(EagleFixError) as err:
            parse_positive_int(bad, flag)
        assert unit in str(err.value), str(err.value)
        if flag != "--contexts":
            assert "8192" not in str(err.value)


def test_map_concurrency_hint_through_the_command(tmp_path):
    line = refused(eagle_fix("map", "--concurrency", "0", "--out", str(tmp_path / "m.ndjson")), tmp_path)
    assert "concurrent requests" in line and "8192" not in line


def test_the_committed_run_file_exists():
    """The report cases read a committed run file; its name moving must fail here, not skip above."""
    assert RUN_FILE.is_file() and json.loads(RUN_FILE.read_text().splitlines()[0])["context_len"] > 0


@pytest.mark.parametrize("seconds", ["--help-me", "abc", "0"])
def test_machine_noise_refuses_seconds_that_are_no_number(tmp_path, seconds):
    line = refused([sys.executable, str(ROOT / "scripts" / "machine_noise.py"), seconds], tmp_path, expect_rc=2)
    assert "machine_noise.py: error:" in line


@pytest.mark.parametrize(
    "args, words",
    [(("map", "--port", "abc"), "invalid int value: 'abc'"), (("nosuch",), "invalid choice: 'nosuch'")],
)
def test_a_usage_mistake_is_one_line_naming_the_help(tmp_path, args, words):
    line = refused(eagle_fix(*args), tmp_path, expect_rc=2)
    assert words in line and "--help)" in line, line


@pytest.mark.parametrize(
    "args, words",
    [(("--pairs", "0"), "give a count such as 5"), (("--context", "10"), "no room for a prompt")],
)
def test_harness_overhead_refuses_before_an_engine_starts(tmp_path, args, words):
    line = refused([sys.executable, str(ROOT / "scripts" / "harness_overhead.py"), *args], tmp_path, expect_rc=2)
    assert words in line, line


@pytest.mark.parametrize(
    "trials, env, words",
    [
        ("abc", {}, "TRIALS 'abc'"),
        ("0", {}, "TRIALS '0'"),
        ("3", {"CALIBRATE_AA": "0"}, "CALIBRATE_AA '0'"),
        ("3", {"CALIBRATE_SHARES": "0.05 most"}, "CALIBRATE_SHARES 'most'"),
    ],
)
def test_calibrate_acceptance_refuses_before_making_its_folder(tmp_path, trials, env, words):
    script = ROOT / "scripts" / "calibrate_acceptance.sh"
    line = refused(["bash", str(script), trials], tmp_path, expect_rc=2, CALIBRATE_OUT=str(tmp_path / "c"), **env)
    assert words in line, line
