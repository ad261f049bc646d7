#!/usr/bin/env bash
# check-gpu.sh — `make check-gpu`: the GPU tests (validation/gpu/tests.list) and the
# GPU throughput table (Nebula vs PyTorch on the same GPU, same config).
#
# Without CUDA kernels in the build it says so and exits 77 (skipped, as a test that
# cannot run here; `make check-gpu` turns that into success). Without a visible CUDA
# device every GPU test runs and skips itself (exit 77, counted as skipped by the
# runner), the benchmark is not run, and it exits 77: no line claims a GPU result then.
# NEBULA_GPU_BENCH=0 skips the benchmark; NEBULA_GPU_OUT=DIR keeps logs and tables there.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

if [ ! -x build/test/gpu/test_cuda_device ]; then
    echo "SKIP: this build has no CUDA kernels (nvcc was not found at build time): nothing was checked"
    exit 77
fi
probe=$(build/test/gpu/test_cuda_device 2>&1)
device=1
[[ "$probe" == SKIP* ]] && device=0

out=${NEBULA_GPU_OUT:-build/gpu}
mkdir -p "$out"
NEBULA_TEST_LOGS="$out/test-logs" tools/run-tests.sh validation/gpu/tests.list | tee "$out/tests.txt"
rc=${PIPESTATUS[0]}
if [ $device = 0 ]; then
    echo "SKIP: no CUDA device is visible (driver, CUDA_VISIBLE_DEVICES): the GPU tests skipped and the GPU benchmark was not run; nothing was checked"
    [ "$rc" -eq 0 ] && exit 77
    exit "$rc"
fi

if [ "${NEBULA_GPU_BENCH:-1}" != 0 ]; then
    tools/peers/bench-model-gpu.sh "$out" || rc=1
fi
exit "$rc"
