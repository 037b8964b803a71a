"""EAGLE3 at long contexts in the real vLLM engine: one sweep per asv run, one tracked number per point.

Every benchmark is lower-is-better (asv assumes so in `asv compare` and `asv continuous`): time per
output token instead of throughput, target passes per token instead of acceptance length, the share
of steps the drafter skipped instead of its coverage. A failed point is a failed benchmark."""

import os

from .common import (
    ALL_CONTEXTS,
    CONTEXTS_ENV,
    MODES,
    NUM_SPECULATIVE_TOKENS,
    POSITIONS,
    REPO,
    SWEEP_TIMEOUT_S,
    VERSION,
    profile_contexts,
    profile_name,
    sweep_arms,
    sweep_knobs,
)


def _run_sweep():
    """The whole grid of the chosen profile, also written as JSON lines (eagle_fix.store.asv.run_out_path)."""
    from eagle_fix.engine import lifecycle
    from eagle_fix.store.asv import RECORDS_ENV, asv_fix, replay_records, run_out_path
    from eagle_fix.sweep.loop import run_sweep
    from eagle_fix.sweep.plan import RunArgs

    lifecycle.install_signal_handlers()
    lifecycle.exit_with_parent()  # `asv run` stopped: this process and its engines stop too

    profile = profile_name()
    if os.environ.get(RECORDS_ENV):  # records measured earlier in this environment: recorded, not rerun
        return replay_records(os.environ[RECORDS_ENV], profile=profile)
    out = run_out_path(profile, conf_dir=REPO)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():  # same commit again (another vLLM, a retry): keep the earlier run's lines
        out.rename(out.with_name(f"{out.name}.{int(out.stat().st_mtime)}.old"))
    arms = sweep_arms()
    records = run_sweep(
        RunArgs(
            profile=profile,
            contexts=profile_contexts(profile),
            modes=MODES,
            arms=arms,
            fixes=(asv_fix(),),
            num_speculative_tokens=NUM_SPECULATIVE_TOKENS,
            out=out,
            **sweep_knobs(),
        )
    )
    return {
        "profile": profile,
        "contexts": profile_contexts(profile),
        "arms": arms,
        "records": records,
        "out": str(out),
    }


class _SweepBase:
    """One setup_cache for every class below: asv keys the cache by the function's source line."""

    params = (list(ALL_CONTEXTS), list(MODES))
    param_names = ("context_len", "mode")
    timeout = SWEEP_TIMEOUT_S
    arm = "eagle3"

    def setup_cache(self):
        return _run_sweep()

    setup_cache.timeout = SWEEP_TIMEOUT_S

    def setup(self, cache, context_len, mode, *position):
        if cache.get("arms") is not None and self.arm not in cache["arms"]:
            raise NotImplementedError(f"arm {self.arm} not in this run's arms ({','.join(cache['arms'])})")
        if context_len not in cache["contexts"]:
            limit = f" ({CONTEXTS_ENV}={os.environ[CONTEXTS_ENV]})" if os.environ.get(CONTEXTS_ENV) else ""
            raise NotImplementedError(
                f"context {context_len} not measured: this run's contexts of profile "
                f"{cache['profile']} are {','.join(map(str, cache['contexts']))}{limit}"
            )
        if cache.get("replayed"):
            from eagle_fix.store.asv import in_records

            if not in_records(cache["records"], context_len=context_len, mode=mode, arm=self.arm):
                raise NotImplementedError(
                    f"{context_len} {mode} {self.arm}: not in the replayed records {cache['out']}"
                )

    def _value(self, cache, column, context_len, mode, position=None):
        from eagle_fix.store.asv import in_records, point_value

        if column == "speedup" and not in_records(cache["records"], context_len=context_len, mode=mode, arm="baseline"):
            # asv's n/a: a run (or replay) without the baseline arm has no speedup, which is not a failure; a
            # baseline point that ran and failed is in the records, so its speedup still fails.
            return float("nan")

        return point_value(
            cache["records"], column, context_len=context_len, mode=mode, arm=self.arm, position=position
        )


