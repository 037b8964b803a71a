#!/usr/bin/env bash
# The main job: the asv suite on the real vLLM engine, then the dashboard and the report.
#   scripts/bench.sh                               profile from EAGLE_FIX_PROFILE (default here: cpu,
#                                                  the full 8k-128k CPU sweep with the tiny trained pair)
#   EAGLE_FIX_PROFILE=cpu-quick scripts/bench.sh   8k only, a few minutes (on CUDA the default is gpu-quick)
#   EAGLE_FIX_ASV_FIX=off scripts/bench.sh         record the original bug (fix off) instead
#   EAGLE_FIX_ASV_CONFIG=FILE                      another asv config (the tests use one in a scratch folder)
#   EAGLE_FIX_COMMIT=SHA                           the commit to record under (default: HEAD)
#   EAGLE_FIX_ASV_RECORDS=FILE                     record an earlier `eagle-fix run` of this machine and
#                                                  release (no engine): replay, docs/releases.md
# Extra arguments go to `asv run` (e.g. --bench Sweep).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set -/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
# asv runs setup_cache elsewhere: a file named relative to here must reach it as an absolute path.
if [ -n "${EAGLE_FIX_ASV_RECORDS:-}" ]; then
    records=$(realpath -e -- "$EAGLE_FIX_ASV_RECORDS" 2>/dev/null) \
        || { echo "bench: EAGLE_FIX_ASV_RECORDS=$EAGLE_FIX_ASV_RECORDS: no such file; give the JSON lines of an \`eagle-fix run\`" >&2; exit 1; }
    export EAGLE_FIX_ASV_RECORDS=$records
fi
cd "$(dirname "$0")/.."
[ -x .venv/bin/asv ] || { echo "bench: .venv missing; run scripts/setup.sh first" >&2; exit 1; }
conf=${EAGLE_FIX_ASV_CONFIG:-asv.conf.json}
# On CUDA the quick grid (gpu-quick, as cpu-quick is to cpu; EAGLE_FIX_PROFILE=gpu-dummy runs the whole grid).
export EAGLE_FIX_PROFILE=${EAGLE_FIX_PROFILE:-$(.venv/bin/python -c 'from eagle_fix.pairs.profiles import cuda_available, default_profile; print("gpu-quick" if cuda_available() else default_profile("run"))')}
[ "$EAGLE_FIX_PROFILE" != gpu-quick ] || echo "bench: $(.venv/bin/python -m eagle_fix.releases.gpu_estimate gpu-quick 2>&1)"
export ASV_COMMIT=${EAGLE_FIX_COMMIT:-$(git rev-parse HEAD)}
# A profile this machine cannot run (a CUDA profile without a GPU) is one line here, before asv starts.
.venv/bin/python -c 'import sys
from eagle_fix.core.errors import EagleFixError
from eagle_fix.pairs.profiles import get_profile
try:
    get_profile(sys.argv[1]).check_runs_here()
except EagleFixError as exc:
    sys.exit(f"bench: {exc}")' "$EAGLE_FIX_PROFILE"
echo "bench: profile $EAGLE_FIX_PROFILE, fix ${EAGLE_FIX_ASV_FIX:-on}, machine $(.venv/bin/python scripts/asv_machine.py --name)"
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
.venv/bin/asv --config "$conf" run -E "existing:$PWD/.venv/bin/python" --set-commit-hash "$ASV_COMMIT" \
    --launch-method spawn --show-stderr "$@" || status=$?
# Label the run's results (engine, fix, workload, samples), publish the dashboard, write the report.
# A failing publish or report loses nothing measured: asv's results and the JSON lines are written.
published=0
.venv/bin/eagle-fix publish --config "$conf" --commit "$ASV_COMMIT" || published=$?
if [ "$published" -ne 0 ]; then
    echo "bench: eagle-fix publish exited $published; the results are kept (rerun: .venv/bin/eagle-fix publish --config $conf --commit $ASV_COMMIT)" >&2
    [ "$status" -ne 0 ] || status=$published
else
    echo "bench: dashboard and report published (.venv/bin/asv preview serves the dashboard)"
fi
[ "$status" -eq 0 ] || echo "bench: asv run exited $status (2: some benchmarks failed; they are on the dashboard as failed)" >&2
# The report's first screen last: the answers (fix A/B, realistic regime beside the ceiling, the gate's plan).
[ "$published" -ne 0 ] || .venv/bin/python -m eagle_fix.publish.bench_summary --config "$conf" || true
exit "$status"
