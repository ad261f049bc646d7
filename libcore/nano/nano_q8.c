/* nano_q8 — int8 GEMM and convolution: uint8 activations (quantised in the kernel with the
 * calibrated scale and zero point) × int8 weights (per-channel scale), exact int32 sums,
 * fp32 output y = (x_scale·w_scale[c])·(float)(acc − x_zero·Σw[c]) + bias[c], then the act.
 *
 * The one design decision: one packed layout family for every ISA — a panel of R rows
 * holds K in groups of g consecutive k for each row, [k/g][R][g], of e-byte elements — with
 * (g, e) = (4, 1 byte) for AVX-512 VNNI (vpdpbusd u8×s8, 4 k per int32 lane), (2, int16) for
 * AVX2 (vpmaddwd, exact: no int16 saturation as vpmaddubsw would have), (1, int16) for NEON
 * (vmlal_lane_s16, baseline armv8-a) and the portable kernel. A micro-kernel always computes
 * its whole tile into an int32 buffer over the whole K (padded with zeros); a scalar
 * store dequantises it, so every ISA gives bit-identical output. */
#include <stdlib.h>
#include <string.h>

#include "nano_kern.h"
#include "nano_kern_impl.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#define QTILE 8 /* a task's tile: QTILE A panels × QTILE B panels */

/* n: the tile's valid columns; a kernel may skip the vectors past them (storing zeros). */
typedef void (*qukr_fn)(int kg, const void *a, const void *b, int32_t *t, int a_unsigned, int n);
/* y (m×n) from the int32 tile t (row stride tn); the channel is the row (conv) or the
 * column (gemm), zc/sc/bias offset to the tile's first. */
typedef void (*qstore_fn)(const int32_t *t, int tn, float *y, int ldy, int m, int n, const int32_t *zc,
                          const float *sc, const float *bias, int rows, const nano_epilogue *ep);

typedef struct qgeo {
    int mr, nr, g, e; /* tile rows, columns; k per group; bytes per element */
    qukr_fn ukr;
    qstore_fn store;
} qgeo;

/* ---- micro-kernels: t (mr×nr, row stride nr) = A panel · B panel over kg k-groups ---- */
static void qukr_portable(int kg, const void *a, const void *b, int32_t *t, int a_unsigned, int n)
{
    (void)a_unsigned, (void)n;
    const int16_t *pa = a, *pb = b;
    int32_t acc[4][8] = {{0}};
    for (int k = 0; k < kg; k++, pa += 4, pb += 8)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++) acc[i][j] += (int32_t)pa[i] * pb[j];
    memcpy(t, acc, sizeof acc);
}

#if defined(__x86_64__)
#define INLINE static inline __attribute__((always_inline))
#define TGTVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define TGT256 __attribute__((target("avx2,fma")))

/* 12×32, g = 4: a row's 4 bytes broadcast, 16 columns × 4 bytes per vector. The unsigned
 * operand (u8 activations) goes first to vpdpbusd, whichever side it is on. NV
 * (compile-time) vectors computed: 1 when the tile has ≤ 16 valid columns (small OH·OW). */
INLINE TGTVNNI void qukr_vnni_body(const int AU, const int NV, int kg, const uint8_t *a, const uint8_t *b,
                                   int32_t *t)
{
    __m512i acc[12][2];
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
    for (int q = 0; q < kg; q++, a += 48, b += 128) {
        __m512i b0 = _mm512_loadu_si512(b), b1 = NV == 2 ? _mm512_loadu_si512(b + 64) : b0;
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            int32_t v;
            memcpy(&v, a + 4 * i, 4);
            __m512i ai = _mm512_set1_epi32(v);
            if (AU) {
                acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], ai, b0);
                if (NV == 2) acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], ai, b1);
            } else {
                acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], b0, ai);
                if (NV == 2) acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], b1, ai);
            }
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
        _mm512_storeu_si512(t + 32 * i, acc[i][0]);
        _mm512_storeu_si512(t + 32 * i + 16, acc[i][1]);
    }
}

