"""`eagle-fix compare BASE NEW`: the regression gate, with statistics.

The verdicts are eagle_fix.gate.verdict's, shared with `eagle-fix ab`. Each side is one engine launch, and
the repeats of one launch share its offset (docs/statistics.md, "The launch is the unit"): the point's one
gated speed metric (verdict.gated_speed: step_ms, else TPOT) is judged against the launch variance
`eagle-fix noise` recorded for the machine and point kind (another machine's where this one has none, said
so), a regression only when its change is beyond the threshold *and* Holm over the run's points rejects it,
and neither side was measured on a busy machine; with no launch variance recorded anywhere it is
`inconclusive`, and says why. The other speed metrics are shown with their change, not gated. Every row says
what it could have detected. Acceptance is judged on vLLM's counts (a two-proportion test with the draft as
the unit; Holm over the drafted points); exact fields (status, coverage, KV capacity, flags) compare as they
are; memory and speedup (one number per point) are shown, not gated. A failed point, or a point missing from
NEW, fails the gate; any refused input exits 2.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from eagle_fix.core import acceptance, arms, metrics, record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.paths import RESULTS
from eagle_fix.engine.lifecycle import Interrupted
from eagle_fix.gate import acceptance_power, components, one_launch, verdict
from eagle_fix.gate.verdict import DEFAULT_ALPHA, DEFAULT_THRESHOLD, FAILING, Verdict
from eagle_fix.store.results import load_asv_commit, load_asv_file, load_jsonl

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_THRESHOLD",
    "FAILING",
    "Change",
    "Comparison",
    "compare_records",
    "format_comparison",
    "load_side",
]

# Derived from other gated numbers (so never judged twice).
NOT_GATED = {"decode_pct_of_bandwidth", "prefill_pct_of_peak_flops"}


@dataclass
class Change:
    """One metric of one matched point."""

    key: tuple
    metric: str
    base: float | None
    new: float | None
    change: float | None  # (new - base) / |base|
    verdict: str  # see eagle_fix.gate.verdict.Verdict
    evidence: str = ""  # the p-value or interval behind the verdict
    power: str = ""  # what this row could have detected
    judged: Verdict | None = None  # the whole verdict (detectable shift, statistics)


@dataclass
class Comparison:
    changes: list[Change] = field(default_factory=list)
    only_new: list[tuple] = field(default_factory=list)
    cross_machine: str | None = None
    unknown_machine: bool = False
    fix_ab: str | None = None  # set when each side ran one fix arm and they differ
    loops: list[str] = field(default_factory=list)  # points whose acceptance is of drafts of a loop
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA

    def failures(self, *, strict: bool = False) -> list[Change]:
        bad = verdict.failing(strict)
        return [c for c in self.changes if c.verdict in bad]


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _machines(records: list[dict]) -> set:
    return {r.get("machine_id") for r in records}


def check_machines(base: list[dict], new: list[dict], *, allow_cross_machine: bool) -> tuple[str | None, bool]:
    """Refuse to judge records of different machines (asv refuses to merge them too). Returns the
    cross-machine note (when allowed) and whether some record predates fingerprints."""
    mb, mn = _machines(base), _machines(new)
    unknown = None in mb or None in mn
    known_b, known_n = mb - {None}, mn - {None}
    if known_b and known_n and known_b != known_n:
        what = f"BASE ran on {', '.join(sorted(known_b))}, NEW on {', '.join(sorted(known_n))}"
        if not allow_cross_machine:
            raise EagleFixError(
                f"{what}: a speed difference between machines is not a regression; compare runs of "
                f"one machine, or pass --allow-cross-machine to see the numbers anyway",
                exit_code=2,
            )
        return what, unknown
    return None, unknown


def compare_records(
    base: list[dict],
    new: list[dict],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    allow_missing: bool = False,
    allow_cross_machine: bool = False,
    noise_folder: Path | None = None,
) -> Comparison:
    """Match points by their identity (eagle_fix.core.record.IDENTITY) and judge each metric."""
    if not (0 <= threshold < 1):
        raise EagleFixError(f"--threshold must be in [0, 1), got {threshold}", exit_code=2)
    if not (0 < alpha < 1):
        raise EagleFixError(f"alpha must be in (0, 1), got {alpha}", exit_code=2)
    base = [record.upgrade(r) for r in base]
    new = [record.upgrade(r) for r in new]
    cross, unknown = check_machines(base, new, allow_cross_machine=allow_cross_machine)
    fixes_b = {r.get("fix") for r in base if arms.takes_fix(r.get("arm"))}
    fixes_n = {r.get("fix") for r in new if arms.takes_fix(r.get("arm"))}
    fix_ab = None
    if len(fixes_b) == 1 and len(fixes_n) == 1 and fixes_b != fixes_n:
        # One fix arm per side (an asv run with EAGLE_FIX_ASV_FIX=off against a normal one): the fix
        # is the change under test, so its points are matched across it.
        fix_ab = f"BASE fix {fixes_b.pop()}, NEW fix {fixes_n.pop()}"
        base = [{**r, "fix": None} if arms.takes_fix(r.get("arm")) else r for r in base]
        new = [{**r, "fix": None} if arms.takes_fix(r.get("arm")) else r for r in new]
    b, n = record.index(base), record.index(new)
    result = Comparison(
        only_new=sorted(set(n) - set(b), key=str),
        cross_machine=cross,
        unknown_machine=unknown,
        fix_ab=fix_ab,
        threshold=threshold,
        alpha=alpha,
    )
    # One alpha per question (verdict.FAMILY_RULE): each row is first judged at its Bonferroni share of alpha
    # (what its interval and power state), then Holm over the run's rows of the question may call more.
    both_ok = [k for k in b if k in n and b[k].get("status") == "ok" and n[k].get("status") == "ok"]
    speed_share = alpha / max(1, sum(_gated_metric(b[k], n[k]) is not None for k in both_ok))
    acceptance_share = alpha / max(1, sum(bool(b[k].get("num_drafts") and n[k].get("num_drafts")) for k in both_ok))
    if not set(b) & set(n):
        raise EagleFixError(
            f"BASE and NEW share no point ({', '.join(record.IDENTITY)}): BASE has {len(b)}, NEW {len(n)}; "
            "were they run with the same profile and settings?",
            exit_code=2,
        )
    for key in sorted(b, key=str):
        rb, rn = b[key], n.get(key)
        if rn is None:
            result.changes.append(
                Change(key, "status", None, None, None, "n/a" if allow_missing else "missing", "in BASE, not in NEW")
            )
            continue
        ok_b, ok_n = rb.get("status") == "ok", rn.get("status") == "ok"
        failed = verdict.status(ok_b, ok_n, record.cause(rn.get("error") if not ok_n else rb.get("error"), 120))
        if failed is not None:
            result.changes.append(
                Change(key, "status", None, None, None, failed.verdict, failed.evidence, judged=failed)
            )
            continue
        gated = _gated_metric(rb, rn)
        for m in metrics.METRICS:
            if m.column in NOT_GATED or not m.gated:
                continue
            share = acceptance_share if m.column == "acceptance_length" else speed_share
            change = _judge_metric(
                m, rb, rn, threshold=threshold, alpha=share, noise_folder=noise_folder or components.FOLDER
            )
            if change is not None:
                why = verdict.ungated_why((rn.get("clocks") or {}).get(m.column))
                if why is None and m.column in verdict.SAMPLED and m.column != gated and change[4] != "n/a":
                    why = f"{verdict.SHOWN} (the gated speed metric is {gated or 'none here'})"
                if why is not None:
                    v = verdict.shown_only(change[7], why)
                    change = (*change[:4], v.verdict, v.evidence, change[6], v)
                result.changes.append(Change(key, *change))
        new_flags = sorted(set(rn.get("flags") or []) - set(rb.get("flags") or []))
        if new_flags:
            result.changes.append(
                Change(key, "flags", None, None, None, "regression", "; ".join(f.split(":")[0] for f in new_flags))
            )
        if acceptance.drafts_a_loop(rb) or acceptance.drafts_a_loop(rn):
            shares = (acceptance.output_diversity(rb), acceptance.output_diversity(rn))
            result.loops.append(acceptance.loop_line(record.describe(key), *shares))
        sampled = acceptance_power.sampled_parity(rn, new)
        if sampled and not acceptance_power.sampled_parity(rb, base):
            result.changes.append(Change(key, "flags", None, None, None, "regression", sampled))
    _family(result.changes, alpha=alpha, threshold=threshold)
    return result


def _gated_metric(rb: dict, rn: dict) -> str | None:
    """The point's one gated speed metric (verdict.gated_speed): step_ms, else TPOT, measured on both sides."""
    return verdict.gated_speed(
        lambda m: _num(rb.get(m)) is not None and _num(rn.get(m)) is not None, rn.get("clocks") or rb.get("clocks")
    )


