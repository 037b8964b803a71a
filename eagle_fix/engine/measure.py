"""Inside the engine's process: what one point measures (TTFT, decode, vLLM's spec-decode counters,
the drafter's own counters) around calls to a live `vllm.LLM`. The process plumbing is eagle_fix.engine."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from eagle_fix.core.parity import LOGPROBS as PARITY_LOGPROBS
from eagle_fix.core.workload import workload_prompts
from eagle_fix.engine.logs import log_tail
from eagle_fix.engine.protocol import PointCommand, PointReply
from eagle_fix.engine.spec import EngineSpec
from eagle_fix.engine.worker import RANK_COUNTERS, combine_workers, merge_drafter_stats


def spec_counters(llm: Any) -> dict[str, Any]:
    """vLLM's own spec-decode counters (cumulative; the caller takes after-minus-before)."""
    out: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": []}
    names = {
        "vllm:spec_decode_num_drafts": "drafts",
        "vllm:spec_decode_num_draft_tokens": "draft_tokens",
        "vllm:spec_decode_num_accepted_tokens": "accepted",
    }
    for metric in llm.get_metrics():
        if metric.name in names:
            out[names[metric.name]] += getattr(metric, "value", 0)
        elif metric.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            values = list(getattr(metric, "values", []))
            prev = out["per_pos"]
            out["per_pos"] = [a + b for a, b in zip(values, prev)] if prev else values
    return out


def compile_seconds(log_path: str | None) -> float | None:
    """torch.compile time from the engine's log: vLLM's own total on CUDA ("torch.compile took X s
    in total"), else the CPU runner's compile warm-up span (its log lines have 1 s resolution)."""
    if not log_path:
        return None
    lines = log_tail(Path(log_path), 2_000_000)
    totals = [float(m.group(1)) for line in lines if (m := re.search(r"torch\.compile took ([\d.]+) s in total", line))]
    if totals:
        return sum(totals)
    stamp = r"(\d\d-\d\d \d\d:\d\d:\d\d)"
    start = [m.group(1) for line in lines if (m := re.search(stamp + r".*Warming up model for the compilation", line))]
    end = [m.group(1) for line in lines if (m := re.search(stamp + r".*Warming up done", line))]
    if not start or not end:
        return None
    import datetime as dt

    parse = lambda s: dt.datetime.strptime(s, "%m-%d %H:%M:%S")
    return max(0.0, (parse(end[-1]) - parse(start[-1])).total_seconds())


def drafter_stats(llm: Any) -> dict[str, Any]:
    """Counters of the drafter's real work, merged over the engine's workers."""
    return merge_drafter_stats(llm.collective_rpc("eagle_fix_drafter_stats"))


def decode_step_ms(stats: dict[str, Any]) -> float | None:
    """The median model-step time (ms) of a decode run's decode steps, from the worker's step times
    (eagle_fix.fix.plugin: execute_model plus the sample_tokens completing it). Steps whose batch carried
    prompt tokens are left out (the first step of each request, a prefill chunk); where the worker
    could not read a step's batch, the run's first step stands for its prefill and is left out. The
    first worker's steps: tensor-parallel workers run every step together. None without step times."""
    import statistics

    decode = _decode_steps(stats, "step_times_ms")
    return statistics.median(decode) if decode else None


def decode_step_cpu_ms(stats: dict[str, Any]) -> float | None:
    """The median of the same decode steps on the stepping thread's CPU clock (step_cpu_ms); None from a
    worker that does not report it."""
    import statistics

    cpu = _decode_steps(stats, "step_cpu_ms")
    return statistics.median(cpu) if cpu else None


def decode_spin_ms(stats: dict[str, Any]) -> float | None:
    """The median injected spin (ms) of the same decode steps (EAGLE_FIX_INJECT_SLOWDOWN): the spin
    is F x each step's own time, so spin / step_ms is F / (1 + F) on any machine. None where nothing
    was spun (no knob, or a worker that does not report its spin)."""
    import statistics

    spun = _decode_steps(stats, "step_spun_ms")
    return statistics.median(spun) if spun and any(spun) else None


def _decode_steps(stats: dict[str, Any], key: str) -> list[float]:
    """`key`'s per-step values of the decode steps (the rule in decode_step_ms)."""
    times, values, prompt = stats.get("step_times_ms") or [], stats.get(key) or [], stats.get("step_prompt") or []
    if len(values) != len(times):
        return []
    if len(prompt) != len(times):
        prompt = [None] * len(times)
    return [v for i, (v, p) in enumerate(zip(values, prompt)) if not p and not (p is None and i == 0)]


