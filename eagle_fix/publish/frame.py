"""The results as one pandas frame for the report: machine names, the newest row per point, speedups, workloads."""

from __future__ import annotations

import math
import re
from pathlib import Path

from eagle_fix.core import arms, metrics, record
from eagle_fix.core.errors import EagleFixError

MACHINE_COLUMN = ("machine_name", "machine", "{}")
# The workload of a point beside its context: rows that differ in one of these are not one series.
WORKLOAD = (
    ("output_len", "output", "{:.0f}"),
    ("num_speculative_tokens", "k", "{:.0f}"),
    ("batch_size", "batch", "{:.0f}"),
    ("workload", "workload", "{}"),
    ("temperature", "T", "{:g}"),
)
GIB = 1024**3


_RUN_FILE = re.compile(r"^(?P<machine>.+?)-[0-9a-f]{8}-")


def _machine_name(row) -> str:
    """A short machine name for a row: the record's, its fingerprint's, else the `<machine>-<commit8>-`
    prefix of the file it came from (records made before fingerprints name no machine themselves)."""
    name = row.get("machine_name")
    if isinstance(name, str) and name:
        return name
    fp = row.get("machine")
    if isinstance(fp, dict) and fp.get("name"):
        return str(fp["name"])
    found = _RUN_FILE.match(Path(str(row.get("origin") or "")).name)
    if found:
        return found["machine"]
    mid = row.get("machine_id")
    return str(mid) if isinstance(mid, str) and mid else "unknown"


def with_machines(df):
    """Every row with a machine name (machine_name) and a fingerprint key (machine_id): a row that
    lacks the id takes the one other rows of its name carry, else the name itself, so the rows of one
    machine from the JSON lines and from asv share a key and two machines never do."""
    df = df.copy()
    names = [_machine_name(r) for r in df.to_dict("records")]
    ids = [mid if isinstance(mid, str) and mid else None for mid in df["machine_id"]]
    by_name = {}
    for name, mid in zip(names, ids):
        if mid and mid != name:
            by_name.setdefault(name, mid)
    df["machine_name"] = names
    df["machine_id"] = [mid if mid and mid != name else by_name.get(name, name) for name, mid in zip(names, ids)]
    return df


# The numbers an asv file carries for a point; the JSON-lines record of the same run has them too.
_ASV_COLUMNS = tuple(m.column for m in metrics.METRICS if m.asv) + ("decode_throughput_tok_s",)


def drop_asv_duplicates(df):
    """asv rows whose measurement the JSON lines already hold: the same machine, release, point and
    numbers. The JSON-lines row stays (it has the samples and intervals)."""
    if "source" not in df or not (df["source"] == "asv").any():
        return df
    where = ["machine_id", "vllm_version", "context_len", "mode", "arm", "fix"]
    jsonl = {}
    for r in df[df["source"] != "asv"].to_dict("records"):
        jsonl.setdefault(tuple(record.plain(r.get(k)) for k in where), []).append(r)

    def same(a, b) -> bool:
        pairs = [(a.get(c), b.get(c)) for c in _ASV_COLUMNS]
        pairs = [
            (x, y)
            for x, y in pairs
            if isinstance(x, float) and isinstance(y, float) and not math.isnan(x) and not math.isnan(y)
        ]
        return bool(pairs) and all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) for x, y in pairs)

    keep = []
    for r, is_asv in zip(df.to_dict("records"), df["source"] == "asv"):
        twins = jsonl.get(tuple(record.plain(r.get(k)) for k in where), []) if is_asv else []
        keep.append(not (r.get("status") == "ok" and any(same(r, t) for t in twins)))
    return df[keep]


def latest(df, by: tuple[str, ...] = ()):
    """The newest row per point, machine fingerprint and vLLM release (and per `by` column, such as the
    file of origin): a re-run replaces the earlier number, and the asv copy of a JSON-lines measurement is
    dropped (the JSON lines keep samples)."""
    df = drop_asv_duplicates(with_machines(df))
    df["profile"] = df["profile"].fillna("unknown")
    df["vllm_version"] = df["vllm_version"].fillna("?")
    df["_order"] = range(len(df))
    # at one timestamp (asv's row of a sweep's point takes the sweep's time) the JSON-lines row wins
    df["_jsonl"] = (df["source"] != "asv").astype(int) if "source" in df else 1
    df = df.sort_values(
        ["timestamp", "_jsonl", "_order"],
        na_position="first",
        key=lambda s: s.astype(str) if s.name == "timestamp" else s,
    )
    keys = [*record.IDENTITY, *record.ENVIRONMENT, *by]
    df = df.astype({k: object for k in keys})
    return df.drop_duplicates(keys, keep="last").drop(columns=["_order", "_jsonl"])


