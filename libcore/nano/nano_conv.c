/* nano_conv — fp32 convolution, NCHW: per image and group Y (M/g, OH·OW) = W (M/g, K) ·
 * col (K, OH·OW) with K = C/g·kh·kw, on the packed-panel core of nano_gemm.c; depthwise
 * convolution as a direct loop.
 *
 * The one design decision: W is the packed left operand (panels of mr output channels,
 * packed at prepare) and the input is packed straight into the right operand's panels —
 * a copy of rows for a 1×1 stride-1 convolution (no im2col), im2col written in panel order
 * otherwise — so the scratch is one group's K·roundup(OH·OW, nr) floats and no separate
 * column matrix is ever written. */
#include <stdlib.h>
#include <string.h>

#include "nano_kern.h"
#include "nano_kern_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef enum { CONV_GEMM = 0, CONV_1X1 = 1, CONV_DW = 2, CONV_WINO = 3 } conv_kind;

struct nano_conv {
    nano_conv_desc d;
    nano_epilogue ep;
    nano_isa_level level;
    conv_kind kind;
    int mr, nr, Mg, Cg, K; /* K = Cg·kh·kw */
    int wm;                /* CONV_WINO: the output tile m of F(m×m, 3×3) */
    int prow;              /* pixels as the GEMM's rows: Yᵀ (P, M) = colᵀ · Wᵀ, then transposed */
    float *bias;           /* (M) or NULL */
    float *Wp;             /* per group ceil(Mg/mr) panels of mr·K; depthwise: (M, kh·kw) as given */
    size_t wg;             /* floats per group in Wp */
};

/* Columns the micro-kernel computes for n (16 when n <= 16: its half-width form). */
static double lanes(int n, int nr)
{
    return n <= 16 && nr > 16 ? 16.0 : (double)nk_roundup((size_t)n, (size_t)nr);
}

/* Whether the output pixels go better as the GEMM's rows than as its columns: the
 * micro-kernel's columns come in nr (a 7×7 output's 49 pixels fill 64), its rows in
 * exact counts (a panel of fewer rows computes only those), so a small output whose
 * channels fill whole column panels wastes less that way round — after paying for
 * transposing the result (about four cycles, 64 multiply-adds, per output value: measured
 * on Zen 4, where a 7×7 output gains 10-20% this way and a 14×14 one nothing). */
static int pixel_rows(const nano_conv *p)
{
    double P = (double)p->d.OH * p->d.OW, M = p->d.M, K = p->K;
    double cols = (double)nk_roundup((size_t)M, (size_t)p->mr) * lanes((int)P, p->nr) * K;
    double rows = P * (double)nk_roundup((size_t)M, (size_t)p->nr) * K + 64.0 * P * M;
    return lanes((int)P, p->nr) > 1.1 * P && rows < 0.95 * cols; /* (row panels are slower to fill) */
}

