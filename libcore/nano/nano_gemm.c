/* nano_gemm — fp32 GEMM of the edge runtime: the packed-panel core (nk_f32_*) that the
 * convolution shares, Y = X·Wᵀ + bias with W packed at prepare (nano_gemm_*), and the
 * product of two activations (nano_sgemm).
 *
 * The one design decision: one register-blocked micro-kernel per ISA over K-major packed
 * panels — AVX-512 12×32, AVX2+FMA 6×16, NEON 8×12, portable 4×16 — compiled in one
 * translation unit with target attributes, chosen at prepare by nano_isa(). The loops
 * around it are BLIS-like: a thread owns a tile of C (≤ 8·mr × 8·nr), walks K in blocks
 * of 256, and inside a block reuses one B panel (in L1) across the tile's A panels. */
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

#define KC 256       /* K block: B panel kc·nr floats stays in L1 */
#define TILE_P 8     /* a task's tile of C: TILE_P A panels × up to TILE_P B panels */
#define PORT_MR 4
#define PORT_NR 16

typedef void (*ukr_fn)(int kc, const float *a, const float *b, float *c, int ldc, int mr, int nr, int accum,
                       const nk_epi *ep);

/* ---- portable micro-kernel (4×16) -------------------------------------------------- */
static void ukr_portable(int kc, const float *a, const float *b, float *c, int ldc, int mr, int nr, int accum,
                         const nk_epi *ep)
{
    float t[PORT_MR][PORT_NR];
    memset(t, 0, sizeof t);
    for (int k = 0; k < kc; k++, a += PORT_MR, b += PORT_NR)
        for (int i = 0; i < PORT_MR; i++)
            for (int j = 0; j < PORT_NR; j++) t[i][j] += a[i] * b[j];
    nk_store_tile(&t[0][0], PORT_NR, c, ldc, mr, nr, accum, ep);
}

/* ---- AVX-512 micro-kernel (12×32) ---------------------------------------------------- */
#if defined(__x86_64__)
#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define TGT256 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

INLINE TGT512 __m512 epi512(__m512 x, int act, __m512 lo, __m512 hi)
{
    if (act == NANO_ACT_RELU) return _mm512_max_ps(x, _mm512_setzero_ps());
    if (act == NANO_ACT_CLIP) return _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    return x;
}

/* R rows (compile-time after inlining) of the 12×32 tile; nr ≤ 32 columns stored with
 * masks, the other acts after the store by the caller. NV (compile-time) vectors of 16
 * columns are computed: NV = 1 when nr ≤ 16 (a small OH·OW), which halves the FMAs of
 * a half-empty tile (Zen 4 issues one zmm FMA per cycle, so 12 chains still fill it). */
INLINE TGT512 void ukr512_body(const int R, const int NV, int kc, const float *a, const float *b, float *c,
                               int ldc, int nr, int accum, const nk_epi *ep)
{
    __m512 acc[12][2];
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int k = 0; k < kc; k++, a += 12, b += 32) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = NV == 2 ? _mm512_loadu_ps(b + 16) : b0;
#pragma GCC unroll 12
        for (int i = 0; i < R; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            if (NV == 2) acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xffff : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    int act = ep ? ep->act : NANO_ACT_NONE;
    __m512 lo = _mm512_set1_ps(ep ? ep->lo : 0.0f), hi = _mm512_set1_ps(ep ? ep->hi : 0.0f);
    const float *bias = ep ? ep->bias : NULL;
    int brow = ep ? ep->bias_rows : 0;
    __m512 bc0 = _mm512_setzero_ps(), bc1 = bc0;
    if (bias && !brow) bc0 = _mm512_maskz_loadu_ps(m0, bias), bc1 = _mm512_maskz_loadu_ps(m1, bias + 16);
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) {
        float *ci = c + (size_t)i * ldc;
        __m512 x0 = acc[i][0], x1 = acc[i][1];
        if (accum) {
            x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(m0, ci));
            x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(m1, ci + 16));
        }
        if (bias) {
            __m512 r0 = brow ? _mm512_set1_ps(bias[i]) : bc0, r1 = brow ? r0 : bc1;
            x0 = _mm512_add_ps(x0, r0);
            x1 = _mm512_add_ps(x1, r1);
        }
        _mm512_mask_storeu_ps(ci, m0, epi512(x0, act, lo, hi));
        _mm512_mask_storeu_ps(ci + 16, m1, epi512(x1, act, lo, hi));
    }
}

