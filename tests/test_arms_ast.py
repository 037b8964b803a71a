"""Outside eagle_fix/core/ no module compares an arm or a fix arm with its name spelled out (issue #54): a
site asks the registry (`arms.speculates(name)`, `.takes_fix`, `is_baseline`, `fix_arm(f).plugin_mode`), so
a new arm lands on the same side everywhere. Checked on the syntax tree: `==`, `!=`, `in`, `not in` and
`match`/`case` against a string literal that is a registered name (alone or in a tuple, list or set), or
against a module-level constant spelled like one (of the module itself, or imported from another)."""

import ast
from pathlib import Path

import pytest

from eagle_fix.core import arms

ROOT = Path(__file__).resolve().parents[1] / "eagle_fix"
NAMES = frozenset(arms.ARMS) | frozenset(arms.FIX_ARMS)
COMPARE_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _spelled(node: ast.AST) -> bool:
    """A string literal that is a registered name, or a tuple/list/set holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_spelled(e) for e in node.elts)
    return False


def module_constants(tree: ast.Module) -> set[str]:
    """The module-level names bound to a registered name (or a tuple of them) in this module."""
    out = set()
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if value is not None and _spelled(value):
            out |= {t.id for t in targets if isinstance(t, ast.Name)}
    return out


def violations(source: str, name: str = "<source>", imported: dict[str, set[str]] | None = None) -> list[str]:
    """Each comparison of SOURCE with a spelled-out arm or fix-arm name, as `name:line: code`.
    `imported`: module (dotted) -> its spelled constants, to follow `from module import CONST`."""
    tree = ast.parse(source)
    consts = set(module_constants(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in (imported or {}):
            consts |= {a.asname or a.name for a in node.names if a.name in imported[node.module]}

    def spelled(n: ast.AST) -> bool:
        return _spelled(n) or (isinstance(n, ast.Name) and n.id in consts)

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, COMPARE_OPS) for op in node.ops):
            operands = [node.left, *node.comparators]
            if any(spelled(o) for o in operands) and not all(isinstance(o, ast.Constant) for o in operands):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.match_case):
            for p in ast.walk(node.pattern):
                if isinstance(p, ast.MatchValue) and spelled(p.value):
                    found.append(f"{name}:{node.pattern.lineno}: case {ast.unparse(p.value)}")
    return found


def _modules() -> dict[str, tuple[Path, str]]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        out[".".join(rel.with_suffix("").parts)] = (rel, path.read_text())
    return out


def test_no_module_outside_core_spells_an_arm_in_a_comparison():
    modules = _modules()
    imported = {m: module_constants(ast.parse(src)) for m, (_, src) in modules.items()}
    bad = [
        v
        for m, (rel, src) in modules.items()
        if rel.parts[1] != "core"
        for v in violations(src, str(rel), {k: c for k, c in imported.items() if c})
    ]
    assert not bad, "compare through eagle_fix.core.arms instead:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source",
    [
        'if rec["arm"] == "eagle3": pass',
        'ok = r.get("fix") != "on"',
        "ok = arm in ('baseline', 'x')",
        'ok = "ngram" in run.arms',
        'ok = fix not in {"off", "upstream"}',
        'BASE = "baseline"\ndef f(a):\n    return a == BASE',
        'match arm:\n    case "eagle3":\n        pass',
        'match fix:\n    case "off" | "upstream":\n        pass',
    ],
)
def test_the_checker_catches_a_planted_comparison(source):
    assert violations(source)


def test_the_checker_follows_an_imported_constant_and_leaves_registry_questions_alone():
    planted = "from eagle_fix.x import EAGLE\ndef f(a):\n    return a == EAGLE"
    assert violations(planted, imported={"eagle_fix.x": {"EAGLE"}})
    assert not violations(planted, imported={"eagle_fix.x": set()})
    clean = (
        "from eagle_fix.core import arms\n"
        "ok = arms.speculates(r['arm']) and arms.arm(a) is arms.BASELINE and mode == 'eager'\n"
        "label = 'eagle3'\n"  # a name as a value (a default, a label) is no comparison
        "same = 'on' == 'on'\n"
    )
    assert not violations(clean)
