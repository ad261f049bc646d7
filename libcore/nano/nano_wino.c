/* nano_wino — 3×3 stride-1 convolution by Winograd's minimal filtering F(2×2, 3×3)
 * (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016): each
 * 2×2 output tile is Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d B)] A over the 4×4 input patch d, so the
 * multiply-adds of the channel sums drop from 9 to 4 per output (2.25×). The channel sums
 * are 16 GEMMs, U[ξ] (M × C) · V[ξ] (C × tiles), on the packed-panel core of nano_gemm.c.
 *
 * The one design decision: the transforms work on 16 tiles of one tile row at a time, as
 * plain loops over 16 lanes that the compiler vectorises (built per x86-64 vector width),
 * over a zero-padded copy of the input plane, so no load needs a bounds check; tiles go
 * through in blocks sized so a block's V and GEMM output stay in L2. F(2×2, 3×3) rather
 * than F(4×4, 3×3): its transforms have entries 0, ±1 and ±½ only, so it is as accurate
 * as the direct convolution (unit/nano-kernels checks it against the same bound). */
#include <stdlib.h>
#include <string.h>

#include "nano_kern.h"
#include "nano_kern_impl.h"
#include "nano_ops_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { WL = 16 };                 /* tiles per transform step (lanes) */
enum { WINO_L2 = 192 * 1024 };    /* floats of V and GEMM output per tile block (768 KiB) */

typedef struct wgeom {
    int th, tw, T;  /* tile rows, tile columns, tiles */
    int hp, wp;     /* padded plane: rows, row stride */
    int tb;         /* tiles per block (a multiple of nr) */
} wgeom;

static void geom(const nano_conv_desc *d, int nr, wgeom *g)
{
    g->th = (d->OH + 1) / 2, g->tw = (d->OW + 1) / 2, g->T = g->th * g->tw;
    g->hp = 2 * g->th + 2;
    g->wp = 2 * (g->tw + 1 + WL); /* even columns, then odd ones; slack for the last lanes */
    int per = WINO_L2 / (16 * (d->C + d->M)) / nr * nr;
    int all = (int)nk_roundup((size_t)g->T, (size_t)nr);
    g->tb = per < nr ? nr : per > all ? all : per;
}

/* Columns the micro-kernel computes for n (16 when n <= 16: its half-width form). */
static double lanes(int n, int nr)
{
    return n <= 16 && nr > 16 ? 16.0 : (double)nk_roundup((size_t)n, (size_t)nr);
}

int nk_wino_ok(const nano_conv_desc *d, int nr)
{
    if (!(d->kh == 3 && d->kw == 3 && d->sh == 1 && d->sw == 1 && d->dh == 1 && d->dw == 1 && d->group == 1 &&
          d->C >= 16 && d->M >= 16))
        return 0;
    /* multiply-adds the micro-kernel does, padding included: 16 per tile per (m, c) here,
     * 9 per output pixel directly — a 4x4 output is 4 tiles, which fill a quarter of the
     * 16 columns: direct it is */
    int T = ((d->OH + 1) / 2) * ((d->OW + 1) / 2), P = d->OH * d->OW;
    return 16.0 * lanes(T, nr) < 9.0 * lanes(P, nr);
}

size_t nk_wino_wfloats(const nano_conv_desc *d, int mr)
{
    return 16 * nk_roundup((size_t)d->M, (size_t)mr) * (size_t)d->C;
}

/* U[ξ] = (G g Gᵀ)[ξ] for every (m, c), computed in double and rounded once, then each of
 * the 16 (M × C) matrices packed in panels of mr rows. G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1]. */
