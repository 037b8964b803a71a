#!/usr/bin/env bash
# The GPU runner's kept folders (.github/workflows/gpu.yml), in one place: actions/checkout cleans every
# ignored file, so what outlives a job (the results of earlier runs, the venvs of each vLLM release) lives
# in a folder the runner's user owns, $RUNNER_STORE or by default $HOME/.cache/eagle-fix.
#
#   scripts/runner_store.sh prepare [--pr]   make STORE/results and STORE/venvs (STORE/venvs-pr for a pull
#                                            request: a branch's dependencies never land in main's venvs);
#                                            print RESULTS_STORE=... and VENV_STORE=..., also appended to
#                                            $GITHUB_ENV when that is set
#   scripts/runner_store.sh restore          copy STORE/results into results/; files already there win
#   scripts/runner_store.sh keep             copy results/ into STORE/results (main's runs, for later gates)
#
# Preparing a runner is nothing more than this: its user must be able to create STORE (the default needs
# only a home folder), or the repository variable EAGLE_FIX_RUNNER_STORE names a folder it owns.
set -euo pipefail
cd "$(dirname "$0")/.."
store=${RUNNER_STORE:-${HOME:?runner_store: no HOME; set RUNNER_STORE to a folder the runner owns}/.cache/eagle-fix}
fail() { echo "runner_store: $*" >&2; exit 1; }
case "$store" in
  /*) ;;
  *) fail "RUNNER_STORE '$store' is not an absolute path; give one, e.g. \$HOME/.cache/eagle-fix" ;;
esac
user=$(id -un)
writable() {  # make a folder, or say in one line why it cannot be made and how to fix it
  mkdir -p "$1" 2>/dev/null && [ -w "$1" ] ||
    fail "cannot write $1 as $user; run 'sudo install -d -o $user $store' once, or set the repository variable EAGLE_FIX_RUNNER_STORE to a folder $user owns"
}
what=${1:-}
case "$what" in
  -h | --help) sed -n '2,/^set -/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  prepare)
    venvs=venvs
    [ "${2:-}" = --pr ] && venvs=venvs-pr
    writable "$store/results"
    writable "$store/$venvs"
    lines="RESULTS_STORE=$store/results"$'\n'"VENV_STORE=$store/$venvs"
    echo "$lines"
    if [ -n "${GITHUB_ENV:-}" ]; then echo "$lines" >> "$GITHUB_ENV"; fi
    ;;
  restore)
    writable "$store/results"
    mkdir -p results
    # tar's --skip-old-files skips a file the checkout has with exit 0, where `cp -rn` exits 1 on a
    # skipped file in some coreutils releases
    tar -C "$store/results" -cf - . | tar -C results -xf - --skip-old-files
    ;;
  keep)
    writable "$store/results"
    [ -d results ] || fail "no results/ in $PWD to keep"
    cp -r results/. "$store/results"/
    ;;
  *)
    fail "give prepare [--pr], restore or keep, not '${what}'"
    ;;
esac
