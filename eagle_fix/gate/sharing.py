"""How the two sides of `eagle-fix ab` share the machine: the plan (both engines up with the idle one paused,
half a GPU each, or one at a time), what one engine needs on a GPU, and the moves that keep only the measured
side running."""

from __future__ import annotations

from typing import Any

from eagle_fix.core.errors import EagleFixError
from eagle_fix.sweep.road import weights_per_device

# Each side's share of one GPU under "split-memory", below half so the second engine's start-up
# check (free memory >= its share) passes with the first engine up, and the CUDA context and
# allocator slack of both fit beside.
SPLIT_UTILIZATION = 0.45


# Besides weights and KV: activations, CUDA graphs, the CUDA context and the allocator's slack.
OVERHEAD_FLOOR_BYTES = 2 * 2**30


OVERHEAD_SHARE_OF_WEIGHTS = 0.2


def engine_need_bytes(run: Any, spec: Any) -> int | None:
    """What one engine of `spec` holds on each of its GPUs, roughly: its share of the weights (target, and
    draft on the EAGLE3 arm, from the configs; tensor parallel shards them), the KV budget (per GPU), and
    an allowance for the rest; None when the configs cannot say."""
    try:
        weights = weights_per_device(run.profile, eagle3=spec.draft is not None)
    except (EagleFixError, OSError, KeyError, TypeError, ValueError):
        return None
    return int(
        weights + (spec.kv_cache_memory_bytes or 0) + max(OVERHEAD_FLOOR_BYTES, OVERHEAD_SHARE_OF_WEIGHTS * weights)
    )


def sharing_plan(
    device: str, need_bytes: int | None, total_bytes: int | None, total_error: str | None = None
) -> dict[str, Any]:
    """How the two sides' engines share the machine, and why (recorded in the ab file)."""
    if device != "cuda":
        return {
            "sharing": "paused",
            "reason": "CPU: both engines stay up; the side not measured is paused "
            "(SIGSTOP), so its idle polling cannot land on the other's numbers",
        }
    gib = lambda n: f"{n / 2**30:.1f} GiB"
    if total_bytes is None:
        return {
            "sharing": "one-at-a-time",
            "reason": f"the GPU's memory is unknown ({total_error or 'NVML gave none'}): two engines are not "
            "shown to fit, so each side's engine runs alone, stopped and started per measurement",
        }
    if need_bytes is None:
        return {
            "sharing": "one-at-a-time",
            "reason": "one engine's memory cannot be estimated from the configs: each side's engine runs "
            "alone, stopped and started per measurement",
        }
    share = int(SPLIT_UTILIZATION * total_bytes)
    if need_bytes <= share:
        return {
            "sharing": "split-memory",
            "gpu_memory_utilization": SPLIT_UTILIZATION,
            "reason": f"one engine needs about {gib(need_bytes)} (weights, KV budget, allowance); each side "
            f"gets gpu_memory_utilization {SPLIT_UTILIZATION} ({gib(share)} of {gib(total_bytes)})",
        }
    return {
        "sharing": "one-at-a-time",
        "reason": f"one engine needs about {gib(need_bytes)}, more than a side's share {gib(share)} of "
        f"{gib(total_bytes)}: each side's engine runs alone, stopped and started per measurement",
    }


def measure_alone(engines: dict[str, Any], side: str) -> None:
    """The side about to be measured runs; the other side's engine is paused (SIGSTOP of its process
    group), so its idle busy-polling never lands on this side's numbers."""
    for name, engine in engines.items():
        if engine is not None and not isinstance(engine, Exception):
            (engine.resume if name == side else engine.pause)()


def restart(engines: dict[str, Any], order: list[str], start: Any) -> None:
    """A new block: close both sides' engines, then start them afresh in `order` (a side that cannot
    start holds its EngineDied)."""
    for name, engine in engines.items():
        if engine is not None and not isinstance(engine, Exception):
            engine.close()
        engines[name] = None
    for side in order:
        engines[side] = start(side)


def one_engine_up(engines: dict[str, Any], side: str, start: Any) -> None:
    """ "one-at-a-time": close every other side's engine, then start this side's if it is not up."""
    for name, engine in engines.items():
        if name != side and engine is not None and not isinstance(engine, Exception):
            engine.close()
            engines[name] = None
    if engines[side] is None or isinstance(engines[side], Exception):
        engines[side] = start()
