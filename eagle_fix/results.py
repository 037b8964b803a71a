"""Results in one place: `eagle-fix run` JSON lines and asv results files, loaded into one DataFrame."""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from eagle_fix.errors import EagleFixError

# Points are matched across runs by these; one row of the DataFrame per key (per source).
KEY_COLUMNS = ("context_len", "mode", "arm", "fix")


@dataclass(frozen=True)
class Metric:
    """A number a sweep point carries, and which way is better (compare gates on it)."""

    column: str
    label: str
    unit: str
    higher_is_better: bool


METRICS: tuple[Metric, ...] = (
    Metric("output_throughput_tok_s", "output throughput", "tok/s", True),
    Metric("decode_throughput_tok_s", "decode throughput", "tok/s", True),
    Metric("acceptance_length", "acceptance length", "tokens", True),
    Metric("speedup", "speedup vs baseline", "x", True),
    Metric("drafter_coverage", "drafter coverage", "fraction", True),
    Metric("peak_gpu_memory_bytes", "peak GPU memory", "bytes", False),
    Metric("peak_host_memory_bytes", "peak host memory", "bytes", False),
    Metric("ttft_s", "TTFT", "s", False),
)
METRICS_BY_COLUMN = {m.column: m for m in METRICS}

# asv track_* name (the part after the last dot) -> DataFrame column. The benchmarks in
# benchmarks/bench_eagle.py are named after these; per-position acceptance is its own case.
ASV_TRACKS = {
    "track_output_throughput": "output_throughput_tok_s",
    "track_decode_throughput": "decode_throughput_tok_s",
    "track_acceptance_length": "acceptance_length",
    "track_speedup": "speedup",
    "track_drafter_coverage": "drafter_coverage",
    "track_peak_gpu_memory": "peak_gpu_memory_bytes",
    "track_kv_cache_capacity": "kv_cache_capacity_tokens",
    "track_ttft": "ttft_s",
    "track_per_position_acceptance": "per_position_acceptance",
}
# asv's benchmarks describe the EAGLE3 arm with the fix on (speedup already divides by baseline).
ASV_ARM, ASV_FIX = "eagle3", "on"


# --------------------------------------------------------------------------- JSON lines


def load_jsonl(path: str | os.PathLike) -> list[dict]:
    """Records of one `eagle-fix run` file; a truncated last line (a run killed mid-write) is dropped."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise EagleFixError(f"{path}: no such file", exit_code=2) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EagleFixError(f"{path}: cannot read ({exc})", exit_code=2) from None
    while lines and not lines[-1].strip():
        lines.pop()
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines):
                warnings.warn(f"{path}:{i}: truncated last line dropped ({exc.msg})", stacklevel=2)
                break
            raise EagleFixError(
                f"{path}:{i}: not a JSON line ({exc.msg}); is this an `eagle-fix run` output file?",
                exit_code=2,
            ) from None
        if not isinstance(rec, dict) or "context_len" not in rec or "mode" not in rec:
            raise EagleFixError(
                f"{path}:{i}: not an `eagle-fix run` record (needs context_len and mode)", exit_code=2
            )
        records.append(rec)
    return records


def records_frame(records: Iterable[dict], *, source: str = "jsonl", origin: str | None = None):
    """A DataFrame of sweep records, one row per point, with the columns every consumer expects."""
    import pandas as pd

    df = pd.DataFrame(list(records))
    for col in (*KEY_COLUMNS, "profile", "status", "error", "git_commit", "vllm_version", "timestamp",
                "per_position_acceptance", *METRICS_BY_COLUMN, "kv_cache_capacity_tokens"):
        if col not in df.columns:
            df[col] = None
    if "machine" not in df.columns:
        df["machine"] = None
    df["source"] = source
    df["origin"] = origin
    for col in (*METRICS_BY_COLUMN, "kv_cache_capacity_tokens"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    if "device" in df.columns:
        df["device_name"] = [d.get("name") if isinstance(d, dict) else d for d in df["device"]]
    else:
        df["device_name"] = None
    return df


# --------------------------------------------------------------------------- asv results


def _asv_result_files(results_dir: Path) -> list[Path]:
    """asv's per-machine folders are the ones holding a machine.json (results/pytest-benchmark and
    results/runs are not asv's)."""
    skip = {"machine.json", "benchmarks.json"}
    return sorted(
        p for p in results_dir.glob("*/*.json")
        if p.name not in skip and (p.parent / "machine.json").is_file()
    )