static TGTVNNI void qukr_vnni(int kg, const void *a, const void *b, int32_t *t, int a_unsigned, int n)
{
    if (n <= 16) {
        if (a_unsigned) qukr_vnni_body(1, 1, kg, a, b, t);
        else qukr_vnni_body(0, 1, kg, a, b, t);
    } else if (a_unsigned) qukr_vnni_body(1, 2, kg, a, b, t);
    else qukr_vnni_body(0, 2, kg, a, b, t);
}

/* 6×16, g = 2, int16: vpmaddwd sums a k pair into an int32 lane exactly. */
static TGT256 void qukr_avx2(int kg, const void *a, const void *b, int32_t *t, int a_unsigned, int n)
{
    (void)a_unsigned, (void)n;
    const int16_t *pa = a, *pb = b;
    __m256i acc[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (int q = 0; q < kg; q++, pa += 12, pb += 32) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)pb), b1 = _mm256_loadu_si256((const __m256i *)(pb + 16));
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            int32_t v;
            memcpy(&v, pa + 2 * i, 4);
            __m256i ai = _mm256_set1_epi32(v);
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(ai, b0));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(ai, b1));
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        _mm256_storeu_si256((__m256i *)(t + 16 * i), acc[i][0]);
        _mm256_storeu_si256((__m256i *)(t + 16 * i + 8), acc[i][1]);
    }
}
#endif

#if defined(__aarch64__)
/* 8×8, g = 1, int16: acc (int32×4) += b (4 columns) · a[lane i]. */
static void qukr_neon(int kg, const void *a, const void *b, int32_t *t, int a_unsigned, int n)
{
    (void)a_unsigned, (void)n;
    const int16_t *pa = a, *pb = b;
    int32x4_t acc[8][2];
    for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = vdupq_n_s32(0);
    for (int k = 0; k < kg; k++, pa += 8, pb += 8) {
        int16x8_t vb = vld1q_s16(pb), va = vld1q_s16(pa);
        int16x4_t bl = vget_low_s16(vb);
#define QROW(i)                                                   \
    acc[i][0] = vmlal_laneq_s16(acc[i][0], bl, va, i);            \
    acc[i][1] = vmlal_high_laneq_s16(acc[i][1], vb, va, i);
        QROW(0) QROW(1) QROW(2) QROW(3) QROW(4) QROW(5) QROW(6) QROW(7)
#undef QROW
    }
    for (int i = 0; i < 8; i++) {
        vst1q_s32(t + 8 * i, acc[i][0]);
        vst1q_s32(t + 8 * i + 4, acc[i][1]);
    }
}
#endif

/* ---- quantisation of activations: q = clamp(nearbyint(x / x_scale) + x_zero, 0, 255) ----
 * The vector forms do the same IEEE operations (divide, round to nearest even, add, clamp
 * with NaN going to 0), so they agree with nk_quant_u8 to the bit. */
#if defined(__x86_64__)
static TGTVNNI void quant512(const float *x, size_t n, float s, int z, uint8_t *q)
{
    __m512 vs = _mm512_set1_ps(s), vz = _mm512_set1_ps((float)z), lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(255.0f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 r = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(x + i), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, vz), lo), hi); /* max(NaN, 0) = 0 */
        _mm_storeu_si128((__m128i *)(q + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
    }
    for (; i < n; i++) q[i] = (uint8_t)nk_quant_u8(x[i], s, z);
}

static TGT256 void quant256(const float *x, size_t n, float s, int z, uint8_t *q)
{
    __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps((float)z), lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(r, vz), lo), hi);
        __m256i v = _mm256_cvtps_epi32(r);
        __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64((__m128i *)(q + i), _mm_packus_epi16(w, w));
    }
    for (; i < n; i++) q[i] = (uint8_t)nk_quant_u8(x[i], s, z);
}
#endif

static void quant_n(nano_isa_level l, const float *x, size_t n, float s, int z, uint8_t *q)
{
#if defined(__x86_64__)
    if (l >= NANO_ISA_AVX512_VNNI) { quant512(x, n, s, z, q); return; }
    if (l >= NANO_ISA_AVX2) { quant256(x, n, s, z, q); return; }
#endif
    (void)l;
    for (size_t i = 0; i < n; i++) q[i] = (uint8_t)nk_quant_u8(x[i], s, z);
}

