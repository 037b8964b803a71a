"""`eagle-fix run` without an engine: bad input is one line before anything starts, and the plan."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from eagle_fix.core.errors import EagleFixError
from eagle_fix.sweep.plan import Point, RunArgs, plan, resolve


def run_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "run", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=False,
    )


@pytest.fixture
def existing(tmp_path):
    path = tmp_path / "done.jsonl"
    path.write_text('{"context_len": 8192}\n')
    return path


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--profile", "nope"],
            r"unknown profile 'nope': choose one of cpu-quick, cpu, cpu-tp2, gpu-tiny, gpu-dummy, gpu",
        ),
        (["--profile", "cpu-quick", "--modes", "fast"], r"--modes fast: unknown; choose from eager,compile"),
        (["--profile", "cpu-quick", "--arms", "medusa"], r"--arms medusa: unknown"),
        (["--profile", "cpu-quick", "--fix", "maybe"], r"--fix maybe: unknown; choose from on,off,upstream"),
        (["--profile", "cpu-quick", "--contexts", "8192,abc"], r"--contexts 'abc' is not a number"),
        (["--profile", "cpu-quick", "--contexts", "-1"], r"--contexts '-1' must be positive"),
        (["--profile", "cpu-quick", "--contexts", "200000"], r"beyond the target's limit \(131072 positions\)"),
        (["--profile", "cpu-quick", "--contexts", "100"], r"leaves no room for a prompt"),
        (["--profile", "cpu-quick", "--out", "/nonexistent/x.jsonl"], r"folder /nonexistent does not exist"),
        (["--profile", "gpu"], r"pass both --target DIR and --draft DIR"),
        (["--profile", "cpu-quick", "--repeats", "0"], r"--repeats '0' must be positive"),
        (["--profile", "cpu-quick", "--ttft-repeats", "x"], r"--ttft-repeats 'x' is not a number"),
        (["--profile", "cpu-quick", "--prompts", "0"], r"--prompts '0' must be positive"),
        (["--profile", "cpu-quick", "--target", "/nonexistent-model"], r"/nonexistent-model"),
    ],
)
def test_bad_input_is_one_line_before_any_engine(argv, message):
    import re

    out = run_cli(*argv)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert re.search(message, lines[0]), lines[0]


def test_existing_out_is_never_touched_without_resume(existing):
    before = existing.read_bytes()
    out = run_cli("--profile", "cpu-quick", "--out", str(existing))
    assert out.returncode == 1 and "add --resume" in out.stderr
    assert existing.read_bytes() == before


def test_plan_runs_baselines_first_and_one_engine_group_per_mode_arm_fix():
    run = resolve(RunArgs(profile="cpu-quick", contexts=(16384, 8192), fixes=("on", "off")))
    points = plan(run)
    assert points[:2] == [Point(8192, "eager", "baseline", None), Point(16384, "eager", "baseline", None)]
    assert len(points) == 2 * (2 + 2 * 2)  # modes x (baseline + eagle3 x fixes) x contexts
    assert run.prompt_len(8192) == 8192 - run.output_len - 3 - 1


def test_identity_of_a_point_is_the_records_identity():
    from eagle_fix.core import record

    run = resolve(RunArgs(profile="cpu-quick", contexts=(8192,), fixes=("on",)))
    eagle, base = Point(8192, "eager", "eagle3", "on"), Point(8192, "eager", "baseline", None)
    assert tuple(run.identity(eagle)) == record.IDENTITY
    assert record.baseline_key(run.identity(eagle)) == record.key(run.identity(base))


def test_the_ngram_arm_is_vllms_prompt_lookup_without_a_draft_or_fix_arms():
    """n-gram runs once per mode and context (no fix arms, fix None as the baseline) after the baseline, its
    engine asks vLLM for prompt lookup with the profile's windows and no draft checkpoint, and its record's
    identity is its own while its speedup divides by the baseline's."""
    import dataclasses

    from eagle_fix.core import record
    from eagle_fix.engine.spec import EngineSpec

    run = resolve(
        RunArgs(
            profile="cpu-quick",
            contexts=(8192,),
            modes=("eager",),
            arms=("ngram", "eagle3", "baseline"),
            fixes=("on", "off"),
        )
    )
    assert plan(run) == [
        Point(8192, "eager", "baseline", None),
        Point(8192, "eager", "ngram", None),
        Point(8192, "eager", "eagle3", "on"),
        Point(8192, "eager", "eagle3", "off"),
    ]
    ngram, base = Point(8192, "eager", "ngram", None), Point(8192, "eager", "baseline", None)
    spec = run.engine_spec(ngram)
    kwargs = spec.llm_kwargs()
    assert kwargs["speculative_config"] == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    assert spec.draft is None and spec.fix is None and spec.speculates
    assert EngineSpec.from_json(spec.to_json()) == spec  # the child gets the same engine
    assert "speculative_config" not in run.engine_spec(base).llm_kwargs()
    assert (
        run.engine_spec(Point(8192, "eager", "eagle3", "on")).llm_kwargs()["speculative_config"]["method"] == "eagle3"
    )
    ident = run.identity(ngram)
    assert ident["arm"] == "ngram" and ident["fix"] is None and ident["num_speculative_tokens"] == 3
    assert record.key(ident) != record.key(run.identity(base))
    assert record.baseline_key(ident) == record.key(run.identity(base))
    # the windows are the profile's
    wide = dataclasses.replace(run, profile=dataclasses.replace(run.profile, ngram_lookup_min=3, ngram_lookup_max=6))
    sc = wide.engine_spec(ngram).llm_kwargs()["speculative_config"]
    assert (sc["prompt_lookup_min"], sc["prompt_lookup_max"]) == (3, 6)


