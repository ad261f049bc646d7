// xent — CUDA variant of kernels/cpu/xent.h: fused softmax + cross-entropy over the
// real columns [0, V) of logits padded to Vp columns, saving lse for the backward.
//
// The one design decision: one block per row, and the row's sum of exp is formed in
// double (per thread in column order, then a fixed tree over the block), as the CPU
// path sums in double: lse carries no visible summation error even for V ~ 50k, and
// the fixed order makes it the same bits on every run. Columns [V, Vp) are never
// read or written. A target outside [0, V) that is not XENT_IGNORE (the CPU path
// dies) gives a NaN loss and no gradient, so the bug shows in the loss.
#include "transformer.h"

#include <cuda_runtime.h>
#include <math_constants.h>

#include "cpu/xent.h"  // XENT_IGNORE
#include "device.h"

#define XENT_THREADS 512

// Block-wide max and sum over XENT_THREADS threads, every thread gets the result.
// Fixed trees (warp butterfly, then warp 0 over the warp results): deterministic.
static __device__ float xent_block_max(float x, float *sh)
{
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    x = lane < XENT_THREADS / 32 ? sh[lane] : -CUDART_INF_F;
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    __syncthreads();  // sh may be reused by the caller
    return x;
}

static __device__ double xent_block_sum(double x, double *sh)
{
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    x = lane < XENT_THREADS / 32 ? sh[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    __syncthreads();
    return x;
}

// Row i = blockIdx.x (grid-stride over rows).
__global__ __launch_bounds__(XENT_THREADS) static void xent_forward_kernel(float *losses, float *lse,
                                                                          const float *logits,
                                                                          const int32_t *targets, int BT, int V,
                                                                          int Vp)
{
    __shared__ float shf[32];
    __shared__ double shd[32];
    for (int i = blockIdx.x; i < BT; i += gridDim.x) {
        const float *x = logits + (size_t)i * Vp;
        float mx = -CUDART_INF_F;
        for (int j = threadIdx.x; j < V; j += XENT_THREADS) mx = fmaxf(mx, x[j]);
        mx = xent_block_max(mx, shf);
        float L;
        if (mx == CUDART_INF_F) {
            L = mx;  // exp(inf - inf) would turn an infinite logit into NaN (as the CPU path)
        } else {
            double sum = 0.0;
            for (int j = threadIdx.x; j < V; j += XENT_THREADS) sum += (double)expf(x[j] - mx);
            sum = xent_block_sum(sum, shd);
            L = mx + (float)log(sum);
        }
        if (threadIdx.x == 0) {
            const int t = targets[i];
            lse[i] = L;
            if (t == XENT_IGNORE) losses[i] = 0.0f;
            else losses[i] = t >= 0 && t < V ? L - x[t] : CUDART_NAN_F;
        }
    }
}

// Row i = blockIdx.x (grid-stride); one rounding into dlogits per entry, as the CPU path.
__global__ static void xent_backward_kernel(float *dlogits, const float *logits, const float *lse,
                                            const int32_t *targets, const float *dlosses, int BT, int V, int Vp)
{
    for (int i = blockIdx.x; i < BT; i += gridDim.x) {
        const int t = targets[i];
        if (t < 0 || t >= V) continue;  // XENT_IGNORE (or a bad target: NaN loss, no gradient)
        const float *x = logits + (size_t)i * Vp;
        float *dx = dlogits + (size_t)i * Vp;
        const float g = dlosses[i], L = lse[i];
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float p = expf(x[j] - L);
            if (j == t) p -= 1.0f;
            dx[j] += g * p;
        }
    }
}

extern "C" void cuda_xent_forward(float *losses, float *lse, const float *logits, const int32_t *targets, int BT,
                                  int V, int Vp)
{
    if (BT <= 0) return;
    if (V < 1 || Vp < V) {
        cuda_error_record((int)cudaErrorInvalidValue, "cuda_xent_forward: need 1 <= V <= Vp", __FILE__, __LINE__);
        return;
    }
    const int blocks = BT < 65536 ? BT : 65536;
    xent_forward_kernel<<<blocks, XENT_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(losses, lse, logits,
                                                                                           targets, BT, V, Vp);
    CUDA_LAUNCH_CHECK("xent_forward_kernel");
}

extern "C" void cuda_xent_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                                   const float *dlosses, int BT, int V, int Vp)
{
    if (BT <= 0) return;
    if (V < 1 || Vp < V) {
        cuda_error_record((int)cudaErrorInvalidValue, "cuda_xent_backward: need 1 <= V <= Vp", __FILE__, __LINE__);
        return;
    }
    const int blocks = BT < 65536 ? BT : 65536;
    xent_backward_kernel<<<blocks, 256, 0, (cudaStream_t)cuda_stream_current()>>>(dlogits, logits, lse, targets,
                                                                                   dlosses, BT, V, Vp);
    CUDA_LAUNCH_CHECK("xent_backward_kernel");
}
