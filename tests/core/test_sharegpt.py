"""The chat workload's text: ShareGPT recovered from the wheel's cut file, a held-out split the chat pair never
trained on, and prompts of exactly the asked length that end by asking the assistant to answer."""

from __future__ import annotations

import pytest

from eagle_fix.core import sharegpt, workload
from eagle_fix.pairs import profiles

TARGET = profiles.chat_pair()[0]


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TARGET / "tokenizer.json"))


def test_every_complete_conversation_is_recovered_from_the_cut_file():
    convs = sharegpt.conversations()
    assert len(convs) == 17671  # ../shared/notes/real-text.md
    assert all(sharegpt.turns(c) is not None for c in convs[:50])


def test_the_held_out_split_is_apart_from_training():
    held, train = set(sharegpt.texts("held-out")), sharegpt.texts("train")
    assert len(held) > 100 and len(train) > 16000
    assert not held & set(train[: sharegpt.TRAINED_ON])  # nothing the pair read, nor a part of it
    assert 0 < len(sharegpt.questions()) <= len(held)
    assert all("\n\n\n" not in t for t in list(held)[:100])  # blank-line runs collapsed
    with pytest.raises(ValueError, match="split must be"):
        sharegpt.texts("test")


@pytest.mark.parametrize("context_len", [64, 8192])
def test_chat_prompts_have_the_asked_length_and_end_with_the_answer_cue(tok, context_len):
    prompts = sharegpt.make_chat_prompts(context_len, 2, tokenizer=tok, seed=3)
    cue = tok.encode(sharegpt.ANSWER_CUE).ids
    for p in prompts:
        assert len(p) == context_len and p[-len(cue) :] == cue
    assert prompts[0] != prompts[1]
    assert prompts == sharegpt.make_chat_prompts(context_len, 2, tokenizer=tok, seed=3)
    for p in prompts:  # the question, as the user asked it, then the cue
        tail = tok.decode(p[-(sharegpt.MAX_QUESTION_TOKENS + len(cue) + 2) :])
        assert tail.endswith("\n" + sharegpt.ANSWER_CUE) and ("User: " in tail or context_len < 300)


def test_the_workload_is_chosen_by_name():
    chat = workload.workload_prompts("chat", 300, 1, vocab_size=1024, seed=0, target=str(TARGET))
    copy = workload.workload_prompts("copy", 300, 1, vocab_size=512, seed=0)
    assert len(chat[0]) == len(copy[0]) == 300 and chat != copy
    assert copy == workload.make_prompts(300, 1, vocab_size=512, seed=0)
    with pytest.raises(ValueError, match="unknown workload 'poems'"):
        workload.workload_prompts("poems", 300, vocab_size=512)
    with pytest.raises(ValueError, match="tokenizer.json"):
        workload.workload_prompts("chat", 300, vocab_size=512, target=str(profiles.tiny_pair()[1]))
