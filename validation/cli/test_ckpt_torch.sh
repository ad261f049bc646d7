#!/usr/bin/env bash
# test_ckpt_torch — nebula-ckpt's safetensors files in PyTorch and PyTorch's in Nebula,
# through the official safetensors package (PyPI's, in build/venv: `make deps` creates it
# with Debian's torch visible). The same batch goes through both models and the logits
# must agree within the reference tests' tolerance, |d| <= 1e-4 + 1e-3|ref| (the loss
# within 1e-5 relative): validation/reference/nebula_ref.py's Checker, as in
# reference/gpt2-vs-pytorch.
#   - Nebula -> PyTorch: gpt2-tiny trained 5 steps on 2 ranks (the licence texts),
#     `convert --to safetensors`, safetensors.torch.load_file into the PyTorch GPT-2 of
#     gpt2_ref.py; Nebula's logits come from the checkpoint itself
#     (validation/reference/test_ckpt_logits.c: ckpt_load, one forward of a fixed batch);
#   - PyTorch -> Nebula: the PyTorch GPT-2 with its own random initialisation, written with
#     safetensors.torch.save_file under Hugging Face's names (attention-mask buffers
#     included), `convert --from safetensors --model gpt2-tiny`, Nebula's logits from the
#     converted step_00000000; once more with a vocabulary of 200 (padded to 256 inside
#     Nebula);
#   - both directions for ResNet-18 (CIFAR stem) against torchvision (strict loading, eval
#     mode: the running statistics), the trained one on the handwritten digits;
#   - the comparison fails when one tensor is transposed or perturbed on the PyTorch side.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
CK=build/bin/nebula-ckpt
TRAIN=build/bin/nebula-train
LOGITS=build/test/reference/test_ckpt_logits
VPY=build/venv/bin/python
REF=validation/reference/ckpt_torch_ref.py
export OMP_NUM_THREADS=1  # small models: one thread each keeps the test from crowding the cores

if ! $VPY -c "import safetensors.torch" >/dev/null 2>&1; then
    echo "FAIL - $VPY with the safetensors package is missing: run make deps (tools/deps.sh creates build/venv)"
    exit 1
fi
licenses_data

# compare NAME WANT_EXIT WEIGHTS CKPT_DIR [MUTATION...]: Nebula's logits of CKPT_DIR against
# PyTorch's from WEIGHTS; the reference's lines are shown indented. An expected failure
# must be the logits check's, not a crash.
compare() {
    local name=$1 want=$2 weights=$3 ckpt=$4 out rc
    shift 4
    if ! $LOGITS "$ckpt" "$tmp/nebula.safetensors" 2 32 >"$tmp/logits.log" 2>&1; then
        echo "FAIL - $name: no logits from $ckpt"; sed 's/^/    /' "$tmp/logits.log"; fails=$((fails + 1)); return
    fi
    out=$($VPY $REF logits "$weights" "$tmp/nebula.safetensors" "$@" 2>&1)
    rc=$?
    sed 's/^/    /' <<<"$out"
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL - $name: exit $rc, expected $want"; fails=$((fails + 1))
    elif [ "$want" -ne 0 ] && ! grep -q "^FAIL - logits" <<<"$out"; then
        echo "FAIL - $name: exit $rc without a failing logits check"; fails=$((fails + 1))
    else
        echo "ok - $name"
    fi
}

# --- GPT-2 ------------------------------------------------------------------------------
$MPIRUN -np 2 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir $tmp/gpt \
    --set data.train="$data/train.bin" --set data.val= --set train.global_batch=4 --set train.seq_len=32 \
    --set optim.warmup_steps=0 --set train.threads=1 --steps 5 --ckpt-every 5 >$tmp/gpt.log 2>&1 </dev/null
G=$tmp/gpt/ckpt/step_00000005
check "nebula-train wrote gpt2-tiny's step 5" test -f $G/COMMITTED
expect "convert --to safetensors (gpt2-tiny)" 0 "(safetensors, float32)" -- \
    $CK convert $G --to safetensors --out $tmp/gpt.safetensors
