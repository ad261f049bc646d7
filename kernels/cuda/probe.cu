// probe — see probe.h.
#include "probe.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "device.h"

// Operands of small random-looking values (a hash of the index): zeros would run
// faster than real data on tensor cores (less switching), which flatters the rate.
__global__ static void probe_fill(__nv_bfloat16 *x, size_t n, unsigned salt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ salt;
        h ^= h >> 15;
        x[i] = __float2bfloat16((float)(h & 0xffff) / 65536.0f - 0.5f);
    }
}

extern "C" double cuda_gemm_bf16_flops(int n)
{
    size_t nn = (size_t)n * (size_t)n;
    __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    cublasHandle_t h = nullptr;
    double best = -1.0;
    cudaError_t ce;
    cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
    if ((ce = cudaMalloc(&a, nn * 2)) || (ce = cudaMalloc(&b, nn * 2)) || (ce = cudaMalloc(&c, nn * 2)) ||
        (ce = cudaEventCreate(&e0)) || (ce = cudaEventCreate(&e1))) {
        best = -(double)ce;
        goto free_all;
    }
    if ((bs = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS) { best = -(double)bs; goto free_all; }
    probe_fill<<<1024, 256>>>(a, nn, 1u);
    probe_fill<<<1024, 256>>>(b, nn, 2u);
    {
        const float one = 1.0f, zero = 0.0f;
        for (int r = 0; r < 8 && bs == CUBLAS_STATUS_SUCCESS; r++) {
            cudaEventRecord(e0, 0);
            bs = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero,
                              c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            cudaEventRecord(e1, 0);
            cudaEventSynchronize(e1);
            float ms = 0.0f;
            cudaEventElapsedTime(&ms, e0, e1);
            double rate = 2.0 * n * (double)n * n / (ms * 1e-3);
            if (r >= 3 && rate > best) best = rate;
        }
        if (bs != CUBLAS_STATUS_SUCCESS) best = -(double)bs;
        if ((ce = cudaGetLastError()) != cudaSuccess) best = -(double)ce;
    }
free_all:
    if (h) cublasDestroy(h);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    return best;
}
