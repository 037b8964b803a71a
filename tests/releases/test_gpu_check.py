"""`eagle-fix gpu-check` without a GPU: one line where it cannot run, one line per bad argument, and its CUDA
judgements on records shaped as a CUDA run writes them (the branch CI cannot reach: no GPU here). The
rehearsal on this machine's own engine runs is tests/engine/test_engine.py::test_the_gpu_check_rehearsed_on_this_sweep."""

from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import eagle_fix_cli, run_script
from eagle_fix.releases import gpu_claims
from eagle_fix.releases.gpu_claims import StepRun, judge


def script(*args, path=None):
    env = {"PYTHON": sys.executable, **({"PATH": path} if path is not None else {})}
    return run_script("scripts/gpu-check.sh", *args, env=env)


def test_without_a_gpu_the_script_and_the_command_answer_in_one_line():
    proc = script()
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "gpu-check: no GPU here (no nvidia-smi on PATH); on a CPU machine rehearse it: scripts/gpu-check.sh --rehearse"
    ]
    # past the script (nvidia-smi present, no CUDA device): the command's own line
    proc = eagle_fix_cli("gpu-check")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        (
            "eagle-fix gpu-check: error: no CUDA device here (torch.cuda.is_available() is False); on a CPU machine "
            "run it with --rehearse"
        )
    ]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--only", "hooks,bogus"], "--only bogus: no such step; give some of hooks,doctor,fix-ab"),
        (["--records", "fix-ab=/no/such.jsonl"], "--records fix-ab=/no/such.jsonl: no such file /no/such.jsonl"),
        (["--records", "probe=x"], "give STEP=FILE[,FILE...] with STEP fix-ab, dummy or damage"),
        (["--context", "2048"], "--context 2048: the checks need a context past the draft's 2048"),
    ],
)
def test_bad_arguments_are_one_line(argv, words):
    proc = eagle_fix_cli("gpu-check", "--rehearse", *argv)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr


def test_torch_only_is_the_probe_alone(tmp_path):
    """A GPU box with torch and no vLLM: the probe needs neither the project's venv nor vLLM (a fake
    nvidia-smi gets past the script's GPU check; torch here has no CUDA, so every answer is a reason)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho fake\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    out = tmp_path / "probe.json"
    proc = script("--torch-only", "--out", str(out), path=f"{bin_}:{os.environ['PATH']}")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    assert got["cuda_available"] is False and got["step_clock"] == {"error": "torch.cuda.is_available() is False"}
    assert "error" in got["nvml"]


def _cuda_records(upstream_runner="v2", cause="CUDA error: device-side assert triggered"):
    base = {"arm": "eagle3", "context_len": 8192, "model_runner": "v2", "status": "ok", "num_drafts": 40}
    on = {"acceptance_length": 3.9, "drafter_proposals": 40, "drafter_coverage": None, "max_seq_len_drafted": 8300}
    return [
        {**base, **on, "mode": "eager", "fix": "on", "output_token_ids": [1, 2, 3]},
        {**base, **on, "mode": "compile", "fix": "on", "output_token_ids": [1, 2, 3]},
        {**base, "mode": "compile", "fix": "off", "status": "failed", "error": f"engine died; cause: {cause}"},
        {**base, "mode": "eager", "fix": "off", "acceptance_length": 1.0, "drafter_proposals": 40, "flags": []},
        {**base, **on, "mode": "eager", "fix": "upstream", "model_runner": upstream_runner},
    ]


def test_the_cuda_judgements_on_a_v2_run():
    dummy = {
        "arm": "eagle3",
        "mode": "eager",
        "status": "ok",
        "device": {"kind": "cuda"},
        "clocks": {"step_ms": "host"},
        "step_ms": 12.5,
        "vllm_kv_cache_bytes": 1 << 30,
        "vllm_weights_bytes": 16 << 30,
        "torch_peak_allocated_bytes": 20 << 30,
        "peak_gpu_memory_bytes": 40 << 30,
        "gpu_memory_scope": "process",
    }
    probe = {
        "nvml": {"v1_used": 5, "v2_used": 4, "v2_reserved": 1, "sampler_used": 4, "sampler_reads": "v2"},
        "step_clock": {"host_ms": 0.4, "device_ms": 30.0, "host_over_device": 0.013},
    }
    compiled = {
        **dummy,
        "mode": "compile",
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "vllm_cudagraph_pool_bytes": 1 << 28,
    }
    gpu = {
        "name": "NVIDIA H100 80GB HBM3",
        "driver_version": "580.65",
        "cuda_driver_version": "13.0",
        "compute_capability": "9.0",
        "memory_total_bytes": 85520809984,
    }
    machine = {"fingerprint": {"cuda": gpu}, "limits": {"device": "cuda", "peak_gflops": 7e5, "bandwidth_gbs": 2900}}
    runs = {
        "hooks": StepRun(rc=0, tail="12 passed"),
        "doctor": StepRun(rc=0, report={"model_runner": "v2", "verdict": "fixed", "vllm_version": "0.33.0"}),
        "fix-ab": StepRun(records=_cuda_records()),
        "dummy": StepRun(records=[dummy, compiled]),
        "machine": StepRun(rc=0, report=machine),
        "damage": StepRun(why_not="step not chosen"),
        "noise": StepRun(why_not="step not chosen"),
        "probe": StepRun(rc=0, report=probe),
    }
    status = {r["check"]: r["status"] for r in judge(runs, cuda=True)}
    assert {k for k, v in status.items() if v != "passed"} == {"damage", "noise"}, status
    # the CPU twin's cause is no answer on CUDA, V1's zero-filled upstream is no answer on V2, a host clock
    # slower than the device is no sign of asynchronous launches, a coverage shown on V2 is a claim it cannot make
    runs["fix-ab"] = StepRun(records=_cuda_records(upstream_runner="v1", cause="index out of bounds: 0 <= tmp9 < 2048"))
    runs["probe"] = StepRun(rc=0, report={**probe, "step_clock": {"host_over_device": 1.2}})
    failed = {r["check"] for r in judge(runs, cuda=True) if r["status"] == "failed"}
    assert failed == {"fix-off-compile-dies", "upstream-per-runner", "host-clock"}
    recs = _cuda_records()
    recs[0]["drafter_coverage"] = 1.0
    runs["fix-ab"] = StepRun(records=recs)
    assert {r["check"]: r["status"] for r in judge(runs, cuda=True)}["v2-coverage"] == "failed"


def test_a_check_with_nothing_to_read_is_not_run_never_passed():
    runs = {
        name: StepRun(records=[], rc=0, report={})
        for name in ("hooks", "doctor", "fix-ab", "dummy", "damage", "noise", "probe")
    }
    rows = {r["check"]: r for r in judge(runs, cuda=False)}
    for name in ("fix-on-drafts", "fix-off-compile-dies", "parity", "memory-in-worker", "damage"):
        assert rows[name]["status"] == "not run" and rows[name]["line"].startswith("no "), rows[name]
    assert all(c.claim and c.docs for c in gpu_claims.CHECKS)
