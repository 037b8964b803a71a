"""The worker's step clock: every model step timed in the engine's worker (execute_model plus the
sample_tokens that completes it), and, for the gate's calibration only, the knobs that make every step
slower on purpose (a sleep, or a spin of F x the step's own time). The plugin wraps the runner's methods
with these; the measurement reads STEPS through the worker extension."""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable
from typing import Any

from eagle_fix.core import settings
from eagle_fix.core.settings import (
    INJECT_DELAY_ENV,
    INJECT_DRAFT_ERRORS_ENV,
    INJECT_DRAFT_NOISE_ENV,
    INJECT_DRAFT_SEED_ENV,
    INJECT_SLOWDOWN_ENV,
)
from eagle_fix.fix.damage import parse_draft_errors, parse_draft_noise, parse_draft_seed

# Test-only: sleep this many ms in the worker on every model step. Superseded by
# INJECT_SLOWDOWN_ENV (a fixed sleep cannot make a small relative slowdown); kept because the committed
# calibration files (results/calibration/delay-*.json) were measured with it and name it.
# Test-only, the calibration knob of the gate's power (eagle-fix ab --new-env): every model step is
# made (1 + F)x as long by spinning in the worker for F x the step's own measured duration. Spinning,
# not sleeping: a sleep hands the core to other threads and its wake-up latency is coarser than the
# few-percent effects being calibrated. Both knobs are recorded on every record (`env`) and refused by
# commands that write committed results.
INJECT_ENVS = (
    INJECT_DELAY_ENV,
    INJECT_SLOWDOWN_ENV,
    INJECT_DRAFT_ERRORS_ENV,
    INJECT_DRAFT_NOISE_ENV,
    INJECT_DRAFT_SEED_ENV,
)


def parse_delay_ms(raw: str) -> float:
    """A value of INJECT_DELAY_ENV in milliseconds."""
    return settings.parse_number(INJECT_DELAY_ENV, raw, hint="give milliseconds, e.g. 2.5")


def parse_slowdown(raw: str) -> float:
    """A value of INJECT_SLOWDOWN_ENV (0.05: every step 5% longer)."""
    return settings.parse_number(
        INJECT_SLOWDOWN_ENV, raw, hint="give the relative slowdown, e.g. 0.05 for steps 5% longer"
    )


# each knob's parser, for the commands that check them before any engine starts
INJECT_PARSERS: dict[str, Callable[[str], float]] = {
    INJECT_DELAY_ENV: parse_delay_ms,
    INJECT_SLOWDOWN_ENV: parse_slowdown,
    # eagle_fix.fix.damage: the acceptance gate's knobs
    INJECT_DRAFT_ERRORS_ENV: parse_draft_errors,
    INJECT_DRAFT_NOISE_ENV: parse_draft_noise,
    INJECT_DRAFT_SEED_ENV: parse_draft_seed,
}


def inject_delay_s() -> float:
    """The injected per-step delay in seconds (0 without the knob); a bad value names the knob."""
    raw = os.environ.get(INJECT_DELAY_ENV, "").strip()
    return parse_delay_ms(raw) / 1000.0 if raw else 0.0


def inject_slowdown() -> float:
    """The injected relative slowdown F of every model step (0 without the knob); a bad value names it."""
    raw = os.environ.get(INJECT_SLOWDOWN_ENV, "").strip()
    return parse_slowdown(raw) if raw else 0.0


def spin(seconds: float) -> float:
    """Busy-wait `seconds` on perf_counter (the core stays busy, as a slower step would keep it);
    returns the time really spun."""
    start = time.perf_counter()
    end = start + seconds
    now = start
    while now < end:
        now = time.perf_counter()
    return now - start


class _Steps:
    """The worker's model steps since the last reset: each one's duration (execute_model plus the
    sample_tokens that completes it, the injected delay or spin included) and whether its batch
    carried prompt tokens (None where the scheduler's output could not be read). Bounded: a point
    resets it before every decode run, so the bound only guards a run that never resets."""

    LIMIT = 4096

    def __init__(self) -> None:
        self.pending: tuple[float, bool | None, float] | None = None  # execute_model done, sample_tokens to come
        self.reset()

    def reset(self) -> None:
        self.times_ms: list[float] = []
        self.cpu_ms: list[float] = []  # the same steps on the stepping thread's CPU clock
        self.prompt: list[bool | None] = []
        self.spun_ms: list[float] = []  # the injected spin inside each step (0 without the knob)
        self.dropped = 0

    def add(self, seconds: float, prompt: bool | None, spun: float = 0.0, cpu: float | None = None) -> None:
        if len(self.times_ms) >= self.LIMIT:
            self.dropped += 1
            return
        self.times_ms.append(1000.0 * seconds)
        self.cpu_ms.append(1000.0 * (seconds if cpu is None else cpu))
        self.prompt.append(prompt)
        self.spun_ms.append(1000.0 * spun)

    def as_dict(self) -> dict[str, Any]:
        return {
            "step_times_ms": list(self.times_ms),
            "step_cpu_ms": list(self.cpu_ms),
            "step_prompt": list(self.prompt),
            "step_spun_ms": list(self.spun_ms),
            "steps_dropped": self.dropped,
        }