/* ---- packing --------------------------------------------------------------------------- */
/* Element (r, k) of a panel of R rows over Kp = roundup(K, g). */
static inline void qput(void *panel, const qgeo *q, int R, int r, int k, int v)
{
    size_t i = ((size_t)(k / q->g) * R + r) * q->g + k % q->g;
    if (q->e == 1) ((uint8_t *)panel)[i] = (uint8_t)v; /* int8 as its two's complement byte */
    else ((int16_t *)panel)[i] = (int16_t)v;
}

/* qput of row r's values v[0 .. n) at k0, k0+1, ... (k0 a multiple of the group): the
 * index stepped a group at a time, VNNI's groups of 4 bytes copied whole. */
static void qput_row(void *panel, const qgeo *q, int R, int r, int k0, const uint8_t *v, int n)
{
    size_t i = ((size_t)(k0 / q->g) * R + r) * q->g, step = (size_t)R * q->g;
    int k = 0;
    if (q->e == 1 && q->g == 4)
        for (; k + 4 <= n; k += 4, i += step) memcpy((uint8_t *)panel + i, v + k, 4);
    for (; k < n; k += q->g, i += step)
        for (int j = 0; j < q->g && k + j < n; j++) {
            if (q->e == 1) ((uint8_t *)panel)[i + j] = v[k + j];
            else ((int16_t *)panel)[i + j] = (int16_t)v[k + j];
        }
}

static inline size_t panel_bytes(const qgeo *q, int R, int Kp)
{
    return (size_t)R * Kp * q->e;
}

/* Weights (rows, K) int8 into panels of R (the zero rows/k of the padding included). */
static void qpack_w(const int8_t *w, int rows, int K, int Kp, const qgeo *q, int R, uint8_t *dst)
{
    for (int p = 0; p < rows; p += R, dst += panel_bytes(q, R, Kp)) {
        memset(dst, 0, panel_bytes(q, R, Kp));
        for (int r = 0; r < R && p + r < rows; r++)
            for (int k = 0; k < K; k++) qput(dst, q, R, r, k, w[(size_t)(p + r) * K + k]);
    }
}

/* Per output channel: the zero-point term, the combined scale and the bias. */
typedef struct qchan {
    int32_t *zc;
    float *sc;
    float *bias;
} qchan;

static int qchan_init(qchan *c, const int8_t *W, const float *w_scale, const float *bias, int n, int K,
                      float x_scale, int x_zero)
{
    c->zc = malloc((size_t)n * sizeof *c->zc);
    c->sc = malloc((size_t)n * sizeof *c->sc);
    c->bias = bias ? malloc((size_t)n * sizeof *c->bias) : NULL;
    if (!c->zc || !c->sc || (bias && !c->bias)) return -1;
    for (int i = 0; i < n; i++) {
        int32_t s = 0;
        for (int k = 0; k < K; k++) s += W[(size_t)i * K + k];
        c->zc[i] = x_zero * s;
        c->sc[i] = x_scale * w_scale[i];
    }
    if (bias) memcpy(c->bias, bias, (size_t)n * sizeof *bias);
    return 0;
}

static void qchan_free(qchan *c)
{
    free(c->zc);
    free(c->sc);
    free(c->bias);
}

static void qstore(const int32_t *t, int tn, float *y, int ldy, int m, int n, const int32_t *zc, const float *sc,
                   const float *bias, int rows, const nano_epilogue *ep)
{
    for (int i = 0; i < m; i++) {
        float *yi = y + (size_t)i * ldy;
        for (int j = 0; j < n; j++) {
            int c = rows ? i : j;
            float v = sc[c] * (float)(t[i * tn + j] - zc[c]);
            if (bias) v += bias[c];
            yi[j] = nk_act1(ep->act, ep->lo, ep->hi, v);
        }
    }
}

#if defined(__x86_64__)
/* qstore with AVX-512 / AVX2: the same float operations in the same order (int32 subtract,
 * exact conversion, multiply, add), so the output is bit-identical to qstore's; the
 * transcendental acts run after, on the stored tile. */
