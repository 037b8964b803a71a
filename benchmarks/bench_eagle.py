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


class Sweep(_SweepBase):
    """The EAGLE3 arm (fix on, or upstream where the engine has it) per context length x mode."""

    def track_output_throughput(self, cache, context_len, mode):
        return self._value(cache, "output_throughput_tok_s", context_len, mode)

    track_output_throughput.unit = "tok/s"
    track_output_throughput.version = VERSION

    def track_decode_throughput(self, cache, context_len, mode):
        return self._value(cache, "decode_throughput_tok_s", context_len, mode)

    track_decode_throughput.unit = "tok/s"
    track_decode_throughput.version = VERSION

    def track_acceptance_length(self, cache, context_len, mode):
        return self._value(cache, "acceptance_length", context_len, mode)

    track_acceptance_length.unit = "tokens"
    track_acceptance_length.version = VERSION

    def track_speedup(self, cache, context_len, mode):
        """EAGLE3 decode throughput over the baseline arm's at the same point (prefill is the same work in both)."""
        return self._value(cache, "speedup", context_len, mode)

    track_speedup.unit = "x"
    track_speedup.version = VERSION

    def track_ttft(self, cache, context_len, mode):
        return self._value(cache, "ttft_s", context_len, mode)

    track_ttft.unit = "seconds"
    track_ttft.version = VERSION

    def track_drafter_coverage(self, cache, context_len, mode):
        """Share of decode steps that drafted: below 1 when the drafter gives up (vLLM #34734)."""
        return self._value(cache, "drafter_coverage", context_len, mode)

    track_drafter_coverage.unit = "fraction"
    track_drafter_coverage.version = VERSION

    def track_kv_cache_capacity(self, cache, context_len, mode):
        return self._value(cache, "kv_cache_capacity_tokens", context_len, mode)

    track_kv_cache_capacity.unit = "tokens"
    track_kv_cache_capacity.version = VERSION


class GPUMemory(_SweepBase):
    """Peak GPU memory (NVML) of the EAGLE3 arm; skipped on CPU profiles, never faked."""

    def setup(self, cache, context_len, mode):
        super().setup(cache, context_len, mode)
        if cache["profile"].startswith("cpu"):
            raise NotImplementedError("no GPU memory on a CPU profile")

    def track_peak_gpu_memory(self, cache, context_len, mode):
        return self._value(cache, "peak_gpu_memory_bytes", context_len, mode)

    track_peak_gpu_memory.unit = "bytes"
    track_peak_gpu_memory.version = VERSION


class PerPosition(_SweepBase):
    """Acceptance rate of each draft position (1..k), vLLM's accepted_per_pos / drafts."""

    params = (list(ALL_CONTEXTS), list(MODES), list(POSITIONS))
    param_names = ("context_len", "mode", "position")

    def track_per_position_acceptance(self, cache, context_len, mode, position):
        return self._value(cache, "per_position_acceptance", context_len, mode, position)

    track_per_position_acceptance.unit = "rate"
    track_per_position_acceptance.version = VERSION

