"""One real vLLM engine in its own process (new session, log file, JSON protocol), so a device-side
assert, an OOM or a hung engine costs one point, never the sweep.

The parent writes one JSON command per line on the child's stdin and reads one JSON reply per line
from a pipe; everything vLLM prints goes to the log file. `EngineProcess` is the parent's side;
`python -m eagle_fix.engine.child SPEC_JSON REPLY_FD LIFELINE_FD` is the child's (eagle_fix.engine.child: the parent
never imports what runs inside the engine).

Nothing outlives the command: the group is registered with `eagle_fix.engine.lifecycle` (SIGTERM/SIGINT/
SIGHUP kill it at once), and the child kills its own group when the parent dies without a handler
(SIGKILL), through a pipe whose write end only the parent holds (`watch_parent`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eagle_fix.engine import lifecycle
from eagle_fix.engine.lifecycle import signal_name

# `fix` arm -> EAGLE_FIX_MODE in the engine's processes.
FIX_MODES = {"on": "auto", "off": "revert", "upstream": "off"}
# vLLM's names (CompilationMode, CUDAGraphMode): the grid's settings of a compiled engine. An eager
# engine (enforce_eager) is NONE and NONE whatever is asked.
COMPILATION_MODES = ("NONE", "STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE")
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
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
    hf_overrides: dict[str, Any] | None = None  # the target's config.json overrides (vLLM hf_overrides)
    # None: vLLM's default for a compiled engine (VLLM_COMPILE; its default CUDA-graph mode on CUDA)
    compilation_mode: str | None = None
    cudagraph_mode: str | None = None
    kv_cache_memory_bytes: int | None = None  # CUDA: the KV budget the points need (not a device share)

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
        if self.kv_cache_memory_bytes:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_memory_bytes)
        if self.mode != "eager":
            compilation = {k: v for k, v in (("mode", self.compilation_mode), ("cudagraph_mode", self.cudagraph_mode)) if v}
            if compilation:
                kwargs["compilation_config"] = compilation
        if self.hf_overrides:
            # A dict applies to the target's config only: vLLM gives the draft its own overrides.
            kwargs["hf_overrides"] = dict(self.hf_overrides)
        # every engine, baseline too: the memory RPCs (and the drafter's counters) live in the worker
        from eagle_fix.engine.memory import WORKER_EXTENSION

        kwargs["worker_extension_cls"] = WORKER_EXTENSION
        if self.draft is not None:
            from eagle_fix.pairs.profiles import speculative_config

            kwargs["speculative_config"] = speculative_config(self.draft, self.num_speculative_tokens,
                                                              self.synthetic_acceptance_length)
        return kwargs

    def env(self) -> dict[str, str]:
        env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        env["EAGLE_FIX_MODE"] = FIX_MODES[self.fix or "on"]
        if self.kv_cache_gib:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_gib:g}"
        return env


class EngineDied(RuntimeError):
    """The engine process is gone or stuck; the message carries the cause and the log's tail."""


# Environment of the child: the parent's pid (the child kills its group when that parent is gone).
PARENT_PID_ENV = "EAGLE_FIX_PARENT_PID"
# Lines the parent writes into the engine log, so a reader (and the fault tests) see where it was.
LOG_MARK = "[eagle-fix]"