def _family(changes: list[Change], *, alpha: float, threshold: float) -> None:
    """Holm over each question's rows (the gated speed rows; the acceptance rows), at alpha each: a row's
    verdict is a regression only where Holm rejects it and its change is beyond the threshold (acceptance:
    any drop). Each judged row records the family it was judged in."""
    questions = {
        "speed": [c for c in changes if c.metric in verdict.SAMPLED and c.judged and c.judged.speed],
        "acceptance": [c for c in changes if c.metric == "acceptance_length" and c.judged],
    }
    for question, rows in questions.items():
        rows = [c for c in rows if c.judged.detail.get("p") is not None]
        reject, adjusted = verdict.holm([c.judged.detail["p"] for c in rows], alpha)
        for c, r, adj in zip(rows, reject, adjusted):
            m = metrics.METRIC[c.metric]
            c.verdict = verdict.family_verdict(
                c.verdict,
                reject=r,
                change=c.judged.change,
                threshold=threshold if question == "speed" else 0.0,
                higher_is_better=m.higher_is_better,
            )
            c.judged.detail["family"] = {"question": question, "tests": len(rows), "p_holm": adj, "rejected": r}
            if len(rows) > 1:
                c.evidence += f"; Holm over {len(rows)} points: {verdict.p_text(adj)}"


