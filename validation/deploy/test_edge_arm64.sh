#!/usr/bin/env bash
# test_edge_arm64.sh — the edge runtime built for arm64 (gcc-aarch64-linux-gnu, static)
# and run under qemu-aarch64 on the same .neb files as on x86-64.
#
#   fp32   every test model's arm64 output within 1e-4 of ONNX Runtime's (x86-64)
#   int8   the digits net's arm64 output within 1e-5 of the x86-64 int8 output (the
#          integer sums are exact on both; only the fp32 scaling may round apart), and
#          the same held-out top-1
#   bundle nebula-deploy --target arm64 --bundle DIR holds a nebula-infer that qemu runs
#
# Correctness only: timings under qemu say nothing about an arm64 board.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=build/venv/bin/python
[ -x "$PY" ] && "$PY" -c 'import onnxruntime' 2>/dev/null || { echo "SKIP: build/venv lacks onnxruntime (make deps-test)"; exit 77; }
command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null || {
    tools/cross-aarch64.sh deps >/dev/null 2>&1 || true
    command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null ||
        { echo "SKIP: gcc-aarch64-linux-gnu or qemu-user missing and not installable (not root?)"; exit 77; }
}
[ -f build/aarch64/sysroot/usr/lib/aarch64-linux-gnu/libc.a ] || tools/cross-aarch64.sh deps >/dev/null 2>&1 ||
    { echo "SKIP: the arm64 sysroot cannot be filled (tools/cross-aarch64.sh deps)"; exit 77; }
make -s aarch64-nano > /dev/null || { echo "FAIL make aarch64-nano"; exit 1; }
A64="qemu-aarch64 build/aarch64/bin/nebula-infer"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
check() {
    local name=$1; shift
    if "$@" > "$W/out" 2>&1; then echo "ok   $name"; else echo "FAIL $name"; sed 's/^/     /' "$W/out"; fail=1; fi
}
file build/aarch64/bin/nebula-infer | grep -q "ARM aarch64.*statically linked" && echo "ok   nebula-infer is a static aarch64 executable" ||
    { echo "FAIL nebula-infer for aarch64 is not a static aarch64 executable"; fail=1; }

/usr/bin/python3 validation/deploy/make_models.py "$W/m" > /dev/null || { echo "FAIL make_models.py"; exit 1; }
/usr/bin/python3 validation/deploy/make_digits.py "$W/d" --epochs 4 > /dev/null || { echo "FAIL make_digits.py"; exit 1; }
for dir in "$W"/m/*/; do
    n=$(basename "$dir")
    build/bin/nebula-deploy edge --model "$dir/model.onnx" --output "$W/$n.neb" > /dev/null || { echo "FAIL deploy $n"; fail=1; continue; }
    input=$(build/bin/nebula-infer "$W/$n.neb" --info | awk '/^input/{print $2; exit}')
    check "$n: arm64 run" $A64 "$W/$n.neb" --input "$dir/input.npy" --output "$W/$n.a64.npy" --repeat 1 --warmup 0
    grep -q "isa neon" "$W/out" || { echo "FAIL $n: the arm64 run did not use NEON: $(head -1 "$W/out")"; fail=1; }
    check "$n: arm64 vs onnxruntime and pytorch" "$PY" validation/deploy/ort_compare.py "$dir/model.onnx" "$W/$n.a64.npy" \
        --input "$input=$dir/input.npy" --ref "$dir/ref.npy"
done
D=$W/d
/usr/bin/python3 -c "import numpy as np; np.save('$W/x0.npy', np.load('$D/eval.npy')[:1])"
build/bin/nebula-deploy edge --model "$D/digits.onnx" --output "$W/q.neb" --quantize int8 --calib "$D/calib.npy" \
    --target arm64 --bundle "$W/bundle" > /dev/null || { echo "FAIL deploy int8 with --bundle"; fail=1; }
check "int8: x86-64 run" build/bin/nebula-infer "$W/q.neb" --input "$W/x0.npy" --output "$W/q.x86.npy" --repeat 1 --warmup 0
check "int8: arm64 run from the bundle" qemu-aarch64 "$W/bundle/nebula-infer" "$W/bundle/q.neb" --input "$W/x0.npy" \
    --output "$W/q.a64.npy" --repeat 1 --warmup 0
check "int8: arm64 output = x86-64 output within 1e-5" /usr/bin/python3 -c "
import numpy as np
a, b = np.load('$W/q.a64.npy'), np.load('$W/q.x86.npy')
d = float(np.max(np.abs(a - b))); s = float(np.max(np.abs(b)))
print('max|diff|', d, 'of', s); assert d <= 1e-5 * s"
t86=$(build/bin/nebula-infer "$W/q.neb" --eval "$D/eval.npy" --labels "$D/labels.npy" | awk '/top1/{print $2}')
t64=$($A64 "$W/q.neb" --eval "$D/eval.npy" --labels "$D/labels.npy" | awk '/top1/{print $2}')
check "int8: held-out top-1 on arm64 $t64 = x86-64 $t86" test "$t64" = "$t86"
exit $fail