nano_conv *nano_conv_prepare(const nano_conv_desc *d, const float *W, const float *bias, nano_epilogue ep)
{
    if (!d || !W || !nk_conv_desc_ok(d)) return NULL;
    nano_conv *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->d = *d, p->ep = ep, p->level = nano_isa();
    nk_f32_geom(p->level, &p->mr, &p->nr);
    p->Mg = d->M / d->group, p->Cg = d->C / d->group, p->K = p->Cg * d->kh * d->kw;
    if (d->group == d->C && d->group == d->M)
        p->kind = CONV_DW;
    else if (d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && !d->pad_t && !d->pad_l && !d->pad_b &&
             !d->pad_r)
        p->kind = CONV_1X1;
    else if ((p->wm = nk_wino_tile(d)))
        p->kind = CONV_WINO;
    p->prow = (p->kind == CONV_GEMM || p->kind == CONV_1X1) && d->group == 1 && pixel_rows(p);
    p->wg = p->kind == CONV_DW     ? (size_t)p->K
            : p->kind == CONV_WINO ? nk_wino_wfloats(d, p->mr, p->wm)
                                   : nk_roundup((size_t)p->Mg, (size_t)(p->prow ? p->nr : p->mr)) * (size_t)p->K;
    p->Wp = aligned_alloc(64, nk_roundup(p->wg * d->group * sizeof(float), 64));
    if (bias) p->bias = malloc((size_t)d->M * sizeof(float));
    if (!p->Wp || (bias && !p->bias)) { nano_conv_free(p); return NULL; }
    if (bias) memcpy(p->bias, bias, (size_t)d->M * sizeof(float));
    if (p->kind == CONV_DW)
        memcpy(p->Wp, W, (size_t)d->M * p->K * sizeof(float));
    else if (p->kind == CONV_WINO) {
        if (nk_wino_pack(d, W, p->mr, p->wm, p->Wp)) { nano_conv_free(p); return NULL; }
    } else
        for (int g = 0; g < d->group; g++)
            nk_pack_rk(W + (size_t)g * p->Mg * p->K, (size_t)p->K, p->Mg, p->K, p->prow ? p->nr : p->mr,
                       p->Wp + g * p->wg);
    return p;
}

void nano_conv_free(nano_conv *p)
{
    if (!p) return;
    free(p->Wp);
    free(p->bias);
    free(p);
}

size_t nano_conv_bytes(const nano_conv *p)
{
    if (!p) return 0;
    return sizeof *p + p->wg * p->d.group * sizeof(float) + (p->bias ? (size_t)p->d.M * sizeof(float) : 0);
}

size_t nano_conv_scratch(const nano_conv *p)
{
    if (!p || p->kind == CONV_DW) return 0;
    if (p->kind == CONV_WINO) return nk_wino_scratch(&p->d, p->nr, p->wm);
    size_t P = (size_t)p->d.OH * p->d.OW;
    if (p->prow) /* colᵀ in row panels, then Yᵀ */
        return (nk_roundup(P, (size_t)p->mr) * (size_t)p->K + nk_roundup(P * p->d.M, 16)) * sizeof(float) + 64;
    return nk_roundup(P, (size_t)p->nr) * (size_t)p->K * sizeof(float) + 64;
}

/* One B panel of im2col: columns p0 .. p0+n-1 (n <= nr), rows k = (c, i, j) over the
 * group's Cg channels of xg (Cg, H, W); panel layout [k][nr], zero outside the input.
 * Runs of columns on one output row are copied whole (memcpy when sw = 1). */
static void im2col_panel(const nano_conv_desc *d, int Cg, const float *xg, int p0, int n, int nr, float *dst)
{
    nk_seg seg[64];
    int ns = nk_conv_segs(d, p0, n, seg);
    size_t hw = (size_t)d->H * d->W;
    float *o = dst;
    for (int c = 0; c < Cg; c++)
        for (int i = 0; i < d->kh; i++)
            for (int j = 0; j < d->kw; j++, o += nr) {
                for (int q = 0; q < ns; q++) {
                    const nk_seg *sg = &seg[q];
                    int len = sg->t1 - sg->t0, ih = sg->ih0 + i * d->dh, iw = sg->iw0 + j * d->dw, lo, hi;
                    float *ot = o + sg->t0;
                    if ((unsigned)ih >= (unsigned)d->H) { memset(ot, 0, (size_t)len * sizeof *ot); continue; }
                    nk_seg_range(iw, d->sw, d->W, len, &lo, &hi);
                    const float *xr = xg + c * hw + (size_t)ih * d->W + iw;
                    memset(ot, 0, (size_t)lo * sizeof *ot);
                    if (d->sw == 1) memcpy(ot + lo, xr + lo, (size_t)(hi - lo) * sizeof *ot);
                    else for (int u = lo; u < hi; u++) ot[u] = xr[u * d->sw];
                    memset(ot + hi, 0, (size_t)(len - hi) * sizeof *ot);
                }
                if (n < nr) memset(o + n, 0, (size_t)(nr - n) * sizeof *o);
            }
}

