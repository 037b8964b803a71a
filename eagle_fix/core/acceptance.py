"""Acceptance as counts (drafts, accepted tokens per position): the test of a change between two of them and
what a comparison of counts can see, where the repeats' tests of eagle_fix.core.significance do not apply."""

from __future__ import annotations

import math

from eagle_fix.core.significance import STD_NORMAL, check_alpha, two_sided_normal_p
from eagle_fix.core.stats import check_length

# A period-p loop over L tokens has about p / L distinct 4-grams. Under this share a point's output
# repeats a stretch of at most a fifth of its length, and a draft that has seen the stretch predicts the
# rest: its acceptance is a best case (the tiny pair's greedy output scores 0.01-0.15; the chat pair's
# 0.31-0.55 over 256 tokens, 0.14-0.17 over 512, docs/chat-pair.md). Shorter outputs are not judged: too
# few 4-grams to tell a loop.
LOOP_DISTINCT_4GRAMS = 0.2
LOOP_MIN_TOKENS = 64


def distinct_ngrams(ids: list[int], n: int = 4) -> float:
    """Share of distinct n-grams among a sequence's n-grams: how far output is from a loop (a
    period-p loop over L tokens gives about p / L)."""
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def before_eos(ids: list[int] | None, eos_ids: tuple[int, ...] | list[int]) -> dict[str, float | int | None]:
    """Output realism of a run that ignores end-of-sequence (every point decodes the same tokens): distinct
    4-grams of the text before the first EOS token, and that token's index (`eos_at`, None where none came).
    What the model says after its answer ends is not its answer, so its loops do not count. The score is None
    where fewer than 4 tokens came before the EOS (no 4-gram to count) or there are no ids."""
    if not isinstance(ids, list):
        return {"output_distinct_4grams_before_eos": None, "eos_at": None}
    eos = set(eos_ids)
    at = next((i for i, t in enumerate(ids) if t in eos), None)
    head = ids if at is None else ids[:at]
    score = round(distinct_ngrams(head, 4), 4) if len(head) >= 4 else None
    return {"output_distinct_4grams_before_eos": score, "eos_at": at}


def output_diversity(rec: dict) -> float | None:
    """Distinct 4-grams of a point's first output (the record's `output_token_ids`); None without them or
    when shorter than LOOP_MIN_TOKENS."""
    ids = rec.get("output_token_ids")
    return distinct_ngrams(list(ids), 4) if isinstance(ids, list) and len(ids) >= LOOP_MIN_TOKENS else None


def is_loop(share: float | None) -> bool:
    """Whether an output's share of distinct 4-grams (output_diversity) makes it a loop."""
    return share is not None and share < LOOP_DISTINCT_4GRAMS


def drafts_a_loop(rec: dict) -> bool:
    """Whether a drafted point's output is a loop, which a draft that has seen it predicts: its
    acceptance then does not stand for varied text."""
    length = rec.get("acceptance_length")
    drafted = isinstance(length, (int, float)) and not math.isnan(length)
    return drafted and is_loop(output_diversity(rec))


def loop_line(point: str, base: float | None, new: float | None) -> str:
    """The gates' note on a point whose output is a loop on either side (compare's and ab's words)."""
    shares = "/".join("–" if x is None else f"{x:.2f}" for x in (base, new))
    return (
        f"loop: {point}: distinct 4-grams of the output {shares} (BASE/NEW, a loop under "
        f"{LOOP_DISTINCT_4GRAMS}): acceptance there is a loop's, which a partially damaged drafter may "
        "still predict; judge the drafter on a point whose output is not a loop"
    )


def two_proportion_p(x1: float, n1: int, x2: float, n2: int) -> float | None:
    """Two-sided pooled two-proportion z-test p-value; None if a side has n = 0.

    Successes may be non-integer (acceptance_change_p passes accepted/k per draft). p = 1.0 when
    the two proportions are identical, including both 0 or both 1 (zero pooled variance).
    """
    if n1 == 0 or n2 == 0:
        return None
    if n1 < 0 or n2 < 0 or not (0 <= x1 <= n1) or not (0 <= x2 <= n2):
        raise ValueError(f"need 0 <= x <= n, got {x1}/{n1}, {x2}/{n2}")
    p1, p2 = x1 / n1, x2 / n2
    if p1 == p2:
        return 1.0
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2))
    return two_sided_normal_p((p1 - p2) / se)


def _total(accepted) -> float:
    return float(sum(accepted)) if isinstance(accepted, (list, tuple)) else float(accepted)


def acceptance_change_p(drafts1: int, accepted1, drafts2: int, accepted2, k: int) -> float | None:
    """Count test for a change in acceptance length between two runs.

    accepted: the total accepted draft tokens, or the per-position list (summed). The draft is the
    unit (its k tokens are correlated), so it is two_proportion_p on p = accepted / (k * drafts)
    with n = drafts and x = accepted / k (a float; not rounded). Valid for the same reason as
    acceptance_interval (Bhatia-Davis: per-draft variance <= p (1 - p)). None if drafts == 0.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if drafts1 == 0 or drafts2 == 0:
        return None
    return two_proportion_p(_total(accepted1) / k, drafts1, _total(accepted2) / k, drafts2)


def drafts_to_detect(
    delta_len: float, acceptance_length: float, k: int, alpha: float = 0.01, power: float = 0.8
) -> int:
    """Drafts per side for acceptance_change_p to detect a change of delta_len in acceptance
    length (at level alpha, two-sided, with the given power). Sizes a regression run.

    Normal approximation for the pooled two-proportion test on p = (L - 1)/k, with the
    Bernoulli-bound variance p (1 - p) per draft (an upper bound on the per-draft variance of
    accepted/k, so the count is conservative):
        n = (z_{1-alpha/2} sqrt(2 pbar (1 - pbar)) + z_power sqrt(p1 (1-p1) + p2 (1-p2)))^2 / (p2 - p1)^2
    with p1 = (L - 1)/k, p2 = (L + delta_len - 1)/k, pbar = (p1 + p2)/2.
    """
    if delta_len == 0:
        raise ValueError("delta_len must be non-zero")
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must be in (0, 1), got {alpha}, {power}")
    p1 = check_length(acceptance_length, k)
    p2 = check_length(acceptance_length + delta_len, k)
    pbar = (p1 + p2) / 2.0
    za = STD_NORMAL.inv_cdf(1.0 - alpha / 2.0)
    zb = STD_NORMAL.inv_cdf(power)
    num = za * math.sqrt(2.0 * pbar * (1.0 - pbar)) + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return max(1, math.ceil((num / (p2 - p1)) ** 2 - 1e-9))


def acceptance_detectable_drop(drafts_base: int, accepted_base, drafts_new: int, k: int, alpha: float) -> float | None:
    """The smallest drop of acceptance length (in tokens) that acceptance_change_p would have called
    significant at alpha, with the base's counts and the new side's number of drafts. None when no
    drop, even to no accepted token at all, would be significant."""
    check_alpha(alpha)
    if k < 1 or drafts_base <= 0 or drafts_new <= 0:
        return None
    x1 = _total(accepted_base) / k
    p1 = x1 / drafts_base

    def significant(p2: float) -> bool:
        p = two_proportion_p(x1, drafts_base, p2 * drafts_new, drafts_new)
        return p is not None and p < alpha

    if not significant(0.0):
        return None
    lo, hi = 0.0, p1  # significant at lo, not at hi (p2 = p1: no change)
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if significant(mid):
            lo = mid
        else:
            hi = mid
    return k * (p1 - lo)
