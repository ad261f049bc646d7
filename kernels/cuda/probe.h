/* probe — the dense bf16 GEMM rate of this GPU, measured in the calling process: the
 * denominator of MFU in nebula-bench model --device cuda (PyTorch's peer script
 * measures its own the same way: square bf16 products, fp32 accumulation, bf16 out). */
#ifndef NEBULA_KERNELS_CUDA_PROBE_H
#define NEBULA_KERNELS_CUDA_PROBE_H

#ifdef __cplusplus
extern "C" {
#endif

/* FLOP/s of the best of 5 timed n x n x n bf16 products after 3 warm-ups (cuBLAS,
 * CUBLAS_COMPUTE_32F, random operands); negative CUDA or cuBLAS error code on failure.
 * Allocates and frees its own buffers: call it outside a timed loop. */
double cuda_gemm_bf16_flops(int n);

#ifdef __cplusplus
}
#endif

#endif
