"""A watch on vLLM: a per-request seed (`SamplingParams(seed=...)`) kills the CPU worker once a seeded
request's prefill is chunked. vLLM rewinds a partial request's generator (`gen.set_offset(gen.get_offset()
- 4)` in gpu_model_runner), which a CPU generator cannot do. That is why sampled points are seeded by the
engine (plan.py, docs/chat-pair.md). When this test fails, the installed vLLM no longer crashes: sampled
points may then carry a seed per request."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from eagle_fix.pairs.profiles import PROFILES

pytestmark = pytest.mark.engine

# The tiny target alone (the crash is the sampler's, not the drafter's), prompts in 256-token chunks: a
# seeded sampled request of 100 tokens (one chunk), then one of 600 (three chunks).
SCRIPT = """
import sys

from vllm import LLM, SamplingParams

if __name__ == "__main__":  # vLLM spawns its engine core, which imports this file again
    llm = LLM(model=sys.argv[1], max_model_len=1024, max_num_batched_tokens=256, enforce_eager=True,
              enable_prefix_caching=False, seed=0)
    seeded = SamplingParams(temperature=0.7, seed=1, max_tokens=4)
    for n in (100, 600):
        prompt = {"prompt_token_ids": [(7 * i) % 500 + 3 for i in range(n)]}
        out = llm.generate([prompt], seeded, use_tqdm=False)
        print("GENERATED", n, len(out[0].outputs[0].token_ids), flush=True)
"""


def test_a_per_request_seed_still_kills_the_cpu_worker_when_prefill_is_chunked(tmp_path):
    target = PROFILES["cpu-quick"].target
    env_script = tmp_path / "seeded.py"
    env_script.write_text(SCRIPT)
    proc = subprocess.run(  # noqa: PLW1510 -- its exit code is what is judged
        [sys.executable, str(env_script), str(target)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},  # a small KV pool starts in seconds
    )
    said = proc.stdout + proc.stderr
    assert "GENERATED 100 4" in said, said[-3000:]  # one chunk: the seed works
    assert "GENERATED 600" not in said and proc.returncode != 0, (
        "a per-request seed with a chunked prefill ran on this vLLM: sampled points may now seed each request "
        "(eagle_fix/sweep/plan.py, docs/chat-pair.md)"
    )
    assert "CPU Generator does not use offset" in said, said[-3000:]
