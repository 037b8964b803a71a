"""The acceptance needed to pay (eagle_fix.core.break_even): tau* = speculative step / plain step from the
records' own step samples, its interval, the predicted speedup tau / tau* and the measured one."""

import statistics

from conftest import ROOT
from eagle_fix.core import break_even, record

CHAT = ROOT / "results" / "runs" / "chat" / "cpu-intel-f6m167-2c-8d487f-be033578-cpu-chat.jsonl"


def rec(arm: str, steps, throughput, *, acceptance=None, machine="m1", workload="chat", context=8192, **extra):
    """A record of one point, as the sweep writes the fields break_even reads."""
    return {
        "profile": "cpu-chat",
        "context_len": context,
        "mode": "eager",
        "arm": arm,
        "fix": "on" if arm == "eagle3" else None,
        "batch_size": 1,
        "output_len": 512,
        "num_speculative_tokens": 3 if arm == "eagle3" else None,
        "workload": workload,
        "temperature": 0.0,
        "status": "ok",
        "machine_id": machine,
        "machine_name": machine,
        "vllm_version": "0.32.0",
        "acceptance_length": acceptance,
        "ci95": {"acceptance_length": [acceptance - 0.2, acceptance + 0.2]} if acceptance else {},
        "samples": {"step_ms": list(steps), "decode_throughput_tok_s": list(throughput)},
        **extra,
    }


def test_tau_star_is_the_ratio_of_the_two_arms_median_step_times_on_committed_records():
    recs = record.read(CHAT)
    points = break_even.points(recs)
    assert len(points) == 6, "every drafted point of the chat file has its baseline twin in it"
    p = next(p for p in points if (p["context_len"], p["mode"]) == (8192, "eager"))
    arm = {r["arm"]: r for r in recs if r["context_len"] == 8192 and r["mode"] == "eager"}
    spec, plain = arm["eagle3"]["samples"]["step_ms"], arm["baseline"]["samples"]["step_ms"]
    assert p["tau_star"] == statistics.median(spec) / statistics.median(plain)
    lo, hi = p["tau_star_ci"]
    # a bootstrap of three samples an arm stays within the ratios its samples can make
    assert min(spec) / max(plain) <= lo < p["tau_star"] < hi <= max(spec) / min(plain)
    assert p["predicted"] == arm["eagle3"]["acceptance_length"] / p["tau_star"]
    thr = arm["eagle3"]["samples"]["decode_throughput_tok_s"], arm["baseline"]["samples"]["decode_throughput_tok_s"]
    assert p["measured"] == statistics.median(thr[0]) / statistics.median(thr[1])
    assert p["agree"] is True


def test_predicted_speedup_and_its_bounds_follow_tau_over_tau_star():
    spec, plain = [10.0, 10.5, 9.5, 10.2], [4.0, 4.1, 3.9, 4.05]
    d = rec("eagle3", spec, [120.0, 118.0, 121.0, 119.0], acceptance=3.0)
    b = rec("baseline", plain, [240.0, 238.0, 242.0, 241.0])
    (p,) = break_even.points([d, b])
    tau_star = statistics.median(spec) / statistics.median(plain)
    assert abs(p["tau_star"] - tau_star) < 1e-12 and abs(p["predicted"] - 3.0 / tau_star) < 1e-12
    lo_s, hi_s = p["tau_star_ci"]
    assert p["predicted_ci"] == (2.8 / hi_s, 3.2 / lo_s)
    # predicted 1.2x, measured 0.5x: the intervals part and the point says so
    assert p["measured"] < 0.51 and p["agree"] is False
    # the same draft at half the step cost: predicted 2.4x, still measured 0.5x
    half = rec("eagle3", [s / 2 for s in spec], [120.0, 118.0, 121.0, 119.0], acceptance=3.0)
    (q,) = break_even.points([half, b])
    assert abs(q["tau_star"] - tau_star / 2) < 1e-12


def test_a_twin_is_the_same_point_on_the_same_machine_in_the_same_file():
    d = rec("eagle3", [10.0, 11.0], [100.0, 101.0], acceptance=2.0)
    assert break_even.points([d]) == [], "no baseline: no tau*"
    assert break_even.points([d, rec("baseline", [4.0, 4.2], [200.0, 201.0], machine="m2")]) == []
    assert break_even.points([d, rec("baseline", [4.0, 4.2], [200.0, 201.0], workload="copy")]) == []
    assert break_even.points([d, rec("baseline", [4.0, 4.2], [200.0, 201.0], context=16384)]) == []
    assert break_even.points([d, rec("baseline", [4.0, 4.2], [200.0, 201.0], status="failed")]) == []
    old = rec("baseline", [], [200.0], samples={"decode_throughput_tok_s": [200.0]})  # before step_ms
    assert break_even.points([d, old]) == []
    (p,) = break_even.points([d, rec("baseline", [4.0, 4.2], [200.0, 201.0])])
    assert p["context_len"] == 8192 and p["workload"] == "chat"


def test_damage_share_is_read_from_the_record_env_and_one_sample_gives_no_interval():
    d = rec("eagle3", [10.0], [100.0], acceptance=2.0, env={"EAGLE_FIX_INJECT_DRAFT_ERRORS": "0.3"})
    (p,) = break_even.points([d, rec("baseline", [4.0], [200.0])])
    assert p["damage"] == 0.3 and p["tau_star"] == 2.5
    assert p["tau_star_ci"] is None and p["measured_ci"] is None and p["agree"] is None
    assert p["predicted_ci"] == (1.8 / 2.5, 2.2 / 2.5)


def test_an_ngram_point_takes_tau_over_every_step_its_steps_that_drafted_nothing_included():
    """vLLM's acceptance length averages over the steps that drafted; an n-gram step without a match is a
    plain step (one token) vLLM does not count, so the prediction takes tau over every step. An EAGLE3 point
    (no empty proposals counted) keeps vLLM's figure; both divide by the same baseline; the docs table then
    names each row's arm."""
    from eagle_fix.publish import break_even as shown

    spec, thr = [5.0, 5.2, 4.9], [300.0, 305.0, 298.0]
    ngram = rec("ngram", spec, thr, acceptance=4.0, num_drafts=13, drafter_empty_proposals=14, num_speculative_tokens=3)
    eagle = rec("eagle3", [10.0, 10.4, 9.9], [220.0, 221.0, 219.0], acceptance=4.0)
    base = rec("baseline", [4.0, 4.1, 3.9], [240.0, 238.0, 242.0])
    by_arm = {p["arm"]: p for p in break_even.points([ngram, eagle, base])}
    assert set(by_arm) == {"ngram", "eagle3"}
    tau = 1 + 3.0 * 13 / 27  # 39 accepted over 13 + 14 steps: 2.44 tokens a step, not 4
    assert abs(by_arm["ngram"]["acceptance"] - tau) < 1e-12
    lo, hi = by_arm["ngram"]["acceptance_ci"]
    assert abs(lo - (1 + 2.8 * 13 / 27)) < 1e-12 and abs(hi - (1 + 3.2 * 13 / 27)) < 1e-12
    assert abs(by_arm["ngram"]["predicted"] - tau / by_arm["ngram"]["tau_star"]) < 1e-12
    assert by_arm["eagle3"]["acceptance"] == 4.0
    table = shown.points_table(list(by_arm.values()))
    assert table.splitlines()[0].startswith("| profile | arm | context |")
    assert {row.split(" | ")[1] for row in table.splitlines()[2:]} == {"ngram", "eagle3"}
    assert "| arm |" not in shown.points_table([by_arm["eagle3"]])  # one arm: the table as before
