"""eagle-fix ab: bad input is one line (exit 2); paired verdicts; on the real engine, identical sides
pass and the calibrated injected delay is caught (the gate's power, measured in CI)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from eagle_fix.engine.protocol import PointReply
from eagle_fix.gate import ab, ab_result, components, sharing, simulate, verdict
from eagle_fix.pairs import profiles as models


def run_ab(*argv: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "ab", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=False,
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--base-python", "/nonexistent/python", "--new-python", sys.executable],
            r"--base-python /nonexistent/python: not an executable Python",
        ),
        (
            ["--base-python", sys.executable, "--new-python", sys.executable, "--new-env", "NOEQUALS"],
            r"--new-env 'NOEQUALS': expected KEY=VALUE",
        ),
        (
            ["--base-python", sys.executable, "--new-python", sys.executable, "--rounds", "0"],
            r"--rounds '0' must be positive",
        ),
        (  # the shared integer parser's refusal (exit 1 elsewhere) is "cannot judge" here
            ["--base-python", sys.executable, "--new-python", sys.executable, "--rounds", "-3"],
            r"--rounds '-3' must be positive",
        ),
        (
            ["--base-python", sys.executable, "--new-python", sys.executable, "--modes", "fast"],
            r"--modes fast: unknown",
        ),
    ],
)
def test_bad_input_is_one_line(argv, message):
    """Every refusal exits 2 ("cannot judge"), never 1 ("regression"), whichever parser refused it."""
    import re

    out = run_ab(*argv, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert re.search(message, lines[0]), lines[0]


def test_a_python_without_eagle_fix_is_refused(tmp_path):
    import venv

    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    out = run_ab(
        "--base-python", str(tmp_path / "bare" / "bin" / "python"), "--new-python", sys.executable, timeout=300
    )
    assert out.returncode == 2 and "cannot import eagle_fix there" in out.stderr and "pip install -e ." in out.stderr


def _entry(base, new, **extra):
    pairs = [
        {
            "round": i,
            "base": {"tpot_ms": b, "decode_throughput_tok_s": 1000 / b},
            "new": {"tpot_ms": n, "decode_throughput_tok_s": 1000 / n},
        }
        for i, (b, n) in enumerate(zip(base, new))
    ]
    return {
        "identity": {
            "context_len": 8192,
            "mode": "eager",
            "arm": "baseline",
            "fix": None,
            "num_speculative_tokens": None,
        },
        "status": {"base": "ok", "new": "ok"},
        "pairs": pairs,
        **extra,
    }


def test_paired_verdicts():
    """One speed metric is gated (TPOT here, where no round measured step_ms); decode throughput, TPOT's
    reciprocal, is shown with its change and no verdict of its own."""
    base8 = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.1]
    slow = ab_result.verdicts(_entry(base8, [11.5, 11.8, 11.4, 11.6, 11.5, 11.9, 11.3, 11.6]), 0.05, k=None)
    assert slow["tpot_ms"]["verdict"] == "regression"
    shown = slow["decode_throughput_tok_s"]
    assert (
        shown["verdict"] == "not gated" and "shown, not gated (the gated speed metric is tpot_ms)" in shown["evidence"]
    )
    assert shown["change"] < -0.1
    same = ab_result.verdicts(_entry(base8, [10.1, 10.0, 10.2, 9.9, 10.0, 10.2, 9.9, 10.0]), 0.05, k=None)
    assert same["tpot_ms"]["verdict"] == "within noise"
    failed = ab_result.verdicts(_entry([10.0], [10.0], status={"base": "ok", "new": "failed"}), 0.05, k=None)
    assert failed == {"status": {"verdict": "failed"}}


def test_a_host_clock_metric_is_shown_never_gated():
    """step_ms is the gated speed metric where both sides measured it; read on the `host` clock (CUDA,
    metrics.clocks_on) it keeps its change and gets no verdict, and TPOT is gated in its place."""
    base8 = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.1]
    slow = [11.5, 11.8, 11.4, 11.6, 11.5, 11.9, 11.3, 11.6]
    entry = _entry(base8, slow)
    for p in entry["pairs"]:
        p["base"]["step_ms"], p["new"]["step_ms"] = 2 * p["base"]["tpot_ms"], 2 * p["new"]["tpot_ms"]
    assert ab_result.gated_metric(entry) == "step_ms"
    out = ab_result.verdicts(entry, 0.05, k=None)
    assert out["step_ms"]["verdict"] == "regression" and out["tpot_ms"]["verdict"] == "not gated"
    entry["clocks"] = {"step_ms": "host"}
    assert ab_result.gated_metric(entry) == "tpot_ms"
    out = ab_result.verdicts(entry, 0.05, k=None)
    assert out["step_ms"]["verdict"] == "not gated" and "host clock, shown only" in out["step_ms"]["evidence"]
    assert out["tpot_ms"]["verdict"] == "regression" and out["decode_throughput_tok_s"]["verdict"] == "not gated"


def test_synthetic_acceptance_is_shown_never_judged():
    """A profile whose acceptance vLLM's synthetic sampler sets (gpu-dummy): the rate is shown, no
    verdict on it, whatever the two sides' counts say; coverage is still compared exactly."""
    from eagle_fix.gate import verdict

    entry = _entry([10.0] * 8, [10.0] * 8)
    entry["pairs"][0]["base"].update(
        num_drafts=128, num_accepted_tokens=384, acceptance_length=4.0, drafter_coverage=1.0
    )
    entry["pairs"][0]["new"].update(
        num_drafts=256, num_accepted_tokens=256, acceptance_length=2.0, drafter_coverage=1.0
    )
    measured = ab_result.verdicts(entry, 0.05, k=3)
    assert measured["acceptance_length"]["verdict"] == "regression"
    synthetic = ab_result.verdicts(entry, 0.05, k=3, synthetic=True)
    assert synthetic["acceptance_length"]["verdict"] == verdict.NOT_GATED
    assert synthetic["acceptance_length"]["evidence"] == verdict.SYNTHETIC
    assert synthetic["drafter_coverage"]["verdict"] == "same"


