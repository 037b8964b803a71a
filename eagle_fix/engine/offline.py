"""One real vLLM engine (`vllm.LLM`) in its own process group: the parent's side of the JSON pipe protocol
(eagle_fix.engine.protocol), with a watchdog per answer. The parent writes one command per line on the
child's stdin and reads one reply per line from a pipe; everything vLLM prints goes to the log file. The
child is `python -m eagle_fix.engine.child SPEC_JSON REPLY_FD LIFELINE_FD`; the parent never imports what
runs inside the engine."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

from eagle_fix.engine import lifecycle
from eagle_fix.engine.lifecycle import signal_name
from eagle_fix.engine.logs import log_tail
from eagle_fix.engine.process import ChildProcess, stopped_processes
from eagle_fix.engine.protocol import EXIT, PointCommand, PointReply
from eagle_fix.engine.spec import EngineSpec

# The engine child's module in this release. Another checkout's (one side of `eagle-fix ab`) says its own:
# eagle_fix.gate.ab asks the side's interpreter.
CHILD_MODULE = "eagle_fix.engine.child"


class EngineDied(RuntimeError):
    """The engine process is gone or stuck; the message carries the cause and the log's tail."""


class EngineProcess(ChildProcess):
    """Start the engine child, send it points, enforce a watchdog, kill the whole group. `ready` holds the
    child's start-up reply (versions, settings, start-up time and memory)."""

    def __init__(
        self,
        spec: EngineSpec,
        log_path: Path,
        *,
        startup_timeout_s: float = 1800.0,
        python: str | None = None,
        env: dict[str, str] | None = None,
        child_module: str = CHILD_MODULE,
    ):
        super().__init__(spec, log_path, python=python, env=env)
        self._replies = None
        self._buffer = b""
        try:
            read_fd, write_fd = os.pipe()
            self._replies = os.fdopen(read_fd, "rb", buffering=0)
            self.spawn(
                lambda life: [self.python, "-m", child_module, spec.to_json(), str(write_fd), str(life)],
                stdin=subprocess.PIPE,
                pass_fds=(write_fd,),
            )
            self.ready = self._reply(startup_timeout_s, "engine start")
        except BaseException:  # EngineDied, Interrupted (a signal during the start), anything
            self.kill()
            raise
        self.mark(f"engine ready (pid {self.pid}, start {self.ready.get('startup_s', 0):.1f} s)")

    def group_label(self) -> str:
        return f"engine {self.spec.mode}/{self.spec.arm_entry.name}"

    def run_point(self, command: PointCommand, timeout_s: float) -> PointReply:
        lifecycle.check()
        message = command.message()
        self.mark(f"point {json.dumps(message)}")
        self._send(message)
        return PointReply.from_message(self._reply(timeout_s, f"point {message}"))

    def stop_gracefully(self) -> None:
        """The exit command, then up to 30 s for vLLM's own shutdown."""
        try:
            self._send(EXIT)
            assert self.proc is not None
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired, EngineDied):
            pass

    def kill(self) -> None:
        super().kill()
        try:
            if self._replies is not None:
                self._replies.close()
        except OSError:
            pass

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):  # ValueError: stdin already closed
            raise EngineDied(self.death_message("engine process is gone")) from None

    def _reply(self, timeout_s: float, what: str) -> dict[str, Any]:
        assert self.proc is not None and self._replies is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                stuck = stopped_processes(self.proc.pid)  # before the kill: what state the group was in
                self.kill()
                raise EngineDied(
                    self.death_message(
                        f"watchdog: no answer to {what} within {timeout_s:.0f} s" + (f" ({stuck})" if stuck else "")
                    )
                )
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
                    raise EngineDied(self.death_message(f"engine exited ({how})"))
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply = json.loads(line)
        if reply.get("event") == "error" and reply.get("fatal"):
            self.kill()
            raise EngineDied(self.death_message(reply.get("error", "engine error")))
        return reply

    def death_message(self, headline: str, cause: str | None = None) -> str:
        """First line: what happened and why (a killed process names its signal); then the log's tail."""
        return (
            super().death_message(headline, cause) + "\n--- log tail ---\n" + "\n".join(log_tail(self.log_path)[-25:])
        )
