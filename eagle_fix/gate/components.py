"""The gate's noise, measured once per machine and point kind: the variance between engine launches, between
rounds and within a sample (eagle_fix.core.nested), what a launch pair and a round cost in seconds, and the
plan that catches the smallest slowdown the gate is meant to see at the least cost. Written to
results/gate/<machine>/<profile>-<context>-<mode>-<arm>.json by `eagle-fix noise`; `eagle-fix ab` reads the
plan of the machine it runs on, and says when it has none."""

from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle_fix.core import nested
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.paths import committed_results
from eagle_fix.core.point import Point
from eagle_fix.gate import verdict
from eagle_fix.gate.ab_result import read_ab

# Where the recorded components live (a folder per machine fingerprint name).
FOLDER = committed_results("gate")
KIND = "eagle-fix noise"
SCHEMA = 2  # 2: each metric carries its analysis of variance (block_var, df_launch, df_round, F, floor)
# The metric a plan is made for: the model step timed in the engine's worker, the gate's least noisy speed.
PLANNED_METRIC = "step_ms"
# What the gate is meant to see (the README's minimum), with what power, at what level.
DETECT, POWER, ALPHA = 0.05, 0.9, 0.01
# The most launch pairs a plan may run: a record measured from 8 launch pairs bounds its launch sd loosely, and
# its plan pays for that looseness in launches.
MAX_BLOCKS = 32


@dataclass(frozen=True)
class PointKind:
    profile: str
    context_len: int
    mode: str
    arm: str

    @property
    def name(self) -> str:
        return Point(self.context_len, self.mode, self.arm, profile=self.profile).words("file")

    @classmethod
    def of(cls, identity: dict[str, Any]) -> PointKind:
        return cls(identity["profile"], int(identity["context_len"]), identity["mode"], identity["arm"])


def path(machine_name: str, kind: PointKind, folder: Path | None = None) -> Path:
    return (folder or FOLDER) / machine_name / f"{kind.name}.json"


def is_aa(data: dict[str, Any]) -> bool:
    """An A/A file: both sides the same interpreter and environment (no calibration knob on either)."""
    return data["base"].get("python") == data["new"].get("python") and (data["base"].get("env") or {}) == (
        data["new"].get("env") or {}
    )


def trials_from(files: list[Path], kind: PointKind | None, metric: str) -> tuple[list[list[nested.Block]], list[str]]:
    """The A/A blocks of the files (each point of each file is one trial), of `kind` where given."""
    trials, used = [], []
    for f in files:
        data = read_ab(f)
        if not is_aa(data):
            continue
        for entry in data["points"]:
            if kind is not None and PointKind.of(entry["identity"]) != kind:
                continue
            blocks = nested.blocks_of(entry["pairs"], metric)
            if len(blocks) >= 2:
                trials.append(blocks)
                used.append(str(f))
    return trials, sorted(set(used))


def costs_from(files: list[Path], round_s: float | None = None) -> dict[str, Any] | None:
    """Seconds a launch pair and a round cost. Files of schema 6 and later timed both (their medians); older
    files only their span (`started` to `finished`), which is blocks x launch pair + rounds x round: with two
    or more designs among the files both costs are solved by least squares, with one the round's cost must
    be given (`round_s`) and the launch pair's follows. None when neither is possible."""
    launch, rounds, spans = [], [], []
    for f in files:
        data = json.loads(Path(f).read_text())
        for entry in data.get("points", []):
            launch += [t for t in entry.get("launch_s") or [] if t]
            rounds += [p.get("wall_s") for p in entry.get("pairs", []) if p.get("wall_s")]
        if len(data.get("points", [])) == 1 and data.get("started") and data.get("finished"):
            entry = data["points"][0]
            span = (
                _dt.datetime.fromisoformat(data["finished"]) - _dt.datetime.fromisoformat(data["started"])
            ).total_seconds()
            spans.append((len({p.get("block", 0) for p in entry["pairs"]}), len(entry["pairs"]), span))
    if launch and rounds:
        return {"launch_s": statistics.median(launch), "round_s": statistics.median(rounds), "from": "timed"}
    if not spans:
        return None
    designs = {(b, r) for b, r, _ in spans}
    if len(designs) >= 2 and round_s is None:
        # least squares of span = b * L + r * R over the files
        sbb = sum(b * b for b, _, _ in spans)
        srr = sum(r * r for _, r, _ in spans)
        sbr = sum(b * r for b, r, _ in spans)
        sbs = sum(b * s for b, _, s in spans)
        srs = sum(r * s for _, r, s in spans)
        det = sbb * srr - sbr * sbr
        if det > 0:
            L, R = (sbs * srr - srs * sbr) / det, (sbb * srs - sbr * sbs) / det
            if L > 0 and R > 0:
                return {
                    "launch_s": round(L, 1),
                    "round_s": round(R, 3),
                    "from": f"{len(spans)} files' spans, {len(designs)} designs",
                }
    if round_s is None:
        return None
    L = statistics.median([(s - r * round_s) / b for b, r, s in spans])
    return {
        "launch_s": round(L, 1),
        "round_s": round_s,
        "from": f"{len(spans)} files' spans and the round's cost given",
    }


