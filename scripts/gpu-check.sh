#!/usr/bin/env bash
# The first GPU run in one command (eagle_fix/releases/gpu_check.py, docs/gpu-check.md): on one GPU with vLLM's
# CUDA build (scripts/setup.sh --gpu), in 11-15 minutes (an estimate: 5 calls of at most 5 minutes each), every
# question a CUDA claim in the docs rests on:
# the hook test, the doctor, gpu-tiny's fix A/B at 8K, one gpu-dummy point (in-worker memory, NVML, the step
# clock), a damaged drafter, the gate's noise, and the probe (NVML's structs, CUDA events) -> one summary file,
# results/gpu-check/<machine>-cuda.json.
#
#   scripts/gpu-check.sh [--only STEPS|GROUPS] [--skip STEPS] [--records STEP=FILE] [--out FILE] [--deadline S]
#   scripts/gpu-check.sh --only setup --deadline 270    one call of a first GPU visit (docs/gpu-check.md)
#   scripts/gpu-check.sh --rehearse     the same on a CPU machine with the CPU twin (cpu-quick): CI runs it
#   scripts/gpu-check.sh --torch-only   only the probe: a GPU box with torch and no vLLM (python3, or PYTHON)
set -uo pipefail
cd "$(dirname "$0")/.."
rehearse=0; torch_only=0; dry=0; out=""; prev=""
for a in "$@"; do
  case "$a" in
    --rehearse) rehearse=1 ;;
    --torch-only) torch_only=1 ;;
    --dry-run) dry=1 ;;
    -h | --help) sed -n '2,/^set -/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  esac
  [ "$prev" = --out ] && out=$a
  prev=$a
done
if [ "$rehearse$dry" = 00 ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: no GPU here (no nvidia-smi on PATH); on a CPU machine rehearse it: scripts/gpu-check.sh --rehearse" >&2
  exit 1
fi
if [ "$torch_only" = 1 ]; then
  # no project venv needed: the probe imports torch, nvidia-ml-py where installed, and eagle_fix.machine from here
  out=${out:-results/gpu-check/probe-$(hostname -s 2>/dev/null || echo host).json}
  # the file checked before the probe runs; written whole (a file beside it, then renamed) once it answered
  if [ -d "$out" ]; then
    echo "gpu-check: --out $out is a folder; give a file path such as ${out%/}/probe.json" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$out")" && [ -w "$(dirname "$out")" ] \
    || { echo "gpu-check: --out $out is not writable; choose a path you can write to" >&2; exit 1; }
  tmp="$(dirname "$out")/.$(basename "$out").$$.tmp"
  "${PYTHON:-python3}" -m eagle_fix.machine.cuda_probe > "$tmp" || { rc=$?; rm -f "$tmp"; exit $rc; }
  mv -f "$tmp" "$out"
  echo "gpu-check: probe -> $out" >&2
  cat "$out"
  exit 0
fi
PY=${PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  echo "gpu-check: no $PY; set up first: scripts/setup.sh --gpu (on a CPU machine: scripts/setup.sh)" >&2
  exit 1
fi
exec "$PY" -m eagle_fix.cli gpu-check "$@"
