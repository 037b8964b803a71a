"""The acceptance gate's power, measured: how small a partial drafter loss `compare` and `ab` catch. Trials
come from scripts/calibrate_acceptance.sh: `eagle-fix run` files named <share>-<trial>.jsonl, each one engine
launch, the drafter damaged by EAGLE_FIX_INJECT_DRAFT_ERRORS=<share> under a seed of its own (share 0: the
undamaged drafter, the base and the A/A). Each trial is judged against the first undamaged run by the gate's
own test (eagle_fix.gate.verdict.acceptance: vLLM's counts of one decode run, the run's default length), so a
detection here is a `compare` (and `ab`) verdict of "regression"."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import statistics
from pathlib import Path
from typing import Any

from eagle_fix.core import arms, parity, record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.paths import committed_results
from eagle_fix.fix.damage import expected_acceptance
from eagle_fix.gate import verdict
from eagle_fix.pairs.profiles import PROFILES

# What a calibrated share must do: caught in at least this share of at least GOAL_TRIALS trials.
GOAL_DETECTION, GOAL_TRIALS = 0.9, 10
# The committed calibrations: the best case (scripts/calibrate_acceptance.sh's default folder, cpu-quick),
# the chat pair (CALIBRATE_PROFILE=cpu-chat) and the real target (CALIBRATE_PROFILE=cpu-real). A point takes
# the figure of the one that ran its pair, workload and lengths.
FOLDER = committed_results("calibration", "acceptance")
FOLDERS = (
    FOLDER,
    FOLDER.with_name("acceptance-chat"),
    FOLDER.with_name("acceptance-chat-sampled"),
    FOLDER.with_name("acceptance-chat-sampled-32k"),
    FOLDER.with_name("acceptance-real"),
)


def _trials(folder: Path) -> dict[float, list[tuple[str, list[dict[str, Any]]]]]:
    """Records per share: [(trial name, the run's ok EAGLE3 records)], trials in name order."""
    files = sorted(Path(folder).glob("*-*.jsonl"))
    if not files:
        raise EagleFixError(
            f"{folder}: no <share>-<trial>.jsonl files; run scripts/calibrate_acceptance.sh first", exit_code=2
        )
    out: dict[float, list] = {}
    for f in files:
        share, _, name = f.stem.partition("-")
        try:
            key = float(share)
        except ValueError:
            raise EagleFixError(f"{f}: not a <share>-<trial>.jsonl name (e.g. 0.02-01.jsonl)", exit_code=2) from None
        recs = [r for r in record.read(f) if r["status"] == "ok" and arms.speculates(r["arm"]) and r["num_drafts"]]
        out.setdefault(key, []).append((name, recs))
    if 0.0 not in out:
        raise EagleFixError(f"{folder}: no undamaged run (0-01.jsonl), the base every trial is judged against")
    return out


def _judge(
    base: dict[str, Any],
    new: dict[str, Any],
    launch_sd: float | None = None,
    *,
    k: int | None = None,
    launch_df: int | None = None,
    **kw,
) -> verdict.Verdict:
    """The gate's acceptance test between two points' counts (`kw`: alpha); sampled, against the launch spread
    estimated on `launch_df` degrees of freedom."""
    k = k or new.get("num_speculative_tokens") or len(new.get("accepted_per_position") or []) or 1
    return verdict.acceptance(
        base["num_drafts"],
        base["num_accepted_tokens"],
        new["num_drafts"],
        new["num_accepted_tokens"],
        base_length=base["acceptance_length"],
        new_length=new["acceptance_length"],
        k=k,
        launch_sd=launch_sd,
        launch_df=launch_df,
        **kw,
    )


def judged(base: dict[str, Any], new: dict[str, Any], point: dict[str, Any], **kw) -> verdict.Verdict:
    """The acceptance verdict as `compare` and `ab` show it: the gate's test on the two sides' counts, with
    the launch spread calibrated at `point` (sampled points), and the power measured there beside its own
    (`kw`: k, alpha)."""
    v = _judge(base, new, launch_spread(point), launch_df=launch_spread_df(point), **kw)
    measured = calibrated_power(point)
    return dataclasses.replace(v, power=f"{v.power}; {measured}") if measured else v


# Undamaged runs a sampled calibration needs before its spread is used (and left out one at a time).
MIN_SPREAD_RUNS = 4


def _spread(lengths: list[float]) -> float | None:
    """Acceptance's spread from launch to launch (sample standard deviation of the undamaged runs)."""
    return statistics.stdev(lengths) if len(lengths) >= MIN_SPREAD_RUNS else None


def _undamaged(trials: dict, ctx: int) -> list[tuple[str, float]]:
    return [(name, r["acceptance_length"]) for name, recs in trials[0.0] for r in recs if r["context_len"] == ctx]


def power(folder: Path) -> list[dict[str, Any]]:
    """One row per context and share: trials, detections (A/A: false alarms), the relative drop of
    acceptance (median over trials) and the drop the damage predicts."""
    trials = _trials(folder)
    (_, base_recs), *aa = trials[0.0]
    base = {r["context_len"]: r for r in base_recs}
    sampled = bool(base_recs and record.upgrade(dict(base_recs[0])).get("temperature"))
    rows = []
    undamaged = {ctx: _undamaged(trials, ctx) for ctx in base}
    spreads = {ctx: _spread([x for _, x in runs]) if sampled else None for ctx, runs in undamaged.items()}
    for share in sorted(trials):
        runs = aa if share == 0 else trials[share]
        for ctx, b in sorted(base.items()):
            drops, alarms, n = [], 0, 0
            for name, recs in runs:
                new = next((r for r in recs if r["context_len"] == ctx), None)
                if new is None:
                    continue
                n += 1
                drops.append(new["acceptance_length"] / b["acceptance_length"] - 1)
                # sampled: the launch test, its spread from the other undamaged runs (an A/A trial is not
                # judged by a spread it is part of); greedy: the counts test
                sd, df = spreads[ctx], len(undamaged[ctx]) - 1
                if sampled and share == 0:
                    others = [x for other, x in undamaged[ctx] if other != name]
                    sd, df = _spread(others), len(others) - 1
                sd = math.inf if sampled and sd is None else sd
                alarms += _judge(b, new, sd, launch_df=df if sampled else None).verdict == "regression"
            k = b.get("num_speculative_tokens") or 3
            rows.append(
                {
                    "context_len": ctx,
                    "share": share,
                    "trials": n,
                    "alarms": alarms,
                    "drop": statistics.median(drops) if drops else None,
                    # from the base's own per-position acceptance: below the ceiling a wrong token often
                    # lands on a draft position that was lost anyway
                    "predicted_drop": expected_acceptance(share, k, b.get("per_position_acceptance"))
                    / expected_acceptance(0.0, k, b.get("per_position_acceptance"))
                    - 1,
                    "base_acceptance": b["acceptance_length"],
                    "base_drafts": b["num_drafts"],
                    "launch_sd": spreads[ctx],
                    # the spread's degrees of freedom: undamaged runs (the base among them) less one
                    "launch_df": len(undamaged[ctx]) - 1 if sampled else None,
                }
            )
    return rows


def calibrated(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any] | None]:
    """Per context, the smallest share caught in >= 90% of >= 10 trials while the A/A trials raised no
    alarm (None where no share qualifies)."""
    out = {}
    for ctx in sorted({r["context_len"] for r in rows}):
        mine = [r for r in rows if r["context_len"] == ctx]
        clean = all(r["alarms"] == 0 for r in mine if r["share"] == 0)
        ok = [
            r
            for r in mine
            if r["share"] > 0 and r["trials"] >= GOAL_TRIALS and r["alarms"] >= GOAL_DETECTION * r["trials"]
        ]
        out[ctx] = min(ok, key=lambda r: r["share"]) if ok and clean else None
    return out


# What a point must share with a calibration's base run for the calibration's figure to be its own.
SETTING = ("output_len", "num_speculative_tokens", "batch_size", "workload", "temperature")


def _same_pair(name: str | None) -> tuple[str, ...]:
    """The profiles that run the named profile's pair and workload on its device, unsharded: the contexts
    differ, the counts at one context do not."""
    base = PROFILES.get(name or "")
    if base is None:
        return ()
    return tuple(p.name for p in PROFILES.values() if _pair_key(p) == _pair_key(base))


def _pair_key(p: Any) -> tuple[Any, ...]:
    return (p.target, p.draft, p.workload, p.device, p.load_format, p.tensor_parallel_size)


@functools.cache
def _committed(folder: Path) -> tuple[dict[str, Any], dict[int, dict[str, Any] | None], dict[int, float | None]]:
    """The committed calibration's setting (the base run's pair, workload, lengths, k), its result per context
    and, sampled, acceptance's launch spread per context."""
    rows = power(folder)
    (_, base_recs), *_ = _trials(folder)[0.0]
    b = record.upgrade(dict(base_recs[0]))
    setting = {k: b.get(k) for k in SETTING}
    setting["profiles"] = _same_pair(b.get("profile"))
    spreads = {r["context_len"]: (r["launch_sd"], r.get("launch_df")) for r in rows if r["share"] == 0}
    return setting, calibrated(rows), spreads


def _matching(rec: dict[str, Any], folders) -> tuple[int, dict[int, Any], dict[int, float | None]] | None:
    """(context, results per context, spreads per context) of the committed calibration that ran the point's
    pair, workload, lengths and temperature at its context."""
    rec = record.upgrade(dict(rec))
    for folder in [folders] if isinstance(folders, str | Path) else folders:
        try:
            setting, best, spreads = _committed(Path(folder))
        except EagleFixError:
            continue
        same = rec.get("profile") in setting["profiles"] and all(rec.get(k) == setting[k] for k in SETTING)
        if same and rec.get("context_len") in best:
            return rec["context_len"], best, spreads
    return None


def launch_spread(rec: dict[str, Any], folders=FOLDERS) -> float | None:
    """What `verdict.acceptance` judges a point's acceptance with: None for greedy (its counts are exact: the
    counts test), the calibrated launch spread for a sampled point, infinity for a sampled point no committed
    calibration covers (no claim)."""
    if not record.upgrade(dict(rec)).get("temperature"):
        return None
    found = _matching(rec, folders)
    sd = (found[2].get(found[0]) or (None, None))[0] if found else None
    return math.inf if sd is None else sd


def launch_spread_df(rec: dict[str, Any], folders=FOLDERS) -> int | None:
    """The degrees of freedom of launch_spread's estimate (None for greedy or without a calibration): the
    sampled launch test's t reference, so a spread from 10 runs is not treated as known."""
    if not record.upgrade(dict(rec)).get("temperature"):
        return None
    found = _matching(rec, folders)
    return (found[2].get(found[0]) or (None, None))[1] if found else None


def sampled_parity(rec: dict[str, Any], records: list[dict[str, Any]], folders=FOLDERS) -> str | None:
    """A sampled compiled point's parity flag against its eager twin among `records`, judged with the
    calibrated launch spread (eagle_fix.core.parity: the sweep, which cannot read the calibrations, leaves
    sampled twins unflagged); None where they agree, for greedy or eager points, or with no calibration."""
    if not (rec.get("temperature") or 0) > 0 or rec.get("mode") != record.ENGINE_MODES[1]:
        return None
    twin = parity.twin_of(rec, records)
    return None if twin is None else parity.mismatch(rec, twin, spread=launch_spread(rec, folders))


def calibrated_power(rec: dict[str, Any], folders=FOLDERS) -> str | None:
    """The measured power of the acceptance verdict at this point, in words, from the committed calibration
    that ran the same pair, workload and lengths at this context (None elsewhere: the counts test's own
    detectable drop is then all a reader has)."""
    found = _matching(rec, folders)
    if found is not None:
        ctx, best, _ = found
        r = best[ctx]
        if r is None:
            return f"calibrated at {ctx // 1024}K: no drafter loss tried was caught in 9 of 10 trials"
        return f"calibrated at {ctx // 1024}K: a {-r['drop']:.1%} drop caught in {r['alarms']} of {r['trials']} trials"
    return None


def power_table(paths) -> str:
    """The docs' table (`eagle-fix report --table acceptance-power FOLDER`)."""
    (folder,) = paths
    rows = power(Path(folder))
    lines = [
        "| context | drafted tokens made wrong | acceptance drop (predicted) | trials | caught |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        what = "none (A/A: an alarm is false)" if r["share"] == 0 else f"{r['share']:.1%}"
        drop = "–" if r["drop"] is None else f"{r['drop']:+.1%} ({r['predicted_drop']:+.1%})"
        lines.append(f"| {r['context_len'] // 1024}K | {what} | {drop} | {r['trials']} | {r['alarms']} |")
    best = calibrated(rows)
    base = {r["context_len"]: r for r in rows if r["share"] == 0}
    said = []
    for ctx, r in best.items():
        b = base[ctx]
        spread = f", launch spread {b['launch_sd']:.3f}" if b.get("launch_sd") is not None else ""
        head = f"{ctx // 1024}K (base {b['base_acceptance']:.2f}, {b['base_drafts']} drafts{spread})"
        said.append(
            f"{head}: a drop of {-r['drop']:.1%} caught in {r['alarms']} of {r['trials']}"
            if r
            else f"{head}: no share caught in {GOAL_DETECTION:.0%} of {GOAL_TRIALS} trials without a false alarm"
        )
    return "\n".join(lines) + "\n\nsmallest drop caught (≥ 90% of ≥ 10 trials, no A/A alarm): " + "; ".join(said)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle_fix.gate.acceptance_power", description=__doc__)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        print(power_table([args.folder]))
    except EagleFixError as exc:
        print(f"error: {exc}")
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