int nk_wino_pack(const nano_conv_desc *d, const float *W, int mr, float *Up)
{
    static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    size_t mc = (size_t)d->M * d->C, us = nk_roundup((size_t)d->M, (size_t)mr) * (size_t)d->C;
    float *u = malloc(16 * mc * sizeof *u);
    if (!u) return -1;
    for (size_t r = 0; r < mc; r++) {
        const float *g = W + r * 9;
        double t[4][3];
        for (int a = 0; a < 4; a++)
            for (int j = 0; j < 3; j++) t[a][j] = G[a][0] * g[j] + G[a][1] * g[3 + j] + G[a][2] * g[6 + j];
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++) u[(size_t)(a * 4 + b) * mc + r] = (float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
    }
    for (int x = 0; x < 16; x++) nk_pack_rk(u + (size_t)x * mc, (size_t)d->C, d->M, d->C, mr, Up + (size_t)x * us);
    free(u);
    return 0;
}

size_t nk_wino_scratch(const nano_conv_desc *d, int nr)
{
    wgeom g;
    geom(d, nr, &g);
    size_t plane = (size_t)d->C * g.hp * g.wp + 2 * WL;
    size_t v = 16 * (size_t)d->C * g.tb, mb = 16 * (size_t)d->M * g.tb + WL;
    return (plane + v + mb) * sizeof(float) + 3 * 64;
}

/* One tile row segment of one channel: V[ξ][u] = (Bᵀ d B)[ξ] of the tiles tx0 + u (u < 16)
 * of tile row ty, Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. xp is the padded plane,
 * each row stored as its even columns then its odd ones (he = wp/2 apart), so patch
 * column j of tile tx — padded column 2tx + j — is even[tx], odd[tx], even[tx+1] or
 * odd[tx+1]: 16 consecutive tiles are 16 consecutive floats. */
NANO_CLONES static void wino_in(const float *xp, int wp, int ty, int tx0, float v[16][WL])
{
    float t[4][4][WL];
    int he = wp / 2;
    const float *r = xp + (size_t)(2 * ty) * wp + tx0;
    for (int j = 0; j < 4; j++) { /* t = Bᵀ d, column j of every patch */
        const float *c = r + (j & 1) * he + (j >> 1);
        for (int u = 0; u < WL; u++) {
            float d0 = c[u], d1 = c[wp + u], d2 = c[2 * wp + u], d3 = c[3 * wp + u];
            t[0][j][u] = d0 - d2, t[1][j][u] = d1 + d2;
            t[2][j][u] = d2 - d1, t[3][j][u] = d1 - d3;
        }
    }
    for (int i = 0; i < 4; i++) /* V = t B, row i */
        for (int u = 0; u < WL; u++) {
            v[i * 4 + 0][u] = t[i][0][u] - t[i][2][u], v[i * 4 + 1][u] = t[i][1][u] + t[i][2][u];
            v[i * 4 + 2][u] = t[i][2][u] - t[i][1][u], v[i * 4 + 3][u] = t[i][1][u] - t[i][3][u];
        }
}

/* The 2×2 outputs of 16 tiles from their 16 GEMM results m[ξ] (lanes u, mstride apart per
 * ξ): Y = Aᵀ m A + bias, Aᵀ = [1 1 1 0; 0 1 -1 -1]; then the w (<= 32) values of output
 * row r of the segment, o[r][2u + s] = Y[r][s] of tile u, into y0 and y1. */
NANO_CLONES static void wino_out(const float *m, size_t mstride, float bias, int w, float *y0, float *y1)
{
    float s[2][4][WL], o[2][2][WL];
    for (int j = 0; j < 4; j++) { /* s = Aᵀ m, column j */
        const float *m0 = m + (size_t)j * mstride, *m1 = m0 + 4 * mstride, *m2 = m1 + 4 * mstride,
                    *m3 = m2 + 4 * mstride;
        for (int u = 0; u < WL; u++) {
            s[0][j][u] = m0[u] + m1[u] + m2[u];
            s[1][j][u] = m1[u] - m2[u] - m3[u];
        }
    }
    for (int r = 0; r < 2; r++)
        for (int u = 0; u < WL; u++) {
            o[r][0][u] = s[r][0][u] + s[r][1][u] + s[r][2][u] + bias;
            o[r][1][u] = s[r][1][u] - s[r][2][u] - s[r][3][u] + bias;
        }
    float *y[2] = {y0, y1};
    for (int r = 0; r < 2; r++) {
        if (!y[r]) continue;
        float *yr = y[r];
        if (w == 2 * WL) /* whole: interleaved with vector permutes */
            for (int u = 0; u < WL; u++) yr[2 * u] = o[r][0][u], yr[2 * u + 1] = o[r][1][u];
        else
            for (int k = 0; k < w; k++) yr[k] = o[r][k & 1][k >> 1];
    }
}