def test_the_draft_model_arm_drafts_with_the_profiles_language_model_and_says_what_it_is(tmp_path):
    """draft_model runs vLLM's draft-model path with the profile's `draft_lm` (on cpu-quick the target itself,
    labelled so by the profile and `eagle-fix arms`), no fix arms, no synthetic sampler; a profile naming no
    draft language model refuses it in one line that names what runs there, before anything is written."""
    from eagle_fix.core import arms
    from eagle_fix.engine.spec import EngineSpec
    from eagle_fix.pairs.profiles import PROFILES, tiny_pair

    run = resolve(RunArgs(profile="cpu-quick", contexts=(8192,), modes=("eager",), arms=("draft_model",)))
    p = Point(8192, "eager", "draft_model", None)
    assert plan(run) == [p]
    spec = run.engine_spec(p)
    target = str(tiny_pair()[0].resolve())
    assert spec.draft == spec.target == target and spec.fix is None and spec.speculates
    assert spec.llm_kwargs()["speculative_config"] == {
        "method": "draft_model",
        "model": target,
        "num_speculative_tokens": 3,
    }
    assert EngineSpec.from_json(spec.to_json()) == spec
    assert run.identity(p)["num_speculative_tokens"] == 3
    assert "drafting for itself" in PROFILES["cpu-quick"].arm_note("draft_model")
    assert PROFILES["cpu-quick"].arm_note("ngram") == "" and arms.DRAFT_MODEL.name in arms.ENGINE_ARMS
    out = tmp_path / "r.jsonl"
    with pytest.raises(EagleFixError) as e:
        resolve(RunArgs(profile="cpu-real", contexts=(2048,), arms=("draft_model",), out=out))
    assert str(e.value) == (
        "--arms draft_model: profile 'cpu-real' refuses it: it names no draft language model (draft_lm); "
        "use --arms eagle3,baseline,ngram"
    )
    assert not out.exists()
    listed = run_cli("--arms")
    assert "draft_model on cpu-quick,cpu,cpu-chat: the target drafting for itself" in listed.stdout


def test_arms_alone_lists_the_registry_and_runs_nothing(tmp_path):
    """`eagle-fix run --arms` (and `eagle-fix arms`) print one row per registered arm with its method, draft,
    fix arms and label; no engine starts, nothing is written."""
    from eagle_fix.core import arms
    from eagle_fix.sweep.arms_cli import arms_table

    out = run_cli("--profile", "cpu-quick", "--out", str(tmp_path / "x.jsonl"), "--arms")
    assert out.returncode == 0, out.stderr
    assert arms_table() in out.stdout and not list(tmp_path.iterdir())
    rows = {line.split()[0]: line.split() for line in arms_table().splitlines()[1:]}
    assert set(rows) == set(arms.ARMS)
    assert rows["ngram"][:5] == ["ngram", "ngram", "no", "no", "yes"]  # method, no draft, no fix arms, runs
    assert rows["eagle3"][:5] == ["eagle3", "eagle3", "yes", "yes", "yes"]
    assert rows["baseline"][1] == "-"


def test_the_regime_is_the_profiles_workload_at_the_runs_temperature():
    eagle = Point(8192, "eager", "eagle3", "on")
    run = resolve(RunArgs(profile="cpu-chat", contexts=(8192,), fixes=("on",), temperature=0.7))
    assert (run.identity(eagle)["workload"], run.identity(eagle)["temperature"]) == ("chat", 0.7)
    assert run.command(eagle).temperature == 0.7 and run.engine_spec(eagle).workload == "chat"
    quick = resolve(RunArgs(profile="cpu-quick", contexts=(8192,), fixes=("on",)))
    assert (quick.identity(eagle)["workload"], quick.command(eagle).temperature) == ("copy", 0.0)


