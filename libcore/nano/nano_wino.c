/* nano_wino — 3×3 stride-1 convolution by Winograd's minimal filtering F(m×m, 3×3), m = 2
 * or 4 (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016):
 * each m×m output tile is Aᵀ [Σ_c (G g Gᵀ) ⊙ (Bᵀ d B)] A over its a×a input patch d
 * (a = m + 2), so the multiply-adds of the channel sums drop from 9 per output to a²/m²
 * (4 for m = 2, 2.25 for m = 4). The channel sums are a² GEMMs, U[ξ] (M × C) · V[ξ]
 * (C × tiles), on the packed-panel core of nano_gemm.c.
 *
 * The one design decision: the transforms work on 16 tiles of one tile row at a time, as
 * vectors over the tiles, on a zero-padded copy of the input plane whose rows are split
 * into their m column phases, so the patch column j of 16 consecutive tiles is 16
 * consecutive floats and no load needs a bounds check. Tiles go through in blocks sized
 * so a block's V and GEMM output stay in L2. The tile size is chosen per layer by the
 * multiply-adds the micro-kernel does, padding included (nk_wino_tile); m = 4's
 * transforms have entries up to 8 and 1/24, which costs a few bits over m = 2 (both are
 * checked in unit/nano-kernels against the direct convolution's bound). */
#include <stdlib.h>
#include <string.h>

#include "nano_kern.h"
#include "nano_kern_impl.h"
#include "nano_ops_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { WL = 16 };              /* tiles per transform step (lanes) */
enum { WINO_L2 = 192 * 1024 }; /* floats of V and GEMM output per tile block (768 KiB) */
/* A weight float read from memory costs about this many multiply-adds' time: 4 bytes at
 * ~8 GB/s against ~50 G multiply-adds/s on one core (Zen 4 and Sapphire Rapids alike). */
#define WINO_WREAD 24.0

/* G of F(2×2, 3×3) (points 0, ±1) and F(4×4, 3×3) (points 0, ±1, ±2); their Bᵀ and Aᵀ
 * are written out in BT2_ROWS .. AT4_ROWS below. */
static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double G4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};

typedef struct wgeom {
    int m, a, na;   /* output tile m×m, input patch a×a, a² GEMMs */
    int th, tw, T;  /* tile rows, tile columns, tiles */
    int hp, hq, wp; /* padded plane: rows, floats per column phase, row stride m·hq */
    int tb;         /* tiles per block (a multiple of nr) */
} wgeom;

static void geom(const nano_conv_desc *d, int nr, int m, wgeom *g)
{
    g->m = m, g->a = m + 2, g->na = g->a * g->a;
    g->th = (d->OH + m - 1) / m, g->tw = (d->OW + m - 1) / m, g->T = g->th * g->tw;
    g->hp = m * g->th + 2;
    g->hq = g->tw + 1 + WL; /* slack: the last lanes of a row read past its tiles */
    g->wp = m * g->hq;
    int per = WINO_L2 / (g->na * (d->C + d->M)) / nr * nr;
    int all = (int)nk_roundup((size_t)g->T, (size_t)nr);
    g->tb = per < nr ? nr : per > all ? all : per;
}

/* Columns the micro-kernel computes for n (16 when n <= 16: its half-width form). */
static double lanes(int n, int nr)
{
    return n <= 16 && nr > 16 ? 16.0 : (double)nk_roundup((size_t)n, (size_t)nr);
}

int nk_wino_tile(const nano_conv_desc *d)
{
    const int nr = 32; /* the AVX-512 kernel's columns, for every ISA: the same choice everywhere */
    if (!(d->kh == 3 && d->kw == 3 && d->sh == 1 && d->sw == 1 && d->dh == 1 && d->dw == 1 && d->group == 1 &&
          d->C >= 16 && d->M >= 16))
        return 0;
    /* The cost per (m, c) in multiply-add times: the micro-kernel's multiply-adds, padding
     * included — 9 per output pixel directly, a² per tile here (a 4×4 output is 4 tiles of
     * 2×2, which fill a quarter of 16 columns: direct) — plus the weights read once per
     * run, 9 floats directly and a² here, at WINO_WREAD multiply-adds per float: where
     * the output is small, the larger transformed weights cost more than their sums save. */
    double best = 9.0 * lanes(d->OH * d->OW, nr) + 9.0 * WINO_WREAD;
    int pick = 0;
    for (int m = 2; m <= 4; m += 2) {
        double a2 = (m + 2) * (m + 2);
        double cost = a2 * lanes(((d->OH + m - 1) / m) * ((d->OW + m - 1) / m), nr) + a2 * WINO_WREAD;
        if (cost < best) best = cost, pick = m;
    }
    return pick;
}

