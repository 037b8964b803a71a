"""The docs tell what the committed results say: every table is regenerated from committed files,
and the README stays a five-minute read that opens with the two commands."""

from __future__ import annotations

import re

from conftest import ROOT
from eagle_fix.publish.docs import BEGIN, END, doc_blocks, update_docs

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "archive").glob("*.md"))]
LARGEST_MD = 40 * 1024  # bytes: a page a person reads; history goes to docs/archive/, detail to reference pages


def test_every_generated_table_equals_the_reports_output():
    stale = update_docs(ROOT, check=True)
    assert not stale, "regenerate with `eagle-fix report --docs`: " + "; ".join(stale)


def test_every_table_in_the_docs_is_generated():
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        generated = [(s, e) for s, e, _, _ in doc_blocks(text)]
        pos = 0
        for line in text.splitlines(keepends=True):
            if line.startswith("|"):
                assert any(s <= pos < e for s, e in generated), (
                    f"{doc.name}: a table not made by `eagle-fix report --table`: {line.strip()}"
                )
            pos += len(line)
        assert text.count(BEGIN) == text.count(END), doc.name


def test_readme_is_short_and_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 10 * 1024
    block = re.search(r"```bash\n(.*?)```", text, re.DOTALL).group(1).strip().splitlines()
    assert text.index("```bash") < 20
    assert block[0].startswith("scripts/setup.sh && ") and "scripts/bench.sh" in block[0]
    assert block[1].startswith("scripts/setup.sh --with-browser && .venv/bin/python -m pytest")
    # CI runs the README's test command as written (its options too: -n 2 is CI's budget)
    command = block[1].split("#")[0].strip()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command in [line.strip() for line in ci], (command, ci)


def test_docs_link_to_files_that_exist():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / target).is_file(), f"{doc.name} links to missing {target}"


def test_the_code_the_docs_name_exists():
    """Every `eagle_fix/...py` file and `eagle_fix.module.name` the README and the docs name is there: a
    module that moved leaves no stale pointer behind."""
    import importlib
    import re as _re

    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for path in set(_re.findall(r"eagle_fix/[\w/]+\.py", text)):
            if not (ROOT / path).is_file():
                missing.append(f"{doc.name}: {path}")
        for dotted in set(_re.findall(r"(?<![\w/])eagle_fix(?:\.\w+)+", text)):
            parts = dotted.split(".")
            for cut in range(len(parts), 0, -1):
                try:
                    obj = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                try:
                    for name in parts[cut:]:
                        obj = getattr(obj, name)
                except AttributeError:
                    missing.append(f"{doc.name}: {dotted}")
                break
            else:
                missing.append(f"{doc.name}: {dotted}")
    assert not missing, "\n".join(sorted(missing))


def test_no_tracked_markdown_file_is_over_40_kb():
    from conftest import git

    big = [
        f"{name}: {size} bytes"
        for name in git("ls-files", "-co", "--exclude-standard", "*.md").split()
        if (ROOT / name).is_file() and (size := (ROOT / name).stat().st_size) > LARGEST_MD
    ]
    assert not big, f"over {LARGEST_MD} bytes (split it, move history to docs/archive/): " + "; ".join(big)


def test_the_user_guide_covers_what_a_user_does():
    """docs/guide.md: set up, run, read the dashboard and the report, gate a change, a GPU box, CI; the README
    links to it and stays well under its limit, so the next feature does not force a cut."""
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    assert len(guide.encode()) <= LARGEST_MD
    heads = re.findall(r"^## (.+)$", guide, re.MULTILINE)
    for want in ("Set up", "Run", "Read the dashboard", "Read the report", "Gate a change", "Run on a GPU box", "CI"):
        assert want in heads, heads
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/guide.md)" in readme
    assert len(readme.encode()) <= 8 * 1024, len(readme.encode())
