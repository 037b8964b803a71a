"""The README's GPU-box commands answer in one line on a machine without a GPU (nothing installed, no engine)."""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU box: these commands run there")


def _run(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env}, check=False
    )


def test_setup_gpu_without_a_gpu_is_one_line():
    proc = _run(["bash", "scripts/setup.sh", "--gpu"])
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs an NVIDIA GPU" in lines[0] and "scripts/setup.sh" in lines[0], proc.stderr


def test_bench_with_a_cuda_profile_without_a_gpu_is_one_line():
    proc = _run(["bash", "scripts/bench.sh"], EAGLE_FIX_PROFILE="gpu-tiny")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        (
            "bench: profile 'gpu-tiny' runs on CUDA and torch sees no GPU here; on this machine use --profile cpu or "
            "cpu-quick (on a GPU box: scripts/setup.sh --gpu)"
        )
    ], proc.stderr


# A fake nvidia-smi: one GPU whose driver, CUDA and memory the test sets (FAKE_*), so the checks after "is there
# a GPU" run here. Every case below fails before setup.sh touches .venv.
FAKE_SMI = """#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)";;
  --query-gpu=*) i=0; while [ $i -lt ${FAKE_GPUS:-1} ]; do
      echo "$i, NVIDIA H100 80GB HBM3, ${FAKE_DRIVER:-580.65}, ${FAKE_TOTAL:-81559}, ${FAKE_FREE:-81000}"; i=$((i+1)); done;;
  *) echo "| NVIDIA-SMI ${FAKE_DRIVER:-580.65}   Driver Version: ${FAKE_DRIVER:-580.65}   CUDA Version: ${FAKE_CUDA:-13.0} |";;
esac
"""
# A PYTHON that says it is 3.10 when asked its version and is the real one otherwise.
FAKE_PY = """#!/bin/sh
case "$*" in *version_info*) echo 3.10;; *) exec python3 "$@";; esac
"""


