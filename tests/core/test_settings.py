"""Every environment variable the suite reads is declared once (eagle_fix.core.settings), with what it does
and its default, and the docs' list of them is that declaration's table."""

import re
import subprocess

from conftest import ROOT
from eagle_fix.core import settings

NAME = re.compile(r"EAGLE_FIX_[A-Z0-9_]+")


def test_every_variable_used_anywhere_is_declared():
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    used: dict[str, str] = {}
    for name in tracked:
        if name.startswith(("results/", "docs/")) or not name.endswith((".py", ".sh", ".yml", ".json", ".toml", "run")):
            continue
        path = ROOT / name
        if path.is_file():
            for found in NAME.findall(path.read_text(encoding="utf-8", errors="replace")):
                used.setdefault(found, name)
    undeclared = {n: where for n, where in used.items() if n not in settings.SETTING}
    # names that end in `_` are prefixes a test filters by (EAGLE_FIX_INJECT_...)
    undeclared = {n: w for n, w in undeclared.items() if not any(s.startswith(n) for s in settings.SETTING)}
    assert not undeclared, f"declare these in eagle_fix/core/settings.py: {undeclared}"


def test_each_declaration_says_what_it_does_and_its_default():
    for s in settings.SETTINGS:
        assert s.name.startswith("EAGLE_FIX_") and s.meaning and s.default and s.read_by, s
        assert s.kind in ("user", "calibration", "internal"), s
    assert len(settings.SETTING) == len(settings.SETTINGS), "a name declared twice"


def test_the_docs_table_is_the_declaration():
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert "<!-- eagle-fix report --table settings -->" in text
    for s in settings.SETTINGS:
        assert f"`{s.name}`" in text, s.name


def test_get_refuses_an_undeclared_name(monkeypatch):
    monkeypatch.setenv("EAGLE_FIX_MODE", "off")
    assert settings.get("EAGLE_FIX_MODE") == "off"
    try:
        settings.get("EAGLE_FIX_" + "NO_SUCH")  # spelled apart: the scan above reads this file too
    except KeyError as exc:
        assert "not declared" in str(exc)
    else:
        raise AssertionError("an undeclared name was read")
