#!/usr/bin/env python
"""Harness overhead: decode throughput as `eagle-fix run` measures it vs a bare `LLM.generate` script,
same engine settings, side by side in one run (target: <= 1% apart).

  .venv/bin/python scripts/harness_overhead.py [--context 4096] [--output-len 256] [--pairs 20]

Both engines are up at once and the measurements alternate (harness, bare, harness, bare, ...), so
drift of a shared machine falls on both sides alike; the figure is the median of the per-pair ratios
with its distribution-free 95% interval (eagle_fix.core.stats.ratio_summary), and the verdict on the 1%
goal: met if the interval's worst end is within 1%, refuted if its best end is beyond, otherwise
the interval and about how many pairs would decide it.

- harness side: the sweep's own machinery, an `EngineProcess` (child process, JSON pipe, counters,
  drafter-stats RPCs) with the sweep's `MemorySampler` thread watching its process tree;
- bare side: what a user would write, one `vllm.LLM` in this process, a 1-token run (prefill, then
  served by the prefix cache), then the timed run. Its decode rate is taken from vLLM's own
  first/last-token timestamps (the harness's definition) and from wall time,
  (n - 1) / (t_run - t_cached_1_token_run).

A pair counts only if both sides produced the same tokens (same work).
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

from eagle_fix.core.errors import EagleFixError, OneLineParser, parse_positive_int


class Bare:
    def __init__(self, spec, prompt_len: int, output_len: int):
        os.environ.update(spec.env())
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        from eagle_fix.core.workload import workload_prompts

        kwargs = spec.llm_kwargs()
        kwargs.pop("worker_extension_cls", None)  # the bare script knows nothing of eagle-fix
        self.llm = LLM(**kwargs)
        vocab = self.llm.llm_engine.vllm_config.model_config.get_vocab_size()
        # the same prompt the engine child makes (eagle_fix.engine.measure): the profile's workload, seed 0
        made = workload_prompts(spec.workload, prompt_len, 1, vocab_size=vocab, seed=0, target=spec.target)
        self.prompt = [TokensPrompt(prompt_token_ids=made[0])]
        self.one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
        self.run = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
        self.llm.generate(self.prompt, self.one, use_tqdm=False)  # the long prefill, once

    def measure(self) -> tuple[float, float, list[int]]:
        t0 = time.perf_counter()
        self.llm.generate(self.prompt, self.one, use_tqdm=False)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = self.llm.generate(self.prompt, self.run, use_tqdm=False)
        total = time.perf_counter() - t0
        ids = list(out[0].outputs[0].token_ids)
        m = out[0].metrics
        return (len(ids) - 1) / (m.last_token_ts - m.first_token_ts), (len(ids) - 1) / (total - t_first), ids[:16]


def positive(flag: str):
    """argparse type: a positive integer, its hint in the flag's own unit (eagle_fix.core.errors)."""

    def parse(raw: str) -> int:
        try:
            return parse_positive_int(raw, flag)
        except EagleFixError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def main() -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=positive("--context"), default=4096)
    parser.add_argument("--output-len", type=positive("--output-len"), default=256)
    parser.add_argument("--pairs", type=positive("--pairs"), default=20)
    parser.add_argument("--mode", choices=("eager", "compile"), default="eager")
    parser.add_argument("--out", default="results/overhead/harness.json")
    args = parser.parse_args()

    import tempfile

    from eagle_fix.core import stats
    from eagle_fix.engine.memory import MemorySampler
    from eagle_fix.engine.offline import EngineProcess
    from eagle_fix.sweep.plan import Point, RunArgs, resolve

    try:  # every check before an engine starts, one line each
        if Path(args.out).is_dir():
            raise EagleFixError(f"--out {args.out} is a folder; give a file path such as results/overhead/harness.json")
        run = resolve(
            RunArgs(
                profile="cpu-quick",
                contexts=(args.context,),
                modes=(args.mode,),
                arms=("eagle3",),
                output_len=args.output_len,
                progress=False,
            )
        )
    except EagleFixError as exc:
        print(f"harness_overhead: error: {exc}", file=sys.stderr)
        return 2
    point = Point(args.context, args.mode, "eagle3", "on")
    spec = run.engine_spec(point)
    # one decode per call; the prompt stays in the prefix cache after the warm-up's prefill
    cmd = run.command(point, repeats=1, ttft_repeats=0)
    plen = cmd.prompt_len

    sampler = MemorySampler()
    log = Path(tempfile.mkdtemp(prefix="eagle-fix-overhead-")) / "engine.log"
    engine = EngineProcess(spec, log)
    bare = Bare(spec, plen, args.output_len)
    rows = []
    try:
        engine.run_point(
            run.command(point, repeats=1, ttft_repeats=1), timeout_s=600
        )  # warm-up: the harness side's prefill, once
        for i in range(args.pairs):
            sampler.watch(engine.pid)  # as in the sweep: the sampler runs while the harness measures
            sampler.reset_peaks()
            h = engine.run_point(cmd, timeout_s=600)
            sampler.peaks()
            sampler.watch(None)
            b, w, ids = bare.measure()
            same = h.output_token_ids_head == ids
            rate = h.samples["decode_throughput_tok_s"][0]
            rows.append(
                {
                    "harness": rate,
                    "bare": b,
                    "bare_wall": w,
                    "acceptance_length": h.acceptance_length,
                    "same_tokens": same,
                }
            )
            print(
                f"pair {i + 1}/{args.pairs}: harness {rate:.1f}  bare {b:.1f}  "
                f"(wall {w:.1f}) tok/s{'' if same else '  DIFFERENT TOKENS: not counted'}",
                flush=True,
            )
    finally:
        engine.close()
        sampler.close()

    ok = [r for r in rows if r["same_tokens"]]
    if not ok:
        print("harness_overhead: no pair produced the same tokens on both sides; nothing to compare", file=sys.stderr)
        return 1
    ratios = [r["harness"] / r["bare"] - 1 for r in ok]
    ratios_wall = [r["harness"] / r["bare_wall"] - 1 for r in ok]
    summary = stats.ratio_summary([1 + x for x in ratios])
    lo, hi = (summary["ci95"][0] - 1, summary["ci95"][1] - 1) if summary["ci95"] else (None, None)
    goal = 0.01
    if lo is None:
        verdict = "too few pairs for an interval"
    elif lo >= -goal and hi <= goal:
        verdict = "met: the whole interval is within 1%"
    elif hi < -goal or lo > goal:
        verdict = "refuted: the whole interval is beyond 1%"
    else:
        half = (hi - lo) / 2
        room = max(goal - abs(summary["median"] - 1), 1e-4)
        verdict = (
            f"undecided: the interval [{lo:+.1%}, {hi:+.1%}] straddles 1%; about "
            f"{int(len(ok) * (half / room) ** 2) + 1} pairs would narrow it to within 1% of the median"
        )
    result = {
        "command": " ".join(["scripts/harness_overhead.py", *sys.argv[1:]]),
        "profile": "cpu-quick",
        "context": args.context,
        "output_len": args.output_len,
        "mode": args.mode,
        "pairs": rows,
        "median_harness_tok_s": statistics.median(r["harness"] for r in ok),
        "median_bare_tok_s": statistics.median(r["bare"] for r in ok),
        "relative_difference": statistics.median(ratios),  # harness / bare - 1, median over pairs
        "relative_difference_wall": statistics.median(ratios_wall),
        "pair_spread": [min(ratios), max(ratios)],
        "ci95": [lo, hi],
        "ci95_coverage": summary["coverage"],
        "goal": goal,
        "verdict": verdict,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"harness vs bare decode throughput: {result['relative_difference']:+.1%} (median of {len(ok)} pairs, "
        f"95% interval {lo:+.1%} .. {hi:+.1%}); wall-time definition {result['relative_difference_wall']:+.1%}; "
        f"1% goal {verdict} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
