"""Many machines, one dashboard: the results trees a CI job matrix uploads (one job per runner, one machine
kind each) merged into one tree, which `eagle-fix publish` then draws.

asv keeps machines apart by name (results/asv/<machine>/), and the sweep's records name their machine in the
file name, so the trees of different machines meet only in asv's `benchmarks.json` (merged: the union of
the benchmarks). Any other file two trees hold with different bytes is a conflict, named in one line, and
nothing is written. Each job states its outcome in `fleet/<kind>.json` of its own tree (`job`), so a
machine whose job failed shows as failed on the dashboard, and one that uploaded nothing is named missing
(`--expect`), never silently absent."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from eagle_fix.core.errors import EagleFixError, OneLineParser
from eagle_fix.core.paths import results_dir

FLEET = "fleet"  # results/fleet/<kind>.json: one job's machine kind, runner, outcome
BENCHMARKS = Path("asv") / "benchmarks.json"
STATUSES = ("success", "failure", "cancelled", "skipped", "missing")


def tree_of(source: Path) -> Path:
    """The results tree in an uploaded artifact: its `results/` folder, or the folder itself."""
    source = Path(source)
    return results_dir(root=source) if results_dir(root=source).is_dir() else source


def check_kind(kind: str) -> None:
    """A machine kind names a file (fleet/<kind>.json): a runner's label, no '/'."""
    if not kind or "/" in kind:
        raise EagleFixError(f"machine kind {kind!r}: give the runner's kind label, e.g. h100 (no '/')")


def _read_json(path: Path) -> Any:
    """A tree's JSON file, or one line naming it: a garbled upload refuses the merge before anything is written."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        why = None if isinstance(data, dict) else "not a JSON object"
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        data, why = None, "not UTF-8" if isinstance(exc, UnicodeDecodeError) else f"not JSON (line {exc.lineno})"
    if why:
        raise EagleFixError(f"{path}: {why}; re-upload that job's results tree or leave it out; nothing was merged")
    return data


def write_job(tree: Path, *, kind: str, status: str, runner: str = "", reason: str = "", machine: str = "") -> Path:
    """The job's outcome into its tree (`fleet/<kind>.json`), written whatever happened before it. MACHINE:
    the asv machine the job recorded under (its fingerprint name); without it, every machine in the tree."""
    if status not in STATUSES:
        raise EagleFixError(f"job status {status!r}: give one of {', '.join(STATUSES)} (GitHub's job.status)")
    check_kind(kind)
    machines = (
        [machine]
        if machine
        else sorted(p.name for p in (Path(tree) / "asv").glob("*") if (p / "machine.json").is_file())
    )
    path = Path(tree) / FLEET / f"{kind}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"kind": kind, "status": status, "runner": runner, "reason": reason, "machines": machines}
    path.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def jobs(tree: Path) -> list[dict[str, Any]]:
    """Every job's outcome in a (merged) tree, by kind."""
    folder = Path(tree) / FLEET
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _plan(sources: list[Path], dest: Path) -> tuple[dict[Path, Path], dict[str, Any]]:
    """Which file of which tree goes where; a conflict raises before anything is written."""
    copies: dict[Path, Path] = {}
    benchmarks: dict[str, Any] = {}
    if (dest / BENCHMARKS).is_file():
        benchmarks.update(_read_json(dest / BENCHMARKS))
    for source in sources:
        tree = tree_of(source)
        if not tree.is_dir():
            raise EagleFixError(f"{source}: no such results tree; give the folders the jobs uploaded")
        for path in sorted(p for p in tree.rglob("*") if p.is_file()):
            rel = path.relative_to(tree)
            if rel == BENCHMARKS:
                benchmarks.update(_read_json(path))
                continue
            if rel.parts[0] == FLEET and rel.suffix == ".json":
                _read_json(path)  # read back by jobs() once merged
            earlier = copies.get(rel) or (dest / rel if (dest / rel).is_file() else None)
            if earlier is not None and earlier.read_bytes() != path.read_bytes():
                raise EagleFixError(
                    f"{rel}: {earlier} and {path} differ; two jobs wrote one file (the same machine kind or asv "
                    f"machine name twice?): give each runner its own kind label; nothing was merged"
                )
            copies.setdefault(rel, path)
    return copies, benchmarks


def merge(sources: list[Path], dest: Path, *, expect: list[str] | None = None) -> dict[str, Any]:
    """The union of the trees in `dest` (files already there are kept; identical ones count once), asv's
    benchmark list merged, and a `missing` job for every expected kind no tree accounts for."""
    dest = Path(dest)
    for kind in expect or []:
        check_kind(kind)
    copies, benchmarks = _plan([Path(s) for s in sources], dest)
    for rel, path in copies.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if not (dest / rel).is_file():
            shutil.copy2(path, dest / rel)
    if benchmarks:
        (dest / BENCHMARKS).parent.mkdir(parents=True, exist_ok=True)
        (dest / BENCHMARKS).write_text(json.dumps(benchmarks, indent=4, sort_keys=True), encoding="utf-8")
    told = {j["kind"] for j in jobs(dest)}
    for kind in expect or []:
        if kind not in told:
            write_job(dest, kind=kind, status="missing", reason="no results uploaded: the job did not run or upload")
    return {"files": len(copies), "jobs": jobs(dest)}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="scripts/merge_results.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge the jobs' results trees into one")
    m.add_argument("sources", nargs="+", type=Path, help="the folders the jobs uploaded (results/ inside, or a tree)")
    m.add_argument("--into", type=Path, required=True, help="the merged tree (e.g. results)")
    m.add_argument("--expect", default="", help="comma-separated machine kinds the matrix ran: absent ones are missing")
    j = sub.add_parser("job", help="write one job's outcome into its tree")
    j.add_argument("--tree", type=Path, default=results_dir())
    j.add_argument("--kind", required=True, help="the runner's machine kind label")
    j.add_argument("--status", required=True, help=f"one of {', '.join(STATUSES)} (GitHub's job.status)")
    j.add_argument("--runner", default="")
    j.add_argument("--reason", default="")
    j.add_argument("--machine", default="", help="the asv machine the job recorded under (default: all in the tree)")
    args = parser.parse_args(argv)
    try:
        if args.command == "job":
            print(
                write_job(
                    args.tree,
                    kind=args.kind,
                    status=args.status,
                    runner=args.runner,
                    reason=args.reason,
                    machine=args.machine,
                )
            )
            return 0
        out = merge(args.sources, args.into, expect=[k for k in args.expect.split(",") if k])
    except EagleFixError as exc:
        print(f"eagle-fix merge: {exc}", file=sys.stderr)
        return 2
    for job in out["jobs"]:
        print(f"{job['kind']}: {job['status']}{' (' + job['reason'] + ')' if job.get('reason') else ''}")
    print(f"{out['files']} files from {len(args.sources)} trees in {args.into}")
    return 0  # a failed job is on the dashboard (and failed its own CI job): the merge itself worked
