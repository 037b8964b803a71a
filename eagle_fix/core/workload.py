"""The suite's seeded long-context workloads: `copy` (synthetic: random spans later copied verbatim, the
tiny pair's best case) and `chat` (held-out ShareGPT conversations, the chat pair's realistic regime)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from eagle_fix.core import sharegpt

# A profile's workload: what its prompts are made of (and so part of what a point means)
# `chat-real`: held-out ShareGPT in the target's own chat template (a transformers tokenizer folder)
WORKLOADS = ("copy", "chat", "chat-real")

# The "language": a fixed lexicon of common ids (same for every seed, so a draft's reduced
# vocabulary trained on it fits every prompt) plus rare ids drawn from the whole vocabulary.
LEXICON_SIZE = 240
LEXICON_SEED = 20261130
RARE_PROB = 0.03
# Fresh text is a sparse Markov chain over the lexicon (each id has 4 successors): a tiny model
# learns it in minutes, so greedy generation is predictable even where nothing is copied.
SUCCESSOR_PROBS = (0.6, 0.2, 0.12, 0.08)
# Fresh (unpredictable) spans and verbatim copies of an earlier stretch, anywhere back.
FRESH_LEN = (16, 64)
COPY_LEN = (48, 320)
COPY_PROB = 0.7
# make_prompts ends every prompt this many tokens into a copy whose source starts in the
# first half of the prompt: a model that attends far back keeps copying, which is what makes
# draft acceptance after a long prompt meaningful.
PROMPT_COPY_PREFIX = 32
PROMPT_COPY_MIN_TAIL = 256


def lexicon(vocab_size: int) -> np.ndarray:
    """The common ids for this vocabulary (a fixed pseudo-random pick, not the first ids)."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    n = min(LEXICON_SIZE, vocab_size)
    rng = np.random.default_rng(LEXICON_SEED)
    if vocab_size <= 1 << 20:
        return np.sort(rng.permutation(vocab_size)[:n]).astype(np.int64)
    return np.sort(rng.choice(vocab_size, size=n, replace=False)).astype(np.int64)


def _successors(n: int) -> np.ndarray:
    """[n, 4] lexicon indices: the fixed Markov chain of fresh text."""
    return np.random.default_rng(LEXICON_SEED + 1).integers(0, n, size=(n, len(SUCCESSOR_PROBS)))


def _fresh(rng: np.random.Generator, n: int, lex: np.ndarray, vocab_size: int) -> np.ndarray:
    succ = _successors(len(lex))
    ranks = rng.choice(len(SUCCESSOR_PROBS), size=n, p=SUCCESSOR_PROBS)
    idx = np.empty(n, dtype=np.int64)
    cur = int(rng.integers(0, len(lex)))
    for i in range(n):
        idx[i] = cur
        cur = int(succ[cur, ranks[i]])
    out = lex[idx]
    rare = rng.random(n) < RARE_PROB
    if rare.any():
        out[rare] = rng.integers(0, vocab_size, size=int(rare.sum()))
    return out


def make_corpus(length: int, *, vocab_size: int, seed: int = 0) -> np.ndarray:
    """One document of `length` ids: fresh random spans interleaved with verbatim copies of
    earlier stretches (uniformly far back), so predicting it needs long-range attention."""
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    rng = np.random.default_rng([seed, length, vocab_size, 7])
    lex = lexicon(vocab_size)
    out = np.empty(length, dtype=np.int64)
    pos = 0
    while pos < length:
        if pos >= COPY_LEN[0] * 2 and rng.random() < COPY_PROB:
            n = int(rng.integers(COPY_LEN[0], COPY_LEN[1] + 1))
            src = int(rng.integers(0, pos - COPY_LEN[0] + 1))
            n = min(n, length - pos, pos - src)
            out[pos : pos + n] = out[src : src + n]
        else:
            n = min(int(rng.integers(FRESH_LEN[0], FRESH_LEN[1] + 1)), length - pos)
            out[pos : pos + n] = _fresh(rng, n, lex, vocab_size)
        pos += n
    return out


def make_prompts(context_len: int, batch_size: int = 1, *, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """`batch_size` prompts of exactly `context_len` ids in [0, vocab_size), deterministic in
    (context_len, batch_size index, vocab_size, seed). Each ends PROMPT_COPY_PREFIX tokens into
    a copy of a stretch from the prompt's first half, with >= PROMPT_COPY_MIN_TAIL tokens of
    source left to continue, so greedy generation is predictable by a model that copies."""
    if context_len < 1:
        raise ValueError(f"context_len must be >= 1, got {context_len}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    prompts = []
    for b in range(batch_size):
        m = PROMPT_COPY_PREFIX
        if context_len < 4 * (m + PROMPT_COPY_MIN_TAIL):  # too short for the copy structure
            prompts.append(make_corpus(context_len, vocab_size=vocab_size, seed=seed * 1009 + b).tolist())
            continue
        doc = make_corpus(context_len - m, vocab_size=vocab_size, seed=seed * 1009 + b)
        rng = np.random.default_rng([seed, b, context_len, vocab_size, 11])
        src = int(rng.integers(0, (context_len - m) // 2 - m - PROMPT_COPY_MIN_TAIL))
        prompt = np.concatenate([doc, doc[src : src + m]])
        assert len(prompt) == context_len
        prompts.append(prompt.tolist())
    return prompts


def target_tokenizer(target: str | None):
    """The target's own tokenizer.json (the chat pair ships one), read once per process; a missing one is a
    one-line error."""
    tok = Path(target or "") / "tokenizer.json"
    if not tok.is_file():
        raise ValueError(f"the chat workload needs the target's tokenizer.json: {tok} is missing")
    return _read_tokenizer(str(tok.resolve()))


@functools.lru_cache(maxsize=4)
def _read_tokenizer(path: str):
    from tokenizers import Tokenizer  # lazy: only the chat workload reads text

    return Tokenizer.from_file(path)


def template_tokenizer(target: str | None):
    """The target folder's transformers tokenizer with its chat template (no remote code, no network), read
    once per process; a folder without a chat template is a one-line error."""
    folder = Path(target or "")
    if not (folder / "tokenizer_config.json").is_file():
        raise ValueError(f"the chat-real workload needs the target's tokenizer_config.json: {folder} has none")
    tok = _read_template_tokenizer(str(folder.resolve()))
    if not tok.chat_template:
        raise ValueError(f"the chat-real workload needs the target's chat template: {folder} has none")
    return tok


@functools.lru_cache(maxsize=2)
def _read_template_tokenizer(path: str):
    from transformers import AutoTokenizer  # lazy: only the chat-real workload renders a template

    return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)


def workload_prompts(
    workload: str, context_len: int, batch_size: int = 1, *, vocab_size: int, seed: int = 0, target: str | None = None
) -> list[list[int]]:
    """The prompts of one point: `copy` from make_prompts; `chat` from held-out ShareGPT text through the
    target's own tokenizer.json (the chat pair ships one); `chat-real` from held-out ShareGPT conversations in
    the target's own chat template, ending where the assistant answers."""
    if workload == "copy":
        return make_prompts(context_len, batch_size, vocab_size=vocab_size, seed=seed)
    if workload == "chat-real":
        return sharegpt.make_template_prompts(context_len, batch_size, tokenizer=template_tokenizer(target), seed=seed)
    if workload != "chat":
        raise ValueError(f"unknown workload {workload!r}: one of {', '.join(WORKLOADS)}")
    return sharegpt.make_chat_prompts(context_len, batch_size, tokenizer=target_tokenizer(target), seed=seed)