/* ---- depthwise: y[c] = Σ_taps w · shifted x[c] ---------------------------------------- */
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void axpy_avx2(int n, float w, const float *x, float *y)
{
    __m256 vw = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vw, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += w * x[i];
}

__attribute__((target("avx512f,fma"))) static void axpy_avx512(int n, float w, const float *x, float *y)
{
    __m512 vw = _mm512_set1_ps(w);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(vw, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(vw, _mm512_maskz_loadu_ps(m, x + i),
                                                        _mm512_maskz_loadu_ps(m, y + i)));
    }
}
/* 16 lanes x[iw + u·sw] (u < 16) of one input row, zero where the lane's column is
 * outside 0 .. W-1 or u >= n: a masked load for sw = 1, two masked loads and an even-lane
 * permute for sw = 2 (no gather), a gather otherwise. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 dw_lanes(const float *xr, int iw, int sw,
                                                                                 int W, int n, __m512i step)
{
    int e0 = iw >= 0 ? 0 : -iw, e1 = (n - 1) * sw + 1; /* elements e of xr + iw read: [e0, e1) */
    if (e1 > W - iw) e1 = W - iw;
    if (e0 >= e1) return _mm512_setzero_ps();
    uint64_t em = ((e1 >= 64 ? ~0ull : (1ull << e1) - 1)) & ~((1ull << e0) - 1);
    if (sw == 1) return _mm512_maskz_loadu_ps((__mmask16)em, xr + iw);
    if (sw == 2) {
        __m512 a = _mm512_maskz_loadu_ps((__mmask16)em, xr + iw);
        __m512 b = _mm512_maskz_loadu_ps((__mmask16)(em >> 16), xr + iw + 16);
        __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        return _mm512_permutex2var_ps(a, even, b);
    }
    int u0, u1;
    nk_seg_range(iw, sw, W, n, &u0, &u1);
    if (u0 >= u1) return _mm512_setzero_ps();
    __mmask16 m = (__mmask16)(((1u << u1) - 1) & ~((1u << u0) - 1));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, step, xr + iw, 4);
}

/* One plane with AVX-512, register-blocked over 4 output rows × 16 output columns: per
 * tap and row one dw_lanes and one FMA into 4 independent accumulators, which start at the
 * bias and get the act before their one store. xc (H, W) -> yc (OH, OW). */
__attribute__((target("avx512f,fma"))) static void dw_plane_avx512(const nano_conv_desc *d, const float *xc,
                                                                    const float *wc, float b,
                                                                    const nano_epilogue *ep, float *yc)
{
    const int H = d->H, W = d->W, OH = d->OH, OW = d->OW, kh = d->kh, kw = d->kw, sh = d->sh, sw = d->sw;
    const int dh = d->dh, dw = d->dw, pt = d->pad_t, pl = d->pad_l, act = ep->act;
    __m512i step = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                      _mm512_set1_epi32(sw));
    __m512 lo = _mm512_set1_ps(ep->lo), hi = _mm512_set1_ps(ep->hi), zero = _mm512_setzero_ps();
    for (int oh0 = 0; oh0 < OH; oh0 += 4) {
        int rows = OH - oh0 < 4 ? OH - oh0 : 4;
        for (int o0 = 0; o0 < OW; o0 += 16) {
            int n = OW - o0 < 16 ? OW - o0 : 16;
            __m512 a0 = _mm512_set1_ps(b), a1 = a0, a2 = a0, a3 = a0; /* output rows oh0 .. oh0+3 */
            for (int i = 0; i < kh; i++)
                for (int j = 0; j < kw; j++) {
                    __m512 w = _mm512_set1_ps(wc[i * kw + j]);
                    int iw = o0 * sw - pl + j * dw, ih = oh0 * sh - pt + i * dh;
#define DW_ROW(r, a)                                                                                     \
    if (r < rows && (unsigned)(ih + r * sh) < (unsigned)H)                                               \
        a = _mm512_fmadd_ps(w, dw_lanes(xc + (size_t)(ih + r * sh) * W, iw, sw, W, n, step), a);
                    DW_ROW(0, a0) DW_ROW(1, a1) DW_ROW(2, a2) DW_ROW(3, a3)
#undef DW_ROW
                }
            __m512 acc[4] = {a0, a1, a2, a3};
            for (int r = 0; r < rows; r++) {
                float *yr = yc + (size_t)(oh0 + r) * OW + o0;
                __m512 x = acc[r];
                if (act == NANO_ACT_RELU) x = _mm512_max_ps(x, zero);
                else if (act == NANO_ACT_CLIP) x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
                _mm512_mask_storeu_ps(yr, (__mmask16)((1u << n) - 1), x);
                if (!nk_act_inline(act))
                    for (int u = 0; u < n; u++) yr[u] = nk_act1(act, ep->lo, ep->hi, yr[u]);
            }
        }
    }
}
#endif

