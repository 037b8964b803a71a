"""The n-gram arm on the real engine (vLLM's prompt-lookup proposer, no draft checkpoint): its record carries
vLLM's spec-decode counters and the plugin's own count of the proposer's work, steps that drafted nothing
included, and greedy speculation emits the baseline's tokens. Slow (an engine of its own, skipped in CI:
`-m slow` runs it); in CI the n-gram and draft-model arms run at the fix A/B's short point (tests/engine/test_engine.py's
`methods`) and tests/sweep/test_plan.py checks their plans and engine specs."""

from __future__ import annotations

import pytest

from conftest import run_records

pytestmark = [pytest.mark.engine, pytest.mark.slow]


@pytest.fixture(scope="module")
def ngram(tmp_path_factory) -> dict[str, dict]:
    return run_records(
        tmp_path_factory, "ngram", "--profile", "cpu-quick", "--contexts", "2048", "--modes", "eager",
        "--arms", "ngram,baseline", "--output-len", "64", "--repeats", "2",
    )[0]  # fmt: skip


def test_the_ngram_record_carries_vllms_counters_and_the_proposers_own(ngram):
    rec = ngram["ngram"]
    assert rec["status"] == "ok", rec["error"]
    assert rec["fix"] is None and rec["num_speculative_tokens"] == 3 and rec["model_runner"] == "v1"
    assert rec["num_drafts"] > 0 and rec["num_draft_tokens"] >= rec["num_drafts"]
    assert rec["acceptance_length"] == 1 + rec["num_accepted_tokens"] / rec["num_drafts"]
    # the proposer ran at every step that may draft; the steps it found no match at are counted, not guessed
    assert rec["drafter_proposals"] == rec["drafter_steps"] > 0 and rec["drafter_coverage"] == 1.0
    assert 0 <= rec["drafter_empty_proposals"] < rec["drafter_proposals"]
    assert rec["num_drafts"] <= rec["drafter_proposals"] - rec["drafter_empty_proposals"]
    assert rec["max_seq_len_drafted"] > 2048 - 64 - 4
    assert rec["drafter_calls_damaged"] is None  # no draft model to damage
    assert not [f for f in rec["flags"] if f.startswith(("missing_hook", "empty_drafts", "zero_filled"))], rec["flags"]
    assert rec["speedup"] is not None  # divided by the baseline beside it


def test_greedy_ngram_speculation_emits_the_baselines_tokens(ngram):
    assert ngram["baseline"]["num_drafts"] is None and ngram["baseline"]["drafter_empty_proposals"] is None
    assert ngram["ngram"]["output_token_ids"] == ngram["baseline"]["output_token_ids"]
