"""One module finds results/: the working directory's (relative, where runs write) and the checkout's
committed one (found from anywhere)."""

from pathlib import Path

from eagle_fix.core.paths import committed_results, results_dir
from eagle_fix.gate import acceptance_power, components
from eagle_fix.store import asv
from eagle_fix.sweep import plan


def test_the_working_directorys_results_stay_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert results_dir("runs") == Path("results/runs") and not results_dir().is_absolute()
    assert results_dir("asv", root=tmp_path) == tmp_path / "results" / "asv"
    assert (asv.RUNS, asv.ASV_RESULTS) == (Path("results/runs"), Path("results/asv"))


def test_the_committed_results_are_found_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert committed_results().is_absolute() and (committed_results("runs")).is_dir()
    assert components.FOLDER == committed_results("gate") and components.FOLDER.is_dir()
    assert acceptance_power.FOLDER == committed_results("calibration", "acceptance")
    assert plan.COMMITTED_RESULTS == committed_results()
