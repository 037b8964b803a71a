"""EAGLE3 at long contexts in the real vLLM engine: one sweep per asv run, one tracked number per point."""

from .common import (ALL_CONTEXTS, MODES, NUM_SPECULATIVE_TOKENS, POSITIONS, REPO, SWEEP_TIMEOUT_S,
                     VERSION, profile_contexts, profile_name)


def _run_sweep():
    """The whole grid of the chosen profile, also written as JSON lines (eagle_fix.results.run_out_path)."""
    from eagle_fix.results import run_out_path
    from eagle_fix.sweep import RunArgs, run_sweep

    profile = profile_name()
    out = run_out_path(profile, conf_dir=REPO)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():  # same commit again (another vLLM, a retry): keep the earlier run's lines
        out.rename(out.with_name(f"{out.name}.{int(out.stat().st_mtime)}.old"))
    records = run_sweep(RunArgs(profile=profile, contexts=profile_contexts(profile), modes=MODES, arms=("eagle3", "baseline"),
                                fixes=("on",), num_speculative_tokens=NUM_SPECULATIVE_TOKENS,
                                out=out))
    return {"profile": profile, "contexts": profile_contexts(profile), "records": records,
            "out": str(out)}


class _SweepBase:
    """One setup_cache for every class below: asv keys the cache by the function's source line."""

    params = (list(ALL_CONTEXTS), list(MODES))
    param_names = ("context_len", "mode")
    timeout = SWEEP_TIMEOUT_S

    def setup_cache(self):
        return _run_sweep()

    setup_cache.timeout = SWEEP_TIMEOUT_S

    def setup(self, cache, context_len, mode, *position):
        if context_len not in cache["contexts"]:
            raise NotImplementedError(f"context {context_len} not in profile {cache['profile']}")

    def _value(self, cache, column, context_len, mode, position=None):
        from eagle_fix.results import point_value

        return point_value(cache["records"], column, context_len=context_len, mode=mode,
                           position=position)


def _track(column, unit, doc=None):
    """An asv track_ method returning `column` of the sweep's record at (context_len, mode).

    asv names a class's benchmark by the attribute it is bound to, so the names (and the committed
    results keyed by them) are those of the class body below.
    """

    def track(self, cache, context_len, mode):
        return self._value(cache, column, context_len, mode)

    track.unit, track.version = unit, VERSION
    track.__doc__ = doc or f"`{column}` of the sweep's record at this point."
    track.pretty_source = f"return point_value(cache['records'], {column!r}, context_len=context_len, mode=mode)"
    return track


class Sweep(_SweepBase):
    """The EAGLE3 arm (fix on, or upstream where the engine has it) per context length x mode."""

    track_output_throughput = _track("output_throughput_tok_s", "tok/s", "End-to-end output tokens per second.")
    track_decode_throughput = _track("decode_throughput_tok_s", "tok/s", "Output tokens per second after the first.")
    track_acceptance_length = _track("acceptance_length", "tokens",
                                     "1 + accepted/drafts, from deltas of vLLM's own counters.")
    track_speedup = _track("speedup", "x", "EAGLE3 decode throughput over the baseline arm's at the same point "
                                           "(prefill is the same work in both).")
    track_ttft = _track("ttft_s", "seconds", "Time to first token (the prefill of the whole context).")
    track_drafter_coverage = _track("drafter_coverage", "fraction",
                                    "Share of decode steps that drafted: below 1 when the drafter gives up "
                                    "(vLLM #34734).")
    track_kv_cache_capacity = _track("kv_cache_capacity_tokens", "tokens")


class GPUMemory(_SweepBase):
    """Peak GPU memory (NVML) of the EAGLE3 arm; skipped on CPU profiles, never faked."""

    def setup(self, cache, context_len, mode):
        super().setup(cache, context_len, mode)
        if cache["profile"].startswith("cpu"):
            raise NotImplementedError("no GPU memory on a CPU profile")

    track_peak_gpu_memory = _track("peak_gpu_memory_bytes", "bytes",
                                   "Peak NVML device memory used minus the idle level before the engine started.")


class PerPosition(_SweepBase):
    """Acceptance rate of each draft position (1..k), vLLM's accepted_per_pos / drafts."""

    params = (list(ALL_CONTEXTS), list(MODES), list(POSITIONS))
    param_names = ("context_len", "mode", "position")

    def track_per_position_acceptance(self, cache, context_len, mode, position):
        return self._value(cache, "per_position_acceptance", context_len, mode, position)

    track_per_position_acceptance.unit = "rate"
    track_per_position_acceptance.version = VERSION

