"""Peak memory of an engine: GPU through NVML (the engine core is another process, so torch's own
statistics in the parent see nothing), host RSS of the engine's whole process tree through psutil."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any


def _nvml_handle() -> Any | None:
    """NVML handle of the first visible GPU, or None without a GPU/driver/nvidia-ml-py."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if visible.startswith("GPU-"):
            return pynvml.nvmlDeviceGetHandleByUUID(visible)
        return pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)
    except Exception:  # pynvml.NVMLError and friends: no usable GPU here
        return None


def gpu_used_bytes(handle: Any) -> int:
    """Device memory in use, from the v2 memory struct (it counts what v1 hides as reserved)."""
    import pynvml

    version = getattr(pynvml, "nvmlMemory_v2", None)
    info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version) if version else pynvml.nvmlDeviceGetMemoryInfo(handle)
    return int(info.used)


def device_info() -> dict[str, Any]:
    """What the dashboard filters by: the GPU's name and driver, or the CPU's model."""
    handle = _nvml_handle()
    if handle is not None:
        import pynvml

        name = pynvml.nvmlDeviceGetName(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {"kind": "cuda", "name": name.decode() if isinstance(name, bytes) else name,
                "driver": driver.decode() if isinstance(driver, bytes) else driver}
    model = "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "cpu")
    except OSError:
        pass
    return {"kind": "cpu", "name": model, "driver": None, "cores": os.cpu_count()}


class MemorySampler:
    """Background thread sampling GPU used memory and the RSS of a process tree.

    `idle_gpu_bytes` is taken at construction (before the engine starts), so a point's GPU peak is
    reported above that level; peaks are reset per point with `reset_peaks()`.
    """

    # Why 0.25 s and a cached process list: vLLM's CPU worker computes on one core, and a sampler
    # that re-walks /proc often lands on it (results/overhead/ has the measured cost).
    def __init__(self, interval_s: float = 0.25, tree_refresh_s: float = 5.0):
        self.interval_s = interval_s
        self.tree_refresh_s = tree_refresh_s
        self._tree: _ProcessTree | None = None
        self._handle = _nvml_handle()
        self.idle_gpu_bytes = gpu_used_bytes(self._handle) if self._handle is not None else None
        self._peak_gpu = 0
        self._peak_host = 0
        self._gpu_error: str | None = None
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
        self._peak_gpu = 0
        self._peak_host = 0

    def peaks(self) -> dict[str, int | None]:
        self._sample()  # at least one sample per point, however short
        gpu = None
        if self._handle is not None and self.idle_gpu_bytes is not None:
            gpu = max(0, self._peak_gpu - self.idle_gpu_bytes)
        return {"peak_gpu_memory_bytes": gpu, "peak_host_memory_bytes": self._peak_host or None}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        if self._handle is not None:
            import pynvml

            try:
                self._peak_gpu = max(self._peak_gpu, gpu_used_bytes(self._handle))
            except pynvml.NVMLError as exc:  # a GPU that stops answering: say so once, keep sampling RSS
                if not self._gpu_error:
                    self._gpu_error = f"NVML: {exc}"
                    print(f"eagle-fix: GPU memory sampling failed ({exc}); peak GPU memory will be partial",
                          file=sys.stderr)
        tree = self._tree
        if tree is not None:
            self._peak_host = max(self._peak_host, tree.rss_bytes())


class _ProcessTree:
    """A process and its descendants, re-listed every `refresh_s` (listing walks all of /proc)."""

    def __init__(self, pid: int, refresh_s: float):
        self.pid, self.refresh_s = pid, refresh_s
        self._procs: list = []
        self._listed_at = float("-inf")

    def rss_bytes(self) -> int:
        import psutil

        now = time.monotonic()
        if now - self._listed_at > self.refresh_s:
            try:
                root = psutil.Process(self.pid)
                self._procs = [root] + root.children(recursive=True)
            except psutil.Error:
                self._procs = []
            self._listed_at = now
        total = 0
        for p in self._procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total
