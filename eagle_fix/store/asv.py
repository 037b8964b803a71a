"""What the asv suite in benchmarks/ needs from the package: where the sweep behind an asv run writes
its records, the one number a track_ benchmark returns (lower is better, a failed point fails the
benchmark), the benchmark names, and asv's machine file."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from pathlib import Path

from eagle_fix.core import arms, metrics, record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.paths import results_dir
from eagle_fix.core.point import Point
from eagle_fix.core.settings import ASV_FIX_ENV, ASV_RECORDS_ENV, RUN_OUT_ENV
from eagle_fix.machine.fingerprint import fingerprint, versions

# The fix arm the asv suite measures: `on` (default), or `off` / `upstream` to record the bug.
FIX_ENV = ASV_FIX_ENV
# asv's results folder inside results/ (the rest of results/ is ours: runs/, overhead/, ...).
ASV_RESULTS = results_dir("asv")
RUNS = results_dir("runs")


class PointFailed(RuntimeError):
    """A point that failed (or is missing from the sweep): asv records the benchmark as failed
    (null), never as skipped (NaN), so the dashboard, `asv compare` and our gate all see it."""


def asv_fix() -> str:
    fix = os.environ.get(FIX_ENV, "on")
    if fix not in record.FIX_ARMS:
        raise EagleFixError(f"{FIX_ENV}={fix!r}: choose one of {', '.join(record.FIX_ARMS)}")
    return fix


# asv benchmark name (the part after the class) -> (record column, arm). Every one is lower-is-better.
TRACKS: dict[str, tuple[str, str]] = {
    **{m.asv: (m.column, "eagle3") for m in metrics.METRICS if m.asv},
    metrics.PER_POSITION.asv: (metrics.PER_POSITION.column, "eagle3"),
}
# The names of the first suite (higher-is-better, which asv cannot gate): read as history only.
LEGACY_TRACKS = {
    "track_output_throughput": "output_throughput_tok_s",
    "track_decode_throughput": "decode_throughput_tok_s",
    "track_acceptance_length": "acceptance_length",
    "track_speedup": "speedup",
    "track_drafter_coverage": "drafter_coverage",
    "track_kv_cache_capacity": "kv_cache_capacity_tokens",
    "track_per_position_acceptance": "per_position_acceptance",
}


def asv_value(column: str, value: float) -> float:
    """The lower-is-better form of a record's number (1/x and 1-x are their own inverses, so the
    same function maps an asv value back to the record's number)."""
    metric = metrics.PER_POSITION if column == metrics.PER_POSITION.column else metrics.METRIC[column]
    return metric.to_asv(value) if metric.to_asv else value


def point_value(
    records: list[dict],
    column: str,
    *,
    context_len: int,
    mode: str,
    arm: str = "eagle3",
    fix: str | None = None,
    position: int | None = None,
) -> float:
    """The asv value of one record's number. Raises PointFailed when the point failed, is missing from
    the sweep, or has no such number though it ran; returns NaN only for a number the point cannot
    have (GPU memory without a GPU) or may not publish (a %-of-roofline share withheld as above 100%)."""
    fix = (fix or asv_fix()) if arms.takes_fix(arm) else None
    for rec in records:
        if not record.is_point(rec, context_len=context_len, mode=mode, arm=arm, fix=fix):
            continue
        if rec.get("status") != "ok":
            raise PointFailed(
                f"point {Point(context_len, mode, arm, fix).words()} failed: "
                f"{str(rec.get('error') or '').splitlines()[0][:300]}"
            )
        value = rec.get(column)
        if position is not None:
            value = value[position - 1] if isinstance(value, list) and len(value) >= position else None
        if column in metrics.ROOFLINE_SHARES and (
            (value is None and any(column in str(f) for f in rec.get("roofline_flags") or []))
            or (value is not None and float(value) > 100)
        ):
            # A share withheld as above 100% of a limit (the record's roofline_flags say why; an
            # unread record may still hold it): asv's n/a, never a negative "unused" share.
            return float("nan")
        if value is None:
            if column == "peak_gpu_memory_bytes":
                return float("nan")
            raise PointFailed(f"point {Point(context_len, mode, arm, fix).words()} ran but has no {column}")
        return asv_value(column, float(value))
    raise PointFailed(f"point {Point(context_len, mode, arm, fix).words()} is not in the sweep's records")


# Records of an `eagle-fix run` made earlier in the same environment, recorded by asv as they are
# (scripts/matrix.sh --sweep-only): nothing is measured again.
RECORDS_ENV = ASV_RECORDS_ENV