static TGTVNNI void qstore512(const int32_t *t, int tn, float *y, int ldy, int m, int n, const int32_t *zc,
                              const float *sc, const float *bias, int rows, const nano_epilogue *ep)
{
    __m512 lo = _mm512_set1_ps(ep->lo), hi = _mm512_set1_ps(ep->hi), zero = _mm512_setzero_ps();
    for (int i = 0; i < m; i++) {
        float *yi = y + (size_t)i * ldy;
        for (int j = 0; j < n; j += 16) {
            __mmask16 k = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
            __m512i a = _mm512_maskz_loadu_epi32(k, t + i * tn + j);
            __m512i z = rows ? _mm512_set1_epi32(zc[i]) : _mm512_maskz_loadu_epi32(k, zc + j);
            __m512 s = rows ? _mm512_set1_ps(sc[i]) : _mm512_maskz_loadu_ps(k, sc + j);
            __m512 v = _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_sub_epi32(a, z)));
            if (bias) v = _mm512_add_ps(v, rows ? _mm512_set1_ps(bias[i]) : _mm512_maskz_loadu_ps(k, bias + j));
            if (ep->act == NANO_ACT_RELU) v = _mm512_max_ps(v, zero);
            else if (ep->act == NANO_ACT_CLIP) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            _mm512_mask_storeu_ps(yi + j, k, v);
        }
    }
    nk_act_tile(y, ldy, m, n, ep->act, ep->lo, ep->hi);
}

static TGT256 void qstore256(const int32_t *t, int tn, float *y, int ldy, int m, int n, const int32_t *zc,
                             const float *sc, const float *bias, int rows, const nano_epilogue *ep)
{
    __m256 lo = _mm256_set1_ps(ep->lo), hi = _mm256_set1_ps(ep->hi), zero = _mm256_setzero_ps();
    int n8 = n & ~7;
    for (int i = 0; i < m; i++) {
        float *yi = y + (size_t)i * ldy;
        for (int j = 0; j < n8; j += 8) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(t + i * tn + j));
            __m256i z = rows ? _mm256_set1_epi32(zc[i]) : _mm256_loadu_si256((const __m256i *)(zc + j));
            __m256 s = rows ? _mm256_set1_ps(sc[i]) : _mm256_loadu_ps(sc + j);
            __m256 v = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_sub_epi32(a, z)));
            if (bias) v = _mm256_add_ps(v, rows ? _mm256_set1_ps(bias[i]) : _mm256_loadu_ps(bias + j));
            if (ep->act == NANO_ACT_RELU) v = _mm256_max_ps(v, zero);
            else if (ep->act == NANO_ACT_CLIP) v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
            _mm256_storeu_ps(yi + j, v);
        }
    }
    nk_act_tile(y, ldy, m, n8, ep->act, ep->lo, ep->hi);
    if (n8 < n) /* the last columns: scalar */
        qstore(t + n8, tn, y + n8, ldy, m, n - n8, rows ? zc : zc + n8, rows ? sc : sc + n8,
               bias ? (rows ? bias : bias + n8) : NULL, rows, ep);
}
#endif

static qgeo pick_geo(nano_isa_level l)
{
#if defined(__x86_64__)
    if (l >= NANO_ISA_AVX512_VNNI) return (qgeo){12, 32, 4, 1, qukr_vnni, qstore512};
    if (l >= NANO_ISA_AVX2) return (qgeo){6, 16, 2, 2, qukr_avx2, qstore256};
#endif
#if defined(__aarch64__)
    if (l == NANO_ISA_NEON) return (qgeo){8, 8, 1, 2, qukr_neon, qstore};
#endif
    (void)l;
    return (qgeo){4, 8, 1, 2, qukr_portable, qstore};
}

/* Y (M×N) from A (ceil(M/mr) panels) and B (ceil(N/nr) panels) over Kp, parallel over
 * tiles of Y; the channel parameters ch run along rows (conv) or columns (gemm). */
