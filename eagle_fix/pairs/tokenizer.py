"""A tokenizer for a pair that ships none (the tiny pair's vocabulary is token ids): each id is one fixed-width
word, so the suite's token-id workload becomes text that vLLM's OpenAI server tokenizes back into the same
ids. Written beside the model's config.json (`eagle-fix map --write-tokenizer DIR`); the tiny pair ships it."""

from __future__ import annotations

import json
import os
from pathlib import Path

# The words of the shipped tokenizer: token id i written in base 36 with a fixed width (two digits
# for a vocabulary up to 1296), and a prompt is its words back to back. vLLM refuses, before
# tokenizing, a prompt longer than max_model_len x its tokenizer's longest token in characters, so a
# separator between words would make a prompt of the whole context too long for the server.
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def word_width(vocab_size: int) -> int:
    width = 1
    while len(DIGITS) ** width < vocab_size:
        width += 1
    return width


def word(i: int, width: int) -> str:
    out = ""
    for _ in range(width):
        i, d = divmod(i, len(DIGITS))
        out = DIGITS[d] + out
    return out


def tokenizer_json(vocab_size: int) -> str:
    """tokenizer.json of a `tokenizers` WordLevel model over the ids in base 36 ("00" .. "e7" for 512):
    the pre-tokenizer splits on whitespace, then every `width` characters, so "0a0b" and "0a 0b" are
    both [10, 11]. Each token id is one word: the suite's token-id workload becomes text that the
    server tokenizes back into the same ids. No special tokens, no post-processor (no BOS is added),
    no unknown token: a word outside the vocabulary is an error, never a silent id."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    width = word_width(vocab_size)
    tok = Tokenizer(models.WordLevel(vocab={word(i, width): i for i in range(vocab_size)}, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(f".{{1,{width}}}"), behavior="isolated")]
    )
    return json.dumps(json.loads(tok.to_str()), indent=1, sort_keys=True) + "\n"


def tokenizer_config(vocab_size: int, max_len: int) -> str:
    """tokenizer_config.json: transformers loads tokenizer.json through PreTrainedTokenizerFast."""
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        "vocab_size": vocab_size,
    }
    return json.dumps(cfg, indent=1, sort_keys=True) + "\n"


def write_tokenizer(folder: str | os.PathLike) -> list[Path]:
    """Write the tokenizer beside a model's config.json (vocab_size and max_position_embeddings from
    it); returns the files. `eagle_fix/data/tiny/target/` ships the output for the tiny pair."""
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    files = {
        "tokenizer.json": tokenizer_json(int(cfg["vocab_size"])),
        "tokenizer_config.json": tokenizer_config(int(cfg["vocab_size"]), int(cfg.get("max_position_embeddings") or 0)),
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    return [folder / name for name in files]


def ids_to_text(ids, vocab_size: int = 512) -> str:
    """Token ids as the shipped tokenizer's words, back to back (width characters a token)."""
    width = word_width(vocab_size)
    return "".join(word(int(i), width) for i in ids)
