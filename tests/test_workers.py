"""How the README's test command shares the work between two pytest-xdist workers (tests/conftest.py): a module
goes whole to one worker, the modules sharing asv_runs together, the longest first; each worker's engines bind
their compute thread to the worker's own core. Checked on a real two-worker run of a few fast modules."""

import ast
import os
import re
import subprocess
import sys

import pytest

import conftest
from conftest import ROOT

# fast modules with several tests each: the run below finishes in seconds
MODULES = ("tests/core/test_nested.py", "tests/test_layers.py", "tests/gate/test_noise.py")


def test_the_modules_that_read_asv_runs_are_one_unit():
    """Every module with a test that takes the fixture (read from its syntax tree) is in the shared unit."""
    users = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and "asv_runs" in [a.arg for a in node.args.args]:
                users.add(str(path.relative_to(ROOT)))
    assert "tests/publish/test_dashboard.py" in users and len(users) >= 3, users
    assert users == conftest.SHARED_FIXTURE_MODULES
    assert {conftest._unit(f"{m}::test_x") for m in users} == {"asv_runs"}
    assert conftest._unit("tests/engine/test_engine.py::test_x[a::b]") == "tests/engine/test_engine.py"


def test_the_committed_ci_profile_orders_the_units():
    seconds = conftest._seconds_by_unit()
    assert seconds, "no per-test profile in results/ci/"
    top = sorted(seconds, key=seconds.get, reverse=True)[:3]
    assert "asv_runs" in top and "tests/engine/test_engine.py" in top, top


def pytest_run(*argv: str, cwd=ROOT, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_CPU_OMP_THREADS_BIND", "PYTEST_XDIST_WORKER")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-o", "addopts=", *argv]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=600, check=False)


def test_two_workers_keep_each_module_whole():
    proc = pytest_run("-v", *MODULES)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    where: dict[str, set[str]] = {}
    for worker, module in re.findall(r"\[(gw\d)\] .*?(tests/\S+?\.py)::", proc.stdout):
        where.setdefault(module, set()).add(worker)
    assert set(where) == set(MODULES), proc.stdout[-3000:]
    assert all(len(w) == 1 for w in where.values()), where
    assert len(set().union(*where.values())) == 2, where  # both workers got work


def test_each_worker_binds_its_engines_to_its_own_core(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable core: the workers share it and vLLM's own bind stays")
    for name in ("a", "b"):  # two modules: one per worker; a worker's output does not reach the controller
        (tmp_path / f"test_bind_{name}.py").write_text(
            "import os\nfrom pathlib import Path\n\n\ndef test_bind():\n"
            "    worker = os.environ['PYTEST_XDIST_WORKER']\n"
            "    Path(__file__).with_name('bind-' + worker).write_text(str(os.environ.get('VLLM_CPU_OMP_THREADS_BIND')))\n"
        )
    # -p conftest: this suite's conftest.py as a plugin of a run rooted elsewhere
    proc = pytest_run("-p", "conftest", ".", cwd=tmp_path, pythonpath=str(ROOT / "tests"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    binds = {f.name.removeprefix("bind-"): f.read_text() for f in tmp_path.glob("bind-*")}
    assert set(binds) == {"gw0", "gw1"}, proc.stdout[-2000:]
    assert "None" not in binds.values() and binds["gw0"] != binds["gw1"], binds  # never two workers on one core
