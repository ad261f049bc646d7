/* matmul — the fully connected layer: out = inp · W + bias, through gemm_f32 (gemm.h:
 * the BLAS, or oneDNN where the BLAS lags the CPU), with a double-precision plain-loop reference as its specification.
 *
 * The one design decision: the weight's memory layout is an argument, not a
 * transposed copy. nn.Linear stores W as (OC, C), HF GPT-2's Conv1D as (C, OC);
 * both are used as loaded and sgemm's transpose flags absorb the difference, so
 * a checkpoint never needs converting and dweight comes out in the weight's own
 * layout (the parameter and gradient buffers share one layout).
 *
 * Backward ADDS into dinp, dweight and dbias (sgemm with beta = 1); any of them may
 * be NULL to skip that gradient (frozen weights, a first layer without dinp). */
#ifndef NEBULA_KERNELS_MATMUL_H
#define NEBULA_KERNELS_MATMUL_H

#include <stddef.h>

typedef enum matmul_layout {
    MATMUL_LAYOUT_OUT_IN = 0, /* nn.Linear: weight (OC, C) */
    MATMUL_LAYOUT_IN_OUT,     /* HF GPT-2 Conv1D: weight (C, OC) */
} matmul_layout;

/* out = inp · W + bias; bias may be NULL (no bias). */
void matmul_forward(float *out,          /* (BT, OC) */
                    const float *inp,    /* (BT, C) */
                    const float *weight, /* (OC, C) or (C, OC), per layout */
                    const float *bias,   /* (OC) or NULL */
                    int BT, int C, int OC, matmul_layout layout);

/* dinp += dout · W^T, dweight += (the layout's arrangement of) inp^T · dout,
 * dbias += column sums of dout. Each gradient may be NULL (skipped). */
void matmul_backward(float *dinp,         /* (BT, C) or NULL */
                     float *dweight,      /* like weight, or NULL */
                     float *dbias,        /* (OC) or NULL */
                     const float *dout,   /* (BT, OC) */
                     const float *inp,    /* (BT, C) */
                     const float *weight, /* (OC, C) or (C, OC), per layout */
                     int BT, int C, int OC, matmul_layout layout);

/* The same contracts with bf16 operands (--precision bf16 on the CPU,
 * matmul_bf16.c): inp, weight and dout rounded to bf16 (nearest even), products
 * summed in fp32, outputs and the bias fp32. Needs isa level avx512_bf16 or amx
 * (device_open checks). The backward reuses the bf16 copy of the weight its forward
 * made: between a layer's forward and backward the weight must not change.
 * matmul_bf16_release frees those copies and the operand workspace (device_close). */
void matmul_forward_bf16(float *out, const float *inp, const float *weight, const float *bias, int BT, int C,
                         int OC, matmul_layout layout);
void matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int BT, int C, int OC, matmul_layout layout);
void matmul_bf16_release(void);

/* The specification: the same contracts in double, as plain triple loops. */
void matmul_forward_ref(double *out,          /* (BT, OC) */
                        const double *inp,    /* (BT, C) */
                        const double *weight, /* (OC, C) or (C, OC), per layout */
                        const double *bias,   /* (OC) or NULL */
                        int BT, int C, int OC, matmul_layout layout);
void matmul_backward_ref(double *dinp,         /* (BT, C) or NULL */
                         double *dweight,      /* like weight, or NULL */
                         double *dbias,        /* (OC) or NULL */
                         const double *dout,   /* (BT, OC) */
                         const double *inp,    /* (BT, C) */
                         const double *weight, /* (OC, C) or (C, OC), per layout */
                         int BT, int C, int OC, matmul_layout layout);

#endif
