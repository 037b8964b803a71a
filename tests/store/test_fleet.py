"""Many machines, one dashboard: the committed results of several machine fingerprints, split as a CI job
matrix would upload them (one tree per runner), merged back by scripts/merge_results.py into one tree that
`eagle-fix publish` draws, with a failed job and a job that uploaded nothing named on the first view."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, asv_conf
from eagle_fix.core.errors import EagleFixError
from eagle_fix.store import fleet

ASV = ROOT / "results" / "asv"
MACHINES = sorted(p.name for p in ASV.iterdir() if (p / "machine.json").is_file())


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/merge_results.py", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def _artifacts(tmp: Path) -> list[Path]:
    """One uploaded artifact per committed machine: results/asv/<machine>/ and asv's benchmark list, and the
    job's outcome written by the job itself (scripts/merge_results.py job)."""
    out = []
    for i, machine in enumerate(MACHINES):
        art = tmp / f"gpu-results-kind{i}"
        tree = art / "results"
        shutil.copytree(ASV / machine, tree / "asv" / machine)
        shutil.copy2(ASV / "benchmarks.json", tree / "asv" / "benchmarks.json")
        job = _script("job", "--tree", str(tree), "--kind", f"kind{i}", "--status", "success", "--runner", f"r{i}")
        # a job names the machine it recorded under; the committed tree of a runner holds other machines too
        if i == 1:
            _script(
                "job",
                "--tree",
                str(tree),
                "--kind",
                f"kind{i}",
                "--status",
                "success",
                "--machine",
                "asv-name-of-the-job",
            )
        assert job.returncode == 0, job.stderr
        out.append(art)
    return out


def test_the_committed_results_hold_at_least_three_fingerprints():
    assert len(MACHINES) >= 3, MACHINES


def test_split_trees_merge_back_into_the_committed_tree_and_failures_are_named(tmp_path):
    arts = _artifacts(tmp_path)
    # a runner whose suite failed uploads only its outcome
    failed = tmp_path / "gpu-results-h200" / "results"
    _script("job", "--tree", str(failed), "--kind", "h200", "--status", "failure", "--reason", "asv run failed")
    dest = tmp_path / "merged"
    proc = _script("merge", *map(str, arts), str(failed.parent), "--into", str(dest), "--expect", "kind0,h200,b200")
    assert proc.returncode == 0, proc.stderr
    assert "b200: missing (no results uploaded" in proc.stdout and "h200: failure (asv run failed)" in proc.stdout
    merged = sorted(p.relative_to(dest / "asv") for p in (dest / "asv").rglob("*") if p.is_file())
    committed = sorted(p.relative_to(ASV) for m in MACHINES for p in (ASV / m).rglob("*") if p.is_file()) + [
        Path("benchmarks.json")
    ]
    assert merged == sorted(committed)
    for rel in committed:
        assert (dest / "asv" / rel).read_bytes() == (ASV / rel).read_bytes() or rel.name == "benchmarks.json"
    assert json.loads((dest / "asv" / "benchmarks.json").read_text()) == json.loads(
        (ASV / "benchmarks.json").read_text()
    )
    status = {j["kind"]: j["status"] for j in fleet.jobs(dest)}
    assert status == {**{f"kind{i}": "success" for i in range(len(MACHINES))}, "h200": "failure", "b200": "missing"}
    named = {j["kind"]: j["machines"] for j in fleet.jobs(dest)}
    assert named["kind0"] == [MACHINES[0]] and named["kind1"] == ["asv-name-of-the-job"]

    # one dashboard with every machine's series, and the failed and missing jobs on its first view
    html = tmp_path / "html"
    pub = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "publish", "--config", str(asv_conf(tmp_path, dest / "asv", html))]
        + ["--no-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert pub.returncode == 0, pub.stdout[-2000:] + pub.stderr[-2000:]
    index = json.loads((html / "index.json").read_text())
    assert set(MACHINES) <= set(index["params"]["machine"]), index["params"]["machine"]
    page = (html / "index.html").read_text()
    story = page[page.index("eagle-fix-story") :]
    assert "Machines of the last CI run" in story
    for kind, word in (("h200", "failure"), ("b200", "missing"), ("kind0", "ok")):
        assert f"<td>{kind}</td>" in story and f"<b>{word}</b>" in story, kind


def test_two_jobs_writing_one_file_differently_is_one_line_and_nothing_is_merged(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for tree, text in ((a, "1"), (b, "2")):
        (tree / "runs").mkdir(parents=True)
        (tree / "runs" / "m-12345678-cpu.jsonl").write_text(text)
    with pytest.raises(EagleFixError, match=r"^runs/m-12345678-cpu.jsonl: .* differ; two jobs wrote one file") as exc:
        fleet.merge([a, b], tmp_path / "dest")
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "dest").exists()
    proc = _script("merge", str(a), str(b), "--into", str(tmp_path / "dest"))
    assert proc.returncode == 2 and proc.stderr.startswith("eagle-fix merge: runs/m-12345678-cpu.jsonl:")
    bad = _script("job", "--tree", str(a), "--kind", "h100", "--status", "done")
    assert bad.returncode == 2 and "job status 'done': give one of success" in bad.stderr