STEPS = _Steps()


def carries_prompt(scheduler_output: Any) -> bool | None:
    """Whether a step's batch carries prompt tokens: a new request (its first step computes what the
    prefix cache lacks) or a request scheduled more tokens than its one new token plus its drafts
    (a prefill chunk). None where the scheduler's output lacks those fields."""
    try:
        if scheduler_output.scheduled_new_reqs:
            return True
        drafts = scheduler_output.scheduled_spec_decode_tokens or {}
        return any(int(n) > 1 + len(drafts.get(req, ())) for req, n in scheduler_output.num_scheduled_tokens.items())
    except (AttributeError, TypeError, ValueError):
        return None


def end_step(seconds: float, prompt: bool | None, slowdown: float, cpu: float | None = None) -> None:
    """A model step is over: stretch it by the injected slowdown, then record it with the spin it got
    (what proves the knob acted, whatever the machine's speed did meanwhile). `cpu`: the step on the
    thread's CPU clock; the spin's own CPU time is added to it."""
    c0 = time.thread_time()
    spun = spin(slowdown * seconds) if slowdown > 0 else 0.0
    STEPS.add(seconds + spun, prompt, spun, None if cpu is None else cpu + time.thread_time() - c0)


def argument_reader(fn: Callable[..., Any], name: str) -> Callable[[tuple, dict], Any]:
    """Reads argument `name` of a call to fn (self excluded from args), by keyword or position as
    the engine's signature places it, else its default."""
    sig = inspect.signature(fn)
    index = list(sig.parameters).index(name) - 1
    default = sig.parameters[name].default
    default = None if default is inspect.Parameter.empty else default

    def read(args: tuple, kwargs: dict) -> Any:
        if name in kwargs:
            return kwargs[name]
        return args[index] if 0 <= index < len(args) else default

    return read


def argument_writer(fn: Callable[..., Any], name: str) -> Callable[[tuple, dict, Any], tuple[tuple, dict]]:
    """The twin of argument_reader: (args, kwargs) of a call to fn with argument `name` replaced, where
    the call placed it (by keyword or position; a call that left it out gets it by keyword)."""
    index = list(inspect.signature(fn).parameters).index(name) - 1

    def write(args: tuple, kwargs: dict, value: Any) -> tuple[tuple, dict]:
        if name not in kwargs and 0 <= index < len(args):
            return (*args[:index], value, *args[index + 1 :]), kwargs
        return args, {**kwargs, name: value}

    return write


def wrap_step(step: Callable[..., Any]) -> Callable[..., Any]:
    """execute_model, timed; the injected delay (a sleep before the step) and slowdown (a spin after
    it, once the step is complete) are inside the time, as the engine waits for both. A step whose
    execute_model returns None is completed by sample_tokens (_wrap_step_end), which records it."""
    names = list(inspect.signature(step).parameters)
    dummy_of = argument_reader(step, "dummy_run") if "dummy_run" in names else None
    sched_of = (
        argument_reader(step, "scheduler_output") if "scheduler_output" in names else (lambda a, k: a[0] if a else None)
    )
    delay, slowdown = inject_delay_s(), inject_slowdown()

    def execute_model_timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        STEPS.pending = None
        if dummy_of is not None and dummy_of(args, kwargs):  # V2's warm-up and profile runs: no request's step
            return step(self, *args, **kwargs)
        sched = sched_of(args, kwargs)
        t0, c0 = time.perf_counter(), time.thread_time()
        if delay:
            time.sleep(delay)
        out = step(self, *args, **kwargs)
        seconds, cpu = time.perf_counter() - t0, time.thread_time() - c0
        if not getattr(sched, "total_num_scheduled_tokens", 1):  # nothing scheduled: no model ran
            return out
        prompt = carries_prompt(sched)
        if out is None:
            STEPS.pending = (seconds, prompt, cpu)
        else:
            end_step(seconds, prompt, slowdown, cpu)
        return out

    return execute_model_timed


def wrap_step_end(sample_tokens: Callable[..., Any]) -> Callable[..., Any]:
    """sample_tokens, timed as the rest of the step execute_model began (none pending: not a step)."""
    slowdown = inject_slowdown()

    def sample_tokens_timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        pending, STEPS.pending = STEPS.pending, None
        t0, c0 = time.perf_counter(), time.thread_time()
        out = sample_tokens(self, *args, **kwargs)
        if pending is not None:  # each part on its own thread's clock, should the runner split them
            end_step(pending[0] + time.perf_counter() - t0, pending[1], slowdown, pending[2] + time.thread_time() - c0)
        return out

    return sample_tokens_timed