def fill_speedup(df):
    """Speedup for EAGLE3 points whose baseline ran apart (one `eagle-fix run` per arm, as for the long
    128K points), by the record's own definition (eagle_fix.core.record.speedup) against the baseline
    of the same point (eagle_fix.core.record.baseline_key) on the same machine and vLLM. A speedup the
    sweep computed within one run is kept as it is."""
    df = df.copy()

    def key(rec):
        return (record.baseline_key(rec), record.environment(rec), rec.get("device_name"))

    base = df[df["arm"].map(arms.is_baseline).astype(bool) & (df["status"] == "ok")].to_dict("records")
    # rows come from latest(), oldest first: the last baseline per key is the newest
    baselines = {key(r): r for r in base}
    need = df["arm"].map(arms.speculates).astype(bool) & df["speedup"].isna()
    if need.any() and baselines:
        # None (no baseline) becomes NaN: pandas 3 refuses None in a float column
        values = [record.speedup(rec, baselines.get(key(rec))) for rec in df[need].to_dict("records")]
        df.loc[need, "speedup"] = [math.nan if v is None else float(v) for v in values]
    return df


def _varies(df, column: str) -> bool:
    """Whether rows differ in a workload column; k only among EAGLE3 rows (the baseline has none)."""
    rows = df[df["arm"].map(arms.speculates).astype(bool)] if column == "num_speculative_tokens" else df
    return rows[column].astype(object).map(record.plain).nunique(dropna=False) > 1


def workload_columns(df) -> list[tuple[str, str, str]]:
    """The machine column, then each workload column the rows differ in."""
    return [MACHINE_COLUMN, *(w for w in WORKLOAD if _varies(df, w[0]))]


def workload_text(df) -> str:
    """The workload the rows share, in words ("128 output tokens, k 3, batch 1"); columns the rows
    differ in are left to the table."""
    parts = []
    for column, label, unit in (
        ("output_len", "", " output tokens"),
        ("num_speculative_tokens", "k ", ""),
        ("batch_size", "batch ", ""),
    ):
        rows = df[df["arm"].map(arms.speculates).astype(bool)] if column == "num_speculative_tokens" else df
        values = rows[column].dropna().map(record.plain).unique()
        if len(values) == 1 and not _varies(df, column):
            parts.append(f"{label}{values[0]}{unit}")
    return ", ".join(parts)


def sort_rows(df):
    """The rows in table order: machine, output length, context, mode, arm, fix."""
    keys = ["machine_name", "output_len", "context_len", "mode", "arm", "fix"]
    numeric = {"output_len", "context_len"}
    return df.sort_values(keys, key=lambda s: _numeric(s) if s.name in numeric else s.astype(str))


def _numeric(s):
    # pandas here, not at the top: `eagle-fix --help` imports this module and stays fast
    import pandas as pd

    return pd.to_numeric(s, errors="coerce")


def release_key(version: str) -> tuple[int, ...]:
    """Release order by number: "0.10.0" after "0.9.1"; a CUDA build's tag ("vllm-X") by its number."""
    return tuple(int(x) for x in re.findall(r"\d+", version))


def select_rows(df, *filters: str):
    """The newest rows (speedups filled in) whose key=value filters hold, in table order."""
    df = fill_speedup(latest(df))
    for f in filters:
        key, value = f.split("=", 1)
        if key not in df.columns:  # a typo would otherwise end in pandas' KeyError
            keys = ", ".join(k for k in record.IDENTITY if k in df.columns)
            raise EagleFixError(f"filter {f!r}: these rows have no {key!r}; filter on one of {keys} (e.g. profile=cpu)")
        df = df[df[key].astype(str) == value]
    return sort_rows(df)