static void q_packed(const qgeo *q, int M, int N, int Kp, const uint8_t *A, const uint8_t *B, float *Y, int ldy,
                     const qchan *ch, int rows, const nano_epilogue *ep, int a_unsigned, int nthreads)
{
    int mr = q->mr, nr = q->nr, kg = Kp / q->g;
    int mc = QTILE * mr, nc = QTILE * nr;
    int mb = (M + mc - 1) / mc, nb = (N + nc - 1) / nc;
    if (nthreads > 1 && mb * nb < 4 * nthreads) { /* smaller column tiles to feed the threads */
        int np = (N + nr - 1) / nr, want = (4 * nthreads + mb - 1) / mb, c = (np + want - 1) / want;
        nc = (c < 1 ? 1 : c > QTILE ? QTILE : c) * nr;
        nb = (N + nc - 1) / nc;
    }
    int tasks = mb * nb, par = nthreads > 1 && tasks > 1 && (double)M * N * Kp >= NK_PAR_MACS;
    size_t aps = panel_bytes(q, mr, Kp), bps = panel_bytes(q, nr, Kp);
#pragma omp parallel for num_threads(nthreads) if (par) schedule(dynamic, 1)
    for (int tk = 0; tk < tasks; tk++) {
        _Alignas(64) int32_t t[12 * 32];
        int i0 = (tk / nb) * mc, j0 = (tk % nb) * nc;
        int i1 = M < i0 + mc ? M : i0 + mc, j1 = N < j0 + nc ? N : j0 + nc;
        for (int j = j0; j < j1; j += nr)
            for (int i = i0; i < i1; i += mr) {
                q->ukr(kg, A + (size_t)(i / mr) * aps, B + (size_t)(j / nr) * bps, t, a_unsigned, j1 - j < nr ? j1 - j : nr);
                int c = rows ? i : j;
                q->store(t, nr, Y + (size_t)i * ldy + j, ldy, i1 - i < mr ? i1 - i : mr, j1 - j < nr ? j1 - j : nr,
                       ch->zc + c, ch->sc + c, ch->bias ? ch->bias + c : NULL, rows, ep);
            }
    }
}

/* ---- GEMM: Y = X·Wᵀ ------------------------------------------------------------------ */
struct nano_qgemm {
    int N, K, Kp;
    nano_isa_level level;
    qgeo q;
    float x_scale;
    int x_zero;
    nano_epilogue ep;
    qchan ch;
    uint8_t *Wp; /* ceil(N/nr) B panels */
};

nano_qgemm *nano_qgemm_prepare(const int8_t *W, const float *w_scale, const float *bias, int N, int K,
                               float x_scale, int x_zero, nano_epilogue ep)
{
    if (!W || !w_scale || N < 1 || K < 1 || !(x_scale > 0.0f) || x_zero < 0 || x_zero > 255) return NULL;
    nano_qgemm *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->N = N, p->K = K, p->level = nano_isa(), p->q = pick_geo(p->level);
    p->Kp = (int)nk_roundup((size_t)K, (size_t)p->q.g);
    p->x_scale = x_scale, p->x_zero = x_zero, p->ep = ep;
    size_t bytes = nk_roundup((size_t)N, (size_t)p->q.nr) * p->Kp * p->q.e;
    p->Wp = aligned_alloc(64, nk_roundup(bytes, 64));
    if (!p->Wp || qchan_init(&p->ch, W, w_scale, bias, N, K, x_scale, x_zero)) { nano_qgemm_free(p); return NULL; }
    qpack_w(W, N, K, p->Kp, &p->q, p->q.nr, p->Wp);
    return p;
}

void nano_qgemm_free(nano_qgemm *p)
{
    if (!p) return;
    qchan_free(&p->ch);
    free(p->Wp);
    free(p);
}

size_t nano_qgemm_bytes(const nano_qgemm *p)
{
    if (!p) return 0;
    return sizeof *p + nk_roundup((size_t)p->N, (size_t)p->q.nr) * p->Kp * p->q.e +
           (size_t)p->N * (sizeof(int32_t) + sizeof(float) + (p->ch.bias ? sizeof(float) : 0));
}

size_t nano_qgemm_scratch(const nano_qgemm *p, int M)
{
    if (!p || M < 1) return 0;
    return nk_roundup((size_t)M, (size_t)p->q.mr) * p->Kp * p->q.e + 64;
}