compare "Nebula -> PyTorch: the file loads into the PyTorch GPT-2, the same logits as the checkpoint's" 0 \
    $tmp/gpt.safetensors $G
compare "... and a transposed square tensor (Conv1D vs Linear) fails the comparison" 1 \
    $tmp/gpt.safetensors $G --transpose h.0.attn.c_proj.weight

$VPY $REF init-gpt2 $tmp/torch.safetensors 2 4 64 256 64 >/dev/null
expect "convert --from safetensors: the PyTorch GPT-2's own file (no metadata, attention masks ignored)" 0 \
    "2 tensors of the file that gpt2-tiny does not have ignored" -- \
    $CK convert $tmp/torch.safetensors --from safetensors --model gpt2-tiny --out $tmp/from-torch/ckpt
compare "PyTorch -> Nebula: the converted checkpoint gives PyTorch's logits" 0 \
    $tmp/torch.safetensors $tmp/from-torch/ckpt/step_00000000
compare "... and one bias perturbed by 0.05 fails the comparison" 1 \
    $tmp/torch.safetensors $tmp/from-torch/ckpt/step_00000000 --perturb h.1.ln_2.bias=0.05

$VPY $REF init-gpt2 $tmp/torch200.safetensors 2 4 64 200 64 >/dev/null
expect "convert --from safetensors: a vocabulary of 200 (padded to 256 inside Nebula)" 0 "gpt2-tiny, 1 rank" -- \
    $CK convert $tmp/torch200.safetensors --from safetensors --model gpt2-tiny --set model.vocab_size=200 \
    --out $tmp/from-torch200/ckpt
compare "PyTorch -> Nebula, vocabulary 200: the same logits (the padding columns aside)" 0 \
    $tmp/torch200.safetensors $tmp/from-torch200/ckpt/step_00000000

# --- ResNet-18 (CIFAR stem) ---------------------------------------------------------------
mkdir -p $tmp/digits
/usr/bin/python3 validation/reference/train_ref.py digits $tmp/digits >/dev/null
$MPIRUN -np 1 $TRAIN --config configs/train/resnet18-digits.ini --run-dir $tmp/rn \
    --set data.train=$tmp/digits/train.h5 --set data.val= --set train.global_batch=8 \
    --set optim.warmup_steps=0 --steps 3 --ckpt-every 3 >$tmp/rn.log 2>&1 </dev/null
R=$tmp/rn/ckpt/step_00000003
check "nebula-train wrote resnet18-cifar's step 3" test -f $R/COMMITTED
expect "convert --to safetensors (resnet18-cifar, batch-norm buffers included)" 0 "(safetensors, float32)" -- \
    $CK convert $R --to safetensors --out $tmp/rn.safetensors
compare "Nebula -> PyTorch: the file loads strictly into torchvision's resnet18, the same eval logits" 0 \
    $tmp/rn.safetensors $R
compare "... and a transposed 64x64 convolution fails the comparison" 1 \
    $tmp/rn.safetensors $R --transpose layer1.0.conv1.weight

$VPY $REF init-resnet $tmp/torch-rn.safetensors resnet18 cifar 10 >/dev/null
expect "convert --from safetensors: torchvision's resnet18 state_dict" 0 "resnet18-cifar, 1 rank" -- \
    $CK convert $tmp/torch-rn.safetensors --from safetensors --model resnet18-cifar --out $tmp/from-torch-rn/ckpt
compare "PyTorch -> Nebula: the converted checkpoint gives torchvision's eval logits" 0 \
    $tmp/torch-rn.safetensors $tmp/from-torch-rn/ckpt/step_00000000
compare "... and one running mean perturbed by 0.01 fails the comparison" 1 \
    $tmp/torch-rn.safetensors $tmp/from-torch-rn/ckpt/step_00000000 --perturb layer4.1.bn2.running_mean=0.01
finish