def _enum_name(value: Any) -> str | None:
    if value is None:
        return None
    name = getattr(value, "name", None)
    return str(name if name is not None else value)


def worker_memory_once(llm: Any) -> dict[str, Any]:
    """The worker's memory figures now (eagle_fix.engine.worker.WorkerExtension), or why there are none: an
    engine without the extension must still measure its points."""
    try:
        return combine_workers(llm.collective_rpc("eagle_fix_memory"))
    except Exception as exc:  # noqa: BLE001 -- an RPC the worker lacks is a recorded reason, not a failed point
        return {"error": f"worker memory RPC failed: {type(exc).__name__}: {exc}"[:300]}


class KvUsagePeak:
    """The peak of vLLM's own KV-cache usage over a point: the scheduler's share of KV blocks held by live
    requests (`SchedulerStats.kv_cache_usage`, the figure behind the `vllm:kv_cache_usage_perc` gauge), read
    from every step's stats as the front end records them. The gauge itself is no fit: it holds the last
    step's value, taken after the finished request freed its blocks (0 once `generate` returns), and
    polling it during a timed run would cost the run CPU. The peak falls at the end of the point's
    longest request: its prompt and output, the point's context."""

    def __init__(self, llm: Any):
        self.peak: float | None = None
        self.why: str | None = None
        self._manager = getattr(getattr(llm, "llm_engine", None), "logger_manager", None)
        if self._manager is None or not callable(getattr(self._manager, "record", None)):
            self.why = "this engine's front end keeps no stat logger (disable_log_stats?): no KV-cache usage per step"
            self._manager = None
            return
        vars(self._manager).pop("record", None)  # a point that raised left its wrapper: never stack them
        original = self._manager.record

        def record(*args: Any, **kwargs: Any) -> Any:
            stats = kwargs.get("scheduler_stats", args[0] if args else None)
            usage = getattr(stats, "kv_cache_usage", None)
            if isinstance(usage, (int, float)):
                self.peak = usage if self.peak is None else max(self.peak, usage)
            return original(*args, **kwargs)

        self._manager.record = record

    def close(self) -> None:
        """Give the front end its own `record` back."""
        if self._manager is not None and "record" in vars(self._manager):
            del self._manager.record
        self._manager = None


