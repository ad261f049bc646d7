// residual — CUDA variant of kernels/cpu/residual.h: out = a + b, and the backward
// da += dout, db += dout (either may be NULL).
//
// The one design decision: one rounding per element, exactly as the CPU path, so
// the two agree bit for bit; the backward reads dout once for both branches.
#include "transformer.h"

#include <cuda_runtime.h>

#include "device.h"

#define RES_THREADS 256

static unsigned res_blocks(size_t N)
{
    size_t b = (N + RES_THREADS - 1) / RES_THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

__global__ static void residual_forward_kernel(float *out, const float *a, const float *b, size_t N)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

// da, db: either may be NULL (checked per element; uniform across the grid, so no divergence).
__global__ static void residual_backward_kernel(float *da, float *db, const float *dout, size_t N)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) {
        float g = dout[i];
        if (da) da[i] += g;
        if (db) db[i] += g;
    }
}

extern "C" void cuda_residual_forward(float *out, const float *a, const float *b, size_t N)
{
    if (N == 0) return;
    residual_forward_kernel<<<res_blocks(N), RES_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(out, a, b, N);
    CUDA_LAUNCH_CHECK("residual_forward_kernel");
}

extern "C" void cuda_residual_backward(float *da, float *db, const float *dout, size_t N)
{
    if (N == 0 || (!da && !db)) return;
    residual_backward_kernel<<<res_blocks(N), RES_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(da, db, dout,
                                                                                                     N);
    CUDA_LAUNCH_CHECK("residual_backward_kernel");
}
