#!/usr/bin/env bash
# bench-fed.sh — nebula-fed's round time beside the same round in PyTorch (`nebula-bench
# table fed` runs this): sklearn's digits at 8x8 over --clients IID clients, --per-round
# drawn per round, each taking 5 local SGD steps of 16 on the MLP with --hidden units,
# FedAvg on the server; then the same with sample-level DP-SGD in the local steps
# (dp.sample_clip 1, dp.sample_noise 1: Poisson batches, per-example clipping, noise).
# The peer (validation/reference/fed_peer.py) runs that round in one PyTorch process:
# plain autograd for FedAvg, vmap over grad for the per-example gradients (functorch in
# PyTorch 1.13, torch.func in 2.x). Everything in one process with one thread
# (nebula-fed without mpirun: the clients on rank 0). Seconds per round: the median of
# rounds 2..--rounds of a run, then the median of --reps runs. The PyTorch 2.x column
# needs tools/peers/torch2-venv.sh (installs on first use, about 3.5 GB); --no-torch2 leaves
# it out. The first line is the table's provenance.
#
# Usage: tools/bench-fed.sh [--clients K] [--per-round M] [--rounds R] [--hidden H]
#                           [--reps N] [--no-torch2] [--csv]
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "nebula-bench table fed: $*" >&2; exit 2; }
cmdline=$(printf '%q ' "$0" "$@")
clients=100 per_round=30 rounds=12 hidden=64 reps=3 torch2=1 csv=0
while [ $# -gt 0 ]; do
    case $1 in
    --clients) [ $# -ge 2 ] || die "--clients needs a value"; clients=$2; shift 2 ;;
    --per-round) [ $# -ge 2 ] || die "--per-round needs a value"; per_round=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; rounds=$2; shift 2 ;;
    --hidden) [ $# -ge 2 ] || die "--hidden needs a value"; hidden=$2; shift 2 ;;
    --reps) [ $# -ge 2 ] || die "--reps needs a value"; reps=$2; shift 2 ;;
    --no-torch2) torch2=0; shift ;;
    --csv) csv=1; shift ;;
    -h | --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1'; expected --clients, --per-round, --rounds, --hidden, --reps, --no-torch2 or --csv" ;;
    esac
done
for v in clients per_round hidden reps; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v/_/-} must be a positive count, not '${!v}'"
done
[[ $rounds =~ ^[0-9]+$ && $rounds -ge 2 ]] || die "--rounds must be 2 or more (the first is warm-up), not '$rounds'"
[ "$per_round" -le "$clients" ] || die "--per-round ($per_round) must not exceed --clients ($clients)"
FED=build/bin/nebula-fed
[ -x $FED ] || die "$FED is missing (make)"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d -p "${TMPDIR:-/tmp}")
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 validation/reference/train_ref.py digits "$tmp" 8 >/dev/null
/usr/bin/python3 -c 'import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
np.savez(sys.argv[2], images=f["images"][:], labels=f["labels"][:])' "$tmp/train.h5" "$tmp/train.npz"
py2=
if [ $torch2 = 1 ]; then
    py2=$(tools/peers/torch2-venv.sh) || die "tools/peers/torch2-venv.sh failed (--no-torch2 leaves PyTorch 2.x out)"
fi
v1=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)')
v2=-
[ -n "$py2" ] && v2=$("$py2" -c 'import torch; print(torch.__version__)')
fmt=markdown; [ $csv = 1 ] && fmt=csv
build/bin/nebula-bench provenance --format $fmt --command "${cmdline% }" --param clients="$clients" \
    --param per_round="$per_round" --param rounds="$rounds" --param hidden="$hidden" --param reps="$reps" \
    --param torch="$v1" --param torch2="$v2" </dev/null 2>"$tmp/provenance.log" |
    grep -E '^(# |<!-- )provenance: ' ||
    { echo "nebula-bench table fed: nebula-bench provenance failed:" >&2; tail -5 "$tmp/provenance.log" >&2; exit 1; }

