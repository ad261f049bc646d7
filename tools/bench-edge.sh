#!/usr/bin/env bash
# bench-edge.sh — the edge engine (nebula-deploy edge + nebula-infer) beside ONNX Runtime's
# CPU provider and PyTorch 1.13 eager (`nebula-bench table edge` runs this). Models
# (validation/deploy/bench_edge_peer.py makes them): ResNet-18 CIFAR-style trained on
# sklearn's digits at 32x32 (held-out top-1), ResNet-50 at 224x224 and a GPT-2-style
# decoder (4 x 128, T=64), both random init (size, latency, memory only). Precisions: fp32,
# int8 (nebula calibrated per-channel vs ORT quantize_static QDQ per-channel on the same
# calibration samples; GPT-2: ORT quantize_dynamic), fp16 and auto (nebula only).
#
# The one design decision: every latency and peak-RSS figure comes from its own fresh
# process (nebula-infer --json; one Python process per ORT or PyTorch measurement, its
# ru_maxrss read after the runs, its baseline after the imports), and the engines are
# interleaved rep by rep, so a noisy neighbour on a shared machine hits every column alike.
# A cell is the median over --reps processes of each one's median of --runs timed runs.
#
# ORT's quantiser needs the `onnx` package, whose wheel needs numpy 2: it is installed on
# first use into ${NEBULA_PEERS_DIR:-~/.cache/nebula-peers}/edge-ort-<version> (ORT_EDGE_VERSION,
# default 1.32.0). Without it (no network) the ORT int8 cells read "-", ORT fp32 runs from
# build/venv, and a line "ort-int8: unavailable (...)" says why. arm64 rows: the same .neb
# files through build/aarch64/bin/nebula-infer under qemu-aarch64, output against x86-64's
# (correctness only). Markdown (--csv: CSV) to stdout; both into build/bench/edge.{md,csv}
# (--quick: edge-quick.*). The first line is the table's provenance.
#
# Usage: tools/bench-edge.sh [--reps N] [--runs N] [--threads "1 2"] [--models resnet18,resnet50,gpt2]
#                            [--quick] [--work DIR] [--no-venv] [--csv]
#   --quick   small models (ResNet-18 untrained at 16x16, ResNet-50 at 32x32, GPT-2 2 x 64, T=16), 1 rep
#             of 3 runs, 1 thread: checks the plumbing in well under a minute
#   --work    keep models, .neb files and raw measurements in DIR; models already there are reused
#   --no-venv leave the ORT quantisation venv out (as if offline): no ORT int8 cells
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "nebula-bench table edge: $*" >&2; exit 2; }
cmdline=$(printf '%q ' "$0" "$@")
reps=5 runs=20 threads="1 2" models=resnet18,resnet50,gpt2 quick=0 work='' novenv=0 csv=0
reps_set=0 runs_set=0 threads_set=0
while [ $# -gt 0 ]; do
    case $1 in
    --reps) [ $# -ge 2 ] || die "--reps needs a value"; reps=$2 reps_set=1; shift 2 ;;
    --runs) [ $# -ge 2 ] || die "--runs needs a value"; runs=$2 runs_set=1; shift 2 ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; threads=$2 threads_set=1; shift 2 ;;
    --models) [ $# -ge 2 ] || die "--models needs a value"; models=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; work=$2; shift 2 ;;
    --no-venv) novenv=1; shift ;;
    --csv) csv=1; shift ;;
    -h | --help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; expected --reps, --runs, --threads, --models, --quick, --work, --no-venv or --csv" ;;
    esac
done
if [ $quick = 1 ]; then
    [ $reps_set = 1 ] || reps=1
    [ $runs_set = 1 ] || runs=3
    [ $threads_set = 1 ] || threads=1
fi
for v in reps runs; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--$v must be a positive count, not '${!v}'"; done
for t in $threads; do [[ $t =~ ^[1-9][0-9]*$ ]] || die "--threads must list positive counts, not '$threads'"; done
[ -n "${threads// /}" ] || die "--threads must list at least one count"
IFS=, read -r -a names <<<"$models"
for m in "${names[@]}"; do
    case $m in resnet18 | resnet50 | gpt2) ;; *) die "--models: unknown model '$m' (resnet18, resnet50, gpt2)" ;; esac
