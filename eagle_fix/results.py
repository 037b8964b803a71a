"""Reading results: `eagle-fix run` JSON lines and asv results files, as records and as one DataFrame."""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

from eagle_fix import record
from eagle_fix.asv_suite import LEGACY_TRACKS, TRACKS, asv_value
from eagle_fix.errors import EagleFixError

# --------------------------------------------------------------------------- JSON lines


def load_jsonl(path: str | os.PathLike) -> list[dict]:
    """Records of one `eagle-fix run` file (eagle_fix.record.read: torn last line tolerated)."""
    return record.read(path)


def records_frame(records: Iterable[dict], *, source: str = "jsonl", origin: str | None = None):
    """A DataFrame of records, one row per point, with every record field as a column."""
    import pandas as pd

    df = pd.DataFrame([record.upgrade(r) for r in records])
    for col in record.FIELDS:
        if col not in df.columns:
            df[col] = None
    df["source"] = source
    df["origin"] = origin
    for m in record.METRICS:
        df[m.column] = pd.to_numeric(df[m.column], errors="coerce").astype(float)
    df["device_name"] = [d.get("name") if isinstance(d, dict) else d for d in df["device"]]
    return df


# --------------------------------------------------------------------------- asv results


def asv_dirs(folder: Path) -> list[Path]:
    """asv results folders under `folder`: itself, or results/asv/ inside it."""
    return [d for d in (folder, folder / "asv") if (d / "benchmarks.json").is_file() or any(d.glob("*/machine.json"))]


def _asv_result_files(results_dir: Path) -> list[Path]:
    """asv's per-machine folders are the ones holding a machine.json."""
    skip = {"machine.json", "benchmarks.json"}
    return sorted(p for d in asv_dirs(Path(results_dir)) for p in d.glob("*/*.json")
                  if p.name not in skip and (p.parent / "machine.json").is_file())


def sidecar_records(asv_file: Path, machine: str, commit: str) -> list[dict]:
    """The records of the sweep(s) behind an asv run: results/runs/<machine>-<commit8>-*.jsonl
    next to results/asv/ (eagle_fix.asv_suite.run_out_path names them)."""
    runs = asv_file.parent.parent.parent / "runs"
    found = sorted(runs.glob(f"{machine}-{commit[:8]}-*.jsonl"))
    return [r for f in found for r in record.read(f)]