void nano_qgemm_run(const nano_qgemm *p, int M, const float *X, int ldx, float *Y, int ldy, void *scratch,
                    int nthreads)
{
    if (M < 1) return;
    uint8_t *Ap = (uint8_t *)nk_roundup((size_t)(uintptr_t)scratch, 64);
    const qgeo *q = &p->q;
    int mr = q->mr, panels = (M + mr - 1) / mr;
    size_t aps = panel_bytes(q, mr, p->Kp);
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && panels > 1) schedule(dynamic, 1)
    for (int pi = 0; pi < panels; pi++) {
        uint8_t *dst = Ap + (size_t)pi * aps;
        memset(dst, 0, aps);
        for (int r = 0; r < mr && pi * mr + r < M; r++) {
            const float *x = X + (size_t)(pi * mr + r) * ldx;
            uint8_t qr[256];
            for (int k0 = 0; k0 < p->K; k0 += 256) { /* (256 is a multiple of every group size) */
                int kn = p->K - k0 < 256 ? p->K - k0 : 256;
                quant_n(p->level, x + k0, (size_t)kn, p->x_scale, p->x_zero, qr);
                qput_row(dst, q, mr, r, k0, qr, kn);
            }
        }
    }
    q_packed(q, M, p->N, p->Kp, Ap, p->Wp, Y, ldy, &p->ch, 0, &p->ep, 1, nthreads);
}

/* ---- convolution: Y (Mg, P) = W (Mg, K) · col (K, P) per image and group ------------- */
struct nano_qconv {
    nano_conv_desc d;
    nano_isa_level level;
    int Mg, Cg, K, Kp;
    qgeo q;
    float x_scale;
    int x_zero;
    nano_epilogue ep;
    qchan ch;
    int dw;      /* depthwise (group = C = M): Wp is W (M, kh·kw) as given, run directly */
    uint8_t *Wp; /* per group ceil(Mg/mr) A panels */
    size_t wg;   /* bytes per group */
};

nano_qconv *nano_qconv_prepare(const nano_conv_desc *d, const int8_t *W, const float *w_scale, const float *bias,
                               float x_scale, int x_zero, nano_epilogue ep)
{
    if (!d || !W || !w_scale || !nk_conv_desc_ok(d) || !(x_scale > 0.0f) || x_zero < 0 || x_zero > 255)
        return NULL;
    nano_qconv *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->d = *d, p->level = nano_isa(), p->q = pick_geo(p->level);
    p->Mg = d->M / d->group, p->Cg = d->C / d->group, p->K = p->Cg * d->kh * d->kw;
    p->Kp = (int)nk_roundup((size_t)p->K, (size_t)p->q.g);
    p->x_scale = x_scale, p->x_zero = x_zero, p->ep = ep;
    p->dw = d->group == d->C && d->group == d->M;
    p->wg = p->dw ? (size_t)p->K : nk_roundup((size_t)p->Mg, (size_t)p->q.mr) * p->Kp * p->q.e;
    p->Wp = aligned_alloc(64, nk_roundup(p->wg * d->group, 64));
    if (!p->Wp || qchan_init(&p->ch, W, w_scale, bias, d->M, p->K, x_scale, x_zero)) {
        nano_qconv_free(p);
        return NULL;
    }
    if (p->dw)
        memcpy(p->Wp, W, (size_t)d->M * p->K);
    else
        for (int g = 0; g < d->group; g++)
            qpack_w(W + (size_t)g * p->Mg * p->K, p->Mg, p->K, p->Kp, &p->q, p->q.mr, p->Wp + g * p->wg);
    return p;
}

void nano_qconv_free(nano_qconv *p)
{
    if (!p) return;
    qchan_free(&p->ch);
    free(p->Wp);
    free(p);
}

size_t nano_qconv_bytes(const nano_qconv *p)
{
    if (!p) return 0;
    return sizeof *p + p->wg * p->d.group +
           (size_t)p->d.M * (sizeof(int32_t) + sizeof(float) + (p->ch.bias ? sizeof(float) : 0));
}

