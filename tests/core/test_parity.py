"""The eager/compile parity check (eagle_fix.core.parity) on records: identical twins pass, a flipped token
is named with its position, acceptance that cannot be the same fails, and nothing else is compared."""

from __future__ import annotations

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
