"""Before `scripts/setup.sh --gpu` installs vLLM's CUDA build (gigabytes): can this box run it? One line per
problem, naming the fix, exit 1. Standard library only: it runs with the PYTHON that will make the venv,
before the venv exists. What it checks against is eagle_fix/data/gpu_needs.json (written by
`python -m eagle_fix.releases.gpu_needs --write` from the release registry and the profiles).

  gpu_preflight.py --pinned                 print the vLLM release setup uses without VLLM_VERSION: the newest
                                            the suite checked whose wheel's CUDA this box's driver supports
  gpu_preflight.py --checked X              exit 0 when the suite's hooks were checked against vLLM X
  gpu_preflight.py --vllm X --profile P --python-version 3.11
                                            the Python, the driver's CUDA for X's wheel, P's GPU memory
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

NEEDS = Path(__file__).resolve().parents[1] / "eagle_fix" / "data" / "gpu_needs.json"
GIB = 2**30


def nvidia_smi(*args: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SystemExit(f"eagle-fix setup: nvidia-smi failed ({exc}); is the NVIDIA driver installed?") from None
    if out.returncode != 0:
        raise SystemExit(f"eagle-fix setup: nvidia-smi {' '.join(args)} failed: {out.stderr.strip()[:200]}")
    return out.stdout


def gpus() -> list[dict]:
    """index, name, driver, total and free MiB of each GPU nvidia-smi lists."""
    rows = nvidia_smi("--query-gpu=index,name,driver_version,memory.total,memory.free", "--format=csv,noheader,nounits")
    out = []
    for line in rows.strip().splitlines():
        index, name, driver, total, free = (x.strip() for x in line.split(","))
        out.append(
            {"index": index, "name": name, "driver": driver, "total": int(total) * 2**20, "free": int(free) * 2**20}
        )
    return out


def driver_cuda() -> tuple[int, int] | None:
    """The newest CUDA the driver supports, from nvidia-smi's header ("CUDA Version: 13.0")."""
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", nvidia_smi())
    return (int(m.group(1)), int(m.group(2))) if m else None


def default_release(needs: dict) -> str:
    """The newest release the suite checked (the registry's CUDA builds: each passes the doctor and the hooks
    test against its own files) whose wheel's CUDA major the driver supports; the newest where the driver
    cannot be asked or runs none of them (the preflight then names the driver, one line)."""
    checked = sorted(needs["checked_vllm"], key=lambda v: tuple(int(x) for x in re.findall(r"\d+", v)), reverse=True)
    try:
        cuda = driver_cuda()
    except SystemExit:  # no usable nvidia-smi: setup.sh refused before asking, a test or a user asks anyway
        cuda = None
    if cuda is not None:
        for version in checked:
            major = needs["cuda_major"].get(version)
            if major is None or cuda[0] >= major:
                return version
    return checked[0]


def problems(needs: dict, vllm: str, profile: str, python_version: str) -> list[str]:
    out = []
    want = tuple(needs["python"])
    try:
        have = tuple(int(x) for x in python_version.split(".")[:2])
    except ValueError:
        have = (0, 0)
    if have < want:
        out.append(
            f"Python {python_version} (PYTHON): eagle-fix and vLLM need {want[0]}.{want[1]} or newer; "
            f"set PYTHON=/path/to/python{want[0]}.{want[1]}"
        )
    devices = gpus()
    major = needs["cuda_major"].get(vllm)
    cuda = driver_cuda()
    if major and cuda and cuda[0] < major:
        driver = devices[0]["driver"] if devices else "?"
        out.append(
            f"the NVIDIA driver {driver} supports CUDA {cuda[0]}.{cuda[1]}; vLLM {vllm}'s wheel links CUDA {major} "
            f"(driver {needs['driver_min'].get(str(major), '?')} or newer): update the driver, or pin an older "
            "release with VLLM_VERSION=X"
        )
    need = needs["profiles"].get(profile)
    tp = (need or {}).get("tensor_parallel_size") or 1
    if need and devices and len(devices) < tp:
        out.append(
            f"profile {profile} runs tensor parallel over {tp} GPUs and nvidia-smi lists {len(devices)}: run it on a "
            f"box with {tp}, or choose a profile with fewer (EAGLE_FIX_PROFILE=gpu-dummy needs one)"
        )
    elif need and need["need_bytes"] and devices:
        share = need["gpu_memory_utilization"] or 0.9
        each = f" on each of its {tp} GPUs" if tp > 1 else ""
        for gpu in devices[:tp]:  # each rank's device holds its share (need_bytes is per device)
            asked = share * gpu["total"]
            where = f"GPU {gpu['index']} ({gpu['name']}, {gpu['total'] / GIB:.1f} GiB)"
            if need["need_bytes"] > asked:
                out.append(
                    f"{where}: profile {profile} needs at least {need['need_bytes'] / GIB:.1f} GiB{each} (both models' "
                    f"weights and the KV of its longest context) but gpu_memory_utilization {share:g} gives vLLM "
                    f"{asked / GIB:.1f} GiB: use a larger GPU or a smaller profile (EAGLE_FIX_PROFILE=gpu-tiny)"
                )
            elif gpu["free"] < asked:
                out.append(
                    f"{where}: {gpu['free'] / GIB:.1f} GiB free, and vLLM refuses to start profile {profile} with less "
                    f"than its gpu_memory_utilization {share:g} x total = {asked / GIB:.1f} GiB: stop the processes "
                    "nvidia-smi lists on that GPU"
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pinned", action="store_true")
    parser.add_argument("--checked")
    parser.add_argument("--vllm")
    parser.add_argument("--profile", default="gpu-dummy")
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    args = parser.parse_args(argv)
    needs = json.loads(NEEDS.read_text(encoding="utf-8"))
    if args.pinned:
        print(default_release(needs))
        return 0
    if args.checked:
        return 0 if args.checked in needs["checked_vllm"] else 1
    if args.profile not in needs["profiles"]:
        print(
            f"eagle-fix setup: EAGLE_FIX_PROFILE={args.profile} is not a CUDA profile; "
            f"choose one of {', '.join(needs['profiles'])}",
            file=sys.stderr,
        )
        return 1
    found = problems(needs, args.vllm or default_release(needs), args.profile, args.python_version)
    for line in found:
        print(f"eagle-fix setup: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