def test_the_acceptance_row_shows_the_calibrated_power_where_the_calibration_ran_this_point():
    """As in compare: where results/calibration/acceptance ran the same profile, lengths and context, the
    acceptance row says what the gate was measured to catch there; elsewhere it says nothing more."""
    entry = _entry([10.0] * 8, [10.0] * 8)
    entry["identity"].update(profile="cpu-quick", arm="eagle3", fix="on", output_len=512, batch_size=1)
    entry["identity"]["num_speculative_tokens"] = 3
    for side in ("base", "new"):
        entry["pairs"][0][side].update(num_drafts=128, num_accepted_tokens=384, acceptance_length=4.0)
    row = ab_result.verdicts(entry, 0.05, k=3)["acceptance_length"]
    assert row["verdict"] == "same"
    assert row["power"].endswith("; calibrated at 8K: a 7.6% drop caught in 10 of 10 trials"), row["power"]
    entry["identity"]["output_len"] = 128  # not the calibrated length: no borrowed claim
    assert "calibrated" not in ab_result.verdicts(entry, 0.05, k=3)["acceptance_length"]["power"]


def test_an_acceptance_row_on_a_loop_says_so_in_the_table():
    """ab keeps each round's share of distinct 4-grams (not the tokens); where either side's first round is a
    loop, its acceptance row carries compare's loop line, and the printed table shows it."""
    entry = _entry([10.0] * 8, [10.0] * 8)
    entry["identity"].update(arm="eagle3", fix="on", num_speculative_tokens=3)
    for side, share in (("base", 0.38), ("new", 0.05)):
        entry["pairs"][0][side].update(
            num_drafts=128, num_accepted_tokens=384, acceptance_length=4.0, output_distinct_4grams=share
        )
    row = ab_result.verdicts(entry, 0.05, k=3)["acceptance_length"]
    assert row["loop"].startswith("loop: 8192 eager eagle3 fix on: distinct 4-grams of the output 0.38/0.05 (BASE/NEW")
    entry["pairs"][0]["new"]["output_distinct_4grams"] = 0.41
    assert "loop" not in ab_result.verdicts(entry, 0.05, k=3)["acceptance_length"]
    del entry["pairs"][0]["base"]["output_distinct_4grams"]  # files before it: nothing to say
    assert "loop" not in ab_result.verdicts(entry, 0.05, k=3)["acceptance_length"]


def test_too_few_rounds_for_the_test_are_inconclusive_and_name_the_rounds_needed():
    """5 rounds all 15% slower used to be a regression on a (min, max) interval that covers 93.75%;
    the sign test on 5 pairs cannot go below p = 1/16, so at alpha 0.01 nothing can be claimed."""
    slow = ab_result.verdicts(_entry([10.0, 10.2, 9.9, 10.1, 10.0], [11.5, 11.8, 11.4, 11.6, 11.5]), 0.05, k=None)
    tpot = slow["tpot_ms"]
    assert tpot["verdict"] == "inconclusive" and tpot["needed"] == 8 <= ab.DEFAULT_ROUNDS
    assert tpot["power"] == "needs >= 8 rounds"
    assert "range, 93.75% cov" in tpot["evidence"]  # the (min, max) of 5 ratios, not a 95% interval


def test_default_rounds_reach_the_level_and_each_row_states_its_power():
    from eagle_fix.core import significance
    from eagle_fix.gate import verdict

    assert ab.DEFAULT_ALPHA == verdict.DEFAULT_ALPHA and ab.DEFAULT_THRESHOLD == verdict.DEFAULT_THRESHOLD
    assert ab.DEFAULT_ROUNDS == verdict.DEFAULT_ROUNDS  # how many the calibration shows: tests/gate/test_calibration.py
    assert (
        significance.sign_test_floor(8) < ab.DEFAULT_ALPHA <= significance.sign_test_floor(7)
    )  # the least that can speak
    noisy = [10.0, 12.0, 9.0, 11.0, 10.5, 9.5, 10.0, 11.5]
    v = ab_result.verdicts(
        _entry(noisy, [b * r for b, r in zip(noisy, [1.1, 0.9, 1.05, 0.95, 1.2, 0.85, 1.0, 1.02])]), 0.05, k=None
    )["tpot_ms"]
    assert v["verdict"] == "within noise" and v["alpha"] == 0.01
    # all 8 ratios must land above 1 for the sign test: the largest (median / ratio) - 1
    assert v["detectable"] == pytest.approx(1.01 / 0.85 - 1)  # median ratio 1.01, smallest 0.85
    assert v["power"] == f"could detect >= {v['detectable']:.1%}"


def _fake_ab_args(tmp_path, monkeypatch, fake_engine, rounds, blocks=None, modes="eager"):
    """ab's arguments for one cpu-quick 8K eager EAGLE3 point, its engines replaced by `fake_engine`
    (a side's engine sees SIDE=base or SIDE=new in its env) and the side probe skipped."""
    import argparse

    from eagle_fix.engine import lifecycle

    monkeypatch.setattr(ab, "EngineProcess", fake_engine)
    monkeypatch.setattr(lifecycle, "install_signal_handlers", lambda: None)
    # no recorded noise unless a test records some: the design is the fixed one
    monkeypatch.setattr(components, "FOLDER", tmp_path / "gate")
    monkeypatch.setattr(
        ab,
        "side_info",
        lambda python, env, flag: {"python": python, "env": env, "versions": {"vllm": "0.0"}, "machine_id": "m"},
    )
    args = argparse.Namespace(
        base_python=sys.executable,
        new_python=sys.executable,
        base_env=["SIDE=base"],
        new_env=["SIDE=new"],
        profile="cpu-quick",
        contexts="8192",
        modes=modes,
        arms="eagle3",
        fix="on",
        output_len=None,
        rounds=None if rounds is None else str(rounds),
        threshold=0.05,
        strict=False,
        out=str(tmp_path / "ab.json"),
        blocks=blocks,
    )
    return ab.ABArgs.from_cli_args(args)