median_rounds() {  # the median of round_s over rounds 2.. of the peer's output on stdin
    /usr/bin/python3 -c 'import re, statistics, sys
t = [float(m.group(1)) for m in re.finditer(r"^round=\d+ .*?round_s=([0-9.]+)", sys.stdin.read(), re.M)]
print(statistics.median(t[1:]) if len(t) > 1 else "nan")'
}
nebula() {  # nebula MODE -> seconds per round
    local dp=() out
    [ "$1" = dpsgd ] && dp=(--set dp.sample_clip=1 --set dp.sample_noise=1)
    out=$($FED --config configs/fed/digits-mlp-dp.ini --dp off --data "$tmp/train.h5" --val "" --clients "$clients" \
        --set fed.sampling=fixed --set fed.clients_per_round="$per_round" --set fed.partition=iid \
        --set model.mlp_hidden="$hidden" --rounds "$rounds" --set fed.eval_every=0 --set fed.threads=1 \
        --run-dir "$tmp/run" "${dp[@]}" </dev/null 2>&1) ||
        { echo "nebula-bench table fed: nebula-fed failed:" >&2; tail -5 <<<"$out" >&2; exit 1; }
    /usr/bin/python3 -c 'import json, statistics, sys  # round_ms at full precision (stdout rounds to 1 ms)
t = [json.loads(l)["round_ms"] / 1e3 for l in open(sys.argv[1]) if "\"fed_round\"" in l]
print(statistics.median(t[1:]))' "$tmp/run/metrics.jsonl"
    rm -rf "$tmp/run"
}
peer() {  # peer PYTHON MODE -> seconds per round
    local py=$1 dp=() out
    [ "$2" = dpsgd ] && dp=(--dpsgd 1 1)
    out=$("$py" validation/reference/fed_peer.py "$tmp/train.npz" --clients "$clients" --per-round "$per_round" \
        --rounds "$rounds" --local-steps 5 --batch 16 --hidden "$hidden" --lr 0.1 "${dp[@]}" 2>&1) ||
        { echo "nebula-bench table fed: the PyTorch peer ($py) failed:" >&2; tail -5 <<<"$out" >&2; exit 1; }
    median_rounds <<<"$out"
}
if [ $csv = 1 ]; then
    echo "round,nebula_s,torch_${v1}_s,torch_${v2}_s,ratio_torch,ratio_torch2"
else
    echo "| round ($clients clients, $per_round per round, 5 steps of 16, MLP $hidden) | nebula-fed s/round | PyTorch $v1 s/round | PyTorch $v2 s/round | PyTorch $v1 / nebula-fed | PyTorch $v2 / nebula-fed |"
    echo "|---|---:|---:|---:|---:|---:|"
fi
for mode in fedavg dpsgd; do
    : >"$tmp/rows"
    for _ in $(seq 1 "$reps"); do  # interleaved: a noisy neighbour hits every column alike
        a=$(nebula $mode) b=$(peer /usr/bin/python3 $mode) c=nan
        [ -n "$py2" ] && c=$(peer "$py2" $mode)
        echo "$a $b $c" >>"$tmp/rows"
    done
    /usr/bin/python3 - "$mode" "$csv" "$tmp/rows" <<'PY'
import math, statistics, sys
mode, csv, rows = sys.argv[1], sys.argv[2] == "1", [[float(v) for v in l.split()] for l in open(sys.argv[3])]
med = [statistics.median(r[k] for r in rows) for k in range(3)]
name = "FedAvg, plain local SGD" if mode == "fedavg" else "FedAvg, DP-SGD local steps (per-example clip + noise)"
f = lambda v: "-" if math.isnan(v) else f"{v:.4f}"
g = lambda v: "-" if math.isnan(v) else f"{v / med[0]:.2f}x"
cells = [name, f(med[0]), f(med[1]), f(med[2]), g(med[1]), g(med[2])]
print(",".join(c.replace(",", ";") for c in cells) if csv else "| " + " | ".join(cells) + " |")
PY
done
