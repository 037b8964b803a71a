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
import os
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


# ------------------------------------------------------------------ gpu.yml: what its steps do (#52)
# The steps' own scripts, run here with bash as GitHub runs them (-eo pipefail), in a scratch root with fakes
# for the GPU, the Python and scripts/setup.sh; the job conditions evaluated for each event.

GPU_YML = WORKFLOWS / "gpu.yml"


def _jobs() -> dict:
    import yaml

    return yaml.safe_load(GPU_YML.read_text())["jobs"]


def _step(job: str, name_starts: str) -> dict:
    (step,) = [s for s in _jobs()[job]["steps"] if str(s.get("name", "")).startswith(name_starts)]
    return step


def _github_if(expression: str, **contexts) -> bool:
    """A job's `if:` evaluated for the given contexts; the expression may use only always(), ==, !=, &&, ||,
    parentheses, quoted strings and context paths (what gpu.yml's conditions use)."""
    import re
    import types

    expr = " ".join(expression.split())
    allowed = r"(always\(\)|&&|\|\||==|!=|\(|\)|'[^']*'|[A-Za-z_][A-Za-z_.]*|\s+)"
    assert re.fullmatch(f"{allowed}+", expr), f"an expression this test cannot evaluate: {expr}"
    py = expr.replace("always()", "True").replace("&&", " and ").replace("||", " or ")

    def ns(value):
        return types.SimpleNamespace(**{k: ns(v) for k, v in value.items()}) if isinstance(value, dict) else value

    return bool(eval(py, {"__builtins__": {}}, {k: ns(v) for k, v in contexts.items()}))


@pytest.mark.parametrize(
    "event, ref, bench_result, publishes",
    [
        ("push", "refs/heads/main", "success", True),
        ("push", "refs/heads/main", "failure", True),  # failed kinds are named on the dashboard
        ("workflow_dispatch", "refs/heads/main", "success", True),
        ("schedule", "refs/heads/main", "skipped", False),  # the weekly release matrix: no benchmark ran
        ("push", "refs/heads/main", "cancelled", False),
        ("pull_request", "refs/pull/1/merge", "success", False),
        ("push", "refs/heads/other", "success", False),
    ],
)
def test_the_dashboard_is_published_only_after_a_benchmark_that_ran(event, ref, bench_result, publishes):
    condition = _jobs()["publish"]["if"]
    said = _github_if(
        condition, github={"event_name": event, "ref": ref}, needs={"benchmark": {"result": bench_result}}
    )
    assert said is publishes, f"{event} {ref} benchmark {bench_result}: publish {said}; if: {condition}"


def test_no_uploaded_results_publish_nothing_and_gh_pages_keeps_its_files(tmp_path):
    merge = _step("publish", "Merge the machine kinds")
    out = tmp_path / "github_output"
    (tmp_path / "artifacts").mkdir()  # download-artifact found no kind's results
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", merge["run"]],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(out), "GPU_RUNNER_KINDS": '["h100"]'},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().splitlines() == ["publish=no"] and "kept as it is" in proc.stdout
    assert not (tmp_path / ".venv").exists()  # stopped before installing anything
    publish = _step("publish", "Publish the dashboard")
    assert publish["if"] == f"steps.{merge['id']}.outputs.publish == 'yes'"
    assert publish["with"]["keep_files"] is True  # files of kinds this run lacks stay on gh-pages


# `python3 -m venv DIR` makes a venv whose python imports pip; the venv's python answers what the step asks
FAKE_PYTHON3 = """#!/bin/sh
echo "python3 $*" >> "$CALLS"
[ "$1 $2" = "-m venv" ] || exit 3
mkdir -p "$3/bin" && cp "$FAKE_VENV_PYTHON" "$3/bin/python" && touch "$3/bin/pip-ok"
"""
FAKE_VENV_PYTHON = """#!/bin/sh
case "$*" in
  *"import pip"*) [ -f "$(dirname "$0")/pip-ok" ];;
  *importlib.metadata*) echo "$VLLM_VERSION";;
  *"import vllm"*) echo "vllm $VLLM_VERSION torch 2.13.0 cuda 13.0";;
  *) exit 3;;
esac
"""
SETUP_STUB = """#!/bin/sh
echo "setup.sh $* VLLM_VERSION=$VLLM_VERSION .venv=$(readlink .venv)" >> "$CALLS"
"""


