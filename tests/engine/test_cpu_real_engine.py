"""The real target's profile at its smallest point on the real engine (issue 55 item 3): baseline and n-gram on
held-out chat in SmolLM2's template, the n-gram drafter ran, and output realism is scored before the first
end-of-sequence while both arms decode every token. Slow (the conversion and two engines, skipped in CI:
`-m slow` runs it); CI's non-engine twin is tests/pairs/test_cpu_real.py."""

from __future__ import annotations

import pytest

from conftest import run_records

pytestmark = [pytest.mark.engine, pytest.mark.slow]


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict[str, dict]:
    return run_records(
        tmp_path_factory, "cpu-real", "--profile", "cpu-real", "--contexts", "2048", "--modes", "eager",
        "--arms", "ngram,baseline", "--output-len", "128", "--repeats", "2",
    )[0]  # fmt: skip


def test_the_smallest_point_runs_with_acceptance_and_drafter_figures(real):
    for rec in real.values():
        assert rec["status"] == "ok", rec["error"]
        assert rec["workload"] == "chat-real" and rec["prompt_len"] <= 2048
        assert len(rec["output_token_ids"]) == 128  # decode ignores EOS: every point decodes the same tokens
    ng = real["ngram"]
    assert ng["num_drafts"] > 0 and ng["acceptance_length"] >= 1.0
    assert ng["drafter_proposals"] == ng["drafter_steps"] > 0
    assert real["baseline"]["num_drafts"] is None


def test_realism_is_scored_before_the_first_eos(real):
    for rec in real.values():
        ids, at = rec["output_token_ids"], rec["eos_at"]
        assert at is None or (ids[at] == 2 and 2 not in ids[:at])  # <|im_end|>, the target's EOS
        score = rec["output_distinct_4grams_before_eos"]
        assert score is None or 0 < score <= 1