def _fake_engine(
    factor=1.0, second_penalty=0.0, log=None, started=None, launch_sd=0.0, round_sd=0.0, seed=0, accepts=None
):
    """A fake engine class: base decodes at 10 ms a token, new at factor x that; each engine instance (a launch)
    runs exp(N(0, launch_sd)) slower for its life and each measurement exp(N(0, round_sd)) (seeded); the second
    measurement of a round is `second_penalty` slower (an order effect); `log` collects the sides in the order
    they were measured, `started` the order their engines started; `accepts(side, prompt seed)`: the acceptance
    length it reports (default 4.0, every draft accepted)."""
    import random

    rng = random.Random(seed)
    measured = [] if log is None else log
    starts = [] if started is None else started

    class Fake:
        def __init__(self, spec, log, *, python, env, **_):
            self.side = env.get("SIDE")
            starts.append(self.side)
            self.slow = (factor if self.side == "new" else 1.0) * math.exp(rng.gauss(0, launch_sd))
            self.calls = 0

        def run_point(self, cmd, timeout_s):
            self.calls += 1
            measured.append(self.side)
            second = len(measured) % 2 == 0  # both sides are measured once per round
            tpot = 10.0 * self.slow * (1 + 0.01 * (self.calls % 3)) * (1 + second_penalty * second)
            tpot *= math.exp(rng.gauss(0, round_sd))
            length = 4.0 if accepts is None else accepts(self.side, cmd.seed)
            return PointReply(
                prompt_len=cmd.prompt_len,
                samples={
                    "tpot_ms": [tpot],
                    "step_ms": [tpot * 2],
                    "step_cpu_ms": [tpot * 1.8],
                    "decode_throughput_tok_s": [1000.0 / tpot],
                    "ttft_s": [1.0],
                },
                num_drafts=128,
                num_accepted_tokens=round(128 * (length - 1)),
                acceptance_length=length,
                drafter_coverage=1.0,
            )

        def pause(self):
            pass

        resume = close = pause

    return Fake


def _fake_run_ab(tmp_path, monkeypatch, factor, rounds=None, blocks=None, modes="eager", **fake):
    """run_ab end to end with fake engines (_fake_engine's arguments)."""
    a = _fake_ab_args(tmp_path, monkeypatch, _fake_engine(factor, **fake), rounds, blocks, modes)
    return a, ab.run_ab(a)


def _record_noise(tmp_path, monkeypatch, capsys, launch_sd=0.02, round_sd=0.03):
    """`eagle-fix noise` on fake identical sides whose launches differ by `launch_sd`: the components and the
    plan it writes under the test's results/gate (what `ab` then reads), and its line of output."""
    from eagle_fix import cli

    _fake_ab_args(tmp_path, monkeypatch, _fake_engine(launch_sd=launch_sd, round_sd=round_sd, seed=1), None)
    monkeypatch.setattr(sys, "executable", sys.executable)
    argv = ["noise", "--profile", "cpu-quick", "--folder", str(tmp_path / "gate"), "--launch-s", "60"]
    assert cli.main([*argv, "--round-s", "3"]) == 0
    return capsys.readouterr().out


def test_without_a_recorded_launch_variance_two_launches_settle_nothing(tmp_path, monkeypatch):
    """No `eagle-fix noise` on any machine: the old design (64 rounds in 2 launch pairs) is judged on its 2
    launches alone, a t-test on 1 degree of freedom. The fake's launches are identical (a 20% slowdown in every
    round), so their variance is 0 on 1 df, which says nothing of the spread: no test, inconclusive (before, p = 0
    and a regression), and the file and its table say why and what would settle it."""
    a, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.2)
    assert a.rounds is None and a.rounds_for("eager") == ab.DEFAULT_ROUNDS  # no --rounds: the mode's default
    assert (result["threshold"], result["alpha"], result["min_detectable"]) == (0.05, 0.01, 0.05)
    assert result["schema"] == ab.SCHEMA == 8 and result["order"] == "abba" and result["rounds"] is None
    assert result["output_len"] == min(models.PROFILES["cpu-quick"].output_len, ab.DEFAULT_SAMPLE_TOKENS or 10**9)
    assert result["start_order"] == ["base", "new"]
    [point] = result["points"]
    assert (point["rounds"], point["blocks"]) == (ab.DEFAULT_ROUNDS, ab.DEFAULT_BLOCKS)
    assert "no plan recorded for cpu-quick-8192-eager-eagle3 on any machine" in point["launch_test"]["design_source"]
    assert point["gated_metric"] == "step_ms" and point["verdicts"]["tpot_ms"]["verdict"] == "not gated"
    tpot = point["verdicts"]["step_ms"]
    assert tpot["verdict"] == "inconclusive" and tpot["p"] is None and tpot["change"] > 0.19
    assert tpot["test"].startswith("no test: 2 launch(es), the launch means agree exactly (a variance of 0 on 1 df")
    assert tpot["power"] == "needs more launches or a recorded launch variance: eagle-fix noise"
    assert len(point["launch_s"]) == ab.DEFAULT_BLOCKS and all(p["wall_s"] >= 0 for p in point["pairs"])
    assert set(point["pairs"][0]["base"]["load"]) == {"load_avg_mean", "load_avg_max", "other_busy_cores"}
    json.dumps(result)  # what --out writes
    text = ab_result.format_ab(result)
    assert text.splitlines()[0].split() == [
        "context",
        "mode",
        "arm",
        "fix",
        "metric",
        "base",
        "new",
        "change",
        "evidence",
        "verdict",
    ]
    assert "(2 launches x 32 rounds)" in text and "(threshold 5%, alpha 0.01" in text
    assert result["summary"]["exit_code"] == 0


