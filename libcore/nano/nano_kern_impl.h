/* nano_kern_impl — private to the kernels of nano_kern.h (nano_isa.c, nano_f16.c,
 * nano_gemm.c, nano_conv.c, nano_q8.c) and their unit test: the packed-panel GEMM core
 * that the fp32 GEMM and convolution share, the scalar epilogue, and the test hooks.
 *
 * The one design decision: both operands of every fp32 product are packed into
 * K-major panels ("panel p, step k" holds R consecutive rows of A or columns of B), so
 * one micro-kernel per ISA serves Y = X·Wᵀ (constant right operand) and conv's
 * Y = W·col (constant left operand); which side was packed at prepare is the caller's
 * business. A panel of R rows/columns over kc steps is kc·R floats, row r of step k at
 * [k·R + r], rows past the end zero. */
#ifndef NEBULA_NANO_KERN_IMPL_H
#define NEBULA_NANO_KERN_IMPL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "nano_graph.h"
#include "nano_kern.h"
#include "nano_ops.h"

/* ---- test hooks (nano_isa.c) ------------------------------------------------------ */
/* The best level this CPU has (ignores NEBULA_NANO_ISA). */
nano_isa_level nano_isa_cpu(void);
/* Makes nano_isa() return l from now on (clamped to what the CPU runs); a kernel
 * prepared before keeps the level it was prepared with. Tests only. */
void nano_isa_force(nano_isa_level l);
/* Whether this CPU runs level l's kernels (portable always). */
int nano_isa_runs(nano_isa_level l);

/* ---- epilogue ---------------------------------------------------------------------- */
/* The tile store's parameters: bias per row (conv: output channel) or per column
 * (gemm), already offset to the tile's first row/column; act a nano_act. */
typedef struct nk_epi {
    const float *bias;
    int bias_rows;
    int act;
    float lo, hi;
} nk_epi;