def load_asv_file(path: str | os.PathLike) -> list[dict]:
    """Wide rows (one per context_len x mode) from one asv results file (format version 2)."""
    path = Path(path)
    try:
        # json (not a strict parser): asv writes bare NaN.
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EagleFixError(f"{path}: not a readable asv results file ({exc})", exit_code=2) from None
    if not isinstance(data, dict) or "results" not in data or "commit_hash" not in data:
        raise EagleFixError(f"{path}: not an asv results file (no commit_hash/results)", exit_code=2)
    columns = data.get("result_columns") or ["result", "params"]
    machine = path.parent.name
    profile = data.get("env_vars", {}).get("EAGLE_FIX_PROFILE") or _sidecar_profile(path.parent.parent,
                                                                                 machine, data["commit_hash"])
    rows: dict[tuple, dict] = {}
    for name, entry in data["results"].items():
        track = name.rsplit(".", 1)[-1]
        column = ASV_TRACKS.get(track)
        if column is None:
            continue
        entry = dict(zip(columns, entry)) if isinstance(entry, list) else {"result": entry}
        values, params = entry.get("result"), entry.get("params") or []
        if values is None:
            continue
        import itertools

        combos = list(itertools.product(*params)) if params else [()]
        for combo, value in zip(combos, values):
            combo = [_unrepr(c) for c in combo]
            ctx, mode = (combo + [None, None])[:2]
            key = (machine, data["commit_hash"], ctx, mode)
            row = rows.setdefault(key, {
                "machine": machine, "git_commit": data["commit_hash"], "context_len": ctx,
                "mode": mode, "arm": ASV_ARM, "fix": ASV_FIX, "profile": profile,
                "status": "ok", "timestamp": data.get("date"), "env_name": data.get("env_name"),
                "per_position_acceptance": [],
            })
            if value is None:  # asv: null = the benchmark failed; NaN = skipped (not in the profile)
                row.setdefault("_failed", set()).add(column)
            value = float("nan") if value is None else float(value)
            if column == "per_position_acceptance":
                pos = int(combo[2])
                ppa = row["per_position_acceptance"]
                ppa.extend([float("nan")] * (pos - len(ppa)))
                ppa[pos - 1] = value
            else:
                row[column] = value
    sidecar = _sidecar_records(path.parent.parent, machine, data["commit_hash"])
    out = []
    for row in rows.values():
        failed = row.pop("_failed", set())
        if math.isnan(row.get("output_throughput_tok_s", float("nan"))):
            if "output_throughput_tok_s" not in failed:
                continue  # skipped: a context the profile did not run is not a point
            # A point whose throughput asv could not record is a failed point for compare.
            row["status"] = "failed"
            row["error"] = "no asv result (benchmark failed or timed out)"
        if sidecar:
            row.setdefault("vllm_version", sidecar[0].get("vllm_version"))
            row.setdefault("torch_version", sidecar[0].get("torch_version"))
        out.append(row)
    return out


def _sidecar_files(results_dir: Path, machine: str, commit: str) -> list[Path]:
    """The JSON lines files the sweep behind an asv run wrote (named by run_out_path())."""
    return sorted((results_dir / "runs").glob(f"{machine}-{commit[:8]}-*.jsonl"))


def _sidecar_records(results_dir: Path, machine: str, commit: str) -> list[dict]:
    """The sweep's records behind an asv run, when there is one file."""
    found = _sidecar_files(results_dir, machine, commit)
    return load_jsonl(found[0]) if len(found) == 1 else []


def _unrepr(value: Any) -> Any:
    """asv stores parameter values as their repr: '8192' -> 8192, "'eager'" -> 'eager'."""
    if not isinstance(value, str):
        return value
    try:
        import ast

        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _sidecar_profile(results_dir: Path, machine: str, commit: str) -> str | None:
    """The profile of the sweep asv ran, from its JSON lines file named by run_out_path()."""
    profiles = {p.stem[len(machine) + 10:] for p in _sidecar_files(results_dir, machine, commit)}
    return profiles.pop() if len(profiles) == 1 else None


def asv_commits(results_dir: str | os.PathLike) -> list[str]:
    """Full commit hashes that have asv results under results_dir."""
    out = set()
    for p in _asv_result_files(Path(results_dir)):
        try:
            out.add(json.loads(p.read_text(encoding="utf-8"))["commit_hash"])
        except (OSError, ValueError, KeyError):
            continue
    return sorted(out)


def load_asv_commit(results_dir: str | os.PathLike, commit: str, machine: str | None = None) -> list[dict]:
    """Rows for one commit (a prefix is enough) from the asv results under results_dir."""
    results_dir = Path(results_dir)
    matches = [c for c in asv_commits(results_dir) if c.startswith(commit)]
    if not matches:
        raise EagleFixError(
            f"no asv results for commit {commit!r} in {results_dir}/ "
            "(run `asv run -E existing:.venv/bin/python --set-commit-hash <commit>` first)",
            exit_code=2,
        )
    if len(matches) > 1:
        raise EagleFixError(f"commit {commit!r} is ambiguous in {results_dir}/: {matches}", exit_code=2)
    rows = []
    for p in _asv_result_files(results_dir):
        if not p.name.startswith(matches[0][:8]) or (machine and p.parent.name != machine):
            continue
        rows.extend(load_asv_file(p))
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
                frames.append(records_frame(load_jsonl(f), source="jsonl", origin=str(f)))
            for f in _asv_result_files(path):
                frames.append(records_frame(load_asv_file(f), source="asv", origin=str(f)))
        elif path.suffix == ".jsonl":
            frames.append(records_frame(load_jsonl(path), source="jsonl", origin=str(path)))
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