size_t nk_wino_wfloats(const nano_conv_desc *d, int mr, int m)
{
    return (size_t)(m + 2) * (m + 2) * nk_roundup((size_t)d->M, (size_t)mr) * (size_t)d->C;
}

/* U[ξ] = (G g Gᵀ)[ξ] for every (m, c), computed in double and rounded once, then each of
 * the a² (M × C) matrices packed in panels of mr rows. */
int nk_wino_pack(const nano_conv_desc *d, const float *W, int mr, int m, float *Up)
{
    const double(*G)[3] = m == 2 ? G2 : G4;
    int a = m + 2;
    size_t mc = (size_t)d->M * d->C, us = nk_roundup((size_t)d->M, (size_t)mr) * (size_t)d->C;
    float *u = malloc((size_t)a * a * mc * sizeof *u);
    if (!u) return -1;
    for (size_t r = 0; r < mc; r++) {
        const float *g = W + r * 9;
        double t[6][3];
        for (int i = 0; i < a; i++)
            for (int j = 0; j < 3; j++) t[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
        for (int i = 0; i < a; i++)
            for (int j = 0; j < a; j++)
                u[(size_t)(i * a + j) * mc + r] = (float)(t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2]);
    }
    for (int x = 0; x < a * a; x++)
        nk_pack_rk(u + (size_t)x * mc, (size_t)d->C, d->M, d->C, mr, Up + (size_t)x * us);
    free(u);
    return 0;
}

size_t nk_wino_scratch(const nano_conv_desc *d, int nr, int m)
{
    wgeom g;
    geom(d, nr, m, &g);
    size_t plane = (size_t)d->C * g.hp * g.wp + 2 * WL;
    size_t v = (size_t)g.na * d->C * g.tb, mb = (size_t)g.na * d->M * g.tb + WL;
    return (plane + v + mb) * sizeof(float) + 3 * 64;
}

/* ---- the transforms -----------------------------------------------------------------------
 * Written once, on 16-lane GCC vectors, and inlined into both the AVX-512 path (masked
 * stores) and the generic one (built per x86-64 width, and for NEON and portable C): the
 * same IEEE operations in the same order on every ISA. With the tile chosen alike on every
 * ISA (nk_wino_tile) and GEMMs that sum in the same order everywhere, a model gives the
 * same bits on x86-64 and arm64. */
typedef float v16 __attribute__((vector_size(64)));

#define INLINE static inline __attribute__((always_inline))
#define LD16(v, p) memcpy(&(v), (p), sizeof(v16)) /* (a macro: a v16 return value is ABI-dependent) */

/* Bᵀ·x over a column or row of the patch: F(2×2) of 4 vectors, F(4×4) of 6. */
#define BT2_ROWS(x, o) (o[0] = x[0] - x[2], o[1] = x[1] + x[2], o[2] = x[2] - x[1], o[3] = x[1] - x[3])
#define BT4_ROWS(x, o)                                                                                       \
    do {                                                                                                     \
        v16 p_ = x[4] - x[2], q_ = x[3] - x[1];                                                              \
        o[0] = (4.0f * x[0] - 5.0f * x[2]) + x[4];                                                           \
        o[1] = (x[3] + x[4]) - 4.0f * (x[1] + x[2]);                                                         \
        o[2] = (x[4] - x[3]) + 4.0f * (x[1] - x[2]);                                                         \
        o[3] = p_ + 2.0f * q_;                                                                               \
        o[4] = p_ - 2.0f * q_;                                                                               \
        o[5] = (4.0f * x[1] - 5.0f * x[3]) + x[5];                                                           \
    } while (0)
/* Aᵀ·x: F(2×2) of 4 vectors, F(4×4) of 6. */
#define AT2_ROWS(x, o) (o[0] = (x[0] + x[1]) + x[2], o[1] = (x[1] - x[2]) - x[3])
#define AT4_ROWS(x, o)                                                                                       \
    do {                                                                                                     \
        v16 p_ = x[1] + x[2], q_ = x[1] - x[2], u_ = x[3] + x[4], w_ = x[3] - x[4];                          \
        o[0] = (x[0] + p_) + u_;                                                                             \
        o[1] = q_ + 2.0f * w_;                                                                               \
        o[2] = p_ + 4.0f * u_;                                                                               \
        o[3] = (q_ + 8.0f * w_) + x[5];                                                                      \
    } while (0)

