"""Memory of an engine, from three places, each labelled with what it covers:

- inside the engine's worker (`WorkerMemoryExtension`, reached with `collective_rpc`): torch's
  peak allocated and reserved CUDA memory since the point began (reset before it), the worker
  process's own host peak (VmHWM, reset before the point where the kernel allows it: on CPU the
  worker's tensors live there), and vLLM's own figures (weights, KV cache, activation peak, the
  CUDA-graph estimate); the engine core is another process, so the sweep's torch sees none of it;
- NVML from the sweep's process (no CUDA context): the engine's processes' GPU memory where NVML
  lists them, else the whole device's use above its idle level, labelled `device`; every NVML
  failure is a null with its reason (`gpu_memory_error`) and the scope `none`, never an exception;
- psutil: the RSS of the engine's whole process tree.
"""

from __future__ import annotations

import os
import re
import resource
import sys
import threading
import time
from typing import Any

from eagle_fix.machine.device import gpu_process_bytes, gpu_used_bytes, nvml_device, nvml_error


class MemorySampler:
    """Background thread sampling GPU memory (NVML) and the RSS of a process tree (psutil).

    GPU: per process (the engine tree's pids in NVML's compute-process list) where NVML allows it,
    else the whole device's use above `idle_gpu_bytes` (read at construction, before the engine
    starts), and `gpu_memory_scope` says which. Every NVML failure leaves the figure null with its
    reason in `gpu_memory_error`; none raises. Peaks are reset per point with `reset_peaks()`.
    """

    # Why 0.25 s and a cached process list: vLLM's CPU worker computes on one core, and a sampler
    # that re-walks /proc often lands on it (results/overhead/ has the measured cost).
    def __init__(self, interval_s: float = 0.25, tree_refresh_s: float = 5.0):
        self.interval_s = interval_s
        self.tree_refresh_s = tree_refresh_s
        self._tree: _ProcessTree | None = None
        self._handle, how = nvml_device()
        self._nvml_error: str | None = how.get("error")
        self.idle_gpu_bytes: int | None = None
        if self._handle is not None:
            try:
                self.idle_gpu_bytes = gpu_used_bytes(self._handle)
            except Exception as exc:  # noqa: BLE001 -- an NVML error at the first reading is a null, not a crash
                self._nvml_error = f"NVML idle reading failed ({nvml_error(exc)}): whole-device figure unavailable"
        self.reset_peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eagle-fix-memory", daemon=True)
        self._thread.start()

    @property
    def has_gpu(self) -> bool:
        return self._handle is not None

    def watch(self, pid: int | None) -> None:
        """Sample this process and its descendants from now on."""
        self._tree = _ProcessTree(pid, self.tree_refresh_s) if pid is not None else None

    def reset_peaks(self) -> None:
        self._peak_device: int | None = None
        self._peak_process: int | None = None
        self._process_error: str | None = None
        self._device_error: str | None = None
        self._peak_host = 0

    def peaks(self) -> dict[str, Any]:
        self._sample()  # at least one sample per point, however short
        gpu, scope, error = None, "none", self._nvml_error  # `none`: no GPU figure, `error` says why
        if self._handle is not None:
            if self._peak_process is not None:
                gpu, scope, error = self._peak_process, "process", None
            elif self._peak_device is not None and self.idle_gpu_bytes is not None:
                gpu, scope = max(0, self._peak_device - self.idle_gpu_bytes), "device"
                error = self._process_error  # why it is not the engine's own figure
            else:
                error = self._device_error or self._nvml_error or self._process_error
        return {
            "peak_gpu_memory_bytes": gpu,
            "gpu_memory_scope": scope,
            "gpu_memory_error": error,
            "peak_host_memory_bytes": self._peak_host or None,
        }

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        tree = self._tree
        if self._handle is not None:
            self._sample_gpu(tree)
        if tree is not None:
            self._peak_host = max(self._peak_host, tree.rss_bytes())

    def _sample_gpu(self, tree: _ProcessTree | None) -> None:
        try:
            used = gpu_used_bytes(self._handle)
            self._peak_device = used if self._peak_device is None else max(self._peak_device, used)
        except Exception as exc:  # noqa: BLE001 -- a GPU that stops answering: say so once, keep sampling
            if not self._device_error:
                self._device_error = f"NVML memory reading failed ({nvml_error(exc)})"
                print(
                    f"eagle-fix: GPU memory sampling failed ({exc}); the point's GPU figure is recorded as null "
                    "with this reason",
                    file=sys.stderr,
                )
        if tree is None:
            return
        pids = tree.pids()
        if not pids:
            return
        mine, why = gpu_process_bytes(self._handle, pids)
        if mine is not None:
            self._peak_process = mine if self._peak_process is None else max(self._peak_process, mine)
        elif self._process_error is None:
            self._process_error = why


