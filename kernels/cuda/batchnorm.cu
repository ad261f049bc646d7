// cuda/batchnorm — batchnorm.h's plan on the GPU (see cnn.h), NCHW only, with own
// kernels rather than cuDNN's, so that the semantics are the CPU's to the letter
// and every reduction is deterministic.
//
// The one design decision: per-channel statistics are reduced in DOUBLE in a
// fixed two-stage order. Stage 1: a (splits, C) grid; block (s, c) owns a fixed
// slice of the channel's M = N*HW values, each thread sums its strided elements
// in order, then a fixed shared-memory tree; partials (C, splits, 2) go to the
// plan's buffer. Stage 2: one thread per channel adds the partials in s order.
// The forward sums x - x0 and (x - x0)^2 with x0 the channel's first value (a
// shift that keeps the one-pass variance free of cancellation); backward sums g
// and g * xhat. No atomics, so results do not depend on scheduling.
//
// Semantics (batchnorm.h): normalisation with the BIASED batch variance; running
// stats move toward the batch mean and the UNBIASED variance, in double from the
// float statistics exactly as batchnorm.c does; p->mean and p->var keep the float
// batch mean and biased variance for backward. The fused ReLU's backward mask is
// y > 0 with y recomputed from the saved statistics by the same rounded
// expression as the forward (bn_y, explicit _rn intrinsics so no FMA contraction
// can differ between kernels). dinp WRITTEN, dweight and dbias ADDED.
#include "cnn.h"

#include "device.h"

#include <cstring>
#include <cuda_runtime.h>

namespace {

constexpr int BN_THREADS = 256;
constexpr int BN_SPLITS_MAX = 128;     // blocks per channel at most
constexpr int BN_PER_BLOCK = 8192;     // values per block (before the cap)

// rstd = 1/sqrt(var + eps), correctly rounded steps: identical in every kernel.
__device__ __forceinline__ float bn_rstd(float var, float eps)
{
    return __frcp_rn(__fsqrt_rn(__fadd_rn(var, eps)));
}

// y = (x - mean) * rstd * w + b, one rounding per step (no contraction).
__device__ __forceinline__ float bn_y(float x, float mean, float rs, float w, float b)
{
    return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(x, mean), rs), w), b);
}

// Block-wide sums of two doubles in a fixed tree; result valid in thread 0.
__device__ __forceinline__ void block_sum2(double &a, double &b)
{
    __shared__ double sa[BN_THREADS], sb[BN_THREADS];
    sa[threadIdx.x] = a, sb[threadIdx.x] = b;
    __syncthreads();
    for (int s = BN_THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) sa[threadIdx.x] += sa[threadIdx.x + s], sb[threadIdx.x] += sb[threadIdx.x + s];
        __syncthreads();
    }
    a = sa[0], b = sb[0];
}

// Stage 1 of the forward statistics: partial[(c*splits + s)*2 + {0,1}] =
// sums of d = x - x0 and d^2 over slice s of channel c (m = n*HW + i).
__global__ void bn_stats_partial(double *partial, const float *x, int C, int HW, size_t M, size_t chunk)
{
    const int s = blockIdx.x, c = blockIdx.y, splits = gridDim.x;
    const float x0 = x[(size_t)c * HW];
    const size_t m0 = (size_t)s * chunk, m1 = m0 + chunk < M ? m0 + chunk : M;
    double a = 0.0, q = 0.0;
    for (size_t m = m0 + threadIdx.x; m < m1; m += BN_THREADS) {
        size_t n = m / HW, i = m % HW;
        double d = (double)x[(n * C + c) * HW + i] - (double)x0;
        a += d, q += d * d;
    }
    block_sum2(a, q);
    if (threadIdx.x == 0) {
        partial[((size_t)c * splits + s) * 2] = a;
        partial[((size_t)c * splits + s) * 2 + 1] = q;
    }
}

// Stage 2: mean and biased variance per channel, running stats as batchnorm.c.
__global__ void bn_stats_final(float *mean, float *var, float *running_mean, float *running_var, const double *partial,
                               const float *x, int C, int HW, size_t M, int splits, float momentum)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double a = 0.0, q = 0.0;
    for (int s = 0; s < splits; s++) a += partial[((size_t)c * splits + s) * 2], q += partial[((size_t)c * splits + s) * 2 + 1];
    const double md = a / (double)M;
    double v = q / (double)M - md * md;
    if (v < 0.0) v = 0.0;
    const float mf = (float)((double)x[(size_t)c * HW] + md), vf = (float)v;
    mean[c] = mf, var[c] = vf;
    // batchnorm.c: (1 - momentum) * running + momentum * stat, in double from the float stats;
    // the running variance takes the unbiased var * M/(M-1) (M = 1 keeps var).
    if (running_mean) running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + (double)momentum * mf);
    if (running_var) {
        double vu = M > 1 ? (double)vf * (double)M / (double)(M - 1) : (double)vf;
        running_var[c] = (float)((1.0 - momentum) * running_var[c] + (double)momentum * vu);
    }
}

