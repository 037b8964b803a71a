"""The memory sampler on real processes: it must see a grandchild's memory and reset per point."""

import os
import signal
import subprocess
import sys
import time

import pytest

from eagle_fix.engine.memory import MemorySampler
from eagle_fix.machine.device import device_info

# A child that starts a grandchild holding ~300 MiB (as the engine's core process holds the KV cache),
# in its own process group, so the test can end both by group (never by name).
GRANDCHILD = (
    "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); print('up', flush=True); time.sleep(60)"
)
CHILD = f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {GRANDCHILD!r}]); time.sleep(60)"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_sampler_sees_the_process_tree_and_resets():
    sampler = MemorySampler(interval_s=0.05, tree_refresh_s=0.2)
    child = subprocess.Popen([sys.executable, "-c", CHILD], start_new_session=True)
    try:
        sampler.watch(child.pid)
        deadline = time.monotonic() + 30
        peak = 0
        while time.monotonic() < deadline and peak < 300 << 20:
            time.sleep(0.2)
            peak = sampler.peaks()["peak_host_memory_bytes"] or 0
        assert peak >= 300 << 20, f"grandchild's 300 MiB not seen (peak {peak / 2**20:.0f} MiB)"
        assert sampler.peaks()["peak_gpu_memory_bytes"] is None  # no GPU here: null, not 0
        _kill_group(child.pid)
        child.wait()
        sampler.watch(None)
        sampler.reset_peaks()
        assert sampler.peaks()["peak_host_memory_bytes"] is None  # nothing watched since the reset
    finally:
        _kill_group(child.pid)
        sampler.close()


def test_device_info_names_the_cpu_when_there_is_no_gpu():
    info = device_info()
    assert info["kind"] == "cpu" and info["name"] and info["cores"] >= 1


def test_the_kv_in_use_grows_with_the_context_where_the_reserved_budget_does_not():
    """The committed CPU measurement (cpu-quick, eager, 8K and 16K; docs/benchmarks.md): vLLM's KV-cache usage
    in bytes is the whole context at the cache's bytes per token, on both arms, while the reserved cache is one
    figure for every context."""
    from conftest import ROOT
    from eagle_fix.core import record

    recs = {(r["arm"], r["context_len"]): r for r in record.read(ROOT / "results/memory/cpu-quick-kv-in-use.jsonl")}
    assert set(recs) == {(a, c) for a in ("baseline", "eagle3") for c in (8192, 16384)}
    for arm in ("baseline", "eagle3"):
        short, long = recs[arm, 8192], recs[arm, 16384]
        assert short["vllm_kv_cache_bytes"] == long["vllm_kv_cache_bytes"]  # reserved up front: flat
        assert long["peak_kv_memory_bytes"] == 2 * short["peak_kv_memory_bytes"]
        for r in (short, long):
            per_token = r["vllm_kv_cache_bytes"] / r["kv_cache_capacity_tokens"]
            assert r["peak_kv_memory_bytes"] == pytest.approx(r["context_len"] * per_token, rel=0.01)
            assert r["gpu_memory_scope"] == "none" and r["gpu_peak_comparable_across_modes"] is None
    # the draft's KV is in the same cache: EAGLE3 holds more per token than the baseline
    assert recs["eagle3", 8192]["peak_kv_memory_bytes"] > recs["baseline", 8192]["peak_kv_memory_bytes"]