def _track(column, arm="eagle3"):
    """An asv track_ method returning the lower-is-better form of `column` at (context_len, mode); its
    unit, title and description come from the metric registry (eagle_fix.core.metrics.METRICS).

    asv names a class's benchmark by the attribute it is bound to, so the names (and the results
    keyed by them) are those of the class bodies below."""
    from eagle_fix.core.metrics import METRIC

    metric = METRIC[column]

    def track(self, cache, context_len, mode):
        return self._value(cache, column, context_len, mode)

    track.unit, track.version = metric.asv_unit, VERSION
    who = {"eagle3": "EAGLE3", "ngram": "n-gram"}.get(arm, "no speculation")
    track.pretty_name = f"{who}: {metric.asv_title} [{metric.asv_unit}, lower is better]"
    track.__doc__ = track.pretty_source = f"{who}: {metric.asv_doc} Lower is better."
    return track


class Sweep(_SweepBase):
    """The EAGLE3 arm (fix on, or $EAGLE_FIX_ASV_FIX) per context length x mode."""

    track_tpot = _track("tpot_ms")
    track_e2e_ms_per_token = _track("output_throughput_tok_s")
    track_ttft = _track("ttft_s")
    track_relative_decode_time = _track("speedup")
    track_target_passes_per_token = _track("acceptance_length")
    track_drafter_skipped_share = _track("drafter_coverage")
    track_peak_host_memory = _track("peak_host_memory_bytes")
    track_decode_bandwidth_unused_pct = _track("decode_pct_of_bandwidth")
    track_prefill_flops_unused_pct = _track("prefill_pct_of_peak_flops")


class Baseline(_SweepBase):
    """The no-speculation arm at the same points: an engine regression shows here first."""

    arm = "baseline"
    track_tpot = _track("tpot_ms", "baseline")
    track_ttft = _track("ttft_s", "baseline")


class GPUMemory(_SweepBase):
    """Peak GPU memory of the EAGLE3 arm; skipped on CPU profiles, never faked."""

    def setup(self, cache, context_len, mode):
        super().setup(cache, context_len, mode)
        from eagle_fix.pairs.profiles import get_profile

        if get_profile(cache["profile"]).device != "cuda":
            raise NotImplementedError("no GPU memory on a CPU profile")

    track_peak_gpu_memory = _track("peak_gpu_memory_bytes")


class PerPosition(_SweepBase):
    """Rejected share of each draft position (1..k): 1 - vLLM's accepted_per_pos / drafts."""

    params = (list(ALL_CONTEXTS), list(MODES), list(POSITIONS))
    param_names = ("context_len", "mode", "position")

    def track_per_position_rejection(self, cache, context_len, mode, position):
        return self._value(cache, "per_position_acceptance", context_len, mode, position)

    track_per_position_rejection.unit = "rate"
    track_per_position_rejection.version = VERSION
    track_per_position_rejection.pretty_name = "EAGLE3: rejected share per draft position [rate, lower is better]"
    track_per_position_rejection.pretty_source = (
        "EAGLE3: 1 - vLLM's accepted_per_pos / drafts, per draft position 1..k. Lower is better."
    )


class NgramSweep(_SweepBase):
    """vLLM's n-gram (prompt lookup) proposer per context length x mode: no draft checkpoint, no fix arms. A
    class of its own, so the EAGLE3 series keep their names and graph files; its points run where the sweep's
    arms include it (EAGLE_FIX_ASV_ARMS=eagle3,baseline,ngram), else they are skipped."""

    arm = "ngram"
    track_tpot = _track("tpot_ms", "ngram")
    track_e2e_ms_per_token = _track("output_throughput_tok_s", "ngram")
    track_relative_decode_time = _track("speedup", "ngram")
    track_target_passes_per_token = _track("acceptance_length", "ngram")
    track_drafter_skipped_share = _track("drafter_coverage", "ngram")
