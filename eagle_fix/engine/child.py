"""The engine's own process: start one `vllm.LLM` from an EngineSpec, then answer the parent's JSON
commands with measurements (eagle_fix.engine.measure). Started by eagle_fix.engine.process.EngineProcess as
`python -m eagle_fix.engine.child SPEC_JSON REPLY_FD LIFELINE_FD`; the parent's side never imports this."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from eagle_fix.engine.process import (
    PARENT_PID_ENV, EngineSpec, log_tail, report_child_exits, signal_name, watch_parent,
)
from eagle_fix.machine.host import pin_off_workers


def _dead_processes(llm: Any) -> str | None:
    """vLLM's engine-core processes that have exited, with their exit codes (negative: the signal),
    read from the front end's process manager (its layout is vLLM's: looked up defensively)."""
    try:
        procs = list(llm.llm_engine.engine_core.resources.engine_manager.processes)
    except Exception:
        return None
    gone = []
    for proc in procs:
        try:
            proc.join(timeout=1.0)
            code = proc.exitcode
        except Exception:
            continue
        if code is not None and code != 0:
            gone.append(f"{proc.name} killed by {signal_name(-code)}" if code < 0 else f"{proc.name} exited with code {code}")
    return "; ".join(gone) or None


def child_main(spec_json: str, reply_fd: int, lifeline_fd: int | None = None) -> int:
    # Signals were blocked by the parent around the fork (see EngineProcess._start): not for us.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
    parent = os.environ.get(PARENT_PID_ENV)
    watch_parent(lifeline_fd, int(parent) if parent else None)
    report_child_exits()
    spec = EngineSpec(**json.loads(spec_json))
    replies = os.fdopen(reply_fd, "w", buffering=1)

    def reply(obj: dict[str, Any]) -> None:
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    from eagle_fix.engine.measure import (
        compile_seconds, drafter_stats, engine_settings, measure_point, worker_memory_once,
    )
    from eagle_fix.engine.memory import cudagraph_pool_bytes

    llm = None
    try:
        t0 = time.perf_counter()
        import torch
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        llm = LLM(**spec.llm_kwargs())
        config = llm.llm_engine.vllm_config
        vocab = config.model_config.get_vocab_size()
        # Warm-up: first-call costs (allocators, compiled graphs for small shapes) out of every point.
        warm = TokensPrompt(prompt_token_ids=[(7 * i) % vocab for i in range(256)])
        llm.generate([warm], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
        startup_s = time.perf_counter() - t0
        # once the workers have bound their compute threads: the rest off their cores
        pinning = pin_off_workers(os.getpid())
        cache = config.cache_config
        stats = drafter_stats(llm) if spec.draft else {}
        log_lines = log_tail(Path(os.environ["EAGLE_FIX_ENGINE_LOG"]), 2_000_000) if os.environ.get("EAGLE_FIX_ENGINE_LOG") else []
        reply({
            "event": "ready",
            "startup_s": startup_s,
            "kv_cache_capacity_tokens": (cache.num_gpu_blocks or 0) * cache.block_size or None,
            "vllm_version": vllm.__version__,
            "torch_version": torch.__version__,
            "model_runner": "v2" if getattr(config, "use_v2_model_runner", False) else "v1",
            "model_runner_class": stats.get("model_runner_class"),
            "plugin_actions": stats.get("plugin_actions"),
            "vocab_size": vocab,
            "compile_s": compile_seconds(os.environ.get("EAGLE_FIX_ENGINE_LOG")),
            **engine_settings(config, worker_memory_once(llm)),
            "vllm_cudagraph_pool_bytes": cudagraph_pool_bytes(log_lines),
            "pinning": pinning,
        })
    except Exception as exc:  # cannot start: fatal, the parent reports it with the log tail
        dead = _dead_processes(llm) if llm is not None else None
        reply({"event": "error", "fatal": True,
               "error": f"engine start failed: {type(exc).__name__}: {exc}" + (f" ({dead})" if dead else "")})
        return 1

    for raw in sys.stdin:
        cmd = json.loads(raw)
        if cmd.get("op") == "exit":
            break
        try:
            reply(measure_point(llm, spec, cmd, vocab, SamplingParams, TokensPrompt))
        except Exception as exc:
            # The engine core may be dead (EngineDeadError): say so, with the exit code of what died
            # (vLLM's own message names none); the parent restarts it.
            dead = _dead_processes(llm)
            reply({"event": "error", "fatal": True, "error": f"{type(exc).__name__}: {exc}" + (f" ({dead})" if dead else "")})
            return 1
    return 0


if __name__ == "__mp_main__" and os.environ.get(PARENT_PID_ENV):
    # This module is the engine child's __main__, so multiprocessing's spawn runs it again, under
    # this name, in every process vLLM starts (EngineCore, workers): report how their children die.
    report_child_exits()

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None))
