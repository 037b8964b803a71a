"""The real vLLM engine on CPU with the trained tiny pair: the fix A/B the suite exists for.

One sweep (shared by every test here) runs each arm once: fix on / off (the original bug on purpose)
/ upstream (the engine as installed), eager and compiled, at a context below the draft's 2048
positions and two past it, plus the baseline without speculation. "Did the drafter run" is counted
in the engine by the plugin (proposer calls per decode step), because vLLM's spec-decode counters
also count the zero-filled drafts of a step where the drafter was skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.engine

SHORT, PAST = 1536, (4096, 8192)
REFERENCE = json.loads((ROOT / "tests" / "data" / "reference_acceptance.json").read_text())
MARGIN = REFERENCE["margin"]


@pytest.fixture(scope="session")
def ab(tmp_path_factory) -> dict[tuple, dict]:
    from eagle_fix.sweep import RunArgs, run_sweep

    out = tmp_path_factory.mktemp("engine") / "ab.jsonl"
    records = run_sweep(RunArgs(profile="cpu-quick", contexts=(SHORT, *PAST), modes=("eager", "compile"),
                                arms=("eagle3", "baseline"), fixes=("on", "off", "upstream"), output_len=32,
                                out=out, progress=False))
    by_key = {(r["context_len"], r["mode"], r["arm"], r["fix"]): r for r in records}
    # Every finished point is on disk as a whole JSON line, in the order it finished.
    assert [json.loads(line)["context_len"] for line in out.read_text().splitlines()] == [r["context_len"] for r in records]
    return by_key


def point(ab, ctx, mode, fix, arm="eagle3"):
    return ab[(ctx, mode, arm, None if arm == "baseline" else fix)]


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_acceptance_above_one_at_short_context(ab, mode):
    for fix in ("on", "upstream"):
        r = point(ab, SHORT, mode, fix)
        assert r["status"] == "ok", r["error"]
        assert r["drafter_coverage"] >= 0.9
        assert r["acceptance_length"] > 1.5, r
        assert len(r["per_position_acceptance"]) == 3
        assert r["per_position_acceptance"][0] >= r["per_position_acceptance"][2]


@pytest.mark.parametrize("ctx", PAST)
@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_fix_on_drafts_past_2048_with_reference_acceptance(ab, mode, ctx):
    r = point(ab, ctx, mode, "on")
    assert r["status"] == "ok", r["error"]
    assert r["fix_state"] == "fixed"
    assert r["drafter_coverage"] >= 0.9
    assert r["max_seq_len_drafted"] > ctx - 64 > 2048
    assert not r["flags"]
    ref = REFERENCE["on"][mode][str(ctx)]
    assert abs(r["acceptance_length"] - ref) <= MARGIN, (r["acceptance_length"], ref)


@pytest.mark.parametrize("ctx", PAST)
@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_upstream_silently_stops_drafting_past_2048(ab, mode, ctx):
    r = point(ab, ctx, mode, "upstream")
    assert r["status"] == "ok", r["error"]
    assert r["fix_state"] == "limited"
    assert r["drafter_coverage"] == 0 and r["drafter_proposals"] == 0
    assert r["num_drafts"] > 0  # ... while vLLM's counters still count (zero-filled) drafts
    assert r["acceptance_length"] == 1.0
    assert any(f.startswith("zero_filled_drafts") for f in r["flags"])


@pytest.mark.parametrize("ctx", PAST)
def test_fix_off_eager_reads_past_the_rotary_cache(ab, ctx):
    r = point(ab, ctx, "eager", "off")
    assert r["fix_state"] == "broken"
    assert r["status"] == "ok", r["error"]  # eager on CPU: no bounds check, garbage rotations
    assert r["drafter_coverage"] >= 0.9
    assert any(f.startswith("rotary_cache_overrun") for f in r["flags"])
    on = point(ab, ctx, "eager", "on")
    assert r["acceptance_length"] < on["acceptance_length"] - MARGIN, (r["acceptance_length"], on["acceptance_length"])


@pytest.mark.parametrize("ctx", PAST)
def test_fix_off_compiled_dies_on_the_bounds_check_and_the_sweep_goes_on(ab, ctx):
    r = point(ab, ctx, "compile", "off")
    assert r["fix_state"] == "broken"
    assert r["status"] == "failed"
    assert "index out of bounds" in r["error"]  # inductor's C++ twin of CUDA's device-side assert
    assert Path(r["engine_log"]).exists()
    # the short point before it ran on that engine, and the sweep went on after it
    assert point(ab, SHORT, "compile", "off")["status"] == "ok"
    assert point(ab, 8192, "compile", "upstream")["status"] == "ok"


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_baseline_and_speedup(ab, mode):
    for ctx in (SHORT, *PAST):
        base = point(ab, ctx, mode, None, arm="baseline")
        assert base["status"] == "ok", base["error"]
        assert base["acceptance_length"] is None and base["fix"] is None
        assert base["decode_throughput_tok_s"] > 0
        on = point(ab, ctx, mode, "on")
        assert on["speedup"] == pytest.approx(on["decode_throughput_tok_s"] / base["decode_throughput_tok_s"])


def test_records_carry_the_measurement_context(ab):
    r = point(ab, 8192, "eager", "on")
    for key in ("output_throughput_tok_s", "decode_throughput_tok_s", "ttft_s", "kv_cache_capacity_tokens",
                "peak_host_memory_bytes", "startup_s", "vllm_version", "torch_version", "model_runner", "device"):
        assert r[key] is not None, key
    assert r["kv_cache_capacity_tokens"] >= 8192
    assert r["peak_gpu_memory_bytes"] is None  # no GPU here: not faked
    assert r["model_runner"] == "v1" and r["device"]["kind"] == "cpu"
    assert r["prompt_len"] == 8192 - 32 - 3 - 1
