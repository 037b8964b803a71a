"""Every engine internal the plugin wraps (`eagle_fix.fix.hooks.HOOK_POINTS`), for both model runners,
exists in the installed vLLM with the parameters its wrapper reads. Config-level (imports and
signatures only, no engine, no device), so it runs in each release's venv, vLLM's CUDA builds
included (scripts/matrix.sh, results/releases/hooks-*.txt): a hooked name that disappears or
changes its signature fails here by name, before a benchmark records an unmeasured drafter. A runner the
release no longer has (`hooks.RUNNER_REMOVED_IN`: V1 from vLLM 0.34.0) is reported "absent in this release"
(a skip with that reason), once its module is shown to be really gone."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from eagle_fix.fix.hooks import (
    ARGUMENT_FIELDS,
    DAMAGE_INPUTS,
    HOOK_POINTS,
    absent_in_release,
    resolve_hook,
    runner_module,
    runners_of_release,
)

pytest.importorskip("vllm")

POINTS = [(runner, point) for runner, points in HOOK_POINTS.items() for point in points]


def _skip_if_absent(runner: str) -> None:
    """A runner the release removed: its module must be gone (a declaration cannot hide a renamed or broken
    runner in a release that still has it), then the point is reported absent instead of failing."""
    why = absent_in_release(runner)
    if why is None:
        return
    with pytest.raises(ImportError):
        importlib.import_module(runner_module(runner))
    pytest.skip(why)


@pytest.mark.parametrize("runner,point", POINTS, ids=[f"{r}:{p.module}:{p.qualname}" for r, p in POINTS])
def test_hook_point_exists_with_the_parameters_its_wrapper_reads(runner, point):
    _skip_if_absent(runner)
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
    _skip_if_absent(runner)
    module, cls_name, fields = ARGUMENT_FIELDS[runner]
    cls = getattr(importlib.import_module(module), cls_name)
    have = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set(dir(cls))
    assert set(fields) <= have, f"runner {runner}: {module}.{cls_name} lacks {sorted(set(fields) - have)}"


@pytest.mark.parametrize("runner", sorted(DAMAGE_INPUTS))
def test_the_proposer_takes_an_input_the_damage_knob_blurs(runner):
    """EAGLE_FIX_INJECT_DRAFT_NOISE blurs the first of DAMAGE_INPUTS the proposer takes (the V2 hook is
    measured nowhere else on CPU, so its signature is held here, in every release's venv)."""
    _skip_if_absent(runner)
    point = next(p for p in HOOK_POINTS[runner] if p.wrap.endswith("_propose"))
    _, fn, problem = resolve_hook(point)
    assert problem is None, problem
    names = list(inspect.signature(fn).parameters)
    assert any(n in names for n in DAMAGE_INPUTS[runner]), (runner, DAMAGE_INPUTS[runner], names)


def test_vllm_says_which_runner_it_picks():
    """The doctor and the records name the runner by VllmConfig.use_v2_model_runner where the release has two
    runners; a release with one (0.34.0: V2) has no such property, and the doctor names its only runner."""
    from vllm.config import VllmConfig

    if len(runners_of_release()) == 1:
        assert runners_of_release() == ("v2",)
        assert not hasattr(VllmConfig, "use_v2_model_runner")
        return
    assert isinstance(inspect.getattr_static(VllmConfig, "use_v2_model_runner"), property)


def test_a_removed_runner_is_named_by_release():
    """The declaration itself: V1 is there up to 0.33 (every registered CPU build), gone from 0.34.0."""
    assert absent_in_release("v1", "0.33.0") is None and absent_in_release("v2", "0.34.0") is None
    assert absent_in_release("v1", "0.34.0") == (
        "absent in this release: vLLM 0.34.0 has no model runner v1 (removed in 0.34.0)"
    )
    assert absent_in_release("v1", "0.34.1+cu130") and absent_in_release("v1", "0.35.0.dev3")
    assert runners_of_release("0.32.0") == ("v1", "v2") and runners_of_release("0.34.0") == ("v2",)
