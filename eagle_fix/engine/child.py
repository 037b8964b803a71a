"""The engine's own process: start one `vllm.LLM` from an EngineSpec, check the eagle-fix plugin runs in it,
then answer the parent's commands (eagle_fix.engine.protocol) with measurements (eagle_fix.engine.measure).
Started by eagle_fix.engine.offline.EngineProcess as `python -m eagle_fix.engine.child SPEC_JSON REPLY_FD
LIFELINE_FD`; the parent's side never imports this."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from eagle_fix.engine.lifecycle import signal_name
from eagle_fix.engine.logs import log_tail, report_child_exits
from eagle_fix.engine.measure import (
    compile_seconds,
    drafter_stats,
    engine_settings,
    measure_point,
    worker_memory_once,
)
from eagle_fix.engine.memory import cudagraph_pool_bytes
from eagle_fix.engine.process import ENGINE_LOG_ENV, child_startup, in_spawned_vllm_process
from eagle_fix.engine.protocol import PointCommand
from eagle_fix.engine.spec import EngineSpec
from eagle_fix.engine.worker import plugin_missing
from eagle_fix.fix.plugin import registered_mode
from eagle_fix.machine.pinning import pin_off_workers


def _dead_processes(llm: Any) -> str | None:
    """vLLM's engine-core processes that have exited, with their exit codes (negative: the signal),
    read from the front end's process manager (its layout is vLLM's: looked up defensively)."""
    try:
        procs = list(llm.llm_engine.engine_core.resources.engine_manager.processes)
    except Exception:  # noqa: BLE001 -- another release's layout: nothing to add to the message
        return None
    gone = []
    for proc in procs:
        try:
            proc.join(timeout=1.0)
            code = proc.exitcode
        except Exception:  # noqa: BLE001, S112 -- a process that cannot be asked is left out of the message
            continue
        if code is not None and code != 0:
            gone.append(
                f"{proc.name} killed by {signal_name(-code)}" if code < 0 else f"{proc.name} exited with code {code}"
            )
    return "; ".join(gone) or None


def child_main(spec_json: str, reply_fd: int, lifeline_fd: int | None = None) -> int:
    child_startup(lifeline_fd)
    spec = EngineSpec.from_json(spec_json)
    replies = os.fdopen(reply_fd, "w", buffering=1)

    def reply(obj: dict[str, Any]) -> None:
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    llm = None
    try:
        t0 = time.perf_counter()
        # vLLM and torch only here, in the engine's own process: the parent never imports them
        import torch
        import vllm
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        llm = LLM(**spec.llm_kwargs())
        stats = drafter_stats(llm)
        missing = plugin_missing(llm.collective_rpc("eagle_fix_drafter_stats"), registered_mode())
        if missing:
            reply({"event": "error", "fatal": True, "error": f"engine start refused: {missing}"})
            return 1
        config = llm.llm_engine.vllm_config
        vocab = config.model_config.get_vocab_size()
        # Warm-up: first-call costs (allocators, compiled graphs for small shapes) out of every point.
        warm = TokensPrompt(prompt_token_ids=[(7 * i) % vocab for i in range(256)])
        llm.generate([warm], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
        startup_s = time.perf_counter() - t0
        # once the workers have bound their compute threads: the rest off their cores
        pinning = pin_off_workers(os.getpid())
        cache = config.cache_config
        log = os.environ.get(ENGINE_LOG_ENV)
        log_lines = log_tail(Path(log), 2_000_000) if log else []
        reply(
            {
                "event": "ready",
                "startup_s": startup_s,
                "kv_cache_capacity_tokens": (cache.num_gpu_blocks or 0) * cache.block_size or None,
                "vllm_version": vllm.__version__,
                "torch_version": torch.__version__,
                "model_runner": "v2" if getattr(config, "use_v2_model_runner", False) else "v1",
                "model_runner_class": stats.get("model_runner_class") if spec.speculates else None,
                "plugin_actions": stats.get("plugin_actions") if spec.speculates else None,
                "vocab_size": vocab,
                "compile_s": compile_seconds(log),
                **engine_settings(config, worker_memory_once(llm)),
                "vllm_cudagraph_pool_bytes": cudagraph_pool_bytes(log_lines),
                "pinning": pinning,
            }
        )
    except Exception as exc:  # noqa: BLE001 -- cannot start: fatal, the parent reports it with the log tail
        dead = _dead_processes(llm) if llm is not None else None
        reply(
            {
                "event": "error",
                "fatal": True,
                "error": f"engine start failed: {type(exc).__name__}: {exc}" + (f" ({dead})" if dead else ""),
            }
        )
        return 1

    for raw in sys.stdin:
        message = json.loads(raw)
        if message.get("op") == "exit":
            break
        try:
            result = measure_point(llm, spec, PointCommand.from_message(message), vocab, SamplingParams, TokensPrompt)
            reply(result.message())
        except Exception as exc:  # noqa: BLE001 -- any failure of a point is fatal, reported with its cause
            # The engine core may be dead (EngineDeadError): say so, with the exit code of what died
            # (vLLM's own message names none); the parent restarts it.
            dead = _dead_processes(llm)
            reply(
                {
                    "event": "error",
                    "fatal": True,
                    "error": f"{type(exc).__name__}: {exc}" + (f" ({dead})" if dead else ""),
                }
            )
            return 1
    return 0


if in_spawned_vllm_process(__name__):
    # This module is the engine child's __main__, so multiprocessing's spawn runs it again, under
    # `__mp_main__`, in every process vLLM starts (EngineCore, workers): report how their children die.
    report_child_exits()

if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None))
