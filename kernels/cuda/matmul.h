/* cuda/matmul — the fully connected layer on the GPU: the CUDA variants of
 * kernels/cpu/matmul.h, same arguments and contracts on device pointers
 * (out = inp · W + bias; backward ADDS into dinp, dweight, dbias; any gradient may
 * be NULL; the weight's layout is an argument, never a transposed copy).
 *
 * Four precisions, one signature (fp32 in, fp32 out, as PyTorch autocast):
 *   cuda_matmul_forward/_backward        exact fp32 (CUBLAS_COMPUTE_32F, no TF32)
 *   cuda_matmul_forward/_backward_tf32   fp32 storage, TF32 tensor cores
 *                                        (CUBLAS_COMPUTE_32F_FAST_TF32)
 *   cuda_matmul_forward/_backward_bf16   operands rounded to bf16 (nearest even) in the
 *                                        workspace, bf16 tensor cores, fp32 accumulation
 *                                        and fp32 output
 *   cuda_matmul_forward/_backward_f16    the same with fp16 operands (nearest even; beyond
 *                                        65504 they become inf: the loss scaler's signal)
 * dbias is always the fp32 column sum of dout (a deterministic kernel). The one
 * design decision is in matmul.cu: every GEMM is one cuBLASLt call on row-major
 * data seen as column-major transposes, written out per call. */
#ifndef NEBULA_KERNELS_CUDA_MATMUL_H
#define NEBULA_KERNELS_CUDA_MATMUL_H

#include "cpu/matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

void cuda_matmul_forward(float *out,          /* (BT, OC) */
                         const float *inp,    /* (BT, C) */
                         const float *weight, /* (OC, C) or (C, OC), per layout */
                         const float *bias,   /* (OC) or NULL */
                         int BT, int C, int OC, matmul_layout layout);
void cuda_matmul_backward(float *dinp,         /* (BT, C) or NULL */
                          float *dweight,      /* like weight, or NULL */
                          float *dbias,        /* (OC) or NULL */
                          const float *dout,   /* (BT, OC) */
                          const float *inp,    /* (BT, C) */
                          const float *weight, /* (OC, C) or (C, OC), per layout */
                          int BT, int C, int OC, matmul_layout layout);

void cuda_matmul_forward_tf32(float *out, const float *inp, const float *weight, const float *bias, int BT, int C,
                              int OC, matmul_layout layout);
void cuda_matmul_backward_tf32(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, int BT, int C, int OC, matmul_layout layout);

void cuda_matmul_forward_bf16(float *out, const float *inp, const float *weight, const float *bias, int BT, int C,
                              int OC, matmul_layout layout);
void cuda_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, int BT, int C, int OC, matmul_layout layout);

void cuda_matmul_forward_f16(float *out, const float *inp, const float *weight, const float *bias, int BT, int C,
                             int OC, matmul_layout layout);
void cuda_matmul_backward_f16(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                              const float *weight, int BT, int C, int OC, matmul_layout layout);

#ifdef __cplusplus
}
#endif

#endif