def _install(tmp_path, workspace: str, store) -> dict:
    """The benchmark job's install step in workspace WORKSPACE (a scratch root), kept venvs under STORE;
    returns what it wrote to GITHUB_ENV."""
    bin_, root = tmp_path / "bin", tmp_path / workspace
    for folder in (bin_, root / "scripts"):
        folder.mkdir(parents=True, exist_ok=True)
    for path, text in (
        (bin_ / "python3", FAKE_PYTHON3),
        (bin_ / "venv-python", FAKE_VENV_PYTHON),
        (bin_ / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA H100, 580.65, 81559 MiB'\n"),
        (root / "scripts" / "setup.sh", SETUP_STUB),
    ):
        path.write_text(text)
        path.chmod(0o755)
    env_file = root / "github_env"
    env_file.write_text("")
    step = _step("benchmark", "Set up the environment")
    proc = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", step["run"]],
        cwd=root,
        env={
            "PATH": f"{bin_}:/usr/bin:/bin",
            "VLLM_VERSION": "0.99.0",
            "VENV_STORE": str(store),
            "GITHUB_ENV": str(env_file),
            "GITHUB_STEP_SUMMARY": str(root / "summary"),
            "CALLS": str(tmp_path / "calls"),
            "FAKE_VENV_PYTHON": str(bin_ / "venv-python"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines())


def test_the_install_step_keeps_one_venv_per_workspace_and_runs_the_gpu_setup(tmp_path):
    store = tmp_path / "store" / "venvs"
    one = _install(tmp_path, "runner-1/work", store)
    two = _install(tmp_path, "runner-2/work", store)  # a second runner under the same user
    assert one["EAGLE_FIX_VENV"] != two["EAGLE_FIX_VENV"] and one["VENV_WORKSPACE"] != two["VENV_WORKSPACE"]
    for env in (one, two):
        assert Path(env["EAGLE_FIX_VENV"]).parent == Path(env["VENV_WORKSPACE"])
        assert Path(env["VENV_WORKSPACE"]).parent == store
    calls = (tmp_path / "calls").read_text().splitlines()
    made = [c for c in calls if c.startswith("python3 -m venv")]
    assert len(made) == 2, calls
    # scripts/setup.sh --gpu (the preflight, the import check, the hooks test outside the registry) into the kept venv
    setups = [c for c in calls if c.startswith("setup.sh")]
    assert setups == [f"setup.sh --gpu VLLM_VERSION=0.99.0 .venv={env['EAGLE_FIX_VENV']}" for env in (one, two)]
    # the same workspace again reuses its venv; a kept venv left without pip is made again
    (tmp_path / "calls").unlink()
    _install(tmp_path, "runner-1/work", store)
    assert not [c for c in (tmp_path / "calls").read_text().splitlines() if c.startswith("python3")]
    (Path(one["EAGLE_FIX_VENV"]) / "bin" / "pip-ok").unlink()
    _install(tmp_path, "runner-1/work", store)
    assert f"python3 -m venv {one['EAGLE_FIX_VENV']}" in (tmp_path / "calls").read_text().splitlines()


def test_the_gpu_setup_runs_the_hooks_test_for_a_release_outside_the_registry(tmp_path):
    """What the install step relies on: scripts/setup.sh --gpu with a vLLM the registry does not list runs
    tests/fix/test_hooks.py in the venv and refuses, in one line, when the hooks fail (a fake GPU and a fake
    venv whose install 'succeeds'; nothing is installed)."""
    root = tmp_path / "root"
    for rel in ("scripts/setup.sh", "scripts/gpu_preflight.py", "eagle_fix/data/gpu_needs.json"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text((ROOT / rel).read_text())
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    smi = (
        '#!/bin/sh\ncase "$*" in\n  -L) echo "GPU 0: NVIDIA H100";;\n'
        '  --query-gpu=*) echo "0, NVIDIA H100 80GB HBM3, 580.65, 81559, 81000";;\n'
        '  *) echo "| Driver Version: 580.65   CUDA Version: 13.0 |";;\nesac\n'
    )
    venv_python = (
        '#!/bin/sh\necho "$*" >> "$CALLS"\ncase "$*" in\n  *"import pip"*|"-m pip"*) exit 0;;\n'
        '  *"import vllm"*) echo "eagle-fix setup: vllm 0.99.0, torch 2.13.0: ok";;\n'
        '  *pytest*) echo "FAILED tests/fix/test_hooks.py"; exit 1;;\n  *) exit 3;;\nesac\n'
    )
    (root / ".venv" / "bin").mkdir(parents=True)
    for path, text in ((bin_ / "nvidia-smi", smi), (root / ".venv" / "bin" / "python", venv_python)):
        path.write_text(text)
        path.chmod(0o755)
    calls = tmp_path / "calls"
    proc = subprocess.run(
        ["bash", str(root / "scripts" / "setup.sh"), "--gpu"],
        cwd=root,
        env={**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "VLLM_VERSION": "0.99.0", "CALLS": str(calls)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    hooks = [c for c in calls.read_text().splitlines() if "pytest" in c]
    assert hooks and hooks[0].endswith("tests/fix/test_hooks.py"), calls.read_text()
    (line,) = proc.stderr.strip().splitlines()
    assert "the plugin's hooks fail against vLLM 0.99.0" in line and "VLLM_VERSION=" in line, line


def test_the_pr_gate_keeps_the_newest_merge_bases(tmp_path):
    import os as _os

    from eagle_fix.releases.venvs import prune_pr_gate

    for age, base in enumerate(["aaaa", "bbbb", "cccc", "dddd", "eeee"]):  # aaaa the newest
        for kind in ("checkout", "venv"):
            (tmp_path / f"{kind}-{base}").mkdir()
            _os.utime(tmp_path / f"{kind}-{base}", (1e9 - age * 100, 1e9 - age * 100))
    (tmp_path / "notes.txt").write_text("not a base")
    removed = prune_pr_gate(tmp_path, keep=2, current="eeee")  # the base in use stays, however old
    assert sorted(p.name for p in removed) == [f"{k}-{b}" for k in ("checkout", "venv") for b in ("cccc", "dddd")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{k}-{b}" for k in ("checkout", "venv") for b in ("aaaa", "bbbb", "eeee")] + ["notes.txt"]
    )
    script = (ROOT / "scripts" / "pr_gate.sh").read_text()
    assert 'eagle_fix.releases.venvs prune-pr-gate "$WORK" --keep "${PR_GATE_KEEP:-3}"' in script