/* V[ξ] = (Bᵀ d B)[ξ] of the 16 tiles tx0 .. tx0+15 of tile row ty; xp is the padded
 * plane, each row stored as its m column phases hq apart: padded column m·tx + j of tile
 * tx is phase j mod m, index tx + j div m, so 16 tiles are 16 consecutive floats. */
INLINE void in_tile(const int m, const wgeom *g, const float *xp, int ty, int tx0, v16 *V)
{
    const int a = m + 2;
    const float *r = xp + (size_t)(m * ty) * g->wp + tx0;
    v16 t[6][6];
    for (int j = 0; j < a; j++) { /* t = Bᵀ d, column j */
        const float *cp = r + (size_t)(j % m) * g->hq + j / m;
        v16 x[6], o[6];
        for (int i = 0; i < a; i++) LD16(x[i], cp + (size_t)i * g->wp);
        if (m == 2) BT2_ROWS(x, o);
        else BT4_ROWS(x, o);
        for (int i = 0; i < a; i++) t[i][j] = o[i];
    }
    for (int i = 0; i < a; i++) { /* V = t B, row i */
        v16 o[6];
        if (m == 2) BT2_ROWS(t[i], o);
        else BT4_ROWS(t[i], o);
        for (int j = 0; j < a; j++) V[i * a + j] = o[j];
    }
}

/* Y[r][c] = (Aᵀ M A)[r][c] + bias of 16 tiles from their a² GEMM results (lanes u, ms
 * apart per ξ). */
INLINE void out_tile(const int m, const float *mv, size_t ms, float bias, v16 Y[4][4])
{
    const int a = m + 2;
    v16 s[4][6];
    for (int j = 0; j < a; j++) { /* s = Aᵀ M, column j */
        v16 x[6], o[4];
        for (int k = 0; k < a; k++) LD16(x[k], mv + (size_t)(k * a + j) * ms);
        if (m == 2) AT2_ROWS(x, o);
        else AT4_ROWS(x, o);
        for (int r = 0; r < m; r++) s[r][j] = o[r];
    }
    for (int r = 0; r < m; r++) {
        v16 o[4];
        if (m == 2) AT2_ROWS(s[r], o);
        else AT4_ROWS(s[r], o);
        for (int c = 0; c < m; c++) Y[r][c] = o[c] + bias;
    }
}

/* The generic path: lanes 0 .. n-1 of each V[ξ] to tiles L .. L+n-1 of the packed B
 * panels (panel q of ξ at vp + ξ·vs + q·nr·C, channel c's nr columns at c·nr). */
NANO_CLONES static void wino_in(const wgeom *g, const float *xp, int ty, int tx0, float *vp, size_t vs, int L, int n,
                                int nr, int C, int c)
{
    v16 V[36];
    if (g->m == 2) in_tile(2, g, xp, ty, tx0, V);
    else in_tile(4, g, xp, ty, tx0, V);
    for (int u = 0; u < n; u++) {
        int l = L + u;
        float *dst = vp + (size_t)(l / nr) * nr * C + (size_t)c * nr + l % nr;
        for (int x = 0; x < g->na; x++) dst[(size_t)x * vs] = V[x][u];
    }
}

/* The generic path: output row r of the segment, w values, y[r][m·u + c] = Y[r][c] of
 * tile u, where y[r] is not NULL. */
NANO_CLONES static void wino_out(const wgeom *g, const float *mv, size_t ms, float bias, int w, float *const *y)
{
    v16 Y[4][4];
    if (g->m == 2) out_tile(2, mv, ms, bias, Y);
    else out_tile(4, mv, ms, bias, Y);
    for (int r = 0; r < g->m; r++)
        if (y[r])
            for (int k = 0; k < w; k++) y[r][k] = Y[r][k % g->m][k / g->m];
}

#if defined(__x86_64__)
#define TGT512 __attribute__((target("avx512f")))

/* The AVX-512 path: the 16 lanes of each V[ξ] stored with masks (a run that crosses a
 * panel's end: the rest compressed to lane 0 of the next panel). */