class EngineProcess:
    """Parent side: start the child, send points, enforce a watchdog, kill the whole group.

    The child's process group is registered with `eagle_fix.engine.lifecycle` from its start to its
    kill, so SIGTERM/SIGINT/SIGHUP of this process kill it at once (the handlers are installed
    here when this runs in the main thread). The child holds the read end of a "lifeline" pipe
    whose write end only this process holds: when this process dies in any way (SIGKILL too), the
    kernel closes it and the child kills its own group within a second.
    """

    def __init__(self, spec: EngineSpec, log_path: Path, *, startup_timeout_s: float = 1800.0,
                 python: str | None = None, env: dict[str, str] | None = None):
        """python: the interpreter of another environment (eagle-fix ab); env: extra variables."""
        self.spec = spec
        self.log_path = log_path
        self.python = python or sys.executable
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self._replies = None
        self._lifeline: Lifeline | None = None
        self._buffer = b""
        lifecycle.install_signal_handlers()
        lifecycle.check()  # a signal already handled (and swallowed somewhere) starts nothing new
        self._log = open_log(log_path, spec)
        try:
            self._start()
            self.ready = self._reply(startup_timeout_s, "engine start")
        except BaseException:  # EngineDied, Interrupted (a signal during the start), anything
            self.kill()
            raise
        self._mark(f"engine ready (pid {self.pid}, start {self.ready.get('startup_s', 0):.1f} s)")

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        self._lifeline = Lifeline()
        life_read = self._lifeline.child_fd
        self._replies = os.fdopen(read_fd, "rb", buffering=0)
        env = {**os.environ, **self.spec.env(), **self.extra_env, "EAGLE_FIX_ENGINE_LOG": str(self.log_path.resolve()),
               PARENT_PID_ENV: str(os.getpid())}
        # No signal between the fork and the registration: a group started but not registered would
        # outlive the command. (The child unblocks them first thing.)
        blocked = threading.current_thread() is threading.main_thread()
        if blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, lifecycle.SIGNALS)
        try:
            self.proc = subprocess.Popen(
                [self.python, "-m", "eagle_fix.engine.child", json.dumps(asdict(self.spec)), str(write_fd), str(life_read)],
                stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, pass_fds=(write_fd, life_read),
                env=env, start_new_session=True,  # its own process group: killable with all its workers
                # not the caller's folder: `python -m` puts the working folder first on sys.path, and a
                # checkout there would shadow the eagle-fix installed in `python`'s environment (ab)
                cwd=str(self.log_path.resolve().parent),
            )
            lifecycle.register(self.proc.pid, f"engine {self.spec.mode}/{'eagle3' if self.spec.draft else 'baseline'}")
        finally:
            os.close(write_fd)
            self._lifeline.spawned()
            if blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, lifecycle.SIGNALS)  # a pending signal lands here

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def run_point(self, point: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        lifecycle.check()
        self._mark(f"point {json.dumps(point)}")
        self._send(point)
        return self._reply(timeout_s, f"point {point}")

    def pause(self) -> None:
        """SIGSTOP the engine's whole process group while another engine is measured beside it
        (`eagle-fix ab`): vLLM's workers busy-poll their queue for a second after each step, and on
        a few cores that second would land on the other side's measurement. A stopped engine cannot
        notice its parent's death, so a sentinel outside both continues it when this process is gone."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if self._lifeline is not None:
            self._lifeline.guard(self.proc.pid)
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def _signal_group(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        """Ask the child to exit (up to 30 s for vLLM's own shutdown), then kill what is left. After
        a signal (`eagle_fix.engine.lifecycle`), kill at once."""
        self.resume()  # a paused engine cannot read the exit message
        try:
            if self.proc is not None and self.proc.poll() is None and lifecycle.interrupted() is None:
                try:
                    self._send({"op": "exit"})
                    self.proc.wait(timeout=30)
                except (OSError, subprocess.TimeoutExpired, EngineDied):
                    pass
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the whole process group (the child, vLLM's engine core and workers), reap the
        child, close our ends of the pipes. Safe to call more than once."""
        if self.proc is not None:
            lifecycle.kill_group(self.proc)
        if self._lifeline is not None:
            self._lifeline.release()
        for f in (self._replies, self._log, self.proc.stdin if self.proc else None):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):  # ValueError: stdin already closed
            raise EngineDied(self._death_message("engine process is gone")) from None

    def _reply(self, timeout_s: float, what: str) -> dict[str, Any]:
        assert self.proc is not None and self._replies is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                stuck = stopped_processes(self.proc.pid)  # before the kill: what state the group was in
                self.kill()
                raise EngineDied(self._death_message(f"watchdog: no answer to {what} within {timeout_s:.0f} s"
                                                     + (f" ({stuck})" if stuck else "")))
            ready, _, _ = select.select([self._replies], [], [], min(left, 5.0))
            if ready:
                chunk = self._replies.read(65536)
                if not chunk:  # EOF: the child is gone
                    try:
                        self.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
                    code = self.proc.returncode
                    self.kill()
                    how = f"killed by {signal_name(-code)}" if code is not None and code < 0 else f"return code {code}"
                    raise EngineDied(self._death_message(f"engine exited ({how})"))
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply = json.loads(line)
        if reply.get("event") == "error" and reply.get("fatal"):
            self.kill()
            raise EngineDied(self._death_message(reply.get("error", "engine error")))
        return reply

    def _mark(self, text: str) -> None:
        write_mark(self._log, text)

    def _death_message(self, headline: str) -> str:
        """First line: what happened and why (a killed process names its signal); then the log's tail."""
        return death_summary(headline, self.log_path) + "\n--- log tail ---\n" + "\n".join(log_tail(self.log_path)[-25:])


def death_summary(headline: str, log_path: Path, cause: str | None = None) -> str:
    """One line on an engine or server that died: who died first ("worker VllmWorker-0 killed by
    SIGABRT"), the headline, why when the log says (`cause` overrides it), and where the log is."""
    recent = since_last_mark(log_tail(log_path))
    killed = killed_cause(recent)
    cause = cause or error_cause(recent)
    parts = [headline]
    if killed and killed not in headline:
        parts.insert(0, killed)
    if cause and cause not in headline:
        parts.append(f"cause: {cause}")
    unwritable = log_unwritable(log_path)
    if unwritable:
        parts.append(unwritable)
    parts.append(f"log: {log_path}")
    return "; ".join(parts)


def open_log(path: Path, spec: EngineSpec | None = None):
    """The engine's log, opened for appending and tried with one written line: a log that cannot be
    written (no such folder, no permission, a full disk) is a one-line EagleFixError naming it,
    before any engine starts, never mistaken for an engine failure."""
    from eagle_fix.core.errors import EagleFixError

    f = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "ab")
        header = f"{LOG_MARK} {time.strftime('%Y-%m-%d %H:%M:%S')} engine log of pid {os.getpid()}"
        if spec is not None:
            header += f": {json.dumps(asdict(spec))}"
        f.write((header + "\n").encode())
        f.flush()
        os.fsync(f.fileno())
        return f
    except OSError as exc:
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
        name = errno.errorcode.get(exc.errno or 0, "")
        why = f"{exc.strerror or exc}" + (f" ({name})" if name else "")
        raise EagleFixError(f"cannot write the engine log {path}: {why}; free space there or choose another "
                            f"folder with --log-dir") from None


