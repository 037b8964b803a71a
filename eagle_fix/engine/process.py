"""A child process group of ours (an offline engine, an OpenAI server): the one base both run on, so a
device-side assert, an OOM or a hung engine costs one point, never the command, and nothing outlives it.

Parent side (`ChildProcess`): the child starts in a new session (its own process group, killable with
all of vLLM's processes), with its output in a log file, signals blocked between the fork and the group's
registration with `eagle_fix.engine.lifecycle` (SIGTERM/SIGINT/SIGHUP then kill it at once), a lifeline
pipe whose write end only the parent holds, pause/resume of the whole group, a kill that reaps it, and a
one-line death message. `eagle_fix.engine.offline.EngineProcess` adds the JSON pipe protocol,
`eagle_fix.served.server.ServerProcess` HTTP.

Child side (`child_startup`): unblock the signals, watch the lifeline (kill our own group within a second
of the parent's death, however it died), and report how vLLM's own child processes die.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from eagle_fix.core.settings import ENGINE_LOG_ENV, PARENT_PID_ENV
from eagle_fix.engine import lifecycle
from eagle_fix.engine.logs import LOG_MARK, death_summary, open_log, report_child_exits, write_mark


class ChildProcess:
    """Parent side of one child process group; subclasses say how to start it, talk to it and stop it."""

    # lifecycle.kill_group's wait for the group's last process after the SIGKILL (a server's engine core
    # and workers die on their own time; init reaps them)
    settle_s = 0.0

    def __init__(self, spec: Any, log_path: Path, *, python: str | None = None, env: dict[str, str] | None = None):
        """python: the interpreter of another environment (eagle-fix ab); env: extra variables."""
        self.spec = spec
        self.log_path = Path(log_path)
        self.python = python or sys.executable
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self._lifeline: Lifeline | None = None
        lifecycle.install_signal_handlers()
        lifecycle.check()  # a signal already handled (and swallowed somewhere) starts nothing new
        self._log = open_log(self.log_path, spec)

    # ------------------------------------------------------------------ what a subclass says
    def group_label(self) -> str:
        """The group's name for lifecycle's messages."""
        return f"{type(self).__name__} {self.spec.mode}/{self.spec.arm_entry.name}"

    def child_env(self) -> dict[str, str]:
        """Variables of this kind of child, before the caller's own (`env`)."""
        return {}

    def stop_gracefully(self) -> None:
        """Ask the child to exit on its own (close() kills what is left after)."""

    # ------------------------------------------------------------------ the start
    def spawn(
        self, argv: Callable[[int], list[str]], *, stdin: Any = subprocess.DEVNULL, pass_fds: tuple[int, ...] = ()
    ) -> None:
        """Start `argv(lifeline_fd)` in a new session with the lifeline's read end, register the group.
        The caller's `pass_fds` are closed here once the child holds them."""
        self._lifeline = Lifeline()
        life = self._lifeline.child_fd
        env = {
            **os.environ,
            **self.spec.env(),
            **self.child_env(),
            **self.extra_env,
            ENGINE_LOG_ENV: str(self.log_path.resolve()),
            PARENT_PID_ENV: str(os.getpid()),
        }
        # No signal between the fork and the registration: a group started but not registered would
        # outlive the command. (The child unblocks them first thing: child_startup.)
        blocked = threading.current_thread() is threading.main_thread()
        if blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, lifecycle.SIGNALS)
        try:
            self.proc = subprocess.Popen(
                argv(life),
                stdin=stdin,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                pass_fds=(*pass_fds, life),
                env=env,
                start_new_session=True,  # its own process group: killable with all its workers
                # not the caller's folder: `python -m` puts the working folder first on sys.path, and a
                # checkout there would shadow the eagle-fix installed in `python`'s environment (ab)
                cwd=str(self.log_path.resolve().parent),
            )
            lifecycle.register(self.proc.pid, self.group_label())
        finally:
            for fd in pass_fds:
                os.close(fd)
            self._lifeline.spawned()
            if blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, lifecycle.SIGNALS)  # a pending signal lands here

    # ------------------------------------------------------------------ the group
    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        """SIGSTOP the whole group while another engine is measured beside it (`eagle-fix ab`, the map):
        vLLM's workers busy-poll their queue for a second after each step, and on a few cores that second
        would land on the other side's measurement. A stopped child cannot notice its parent's death, so a
        sentinel outside both continues it when this process is gone."""
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

    def close(self) -> None:
        """Ask the child to exit (stop_gracefully), then kill what is left. After a signal of ours
        (`eagle_fix.engine.lifecycle`), kill at once."""
        self.resume()  # a paused child cannot see the request
        try:
            if self.alive() and lifecycle.interrupted() is None:
                self.stop_gracefully()
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the whole process group, reap the child, unregister it, close our ends of its pipes and
        its log. Safe to call more than once."""
        if self.proc is not None:
            lifecycle.kill_group(self.proc, settle_s=self.settle_s)
        if self._lifeline is not None:
            self._lifeline.release()
        for f in (self._log, self.proc.stdin if self.proc else None):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the log
    def mark(self, text: str) -> None:
        write_mark(self._log, text)

    def death_message(self, headline: str, cause: str | None = None) -> str:
        """One line: who died first, the headline, why (as the log says, or `cause`), where the log is."""
        return death_summary(headline, self.log_path, cause)


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
    return subprocess.Popen(
        [sys.executable, "-c", script, str(owner_pid), str(pgid)],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


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
        state = stat[stat.rindex(")") + 2 :].split()[0]
        if state in ("T", "t", "D"):
            found.append(f"pid {pid} {title or '?'} {'stopped' if state in ('T', 't') else 'in uninterruptible sleep'}")
    return "; ".join(found) or None


# ------------------------------------------------------------------ the child's side


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


def child_startup(lifeline_fd: int | None) -> None:
    """First thing in a child that ChildProcess.spawn started: take the signals the parent blocked around
    the fork, kill our group when the parent is gone, and log how vLLM's own processes die."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, lifecycle.SIGNALS)
    parent = os.environ.get(PARENT_PID_ENV)
    watch_parent(lifeline_fd, int(parent) if parent else None)
    report_child_exits()


def in_spawned_vllm_process(name: str) -> bool:
    """True in a process vLLM's multiprocessing spawned under one of our children: spawn re-runs the child's
    `__main__` module there under the name `__mp_main__` (EngineCore, workers)."""
    return name == "__mp_main__" and bool(os.environ.get(PARENT_PID_ENV))