def test_noise_records_the_launch_variance_and_a_plan_that_ab_then_runs(tmp_path, monkeypatch, capsys):
    """`eagle-fix noise` on identical sides whose launches differ by 2%: the launch sd it records is of that
    size, with a plan; `ab` on this machine then runs that plan, judges at its looks and stops at the first
    look that settles every metric: a 20% slowdown is a regression after the first look, an identical side
    settles within noise, each having run only the launches it needed."""
    line = _record_noise(tmp_path, monkeypatch, capsys)
    [rec_path] = (tmp_path / "gate").glob("*/cpu-quick-8192-eager-eagle3.json")
    rec = json.loads(rec_path.read_text())
    step = rec["metrics"]["step_ms"]
    assert 0.005 < step["sigma_launch"] < 0.06 and step["sigma_launch_upper"] >= step["sigma_launch"]
    assert (
        step["blocks"] == 8
        and step["rounds"] == 8 * 16
        and rec["costs"] == {"launch_s": 60.0, "round_s": 3.0, "from": "given (--launch-s, --round-s)"}
    )
    plan = rec["plan"]
    assert plan["max_blocks"] % plan["look_every"] == 0 and plan["detectable"] <= 0.05 and plan["power"] >= 0.9
    assert f"launch sd {step['sigma_launch']:.2%}" in line and "catches" in line
    # the A/A file the estimate came from is kept beside it
    assert len(list(rec_path.parent.glob("cpu-quick-8192-eager-eagle3-aa-*.json"))) == 1

    _, slow = _fake_run_ab(tmp_path, monkeypatch, factor=1.2, launch_sd=0.02, round_sd=0.03, seed=2)
    [point] = slow["points"]
    assert point["launch_test"]["design_source"].startswith("the plan recorded for ")
    assert point["design"]["rounds"] == plan["rounds"] and point["blocks"] == plan["look_every"]
    assert point["stopped"].startswith(f"settled after {plan['look_every']} of {plan['max_blocks']} launches")
    assert point["verdicts"]["step_ms"]["verdict"] == "regression" and slow["summary"]["exit_code"] == 1
    assert (
        point["looks"]
        == [{"after_blocks": plan["look_every"], "verdicts": {m: "regression" for m in point["looks"][0]["verdicts"]}}]
        and "step_ms" in point["looks"][0]["verdicts"]
    )
    # the step on the thread's CPU clock is recorded, its noise measured, its change shown, never gated
    assert "step_cpu_ms" in rec["metrics"] and "step_cpu_ms" not in point["looks"][0]["verdicts"]
    cpu = point["verdicts"]["step_cpu_ms"]
    assert (
        cpu["verdict"] == "not gated"
        and cpu["change"] > 0.15
        and cpu["evidence"].endswith("shown, not gated (the gated speed metric is step_ms)")
    )
    assert point["clocks"] == {"step_ms": "wall", "step_cpu_ms": "thread_cpu"}
    # the docs' table of the clocks: both, from the same rounds, each with the plan it would buy
    from eagle_fix.gate import noise_tables

    table = noise_tables.clocks_table([tmp_path / "gate"])
    assert (
        "| `step_ms` (wall) | 8 (128 rounds) |" in table and "| `step_cpu_ms` (thread_cpu) | 8 (128 rounds) |" in table
    )
    assert table.count("catches") == 2

    # identical sides, ten seeds: never a regression or an improvement, each within noise, most before the plan's
    # last launch (their interval excluded the threshold), the rest at it
    runs = [
        _fake_run_ab(tmp_path, monkeypatch, factor=1.0, launch_sd=0.02, round_sd=0.03, seed=s)[1] for s in range(3, 13)
    ]
    got = [(r["points"][0]["verdicts"]["step_ms"]["verdict"], r["points"][0]["blocks"]) for r in runs]
    assert {v for v, _ in got} == {"within noise"} and all(r["summary"]["exit_code"] == 0 for r in runs)
    assert sum(b < plan["max_blocks"] for _, b in got) >= 5, got


def test_a_machine_without_a_record_borrows_the_most_cautious_one_and_says_so(tmp_path, monkeypatch, capsys):
    """ab on a machine with no `eagle-fix noise` of its own runs the plan of another machine's record of the same
    point kind, the one with the largest launch sd, and each point names where its plan came from. The test pools
    that record's analysis of variance (its metric's dict, bound included). Its "could detect" is the rule's
    operating curve for that plan where one was simulated (simulate.could_detect), else the test's, said so."""
    _record_noise(tmp_path, monkeypatch, capsys, launch_sd=0.01)
    point_name = "cpu-quick-8192-eager-eagle3"
    [rec_path] = (tmp_path / "gate").glob(f"*/{point_name}.json")
    other = json.loads(rec_path.read_text())
    cautious = json.loads(rec_path.read_text())
    for name, data, scale in (("elsewhere-a", other, 0.5), ("elsewhere-b", cautious, 3.0)):
        data["machine"] = name
        for m in data["metrics"].values():
            m["sigma_launch"] *= scale
            m["sigma_launch_upper"] *= scale
        components.write(data, tmp_path / "gate")
    rec_path.unlink()
    monkeypatch.setattr(simulate, "OUT", tmp_path / "simulation")  # no curve simulated yet
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.2)
    [point] = result["points"]
    assert "borrowed from elsewhere-b: none recorded for " in point["launch_test"]["source"]
    borrowed = point["launch_test"]["sigma"]["step_ms"]
    assert borrowed == cautious["metrics"]["step_ms"]
    assert borrowed["sigma_launch_upper"] == 6 * other["metrics"]["step_ms"]["sigma_launch_upper"]  # 3.0 / 0.5
    assert point["launch_test"]["curve"] == {"machine": "elsewhere-b", "point": point_name, "detect_90": None}
    assert point["verdicts"]["step_ms"]["power"].endswith(" df, not the rule's)")
    curve = {"machine": "elsewhere-b", "point": point_name, "threshold": 0.05, "plan": {"alpha": 0.01}}
    (tmp_path / "simulation").mkdir()
    (tmp_path / "simulation" / simulate.CURVE_FILE).write_text(json.dumps({"curves": [{**curve, "detect_90": 0.061}]}))
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.2)
    [point] = result["points"]
    want = "could detect >= 6.1% (the rule's operating curve, elsewhere-b's plan)"
    assert point["verdicts"]["step_ms"]["power"] == want and point["verdicts"]["step_ms"]["detectable"] == 0.061


