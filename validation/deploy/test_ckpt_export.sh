#!/usr/bin/env bash
# test_ckpt_export — `nebula-deploy export RUN_DIR --output m.onnx` (deploy_from_checkpoint,
# then deploy_onnx_write) against Nebula's own forward, through ONNX Runtime:
#   - gpt2-tiny (2 layers, width 32, 2 heads, context 16, vocabulary 300 padded to 384:
#     the head is sliced to the real vocabulary), bert-tiny (the same sizes, vocabulary
#     1000, the MLM head), resnet18-cifar (width 16, 8x8 images), resnet50 with the
#     ImageNet stem (width 16, 32x32 images, 7 classes: Bottleneck blocks, the max pool)
#     and the MLP, each trained 3 steps by nebula-train (so ResNet's running statistics
#     have moved off their initial 0 and 1), exported from the run directory at batch 2
#     (and sequence 12 for the transformers, shorter than their context);
#   - build/test/deploy/test_ckpt_forward runs Nebula's eval forward of a fixed batch
#     from the same checkpoint (ckpt_load, as a resume) and writes it and the logits as
#     .npy; ONNX Runtime (build/venv, CPU) runs the .onnx on that batch: the logits agree
#     within 1e-4 relative (max |ort - nebula| / max |nebula|); where the nano runtime
#     runs the same graph (nano_model_from_graph), its logits must agree as well;
#   - refused with a message naming the problem: a directory without a committed
#     checkpoint, a sequence longer than the context, a sequence for an image model,
#     and a checkpoint with a flipped byte inside a tensor (its checksum fails).
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
TRAIN=build/bin/nebula-train
DEPLOY=build/bin/nebula-deploy
FORWARD=build/test/deploy/test_ckpt_forward
VPY=build/venv/bin/python
for x in $TRAIN $DEPLOY $FORWARD; do
    [ -x $x ] || { echo "FAIL - $x is missing (make)"; exit 1; }
done
$VPY -c "import onnxruntime, numpy" >/dev/null 2>&1 || {
    echo "FAIL - $VPY with onnxruntime and numpy is missing: run make deps"; exit 1; }
licenses_data

# train NAME ARG...: 3 steps, a checkpoint at step 3, one process; output in $tmp/NAME.log
train() {
    local name=$1
    shift
    $MPIRUN -np 1 $TRAIN "$@" --steps 3 --set ckpt.every_steps=3 --set train.threads=1 --set runtime.bind=none \
        --set optim.warmup_steps=0 --run-dir $tmp/$name >$tmp/$name.log 2>&1 </dev/null
    check "$name: nebula-train wrote step 3" test -f $tmp/$name/ckpt/step_00000003/COMMITTED
}
text=(--config configs/train/gpt2-tiny-licenses.ini --set data.train="$data/train.bin" --set data.val=
      --set train.global_batch=4 --set train.seq_len=16 --set model.n_layer=2 --set model.n_embd=32
      --set model.n_head=2 --set model.max_seq_len=16)
train gpt2 "${text[@]}" --set model.vocab_size=300
train bert "${text[@]}" --set model.name=bert-tiny --set model.vocab_size=1000
images=(--set train.micro_batch=4)
train resnet18 --model resnet18-cifar --set model.width=16 --set model.image_size=8 "${images[@]}"
train resnet50 --model resnet50 --set model.width=16 --set model.image_size=32 --set model.num_classes=7 "${images[@]}"
train mlp --model mlp "${images[@]}"

# compare NAME: ONNX Runtime on $tmp/NAME.onnx and the batch of $tmp/NAME.out against
# Nebula's logits there (and the nano runtime's, when it ran the graph)
compare() {
    $VPY - $tmp/$1.onnx $tmp/$1.out <<'PY'
import os, sys
import numpy as np
import onnxruntime as ort
so = ort.SessionOptions()
so.intra_op_num_threads = so.inter_op_num_threads = 1
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
x = np.load(sys.argv[2] + "/input.npy")
neb = np.load(sys.argv[2] + "/nebula.npy").astype(np.float64)
i = sess.get_inputs()[0]
if list(i.shape) != list(x.shape):
    print(f"    the ONNX input {i.name} is {i.shape}, the batch {list(x.shape)}"); sys.exit(1)
ok = True
def rel(name, y):
    global ok
    y = np.asarray(y, np.float64)
    if y.shape != neb.shape:
        print(f"    {name}: shape {y.shape}, Nebula's {neb.shape}"); ok = False; return
    r = np.abs(y - neb).max() / max(np.abs(neb).max(), 1e-30)
    print(f"    {name} vs Nebula: max rel diff {r:.2e} (logits {neb.shape}, max |logit| {np.abs(neb).max():.3g})")
    ok = ok and r <= 1e-4
rel("onnxruntime", sess.run(None, {i.name: x})[0])
if os.path.exists(sys.argv[2] + "/nano.npy"):
    rel("nano runtime", np.load(sys.argv[2] + "/nano.npy"))
sys.exit(0 if ok else 1)
PY
}

