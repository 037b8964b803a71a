"""Faults injected into `eagle-fix run` on the real CPU engine (tiny pair, eager, baseline arm).

What an operator sees when the run is stopped (SIGTERM from `timeout`/CI/asv, Ctrl-C, SIGKILL) or
its engine dies under it (the OOM killer's SIGKILL of a worker, a hung worker):

- SIGTERM / SIGINT: exit within seconds with 128 + signal, one line on stderr naming the signal and
  `--resume`, every finished point on disk, no process of the engine's group left.
- SIGKILL of the run (no handler can run): the engine child notices and kills its group.
- kill -9 of the engine's worker: that point fails naming the signal, the engine is restarted,
  the next point is ok; a stopped worker is caught by the point watchdog the same way.

Processes are found by pid/ppid/pgid from the run's own pid, never by name across the machine.
The engine tests share one run for (a), (d) and (e), so the whole file costs about five engine
starts. Each measured delay is printed (`pytest -s`) and written to $EAGLE_FIX_FAULT_TIMINGS.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, default_signals

# Watchdog of the shared run. The run's normal points take 1-4 s here (2 cores); 40 s leaves a
# slow CI machine 10x and costs 40 s for the stopped-worker point (60 s would be 20 s more).
POINT_TIMEOUT_S = 40
# Shared run: A (worker killed), B (worker stopped), C (ok), D (SIGTERM mid-point). Ascending, as
# the sweep plans them; D the longest so the SIGTERM lands inside it.
A, B, C, D = 4096, 5120, 6144, 8192
# Upper bounds for what the test waits on (an engine start is ~45 s on an idle 2-core machine, many
# minutes on a loaded one); the measured reactions to a signal are asserted separately, in seconds.
WAIT_S = 900
TIMINGS: dict[str, float] = {}


def _note(name: str, seconds: float) -> None:
    TIMINGS[name] = round(seconds, 2)
    print(f"[faults] {name}: {seconds:.2f} s")
    path = os.environ.get("EAGLE_FIX_FAULT_TIMINGS")
    if path:
        Path(path).write_text(json.dumps(TIMINGS, indent=1))


# --------------------------------------------------------------------------- helpers

_default_signals = default_signals


class Run:
    """One `eagle-fix run` subprocess in its own session, and what it started."""

    def __init__(self, tmp: Path, contexts: str, *extra: str):
        self.out = tmp / "run.jsonl"
        self.log_dir = tmp / "run-logs"
        self.stderr_path = tmp / "stderr.txt"
        cmd = [
            sys.executable,
            "-m",
            "eagle_fix.cli",
            "run",
            "--profile",
            "cpu-quick",
            "--contexts",
            contexts,
            "--modes",
            "eager",
            "--arms",
            "baseline",
            "--output-len",
            "32",
            "--repeats",
            "1",
            "--out",
            str(self.out),
            "--no-progress",
            *extra,
        ]
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 -- held by the run, closed in its cleanup
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            start_new_session=True,
            preexec_fn=_default_signals,  # noqa: PLW1509 -- no threads yet; signals as from a terminal
        )
        self.pgids: set[int] = set()  # every engine group seen, for the cleanup

    # ---- what it started
    def engine(self) -> psutil.Process | None:
        """The engine child: a child of the run that leads its own process group."""
        try:
            for child in psutil.Process(self.proc.pid).children():
                try:
                    if os.getpgid(child.pid) == child.pid:
                        self.pgids.add(child.pid)
                        return child
                except ProcessLookupError:
                    continue
        except psutil.NoSuchProcess:
            pass
        return None

    def wait_engine(self, timeout: float = WAIT_S, *, other_than: int | None = None) -> psutil.Process:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_running()
            eng = self.engine()
            if eng is not None and eng.pid != other_than:
                return eng
            time.sleep(0.1)
        raise AssertionError(f"no engine child within {timeout} s\n{self.stderr()}")

    def worker(self, engine: psutil.Process) -> psutil.Process | None:
        """vLLM's worker: among the engine child's descendants (by pid), the VLLM::Worker one."""
        try:
            for p in engine.children(recursive=True):
                try:
                    if "Worker" in p.name() or any("Worker" in a for a in p.cmdline()[:1]):
                        return p
                except psutil.Error:
                    continue
        except psutil.NoSuchProcess:
            pass
        return None

    def wait_worker(self, engine: psutil.Process, timeout: float = WAIT_S) -> psutil.Process:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_running()
            w = self.worker(engine)
            if w is not None:
                return w
            time.sleep(0.1)
        raise AssertionError(f"no worker under engine {engine.pid} within {timeout} s\n{self.stderr()}")

    def wait_point_sent(self, engine_pid: int, context: int, timeout: float = WAIT_S) -> None:
        """Until the run has sent the point at `context` to the engine `engine_pid` (the parent
        marks each point in the engine's log, after the 'engine ready (pid N' line)."""
        prompt = f'"prompt_len": {context - 32 - 3 - 1},'
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_running()
            for log in self.log_dir.glob("*.log") if self.log_dir.is_dir() else []:
                text = log.read_text(errors="replace")
                if f"engine ready (pid {engine_pid}," in text and any(
                    "[eagle-fix]" in line and " point " in line and prompt in line for line in text.splitlines()
                ):
                    return
            time.sleep(0.05)
        raise AssertionError(f"point {context} not sent to engine {engine_pid} within {timeout} s\n{self.stderr()}")

    def wait_lines(self, n: int, timeout: float = WAIT_S) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_running()
            lines = self.records()
            if len(lines) >= n:
                return lines
            time.sleep(0.05)
        raise AssertionError(f"{n} lines not in {self.out} within {timeout} s\n{self.stderr()}")

    def records(self) -> list[dict]:
        if not self.out.exists():
            return []
        whole = self.out.read_text().splitlines(keepends=True)
        return [json.loads(line) for line in whole if line.endswith("\n")]  # a line being written is not yet one

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"run exited early ({self.proc.returncode})\n{self.stderr()}")

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def wait_exit(self, timeout: float) -> tuple[int, float]:
        t0 = time.monotonic()
        code = self.proc.wait(timeout=timeout)
        return code, time.monotonic() - t0

    def cleanup(self) -> None:
        for pgid in (self.proc.pid, *self.pgids):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self._stderr.close()


def group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, found through /proc by pgid."""
    alive = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def wait_group_gone(pgid: int, timeout: float) -> float:
    """Seconds until no live process of the group is left; fails after `timeout`."""
    t0 = time.monotonic()
    while True:
        alive = group_alive(pgid)
        if not alive:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"engine group {pgid} still alive after {timeout} s: {alive}")
        time.sleep(0.05)


def interrupt_line(stderr: str, signame: str) -> str:
    lines = [line for line in stderr.splitlines() if "interrupted" in line]
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith(f"eagle-fix run: interrupted by {signame}"), line
    assert "--resume" in line, line
    return line


# --------------------------------------------------------------------------- engine tests


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    """A: worker killed by SIGKILL mid-point; B: worker stopped (SIGSTOP) mid-point, the watchdog
    fires; C: ok; D: the run gets SIGTERM mid-point. Returns what each test asserts on."""
    tmp = tmp_path_factory.mktemp("faults-shared")
    run = Run(tmp, f"{A},{B},{C},{D}", "--point-timeout", str(POINT_TIMEOUT_S))
    seen: dict = {}
    try:
        # A: kill -9 the worker while the point runs (what the OOM killer does).
        eng1 = run.wait_engine()
        run.wait_point_sent(eng1.pid, A)
        worker = run.wait_worker(eng1)
        worker.send_signal(signal.SIGKILL)
        seen["killed_worker"] = worker.pid
        t0 = time.monotonic()
        run.wait_lines(1)
        _note("worker SIGKILL -> point A failed", time.monotonic() - t0)
        seen["engine1_gone_s"] = wait_group_gone(eng1.pid, 10)

        # B: the restarted engine's worker stopped (a hang): the watchdog must catch it.
        eng2 = run.wait_engine(other_than=eng1.pid)
        run.wait_point_sent(eng2.pid, B)
        worker = run.wait_worker(eng2)
        worker.send_signal(signal.SIGSTOP)
        seen["stopped_worker"] = worker.pid
        t0 = time.monotonic()
        run.wait_lines(2, timeout=POINT_TIMEOUT_S + WAIT_S)
        _note("worker SIGSTOP -> point B failed (watchdog)", time.monotonic() - t0)
        seen["engine2_gone_s"] = wait_group_gone(eng2.pid, 10)

        # C runs on a third engine, then D: SIGTERM once D is sent (mid-point).
        eng3 = run.wait_engine(other_than=eng2.pid)
        run.wait_point_sent(eng3.pid, D)
        worker = run.wait_worker(eng3)
        seen["engine3_tree"] = [p.pid for p in eng3.children(recursive=True)]
        run.proc.send_signal(signal.SIGTERM)
        code, took = run.wait_exit(timeout=60)
        _note("SIGTERM -> exit", took)
        seen["sigterm_exit"], seen["sigterm_exit_s"] = code, took
        gone = wait_group_gone(eng3.pid, 30)
        _note("SIGTERM -> no engine process", took + gone)
        seen["engine3_gone_after_exit_s"] = gone
        seen["stderr"] = run.stderr()
        seen["records"] = run.records()
        seen["raw"] = run.out.read_text()
        return seen
    finally:
        run.cleanup()


@pytest.mark.engine
def test_worker_killed_fails_the_point_naming_the_signal(shared_run):
    recs = {r["context_len"]: r for r in shared_run["records"]}
    a = recs[A]
    assert a["status"] == "failed"
    first = a["error"].splitlines()[0]
    assert "SIGKILL" in first and "worker" in first.lower(), first
    assert shared_run["engine1_gone_s"] < 10


@pytest.mark.engine
def test_stopped_worker_is_caught_by_the_watchdog(shared_run):
    recs = {r["context_len"]: r for r in shared_run["records"]}
    b = recs[B]
    assert b["status"] == "failed"
    first = b["error"].splitlines()[0]
    assert "watchdog" in first and f"{POINT_TIMEOUT_S} s" in first, first
    assert "stopped" in first, first  # the watchdog names the stopped process
    assert recs[C]["status"] == "ok", recs[C]["error"]  # the next point, on a restarted engine


@pytest.mark.engine
def test_sigterm_mid_point_exits_with_143_and_kills_the_engine(shared_run):
    assert shared_run["sigterm_exit"] == 143, shared_run["stderr"]
    # A prompt exit, not a hang (wait_exit gives up at 60 s). The bound covers a 2-core machine with the other
    # test worker's engine beside this run: there it once took 23.8 s (README's test command on a fresh clone
    # of 9ec6c73, an AVX2 EPYC); this module alone on that machine took 1.0 s.
    assert shared_run["sigterm_exit_s"] < 40
    line = interrupt_line(shared_run["stderr"], "SIGTERM")
    assert re.search(r"\b3 (of 4 )?points finished", line), line
    # Every finished point is a whole line that parses; D (interrupted) is not there.
    assert shared_run["raw"].endswith("\n")
    assert [r["context_len"] for r in shared_run["records"]] == [A, B, C]
    assert shared_run["engine3_gone_after_exit_s"] < 10


@pytest.mark.engine
def test_sigint_during_engine_start_exits_with_130(tmp_path):
    run = Run(tmp_path, str(A))
    try:
        eng = run.wait_engine()
        time.sleep(1.0)  # the child is importing torch/vLLM: the start is under way
        run.proc.send_signal(signal.SIGINT)
        code, took = run.wait_exit(timeout=60)
        _note("SIGINT during start -> exit", took)
        assert code == 130, run.stderr()
        assert took < 10
        interrupt_line(run.stderr(), "SIGINT")
        assert wait_group_gone(eng.pid, 10) < 10
        assert run.records() == []
    finally:
        run.cleanup()


@pytest.mark.engine
def test_sigkill_of_the_run_leaves_no_engine_process(tmp_path):
    """No handler runs: the engine child sees its parent gone (lifeline pipe) and kills its group,
    vLLM's EngineCore and Worker included."""
    run = Run(tmp_path, str(A))
    try:
        eng = run.wait_engine()
        worker = run.wait_worker(eng)  # EngineCore and Worker are up
        tree = [p.pid for p in eng.children(recursive=True)]
        assert worker.pid in tree and len(tree) >= 2
        t0 = time.monotonic()
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait(timeout=10)
        wait_group_gone(eng.pid, 30)
        gone = time.monotonic() - t0
        _note("SIGKILL of the run -> no engine process", gone)
        assert gone < 30
        assert not any(
            psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in [eng.pid, *tree]
        )
    finally:
        run.cleanup()


# --------------------------------------------------------------------------- without the engine


def test_unwritable_engine_log_is_a_one_line_error_before_any_start():
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.engine import lifecycle
    from eagle_fix.engine.offline import EngineProcess
    from eagle_fix.engine.spec import EngineSpec

    spec = EngineSpec(target="/nonexistent", draft=None, mode="eager", fix=None, max_model_len=4096)
    before, installed = lifecycle.groups(), lifecycle.handlers_installed()
    try:
        # /dev/full: every write fails with ENOSPC, as on a full disk.
        for path, why in (
            (Path("/dev/full"), "No space left on device"),
            (Path("/dev/null/logs/engine.log"), "Not a directory"),
        ):
            with pytest.raises(EagleFixError) as err:
                EngineProcess(spec, path)
            msg = str(err.value)
            assert "\n" not in msg and str(path) in msg and why in msg and "--log-dir" in msg, msg
        assert lifecycle.groups() == before  # nothing was started
    finally:
        if not installed:  # EngineProcess installs them in this (pytest's) process: put pytest's back
            lifecycle.uninstall_signal_handlers()


def test_cli_unwritable_log_dir_is_one_line(tmp_path):
    out = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "eagle_fix.cli",
            "run",
            "--profile",
            "cpu-quick",
            "--contexts",
            "4096",
            "--modes",
            "eager",
            "--arms",
            "baseline",
            "--out",
            str(out),
            "--log-dir",
            "/dev/null/logs",
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("eagle-fix run: error: cannot write the engine log /dev/null/logs/"), proc.stderr
    assert "Not a directory" in lines[-1]
    assert "Traceback" not in proc.stderr


def test_killed_cause_names_the_signal():
    from eagle_fix.engine.logs import killed_cause

    log = [
        (
            "(EngineCore pid=1) ERROR 11-30 16:41:25 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
            "unexpectedly (exit code: -9), shutting down executor."
        ),
        "Traceback (most recent call last):",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]
    assert killed_cause(log) == "worker VllmWorker-0 killed by SIGKILL"
    assert (
        killed_cause(["Worker proc VllmWorker-0 died unexpectedly (exit code: -11), shutting down"])
        == "worker VllmWorker-0 killed by SIGSEGV"
    )
    assert (
        killed_cause(["Worker proc VllmWorker-0 died unexpectedly (exit code: 1), x"])
        == "worker VllmWorker-0 exited with code 1"
    )
    assert killed_cause(["nothing here"]) is None


def test_interrupted_exit_codes_and_keyboard_interrupt():
    from eagle_fix.core.errors import EagleFixError
    from eagle_fix.engine.lifecycle import Interrupted

    term = Interrupted(None, signal.SIGTERM)
    assert isinstance(term, EagleFixError) and not isinstance(term, KeyboardInterrupt)
    assert (term.exit_code, term.signum, str(term)) == (143, signal.SIGTERM, "interrupted by SIGTERM")
    intr = Interrupted(f"{Interrupted(None, signal.SIGINT)}: 0 of 1 points finished", signal.SIGINT)
    assert isinstance(intr, Interrupted) and isinstance(intr, KeyboardInterrupt)  # pytest/asv still stop on Ctrl-C
    assert intr.exit_code == 130 and str(intr) == "interrupted by SIGINT: 0 of 1 points finished"
    assert Interrupted(None, signal.SIGHUP).exit_code == 129


_HANDLER_SCRIPT = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from eagle_fix.engine import lifecycle
    # as from a terminal: a signal ignored by how pytest was started (nohup: SIGHUP; a background
    # job: SIGINT) is inherited, and left alone by design
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    assert lifecycle.install_signal_handlers() and lifecycle.install_signal_handlers()  # idempotent
    # A stand-in engine group: a leader and a grandchild, in their own session.
    g = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"],
                         start_new_session=True)
    lifecycle.register(g.pid)
    time.sleep(1.0)
    try:
        print(g.pid, flush=True)
        time.sleep(60)
    except lifecycle.Interrupted as exc:
        g.wait(timeout=10)
        print(f"{exc}|{exc.exit_code}|{g.returncode}", flush=True)
        sys.exit(exc.exit_code)
