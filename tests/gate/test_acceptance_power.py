"""The acceptance gate's calibration table (eagle_fix.gate.acceptance_power) from trial files: every trial
judged against the first undamaged run by the gate's own test, the A/A's alarms counted as false, and the
smallest share that qualifies named per context."""

from __future__ import annotations

import pytest

from eagle_fix.core import record
from eagle_fix.core.errors import EagleFixError
from eagle_fix.gate import acceptance_power


def point(ctx, drafts, accepted):
    return record.new(
        profile="cpu-quick",
        context_len=ctx,
        mode="eager",
        arm="eagle3",
        fix="on",
        batch_size=1,
        output_len=512,
        num_speculative_tokens=3,
        status="ok",
        num_drafts=drafts,
        num_accepted_tokens=accepted,
        acceptance_length=1 + accepted / drafts,
    )


def write(folder, name, *points):
    for p in points:
        record.append(folder / f"{name}.jsonl", p)


def test_trials_are_judged_against_the_undamaged_base(tmp_path):
    write(tmp_path, "0-01", point(8192, 128, 384), point(32768, 128, 384))
    write(tmp_path, "0-02", point(8192, 128, 384), point(32768, 128, 384))  # A/A: identical counts
    for i in range(1, 11):
        # 8K: a 7% drop every time; 32K: a 1% drop, too small for 128 drafts
        write(tmp_path, f"0.05-{i:02d}", point(8192, 140, 381), point(32768, 129, 381))
    rows = {(r["context_len"], r["share"]): r for r in acceptance_power.power(tmp_path)}
    assert rows[(8192, 0.0)]["trials"] == 1 and rows[(8192, 0.0)]["alarms"] == 0
    assert rows[(8192, 0.05)]["alarms"] == 10 and rows[(8192, 0.05)]["drop"] == pytest.approx(3.721 / 4 - 1, abs=1e-3)
    assert rows[(32768, 0.05)]["alarms"] == 0
    best = acceptance_power.calibrated(list(rows.values()))
    assert best[8192]["share"] == 0.05 and best[32768] is None
    table = acceptance_power.power_table([tmp_path])
    assert "| 8K | 5.0% |" in table and "32K (base 4.00, 128 drafts): no share caught" in table


def test_a_folder_without_trials_or_base_is_one_line(tmp_path):
    with pytest.raises(EagleFixError, match="run scripts/calibrate_acceptance.sh first"):
        acceptance_power.power(tmp_path)
    write(tmp_path, "0.05-01", point(8192, 128, 380))
    with pytest.raises(EagleFixError, match="no undamaged run"):
        acceptance_power.power(tmp_path)


def test_the_calibrated_figure_is_said_only_where_the_calibration_ran_that_point(tmp_path):
    write(tmp_path, "0-01", point(8192, 128, 384), point(32768, 128, 384))
    for i in range(1, 11):
        write(tmp_path, f"0.05-{i:02d}", point(8192, 140, 381), point(32768, 129, 381))
    said = acceptance_power.calibrated_power(point(8192, 1, 1), tmp_path)
    assert said == "calibrated at 8K: a 7.0% drop caught in 10 of 10 trials"
    assert "no drafter loss tried was caught" in acceptance_power.calibrated_power(point(32768, 1, 1), tmp_path)
    assert acceptance_power.calibrated_power({**point(8192, 1, 1), "output_len": 64}, tmp_path) is None
    assert acceptance_power.calibrated_power({**point(8192, 1, 1), "profile": "gpu-tiny"}, tmp_path) is None
    assert acceptance_power.calibrated_power(point(16384, 1, 1), tmp_path) is None
    assert acceptance_power.calibrated_power(point(8192, 1, 1), tmp_path / "none") is None