def replay_records(path: str | os.PathLike, *, profile: str) -> dict:
    """setup_cache's cache from committed records instead of a new sweep. Refuses records of another
    vLLM release, machine or profile than this environment's, so one asv environment (one release)
    never carries another's numbers."""
    recs = record.read(path)
    if not recs:
        raise EagleFixError(f"{RECORDS_ENV}={path}: no records there; give the JSON lines of an `eagle-fix run`")
    here = versions()["vllm"]
    releases = {str(r.get("vllm_version")) for r in recs}
    if releases != {here}:
        raise EagleFixError(
            f"{RECORDS_ENV}={path}: records of vLLM {', '.join(sorted(releases))}, this environment "
            f"has {here}; replay them with that release's python (asv run -E existing:...)"
        )
    fid = fingerprint()["id"]
    ids = {r.get("machine_id") for r in recs}
    if ids != {fid}:
        raise EagleFixError(
            f"{RECORDS_ENV}={path}: records of machine {', '.join(map(str, sorted(ids, key=str)))}, "
            f"this is {fid}; replay them on the machine that measured them"
        )
    profiles = {r.get("profile") for r in recs}
    if profiles != {profile}:
        raise EagleFixError(
            f"{RECORDS_ENV}={path}: records of profile {', '.join(map(str, profiles))}; set EAGLE_FIX_PROFILE to it"
        )
    return {
        "profile": profile,
        "contexts": sorted({r["context_len"] for r in recs}),
        "records": recs,
        "out": str(path),
        "replayed": True,
    }


def in_records(records: list[dict], *, context_len: int, mode: str, arm: str) -> bool:
    """Whether the records hold the point at all (a replay of a partial grid skips the rest)."""
    fix = asv_fix() if arms.takes_fix(arm) else None
    return any(record.is_point(r, context_len=context_len, mode=mode, arm=arm, fix=fix) for r in records)


def run_out_path(profile: str, *, conf_dir: str | os.PathLike | None = None) -> Path:
    """Where setup_cache writes the sweep's JSON lines: $EAGLE_FIX_RUN_OUT, else
    results/runs/<machine>-<commit8>-<profile>[-fix-<arm>].jsonl."""
    if os.environ.get(RUN_OUT_ENV):
        return Path(os.environ[RUN_OUT_ENV])
    conf_dir = Path(conf_dir or os.environ.get("ASV_CONF_DIR") or os.getcwd())
    commit = os.environ.get("ASV_COMMIT") or _git_head(conf_dir) or "nocommit"
    fix = asv_fix()
    suffix = "" if arms.is_fix_on(fix) else f"-fix-{fix}"
    return conf_dir / RUNS / f"{asv_machine_name()}-{commit[:8]}-{profile}{suffix}.jsonl"


def _git_head(cwd: Path) -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
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


# --------------------------------------------------------------------------- asv machine file


def device_keys() -> dict[str, str]:
    """What the dashboard filters on: device ("cpu" or the GPU's name), gpu count, driver, CUDA."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return {"device": "cpu", "gpu": "none", "gpu_count": "0", "driver": "none", "cuda": "none"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver or no GPU: this box runs on CPU
        return {"device": "cpu", "gpu": "none", "gpu_count": "0", "driver": "none", "cuda": "none"}
    try:
        count = pynvml.nvmlDeviceGetCount()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) if count else "none"
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        name, driver = (v.decode() if isinstance(v, bytes) else v for v in (name, driver))
        return {
            "device": name if count else "cpu",
            "gpu": name,
            "gpu_count": str(count),
            "driver": driver,
            "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
        }
    finally:
        pynvml.nvmlShutdown()


def write_asv_machine(
    *, machine: str | None = None, asv: str = "asv", path: str | os.PathLike | None = None, extra: dict | None = None
) -> dict:
    """`asv machine --yes` under the machine's fingerprint name (eagle_fix.machine.fingerprint), then add the
    fingerprint and device_keys() (and extra) to that entry; returns the entry.

    asv keeps unknown keys in ~/.asv-machine.json and copies them to results/<machine>/machine.json,
    where the dashboard offers them as filters. Named by fingerprint, one dashboard history never
    mixes hardware."""
    fp = fingerprint()
    name = machine or fp["name"]
    path = Path(path or os.environ.get("ASV_MACHINE_FILE") or Path.home() / ".asv-machine.json")
    cmd = [asv, "machine", "--yes", "--machine", name]
    env = dict(os.environ)
    if path != Path.home() / ".asv-machine.json":
        env["HOME"] = str(path.parent)  # asv only knows ~/.asv-machine.json
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise EagleFixError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-500:]}")
    data = json.loads(path.read_text())
    # one machine per file: asv_machine_name() and `asv run` then agree without --machine
    data = {"version": data.get("version", 1), name: data[name]}
    data[name].update(device_keys())
    cpu = fp.get("cpu") or {}
    for k, v in {
        "arch": cpu.get("arch"),
        "cpu": cpu.get("model_name"),
        "num_cpu": cpu.get("cores"),
        "ram": f"{cpu['memory_total_bytes'] / 2**30:.1f} GiB" if cpu.get("memory_total_bytes") else None,
        "os": f"{platform.system()} {platform.release()}",
    }.items():
        if v is not None and not data[name].get(k):
            data[name][k] = str(v)
    if str(data[name].get("ram", "")).isdigit():  # asv's own default: bytes, unreadable as a filter
        data[name]["ram"] = f"{int(data[name]['ram']) / 2**30:.1f} GiB"
    data[name]["fingerprint"] = fp["id"]
    data[name].update(extra or {})
    path.write_text(json.dumps(data, indent=4, sort_keys=True) + "\n")
    return data[name]
