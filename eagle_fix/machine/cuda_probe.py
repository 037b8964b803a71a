"""The CUDA questions that need torch and NVML but no vLLM (`python -m eagle_fix.machine.cuda_probe`): which
NVML memory struct the suite's sampler reads on this driver (v2, or v1 where the driver rejects v2), and how
far a host clock around asynchronous GPU work is from the device's own (CUDA events). A lent GPU box with
torch alone runs this part of scripts/gpu-check.sh; without CUDA every answer is a null with its reason."""

from __future__ import annotations

import json
import time
from typing import Any

from eagle_fix.machine.device import gpu_used_bytes, nvml_device, nvml_error


def nvml_memory() -> dict[str, Any]:
    """Both NVML structs' `used`, side by side with what the sampler reads (eagle_fix.machine.device)."""
    handle, how = nvml_device()
    if handle is None:
        return {"error": how.get("error")}
    import pynvml

    out: dict[str, Any] = {"v1_used": int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)}
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is None:
        out["v2_error"] = "this nvidia-ml-py has no nvmlMemory_v2"
    else:
        try:
            info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            out["v2_used"], out["v2_reserved"] = int(info.used), int(getattr(info, "reserved", 0))
        except Exception as exc:  # noqa: BLE001 -- the driver's refusal is the answer
            out["v2_error"] = nvml_error(exc)
    suite = gpu_used_bytes(handle)
    out["sampler_used"] = suite
    out["sampler_reads"] = "v2" if suite == out.get("v2_used") else "v1"
    return out


def step_clock(size: int = 4096, launches: int = 20) -> dict[str, Any]:
    """Host time to launch `launches` matmuls vs the device time CUDA events measure for them: a step
    timed on the host under asynchronous launches measures the launches (docs/statistics.md)."""
    import torch

    if not torch.cuda.is_available():
        return {"error": "torch.cuda.is_available() is False"}
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()  # warm: cuBLAS handles, the allocator
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(launches):
        a @ a
    end.record()
    host_ms = (time.perf_counter() - t0) * 1e3
    end.synchronize()
    device_ms = float(start.elapsed_time(end))
    return {"host_ms": round(host_ms, 3), "device_ms": round(device_ms, 3), "host_over_device": host_ms / device_ms}


def probe() -> dict[str, Any]:
    try:
        import torch
    except ImportError as exc:
        return {"torch": None, "error": f"no torch ({exc})"}
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
    }
    try:
        out["nvml"] = nvml_memory()
    except Exception as exc:  # noqa: BLE001 -- any NVML failure is an answer, not a crash
        out["nvml"] = {"error": nvml_error(exc)}
    out["step_clock"] = step_clock()
    return out


if __name__ == "__main__":
    print(json.dumps(probe()))