done
for b in build/bin/nebula-deploy build/bin/nebula-infer build/bin/nebula-bench; do [ -x $b ] || die "$b is missing (make)"; done
PYT=/usr/bin/python3 PEER=validation/deploy/bench_edge_peer.py
v_torch=$($PYT -c 'import torch, torchvision, sklearn; print(torch.__version__)' 2>/dev/null) ||
    die "PyTorch, torchvision and sklearn are needed in $PYT (make deps)"
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
W=${work:-$tmp/work}
mkdir -p "$W" "$tmp/bin" build/bench
# private copies: a rebuild by someone else mid-run must not swap the binaries under the table
cp build/bin/nebula-deploy build/bin/nebula-infer "$tmp/bin/"
DEPLOY=$tmp/bin/nebula-deploy INFER=$tmp/bin/nebula-infer
log() { echo "nebula-bench table edge: [${SECONDS}s] $*" >&2; }

edge_venv() {  # prints the quantisation venv's python, installing it on first use; fails with a reason
    local version=${ORT_EDGE_VERSION:-1.32.0} root=${NEBULA_PEERS_DIR:-${HOME:-/tmp}/.cache/nebula-peers}
    local venv=$root/edge-ort-$version
    [ $novenv = 0 ] || { echo "--no-venv"; return 1; }
    if [ ! -f "$venv/complete" ]; then
        mkdir -p "$root" || { echo "cannot create $root"; return 1; }
        exec 9>"$root/.lock"
        flock 9  # two runs starting at once install once
        if [ ! -f "$venv/complete" ]; then
            rm -rf "$venv"
            log "installing onnxruntime==$version + onnx into $venv (about 250 MB, once)"
            $PYT -m venv "$venv" >&2 || { echo "python3 -m venv failed"; return 1; }
            "$venv/bin/pip" install --quiet --disable-pip-version-check --retries 1 --timeout 15 \
                "onnxruntime==$version" onnx numpy >"$tmp/pip.log" 2>&1 ||
                { rm -rf "$venv"; echo "pip install failed (offline?): $(tail -1 "$tmp/pip.log")"; return 1; }
            "$venv/bin/python" -c 'import onnx, onnxruntime.quantization' >&2 ||
                { rm -rf "$venv"; echo "onnxruntime.quantization does not import in $venv"; return 1; }
            touch "$venv/complete"
        fi
        exec 9>&-
    fi
    echo "$venv/bin/python"
}
PYQ='' PYO='' why_q=''
if out=$(edge_venv); then PYQ=$out PYO=$out; else why_q=$out; fi
if [ -z "$PYO" ] && build/venv/bin/python -c 'import onnxruntime' 2>/dev/null; then PYO=build/venv/bin/python; fi
v_ort=-
[ -n "$PYO" ] && v_ort=$("$PYO" -c 'import onnxruntime; print(onnxruntime.__version__)')

# ---- models, .neb files, ORT int8 models
quickflag=()
[ $quick = 1 ] && quickflag=(--quick)
todo=()
for m in "${names[@]}"; do  # reuse what --work DIR holds from a run of the same kind
    [ -f "$W/$m/info.json" ] && [ "$(cat "$W/$m/.quick" 2>/dev/null)" = "$quick" ] || todo+=("$m")