# --------------------------------------------------------------------------- asv glue helpers


def run_out_path(profile: str, *, conf_dir: str | os.PathLike | None = None) -> Path:
    """Where setup_cache writes the sweep's JSON lines: $EAGLE_FIX_RUN_OUT, else results/runs/<machine>-<commit8>-<profile>.jsonl."""
    if os.environ.get("EAGLE_FIX_RUN_OUT"):
        return Path(os.environ["EAGLE_FIX_RUN_OUT"])
    conf_dir = Path(conf_dir or os.environ.get("ASV_CONF_DIR") or os.getcwd())
    commit = os.environ.get("ASV_COMMIT") or _git_head(conf_dir) or "nocommit"
    return conf_dir / "results" / "runs" / f"{asv_machine_name()}-{commit[:8]}-{profile}.jsonl"


def _git_head(cwd: Path) -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def asv_machine_name() -> str:
    """The machine asv records under: the only entry of ~/.asv-machine.json, else asv's default (the host name)."""
    path = Path(os.environ.get("ASV_MACHINE_FILE", Path.home() / ".asv-machine.json"))
    try:
        names = [k for k in json.loads(path.read_text()) if k != "version"]
    except (OSError, ValueError):
        names = []
    if len(names) == 1:
        return names[0]
    return platform.node() or socket.gethostname()


def point_value(records: list[dict], column: str, *, context_len: int, mode: str,
                arm: str = ASV_ARM, fix: str | None = None, position: int | None = None) -> float:
    """One number for a track_* benchmark: NaN when the point failed or has no such number.

    fix=None takes "on", or "upstream" on an engine that already carries the fix.
    """
    fixes = (fix,) if fix else (ASV_FIX, "upstream")
    for rec in records:
        if (rec.get("context_len"), rec.get("mode"), rec.get("arm")) != (context_len, mode, arm):
            continue
        if rec.get("fix") not in fixes:
            continue
        if rec.get("status") != "ok":
            return float("nan")
        value = rec.get(column)
        if position is not None:
            value = value[position - 1] if isinstance(value, list) and len(value) >= position else None
        return float("nan") if value is None else float(value)
    return float("nan")


# --------------------------------------------------------------------------- asv machine file


def device_keys() -> dict[str, str]:
    """What the dashboard filters on: device ("cpu" or the GPU's name), gpu count, driver, CUDA."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no GPU: all mean "this box runs on CPU"
        return {"device": "cpu", "gpu": "none", "gpu_count": "0", "driver": "none", "cuda": "none"}
    try:
        count = pynvml.nvmlDeviceGetCount()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) if count else "none"
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        name, driver = (v.decode() if isinstance(v, bytes) else v for v in (name, driver))
        return {"device": name if count else "cpu", "gpu": name, "gpu_count": str(count),
                "driver": driver, "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}"}
    finally:
        pynvml.nvmlShutdown()


def write_asv_machine(*, machine: str | None = None, asv: str = "asv",
                      path: str | os.PathLike | None = None, extra: dict | None = None) -> dict:
    """`asv machine --yes`, then add device_keys() (and extra) to that machine's entry; returns the entry.

    asv keeps unknown keys in ~/.asv-machine.json and copies them to results/<machine>/machine.json,
    where the dashboard offers them as filters.
    """
    path = Path(path or os.environ.get("ASV_MACHINE_FILE") or Path.home() / ".asv-machine.json")
    cmd = [asv, "machine", "--yes"] + (["--machine", machine] if machine else [])
    env = dict(os.environ)
    if path != Path.home() / ".asv-machine.json":
        env["HOME"] = str(path.parent)  # asv only knows ~/.asv-machine.json
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise EagleFixError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-500:]}")
    data = json.loads(path.read_text())
    name = machine or next((k for k in data if k != "version" and k == platform.node()), None)
    if name is None:
        names = [k for k in data if k != "version"]
        if len(names) != 1:
            raise EagleFixError(f"{path}: several machines {names}; pass --machine NAME")
        name = names[0]
    data[name].update(device_keys())
    data[name].update(extra or {})
    path.write_text(json.dumps(data, indent=4, sort_keys=True) + "\n")
    return data[name]
