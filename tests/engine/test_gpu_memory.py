"""GPU memory without a GPU: NVML failures are nulls with reasons, MIG/UUID devices resolve to the
right handle (or say why not), the worker's own figures and the engine's settings reach the record,
the roofline's CUDA measurement runs in its own process, and `ab` decides how two engines share a
GPU. NVML is faked with a module object (a fake of NVML, not of vLLM)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import types
import typing
from enum import Enum

import pytest

from eagle_fix.engine import memory, worker
from eagle_fix.machine import device, roofline

GIB = 2**30


class NVMLError(Exception):
    pass


def fake_nvml(
    *,
    init_error=None,
    devices=None,
    mig=(),
    memory_error=None,
    used=10 * GIB,
    total=141 * GIB,
    procs=None,
    procs_error=None,
):
    """A pynvml stand-in: `devices` maps index or UUID to a handle name; `mig` names handles with MIG on."""
    devices = devices if devices is not None else {0: "gpu0"}
    calls: list[tuple] = []
    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError
    mod.calls = calls
    state = {"used": used}
    mod.state = state

    def init():
        calls.append(("init",))
        if init_error:
            raise NVMLError(init_error)

    def by_index(i):
        calls.append(("index", i))
        if i not in devices:
            raise NVMLError("Invalid Argument")
        return devices[i]

    def by_uuid(u):
        calls.append(("uuid", u))
        if u not in devices:
            raise NVMLError("Not Found")
        return devices[u]

    def mig_mode(handle):
        if handle in mig:
            return (1, 1)
        raise NVMLError("Not Supported")

    def mem_info(handle, version=None):
        if memory_error:
            raise NVMLError(memory_error)
        return types.SimpleNamespace(used=state["used"], total=total)

    def running(handle):
        if procs_error:
            raise NVMLError(procs_error)
        return [
            types.SimpleNamespace(pid=pid, usedGpuMemory=b) for pid, b in (procs() if callable(procs) else procs or [])
        ]

    mod.nvmlInit = init
    mod.nvmlDeviceGetHandleByIndex = by_index
    mod.nvmlDeviceGetHandleByUUID = by_uuid
    mod.nvmlDeviceGetMigMode = mig_mode
    mod.nvmlDeviceGetMemoryInfo = mem_info
    mod.nvmlDeviceGetComputeRunningProcesses = running
    mod.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    mod.nvmlSystemGetDriverVersion = lambda: "570.86.15"
    return mod


@pytest.fixture
def nvml(monkeypatch):
    def install(**kwargs):
        mod = fake_nvml(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", mod)
        return mod

    return install


# ------------------------------------------------------------------------------ resolution


@pytest.mark.parametrize(
    "visible, expect, how",
    [
        ("GPU-1234", "gpu-by-uuid", "uuid"),
        ("MIG-abcd", "mig-instance", "mig uuid"),
        ("1", "gpu1", "index"),
        (None, "gpu0", "index"),
    ],
)
def test_visible_devices_resolve_to_their_handle(nvml, visible, expect, how):
    mod = nvml(devices={0: "gpu0", 1: "gpu1", "GPU-1234": "gpu-by-uuid", "MIG-abcd": "mig-instance"})
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": f"{visible},0"}
    handle, info = device.nvml_device(env)
    assert handle == expect and info["resolved_by"] == how and info["error"] is None
    if visible and not visible.isdigit():
        assert ("uuid", visible) in mod.calls and not any(c[0] == "index" for c in mod.calls)  # never device 0


@pytest.mark.parametrize(
    "visible, words",
    [
        ("GPU-gone", "could not resolve CUDA_VISIBLE_DEVICES='GPU-gone'"),
        ("MIG-GPU-1234/1/0", "legacy MIG name"),
        ("0", "MIG enabled"),
        ("", "empty"),
        ("nvidia0", "neither an index nor"),
    ],
)
def test_unresolvable_devices_are_none_with_the_reason(nvml, visible, words):
    nvml(devices={0: "gpu0"}, mig=("gpu0",))
    handle, info = device.nvml_device({"CUDA_VISIBLE_DEVICES": visible})
    assert handle is None and words in info["error"]


def test_an_nvml_that_cannot_start_is_a_reason_not_a_crash(nvml):
    nvml(init_error="Driver Not Loaded")
    handle, info = device.nvml_device({})
    assert handle is None and "Driver Not Loaded" in info["error"]
    dev = device.device_info()
    assert dev["kind"] == "cpu" and "Driver Not Loaded" in dev["nvml_error"]
    assert device.gpu_total_bytes() == (None, info["error"])


# --------------------------------------------------------------------------------- sampler


def test_first_reading_failing_is_a_recorded_null(nvml, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml(memory_error="GPU is lost")
    sampler = memory.MemorySampler(interval_s=0.05)
    try:
        peaks = sampler.peaks()
        assert peaks["peak_gpu_memory_bytes"] is None and peaks["gpu_memory_scope"] == "none"
        assert "GPU is lost" in peaks["gpu_memory_error"]
    finally:
        sampler.close()


def test_unresolved_device_is_a_recorded_null(nvml, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-unknown")
    nvml()
    sampler = memory.MemorySampler(interval_s=0.05)
    try:
        peaks = sampler.peaks()
        assert peaks["peak_gpu_memory_bytes"] is None and "GPU-unknown" in peaks["gpu_memory_error"]
    finally:
        sampler.close()


def _child():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)


def test_per_process_memory_where_nvml_lists_the_engine(nvml, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    child = _child()
    try:
        mod = nvml(procs=lambda: [(child.pid, 3 * GIB), (1, 50 * GIB)])  # pid 1: someone else's process
        sampler = memory.MemorySampler(interval_s=10)
        try:
            sampler.watch(child.pid)
            mod.state["used"] = 60 * GIB
            peaks = sampler.peaks()
            assert peaks["peak_gpu_memory_bytes"] == 3 * GIB and peaks["gpu_memory_scope"] == "process"
            assert peaks["gpu_memory_error"] is None
        finally:
            sampler.close()
    finally:
        os.killpg(child.pid, 9)
        child.wait()


@pytest.mark.parametrize(
    "procs, procs_error, words",
    [
        (None, "Insufficient Permissions", "Insufficient Permissions"),
        ([(999999, GIB)], None, "PID namespace"),
    ],
)
def test_whole_device_labelled_as_such_when_not_per_process(nvml, monkeypatch, procs, procs_error, words):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    child = _child()
    try:
        mod = nvml(procs=procs, procs_error=procs_error, used=2 * GIB)
        sampler = memory.MemorySampler(interval_s=10)
        try:
            sampler.watch(child.pid)
            mod.state["used"] = 7 * GIB
            peaks = sampler.peaks()
            assert peaks["peak_gpu_memory_bytes"] == 5 * GIB and peaks["gpu_memory_scope"] == "device"
            assert words in peaks["gpu_memory_error"]
            mod.state["used"] = 1 * GIB
            sampler.reset_peaks()
            assert sampler.peaks()["peak_gpu_memory_bytes"] == 0  # below the idle level: none of ours
        finally:
            sampler.close()
    finally:
        os.killpg(child.pid, 9)
        child.wait()


def test_a_reading_failing_mid_point_is_a_null_with_its_reason(nvml, monkeypatch, capsys):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    mod = nvml()
    sampler = memory.MemorySampler(interval_s=10)
    try:
        mod.nvmlDeviceGetMemoryInfo = lambda h, version=None: (_ for _ in ()).throw(NVMLError("Unknown Error"))
        peaks = sampler.peaks()
        assert peaks["peak_gpu_memory_bytes"] is None and "Unknown Error" in peaks["gpu_memory_error"]
    finally:
        sampler.close()


# ------------------------------------------------------------------------- inside the worker


class _Tensor:
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n

    def element_size(self):
        return 2


class _Backend:
    @staticmethod
    def get_name():
        return "CPU_ATTN"


class _Runner:
    kv_cache_config = types.SimpleNamespace(
        num_blocks=64, kv_cache_tensors=[types.SimpleNamespace(size=GIB), types.SimpleNamespace(size=GIB // 4)]
    )
    attn_groups: typing.ClassVar = [
        [types.SimpleNamespace(backend=_Backend)],
        [types.SimpleNamespace(backend=_Backend)],
    ]

    def get_model(self):
        return types.SimpleNamespace(parameters=lambda: [_Tensor(1000), _Tensor(24)])


class _CpuWorker(memory.WorkerMemoryExtension):
    import torch as _torch

    device = _torch.device("cpu")
    model_runner = _Runner()


def test_cpu_worker_reports_its_host_peak_and_vllms_figures():
    worker = _CpuWorker()
    worker.eagle_fix_reset_memory()
    block = bytearray(64 << 20)
    block[::4096] = b"x" * len(block[::4096])  # touched: resident
    got = worker.eagle_fix_memory()
    del block
    assert got["pid"] == os.getpid()
    assert got["worker_host_peak_bytes"] >= 64 << 20
    # the kernel allows the reset (clear_refs) here: the peak is the point's, else it says so
    assert got["worker_host_peak_scope"] in ("point", "process lifetime")
    if got["worker_host_peak_scope"] != "point":
        assert got["null_reasons"]["worker_host_peak_scope"]
    assert (
        got["torch_peak_allocated_bytes"] is None
        and "no CUDA device" in got["null_reasons"]["torch_peak_allocated_bytes"]
    )
    assert got["vllm_kv_cache_bytes"] == GIB + GIB // 4 and got["vllm_kv_cache_blocks"] == 64
    assert got["vllm_weights_bytes"] == 2048 and "counted" in got["null_reasons"]["vllm_weights_bytes"]
    assert got["vllm_activation_peak_bytes"] is None and got["null_reasons"]["vllm_activation_peak_bytes"]
    assert got["attention_backends"] == ["CPU_ATTN"]


def test_combined_workers_sum_bytes_and_keep_each():
    a = {"pid": 1, "torch_peak_allocated_bytes": 5, "worker_host_peak_bytes": 7, "worker_host_peak_scope": "point"}
    b = {"pid": 2, "torch_peak_allocated_bytes": 6, "worker_host_peak_bytes": None, "worker_host_peak_scope": "point"}
    out = worker.combine_workers([a, b])
    assert out["torch_peak_allocated_bytes"] == 11 and out["worker_host_peak_bytes"] is None
    assert out["workers"] == [a, b] and worker.combine_workers([a])["torch_peak_allocated_bytes"] == 5


def test_graph_pool_from_the_runners_log_line():
    lines = ["INFO 12-01 gpu_model_runner.py:6580] Graph capturing finished in 12 secs, took 0.50 GiB"]
    assert memory.cudagraph_pool_bytes(lines) == GIB // 2
    assert memory.cudagraph_pool_bytes(["nothing captured"]) is None


def test_kv_budget_follows_the_points():
    from eagle_fix.fix.checkpoint import read_config
    from eagle_fix.machine.roofline import model_shape
    from eagle_fix.pairs.profiles import tiny_pair

    t, d = (read_config(p, "x") for p in tiny_pair())
    per_token = model_shape(t)["kv_bytes_per_token"] + model_shape(d)["kv_bytes_per_token"]
    small = roofline.kv_budget_bytes(t, d, max_model_len=131072, max_num_seqs=1)
    assert small == int(per_token * 131072 * roofline.KV_HEADROOM)
    assert roofline.kv_budget_bytes(t, d, max_model_len=131072, max_num_seqs=4) == 4 * small
    assert roofline.kv_budget_bytes(t, None, max_model_len=16, max_num_seqs=1) == roofline.KV_MIN_BYTES


# ------------------------------------------------------------------- settings on the engine


def test_engine_spec_settings_reach_vllms_arguments():
    from eagle_fix.engine.spec import EngineSpec
    from eagle_fix.engine.worker import WORKER_EXTENSION

    base = EngineSpec(
        target="t",
        draft=None,
        mode="compile",
        fix=None,
        max_model_len=4096,
        compilation_mode="VLLM_COMPILE",
        cudagraph_mode="PIECEWISE",
        kv_cache_memory_bytes=3 * GIB,
    )
    kw = base.llm_kwargs()
    assert kw["compilation_config"] == {"mode": "VLLM_COMPILE", "cudagraph_mode": "PIECEWISE"}
    assert kw["kv_cache_memory_bytes"] == 3 * GIB and kw["worker_extension_cls"] == WORKER_EXTENSION
    eager = dataclasses.replace(base, mode="eager").llm_kwargs()
    assert "compilation_config" not in eager and eager["enforce_eager"]  # eager is NONE/NONE whatever is asked
    assert (
        "compilation_config" not in dataclasses.replace(base, compilation_mode=None, cudagraph_mode=None).llm_kwargs()
    )


def test_engine_settings_read_vllms_config_and_the_runners_backend():
    from eagle_fix.engine.measure import engine_settings

    class Mode(Enum):
        VLLM_COMPILE = 3

    class Graphs(Enum):
        FULL_AND_PIECEWISE = 4

    config = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(mode=Mode.VLLM_COMPILE, cudagraph_mode=Graphs.FULL_AND_PIECEWISE),
        attention_config=types.SimpleNamespace(backend=None),
    )
    got = engine_settings(config, {"attention_backends": ["FLASH_ATTN"], "vllm_weights_bytes": 1})
    assert (got["compilation_mode"], got["cudagraph_mode"], got["attention_backend"]) == (
        "VLLM_COMPILE",
        "FULL_AND_PIECEWISE",
        "FLASH_ATTN",
    )
    assert got["attention_backend_requested"] == "auto" and got["startup_memory"]["vllm_weights_bytes"] == 1
    assert engine_settings(config, {"error": "no RPC"})["attention_backend"] is None


def test_the_record_carries_settings_and_memory_with_reasons(tmp_path):
    from eagle_fix.engine.protocol import PointReply
    from eagle_fix.sweep import loop as sweep
    from eagle_fix.sweep.plan import Point, RunArgs, resolve

    run = resolve(RunArgs(profile="cpu-quick", out=tmp_path / "r.jsonl", progress=False))
    spec = run.engine_spec(Point(8192, "compile", "eagle3", "on"))
    fields = {"common": {}, "log": tmp_path / "x.log", "spec": spec}
    ready = {
        "compilation_mode": "VLLM_COMPILE",
        "cudagraph_mode": "NONE",
        "attention_backend": "CPU_ATTN",
        "startup_memory": {
            "vllm_weights_bytes": 10,
            "vllm_kv_cache_bytes": 20,
            "vllm_activation_peak_bytes": None,
            "vllm_cudagraph_estimate_bytes": None,
            "null_reasons": {"vllm_activation_peak_bytes": "GPU only"},
        },
    }
    result = PointReply(
        prompt_len=8000,
        samples={"decode_wall_s": [1.0]},
        worker_memory={
            "worker_host_peak_bytes": 123,
            "worker_host_peak_scope": "point",
            "torch_peak_allocated_bytes": None,
            "torch_peak_reserved_bytes": None,
            "null_reasons": {"torch_peak_allocated_bytes": "no CUDA device"},
        },
    )
    rec = sweep._record(
        run,
        Point(8192, "compile", "eagle3", "on"),
        fields,
        status="ok",
        ready=ready,
        memory={
            "peak_gpu_memory_bytes": None,
            "gpu_memory_scope": None,
            "gpu_memory_error": "NVML init failed",
            "peak_host_memory_bytes": 5,
        },
    )
    assert (rec["compilation_mode"], rec["cudagraph_mode"], rec["attention_backend"]) == (
        "VLLM_COMPILE",
        "NONE",
        "CPU_ATTN",
    )
    assert rec["kv_cache_memory_bytes"] == GIB  # cpu-quick's VLLM_CPU_KVCACHE_SPACE, in bytes
    assert rec["vllm_weights_bytes"] == 10 and rec["vllm_kv_cache_bytes"] == 20
    why = rec["memory_null_reasons"]
    assert why["vllm_activation_peak_bytes"] == "GPU only" and why["peak_gpu_memory_bytes"] == "NVML init failed"
    # a point without worker figures says so for each of its fields
    rec = sweep._record(run, Point(8192, "compile", "eagle3", "on"), fields, status="ok", ready=ready, result=result)
    assert (
        rec["worker_host_peak_bytes"] == 123
        and rec["memory_null_reasons"]["torch_peak_allocated_bytes"] == "no CUDA device"
    )
    failed = sweep._record(run, Point(8192, "compile", "eagle3", "on"), fields, status="failed", error="x")
    assert failed["memory_null_reasons"]["worker_host_peak_bytes"].startswith("no worker memory figures")


def test_cuda_engines_get_a_kv_budget_sized_to_the_sweep(monkeypatch, tmp_path):
    from eagle_fix.pairs import profiles as models
    from eagle_fix.sweep.plan import Point, RunArgs, resolve

    monkeypatch.setattr(models.Profile, "check_runs_here", lambda self: None)
    run = resolve(
        RunArgs(
            profile="gpu-tiny",
            contexts=(131072,),
            out=tmp_path / "r.jsonl",
            progress=False,
            cudagraph_mode="full_decode_only",
        )
    )
    eagle = run.engine_spec(Point(131072, "compile", "eagle3", "on"))
    base = run.engine_spec(Point(131072, "compile", "baseline", None))
    assert roofline.KV_MIN_BYTES < base.kv_cache_memory_bytes < eagle.kv_cache_memory_bytes < GIB  # not a device share
    assert eagle.cudagraph_mode == "FULL_DECODE_ONLY" and eagle.compilation_mode is None
    pinned = dataclasses.replace(run, profile=dataclasses.replace(run.profile, kv_cache_memory_bytes=5 * GIB))
    assert pinned.engine_spec(Point(131072, "eager", "eagle3", "on")).kv_cache_memory_bytes == 5 * GIB


def test_bad_settings_and_a_resume_with_other_settings_are_refused(tmp_path):
    from eagle_fix.core import record
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.sweep import loop as sweep
    from eagle_fix.sweep.plan import RunArgs, resolve

    with pytest.raises(EagleFixError, match="--cudagraph-mode SOMETIMES: unknown"):
        resolve(RunArgs(profile="cpu-quick", cudagraph_mode="SOMETIMES"))
    run = resolve(RunArgs(profile="cpu-quick", cudagraph_mode="PIECEWISE"))
    done = [record.new(mode="compile", cudagraph_mode="FULL"), record.new(mode="eager", cudagraph_mode="NONE")]
    with pytest.raises(EagleFixError, match="cudagraph_mode FULL, this run asks for PIECEWISE"):
        sweep.check_resumed_settings(run, done)
    sweep.check_resumed_settings(run, done[1:])  # eager points are NONE whatever is asked


# ------------------------------------------------------------------------------ _measure_cuda


def test_the_cuda_roofline_is_measured_in_a_child_process(monkeypatch):
    import torch

    from eagle_fix.machine import limits

    ran = []

    def in_child(name, timeout_s=limits.CHILD_TIMEOUT_S):
        ran.append(name)
        return {
            "matmul_gflops": {"bf16": 1.0},
            "peak_gflops": 1.0,
            "bandwidth_gbs": 1.0,
            "memory_total_bytes_torch": 141 * GIB,
        }

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(limits, "_run_in_child", in_child)
    monkeypatch.setattr(limits, "_measure_cuda", lambda: pytest.fail("_measure_cuda ran in the sweep's process"))
    got = limits.measure_limits(device="cuda")
    assert ran == ["_measure_cuda"] and got["measured_in"] == "child process"
    assert got["peak_gflops"] == 1.0 and "memory_total_bytes_torch" not in got and got["memory_total_bytes"]


def test_run_in_child_is_another_process_and_failures_are_one_line(monkeypatch):
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.machine import limits

    assert limits._run_in_child("_child_pid")["pid"] != os.getpid()
    with pytest.raises(ValueError):
        limits._run_in_child("measure_limits")
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(EagleFixError, match="failed in its own process"):
        limits._run_in_child("_child_pid")


def test_a_driver_that_rejects_the_v2_memory_call_falls_back_to_v1(nvml):
    """pynvml has the v2 struct but the driver answers the versioned call with a version mismatch (an older
    driver): the v1 figure, not a null; any other NVML error still reaches the caller (a null with its reason)."""
    from eagle_fix.machine import device

    mod = nvml(used=5 * 2**30)
    mod.nvmlMemory_v2 = object()

    def mem_info(handle, version=None):
        if version is not None:
            raise NVMLError("Argument Version Mismatch")
        return types.SimpleNamespace(used=6 * 2**30, total=80 * 2**30)

    mod.nvmlDeviceGetMemoryInfo = mem_info
    assert device.gpu_used_bytes("gpu0") == 6 * 2**30
    mod.nvmlDeviceGetMemoryInfo = lambda h, version=None: (_ for _ in ()).throw(NVMLError("GPU is lost"))
    with pytest.raises(NVMLError, match="GPU is lost"):
        device.gpu_used_bytes("gpu0")


# ---------------------------------------------------- what the memory figures measure (#52): KV in use, scope


def test_kv_in_use_is_vllms_usage_share_of_the_cache_in_bytes():
    from eagle_fix.engine.measure import kv_in_use

    # 101 blocks of 1000 bytes; vLLM's share leaves out its null block: 0.5 of 100 blocks held
    one = {"vllm_kv_cache_bytes": 101_000, "vllm_kv_cache_blocks": 101}
    assert kv_in_use(0.5, one) == {"kv_cache_usage_peak": 0.5, "peak_kv_memory_bytes": 50_000}
    assert kv_in_use(0.25, one)["peak_kv_memory_bytes"] == 25_000  # a shorter context holds less
    # tensor parallel: each rank holds the same blocks of its shard (the engine's figures are sums)
    two = {"vllm_kv_cache_bytes": 202_000, "vllm_kv_cache_blocks": 202, "workers": [one, one]}
    assert kv_in_use(0.5, two)["peak_kv_memory_bytes"] == 100_000
    none = kv_in_use(None, one, "no stat logger")
    assert none["peak_kv_memory_bytes"] is None and none["null_reasons"]["peak_kv_memory_bytes"] == "no stat logger"
    blind = kv_in_use(0.5, {"null_reasons": {"x": "y"}})
    assert blind["peak_kv_memory_bytes"] is None and blind["kv_cache_usage_peak"] == 0.5
    assert "kv_cache_config" in blind["null_reasons"]["peak_kv_memory_bytes"] and blind["null_reasons"]["x"] == "y"


class _StatLoggers:
    """The front end's stat-logger manager as LLMEngine.step calls it (record(scheduler_stats=..., ...))."""

    def __init__(self):
        self.recorded = []

    def record(self, scheduler_stats, iteration_stats=None, mm_cache_stats=None, engine_idx=0):
        self.recorded.append(scheduler_stats.kv_cache_usage)