// out = bn(x) (ReLU'd when relu), one block per (n, c) plane; mean/var are the
// batch statistics (training) or the running ones (eval). In place is safe.
__global__ void bn_apply(float *out, const float *x, const float *mean, const float *var, const float *w,
                         const float *b, int C, int HW, float eps, int relu)
{
    const size_t plane = blockIdx.x;
    const int c = (int)(plane % C);
    const float m = mean[c], rs = bn_rstd(var[c], eps), wc = w[c], bc = b[c];
    const float *xp = x + plane * HW;
    float *op = out + plane * HW;
    for (int i = threadIdx.x; i < HW; i += blockDim.x) {
        float y = bn_y(xp[i], m, rs, wc, bc);
        op[i] = relu ? (y > 0.0f ? y : 0.0f) : y;
    }
}

// The upstream gradient after the fused ReLU: dout where y > 0, else 0.
__device__ __forceinline__ float bn_grad(float g, float x, float m, float rs, float wc, float bc, int relu)
{
    return relu && !(bn_y(x, m, rs, wc, bc) > 0.0f) ? 0.0f : g;
}

// Stage 1 of backward: sums of g and g * xhat over slice s of channel c.
__global__ void bn_bwd_partial(double *partial, const float *dout, const float *x, const float *mean, const float *var,
                               const float *w, const float *b, int C, int HW, size_t M, size_t chunk, float eps, int relu)
{
    const int s = blockIdx.x, c = blockIdx.y, splits = gridDim.x;
    const float m = mean[c], rs = bn_rstd(var[c], eps), wc = w[c], bc = relu ? b[c] : 0.0f;
    const size_t m0 = (size_t)s * chunk, m1 = m0 + chunk < M ? m0 + chunk : M;
    double sg = 0.0, sgx = 0.0;
    for (size_t k = m0 + threadIdx.x; k < m1; k += BN_THREADS) {
        size_t n = k / HW, i = k % HW, j = (n * C + c) * HW + i;
        float xv = x[j], g = bn_grad(dout[j], xv, m, rs, wc, bc, relu);
        float xhat = __fmul_rn(__fsub_rn(xv, m), rs);
        sg += (double)g, sgx += (double)g * (double)xhat;
    }
    block_sum2(sg, sgx);
    if (threadIdx.x == 0) {
        partial[((size_t)c * splits + s) * 2] = sg;
        partial[((size_t)c * splits + s) * 2 + 1] = sgx;
    }
}

// Stage 2 of backward: dweight += sum(g * xhat), dbias += sum(g) (ADDED); the sums are kept for dinp.
__global__ void bn_bwd_final(double *sums, float *dweight, float *dbias, const double *partial, int C, int splits)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double sg = 0.0, sgx = 0.0;
    for (int s = 0; s < splits; s++) sg += partial[((size_t)c * splits + s) * 2], sgx += partial[((size_t)c * splits + s) * 2 + 1];
    sums[2 * c] = sg, sums[2 * c + 1] = sgx;
    if (dweight) dweight[c] += (float)sgx;
    if (dbias) dbias[c] += (float)sg;
}

// dinp = w * rstd * (g - sum(g)/M - xhat * sum(g xhat)/M), WRITTEN; one block per plane.
__global__ void bn_bwd_dx(float *dinp, const float *dout, const float *x, const float *mean, const float *var,
                          const float *w, const float *b, const double *sums, int C, int HW, size_t M, float eps, int relu)
{
    const size_t plane = blockIdx.x;
    const int c = (int)(plane % C);
    const float m = mean[c], rs = bn_rstd(var[c], eps), wc = w[c], bc = relu ? b[c] : 0.0f;
    const float k1 = (float)(sums[2 * c] / (double)M), k2 = (float)(sums[2 * c + 1] / (double)M);
    const float scale = wc * rs;
    for (int i = threadIdx.x; i < HW; i += blockDim.x) {
        size_t j = plane * HW + i;
        float xv = x[j], g = bn_grad(dout[j], xv, m, rs, wc, bc, relu);
        float xhat = __fmul_rn(__fsub_rn(xv, m), rs);
        dinp[j] = scale * (g - k1 - xhat * k2);
    }
}

bool plan_usable(const cuda_batchnorm_plan *p, const char *what)
{
    if (p->ok) return true;
    cuda_error_record((int)cudaErrorInvalidValue, what, __FILE__, __LINE__);
    return false;
}

}  // namespace

