// precision — CUDA casts and loss-scale unscaling (see precision.h).
//
// Elementwise grid-stride loops; each element is one cast or one multiply, so the
// launch shape cannot change a result. fp16 numbers go through the hardware cvt.rn
// (round to nearest even, subnormals kept: nvcc does not flush without -ftz=true);
// bf16 rounding is the same integer carry trick as libcore/precision.c (the kernels
// are memory-bound, the few integer operations are free).
#include "precision.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "device.h"

#define PRECISION_THREADS 256

static unsigned precision_blocks(size_t n)
{
    size_t b = (n + PRECISION_THREADS - 1) / PRECISION_THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

__device__ static inline uint16_t f32_to_bf16_bits(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);  // NaN: quiet, sign kept
    u += 0x7fffu + ((u >> 16) & 1u);  // RNE: carries into bit 16 above half, or at half with an odd lsb
    return (uint16_t)(u >> 16);
}

__device__ static inline uint16_t f32_to_f16_bits(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: libcore's rule, not the hardware's canonical 0x7fff
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
    return __half_as_ushort(__float2half_rn(x));
}

__device__ static inline float f16_bits_to_f32(uint16_t h)
{
    if ((h & 0x7fffu) > 0x7c00u)  // NaN: payload widened, quiet bit set
        return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));  // exact for every number
}

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ static void f32_to_bf16_kernel(const float *x, uint16_t *y, size_t n)
{
    GRID_STRIDE(i, n) y[i] = f32_to_bf16_bits(x[i]);
}

__global__ static void bf16_to_f32_kernel(const uint16_t *x, float *y, size_t n)
{
    GRID_STRIDE(i, n) y[i] = __uint_as_float((uint32_t)x[i] << 16);
}

__global__ static void f32_to_f16_kernel(const float *x, uint16_t *y, size_t n)
{
    GRID_STRIDE(i, n) y[i] = f32_to_f16_bits(x[i]);
}

__global__ static void f16_to_f32_kernel(const uint16_t *x, float *y, size_t n)
{
    GRID_STRIDE(i, n) y[i] = f16_bits_to_f32(x[i]);
}

// Every thread that meets a non-finite value stores 1 to the same int: a benign race
// (all store the same value), as torch's kernel does; no atomics needed.
__global__ static void unscale_check_finite_kernel(float *g, size_t n, float inv_scale, int *found_inf)
{
    GRID_STRIDE(i, n) {
        float v = g[i];
        if (!isfinite(v)) *found_inf = 1;
        g[i] = __fmul_rn(v, inv_scale);
    }
}

#define LAUNCH(kernel, n, ...)                                                                        \
    do {                                                                                             \
        if ((n) == 0) return;                                                                        \
        kernel<<<precision_blocks(n), PRECISION_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>( \
            __VA_ARGS__);                                                                            \
        CUDA_LAUNCH_CHECK(#kernel);                                                                  \
    } while (0)

extern "C" void cuda_f32_to_bf16(const float *x, uint16_t *y, size_t n) { LAUNCH(f32_to_bf16_kernel, n, x, y, n); }
extern "C" void cuda_bf16_to_f32(const uint16_t *x, float *y, size_t n) { LAUNCH(bf16_to_f32_kernel, n, x, y, n); }
extern "C" void cuda_f32_to_f16(const float *x, uint16_t *y, size_t n) { LAUNCH(f32_to_f16_kernel, n, x, y, n); }
extern "C" void cuda_f16_to_f32(const uint16_t *x, float *y, size_t n) { LAUNCH(f16_to_f32_kernel, n, x, y, n); }

extern "C" void cuda_unscale_check_finite(float *g, size_t n, float inv_scale, int *found_inf_dev)
{
    LAUNCH(unscale_check_finite_kernel, n, g, n, inv_scale, found_inf_dev);
}
