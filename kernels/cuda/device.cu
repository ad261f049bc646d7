// device — see device.h. The reduction kernel is the CUDA variant of
// kernels/cpu/reduce.c's sum; the GPU issue adds its test on a real device.
#include "device.h"

#include <cuda_runtime.h>

extern "C" int cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

__global__ static void reduce_sum_f32_kernel(float *dst, const float *src, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] += src[i];
}

extern "C" int cuda_reduce_sum_f32(float *dst, const float *src, size_t n)
{
    if (n == 0) return 0;
    unsigned blocks = (unsigned)((n + 255) / 256);
    if (blocks > 65535u * 8u) blocks = 65535u * 8u;
    reduce_sum_f32_kernel<<<blocks, 256>>>(dst, src, n);
    return (int)cudaGetLastError();
}
