"""`eagle-fix compare`'s test of a speed metric with one engine launch a side (split from eagle_fix.gate.verdict,
which is at its 500 lines): one launch pair's mean judged against the recorded analysis of variance with t on its
degrees of freedom, as eagle_fix.core.nested.launch_test judges `ab`'s launch pairs."""

from __future__ import annotations

import math
import statistics

from scipy import stats as st

from eagle_fix.core import metrics, nested, stats
from eagle_fix.gate import verdict
from eagle_fix.gate.verdict import DEFAULT_ALPHA, DEFAULT_THRESHOLD, NOT_GATED, Verdict, p_text


def one_launch(
    base: list,
    new: list,
    *,
    metric: str,
    calibration: nested.Components | dict | None,
    source: str = "",
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    busy: str | None = None,
) -> Verdict:
    """A speed metric of two runs with one engine launch a side (`eagle-fix compare`): the difference of the
    runs' log means is one launch pair's mean, judged as nested.launch_test judges one: against the recorded
    analysis of variance (Components.block_variance_estimate at these repeats) with t on its df, never against
    the repeats alone, which share their launch's offset (their own scatter is added); inconclusive without a record with one. Between versions
    `eagle-fix ab` is the verdict (runs made at different times differ by more than a launch's offset)."""
    m = metrics.METRIC[metric]
    if metric not in verdict.SAMPLED:
        return Verdict(NOT_GATED, evidence="no samples")
    if busy:
        return Verdict("inconclusive", evidence=busy, power="sees nothing on a busy machine", speed=True)
    b = [math.log(x) for x in stats.clean(base) if x > 0]
    n = [math.log(x) for x in stats.clean(new) if x > 0]
    if not b or not n:
        return Verdict("inconclusive", evidence=f"samples {len(base)} vs {len(new)}", power="needs samples", speed=True)
    # the base and new columns: each side's geometric mean, whose ratio is the change the test judges
    means = {"base_mean": math.exp(sum(b) / len(b)), "new_mean": math.exp(sum(n) / len(n))}
    est = sum(n) / len(n) - sum(b) / len(b)
    cal = nested.Components.from_dict(calibration) if isinstance(calibration, dict) else calibration
    # a launch pair's mean over r rounds of ratios: unpaired repeats count as their harmonic mean's rounds
    var, df = cal.block_variance_estimate(2 / (1 / len(b) + 1 / len(n))) if cal is not None else (math.nan, 0)
    if not (df >= 1 and var > 0 and math.isfinite(var)):
        why = "no launch variance recorded for this machine (eagle-fix noise)" if cal is None else ""
        why = why or f"the record {source} has no analysis of variance (re-run eagle-fix noise)"
        return Verdict(
            "inconclusive",
            math.expm1(est),
            f"one launch a side and {why}",
            "sees nothing without the launch variance: eagle-fix ab measures launches",
            speed=True,
            detail={"test": "none (one launch a side)", "alpha": alpha, **means},
        )
    # plus this run's own scatter of the repeats (Welch's df): the round noise then counts twice (the record's
    # launch pair holds it too), which errs high, so a run noisier than its record cannot pose as quiet
    own = [(statistics.variance(xs) / len(xs), len(xs) - 1) for xs in (b, n) if len(xs) > 1]
    total = var + sum(v for v, _ in own)
    df = total**2 / (var**2 / df + sum(v**2 / d for v, d in own))
    se = math.sqrt(total)
    p = float(2 * st.t.sf(abs(est) / se, df))
    half = nested.t_ppf(1 - alpha / 2, df) * se
    slower, faster = nested.limits(threshold, m.higher_is_better)
    slow = est if not m.higher_is_better else -est
    if p < alpha and slow > slower:
        decided = "regression"
    elif p < alpha and slow < faster:
        decided = "improved"
    else:
        decided = "within noise"
    shift = (nested.t_ppf(1 - alpha / 2, df) + nested.t_ppf(0.9, df)) * se
    detectable = max(math.expm1(shift), threshold)
    test = f"one launch a side, t on {df:.1f} df, launch sd {cal.launch:.2%}{' ' + source if source else ''}"
    return Verdict(
        decided,
        math.expm1(est),
        f"{p_text(p)} [{math.expm1(est - half):+.1%}, {math.expm1(est + half):+.1%}] ({test})",
        f"could detect >= {detectable:.1%} (the test's 90% power, not the rule's)",
        detectable,
        speed=True,
        detail={"p": p, "se": se, "df": df, "test": test, "alpha": alpha, "detectable": detectable, **means},
    )
