/* test_dgc_select — DGC-Pro's threshold scan (kernels/cpu/dgc.c): the vector build that
 * runs here (AVX2 on x86-64 at isa level avx2 or above, NEON on aarch64) against the
 * portable loop, index for index, and both against the definition.
 *
 * Inputs cover what a vector scan can get wrong: lengths around the 16- and 32-entry
 * blocks and unaligned starts, entries equal to the threshold (>=), -0, subnormals,
 * +-inf and NaN (never selected), sign bits (|x|), blocks with no hit beside full ones,
 * the capacity cut (counted, not written, the idx array's tail untouched), thresholds
 * of 0, the smallest subnormal, infinity and NaN, and a 100003-entry gradient at
 * DGC-Pro's densities. One line per check; exit 1 on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/dgc.h"
#include "cpu/isa.h"
#include "../check.h"

#define SEED UINT64_C(20260105)
#define IDX_CANARY 0xdeadbeefu

static const char *vector_build(void)
{
#if defined(__x86_64__)
    return isa_active() >= ISA_AVX2 ? "AVX2" : "portable (isa level base)";
#elif defined(__aarch64__)
    return "NEON";
#else
    return "portable (no vector build on this architecture)";
#endif
}

/* The definition: every i with |x[i]| >= thr, ascending; count past cap. */
static size_t select_def(const float *x, size_t n, float thr, uint32_t *idx, size_t cap)
{
    size_t got = 0;
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) >= thr) {
            if (got < cap) idx[got] = (uint32_t)i;
            got++;
        }
    return got;
}

/* dgc_select, dgc_select_portable and the definition agree on (x, n, thr, cap): the same
 * count, the same first min(count, cap) indices, nothing written past them. */
static bool agree(const float *x, size_t n, float thr, size_t cap, uint32_t *a, uint32_t *b, uint32_t *d)
{
    for (size_t i = 0; i <= cap; i++) a[i] = b[i] = d[i] = IDX_CANARY;
    size_t na = dgc_select(x, n, thr, a, cap), nb = dgc_select_portable(x, n, thr, b, cap);
    size_t nd = select_def(x, n, thr, d, cap), w = nd < cap ? nd : cap;
    if (na != nd || nb != nd || dgc_count_above(x, n, thr) != nd) return false;
    if (memcmp(a, d, w * sizeof *a) || memcmp(b, d, w * sizeof *b)) return false;
    for (size_t i = w; i <= cap; i++)
        if (a[i] != IDX_CANARY || b[i] != IDX_CANARY) return false;
    return true;
}

/* Values that sit on or next to thr = 1, specials and zeros, with random signs. */
static void fill_edges(rng *r, float *x, size_t n)
{
    static const float v[] = { 1.0f, 0.99999994f, 1.0000001f, 0.0f, 1e-45f, 1e-39f, INFINITY, NAN, 0.5f, 2.0f };
    for (size_t i = 0; i < n; i++) {
        float s = rng_uniform(r) < 0.5f ? -1.0f : 1.0f;
        x[i] = s * v[(size_t)(rng_uniform(r) * (float)(sizeof v / sizeof v[0])) % (sizeof v / sizeof v[0])];
    }
}

static void test_edges(test_ctx *t, rng *r)
{
    enum { N = 160 };
    float buf[N + 8];
    uint32_t a[N + 1], b[N + 1], d[N + 1];
    fill_edges(r, buf, N + 8);
    bool ok = true;
    for (size_t off = 0; off < 8 && ok; off++)
        for (size_t n = 0; n <= N && ok; n++) ok = agree(buf + off, n, 1.0f, n, a, b, d);
    check(t, ok, "%s: edge values (±0, subnormals, ±inf, NaN, ties at thr) at offsets 0-7, lengths 0-%d", vector_build(),
          N);

    ok = true;
    static const size_t caps[] = { 0, 1, 5, 16, 17, 33 };
    for (size_t c = 0; c < sizeof caps / sizeof caps[0] && ok; c++) ok = agree(buf + 3, N, 1.0f, caps[c], a, b, d);
    check(t, ok, "%s: capacity 0, 1, 5, 16, 17, 33: the count past it, nothing written past it", vector_build());

    ok = true;
    static const float thrs[] = { 0.0f, 1e-45f, 0.5f, 2.0f, INFINITY, NAN };
    for (size_t k = 0; k < sizeof thrs / sizeof thrs[0] && ok; k++) ok = agree(buf, N, thrs[k], N, a, b, d);
    check(t, ok, "%s: thresholds 0, smallest subnormal, 0.5, 2, inf, NaN", vector_build());

    /* One hit per 16- or 32-entry block at each lane, the rest below thr. */
    ok = true;
    for (size_t lane = 0; lane < 32 && ok; lane++) {
        for (size_t i = 0; i < N; i++) buf[i] = (i % 32 == lane) ? -3.0f : 0.25f;
        ok = agree(buf, N, 1.0f, N, a, b, d) && dgc_count_above(buf, N, 1.0f) == (N - lane + 31) / 32;
    }
    check(t, ok, "%s: one hit per 32 entries at every lane, sparse blocks skipped correctly", vector_build());
}

/* A gradient-like tensor at DGC-Pro's densities, thresholds from the exact k-th largest. */
static void test_gradient(test_ctx *t, rng *r)
{
    enum { N = 100003 };
    float *x = malloc(N * sizeof *x), *scratch = malloc(N * sizeof *scratch);
    uint32_t *a = malloc((N + 1) * sizeof *a), *b = malloc((N + 1) * sizeof *b), *d = malloc((N + 1) * sizeof *d);
    if (!x || !scratch || !a || !b || !d) check_skip("test_dgc_select", "out of memory for 100003 entries");
    for (size_t i = 0; i < N; i++) x[i] = rng_normal(r) * 1e-3f;
    static const double density[] = { 0.001, 0.01, 0.1, 0.5, 1.0 };
    for (size_t j = 0; j < sizeof density / sizeof density[0]; j++) {
        size_t k = (size_t)(density[j] * N);
        float thr = dgc_kth_abs(x, N, k, scratch);
        bool ok = agree(x, N, thr, N, a, b, d) && agree(x + 1, N - 1, thr, k / 2, a, b, d);
        size_t got = dgc_count_above(x, N, thr);
        check(t, ok && got >= k, "%s: N=%d at density %g: %zu selected (>= k=%zu), the same indices as the portable loop",
              vector_build(), N, density[j], got, k);
    }
    free(x);
    free(scratch);
    free(a);
    free(b);
    free(d);
}

int main(void)
{
    test_ctx t = { 0 };
    rng r;
    rng_init(&r, SEED, 0, RNG_PURPOSE_TEST, 0);
    test_edges(&t, &r);
    test_gradient(&t, &r);
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
