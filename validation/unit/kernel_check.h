/* kernel_check — shared helpers of the kernel tests (the STYLE.md kernel triad):
 * tolerance checks of a fast float path against its double reference, canaries
 * around outputs, and central-difference gradients in double precision.
 *
 * Header-only (static functions): each test_*.c is its own program. */
#ifndef NEBULA_KERNEL_CHECK_H
#define NEBULA_KERNEL_CHECK_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

typedef struct kc {
    int failures;  /* checks that failed so far */
    rng r;         /* the test's random stream (fixed seed) */
} kc;

static inline void kc_init(kc *k, uint64_t seed)
{
    k->failures = 0;
    rng_init(&k->r, seed, 0, RNG_PURPOSE_TEST, 0);
}

/* One line per check; returns ok. */
static inline bool kc_report(kc *k, bool ok, const char *what, double detail)
{
    printf("%s - %s (%.3g)\n", ok ? "ok" : "FAIL", what, detail);
    if (!ok) k->failures++;
    return ok;
}

static inline void kc_uniform(kc *k, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(&k->r);
}

static inline void kc_uniform_d(kc *k, double *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform_double(&k->r);
}

static inline void kc_to_float(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static inline void kc_to_double(double *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

/* |got - ref| <= atol + rtol*|ref| everywhere; reports the worst ratio (<= 1 passes). */
static inline bool kc_close(kc *k, const float *got, const double *ref, size_t n, double atol, double rtol,
                            const char *what)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double lim = atol + rtol * fabs(ref[i]), err = fabs((double)got[i] - ref[i]);
        double ratio = isfinite(got[i]) ? err / lim : INFINITY;
        if (ratio > worst) { worst = ratio; at = i; }
    }
    if (worst > 1) printf("    worst at %zu: got %.9g ref %.9g\n", at, n ? (double)got[at] : 0.0, n ? ref[at] : 0.0);
    return kc_report(k, worst <= 1, what, worst);
}

/* Same for two double arrays (gradient checks). */
static inline bool kc_close_d(kc *k, const double *got, const double *ref, size_t n, double atol, double rtol,
                              const char *what)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double lim = atol + rtol * fabs(ref[i]), err = fabs(got[i] - ref[i]);
        double ratio = isfinite(got[i]) ? err / lim : INFINITY;
        if (ratio > worst) { worst = ratio; at = i; }
    }
    if (worst > 1) printf("    worst at %zu: got %.12g ref %.12g\n", at, n ? got[at] : 0.0, n ? ref[at] : 0.0);
    return kc_report(k, worst <= 1, what, worst);
}

/* Canaries: allocate n floats plus KC_GUARD on each side filled with a NaN pattern. */
#define KC_GUARD 16
static inline float *kc_guarded(size_t n)
{
    float *p = malloc((n + 2 * KC_GUARD) * sizeof(float));
    for (size_t i = 0; i < n + 2 * KC_GUARD; i++) p[i] = -12345.678f;
    return p + KC_GUARD;
}

static inline bool kc_guards_intact(const float *p, size_t n)
{
    for (size_t i = 1; i <= KC_GUARD; i++)
        if (p[-(long)i] != -12345.678f || p[n + i - 1] != -12345.678f) return false;
    return true;
}

static inline void kc_guarded_free(float *p)
{
    free(p - KC_GUARD);
}

/* Central difference of a scalar function of x (double): g[i] = (f(x+h) - f(x-h)) / 2h.
 * `f` reads x through ctx; x is restored. Truncation error O(h^2 f'''), rounding
 * O(eps |f| / h): h = 1e-5 balances them for O(1) inputs in double. */
typedef double (*kc_scalar_fn)(void *ctx);
static inline void kc_numeric_grad(double *x, size_t n, kc_scalar_fn f, void *ctx, double *g)
{
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double fp = f(ctx);
        x[i] = keep - h;
        double fm = f(ctx);
        x[i] = keep;
        g[i] = (fp - fm) / (2 * h);
    }
}

/* Float tolerance for a result accumulated over k terms of O(1) magnitude:
 * rtol ~ k * eps_f32 is the worst case; tests pass a small multiple of sqrt-free k. */
static inline double kc_rtol_f32(size_t k)
{
    return 4.0 * (double)FLT_EPSILON * (double)(k < 1 ? 1 : k);
}

#endif