def test_the_prediction_starts_from_the_base_drafters_own_per_position_acceptance():
    from eagle_fix.fix.damage import expected_acceptance

    assert expected_acceptance(0.1, 3) == pytest.approx(1 + 0.9 + 0.81 + 0.729)  # always right: the ceiling's
    assert expected_acceptance(0.0, 3, [0.5, 0.25, 0.1]) == pytest.approx(1.85)
    # below the ceiling a wrong token often lands where the draft was lost anyway: a smaller drop
    assert expected_acceptance(0.5, 3, [0.5, 0.25, 0.1]) == pytest.approx(1 + 0.25 + 0.0625 + 0.0125)


def chat_point(ctx, drafts, accepted, per_position):
    return {
        **point(ctx, drafts, accepted),
        "profile": "cpu-chat",
        "workload": "chat",
        "temperature": 0.0,
        "per_position_acceptance": per_position,
    }


def test_each_regime_takes_the_figure_of_its_own_calibration(tmp_path):
    best, chat = tmp_path / "acceptance", tmp_path / "acceptance-chat"
    best.mkdir(), chat.mkdir()
    write(best, "0-01", point(8192, 128, 384))
    write(chat, "0-01", chat_point(8192, 170, 340, [0.9, 0.7, 0.4]))
    for i in range(1, 11):
        write(best, f"0.05-{i:02d}", point(8192, 140, 381))
        write(chat, f"0.3-{i:02d}", chat_point(8192, 230, 230, [0.6, 0.3, 0.1]))
    row = next(r for r in acceptance_power.power(chat) if r["share"] == 0.3)
    assert row["predicted_drop"] == pytest.approx((1 + 0.9 * 0.7 + 0.7 * 0.49 + 0.4 * 0.343) / 3.0 - 1)
    folders = (best, chat)
    assert "7.0% drop" in acceptance_power.calibrated_power(point(8192, 1, 1), folders)
    assert "33.3% drop" in acceptance_power.calibrated_power(chat_point(8192, 1, 1, None), folders)
    # the chat pair sampled at 0.7 is neither calibration's point
    assert acceptance_power.calibrated_power({**chat_point(8192, 1, 1, None), "temperature": 0.7}, folders) is None


def sampled_point(ctx, drafts, accepted):
    return {**chat_point(ctx, drafts, accepted, [0.3, 0.1, 0.03]), "temperature": 0.7}


# The committed sampled A/A at 8K (results/calibration/acceptance-chat-sampled): (drafts, accepted) per run,
# the first the base. Its 8th run is 14% below the base: the counts test calls that a regression.
SAMPLED_AA = [(337, 174), (315, 196), (350, 163), (372, 139), (344, 167), (351, 161), (368, 144), (393, 119)]
SAMPLED_AA += [(346, 165), (368, 143)]


def test_sampled_acceptance_is_judged_by_the_launch_not_the_drafts(tmp_path):
    for i, (d, a) in enumerate(SAMPLED_AA, 1):
        write(tmp_path, f"0-{i:02d}", sampled_point(8192, d, a))
    for i in range(1, 11):
        write(tmp_path, f"0.6-{i:02d}", sampled_point(8192, 439, 72))  # 1.16: -23.5%
    base, outlier = sampled_point(8192, *SAMPLED_AA[0]), sampled_point(8192, *SAMPLED_AA[7])
    assert acceptance_power._judge(base, outlier).verdict == "regression"  # the counts test, fooled
    rows = {r["share"]: r for r in acceptance_power.power(tmp_path)}
    # the spread comes from 10 runs: Student's t on 9 df, not the normal. The -23.5% runs sit 2.7 spreads x
    # sqrt 2 below the base, beyond the normal's 2.58 and short of t(9)'s 3.25, so the launch test no longer
    # claims them (issue #53: the normal reference called all ten)
    assert rows[0.0]["alarms"] == 0 and rows[0.6]["alarms"] == 0 and rows[0.0]["launch_df"] == 9
    v = acceptance_power._judge(base, sampled_point(8192, 439, 72), rows[0.0]["launch_sd"], launch_df=9)
    assert "t on 9 df" in v.evidence and 0.01 < v.detail["p"] < 0.05
    z = acceptance_power._judge(base, sampled_point(8192, 439, 72), rows[0.0]["launch_sd"])
    assert z.verdict == "regression" and z.detail["p"] < 0.01  # the old known-variance z
    lengths = [1 + a / d for d, a in SAMPLED_AA]
    assert rows[0.0]["launch_sd"] == pytest.approx(__import__("statistics").stdev(lengths))
    # a sampled point takes that spread; one no sampled calibration covers gets none (no claim); greedy: counts
    assert acceptance_power.launch_spread(sampled_point(8192, 1, 1), tmp_path) == rows[0.0]["launch_sd"]
    assert acceptance_power.launch_spread(sampled_point(32768, 1, 1), tmp_path) == float("inf")
    assert acceptance_power.launch_spread(chat_point(8192, 1, 1, None), tmp_path) is None
    assert "launch spread 0.0" in acceptance_power.power_table([tmp_path])


