"""Every engine internal the plugin wraps (`eagle_fix.fix.hooks.HOOK_POINTS`), for both model runners,
exists in the installed vLLM with the parameters its wrapper reads. Config-level (imports and
signatures only, no engine, no device), so it runs in each release's venv, vLLM's CUDA builds
included (scripts/matrix.sh, results/releases/hooks-*.txt): a hooked name that disappears or
changes its signature fails here by name, before a benchmark records an unmeasured drafter."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from eagle_fix.fix.hooks import ARGUMENT_FIELDS, DAMAGE_INPUTS, HOOK_POINTS, resolve_hook

pytest.importorskip("vllm")

POINTS = [(runner, point) for runner, points in HOOK_POINTS.items() for point in points]


@pytest.mark.parametrize("runner,point", POINTS, ids=[f"{r}:{p.module}:{p.qualname}" for r, p in POINTS])
def test_hook_point_exists_with_the_parameters_its_wrapper_reads(runner, point):
    module = importlib.import_module(point.module)  # ImportError: the module is gone
    cls_name, _, attr = point.qualname.rpartition(".")
    cls = getattr(module, cls_name, None)
    assert inspect.isclass(cls), f"runner {runner}: no class {cls_name} in {point.module}"
    fn = getattr(cls, attr, None)
    assert callable(fn), f"runner {runner}: no {point.qualname} in {point.module}"
    names = list(inspect.signature(fn).parameters)  # through the plugin's wrapper, if installed
    assert names[:1] == ["self"], names
    lacking = [p for p in point.params if p not in names]
    assert not lacking, f"runner {runner}: {point.qualname} has no parameter {lacking}; signature ({', '.join(names)})"
    assert resolve_hook(point)[2] is None  # the plugin's own check, the one that prints the missing line


@pytest.mark.parametrize("runner", sorted(ARGUMENT_FIELDS))
def test_the_argument_the_proposal_wrapper_reads_has_its_fields(runner):
    module, cls_name, fields = ARGUMENT_FIELDS[runner]
    cls = getattr(importlib.import_module(module), cls_name)
    have = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set(dir(cls))
    assert set(fields) <= have, f"runner {runner}: {module}.{cls_name} lacks {sorted(set(fields) - have)}"


@pytest.mark.parametrize("runner", sorted(DAMAGE_INPUTS))
def test_the_proposer_takes_an_input_the_damage_knob_blurs(runner):
    """EAGLE_FIX_INJECT_DRAFT_NOISE blurs the first of DAMAGE_INPUTS the proposer takes (the V2 hook is
    measured nowhere else on CPU, so its signature is held here, in every release's venv)."""
    point = next(p for p in HOOK_POINTS[runner] if p.wrap.endswith("_propose"))
    _, fn, problem = resolve_hook(point)
    assert problem is None, problem
    names = list(inspect.signature(fn).parameters)
    assert any(n in names for n in DAMAGE_INPUTS[runner]), (runner, DAMAGE_INPUTS[runner], names)


def test_vllm_says_which_runner_it_picks():
    """The doctor and the records name the runner by VllmConfig.use_v2_model_runner."""
    from vllm.config import VllmConfig

    assert isinstance(inspect.getattr_static(VllmConfig, "use_v2_model_runner"), property)
