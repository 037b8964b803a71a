"""The engine process groups this process started, and what SIGTERM, SIGINT and SIGHUP do to them.

Each engine runs in its own process group (`python -m eagle_fix.engine.child`, vLLM's `VLLM::EngineCore`
and `VLLM::Worker` under it). `EngineProcess` registers the group when it starts and unregisters it
when it is closed or killed. `install_signal_handlers()` makes SIGTERM (`timeout`, CI cancellation,
schedulers, asv's timeout), SIGINT (Ctrl-C) and SIGHUP (a closed terminal) first SIGKILL every
registered group, at once, then raise `Interrupted` in the main thread, which unwinds the sweep (it
adds where to resume) up to `eagle-fix`'s `main()`: one line on stderr, exit code 128 + signal.

A signal that arrives again during that unwinding does the same again (kill what is registered,
raise). A signal ignored when the handlers are installed (SIGHUP under `nohup`) stays ignored; a
Python handler someone else installed is still called after the groups are killed.

The parent's own death without handlers (SIGKILL, the OOM killer) is the engine child's business:
see `eagle_fix.engine.process` (it kills its own group when the parent is gone).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

from eagle_fix.core.errors import EagleFixError

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_lock = threading.RLock()  # re-entrant: the handler runs in the main thread, maybe inside register()
_groups: dict[int, str] = {}  # pgid -> what it is (for messages)
_received: int | None = None  # the last signal handled, sticky until reset()
_previous: dict[int, Any] = {}  # signum -> handler before ours (installed iff non-empty)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Interrupted(EagleFixError):
    """The command was stopped by a signal; its engines are already killed.

    `exit_code` is 128 + the signal (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP). Raised for
    SIGINT it is also a `KeyboardInterrupt`, so Python callers that stop on Ctrl-C (pytest, asv, a
    REPL) still stop; `Interrupted(message, signum)` picks that class itself.
    """

    def __new__(cls, message: str | None = None, signum: int = signal.SIGINT, *args: Any, **kwargs: Any):
        kind = KeyboardInterrupted if cls is Interrupted and signum == signal.SIGINT else cls
        return super().__new__(kind, message, signum)

    def __init__(self, message: str | None = None, signum: int = signal.SIGINT):
        self.signum = int(signum)
        self.message = message or f"interrupted by {signal_name(self.signum)}"
        super().__init__(self.message, exit_code=128 + self.signum)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (Interrupted, (self.message, self.signum))


class KeyboardInterrupted(Interrupted, KeyboardInterrupt):
    """`Interrupted` by SIGINT: also a KeyboardInterrupt."""


# --------------------------------------------------------------------------- the registry


def register(pgid: int, what: str = "engine") -> None:
    """An engine process group to kill on a signal (the child leads its group: pgid == its pid)."""
    with _lock:
        _groups[int(pgid)] = what


def unregister(pgid: int) -> None:
    with _lock:
        _groups.pop(int(pgid), None)


def groups() -> dict[int, str]:
    """The registered process groups (pgid -> description), a copy."""
    with _lock:
        return dict(_groups)


def kill_all(sig: int = signal.SIGKILL) -> list[int]:
    """Send `sig` to every registered group at once; returns the pgids that were still there.
    Groups stay registered: their owner (`EngineProcess.kill`) reaps and unregisters them."""
    killed = []
    with _lock:
        pgids = list(_groups)
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
            killed.append(pgid)
        except (ProcessLookupError, PermissionError):
            pass
    return killed


# --------------------------------------------------------------------------- signals


def interrupted() -> int | None:
    """The signal that interrupted this process (handled by our handler), or None."""
    return _received


def check() -> None:
    """Raise `Interrupted` again if a signal was handled: code that swallowed the first one (a broad
    `except Exception`) still stops at the next engine start or point."""
    if _received is not None:
        raise Interrupted(None, _received)


def reset() -> None:
    """Forget a handled signal (a Python caller that caught `Interrupted` and wants to go on)."""
    global _received
    _received = None


def _handle(signum: int, frame: Any) -> None:
    global _received
    _received = signum
    kill_all()
    previous = _previous.get(signum)
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signum, frame)  # someone else's handler: it decides what happens next
        return
    raise Interrupted(None, signum)


def handlers_installed() -> bool:
    return bool(_previous)


def install_signal_handlers() -> bool:
    """Handle SIGTERM, SIGINT and SIGHUP as described above. Idempotent. Only the main thread can
    install signal handlers: from another thread this does nothing and returns False."""
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        if _previous:
            return True
        for signum in SIGNALS:
            current = signal.getsignal(signum)
            if current == signal.SIG_IGN:  # nohup, or a parent that wants it ignored: respect that
                continue
            _previous[signum] = current
            signal.signal(signum, _handle)
        if not _previous:  # all three ignored: remember that we looked
            _previous[0] = None
    return True


def uninstall_signal_handlers() -> None:
    """Put back the handlers that were there before `install_signal_handlers()` (tests, libraries)."""
    if threading.current_thread() is not threading.main_thread():
        return
    with _lock:
        for signum, previous in _previous.items():
            if signum and signal.getsignal(signum) is _handle:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        _previous.clear()


def exit_with_parent(poll_s: float = 2.0) -> None:
    """Treat the death of this process's parent as a SIGTERM. For the asv benchmark process only:
    `asv run` stopped by a signal leaves its benchmark process running (reparented), with engines;
    a plain `eagle-fix run` under nohup must not stop when its shell goes, so it does not call this."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="eagle-fix-parent-watch", daemon=True).start()


def group_members(pgid: int, *, zombies: bool = False) -> list[int]:
    """The processes of group `pgid`, from /proc; without `zombies` only those that still run (a
    zombie runs nothing and holds no port)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and (zombies or fields[0] != "Z"):
            found.append(int(entry))
    return found


def live_members(pgid: int) -> list[int]:
    """The processes of group `pgid` that still run."""
    return group_members(pgid)


def kill_group(proc: subprocess.Popen, settle_s: float = 0.0) -> None:
    """SIGKILL the process group `proc` leads (vLLM's engine core and workers with it), reap `proc`,
    then wait up to `settle_s` for the rest of the group to be gone; forget the group (unregister)."""
    import time

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + settle_s
    while settle_s and live_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    unregister(proc.pid)
