/* dgc — DGC-Pro's selection kernels on the CPU (see dgc.h): the exact k-th largest,
 * the stratified sample, and the vectorised compare-and-compact.
 *
 * The compare-and-compact has three builds with one result: the portable loop (the
 * specification), AVX2 on x86-64 where isa_active() allows it, NEON on aarch64 (part of
 * ARMv8-A, so always). Each tests 32 or 16 entries at once and skips the block when none
 * passes, then writes the passing indices in ascending order; the comparisons are the
 * portable loop's (|x| >= thr, false for NaN), so the indices are the same. */
#include "dgc.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "isa.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define DGC_HAVE_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define DGC_HAVE_NEON 1
#endif

#define DGC_SAMPLE_RUN 16

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void swapf(float *a, float *b)
{
    float t = *a;
    *a = *b;
    *b = t;
}

/* Wirth's selection, descending; equal values stop both scans, so runs of zeros stay
 * balanced. */
float dgc_kth_largest(float *a, size_t n, size_t k)
{
    ptrdiff_t l = 0, r = (ptrdiff_t)n - 1, want = (ptrdiff_t)k - 1;
    while (l < r) {
        float x = a[want];
        ptrdiff_t i = l, j = r;
        do {
            while (a[i] > x) i++;
            while (x > a[j]) j--;
            if (i <= j) {
                swapf(&a[i], &a[j]);
                i++;
                j--;
            }
        } while (i <= j);
        if (j < want) l = i;
        if (want < i) r = j;
    }
    return a[want];
}

float dgc_kth_abs(const float *x, size_t n, size_t k, float *scratch)
{
    if (n == 0 || k == 0) return INFINITY;
    if (k > n) k = n;
    for (size_t i = 0; i < n; i++) scratch[i] = fabsf(x[i]);
    return dgc_kth_largest(scratch, n, k);
}

size_t dgc_sample_abs(const float *x, size_t n, double fraction, uint64_t seed, float *sample)
{
    if (n == 0) return 0;
    size_t m = (size_t)ceil(fraction * (double)n);
    if (m < 1) m = 1;
    if (m > n) m = n;
    /* Windows of DGC_SAMPLE_RUN consecutive entries (one cache line) at a random place in
     * each of m / DGC_SAMPLE_RUN strata: a random gather per entry would cost a cache
     * miss per sample, ten times the selection pass at a 1% sample. */
    size_t run = m >= 4 * DGC_SAMPLE_RUN ? DGC_SAMPLE_RUN : 1, strata = m / run;
    m = strata * run;
    for (size_t j = 0; j < strata; j++) {
        size_t a = j * n / strata, b = (j + 1) * n / strata;  /* b - a >= run: m <= n */
        size_t at = a + (size_t)(mix64(seed ^ (uint64_t)j * 0xd1342543de82ef95ull) % (b - a - run + 1));
        for (size_t q = 0; q < run; q++) sample[j * run + q] = fabsf(x[at + q]);
    }
    return m;
}

static size_t select_portable(const float *x, size_t from, size_t n, float thr, uint32_t *idx, size_t cap, size_t got)
{
    for (size_t i = from; i < n; i++)
        if (fabsf(x[i]) >= thr) {
            if (got < cap) idx[got] = (uint32_t)i;
            got++;
        }
    return got;
}

#if defined(DGC_HAVE_AVX2) || defined(DGC_HAVE_NEON)
/* Writes i + (each set bit of bits), ascending, while they fit; returns the count. */
static size_t select_bits(uint32_t bits, size_t i, uint32_t *idx, size_t cap, size_t got)
{
    while (bits) {
        uint32_t b = (uint32_t)__builtin_ctz(bits);
        if (got < cap) idx[got] = (uint32_t)(i + b);
        got++;
        bits &= bits - 1;
    }
    return got;
}
#endif

#ifdef DGC_HAVE_AVX2
__attribute__((target("avx2")))
static size_t select_avx2(const float *x, size_t n, float thr, uint32_t *idx, size_t cap)
{
    const __m256 t = _mm256_set1_ps(thr);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    size_t got = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 c0 = _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), absmask), t, _CMP_GE_OQ);
        __m256 c1 = _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i + 8), absmask), t, _CMP_GE_OQ);
        __m256 c2 = _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i + 16), absmask), t, _CMP_GE_OQ);
        __m256 c3 = _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i + 24), absmask), t, _CMP_GE_OQ);
        __m256 any = _mm256_or_ps(_mm256_or_ps(c0, c1), _mm256_or_ps(c2, c3));
        if (_mm256_testz_ps(any, any)) continue;  /* the usual case at high sparsity */
        uint32_t bits = (uint32_t)_mm256_movemask_ps(c0) | (uint32_t)_mm256_movemask_ps(c1) << 8 |
                        (uint32_t)_mm256_movemask_ps(c2) << 16 | (uint32_t)_mm256_movemask_ps(c3) << 24;
        got = select_bits(bits, i, idx, cap, got);
    }
    return select_portable(x, i, n, thr, idx, cap, got);
}
#endif

#ifdef DGC_HAVE_NEON
/* The 4 lanes of a comparison (all ones or zero) as bits 0-3. */
static inline uint32_t neon_mask4(uint32x4_t c)
{
    const uint32_t w[4] = { 1, 2, 4, 8 };
    return vaddvq_u32(vandq_u32(c, vld1q_u32(w)));
}

static size_t select_neon(const float *x, size_t n, float thr, uint32_t *idx, size_t cap)
{
    const float32x4_t t = vdupq_n_f32(thr);
    size_t got = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        uint32x4_t c0 = vcgeq_f32(vabsq_f32(vld1q_f32(x + i)), t);  /* false for NaN, as >= */
        uint32x4_t c1 = vcgeq_f32(vabsq_f32(vld1q_f32(x + i + 4)), t);
        uint32x4_t c2 = vcgeq_f32(vabsq_f32(vld1q_f32(x + i + 8)), t);
        uint32x4_t c3 = vcgeq_f32(vabsq_f32(vld1q_f32(x + i + 12)), t);
        uint32x4_t any = vorrq_u32(vorrq_u32(c0, c1), vorrq_u32(c2, c3));
        if (vmaxvq_u32(any) == 0) continue;  /* the usual case at high sparsity */
        uint32_t bits = neon_mask4(c0) | neon_mask4(c1) << 4 | neon_mask4(c2) << 8 | neon_mask4(c3) << 12;
        got = select_bits(bits, i, idx, cap, got);
    }
    return select_portable(x, i, n, thr, idx, cap, got);
}
#endif

size_t dgc_select(const float *x, size_t n, float thr, uint32_t *idx, size_t cap)
{
#if defined(DGC_HAVE_AVX2)
    if (isa_active() >= ISA_AVX2) return select_avx2(x, n, thr, idx, cap);
#elif defined(DGC_HAVE_NEON)
    return select_neon(x, n, thr, idx, cap);
#endif
    return select_portable(x, 0, n, thr, idx, cap, 0);
}

size_t dgc_select_portable(const float *x, size_t n, float thr, uint32_t *idx, size_t cap)
{
    return select_portable(x, 0, n, thr, idx, cap, 0);
}

size_t dgc_count_above(const float *x, size_t n, float thr)
{
    return dgc_select(x, n, thr, NULL, 0);
}
