"""The real vLLM CPU engine at tensor_parallel_size 2 (profile cpu-tp2: two worker processes, one core each):
the plugin works on every rank. Fix on, the drafter runs past the draft's 2048 positions on both ranks and
the record's counters are one rank's, not their sum; fix off and compiled, the engine dies on the rotary
table's bound, as at TP = 1. One eager and one compiled engine at the profile's smallest point. Slow (162 s on
an AVX2-only machine of this kind, where CI took 79 minutes with it): outside CI, `-m slow` runs it; in CI
tests/sweep/test_tensor_parallel.py checks the settings, the ranks' merge and the labels without an engine."""

from __future__ import annotations

import pytest

from conftest import eagle_fix_run
from eagle_fix.core import record
from eagle_fix.pairs.profiles import get_profile

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SMALLEST = min(get_profile("cpu-tp2").contexts)
ARGS = ["--profile", "cpu-tp2", "--contexts", str(SMALLEST), "--arms", "eagle3", "--output-len", "32"]


def _run(out, *args):
    return eagle_fix_run(*ARGS, *args, "--out", str(out), timeout=1800)


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tp2")
    on = _run(folder / "on.jsonl", "--modes", "eager", "--fix", "on")
    off = _run(folder / "off.jsonl", "--modes", "compile", "--fix", "off")
    return on, record.read(folder / "on.jsonl"), off, record.read(folder / "off.jsonl")


def test_fix_on_drafts_past_2048_on_every_rank_and_counts_one_rank(tp2):
    proc, (rec,), _, _ = tp2
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert rec["status"] == "ok", rec["error"]
    assert rec["tensor_parallel_size"] == 2
    assert rec["fix_state"] == "fixed"
    ranks = rec["drafter_ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for rank in ranks:  # the plugin counted in both workers, and both drafted past the draft's 2048
        assert rank["proposals"] == rank["spec_steps"] > 0
        assert rank["max_seq_len_drafted"] > SMALLEST - 64 > 2048
        assert rank["step_ms"] > 0
    assert rec["drafter_ranks_disagree"] == [] and not rec["flags"]
    # the headline is rank 0's count, not the ranks' sum: one verified step per vLLM draft, give or take
    # the step that finishes the request
    assert rec["drafter_steps"] == ranks[0]["spec_steps"]
    assert abs(rec["drafter_steps"] - rec["num_drafts"]) <= 2, (rec["drafter_steps"], rec["num_drafts"])
    assert rec["acceptance_length"] > 3.0
    assert [m["rank"] for m in rec["memory_ranks"]] == [0, 1]
    assert all(m["worker_host_peak_bytes"] > 0 for m in rec["memory_ranks"])
    assert rec["kv_cache_memory_bytes"] == 2 * 2**30  # the profile's 1 GiB per rank, the engine's sum


def test_fix_off_compiled_dies_on_the_rotary_bound_at_tp2(tp2):
    _, _, proc, (rec,) = tp2
    assert proc.returncode == 1
    assert rec["status"] == "failed" and rec["fix_state"] == "broken"
    assert "index out of bounds" in rec["error"] and "2048" in rec["error"], rec["error"]