def log_unwritable(path: Path) -> str | None:
    """After an engine died: if its log cannot take one more line (a disk that filled up during the
    run), say so, since the engine's own output was lost with it."""
    try:
        with open(path, "ab") as f:
            f.write(f"{LOG_MARK} {time.strftime('%H:%M:%S')} engine gone\n".encode())
            f.flush()
            os.fsync(f.fileno())
        return None
    except OSError as exc:
        return f"the engine log could not be written ({exc.strerror or exc}): the disk may be full"


class Lifeline:
    """What a parent holds for a child's process group (an engine, a server): our end of the child's
    lifeline pipe (the kernel closes it however we die, and the child exits on EOF: watch_parent),
    and the sentinel that continues the group if we die while it is paused, since a stopped child
    cannot see the EOF."""

    def __init__(self) -> None:
        self.child_fd: int | None
        self.child_fd, self._fd = os.pipe()  # the child's end goes to it (pass_fds), ours stays here
        self._sentinel: subprocess.Popen | None = None

    def spawned(self) -> None:
        """The child holds its end now (or was never started): close that end here."""
        if self.child_fd is not None:
            os.close(self.child_fd)
            self.child_fd = None

    def guard(self, pgid: int) -> None:
        """Before group `pgid` is paused: the sentinel, started once."""
        if self._sentinel is None:
            self._sentinel = continue_when_gone(os.getpid(), pgid)

    def release(self) -> None:
        """Stop the sentinel and close our end. Safe to call more than once."""
        if self._sentinel is not None:
            self._sentinel.kill()
            self._sentinel.wait()
            self._sentinel = None
        self.spawned()
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None


