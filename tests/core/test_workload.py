"""The synthetic workload: exact lengths, vocab range, determinism, and the copy structure."""

import numpy as np
import pytest

from eagle_fix.core import workload


@pytest.mark.parametrize("ctx,vocab", [(1, 512), (100, 512), (1536, 512), (8192, 512), (131072, 128256)])
def test_prompts_exact_length_and_range(ctx, vocab):
    prompts = workload.make_prompts(ctx, 2, vocab_size=vocab, seed=3)
    assert len(prompts) == 2
    for p in prompts:
        assert len(p) == ctx
        assert all(isinstance(t, int) for t in p[:10])
        assert 0 <= min(p) and max(p) < vocab


def test_prompts_deterministic_and_seeded():
    a = workload.make_prompts(4096, 2, vocab_size=512, seed=0)
    assert a == workload.make_prompts(4096, 2, vocab_size=512, seed=0)
    assert a != workload.make_prompts(4096, 2, vocab_size=512, seed=1)
    assert a[0] != a[1]


def test_prompt_ends_inside_a_copy_from_far_back():
    """The last PROMPT_COPY_PREFIX tokens occur earlier in the first half: continuing the copy is
    what a good model does, so generation after the prompt is predictable."""
    ctx, m = 8192, workload.PROMPT_COPY_PREFIX
    p = np.array(workload.make_prompts(ctx, 1, vocab_size=512, seed=5)[0])
    tail = p[-m:]
    hits = [i for i in range(ctx // 2) if np.array_equal(p[i : i + m], tail)]
    assert hits, "prompt tail is not a copy of the first half"
    assert hits[0] + m + workload.PROMPT_COPY_MIN_TAIL <= ctx - m


def test_corpus_has_long_range_copies():
    doc = workload.make_corpus(4096, vocab_size=512, seed=0)
    assert len(doc) == 4096 and doc.min() >= 0 and doc.max() < 512
    # Most 8-grams in the second half already appeared earlier (copies), few in fresh text.
    seen = {tuple(doc[i : i + 8]) for i in range(2048 - 8)}
    repeats = np.mean([tuple(doc[i : i + 8]) in seen for i in range(2048, 4096 - 8)])
    assert repeats > 0.3


def test_lexicon_is_fixed_and_small():
    lex = workload.lexicon(512)
    assert len(lex) == workload.LEXICON_SIZE and np.array_equal(lex, workload.lexicon(512))
    assert len(workload.lexicon(100)) == 100


def test_bad_arguments():
    with pytest.raises(ValueError):
        workload.make_prompts(0, vocab_size=512)
    with pytest.raises(ValueError):
        workload.make_prompts(10, 0, vocab_size=512)