""")


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_signal_kills_registered_groups_and_raises(sig, code):
    proc = subprocess.Popen(
        [sys.executable, "-c", _HANDLER_SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    pgid = None
    try:
        pgid = int(proc.stdout.readline())
        assert group_alive(pgid)
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == code, out
        assert out.strip() == f"interrupted by {signal.Signals(sig).name}|{code}|-9"
        assert wait_group_gone(pgid, 5) + (time.monotonic() - t0) < 5
    finally:
        _kill_groups(proc.pid, pgid)


def _kill_groups(*pgids: int | None) -> None:
    """A test's stand-in process groups, gone whatever the test left (None: never started)."""
    for g in pgids:
        if g:
            try:
                os.killpg(g, signal.SIGKILL)
            except ProcessLookupError:
                pass


_WATCH_SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    from eagle_fix.engine.process import PARENT_PID_ENV
    # The parent: start a stand-in engine child the way EngineProcess does (own session, lifeline).
    life_read, life_write = os.pipe()
    child = subprocess.Popen([sys.executable, "-c",
        "import os, subprocess, sys, time\\n"
        "from eagle_fix.engine.process import watch_parent\\n"
        "watch_parent(int(sys.argv[1]), int(os.environ['EAGLE_FIX_PARENT_PID']))\\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\\n"
        "time.sleep(600)\\n", str(life_read)],
        pass_fds=(life_read,), start_new_session=True, env={**os.environ, PARENT_PID_ENV: str(os.getpid())})
    os.close(life_read)
    time.sleep(1.5)
    print(child.pid, flush=True)
    time.sleep(600)
