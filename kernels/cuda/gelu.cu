// gelu — CUDA variant of kernels/cpu/gelu.h: tanh form (GPT-2) and exact erf form
// (BERT), forward and backward (which ADDS dout * gelu'(inp) into dinp).
//
// The one design decision: the same cancellation-free forms as the CPU fast path,
//   0.5 (1 + tanh u) = 1 / (1 + exp(-2u)),   1 + erf z = erfc(-z),
// with CUDA's full-precision expf/erfcf (2 and 4 ulp, no -use_fast_math), so both
// paths agree to a few ulp and keep relative precision in the negative tail.
// Elementwise, grid-stride loops: one rounding chain per element, no reductions.
#include "transformer.h"

#include <cuda_runtime.h>

#include "device.h"

#define GELU_K 0.7978845608028654f        // sqrt(2 / pi)
#define GELU_A 0.044715f
#define GELU_RSQRT2 0.7071067811865476f   // 1 / sqrt(2)
#define GELU_RSQRT2PI 0.3989422804014327f // 1 / sqrt(2 pi)
#define GELU_THREADS 256

// Enough blocks to fill the GPU several times over; the loops stride over the rest.
static unsigned gelu_blocks(size_t N)
{
    size_t b = (N + GELU_THREADS - 1) / GELU_THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

__global__ static void gelu_tanh_forward_kernel(float *out, const float *inp, size_t N)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i], u = GELU_K * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + expf(-2.0f * u));  // x -> -inf: x / inf = -0, the limit
    }
}

__global__ static void gelu_tanh_backward_kernel(float *dinp, const float *inp, const float *dout, size_t N)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i], u = GELU_K * (x + GELU_A * x * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));  // sigmoid(2u) = 0.5 (1 + tanh u)
        float g = s + 2.0f * x * s * (1.0f - s) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        dinp[i] += dout[i] * g;
    }
}

__global__ static void gelu_erf_forward_kernel(float *out, const float *inp, size_t N)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        out[i] = 0.5f * x * erfcf(-x * GELU_RSQRT2);
    }
}

__global__ static void gelu_erf_backward_kernel(float *dinp, const float *inp, const float *dout, size_t N)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float g = 0.5f * erfcf(-x * GELU_RSQRT2) + x * GELU_RSQRT2PI * expf(-0.5f * x * x);
        dinp[i] += dout[i] * g;
    }
}

extern "C" void cuda_gelu_tanh_forward(float *out, const float *inp, size_t N)
{
    if (N == 0) return;
    gelu_tanh_forward_kernel<<<gelu_blocks(N), GELU_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(out, inp, N);
    CUDA_LAUNCH_CHECK("gelu_tanh_forward_kernel");
}

extern "C" void cuda_gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
    if (N == 0) return;
    gelu_tanh_backward_kernel<<<gelu_blocks(N), GELU_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(dinp, inp,
                                                                                                        dout, N);
    CUDA_LAUNCH_CHECK("gelu_tanh_backward_kernel");
}

extern "C" void cuda_gelu_erf_forward(float *out, const float *inp, size_t N)
{
    if (N == 0) return;
    gelu_erf_forward_kernel<<<gelu_blocks(N), GELU_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(out, inp, N);
    CUDA_LAUNCH_CHECK("gelu_erf_forward_kernel");
}

extern "C" void cuda_gelu_erf_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
    if (N == 0) return;
    gelu_erf_backward_kernel<<<gelu_blocks(N), GELU_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(dinp, inp,
                                                                                                       dout, N);
    CUDA_LAUNCH_CHECK("gelu_erf_backward_kernel");
}