class _ProcessTree:
    """A process and its descendants, re-listed every `refresh_s` (listing walks all of /proc)."""

    def __init__(self, pid: int, refresh_s: float):
        self.pid, self.refresh_s = pid, refresh_s
        self._procs: list = []
        self._listed_at = float("-inf")

    def _list(self) -> list:
        import psutil

        now = time.monotonic()
        if now - self._listed_at > self.refresh_s:
            try:
                root = psutil.Process(self.pid)
                self._procs = [root] + root.children(recursive=True)
            except psutil.Error:
                self._procs = []
            self._listed_at = now
        return self._procs

    def pids(self) -> set[int]:
        return {p.pid for p in self._list()}

    def rss_bytes(self) -> int:
        import psutil

        total = 0
        for p in self._list():
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total


# ------------------------------------------------------------------------ inside the worker

_HOST_RESET: dict[str, Any] = {"ok": False, "why": "no reset asked for yet"}


def _reset_host_peak() -> None:
    """Reset this process's VmHWM to its current RSS (Linux: "5" to /proc/self/clear_refs), so the
    point's host peak is the point's, not the start-up's (loading weights peaks higher than decoding)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        _HOST_RESET.update(ok=True, why=None)
    except OSError as exc:
        _HOST_RESET.update(ok=False, why=f"/proc/self/clear_refs: {exc.strerror or exc}")


def _host_peak() -> tuple[int | None, str]:
    """This process's peak RSS and what it covers: "point" after a successful reset, else the whole
    life of the process (ru_maxrss, which nothing resets)."""
    try:
        with open("/proc/self/status") as f:
            hwm = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), None)
    except (OSError, ValueError):
        hwm = None
    if hwm is not None and _HOST_RESET["ok"]:
        return hwm, "point"
    if hwm is None:
        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return hwm, "process lifetime"


def _cuda_device(worker: Any) -> Any | None:
    device = getattr(worker, "device", None)
    return device if getattr(device, "type", None) == "cuda" else None


def reset_worker_peaks(worker: Any) -> None:
    """Before a point: torch's CUDA peak statistics of the worker's device and the host peak."""
    device = _cuda_device(worker)
    if device is not None:
        import torch

        torch.cuda.reset_peak_memory_stats(device)
    _reset_host_peak()


def worker_memory(worker: Any) -> dict[str, Any]:
    """The worker's own figures since `reset_worker_peaks`, and vLLM's, null with a reason each
    where this engine has none (`null_reasons`)."""
    why: dict[str, str] = {}
    out: dict[str, Any] = {"pid": os.getpid()}
    device = _cuda_device(worker)
    if device is not None:
        import torch

        out["torch_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        out["torch_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
    else:
        out["torch_peak_allocated_bytes"] = out["torch_peak_reserved_bytes"] = None
        why["torch_peak_allocated_bytes"] = why["torch_peak_reserved_bytes"] = (
            "no CUDA device in this worker: its tensors are host memory (worker_host_peak_bytes)"
        )
    out["worker_host_peak_bytes"], out["worker_host_peak_scope"] = _host_peak()
    if out["worker_host_peak_scope"] != "point":
        why["worker_host_peak_scope"] = _HOST_RESET["why"] or "VmHWM unreadable"
    runner = getattr(worker, "model_runner", None)
    weights = getattr(runner, "model_memory_usage", None)
    if weights is not None:
        out["vllm_weights_bytes"], out["vllm_weights_source"] = int(weights), "model_runner.model_memory_usage"
    else:
        out["vllm_weights_bytes"], out["vllm_weights_source"] = _parameter_bytes(runner), "parameters counted"
        why["vllm_weights_bytes"] = "this model runner keeps no model_memory_usage (vLLM's CPU runner): weights counted"
    kv = getattr(runner, "kv_cache_config", None)
    try:
        out["vllm_kv_cache_bytes"] = int(sum(t.size for t in kv.kv_cache_tensors))
        out["vllm_kv_cache_blocks"] = int(kv.num_blocks)
    except (AttributeError, TypeError):
        out["vllm_kv_cache_bytes"] = out["vllm_kv_cache_blocks"] = None
        why["vllm_kv_cache_bytes"] = "the model runner has no kv_cache_config with kv_cache_tensors"
    for field, attr, reason in (
        (
            "vllm_activation_peak_bytes",
            "peak_activation_memory",
            "vLLM profiles activations only on GPU and skips it when kv_cache_memory_bytes is set",
        ),
        (
            "vllm_cudagraph_estimate_bytes",
            "cudagraph_memory_estimate",
            "no CUDA-graph memory profile in this worker (eager, CPU, or kv_cache_memory_bytes set)",
        ),
        (
            "vllm_available_kv_cache_bytes",
            "available_kv_cache_memory_bytes",
            "vLLM sized the KV cache from kv_cache_memory_bytes (or the CPU budget), not from a profile",
        ),
    ):
        value = getattr(worker, attr, None)
        out[field] = int(value) if value is not None else None
        if value is None:
            why[field] = reason
    out["attention_backends"] = _attention_backends(runner)
    out["null_reasons"] = why
    return out


def _parameter_bytes(runner: Any) -> int | None:
    try:
        model = runner.get_model()
        return int(sum(p.numel() * p.element_size() for p in model.parameters()))
    except Exception:  # noqa: BLE001 -- no model yet or not a torch module
        return None


def _attention_backends(runner: Any) -> list[str] | None:
    """The attention backends the runner selected, by vLLM's own names (one per KV-cache group)."""
    names: list[str] = []
    try:
        for groups in runner.attn_groups:
            for group in groups:
                backend = group.backend
                name = (
                    backend.get_name() if hasattr(backend, "get_name") else getattr(backend, "__name__", str(backend))
                )
                if name not in names:
                    names.append(name)
    except (AttributeError, TypeError):
        return None
    return names or None


class WorkerMemoryExtension:
    """Memory RPCs in the engine's worker (`llm.collective_rpc("eagle_fix_memory")`)."""

    def eagle_fix_reset_memory(self) -> None:
        reset_worker_peaks(self)

    def eagle_fix_memory(self) -> dict[str, Any]:
        return worker_memory(self)


# --------------------------------------------------------------------------- from the log

_GRAPH_RX = re.compile(r"Graph capturing finished in [\d.]+ secs, took ([\d.]+) GiB")


def cudagraph_pool_bytes(lines: list[str]) -> int | None:
    """The CUDA-graph pool vLLM's runners (V1 and V2) log after capture ("Graph capturing finished
    in N secs, took X GiB"): the actual pool, which the worker keeps nowhere; to 0.01 GiB."""
    found = [float(m.group(1)) for line in lines if (m := _GRAPH_RX.search(line))]
    return int(sum(found) * 2**30) if found else None
