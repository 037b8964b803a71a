"""Constants and the reduced/full switches shared by the asv benchmarks (glue only: logic lives in eagle_fix)."""

import os
from pathlib import Path

from eagle_fix.core.record import ENGINE_MODES as MODES  # noqa: F401 (the benchmarks' mode axis)
from eagle_fix.core.settings import (
    ASV_ARMS_ENV,
    CONTEXTS_ENV,
    OUTPUT_LEN_ENV,
    PROFILE_ENV,
    REPEATS_ENV,
    TTFT_REPEATS_ENV,
)
from eagle_fix.pairs.profiles import PROFILES, default_profile  # light: no vLLM or torch

# The profile, named as `eagle-fix run --profile` (cpu-quick | cpu | gpu-dummy | gpu), from PROFILE_ENV;
# unset: the run's default for this machine (eagle_fix.pairs.profiles.default_profile).
# asv params must be fixed at import time: the union of every profile's contexts (the profiles own
# them, eagle_fix.pairs.profiles). Combinations the chosen profile does not run are skipped
# (NotImplementedError in setup), not failed.

ALL_CONTEXTS = tuple(sorted({c for p in PROFILES.values() if p.in_asv_grid for c in p.contexts}))
NUM_SPECULATIVE_TOKENS = max(p.num_speculative_tokens for p in PROFILES.values())
POSITIONS = tuple(range(1, NUM_SPECULATIVE_TOKENS + 1))

# setup_cache runs the whole grid; each point has its own watchdog inside eagle_fix.sweep.
SWEEP_TIMEOUT_S = 4 * 3600
# Bump a benchmark's version only when what it measures changes: a new version starts a new history.
VERSION = "1"


def profile_name() -> str:
    """The profile this asv run measures."""
    name = os.environ.get(PROFILE_ENV)
    if name:
        return name
    return default_profile("run")


# Optional reduced set of contexts, e.g. EAGLE_FIX_CONTEXTS=8192,16384: the profile's own set
# otherwise (the long contexts cost most: docs/results.md has what each took).
# The repository root: asv runs setup_cache in a scratch folder, so paths are anchored here.
REPO = Path(__file__).resolve().parents[1]


def profile_contexts(name: str) -> tuple:
    override = os.environ.get(CONTEXTS_ENV)
    if override:
        return tuple(int(c) for c in override.split(",") if c.strip())
    from eagle_fix.pairs.profiles import get_profile

    return tuple(get_profile(name).contexts)


# Samples per point (eagle-fix run --repeats / --ttft-repeats / --output-len), reduced for CI by
# EAGLE_FIX_REPEATS, EAGLE_FIX_TTFT_REPEATS and EAGLE_FIX_OUTPUT_LEN; the profile's own otherwise.
def sweep_knobs() -> dict:
    knobs = {}
    for env, name in ((REPEATS_ENV, "repeats"), (TTFT_REPEATS_ENV, "ttft_repeats"), (OUTPUT_LEN_ENV, "output_len")):
        if os.environ.get(env):
            knobs[name] = int(os.environ[env])
    return knobs


# The arms the sweep runs (EAGLE_FIX_ASV_ARMS, e.g. eagle3,baseline,ngram; `eagle-fix arms` lists them): the
# sweep's default otherwise. A class whose arm the run left out is skipped (n/a), not failed.
def sweep_arms() -> tuple:
    from eagle_fix.core.arms import arm
    from eagle_fix.core.record import ARMS

    raw = os.environ.get(ASV_ARMS_ENV)
    if not raw:
        return tuple(ARMS)
    return tuple(arm(a.strip(), ASV_ARMS_ENV).name for a in raw.split(",") if a.strip())
