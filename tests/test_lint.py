"""The code is clean by the configured linter and formatted by its formatter (ruff, pyproject.toml's
settings): run by the README's test command, so CI fails on a new warning or an unformatted file."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

RUFF = Path(sys.executable).with_name("ruff")


@pytest.mark.parametrize("command", [["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]],
                         ids=["lint", "format"])
def test_ruff_is_clean(command):
    if not RUFF.exists():
        pytest.fail(f"{RUFF} is missing: scripts/setup.sh installs ruff with the dev extra")
    out = subprocess.run([str(RUFF), *command], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]


def test_a_noqa_says_why():
    """No blanket ignores: a `noqa` names its rule and says why after it."""
    bare = []
    for path in sorted(ROOT.glob("**/*.py")):
        if any(part in (".venv", ".venvs", "build", "html", "results") for part in path.relative_to(ROOT).parts):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "# noqa" in line:
                tail = line.split("# noqa", 1)[1]
                if not tail.startswith(":") or not any(c in tail for c in "(-—") and "#" not in tail[1:]:
                    bare.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bare, "give each noqa its rule and a reason:\n" + "\n".join(bare)
