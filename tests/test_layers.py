"""The package reads as the data flow: each module imports only modules of its own stage or earlier ones
(lazy imports inside functions count too), and no two modules import each other, directly or around a
circle. A new module must be given a stage here, so the check cannot be side-stepped."""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "eagle_fix"
# Stage by stage, earliest first. A module may import from its own stage or an earlier one.
STAGES = (
    ("base", {"errors", "stats", "lifecycle", "__init__"}),
    ("the fix", {"fix", "checkpoint", "plugin", "doctor"}),
    ("the models", {"models", "workload", "training"}),
    ("the point and its judgement", {"record", "verdict"}),
    ("the engine", {"memory", "measure", "engine", "child", "machine"}),
    ("the run", {"plan", "sweep", "ab", "run_cli", "asv_suite", "releases", "matrix", "serve", "map"}),
    ("the results", {"results", "compare", "calibration"}),
    ("what people see", {"report", "dashboard", "cli"}),
)
STAGE = {module: i for i, (_, modules) in enumerate(STAGES) for module in modules}


def imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (at module level or inside functions)."""
    graph = {}
    for path in sorted(PACKAGE.glob("*.py")):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "eagle_fix":
                parts = node.module.split(".")
                found.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("eagle_fix."))
        graph[path.stem] = {m for m in found if m != path.stem and (PACKAGE / f"{m}.py").is_file()}
    return graph


def test_every_module_has_a_stage():
    missing = sorted(set(imports()) - set(STAGE))
    assert not missing, f"give these modules a stage in tests/test_layers.py: {missing}"


def test_no_import_runs_back_up():
    upward = [f"{m} ({STAGES[STAGE[m]][0]}) imports {d} ({STAGES[STAGE[d]][0]})"
              for m, deps in imports().items() for d in sorted(deps) if m in STAGE and d in STAGE and STAGE[d] > STAGE[m]]
    assert not upward, "imports that run back up the data flow:\n" + "\n".join(upward)


def test_no_circle():
    graph = imports()
    circles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                circles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_check_sees_an_upward_import_and_a_circle(tmp_path, monkeypatch):
    """The checks above can fail: a fake package with an upward import and a circle is caught."""
    pkg = tmp_path / "eagle_fix"
    pkg.mkdir()
    (pkg / "errors.py").write_text("from eagle_fix import report\n")  # base imports the last stage
    (pkg / "report.py").write_text("def f():\n    from eagle_fix.errors import X\n")  # and back: a circle
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    graph = imports()
    assert graph == {"errors": {"report"}, "report": {"errors"}}
    for check in (test_no_import_runs_back_up, test_no_circle):
        try:
            check()
        except AssertionError:
            continue
        raise AssertionError(f"{check.__name__} did not fail on a bad package")