# export NAME T: the run's export at batch 2 (and T tokens), Nebula's forward, the comparison
export_check() {
    local name=$1 T=$2 seq=()
    [ "$T" -gt 0 ] && seq=(--seq "$T")
    expect "$name: nebula-deploy export RUN_DIR --output $name.onnx" 0 "" -- \
        $DEPLOY export $tmp/$name --output $tmp/$name.onnx --batch 2 "${seq[@]}"
    mkdir -p $tmp/$name.out
    if $FORWARD $tmp/$name/ckpt/step_00000003 $tmp/$name.out 2 "$T" >$tmp/$name.fwd 2>&1; then
        echo "ok - $name: Nebula's forward of the checkpoint, the graph checked"; sed 's/^/    /' $tmp/$name.fwd
    else
        echo "FAIL - $name: test_ckpt_forward"; sed 's/^/    /' $tmp/$name.fwd; fails=$((fails + 1))
    fi
    check "$name: ONNX Runtime's logits are Nebula's within 1e-4 relative" compare $name
    # the same checkpoint straight to a .neb (nebula-deploy edge), run by nebula-infer
    expect "$name: nebula-deploy edge --model RUN_DIR" 0 "" -- \
        $DEPLOY edge --model $tmp/$name --output $tmp/$name.neb --batch 2 "${seq[@]}"
    check "$name: nebula-infer on the .neb gives Nebula's logits within 1e-4 relative" infer_check $name
}
infer_check() {
    build/bin/nebula-infer $tmp/$1.neb --input $tmp/$1.out/input.npy --output $tmp/$1.out/infer.npy --repeat 1 --warmup 0 \
        >/dev/null && $PY -c "
import numpy as np, sys
a, b = np.load(sys.argv[1] + '/infer.npy').astype(np.float64), np.load(sys.argv[1] + '/nebula.npy').astype(np.float64)
r = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30); print(f'    nebula-infer vs Nebula: max rel diff {r:.2e}')
sys.exit(0 if a.shape == b.shape and r <= 1e-4 else 1)" $tmp/$1.out
}
export_check gpt2 12
export_check bert 12
export_check resnet18 0
export_check resnet50 0
export_check mlp 0

# refused: exit non-zero, the message naming the problem
refuse() {
    local name=$1 want=$2 out rc
    shift 3
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$out"; then echo "ok - refused: $name (exit $rc)"
    else echo "FAIL - refused: $name: exit $rc, output lacks '$want'"; echo "$out" | tail -3 | sed 's/^/    /'
         fails=$((fails + 1)); fi
}
mkdir -p $tmp/empty
refuse "a directory without a checkpoint" "holds no committed checkpoint" -- \
    $DEPLOY export $tmp/empty --output $tmp/x.onnx
refuse "a sequence longer than the context" "context is 1..16 tokens" -- \
    $DEPLOY export $tmp/gpt2 --output $tmp/x.onnx --seq 17
refuse "a sequence for an image model" "takes images" -- \
    $DEPLOY export $tmp/resnet18 --output $tmp/x.onnx --seq 8
cp -r $tmp/gpt2 $tmp/damaged
$PY - $tmp/damaged/ckpt/step_00000003/state.h5 <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    off = f["params/h.0.attn.c_attn.weight"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 100); b = f.read(1); f.seek(off + 100); f.write(bytes([b[0] ^ 0x40]))
PY
refuse "a tensor whose checksum fails" "cannot load the parameters" -- \
    $DEPLOY export $tmp/damaged --output $tmp/x.onnx
check "no output file left by the refusals" test ! -e $tmp/x.onnx
finish
