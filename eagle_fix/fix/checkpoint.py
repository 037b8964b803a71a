"""A model folder's config.json and what kind of draft it holds: one reader for the doctor, the
models' checks and the sweep, so they cannot disagree about a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle_fix.core.arms import EAGLE3
from eagle_fix.core.errors import EagleFixError

# Draft architectures vLLM serves as EAGLE / EAGLE3 drafts (plus the speculators format,
# recognised by its `speculators_model_type` field).
EAGLE3_ARCHS = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Speculator"}
EAGLE_ARCHS = {"EagleLlamaForCausalLM", "LlamaForCausalLMEagle", "EagleSpeculator"}


def read_config(folder: Path, role: str) -> dict[str, Any]:
    """The folder's config.json as a dict, or a one-line error naming the file and the fix."""
    folder = Path(folder)
    if not folder.is_dir():
        raise EagleFixError(
            f"{role} folder {folder} does not exist: pass a local model folder "
            f"(nothing is downloaded; `eagle-fix train-tiny` rebuilds the shipped tiny pair)"
        )
    path = folder / "config.json"
    if not path.is_file():
        raise EagleFixError(f"{path} is missing: the {role} folder needs its config.json (a Hugging Face model folder)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EagleFixError(f"{path} is not valid JSON ({exc}): restore the {role}'s original config.json") from None
    if not isinstance(data, dict):
        raise EagleFixError(f"{path} is not a JSON object: restore the {role}'s original config.json")
    return data


def draft_format(config: dict[str, Any]) -> str | None:
    """'speculators', 'eagle3', 'eagle' or None (not a draft checkpoint vLLM's EAGLE path loads)."""
    if config.get("speculators_model_type"):
        return "speculators"
    archs = set(config.get("architectures") or [])
    if (
        archs & EAGLE3_ARCHS
        or any("Eagle3" in a for a in archs)
        or config.get("eagle_config")
        or "draft_vocab_size" in config
    ):
        return "eagle3"
    if archs & EAGLE_ARCHS or any("Eagle" in a for a in archs) or config.get("model_type") == "eagle":
        return "eagle"
    return None


def draft_method(config: dict[str, Any]) -> str | None:
    """The speculative method a draft checkpoint serves: 'eagle3', 'eagle' or None."""
    fmt = draft_format(config)
    if fmt == "speculators":
        smt = str(config.get("speculators_model_type", "")).lower()
        return smt if smt in ("eagle", EAGLE3.method) else None
    return fmt


def checkpoint_max_position_embeddings(config: dict[str, Any]) -> int | None:
    """As written in the checkpoint (speculators keeps it in transformer_layer_config)."""
    layer = config.get("transformer_layer_config")
    if isinstance(layer, dict) and layer.get("max_position_embeddings") is not None:
        return int(layer["max_position_embeddings"])
    value = config.get("max_position_embeddings")
    return None if value is None else int(value)
