#!/usr/bin/env bash
# check-gpu.sh — `make check-gpu`: the GPU tests (validation/gpu/tests.list) and the
# GPU throughput table (Nebula vs PyTorch on the same GPU, same config).
#
# Without CUDA kernels in the build, or without a visible CUDA device, it says so and
# exits 0 having checked nothing: no line of its output claims a GPU result then.
# NEBULA_GPU_BENCH=0 skips the benchmark; NEBULA_GPU_OUT=DIR keeps logs and tables there.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

if [ ! -x build/test/gpu/test_cuda_device ]; then
    echo "check-gpu: this build has no CUDA kernels (nvcc was not found at build time): nothing was checked"
    exit 0
fi
probe=$(build/test/gpu/test_cuda_device 2>&1)
if [[ "$probe" == SKIP* ]]; then
    echo "check-gpu: no CUDA device is visible (driver, CUDA_VISIBLE_DEVICES): $(grep -c '^[^#].*|' validation/gpu/tests.list) GPU tests and the GPU benchmark were not run; nothing was checked"
    exit 0
fi

out=${NEBULA_GPU_OUT:-build/gpu}
mkdir -p "$out"
NEBULA_TEST_LOGS="$out/test-logs" tools/run-tests.sh validation/gpu/tests.list | tee "$out/tests.txt"
rc=${PIPESTATUS[0]}

if [ "${NEBULA_GPU_BENCH:-1}" != 0 ]; then
    tools/peers/bench-model-gpu.sh "$out" || rc=1
fi
exit "$rc"
