#!/usr/bin/env bash
# test_edge.sh — the edge engine end to end on x86-64: ONNX files exported by PyTorch
# (validation/deploy/make_models.py: ResNet-18 CIFAR, MobileNet-v2, GPT-2 and BERT
# style; make_digits.py: a ResNet trained on the digits) go through nebula-deploy into
# .neb files that nebula-infer runs.
#
#   fp32       every model's output within 1e-4 (relative to the output's largest value)
#              of ONNX Runtime's and of PyTorch's on the same input
#   int8/fp16  the trained digits net: top-1 on its 597 held-out images drops by at most
#              1 point (the --max-accuracy-drop budget), checked by nebula-infer --eval
#              on the written file, not by the deploy tool's own report; int8 file
#              ≤ 30% of the ONNX file
#   command    the specification's line, verbatim but for the target name
#   refusals   a truncated .neb, a flipped byte, a foreign file: exit 2 naming the
#              reason; an ONNX file with an unsupported operator: exit 2 naming the node
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=build/venv/bin/python
[ -x "$PY" ] && "$PY" -c 'import onnxruntime' 2>/dev/null || { echo "SKIP: build/venv lacks onnxruntime (make deps-test)"; exit 77; }
/usr/bin/python3 -c 'import torch, torchvision, sklearn' 2>/dev/null || { echo "SKIP: Debian's torch, torchvision or sklearn missing (make deps-test)"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
DEPLOY=build/bin/nebula-deploy
INFER=build/bin/nebula-infer
fail=0
check() { # name, then a command that must succeed
    local name=$1; shift
    if "$@" > "$W/out" 2>&1; then echo "ok   $name"; else echo "FAIL $name"; sed 's/^/     /' "$W/out"; fail=1; fi
}
expect_exit() { # code, pattern the stderr must carry, name, command...
    local code=$1 pat=$2 name=$3; shift 3
    "$@" > "$W/out" 2>&1
    local rc=$?
    if [ $rc -eq "$code" ] && grep -q -- "$pat" "$W/out"; then echo "ok   $name (exit $rc: $(head -c 160 "$W/out" | tr '\n' ' '))"
    else echo "FAIL $name: exit $rc, wanted $code and \"$pat\""; sed 's/^/     /' "$W/out"; fail=1; fi
}

/usr/bin/python3 validation/deploy/make_models.py "$W/m" > /dev/null || { echo "FAIL make_models.py"; exit 1; }
/usr/bin/python3 validation/deploy/make_digits.py "$W/d" > "$W/digits.txt" || { echo "FAIL make_digits.py"; exit 1; }

# fp32: every model against ONNX Runtime and PyTorch
for dir in "$W"/m/*/; do
    n=$(basename "$dir")
    check "$n: deploy fp32" $DEPLOY edge --model "$dir/model.onnx" --output "$W/$n.neb"
    input=$($INFER "$W/$n.neb" --info | awk '/^input/{print $2; exit}')
    check "$n: infer" $INFER "$W/$n.neb" --input "$dir/input.npy" --output "$W/$n.out.npy" --repeat 1 --warmup 0
    check "$n: vs onnxruntime and pytorch" "$PY" validation/deploy/ort_compare.py "$dir/model.onnx" "$W/$n.out.npy" \
        --input "$input=$dir/input.npy" --ref "$dir/ref.npy"
done

# fp16 weights where a Gather reads them too (GPT-2's tied embedding): within 1e-2
check "gpt2: deploy fp16" $DEPLOY edge --model "$W/m/gpt2/model.onnx" --quantize fp16 --output "$W/g16.neb"
check "gpt2: fp16 infer" $INFER "$W/g16.neb" --input "$W/m/gpt2/input.npy" --output "$W/g16.npy" --repeat 1 --warmup 0
check "gpt2: fp16 vs onnxruntime within 1e-2" "$PY" validation/deploy/ort_compare.py "$W/m/gpt2/model.onnx" "$W/g16.npy" \
    --input "input=$W/m/gpt2/input.npy" --rtol 1e-2

# the trained digits net: fp32 reproduces PyTorch's top-1; int8 and fp16 within the budget
D=$W/d
torch_top1=$(awk '/pytorch_top1/{print $2}' "$W/digits.txt")
top1() { $INFER "$1" --eval "$D/eval.npy" --labels "$D/labels.npy" | awk '/^top1/{print $2}'; }
check "digits: deploy fp32" $DEPLOY edge --model "$D/digits.onnx" --output "$W/d32.neb"
fp32=$(top1 "$W/d32.neb")
check "digits: fp32 top-1 $fp32 = PyTorch's $torch_top1" /usr/bin/python3 -c "assert abs($fp32 - $torch_top1) < 1e-9"
for q in int8 fp16 auto; do
    check "digits: deploy $q" $DEPLOY edge --model "$D/digits.onnx" --output "$W/d$q.neb" --quantize $q \
        --calib "$D/calib.npy" --eval "$D/eval.npy" --labels "$D/labels.npy" --max-accuracy-drop 1%
    acc=$(top1 "$W/d$q.neb")
    check "digits: $q top-1 $acc within 1 point of fp32 $fp32" /usr/bin/python3 -c "assert $fp32 - $acc <= 0.01 + 1e-9"
done
for prune in "0.5" "0.5 --prune-channels"; do
    # shellcheck disable=SC2086 # two words on purpose
    check "digits: deploy --prune $prune within the budget" $DEPLOY edge --model "$D/digits.onnx" --output "$W/dp.neb" \
        --prune $prune --eval "$D/eval.npy" --labels "$D/labels.npy" --max-accuracy-drop 1%
    sparsity=$(grep -o '"sparsity": [0-9.]*' <($INFER "$W/dp.neb" --info) | awk '{print $2}')
    acc=$(top1 "$W/dp.neb")
    check "digits: pruned ($prune) top-1 $acc within 1 point of fp32 $fp32, sparsity $sparsity > 0" \
        /usr/bin/python3 -c "assert $fp32 - $acc <= 0.01 + 1e-9 and $sparsity > 0"
    [ "$prune" = 0.5 ] && check "digits: the pruned weights stored sparse: $(stat -c %s "$W/dp.neb") < $(stat -c %s "$W/d32.neb") bytes" \
        test "$(stat -c %s "$W/dp.neb")" -lt "$(stat -c %s "$W/d32.neb")"
done
onnx_bytes=$(stat -c %s "$D/digits.onnx"); int8_bytes=$(stat -c %s "$W/dint8.neb")
check "digits: int8 file $int8_bytes bytes <= 30% of the ONNX file's $onnx_bytes" test $((int8_bytes * 100)) -le $((onnx_bytes * 30))
check "digits: int8 .neb has int8 layers" grep -q '"layers_int8": [1-9]' <($INFER "$W/dint8.neb" --info)

# the specification's command line (ResNet-18 here; the bench has ResNet-50)
check "spec command: deploy edge --target arm64 --quantize auto" \
    $DEPLOY edge --model "$W/m/resnet18/model.onnx" --target arm64 --quantize auto --output "$W/model.neb"
check "spec command: the .neb runs" $INFER "$W/model.neb" --repeat 1 --warmup 0

# hostile and foreign files
head -c 1000 "$W/d32.neb" > "$W/trunc.neb"
expect_exit 2 "truncated" "truncated .neb refused" $INFER "$W/trunc.neb"
cp "$W/d32.neb" "$W/flip.neb"
size=$(stat -c %s "$W/flip.neb")
printf '\xff' | dd of="$W/flip.neb" bs=1 seek=$((size / 2)) conv=notrunc status=none
expect_exit 2 "checksum" "a flipped byte refused" $INFER "$W/flip.neb"
expect_exit 2 "not a .neb file" "an ONNX file given to nebula-infer refused" $INFER "$D/digits.onnx"
expect_exit 2 "no model given" "nebula-infer without a model" $INFER
expect_exit 2 "unknown option" "nebula-deploy with a wrong option" $DEPLOY edge --model "$D/digits.onnx" --output x.neb --quantise int8
expect_exit 2 "none, fp16, int8 or auto" "nebula-deploy with a wrong --quantize" $DEPLOY edge --model "$D/digits.onnx" --output x.neb --quantize int4
"$PY" - "$W/bad.onnx" <<'EOF' || { echo "FAIL writing bad.onnx"; fail=1; }
import sys
import torch
class Net(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x, 1)
torch.onnx.export(Net(), torch.zeros(1, 4), sys.argv[1], opset_version=17, input_names=["x"])
EOF
expect_exit 2 "CumSum" "an unsupported operator refused naming the op" $DEPLOY edge --model "$W/bad.onnx" --output "$W/bad.neb"
check "nothing written for a refused model" test ! -e "$W/bad.neb"
exit $fail
