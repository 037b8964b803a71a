"""Shared test fixtures: paths, a subprocess runner for per-process plugin modes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_CONFIGS = ROOT.parent / "shared" / "data" / "configs"


def real_shape_pair() -> tuple[Path, Path]:
    """The original report's target/draft configs (config.json only), shipped in the package."""
    from eagle_fix.pairs.profiles import real_shape_configs

    return real_shape_configs()


def default_signals() -> None:
    """preexec_fn for a command under test: SIGINT/SIGTERM/SIGHUP at their defaults, as from a terminal.
    A pytest started in the background (nohup, `&`) would pass an ignored SIGINT/SIGHUP on, and
    eagle_fix.engine.lifecycle leaves an ignored signal alone by design."""
    import signal

    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def run_py(
    code: str, *, mode: str | None = None, timeout: int = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run Python in a fresh process: vLLM loads plugins once per process, so each mode needs its own."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    if mode is not None:
        full_env["EAGLE_FIX_MODE"] = mode
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=ROOT,
        check=False,
    )


def eagle_fix_cli(*argv: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`eagle-fix ARGV` as a user runs it, offline, from the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        check=False,
    )


def eagle_fix_run(*args: str, env: dict | None = None, timeout: int = 3600) -> subprocess.CompletedProcess:
    """`eagle-fix run ARGS --no-progress` (the engine tests)."""
    return eagle_fix_cli("run", *args, "--no-progress", env=env, timeout=timeout)


def run_records(tmp_path_factory, name: str, *args: str, key: str = "arm") -> tuple[dict, subprocess.CompletedProcess]:
    """`eagle-fix run ARGS` into a scratch file that must exit 0: its records by `key` (the arm, or the fix arm
    where one arm runs several), and the process (for what it printed). The engine tests' module fixtures."""
    from eagle_fix.core import record

    out = tmp_path_factory.mktemp(name) / f"{name}.jsonl"
    proc = eagle_fix_run(*args, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r[key]: r for r in record.read(out)}, proc


def run_script(script: str, *args: str, cwd: Path = ROOT, env: dict | None = None, timeout: int = 300):
    """A bash script of scripts/ as a user runs it, in `cwd` (the checkout, or a copy of one)."""
    return subprocess.run(
        ["bash", script, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


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
    conf.update(
        repo=str(ROOT),
        results_dir=str(results),
        html_dir=str(html),
        benchmark_dir=str(ROOT / "benchmarks"),
        env_dir=str(tmp / "env"),
    )
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf))
    return path


@pytest.fixture
def launch_sd(tmp_path, monkeypatch):
    """A recorded launch variance for the test points' machine and point kind (eagle-fix noise's file), in
    a scratch folder: `compare` judges one launch a side against it."""
    from eagle_fix.gate import components

    def record(sigma=0.005, machine="m", profile="cpu-quick", arm="eagle3", sigma_round=0.02):
        """`sigma`: the launch sd (and its bound); the analysis of variance a test pools is that of 20 launch
        pairs of 5 rounds (compare's repeats): block_var = sigma^2 + sigma_round^2 / 5 on 19 df."""
        folder = tmp_path / "gate"
        data = {
            "schema": 1,
            "kind": components.KIND,
            "machine": machine,
            "machine_id": machine,
            "point": {"profile": profile, "context_len": 8192, "mode": "eager", "arm": arm},
            "metrics": {
                "step_ms": {
                    "sigma_launch": sigma,
                    "sigma_launch_upper": sigma,
                    "sigma_round": sigma_round,
                    "start_order": 0.0,
                    "trials": 10,
                    "blocks": 20,
                    "rounds": 100,
                    "block_var": sigma**2 + sigma_round**2 / 5,
                    "df_launch": 19,
                    "df_round": 80,
                    "rounds_per_block": 5,
                }
            },
        }
        components.write(data, folder)
        monkeypatch.setattr(components, "FOLDER", folder)
        return folder

    monkeypatch.setattr(components, "FOLDER", tmp_path / "no-gate")  # nothing recorded unless a test says so
    return record


@pytest.fixture(scope="session")
def shared_pair() -> tuple[Path, Path]:
    return real_shape_pair()


# The modules that use the session fixture asv_runs are one unit of work under xdist, so its engine runs
# once (each worker has its own session); every other module is a unit of its own.
SHARED_FIXTURE_MODULES = frozenset(
    str(p.relative_to(ROOT))
    for p in (ROOT / "tests").rglob("test_*.py")
    if re.search(r"def \w+\([^)]*\basv_runs\b", p.read_text(encoding="utf-8"))
)
# Per-test seconds of earlier CI runs (results/ci/): the order the workers take the units in.
CI_PROFILES = ROOT / "results" / "ci"


def _unit(nodeid: str) -> str:
    module = nodeid.split("::")[0]
    return "asv_runs" if module in SHARED_FIXTURE_MODULES else module


