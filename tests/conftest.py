"""Shared test fixtures: paths, a subprocess runner for per-process plugin modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_CONFIGS = ROOT.parent / "shared" / "data" / "configs"


def real_shape_pair() -> tuple[Path, Path]:
    """The original report's target/draft configs (config.json only), shipped in the package."""
    from eagle_fix.models import real_shape_configs

    return real_shape_configs()


def default_signals() -> None:
    """preexec_fn for a command under test: SIGINT/SIGTERM/SIGHUP at their defaults, as from a terminal.
    A pytest started in the background (nohup, `&`) would pass an ignored SIGINT/SIGHUP on, and
    eagle_fix.lifecycle leaves an ignored signal alone by design."""
    import signal

    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def run_py(code: str, *, mode: str | None = None, timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run Python in a fresh process: vLLM loads plugins once per process, so each mode needs its own."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    if mode is not None:
        full_env["EAGLE_FIX_MODE"] = mode
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=ROOT)


def last_json(stdout: str) -> dict:
    """The last line of stdout that is a JSON object (vLLM may print before it)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in output:\n{stdout[-2000:]}")


def asv_conf(tmp: Path, results: Path, html: Path) -> Path:
    """The project's asv.conf.json with absolute repo/results/html paths, so nothing lands in the checkout."""
    from asv import util

    conf = util.load_json(ROOT / "asv.conf.json", js_comments=True)
    conf.update(repo=str(ROOT), results_dir=str(results), html_dir=str(html),
                benchmark_dir=str(ROOT / "benchmarks"), env_dir=str(tmp / "env"))
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf))
    return path


@pytest.fixture(scope="session")
def shared_pair() -> tuple[Path, Path]:
    return real_shape_pair()


def pytest_collection_modifyitems(config, items):
    """`slow` tests (the 8B pair at real shapes, minutes each) run only when -m names them: a plain
    run, CI and `-m "not engine"` all skip them."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: select with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
