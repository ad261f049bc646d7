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

/* Bᵀ, G and Aᵀ of F(2×2, 3×3) (points 0, ±1) and F(4×4, 3×3) (points 0, ±1, ±2). */
static const float BT2[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
static const float AT2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const float BT4[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
static const float AT4[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
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

int nk_wino_tile(const nano_conv_desc *d, int nr)
{
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

/* ---- portable transforms (any ISA), by the coefficient tables ---------------------------- */

/* V[ξ][u] = (Bᵀ d B)[ξ] of the tiles tx0 + u (u < 16) of tile row ty; xp is the padded
 * plane, each row stored as its m column phases hq apart: padded column m·tx + j of tile
 * tx is phase j mod m, index tx + j div m. */
NANO_CLONES static void wino_in(const wgeom *g, const float *xp, int ty, int tx0, float v[36][WL])
{
    const int m = g->m, a = g->a;
    const float *BT = m == 2 ? &BT2[0][0] : &BT4[0][0];
    float t[6][6][WL];
    for (int j = 0; j < a; j++) { /* t = Bᵀ d, column j */
        const float *c = xp + (size_t)(m * ty) * g->wp + (size_t)(j % m) * g->hq + tx0 + j / m;
        for (int i = 0; i < a; i++) {
            float s[WL] = {0};
            for (int k = 0; k < a; k++) {
                float b = BT[i * a + k];
                if (b != 0.0f)
                    for (int u = 0; u < WL; u++) s[u] += b * c[(size_t)k * g->wp + u];
            }
            memcpy(t[i][j], s, sizeof s);
        }
    }
    for (int i = 0; i < a; i++) /* V = t B, row i */
        for (int j = 0; j < a; j++) {
            float s[WL] = {0};
            for (int k = 0; k < a; k++) {
                float b = BT[j * a + k];
                if (b != 0.0f)
                    for (int u = 0; u < WL; u++) s[u] += b * t[i][k][u];
            }
            memcpy(v[i * a + j], s, sizeof s);
        }
}

/* Lanes 0 .. n-1 of each v[ξ] to tiles L .. L+n-1 of the packed B panels (panel q of ξ at
 * vp + ξ·vs + q·nr·C, channel c's nr columns at c·nr). */
static void wino_in_store(int na, float v[36][WL], float *vp, size_t vs, int L, int n, int nr, int C, int c)
{
    for (int u = 0; u < n; u++) {
        int l = L + u;
        float *dst = vp + (size_t)(l / nr) * nr * C + (size_t)c * nr + l % nr;
        for (int x = 0; x < na; x++) dst[(size_t)x * vs] = v[x][u];
    }
}

/* Y = Aᵀ M A + bias of 16 tiles from their a² GEMM results (lanes u, ms apart per ξ);
 * output row r of the segment (w values, o[m·u + s] = Y[r][s] of tile u) to y[r] where
 * y[r] is not NULL. */
NANO_CLONES static void wino_out(const wgeom *g, const float *mv, size_t ms, float bias, int w, float *const *y)
{
    const int m = g->m, a = g->a;
    const float *AT = m == 2 ? &AT2[0][0] : &AT4[0][0];
    float s[4][6][WL];
    for (int r = 0; r < m; r++)
        for (int j = 0; j < a; j++) {
            float acc[WL] = {0};
            for (int k = 0; k < a; k++) {
                float c = AT[r * a + k];
                if (c != 0.0f)
                    for (int u = 0; u < WL; u++) acc[u] += c * mv[(size_t)(k * a + j) * ms + u];
            }
            memcpy(s[r][j], acc, sizeof acc);
        }
    for (int r = 0; r < m; r++) {
        if (!y[r]) continue;
        float o[4 * WL];
        for (int c = 0; c < m; c++)
            for (int u = 0; u < WL; u++) {
                float acc = bias;
                for (int k = 0; k < a; k++) acc += AT[c * a + k] * s[r][k][u];
                o[m * u + c] = acc;
            }
        memcpy(y[r], o, (size_t)w * sizeof *o);
    }
}

/* ---- AVX-512 transforms: the same sums written out, lanes stored with masks ------------ */
#if defined(__x86_64__)
#define TGT512 __attribute__((target("avx512f")))
#define ADD _mm512_add_ps
#define SUB _mm512_sub_ps
#define MUL(c, x) _mm512_mul_ps(_mm512_set1_ps(c), x)

/* The 16 lanes of v to tiles L .. L+n-1 (a run that crosses a panel's end: the rest
 * compressed to lane 0 of the next panel). */
typedef struct lane_dst {
    float *p0, *p1;
    __mmask16 m0, m1, mr;
} lane_dst;

TGT512 static inline lane_dst lanes_to(float *vp, int L, int n, int nr, int C, int c)
{
    int q = L % nr, run = nr - q < n ? nr - q : n;
    lane_dst t = {vp + (size_t)(L / nr) * nr * C + (size_t)c * nr + q, vp + (size_t)(L / nr + 1) * nr * C + (size_t)c * nr,
                  (__mmask16)((1u << run) - 1), (__mmask16)(((1u << n) - 1) & ~((1u << run) - 1)),
                  (__mmask16)((1u << (n - run)) - 1)};
    return t;
}

TGT512 static inline void lane_store(const lane_dst *t, size_t off, __m512 v)
{
    _mm512_mask_storeu_ps(t->p0 + off, t->m0, v);
    if (t->mr) _mm512_mask_storeu_ps(t->p1 + off, t->mr, _mm512_maskz_compress_ps(t->m1, v));
}

/* F(2×2, 3×3): one Bᵀ·x of 4 vectors. */
#define BT2_ROWS(x, o)                                                                                       \
    o[0] = SUB(x[0], x[2]), o[1] = ADD(x[1], x[2]), o[2] = SUB(x[2], x[1]), o[3] = SUB(x[1], x[3])
/* F(4×4, 3×3): one Bᵀ·x of 6 vectors. */
#define BT4_ROWS(x, o)                                                                                       \
    do {                                                                                                     \
        __m512 p = SUB(x[4], x[2]), q = SUB(x[3], x[1]);                                                     \
        o[0] = ADD(SUB(MUL(4.0f, x[0]), MUL(5.0f, x[2])), x[4]);                                             \
        o[1] = SUB(ADD(x[3], x[4]), MUL(4.0f, ADD(x[1], x[2])));                                             \
        o[2] = ADD(SUB(x[4], x[3]), MUL(4.0f, SUB(x[1], x[2])));                                             \
        o[3] = ADD(p, MUL(2.0f, q));                                                                         \
        o[4] = SUB(p, MUL(2.0f, q));                                                                         \
        o[5] = ADD(SUB(MUL(4.0f, x[1]), MUL(5.0f, x[3])), x[5]);                                             \
    } while (0)

/* (m is a compile-time constant in each of the two instances below, so t stays in
 * registers and the loops unroll.) */
TGT512 static inline __attribute__((always_inline)) void wino_in_512_m(const int m, const wgeom *g, const float *xp,
                                                                      int ty, int tx0, float *vp, size_t vs, int L,
                                                                      int n, int nr, int C, int c)
{
    const int a = m + 2;
    const float *r = xp + (size_t)(m * ty) * g->wp + tx0;
    __m512 t[6][6];
    for (int j = 0; j < a; j++) { /* t = Bᵀ d, column j */
        const float *cp = r + (size_t)(j % m) * g->hq + j / m;
        __m512 x[6], o[6];
        for (int i = 0; i < a; i++) x[i] = _mm512_loadu_ps(cp + (size_t)i * g->wp);
        if (m == 2) BT2_ROWS(x, o);
        else BT4_ROWS(x, o);
        for (int i = 0; i < a; i++) t[i][j] = o[i];
    }
    lane_dst dst = lanes_to(vp, L, n, nr, C, c);
    for (int i = 0; i < a; i++) { /* V = t B, row i */
        __m512 o[6];
        if (m == 2) BT2_ROWS(t[i], o);
        else BT4_ROWS(t[i], o);
        for (int j = 0; j < a; j++) lane_store(&dst, (size_t)(i * a + j) * vs, o[j]);
    }
}

TGT512 static void wino_in_512(const wgeom *g, const float *xp, int ty, int tx0, float *vp, size_t vs, int L, int n,
                               int nr, int C, int c)
{
    if (g->m == 2) wino_in_512_m(2, g, xp, ty, tx0, vp, vs, L, n, nr, C, c);
    else wino_in_512_m(4, g, xp, ty, tx0, vp, vs, L, n, nr, C, c);
}

/* Aᵀ·x: F(2×2) of 4 vectors, F(4×4) of 6. */
#define AT2_ROWS(x, o) o[0] = ADD(ADD(x[0], x[1]), x[2]), o[1] = SUB(SUB(x[1], x[2]), x[3])
#define AT4_ROWS(x, o)                                                                                       \
    do {                                                                                                     \
        __m512 p = ADD(x[1], x[2]), q = SUB(x[1], x[2]), u = ADD(x[3], x[4]), v = SUB(x[3], x[4]);           \
        o[0] = ADD(ADD(x[0], p), u);                                                                         \
        o[1] = ADD(q, MUL(2.0f, v));                                                                         \
        o[2] = ADD(p, MUL(4.0f, u));                                                                         \
        o[3] = ADD(ADD(q, MUL(8.0f, v)), x[5]);                                                              \
    } while (0)

/* The output rows of 16 tiles: Y = Aᵀ M A + bias, the inline acts, columns interleaved by
 * permutes (m = 4: twice) and stored with masks, w values per row. */
TGT512 static inline __attribute__((always_inline)) void wino_out_512_m(const int m, const float *mv, size_t ms,
                                                                       float bias, const nano_epilogue *ep, int w,
                                                                       float *const *y)
{
    const int a = m + 2;
    __m512 s[4][6], b = _mm512_set1_ps(bias);
    for (int j = 0; j < a; j++) { /* s = Aᵀ M, column j */
        __m512 x[6], o[4];
        for (int k = 0; k < a; k++) x[k] = _mm512_loadu_ps(mv + (size_t)(k * a + j) * ms);
        if (m == 2) AT2_ROWS(x, o);
        else AT4_ROWS(x, o);
        for (int r = 0; r < m; r++) s[r][j] = o[r];
    }
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    __m512 zero = _mm512_setzero_ps(), clo = _mm512_set1_ps(ep->lo), chi = _mm512_set1_ps(ep->hi);
    for (int r = 0; r < m; r++) {
        if (!y[r]) continue;
        __m512 o[4], out[4];
        if (m == 2) AT2_ROWS(s[r], o);
        else AT4_ROWS(s[r], o);
        for (int c = 0; c < m; c++) o[c] = ADD(o[c], b);
        if (m == 2) {
            out[0] = _mm512_permutex2var_ps(o[0], lo, o[1]), out[1] = _mm512_permutex2var_ps(o[0], hi, o[1]);
        } else { /* (0,2) and (1,3) interleaved, then those: o0 o1 o2 o3 of tile 0, tile 1, ... */
            __m512 e0 = _mm512_permutex2var_ps(o[0], lo, o[2]), e1 = _mm512_permutex2var_ps(o[0], hi, o[2]);
            __m512 f0 = _mm512_permutex2var_ps(o[1], lo, o[3]), f1 = _mm512_permutex2var_ps(o[1], hi, o[3]);
            out[0] = _mm512_permutex2var_ps(e0, lo, f0), out[1] = _mm512_permutex2var_ps(e0, hi, f0);
            out[2] = _mm512_permutex2var_ps(e1, lo, f1), out[3] = _mm512_permutex2var_ps(e1, hi, f1);
        }
        for (int k = 0; k < m; k++) {
            int left = w - 16 * k;
            if (left <= 0) break;
            __mmask16 mk = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
            __m512 x = out[k];
            if (ep->act == NANO_ACT_RELU) x = _mm512_max_ps(x, zero);
            else if (ep->act == NANO_ACT_CLIP) x = _mm512_min_ps(_mm512_max_ps(x, clo), chi);
            _mm512_mask_storeu_ps(y[r] + 16 * k, mk, x);
        }
    }
}

TGT512 static void wino_out_512(const wgeom *g, const float *mv, size_t ms, float bias, const nano_epilogue *ep,
                                int w, float *const *y)
{
    if (g->m == 2) wino_out_512_m(2, mv, ms, bias, ep, w, y);
    else wino_out_512_m(4, mv, ms, bias, ep, w, y);
}
#undef ADD
#undef SUB
#undef MUL
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
        float v[36][WL];
        FOR_SEGMENTS(g, t0, cnt, ty, tx0, n, L) {
#if defined(__x86_64__)
            if (l >= NANO_ISA_AVX512) {
                wino_in_512(g, xp + (size_t)c * plane, ty, tx0, vp, vs, L, n, nr, d->C, c);
                continue;
            }
#endif
            wino_in(g, xp + (size_t)c * plane, ty, tx0, v);
            wino_in_store(g->na, v, vp, vs, L, n, nr, d->C, c);
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
