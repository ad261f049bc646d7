/* nano_kern — the edge runtime's heavy kernels: fp32 and int8 GEMM and convolution.
 *
 * Each constant-weight operator is prepared once at load (weights packed into the
 * layout of this CPU's micro-kernel) and then run with no allocation; the scratch it
 * needs per run (im2col columns, quantised input) is a region of the model's arena that
 * the caller passes in, sized by the _scratch call. The instruction set is chosen at run
 * time (nano_isa): AVX-512 and AVX2+FMA on x86-64, NEON on arm64, portable C anywhere;
 * NEBULA_NANO_ISA=portable|avx2|avx512|neon forces one (lower than the CPU has).
 *
 * Numerics: the fp32 kernels sum in another order than a plain loop, so they agree with
 * the reference within K·eps·Σ|a·b|; the int8 kernels accumulate in int32 exactly. */
#ifndef NEBULA_NANO_KERN_H
#define NEBULA_NANO_KERN_H

#include <stddef.h>
#include <stdint.h>

typedef enum nano_isa_level {
    NANO_ISA_PORTABLE = 0,
    NANO_ISA_NEON = 1,
    NANO_ISA_AVX2 = 2,
    NANO_ISA_AVX512 = 3,
    NANO_ISA_AVX512_VNNI = 4, /* AVX-512 with VNNI: int8 dot products (vpdpbusd) */
} nano_isa_level;

/* The level the kernels use (the CPU's best, or NEBULA_NANO_ISA's), detected once. */
nano_isa_level nano_isa(void);

/* IEEE half <-> float (round to nearest even). */
float nano_f16_to_f32(uint16_t h);
uint16_t nano_f32_to_f16(float f);
void nano_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);

/* The activation after a kernel (nano_act of nano_graph.h), applied in the kernel's
 * store so the output is written once. */
typedef struct nano_epilogue {
    int act;          /* nano_act */
    float lo, hi;     /* NANO_ACT_CLIP bounds */
} nano_epilogue;

/* ---- fp32 GEMM with a constant operand ------------------------------------------
 * Y (M, N) = X (M, K) · Wᵀ + bias, W row-major (N, K) as ONNX Gemm with transB = 1
 * stores it (a Gemm with transB = 0 is transposed by the caller before packing). */
typedef struct nano_gemm nano_gemm;
nano_gemm *nano_gemm_prepare(const float *W /* (N, K) */, const float *bias /* (N) or NULL */,
                             int N, int K, nano_epilogue ep);
void nano_gemm_free(nano_gemm *p);
size_t nano_gemm_bytes(const nano_gemm *p);       /* memory held (packed weights) */
size_t nano_gemm_scratch(const nano_gemm *p, int M);
void nano_gemm_run(const nano_gemm *p, int M, const float *X /* (M, K) ldx */, int ldx,
                   float *Y /* (M, N) ldy */, int ldy, void *scratch, int nthreads);

/* ---- fp32 GEMM of two activations (MatMul in attention) ----------------------------
 * C (M, N) = A (M, K) · B (K, N), row-major with leading dimensions; trans_b: B is given
 * as (N, K). Batches are the caller's loop. */
void nano_sgemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb, int trans_b,
                float *C, int ldc, int nthreads);

/* ---- fp32 convolution, NCHW ----------------------------------------------------- */
typedef struct nano_conv_desc {
    int N, C, H, W;     /* input */
    int M, OH, OW;      /* output channels and size */
    int kh, kw, sh, sw, dh, dw;
    int pad_t, pad_l, pad_b, pad_r;
    int group;
} nano_conv_desc;
typedef struct nano_conv nano_conv;
nano_conv *nano_conv_prepare(const nano_conv_desc *d, const float *W /* (M, C/group, kh, kw) */,
                             const float *bias /* (M) or NULL */, nano_epilogue ep);
void nano_conv_free(nano_conv *p);
size_t nano_conv_bytes(const nano_conv *p);
size_t nano_conv_scratch(const nano_conv *p);
void nano_conv_run(const nano_conv *p, const float *x /* (N,C,H,W) */, float *y /* (N,M,OH,OW) */,
                   void *scratch, int nthreads);

/* ---- int8: uint8 activations (scale, zero point) × int8 weights (per-channel scale) --
 * The fp32 input is quantised in the kernel with the calibrated (x_scale, x_zero): q =
 * clamp(round(x / x_scale) + x_zero, 0, 255); products accumulate in int32; the output
 * is fp32: y = x_scale·w_scale[n]·(acc - x_zero·Σ_k w[n,k]) + bias[n], then the
 * epilogue. */
typedef struct nano_qgemm nano_qgemm;
nano_qgemm *nano_qgemm_prepare(const int8_t *W /* (N, K) */, const float *w_scale /* (N) */,
                               const float *bias, int N, int K, float x_scale, int x_zero,
                               nano_epilogue ep);
void nano_qgemm_free(nano_qgemm *p);
size_t nano_qgemm_bytes(const nano_qgemm *p);
size_t nano_qgemm_scratch(const nano_qgemm *p, int M);
void nano_qgemm_run(const nano_qgemm *p, int M, const float *X, int ldx, float *Y, int ldy,
                    void *scratch, int nthreads);

typedef struct nano_qconv nano_qconv;
nano_qconv *nano_qconv_prepare(const nano_conv_desc *d, const int8_t *W, const float *w_scale,
                               const float *bias, float x_scale, int x_zero, nano_epilogue ep);
void nano_qconv_free(nano_qconv *p);
size_t nano_qconv_bytes(const nano_qconv *p);
size_t nano_qconv_scratch(const nano_qconv *p);
void nano_qconv_run(const nano_qconv *p, const float *x, float *y, void *scratch, int nthreads);

/* The int8 quantisation of weights: per output row n, scale = max|W[n,:]| / 127 (1 when
 * the row is zero), q = round(W / scale) clamped to ±127. */
void nano_quantize_rows(const float *W, int N, int K, int8_t *q, float *scale);

#endif
