"""The GPU as NVML sees it, from any process (no CUDA context): which device the engine sees first
(CUDA_VISIBLE_DEVICES by index, GPU UUID or MIG UUID), its memory in use and in total, what it attributes to
given processes, and the device's name for the records. Every NVML failure is a value with its reason, never
an exception: the sampler, the fingerprint and `eagle-fix ab` all read the device through here."""

from __future__ import annotations

import os
from typing import Any


def nvml_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def nvml_device(environ: dict[str, str] | None = None) -> tuple[Any | None, dict[str, Any]]:
    """(handle, how) for the GPU the engine sees first; (None, how) with `how["error"]` saying why
    not. CUDA_VISIBLE_DEVICES may name it by index, GPU UUID or MIG UUID: a UUID is looked up by
    UUID (an index would name another device); a MIG-enabled GPU named by index, or the legacy
    MIG-GPU-<uuid>/<gi>/<ci> form, is left unresolved with the reason, never silently device 0."""
    env = os.environ if environ is None else environ
    try:
        import pynvml
    except ImportError:
        return None, {"error": "nvidia-ml-py (pynvml) is not installed", "visible": None}
    visible = env.get("CUDA_VISIBLE_DEVICES")
    first = visible.split(",")[0].strip() if visible is not None else None
    how: dict[str, Any] = {"visible": first, "error": None}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 -- NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, {**how, "error": f"NVML init failed ({nvml_error(exc)})"}
    if visible is not None and not first:
        return None, {**how, "error": "CUDA_VISIBLE_DEVICES is empty: no GPU is visible to the engine"}
    try:
        if first is None or first.isdigit():
            index = int(first or 0)
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            how["resolved_by"] = "index"
            if env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") != "PCI_BUS_ID":
                # CUDA numbers the fastest device first, NVML by PCI bus: with several kinds of GPU
                # the two indices can name different devices
                how["note"] = "CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA's index may differ from NVML's"
            if _mig_enabled(pynvml, handle):
                return None, {
                    **how,
                    "error": f"GPU {index} has MIG enabled: CUDA runs on one of its MIG "
                    "instances; name it by its MIG UUID in CUDA_VISIBLE_DEVICES "
                    "(nvidia-smi -L)",
                }
            return handle, how
        if first.startswith("MIG-GPU-"):
            return None, {
                **how,
                "error": f"legacy MIG name {first!r} (GPU UUID/GI/CI) has no NVML lookup; "
                "name the MIG instance by its MIG-<uuid> (nvidia-smi -L)",
            }
        if first.startswith(("GPU-", "MIG-")):
            handle = pynvml.nvmlDeviceGetHandleByUUID(first)
            how["resolved_by"] = "mig uuid" if first.startswith("MIG-") else "uuid"
            return handle, how
        return None, {**how, "error": f"CUDA_VISIBLE_DEVICES entry {first!r} is neither an index nor a GPU-/MIG- UUID"}
    except Exception as exc:  # noqa: BLE001 -- NVMLError_NotFound, InvalidArgument, NoPermission, ...
        return None, {**how, "error": f"NVML could not resolve CUDA_VISIBLE_DEVICES={first!r} ({nvml_error(exc)})"}


def _mig_enabled(pynvml: Any, handle: Any) -> bool:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # noqa: BLE001 -- not a MIG-capable GPU (NotSupported) or an old driver
        return False
    return bool(current)


def nvml_handle() -> Any | None:
    """NVML handle of the GPU the engine sees first, or None (the reason: `nvml_device()`)."""
    return nvml_device()[0]


def gpu_used_bytes(handle: Any) -> int:
    """Device memory in use. NVML's v2 struct reports what is allocated as `used` and the driver's own share
    apart (`reserved`); the v1 struct's `used` is both together. v2 where the driver takes it, else v1 (a
    pynvml without v2, or a driver that rejects the v2 call) plus nothing: the figure is then higher by the
    driver's reserve, the same at every sample, so peaks and differences keep their meaning."""
    import pynvml

    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version:
        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle, version=version).used)
        except pynvml.NVMLError as exc:  # an older driver: NVML_ERROR_ARGUMENT_VERSION_MISMATCH / NOT_SUPPORTED
            if "version" not in str(exc).lower() and "not supported" not in str(exc).lower():
                raise
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def gpu_total_bytes() -> tuple[int | None, str | None]:
    """The engine's GPU's memory in bytes from NVML (no CUDA context), or (None, why not)."""
    handle, how = nvml_device()
    if handle is None:
        return None, how["error"]
    try:
        import pynvml

        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total), None
    except Exception as exc:  # noqa: BLE001 -- any NVML failure is a null with its reason
        return None, f"NVML memory info failed ({nvml_error(exc)})"


def gpu_process_bytes(handle: Any, pids: set[int]) -> tuple[int | None, str | None]:
    """GPU memory NVML attributes to these processes (nvmlDeviceGetComputeRunningProcesses), or
    (None, why not): no permission, a driver that hides per-process use, or none of the pids in
    NVML's list (a container's PID namespace: NVML reports the host's pids)."""
    import pynvml

    try:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception as exc:  # noqa: BLE001 -- NoPermission, NotSupported (some MIG/vGPU setups)
        return None, f"NVML per-process memory unavailable ({nvml_error(exc)})"
    mine = [p for p in procs if int(getattr(p, "pid", -1)) in pids]
    if not mine:
        return None, (
            f"none of the engine's {len(pids)} processes is in NVML's list of {len(procs)} "
            "(a container's PID namespace hides host pids)"
        )
    used = [getattr(p, "usedGpuMemory", None) for p in mine]
    if any(u is None for u in used):
        return None, "NVML lists the engine's processes without their memory (not permitted here)"
    return int(sum(used)), None


def device_info() -> dict[str, Any]:
    """What the dashboard filters by: the GPU's name and driver, or the CPU's model. A GPU that
    NVML cannot resolve is named with the reason (`nvml_error`), not taken for a CPU silently."""
    handle, how = nvml_device()
    if handle is not None:
        import pynvml

        try:
            name = pynvml.nvmlDeviceGetName(handle)
            driver = pynvml.nvmlSystemGetDriverVersion()
            return {
                "kind": "cuda",
                "name": name.decode() if isinstance(name, bytes) else name,
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "nvml_resolved_by": how.get("resolved_by"),
                "visible": how.get("visible"),
            }
        except Exception as exc:  # noqa: BLE001 -- any NVML failure is named, never a crash
            how = {**how, "error": f"NVML device query failed ({nvml_error(exc)})"}
    model = "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "cpu")
    except OSError:
        pass
    # a GPU box whose GPU could not be resolved says why, instead of passing for a CPU machine
    return {"kind": "cpu", "name": model, "driver": None, "cores": os.cpu_count(), "nvml_error": how.get("error")}