/* The quantised image (C·H·W bytes) and one group's column panels. */
size_t nano_qconv_scratch(const nano_qconv *p)
{
    if (!p) return 0;
    const nano_conv_desc *d = &p->d;
    size_t qx = nk_roundup((size_t)d->C * d->H * d->W, 64);
    if (p->dw) return qx + 64;
    return qx + nk_roundup((size_t)d->OH * d->OW, (size_t)p->q.nr) * p->Kp * p->q.e + 64;
}

/* Row k = (c, i, j) of a quantised im2col panel into row[0 .. n): taps outside the input
 * hold x_zero (the quantised 0.0); runs of columns on one output row are copied whole. */
static void qim2col_row(const nano_qconv *p, const uint8_t *qg, const nk_seg *seg, int ns, int k, uint8_t *row)
{
    const nano_conv_desc *d = &p->d;
    int z = p->x_zero, khw = d->kh * d->kw, c = k / khw, i = k % khw / d->kw, j = k % d->kw;
    const uint8_t *xc = qg + (size_t)c * d->H * d->W;
    for (int s = 0; s < ns; s++) {
        const nk_seg *sg = &seg[s];
        int len = sg->t1 - sg->t0, ih = sg->ih0 + i * d->dh, iw = sg->iw0 + j * d->dw, lo, hi;
        uint8_t *ot = row + sg->t0;
        if ((unsigned)ih >= (unsigned)d->H) { memset(ot, z, (size_t)len); continue; }
        nk_seg_range(iw, d->sw, d->W, len, &lo, &hi);
        const uint8_t *xr = xc + (size_t)ih * d->W + iw;
        memset(ot, z, (size_t)lo);
        if (d->sw == 1) memcpy(ot + lo, xr + lo, (size_t)(hi - lo));
        else for (int u = lo; u < hi; u++) ot[u] = xr[u * d->sw];
        memset(ot + hi, z, (size_t)(len - hi));
    }
}

/* One B panel of the quantised im2col, columns p0 .. p0+n-1: g rows at a time gathered,
 * then interleaved into the panel's [k/g][nr][g] layout with one 32-bit (g = 4 bytes, g = 2
 * int16) or 16-bit (g = 1 int16) store per column; columns past n and k past K zero. */
static void qim2col_panel(const nano_qconv *p, const uint8_t *qg, int p0, int n, uint8_t *dst)
{
    const qgeo *q = &p->q;
    int nr = q->nr, g = q->g;
    nk_seg seg[64];
    int ns = nk_conv_segs(&p->d, p0, n, seg);
    uint8_t rows[4][64];
    for (int k0 = 0; k0 < p->Kp; k0 += g) {
        for (int u = 0; u < g; u++) {
            memset(rows[u] + n, 0, (size_t)(nr - n));
            if (k0 + u < p->K) qim2col_row(p, qg, seg, ns, k0 + u, rows[u]);
            else memset(rows[u], 0, (size_t)n);
        }
        if (g == 4) { /* bytes */
            uint32_t *o = (uint32_t *)(void *)(dst + (size_t)k0 * nr);
            for (int t = 0; t < nr; t++)
                o[t] = rows[0][t] | (uint32_t)rows[1][t] << 8 | (uint32_t)rows[2][t] << 16 | (uint32_t)rows[3][t] << 24;
        } else if (g == 2) { /* int16 pairs */
            uint32_t *o = (uint32_t *)(void *)(dst + (size_t)k0 * nr * 2);
            for (int t = 0; t < nr; t++) o[t] = rows[0][t] | (uint32_t)rows[1][t] << 16;
        } else {
            int16_t *o = (int16_t *)(void *)(dst + (size_t)k0 * nr * 2);
            for (int t = 0; t < nr; t++) o[t] = rows[0][t];
        }
    }
}

/* Depthwise, one image: per plane c of the quantised image qx (C, H, W) into y (M, OH, OW), output row oh, columns in
 * chunks of 256: acc[ow] = Σ_taps w[c, i, j] · q (x_zero outside the input) — the int32
 * sum the im2col product would give — then the ISA's store (bit-identical output). */
