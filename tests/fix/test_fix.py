"""The fix as a library: the override's rules, on plain objects, dicts and transformers configs."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from eagle_fix.fix.positions import (
    CACHE_ONLY_ROPE_TYPES,
    draft_layer_order,
    maybe_override_draft_max_position_embeddings,
    proposer_block_size,
    rope_is_cache_only,
    rope_types,
    rotary_cache_rows,
)


def test_small_value_is_raised_and_logged(caplog):
    cfg = SimpleNamespace(max_position_embeddings=2048)
    with caplog.at_level(logging.INFO, logger="vllm.eagle_fix"):
        assert maybe_override_draft_max_position_embeddings(cfg, 131072) is True
    assert cfg.max_position_embeddings == 131072
    [record] = [r for r in caplog.records if r.name == "vllm.eagle_fix"]
    assert record.levelno == logging.INFO
    assert "2048" in record.getMessage() and "131072" in record.getMessage()


@pytest.mark.parametrize("value", [8192, 131072])
def test_sufficient_value_is_kept(value, caplog):
    cfg = SimpleNamespace(max_position_embeddings=value)
    with caplog.at_level(logging.INFO, logger="vllm.eagle_fix"):
        assert maybe_override_draft_max_position_embeddings(cfg, 8192) is False
    assert cfg.max_position_embeddings == value
    assert not caplog.records


def test_missing_attribute_is_ignored():
    cfg = SimpleNamespace(hidden_size=16)
    assert maybe_override_draft_max_position_embeddings(cfg, 8192) is False
    assert not hasattr(cfg, "max_position_embeddings")


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048},
        {"rope_type": "longrope"},
        {"rope_type": "dynamic", "factor": 2.0},
    ],
)
def test_length_dependent_rope_is_kept(rope):
    cfg = SimpleNamespace(max_position_embeddings=2048, rope_parameters=rope)
    assert maybe_override_draft_max_position_embeddings(cfg, 8192) is False
    assert cfg.max_position_embeddings == 2048


@pytest.mark.parametrize("rope_type", sorted(CACHE_ONLY_ROPE_TYPES))
def test_cache_only_rope_types_are_raised(rope_type):
    cfg = {"max_position_embeddings": 2048, "rope_scaling": {"rope_type": rope_type}}
    assert maybe_override_draft_max_position_embeddings(cfg, 4096) is True
    assert cfg["max_position_embeddings"] == 4096


def test_transformers_config_with_llama3_rope():
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        max_position_embeddings=2048,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 2048,
        },
    )
    assert rope_types(cfg) == ["llama3"]
    assert maybe_override_draft_max_position_embeddings(cfg, 65536) is True
    assert cfg.max_position_embeddings == 65536


def test_rope_types_reads_per_layer_type_parameters():
    cfg = SimpleNamespace(
        rope_parameters={"full_attention": {"rope_type": "default"}, "sliding_attention": {"rope_type": "yarn"}}
    )
    assert rope_types(cfg) == ["default", "yarn"]
    assert rope_is_cache_only(cfg) is False
    assert rope_types(SimpleNamespace()) == ["default"]


@pytest.mark.parametrize(
    "sizes, gid, fallback, expected",
    [
        ([16, 64], 1, 32, 64),
        ([16], 0, 32, 16),
        ([16], 1, 32, 32),  # index past the list: fallback
        ([16], -1, 32, 32),
        (None, 0, 32, 32),
    ],
)
def test_proposer_block_size(sizes, gid, fallback, expected):
    assert proposer_block_size(sizes, gid, fallback) == expected


def test_draft_layers_in_sorted_order():
    layers = {"model.layers.2.attn", "model.layers.10.attn", "model.layers.1.attn"}
    assert draft_layer_order(layers) == sorted(layers)


def test_rotary_cache_rows_follow_vllms_get_rope():
    # the cache is max_position_embeddings long, except YaRN's: original x factor, whatever the mpe says
    assert rotary_cache_rows(SimpleNamespace(max_position_embeddings=2048)) == 2048
    assert (
        rotary_cache_rows(SimpleNamespace(max_position_embeddings=4096, rope_parameters={"rope_type": "llama3"}))
        == 4096
    )
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    assert rotary_cache_rows(SimpleNamespace(max_position_embeddings=131072, rope_parameters=yarn)) == 8192
    # per attention type: the shortest cache decides
    mixed = {"full_attention": {"rope_type": "default"}, "sliding_attention": yarn}
    assert rotary_cache_rows(SimpleNamespace(max_position_embeddings=4096, rope_parameters=mixed)) == 4096
    assert rotary_cache_rows(SimpleNamespace(hidden_size=16)) is None