def _seconds_by_unit() -> dict[str, float]:
    """Each unit's mean seconds over the committed CI profiles (module::test,seconds,outcome per file)."""
    import pandas as pd

    runs = [pd.read_csv(f) for f in sorted(CI_PROFILES.glob("*.csv"))]
    if not runs:
        return {}
    units = [r["test"].str.split("::").str[0].str.replace(".", "/", regex=False) + ".py" for r in runs]
    per_run = [r.assign(unit=u.map(_unit)).groupby("unit")["seconds"].sum() for r, u in zip(runs, units)]
    return pd.concat(per_run, axis=1).mean(axis=1).to_dict()


@pytest.hookimpl(optionalhook=True)  # a run without xdist (-p no:xdist) does not know this hook
def pytest_xdist_make_scheduler(config, log):
    """Under xdist (`-n 2`, the README's test command) a unit (`_unit`) goes whole to one worker, so a
    module's engine fixtures start once; the units are dealt in the order the workers collected them
    (longest first: `pytest_collection_modifyitems`), so the two workers end close together. xdist's own
    `--dist loadgroup` cannot do this on pytest 9 (its group suffix is no longer part of the test id)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    config.option.loadscopereorder = False
    return ByUnit(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """`slow` tests (the 8B pair at real shapes, minutes each) run only when -m names them: a plain
    run, CI and `-m "not engine"` all skip them. In an xdist worker the units go longest first."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        seconds = _seconds_by_unit()
        items.sort(key=lambda item: -seconds.get(_unit(item.nodeid), 0.0))  # stable: a module keeps its order
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: select with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    """An xdist worker's engines bind vLLM's compute thread (VLLM_CPU_OMP_THREADS_BIND) to the worker's own
    share of the cores: with two workers on two cores, two engines side by side each keep one core (left to
    vLLM's auto bind, both would take core 0). A bind the caller set is kept."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker or count < 2 or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= count:
        share = cpus[int(worker.removeprefix("gw")) % count :: count]
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, share))


# CI-sized samples of the asv runs: 3 decode repeats of 128 tokens per point (the profile's own: 5 x 512).
ASV_KNOBS = {"EAGLE_FIX_PROFILE": "cpu-quick", "EAGLE_FIX_REPEATS": "3", "EAGLE_FIX_OUTPUT_LEN": "128"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()


class AsvRuns(NamedTuple):
    tmp: Path  # the scratch folder: results/asv, results/runs, html
    results: Path  # its asv results folder
    conf: Path  # the asv config pointing there
    commits: dict  # fix arm -> the commit its run was recorded under
    outs: dict  # fix arm -> the sweep's JSON lines
    logs: dict  # fix arm -> what scripts/bench.sh printed
    machine: str  # the asv machine name (this machine's fingerprint)


@pytest.fixture(scope="session")
def asv_runs(tmp_path_factory):
    """The README's main job on its smallest grid, twice, in a scratch folder (the committed results/ are
    never touched): `scripts/bench.sh` of cpu-quick recorded under HEAD~1 with the fix on, and under HEAD
    with it off (the EAGLE3 arm alone). One pair of engine runs per pytest run, shared by every test that reads them (tests/
    test_asv.py, the dashboard after a run, the README's two commands in order)."""
    from eagle_fix.store.asv import asv_machine_name

    tmp = tmp_path_factory.mktemp("asv")
    results = tmp / "results" / "asv"
    conf = asv_conf(tmp, results, tmp / "html")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "asv_machine.py")], check=True, capture_output=True, cwd=ROOT
    )
    machine = asv_machine_name()
    commits = {"on": git("rev-parse", "HEAD~1"), "off": git("rev-parse", "HEAD")}
    outs, logs = {}, {}
    for fix, commit in commits.items():
        out = tmp / "results" / "runs" / f"{machine}-{commit[:8]}-cpu-quick{'' if fix == 'on' else '-fix-off'}.jsonl"
        env = {
            **os.environ,
            **ASV_KNOBS,
            "EAGLE_FIX_ASV_FIX": fix,
            # The fix-off run measures the EAGLE3 arm alone (the baseline does not take the fix; the fix-on
            # run has it): two engine starts fewer, its speedup n/a, not failed.
            **({} if fix == "on" else {"EAGLE_FIX_ASV_ARMS": "eagle3"}),
            "EAGLE_FIX_RUN_OUT": str(out),
            "EAGLE_FIX_ASV_CONFIG": str(conf),
            "EAGLE_FIX_COMMIT": commit,
        }
        run = subprocess.run(
            ["bash", str(ROOT / "scripts" / "bench.sh")],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=3600,
            check=False,
        )
        # asv run exits 2 when a benchmark failed: with the fix off the compiled EAGLE3 point must
        expected = 0 if fix == "on" else 2
        assert run.returncode == expected, run.stdout[-4000:] + run.stderr[-4000:]
        outs[fix], logs[fix] = out, run.stdout + run.stderr
    return AsvRuns(tmp, results, conf, commits, outs, logs, machine)
