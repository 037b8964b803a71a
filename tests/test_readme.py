"""The README's two commands in order on one checkout. The first (the main job) writes a new asv result and
its records into the checkout's results/; the second (the tests) must pass on that checkout, never only on
a clean one. Here the first is the shared real run of `scripts/bench.sh` on its smallest grid (conftest's
`asv_runs`, fix on), put where the README's first command puts its files; the second's tests that read
results/, docs/ or the README then run on that checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, git

pytestmark = pytest.mark.engine

# A test module reads what the first command changes (its asv result under results/asv/, its sweep's records under
# results/runs/, and what the docs and README generate from them) when it names those folders, the docs, the
# README, or the functions that find results/ (eagle_fix.core.paths). Other results/ subfolders (calibration,
# gate, releases, ...) the main job never writes.
READS_RESULTS = re.compile(
    r'results/asv|results/runs|"asv"|"runs"|ROOT / "docs"|README|committed_results\(|results_dir\('
)


def checkout_copy(dest: Path) -> Path:
    """A clone of this checkout with its working tree as it is now (uncommitted changes included): asv
    publish needs the history of the commits the results were recorded at. The venv and the browser's
    JavaScript are linked, not copied."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    for name in filter(None, git("ls-files", "-co", "--exclude-standard", "-z").split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    for name in filter(None, git("ls-files", "--deleted", "-z").split("\0")):
        (dest / name).unlink(missing_ok=True)
    for linked in (".venv", "build"):
        if (ROOT / linked).exists():
            (dest / linked).symlink_to(ROOT / linked)
    return dest


def first_command_effects(asv_runs, checkout: Path) -> list[Path]:
    """The files the README's first command leaves in a checkout: its labelled asv result and asv's
    benchmarks.json under results/asv/, the sweep's records under results/runs/ (named from there)."""
    made = []
    machine = asv_runs.machine
    (checkout / "results" / "asv" / machine).mkdir(parents=True, exist_ok=True)
    for f in (asv_runs.results / machine).glob(f"{asv_runs.commits['on'][:8]}-*.json"):
        data = json.loads(f.read_text())
        records = Path(data["eagle_fix"]["records_file"])
        dest = checkout / "results" / "runs" / records.name
        shutil.copy(records, dest)
        data["eagle_fix"]["records_file"] = str(dest.relative_to(checkout))
        (checkout / "results" / "asv" / machine / f.name).write_text(json.dumps(data))
        made += [dest, checkout / "results" / "asv" / machine / f.name]
    machine_json = checkout / "results" / "asv" / machine / "machine.json"
    if not machine_json.exists():
        shutil.copy(asv_runs.results / machine / "machine.json", machine_json)
    shutil.copy(asv_runs.results / "benchmarks.json", checkout / "results" / "asv" / "benchmarks.json")
    return made


def test_the_tests_pass_after_the_main_job_ran_in_the_checkout(asv_runs, tmp_path):
    checkout = checkout_copy(tmp_path / "checkout")
    made = first_command_effects(asv_runs, checkout)
    assert made, f"the shared run left no asv result for {asv_runs.machine}"
    modules = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.name != Path(__file__).name and READS_RESULTS.search(p.read_text(encoding="utf-8"))
    )
    assert "tests/publish/test_dashboard.py" in modules and "tests/test_docs.py" in modules, modules
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "not engine",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=--benchmark-disable",
            *modules,
        ],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-2000:]