#define UKR512_CASE(R)                                                                     \
    case R:                                                                                \
        if (nr <= 16) ukr512_body(R, 1, kc, a, b, c, ldc, nr, accum, ep);                  \
        else ukr512_body(R, 2, kc, a, b, c, ldc, nr, accum, ep);                           \
        break

static TGT512 void ukr_avx512(int kc, const float *a, const float *b, float *c, int ldc, int mr, int nr,
                              int accum, const nk_epi *ep)
{
    switch (mr) {
    UKR512_CASE(12); UKR512_CASE(11); UKR512_CASE(10); UKR512_CASE(9); UKR512_CASE(8); UKR512_CASE(7);
    UKR512_CASE(6); UKR512_CASE(5); UKR512_CASE(4); UKR512_CASE(3); UKR512_CASE(2);
    default: ukr512_body(1, nr <= 16 ? 1 : 2, kc, a, b, c, ldc, nr, accum, ep); break;
    }
}
#undef UKR512_CASE

/* ---- AVX2+FMA micro-kernel (6×16) ---------------------------------------------------- */
INLINE TGT256 __m256 epi256(__m256 x, int act, __m256 lo, __m256 hi)
{
    if (act == NANO_ACT_RELU) return _mm256_max_ps(x, _mm256_setzero_ps());
    if (act == NANO_ACT_CLIP) return _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    return x;
}

INLINE TGT256 void ukr256_body(const int R, int kc, const float *a, const float *b, float *c, int ldc, int nr,
                               int accum, const nk_epi *ep)
{
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++, a += 6, b += 16) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            __m256 ai = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    if (nr < 16) { /* edge: through a tile buffer */
        float t[6 * 16];
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            _mm256_storeu_ps(t + 16 * i, acc[i][0]);
            _mm256_storeu_ps(t + 16 * i + 8, acc[i][1]);
        }
        nk_store_tile(t, 16, c, ldc, R, nr, accum, ep);
        return;
    }
    int act = ep ? ep->act : NANO_ACT_NONE;
    __m256 lo = _mm256_set1_ps(ep ? ep->lo : 0.0f), hi = _mm256_set1_ps(ep ? ep->hi : 0.0f);
    const float *bias = ep ? ep->bias : NULL;
    int brow = ep ? ep->bias_rows : 0;
    __m256 bc0 = _mm256_setzero_ps(), bc1 = bc0;
    if (bias && !brow) bc0 = _mm256_loadu_ps(bias), bc1 = _mm256_loadu_ps(bias + 8);
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
        float *ci = c + (size_t)i * ldc;
        __m256 x0 = acc[i][0], x1 = acc[i][1];
        if (accum) x0 = _mm256_add_ps(x0, _mm256_loadu_ps(ci)), x1 = _mm256_add_ps(x1, _mm256_loadu_ps(ci + 8));
        if (bias) {
            __m256 r0 = brow ? _mm256_set1_ps(bias[i]) : bc0, r1 = brow ? r0 : bc1;
            x0 = _mm256_add_ps(x0, r0);
            x1 = _mm256_add_ps(x1, r1);
        }
        _mm256_storeu_ps(ci, epi256(x0, act, lo, hi));
        _mm256_storeu_ps(ci + 8, epi256(x1, act, lo, hi));
    }
}

static TGT256 void ukr_avx2(int kc, const float *a, const float *b, float *c, int ldc, int mr, int nr, int accum,
                            const nk_epi *ep)
{
    switch (mr) {
    case 6: ukr256_body(6, kc, a, b, c, ldc, nr, accum, ep); break;
    case 5: ukr256_body(5, kc, a, b, c, ldc, nr, accum, ep); break;
    case 4: ukr256_body(4, kc, a, b, c, ldc, nr, accum, ep); break;
    case 3: ukr256_body(3, kc, a, b, c, ldc, nr, accum, ep); break;
    case 2: ukr256_body(2, kc, a, b, c, ldc, nr, accum, ep); break;
    default: ukr256_body(1, kc, a, b, c, ldc, nr, accum, ep); break;
    }
}
#endif /* __x86_64__ */

/* ---- NEON micro-kernel (8×12) -------------------------------------------------------- */
#if defined(__aarch64__)
static inline __attribute__((always_inline)) float32x4_t epi_neon(float32x4_t x, int act, float32x4_t lo,
                                                                   float32x4_t hi)
{
    if (act == NANO_ACT_RELU) return vmaxq_f32(x, vdupq_n_f32(0.0f));
    if (act == NANO_ACT_CLIP) return vminq_f32(vmaxq_f32(x, lo), hi);
    return x;
}

