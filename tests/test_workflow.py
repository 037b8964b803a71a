"""The GitHub Actions workflows pass two offline audits from PyPI (the `dev` extra):

- zizmor's security audit (`zizmor --offline .github/workflows/`): no finding above informational
  (unpinned actions, broad token permissions, credentials persisted into artifacts, template
  injection, ...). Ignore comments and config files are not honoured here, so nothing can be
  silenced in the workflow itself.
- check-jsonschema against SchemaStore's workflow schema (`--builtin-schema vendor.github-workflows`,
  bundled with the tool, so no download).

Both tools are run from the bin directory of the Python running the tests (the project's venv)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
# Not resolved: a venv's python is often a link to the system interpreter, whose bin has no tools.
BIN = Path(sys.executable).parent
ALLOWED_SEVERITY = {"informational"}


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: install the dev extra (pip install -e '.[dev]')")
    return str(path)


def zizmor_findings(root: Path) -> list[dict]:
    """zizmor's findings on ROOT/.github/workflows/, from its JSON output. --no-exit-codes: the exit
    status then only says whether the tool itself failed; the findings are judged here."""
    proc = subprocess.run(
        [
            tool("zizmor"),
            "--offline",
            "--no-config",
            "--no-ignores",
            "--no-exit-codes",
            "--no-progress",
            "--strict-collection",
            "--format",
            "json",
            ".github/workflows/",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        check=False,
    )
    assert proc.returncode == 0, f"zizmor failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    findings = json.loads(proc.stdout)
    assert isinstance(findings, list), proc.stdout[:500]
    return findings


def above_informational(findings: list[dict]) -> list[str]:
    """One line per finding above informational: audit, severity, file:line, annotation."""
    bad = []
    for f in findings:
        severity = f["determinations"]["severity"]  # a KeyError means zizmor's JSON changed shape
        if str(severity).lower() in ALLOWED_SEVERITY:
            continue
        where = []
        for loc in f.get("locations", []):
            sym, conc = loc.get("symbolic", {}), loc.get("concrete", {})
            path = sym.get("key", {}).get("Local", {}).get("verbatim_path", "?")
            row = conc.get("location", {}).get("start_point", {}).get("row")
            where.append(f"{path}:{row + 1 if isinstance(row, int) else '?'} {sym.get('annotation', '')}".strip())
        bad.append(f"{f['ident']} ({severity}): {f.get('desc', '')} at {'; '.join(where) or '?'}")
    return bad


def workflow_files() -> list[Path]:
    files = sorted([*WORKFLOWS.glob("*.yml"), *WORKFLOWS.glob("*.yaml")])
    assert files, f"no workflow in {WORKFLOWS}"
    return files


def test_zizmor_no_finding_above_informational():
    workflow_files()
    bad = above_informational(zizmor_findings(ROOT))
    assert not bad, "zizmor --offline .github/workflows/:\n" + "\n".join(bad)


def test_zizmor_check_is_not_vacuous(tmp_path):
    """The same invocation and parsing do report a known finding (an action pinned by tag, a
    checkout keeping its token): a zizmor that collected nothing, or JSON of another shape, would
    otherwise pass the test above."""
    wf = tmp_path / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "canary.yml").write_text(
        "name: canary\non: push\npermissions: {}\njobs:\n  build:\n    runs-on: ubuntu-latest\n"
        "    steps:\n      - uses: actions/checkout@v4\n"
    )
    bad = above_informational(zizmor_findings(tmp_path))
    assert any(line.startswith("unpinned-uses") for line in bad), bad


def test_workflows_match_the_github_workflow_schema():
    files = workflow_files()
    proc = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, (
        f"check-jsonschema (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