def test_the_kv_usage_peak_is_taken_from_every_steps_scheduler_stats():
    from vllm.v1.metrics.stats import SchedulerStats

    from eagle_fix.engine.measure import KvUsagePeak

    manager = _StatLoggers()
    llm = types.SimpleNamespace(llm_engine=types.SimpleNamespace(logger_manager=manager))
    stale = KvUsagePeak(llm)  # a point that raised never closed its watch
    watch = KvUsagePeak(llm)
    for usage in (0.1, 0.625, 0.0):  # prefill, the last decode step, the request freed
        manager.record(scheduler_stats=SchedulerStats(kv_cache_usage=usage), iteration_stats=None)
    assert watch.peak == 0.625 and stale.peak is None  # one wrapper at a time, never stacked
    assert manager.recorded == [0.1, 0.625, 0.0]  # vLLM's own loggers still get every step
    watch.close()
    assert "record" not in vars(manager)  # the front end's own method again
    none = KvUsagePeak(types.SimpleNamespace(llm_engine=types.SimpleNamespace(logger_manager=None)))
    assert none.peak is None and "stat logger" in none.why


def test_vllms_front_end_hands_each_steps_scheduler_stats_to_its_stat_loggers():
    """Watch: KvUsagePeak wraps LLMEngine.logger_manager.record, which the installed vLLM calls every step with
    that step's SchedulerStats (kv_cache_usage: the figure of the vllm:kv_cache_usage_perc gauge)."""
    import dataclasses as dc
    import inspect

    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.metrics.stats import SchedulerStats

    step = inspect.getsource(LLMEngine.step)
    assert "self.logger_manager.record(" in step and "scheduler_stats=outputs.scheduler_stats" in step
    assert "kv_cache_usage" in {f.name for f in dc.fields(SchedulerStats)}


