"""eagle-fix ab: bad input is one line (exit 2); paired verdicts; on the real engine, identical sides
pass and the calibrated injected delay is caught (the gate's power, measured in CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from eagle_fix import ab

CALIBRATION = ROOT / "results" / "calibration"


def run_ab(*argv: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "eagle_fix.cli", "ab", *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.parametrize("argv, message", [
    (["--base-python", "/nonexistent/python", "--new-python", sys.executable], r"--base-python /nonexistent/python: not an executable Python"),
    (["--base-python", sys.executable, "--new-python", sys.executable, "--new-env", "NOEQUALS"], r"--new-env 'NOEQUALS': expected KEY=VALUE"),
    (["--base-python", sys.executable, "--new-python", sys.executable, "--rounds", "0"], r"--rounds '0' must be positive"),
    (["--base-python", sys.executable, "--new-python", sys.executable, "--modes", "fast"], r"--modes fast: unknown"),
])
def test_bad_input_is_one_line(argv, message):
    import re

    out = run_ab(*argv, timeout=300)
    assert out.returncode in (1, 2), out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert re.search(message, lines[0]), lines[0]


def test_a_python_without_eagle_fix_is_refused(tmp_path):
    import venv

    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    out = run_ab("--base-python", str(tmp_path / "bare" / "bin" / "python"), "--new-python", sys.executable, timeout=300)
    assert out.returncode == 2 and "cannot import eagle_fix there" in out.stderr and "pip install -e ." in out.stderr


def _entry(base, new, **extra):
    pairs = [{"round": i, "base": {"tpot_ms": b, "decode_throughput_tok_s": 1000 / b},
              "new": {"tpot_ms": n, "decode_throughput_tok_s": 1000 / n}} for i, (b, n) in enumerate(zip(base, new))]
    return {"identity": {"context_len": 8192, "mode": "eager", "arm": "baseline", "fix": None,
                         "num_speculative_tokens": None}, "status": {"base": "ok", "new": "ok"}, "pairs": pairs, **extra}


def test_paired_verdicts():
    slow = ab._verdicts(_entry([10.0, 10.2, 9.9, 10.1, 10.0], [11.5, 11.8, 11.4, 11.6, 11.5]), 0.05, k=None)
    assert slow["tpot_ms"]["verdict"] == "regression" and slow["decode_throughput_tok_s"]["verdict"] == "regression"
    same = ab._verdicts(_entry([10.0, 10.2, 9.9, 10.1, 10.0], [10.1, 10.0, 10.2, 9.9, 10.0]), 0.05, k=None)
    assert same["tpot_ms"]["verdict"] == "within noise"
    failed = ab._verdicts(_entry([10.0], [10.0], status={"base": "ok", "new": "failed"}), 0.05, k=None)
    assert failed == {"status": {"verdict": "failed"}}


def _calibrated_delay_ms() -> float:
    """The smallest injected delay the committed calibration flagged at every point."""
    flagged = []
    for f in sorted(CALIBRATION.glob("delay-*.json")):
        data = ab.read_ab(f)
        verdicts = [e["verdicts"].get("tpot_ms", {}).get("verdict") for e in data["points"]]
        if verdicts and all(v == "regression" for v in verdicts):
            flagged.append(float(data["new"]["env"]["EAGLE_FIX_INJECT_STEP_DELAY_MS"]))
    assert flagged, f"no committed calibration in {CALIBRATION} flags every point"
    return min(flagged)


@pytest.mark.engine
def test_identical_sides_pass_and_the_calibrated_delay_is_caught(tmp_path):
    common = ["--base-python", sys.executable, "--new-python", sys.executable, "--profile", "cpu-quick",
              "--modes", "eager", "--arms", "eagle3", "--rounds", "3"]
    same = run_ab(*common, "--out", str(tmp_path / "aa.json"))
    assert same.returncode == 0, same.stdout + same.stderr[-3000:]
    # The calibrated delay is this project's calibration machine's; CI's machine may be several times
    # slower, where a fixed number of ms is a smaller share of a step. So: at least 30% of a verified
    # step here (TPOT x acceptance length, from the A/A run just measured).
    aa_doc = json.loads((tmp_path / "aa.json").read_text())
    assert aa_doc["idle_side"] == "paused"  # each side measured with the other's engine stopped, and both survive it
    aa = aa_doc["points"][0]
    step_ms = aa["verdicts"]["tpot_ms"]["base_median"] * aa["verdicts"]["acceptance_length"]["base"]
    delay = max(_calibrated_delay_ms(), round(0.3 * step_ms, 1))
    slow = run_ab(*common, "--new-env", f"EAGLE_FIX_INJECT_STEP_DELAY_MS={delay:g}", "--out", str(tmp_path / "d.json"))
    assert slow.returncode == 1, slow.stdout + slow.stderr[-3000:]
    result = json.loads((tmp_path / "d.json").read_text())
    assert result["new"]["env"] == {"EAGLE_FIX_INJECT_STEP_DELAY_MS": f"{delay:g}"}
    assert len(result["points"][0]["pairs"]) == 3
    assert any("tpot_ms: regression" in f for f in result["summary"]["failing"])