/* The segments (ty, tx0, n ≤ 16) of tiles t0 .. t0+cnt-1: runs inside one tile row. */
#define FOR_SEGMENTS(g, t0, cnt, ty, tx0, n, L)                                                             \
    for (int L = 0, ty, tx0, n; L < (cnt) &&                                                                 \
                                (ty = ((t0) + L) / (g)->tw, tx0 = ((t0) + L) % (g)->tw,                      \
                                n = (g)->tw - tx0 < WL ? (g)->tw - tx0 : WL, n = (cnt) - L < n ? (cnt) - L : n, 1); \
         L += n)

/* Lanes 0 .. n-1 of each v[ξ] to tiles L .. L+n-1 of the packed B panels: runs of
 * consecutive tiles are consecutive floats up to a panel's end (panel q of ξ at
 * vp + ξ·vs + q·nr·C, channel c's nr columns at c·nr). */
NANO_CLONES static void wino_in_store(float v[16][WL], float *vp, size_t vs, int L, int n, int nr, int C, int c)
{
    for (int u0 = 0; u0 < n;) {
        int l = L + u0, q = l % nr, run = nr - q < n - u0 ? nr - q : n - u0;
        float *dst = vp + (size_t)(l / nr) * nr * C + (size_t)c * nr + q;
        for (int x = 0; x < 16; x++)
            for (int u = 0; u < run; u++) dst[(size_t)x * vs + u] = v[x][u0 + u];
        u0 += run;
    }
}

#if defined(__x86_64__)
#define TGT512 __attribute__((target("avx512f")))
/* wino_in + wino_in_store with AVX-512: the 16 lanes straight from registers into the
 * panels with masked stores (a run that crosses a panel's end: the rest compressed to
 * lane 0 of the next). */
TGT512 static void wino_in_512(const float *xp, int wp, int ty, int tx0, float *vp, size_t vs, int L, int n, int nr,
                               int C, int c)
{
    int he = wp / 2, q = L % nr, run = nr - q < n ? nr - q : n;
    const float *r = xp + (size_t)(2 * ty) * wp + tx0;
    __m512 t[4][4];
    for (int j = 0; j < 4; j++) {
        const float *cp = r + (j & 1) * he + (j >> 1);
        __m512 d0 = _mm512_loadu_ps(cp), d1 = _mm512_loadu_ps(cp + wp);
        __m512 d2 = _mm512_loadu_ps(cp + 2 * wp), d3 = _mm512_loadu_ps(cp + 3 * wp);
        t[0][j] = _mm512_sub_ps(d0, d2), t[1][j] = _mm512_add_ps(d1, d2);
        t[2][j] = _mm512_sub_ps(d2, d1), t[3][j] = _mm512_sub_ps(d1, d3);
    }
    __mmask16 m0 = (__mmask16)((1u << run) - 1), m1 = (__mmask16)(((1u << n) - 1) & ~((1u << run) - 1));
    __mmask16 mr = (__mmask16)((1u << (n - run)) - 1);
    float *p0 = vp + (size_t)(L / nr) * nr * C + (size_t)c * nr + q, *p1 = vp + (size_t)(L / nr + 1) * nr * C + (size_t)c * nr;
    for (int i = 0; i < 4; i++) {
        __m512 v[4] = {_mm512_sub_ps(t[i][0], t[i][2]), _mm512_add_ps(t[i][1], t[i][2]),
                       _mm512_sub_ps(t[i][2], t[i][1]), _mm512_sub_ps(t[i][1], t[i][3])};
        for (int k = 0; k < 4; k++) {
            size_t o = (size_t)(i * 4 + k) * vs;
            _mm512_mask_storeu_ps(p0 + o, m0, v[k]);
            if (mr) _mm512_mask_storeu_ps(p1 + o, mr, _mm512_maskz_compress_ps(m1, v[k]));
        }
    }
}

