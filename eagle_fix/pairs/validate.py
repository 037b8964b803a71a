"""The checks that reject a bad target/draft pair in one line (the file and the fix) before any engine starts,
rather than spend an engine start on a pair the engine would fail on or silently mis-measure."""

from __future__ import annotations

import json
import pathlib
import struct

from eagle_fix.core.arms import EAGLE3
from eagle_fix.core.errors import EagleFixError
from eagle_fix.fix.checkpoint import draft_method, read_config


def _read_header(path: pathlib.Path) -> dict:
    """The safetensors header (names, dtypes, shapes), checking the file holds every byte it
    declares: catches truncated downloads without loading any tensor."""
    fix = "re-download or re-save it (for the tiny pair: `eagle-fix train-tiny`)"
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise ValueError("shorter than its 8-byte header length")
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8 or n > 100 * 2**20:
                raise ValueError(f"header length {n} exceeds the file ({size} bytes)")
            header = json.loads(f.read(n))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise EagleFixError(f"{path} is corrupted or truncated ({exc}): {fix}")
    if not isinstance(header, dict):
        raise EagleFixError(f"{path} has a malformed header: {fix}")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            end = max(end, int(info["data_offsets"][1]))
        except (TypeError, KeyError, IndexError, ValueError):
            raise EagleFixError(f"{path} has a malformed header entry {name!r}: {fix}")
    if 8 + n + end > size:
        raise EagleFixError(f"{path} is truncated ({size} bytes, header declares {8 + n + end}): {fix}")
    return {k: v for k, v in header.items() if k != "__metadata__"}


def _tensors(folder: pathlib.Path, role: str) -> dict[str, tuple[list[int], pathlib.Path]]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise EagleFixError(
            f"{folder} has no *.safetensors weight file: save the {role} with "
            f"safe_serialization=True, or run with load_format dummy"
        )
    out = {}
    for f in files:
        for name, info in _read_header(f).items():
            out[name] = (list(info.get("shape", [])), f)
    return out


def _find(tensors: dict, suffix: str):
    for name, val in tensors.items():
        if name == suffix or name.endswith("." + suffix):
            return name, val
    return None, None


def _expect(tensors: dict, suffix: str, shape: list[int], folder: pathlib.Path, role: str, why: str) -> None:
    name, val = _find(tensors, suffix)
    if name is None:
        return  # optional / shared tensors: vLLM fills them in or reports its own error
    got, f = val
    if got != shape:
        raise EagleFixError(
            f"{f}: tensor {name} has shape {got} but config.json says {shape} ({why}): "
            f"the {role}'s weights and config.json do not belong together"
        )