def test_the_launch_test_claims_only_past_the_spread_and_nothing_uncalibrated():
    from eagle_fix.gate import verdict

    judge = lambda new, sd: verdict.acceptance(337, 174, 400, 100, base_length=1.5, new_length=new, k=3, launch_sd=sd)
    assert judge(1.35, 0.09).verdict == "within noise"  # 1.2 launch spreads of the difference
    far = judge(1.1, 0.09)
    assert far.verdict == "regression" and "one launch a side" in far.evidence
    assert far.detail["detectable_drop"] == pytest.approx(2.5758 * 0.09 * 2**0.5, rel=1e-3)
    none = judge(1.0, float("inf"))
    assert none.verdict == "within noise" and "no launch spread calibrated" in none.evidence


def test_a_sampled_point_takes_the_spread_of_its_own_contexts_committed_calibration():
    """The committed sampled calibrations (8K and 32K, chat pair, T=0.7): each context its own spread;
    a context neither ran gets none (no claim)."""
    import json
    import statistics

    folder = acceptance_power.FOLDER.with_name("acceptance-chat-sampled-32k")
    runs = [json.loads(p.read_text().splitlines()[0]) for p in sorted(folder.glob("0-*.jsonl"))]
    assert len(runs) == 10 and {r["context_len"] for r in runs} == {32768}
    spread = acceptance_power.launch_spread(runs[0])
    assert spread == pytest.approx(statistics.stdev(r["acceptance_length"] for r in runs))
    assert spread < acceptance_power.launch_spread({**runs[0], "context_len": 8192})  # 0.031 vs 0.089
    assert acceptance_power.launch_spread({**runs[0], "context_len": 16384}) == float("inf")


def test_the_real_targets_greedy_2k_point_takes_its_own_committed_calibration():
    """The committed calibration of the real target (results/calibration/acceptance-real: cpu-real, 2K, greedy,
    256 tokens out) gives the greedy set's 2K points their figure, the trials' own count; 4K and the sampled
    points none (no calibration ran them), nor another pair's point at 2K."""
    from conftest import ROOT
    from eagle_fix.core import record

    folder = acceptance_power.FOLDER.with_name("acceptance-real")
    assert folder in acceptance_power.FOLDERS
    best = acceptance_power.calibrated(acceptance_power.power(folder))[2048]
    greedy = record.read(ROOT / "results/real-target/runs/cpu-amd-f25m1-2c-3853ad-cpu-real-greedy.jsonl")
    point = next(r for r in greedy if r["arm"] == "eagle3" and r["context_len"] == 2048 and r["mode"] == "eager")
    said = acceptance_power.calibrated_power(point)
    assert best is not None and said == (
        f"calibrated at 2K: a {-best['drop']:.1%} drop caught in {best['alarms']} of {best['trials']} trials"
    )
    assert acceptance_power.calibrated_power({**point, "context_len": 4096}) is None
    assert acceptance_power.calibrated_power({**point, "temperature": 0.7}) is None
    assert acceptance_power.calibrated_power({**point, "profile": "cpu-chat", "workload": "chat"}) is None