static inline __attribute__((always_inline)) void ukr_neon_body(const int R, int kc, const float *a,
                                                                const float *b, float *c, int ldc, int nr,
                                                                int accum, const nk_epi *ep)
{
    float32x4_t acc[8][3];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = acc[i][2] = vdupq_n_f32(0.0f);
    for (int k = 0; k < kc; k++, a += 8, b += 12) {
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            acc[i][0] = vfmaq_n_f32(acc[i][0], b0, a[i]);
            acc[i][1] = vfmaq_n_f32(acc[i][1], b1, a[i]);
            acc[i][2] = vfmaq_n_f32(acc[i][2], b2, a[i]);
        }
    }
    if (nr < 12) {
        float t[8 * 12];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            vst1q_f32(t + 12 * i, acc[i][0]);
            vst1q_f32(t + 12 * i + 4, acc[i][1]);
            vst1q_f32(t + 12 * i + 8, acc[i][2]);
        }
        nk_store_tile(t, 12, c, ldc, R, nr, accum, ep);
        return;
    }
    int act = ep ? ep->act : NANO_ACT_NONE;
    float32x4_t lo = vdupq_n_f32(ep ? ep->lo : 0.0f), hi = vdupq_n_f32(ep ? ep->hi : 0.0f);
    const float *bias = ep ? ep->bias : NULL;
    int brow = ep ? ep->bias_rows : 0;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        float *ci = c + (size_t)i * ldc;
        for (int j = 0; j < 3; j++) {
            float32x4_t x = acc[i][j];
            if (accum) x = vaddq_f32(x, vld1q_f32(ci + 4 * j));
            if (bias) x = vaddq_f32(x, brow ? vdupq_n_f32(bias[i]) : vld1q_f32(bias + 4 * j));
            vst1q_f32(ci + 4 * j, epi_neon(x, act, lo, hi));
        }
    }
}

static void ukr_neon(int kc, const float *a, const float *b, float *c, int ldc, int mr, int nr, int accum,
                     const nk_epi *ep)
{
    switch (mr) {
    case 8: ukr_neon_body(8, kc, a, b, c, ldc, nr, accum, ep); break;
    case 7: ukr_neon_body(7, kc, a, b, c, ldc, nr, accum, ep); break;
    case 6: ukr_neon_body(6, kc, a, b, c, ldc, nr, accum, ep); break;
    case 5: ukr_neon_body(5, kc, a, b, c, ldc, nr, accum, ep); break;
    case 4: ukr_neon_body(4, kc, a, b, c, ldc, nr, accum, ep); break;
    case 3: ukr_neon_body(3, kc, a, b, c, ldc, nr, accum, ep); break;
    case 2: ukr_neon_body(2, kc, a, b, c, ldc, nr, accum, ep); break;
    default: ukr_neon_body(1, kc, a, b, c, ldc, nr, accum, ep); break;
    }
}
#endif /* __aarch64__ */

/* ---- the core ------------------------------------------------------------------------ */
static ukr_fn pick_ukr(nano_isa_level l, int *mr, int *nr)
{
#if defined(__x86_64__)
    if (l >= NANO_ISA_AVX512) { *mr = 12, *nr = 32; return ukr_avx512; }
    if (l == NANO_ISA_AVX2) { *mr = 6, *nr = 16; return ukr_avx2; }
#endif
#if defined(__aarch64__)
    if (l == NANO_ISA_NEON) { *mr = 8, *nr = 12; return ukr_neon; }
#endif
    (void)l;
    *mr = PORT_MR, *nr = PORT_NR;
    return ukr_portable;
}

void nk_f32_geom(nano_isa_level l, int *mr, int *nr)
{
    pick_ukr(l, mr, nr);
}

#if defined(__x86_64__)
/* One panel of r <= R rows, R a multiple of 4, by 4×4 transposes in SSE registers (rows
 * past r read as zero); the last kc mod 4 steps one float at a time. */
static void pack_rk_sse(const float *s, size_t ld, int r, int kc, int R, float *dst)
{
    int k = 0;
    for (; k + 4 <= kc; k += 4)
        for (int i = 0; i < R; i += 4) {
            __m128 x[4];
            for (int q = 0; q < 4; q++) x[q] = i + q < r ? _mm_loadu_ps(s + (size_t)(i + q) * ld + k) : _mm_setzero_ps();
            _MM_TRANSPOSE4_PS(x[0], x[1], x[2], x[3]);
            for (int q = 0; q < 4; q++) _mm_storeu_ps(dst + (size_t)(k + q) * R + i, x[q]);
        }
    for (; k < kc; k++)
        for (int i = 0; i < R; i++) dst[(size_t)k * R + i] = i < r ? s[(size_t)i * ld + k] : 0.0f;
}
#endif