@pytest.fixture
def fake_gpu(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in (("nvidia-smi", FAKE_SMI), ("python-3.10", FAKE_PY)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    return bin_


def _setup_gpu(fake_gpu, **env):
    before = (ROOT / ".venv" / "setup.log").stat().st_mtime if (ROOT / ".venv" / "setup.log").exists() else None
    proc = _run(["bash", "scripts/setup.sh", "--gpu"], PATH=f"{fake_gpu}:{os.environ['PATH']}", **env)
    after = (ROOT / ".venv" / "setup.log").stat().st_mtime if (ROOT / ".venv" / "setup.log").exists() else None
    assert before == after  # failed before installing anything
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stderr.strip().splitlines()


def test_setup_gpu_refuses_an_old_python_in_one_line(fake_gpu):
    lines = _setup_gpu(fake_gpu, PYTHON=str(fake_gpu / "python-3.10"))
    assert lines == [
        "eagle-fix setup: Python 3.10 (PYTHON): eagle-fix and vLLM need 3.11 or newer; set PYTHON=/path/to/python3.11"
    ]


def test_setup_gpu_refuses_a_driver_older_than_the_wheels_cuda(fake_gpu):
    from eagle_fix.releases.registry import setup_default

    (line,) = _setup_gpu(fake_gpu, FAKE_CUDA="12.4", FAKE_DRIVER="550.54")
    assert line.startswith(  # every checked release links CUDA 13: the newest is named
        f"eagle-fix setup: the NVIDIA driver 550.54 supports CUDA 12.4; vLLM {setup_default().version}'s wheel links "
        "CUDA 13"
    )
    assert "driver 580 or newer" in line and "VLLM_VERSION=X" in line


def test_setup_gpu_refuses_a_gpu_too_small_or_too_busy_for_the_profile(fake_gpu):
    (small,) = _setup_gpu(fake_gpu, FAKE_TOTAL="24576", FAKE_FREE="24000")
    assert "profile gpu-dummy needs at least 36.4 GiB" in small and "EAGLE_FIX_PROFILE=gpu-tiny" in small, small
    (busy,) = _setup_gpu(fake_gpu, FAKE_FREE="30000")
    assert "29.3 GiB free, and vLLM refuses to start profile gpu-dummy" in busy and "0.9 x total = 71.7 GiB" in busy


def test_the_preflight_counts_the_gpus_and_the_share_of_each_for_a_tensor_parallel_profile(fake_gpu):
    env = {"PATH": f"{fake_gpu}:{os.environ['PATH']}"}
    args = ["python3", "scripts/gpu_preflight.py", "--vllm", "0.33.0", "--profile"]
    one = _run([*args, "gpu-70b-tp4"], **env)
    assert one.returncode == 1
    assert one.stderr.strip().splitlines() == [
        (
            "eagle-fix setup: profile gpu-70b-tp4 runs tensor parallel over 4 GPUs and nvidia-smi lists 1: run it on a "
            "box with 4, or choose a profile with fewer (EAGLE_FIX_PROFILE=gpu-dummy needs one)"
        )
    ]
    assert _run([*args, "gpu-70b-tp4"], FAKE_GPUS="4", **env).returncode == 0  # 46.2 GiB of 71.7 on each H100
    small = _run([*args, "gpu-70b-tp8"], FAKE_GPUS="8", FAKE_TOTAL="24576", FAKE_FREE="24000", **env)
    lines = small.stderr.strip().splitlines()
    assert small.returncode == 1 and len(lines) == 8, small.stderr  # one line per device that cannot hold its share
    assert "profile gpu-70b-tp8 needs at least 23.1 GiB on each of its 8 GPUs" in lines[0], lines[0]


def test_the_preflight_passes_a_box_that_fits_and_names_the_default_release(fake_gpu):
    env = {"PATH": f"{fake_gpu}:{os.environ['PATH']}"}
    ok = _run(["python3", "scripts/gpu_preflight.py", "--vllm", "0.33.0", "--profile", "gpu-tiny"], **env)
    assert ok.returncode == 0 and not ok.stderr, ok.stderr
    from eagle_fix.releases.registry import newest, setup_default

    assert setup_default() == newest("vllm")  # the newest CUDA release of the registry
    assert _run(["python3", "scripts/gpu_preflight.py", "--pinned"]).stdout.strip() == setup_default().version
    assert _run(["python3", "scripts/gpu_preflight.py", "--pinned"], **env).stdout.strip() == setup_default().version
    assert _run(["python3", "scripts/gpu_preflight.py", "--checked", "0.33.0"]).returncode == 0
    assert _run(["python3", "scripts/gpu_preflight.py", "--checked", "0.34.0"]).returncode == 0
    assert _run(["python3", "scripts/gpu_preflight.py", "--checked", "0.99.0"]).returncode == 1
    bad = _run(["python3", "scripts/gpu_preflight.py", "--profile", "cpu"], **env)
    assert bad.returncode == 1 and "is not a CUDA profile" in bad.stderr


def test_the_default_release_is_the_newest_the_driver_runs(monkeypatch):
    """Without VLLM_VERSION setup takes the newest checked release whose wheel's CUDA the driver supports (every
    registered one links CUDA 13 today, so a mixed list is made up here); none runs: the newest, which the
    preflight then refuses in one line naming the driver."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_preflight", ROOT / "scripts" / "gpu_preflight.py")
    preflight = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(preflight)
    needs = {"checked_vllm": ["0.9.0", "0.10.0", "0.11.0"], "cuda_major": {"0.9.0": 12, "0.10.0": 12, "0.11.0": 13}}
    for cuda, picked in (((13, 0), "0.11.0"), ((12, 8), "0.10.0"), ((11, 8), "0.11.0"), (None, "0.11.0")):
        monkeypatch.setattr(preflight, "driver_cuda", lambda cuda=cuda: cuda)
        assert preflight.default_release(needs) == picked, cuda


# a .venv Python that installs nothing: it logs what setup.sh asked of it and answers as a working venv would
FAKE_VENV_PY = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../calls.log"
case "$*" in
  *"import vllm, torch"*) echo "eagle-fix setup: vllm ${FAKE_VLLM:-?}, torch 2.14.0: ok";;
esac
exit 0
"""


@pytest.mark.parametrize("asked", ["0.34.0", None], ids=["VLLM_VERSION=0.34.0", "default"])
def test_setup_gpu_with_vllm_0_34_passes_its_checks(fake_gpu, tmp_path, asked):
    """`VLLM_VERSION=0.34.0 scripts/setup.sh --gpu` (and the default, now 0.34.0) on a box that fits: the
    preflight passes, pip is asked for vllm==0.34.0 and, the release being a checked one, the hooks test is not
    rerun; setup.sh copied into a scratch root with a fake .venv, so nothing is installed."""
    root = tmp_path / "root"
    for rel in ("scripts/setup.sh", "scripts/gpu_preflight.py", "eagle_fix/data/gpu_needs.json"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text((ROOT / rel).read_text())
    (root / ".venv" / "bin").mkdir(parents=True)
    for name in ("python", "eagle-fix"):
        (root / ".venv" / "bin" / name).write_text(FAKE_VENV_PY)
        (root / ".venv" / "bin" / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_gpu}:{os.environ['PATH']}", "EAGLE_FIX_PROFILE": "gpu-tiny"}
    env.pop("VLLM_VERSION", None)
    env.update({"FAKE_VLLM": "0.34.0", **({"VLLM_VERSION": asked} if asked else {})})
    cmd = ["bash", str(root / "scripts" / "setup.sh"), "--gpu"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = (root / ".venv" / "calls.log").read_text().splitlines()
    (install,) = [c for c in calls if c.startswith("-m pip install") and "-e" in c.split()]
    assert install.endswith("vllm==0.34.0"), install
    assert not [c for c in calls if "pytest" in c], calls  # a checked release: no hooks test at install time
    assert "eagle-fix setup: vllm 0.34.0, torch 2.14.0: ok" in proc.stdout
    assert "not in eagle_fix/releases/registry.py" not in proc.stdout


def test_the_preflights_needs_file_is_current():
    """scripts/gpu_preflight.py reads what the registry and the profiles say, through a file it can read
    without the venv: regenerated by `python -m eagle_fix.releases.gpu_needs --write`."""
    import json

    from eagle_fix.releases.gpu_needs import NEEDS_FILE, needs

    assert json.loads(NEEDS_FILE.read_text()) == needs(), "run: python -m eagle_fix.releases.gpu_needs --write"


# ---------------------------------------------------------------- set-up that fails in one line (no install)
# scripts/setup.sh copied into a scratch root (it works in the folder above its own), run with fake Pythons:
# nothing here installs anything or touches the checkout's .venv.

# a PYTHON of 3.11 without ensurepip (Debian/Ubuntu without python3.11-venv); `-m venv` would half-make .venv
NO_ENSUREPIP = """#!/bin/sh
case "$*" in
  *version_info*) echo 3.11;;
  *ensurepip*) echo "ModuleNotFoundError: No module named 'ensurepip'" >&2; exit 1;;
  *"-m venv"*) mkdir -p .venv/bin; echo "Error: ensurepip is not available" >&2; exit 1;;
  *) exit 3;;
esac
"""
# a venv Python whose pip works but whose vllm does not import (the install 'succeeds', the import check fails)
NO_VLLM = """#!/bin/sh
case "$*" in
  *"import pip"*|"-m pip"*) exit 0;;
  *"import vllm"*) echo "Traceback (most recent call last):" >&2; echo "ModuleNotFoundError: No module named 'vllm'" >&2; exit 1;;
  *) exit 3;;
esac
"""


def _scratch_setup(tmp_path, venv_python: str | None = None):
    root = tmp_path / "root"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "setup.sh").write_text((ROOT / "scripts" / "setup.sh").read_text())
    if venv_python is not None:
        (root / ".venv" / "bin").mkdir(parents=True)
        (root / ".venv" / "bin" / "python").write_text(venv_python)
        (root / ".venv" / "bin" / "python").chmod(0o755)
    return root


def _files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_setup_names_a_python_without_ensurepip_before_making_anything(tmp_path):
    root = _scratch_setup(tmp_path)
    py = tmp_path / "python3.11"
    py.write_text(NO_ENSUREPIP)
    py.chmod(0o755)
    before = _files(root)
    proc = _run(["bash", str(root / "scripts" / "setup.sh")], PYTHON=str(py))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        (
            f"eagle-fix setup: {py} (Python 3.11) has no ensurepip, so its venv cannot put pip in .venv; install it "
            "(Debian/Ubuntu: sudo apt-get install python3.11-venv) or set PYTHON to a Python that has it"
        )
    ], proc.stderr
    assert _files(root) == before  # no .venv, half-made or otherwise


@pytest.mark.parametrize("venv_python", ["#!/bin/sh\nexit 1\n", None], ids=["no-pip", "python-gone"])
def test_setup_names_a_half_made_venv_and_the_fix(tmp_path, venv_python):
    root = _scratch_setup(tmp_path, venv_python if venv_python is not None else "")
    if venv_python is None:  # a .venv whose interpreter is gone (a link to a removed Python)
        (root / ".venv" / "bin" / "python").unlink()
        (root / ".venv" / "bin" / "python").symlink_to(tmp_path / "removed-python")
    before = _files(root)
    proc = _run(["bash", str(root / "scripts" / "setup.sh")])
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("eagle-fix setup: .venv is half-made") and "rm -rf .venv" in line, line
    assert _files(root) == before  # nothing installed into it, no log written


def test_setup_says_why_the_import_check_failed(tmp_path):
    root = _scratch_setup(tmp_path, NO_VLLM)
    proc = _run(["bash", str(root / "scripts" / "setup.sh")])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        (
            "eagle-fix setup: import vllm, torch fails in .venv: ModuleNotFoundError: No module named 'vllm' "
            "(traceback: .venv/setup.log)"
        )
    ], proc.stderr
    assert "Traceback" in (root / ".venv" / "setup.log").read_text()
