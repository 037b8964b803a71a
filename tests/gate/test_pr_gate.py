"""scripts/pr_gate.sh, the pull-request gate of the GPU workflow: `eagle-fix ab` between the merge base (its
own checkout and venv) and the head, run here on the quick CPU profile."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import ROOT, git


@pytest.mark.engine
def test_the_pr_gate_runs_ab_between_the_merge_base_in_its_own_checkout_and_the_head(tmp_path):
    """The base (here HEAD~1) checked out as a git worktree with a venv of its own (sharing the head venv's
    vLLM: PR_GATE_SHARE_PACKAGES=1), `eagle-fix ab` between it and the head with two rounds. The wiring is
    checked, not the verdict: each side ran its own checkout, both engines ran."""
    base, head = git("rev-parse", "HEAD~1"), git("rev-parse", "HEAD")
    gate, out = tmp_path / "gate", tmp_path / "ab.json"
    env = {**os.environ, "BASE_REF": "HEAD~1", "PR_GATE_DIR": str(gate), "PR_GATE_SHARE_PACKAGES": "1"}
    args = ["--profile", "cpu-quick", "--contexts", "4096", "--modes", "eager", "--arms", "eagle3"]
    try:
        proc = subprocess.run(
            ["bash", "scripts/pr_gate.sh", *args, "--rounds", "2", "--blocks", "1", "--acceptance-prompts", "2"]
            + ["--out", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        assert f"pr_gate: base {base[:12]}" in proc.stderr
        ab = json.loads(out.read_text())
        assert ab["base"]["git_commit"] == base and ab["new"]["git_commit"] == head
        assert ab["base"]["eagle_fix_path"].startswith(str(gate / f"checkout-{base[:12]}"))
        assert ab["base"]["python"].startswith(str(gate / f"venv-{base[:12]}"))
        assert ab["points"][0]["status"] == {"base": "ok", "new": "ok"}
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(gate / f"checkout-{base[:12]}")], cwd=ROOT, check=False
        )
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)


def test_the_pr_gate_without_a_merge_base_is_one_line(tmp_path):
    proc = subprocess.run(
        ["bash", "scripts/pr_gate.sh", "--profile", "cpu-quick"],
        cwd=ROOT,
        env={**os.environ, "BASE_REF": "no-such-ref", "PR_GATE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "pr_gate: no merge base of HEAD and no-such-ref: fetch it (git fetch origin main) or set BASE_REF"
    )


def _gate(tmp_path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "scripts/pr_gate.sh", *argv],
        cwd=ROOT,
        env={**os.environ, "BASE_REF": "HEAD~1", "PR_GATE_DIR": str(tmp_path / "gate"), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_refused_argument_exits_2_never_1(tmp_path):
    """`ab --rounds -3` through the gate: refused by ab before any engine starts, and the gate's exit says
    "cannot judge" (2), never "regression" (1): CI must not read a typo as a regression."""
    base = git("rev-parse", "HEAD~1")
    try:
        proc = _gate(tmp_path, "--profile", "cpu-quick", "--rounds", "-3", PR_GATE_SHARE_PACKAGES="1")
        assert proc.returncode == 2, proc.stderr[-2000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("eagle-fix ab: error: --rounds '-3'") and "Traceback" not in proc.stderr, last
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(tmp_path / "gate" / f"checkout-{base[:12]}")],
            cwd=ROOT,
            check=False,
        )
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)


def test_a_missing_python_exits_2(tmp_path):
    proc = _gate(tmp_path, "--profile", "cpu-quick", PYTHON=str(tmp_path / "no-python"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"pr_gate: PYTHON={tmp_path / 'no-python'} is not an")