def test_every_record_names_its_gpu_scope_and_whether_mode_peaks_compare():
    from eagle_fix.core import record

    old_cpu = {"context_len": 8192, "mode": "eager", "peak_gpu_memory_bytes": None}  # before the scope was "none"
    assert record.upgrade(old_cpu)["gpu_memory_scope"] == "none"
    assert record.upgrade(old_cpu)["gpu_peak_comparable_across_modes"] is None  # no GPU figure
    gpu = {"context_len": 8192, "peak_gpu_memory_bytes": 5 * GIB, "gpu_memory_scope": "device"}
    assert record.upgrade({**gpu, "mode": "eager"})["gpu_peak_comparable_across_modes"] is True
    graphs = record.upgrade({**gpu, "mode": "compile", "cudagraph_mode": "FULL_AND_PIECEWISE"})
    assert graphs["gpu_peak_comparable_across_modes"] is False and graphs["gpu_memory_scope"] == "device"
    assert record.upgrade({**gpu, "mode": "compile", "cudagraph_mode": "NONE"})["gpu_peak_comparable_across_modes"]
    assert "peak_kv_memory_bytes" in record.FIELDS and record.upgrade(old_cpu)["peak_kv_memory_bytes"] is None


def test_a_sweep_record_carries_kv_in_use_and_its_scope_even_when_failed(tmp_path):
    from eagle_fix.core import metrics
    from eagle_fix.engine.protocol import PointReply
    from eagle_fix.sweep import loop as sweep
    from eagle_fix.sweep.plan import Point, RunArgs, resolve

    run = resolve(RunArgs(profile="cpu-quick", out=tmp_path / "r.jsonl", progress=False))
    point = Point(8192, "eager", "eagle3", "on")
    fields = {"common": {}, "log": tmp_path / "x.log", "spec": run.engine_spec(point)}
    result = PointReply(
        prompt_len=8000,
        samples={"decode_wall_s": [1.0]},
        worker_memory={"peak_kv_memory_bytes": 3 * 2**20, "kv_cache_usage_peak": 0.0937, "null_reasons": {}},
    )
    rec = sweep._record(run, point, fields, status="ok", result=result, memory={"peak_host_memory_bytes": 5})
    assert rec["peak_kv_memory_bytes"] == 3 * 2**20 and rec["kv_cache_usage_peak"] == 0.0937
    assert rec["gpu_memory_scope"] == "none"
    failed = sweep._record(run, point, fields, status="failed", error="x")
    assert failed["gpu_memory_scope"] == "none" and failed["memory_null_reasons"]["peak_kv_memory_bytes"]
    assert not metrics.METRIC["peak_kv_memory_bytes"].gated  # shown beside memory, never a verdict


def test_the_memory_plot_says_when_compiled_gpu_peaks_are_not_comparable():
    import pandas as pd

    from eagle_fix.publish.plots import _graphs_note

    cols = ("peak_gpu_memory_bytes", "peak_kv_memory_bytes")
    df = pd.DataFrame({"gpu_peak_comparable_across_modes": [True, False], "cudagraph_mode": ["NONE", "PIECEWISE"]})
    assert "(PIECEWISE) are not comparable with eager" in _graphs_note(df, cols)
    assert _graphs_note(df.iloc[:1], cols) == "" and _graphs_note(df, ("peak_host_memory_bytes",)) == ""
    cpu = pd.DataFrame({"gpu_peak_comparable_across_modes": [None, None], "cudagraph_mode": ["NONE", "NONE"]})
    assert _graphs_note(cpu, cols) == ""
