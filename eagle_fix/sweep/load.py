"""What else the machine did while a point measured: the load over the point (its mean and maximum, not one
reading at its end) and the cores other processes kept busy, and how old the machine's cached limits were.
A busy machine's speed is not evidence (eagle_fix.core.record.busy)."""

from __future__ import annotations

import datetime as _dt
import os
import threading
import time
from typing import Any


def limits_with_age(limits: Any, now: _dt.datetime | None = None) -> Any:
    """The limits as measured, with how old they were when this sweep started (`age_s`) beside
    `cached`: a figure cached hours ago says nothing of the contention of this run, and a reader
    has to see that it was cached, and when it was measured, to know what it stands for."""
    if not isinstance(limits, dict):
        return limits
    out = dict(limits)
    out.setdefault("cached", None)
    try:
        measured = _dt.datetime.fromisoformat(str(out.get("measured_at")))
        if measured.tzinfo is None:
            measured = measured.replace(tzinfo=_dt.UTC)
        now = now or _dt.datetime.now(_dt.UTC)
        out["age_s"] = max(0, round((now - measured).total_seconds()))
    except ValueError:
        out["age_s"] = None  # no or unreadable measured_at: the age is unknown, not zero
    return out


class LoadSampler:
    """The machine's load over one point, sampled by a background thread of the sweep's process
    while the engine measures: the 1-minute load average every `interval_s` (its mean and maximum
    over the point, not one reading at its end, which misses a run that came and went mid-point), and
    the cores other processes kept busy on average (from /proc/stat, less the CPU time of this
    process and of the engine's process tree). A process of the tree that exits during the point
    takes its time with it, so `other_busy_cores` can only overstate others' work, never hide it."""

    def __init__(self, interval_s: float = 1.0):
        self.interval_s = interval_s
        self._thread: threading.Thread | None = None
        self._result: dict[str, Any] | None = None

    def start(self, pid: int | None) -> None:
        self.stop()
        self._pid, self._result = pid, None
        self._samples = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._t0, self._busy0, self._own0 = time.monotonic(), _machine_busy_s(), self._own_cpu()
        self._thread = threading.Thread(target=self._loop, name="eagle-fix-load", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._samples.append(os.getloadavg()[0])

    def stop(self) -> dict[str, Any] | None:
        """Stop sampling; the record fields of the point (None when nothing was started). Idempotent."""
        if self._thread is None:
            return self._result
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._samples.append(os.getloadavg()[0])
        elapsed = time.monotonic() - self._t0
        busy1, own1 = _machine_busy_s(), self._own_cpu()
        others = None
        if self._busy0 is not None and busy1 is not None and elapsed > 0:
            own = sum(own1.get(k, 0.0) - self._own0.get(k, 0.0) for k in own1)
            others = round(max(0.0, (busy1 - self._busy0 - own) / elapsed), 2)
        self._result = {
            "load_avg_mean": round(sum(self._samples) / len(self._samples), 2),
            "load_avg_max": round(max(self._samples), 2),
            "other_busy_cores": others,
        }
        return self._result

    def _own_cpu(self) -> dict[Any, float]:
        """CPU seconds of this process and of the engine's process tree, by process."""
        t = os.times()
        out: dict[Any, float] = {"self": t.user + t.system}
        if self._pid is None:
            return out
        try:
            import psutil

            root = psutil.Process(self._pid)
            procs = [root] + root.children(recursive=True)
        except Exception:  # noqa: BLE001 -- no psutil, or the engine already gone: the machine's figure alone
            return out
        for proc in procs:
            try:
                c = proc.cpu_times()
                out[(proc.pid, proc.create_time())] = c.user + c.system
            except Exception:  # noqa: BLE001, S112 -- exited between listing and reading
                continue
        return out


def _machine_busy_s() -> float | None:
    """CPU seconds the whole machine spent busy since boot (/proc/stat: user, nice, system, irq,
    softirq; steal is the host's, not a process's); None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
