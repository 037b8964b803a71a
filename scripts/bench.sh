#!/usr/bin/env bash
# The main job: the asv suite on the real vLLM engine, then the dashboard and the report.
#   scripts/bench.sh                               profile from EAGLE_FIX_PROFILE (default here: cpu,
#                                                  the full 8k-128k CPU sweep with the tiny trained pair)
#   EAGLE_FIX_PROFILE=cpu-quick scripts/bench.sh   8k only, a few minutes
#   EAGLE_FIX_ASV_FIX=off scripts/bench.sh         record the original bug (fix off) instead
# Extra arguments go to `asv run` (e.g. --bench Sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/asv ] || { echo "bench: .venv missing; run scripts/setup.sh first" >&2; exit 1; }
export EAGLE_FIX_PROFILE=${EAGLE_FIX_PROFILE:-$(.venv/bin/python -c 'from eagle_fix.models import default_profile_name as d; print(d())')}
echo "bench: profile $EAGLE_FIX_PROFILE, machine $(.venv/bin/python scripts/asv_machine.py --name)"
# asv shows a benchmark's output only when it ends: the sweep also appends one line per point to
# this file, followed here so the long setup_cache shows its progress.
progress=$(mktemp -t eagle-fix-progress.XXXXXX)
export EAGLE_FIX_PROGRESS=$progress
tail -n +1 -f "$progress" &
follower=$!
trap 'kill $follower 2>/dev/null; rm -f "$progress"' EXIT
# -E existing: run in .venv (vLLM already there); --set-commit-hash: without it asv saves nothing.
# asv exits 2 when a benchmark failed (a failed point is a failed benchmark): publish it anyway.
status=0
.venv/bin/asv run -E "existing:$PWD/.venv/bin/python" --set-commit-hash "$(git rev-parse HEAD)" \
    --launch-method spawn --show-stderr "$@" || status=$?
.venv/bin/asv publish
if [ -d build/asv-js ]; then
    .venv/bin/python -c 'import sys; from eagle_fix.report import localize_dashboard as l; print("bench: dashboard self-contained (%d CDN references replaced)" % l(sys.argv[1]))' html
else
    echo "bench: build/asv-js/ is missing, so the dashboard loads its JavaScript from CDNs; for an offline box run scripts/setup-browser.sh, then this again"
fi
# A report that fails loses nothing measured (asv's results and the JSON lines are written): say so,
# and exit with asv's status when asv failed, else with the report's.
report=0
.venv/bin/eagle-fix report results --out html/eagle-fix || report=$?
if [ "$report" -eq 0 ]; then
    echo "bench: dashboard in html/ (.venv/bin/asv preview), report in html/eagle-fix/report.md"
else
    echo "bench: eagle-fix report exited $report; the results are kept (rerun: .venv/bin/eagle-fix report results --out html/eagle-fix)" >&2
    [ "$status" -ne 0 ] || status=$report
fi
[ "$status" -eq 0 ] || echo "bench: asv run exited $status (2: some benchmarks failed; they are on the dashboard as failed)" >&2
exit "$status"