def test_each_mode_gets_its_calibrated_rounds_unless_rounds_is_given(tmp_path, monkeypatch):
    """Compiled points are noisier here: 64 rounds caught 8 of 10 trials at +5%, 128 all 10
    (docs/statistics.md); each point records the rounds it ran, and --rounds overrides every mode."""
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.0, modes="eager,compile")
    got = {p["identity"]["mode"]: (p["rounds"], len(p["pairs"])) for p in result["points"]}
    assert got == {"eager": (64, 64), "compile": (128, 128)}
    assert verdict.default_rounds("eager") == ab.DEFAULT_ROUNDS and verdict.default_rounds("compile") == 128
    assert "points x 64 rounds eager, 128 compile in 2 blocks on " in ab_result.format_ab(result)
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.0, modes="eager,compile", rounds=6)
    assert [(p["rounds"], len(p["pairs"])) for p in result["points"]] == [(6, 6), (6, 6)] and result["rounds"] == 6
    assert "points x 6 rounds in 2 blocks on " in ab_result.format_ab(result)


def test_each_block_restarts_the_engines_in_the_opposite_order_and_records_it(tmp_path, monkeypatch):
    """The engine started first can measure slower on identical sides (docs/statistics.md): a point's
    blocks alternate which engine starts first, and every pair says the order its engines really
    started in."""
    started = []
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.0, rounds=4, started=started, blocks="2")
    assert result["start_order"] == list(ab.START_ORDER) and result["blocks"] == 2
    assert started == ["base", "new", "new", "base"]
    [point] = result["points"]
    assert [(p["block"], p["start_order"]) for p in point["pairs"]] == [
        (0, ["base", "new"]),
        (0, ["base", "new"]),
        (1, ["new", "base"]),
        (1, ["new", "base"]),
    ]
    # each start order's own median ratio is kept, for reading an A/A
    assert set(point["verdicts"]["tpot_ms"]["median_ratio_by_start_order"]) == {
        "base_started_first",
        "new_started_first",
    }


def test_blocks_split_the_rounds_evenly():
    assert [ab.block_of(r, 64, 2) for r in (0, 31, 32, 63)] == [0, 0, 1, 1]
    assert [ab.block_of(r, 5, 2) for r in range(5)] == [0, 0, 0, 1, 1]
    assert [ab.block_of(r, 2, 4) for r in range(2)] == [0, 1]  # never more blocks than rounds


def test_round_order_is_abba():
    assert [ab.round_order(r) for r in range(4)] == [("base", "new"), ("new", "base"), ("base", "new"), ("new", "base")]
    firsts = [ab.round_order(r)[0] for r in range(ab.DEFAULT_ROUNDS)]
    assert firsts.count("base") == firsts.count("new")  # the default rounds balance exactly


def test_rounds_alternate_order_and_record_it(tmp_path, monkeypatch):
    log = []
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.0, log=log)
    [point] = result["points"]
    assert [p["order"] for p in point["pairs"]] == [list(ab.round_order(r)) for r in range(ab.DEFAULT_ROUNDS)]
    rounds = [side for r in range(ab.DEFAULT_ROUNDS) for side in ab.round_order(r)]
    # then greedy acceptance's other prompts, ABBA too
    prompts = [side for j in range(1, verdict.ACCEPTANCE_PROMPTS) for side in ab.round_order(j)]
    assert log == rounds + prompts
    # whichever side went first, the pair holds base and new by side and its ratio is new / base
    for pair in point["pairs"]:
        assert pair["base"]["tpot_ms"] < 10.5 and pair["new"]["tpot_ms"] < 10.5


def test_an_order_effect_does_not_pose_as_a_change(tmp_path, monkeypatch, capsys):
    """Identical sides, the second measurement of every round 7% slower: measured base first every
    round (the old order), new would read 7% slower, beyond the threshold; ABBA cancels it."""
    from eagle_fix.core import stats

    _record_noise(tmp_path, monkeypatch, capsys, launch_sd=0.005, round_sd=0.0)
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.0, rounds=64, blocks="2", second_penalty=0.07)
    tpot = result["points"][0]["verdicts"]["step_ms"]
    assert abs(stats.median(tpot["ratios"]) - 1) <= 0.01 and tpot["verdict"] == "within noise"
    assert result["summary"]["exit_code"] == 0
    ratios = tpot["ratios"]
    assert all(r > 1 for r in ratios[0::2]) and all(r < 1 for r in ratios[1::2])  # the effect is there, balanced


def test_a_comparison_that_cannot_see_the_minimum_says_so_in_one_line(tmp_path, monkeypatch):
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.0, rounds=5)
    assert result["summary"]["exit_code"] == 0
    text = ab_result.format_ab(result)
    blind = [line for line in text.splitlines() if line.startswith("power:")]
    assert blind == [
        (
            "power: 1 of 1 speed rows could not detect a 5% slowdown, the gate's stated minimum: "
            "1 could detect nothing (needs more launches or a recorded launch variance: eagle-fix noise)"
        )
    ]


AB_ENGINE_ARGS = [
    "--base-python",
    sys.executable,
    "--new-python",
    sys.executable,
    "--profile",
    "cpu-quick",
    "--modes",
    "eager",
    "--arms",
    "eagle3",
    "--rounds",
    "16",
    "--acceptance-prompts",  # CI's cost: 2 more prompts a side (the default 8 is the fake-engine tests')
    "3",
]


