"""The eager/compile parity check (eagle_fix.core.parity) on records: identical twins pass, a flipped token
is named with its position, acceptance that cannot be the same fails, and nothing else is compared."""

from __future__ import annotations

import pytest

from eagle_fix.core import parity, record


def rec(mode, tokens=(1, 2, 3, 4), acc=4.0, ci=(3.5, 4.0), **kw):
    return record.new(
        profile="cpu-quick",
        context_len=8192,
        mode=mode,
        arm="eagle3",
        fix="on",
        batch_size=1,
        output_len=4,
        num_speculative_tokens=3,
        status="ok",
        output_token_ids=None if tokens is None else list(tokens),
        acceptance_length=acc,
        ci95={"acceptance_length": list(ci)} if ci else {},
        **kw,
    )


def test_identical_twins_agree():
    assert parity.flags(rec("compile"), [rec("eager")]) == []


def test_a_flipped_token_is_named_with_its_position():
    (flag,) = parity.flags(rec("compile", tokens=(1, 2, 9, 4)), [rec("eager")])
    assert flag.startswith("parity: eager and compiled greedy outputs differ from token 2 of 4 (3 vs 9)")
    assert parity.first_difference([1, 2], [1, 2, 3]) == 2
    assert parity.first_difference([1, 2], [1, 2]) is None


def test_acceptance_intervals_that_do_not_overlap_fail():
    (flag,) = parity.flags(rec("compile", acc=1.9, ci=(1.5, 2.3)), [rec("eager")])
    assert flag.startswith("parity: acceptance eager 4.00 [3.50, 4.00] and compiled 1.90 [1.50, 2.30]")
    assert parity.flags(rec("compile", acc=3.6, ci=(3.0, 3.9)), [rec("eager")]) == []


def test_only_ok_twins_of_the_same_point_in_the_other_mode_are_compared():
    other = rec("eager", tokens=(7, 7, 7, 7))
    assert parity.flags(rec("compile"), [{**other, "context_len": 16384}]) == []
    assert parity.flags(rec("compile"), [{**other, "status": "failed"}]) == []
    assert parity.flags(rec("eager"), [other]) == []  # the same mode: a re-run, not a twin
    assert parity.flags(rec("compile", tokens=None, acc=None, ci=None), [other]) == []
    # the latest twin wins
    assert parity.flags(rec("compile"), [other, rec("eager")]) == []


def test_a_flip_at_a_near_tie_is_told_not_flagged():
    """Margins are each token's top-two logprob gap (nats): a flip where either mode's gap is under
    NEAR_TIE_NATS is numerics, noted on the record; where the target was sure, it is the flag."""
    eager = rec("eager", output_logprob_margins=[3.0, 2.5, 0.04, 1.0])
    compiled = rec("compile", tokens=(1, 2, 9, 4), output_logprob_margins=[3.0, 2.5, 0.06, 1.0])
    assert parity.flags(compiled, [eager]) == []
    note = parity.tie_note(compiled, [eager])
    assert note == (
        "outputs differ from token 2, a near-tie there (top-two logprob margin eager 0.040, compiled 0.060 nats "
        f"< {parity.NEAR_TIE_NATS}); acceptance not compared: the modes decode different text from there"
    )
    # from a near-tie on the twins decode different text: acceptance far apart is no flag there
    # (measured: the chat pair's 32K twins, 1.82 eager and 3.43 compiled, after a flip at token 4)
    far = {"ci95": {"acceptance_length": [3.1, 3.6]}, "acceptance_length": 3.4}
    assert parity.flags({**compiled, **far}, [{**eager, "ci95": {"acceptance_length": [1.6, 2.0]}}]) == []
    # under sampling the tokens are draws: only acceptance is compared, by the calibrated launch spread, which
    # the sweep cannot read (no flag there); compare and the report pass it
    hot = {"temperature": 0.7}
    assert parity.flags({**compiled, **hot}, [{**eager, **hot}]) == []
    assert parity.flags({**compiled, **hot, **far}, [{**eager, **hot}]) == []
    assert parity.mismatch({**compiled, **hot, **far}, {**eager, **hot}, spread=None) is None
    assert parity.mismatch({**compiled, **hot, **far}, {**eager, **hot}, spread=float("inf")) is None
    flag = parity.mismatch({**compiled, **hot, **far}, {**eager, **hot}, spread=0.089)
    assert flag.startswith("parity: sampled (T=0.7), acceptance eager 4.00 and compiled 3.40 lie 4.8 launch sds apart")
    assert parity.mismatch({**compiled, **hot, **far}, {**eager, **hot}, spread=0.25) is None  # 1.7 sds
    sure = rec("eager", output_logprob_margins=[3.0, 2.5, 1.7, 1.0])
    (flag,) = parity.flags(rec("compile", tokens=(1, 2, 9, 4), output_logprob_margins=[3.0, 2.5, 1.7, 1.0]), [sure])
    assert flag.startswith("parity: eager and compiled greedy outputs differ from token 2 of 4 (3 vs 9) where the")
    assert "top-two logprob margin 1.70 nats" in flag
    assert parity.tie_note(rec("compile", tokens=(1, 2, 9, 4)), [sure]) is None
    # identical outputs: nothing to tell, whatever the margins
    assert parity.tie_note(rec("compile", output_logprob_margins=[0.01] * 4), [eager]) is None


