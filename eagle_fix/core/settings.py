"""Every environment variable the suite reads, declared once: its name, what it does, its default and who
reads it. Modules take the names from here (a name written twice drifts); `tests/test_settings.py` fails on
an `EAGLE_FIX_*` name used anywhere that is not declared here, and docs/benchmarks.md's table of them is
generated from this module (`eagle-fix report --table settings`)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    name: str
    meaning: str
    default: str  # in words: what happens when it is unset
    read_by: str  # where it is read
    kind: str = "user"  # user | calibration (test-only knobs) | internal (set by the suite for its own children)


def _s(name: str, meaning: str, default: str, read_by: str, kind: str = "user") -> Setting:
    return Setting(name, meaning, default, read_by, kind)


# The asv suite and scripts/bench.sh
PROFILE_ENV = "EAGLE_FIX_PROFILE"
CONTEXTS_ENV = "EAGLE_FIX_CONTEXTS"
REPEATS_ENV = "EAGLE_FIX_REPEATS"
TTFT_REPEATS_ENV = "EAGLE_FIX_TTFT_REPEATS"
OUTPUT_LEN_ENV = "EAGLE_FIX_OUTPUT_LEN"
ASV_FIX_ENV = "EAGLE_FIX_ASV_FIX"
ASV_ARMS_ENV = "EAGLE_FIX_ASV_ARMS"
ASV_RECORDS_ENV = "EAGLE_FIX_ASV_RECORDS"
ASV_CONFIG_ENV = "EAGLE_FIX_ASV_CONFIG"
COMMIT_ENV = "EAGLE_FIX_COMMIT"
RUN_OUT_ENV = "EAGLE_FIX_RUN_OUT"
PROGRESS_ENV = "EAGLE_FIX_PROGRESS"
EXTRA_ENV = "EAGLE_FIX_EXTRA"
# The engine's processes
MODE_ENV = "EAGLE_FIX_MODE"
PIN_ENV = "EAGLE_FIX_PIN"
CACHE_DIR_ENV = "EAGLE_FIX_CACHE_DIR"
INJECT_SLOWDOWN_ENV = "EAGLE_FIX_INJECT_SLOWDOWN"
INJECT_DELAY_ENV = "EAGLE_FIX_INJECT_STEP_DELAY_MS"
INJECT_DRAFT_NOISE_ENV = "EAGLE_FIX_INJECT_DRAFT_NOISE"
INJECT_DRAFT_ERRORS_ENV = "EAGLE_FIX_INJECT_DRAFT_ERRORS"
INJECT_DRAFT_SEED_ENV = "EAGLE_FIX_INJECT_DRAFT_SEED"
PARENT_PID_ENV = "EAGLE_FIX_PARENT_PID"
ENGINE_LOG_ENV = "EAGLE_FIX_ENGINE_LOG"
# The GPU workflow and the tests
VENV_ENV = "EAGLE_FIX_VENV"
RUNNER_STORE_ENV = "EAGLE_FIX_RUNNER_STORE"
REAL_SHAPES_PROFILE_ENV = "EAGLE_FIX_REAL_SHAPES_PROFILE"
FAULT_TIMINGS_ENV = "EAGLE_FIX_FAULT_TIMINGS"

SETTINGS: tuple[Setting, ...] = (
    _s(
        PROFILE_ENV,
        "the profile the asv suite, scripts/bench.sh and `eagle-fix matrix` run",
        "the default profile of the purpose (eagle_fix.pairs.profiles.DEFAULT_PROFILES): the run's is cpu here, "
        "gpu-dummy on CUDA; the matrix's cpu-quick",
        "benchmarks/, scripts/bench.sh, eagle-fix matrix",
    ),
    _s(
        CONTEXTS_ENV,
        "the asv suite's contexts, comma-separated (the reduced set's switch)",
        "the profile's",
        "benchmarks/",
    ),
    _s(REPEATS_ENV, "decode runs per point of the asv suite's sweep", "5 (eagle-fix run's --repeats)", "benchmarks/"),
    _s(TTFT_REPEATS_ENV, "full prefills per point of the asv suite's sweep", "1", "benchmarks/"),
    _s(OUTPUT_LEN_ENV, "tokens generated per request in the asv suite's sweep", "the profile's", "benchmarks/"),
    _s(
        ASV_FIX_ENV,
        "the fix arm the asv suite measures: on, off (the original bug) or upstream",
        "on",
        "benchmarks/, eagle-fix publish",
    ),
    _s(
        ASV_ARMS_ENV,
        "the arms the asv suite's sweep runs, comma-separated (`eagle-fix arms`): add ngram for its own series",
        "eagle3,baseline",
        "benchmarks/",
    ),
    _s(
        ASV_RECORDS_ENV,
        "the JSON lines of an earlier `eagle-fix run` for asv to record instead of measuring",
        "none: the suite measures",
        "benchmarks/, scripts/bench.sh, eagle-fix publish",
    ),
    _s(ASV_CONFIG_ENV, "another asv config for scripts/bench.sh", "asv.conf.json", "scripts/bench.sh"),
    _s(COMMIT_ENV, "the commit scripts/bench.sh records the run under", "HEAD", "scripts/bench.sh"),
    _s(
        RUN_OUT_ENV,
        "where the asv suite's sweep writes its JSON lines",
        "results/runs/<machine>-<commit8>-<profile>[-fix-<arm>].jsonl",
        "benchmarks/, eagle-fix matrix",
    ),
    _s(
        PROGRESS_ENV,
        "a file the sweep appends one line per finished point to",
        "none (scripts/bench.sh sets one)",
        "eagle-fix run",
    ),
    _s(
        EXTRA_ENV,
        "the extra asv's virtualenv installs eagle-fix with: gpu or cpu",
        "gpu where nvidia-smi is on PATH, else cpu",
        "asv.conf.json",
    ),
    _s(
        MODE_ENV,
        "the plugin's mode in every vLLM process: auto (add what the engine lacks), off (the engine as "
        "installed), revert (the original bug on purpose)",
        "auto",
        "the plugin",
    ),
    _s(
        PIN_ENV,
        "0 leaves the engine's front end and engine core where the OS puts them",
        "1: moved off the workers' cores",
        "the engine child",
    ),
    _s(
        CACHE_DIR_ENV,
        "where the machine's measured limits are cached (a day, per fingerprint)",
        "$XDG_CACHE_HOME/eagle-fix, else ~/.cache/eagle-fix",
        "eagle-fix run, eagle-fix machine",
    ),
    _s(
        INJECT_SLOWDOWN_ENV,
        "every model step made (1 + F)x as long by spinning in the worker (the gate's "
        "calibration; refused where results are committed)",
        "0",
        "the plugin",
        "calibration",
    ),
    _s(
        INJECT_DELAY_ENV,
        "a fixed sleep (ms) before every model step (the older calibration files)",
        "0",
        "the plugin",
        "calibration",
    ),
    _s(
        INJECT_DRAFT_ERRORS_ENV,
        "each drafted token made wrong with seeded probability S (the acceptance gate's calibration: a "
        "partial, reproducible drafter loss in any regime; refused where results are committed)",
        "0",
        "the plugin",
        "calibration",
    ),
    _s(
        INJECT_DRAFT_SEED_ENV,
        "the seed of both drafter-damage knobs: one trial of the acceptance gate's calibration each",
        "0",
        "the plugin",
        "calibration",
    ),
    _s(
        INJECT_DRAFT_NOISE_ENV,
        "the drafter's input hidden states blurred by seeded noise of F x each row's RMS (the acceptance "
        "gate's calibration: a partial, reproducible drafter loss; refused where results are committed)",
        "0",
        "the plugin",
        "calibration",
    ),
    _s(
        PARENT_PID_ENV,
        "the parent's pid, so a child kills its process group when the parent is gone",
        "set by the parent",
        "the engine and server children",
        "internal",
    ),
    _s(
        ENGINE_LOG_ENV,
        "the child's own log file (compile and CUDA-graph lines)",
        "set by the parent",
        "the engine child",
        "internal",
    ),
    _s(
        VENV_ENV,
        "the venv a GPU workflow job runs asv in",
        "set by the workflow",
        ".github/workflows/gpu.yml",
        "internal",
    ),
    _s(
        RUNNER_STORE_ENV,
        "a repository variable: the folder, owned by the GPU runner's user, where the workflow keeps results and venvs between runs",
        "$HOME/.cache/eagle-fix of the runner",
        ".github/workflows/gpu.yml",
    ),
    _s(
        REAL_SHAPES_PROFILE_ENV,
        "the profile of the slow real-shape test: cpu-8b-l8 or cpu-8b",
        "cpu-8b-l8",
        "tests/sweep/test_real_shapes.py",
        "internal",
    ),
    _s(
        FAULT_TIMINGS_ENV,
        "a file the fault tests write each measured kill delay to",
        "none",
        "tests/engine/test_faults.py",
        "internal",
    ),
)
SETTING = {s.name: s for s in SETTINGS}


def get(name: str) -> str | None:
    """The value of a declared variable (a name not declared here is a bug, not a setting)."""
    if name not in SETTING:
        raise KeyError(f"{name} is not declared in eagle_fix.core.settings")
    return os.environ.get(name)


def parse_number(name: str, raw: str, *, hint: str, high: float = math.inf) -> float:
    """A knob's or flag's value as a number in [0, HIGH] (finite); a bad one is a one-line ValueError naming
    it and, in HINT, what to give (every calibration knob and --temperature read their values through here)."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number; {hint}") from None
    if not 0 <= value <= high or math.isinf(value):  # `not <=` also catches NaN
        bound = "a finite number >= 0" if math.isinf(high) else f"between 0 and {high:g}"
        raise ValueError(f"{name}={raw!r} must be {bound}; {hint}")
    return value