static void qconv_dw(const nano_qconv *p, const uint8_t *qx, float *y, int nthreads)
{
    const nano_conv_desc *d = &p->d;
    int planes = d->M, taps = d->kh * d->kw, z = p->x_zero;
    size_t hw = (size_t)d->H * d->W, ohw = (size_t)d->OH * d->OW;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && planes > 1 && ohw * planes > 4096) schedule(dynamic, 1)
    for (int pl = 0; pl < planes; pl++) {
        int c = pl;
        const uint8_t *xc = qx + (size_t)pl * hw;
        const int8_t *wc = (const int8_t *)p->Wp + (size_t)c * taps;
        int32_t acc[256];
        for (int oh = 0; oh < d->OH; oh++)
            for (int o0 = 0; o0 < d->OW; o0 += 256) {
                int n = d->OW - o0 < 256 ? d->OW - o0 : 256;
                memset(acc, 0, (size_t)n * sizeof *acc);
                for (int i = 0; i < d->kh; i++) {
                    int ih = oh * d->sh - d->pad_t + i * d->dh;
                    const uint8_t *xr = xc + (size_t)ih * d->W;
                    for (int j = 0; j < d->kw; j++) {
                        int w = wc[i * d->kw + j], iw0 = o0 * d->sw - d->pad_l + j * d->dw, lo, hi;
                        if ((unsigned)ih >= (unsigned)d->H) lo = hi = n;
                        else nk_seg_range(iw0, d->sw, d->W, n, &lo, &hi);
                        for (int u = 0; u < lo; u++) acc[u] += w * z;
                        for (int u = lo; u < hi; u++) acc[u] += w * xr[iw0 + u * d->sw];
                        for (int u = hi; u < n; u++) acc[u] += w * z;
                    }
                }
                p->q.store(acc, n, y + (size_t)pl * ohw + (size_t)oh * d->OW + o0, d->OW, 1, n, p->ch.zc + c,
                           p->ch.sc + c, p->ch.bias ? p->ch.bias + c : NULL, 1, &p->ep);
            }
    }
}

void nano_qconv_run(const nano_qconv *p, const float *x, float *y, void *scratch, int nthreads)
{
    const nano_conv_desc *d = &p->d;
    const qgeo *q = &p->q;
    uint8_t *qx = (uint8_t *)nk_roundup((size_t)(uintptr_t)scratch, 64);
    size_t chw = (size_t)d->C * d->H * d->W, hw = (size_t)d->H * d->W;
    uint8_t *col = qx + nk_roundup(chw, 64);
    int P = d->OH * d->OW, nr = q->nr, panels = (P + nr - 1) / nr;
    size_t bps = panel_bytes(q, nr, p->Kp);
    for (int n = 0; n < d->N; n++) {
        const float *xn = x + (size_t)n * chw;
        int chunks = (int)((chw + 4095) / 4096);
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && chunks > 4) schedule(dynamic, 1)
        for (int ck = 0; ck < chunks; ck++) {
            size_t e = (size_t)(ck + 1) * 4096 < chw ? (size_t)(ck + 1) * 4096 : chw;
            quant_n(p->level, xn + (size_t)ck * 4096, e - (size_t)ck * 4096, p->x_scale, p->x_zero, qx + (size_t)ck * 4096);
        }
        if (p->dw) { qconv_dw(p, qx, y + (size_t)n * d->M * P, nthreads); continue; }
        for (int g = 0; g < d->group; g++) {
            const uint8_t *qg = qx + (size_t)g * p->Cg * hw;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && panels > 1 && (size_t)P * p->Kp >= 65536) schedule(dynamic, 1)
            for (int pi = 0; pi < panels; pi++) {
                int p0 = pi * nr;
                qim2col_panel(p, qg, p0, P - p0 < nr ? P - p0 : nr, col + (size_t)pi * bps);
            }
            qchan ch = {p->ch.zc + (size_t)g * p->Mg, p->ch.sc + (size_t)g * p->Mg,
                        p->ch.bias ? p->ch.bias + (size_t)g * p->Mg : NULL};
            q_packed(q, p->Mg, P, p->Kp, p->Wp + g * p->wg, col, y + ((size_t)n * d->M + (size_t)g * p->Mg) * P, P,
                     &ch, 1, &p->ep, 0, nthreads);
        }
    }
}