def continue_when_gone(owner_pid: int, pgid: int) -> subprocess.Popen:
    """A sentinel in its own session: SIGCONT the process group `pgid` once `owner_pid` is gone (killed
    with SIGKILL, OOM), so a paused engine wakes, finds its lifeline closed and exits; it ends by
    itself once the group is gone."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        owner, pgid = int(sys.argv[1]), int(sys.argv[2])
        def alive(check):
            try:
                check()
                return True
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
        while alive(lambda: os.kill(owner, 0)) and alive(lambda: os.killpg(pgid, 0)):
            time.sleep(1)
        alive(lambda: os.killpg(pgid, signal.SIGCONT))  # continue the group if it is still there
    """)
    return subprocess.Popen([sys.executable, "-c", script, str(owner_pid), str(pgid)], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stopped_processes(pgid: int) -> str | None:
    """Processes of an engine's group that are stopped (SIGSTOP, a debugger) or in uninterruptible
    sleep, for the watchdog's message."""
    found = []
    for pid in lifecycle.group_members(pgid, zombies=True):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0].decode(errors="replace")[:40]
        except OSError:
            continue
        state = stat[stat.rindex(")") + 2:].split()[0]
        if state in ("T", "t", "D"):
            found.append(f"pid {pid} {title or '?'} {'stopped' if state in ('T', 't') else 'in uninterruptible sleep'}")
    return "; ".join(found) or None


    for entry in entries:
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def write_mark(log: Any, text: str) -> None:
    """One line of ours in an engine's or server's log, found again by `since_last_mark` (best effort:
    a full disk must not fail a point)."""
    try:
        log.write(f"{LOG_MARK} {time.strftime('%H:%M:%S')} {text}\n".encode())
        log.flush()
    except (OSError, ValueError):
        pass


def log_tail(path: Path, max_bytes: int = 64_000) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


# How a process of the engine that died shows in its log, with its exit status (negative: the signal):
#   ours (`report_child_exits`, in every vLLM process): "[eagle-fix] process VllmWorker-0 (pid 7896) exited: -9"
#   vLLM's: "Worker proc VllmWorker-0 died unexpectedly (exit code: -9), ..." (0.32 on CPU logs
#   "exit code: None": it reads the code before the worker is reaped, so ours is what tells).
_EXIT_RX = re.compile(r"\[eagle-fix\] process ([\w.:-]+) \(pid \d+\) exited: (-?\d+)")
_DIED_RX = re.compile(r"(?:proc )?([\w.:-]+) died unexpectedly \(exit code: (-?\d+)\)")


def killed_cause(lines: list[str]) -> str | None:
    """"worker VllmWorker-0 killed by SIGKILL" when a process of the engine died of a signal (the OOM
    killer's SIGKILL, a crash's SIGSEGV), "... exited with code N" for another failing exit. The
    first one in `lines`: the ones after it are usually vLLM shutting the rest down."""
    for line in lines:
        m = _EXIT_RX.search(line) or _DIED_RX.search(line)
        if m:
            name, code = m.group(1), int(m.group(2))
            who = f"worker {name}" if "Worker" in name else name
            return f"{who} killed by {signal_name(-code)}" if code < 0 else f"{who} exited with code {code}"
    return None


