#!/usr/bin/env bash
# DGC-Pro converges like dense training (2 virtual nodes x 1 rank, so every gradient
# crosses the compressed link), at 99.9% final sparsity and >= 100x less gradient traffic
# over the whole run, warm-up included, within 1% of the dense run with the same steps
# (the issue's target):
#   resnet  ResNet-18 (CIFAR stem) on sklearn's digits, SGD with momentum, 400 steps:
#           held-out accuracy of one seed;
#   gpt     byte-level gpt2-tiny on the licence texts, SGD with momentum, 10000 steps of
#           8 sequences: held-out loss, the mean over seeds 1337, 1 and 2 of each (one
#           seed's loss moves by +-1.4% with the seed, dense or not, so one pair of runs
#           cannot resolve 1%). Warm-up: 2000 steps in 3 stages from 93.75% sparsity.
#           At width 64 the biases and norm weights are 1.5% of the parameters: sent
#           dense they alone would cap the reduction near 66x, so every tensor is
#           compressed (dgc.min_numel = 1; a tensor sends at least one entry a step).
#   short   the short sibling of both, for `make check` (the two above are `make
#           check-long`): gpt2-tiny 1500 steps, one seed, warm-up 300 steps, and
#           ResNet-18 100 steps, each against its dense run with the same steps. DGC-Pro
#           still lags there (held-out loss +6.5% at 1500 steps, measured; it closes the
#           gap by 10000), so the bounds are loose, 10% loss and 10% accuracy; a run that
#           loses its residuals (no error feedback) ends at +14.7% and fails. Traffic
#           >= 100x less for the GPT, >= 30x for ResNet-18, whose 20 warm-up steps weigh
#           more in 100.
# usage: test_dgc_converge.sh resnet|gpt|short
. "$(dirname "$0")/lib.sh"
TRAIN=build/bin/nebula-train
PY=/usr/bin/python3
what=${1:?resnet or gpt}
DGC=(--set dgc.mode=on --set dgc.sparsity=0.999 --set dgc.value_dtype=fp16)
train() {  # train NAME ARGS... -> the log in $tmp/NAME.log
    local name=$1
    shift
    $MPIRUN -np 2 $TRAIN --ranks-per-node 1 --run-dir "$tmp/$name" --set ckpt.every_steps=0 "$@" \
        </dev/null >"$tmp/$name.log" 2>&1 || { echo "FAIL - $name: nebula-train exited $?"; tail -5 "$tmp/$name.log"; fails=$((fails + 1)); }
}
# the figure, or nan when the log lacks it (a run that failed: the judgement fails)
last_eval() { local x; x=$(sed -n "s/^eval step=$2 .*$3=\([0-9.]*\).*/\1/p" "$tmp/$1.log" | tail -1); echo "${x:-nan}"; }
reduction() { local x; x=$(sed -n 's/^dgc: gradient traffic .*: \([0-9.]*\)x less/\1/p' "$tmp/$1.log"); echo "${x:-nan}"; }
judge() {  # judge LABEL "DENSE..." "DGC..." "RATIO..." higher|lower LIMIT [MIN_RATIO=100]: means compared
    if $PY - "$@" <<'PYEOF'
import sys
def floats(s):
    return [float(x) for x in s.split()]
label, dense, dgc, ratios, better = sys.argv[1], floats(sys.argv[2]), floats(sys.argv[3]), floats(sys.argv[4]), sys.argv[5]
limit = float(sys.argv[6])
min_ratio = float(sys.argv[7]) if len(sys.argv) > 7 else 100
md, mg, ratio = sum(dense) / len(dense), sum(dgc) / len(dgc), min(ratios)
within = mg >= (1 - limit) * md if better == "higher" else mg <= (1 + limit) * md
ok = within and len(dense) == len(dgc) == len(ratios) and all(r >= min_ratio for r in ratios)  # nan fails both
each = "" if len(dense) == 1 else " (per seed: " + ", ".join(f"{a:.4f}/{b:.4f}" for a, b in zip(dense, dgc)) + ")"
print(f"{'ok' if ok else 'FAIL'} - {label}: dense {md:.4f}, DGC-Pro {mg:.4f} ({(mg - md) / md:+.2%}, limit "
      f"{limit:.0%}){each}, gradient traffic {ratio:.1f}x less at least (limit {min_ratio:.0f}x)")
sys.exit(0 if ok else 1)
PYEOF
    then :; else fails=$((fails + 1)); fi
}
case $what in
resnet)
    mkdir -p "$tmp/digits"
    $PY validation/reference/train_ref.py digits "$tmp/digits" >/dev/null
    R=(--config configs/train/resnet18-digits.ini --set data.train="$tmp/digits/train.h5"
       --set data.val="$tmp/digits/test.h5" --steps 400 --set train.eval_interval=400)
    export OMP_NUM_THREADS=1
    train rn-dense "${R[@]}"
    train rn-dgc "${R[@]}" "${DGC[@]}" --set dgc.warmup_steps=20
    judge "ResNet-18 on the digits, 400 steps, held-out accuracy" "$(last_eval rn-dense 400 acc)" \
        "$(last_eval rn-dgc 400 acc)" "$(reduction rn-dgc)" higher 0.01
    ;;
