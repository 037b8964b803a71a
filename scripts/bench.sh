#!/usr/bin/env bash
# The main job: the asv suite on the real vLLM engine, then the dashboard and the report.
#   scripts/bench.sh                               profile from EAGLE_FIX_PROFILE (default here: cpu,
#                                                  the full 8k-128k CPU sweep with the tiny trained pair)
#   EAGLE_FIX_PROFILE=cpu-quick scripts/bench.sh   8k only, a few minutes
# Extra arguments go to `asv run` (e.g. --bench Sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/asv ] || { echo "bench: .venv missing; run scripts/setup.sh first" >&2; exit 1; }
export EAGLE_FIX_PROFILE=${EAGLE_FIX_PROFILE:-$(.venv/bin/python -c 'from eagle_fix.models import default_profile_name as d; print(d())')}
echo "bench: profile $EAGLE_FIX_PROFILE"
.venv/bin/python scripts/asv_machine.py >/dev/null
# -E existing: run in .venv (vLLM already there); --set-commit-hash: without it asv saves nothing.
.venv/bin/asv run -E "existing:$PWD/.venv/bin/python" --set-commit-hash "$(git rev-parse HEAD)" \
    --launch-method spawn --show-stderr "$@"
.venv/bin/asv publish
.venv/bin/eagle-fix report results --out html/eagle-fix
echo "bench: dashboard in html/ (asv preview), report in html/eagle-fix/report.md"
