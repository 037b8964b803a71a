#!/usr/bin/env bash
# Calibrate the acceptance gate on this machine (docs/statistics.md, "The acceptance gate's power"):
# `eagle-fix run` at its defaults (cpu-quick: 512 tokens out, k = 3, greedy), eager EAGLE3 with the fix,
# once undamaged per A/A trial and TRIALS times per share with the drafter damaged by
# EAGLE_FIX_INJECT_DRAFT_ERRORS=<share> under EAGLE_FIX_INJECT_DRAFT_SEED=<trial> (each trial one
# engine launch covering every context). Then the table: each trial judged against 0-01 by the gate's
# own acceptance test.
#   scripts/calibrate_acceptance.sh [TRIALS]          default 10
#   CALIBRATE_SHARES="0.01 0.02 0.05"                 shares of drafted tokens made wrong
#   CALIBRATE_AA=3                                    undamaged runs (the first is the base)
#   CALIBRATE_CONTEXTS=8192,32768                     contexts (one engine per launch serves them all)
#   CALIBRATE_OUT=results/calibration/acceptance      where; files that exist are skipped (resumable)
#   CALIBRATE_PROFILE=cpu-quick                       the regime: cpu-quick (the best case) or cpu-chat
#                                                     (the realistic one; its own CALIBRATE_OUT, e.g.
#                                                     results/calibration/acceptance-chat)
#   CALIBRATE_TEMPERATURE=0                           above 0: sampled, each run its own draws on the same
#                                                     prompts (--sampling-seed <trial>), so the A/A runs are
#                                                     real repeats (e.g. 0.7 into acceptance-chat-sampled)
# Acceptance counts do not depend on the machine's speed, but run it alone anyway: it is engine work.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h | --help) sed -n '2,/^set -uo/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -le 1 ] || { echo "calibrate_acceptance: $# arguments; it takes one, TRIALS (see --help)" >&2; exit 2; }
trials=${1:-10}
shares=${CALIBRATE_SHARES:-0.01 0.02 0.05}
aa=${CALIBRATE_AA:-3}
# every argument checked before a folder is made or an engine starts (#56)
[[ "$trials" =~ ^[0-9]+$ && "$trials" -ge 1 && "$trials" -le 99 ]] ||
    { echo "calibrate_acceptance: TRIALS '$trials' is not a number of trials from 1 to 99, such as 10" >&2; exit 2; }
[[ "$aa" =~ ^[0-9]+$ && "$aa" -ge 1 && "$aa" -le 99 ]] ||
    { echo "calibrate_acceptance: CALIBRATE_AA '$aa' is not a number of undamaged runs from 1 to 99, such as 3" >&2; exit 2; }
for s in $shares; do
    [[ "$s" =~ ^(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)$ ]] ||
        { echo "calibrate_acceptance: CALIBRATE_SHARES '$s' is not a share above 0 and at most 1, such as 0.05" >&2; exit 2; }
done
out=${CALIBRATE_OUT:-results/calibration/acceptance}
mkdir -p "$out"
contexts=${CALIBRATE_CONTEXTS:-8192,32768}
profile=${CALIBRATE_PROFILE:-cpu-quick}
temperature=${CALIBRATE_TEMPERATURE:-0}
start=$(date +%s)
for i in $(seq -f %02g 1 "$trials"); do
    for s in 0 $shares; do
        f="$out/$s-$i.jsonl"
        [ -f "$f" ] && continue
        [ "$s" = 0 ] && [ $((10#$i)) -gt "$aa" ] && continue
        rm -f "$f.part"
        if [ "$s" = 0 ]; then knobs=(); else
            knobs=(EAGLE_FIX_INJECT_DRAFT_ERRORS="$s" EAGLE_FIX_INJECT_DRAFT_SEED="$((10#$i))"); fi
        draws=(--temperature "$temperature")
        [ "$temperature" != 0 ] && draws+=(--sampling-seed "$((10#$i))")
        echo "calibrate-acceptance: share $s trial $i ($(( $(date +%s) - start )) s so far)"
        env "${knobs[@]}" .venv/bin/eagle-fix run --profile "$profile" --contexts "$contexts" --modes eager \
            --arms eagle3 --fix on --repeats 1 "${draws[@]}" --out "$f.part" --log-dir "${TMPDIR:-/tmp}/eagle-fix-calibrate-acceptance-logs" \
            --no-progress || exit $?
        mv "$f.part" "$f"
    done
done
.venv/bin/python -m eagle_fix.gate.acceptance_power "$out"
echo "calibrate-acceptance: done in $(( $(date +%s) - start )) s"