def kv_in_use(peak: float | None, memory: dict[str, Any], why: str | None = None) -> dict[str, Any]:
    """The KV bytes the point's requests held at their peak: vLLM's usage share x the KV cache's blocks
    (less the null block vLLM leaves out of the share) x bytes per block, from the worker's kv_cache_config.
    Tensor parallel: every rank holds the same blocks of its own shard, so one rank's figure x ranks."""
    workers = memory.get("workers") or [memory]
    size, blocks = workers[0].get("vllm_kv_cache_bytes"), workers[0].get("vllm_kv_cache_blocks")
    out: dict[str, Any] = {"kv_cache_usage_peak": None if peak is None else round(float(peak), 6)}
    if peak is None or not size or not blocks or blocks < 2:
        out["peak_kv_memory_bytes"] = None
        reason = why or (
            "no KV-cache usage from vLLM's scheduler during the point"
            if peak is None
            else "the worker reported no kv_cache_config to size the usage share with"
        )
        out["null_reasons"] = {**(memory.get("null_reasons") or {}), "peak_kv_memory_bytes": reason}
        if peak is None:
            out["null_reasons"]["kv_cache_usage_peak"] = reason
        return out
    used_blocks = round(peak * (blocks - 1))
    out["peak_kv_memory_bytes"] = int(used_blocks * size // blocks) * len(workers)
    return out


def reset_worker_memory(llm: Any) -> str | None:
    """Reset the worker's peaks before a point; the reason when it could not be done."""
    try:
        llm.collective_rpc("eagle_fix_reset_memory")
        return None
    except Exception as exc:  # noqa: BLE001 -- a failed reset is a recorded reason, not a failed point
        return f"worker memory reset failed: {type(exc).__name__}: {exc}"[:300]


def engine_settings(config: Any, worker: dict[str, Any] | None = None) -> dict[str, Any]:
    """The compilation mode, CUDA-graph mode and attention backend this engine really runs with,
    from vLLM's own config (after its defaults and platform rules) and the worker's runner: a
    "compile" point on CUDA is torch.compile plus a CUDA-graph mode, and each is recorded apart."""
    comp = getattr(config, "compilation_config", None)
    requested = getattr(getattr(config, "attention_config", None), "backend", None)
    selected = (worker or {}).get("attention_backends")
    return {
        "compilation_mode": _enum_name(getattr(comp, "mode", None)),
        "cudagraph_mode": _enum_name(getattr(comp, "cudagraph_mode", None)),
        # the runner's choice; vLLM's auto-selection when nothing was asked for
        "attention_backend": ",".join(selected) if selected else _enum_name(requested),
        "attention_backend_requested": _enum_name(requested) or "auto",
        "dtype": str(getattr(getattr(config, "model_config", None), "dtype", None) or "").replace("torch.", "") or None,
        "startup_memory": worker or None,
    }


def _decode_span(outputs: list) -> float | None:
    """First to last token of the batch on the engine's own timestamps (the prefill is not in it)."""
    firsts = [o.metrics.first_token_ts for o in outputs if getattr(o, "metrics", None) and o.metrics.first_token_ts]
    lasts = [o.metrics.last_token_ts for o in outputs if getattr(o, "metrics", None) and o.metrics.last_token_ts]
    return (max(lasts) - min(firsts)) if firsts and lasts and max(lasts) > min(firsts) else None


def measure_point(
    llm: Any, spec: EngineSpec, cmd: PointCommand, vocab: int, SamplingParams: Any, TokensPrompt: Any
) -> PointReply:
    """TTFT `ttft_repeats` times (each a full prefill: the prefix cache is emptied first), then the
    decode `repeats` times on the warm engine (the prefix cache serves the prefill). Returns raw
    samples; medians and intervals are the parent's (eagle_fix.sweep.loop) business.

    The acceptance counts and the drafter's counters are taken around the first decode only: under
    greedy sampling every repeat replays the same drafts, so pooling them would count one
    experiment several times."""
    prompt_len, batch, output_len = int(cmd.prompt_len), int(cmd.batch_size), int(cmd.output_len)
    # ttft_repeats 0 (eagle-fix ab's later rounds): the prompt is cached already; decode only
    repeats, ttft_repeats = max(1, int(cmd.repeats)), max(0, int(cmd.ttft_repeats))
    made = workload_prompts(spec.workload, prompt_len, batch, vocab_size=vocab, seed=int(cmd.seed), target=spec.target)
    prompts = [TokensPrompt(prompt_token_ids=p) for p in made]
    temp = float(cmd.temperature)
    one = SamplingParams(temperature=temp, max_tokens=1, ignore_eos=True)
    full = SamplingParams(temperature=temp, max_tokens=output_len, ignore_eos=True)
    # the first decode run also returns each token's top two logprobs: the margin between them tells a
    # near-tie (which numerics may flip) from a real eager/compile divergence (eagle_fix.core.parity)
    first = SamplingParams(temperature=temp, max_tokens=output_len, ignore_eos=True, logprobs=PARITY_LOGPROBS)

    # 1. TTFT: the full, uncached prefill (one token out). The last one leaves the prefix cache
    #    filled, so the decode runs below do not pay the long prefill again.
    # the worker's peaks cover this point alone: TTFT and decode runs, nothing of the start-up
    reset_error = reset_worker_memory(llm)
    kv_usage = KvUsagePeak(llm)  # vLLM's KV-cache usage, peaked over the point's steps
    ttft = []
    for _ in range(ttft_repeats):
        llm.reset_prefix_cache()
        t0 = time.perf_counter()
        llm.generate(prompts, one, use_tqdm=False)
        ttft.append(time.perf_counter() - t0)
    ttft_mid = sorted(ttft)[len(ttft) // 2] if ttft else None

    samples: dict[str, list[float]] = {
        "ttft_s": ttft,
        "decode_throughput_tok_s": [],
        "tpot_ms": [],
        "output_throughput_tok_s": [],
        "decode_wall_s": [],
        "step_ms": [],
        "step_cpu_ms": [],
    }
    result = PointReply(prompt_len=prompt_len, samples=samples)
    for i in range(repeats):
        counted = spec.speculates and i == 0
        if counted:
            before = spec_counters(llm)
        # the worker's counters and step times cover this decode run alone
        llm.collective_rpc("eagle_fix_reset_drafter_stats")
        t1 = time.perf_counter()
        outputs = llm.generate(prompts, first if i == 0 else full, use_tqdm=False)
        wall_s = time.perf_counter() - t1
        n_out = sum(len(o.outputs[0].token_ids) for o in outputs)
        decode_s = _decode_span(outputs)
        samples["decode_wall_s"].append(wall_s)
        steps = drafter_stats(llm)
        step_ms, spin_ms = decode_step_ms(steps), decode_spin_ms(steps)
        if step_ms is not None:
            samples["step_ms"].append(step_ms)
        step_cpu_ms = decode_step_cpu_ms(steps)
        if step_cpu_ms is not None:
            samples["step_cpu_ms"].append(step_cpu_ms)
        if spin_ms is not None:  # only under the calibration knob; a sample list, not a metric
            samples.setdefault("step_spin_ms", []).append(spin_ms)
        if ttft_mid is not None:
            samples["output_throughput_tok_s"].append(
                n_out / (ttft_mid + (decode_s if decode_s is not None else wall_s))
            )
        if decode_s:
            samples["decode_throughput_tok_s"].append((n_out - batch) / decode_s)
            samples["tpot_ms"].append(1000.0 * decode_s / max(1, output_len - 1))
        if i == 0:
            result.output_tokens = n_out
            result.output_token_ids = list(outputs[0].outputs[0].token_ids)
            result.output_token_ids_head = result.output_token_ids[:16]
            result.output_logprob_margins = logprob_margins(outputs[0].outputs[0].logprobs)
        if counted:
            for key, value in _acceptance(llm, before).items():
                setattr(result, key, value)
    kv_usage.close()
    memory = worker_memory_once(llm)
    memory = {**memory, **kv_in_use(kv_usage.peak, memory, kv_usage.why)}
    if reset_error:
        memory = {**memory, "reset_error": reset_error}
    result.worker_memory = memory
    return result


def logprob_margins(logprobs: Any) -> list[float] | None:
    """Per generated token, its top logprob minus the runner-up's (nats; 4 decimals), from vLLM's per-position
    {token_id: Logprob} dicts; None where the engine returned none, a position with one entry is None."""
    if not logprobs:
        return None
    out: list[float | None] = []
    for position in logprobs:
        top = sorted((float(getattr(lp, "logprob", lp)) for lp in (position or {}).values()), reverse=True)
        out.append(round(top[0] - top[1], 4) if len(top) >= 2 else None)
    return out


def _acceptance(llm: Any, before: dict[str, Any]) -> dict[str, Any]:
    """vLLM's spec-decode counters (after minus before) and the drafter's own counters. With no
    drafts, acceptance is unknown (None), not 1.0."""
    after = spec_counters(llm)
    drafts = after["drafts"] - before["drafts"]
    accepted = after["accepted"] - before["accepted"]
    per_pos = [a - b for a, b in zip(after["per_pos"], before["per_pos"] or [0] * len(after["per_pos"]))]
    stats = drafter_stats(llm)
    return {
        "num_drafts": drafts,
        "num_draft_tokens": after["draft_tokens"] - before["draft_tokens"],
        "num_accepted_tokens": accepted,
        "accepted_per_position": per_pos,
        # vLLM's own formulas (spec-decode metrics): 1 + accepted / drafts; rate_i = accepted_i / drafts.
        "acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "per_position_acceptance": [x / drafts for x in per_pos] if drafts else None,
        "drafter_steps": stats.get("spec_steps"),
        "drafter_proposals": stats.get("proposals"),
        # n-gram: proposer calls that found no match and drafted nothing, which vLLM's counters skip (None
        # for a method whose proposer always drafts k tokens, and on V2, which pads a missing match)
        "drafter_empty_proposals": stats.get("empty_proposals"),
        # unknown (None) where a counter's hook is missing in this engine: never a guessed 0; and on model
        # runner V2, which has no fits-gate, a step that may draft always calls the drafter, so the share
        # is 1 by construction there, not a measurement (its proposals and furthest position still are)
        "drafter_coverage": (stats["proposals"] / stats["spec_steps"])
        if stats.get("spec_steps") and stats.get("proposals") is not None and stats.get("model_runner") != "v2"
        else None,
        "max_seq_len_drafted": stats.get("max_seq_len_drafted"),
        "drafter_calls_damaged": stats.get("damaged"),
        "missing_hooks": stats.get("missing_hooks") or [],
        # tensor parallel: every rank's own counters and step clock (the figures above are the headline rank's)
        "drafter_ranks": [
            {"rank": i, **{k: w.get(k) for k in RANK_COUNTERS}, "step_ms": decode_step_ms(w)}
            for i, w in enumerate(stats["ranks"])
        ]
        if stats.get("ranks")
        else None,
        "drafter_ranks_disagree": stats.get("ranks_disagree"),  # only where there are ranks
    }