static void axpy_c(int n, float w, const float *x, float *y)
{
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += w * x[i];
}

static void conv_dw(const nano_conv *p, const float *x, float *y, int nthreads)
{
    const nano_conv_desc *d = &p->d;
    void (*axpy)(int, float, const float *, float *) = axpy_c;
#if defined(__x86_64__)
    if (p->level >= NANO_ISA_AVX512) axpy = axpy_avx512;
    else if (p->level == NANO_ISA_AVX2) axpy = axpy_avx2;
#endif
    int planes = d->N * d->M, taps = d->kh * d->kw;
    size_t hw = (size_t)d->H * d->W, ohw = (size_t)d->OH * d->OW;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && planes > 1 && ohw * planes > 4096) schedule(dynamic, 1)
    for (int pl = 0; pl < planes; pl++) {
        int c = pl % d->M;
        const float *xc = x + (size_t)pl * hw, *wc = p->Wp + (size_t)c * taps;
        float *yc = y + (size_t)pl * ohw;
        float b = p->bias ? p->bias[c] : 0.0f;
#if defined(__x86_64__)
        if (p->level >= NANO_ISA_AVX512) { dw_plane_avx512(d, xc, wc, b, &p->ep, yc); continue; }
#endif
        for (int oh = 0; oh < d->OH; oh++) {
            float *yr = yc + (size_t)oh * d->OW;
            memset(yr, 0, (size_t)d->OW * sizeof *yr);
            for (int i = 0; i < d->kh; i++) {
                int ih = oh * d->sh - d->pad_t + i * d->dh;
                if ((unsigned)ih >= (unsigned)d->H) continue;
                const float *xr = xc + (size_t)ih * d->W;
                for (int j = 0; j < d->kw; j++) {
                    /* ow with 0 <= ow·sw - pad_l + j·dw < W */
                    int off = j * d->dw - d->pad_l;
                    int lo = off >= 0 ? 0 : (-off + d->sw - 1) / d->sw;
                    int hi = d->W - 1 - off < 0 ? -1 : (d->W - 1 - off) / d->sw; /* last valid ow */
                    if (hi > d->OW - 1) hi = d->OW - 1;
                    if (hi < lo) continue;
                    float w = wc[i * d->kw + j];
                    if (d->sw == 1)
                        axpy(hi - lo + 1, w, xr + lo + off, yr + lo);
                    else
                        for (int ow = lo; ow <= hi; ow++) yr[ow] += w * xr[ow * d->sw + off];
                }
            }
            for (int ow = 0; ow < d->OW; ow++) yr[ow] = nk_act1(p->ep.act, p->ep.lo, p->ep.hi, yr[ow] + b);
        }
    }
}