""")


def test_engine_child_kills_its_group_when_the_parent_is_killed():
    """The lifeline without vLLM: SIGKILL the parent; the child's whole group is gone within ~1 s."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _WATCH_SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    pgid = None
    try:
        pgid = int(proc.stdout.readline())
        assert len(group_alive(pgid)) == 2
        proc.kill()
        proc.wait(timeout=5)
        assert wait_group_gone(pgid, 5) < 3
    finally:
        _kill_groups(proc.pid, pgid)


def test_asv_benchmark_process_stops_when_asv_run_is_gone(tmp_path):
    """`asv run` killed leaves its benchmark process reparented: exit_with_parent() makes that a SIGTERM."""
    child = (
        "import sys, time; from eagle_fix.engine import lifecycle; lifecycle.install_signal_handlers(); "
        "lifecycle.exit_with_parent(poll_s=0.2); print('up', flush=True)\n"
        "try:\n    time.sleep(60)\nexcept lifecycle.Interrupted as exc:\n    sys.exit(exc.exit_code)"
    )
    parent = (
        "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]]); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent, child], stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True
    )
    try:
        pid = int(proc.stdout.readline())
        time.sleep(1.0)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while (
            time.monotonic() < deadline
            and psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        ):
            time.sleep(0.1)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_paused_engine_is_continued_when_its_owner_dies():
    """eagle-fix ab SIGSTOPs the idle side's engine group; a stopped process cannot see its parent die,
    so the sentinel outside both SIGCONTs the group once the owner is gone (here: SIGKILLed)."""
    import subprocess
    import time

    from eagle_fix.engine.process import continue_when_gone

    group = subprocess.Popen(["sleep", "60"], start_new_session=True)  # stands in for the engine's group
    owner = subprocess.Popen(["sleep", "60"])
    sentinel = continue_when_gone(owner.pid, group.pid)
    try:
        os.killpg(group.pid, signal.SIGSTOP)
        time.sleep(2.5)
        assert _state(group.pid) == "T"  # the owner lives: stays paused
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 10
        while _state(group.pid) == "T" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _state(group.pid) == "S"  # continued
        group.kill()
        group.wait()
        assert sentinel.wait(timeout=10) == 0  # and the sentinel ends by itself once the group is gone
    finally:
        for p in (group, owner, sentinel):
            if p.poll() is None:
                p.kill()


def test_a_released_lifeline_reads_as_the_owners_death_and_stops_its_sentinel():
    """What an engine and a server both hold (engine.Lifeline): once released, the child's end reads
    EOF (what watch_parent takes for the owner's death) and the sentinel is gone; twice is harmless."""
    import subprocess

    from eagle_fix.engine.process import Lifeline

    group = subprocess.Popen(["sleep", "60"], start_new_session=True)
    life = Lifeline()
    child_end = os.dup(life.child_fd)  # what the child would hold after the spawn
    try:
        life.spawned()
        assert life.child_fd is None
        life.guard(group.pid)
        sentinel = life._sentinel
        assert sentinel is not None and sentinel.poll() is None
        life.guard(group.pid)
        assert life._sentinel is sentinel  # started once
        life.release()
        assert sentinel.poll() is not None and life._sentinel is None
        assert os.read(child_end, 1) == b""  # EOF: the owner is gone as far as the child can tell
        life.release()
    finally:
        os.close(child_end)
        group.kill()
        group.wait()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2 :].split()[0]