def test_a_sampling_seed_draws_anew_on_the_same_prompts():
    eagle = Point(8192, "eager", "eagle3", "on")
    base = resolve(RunArgs(profile="cpu-chat", contexts=(8192,), fixes=("on",), temperature=0.7, seed=3))
    again = resolve(
        RunArgs(profile="cpu-chat", contexts=(8192,), fixes=("on",), temperature=0.7, seed=3, sampling_seed=5)
    )
    assert (base.engine_spec(eagle).seed, again.engine_spec(eagle).seed) == (3, 5)
    assert base.command(eagle) == again.command(eagle)  # the prompts' seed is --seed's
    assert base.identity(eagle) == again.identity(eagle)


def test_a_bad_sampling_seed_is_one_line():
    proc = run_cli("--profile", "cpu-chat", "--sampling-seed", "x")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and "--sampling-seed 'x' is not a number" in last


@pytest.mark.parametrize("bad", ["-0.1", "2.5", "nan", "hot"])
def test_a_temperature_out_of_range_is_one_line(bad):
    proc = run_cli("--profile", "cpu-chat", "--temperature", bad)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and f"--temperature={bad!r}" in last and last.endswith("; 0 is greedy decoding")
    assert ("is not a number" if bad == "hot" else "must be between 0 and 2") in last