TGT512 static void wino_in_512(const wgeom *g, const float *xp, int ty, int tx0, float *vp, size_t vs, int L, int n,
                               int nr, int C, int c)
{
    v16 V[36];
    if (g->m == 2) in_tile(2, g, xp, ty, tx0, V);
    else in_tile(4, g, xp, ty, tx0, V);
    int q = L % nr, run = nr - q < n ? nr - q : n;
    float *p0 = vp + (size_t)(L / nr) * nr * C + (size_t)c * nr + q;
    float *p1 = vp + (size_t)(L / nr + 1) * nr * C + (size_t)c * nr;
    __mmask16 m0 = (__mmask16)((1u << run) - 1), m1 = (__mmask16)(((1u << n) - 1) & ~((1u << run) - 1));
    __mmask16 mr = (__mmask16)((1u << (n - run)) - 1);
    for (int x = 0; x < g->na; x++) {
        __m512 v = (__m512)V[x];
        _mm512_mask_storeu_ps(p0 + (size_t)x * vs, m0, v);
        if (mr) _mm512_mask_storeu_ps(p1 + (size_t)x * vs, mr, _mm512_maskz_compress_ps(m1, v));
    }
}

/* The AVX-512 path: the output rows interleaved by permutes (m = 4: twice), the inline
 * acts applied, stored with masks. */
TGT512 static void wino_out_512(const wgeom *g, const float *mv, size_t ms, float bias, const nano_epilogue *ep,
                                int w, float *const *y)
{
    const int m = g->m;
    v16 Y[4][4];
    if (m == 2) out_tile(2, mv, ms, bias, Y);
    else out_tile(4, mv, ms, bias, Y);
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    __m512 zero = _mm512_setzero_ps(), clo = _mm512_set1_ps(ep->lo), chi = _mm512_set1_ps(ep->hi);
    for (int r = 0; r < m; r++) {
        if (!y[r]) continue;
        __m512 out[4], o0 = (__m512)Y[r][0], o1 = (__m512)Y[r][1];
        if (m == 2) {
            out[0] = _mm512_permutex2var_ps(o0, lo, o1), out[1] = _mm512_permutex2var_ps(o0, hi, o1);
        } else { /* (0,2) and (1,3) interleaved, then those: Y0 Y1 Y2 Y3 of tile 0, of tile 1, ... */
            __m512 o2 = (__m512)Y[r][2], o3 = (__m512)Y[r][3];
            __m512 e0 = _mm512_permutex2var_ps(o0, lo, o2), e1 = _mm512_permutex2var_ps(o0, hi, o2);
            __m512 f0 = _mm512_permutex2var_ps(o1, lo, o3), f1 = _mm512_permutex2var_ps(o1, hi, o3);
            out[0] = _mm512_permutex2var_ps(e0, lo, f0), out[1] = _mm512_permutex2var_ps(e0, hi, f0);
            out[2] = _mm512_permutex2var_ps(e1, lo, f1), out[3] = _mm512_permutex2var_ps(e1, hi, f1);
        }
        for (int k = 0; k < m && w - 16 * k > 0; k++) {
            int left = w - 16 * k;
            __m512 x = out[k];
            if (ep->act == NANO_ACT_RELU) x = _mm512_max_ps(x, zero);
            else if (ep->act == NANO_ACT_CLIP) x = _mm512_min_ps(_mm512_max_ps(x, clo), chi);
            _mm512_mask_storeu_ps(y[r] + 16 * k, left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1), x);
        }
    }
}
#endif

/* ---- blocks of tiles --------------------------------------------------------------------- */

/* The segments (ty, tx0, n ≤ 16) of tiles t0 .. t0+cnt-1: runs inside one tile row. */
#define FOR_SEGMENTS(g, t0, cnt, ty, tx0, n, L)                                                             \
    for (int L = 0, ty, tx0, n; L < (cnt) &&                                                                 \
                                (ty = ((t0) + L) / (g)->tw, tx0 = ((t0) + L) % (g)->tw,                      \
                                n = (g)->tw - tx0 < WL ? (g)->tw - tx0 : WL, n = (cnt) - L < n ? (cnt) - L : n, 1); \
         L += n)

/* Input transform of tiles t0 .. t0+cnt-1 into the packed B panels of the a² GEMMs,
 * parallel over channels. */
static void block_in(nano_isa_level l, const nano_conv_desc *d, const wgeom *g, int nr, const float *xp, int t0,
                     int cnt, float *vp, int nthreads)
{
    size_t plane = (size_t)g->hp * g->wp, vs = (size_t)d->C * g->tb;
    (void)l;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && d->C > 1) schedule(static)
    for (int c = 0; c < d->C; c++) {
        FOR_SEGMENTS(g, t0, cnt, ty, tx0, n, L) {
#if defined(__x86_64__)
            if (l >= NANO_ISA_AVX512) {
                wino_in_512(g, xp + (size_t)c * plane, ty, tx0, vp, vs, L, n, nr, d->C, c);
                continue;
            }
#endif
            wino_in(g, xp + (size_t)c * plane, ty, tx0, vp, vs, L, n, nr, d->C, c);
        }
    }
}

