"""train-tiny's record (training.json): the shipped pair's record matches its files, and a run writes one."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from conftest import eagle_fix_cli
from eagle_fix.pairs import chat_pair, tiny_cli, training, training_record

TINY = training.DEFAULT_OUT


def _strict(path):
    """json.load that refuses NaN/Infinity (the record must be strict JSON)."""

    def bad(c):
        raise ValueError(f"{path}: non-finite {c}")

    return json.loads(path.read_text(), parse_constant=bad)


def test_one_seq_len_default():
    import argparse
    import inspect

    p = argparse.ArgumentParser()
    tiny_cli.add_cli_args(p)
    assert p.parse_args([]).seq_len == training.DEFAULT_SEQ_LEN
    for fn in (training.train_target, training.train_draft, training.target_accuracy):
        assert inspect.signature(fn).parameters["seq_len"].default == training.DEFAULT_SEQ_LEN


def test_shipped_record_matches_shipped_files():
    rec = _strict(TINY / training.RECORD_NAME)
    assert rec["sha256"], "the record names no files"
    for rel, sha in rec["sha256"].items():
        assert training_record.sha256_file(TINY / rel) == sha, rel
    assert "draft/model.safetensors" in rec["sha256"]
    # The shipped draft was trained against the shipped target: the record says which bytes.
    target = rec["target"]
    assert target["sha256"]["model.safetensors"] == training_record.sha256_file(TINY / "target" / "model.safetensors")
    assert rec["seq_len"] == rec["draft"]["seq_len"] and isinstance(rec["seq_len"], int)


def test_tiny_run_writes_record(tmp_path):
    out = tmp_path / "pair"
    cmd = [
        sys.executable,
        "-m",
        "eagle_fix.cli",
        "train-tiny",
        "--out",
        str(out),
        "--target-steps",
        "2",
        "--draft-steps",
        "2",
        "--seq-len",
        "64",
        "--threads",
        "1",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = _strict(out / training.RECORD_NAME)
    for key in (
        "command",
        "argv",
        "seed",
        "threads",
        "seq_len",
        "batch",
        "target",
        "draft",
        "wall_s",
        "versions",
        "sha256",
    ):
        assert key in rec, key
    assert (rec["seed"], rec["threads"], rec["seq_len"]) == (0, 1, 64)
    assert rec["argv"][1:3] == ["train-tiny", "--out"]
    assert "--seq-len 64" in rec["command"]
    assert rec["versions"]["torch"] and rec["versions"]["transformers"]
    for stage, lr in (("target", training.TARGET_LR), ("draft", training.DRAFT_LR)):
        s = rec[stage]
        assert (s["steps"], s["seq_len"], s["lr"]) == (2, 64, lr)
        assert [p["step"] for p in s["loss_curve"]] == [1, 2]
        assert math.isfinite(s["final_loss"]) and math.isfinite(s["final_loss_ema"])
    assert rec["target"]["trained"] is True and 0 <= rec["target"]["greedy_acc"] <= 1
    assert len(rec["draft"]["final_acc_per_step"]) == training.TTT_STEPS
    assert 0 < rec["draft"]["vocab_coverage"] <= 1
    assert set(rec["wall_s"]) >= {"target", "draft", "total"}
    for rel in ("target/model.safetensors", "target/config.json", "draft/model.safetensors", "draft/config.json"):
        assert rec["sha256"][rel] == training_record.sha256_file(out / rel), rel


@pytest.mark.parametrize("steps", [1, 10, 25])
def test_curve_points(steps):
    kept = [s + 1 for s in range(steps) if training._on_curve(s, steps)]
    assert kept[0] == 1 and kept[-1] == steps
    assert all(k == 1 or k == steps or k % training.CURVE_EVERY == 0 for k in kept)


def test_the_chat_pairs_record_matches_its_files_and_says_its_output_does_not_loop():
    chat = chat_pair.DEFAULT_OUT
    rec = _strict(chat / training.RECORD_NAME)
    for rel, sha in rec["sha256"].items():
        assert training_record.sha256_file(chat / rel) == sha, rel
    assert {"target/tokenizer.json", "target/model.safetensors", "draft/model.safetensors"} <= set(rec["sha256"])
    # both stages: short windows first (the record of that run kept whole), then long ones
    first = rec["first_stage"]
    assert first["target"]["steps"] == chat_pair.TARGET_STEPS and first["draft"]["steps"] == chat_pair.DRAFT_STEPS
    assert rec["stages"]["target_long"]["seq_len"] == chat_pair.LONG_TARGET_SEQ
    assert rec["stages"]["draft_long"]["seq_len"] == chat_pair.LONG_DRAFT_SEQ
    # greedy continuations of held-out prompts (a period-p loop scores ~p/256): the long stage left phrase
    # loops of ~50 tokens (docs/chat-pair.md), not the tiny pair's short loop (0.02-0.11)
    held = rec["held_out"]
    assert held["new_tokens"] == 256 and len(held["distinct_4grams"]) == held["prompts"]
    assert held["distinct_4grams_median"] >= 0.15
    assert rec["first_stage"]["target"]["held_out"]["distinct_4grams_median"] > held["distinct_4grams_median"]
    cfg = json.loads((chat / "draft" / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 2048 and cfg["draft_vocab_size"] == chat_pair.DRAFT_VOCAB


def test_train_chat_refuses_a_folder_it_did_not_write(tmp_path):
    proc = eagle_fix_cli("train-chat", "--from", str(tmp_path), "--out", str(tmp_path / "o"), timeout=120)
    assert proc.returncode != 0 and "training.json is missing" in proc.stderr
    assert not (tmp_path / "o").exists()
