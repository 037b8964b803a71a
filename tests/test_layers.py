"""The package reads as the data flow: one sub-package per stage, each importing only its own stage or earlier
ones (imports inside functions count too), and no module importing another around a circle. A new
sub-package or root module must be given a place here, so the check cannot be side-stepped."""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "eagle_fix"
# The stages, earliest first: a module may import from its own stage or an earlier one.
STAGES = ("core", "fix", "pairs", "machine", "engine", "sweep", "store", "gate", "served", "releases", "publish")
# Modules beside the stages: the package's face, the command line over every stage, and the compatibility
# shims that keep module paths written into venvs installed before the split (the plugin's entry point, the
# worker extension) working. They come after every stage; nothing imports them.
TOP = ("__init__", "cli", "plugin", "memory")


def module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def modules(package: Path) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def imports(package: Path | None = None) -> dict[str, set[str]]:
    """Module (dotted, inside the package) -> the package's modules it imports, anywhere in its body."""
    package = package or PACKAGE
    found_modules = modules(package)
    graph = {}
    for name, path in found_modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and node.module.split(".")[0] == package.name
            ):
                base = node.module.split(".", 1)[1] if "." in node.module else ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}" if base else alias.name
                    targets.append(sub if sub in found_modules else base or "__init__")
            elif isinstance(node, ast.Import):
                targets += [a.name.split(".", 1)[1] for a in node.names if a.name.startswith(package.name + ".")]
            found.update(t for t in targets if t in found_modules)
        graph[name] = found - {name}
    return graph


def stage(module: str) -> int | None:
    """The module's place: its sub-package's index, after every stage for the top modules, None if unplaced."""
    head = module.split(".")[0]
    if head in STAGES:
        return STAGES.index(head)
    if module in TOP:
        return len(STAGES)
    return None


def test_every_module_has_a_stage():
    missing = sorted(m for m in imports() if stage(m) is None)
    assert not missing, f"put these in a stage's sub-package, or give them a place in tests/test_layers.py: {missing}"


def test_no_import_runs_back_up():
    upward = [
        f"{m} imports {d}"
        for m, deps in imports().items()
        for d in sorted(deps)
        if stage(m) is not None and stage(d) is not None and stage(d) > stage(m)
    ]
    assert not upward, "imports that run back up the data flow:\n" + "\n".join(upward)


def test_nothing_imports_the_top():
    """The face, the command line and the shims are entered from outside, never from a stage."""
    wrong = [f"{m} imports {d}" for m, deps in imports().items() for d in deps if d in TOP and d != "__init__"]
    assert not wrong, "\n".join(wrong)


def test_no_circle():
    graph = imports()
    circles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                circles.append(" -> ".join(path[path.index(dep) :] + [dep]))
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
    for folder in ("core", "publish"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "core" / "errors.py").write_text(
        "from eagle_fix.publish import report\n"
    )  # the first stage imports the last
    (pkg / "publish" / "report.py").write_text("def f():\n    from eagle_fix.core.errors import X\n")  # and back
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    graph = imports()
    assert graph["core.errors"] == {"publish.report"} and graph["publish.report"] == {"core.errors"}
    for check in (test_no_import_runs_back_up, test_no_circle):
        try:
            check()
        except AssertionError:
            continue
        raise AssertionError(f"{check.__name__} did not fail on a bad package")


def test_our_imports_sit_at_the_top_of_each_module():
    """An import of our own modules inside a function hides the wiring (the layers above would not see it
    run up or around a circle): every one is at module level."""
    hidden = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                if any(n == "eagle_fix" or n.startswith("eagle_fix.") for n in names):
                    hidden.append(f"{path.relative_to(ROOT)}:{node.lineno} in {fn.name}()")
    assert not hidden, "move these imports to the module's top:\n" + "\n".join(sorted(set(hidden)))


def test_the_command_line_answers_without_vllm_or_torch():
    """`eagle-fix --help` and `eagle-fix doctor --help` import every command's module: none of them may
    import vLLM or torch (or pandas and matplotlib) at module level."""
    import subprocess
    import sys

    code = (
        "import sys, eagle_fix.cli as c; c.build_parser(); "
        "print(sorted(m for m in ('vllm', 'torch', 'pandas', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout


def test_no_module_is_a_warehouse():
    """A module holds one concern: none is longer than 500 lines (split it along its seams)."""
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long