def since_last_mark(lines: list[str]) -> list[str]:
    """The lines after the parent's last "engine ready" / "point" mark: what the failing point (or,
    with no such mark, the start) wrote. Startup warnings with tracebacks are not a point's cause."""
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if line.startswith(LOG_MARK) and (" point " in line or " engine ready " in line):
            return lines[i + 1:]
    return lines


def report_child_exits() -> None:
    """In the engine's processes: write "[eagle-fix] process NAME (pid N) exited: CODE" to the log
    whenever this process reaps a multiprocessing child that failed (a signal: negative CODE).

    vLLM's own worker monitor reads the exit code before the dead worker is reaped and logs
    "exit code: None"; whoever reaps it later (vLLM's shutdown, a join) goes through
    `multiprocessing`'s Popen.poll, which is wrapped here. Installed in the engine child (for its
    EngineCore) and, since multiprocessing's spawn re-imports this module as `__mp_main__` in
    every process it starts under the engine child, in EngineCore (for its workers). Idempotent."""
    import multiprocessing.popen_fork as popen_fork
    import multiprocessing.process as mp_process

    if getattr(popen_fork.Popen.poll, "_eagle_fix", False):
        return
    original = popen_fork.Popen.poll

    def poll(self, flag=os.WNOHANG):
        was = self.returncode
        code = original(self, flag)
        if was is None and code:
            name = next((c.name for c in list(getattr(mp_process, "_children", ())) if getattr(c, "_popen", None) is self),
                        "child")
            try:
                print(f"{LOG_MARK} process {name} (pid {self.pid}) exited: {code}"
                      + (f" (killed by {signal_name(-code)})" if code < 0 else ""), flush=True)
            except (OSError, ValueError):
                pass
        return code

    poll._eagle_fix = True  # type: ignore[attr-defined]
    popen_fork.Popen.poll = poll


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

def _kill_own_group(why: str) -> None:
    """SIGKILL this process's group (this process, vLLM's engine core and workers) when it leads the
    group, as it does when started by `EngineProcess`; only itself otherwise (run by hand in a shell,
    the group is the shell's job)."""
    try:
        sys.stdout.write(f"{LOG_MARK} {time.strftime('%H:%M:%S')} {why}: killing process group {os.getpgrp()}\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    if os.getpgrp() == os.getpid():
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def watch_parent(lifeline_fd: int | None, parent_pid: int | None, interval_s: float = 1.0) -> threading.Thread | None:
    """Child side: when the parent is gone (SIGKILL, the OOM killer, a crash: no handler of its
    ran), kill our whole group within about a second instead of measuring on for nobody.

    Two signs, checked by one daemon thread: EOF on the lifeline pipe (the kernel closes the
    parent's write end the moment it dies: immediate), and `os.getppid()` no longer being the
    parent's pid (re-parented to init or a subreaper; checked every `interval_s`, and once right
    away, which covers a parent that died before this ran).

    Not PR_SET_PDEATHSIG: its signal reaches this process only, so SIGKILL would orphan vLLM's
    engine core and workers (a catchable signal needs this process's main thread, which sits inside
    vLLM), and it fires when the parent *thread* that started us exits, not the parent process."""
    def gone() -> bool:
        return parent_pid is not None and os.getppid() != parent_pid

    if gone():
        _kill_own_group(f"parent {parent_pid} is gone")

    def watch() -> None:
        while not gone():
            if lifeline_fd is None:
                time.sleep(interval_s)
                continue
            try:
                ready, _, _ = select.select([lifeline_fd], [], [], interval_s)
                if ready and not os.read(lifeline_fd, 64):  # EOF: the parent's end is closed
                    break
            except OSError:
                time.sleep(interval_s)
        _kill_own_group(f"parent {parent_pid} is gone")

    if lifeline_fd is None and parent_pid is None:
        return None
    thread = threading.Thread(target=watch, name="eagle-fix-parent-watch", daemon=True)
    thread.start()
    return thread