def launch_variance(rec: dict, metric: str, folder: Path) -> tuple[dict | None, str]:
    """The analysis of variance `eagle-fix noise` recorded for the record's machine and point kind (the metric's
    own, else the planned metric's), else another machine's of the kind; (None, why) when there is none.
    verdict.one_launch tests against it with its degrees of freedom, never a bare sd taken as known."""
    try:
        kind = components.PointKind.of(rec)
    except (KeyError, TypeError, ValueError):
        return None, "no point kind"
    name = rec.get("machine_name") or (rec.get("machine") or {}).get("name") or "?"
    data, source = components.read(name, kind, folder), f"recorded for {name}"
    if data is None:
        data = components.borrow(kind, folder)
        source = f"borrowed from {data['machine']}" if data else "none recorded"
    if data and metric not in data.get("metrics", {}):
        source += f", {components.PLANNED_METRIC}'s"
    return components.calibration(data, metric), source


def _judge_metric(
    m: metrics.Metric, rb: dict, rn: dict, *, threshold: float, alpha: float, noise_folder: Path = components.FOLDER
) -> tuple | None:
    vb, vn = _num(rb.get(m.column)), _num(rn.get(m.column))
    if vb is None and vn is None:
        return None
    if vb is None or vn is None:  # measured on one side only: say so
        return (m.column, vb, vn, None, "n/a", "measured on one side only")
    if m.column == "acceptance_length" and (rb.get("synthetic_acceptance") or rn.get("synthetic_acceptance")):
        v = verdict.synthetic_acceptance()
    elif (
        m.column == "acceptance_length"
        and rb.get("num_drafts")
        and rn.get("num_drafts")
        and rb.get("num_accepted_tokens") is not None
        and rn.get("num_accepted_tokens") is not None
    ):
        sides = [{**r, "acceptance_length": x} for r, x in ((rb, vb), (rn, vn))]
        v = acceptance_power.judged(*sides, rn, alpha=alpha)
    elif not m.noisy:
        v = verdict.exact(vb, vn, higher_is_better=m.higher_is_better)
    else:
        sb = (rb.get("samples") or {}).get(m.column) or []
        sn = (rn.get("samples") or {}).get(m.column) or []
        cal, source = launch_variance(rn, m.column, noise_folder)
        v = one_launch.one_launch(
            sb,
            sn,
            metric=m.column,
            calibration=cal,
            source=source,
            threshold=threshold,
            alpha=alpha,
            busy=record.busy(rb) or record.busy(rn),
        )
    if "base_mean" in v.detail:  # one estimator for all three columns: the geometric means and their ratio
        return (m.column, v.detail["base_mean"], v.detail["new_mean"], v.change, v.verdict, v.evidence, v.power, v)
    # the change of the headline numbers shown beside it (no samples to test)
    return (m.column, vb, vn, verdict.relative_change(vb, vn), v.verdict, v.evidence, v.power, v)


