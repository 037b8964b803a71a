#!/usr/bin/env bash
# Calibrate the gate on this machine (docs/statistics.md): `eagle-fix ab` with its defaults (rounds,
# sample length, blocks, threshold), TRIALS times on identical sides (A/A: every alarm is false) and TRIALS times with the new
# side slowed by EAGLE_FIX_INJECT_SLOWDOWN (every model step made that much longer by spinning: an
# alarm is a detection), alternating, each trial with fresh engines.
#   scripts/calibrate.sh [TRIALS]                 default 10
#   CALIBRATE_SLOWDOWNS="0.05 0.1" scripts/calibrate.sh    slowdowns tried (default: 0.05)
#   CALIBRATE_POINT="--modes eager --arms eagle3"          the point (default: cpu-quick, 8K eager EAGLE3);
#                  other `ab` flags go here too (--output-len, --rounds, --blocks: a candidate setting, not the defaults)
#   CALIBRATE_OUT=results/calibration/<name>               where (default: results/calibration/gate, the
#                  trials the defaults are held to; a candidate setting goes elsewhere)
# Writes $CALIBRATE_OUT/<slowdown>-<trial>.json (slowdown 0 is the A/A); skips files that
# exist, so a stopped calibration resumes. Run it alone on the machine: other work is noise.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/calibrate.sh [TRIALS]   (TRIALS: trials per slowdown, default 10; settings in this script's header)"
case "${1:-}" in -h | --help) echo "$usage"; exit 0 ;; esac
[ $# -le 1 ] || { echo "calibrate: $# arguments; it takes one, TRIALS (see --help)" >&2; exit 2; }
trials=${1:-10}
# every argument checked before a folder is made or an engine starts (#56)
[[ "$trials" =~ ^[0-9]+$ && "$trials" -ge 1 && "$trials" -le 99 ]] ||
    { echo "calibrate: TRIALS '$trials' is not a number of trials from 1 to 99, such as 10" >&2; exit 2; }
trials=$((10#$trials))
slowdowns=${CALIBRATE_SLOWDOWNS:-0.05}
for s in $slowdowns; do
    [[ "$s" =~ ^(0?\.[0-9]*[1-9][0-9]*|[1-9][0-9]*(\.[0-9]+)?)$ ]] ||
        { echo "calibrate: CALIBRATE_SLOWDOWNS '$s' is not a slowdown above 0 such as 0.05 (0, the A/A, is always run)" >&2; exit 2; }
done
out=${CALIBRATE_OUT:-results/calibration/gate}
point=${CALIBRATE_POINT:---modes eager --arms eagle3}
py=.venv/bin/python
# one machine per folder: exit 2 with the fix when it holds another machine's trials
"$py" -m eagle_fix.gate.calibration --resume-check "$out" || exit 2
mkdir -p "$out"
start=$(date +%s)
# two digits always (01..): a shorter second run (TRIALS 3 after 10) names the same files, so it
# skips the trials that exist instead of adding new ones under other names
for i in $(seq -f %02g 1 "$trials"); do
    for s in 0 $slowdowns; do
        f="$out/$s-$i.json"
        [ -f "$f" ] && continue
        env_args=(); [ "$s" = 0 ] || env_args=(--new-env "EAGLE_FIX_INJECT_SLOWDOWN=$s")
        # shellcheck disable=SC2086  # $point is a list of flags
        .venv/bin/eagle-fix ab --base-python "$py" --new-python "$py" --profile cpu-quick $point "${env_args[@]}" \
            --out "$f.partial" > "$out/.last.log" 2>&1
        rc=$?
        if [ -f "$f.partial" ]; then mv "$f.partial" "$f"; fi
        echo "calibrate: slowdown $s trial $i exit $rc ($(( $(date +%s) - start )) s)"
    done
done
echo "calibrate: done in $(( $(date +%s) - start )) s"
