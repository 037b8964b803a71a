"""The other methods' asv series (no engine): n-gram is a benchmark class of its own beside the EAGLE3 ones, so
their names and graph files stay as they were; its points are skipped where the sweep did not run the arm, and
the loaders read each class as its own arm."""

from __future__ import annotations

import importlib

import pytest

from conftest import ROOT
from eagle_fix.core.errors import EagleFixError


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.bench_eagle")


def test_ngram_has_a_class_of_its_own_and_eagle3s_series_keep_their_names(bench):
    tracks = {n for n in dir(bench.NgramSweep) if n.startswith("track_")}
    assert tracks and tracks <= {n for n in dir(bench.Sweep) if n.startswith("track_")}
    assert bench.NgramSweep.arm == "ngram" and bench.Sweep.arm == "eagle3"
    assert all(getattr(bench.NgramSweep, n).pretty_name.startswith("n-gram: ") for n in tracks)
    assert bench.Sweep.track_tpot.pretty_name.startswith("EAGLE3: ")  # unchanged
    assert bench.Baseline.track_tpot.pretty_name.startswith("no speculation: ")


def test_a_class_whose_arm_the_sweep_left_out_is_skipped_not_failed(bench):
    cache = {"profile": "cpu-quick", "contexts": (8192,), "arms": ("eagle3", "baseline"), "records": []}
    with pytest.raises(NotImplementedError, match="arm ngram not in this run's arms"):
        bench.NgramSweep().setup(cache, 8192, "eager")
    bench.Sweep().setup(cache, 8192, "eager")  # its arm ran: no skip


def test_the_sweeps_arms_come_from_the_environment_and_an_unknown_one_is_one_line(bench, monkeypatch):
    from benchmarks.common import sweep_arms

    monkeypatch.delenv("EAGLE_FIX_ASV_ARMS", raising=False)
    assert sweep_arms() == ("eagle3", "baseline")
    monkeypatch.setenv("EAGLE_FIX_ASV_ARMS", "eagle3, baseline,ngram")
    assert sweep_arms() == ("eagle3", "baseline", "ngram")
    monkeypatch.setenv("EAGLE_FIX_ASV_ARMS", "eagle3,medusa")
    with pytest.raises(
        EagleFixError, match=r"EAGLE_FIX_ASV_ARMS 'medusa': unknown arm; choose from eagle3,baseline,ngram"
    ):
        sweep_arms()


def test_the_loaders_read_each_class_as_its_arm():
    from eagle_fix.store.results import class_arm

    assert (class_arm("Sweep"), class_arm("PerPosition"), class_arm("GPUMemory")) == ("eagle3",) * 3
    assert (class_arm("Baseline"), class_arm("NgramSweep")) == ("baseline", "ngram")
