#!/usr/bin/env bash
# test_mlp_digits — the MLP family end to end on the UCI handwritten digits at 8x8
# (validation/reference/train_ref.py digits DIR 8):
#   - nebula-train, 2 ranks, configs/train/mlp-digits.ini: the held-out accuracy ends at
#     95% or more;
#   - its checkpoint converts to safetensors that load strictly into the PyTorch module
#     of libcore/nn/mlp.h (mlp_ref.MLP), and PyTorch's loss and accuracy on the held-out
#     images the run evaluated (the first 4 global batches, in file order, normalised as
#     the config says) are Nebula's: the same count of correct labels, the loss within
#     1e-4 relative;
#   - --to hf refuses the MLP, naming --to safetensors;
#   - sched.mode = static with shares 1 : 0.5 (41 and 23 samples, in micro-batches of
#     32 + 9 and 23: model_set_micro_batch) gives the plain run's losses within 1e-5
#     relative: the MLP has no batch statistics, so only the summation order changes;
#   - nebula-bench model --model mlp times its steps.
. "$(dirname "$0")/lib.sh"
TRAIN=build/bin/nebula-train
CK=build/bin/nebula-ckpt
export OMP_NUM_THREADS=1

mkdir -p $tmp/digits
$PY validation/reference/train_ref.py digits $tmp/digits 8 >/dev/null || { echo "FAIL - digits at 8x8"; exit 1; }
D="--set data.train=$tmp/digits/train.h5 --set data.val=$tmp/digits/test.h5"

$MPIRUN -np 2 $TRAIN --config configs/train/mlp-digits.ini --run-dir $tmp/run $D --ckpt-every 200 \
    >$tmp/run.log 2>&1 </dev/null
last=$(grep '^eval step=200 ' $tmp/run.log)
acc=$(sed -n 's/.* acc=\([0-9.]*\).*/\1/p' <<<"$last")
loss=$(sed -n 's/.* loss=\([0-9.]*\).*/\1/p' <<<"$last")
check "nebula-train mlp on the digits: held-out accuracy ${acc:-none} >= 0.95 at step 200" \
    $PY -c "import sys; sys.exit(0 if '$acc' and float('$acc') >= 0.95 else 1)"
[ -n "$acc" ] || tail -5 $tmp/run.log | sed 's/^/    /'

C=$tmp/run/ckpt/step_00000200
expect "convert --to safetensors (mlp)" 0 "(safetensors, float32)" -- $CK convert $C --to safetensors --out $tmp/mlp.safetensors
check "PyTorch: the file loads strictly into nn.Sequential and gives Nebula's held-out loss and accuracy" \
    $PY - $tmp/mlp.safetensors $tmp/digits/test.h5 "$loss" "$acc" <<'PY'
import sys
sys.path.insert(0, "validation/reference")
import h5py, numpy as np, torch, torch.nn.functional as F
from mlp_ref import MLP
from nebula_ref import load_safetensors
path, data, loss, acc = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
t, _ = load_safetensors(path)
hidden = t["layers.0.weight"].shape[0]
model = MLP(192, hidden, len(t) // 2 - 1, t[f"layers.{len(t) - 2}.weight"].shape[0]).double()
model.load_state_dict({k: v.double() for k, v in t.items()}, strict=True)
with h5py.File(data, "r") as f:
    x = torch.from_numpy(np.array(f["images"][:256], dtype=np.float32))    # (256, 8, 8, 1)
    y = torch.from_numpy(np.array(f["labels"][:256], dtype=np.int64))
lut = ((torch.arange(256, dtype=torch.float32) / 255.0 - 0.2) / 0.35).double()  # the loader's table
x = lut[x.long()].permute(0, 3, 1, 2).expand(-1, 3, -1, -1)                  # C = 1 replicated to 3
with torch.no_grad():
    logits = model(x)
    # Nebula's loss: the mean over the 4 global batches of each rank's micro-batch mean = the mean
    ref_loss = F.cross_entropy(logits, y).item()
    ref_acc = (logits.argmax(1) == y).double().mean().item()
rel = abs(ref_loss - loss) / ref_loss
print(f"    PyTorch: loss {ref_loss:.6f} acc {ref_acc:.4f}; Nebula: loss {loss:.6f} acc {acc:.4f} "
      f"(loss relative difference {rel:.1e})")
sys.exit(0 if rel <= 1e-4 and round(ref_acc * 256) == round(acc * 256) else 1)
PY
expect "convert --to hf refuses the MLP, naming --to safetensors" 2 "--to safetensors writes it under the names" -- \
    $CK convert $C --to hf --out $tmp/hf

S="--model mlp $D --set train.global_batch=64 --set optim.lr=0.05 --set train.log_interval=1 --set train.eval_interval=0"
$MPIRUN -np 2 $TRAIN $S --run-dir $tmp/plain --steps 30 >$tmp/plain.log 2>&1 </dev/null
$MPIRUN -np 2 $TRAIN $S --run-dir $tmp/sched --steps 30 --set sched.mode=static --set sched.shares=1,0.5 \
    >$tmp/sched.log 2>&1 </dev/null
check "sched.mode = static, shares 1 : 0.5: ranks of 41 and 23 samples in micro-batches of at most 32" \
    grep -q "shares of the global batch 64: 41,23" $tmp/sched.log
check "... within 1e-5 relative at every step" same_losses $tmp/plain $tmp/sched

expect "nebula-bench model --model mlp" 0 "# median:" -- $BENCH model --model mlp --batch 64 --steps 5 --threads 1
finish