def record(
    machine: dict[str, Any],
    kind: PointKind,
    files: list[Path],
    *,
    costs: dict[str, float] | None = None,
    metrics: tuple[str, ...] = verdict.PAIRED,
    round_s: float | None = None,
) -> dict[str, Any]:
    """The components of every paired metric (each verdict uses its own launch sd), the costs, and the plan,
    made for the model step (PLANNED_METRIC), as the file holds them."""
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "kind": KIND,
        "machine": machine.get("name"),
        "machine_id": machine.get("id"),
        "point": kind.__dict__,
        "metrics": {},
        "sources": [],
    }
    for metric in metrics:
        trials, used = trials_from(files, kind, metric)
        if not trials:
            continue
        out["metrics"][metric] = _clean(nested.estimate(trials).as_dict())
        out["sources"] = sorted(set(out["sources"]) | set(used))
    if PLANNED_METRIC not in out["metrics"]:
        raise EagleFixError(
            f"no A/A blocks of {kind.name} in {len(files)} file(s): run `eagle-fix noise` on this point"
        )
    costs = costs or costs_from(files, round_s)
    out["costs"] = costs
    if costs:
        out["plan"] = plan_for(out)
        out["plan_3pct"] = plan_for(out, detect=0.03, max_blocks=64)
    return out


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    """A components dict as JSON holds it: NaN as null (Components.from_dict reads it back as NaN)."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def plan_for(data: dict[str, Any], metric: str = PLANNED_METRIC, *, detect: float = DETECT, **bounds: Any) -> dict:
    """The plan (rounds per launch pair, launch pairs, looks) whose rule (verdict.DEFAULT_THRESHOLD beside the
    test) calls `detect` a regression at the gate's power and alpha, from `metric`'s recorded components at the
    record's costs; `bounds`: nested.plan's limits."""
    costs = data["costs"]
    bounds = {"max_blocks": MAX_BLOCKS, **bounds}
    return nested.plan(
        components(data, metric),
        launch_s=costs["launch_s"],
        round_s=costs["round_s"],
        detect=detect,
        power=POWER,
        alpha=ALPHA,
        threshold=verdict.DEFAULT_THRESHOLD,
        **bounds,
    ).as_dict()


def components(data: dict[str, Any], metric: str = PLANNED_METRIC) -> nested.Components:
    return nested.Components.from_dict(data["metrics"][metric])


def calibration(data: dict[str, Any] | None, metric: str) -> dict[str, Any] | None:
    """The recorded analysis of variance a launch test pools for `metric` (the model step's where the metric has
    none; None without a record): nested.launch_test takes it with its degrees of freedom, never a bare sd."""
    if not data:
        return None
    m = data.get("metrics", {})
    return m.get(metric) or m.get(PLANNED_METRIC)


def pool_files(
    machine_name: str, kind: PointKind, roots: tuple[Path, ...] | None = None, like: dict[str, Any] | None = None
) -> list[Path]:
    """Every committed A/A `eagle-fix ab` file of this machine holding a point of `kind` (under results/gate and
    results/calibration by default), the same workload as `like` (an identity: output length, draft tokens,
    batch) where given: what `eagle-fix noise --pool` estimates from, so a record grows as A/A trials come."""
    roots = roots or (FOLDER, FOLDER.parent / "calibration")
    keep = ("output_len", "num_speculative_tokens", "batch_size", "fix")
    out = []
    for root in roots:
        for f in sorted(Path(root).rglob("*.json")):
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict) or "points" not in data or "base" not in data or "new" not in data:
                continue
            if (data.get("machine") or {}).get("name") != machine_name or not is_aa(data):
                continue
            for entry in data["points"]:
                ident = entry.get("identity") or {}
                try:
                    same = PointKind.of(ident) == kind
                except (KeyError, TypeError, ValueError):
                    same = False
                if same and (like is None or all(ident.get(k) == like.get(k) for k in keep)):
                    out.append(f)
                    break
    return out


def read(machine_name: str, kind: PointKind, folder: Path | None = None) -> dict[str, Any] | None:
    """The recorded components and plan of this machine and point kind, or None."""
    p = path(machine_name, kind, folder)
    if not p.is_file():
        return None
    data = json.loads(p.read_text())
    if data.get("kind") != KIND:
        raise EagleFixError(f"{p}: not an `eagle-fix noise` file")
    return data


def launch_sigma(data: dict[str, Any] | None, metric: str) -> float | None:
    """The launch sd of `metric` the plans assume (its recorded upper bound, or the stated floor where the record
    says the bound was 0; None when not measured). The tests pool `calibration` instead."""
    if not data or metric not in data.get("metrics", {}):
        return None
    m = data["metrics"][metric]
    value = m.get("sigma_launch_upper")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        value = m.get("sigma_launch")
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def write(data: dict[str, Any], folder: Path | None = None) -> Path:
    kind = PointKind(**data["point"])
    p = path(data["machine"], kind, folder)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return p


def borrow(kind: PointKind, folder: Path | None = None) -> dict[str, Any] | None:
    """Another machine's record of the same point kind, the one with the largest launch variance (the most
    cautious), for a machine that has none of its own; None when no machine has one."""
    found = []
    for p in sorted((folder or FOLDER).glob(f"*/{kind.name}.json")):
        data = json.loads(p.read_text())
        sigma = launch_sigma(data, PLANNED_METRIC)
        if sigma is not None:
            found.append((sigma, data))
    return max(found, key=lambda x: x[0])[1] if found else None


def find(machine_name: str, kind: PointKind, folder: Path | None = None) -> tuple[dict[str, Any] | None, str]:
    """The record `ab` judges a point by, and where it came from, among the records of the same mode and arm:
    this machine's before another's, the same profile before another (its knobs), the nearest context (a
    launch's offset is a share of its speed, which the context moves less than the machine does), and among
    other machines' equals the most cautious (the largest launch sd). (None, "") when there is none."""
    found = []
    for p in sorted((folder or FOLDER).glob(f"*/*-{Point(None, kind.mode, kind.arm).words('file')}.json")):
        data = json.loads(p.read_text())
        if data.get("kind") != KIND:
            continue
        other = PointKind(**data["point"])
        if (other.mode, other.arm) != (kind.mode, kind.arm):
            continue
        sigma = launch_sigma(data, PLANNED_METRIC) or 0.0
        rank = (
            data["machine"] != machine_name,
            other.profile != kind.profile,
            abs(math.log(other.context_len / kind.context_len)),
            -sigma,
        )
        found.append((rank, data))
    if not found:
        return None, ""
    data = min(found, key=lambda x: x[0])[1]
    other = PointKind(**data["point"])
    if data["machine"] == machine_name:
        return data, f"recorded for {machine_name}" + (
            "" if other == kind else f" as {other.name}: none as {kind.name}"
        )
    return data, f"borrowed from {data['machine']}" + ("" if other == kind else f" as {other.name}") + (
        f": none recorded for {machine_name}"
    )
