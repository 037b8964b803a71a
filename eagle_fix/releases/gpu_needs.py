"""What a CUDA box needs before `scripts/setup.sh --gpu` pulls gigabytes: the Python, the driver's CUDA for
the release's wheel, and the GPU memory each CUDA profile's engine takes. Written to one JSON file
(eagle_fix/data/gpu_needs.json) that scripts/gpu_preflight.py reads with the standard library alone, before
any venv exists; `python -m eagle_fix.releases.gpu_needs --write` regenerates it and a test holds it current."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from eagle_fix.pairs.profiles import PROFILES
from eagle_fix.releases import registry
from eagle_fix.sweep.road import need_bytes_per_device

NEEDS_FILE = Path(__file__).resolve().parents[1] / "data" / "gpu_needs.json"
PYTHON = (3, 11)  # pyproject's requires-python, and vLLM 0.33's
# The oldest Linux driver that runs each CUDA major (NVIDIA's CUDA compatibility table, "minimum
# required driver version" of the toolkit's first release).
DRIVER_MIN = {12: 525, 13: 580}


def needs() -> dict[str, Any]:
    cuda = registry.of(registry.CUDA)
    return {
        "python": list(PYTHON),
        # every release the suite checked, oldest first: setup.sh --gpu installs the newest (registry.setup_default)
        # and the preflight falls back along them where the driver is too old for it
        "checked_vllm": [r.version for r in sorted(cuda, key=lambda r: registry.version_key(r.version))],
        "cuda_major": {r.version: r.cuda_major for r in cuda if r.cuda_major},
        "driver_min": {str(k): v for k, v in DRIVER_MIN.items()},
        "profiles": {
            name: {
                "gpu_memory_utilization": p.gpu_memory_utilization,
                "tensor_parallel_size": p.tensor_parallel_size,
                "need_bytes": need_bytes_per_device(p),  # on each of its tensor_parallel_size GPUs
            }
            for name, p in sorted(PROFILES.items())
            if p.device == "cuda"
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle_fix.releases.gpu_needs", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"rewrite {NEEDS_FILE.name}")
    args = parser.parse_args(argv)
    text = json.dumps(needs(), indent=2, sort_keys=True) + "\n"
    if args.write:
        NEEDS_FILE.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
