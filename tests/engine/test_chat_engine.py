"""The realistic regime on the real engine: the chat pair on held-out ShareGPT text. Its acceptance is a
draft's (below the ceiling of k + 1, above 1), and the fix A/B still shows past the draft's 2048 positions:
fix off, eager, the draft's rotations are garbage and acceptance falls toward 1. Slow (`-m slow`): CI's realistic
regime is the real target's (tests/engine/test_cpu_real_engine.py); the chat pair serves the CPU's 32K-128K."""

from __future__ import annotations

import pytest

from conftest import run_records

pytestmark = [pytest.mark.engine, pytest.mark.slow]

CONTEXT = 4096  # past the draft's 2048 positions; CI's size


@pytest.fixture(scope="module")
def chat(tmp_path_factory) -> dict[str, dict]:
    return run_records(
        tmp_path_factory, "chat", "--profile", "cpu-chat", "--contexts", str(CONTEXT), "--modes", "eager",
        "--arms", "eagle3", "--fix", "on,off", "--output-len", "128", "--repeats", "1", key="fix",
    )[0]  # fmt: skip


def test_the_chat_regime_accepts_like_a_draft_not_a_loop(chat):
    on = chat["on"]
    assert on["status"] == "ok", on["error"]
    assert (on["workload"], on["temperature"], on["profile"]) == ("chat", 0.0, "cpu-chat")
    assert on["drafter_coverage"] >= 0.9 and on["max_seq_len_drafted"] > 2048
    k = on["num_speculative_tokens"]
    assert 1.2 < on["acceptance_length"] < k + 1 - 0.5, on["acceptance_length"]
    rates = on["per_position_acceptance"]
    assert rates[0] >= rates[-1] and rates[0] < 0.95  # later positions accept less; the first is no certainty


def test_the_fix_ab_still_shows_in_the_chat_regime(chat):
    on, off = chat["on"], chat["off"]
    assert off["status"] == "ok" and off["fix_state"] == "broken"
    assert any(f.startswith("rotary_cache_overrun") for f in off["flags"])
    assert off["acceptance_length"] < on["acceptance_length"] - 0.1, (off["acceptance_length"], on["acceptance_length"])