def load_asv_file(path: str | os.PathLike) -> list[dict]:
    """Records (one per context_len x mode, the EAGLE3 arm) from one asv results file (format 2).

    asv's null is a failed benchmark, NaN a skipped one: a point with any failed benchmark is a
    failed record; a point with nothing but skips is not a point of that run."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # json, not a strict parser: asv writes bare NaN
    except (OSError, ValueError) as exc:
        raise EagleFixError(f"{path}: not a readable asv results file ({exc})", exit_code=2) from None
    if not isinstance(data, dict) or "results" not in data or "commit_hash" not in data:
        raise EagleFixError(f"{path}: not an asv results file (no commit_hash/results)", exit_code=2)
    columns = data.get("result_columns") or ["result", "params"]
    machine, commit = path.parent.name, data["commit_hash"]
    sidecar = sidecar_records(path, machine, commit)
    behind = {(r["context_len"], r["mode"]): r for r in sidecar if r.get("arm") == "eagle3"}
    rows: dict[tuple, dict] = {}
    for name, entry in data["results"].items():
        bench, track = name.rsplit(".", 1)[0].rsplit(".", 1)[-1], name.rsplit(".", 1)[-1]
        if bench == "Baseline":
            continue  # the baseline arm's numbers live in the sweep's own records
        if track in TRACKS:
            column, lower = TRACKS[track][0], True
        elif track in LEGACY_TRACKS:
            column, lower = LEGACY_TRACKS[track], False
        else:
            continue
        entry = dict(zip(columns, entry)) if isinstance(entry, list) else {"result": entry}
        values, params = entry.get("result"), entry.get("params") or []
        if values is None:
            values = [None] * len(list(itertools.product(*params)))
        combos = list(itertools.product(*params)) if params else [()]
        for combo, value in zip(combos, values):
            combo = [_unrepr(c) for c in combo]
            ctx, mode = (combo + [None, None])[:2]
            row = rows.setdefault((ctx, mode), {"_failed": [], "_seen": False, "per_position_acceptance": []})
            if value is None:
                row["_failed"].append(track)
                continue
            value = float(value)
            if math.isnan(value):
                continue
            row["_seen"] = True
            value = asv_value(column, value) if lower else value
            if column == "per_position_acceptance":
                pos = int(combo[2])
                ppa = row["per_position_acceptance"]
                ppa.extend([None] * (pos - len(ppa)))
                ppa[pos - 1] = value
            else:
                row[column] = value
    out = []
    for (ctx, mode), row in rows.items():
        failed, seen = row.pop("_failed"), row.pop("_seen")
        if not failed and not seen:
            continue  # skipped: a context the profile did not run is not a point
        base = behind.get((ctx, mode)) or {}
        rec = record.upgrade({**{k: base.get(k) for k in record.FIELDS if k in base}, **row})
        rec.update(context_len=ctx, mode=mode, arm="eagle3", fix=base.get("fix") or "on",
                   profile=base.get("profile") or data.get("env_vars", {}).get("EAGLE_FIX_PROFILE"),
                   git_commit=commit, timestamp=base.get("timestamp") or data.get("date"), machine_name=machine,
                   machine_id=base.get("machine_id") or machine, status="failed" if failed else "ok",
                   error=_asv_error(failed, base.get("error")) if failed else None)
        out.append(rec)
    return out


def _asv_error(failed: list[str], sweep_error: str | None) -> str:
    """Why asv's benchmarks of a point failed, with the sweep's own cause when its record says it."""
    names = sorted(set(failed))
    text = f"asv: {', '.join(names)} failed" if len(names) <= 2 else f"asv: {len(names)} benchmarks failed"
    return text + (f"; {sweep_error.splitlines()[0][:400]}" if sweep_error else "")


def _unrepr(value: Any) -> Any:
    """asv stores parameter values as their repr: '8192' -> 8192, "'eager'" -> 'eager'."""
    if not isinstance(value, str):
        return value
    try:
        import ast

        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def asv_commits(results_dir: str | os.PathLike) -> list[str]:
    """Full commit hashes that have asv results under results_dir."""
    out = set()
    for p in _asv_result_files(Path(results_dir)):
        try:
            out.add(json.loads(p.read_text(encoding="utf-8"))["commit_hash"])
        except (OSError, ValueError, KeyError) as exc:
            raise EagleFixError(f"{p}: not a readable asv results file ({exc})", exit_code=2) from None
    return sorted(out)


def load_asv_commit(results_dir: str | os.PathLike, commit: str, machine: str | None = None) -> list[dict]:
    """Records for one commit (a prefix is enough) from the asv results under results_dir."""
    results_dir = Path(results_dir)
    matches = [c for c in asv_commits(results_dir) if c.startswith(commit)]
    if not matches:
        raise EagleFixError(
            f"no asv results for commit {commit!r} in {results_dir}/ "
            "(run scripts/bench.sh, or `asv run -E existing:.venv/bin/python --set-commit-hash <commit>`, first)",
            exit_code=2,
        )
    if len(matches) > 1:
        raise EagleFixError(f"commit {commit!r} is ambiguous in {results_dir}/: {matches}", exit_code=2)
    files = [p for p in _asv_result_files(results_dir)
             if p.name.startswith(matches[0][:8]) and (machine is None or p.parent.name == machine)]
    machines = sorted({p.parent.name for p in files})
    if len(machines) > 1:
        raise EagleFixError(f"commit {commit!r} has asv results from several machines {machines}: "
                            f"pass --machine NAME (results of different machines are not one history)", exit_code=2)
    rows = [r for p in files for r in load_asv_file(p)]
    if machine and not rows:
        raise EagleFixError(f"no asv results for commit {commit!r} on machine {machine!r}", exit_code=2)
    return rows


# --------------------------------------------------------------------------- everything


def load_results(paths: Iterable[str | os.PathLike]):
    """One DataFrame of every result: JSON lines files, asv results files, or folders of either."""
    import pandas as pd

    frames = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            for f in sorted(path.rglob("*.jsonl")):
                frames.append(records_frame(record.read(f), source="jsonl", origin=str(f)))
            for f in _asv_result_files(path):
                frames.append(records_frame(load_asv_file(f), source="asv", origin=str(f)))
        elif path.suffix == ".jsonl":
            frames.append(records_frame(record.read(path), source="jsonl", origin=str(path)))
        elif path.suffix == ".json":
            frames.append(records_frame(load_asv_file(path), source="asv", origin=str(path)))
        elif not path.exists():
            raise EagleFixError(f"{path}: no such file or folder", exit_code=2)
        else:
            raise EagleFixError(
                f"{path}: expected a .jsonl (eagle-fix run), a .json (asv results) or a folder",
                exit_code=2,
            )
    frames = [f for f in frames if len(f)]
    if not frames:
        raise EagleFixError("no results found in " + ", ".join(map(str, paths)), exit_code=2)
    return pd.concat(frames, ignore_index=True)