@pytest.mark.engine
def test_an_injected_slowdown_is_caught_across_restarts_in_both_orders(tmp_path):
    """The gate end to end on the real engine, at CI's cost (one run, the default blocks: four engine
    starts): 16 rounds and a slowdown far above the calibrated minimum, so that a noisy CI machine cannot
    make it flaky. What the default rounds catch at the stated minimum is the committed calibration's
    (tests/gate/test_calibration.py); identical sides are the slow test below and the committed A/A trials."""
    slow = run_ab(*AB_ENGINE_ARGS, "--new-env", "EAGLE_FIX_INJECT_SLOWDOWN=0.5", "--out", str(tmp_path / "s.json"))
    assert slow.returncode == 1, slow.stdout + slow.stderr[-3000:]
    result = json.loads((tmp_path / "s.json").read_text())
    assert result["idle_side"] == "paused"  # each side measured with the other's engine stopped, and both survive it
    assert result["threshold"] == ab.DEFAULT_THRESHOLD
    assert result["new"]["env"] == {"EAGLE_FIX_INJECT_SLOWDOWN": "0.5"}
    point = result["points"][0]
    # both sides' engines placed alike: the second engine must not inherit a core set the first's pinning left
    assert point["pinning"]["base"].get("worker_cpus") == point["pinning"]["new"].get("worker_cpus"), point["pinning"]
    # with the default blocks, the engines really restarted, in the opposite order
    pairs = point["pairs"]
    assert len(pairs) == 16
    assert len({tuple(p["start_order"]) for p in pairs}) == min(ab.DEFAULT_BLOCKS, 2)
    # the tiny pair's greedy output is a loop (the best case): ab keeps how far from one, and says so
    assert 0 < pairs[0]["base"]["output_distinct_4grams"] < 0.2, pairs[0]["base"]
    assert "loop: 8192 eager eagle3" in slow.stdout, slow.stdout[-2000:]
    assert any("step_ms: regression" in f for f in result["summary"]["failing"])
    # one gated speed metric: TPOT and decode throughput slowed as much, shown, never failing
    assert point["gated_metric"] == "step_ms" and result["schema"] == ab.SCHEMA == 8
    assert {point["verdicts"][m]["verdict"] for m in ("tpot_ms", "decode_throughput_tok_s")} == {"not gated"}
    assert not any(m in f for f in result["summary"]["failing"] for m in ("tpot_ms", "decode_throughput"))
    # greedy acceptance over 3 prompts (seeds 0, 1, 2): a slower step decodes the same tokens
    assert [q["seed"] for q in point["acceptance_prompts"]] == [1, 2]
    assert all(q[side]["num_drafts"] > 0 for q in point["acceptance_prompts"] for side in ("base", "new"))
    row = point["verdicts"]["acceptance_length"]
    assert row["prompts"] == 3 and row["verdict"] in ("same", "within noise"), row


@pytest.mark.slow
def test_identical_sides_pass(tmp_path):
    """Identical sides exit 0 (four more engine starts: outside CI; `-m slow` runs it)."""
    same = run_ab(*AB_ENGINE_ARGS, "--out", str(tmp_path / "aa.json"))
    assert same.returncode == 0, same.stdout + same.stderr[-3000:]


# ------------------------------------------------------------------ two engines on one GPU

GIB = 2**30


def test_sharing_plan_per_device():
    cpu = sharing.sharing_plan("cpu", None, None)
    assert cpu["sharing"] == "paused" and "SIGSTOP" in cpu["reason"]
    split = sharing.sharing_plan("cuda", 10 * GIB, 141 * GIB)
    assert split["sharing"] == "split-memory" and split["gpu_memory_utilization"] == sharing.SPLIT_UTILIZATION
    big = sharing.sharing_plan("cuda", 80 * GIB, 141 * GIB)
    assert big["sharing"] == "one-at-a-time" and "80.0 GiB" in big["reason"]
    unknown = sharing.sharing_plan("cuda", 10 * GIB, None, "NVML init failed (Driver Not Loaded)")
    assert unknown["sharing"] == "one-at-a-time" and "Driver Not Loaded" in unknown["reason"]


def _cuda_run_ab(tmp_path, monkeypatch, total):
    """run_ab on a pretend GPU of `total` bytes: fake engines that log their starts and closes."""
    import dataclasses

    from eagle_fix.machine import device
    from eagle_fix.pairs import profiles as models

    events, up = [], set()

    class Fake:
        def __init__(self, spec, log, *, python, env, **_):
            self.side, self.spec = env.get("SIDE"), spec
            # a second engine on the GPU only with each side's share split
            assert not up or spec.gpu_memory_utilization == sharing.SPLIT_UTILIZATION, "two engines up without a split"
            up.add(self.side)
            events.append(("start", self.side, spec.gpu_memory_utilization, spec.kv_cache_memory_bytes))

        def run_point(self, cmd, timeout_s):
            events.append(("point", self.side, cmd.ttft_repeats, frozenset(up)))
            return PointReply(
                prompt_len=cmd.prompt_len,
                samples={"tpot_ms": [10.0], "decode_throughput_tok_s": [100.0], "ttft_s": [1.0]},
                num_drafts=128,
                num_accepted_tokens=384,
                acceptance_length=4.0,
                drafter_coverage=1.0,
            )

        def pause(self):
            pass

        resume = pause

        def close(self):
            up.discard(self.side)
            events.append(("close", self.side))

    cuda = dataclasses.replace(models.PROFILES["cpu-quick"], device="cuda", gpu_memory_utilization=0.9)
    monkeypatch.setitem(models.PROFILES, "cpu-quick", cuda)
    monkeypatch.setattr(models.Profile, "check_runs_here", lambda self: None)
    monkeypatch.setattr(device, "gpu_total_bytes", lambda: (total, None if total else "NVML init failed"))
    return ab.run_ab(_fake_ab_args(tmp_path, monkeypatch, Fake, 4, blocks="2")), events


def test_two_engines_that_fit_split_the_gpu(tmp_path, monkeypatch):
    result, events = _cuda_run_ab(tmp_path, monkeypatch, total=141 * GIB)
    assert result["sharing"] == "split-memory" and result["idle_side"] == "paused" and result["sharing_reason"]
    starts = [e for e in events if e[0] == "start"]
    # two starts per block (both engines afresh, the order swapped), each with a share and a KV budget
    assert [e[1] for e in starts] == ["base", "new", "new", "base"]
    assert all(e[2] == sharing.SPLIT_UTILIZATION and e[3] for e in starts)
    # a fresh block's engines pay their prefill before they decode, the others do not
    # then greedy acceptance's 7 other prompts a side, each decoded with its own prefill
    extra = 2 * (verdict.ACCEPTANCE_PROMPTS - 1)
    assert [e[2] for e in events if e[0] == "point"] == [1, 1, 0, 0, 1, 1, 0, 0] + [0] * extra
    assert result["points"][0]["status"] == {"base": "ok", "new": "ok"}