extern "C" void cuda_batchnorm_plan_init(cuda_batchnorm_plan *p, int N, int C, int H, int W, dnn_layout layout,
                                         float eps, bool relu)
{
    memset(p, 0, sizeof *p);
    p->N = N, p->C = C, p->H = H, p->W = W, p->layout = layout, p->eps = eps, p->relu = relu;
    if (layout != DNN_NCHW || N < 1 || C < 1 || H < 1 || W < 1 || C > 65535) {
        cuda_error_record((int)cudaErrorInvalidValue,
                          "cuda_batchnorm_plan_init: only DNN_NCHW, N, H, W >= 1, 1 <= C <= 65535", __FILE__, __LINE__);
        return;
    }
    const size_t M = (size_t)N * H * W;
    size_t splits = (M + BN_PER_BLOCK - 1) / BN_PER_BLOCK;
    p->splits = (int)(splits > BN_SPLITS_MAX ? BN_SPLITS_MAX : splits);
    // One allocation: partial (C, splits, 2) and sums (C, 2) doubles, then mean and var floats.
    const size_t nd = (size_t)C * p->splits * 2 + (size_t)C * 2;
    p->bytes = nd * sizeof(double) + 2 * (size_t)C * sizeof(float);
    void *buf = nullptr;
    cudaError_t e = cudaMalloc(&buf, p->bytes);
    if (e != cudaSuccess) {
        cuda_error_record((int)e, "cudaMalloc of the batchnorm plan", __FILE__, __LINE__);
        p->bytes = 0;
        return;
    }
    p->partial = (double *)buf;
    p->sums = p->partial + (size_t)C * p->splits * 2;
    p->mean = (float *)(p->partial + nd);
    p->var = p->mean + C;
    p->ok = true;
}

extern "C" void cuda_batchnorm_plan_free(cuda_batchnorm_plan *p)
{
    if (p->partial) cudaFree(p->partial);
    memset(p, 0, sizeof *p);
}

extern "C" void cuda_batchnorm_plan_forward(cuda_batchnorm_plan *p, float *out, const float *inp, const float *weight,
                                            const float *bias, float *running_mean, float *running_var, float momentum,
                                            bool training)
{
    if (!plan_usable(p, "cuda_batchnorm_plan_forward on a plan that failed init")) return;
    cudaStream_t st = (cudaStream_t)cuda_stream_current();
    const int C = p->C, HW = p->H * p->W;
    const size_t M = (size_t)p->N * HW, planes = (size_t)p->N * C;
    const float *mean = running_mean, *var = running_var;
    if (training) {
        const size_t chunk = (M + p->splits - 1) / p->splits;
        bn_stats_partial<<<dim3((unsigned)p->splits, (unsigned)C), BN_THREADS, 0, st>>>(p->partial, inp, C, HW, M, chunk);
        CUDA_LAUNCH_CHECK("bn_stats_partial");
        bn_stats_final<<<(unsigned)((C + 127) / 128), 128, 0, st>>>(p->mean, p->var, running_mean, running_var,
                                                                    p->partial, inp, C, HW, M, p->splits, momentum);
        CUDA_LAUNCH_CHECK("bn_stats_final");
        mean = p->mean, var = p->var;
    }
    bn_apply<<<(unsigned)planes, BN_THREADS, 0, st>>>(out, inp, mean, var, weight, bias, C, HW, p->eps, p->relu);
    CUDA_LAUNCH_CHECK("bn_apply");
}

extern "C" void cuda_batchnorm_plan_backward(cuda_batchnorm_plan *p, float *dinp, float *dweight, float *dbias,
                                             const float *dout, const float *inp, const float *weight,
                                             const float *bias)
{
    if (!plan_usable(p, "cuda_batchnorm_plan_backward on a plan that failed init")) return;
    if (!dinp && !dweight && !dbias) return;
    cudaStream_t st = (cudaStream_t)cuda_stream_current();
    const int C = p->C, HW = p->H * p->W;
    const size_t M = (size_t)p->N * HW, planes = (size_t)p->N * C;
    const size_t chunk = (M + p->splits - 1) / p->splits;
    bn_bwd_partial<<<dim3((unsigned)p->splits, (unsigned)C), BN_THREADS, 0, st>>>(
        p->partial, dout, inp, p->mean, p->var, weight, bias, C, HW, M, chunk, p->eps, p->relu);
    CUDA_LAUNCH_CHECK("bn_bwd_partial");
    bn_bwd_final<<<(unsigned)((C + 127) / 128), 128, 0, st>>>(p->sums, dweight, dbias, p->partial, C, p->splits);
    CUDA_LAUNCH_CHECK("bn_bwd_final");
    if (dinp) {
        bn_bwd_dx<<<(unsigned)planes, BN_THREADS, 0, st>>>(dinp, dout, inp, p->mean, p->var, weight, bias, p->sums, C,
                                                           HW, M, p->eps, p->relu);
        CUDA_LAUNCH_CHECK("bn_bwd_dx");
    }
}
