"""The acceptance gate's calibration knobs (eagle_fix.fix.damage): parsed in one line, seeded, graded, and
applied by the proposal wrappers of both runners through the installed vLLM's own signatures (V1's
measured in the engine by tests/engine/test_engine.py, V2's only here: no V2 runs on CPU)."""

from __future__ import annotations

import importlib
import inspect

import pytest

torch = pytest.importorskip("torch")

from eagle_fix.core.settings import INJECT_DRAFT_ERRORS_ENV, INJECT_DRAFT_NOISE_ENV
from eagle_fix.fix import damage, hooks


@pytest.mark.parametrize("raw", ["x", "-0.1", "1.5", "nan"])
def test_a_bad_share_is_one_line_naming_the_knob(raw):
    with pytest.raises(ValueError, match=f"^{INJECT_DRAFT_ERRORS_ENV}=") as exc:
        damage.parse_draft_errors(raw)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("raw", ["x", "-1", "inf"])
def test_a_bad_noise_is_one_line_naming_the_knob(raw):
    with pytest.raises(ValueError, match=f"^{INJECT_DRAFT_NOISE_ENV}="):
        damage.parse_draft_noise(raw)


def test_expected_acceptance_falls_with_the_share():
    assert damage.expected_acceptance(0.0, 3) == 4.0
    assert damage.expected_acceptance(1.0, 3) == 1.0
    assert damage.expected_acceptance(0.1, 3) == pytest.approx(1 + 0.9 + 0.81 + 0.729)


def test_wrong_ids_are_seeded_in_range_and_never_themselves():
    ids = torch.tensor([[0, 5, 9], [3, 0, 511]])
    a, b = damage._Damage(), damage._Damage()
    wa, wb = a.wrong(ids, 0.5), b.wrong(ids, 0.5)
    assert torch.equal(wa, wb)  # the same draws in every launch
    assert torch.equal(a.wrong(ids, 0.0), ids)
    every = damage._Damage().wrong(ids, 1.0)
    assert (every != ids).all() and (every >= 0).all() and (every <= ids.max() + 1).all()
    share = (damage._Damage().wrong(torch.arange(1, 20001), 0.2) != torch.arange(1, 20001)).float().mean()
    assert 0.18 < share < 0.22


def test_noise_is_relative_to_each_rows_rms():
    x = torch.cat([torch.ones(1, 4096), 100 * torch.ones(1, 4096)])
    out = damage._Damage().perturb(x, 0.5)
    rel = ((out - x).pow(2).mean(-1).sqrt() / x.pow(2).mean(-1).sqrt()).tolist()
    assert rel == pytest.approx([0.5, 0.5], rel=0.05)


def _proposer(runner):
    point = next(p for p in hooks.HOOK_POINTS[runner] if p.wrap.endswith("_propose"))
    cls = getattr(importlib.import_module(point.module), point.qualname.split(".")[0])
    real = getattr(cls, point.qualname.split(".")[1])
    seen = {}

    def fake(self, *args, **kwargs):
        seen.update(inspect.signature(real).bind_partial(self, *args, **kwargs).arguments)
        return torch.arange(1, 7).view(2, 3)

    fake.__signature__ = inspect.signature(real)
    return fake, seen


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_the_wrappers_blur_the_input_and_spoil_the_drafts_through_vllms_signature(runner, monkeypatch):
    pytest.importorskip("vllm")
    monkeypatch.setenv(INJECT_DRAFT_NOISE_ENV, "1")
    monkeypatch.setenv(INJECT_DRAFT_ERRORS_ENV, "1")
    fake, seen = _proposer(runner)
    wrapped = hooks._damage(fake, runner)
    hidden = torch.ones(4, 8)
    name = next(n for n in hooks.DAMAGE_INPUTS[runner] if n in inspect.signature(fake).parameters)
    value = [hidden, hidden] if name == "aux_hidden_states" else hidden
    before = hooks.COUNTERS.damaged
    out = wrapped(fake, object(), (), {name: value})
    got = seen[name]
    for t in got if isinstance(got, list) else [got]:
        assert not torch.equal(t, hidden)  # blurred
    assert torch.equal(hidden, torch.ones(4, 8))  # the runner's own tensor untouched
    assert (out != torch.arange(1, 7).view(2, 3)).all()  # share 1: every draft wrong
    assert hooks.COUNTERS.damaged == before + 1


def test_no_knob_no_wrapper(monkeypatch):
    monkeypatch.delenv(INJECT_DRAFT_NOISE_ENV, raising=False)
    monkeypatch.delenv(INJECT_DRAFT_ERRORS_ENV, raising=False)
    assert hooks._damage(lambda self, target_hidden_states: None, "v1") is None
