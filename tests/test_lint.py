"""The code is clean by the configured linter and formatted by its formatter (ruff, pyproject.toml's
settings): run by the README's test command, so CI fails on a new warning or an unformatted file."""

import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from conftest import ROOT

RUFF = Path(sys.executable).with_name("ruff")


@pytest.mark.parametrize(
    "command", [["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]], ids=["lint", "format"]
)
def test_ruff_is_clean(command):
    if not RUFF.exists():
        pytest.fail(f"{RUFF} is missing: scripts/setup.sh installs ruff with the dev extra")
    out = subprocess.run([str(RUFF), *command], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]


def test_a_noqa_says_why():
    """No blanket ignores: a `noqa` comment names its rules and says why after them."""
    rule = re.compile(r"#\s*noqa:\s*[A-Z]+[0-9]+(?:,\s*[A-Z]+[0-9]+)*\s+\S.{2,}")
    bare = []
    for path in sorted(ROOT.glob("**/*.py")):
        if any(part in (".venv", ".venvs", "build", "html", "results") for part in path.relative_to(ROOT).parts):
            continue
        with open(path, "rb") as f:
            comments = [t for t in tokenize.tokenize(f.readline) if t.type == tokenize.COMMENT and "noqa" in t.string]
        bare += [f"{path.relative_to(ROOT)}:{t.start[0]}: {t.string}" for t in comments if not rule.search(t.string)]
    assert not bare, "give each noqa its rules and a reason:\n" + "\n".join(bare)