void nk_pack_rk(const float *src, size_t ld, int rows, int kc, int R, float *dst)
{
#if defined(__x86_64__)
    if (R % 4 == 0) {
        for (int p = 0; p < rows; p += R, dst += (size_t)R * kc)
            pack_rk_sse(src + (size_t)p * ld, ld, rows - p < R ? rows - p : R, kc, R, dst);
        return;
    }
#endif
    for (int p = 0; p < rows; p += R, dst += (size_t)R * kc) {
        int r = rows - p < R ? rows - p : R;
        const float *s = src + (size_t)p * ld;
        if (r < R) memset(dst, 0, (size_t)R * kc * sizeof *dst);
        for (int i = 0; i < r; i++)
            for (int k = 0; k < kc; k++) dst[(size_t)k * R + i] = s[(size_t)i * ld + k];
    }
}

void nk_pack_kr(const float *src, size_t ld, int kc, int rows, int R, float *dst)
{
    for (int p = 0; p < rows; p += R, dst += (size_t)R * kc) {
        int r = rows - p < R ? rows - p : R;
        for (int k = 0; k < kc; k++) {
            memcpy(dst + (size_t)k * R, src + (size_t)k * ld + p, (size_t)r * sizeof *dst);
            if (r < R) memset(dst + (size_t)k * R + r, 0, (size_t)(R - r) * sizeof *dst);
        }
    }
}

void nk_f32_block(nano_isa_level l, int m, int n, int kc, const float *A, size_t a_ps, const float *B,
                  size_t b_ps, float *C, int ldc, int accum, const nk_epi *ep)
{
    int mr, nr;
    ukr_fn ukr = pick_ukr(l, &mr, &nr);
    nk_epi e;
    for (int j = 0; j < n; j += nr, B += b_ps) {
        int nn = n - j < nr ? n - j : nr;
        const float *a = A;
        for (int i = 0; i < m; i += mr, a += a_ps) {
            int mm = m - i < mr ? m - i : mr;
            float *c = C + (size_t)i * ldc + j;
            const nk_epi *pe = NULL;
            if (ep) {
                e = *ep;
                if (e.bias) e.bias += e.bias_rows ? i : j;
                pe = &e;
            }
            ukr(kc, a, B, c, ldc, mm, nn, accum, pe);
        }
    }
    /* the transcendental acts over the whole block: rows of n give their vector loop the
     * independent iterations a micro-tile's 32 columns do not */
    if (ep) nk_act_tile(C, ldc, m, n, ep->act, ep->lo, ep->hi);
}

void nk_f32_packed(nano_isa_level l, int M, int N, int K, const float *A, const float *B, float *C, int ldc,
                   const nk_epi *ep, int nthreads)
{
    int mr, nr;
    pick_ukr(l, &mr, &nr);
    int mc = TILE_P * mr, mb = (M + mc - 1) / mc, np = (N + nr - 1) / nr;
    /* columns per task: TILE_P panels, fewer when that leaves threads without work */
    int ncp = TILE_P;
    if (nthreads > 1) {
        int want = 4 * nthreads, nbw = (want + mb - 1) / mb;
        int c = (np + nbw - 1) / nbw;
        if (c < ncp) ncp = c < 1 ? 1 : c;
    }
    int nc = ncp * nr, nb = (N + nc - 1) / nc, tasks = mb * nb;
    int par = nthreads > 1 && tasks > 1 && (double)M * N * K >= NK_PAR_MACS; /* else no parallel region */
#pragma omp parallel for num_threads(nthreads) if (par) schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) {
        int i0 = (t / nb) * mc, j0 = (t % nb) * nc;
        int m = M - i0 < mc ? M - i0 : mc, n = N - j0 < nc ? N - j0 : nc;
        nk_epi e;
        if (ep) {
            e = *ep;
            if (e.bias) e.bias += e.bias_rows ? i0 : j0;
        }
        for (int p = 0; p < K; p += KC) {
            int kc = K - p < KC ? K - p : KC;
            nk_f32_block(l, m, n, kc, A + (size_t)i0 * K + (size_t)p * mr, (size_t)mr * K,
                         B + (size_t)j0 * K + (size_t)p * nr, (size_t)nr * K, C + (size_t)i0 * ldc + j0, ldc,
                         p > 0, p + kc >= K && ep ? &e : NULL);
        }
    }
}

/* ---- Y = X·Wᵀ + bias with W packed at prepare ---------------------------------------- */
struct nano_gemm {
    int N, K, mr, nr;
    nano_isa_level level;
    nano_epilogue ep;
    float *bias; /* (N) or NULL */
    float *Wp;   /* ceil(N/nr) panels of nr·K */
};

