#!/usr/bin/env bash
# test_gpu_absent — the GPU path on a machine without a GPU (docs/gpu.md: CUDA is
# optional and detected): the CUDA objects are built when nvcc is present, every GPU
# test program links, starts, says it checked nothing and exits 77 (skipped),
# `make check-gpu` reports every GPU test as skipped without claiming a result, and
# asking for a GPU fails with exit 2 and a hint. On a machine with a GPU this test has
# nothing to prove: it says so and is skipped itself (exit 77).
set -uo pipefail
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
TRAIN=build/bin/nebula-train

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    expect "check-gpu without CUDA kernels skips" 77 "this build has no CUDA kernels" -- tools/check-gpu.sh
    expect "--device cuda without CUDA kernels" 2 "this build has no CUDA kernels" -- \
        $BENCH model --model gpt2-tiny --device cuda
    finish; exit
fi
# (it exits 77 when it skips: its output, not its status, says whether a device is there)
if [ -x build/test/gpu/test_cuda_device ] && [[ "$(build/test/gpu/test_cuda_device 2>&1)" != SKIP* ]]; then
    echo "SKIP: a CUDA device is visible: nothing to check here (make check-gpu runs the GPU tests)"
    exit 77
fi

# Every kernels/cuda source became an object with Hopper machine code in it.
for cu in kernels/cuda/*.cu; do
    o=build/obj/${cu%.cu}.o
    check "$cu built with an sm_90 fat binary" \
        bash -c "readelf -S '$o' | grep -q nv_fatbin && strings '$o' | grep -q -- '-arch sm_90'"
done

# Every GPU test program (validation/gpu/tests.list) exists, starts, and skips.
for t in $(sed -n 's/^[^#|]*|.*\(build\/test\/gpu\/[a-z_0-9]*\).*/\1/p' validation/gpu/tests.list | sort -u); do
    expect "$t starts and skips" 77 "nothing was checked" -- $t
done
expect "test_nccl at 2 ranks skips on every rank" 77 "nothing was checked" -- \
    $MPIRUN -np 2 build/test/gpu/test_nccl --ranks-per-node 1

out=$(tools/check-gpu.sh 2>&1); rc=$?
ngpu=$(grep -c '^[^#].*|' validation/gpu/tests.list)
check "make check-gpu is skipped without a GPU (exit 77)" test "$rc" -eq 77
check "make check-gpu says nothing was checked" grep -q "no CUDA device is visible.*nothing was checked" <<<"$out"
check "make check-gpu counts its $ngpu tests as skipped" grep -q "^0 passed, 0 failed, $ngpu skipped$" <<<"$out"
check "make check-gpu claims no result" bash -c "! grep -qE '^(PASS|ok)' <<<'$out'"

expect "bench --device cuda without a GPU" 2 "no CUDA device is visible" -- \
    $BENCH model --model gpt2-tiny --device cuda
expect "train --device cuda without a GPU" 2 "no CUDA device is visible" -- \
    $TRAIN --model gpt2-tiny --steps 1 --device cuda --run-dir "$tmp/run"
check "train --device cuda left no run directory" test ! -e "$tmp/run"
expect "bf16 on the CPU below avx512_bf16 is refused" 2 "precision bf16 on the CPU needs AVX512-BF16 or AMX" -- \
    env NEBULA_CPU_ISA=avx2 $BENCH model --model gpt2-tiny --precision bf16
expect "fp16 on the CPU is refused" 2 "precision fp16 needs --device cuda" -- \
    $BENCH model --model gpt2-tiny --precision fp16
expect "an unknown device names the choices" 2 "expected one of cpu|cuda" -- \
    $TRAIN --model gpt2-tiny --device gpu
finish
