/* optim — the CPU element loops of AdamW, SGD and the gradient-norm clip (see optim.h).
 *
 * Inner loops: AVX2+FMA intrinsics where the CPU has them, NEON on aarch64 (always
 * there), else the portable loop with the same operations (fmaf is exact everywhere,
 * and so are the vector divides and square roots), so the bits do not depend on which
 * one runs. */
#include "optim.h"

#include "isa.h"

#include <math.h>
#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define OPTIM_HAVE_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define OPTIM_HAVE_NEON 1
#endif

/* This thread's share of [0, n) in whole lines, balanced over the team. */
void optim_thread_share(size_t n, size_t *lo, size_t *hi)
{
    size_t nth = (size_t)omp_get_num_threads(), tid = (size_t)omp_get_thread_num();
    size_t lines = (n + OPTIM_LINE_FLOATS - 1) / OPTIM_LINE_FLOATS, q = lines / nth, r = lines % nth;
    size_t a = tid * q + (tid < r ? tid : r), b = a + q + (tid < r);
    *lo = a * OPTIM_LINE_FLOATS < n ? a * OPTIM_LINE_FLOATS : n;
    *hi = b * OPTIM_LINE_FLOATS < n ? b * OPTIM_LINE_FLOATS : n;
}

#ifdef OPTIM_HAVE_AVX2
static bool use_avx2(bool portable) { return !portable && isa_active() >= ISA_AVX2; }
#endif

/* ---- AdamW ----------------------------------------------------------------- */

static void adamw_portable(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                           size_t n, const adamw_coef *c)
{
    for (size_t i = 0; i < n; i++) {
        float pi = p[i] * c->decay;
        float mi = fmaf(g[i], c->a1, m[i] * c->b1);
        float vi = fmaf(c->a2 * g[i], g[i], v[i] * c->b2);
        float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
        p[i] = pi + (c->neg_step * mi) / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

#ifdef OPTIM_HAVE_AVX2
__attribute__((target("avx2,fma")))
static void adamw_avx2(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                       const adamw_coef *c)
{
    const __m256 decay = _mm256_set1_ps(c->decay), b1 = _mm256_set1_ps(c->b1), a1 = _mm256_set1_ps(c->a1);
    const __m256 b2 = _mm256_set1_ps(c->b2), a2 = _mm256_set1_ps(c->a2), bc2 = _mm256_set1_ps(c->bc2_sqrt);
    const __m256 eps = _mm256_set1_ps(c->eps), neg_step = _mm256_set1_ps(c->neg_step);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i);
        __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
        __m256 mi = _mm256_fmadd_ps(gi, a1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
        __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(a2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(neg_step, mi), denom));
        _mm256_storeu_ps(p + i, pi);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
    }
    adamw_portable(p + i, g + i, m + i, v + i, n - i, c);
}
#endif

#ifdef OPTIM_HAVE_NEON
/* adamw_avx2's operations, 4 lanes at a time (vfmaq_f32(a, b, c) = fmaf(b, c, a)). */
static void adamw_neon(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                       const adamw_coef *c)
{
    const float32x4_t decay = vdupq_n_f32(c->decay), b1 = vdupq_n_f32(c->b1), a1 = vdupq_n_f32(c->a1);
    const float32x4_t b2 = vdupq_n_f32(c->b2), a2 = vdupq_n_f32(c->a2), bc2 = vdupq_n_f32(c->bc2_sqrt);
    const float32x4_t eps = vdupq_n_f32(c->eps), neg_step = vdupq_n_f32(c->neg_step);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t gi = vld1q_f32(g + i);
        float32x4_t pi = vmulq_f32(vld1q_f32(p + i), decay);
        float32x4_t mi = vfmaq_f32(vmulq_f32(vld1q_f32(m + i), b1), gi, a1);
        float32x4_t vi = vfmaq_f32(vmulq_f32(vld1q_f32(v + i), b2), vmulq_f32(a2, gi), gi);
        float32x4_t denom = vaddq_f32(vdivq_f32(vsqrtq_f32(vi), bc2), eps);
        pi = vaddq_f32(pi, vdivq_f32(vmulq_f32(neg_step, mi), denom));
        vst1q_f32(p + i, pi);
        vst1q_f32(m + i, mi);
        vst1q_f32(v + i, vi);
    }
    adamw_portable(p + i, g + i, m + i, v + i, n - i, c);
}
#endif

void adamw_update(float *p, const float *g, float *m, float *v, size_t n, const adamw_coef *c, bool portable)
{
#ifdef OPTIM_HAVE_AVX2
    if (use_avx2(portable)) {
        adamw_avx2(p, g, m, v, n, c);
        return;
    }
#elif defined(OPTIM_HAVE_NEON)
    if (!portable) {
        adamw_neon(p, g, m, v, n, c);
        return;
    }
#endif
    (void)portable;
    adamw_portable(p, g, m, v, n, c);
}

/* ---- SGD ------------------------------------------------------------------- */

static void sgd_portable(float *restrict p, const float *restrict g, float *restrict b, size_t n,
                         const sgd_coef *c)
{
    for (size_t i = 0; i < n; i++) {
        float d = c->wd != 0.0f ? fmaf(p[i], c->wd, g[i]) : g[i];
        if (c->momentum) {
            float bi = c->first ? d : b[i] * c->mu + d;
            b[i] = bi;
            d = c->nesterov ? fmaf(bi, c->mu, d) : bi;
        }
        p[i] = fmaf(d, c->neg_lr, p[i]);
    }
}

