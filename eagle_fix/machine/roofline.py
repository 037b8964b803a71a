"""A point's work (FLOPs, bytes per step) from the models' configs and its share of the measured limits (%-of-roofline)."""

from __future__ import annotations

from typing import Any

from eagle_fix.core.arms import EAGLE3
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.record import roofline_share

_DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "float": 4,
    "float64": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int8": 1,
}
_EAGLE3_ARCHS = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Speculator"}


def _dtype_bytes(config: dict) -> int:
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").replace("torch.", "")
    if dtype not in _DTYPE_BYTES:
        raise EagleFixError(f"config dtype {dtype!r} is not one of {', '.join(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[dtype]


def model_shape(config: dict) -> dict[str, Any]:
    """Sizes of a Llama-like target or an EAGLE3 draft from its HF config.json dict.

    Target: per layer q/k/v/o + gate/up/down + 2 norms, a final norm, the embedding and (unless
    tied) the lm_head. EAGLE3 draft: its first layer's q/k/v take 2*hidden (embedding + fc
    output), it has an extra hidden_norm, an fc of [hidden, 3*target_hidden] and an lm_head over
    draft_vocab_size; it owns no embedding (it gathers from the target's). "params" counts what
    the model owns; "weight_read_params" what one decode step streams from memory (the embedding
    table is only gathered from, so it is left out unless tied to the lm_head).
    """
    if not isinstance(config, dict):
        raise EagleFixError("model_shape needs a config.json dict")
    if isinstance(config.get("transformer_layer_config"), dict):  # speculators format
        config = {
            **config["transformer_layer_config"],
            **{k: v for k, v in config.items() if k != "transformer_layer_config"},
        }
    archs = set(config.get("architectures") or [])
    eagle3 = bool(archs & _EAGLE3_ARCHS) or str(config.get("speculators_model_type", "")).lower() == EAGLE3.method
    try:
        layers = int(config["num_hidden_layers"])
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        inter = int(config["intermediate_size"])
        vocab = int(config["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise EagleFixError(f"config.json lacks or mangles {exc}: model_shape needs a Llama-like config")
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    bpp = _dtype_bytes(config)
    attn_bias = bool(config.get("attention_bias"))
    mlp_bias = bool(config.get("mlp_bias"))
    q, kv, o = heads * head_dim, kv_heads * head_dim, heads * head_dim

    def layer_linear(inp: int) -> int:
        attn = inp * q + 2 * inp * kv + o * hidden + ((q + 2 * kv + hidden) if attn_bias else 0)
        mlp = 3 * hidden * inter + ((2 * inter + hidden) if mlp_bias else 0)
        return attn + mlp

    if eagle3:
        target_hidden = int(config.get("target_hidden_size") or hidden)
        draft_vocab = int(config.get("draft_vocab_size") or vocab)
        linear = layer_linear(2 * hidden) + (layers - 1) * layer_linear(hidden)
        norms = 3 * hidden + 2 * hidden * (layers - 1) + hidden
        fc = 3 * target_hidden * hidden
        head = draft_vocab * hidden
        embedding = 0
        params = linear + norms + fc + head
        weight_read = params
    else:
        target_hidden, draft_vocab, fc = None, None, 0
        linear = layers * layer_linear(hidden)
        norms = 2 * hidden * layers + hidden
        head = vocab * hidden
        embedding = vocab * hidden
        tied = bool(config.get("tie_word_embeddings"))
        params = linear + norms + embedding + (0 if tied else head)
        weight_read = linear + norms + head
    return {
        "kind": "eagle3" if eagle3 else "target",
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate": inter,
        "vocab": vocab,
        "draft_vocab": draft_vocab,
        "target_hidden": target_hidden,
        "params": params,
        "layer_linear_params": linear,
        "fc_params": fc,
        "lm_head_params": head,
        "embedding_params": embedding,
        "norm_params": norms,
        "weight_read_params": weight_read,
        "bytes_per_param": bpp,
        "weight_bytes": params * bpp,
        "kv_bytes_per_token": 2 * layers * kv_heads * head_dim * bpp,
    }


def _attention_flops(shape: dict, context_len: int) -> float:
    # QK^T and PV: 2 matmuls x 2 FLOPs per MAC x head_dim, over the causal half of ctx x ctx.
    return 4 * shape["layers"] * shape["heads"] * shape["head_dim"] * (context_len**2 / 2)


# Room above the KV the longest sequences need: block rounding, the warm-up prompt, the
# draft's share of positions being counted by its own layer count.
KV_HEADROOM = 1.25
KV_MIN_BYTES = 256 * 2**20


def kv_budget_bytes(target_cfg: dict, draft_cfg: dict | None, *, max_model_len: int, max_num_seqs: int) -> int:
    """vLLM `kv_cache_memory_bytes` for an engine: the KV of `max_num_seqs` sequences of
    `max_model_len` tokens (target and draft layers) with headroom, so the engine's memory follows
    what the points need instead of a share of the device."""
    per_token = model_shape(target_cfg)["kv_bytes_per_token"]
    if draft_cfg is not None:
        per_token += model_shape(draft_cfg)["kv_bytes_per_token"]
    need = per_token * max_model_len * max(1, max_num_seqs)
    return max(KV_MIN_BYTES, int(need * KV_HEADROOM))


def point_work(
    target_cfg: dict, draft_cfg: dict | None, *, context_len: int, batch_size: int = 1, k: int = 3
) -> dict[str, Any]:
    """FLOPs of the prefill and bytes of one decode step at a sweep point.

    Counted: the linear layers (2 FLOPs per weight per token; the lm_head only for the last prompt
    token, as vLLM computes logits only where it samples), causal attention (4*layers*heads*
    head_dim*ctx^2/2 per sequence), and, with a draft, the EAGLE3 draft's fc + layer over the whole
    prompt (it builds its own KV there). Bytes per step: every weight a step streams (target
    layers + norms + lm_head; the draft's layer + norms + lm_head over draft_vocab_size) plus the
    KV cache at context_len per sequence. The draft's fc runs once per verified step (it combines
    the target's hidden states before the first draft step), so an EAGLE3 verified step is
    target step + k draft steps + the fc once; verifying k+1 tokens reads weights and KV once.
    Left out: norms, rotary, softmax and SiLU FLOPs, sampling/rejection, embedding gathers,
    activation and KV-write traffic, the draft's k-1 single-token steps in the prefill.
    """
    if context_len < 1 or batch_size < 1 or k < 1:
        raise EagleFixError(f"point_work needs context_len, batch_size, k >= 1 (got {context_len}, {batch_size}, {k})")
    t = model_shape(target_cfg)
    d = model_shape(draft_cfg) if draft_cfg is not None else None
    ctx, b = context_len, batch_size
    t_flops = 2 * t["layer_linear_params"] * ctx + 2 * t["lm_head_params"] + _attention_flops(t, ctx)
    d_flops = 0.0
    if d is not None:
        d_flops = (
            2 * (d["layer_linear_params"] + d["fc_params"]) * ctx + 2 * d["lm_head_params"] + _attention_flops(d, ctx)
        )
    bpp_t = t["bytes_per_param"]
    target_step = t["weight_read_params"] * bpp_t + t["kv_bytes_per_token"] * ctx * b
    out: dict[str, Any] = {
        "context_len": ctx,
        "batch_size": b,
        "k": k if d is not None else None,
        "target_prefill_flops": t_flops * b,
        "draft_prefill_flops": d_flops * b if d is not None else None,
        "attention_flops": (_attention_flops(t, ctx) + (_attention_flops(d, ctx) if d else 0)) * b,
        "prefill_flops": (t_flops + d_flops) * b,
        "target_kv_bytes": t["kv_bytes_per_token"] * ctx * b,
        "target_bytes_per_step": target_step,
        "draft_bytes_per_step": None,
        "draft_fc_bytes": None,
        "eagle3_bytes_per_verified_step": None,
    }
    if d is not None:
        bpp_d = d["bytes_per_param"]
        draft_step = (d["weight_read_params"] - d["fc_params"]) * bpp_d + d["kv_bytes_per_token"] * ctx * b
        fc_bytes = d["fc_params"] * bpp_d
        out.update(
            draft_kv_bytes=d["kv_bytes_per_token"] * ctx * b,
            draft_bytes_per_step=draft_step,
            draft_fc_bytes=fc_bytes,
            eagle3_bytes_per_verified_step=target_step + k * draft_step + fc_bytes,
        )
    return out


def matmul_peak(limits: dict, dtype: str | None) -> tuple[float | None, str | None, str | None]:
    """(GFLOP/s, dtype, path) of the matmul a prefill share is taken of: `dtype`'s path when asked
    for, else the limits' peak (the fastest measured path; for limits recorded before it had a name,
    the fastest of their dtypes)."""
    rates = {k: v for k, v in (limits.get("matmul_gflops") or {}).items() if isinstance(v, (int, float)) and v > 0}
    paths = limits.get("matmul_paths") or {}
    if dtype is not None:
        return rates.get(dtype), dtype, paths.get(dtype)
    if isinstance(limits.get("peak_gflops"), (int, float)) and limits["peak_gflops"] > 0:
        return limits["peak_gflops"], limits.get("peak_dtype"), limits.get("peak_path")
    if not rates:
        return None, None, None
    best = max(rates, key=rates.get)
    return rates[best], best, paths.get(best)


def roofline(
    work: dict,
    limits: dict,
    *,
    ttft_s: float | None,
    decode_tok_s: float | None,
    acceptance_length: float | None,
    batch_size: int = 1,
    dtype: str | None = None,
) -> dict[str, Any]:
    """How a measured point compares with this machine's limits (percentages 0-100).

    decode_tok_s is the whole batch's output tokens per second; acceptance_length is tokens per
    verified step (1 + accepted drafts). Given, the decode traffic is the EAGLE3 verified step's,
    else the target step's. Speed-of-light rates assume decode is purely bandwidth-bound. The
    prefill share is of the limits' peak (`dtype` picks one dtype's measured path instead). A share
    above 100% is withheld (None) and named in "roofline_flags": a point cannot beat a limit of the
    machine, so that limit was measured on kernels the engine does not run.
    """
    if work.get("batch_size") not in (None, batch_size):
        raise EagleFixError(f"roofline batch_size={batch_size} but the work was computed for {work['batch_size']}")
    peak, peak_dtype, peak_path = matmul_peak(limits, dtype)
    bw = limits.get("bandwidth_gbs")
    eagle3_bytes = work.get("eagle3_bytes_per_verified_step")
    if acceptance_length is not None and eagle3_bytes is None:
        raise EagleFixError("acceptance_length given but the work has no draft: pass draft_cfg to point_work")
    prefill_pct = None
    if ttft_s and peak:
        prefill_pct = work["prefill_flops"] / ttft_s / (peak * 1e9) * 100
    decode_pct = None
    if acceptance_length is not None:
        step_bytes, tokens_per_step = eagle3_bytes, acceptance_length * batch_size
    else:
        step_bytes, tokens_per_step = work["target_bytes_per_step"], batch_size
    if decode_tok_s and bw:
        decode_pct = decode_tok_s / tokens_per_step * step_bytes / (bw * 1e9) * 100
    sol_base = bw * 1e9 / work["target_bytes_per_step"] * batch_size if bw else None
    sol_e3 = (
        bw * 1e9 / eagle3_bytes * acceptance_length * batch_size if bw and acceptance_length and eagle3_bytes else None
    )
    flags = []
    peak_words = f"the {peak_dtype} matmul peak ({peak_path or 'path unnamed'}, {peak or 0:.3g} GFLOP/s)"
    prefill_pct, why = roofline_share("prefill_pct_of_peak_flops", prefill_pct, peak_words)
    flags += [why] if why else []
    decode_pct, why = roofline_share("decode_pct_of_bandwidth", decode_pct, f"the copy bandwidth ({bw or 0:.3g} GB/s)")
    flags += [why] if why else []
    return {
        "prefill_pct_of_peak_flops": prefill_pct,
        "decode_pct_of_bandwidth": decode_pct,
        "sol_decode_tok_s_baseline": sol_base,
        "sol_decode_tok_s_eagle3": sol_e3,
        "bytes_per_output_token": step_bytes / tokens_per_step,
        "peak_gflops": peak,
        "peak_dtype": peak_dtype,
        "peak_path": peak_path,
        "bandwidth_gbs": bw,
        "roofline_flags": flags,
    }