done
if [ ${#todo[@]} -gt 0 ]; then
    log "making ${todo[*]}${quickflag[*]:+ (quick)}"
    OMP_NUM_THREADS=2 $PYT $PEER models "$W" --names "$(IFS=,; echo "${todo[*]}")" "${quickflag[@]}" >"$W/models.log" 2>&1 ||
        { tail -5 "$W/models.log" >&2; die "bench_edge_peer.py models failed"; }
    for m in "${todo[@]}"; do echo "$quick" >"$W/$m/.quick"; done
fi
has_eval() { [ -f "$W/$1/eval.npy" ]; }
deploy() {  # deploy MODEL PRECISION -> $W/MODEL-PRECISION.neb, or $W/MODEL-PRECISION.fail with the reason
    local m=$1 q=$2 extra=()
    [ "$q" = none ] || extra=(--calib "$W/$m/calib.npy")
    if has_eval "$m" && [ "$q" != none ]; then extra+=(--eval "$W/$m/eval.npy" --labels "$W/$m/labels.npy"); fi
    rm -f "$W/$m-$q.fail"
    $DEPLOY edge --model "$W/$m/model.onnx" --output "$W/$m-$q.neb" --quantize "$q" "${extra[@]}" --threads 1 \
        >"$W/$m-$q.deploy.log" 2>&1 </dev/null || { tail -1 "$W/$m-$q.deploy.log" >"$W/$m-$q.fail"; rm -f "$W/$m-$q.neb"; }
}
precs=(none int8 fp16 auto)
for m in "${names[@]}"; do
    for q in "${precs[@]}"; do log "nebula-deploy $m --quantize $q"; deploy "$m" "$q"; done
    rm -f "$W/$m-ort-int8.onnx" "$W/$m-ort-int8.fail"
    if [ -n "$PYQ" ]; then
        qarg=(--calib "$W/$m/calib.npy")
        [ "$m" = gpt2 ] && qarg=(--dynamic)
        log "ORT quantize ${qarg[0]#--} $m"
        "$PYQ" $PEER quantize "$W/$m/model.onnx" "$W/$m-ort-int8.onnx" "${qarg[@]}" >"$W/$m-ort-int8.log" 2>&1 ||
            { tail -1 "$W/$m-ort-int8.log" >"$W/$m-ort-int8.fail"; rm -f "$W/$m-ort-int8.onnx"; }
    fi
done

R=$W/results.jsonl  # one line per measurement: {"tag": "ENGINE MODEL PRECISION THREADS", "m": {...}} or "fail"
: >"$R"
record() {  # record TAG: the last line of stdin, a JSON object, or else the failure it says
    local tag=$1 line
    line=$(tail -1)
    case $line in
    "{"*) echo "{\"tag\": \"$tag\", \"m\": $line}" >>"$R" ;;
    *) echo "{\"tag\": \"$tag\", \"fail\": $(printf '%s' "$line" | $PYT -c 'import json, sys; print(json.dumps(sys.stdin.read()))')}" >>"$R" ;;
    esac
}

# ---- arm64 under qemu: correctness only
A64=build/aarch64/bin/nebula-infer why_a64=''
if ! command -v qemu-aarch64 >/dev/null; then
    why_a64="qemu-aarch64 is missing (apt-get install qemu-user)"
elif command -v aarch64-linux-gnu-gcc >/dev/null && ! make -s aarch64-nano >"$tmp/a64.log" 2>&1 </dev/null; then
    why_a64="make aarch64-nano failed: $(tail -1 "$tmp/a64.log")"
elif [ ! -x $A64 ]; then
    why_a64="$A64 is missing and gcc-aarch64-linux-gnu is not installed (make aarch64-nano)"
fi
arm64_rows() {  # the same .neb files and inputs through the arm64 build: outputs against x86-64's
    cp $A64 "$tmp/bin/nebula-infer-a64"
    for m in "${names[@]}"; do
        for q in "${precs[@]}"; do
            [ -f "$W/$m-$q.neb" ] || continue
            log "qemu-aarch64: $m $q"
            $INFER "$W/$m-$q.neb" --input "$W/$m/input.npy" --output "$W/$m-$q.x86.npy" --repeat 1 --warmup 0 \
                --threads 1 >/dev/null 2>&1 </dev/null || true
            a64_out=$(qemu-aarch64 "$tmp/bin/nebula-infer-a64" "$W/$m-$q.neb" --input "$W/$m/input.npy" \
                --output "$W/$m-$q.a64.npy" --repeat 1 --warmup 0 --threads 1 2>&1 </dev/null) || true
            $PYT - "$W/$m-$q.x86.npy" "$W/$m-$q.a64.npy" "$a64_out" <<'PY' | record "a64 $m $q"
import json, os, re, sys
import numpy as np
x86, a64, text = sys.argv[1:4]
if not (os.path.exists(x86) and os.path.exists(a64)):
    print("no output: " + text.strip().splitlines()[-1] if text.strip() else "no output")
    sys.exit()
a, b = np.load(a64).astype(np.float64), np.load(x86).astype(np.float64)
scale = float(np.max(np.abs(b))) or 1.0
isa = re.search(r"isa (\S+?),", text)
print(json.dumps({"rel_diff": float(np.max(np.abs(a - b))) / scale, "argmax_same": bool(a.argmax() == b.argmax()),
                  "isa": isa.group(1) if isa else "?"}))
PY
        done
    done
}
a64_pid=''
if [ -z "$why_a64" ] && [ $quick = 1 ]; then  # --quick: beside the timings, which mean nothing there
    arm64_rows &
    a64_pid=$!
fi

