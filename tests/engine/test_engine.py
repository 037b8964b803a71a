"""The real vLLM engine on CPU with the trained tiny pair: the fix A/B the suite exists for.

One sweep (shared by every test here) runs each arm once: fix on / off (the original bug on purpose)
/ upstream (the engine as installed), eager and compiled, at a context below the draft's 2048
positions and two past it, plus the baseline without speculation. "Did the drafter run" is counted
in the engine by the plugin (proposer calls per decode step), because vLLM's spec-decode counters
also count the zero-filled drafts of a step where the drafter was skipped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, eagle_fix_run, run_records

pytestmark = pytest.mark.engine

# One context below the draft's 2048 positions and one past it: CI's size. The committed fix A/B
# (results/runs/fix-ab/, the README's table) adds 8192 with the same command; on the slowest machine
# of this kind an 8K prefill takes ~25 s, and this sweep runs it once per arm.
SHORT, PAST = 1536, (4096,)
CONTEXTS = (SHORT, *PAST)
REFERENCE = json.loads((ROOT / "tests" / "data" / "reference_acceptance.json").read_text())
MARGIN = REFERENCE["margin"]


AB_ARGS = [
    "--profile",
    "cpu-quick",
    "--contexts",
    ",".join(map(str, CONTEXTS)),
    "--modes",
    "eager,compile",
    "--arms",
    "eagle3,baseline",
    "--fix",
    "on,off,upstream",
    "--output-len",
    "32",
    "--repeats",
    "2",
]


@pytest.fixture(scope="session")
def ab_run(tmp_path_factory):
    """`eagle-fix run` of the fix A/B, as a user runs it (the command committed results/runs/fix-ab/ come
    from, at CI's contexts)."""
    out = tmp_path_factory.mktemp("engine") / "ab.jsonl"
    return eagle_fix_run(*AB_ARGS, "--out", str(out)), out


@pytest.fixture(scope="session")
def ab(ab_run) -> dict[tuple, dict]:
    from eagle_fix.core import record

    _, out = ab_run
    records = record.read(out)
    # Every finished point is on disk as a whole JSON line.
    # 2 modes x contexts x (3 fix arms + the baseline)
    assert len(records) == len(out.read_text().splitlines()) == 2 * len(CONTEXTS) * (3 + 1)
    return {(r["context_len"], r["mode"], r["arm"], r["fix"]): r for r in records}


def test_a_sweep_with_failed_points_exits_nonzero_after_writing_every_line(ab_run, ab):
    proc, out = ab_run
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = proc.stderr
    assert f"{2 * len(CONTEXTS) * 4} points ({len(PAST)} failed) in {out}" in err
    assert re.search(
        r"failed: 4096 compile eagle3 off: .*killed by SIG\w+; index out of bounds: 0 <= \w+ < 2048", err
    ), err


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
def test_fix_off_compiled_dies_on_the_bounds_check_and_the_sweep_goes_on(ab, ab_run, ctx):
    r = point(ab, ctx, "compile", "off")
    assert r["fix_state"] == "broken"
    assert r["status"] == "failed"
    assert "index out of bounds" in r["error"]  # inductor's C++ twin of CUDA's device-side assert
    assert not Path(r["engine_log"]).is_absolute()  # records carry no absolute paths of the machine
    assert (ab_run[1].parent / r["engine_log"]).exists()
    # the short point before it ran on that engine, and the sweep went on after it
    assert point(ab, SHORT, "compile", "off")["status"] == "ok"
    assert point(ab, PAST[-1], "compile", "upstream")["status"] == "ok"


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_baseline_and_speedup(ab, mode):
    for ctx in CONTEXTS:
        base = point(ab, ctx, mode, None, arm="baseline")
        assert base["status"] == "ok", base["error"]
        assert base["acceptance_length"] is None and base["fix"] is None
        assert base["decode_throughput_tok_s"] > 0
        on = point(ab, ctx, mode, "on")
        assert on["speedup"] == pytest.approx(on["decode_throughput_tok_s"] / base["decode_throughput_tok_s"])


@pytest.fixture(scope="session")
def methods(tmp_path_factory) -> dict[str, dict]:
    """The other methods at the fix A/B's short eager point (its prompt and length, one engine start each):
    n-gram prompt lookup and the draft-model path (on cpu-quick the target drafting for itself)."""
    records, proc = run_records(
        tmp_path_factory, "methods", "--profile", "cpu-quick", "--contexts", str(SHORT), "--modes", "eager",
        "--arms", "ngram,draft_model", "--output-len", "32", "--repeats", "2",
    )  # fmt: skip
    assert "note: draft_model on cpu-quick: the target drafting for itself" in proc.stdout, proc.stdout
    return records


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_other_methods_draft_count_their_proposer_and_emit_the_baselines_tokens(ab, methods, method):
    """Each method's record carries vLLM's counters and the plugin's count of its proposer (hooked per method:
    NgramProposer.propose, DraftModelProposer.propose), no fix arm, and greedy speculation decodes the same
    tokens as the baseline of the fix A/B at the same point. The self-drafting model accepts every draft."""
    rec = methods[method]
    assert rec["status"] == "ok", rec["error"]
    assert rec["fix"] is None and rec["num_speculative_tokens"] == 3 and rec["model_runner"] == "v1"
    assert rec["num_drafts"] > 0 and rec["acceptance_length"] == 1 + rec["num_accepted_tokens"] / rec["num_drafts"]
    assert rec["drafter_proposals"] == rec["drafter_steps"] > 0 and rec["drafter_coverage"] == 1.0
    assert not [f for f in rec["flags"] if f.startswith(("missing_hook", "empty_drafts", "zero_filled"))], rec["flags"]
    assert rec["output_token_ids"] == point(ab, SHORT, "eager", None, arm="baseline")["output_token_ids"]
    if method == "draft_model":
        assert rec["acceptance_length"] == 4.0 and rec["drafter_empty_proposals"] is None
    else:
        assert 0 <= rec["drafter_empty_proposals"] < rec["drafter_proposals"]


def test_records_carry_the_measurement_context(ab):
    ctx = PAST[-1]
    r = point(ab, ctx, "eager", "on")
    for key in (
        "output_throughput_tok_s",
        "decode_throughput_tok_s",
        "ttft_s",
        "kv_cache_capacity_tokens",
        "peak_host_memory_bytes",
        "startup_s",
        "vllm_version",
        "torch_version",
        "model_runner",
        "device",
    ):
        assert r[key] is not None, key
    assert r["kv_cache_capacity_tokens"] >= ctx
    assert r["peak_gpu_memory_bytes"] is None  # no GPU here: not faked
    assert r["model_runner"] == "v1" and r["device"]["kind"] == "cpu"
    assert r["prompt_len"] == ctx - 32 - 3 - 1
    assert r["schema"] == 2 and r["machine_id"] == r["machine"]["id"] and r["limits"]["bandwidth_gbs"] > 0
    # where the engine ran: the frontend and engine core off the worker's cores, or why not
    pin = r["pinning"]
    assert pin["reason"]
    if pin["pinned"]:
        assert pin["worker_cpus"] and pin["other_cpus"] and not set(pin["worker_cpus"]) & set(pin["other_cpus"])
        assert pin["threads"] > 0
    elif len(os.sched_getaffinity(0)) > 1:
        raise AssertionError(f"not pinned on {len(os.sched_getaffinity(0))} cores: {pin}")


def test_records_carry_samples_intervals_and_roofline(ab):
    from eagle_fix.core import stats

    r = point(ab, PAST[-1], "eager", "on")
    assert r["repeats"] == 2 and len(r["samples"]["decode_throughput_tok_s"]) == 2
    assert r["decode_throughput_tok_s"] == pytest.approx(stats.median(r["samples"]["decode_throughput_tok_s"]))
    lo, hi = r["ci95"]["decode_throughput_tok_s"]
    assert lo <= r["decode_throughput_tok_s"] <= hi
    lo, hi = r["ci95"]["acceptance_length"]
    assert lo < r["acceptance_length"] <= hi  # count interval, drafts as the unit
    assert sum(r["accepted_per_position"]) == r["num_accepted_tokens"]
    assert 0 < r["decode_pct_of_bandwidth"] < 100 and 0 < r["prefill_pct_of_peak_flops"] < 100
    assert r["sol_decode_tok_s_eagle3"] > r["sol_decode_tok_s_baseline"] > 0


def test_the_cpu_worker_reports_its_own_memory_and_settings(ab):
    """The fix A/B's short eager point (its engine's first point): the worker's host peak over the point (reset
    before it), vLLM's figures read in the worker, the settings vLLM ran with, and the NVML null with its reason."""
    r = point(ab, SHORT, "eager", "on")
    assert r["status"] == "ok", r["error"]
    assert r["worker_host_peak_bytes"] > 0 and r["worker_host_peak_scope"] == "point"
    assert r["worker_host_peak_bytes"] <= r["peak_host_memory_bytes"] * 1.05  # one process of the tree, not more
    assert r["torch_peak_allocated_bytes"] is None and r["memory_null_reasons"]["torch_peak_allocated_bytes"]
    assert r["vllm_weights_bytes"] > 0 and r["vllm_kv_cache_bytes"] > 0
    assert r["kv_cache_memory_bytes"] == 2**30  # cpu-quick's VLLM_CPU_KVCACHE_SPACE
    assert (r["compilation_mode"], r["cudagraph_mode"]) == ("NONE", "NONE") and r["attention_backend"]
    assert r["peak_gpu_memory_bytes"] is None and r["gpu_memory_error"]  # no GPU: null with its reason
    assert r["drafter_coverage"] is not None  # the drafter's RPCs still answer through the combined extension


def test_an_engine_whose_plugin_did_not_load_fails_its_start_in_one_line(tmp_path):
    """vLLM runs on without a plugin it could not load (it logs the failure): an engine of ours must not, or
    it would record numbers without the fix's backport, the drafter's counters or the step clock."""
    from eagle_fix.engine.offline import EngineDied, EngineProcess
    from eagle_fix.pairs.profiles import get_profile
    from eagle_fix.sweep.road import engine_spec

    spec = engine_spec(get_profile("cpu-quick"), arm="baseline", mode="eager", fix=None, max_model_len=1024)
    with pytest.raises(EngineDied) as died:
        EngineProcess(spec, tmp_path / "engine.log", env={"VLLM_PLUGINS": "no_such_plugin"}, startup_timeout_s=900)
    first = str(died.value).splitlines()[0]
    assert "engine start refused: the eagle-fix plugin did not register in the engine" in first, first
    assert "worker pid" in first and "the front end" in first and "pip install -e ." in first


def test_eager_and_compiled_twins_generate_the_same_tokens_and_pass_parity(ab):
    """Greedy decoding in both modes at one point gives the same tokens (the parity check's premise on this
    pair), and the sweep found no parity mismatch anywhere in the fix A/B."""
    pairs = 0
    for (ctx, mode, arm, fix), r in ab.items():
        twin = ab.get((ctx, "compile", arm, fix)) if mode == "eager" else None
        if twin is None or r["status"] != "ok" or twin["status"] != "ok":
            continue
        assert r["output_token_ids"] and len(r["output_token_ids"]) == 32
        assert r["output_token_ids"] == twin["output_token_ids"], (ctx, arm, fix)
        # vLLM's top-two logprobs per token (the near-tie test's input): a gap >= 0 at every position, in both modes
        for m in (r["output_logprob_margins"], twin["output_logprob_margins"]):
            assert len(m) == 32 and all(x is not None and x >= 0 for x in m), m
        assert r["parity_near_tie"] is None and twin["parity_near_tie"] is None
        pairs += 1
    assert pairs == 4 * len(CONTEXTS) - len(PAST)  # every arm at every context, the compiled fix-off crashes aside
    assert not [f for r in ab.values() for f in r["flags"] if f.startswith("parity")]


def test_a_drafter_damaged_in_one_mode_is_flagged_by_parity_and_fails_compare(ab_run, tmp_path):
    """EAGLE_FIX_INJECT_DRAFT_ERRORS on the compiled twin only (a --resume of the shared sweep's eager
    point): the target's tokens stay exact, acceptance falls to what the share predicts, the record is
    flagged `parity`, and `eagle-fix compare` against the undamaged pair fails on that flag."""
    from eagle_fix.core import record
    from eagle_fix.fix.damage import expected_acceptance

    _, out = ab_run
    mine = [r for r in record.read(out) if r["context_len"] == SHORT and r["arm"] == "eagle3" and r["fix"] == "on"]
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    for r in mine:
        record.append(base, r)
    record.append(new, next(r for r in mine if r["mode"] == "eager"))
    args = [*AB_ARGS[:2], "--contexts", str(SHORT), "--modes", "eager,compile", "--arms", "eagle3", "--fix", "on"]
    proc = eagle_fix_run(
        *args, *AB_ARGS[-4:], "--out", str(new), "--resume", env={"EAGLE_FIX_INJECT_DRAFT_ERRORS": "0.9"}, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    eager, damaged = record.read(new)
    assert damaged["mode"] == "compile" and damaged["env"] == {"EAGLE_FIX_INJECT_DRAFT_ERRORS": "0.9"}
    assert damaged["drafter_calls_damaged"] > 0 and eager["drafter_calls_damaged"] == 0
    assert damaged["output_token_ids"] == eager["output_token_ids"]  # rejection sampling keeps the target exact
    lo, hi = damaged["ci95"]["acceptance_length"]
    assert lo <= expected_acceptance(0.9, 3) <= hi, (damaged["acceptance_length"], lo, hi)
    assert [f for f in damaged["flags"] if f.startswith("parity: acceptance eager")], damaged["flags"]
    gate = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "compare", str(base), str(new), "--allow-cross-machine"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert gate.returncode == 1, gate.stdout[-3000:] + gate.stderr[-3000:]
    assert re.search(r"compile\s+eagle3\s+on\s+flags\s.*parity\s+REGRESSION", gate.stdout), gate.stdout


# What scripts/gpu-check.sh --rehearse must say of this sweep (the CPU twin of gpu-tiny's fix A/B at 8K, here at
# CI's contexts): each check that reads the fix A/B or a finished point, and the CUDA-only ones as not run.
GPU_CHECK_PASSED = {
    "hooks",
    "doctor",
    "fix-on-drafts",
    "fix-off-compile-dies",
    "fix-off-eager-silent",
    "upstream-per-runner",
    "parity",
    "memory-in-worker",
    "step-clock",
    "limits-on-device",
    "damage",
}
GPU_CHECK_CUDA_ONLY = {"v2-coverage", "memory-nvml", "cuda-graphs", "fingerprint-gpu", "nvml-struct", "host-clock"}
# Left out of CI's rehearsal (four engine starts): the gate's noise step; `ab`'s launch pairs are run on the real
# engine by tests/gate/test_ab.py, the noise estimates from their files by tests/gate/test_noise.py.
GPU_CHECK_LEFT_OUT = {"noise"}


def test_the_gpu_check_rehearsed_on_this_sweep(ab_run, tmp_path):
    """The GPU script's every line that is not CUDA-only, on this machine: its hook test, doctor, damaged
    drafter, machine and probe run at CI's context past 2048 (the gate's noise step is left out: see above); its fix A/B
    and gpu-dummy judgements read this module's sweep instead of starting those engines again."""
    _, out = ab_run
    summary = tmp_path / "gpu-check.json"
    argv = ["--rehearse", "--context", str(PAST[0]), "--only", "hooks,doctor,damage,machine,probe"]
    argv += ["--records", f"fix-ab={out}", "--records", f"dummy={out}", "--out", str(summary)]
    proc = subprocess.run(
        ["bash", "scripts/gpu-check.sh", *argv, "--work", str(tmp_path / "work")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    got = json.loads(summary.read_text())
    status = {c["check"]: c["status"] for c in got["checks"]}
    assert {k for k, v in status.items() if v == "passed"} == GPU_CHECK_PASSED, got["checks"]
    assert {k for k, v in status.items() if v == "not run"} == GPU_CHECK_CUDA_ONLY | GPU_CHECK_LEFT_OUT
    assert got["kind"] == "rehearsal" and got["steps"]["fix-ab"]["from_records"] == [str(out)]
    fix_ab = got["steps"]["fix-ab"]["records"]
    compiled_off = [r for r in fix_ab if (r["mode"], r["fix"], r["status"]) == ("compile", "off", "failed")]
    assert compiled_off and all("index out of bounds" in r["cause"] for r in compiled_off)
    damaged = got["steps"]["damage"]["records"][0]
    assert damaged["context_len"] == PAST[0] and damaged["drafter_calls_damaged"] > 0
    assert got["steps"]["probe"]["report"]["cuda_available"] is False
    assert "gpu-check: 11 passed, 0 failed, 7 not run" in proc.stderr