static inline float nk_act1(int act, float lo, float hi, float x)
{
    switch (act) {
    case NANO_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case NANO_ACT_CLIP: return x < lo ? lo : (x > hi ? hi : x);
    case NANO_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case NANO_ACT_GELU_TANH: {
        float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
    case NANO_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case NANO_ACT_TANH: return tanhf(x);
    default: return x;
    }
}

/* Acts that the vector stores do inline (the others run nk_act_tile after the store). */
static inline int nk_act_inline(int act)
{
    return act == NANO_ACT_NONE || act == NANO_ACT_RELU || act == NANO_ACT_CLIP;
}

/* The transcendental acts over an m×n tile (row stride ld) just stored: the light ops'
 * vectorised functions (nano_ops.c), within a few ulp of nk_act1. */
static inline void nk_act_tile(float *c, int ld, int m, int n, int act, float lo, float hi)
{
    if (nk_act_inline(act)) return;
    nano_act_rows(act, lo, hi, c, (size_t)ld, m, n);
}

/* Scalar store of a computed tile t (m×n valid of a tile with row stride tld) into c:
 * c (+)= t, then bias and the inline acts when ep. The edge-tile path of every
 * micro-kernel. */
static inline void nk_store_tile(const float *t, int tld, float *c, int ldc, int m, int n, int accum,
                                 const nk_epi *ep)
{
    for (int i = 0; i < m; i++) {
        float *ci = c + (size_t)i * ldc;
        for (int j = 0; j < n; j++) {
            float v = t[i * tld + j];
            if (accum) v += ci[j];
            if (ep) {
                if (ep->bias) v += ep->bias_rows ? ep->bias[i] : ep->bias[j];
                if (nk_act_inline(ep->act)) v = nk_act1(ep->act, ep->lo, ep->hi, v); /* others: nk_act_tile */
            }
            ci[j] = v;
        }
    }
}

/* Multiply-adds below which a product runs on the calling thread alone: a parallel
 * region costs microseconds, more than such a product takes (results do not depend on it). */
#define NK_PAR_MACS 262144.0

static inline size_t nk_roundup(size_t x, size_t r)
{
    return (x + r - 1) / r * r;
}

/* ---- fp32 core (nano_gemm.c) ------------------------------------------------------- */
/* Rows per A panel (mr) and columns per B panel (nr) of level l's micro-kernel. */
void nk_f32_geom(nano_isa_level l, int *mr, int *nr);
/* Packs src[r·ld + k] (r < rows, k < kc) into panels of R: panel p at dst + p·R·kc. */
void nk_pack_rk(const float *src, size_t ld, int rows, int kc, int R, float *dst);
/* Packs src[k·ld + r] (k < kc, r < rows) into panels of R likewise. */
void nk_pack_kr(const float *src, size_t ld, int kc, int rows, int R, float *dst);
/* C (m×n, ldc) (+)= A·B over one K block of kc: A panels (mr rows) a_ps floats apart, B
 * panels (nr columns) b_ps apart, both already at the block's first k; accum adds to C;
 * ep (bias offset to C's (0,0)) is given on the last K block only. Serial. */
void nk_f32_block(nano_isa_level l, int m, int n, int kc, const float *A, size_t a_ps, const float *B,
                  size_t b_ps, float *C, int ldc, int accum, const nk_epi *ep);
/* C (M×N) = A·B (+ bias, act) with A and B packed over the whole K (panel stride mr·K,
 * nr·K), parallel over tiles of C (each tile one thread: the result does not depend on
 * nthreads). */
void nk_f32_packed(nano_isa_level l, int M, int N, int K, const float *A, const float *B, float *C, int ldc,
                   const nk_epi *ep, int nthreads);

/* ---- Winograd F(m×m, 3×3) convolution (nano_wino.c) -------------------------------------
 * For the 3×3, stride-1, undilated, ungrouped convolutions of ≥ 16 input and output
 * channels: nk_wino_tile picks m = 2 or 4 where that does fewer multiply-adds than im2col,
 * padding included, and reads of the larger weights (0: im2col) — the same choice on every
 * ISA, so that outputs are the same bits on each. The weights are
 * transformed and packed at prepare (nk_wino_wfloats floats, panels of mr rows), then per
 * run the input transform, (m+2)² GEMMs and the output transform with bias and act, in a
 * scratch of nk_wino_scratch bytes. */
int nk_wino_tile(const nano_conv_desc *d);
size_t nk_wino_wfloats(const nano_conv_desc *d, int mr, int m);
int nk_wino_pack(const nano_conv_desc *d, const float *W, int mr, int m, float *Up);
size_t nk_wino_scratch(const nano_conv_desc *d, int nr, int m);
void nk_wino_run(nano_isa_level l, const nano_conv_desc *d, int m, const float *Up, const float *bias,
                 const nano_epilogue *ep, const float *x, float *y, void *scratch, int nthreads);

/* ---- int8 (nano_q8.c) ---------------------------------------------------------------
 * y = (x_scale·w_scale[c]) · (float)(acc - x_zero·Σ_k w[c,k]) + bias[c], in that order in
 * float (the test repeats it to the bit), then the epilogue. */
static inline int nk_quant_u8(float x, float x_scale, int x_zero)
{
    float v = nearbyintf(x / x_scale) + (float)x_zero;
    if (!(v > 0.0f)) return 0;
    if (v > 255.0f) return 255;
    return (int)v;
}

/* ---- im2col geometry shared by the fp32 and int8 convolutions ---------------------- */
/* Columns t0 .. t1-1 of a panel that lie on one output row: tap (0,0) reads input row
 * ih0 and, for column t0, input column iw0 (the next columns sw further). */
typedef struct nk_seg {
    int t0, t1, ih0, iw0;
} nk_seg;

/* The segments of output pixels p0 .. p0+n-1 (at most n); returns their count. */
static inline int nk_conv_segs(const nano_conv_desc *d, int p0, int n, nk_seg *s)
{
    int oh = p0 / d->OW, ow = p0 % d->OW, cnt = 0;
    for (int t = 0; t < n; oh++, ow = 0) {
        int len = d->OW - ow < n - t ? d->OW - ow : n - t;
        s[cnt++] = (nk_seg){t, t + len, oh * d->sh - d->pad_t, ow * d->sw - d->pad_l};
        t += len;
    }
    return cnt;
}

/* The u in [*lo, *hi) of 0 <= u < len with 0 <= iw + u·sw < W. */
static inline void nk_seg_range(int iw, int sw, int W, int len, int *lo, int *hi)
{
    int a = iw >= 0 ? 0 : (-iw + sw - 1) / sw;
    int b = W - 1 - iw < 0 ? 0 : (W - 1 - iw) / sw + 1;
    if (b > len) b = len;
    if (a > b) a = b;
    *lo = a, *hi = b;
}

/* Whether the descriptor is consistent (output size from the input, kernel, pads). */
static inline int nk_conv_desc_ok(const nano_conv_desc *d)
{
    if (d->N < 1 || d->C < 1 || d->H < 1 || d->W < 1 || d->M < 1 || d->group < 1) return 0;
    if (d->kh < 1 || d->kw < 1 || d->sh < 1 || d->sw < 1 || d->dh < 1 || d->dw < 1) return 0;
    if (d->pad_t < 0 || d->pad_l < 0 || d->pad_b < 0 || d->pad_r < 0) return 0;
    if (d->C % d->group || d->M % d->group) return 0;
    int eh = d->H + d->pad_t + d->pad_b - d->dh * (d->kh - 1) - 1;
    int ew = d->W + d->pad_l + d->pad_r - d->dw * (d->kw - 1) - 1;
    if (eh < 0 || ew < 0) return 0;
    return d->OH == eh / d->sh + 1 && d->OW == ew / d->sw + 1;
}

#endif
