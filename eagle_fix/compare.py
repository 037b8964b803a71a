"""`eagle-fix compare BASE NEW`: the regression gate asv compare cannot be (it assumes lower is better)."""

from __future__ import annotations

import argparse
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from eagle_fix.errors import EagleFixError
from eagle_fix.results import KEY_COLUMNS, METRICS, load_asv_commit, load_asv_file, load_jsonl

DEFAULT_THRESHOLD = 0.05


@dataclass
class Change:
    """One metric of one matched point."""

    key: tuple
    metric: str
    base: float | None
    new: float | None
    change: float | None  # (new - base) / |base|
    verdict: str  # ok | regression | improved | n/a | failed | fixed | failed-both


@dataclass
class Comparison:
    changes: list[Change] = field(default_factory=list)
    only_base: list[tuple] = field(default_factory=list)
    only_new: list[tuple] = field(default_factory=list)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.verdict in ("regression", "failed")]


def _key(rec: dict) -> tuple:
    return tuple(rec.get(k) for k in KEY_COLUMNS)


def _index(records: list[dict], label: str) -> dict[tuple, dict]:
    """Points by key; a later line wins (a resumed or re-run point replaces the earlier one)."""
    out = {}
    for rec in records:
        if rec.get("context_len") is None or rec.get("mode") is None:
            raise EagleFixError(f"{label}: a record without context_len/mode", exit_code=2)
        out[_key(rec)] = rec
    return out


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def compare_records(base: list[dict], new: list[dict], *, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Match points by (context_len, mode, arm, fix) and judge each metric by its direction."""
    if not (0 <= threshold < 1):
        raise EagleFixError(f"--threshold must be in [0, 1), got {threshold}", exit_code=2)
    b, n = _index(base, "BASE"), _index(new, "NEW")
    result = Comparison(only_base=sorted(set(b) - set(n), key=str), only_new=sorted(set(n) - set(b), key=str))
    common = sorted(set(b) & set(n), key=lambda k: (k[0], str(k[1]), str(k[2]), str(k[3])))
    if not common:
        raise EagleFixError(
            f"BASE and NEW share no point (context_len, mode, arm, fix): BASE has {len(b)}, NEW {len(n)}; "
            "were they run with the same profile?",
            exit_code=2,
        )
    for key in common:
        rb, rn = b[key], n[key]
        ok_b, ok_n = rb.get("status") == "ok", rn.get("status") == "ok"
        if not (ok_b and ok_n):
            verdict = {(True, False): "failed", (False, True): "fixed"}.get((ok_b, ok_n), "failed-both")
            result.changes.append(Change(key, "status", None, None, None, verdict))
            continue
        for m in METRICS:
            vb, vn = _num(rb.get(m.column)), _num(rn.get(m.column))
            if vb is None or vn is None:
                if vb is not None or vn is not None:  # measured on one side only: say so
                    result.changes.append(Change(key, m.column, vb, vn, None, "n/a"))
                continue
            if vb == 0:
                change = 0.0 if vn == 0 else math.copysign(math.inf, vn)
            else:
                change = (vn - vb) / abs(vb)
            better = change if m.higher_is_better else -change
            verdict = "regression" if better < -threshold else "improved" if better > threshold else "ok"
            result.changes.append(Change(key, m.column, vb, vn, change, verdict))
    return result


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1e6:
        return f"{v:.4g}"
    return f"{v:.4g}" if abs(v) < 100 else f"{v:.1f}"


def format_comparison(cmp: Comparison, *, threshold: float) -> str:
    """A plain-text table, one line per point and metric, and a summary line."""
    header = ("context", "mode", "arm", "fix", "metric", "base", "new", "change", "verdict")
    rows = [header]
    for c in cmp.changes:
        change = "-" if c.change is None else ("inf" if math.isinf(c.change) else f"{c.change:+.1%}")
        verdict = c.verdict.upper() if c in cmp.regressions else c.verdict
        rows.append((*(str(x) for x in c.key), c.metric, _fmt(c.base), _fmt(c.new), change, verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    for label, keys in (("only in BASE", cmp.only_base), ("only in NEW", cmp.only_new)):
        for k in keys:
            lines.append(f"{label}: context {k[0]} mode {k[1]} arm {k[2]} fix {k[3]}")
    n_points = len({c.key for c in cmp.changes})
    lines.append(
        f"{n_points} points matched, {len(cmp.regressions)} regression(s) beyond {threshold:.0%} "
        "(higher is better: throughput, acceptance, speedup, coverage; lower: memory, TTFT)"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- inputs


def load_side(spec: str, *, results_dir: str | os.PathLike = "results", machine: str | None = None) -> list[dict]:
    """Records of BASE or NEW: an `eagle-fix run` .jsonl, an asv results .json, or a commit in results_dir."""
    path = Path(spec)
    if path.is_file():
        if path.suffix == ".json":
            return load_asv_file(path)
        records = load_jsonl(path)
        if not records:
            raise EagleFixError(f"{path}: no records", exit_code=2)
        return records
    if path.suffix in (".jsonl", ".json") or os.sep in spec:
        raise EagleFixError(f"{spec}: no such file", exit_code=2)
    if not Path(results_dir).is_dir():
        raise EagleFixError(
            f"{spec!r} is not a file, and there is no asv results folder {results_dir}/ to find it as a commit",
            exit_code=2,
        )
    return load_asv_commit(results_dir, _resolve_commit(spec), machine=machine)


def _resolve_commit(rev: str) -> str:
    """A branch or tag name to its hash via git; anything else is taken as a hash prefix."""
    try:
        return subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                              capture_output=True, text=True, check=True).stdout.strip() or rev
    except (OSError, subprocess.CalledProcessError):
        return rev


# --------------------------------------------------------------------------- CLI


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", metavar="BASE", help="`eagle-fix run` .jsonl, asv results .json, or a commit with asv results")
    parser.add_argument("new", metavar="NEW", help="same kinds as BASE")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="relative wrong-way change that fails the gate (default %(default)s = 5%%)")
    parser.add_argument("--results-dir", default="results", help="asv results folder for commits (default %(default)s)")
    parser.add_argument("--machine", default=None, help="asv machine to read commits from (default: all)")


def cli_main(args: argparse.Namespace) -> int:
    """Exit 0: no regression; 1: a metric moved the wrong way beyond --threshold or a point failed; 2: unusable input."""
    if not (0 <= args.threshold < 1):
        raise EagleFixError(f"--threshold must be in [0, 1), got {args.threshold}", exit_code=2)
    base = load_side(args.base, results_dir=args.results_dir, machine=args.machine)
    new = load_side(args.new, results_dir=args.results_dir, machine=args.machine)
    cmp = compare_records(base, new, threshold=args.threshold)
    print(format_comparison(cmp, threshold=args.threshold))
    return 1 if cmp.regressions else 0