def validate_pair(target_dir, draft_dir, *, load_format: str = "auto") -> None:
    """Raise EagleFixError (one line: the file and the fix) for a pair the engine would fail
    on, or silently mis-measure, before spending an engine start on it."""
    target_dir, draft_dir = pathlib.Path(target_dir), pathlib.Path(draft_dir)
    tcfg = read_config(target_dir, "target")
    dcfg = read_config(draft_dir, "draft")
    tpath, dpath = target_dir / "config.json", draft_dir / "config.json"
    kind = draft_method(dcfg)
    if kind is None:
        raise EagleFixError(
            f"{dpath}: architectures {dcfg.get('architectures')} is not an EAGLE/EAGLE3 draft: "
            f"pass an EAGLE3 draft folder (e.g. LlamaForCausalLMEagle3) as the draft"
        )
    if draft_method(tcfg) is not None:
        raise EagleFixError(f"{tpath} describes an EAGLE draft: pass the base model as target and the draft as draft")
    inner = dcfg.get("transformer_layer_config") or {}
    for key in ("vocab_size", "hidden_size", "num_hidden_layers"):
        if not isinstance(tcfg.get(key), int):
            raise EagleFixError(f"{tpath} lacks an integer {key!r}: restore the target's original config.json")
    tv = tcfg["vocab_size"]
    dv = dcfg.get("vocab_size", inner.get("vocab_size"))
    if dv is not None and dv != tv:
        raise EagleFixError(
            f"{dpath}: draft vocab_size {dv} != target vocab_size {tv} ({tpath}): "
            f"the draft was trained for another target's vocabulary; use the matching draft"
        )
    dvs = dcfg.get("draft_vocab_size", tv)
    if not isinstance(dvs, int) or not 0 < dvs <= tv:
        raise EagleFixError(f"{dpath}: draft_vocab_size {dvs!r} must be an integer in 1..{tv} (the target's vocab)")
    if load_format == "dummy":
        return

    H, L = tcfg["hidden_size"], tcfg["num_hidden_layers"]
    heads = tcfg.get("num_attention_heads", 1)
    hd = tcfg.get("head_dim") or H // heads
    tt = _tensors(target_dir, "target")
    _expect(tt, "embed_tokens.weight", [tv, H], target_dir, "target", "vocab_size x hidden_size")
    if not tcfg.get("tie_word_embeddings", False):
        _expect(tt, "lm_head.weight", [tv, H], target_dir, "target", "vocab_size x hidden_size")
    _expect(
        tt,
        "layers.0.self_attn.q_proj.weight",
        [heads * hd, H],
        target_dir,
        "target",
        "num_attention_heads*head_dim x hidden_size",
    )
    if (
        _find(tt, f"layers.{L - 1}.self_attn.q_proj.weight")[0] is None
        and _find(tt, "layers.0.self_attn.q_proj.weight")[0]
    ):
        raise EagleFixError(
            f"{target_dir}: no weights for layer {L - 1} but config.json says num_hidden_layers={L}: "
            f"the weights and config.json do not belong together"
        )

    dt = _tensors(draft_dir, "draft")
    dH = inner.get("hidden_size", dcfg.get("hidden_size", H))
    dheads = inner.get("num_attention_heads", dcfg.get("num_attention_heads", heads))
    dhd = inner.get("head_dim", dcfg.get("head_dim")) or dH // dheads
    tH = dcfg.get("target_hidden_size", H)
    if kind == EAGLE3.method:
        eagle = dcfg.get("eagle_config") or {}
        ids = eagle.get("eagle_aux_hidden_state_layer_ids") or dcfg.get("eagle_aux_hidden_state_layer_ids")
        n_aux = len(ids) if ids else 3
        if ids and len(set(ids)) != len(ids):
            raise EagleFixError(
                f"{dpath}: eagle_aux_hidden_state_layer_ids {ids} repeats a layer: list distinct target layers (< {L})"
            )
        if ids and not all(isinstance(i, int) and 0 <= i <= L for i in ids):
            raise EagleFixError(f"{dpath}: eagle_aux_hidden_state_layer_ids {ids} outside the target's 0..{L}")
        if not ids and len({2, L // 2, L - 3}) < 3:
            raise EagleFixError(
                f"{dpath}: vLLM's default aux layers (2, {L // 2}, {L - 3}) repeat for a "
                f"{L}-layer target: set eagle_config.eagle_aux_hidden_state_layer_ids"
            )
        _expect(dt, "fc.weight", [dH, n_aux * tH], draft_dir, "draft", "hidden_size x aux_layers*target_hidden")
        qin = 2 * dH
    else:
        qin = dH
    _expect(
        dt,
        "midlayer.self_attn.q_proj.weight",
        [dheads * dhd, qin],
        draft_dir,
        "draft",
        "num_attention_heads*head_dim x input width",
    )
    _expect(dt, "lm_head.weight", [dvs, dH], draft_dir, "draft", "draft_vocab_size x hidden_size")
    name, val = _find(dt, "d2t")
    if name is not None and val[0] != [dvs]:
        raise EagleFixError(
            f"{val[1]}: d2t has shape {val[0]} but draft_vocab_size is {dvs} ({dpath}): "
            f"the draft's vocabulary mapping and config.json do not belong together"
        )
    if name is None and dvs != tv:
        raise EagleFixError(
            f"{draft_dir}: draft_vocab_size {dvs} != target vocab {tv} but no d2t tensor maps "
            f"draft ids to target ids: ship the draft's d2t"
        )