/* wino_out with AVX-512: the two output rows interleaved by permutes, stored with masks;
 * the inline acts applied (the others: the caller's nano_act_rows). */
TGT512 static void wino_out_512(const float *m, size_t ms, float bias, const nano_epilogue *ep, int w, float *y0,
                                float *y1)
{
    __m512 s[2][4], b = _mm512_set1_ps(bias);
    for (int j = 0; j < 4; j++) {
        __m512 m0 = _mm512_loadu_ps(m + (size_t)j * ms), m1 = _mm512_loadu_ps(m + (size_t)(4 + j) * ms);
        __m512 m2 = _mm512_loadu_ps(m + (size_t)(8 + j) * ms), m3 = _mm512_loadu_ps(m + (size_t)(12 + j) * ms);
        s[0][j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        s[1][j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
    }
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    __mmask16 k0 = w >= 16 ? 0xffff : (__mmask16)((1u << w) - 1);
    __mmask16 k1 = w <= 16 ? 0 : w >= 32 ? 0xffff : (__mmask16)((1u << (w - 16)) - 1);
    __m512 zero = _mm512_setzero_ps(), clo = _mm512_set1_ps(ep->lo), chi = _mm512_set1_ps(ep->hi);
    float *y[2] = {y0, y1};
    for (int r = 0; r < 2; r++) {
        if (!y[r]) continue;
        __m512 e = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[r][0], s[r][1]), s[r][2]), b);
        __m512 f = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s[r][1], s[r][2]), s[r][3]), b);
        __m512 a = _mm512_permutex2var_ps(e, lo, f), z = _mm512_permutex2var_ps(e, hi, f);
        if (ep->act == NANO_ACT_RELU) a = _mm512_max_ps(a, zero), z = _mm512_max_ps(z, zero);
        else if (ep->act == NANO_ACT_CLIP)
            a = _mm512_min_ps(_mm512_max_ps(a, clo), chi), z = _mm512_min_ps(_mm512_max_ps(z, clo), chi);
        _mm512_mask_storeu_ps(y[r], k0, a);
        _mm512_mask_storeu_ps(y[r] + 16, k1, z);
    }
}
#endif

/* Input transform of tiles t0 .. t0+cnt-1 into the packed B panels of the 16 GEMMs,
 * parallel over channels. */
static void block_in(nano_isa_level l, const nano_conv_desc *d, const wgeom *g, int nr, const float *xp, int t0,
                     int cnt, float *vp, int nthreads)
{
    size_t plane = (size_t)g->hp * g->wp, vs = (size_t)d->C * g->tb;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && d->C > 1) schedule(static)
    for (int c = 0; c < d->C; c++) {
        float v[16][WL];
        FOR_SEGMENTS(g, t0, cnt, ty, tx0, n, L) {
#if defined(__x86_64__)
            if (l >= NANO_ISA_AVX512) {
                wino_in_512(xp + (size_t)c * plane, g->wp, ty, tx0, vp, vs, L, n, nr, d->C, c);
                continue;
            }
#endif
            wino_in(xp + (size_t)c * plane, g->wp, ty, tx0, v);
            wino_in_store(v, vp, vs, L, n, nr, d->C, c);
        }
    }
}

/* Output transform of the block's GEMM results mb (ξ, M, tb) into y (M, OH, OW), with the
 * bias and then the act (the light ops' vectorised one). Parallel over output channels. */
