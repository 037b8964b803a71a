#!/usr/bin/env bash
# Calibrate the gate on this machine (docs/statistics.md): false alarms of identical sides (A/A) and
# the smallest injected per-step delay `eagle-fix ab` flags at every cpu-quick point (power).
#   scripts/calibrate.sh [DELAYS_MS...]      default delays: 0.5 1 2
#   CALIBRATE_MODES=eager,compile scripts/calibrate.sh   both modes (default: eager; a compiled
#                                                        engine start costs minutes on 2 cores)
# Writes results/calibration/: aa.json, delay-<ms>.json (eagle-fix ab), run-a/run-b.jsonl (two
# cpu-quick runs of one commit, some minutes apart) and compare-a-b.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=results/calibration
mkdir -p "$out"
py=.venv/bin/python
delays=("$@"); [ ${#delays[@]} -gt 0 ] || delays=(0.5 1 2)
modes=${CALIBRATE_MODES:-eager}
# ab's default rounds: the fewest with which its sign test can reach its level at all (fewer rounds
# could only say inconclusive, so they would calibrate nothing)
ab() { .venv/bin/eagle-fix ab --base-python "$py" --new-python "$py" --profile cpu-quick --modes "$modes" "$@"; }
start=$(date +%s)
[ -f "$out/run-a.jsonl" ] || .venv/bin/eagle-fix run --profile cpu-quick --modes "$modes" --out "$out/run-a.jsonl" --no-progress
[ -f "$out/aa.json" ] || ab --out "$out/aa.json"; echo "calibrate: A/A exit $?"
for d in "${delays[@]}"; do
    [ -f "$out/delay-$d.json" ] || ab --new-env "EAGLE_FIX_INJECT_STEP_DELAY_MS=$d" --out "$out/delay-$d.json"
    echo "calibrate: delay $d ms exit $?"
done
[ -f "$out/run-b.jsonl" ] || .venv/bin/eagle-fix run --profile cpu-quick --modes "$modes" --out "$out/run-b.jsonl" --no-progress
.venv/bin/eagle-fix compare "$out/run-a.jsonl" "$out/run-b.jsonl" > "$out/compare-a-b.txt"; echo "calibrate: compare run-a run-b exit $?"
echo "calibrate: done in $(( $(date +%s) - start )) s"
