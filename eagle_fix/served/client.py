"""The served load: vLLM's own bench client (`vllm bench serve`, run in this process through
`vllm.benchmarks.serve`) on the suite's prompts written as a `custom` dataset, and the server's own /metrics
(Prometheus text) for the engine's per-request TPOT."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from eagle_fix.core.workload import target_tokenizer
from eagle_fix.pairs.tokenizer import ids_to_text

# The engine's own per-request TPOT (first to last token over the tokens after the first, measured in
# the engine, not from when streamed chunks reach the client).
SERVER_TPOT = "vllm:request_time_per_output_token_seconds"
# vLLM's bench client decodes greedy, as the sweep's default regime does: the command and the map's records
# say it from here
TEMPERATURE = 0.0


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus exposition text -> {name: value summed over label sets} (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(None, 1)
        if len(parts) != 2:
            continue
        name = parts[0].split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(parts[1])
        except ValueError:
            continue
    return out


def server_tpot_ms(before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
    """Mean over the requests finished between two /metrics readings of the engine's per-request
    TPOT, in ms (vllm:request_time_per_output_token_seconds: its sum and count deltas)."""
    if not before or not after:
        return None
    n = after.get(SERVER_TPOT + "_count", 0.0) - before.get(SERVER_TPOT + "_count", 0.0)
    total = after.get(SERVER_TPOT + "_sum", 0.0) - before.get(SERVER_TPOT + "_sum", 0.0)
    return 1000.0 * total / n if n > 0 else None


def bench_args(
    base_url: str,
    model: str,
    dataset_path: str | os.PathLike,
    *,
    num_prompts: int,
    output_len: int,
    max_concurrency: int | None,
    request_rate: float | None,
    seed: int,
) -> list[str]:
    """`vllm bench serve`'s arguments for one cell: the suite's prompts (custom dataset, no chat template,
    file order kept), greedy, every request running to output_len tokens."""
    args = [
        "--backend",
        "openai",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset_path),
        "--skip-chat-template",
        "--disable-shuffle",
        "--custom-output-len",
        str(output_len),
        "--num-prompts",
        str(num_prompts),
        "--temperature",
        f"{TEMPERATURE:g}",
        "--ignore-eos",
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        # keeps the per-request errors in the returned result (it saves nothing without --save-result)
        "--save-detailed",
    ]
    if max_concurrency:
        args += ["--max-concurrency", str(max_concurrency)]
    if request_rate:
        args += ["--request-rate", f"{request_rate:g}"]
    return args


def bench_command(argv: list[str]) -> str:
    """The same run as a user would type it (on a vLLM whose `vllm` console script works)."""
    import shlex

    return "vllm bench serve " + " ".join(shlex.quote(a) for a in argv)


def parse_bench_args(argv: list[str]):
    """vLLM's own parser of `vllm bench serve` (its add_cli_args on its FlexibleArgumentParser)."""
    from vllm.benchmarks.serve import add_cli_args

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases
        from vllm.utils import FlexibleArgumentParser  # type: ignore[attr-defined,no-redef]
    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser.parse_args(argv)


def run_bench(argv: list[str], timeout_s: float) -> dict[str, Any]:
    """vLLM's client in this process, `timeout_s` at most; returns its result JSON (vLLM's keys)."""
    import asyncio
    import contextlib
    import io

    from vllm.benchmarks.serve import main_async

    args = parse_bench_args(argv)
    out = io.StringIO()

    async def bounded():
        return await asyncio.wait_for(main_async(args), timeout_s)

    with contextlib.redirect_stdout(out):
        try:
            return asyncio.run(bounded())
        except TimeoutError:
            raise TimeoutError(f"vllm bench serve did not finish within {timeout_s:.0f} s") from None


def write_prompts(
    path: Path, prompts: list[list[int]], vocab_size: int = 512, *, workload: str = "copy", target: str | None = None
) -> Path:
    """The custom dataset's JSONL: one {"prompt": text} per request: the copy workload's ids as the tiny
    tokenizer's words, the chat workload's decoded by the target's own tokenizer.json (the server encodes
    them again)."""
    if workload == "chat":
        tok = target_tokenizer(target)
        text = lambda ids: _no_longer(ids, tok)
    else:
        text = lambda ids: ids_to_text(ids, vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps({"prompt": text(list(ids))}) + "\n" for ids in prompts)
    return path


def _no_longer(ids: list[int], tok) -> str:
    """The ids as text that the server's tokenizer makes no more tokens of: BPE merges across the joins of
    separately encoded conversations add a few (measured: up to 6 of 8000), which would run a request past
    max_model_len; the surplus is cut from the front, so the question at the end stays whole."""
    cut = 0
    while (over := len(tok.encode(tok.decode(ids[cut:])).ids) - len(ids)) > 0:
        cut += over
    return tok.decode(ids[cut:])