/* y (M, P) = Yᵀ transposed, in 16×16 blocks. */
static void transpose_out(const float *yt, int P, int M, float *y, int nthreads)
{
    int mb = (M + 15) / 16;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && mb > 1 && (size_t)P * M >= 65536) schedule(static)
    for (int b = 0; b < mb; b++)
        for (int p0 = 0; p0 < P; p0 += 16) {
            int m1 = b * 16 + 16 < M ? b * 16 + 16 : M, p1 = p0 + 16 < P ? p0 + 16 : P;
            for (int m = b * 16; m < m1; m++)
                for (int q = p0; q < p1; q++) y[(size_t)m * P + q] = yt[(size_t)q * M + m];
        }
}

/* The convolution's columns (pixels) of one image and group xg packed in panels of R
 * pixels over its K rows: a copy of rows for 1×1, im2col otherwise. */
static void pack_pixels(const nano_conv *p, const float *xg, int R, float *col, int nthreads)
{
    const nano_conv_desc *d = &p->d;
    int P = d->OH * d->OW, K = p->K, panels = (P + R - 1) / R;
    size_t hw = (size_t)d->H * d->W;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && panels > 1 && (size_t)P * K >= 65536) schedule(dynamic, 1)
    for (int q = 0; q < panels; q++) {
        int p0 = q * R, cnt = P - p0 < R ? P - p0 : R;
        float *dst = col + (size_t)q * R * K;
        if (p->kind == CONV_1X1)
            nk_pack_kr(xg + p0, hw, K, cnt, R, dst);
        else
            im2col_panel(d, p->Cg, xg, p0, cnt, R, dst);
    }
}

/* The pixel-rows form (group 1): colᵀ packed in row panels of mr pixels, Yᵀ (P, M) =
 * colᵀ · Wᵀ with the bias per column, then transposed into y. */
static void conv_prow(const nano_conv *p, const float *x, float *y, void *scratch, int nthreads)
{
    const nano_conv_desc *d = &p->d;
    int P = d->OH * d->OW, K = p->K;
    size_t hw = (size_t)d->H * d->W;
    float *col = (float *)nk_roundup((size_t)(uintptr_t)scratch, 64);
    float *yt = col + nk_roundup((size_t)P, (size_t)p->mr) * K;
    for (int n = 0; n < d->N; n++) {
        pack_pixels(p, x + (size_t)n * d->C * hw, p->mr, col, nthreads);
        nk_epi e = {p->bias, 0, p->ep.act, p->ep.lo, p->ep.hi};
        nk_f32_packed(p->level, P, d->M, K, col, p->Wp, yt, d->M, &e, nthreads);
        transpose_out(yt, P, d->M, y + (size_t)n * d->M * P, nthreads);
    }
}

void nano_conv_run(const nano_conv *p, const float *x, float *y, void *scratch, int nthreads)
{
    const nano_conv_desc *d = &p->d;
    if (p->kind == CONV_DW) { conv_dw(p, x, y, nthreads); return; }
    if (p->prow) { conv_prow(p, x, y, scratch, nthreads); return; }
    if (p->kind == CONV_WINO) { nk_wino_run(p->level, d, p->wm, p->Wp, p->bias, &p->ep, x, y, scratch, nthreads); return; }
    float *col = (float *)nk_roundup((size_t)(uintptr_t)scratch, 64);
    int P = d->OH * d->OW, K = p->K;
    size_t hw = (size_t)d->H * d->W;
    for (int n = 0; n < d->N; n++)
        for (int g = 0; g < d->group; g++) {
            float *yg = y + ((size_t)n * d->M + (size_t)g * p->Mg) * P;
            pack_pixels(p, x + ((size_t)n * d->C + (size_t)g * p->Cg) * hw, p->nr, col, nthreads);
            nk_epi e = {p->bias ? p->bias + (size_t)g * p->Mg : NULL, 1, p->ep.act, p->ep.lo, p->ep.hi};
            nk_f32_packed(p->level, p->Mg, P, K, p->Wp + g * p->wg, col, yg, P, &e, nthreads);
        }
}