static void block_out(nano_isa_level l, const nano_conv_desc *d, const wgeom *g, const float *mb, int t0, int cnt,
                      const float *bias, const nano_epilogue *ep, float *y, int nthreads)
{
    size_t ms = (size_t)d->M * g->tb, ohw = (size_t)d->OH * d->OW;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && d->M > 1) schedule(static)
    for (int m = 0; m < d->M; m++) {
        float b = bias ? bias[m] : 0.0f;
        FOR_SEGMENTS(g, t0, cnt, ty, tx0, n, L) {
            int ow0 = 2 * tx0, w = 2 * n < d->OW - ow0 ? 2 * n : d->OW - ow0;
            float *y0 = y + (size_t)m * ohw + (size_t)(2 * ty) * d->OW + ow0;
            float *y1 = 2 * ty + 1 < d->OH ? y0 + d->OW : NULL;
#if defined(__x86_64__)
            if (l >= NANO_ISA_AVX512) {
                wino_out_512(mb + (size_t)m * g->tb + L, ms, b, ep, w, y0, y1);
                if (!nk_act_inline(ep->act)) nano_act_rows(ep->act, ep->lo, ep->hi, y0, (size_t)d->OW, y1 ? 2 : 1, w);
                continue;
            }
#endif
            wino_out(mb + (size_t)m * g->tb + L, ms, b, w, y0, y1);
            if (ep->act != NANO_ACT_NONE) nano_act_rows(ep->act, ep->lo, ep->hi, y0, (size_t)d->OW, y1 ? 2 : 1, w);
        }
    }
}

void nk_wino_run(nano_isa_level l, const nano_conv_desc *d, const float *Up, const float *bias,
                 const nano_epilogue *ep, const float *x, float *y, void *scratch, int nthreads)
{
    int mr, nr;
    nk_f32_geom(l, &mr, &nr);
    wgeom g;
    geom(d, nr, &g);
    size_t plane = (size_t)g.hp * g.wp, hw = (size_t)d->H * d->W;
    size_t us = nk_roundup((size_t)d->M, (size_t)mr) * (size_t)d->C;
    float *xp = (float *)nk_roundup((size_t)(uintptr_t)scratch, 64);
    float *vp = (float *)nk_roundup((size_t)(uintptr_t)(xp + (size_t)d->C * plane + 2 * WL), 64);
    float *mb = (float *)nk_roundup((size_t)(uintptr_t)(vp + 16 * (size_t)d->C * g.tb), 64);
    memset(xp, 0, ((size_t)d->C * plane + 2 * WL) * sizeof *xp); /* the pads and the slack stay zero */
    for (int n = 0; n < d->N; n++) {
        const float *xn = x + (size_t)n * d->C * hw;
        float *yn = y + (size_t)n * d->M * d->OH * d->OW;
        for (int c = 0; c < d->C; c++) /* padded column pc to [pc/2], or [he + pc/2] when odd */
            for (int h = 0; h < d->H; h++) {
                float *row = xp + c * plane + (size_t)(h + d->pad_t) * g.wp;
                const float *src = xn + c * hw + (size_t)h * d->W;
                for (int w = 0; w < d->W; w++) {
                    int pc = w + d->pad_l;
                    row[(pc & 1) * (g.wp / 2) + (pc >> 1)] = src[w];
                }
            }
        for (int t0 = 0; t0 < g.T; t0 += g.tb) {
            int cnt = g.T - t0 < g.tb ? g.T - t0 : g.tb;
            block_in(l, d, &g, nr, xp, t0, cnt, vp, nthreads);
            /* the 16 channel sums, one GEMM per ξ and each on one thread */
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1) schedule(dynamic, 1)
            for (int k = 0; k < 16; k++)
                nk_f32_packed(l, d->M, cnt, d->C, Up + (size_t)k * us, vp + (size_t)k * d->C * g.tb,
                              mb + (size_t)k * d->M * g.tb, g.tb, NULL, 1);
            block_out(l, d, &g, mb, t0, cnt, bias, ep, yn, nthreads);
        }
    }
}
