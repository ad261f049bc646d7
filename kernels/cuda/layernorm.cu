// layernorm — CUDA variant of kernels/cpu/layernorm.h (see there for the math).
//
// The one design decision: as on the CPU, the backward's dweight/dbias reduction is
// partitioned by the data. Rows are cut into chunks of LAYERNORM_CHUNK_ROWS (32):
// block k forms chunk k's partial sums, each column summed over the chunk's rows in
// row order by one thread, into workspace; a second kernel adds the chunks in chunk
// order, one thread per column. No atomics: the result is the same bits on every run.
// Within a row, one warp reduces over C with a fixed butterfly (xor shuffles).
#include "transformer.h"

#include <cuda_runtime.h>

#include "cpu/layernorm.h"  // LAYERNORM_CHUNK_ROWS
#include "device.h"

#define LN_THREADS 256            // 8 warps per block
#define LN_WARPS (LN_THREADS / 32)

static __device__ __forceinline__ float ln_warp_sum(float x)
{
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;  // every lane holds the same sum (same tree on every lane)
}

// One warp per row: two-pass mean and biased variance, as the CPU path.
__global__ __launch_bounds__(LN_THREADS) static void ln_forward_kernel(float *out, float *mean, float *rstd,
                                                                       const float *inp, const float *weight,
                                                                       const float *bias, int BT, int C, float eps)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (row >= BT) return;
    const float *x = inp + (size_t)row * C;
    float *o = out + (size_t)row * C;
    float m = 0.0f;
    for (int c = lane; c < C; c += 32) m += x[c];
    m = ln_warp_sum(m) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    v = ln_warp_sum(v) / (float)C;
    const float s = 1.0f / sqrtf(v + eps);
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
}

// Block k = rows [32k, 32k + 32). Phase 1: one warp per row adds the row's dinp.
// Phase 2: thread per column sums n * dout and dout over the chunk's rows in row
// order into part (nchunk, 2, C): [k][0][c] dweight partial, [k][1][c] dbias partial.
__global__ __launch_bounds__(LN_THREADS) static void ln_backward_chunk_kernel(
    float *dinp, float *part, const float *dout, const float *inp, const float *weight, const float *mean,
    const float *rstd, int BT, int C)
{
    const int k = blockIdx.x;
    const int r0 = k * LAYERNORM_CHUNK_ROWS;
    const int r1 = min(r0 + LAYERNORM_CHUNK_ROWS, BT);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = r0 + warp; i < r1; i += LN_WARPS) {
        const float *x = inp + (size_t)i * C, *g = dout + (size_t)i * C;
        float *dx = dinp + (size_t)i * C;
        const float m = mean[i], s = rstd[i];
        float dn_mean = 0.0f, dnn_mean = 0.0f;
        for (int c = lane; c < C; c += 32) {
            float n = (x[c] - m) * s, dn = weight[c] * g[c];
            dn_mean += dn;
            dnn_mean += dn * n;
        }
        dn_mean = ln_warp_sum(dn_mean) / (float)C;
        dnn_mean = ln_warp_sum(dnn_mean) / (float)C;
        for (int c = lane; c < C; c += 32) {
            float n = (x[c] - m) * s, dn = weight[c] * g[c];
            dx[c] += (dn - dn_mean - n * dnn_mean) * s;
        }
    }
    // Phase 2 reads only inp/dout/mean/rstd, which phase 1 does not write: no barrier needed.
    float *pw = part + (size_t)k * 2 * C, *pb = pw + C;
    for (int c = threadIdx.x; c < C; c += LN_THREADS) {
        float sw = 0.0f, sb = 0.0f;
        for (int i = r0; i < r1; i++) {
            float g = dout[(size_t)i * C + c];
            sw += (inp[(size_t)i * C + c] - mean[i]) * rstd[i] * g;
            sb += g;
        }
        pw[c] = sw;
        pb[c] = sb;
    }
}

// Thread per column: chunks added in chunk order, then once into dweight/dbias.
__global__ static void ln_backward_reduce_kernel(float *dweight, float *dbias, const float *part, int nchunk, int C)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < nchunk; k++) {
        sw += part[(size_t)k * 2 * C + c];
        sb += part[(size_t)k * 2 * C + C + c];
    }
    dweight[c] += sw;
    dbias[c] += sb;
}

extern "C" void cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                       const float *bias, int BT, int C, float eps)
{
    if (BT <= 0 || C <= 0) return;
    cudaStream_t st = (cudaStream_t)cuda_stream_current();
    const int blocks = (BT + LN_WARPS - 1) / LN_WARPS;
    ln_forward_kernel<<<blocks, LN_THREADS, 0, st>>>(out, mean, rstd, inp, weight, bias, BT, C, eps);
    CUDA_LAUNCH_CHECK("ln_forward_kernel");
}

extern "C" void cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                        const float *inp, const float *weight, const float *mean,
                                        const float *rstd, int BT, int C)
{
    if (BT <= 0 || C <= 0) return;
    const int nchunk = (BT + LAYERNORM_CHUNK_ROWS - 1) / LAYERNORM_CHUNK_ROWS;
    float *part = (float *)cuda_workspace((size_t)nchunk * 2 * (size_t)C * sizeof(float));
    if (!part) return;  // the failure is recorded
    cudaStream_t st = (cudaStream_t)cuda_stream_current();
    ln_backward_chunk_kernel<<<nchunk, LN_THREADS, 0, st>>>(dinp, part, dout, inp, weight, mean, rstd, BT, C);
    CUDA_LAUNCH_CHECK("ln_backward_chunk_kernel");
    ln_backward_reduce_kernel<<<(C + 255) / 256, 256, 0, st>>>(dweight, dbias, part, nchunk, C);
    CUDA_LAUNCH_CHECK("ln_backward_reduce_kernel");
}
