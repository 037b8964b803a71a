"""Stage 2, the fix of vLLM PR #49343: the library (`eagle_fix.fix.positions`, re-exported here), the vLLM
plugin that backports it and counts the drafter's real work, the checkpoint reader and the doctor."""

from eagle_fix.fix.positions import (
    CACHE_ONLY_ROPE_TYPES,
    SHARED_POSITION_METHODS,
    draft_layer_order,
    maybe_override_draft_max_position_embeddings,
    proposer_block_size,
    rope_is_cache_only,
    rope_types,
)

__all__ = [
    "CACHE_ONLY_ROPE_TYPES",
    "SHARED_POSITION_METHODS",
    "draft_layer_order",
    "maybe_override_draft_max_position_embeddings",
    "proposer_block_size",
    "rope_is_cache_only",
    "rope_types",
]