/* Output transform of the block's GEMM results mb (ξ, M, tb) into y (M, OH, OW), with the
 * bias and the act. Parallel over output channels. */
static void block_out(nano_isa_level l, const nano_conv_desc *d, const wgeom *g, const float *mb, int t0, int cnt,
                      const float *bias, const nano_epilogue *ep, float *y, int nthreads)
{
    size_t ms = (size_t)d->M * g->tb, ohw = (size_t)d->OH * d->OW;
    (void)l;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && d->M > 1) schedule(static)
    for (int mo = 0; mo < d->M; mo++) {
        float b = bias ? bias[mo] : 0.0f;
        FOR_SEGMENTS(g, t0, cnt, ty, tx0, n, L) {
            int ow0 = g->m * tx0, w = g->m * n < d->OW - ow0 ? g->m * n : d->OW - ow0, rows = 0;
            float *yr[4];
            for (int r = 0; r < g->m; r++) {
                int oh = g->m * ty + r;
                yr[r] = oh < d->OH ? y + (size_t)mo * ohw + (size_t)oh * d->OW + ow0 : NULL;
                rows += oh < d->OH;
            }
            const float *mv = mb + (size_t)mo * g->tb + L;
            int inline_act = 0;
#if defined(__x86_64__)
            if (l >= NANO_ISA_AVX512) wino_out_512(g, mv, ms, b, ep, w, yr), inline_act = 1;
#endif
            if (!inline_act) wino_out(g, mv, ms, b, w, yr);
            if (ep->act != NANO_ACT_NONE && !(inline_act && nk_act_inline(ep->act)))
                nano_act_rows(ep->act, ep->lo, ep->hi, yr[0], (size_t)d->OW, rows, w);
        }
    }
}

void nk_wino_run(nano_isa_level l, const nano_conv_desc *d, int m, const float *Up, const float *bias,
                 const nano_epilogue *ep, const float *x, float *y, void *scratch, int nthreads)
{
    int mr, nr;
    nk_f32_geom(l, &mr, &nr);
    wgeom g;
    geom(d, nr, m, &g);
    size_t plane = (size_t)g.hp * g.wp, hw = (size_t)d->H * d->W;
    size_t us = nk_roundup((size_t)d->M, (size_t)mr) * (size_t)d->C;
    float *xp = (float *)nk_roundup((size_t)(uintptr_t)scratch, 64);
    float *vp = (float *)nk_roundup((size_t)(uintptr_t)(xp + (size_t)d->C * plane + 2 * WL), 64);
    float *mb = (float *)nk_roundup((size_t)(uintptr_t)(vp + (size_t)g.na * d->C * g.tb), 64);
    memset(xp + (size_t)d->C * plane, 0, 2 * WL * sizeof *xp);
    for (int n = 0; n < d->N; n++) {
        const float *xn = x + (size_t)n * d->C * hw;
        float *yn = y + (size_t)n * d->M * d->OH * d->OW;
        /* the padded planes: zero, then padded column pc of each row to phase pc mod m,
         * index pc div m */
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && d->C > 1) schedule(static)
        for (int c = 0; c < d->C; c++) {
            memset(xp + c * plane, 0, plane * sizeof *xp);
            for (int h = 0; h < d->H; h++) {
                float *row = xp + c * plane + (size_t)(h + d->pad_t) * g.wp;
                const float *src = xn + c * hw + (size_t)h * d->W;
                for (int w0 = 0; w0 < m && w0 < d->W; w0++) {
                    int pc = w0 + d->pad_l;
                    float *ph = row + (size_t)(pc % m) * g.hq + pc / m;
                    for (int w = w0, k = 0; w < d->W; w += m, k++) ph[k] = src[w];
                }
            }
        }
        for (int t0 = 0; t0 < g.T; t0 += g.tb) {
            int cnt = g.T - t0 < g.tb ? g.T - t0 : g.tb;
            block_in(l, d, &g, nr, xp, t0, cnt, vp, nthreads);
            /* the a² channel sums, one GEMM per ξ and each on one thread */
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1) schedule(dynamic, 1)
            for (int k = 0; k < g.na; k++)
                nk_f32_packed(l, d->M, cnt, d->C, Up + (size_t)k * us, vp + (size_t)k * d->C * g.tb,
                              mb + (size_t)k * d->M * g.tb, g.tb, NULL, 1);
            block_out(l, d, &g, mb, t0, cnt, bias, ep, yn, nthreads);
        }
    }
}