gpt)
    $TRAIN prepare "$tmp/data" /usr/share/common-licenses/* >/dev/null || { echo "FAIL - prepare"; exit 1; }
    G=(--config configs/train/gpt2-tiny-licenses.ini --set data.train="$tmp/data/train.bin"
       --set data.val="$tmp/data/val.bin" --steps 10000 --set train.global_batch=8 --set train.eval_interval=10000
       --set train.eval_batches=32 --set train.log_interval=1000 --set optim.name=sgd --set optim.lr=0.1
       --set optim.momentum=0.9 --set optim.weight_decay=0)
    dense=() dgc=() ratio=()
    for seed in 1337 1 2; do
        train gpt-dense-$seed "${G[@]}" --set train.seed=$seed
        train gpt-dgc-$seed "${G[@]}" "${DGC[@]}" --set train.seed=$seed --set dgc.min_numel=1 \
            --set dgc.warmup_steps=2000 --set dgc.warmup_stages=3 --set dgc.warmup_sparsity=0.9375
        dense+=("$(last_eval gpt-dense-$seed 10000 loss)") dgc+=("$(last_eval gpt-dgc-$seed 10000 loss)")
        ratio+=("$(reduction gpt-dgc-$seed)")
    done
    judge "gpt2-tiny on the licences, 10000 steps, held-out loss, mean of 3 seeds" "${dense[*]}" "${dgc[*]}" \
        "${ratio[*]}" lower 0.01
    ;;
short)
    $TRAIN prepare "$tmp/data" /usr/share/common-licenses/* >/dev/null || { echo "FAIL - prepare"; exit 1; }
    mkdir -p "$tmp/digits"
    $PY validation/reference/train_ref.py digits "$tmp/digits" >/dev/null
    export OMP_NUM_THREADS=1
    G=(--config configs/train/gpt2-tiny-licenses.ini --set data.train="$tmp/data/train.bin"
       --set data.val="$tmp/data/val.bin" --steps 1500 --set train.global_batch=8 --set train.eval_interval=1500
       --set train.eval_batches=32 --set train.log_interval=500 --set optim.name=sgd --set optim.lr=0.1
       --set optim.momentum=0.9 --set optim.weight_decay=0 --set train.seed=1337)
    train gpt-dense "${G[@]}"
    train gpt-dgc "${G[@]}" "${DGC[@]}" --set dgc.min_numel=1 --set dgc.warmup_steps=300 \
        --set dgc.warmup_stages=3 --set dgc.warmup_sparsity=0.9375
    judge "gpt2-tiny on the licences, 1500 steps, held-out loss (short)" "$(last_eval gpt-dense 1500 loss)" \
        "$(last_eval gpt-dgc 1500 loss)" "$(reduction gpt-dgc)" lower 0.10
    R=(--config configs/train/resnet18-digits.ini --set data.train="$tmp/digits/train.h5"
       --set data.val="$tmp/digits/test.h5" --steps 100 --set train.eval_interval=100)
    train rn-dense "${R[@]}"
    train rn-dgc "${R[@]}" "${DGC[@]}" --set dgc.warmup_steps=20
    judge "ResNet-18 on the digits, 100 steps, held-out accuracy (short)" "$(last_eval rn-dense 100 acc)" \
        "$(last_eval rn-dgc 100 acc)" "$(reduction rn-dgc)" higher 0.10 30
    ;;
*) echo "usage: test_dgc_converge.sh resnet|gpt|short"; exit 2 ;;
esac
finish
