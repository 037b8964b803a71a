"""The README's GPU-box commands answer in one line on a machine without a GPU (nothing installed, no engine)."""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU box: these commands run there")


def _run(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env}, check=False
    )


def test_setup_gpu_without_a_gpu_is_one_line():
    proc = _run(["bash", "scripts/setup.sh", "--gpu"])
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs an NVIDIA GPU" in lines[0] and "scripts/setup.sh" in lines[0], proc.stderr


def test_bench_with_a_cuda_profile_without_a_gpu_is_one_line():
    proc = _run(["bash", "scripts/bench.sh"], EAGLE_FIX_PROFILE="gpu-tiny")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        (
            "bench: profile 'gpu-tiny' runs on CUDA and torch sees no GPU here; on this machine use --profile cpu or "
            "cpu-quick (on a GPU box: scripts/setup.sh --gpu)"
        )
    ], proc.stderr
