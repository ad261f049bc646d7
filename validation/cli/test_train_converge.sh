#!/usr/bin/env bash
# nebula-train learns what PyTorch learns:
#   - the parameters of a checkpoint, read with h5py into the PyTorch GPT-2, give the
#     same held-out loss as Nebula's evaluation of them;
#   - byte-level gpt2-tiny on the licence texts (600 steps, data in file order) ends
#     within 2% of the held-out loss of PyTorch trained with the same recipe;
#   - ResNet-18 (CIFAR stem) on sklearn's handwritten digits reaches >= 95% held-out
#     accuracy in 150 steps.
# usage: test_train_converge.sh [short]. The whole run above is `make check-long`; short,
# its sibling in `make check`, compresses both schedules: gpt2-tiny 200 steps against
# PyTorch's 200, within the same 2% (measured: 0.24%), and ResNet-18 60 steps to >= 93%
# (measured: 97.3%).
. "$(dirname "$0")/lib.sh"
gpt_steps=600 rn_steps=150 rn_acc=0.95
[ "${1:-}" = short ] && gpt_steps=200 rn_steps=60 rn_acc=0.93
TRAIN=build/bin/nebula-train
REF=validation/reference/train_ref.py
licenses_data
gpt() {
    local dir=$1
    shift
    $MPIRUN -np 2 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val="$data/val.bin" "$@" </dev/null 2>&1
}
eval_loss() { sed -n 's/^eval step=[0-9]* loss=\([0-9.]*\).*/\1/p' | tail -1; }

out=$($MPIRUN -np 1 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir $tmp/h5 \
      --set data.train="$data/train.bin" --set data.val="$data/val.bin" --steps 5 --set ckpt.every_steps=5 \
      --set train.global_batch=8 --set train.eval_batches=1 --set optim.warmup_steps=0 </dev/null 2>&1)
if $PY $REF h5loss $tmp/h5/ckpt/step_00000005/state.h5 "$data/val.bin" 8 "$(eval_loss <<<"$out")"; then :; else
    echo "FAIL - checkpoint parameters through h5py into PyTorch"; echo "$out" | tail -5; fails=$((fails + 1)); fi

out=$(gpt $tmp/conv --set data.shuffle=false --set ckpt.every_steps=0 --steps $gpt_steps --set train.eval_interval=$gpt_steps)
neb=$(eval_loss <<<"$out")
if $PY $REF gpt "$data/train.bin" "$data/val.bin" $gpt_steps 32 64 3e-3 30 3e-4 8 "$neb"; then :; else
    echo "FAIL - gpt2-tiny against PyTorch"; echo "$out" | tail -5; fails=$((fails + 1)); fi

mkdir -p $tmp/digits
$PY $REF digits $tmp/digits >/dev/null
out=$(OMP_NUM_THREADS=1 $MPIRUN -np 2 $TRAIN --config configs/train/resnet18-digits.ini --run-dir $tmp/rn \
      --set data.train=$tmp/digits/train.h5 --set data.val=$tmp/digits/test.h5 --steps $rn_steps \
      --set train.eval_interval=$rn_steps </dev/null 2>&1)
acc=$(sed -n "s/^eval step=$rn_steps .*acc=\([0-9.]*\).*/\1/p" <<<"$out" | tail -1)
if $PY -c "import sys; sys.exit(0 if float('${acc:-0}') >= $rn_acc else 1)"; then
    echo "ok - ResNet-18 on the digits, $rn_steps steps: held-out accuracy $acc >= $rn_acc"
else
    echo "FAIL - ResNet-18 on the digits, $rn_steps steps: held-out accuracy '${acc}' < $rn_acc"; echo "$out" | tail -8; fails=$((fails + 1))
fi
finish
