"""scripts/publish.sh, the GPU workflow's publish step: it works on a checkout with no local `main` (a pull
request's, or a branch the release job was dispatched from), where plain `eagle-fix publish` dies in asv's
`git rev-list --first-parent main` (exit 128)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_publish_on_a_checkout_without_a_local_main(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    _git(clone, "checkout", "-q", "--detach", "HEAD")
    _git(clone, "branch", "-q", "-D", "main")
    assert _git(clone, "branch", "--list", "main") == ""
    env = {**os.environ, "PYTHON": sys.executable}
    plain = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "publish", "--no-report"],
        cwd=clone,
        env={**env, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert plain.returncode != 0 and "rev-list --first-parent main" in plain.stderr  # what the workflow hit
    proc = subprocess.run(
        ["bash", "scripts/publish.sh", "--no-report"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "publish: local branch main made from origin/main" in proc.stderr
    assert _git(clone, "rev-parse", "main") == _git(ROOT, "rev-parse", "main")
    assert (clone / "html" / "index.html").is_file()