# ---- timings: rep by rep, every engine in its own process
for t in $threads; do
    for rep in $(seq 1 "$reps"); do
        for m in "${names[@]}"; do
            log "threads $t, rep $rep/$reps: $m"
            in=$W/$m/input.npy
            for q in "${precs[@]}"; do
                [ -f "$W/$m-$q.neb" ] || continue
                OMP_NUM_THREADS=$t $INFER "$W/$m-$q.neb" --input "$in" --threads "$t" --repeat "$runs" --warmup 3 --json \
                    2>&1 </dev/null | record "nebula $m $q $t"
            done
            if [ -n "$PYO" ]; then
                OMP_NUM_THREADS=$t "$PYO" $PEER ort "$W/$m/model.onnx" --input "$in" --threads "$t" --runs "$runs" \
                    2>&1 </dev/null | record "ort $m none $t"
                [ -f "$W/$m-ort-int8.onnx" ] && OMP_NUM_THREADS=$t "$PYO" $PEER ort "$W/$m-ort-int8.onnx" --input "$in" \
                    --threads "$t" --runs "$runs" 2>&1 </dev/null | record "ort $m int8 $t"
            fi
            OMP_NUM_THREADS=$t $PYT $PEER torch "$W/$m/model.pt" --input "$in" --threads "$t" --runs "$runs" \
                2>&1 </dev/null | record "torch $m none $t"
        done
    done
done
bare_rss=$($PYT $PEER rss)
isa=$($INFER "$W/${names[0]}-none.neb" --repeat 1 --warmup 0 --json 2>/dev/null | $PYT -c 'import json, sys; print(json.load(sys.stdin)["isa"])' || echo unknown)

# ---- held-out accuracy (the models with an eval set)
for m in "${names[@]}"; do
    has_eval "$m" || continue
    log "held-out top-1: $m"
    ev=(--eval "$W/$m/eval.npy" --labels "$W/$m/labels.npy")
    for q in "${precs[@]}"; do
        [ -f "$W/$m-$q.neb" ] || continue
        $INFER "$W/$m-$q.neb" "${ev[@]}" --threads 1 2>&1 </dev/null |
            awk '/^top1 /{printf "{\"top1\": %s, \"samples\": %s}\n", $2, $4; f=1} END{if(!f) print "no top1 line"}' |
            record "top1 nebula $m $q"
    done
    if [ -n "$PYO" ]; then
        "$PYO" $PEER ort "$W/$m/model.onnx" "${ev[@]}" --threads 1 2>&1 </dev/null | record "top1 ort $m none"
        [ -f "$W/$m-ort-int8.onnx" ] && "$PYO" $PEER ort "$W/$m-ort-int8.onnx" "${ev[@]}" --threads 1 2>&1 </dev/null |
            record "top1 ort $m int8"
    fi
done

if [ -n "$a64_pid" ]; then wait "$a64_pid"; elif [ -z "$why_a64" ]; then arm64_rows; fi

# ---- the tables
prov=$(build/bin/nebula-bench provenance --format markdown --command "${cmdline% }" --param reps="$reps" --param runs="$runs" \
    --param threads="$threads" --param models="$models" --param quick="$quick" --param onnxruntime="$v_ort" \
    --param torch="$v_torch" </dev/null 2>"$tmp/provenance.log" | grep -E '^(# |<!-- )provenance: ') ||
    { tail -5 "$tmp/provenance.log" >&2; die "nebula-bench provenance failed"; }
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
export EDGE_W=$W EDGE_MODELS=$models EDGE_THREADS=$threads EDGE_REPS=$reps EDGE_RUNS=$runs EDGE_ORT=$v_ort
export EDGE_TORCH=$v_torch EDGE_ISA=$isa EDGE_CPU=$cpu EDGE_BARE_RSS=$bare_rss EDGE_WHY_Q=$why_q EDGE_WHY_A64=$why_a64
EDGE_DATE=$(date -u +%Y-%m-%dT%H:%MZ)
export EDGE_PYO=$PYO EDGE_QUICK=$quick EDGE_DATE
base=build/bench/edge; [ $quick = 1 ] && base=build/bench/edge-quick
prov_json=${prov#*provenance: } prov_json=${prov_json% -->} prov_json=${prov_json%-->}
{ echo "<!-- provenance: $prov_json -->"; $PYT $PEER table markdown; } >"$base.md"
{ echo "# provenance: $prov_json"; $PYT $PEER table csv; } >"$base.csv"
if [ $csv = 1 ]; then cat "$base.csv"; else cat "$base.md"; fi
log "written: $base.md, $base.csv${work:+; measurements in $W}"