def test_a_full_filesystem_is_refused_before_any_engine(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from eagle_fix.core.errors import EagleFixError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(EagleFixError, match=r"--out .*only 0.0 MiB free on that filesystem"):
        resolve(RunArgs(profile="cpu-quick", out=tmp_path / "x.jsonl"))


def test_run_with_out_on_a_full_filesystem_is_one_line(tmp_path):
    """A real (1 MiB) filesystem: refused before any engine starts, one line, no traceback."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        (mnt / "filler").write_bytes(b"x" * (900 << 10))  # what is left: ~100 KiB
        out = run_cli("--profile", "cpu-quick", "--out", str(mnt / "run.jsonl"))
        assert out.returncode == 1
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert re.search(r"--out .*small: only 0.\d MiB free on that filesystem", lines[0]), lines[0]
        assert not (mnt / "run.jsonl").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


# --------------------------------------------------------------------------- calibration knobs


@pytest.mark.parametrize(
    "knob, value",
    [
        ("EAGLE_FIX_INJECT_SLOWDOWN", "0.05"),
        ("EAGLE_FIX_INJECT_STEP_DELAY_MS", "2"),
        ("EAGLE_FIX_INJECT_DRAFT_ERRORS", "0.1"),
    ],
)
def test_a_calibration_knob_never_reaches_the_committed_results(knob, value):
    """`eagle-fix run --out results/...` with an injected slowdown or delay: one line naming the knob,
    before any engine starts (the file is not created)."""
    target = ROOT / "results" / "runs" / "knob-refused.jsonl"
    out = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "run", "--profile", "cpu-quick", "--out", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", knob: value},
        check=False,
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"{knob} is set: " in lines[0] and "under the committed results/ folder" in lines[0], lines[0]
    assert not target.exists()


@pytest.mark.parametrize("value", ["-0.05", "five", "nan"])
def test_a_bad_slowdown_is_one_line_naming_it(value):
    out = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "run", "--profile", "cpu-quick"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "EAGLE_FIX_INJECT_SLOWDOWN": value},
        check=False,
    )
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"EAGLE_FIX_INJECT_SLOWDOWN={value!r}" in lines[0], lines[0]


def test_the_refusal_in_process(tmp_path, monkeypatch):
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.sweep.plan import COMMITTED_RESULTS, injected, refuse_injected_delay

    monkeypatch.delenv("EAGLE_FIX_INJECT_STEP_DELAY_MS", raising=False)
    monkeypatch.setenv("EAGLE_FIX_INJECT_SLOWDOWN", "0.05")
    assert injected() == {"EAGLE_FIX_INJECT_SLOWDOWN": "0.05"}
    refuse_injected_delay(tmp_path / "x.jsonl")  # elsewhere: fine
    refuse_injected_delay(None)
    for where in ("runs/x.jsonl", "asv/x.json", "releases/ab-a-b.json", "calibration/x.json"):
        with pytest.raises(EagleFixError, match="EAGLE_FIX_INJECT_SLOWDOWN is set: "):
            refuse_injected_delay(COMMITTED_RESULTS / where)
    # a knob recorded per side (eagle-fix ab): results/calibration/ may hold it, nothing else under results/
    refuse_injected_delay(
        COMMITTED_RESULTS / "calibration" / "slowdown-5.json",
        {"EAGLE_FIX_INJECT_SLOWDOWN": "0.05"},
        calibration_ok=True,
    )
    monkeypatch.delenv("EAGLE_FIX_INJECT_SLOWDOWN")
    with pytest.raises(EagleFixError, match="EAGLE_FIX_INJECT_SLOWDOWN is set in --new-env: ") as exc:
        refuse_injected_delay(
            COMMITTED_RESULTS / "releases" / "ab.json",
            {"EAGLE_FIX_INJECT_SLOWDOWN": "0.05"},
            calibration_ok=True,
            where=" in --new-env",
            exit_code=2,
        )
    assert exc.value.exit_code == 2
    assert injected({"EAGLE_FIX_INJECT_SLOWDOWN": "", "OTHER": "1"}) == {}


def _ab_args(tmp_out, *extra):
    import argparse

    from eagle_fix.gate import ab

    parser = argparse.ArgumentParser()
    ab.add_cli_args(parser)
    return ab.ABArgs.from_cli_args(
        parser.parse_args(
            ["--base-python", sys.executable, "--new-python", sys.executable, "--out", str(tmp_out), *extra]
        )
    )


def test_ab_refuses_a_knob_where_its_file_would_not_record_it(tmp_path, monkeypatch):
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.sweep.plan import COMMITTED_RESULTS

    monkeypatch.delenv("EAGLE_FIX_INJECT_STEP_DELAY_MS", raising=False)
    monkeypatch.delenv("EAGLE_FIX_INJECT_SLOWDOWN", raising=False)
    calib = COMMITTED_RESULTS / "calibration" / "never-written.json"
    # per side, recorded in the file: calibration/ and anywhere outside results/ are fine
    args = _ab_args(calib, "--new-env", "EAGLE_FIX_INJECT_SLOWDOWN=0.05")
    assert args.new_env == {"EAGLE_FIX_INJECT_SLOWDOWN": "0.05"}
    _ab_args(tmp_path / "ab.json", "--new-env", "EAGLE_FIX_INJECT_SLOWDOWN=0.05")
    with pytest.raises(EagleFixError, match="EAGLE_FIX_INJECT_SLOWDOWN is set in --new-env: .*results/releases"):
        _ab_args(COMMITTED_RESULTS / "releases" / "never-written.json", "--new-env", "EAGLE_FIX_INJECT_SLOWDOWN=0.05")
    with pytest.raises(EagleFixError, match="EAGLE_FIX_INJECT_SLOWDOWN='-1' must be"):
        _ab_args(tmp_path / "ab.json", "--base-env", "EAGLE_FIX_INJECT_SLOWDOWN=-1")
    # in ab's own environment: both sides carry it and neither side's env shows it
    monkeypatch.setenv("EAGLE_FIX_INJECT_SLOWDOWN", "0.05")
    with pytest.raises(EagleFixError, match="EAGLE_FIX_INJECT_SLOWDOWN is set: "):
        _ab_args(calib)
    assert not calib.exists()


def test_the_doctor_runs_once_per_fix_arm_not_per_mode(monkeypatch):
    """The doctor's answer depends on the plugin mode and the pair, not on the compilation: the eager and
    compiled groups of a fix arm share one doctor child (each costs a vLLM import), each record its own copy."""
    from eagle_fix.fix.plugin import MODE_ENV
    from eagle_fix.sweep import loop

    calls = []

    def fake_run(cmd, **kw):
        calls.append(kw["env"][MODE_ENV])
        return subprocess.CompletedProcess(cmd, 0, stdout='{"verdict": "fixed"}', stderr="")

    monkeypatch.setattr(loop.subprocess, "run", fake_run)
    loop._doctor.cache_clear()
    run = resolve(
        RunArgs(
            profile="cpu-quick", contexts=(8192,), modes=("eager", "compile"), arms=("eagle3",), fixes=("on", "off")
        )
    )
    states = {(p.mode, p.fix): loop._fix_state(run, p) for p in plan(run)}
    assert sorted(calls) == ["auto", "revert"] and len(states) == 4
    assert all(s == ({"verdict": "fixed"}, None) for s in states.values())
    # a copy each: a record's doctor never aliases another's
    assert states[("eager", "on")][0] is not states[("compile", "on")][0]
    loop._doctor.cache_clear()
