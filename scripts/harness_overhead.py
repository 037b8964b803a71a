#!/usr/bin/env python
"""Harness overhead: decode throughput as `eagle-fix run` measures it vs a bare `LLM.generate` script,
same engine settings, side by side in one run (target: <= 1% apart).

  .venv/bin/python scripts/harness_overhead.py [--context 4096] [--output-len 256] [--repeats 5]

The bare side is what a user would write: one engine in this process, a prefill run (1 token), then
the timed run served by the prefix cache. Its decode rate is taken two ways: from vLLM's own
first/last token timestamps (the harness's definition, so the difference is the harness's cost:
child process, pipe, counters, drafter RPCs, memory sampler thread) and from wall time,
(n - 1) / (t_run - t_cached_1_token_run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bare(spec, prompt_len: int, output_len: int, repeats: int) -> tuple[list[float], list[float]]:
    os.environ.update(spec.env())
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from eagle_fix.workload import make_prompts

    kwargs = spec.llm_kwargs()
    kwargs.pop("worker_extension_cls", None)  # the bare script knows nothing of eagle-fix
    llm = LLM(**kwargs)
    vocab = llm.llm_engine.vllm_config.model_config.get_vocab_size()
    prompt = [TokensPrompt(prompt_token_ids=make_prompts(prompt_len, 1, vocab_size=vocab)[0])]
    llm.generate(prompt, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), use_tqdm=False)
    rates, wall_rates = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        llm.generate(prompt, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True), use_tqdm=False)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True), use_tqdm=False)
        total = time.perf_counter() - t0
        n = len(out[0].outputs[0].token_ids)
        m = out[0].metrics
        rates.append((n - 1) / (m.last_token_ts - m.first_token_ts))
        wall_rates.append((n - 1) / (total - t_first))
    return rates, wall_rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", default="eager")
    parser.add_argument("--out", default="results/harness-overhead.json")
    args = parser.parse_args()

    from eagle_fix.models import get_profile
    from eagle_fix.sweep import RunArgs, resolve, run_sweep, _engine_spec, Point

    # The same point `repeats` times on one engine, as the sweep measures it.
    run_args = RunArgs(profile="cpu-quick", contexts=(args.context,) * args.repeats, modes=(args.mode,),
                       arms=("eagle3",), output_len=args.output_len, progress=False)
    records = run_sweep(run_args)
    harness = [r["decode_throughput_tok_s"] for r in records]
    rec = records[0]
    run = resolve(run_args)
    spec = _engine_spec(run, Point(args.context, args.mode, "eagle3", "on"))
    bare_rates, bare_wall = bare(spec, rec["prompt_len"], args.output_len, args.repeats)
    h, b, w = statistics.median(harness), statistics.median(bare_rates), statistics.median(bare_wall)
    result = {"context": args.context, "output_len": args.output_len, "mode": args.mode, "repeats": args.repeats,
              "harness_decode_tok_s": harness, "bare_decode_tok_s": bare_rates, "bare_wall_decode_tok_s": bare_wall,
              "median_harness": h, "median_bare": b, "median_bare_wall": w,
              "relative_difference": (h - b) / b, "relative_difference_wall": (h - w) / w,
              "acceptance_length": [r["acceptance_length"] for r in records],
              "profile": get_profile("cpu-quick").name}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
