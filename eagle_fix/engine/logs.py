"""An engine's or a server's log file: ours is the first line and one mark per point, vLLM's output the
rest. After a death, the lines since the last mark say who died (a worker killed by a signal) and why (the
most telling error line): one line for the record, the path for the rest."""

from __future__ import annotations

import errno
import json
import os
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine.lifecycle import signal_name

# Lines the parent writes into the engine log, so a reader (and the fault tests) see where it was.
LOG_MARK = "[eagle-fix]"
# Lines of an engine log that name why it died, most specific first.
CAUSE_PATTERNS = (
    r"device-side assert.*",
    r"index out of bounds.*",
    r"CUDA out of memory.*|OutOfMemoryError.*|out of memory.*",
    r"\w*Error: .*",
    r"Traceback.*",
)


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


def open_log(path: Path, spec: Any = None):
    """The engine's log, opened for appending and tried with one written line: a log that cannot be
    written (no such folder, no permission, a full disk) is a one-line EagleFixError naming it,
    before any engine starts, never mistaken for an engine failure. `spec` (a dataclass, e.g. an
    EngineSpec) goes into the first line."""
    f = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "ab")  # noqa: SIM115 -- the caller owns the log and closes it with the process
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
        raise EagleFixError(
            f"cannot write the engine log {path}: {why}; free space there or choose another folder with --log-dir"
        ) from None


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
    """ "worker VllmWorker-0 killed by SIGKILL" when a process of the engine died of a signal (the OOM
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
            return lines[i + 1 :]
    return lines


def report_child_exits() -> None:
    """In the engine's processes: write "[eagle-fix] process NAME (pid N) exited: CODE" to the log
    whenever this process reaps a multiprocessing child that failed (a signal: negative CODE).

    vLLM's own worker monitor reads the exit code before the dead worker is reaped and logs
    "exit code: None"; whoever reaps it later (vLLM's shutdown, a join) goes through
    `multiprocessing`'s Popen.poll, which is wrapped here. Installed in the engine child (for its
    EngineCore) and, since multiprocessing's spawn re-imports this module as `__mp_main__` in
    every process it starts under the engine child, in EngineCore (for its workers). Idempotent."""
    import multiprocessing.process as mp_process
    from multiprocessing import popen_fork

    if getattr(popen_fork.Popen.poll, "_eagle_fix", False):
        return
    original = popen_fork.Popen.poll

    def poll(self, flag=os.WNOHANG):
        was = self.returncode
        code = original(self, flag)
        if was is None and code:
            name = next(
                (c.name for c in list(getattr(mp_process, "_children", ())) if getattr(c, "_popen", None) is self),
                "child",
            )
            try:
                print(
                    f"{LOG_MARK} process {name} (pid {self.pid}) exited: {code}"
                    + (f" (killed by {signal_name(-code)})" if code < 0 else ""),
                    flush=True,
                )
            except (OSError, ValueError):
                pass
        return code

    poll._eagle_fix = True  # type: ignore[attr-defined]
    popen_fork.Popen.poll = poll


def error_cause(lines: list[str]) -> str | None:
    """The most telling error line of an engine log (an assert beats a generic traceback)."""
    for pattern in CAUSE_PATTERNS:
        rx = re.compile(pattern)
        for line in reversed(lines):
            m = rx.search(line)
            if m:
                return m.group(0).strip()[:300]
    return None