def test_one_at_a_time_when_two_cannot_be_shown_to_fit(tmp_path, monkeypatch):
    result, events = _cuda_run_ab(tmp_path, monkeypatch, total=None)
    assert result["sharing"] == "one-at-a-time" and result["idle_side"] == "stopped"
    assert "NVML init failed" in result["sharing_reason"]
    points = [e for e in events if e[0] == "point"]
    extra = 2 * (verdict.ACCEPTANCE_PROMPTS - 1)  # greedy acceptance's other prompts, each with its prefill
    assert len(points) == 8 + extra and all(e[3] == {e[1]} for e in points)  # only the measured side's engine is up
    assert all(e[2] == 1 for e in points[:8])  # every fresh engine pays its prefill before the decode
    assert result["points"][0]["status"] == {"base": "ok", "new": "ok"} and len(result["points"][0]["pairs"]) == 4


def test_cpu_runs_the_same_code_paused(tmp_path, monkeypatch):
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.0, rounds=2)
    assert result["sharing"] == "paused" and result["idle_side"] == "paused"


def _row(p, change, verdict_now="within noise"):
    return {"verdict": verdict_now, "p": p, "change": change, "evidence": "e"}


def _family_result(rows, looks=1, alpha=0.01):
    """An ab result of one point per speed row (step_ms gated), each with a plan of `looks` looks."""
    return {
        "alpha": alpha,
        "threshold": 0.03,
        "points": [{"gated_metric": "step_ms", "design": {"looks": looks}, "verdicts": {"step_ms": r}} for r in rows],
    }


def test_holm_over_the_points_of_a_grid_with_alpha_spent_over_the_looks():
    """One alpha for the speed question over a whole run: Holm on each point's gated row, which enters with
    looks x p. At alpha 0.01 over 3 points, p = 0.002 and 0.004 both fail (0.002 <= 0.01/3, then
    0.004 <= 0.01/2) where Bonferroni (0.01/3 each) fails only the first; p = 0.008 twice, each a regression
    on its own, fails neither (0.008 > 0.01/2); with 2 looks 0.001 enters as 0.002 and 0.004 as 0.008; a change within the
    threshold is never a regression, however small its p."""
    rows = [_row(0.002, 0.064), _row(0.004, 0.059), _row(0.5, 0.01)]
    fam = ab_result.apply_family(_family_result(rows))
    assert [r["verdict"] for r in rows] == ["regression", "regression", "within noise"]
    assert fam["speed"] == {"rule": "holm", "alpha": 0.01, "tests": 3, "rejected": 2}
    assert rows[1]["family"]["p_holm"] == pytest.approx(0.008) and "Holm over 3 points: p=0.008" in rows[1]["evidence"]

    twice = [_row(0.008, 0.05, "regression"), _row(0.008, 0.05, "regression")]
    ab_result.apply_family(_family_result(twice))
    assert [r["verdict"] for r in twice] == ["within noise", "within noise"]

    looked = [_row(0.001, 0.064), _row(0.004, 0.059), _row(0.5, 0.01)]
    ab_result.apply_family(_family_result(looked, looks=2))  # 0.002, 0.008 vs 0.0033, 0.005
    assert [r["verdict"] for r in looked] == ["regression", "within noise", "within noise"]
    assert looked[1]["family"]["p_looks"] == pytest.approx(0.008)

    faster = [_row(1e-9, -0.2), _row(1e-9, 0.02)]
    ab_result.apply_family(_family_result(faster))
    assert [r["verdict"] for r in faster] == ["improved", "within noise"]


def test_a_point_stopped_at_its_share_is_always_kept_by_holm():
    """While it runs, a point is judged at its Bonferroni share alpha / (points x looks): whatever it settled as
    a regression there, Holm at the end keeps (it only adds)."""
    import random

    rng = random.Random(3)
    for _ in range(200):
        n, looks = rng.randint(1, 12), rng.choice([1, 2, 4])
        ps = [10 ** rng.uniform(-6, 0) for _ in range(n)]
        rows = [_row(p, 0.1, "regression" if p < 0.01 / (n * looks) else "within noise") for p in ps]
        settled = [r["verdict"] == "regression" for r in rows]
        ab_result.apply_family(_family_result(rows, looks=looks))
        assert all(r["verdict"] == "regression" for r, s in zip(rows, settled) if s)


def test_the_family_counts_one_speed_test_a_point_and_one_acceptance_test_a_drafted_point():
    points = [{"num_speculative_tokens": 3}, {"num_speculative_tokens": None}, {"num_speculative_tokens": 3}]
    assert ab_result.family_sizes(points, synthetic=False) == {"speed": 3, "acceptance": 2}
    assert ab_result.family_sizes(points, synthetic=True) == {"speed": 3, "acceptance": 1}


def test_the_base_new_and_change_columns_come_from_one_estimator():
    """Round medians (10.25 vs 10.36 here) can disagree in sign with the launch test's change; the table's
    base and new are each side's geometric mean over the launches, whose ratio is the change exactly."""
    base = [10.0, 10.0, 10.5, 10.25, 14.0, 10.0, 10.25, 10.1]
    new = [10.6, 10.6, 10.36, 10.36, 10.36, 10.4, 10.4, 10.36]
    entry = _entry(base, new)
    for i, p in enumerate(entry["pairs"]):
        p["block"] = i // 4
        p["base"]["step_ms"], p["new"]["step_ms"] = p["base"]["tpot_ms"], p["new"]["tpot_ms"]
    launch = {"sigma": {"step_ms": 0.01}, "sigma_round": {}, "source": "test", "alpha_look": 0.01}
    v = ab_result.verdicts(entry, 0.03, k=None, launch=launch)["step_ms"]
    assert (v["new_median"] > v["base_median"]) != (v["change"] > 0)  # the medians point the other way
    assert v["new_mean"] / v["base_mean"] - 1 == pytest.approx(v["change"], rel=1e-12)
    text = ab_result.format_ab(
        {
            "points": [{**entry, "verdicts": {"step_ms": v}}],
            "base": {"python": "b", "versions": {}, "env": {}},
            "new": {"python": "n", "versions": {}, "env": {}},
            "threshold": 0.03,
            "rounds": 8,
            "machine": {"name": "m"},
            "summary": {"failing": []},
        }
    )
    assert f"{v['base_mean']:.4g}" in text and f"{v['new_mean']:.4g}" in text
    assert verdict.COLUMNS_LINE in text