#ifdef OPTIM_HAVE_AVX2
__attribute__((target("avx2,fma")))
static void sgd_avx2(float *restrict p, const float *restrict g, float *restrict b, size_t n, const sgd_coef *c)
{
    const __m256 wd = _mm256_set1_ps(c->wd), mu = _mm256_set1_ps(c->mu), neg_lr = _mm256_set1_ps(c->neg_lr);
    const bool has_wd = c->wd != 0.0f;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i);
        __m256 d = _mm256_loadu_ps(g + i);
        if (has_wd) d = _mm256_fmadd_ps(pi, wd, d);
        if (c->momentum) {
            __m256 bi = c->first ? d : _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(b + i), mu), d);
            _mm256_storeu_ps(b + i, bi);
            d = c->nesterov ? _mm256_fmadd_ps(bi, mu, d) : bi;
        }
        _mm256_storeu_ps(p + i, _mm256_fmadd_ps(d, neg_lr, pi));
    }
    sgd_portable(p + i, g + i, b ? b + i : NULL, n - i, c);
}
#endif

#ifdef OPTIM_HAVE_NEON
static void sgd_neon(float *restrict p, const float *restrict g, float *restrict b, size_t n, const sgd_coef *c)
{
    const float32x4_t wd = vdupq_n_f32(c->wd), mu = vdupq_n_f32(c->mu), neg_lr = vdupq_n_f32(c->neg_lr);
    const bool has_wd = c->wd != 0.0f;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t pi = vld1q_f32(p + i);
        float32x4_t d = vld1q_f32(g + i);
        if (has_wd) d = vfmaq_f32(d, pi, wd);
        if (c->momentum) {
            float32x4_t bi = c->first ? d : vaddq_f32(vmulq_f32(vld1q_f32(b + i), mu), d);
            vst1q_f32(b + i, bi);
            d = c->nesterov ? vfmaq_f32(d, bi, mu) : bi;
        }
        vst1q_f32(p + i, vfmaq_f32(pi, d, neg_lr));
    }
    sgd_portable(p + i, g + i, b ? b + i : NULL, n - i, c);
}
#endif

void sgd_update(float *p, const float *g, float *b, size_t n, const sgd_coef *c, bool portable)
{
#ifdef OPTIM_HAVE_AVX2
    if (use_avx2(portable)) {
        sgd_avx2(p, g, b, n, c);
        return;
    }
#elif defined(OPTIM_HAVE_NEON)
    if (!portable) {
        sgd_neon(p, g, b, n, c);
        return;
    }
#endif
    (void)portable;
    sgd_portable(p, g, b, n, c);
}

/* ---- gradient clipping ------------------------------------------------------- */

/* Sum of squares in double; 8 lanes combined in a fixed tree (squares of floats are exact).
 * Lane k sums x[k], x[k+8], ... in order. The lanes live in registers in the main loop (an
 * indexed array there would go through memory every iteration, store-forwarding bound at
 * about a third of the memory rate); the tail then continues each lane in the same order. */
static double sum_squares(const float *x, size_t n)
{
    double l0 = 0, l1 = 0, l2 = 0, l3 = 0, l4 = 0, l5 = 0, l6 = 0, l7 = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        l0 += (double)x[i + 0] * (double)x[i + 0];
        l1 += (double)x[i + 1] * (double)x[i + 1];
        l2 += (double)x[i + 2] * (double)x[i + 2];
        l3 += (double)x[i + 3] * (double)x[i + 3];
        l4 += (double)x[i + 4] * (double)x[i + 4];
        l5 += (double)x[i + 5] * (double)x[i + 5];
        l6 += (double)x[i + 6] * (double)x[i + 6];
        l7 += (double)x[i + 7] * (double)x[i + 7];
    }
    double lane[8] = { l0, l1, l2, l3, l4, l5, l6, l7 };
    for (int k = 0; i < n; i++, k++) lane[k] += (double)x[i] * (double)x[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

double grad_norm_sq(const float *x, size_t n)
{
    double partial[OPTIM_NORM_BLOCKS];
    size_t block = (n + OPTIM_NORM_BLOCKS - 1) / OPTIM_NORM_BLOCKS;
    block = (block + OPTIM_LINE_FLOATS - 1) / OPTIM_LINE_FLOATS * OPTIM_LINE_FLOATS;

#pragma omp parallel for schedule(static)
    for (int b = 0; b < OPTIM_NORM_BLOCKS; b++) {
        size_t lo = (size_t)b * block, hi = lo + block;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
        partial[b] = sum_squares(x + lo, hi - lo);
    }
    double sum = 0.0;
    for (int b = 0; b < OPTIM_NORM_BLOCKS; b++) sum += partial[b];
    return sum;
}

void grad_scale(float *x, size_t n, float s)
{
#pragma omp parallel
    {
        size_t lo, hi;
        optim_thread_share(n, &lo, &hi);
        for (size_t i = lo; i < hi; i++) x[i] *= s;
    }
}