nano_gemm *nano_gemm_prepare(const float *W, const float *bias, int N, int K, nano_epilogue ep)
{
    if (!W || N < 1 || K < 1) return NULL;
    nano_gemm *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->N = N, p->K = K, p->ep = ep;
    p->level = nano_isa();
    nk_f32_geom(p->level, &p->mr, &p->nr);
    size_t wn = nk_roundup((size_t)N, (size_t)p->nr) * (size_t)K;
    p->Wp = aligned_alloc(64, nk_roundup(wn * sizeof(float), 64));
    if (bias) p->bias = malloc((size_t)N * sizeof(float));
    if (!p->Wp || (bias && !p->bias)) { nano_gemm_free(p); return NULL; }
    if (bias) memcpy(p->bias, bias, (size_t)N * sizeof(float));
    nk_pack_rk(W, (size_t)K, N, K, p->nr, p->Wp);
    return p;
}

void nano_gemm_free(nano_gemm *p)
{
    if (!p) return;
    free(p->Wp);
    free(p->bias);
    free(p);
}

size_t nano_gemm_bytes(const nano_gemm *p)
{
    if (!p) return 0;
    return sizeof *p + nk_roundup((size_t)p->N, (size_t)p->nr) * (size_t)p->K * sizeof(float) +
           (p->bias ? (size_t)p->N * sizeof(float) : 0);
}

size_t nano_gemm_scratch(const nano_gemm *p, int M)
{
    if (!p || M < 1) return 0;
    return nk_roundup((size_t)M, (size_t)p->mr) * (size_t)p->K * sizeof(float) + 64;
}

void nano_gemm_run(const nano_gemm *p, int M, const float *X, int ldx, float *Y, int ldy, void *scratch,
                   int nthreads)
{
    if (M < 1) return;
    float *Xp = (float *)nk_roundup((size_t)(uintptr_t)scratch, 64);
    int mr = p->mr, K = p->K, panels = (M + mr - 1) / mr;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && panels > 1) schedule(dynamic, 1)
    for (int q = 0; q < panels; q++) {
        int r = M - q * mr < mr ? M - q * mr : mr;
        nk_pack_rk(X + (size_t)q * mr * ldx, (size_t)ldx, r, K, mr, Xp + (size_t)q * mr * K);
    }
    nk_epi e = {p->bias, 0, p->ep.act, p->ep.lo, p->ep.hi};
    nk_f32_packed(p->level, M, p->N, K, Xp, p->Wp, Y, ldy, &e, nthreads);
}

/* ---- C = A·B of two activations: blocks packed on each thread's stack ---------------- */
#define SG_MC 48  /* rows per task: 4 AVX-512 panels (8 AVX2, 6 NEON, 12 portable) */
#define SG_NC 128 /* columns per task */
#define SG_KC 128

void nano_sgemm(int M, int N, int K, const float *A, int lda, const float *B, int ldb, int trans_b, float *C,
                int ldc, int nthreads)
{
    if (M < 1 || N < 1) return;
    if (K < 1) {
        for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof *C);
        return;
    }
    nano_isa_level l = nano_isa();
    int mr, nr;
    nk_f32_geom(l, &mr, &nr);
    int mc = SG_MC / mr * mr, nc = SG_NC / nr * nr; /* whole panels */
    int mb = (M + mc - 1) / mc, nb = (N + nc - 1) / nc, tasks = mb * nb;
#pragma omp parallel for num_threads(nthreads) if (nthreads > 1 && tasks > 1) schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) {
        _Alignas(64) float ab[SG_MC * SG_KC];
        _Alignas(64) float bb[SG_NC * SG_KC];
        int i0 = (t / nb) * mc, j0 = (t % nb) * nc;
        int m = M - i0 < mc ? M - i0 : mc, n = N - j0 < nc ? N - j0 : nc;
        for (int p = 0; p < K; p += SG_KC) {
            int kc = K - p < SG_KC ? K - p : SG_KC;
            nk_pack_rk(A + (size_t)i0 * lda + p, (size_t)lda, m, kc, mr, ab);
            if (trans_b)
                nk_pack_rk(B + (size_t)j0 * ldb + p, (size_t)ldb, n, kc, nr, bb);
            else
                nk_pack_kr(B + (size_t)p * ldb + j0, (size_t)ldb, kc, n, nr, bb);
            nk_f32_block(l, m, n, kc, ab, (size_t)mr * kc, bb, (size_t)nr * kc, C + (size_t)i0 * ldc + j0, ldc,
                         p > 0, NULL);
        }
    }
}