def test_a_p_value_below_what_prints_is_a_bound():
    assert verdict.p_text(0.0) == "p < 1e-12" and verdict.p_text(1e-13) == "p < 1e-12"
    assert verdict.p_text(1.9e-12) == "p=1.9e-12" and verdict.p_text(0.0213) == "p=0.0213"


def test_greedy_acceptance_is_judged_over_prompts_with_a_threshold():
    """The prompt is the unit: identical greedy sides are exact; one prompt whose path parted (a near-tie) is
    within noise on 8 prompts; a drop on every prompt beyond the threshold is a regression; a drop within the
    threshold is not, however significant; t on n - 1 df, scipy's."""
    from scipy import stats as sps

    base = [4.0, 3.5, 3.9, 4.0, 3.2, 3.8, 3.6, 4.0]
    same = verdict.acceptance_over_prompts(base, list(base))
    assert same.verdict == "same" and same.detail["prompts"] == 8
    parted = verdict.acceptance_over_prompts(base, [*base[:7], 1.8])
    assert parted.verdict == "within noise" and parted.change < -0.09 and parted.detail["df"] == 7
    drop = [b * 0.8 * (1 + 0.01 * i) for i, b in enumerate(base)]
    v = verdict.acceptance_over_prompts(base, drop, alpha=0.01)
    logs = [math.log(n / b) for b, n in zip(base, drop)]
    assert v.verdict == "regression" and v.detail["p"] == pytest.approx(sps.ttest_1samp(logs, 0).pvalue)
    assert "t over 8 prompts, df 7" in v.evidence and "threshold 10%" in v.power
    small = verdict.acceptance_over_prompts(base, [b * 0.95 * (1 + 0.001 * i) for i, b in enumerate(base)])
    assert small.detail["p"] < 0.01 and small.verdict == "within noise"  # significant, not beyond 10%
    one = verdict.acceptance_over_prompts([4.0], [3.0])
    assert one.verdict == "inconclusive" and one.power == "needs >= 2 prompts"


@pytest.mark.parametrize("drop_on", ["every prompt", "one prompt"])
def test_ab_judges_greedy_acceptance_over_its_prompts(tmp_path, monkeypatch, drop_on):
    """`ab` decodes --acceptance-prompts seeded prompts a side for a drafted greedy point (the speed rounds' own
    and 7 more, each recorded with its seed, none among the speed pairs): a drafter that loses a quarter on every
    prompt fails the run through Holm (the row carries its change); one prompt's lower acceptance does not."""

    def accepts(side, seed):
        if side == "base" or (drop_on == "one prompt" and seed != 3):
            return 4.0
        return 3.0

    a = _fake_ab_args(tmp_path, monkeypatch, _fake_engine(1.0, accepts=accepts), 8, "2")
    assert a.acceptance_prompts == verdict.ACCEPTANCE_PROMPTS == 8
    result = ab.run_ab(a)
    [point] = result["points"]
    assert [q["seed"] for q in point["acceptance_prompts"]] == list(range(1, 8)) and len(point["pairs"]) == 8
    row = point["verdicts"]["acceptance_length"]
    assert row["prompts"] == 8 and row["df"] == 7 and row["threshold"] == verdict.ACCEPTANCE_THRESHOLD
    if drop_on == "every prompt":
        assert (
            row["verdict"] == "regression"
            and row["change"] == pytest.approx(-0.25)
            and row["new"] == pytest.approx(3.0)
        )
        assert result["summary"]["exit_code"] == 1
    else:
        assert row["verdict"] == "within noise" and result["summary"]["exit_code"] == 0
    assert "t over 8 prompts" in ab_result.format_ab(result)


def test_a_grid_runs_each_point_at_its_share_and_records_the_family(tmp_path, monkeypatch):
    """Two points (eager and compiled): each is judged at alpha / 2 while it runs (the plan's alpha, split
    again over its looks), the file records the family sizes and rule, each gated row its family, and only
    step_ms is gated (TPOT and decode throughput shown)."""
    _, result = _fake_run_ab(tmp_path, monkeypatch, factor=1.0, rounds=8, blocks="2", modes="eager,compile")
    assert result["schema"] == 8 and result["family_sizes"] == {"speed": 2, "acceptance": 2}
    assert result["family"]["speed"]["rule"] == "holm" and result["family"]["speed"]["alpha"] == 0.01
    for point in result["points"]:
        assert point["gated_metric"] == "step_ms" and point["design"]["alpha"] == pytest.approx(0.005)
        assert point["verdicts"]["tpot_ms"]["verdict"] == point["verdicts"]["decode_throughput_tok_s"]["verdict"]
        assert point["verdicts"]["tpot_ms"]["verdict"] == "not gated"
        if point["verdicts"]["step_ms"].get("p") is not None:
            assert point["verdicts"]["step_ms"]["family"]["tests"] == 2


def test_holm_is_statsmodels_without_its_full_collection(monkeypatch):
    """family.holm gives statsmodels' Holm (rejections and adjusted p-values) without the gc.collect() its Holm
    branch runs (seconds a verdict in a process holding vLLM's heap), and leaves gc.collect as it was."""
    import gc

    from statsmodels.stats.multitest import multipletests

    from eagle_fix.gate import family

    calls = []
    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or real(*a))
    ps = [0.004, 0.03, 0.0001, 0.2, 0.012]
    reject, adjusted = family.holm(ps, 0.05)
    assert calls == [] and gc.collect is not real  # our spy is back in place, untouched
    want_reject, want_adjusted, _, _ = multipletests(ps, alpha=0.05, method="holm")
    assert reject == list(want_reject) and adjusted == pytest.approx(list(want_adjusted))
    assert len(calls) == 1  # statsmodels' own call does collect
