"""`eagle-fix train-tiny`: the tiny pair's training run and its record (training.json), apart from the loop in
eagle_fix.pairs.training so that module stays one concern."""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time

from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs.training import (
    DEFAULT_BATCH,
    DEFAULT_DRAFT_STEPS,
    DEFAULT_OUT,
    DEFAULT_SEED,
    DEFAULT_SEQ_LEN,
    DEFAULT_TARGET_STEPS,
    DEFAULT_THREADS,
    DRAFT_LR,
    RECORD_NAME,
    TARGET_LR,
    TTT_STEPS,
    WARMUP_STEPS,
    save_draft,
    target_accuracy,
    train_draft,
    train_target,
)
from eagle_fix.pairs.training_record import command_line, json_safe, machine, sha256_tree, versions


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=DEFAULT_OUT,
        help="writes OUT/target, OUT/draft and OUT/training.json (default: the shipped folder)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--target-steps", type=int, default=DEFAULT_TARGET_STEPS)
    parser.add_argument("--draft-steps", type=int, default=DEFAULT_DRAFT_STEPS)
    parser.add_argument(
        "--seq-len", type=int, default=DEFAULT_SEQ_LEN, help=f"tokens per training sequence (default {DEFAULT_SEQ_LEN})"
    )
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="torch CPU threads")
    parser.add_argument(
        "--target-from",
        type=pathlib.Path,
        default=None,
        help="reuse this trained target folder; train (and write) only the draft",
    )


def cli_main(args: argparse.Namespace) -> int:
    if args.threads < 1:  # before torch, whose set_num_threads(0) ends in a traceback
        raise EagleFixError(
            f"--threads {args.threads}: give a number of CPU threads of at least 1, such as 2", exit_code=2
        )
    try:  # lazy, and checked here: train-tiny is the one command that needs torch + transformers
        import torch
    except ImportError as exc:
        raise EagleFixError(f"train-tiny needs torch + transformers (pip install 'eagle-fix[cpu]'): {exc}")
    if args.target_steps < 1 or args.draft_steps < 1:
        raise EagleFixError("--target-steps and --draft-steps must be >= 1")
    if args.target_from is not None and not (args.target_from / "config.json").is_file():
        raise EagleFixError(f"{args.target_from}/config.json is missing: pass a folder written by train-tiny")
    record = {
        "schema": 1,
        "command": command_line(args),
        # as invoked, when this process is `eagle-fix train-tiny ...` (None when called as a function)
        "argv": list(sys.argv) if sys.argv[1:2] == ["train-tiny"] else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seed": args.seed,
        "threads": args.threads,
        "seq_len": args.seq_len,
        "batch": DEFAULT_BATCH,
        "optimizer": {
            "name": "AdamW",
            "betas": [0.9, 0.95],
            "grad_clip": 1.0,
            "schedule": f"linear warmup {WARMUP_STEPS} steps, then cosine to 0",
            "target_weight_decay": 0.01,
            "draft_weight_decay": 0.0,
        },
        "corpus": "eagle_fix.core.workload.make_corpus (Markov text + verbatim copies of far-back spans)",
        "versions": versions(),
        "machine": machine(),
    }
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    t0 = time.time()
    target_curve: list = []
    if args.target_from is not None:
        from transformers import LlamaForCausalLM  # lazy: only train-tiny needs transformers

        target, tloss = LlamaForCausalLM.from_pretrained(args.target_from, dtype=torch.float32), float("nan")
        record["target"] = {
            "trained": False,
            "taken_from": str(args.target_from),
            "sha256": sha256_tree(args.target_from),
        }
    else:
        target, tloss = train_target(args.target_steps, args.seed, seq_len=args.seq_len, curve=target_curve)
        record["target"] = {
            "trained": True,
            "steps": args.target_steps,
            "seq_len": args.seq_len,
            "batch": DEFAULT_BATCH,
            "lr": TARGET_LR,
            "seed": args.seed,
            "loss_curve": target_curve,
            "final_loss": target_curve[-1]["loss"],
            "final_loss_ema": round(tloss, 4),
        }
    t1 = time.time()
    tacc = target_accuracy(target, args.seed, seq_len=args.seq_len)
    t_acc = time.time()
    record["target"]["greedy_acc"] = round(tacc, 4)
    record["target"]["greedy_acc_eval"] = {"seq_len": args.seq_len, "batch": DEFAULT_BATCH, "docs_seed": args.seed + 7}
    if args.target_from is None:
        target.to(torch.bfloat16).save_pretrained(args.out / "target", safe_serialization=True)
    target.float()
    t_save = time.time()
    draft_curve: list = []
    draft, d2t, stats = train_draft(target, args.draft_steps, args.seed, seq_len=args.seq_len, curve=draft_curve)
    t2 = time.time()
    save_draft(draft, d2t, args.out / "draft", target.config.vocab_size)
    record["draft"] = {
        "steps": args.draft_steps,
        "seq_len": args.seq_len,
        "batch": DEFAULT_BATCH,
        "lr": DRAFT_LR,
        "seed": args.seed + 1,
        "ttt_steps": TTT_STEPS,
        "ttt_loss_weights": [round(0.8**k, 4) for k in range(TTT_STEPS)],
        "draft_vocab": int(d2t.numel()),
        "vocab_coverage": round(stats["draft_vocab_coverage"], 4),
        "loss_curve": draft_curve,
        "final_loss": round(stats["last_loss"], 4),
        "final_loss_ema": round(stats["draft_loss"], 4),
        "final_acc_per_step": [round(a, 4) for a in stats["last_acc"]],
        "final_acc_per_step_ema": [round(a, 4) for a in stats["draft_acc"]],
    }
    record["wall_s"] = {
        "target": round(t1 - t0, 1),  # training, or loading with --target-from
        "target_accuracy": round(t_acc - t1, 1),
        "target_save": round(t_save - t_acc, 1),
        "draft": round(t2 - t_save, 1),
        "total": round(time.time() - t0, 1),
    }
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    record["machine"]["loadavg_1_5_15_at_end"] = [round(x, 2) for x in load] if load else None
    files = {}
    if args.target_from is None:
        files.update(sha256_tree(args.out / "target", "target/"))
    files.update(sha256_tree(args.out / "draft", "draft/"))
    record["sha256"] = files  # paths relative to this record's folder
    (args.out / RECORD_NAME).write_text(json.dumps(json_safe(record), indent=2, allow_nan=False) + "\n")
    print(
        json.dumps(
            {
                "target_loss": None if math.isnan(tloss) else round(tloss, 4),
                "target_greedy_acc": round(tacc, 4),
                "draft_loss": round(stats["draft_loss"], 4),
                "draft_acc_per_step": [round(a, 4) for a in stats["draft_acc"]],
                "draft_vocab_coverage": round(stats["draft_vocab_coverage"], 4),
                "target_s": round(t1 - t0, 1),
                "draft_s": round(t2 - t_save, 1),
                "out": str(args.out),
                "record": str(args.out / RECORD_NAME),
            }
        )
    )
    return 0
