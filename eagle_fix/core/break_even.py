"""The acceptance needed to pay (#54 item 3): at a point, speculation pays when a step's tokens outweigh its
cost, so the break-even acceptance length is tau* = (speculative step time) / (plain step time), and a draft
accepting tau tokens a step is predicted to run tau x plain / speculative as fast as no speculation. Both
step times are the records' own `step_ms` samples (the engine worker's clock), so the figure is measured at
that point's context, mode, batch and k, never assumed; the prediction is checked against the measured
decode-throughput speedup of the same pair of records."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from scipy import stats

from eagle_fix.core import record

RESAMPLES = 4000  # bootstrap resamples of each ratio (percentile intervals)
SEED = 0  # the bootstrap's seed: the same records give the same intervals (tables are checked by tests)
INTERVAL = (
    "tau* and measured speedup: 95% percentile bootstrap of the ratio of the two arms' medians, each arm's "
    "samples resampled on its own (few samples make it narrower than a true 95%); predicted speedup: bounds "
    "from tau's 95% count interval over tau*'s interval"
)


def _samples(rec: dict[str, Any], column: str) -> list[float]:
    values = ((rec.get("samples") or {}) if isinstance(rec.get("samples"), dict) else {}).get(column) or []
    return [float(v) for v in values if v is not None]


def ratio(top: list[float], bottom: list[float]) -> tuple[float, tuple[float, float] | None]:
    """median(top) / median(bottom) and its 95% percentile-bootstrap interval (None with one sample a side or
    no spread: nothing to resample)."""
    est = float(np.median(top) / np.median(bottom))
    if min(len(top), len(bottom)) < 2 or (len(set(top)) == 1 and len(set(bottom)) == 1):
        return est, None
    res = stats.bootstrap(
        (np.asarray(top), np.asarray(bottom)),
        lambda a, b, axis: np.median(a, axis=axis) / np.median(b, axis=axis),
        n_resamples=RESAMPLES,
        method="percentile",
        vectorized=True,
        paired=False,
        rng=np.random.default_rng(SEED),
    )
    return est, (float(res.confidence_interval.low), float(res.confidence_interval.high))


def step_acceptance(rec: dict[str, Any]) -> tuple[float | None, tuple[float, float] | None]:
    """Tokens a decode step yields (tau, with its interval): vLLM's acceptance length, which averages over the
    steps that drafted. A proposer that may draft nothing (n-gram without a match: `drafter_empty_proposals`)
    runs plain steps vLLM does not count, each yielding one token, so tau is taken over every step:
    1 + accepted / (drafts + empty steps), the interval mapped the same way (exact at batch 1)."""
    tau = rec.get("acceptance_length")
    ci = ((rec.get("ci95") or {}) if isinstance(rec.get("ci95"), dict) else {}).get("acceptance_length")
    tau_ci = (float(ci[0]), float(ci[1])) if ci and None not in ci[:2] else None
    if tau is None:
        return None, None
    drafts, empty = rec.get("num_drafts"), rec.get("drafter_empty_proposals")
    if not empty or not drafts:
        return float(tau), tau_ci
    share = drafts / (drafts + empty)  # of the steps, those that drafted

    def scale(t: float) -> float:
        return 1.0 + (t - 1.0) * share

    return scale(float(tau)), (scale(tau_ci[0]), scale(tau_ci[1])) if tau_ci else None


def twins(records: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(drafted record, its baseline) for every ok drafted record with a baseline twin among `records` (one
    run file: same machine and engine, same profile, context, mode, batch, output length, workload and
    temperature); the later of two copies of a point wins, as with --resume."""
    records = [r for r in records if r.get("status") == "ok"]
    base = {(record.key(r), record.environment(r)): r for r in records if r.get("arm") == "baseline"}
    out = []
    for r in records:
        if r.get("arm") == "baseline":
            continue
        b = base.get((record.baseline_key(r), record.environment(r)))
        if b is not None:
            out.append((r, b))
    return out


def point(drafted: dict[str, Any], base: dict[str, Any]) -> dict[str, Any] | None:
    """tau*, predicted and measured speedup of one pair, with intervals; None where either arm lacks step
    samples or throughput samples (records made before `step_ms`)."""
    spec, plain = _samples(drafted, "step_ms"), _samples(base, "step_ms")
    e_thr, b_thr = _samples(drafted, "decode_throughput_tok_s"), _samples(base, "decode_throughput_tok_s")
    if not spec or not plain or not e_thr or not b_thr:
        return None
    tau_star, tau_star_ci = ratio(spec, plain)
    measured, measured_ci = ratio(e_thr, b_thr)
    tau, tau_ci = step_acceptance(drafted)
    predicted = predicted_ci = None
    if tau is not None:
        predicted = float(tau) / tau_star
        lo_t, hi_t = tau_ci or (float(tau), float(tau))
        lo_s, hi_s = tau_star_ci or (tau_star, tau_star)
        predicted_ci = (lo_t / hi_s, hi_t / lo_s)
    agree = None
    if predicted_ci and measured_ci:
        agree = predicted_ci[0] <= measured_ci[1] and measured_ci[0] <= predicted_ci[1]
    env = drafted.get("env") if isinstance(drafted.get("env"), dict) else {}
    return {
        "profile": drafted.get("profile"),
        "machine": drafted.get("machine_name"),
        "context_len": int(drafted["context_len"]),
        "mode": drafted.get("mode"),
        "arm": drafted.get("arm"),
        "fix": drafted.get("fix"),
        "workload": drafted.get("workload"),
        "batch_size": drafted.get("batch_size"),
        "k": drafted.get("num_speculative_tokens"),
        "temperature": float(drafted.get("temperature") or 0),
        "timestamp": str(drafted.get("timestamp") or ""),
        "damage": float(env.get("EAGLE_FIX_INJECT_DRAFT_ERRORS") or 0),
        "plain_step_ms": float(np.median(plain)),
        "spec_step_ms": float(np.median(spec)),
        "n": (len(spec), len(plain)),
        "tau_star": tau_star,
        "tau_star_ci": tau_star_ci,
        "acceptance": None if tau is None else float(tau),
        "acceptance_ci": tau_ci,
        "predicted": predicted,
        "predicted_ci": predicted_ci,
        "measured": measured,
        "measured_ci": measured_ci,
        "agree": agree,
    }


def points(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every drafted point of one run file that has a baseline twin in it, with its figures."""
    out = [p for d, b in twins(records) if (p := point(d, b)) is not None]
    return sorted(out, key=lambda p: (p["context_len"], p["mode"] != "eager", p["damage"], str(p["fix"])))


def interval_words(ci: tuple[float, float] | None) -> str:
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
