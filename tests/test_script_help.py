"""Every script runs (#56): `scripts/*.py --help` exits 0 with a usage line, and every name a script imports
from eagle_fix exists, inside functions too (harness_overhead.py once failed on import after a move)."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))


def test_there_are_scripts():
    assert len(SCRIPTS) >= 6, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_exits_0_with_a_usage_line(script):
    proc = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.lstrip().startswith("usage:"), proc.stdout[:500]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def eagle_fix_imports(path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of each `from eagle_fix... import name` and `import eagle_fix...` in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "eagle_fix":
            out += [(node.lineno, node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "eagle_fix"]
    return out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_eagle_fix_name_a_script_imports_exists(script):
    missing = []
    for line, module, name in eagle_fix_imports(script):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"line {line}: {module} ({exc})")
            continue
        if name is not None and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"line {line}: {module} has no {name}")
    assert not missing, f"{script.name}: " + "; ".join(missing)


def test_the_import_check_sees_imports_inside_functions(tmp_path):
    """The check above would have caught harness_overhead.py's `engine_spec` from eagle_fix.sweep.loop."""
    script = tmp_path / "old.py"
    script.write_text("def main():\n    from eagle_fix.sweep.loop import engine_spec\n")
    assert eagle_fix_imports(script) == [(2, "eagle_fix.sweep.loop", "engine_spec")]
    assert not hasattr(importlib.import_module("eagle_fix.sweep.loop"), "engine_spec")


SHELL_SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shell_script_help_exits_0_before_doing_anything(script, tmp_path):
    """Each script answers --help from its header (or its command's help) at once: nothing built, run or
    installed (PR_GATE_DIR, CALIBRATE_OUT point into an empty tmp folder that must stay empty)."""
    env = {**os.environ, "PR_GATE_DIR": str(tmp_path / "gate"), "CALIBRATE_OUT": str(tmp_path / "cal")}
    proc = subprocess.run(
        ["bash", str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"scripts/{script.name}" in proc.stdout or proc.stdout.lstrip().startswith("usage:"), proc.stdout[:800]
    assert not list(tmp_path.iterdir())
