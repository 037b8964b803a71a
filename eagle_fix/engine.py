"""One real vLLM engine in its own process (new session, log file, JSON protocol), so a device-side
assert, an OOM or a hung engine costs one point, never the sweep.

The parent writes one JSON command per line on the child's stdin and reads one JSON reply per line
from a pipe; everything vLLM prints goes to the log file. `EngineProcess` is the parent's side;
`python -m eagle_fix.engine SPEC_JSON` is the child's.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# `fix` arm -> EAGLE_FIX_MODE in the engine's processes.
FIX_MODES = {"on": "auto", "off": "revert", "upstream": "off"}
# Lines of an engine log that name why it died, most specific first.
_CAUSE_PATTERNS = (
    r"device-side assert.*",
    r"index out of bounds.*",
    r"CUDA out of memory.*|OutOfMemoryError.*|out of memory.*",
    r"\w*Error: .*",
    r"Traceback.*",
)


@dataclass(frozen=True)
class EngineSpec:
    """Everything that fixes one engine; points at different contexts share it."""

    target: str
    draft: str | None  # None: the baseline arm (no speculation)
    mode: str  # eager | compile
    fix: str | None  # on | off | upstream (None for baseline)
    max_model_len: int
    num_speculative_tokens: int = 3
    load_format: str = "auto"
    synthetic_acceptance_length: float | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_gib: float | None = None  # CPU: VLLM_CPU_KVCACHE_SPACE
    max_num_seqs: int = 8
    gpu_memory_utilization: float | None = None  # CUDA only
    seed: int = 0

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of vllm.LLM for this engine."""
        kwargs: dict[str, Any] = dict(
            model=self.target,
            max_model_len=self.max_model_len,
            enforce_eager=self.mode == "eager",
            skip_tokenizer_init=True,
            disable_log_stats=False,  # get_metrics() needs stats on
            load_format=self.load_format,
            seed=self.seed,
            max_num_seqs=self.max_num_seqs,
            enable_prefix_caching=True,  # the measured run reuses the TTFT run's prefill
        )
        if self.max_num_batched_tokens:
            kwargs["max_num_batched_tokens"] = self.max_num_batched_tokens
        if self.gpu_memory_utilization:
            kwargs["gpu_memory_utilization"] = self.gpu_memory_utilization
        if self.draft is not None:
            from eagle_fix.models import speculative_config
            from eagle_fix.plugin import WORKER_EXTENSION

            kwargs["speculative_config"] = speculative_config(self.draft, self.num_speculative_tokens,
                                                              self.synthetic_acceptance_length)

            kwargs["worker_extension_cls"] = WORKER_EXTENSION
        return kwargs

    def env(self) -> dict[str, str]:
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        env["EAGLE_FIX_MODE"] = FIX_MODES[self.fix or "on"]
        if self.kv_cache_gib:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_gib:g}"
        return env


class EngineDied(RuntimeError):
    """The engine process is gone or stuck; the message carries the cause and the log's tail."""


class EngineProcess:
    """Parent side: start the child, send points, enforce a watchdog, kill the whole group."""

    def __init__(self, spec: EngineSpec, log_path: Path, *, startup_timeout_s: float = 1800.0):
        self.spec = spec
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        read_fd, write_fd = os.pipe()
        env = {**os.environ, **spec.env(), "EAGLE_FIX_ENGINE_LOG": str(log_path)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eagle_fix.engine", json.dumps(asdict(spec)), str(write_fd)],
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
            env=env, start_new_session=True,  # its own process group: killable with all its workers
        )
        os.close(write_fd)
        self._replies = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self.ready = self._reply(startup_timeout_s, "engine start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def run_point(self, point: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self._send(point)
        return self._reply(timeout_s, f"point {point}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send({"op": "exit"})
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired, BrokenPipeError):
                pass
        self.kill()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for f in (self._replies, self._log, self.proc.stdin):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise EngineDied(self._death_message("engine process is gone")) from None

    def _reply(self, timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise EngineDied(self._death_message(f"watchdog: no answer to {what} within {timeout_s:.0f} s"))
            ready, _, _ = select.select([self._replies], [], [], min(left, 5.0))
            if ready:
                chunk = self._replies.read(65536)
                if not chunk:  # EOF: the child is gone
                    try:
                        self.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                    self.kill()
                    raise EngineDied(self._death_message(f"engine exited (return code {self.proc.returncode})"))
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply = json.loads(line)
        if reply.get("event") == "error" and reply.get("fatal"):
            self.kill()
            raise EngineDied(self._death_message(reply.get("error", "engine error")))
        return reply

    def _death_message(self, headline: str) -> str:
        tail = log_tail(self.log_path)
        cause = error_cause(tail)
        parts = [headline]
        if cause and cause not in headline:
            parts.append(f"cause: {cause}")
        parts.append(f"log: {self.log_path}")
        return "; ".join(parts) + "\n--- log tail ---\n" + "\n".join(tail[-25:])


def log_tail(path: Path, max_bytes: int = 64_000) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def error_cause(lines: list[str]) -> str | None:
    """The most telling error line of an engine log (an assert beats a generic traceback)."""
    for pattern in _CAUSE_PATTERNS:
        rx = re.compile(pattern)
        for line in reversed(lines):
            m = rx.search(line)
            if m:
                return m.group(0).strip()[:300]
    return None


# ============================================================================ child side

def _child_main(spec_json: str, reply_fd: int) -> int:
    spec = EngineSpec(**json.loads(spec_json))
    replies = os.fdopen(reply_fd, "w", buffering=1)

    def reply(obj: dict[str, Any]) -> None:
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    from eagle_fix.measure import compile_seconds, drafter_stats, measure_point

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
        cache = config.cache_config
        stats = drafter_stats(llm) if spec.draft else {}
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
        })
    except Exception as exc:  # cannot start: fatal, the parent reports it with the log tail
        reply({"event": "error", "fatal": True, "error": f"engine start failed: {type(exc).__name__}: {exc}"})
        return 1

    for raw in sys.stdin:
        cmd = json.loads(raw)
        if cmd.get("op") == "exit":
            break
        try:
            reply(measure_point(llm, spec, cmd, vocab, SamplingParams, TokensPrompt))
        except Exception as exc:
            # The engine core may be dead (EngineDeadError): say so; the parent restarts it.
            reply({"event": "error", "fatal": True, "error": f"{type(exc).__name__}: {exc}"})
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], int(sys.argv[2])))