def test_margins_from_vllms_logprobs():
    from types import SimpleNamespace as L

    from eagle_fix.engine.measure import logprob_margins

    positions = [
        {5: L(logprob=-0.1), 7: L(logprob=-2.4)},
        {3: L(logprob=-0.69), 4: L(logprob=-0.7)},
        {9: L(logprob=0.0)},
    ]
    assert logprob_margins(positions) == [2.3, 0.01, None]
    assert logprob_margins(None) is None


def test_under_sampling_each_draft_positions_acceptance_is_compared_with_its_interval():
    """Under sampling the mean can hold while the positions move apart (a drafter that gains at one position
    and loses at another): per position, the two modes' 95% Wilson intervals must overlap, each widened by
    the launch spread over the sd its drafts' counts imply (the drafts of one launch are not independent)."""
    hot = {"temperature": 0.7, "num_drafts": 100}
    eager = rec("eager", tokens=(5, 6, 7, 8), acc=2.1, ci=(1.9, 2.3), **hot, accepted_per_position=[80, 20, 10])
    same = rec("compile", acc=2.1, ci=(1.9, 2.3), **hot, accepted_per_position=[76, 24, 10])
    assert parity.mismatch(same, eager, spread=0.089) is None  # the tokens differ (draws): not compared
    moved = rec("compile", acc=2.1, ci=(1.9, 2.3), **hot, accepted_per_position=[50, 45, 15])  # the same mean
    assert parity.flags(moved, [eager]) == []  # the sweep has no spread: no claim
    # a spread within the counts' own sd (0.102 here) widens nothing
    assert parity.widening(eager, 0.089) == 1.0
    flag = parity.mismatch(moved, eager, spread=0.089)
    assert flag.startswith("parity: sampled (T=0.7), draft position 1 accepted 80% [71%, 87%] eager and 50% [40%, 60%]")
    assert "widened x1.00" in flag
    # launches that scatter three times the counts' sd: 100 drafts count as 11.5, the positions overlap
    assert parity.widening(eager, 0.3) == pytest.approx(0.3 / (0.4 / 3.92))
    assert parity.mismatch(moved, eager, spread=0.3) is None
    # greedy twins with identical tokens are judged on the mean alone (their counts are exact)
    cold = {**hot, "temperature": 0.0}
    assert parity.flags({**moved, **cold}, [{**eager, **cold, "output_token_ids": [1, 2, 3, 4]}]) == []