def format_comparison(
    cmp: Comparison, *, threshold: float | None = None, strict: bool = False, show_same: bool = False
) -> str:
    """A plain-text table, one line per point and metric (unchanged exact ones only with show_same), and a summary."""
    threshold = cmp.threshold if threshold is None else threshold
    note = " (cross-machine)" if cmp.cross_machine else ""
    rows = []
    for c in cmp.changes:
        if c.verdict == "same" and not show_same:
            continue
        rows.append(
            (
                dict(zip(record.IDENTITY, c.key)),
                c.metric,
                verdict.number_cell(c.base),
                verdict.number_cell(c.new),
                verdict.change_cell(c.change),
                c.evidence,
                verdict.verdict_cell(c.verdict, c.power, strict=strict, note=note),
            )
        )
    lines = verdict.table(rows)
    if any(c.judged is not None and "base_mean" in c.judged.detail for c in cmp.changes):
        lines.append(verdict.COLUMNS_LINE)
    for k in cmp.only_new:
        lines.append(f"only in NEW: {record.describe(k)}")
    if cmp.fix_ab:
        lines.append(f"fix A/B: {cmp.fix_ab} (EAGLE3 points matched across the fix arm)")
    lines += cmp.loops
    if cmp.cross_machine:
        lines.append(f"cross-machine: {cmp.cross_machine}; speed differences here are the machines', not the code's")
    if cmp.unknown_machine:
        lines.append("note: some records predate machine fingerprints (schema 1); their machine cannot be checked")
    blind = verdict.power_line(c.judged for c in cmp.changes if c.judged is not None)
    if blind:
        lines.append(blind)
    lines.append(
        verdict.summary_line(
            len({c.key for c in cmp.changes}),
            [c.verdict for c in cmp.changes],
            threshold=threshold,
            alpha=cmp.alpha,
            strict=strict,
        )
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- inputs


def load_side(spec: str, *, results_dir: str | os.PathLike = RESULTS, machine: str | None = None) -> list[dict]:
    """Records of BASE or NEW: an `eagle-fix run` .jsonl, an asv results .json, or a commit in
    results_dir, as COMMIT or COMMIT:ENV (ENV: an asv environment name, or a part of one only it has;
    needed when the commit holds several, e.g. vLLM releases replayed at it or a fix arm)."""
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
    # a git revision never holds ':' in a ref name, so the first one splits off the environment
    rev, _, env = spec.partition(":")
    if not rev or (_ and not env):
        raise EagleFixError(f"{spec!r}: expected COMMIT or COMMIT:ENV (an asv environment name)", exit_code=2)
    return load_asv_commit(results_dir, _resolve_commit(rev), machine=machine, env=env or None, name=rev)


def _resolve_commit(rev: str) -> str:
    """A branch or tag name to its hash via git; anything else is taken as a hash prefix."""
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            or rev
        )
    except (OSError, subprocess.CalledProcessError):
        return rev


# --------------------------------------------------------------------------- CLI


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "base",
        metavar="BASE",
        help="`eagle-fix run` .jsonl, asv results .json, or a commit with asv "
        "results (COMMIT:ENV picks one of the commit's asv environments)",
    )
    parser.add_argument("new", metavar="NEW", help="same kinds as BASE")
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"relative wrong-way change that can fail the gate (default {DEFAULT_THRESHOLD * 100:g}%%)",
    )
    parser.add_argument("--strict", action="store_true", help="an inconclusive metric (no samples) fails the gate too")
    parser.add_argument("--allow-missing", action="store_true", help="a point of BASE missing from NEW does not fail")
    parser.add_argument(
        "--allow-cross-machine",
        action="store_true",
        help="compare records of different machine fingerprints (marked on every row)",
    )
    parser.add_argument("--all", action="store_true", help="also list the exact metrics that did not change")
    parser.add_argument("--results-dir", default=RESULTS, help="results folder for commits (default %(default)s)")
    parser.add_argument("--machine", default=None, help="asv machine to read commits from (default: the only one)")


def cli_main(args: argparse.Namespace) -> int:
    """Exit 0: no regression; 1: a regression, a failed or a missing point; 2: unusable input (any refusal,
    whichever parser raised it: a refused input must never read as a regression in CI)."""
    try:
        return _main(args)
    except Interrupted:
        raise
    except EagleFixError as exc:
        raise EagleFixError(str(exc), exit_code=2) from None


def _main(args: argparse.Namespace) -> int:
    if not (0 <= args.threshold < 1):
        raise EagleFixError(f"--threshold must be in [0, 1), got {args.threshold}", exit_code=2)
    base = load_side(args.base, results_dir=args.results_dir, machine=args.machine)
    new = load_side(args.new, results_dir=args.results_dir, machine=args.machine)
    cmp = compare_records(
        base,
        new,
        threshold=args.threshold,
        allow_missing=args.allow_missing,
        allow_cross_machine=args.allow_cross_machine,
    )
    print(format_comparison(cmp, threshold=args.threshold, strict=args.strict, show_same=args.all))
    return 1 if cmp.failures(strict=args.strict) else 0
