/* test_rng — Philox4x32-10 known answers, the stream layout, skip/restore, and
 * statistical checks of every distribution.
 *
 * Statistical checks use fixed seeds, so they are deterministic; their
 * thresholds are set where a correct generator would fail with probability
 * about 1e-6 (5 sigma for means, the 1 - 1e-6 chi-square quantile), so a
 * failure means a bug, not bad luck. One line per check, exit 1 on any failure. */
#include "base/rng.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct tally {
    int passed;  /* checks that held */
    int failed;  /* checks that did not */
} tally;

__attribute__((format(printf, 3, 4)))
static bool check(tally *t, bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) t->passed++;
    else t->failed++;
    return ok;
}

#define SEED UINT64_C(0x0123456789abcdef)
#define NORMAL_Z_1E6 4.753424  /* standard normal quantile at 1 - 1e-6 */

/* Upper 1e-6 quantile of chi-square with df degrees of freedom, by the
 * Wilson–Hilferty cube-root approximation (accurate to ~1% for df >= 30). */
static double chi2_crit_1e6(int df)
{
    double a = 2.0 / (9.0 * df);
    double c = 1.0 - a + NORMAL_Z_1E6 * sqrt(a);
    return df * c * c * c;
}

static double chi2_stat(const long *count, int bins, long draws)
{
    double expect = (double)draws / bins, chi2 = 0.0;
    for (int i = 0; i < bins; i++) chi2 += (count[i] - expect) * (count[i] - expect) / expect;
    return chi2;
}

/* Random123 kat_vectors, philox4x32 10 lines: counter, key, expected output. */
static void test_kat(tally *t)
{
    static const struct { uint32_t ctr[4], key[2], out[4]; const char *name; } kat[] = {
        { { 0, 0, 0, 0 }, { 0, 0 },
          { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 }, "zero counter, zero key" },
        { { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff }, { 0xffffffff, 0xffffffff },
          { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd }, "all-ones counter and key" },
        { { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 }, { 0xa4093822, 0x299f31d0 },
          { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 }, "pi-digits counter and key" },
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        philox4x32_10(kat[i].ctr, kat[i].key, out);
        check(t, memcmp(out, kat[i].out, sizeof out) == 0,
              "philox4x32_10 known answer: %s -> %08x %08x %08x %08x", kat[i].name,
              out[0], out[1], out[2], out[3]);
    }
    uint32_t inout[4];
    memcpy(inout, kat[2].ctr, sizeof inout);
    philox4x32_10(inout, kat[2].key, inout);
    check(t, memcmp(inout, kat[2].out, sizeof inout) == 0, "philox4x32_10 with out aliasing ctr");
}

/* The layout in rng.h is a reproducibility contract: pin it against an
 * independent Python implementation (values below) and the bare block function. */
static void test_layout(tally *t)
{
    const uint64_t step = UINT64_C(0x123456789ab);  /* uses step bits above 32 */
    static const uint32_t golden[8] = {  /* seed SEED, rank 3, DROPOUT, step above, blocks 0-1 */
        0x83550099, 0x669825ab, 0x9df6dac7, 0xae9bdac3,
        0x2d0189ef, 0x8d7386b0, 0xaee50943, 0x96b187b1,
    };
    static const uint32_t golden_far[4] = {  /* same stream, block 2^32 + 5 */
        0xff94722d, 0x204544b1, 0x5d90e0d1, 0xe70c68e2,
    };
    rng r;
    rng_init(&r, SEED, 3, RNG_PURPOSE_DROPOUT, step);
    uint32_t got[8];
    for (int i = 0; i < 8; i++) got[i] = rng_u32(&r);
    check(t, memcmp(got, golden, sizeof golden) == 0,
          "stream (seed, rank 3, dropout, step 0x123456789ab) matches the Python reference");

    rng_skip(&r, 4 * ((UINT64_C(1) << 32) + 5) - 8);
    for (int i = 0; i < 4; i++) got[i] = rng_u32(&r);
    check(t, memcmp(got, golden_far, sizeof golden_far) == 0,
          "block 2^32 + 5 (block bits 32..39 in ctr[3]) matches the Python reference");

    const uint32_t key[2] = { (uint32_t)SEED, (uint32_t)(SEED >> 32) };
    const uint32_t ctr[4] = { 1, 3, (uint32_t)step, (uint32_t)(step >> 32) | 2u << 24 };
    uint32_t bare[4];
    philox4x32_10(ctr, key, bare);
    check(t, memcmp(bare, golden + 4, sizeof bare) == 0,
          "block 1 equals philox4x32_10({1, rank, step_lo, step_hi | purpose << 24}, seed)");

    /* The last block of a stream is reachable and is block 2^40 - 1. */
    rng_init(&r, SEED, 3, RNG_PURPOSE_DROPOUT, step);
    rng_skip(&r, RNG_STREAM_LEN - 4);
    const uint32_t ctr_last[4] = { 0xffffffff, 3, (uint32_t)step,
                                   (uint32_t)(step >> 32) | 0xffu << 16 | 2u << 24 };
    philox4x32_10(ctr_last, key, bare);
    bool same = true;
    for (int i = 0; i < 4; i++) same &= rng_u32(&r) == bare[i];
    check(t, same && r.pos == RNG_STREAM_LEN, "last block of a stream (2^40 - 1) is drawable");
}

static bool same_prefix(rng a, rng b, int n)
{
    for (int i = 0; i < n; i++)
        if (rng_u32(&a) != rng_u32(&b)) return false;
    return true;
}

static rng stream(uint64_t seed, uint32_t rank, uint32_t purpose, uint64_t step)
{
    rng r;
    rng_init(&r, seed, rank, purpose, step);
    return r;
}

static void test_identity(tally *t)
{
    check(t, same_prefix(stream(SEED, 5, RNG_PURPOSE_DATA, 17), stream(SEED, 5, RNG_PURPOSE_DATA, 17),
                         10000),
          "same (seed, rank, purpose, step) gives the same 10000 outputs");

    /* Pairs that differ in one field, including ones a careless packing would
     * merge (rank 1 step 0 vs rank 0 step 1; step 2^32 vs block 2^32). */
    const rng base = stream(SEED, 1, RNG_PURPOSE_DATA, 0);
    check(t, !same_prefix(base, stream(SEED + 1, 1, RNG_PURPOSE_DATA, 0), 4), "different seed differs");
    check(t, !same_prefix(base, stream(SEED, 2, RNG_PURPOSE_DATA, 0), 4), "different rank differs");
    check(t, !same_prefix(base, stream(SEED, 1, RNG_PURPOSE_INIT, 0), 4), "different purpose differs");
    check(t, !same_prefix(base, stream(SEED, 1, RNG_PURPOSE_DATA, 1), 4), "different step differs");
    check(t, !same_prefix(stream(SEED, 1, 0, 0), stream(SEED, 0, 0, 1), 4),
          "(rank 1, step 0) differs from (rank 0, step 1)");
    rng far = stream(SEED, 0, 0, 0);
    rng_skip(&far, 4 * (UINT64_C(1) << 32));
    check(t, !same_prefix(stream(SEED, 0, 0, UINT64_C(1) << 32), far, 4),
          "(step 2^32, block 0) differs from (step 0, block 2^32)");
    check(t, !same_prefix(stream(SEED, 0, 0, UINT64_C(1) << 48 >> 1), stream(SEED, 0, 128, 0), 4),
          "(step 2^47, purpose 0) differs from (step 0, purpose 128)");

    bool all_distinct = true;
    for (uint32_t p = 0; p < RNG_PURPOSE_COUNT; p++)
        for (uint32_t q = p + 1; q < RNG_PURPOSE_COUNT; q++)
            all_distinct &= !same_prefix(stream(SEED, 0, p, 0), stream(SEED, 0, q, 0), 4);
    check(t, all_distinct, "all %d purposes give distinct streams", (int)RNG_PURPOSE_COUNT);

    rng a = stream(SEED, 0, RNG_PURPOSE_TEST, 0), b = a;
    uint32_t lo = rng_u32(&b), hi = rng_u32(&b);
    check(t, rng_u64(&a) == ((uint64_t)hi << 32 | lo) && a.pos == 2,
          "rng_u64 is two outputs, low half first");
}

static void test_skip_restore(tally *t)
{
    static const uint64_t starts[] = { 0, 1, 3, 5 };
    static const uint64_t skips[] = { 0, 1, 2, 3, 4, 5, 7, 8, 1000, 1001 };
    bool ok = true;
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++) {
        for (size_t j = 0; j < sizeof skips / sizeof skips[0]; j++) {
            rng drawn = stream(SEED, 7, RNG_PURPOSE_TEST, 9);
            for (uint64_t k = 0; k < starts[i]; k++) rng_u32(&drawn);
            rng skipped = drawn;
            for (uint64_t k = 0; k < skips[j]; k++) rng_u32(&drawn);
            rng_skip(&skipped, skips[j]);
            ok &= drawn.pos == skipped.pos && same_prefix(drawn, skipped, 9);
        }
    }
    check(t, ok, "rng_skip(n) equals drawing n outputs (40 start/skip pairs across block edges)");

    rng r = stream(SEED, 2, RNG_PURPOSE_AUGMENT, 11);
    for (int i = 0; i < 6; i++) rng_normal(&r);
    rng_u32(&r);
    rng_state st = rng_save(&r);
    rng back;
    status rc = rng_restore(&back, &st);
    check(t, rc == STATUS_OK && st.pos == 13 && same_prefix(r, back, 100),
          "rng_save/rng_restore resumes mid-block at the same output");

    rng untouched = stream(SEED, 0, 0, 0), before = untouched;
    rng_state bad = st;
    bad.purpose = RNG_PURPOSE_LIMIT;
    rc = rng_restore(&untouched, &bad);
    bad = st;
    bad.pos = RNG_STREAM_LEN + 1;
    status rc2 = rng_restore(&untouched, &bad);
    check(t, rc == STATUS_CORRUPT && rc2 == STATUS_CORRUPT &&
             memcmp(&untouched, &before, sizeof before) == 0,
          "rng_restore refuses impossible states with STATUS_CORRUPT and leaves r as it was");
}

static void test_uniform(tally *t)
{
    check(t, rng_u32_to_float(0) == 0.0f && rng_u32_to_float(UINT32_MAX) == 1.0f - 0x1p-24f,
          "rng_u32_to_float maps [0, 2^32) onto [0, 1 - 2^-24]");
    check(t, rng_u64_to_double(0) == 0.0 && rng_u64_to_double(UINT64_MAX) == 1.0 - 0x1p-53,
          "rng_u64_to_double maps [0, 2^64) onto [0, 1 - 2^-53]");

    enum { N = 1000000, BINS = 256 };
    long count[BINS] = { 0 };
    rng r = stream(SEED, 0, RNG_PURPOSE_TEST, 1);
    bool in_range = true;
    double sum = 0.0;
    for (int i = 0; i < N; i++) {
        float u = rng_uniform(&r);
        in_range &= u >= 0.0f && u < 1.0f;
        sum += u;
        count[(int)(u * BINS)]++;
    }
    /* Mean of N uniforms: sd 1 / sqrt(12 N); allow 5 sd. */
    double mean = sum / N, bound = 5.0 / sqrt(12.0 * N);
    check(t, in_range, "rng_uniform: %d draws in [0, 1)", N);
    check(t, fabs(mean - 0.5) <= bound, "rng_uniform mean %.6f within %.6f of 1/2", mean, bound);
    double chi2 = chi2_stat(count, BINS, N), crit = chi2_crit_1e6(BINS - 1);
    check(t, chi2 <= crit, "rng_uniform chi-square %.1f <= %.1f (%d bins, p = 1e-6)", chi2, crit, BINS);

    in_range = true;
    sum = 0.0;
    for (int i = 0; i < N; i++) {
        double u = rng_uniform_double(&r);
        in_range &= u >= 0.0 && u < 1.0;
        sum += u;
    }
    mean = sum / N;
    check(t, in_range && fabs(mean - 0.5) <= bound,
          "rng_uniform_double: %d draws in [0, 1), mean %.6f within %.6f of 1/2", N, mean, bound);
}

static void test_below(tally *t)
{
    static const uint32_t ns[] = { 1, 2, 3, 7, 100, 1000003, UINT32_C(0x80000001), UINT32_MAX };
    rng r = stream(SEED, 0, RNG_PURPOSE_TEST, 2);
    bool ok = true;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (int k = 0; k < 10000; k++) ok &= rng_below(&r, ns[i]) < ns[i];
    check(t, ok, "rng_below(n) < n for n in 1 .. 2^32 - 1 (10000 draws each)");

    enum { N = 1000000, BINS = 100 };
    long count[BINS] = { 0 };
    for (int i = 0; i < N; i++) count[rng_below(&r, BINS)]++;
    double chi2 = chi2_stat(count, BINS, N), crit = chi2_crit_1e6(BINS - 1);
    check(t, chi2 <= crit, "rng_below(100) chi-square %.1f <= %.1f (p = 1e-6)", chi2, crit);

    /* n = 3 * 2^30: a plain x % n would put the first third twice as often
     * (expected counts 1/2, 1/4, 1/4). Chi-square, 2 dof: crit = -2 ln p exactly. */
    enum { NB = 300000 };
    long third[3] = { 0, 0, 0 };
    for (int i = 0; i < NB; i++) third[rng_below(&r, UINT32_C(3) << 30) >> 30]++;
    chi2 = chi2_stat(third, 3, NB);
    crit = -2.0 * log(1e-6);
    check(t, chi2 <= crit, "rng_below(3 * 2^30) thirds %ld %ld %ld unbiased: chi-square %.1f <= %.1f",
          third[0], third[1], third[2], chi2, crit);
}

static void test_normal(tally *t)
{
    enum { N = 1000000 };
    rng r = stream(SEED, 0, RNG_PURPOSE_TEST, 3);
    rng twin = r;
    float z0, z1;
    rng_normal2(&twin, &z0, &z1);
    float z = rng_normal(&r);
    check(t, z == z0 && r.pos == 2 && twin.pos == 2,
          "rng_normal takes two outputs and equals rng_normal2's first value");

    double s0 = 0, s00 = 0, s1 = 0, s11 = 0, s01 = 0;
    bool bounded = true;
    for (int i = 0; i < N; i++) {
        rng_normal2(&r, &z0, &z1);
        bounded &= isfinite(z0) && isfinite(z1) && fabsf(z0) <= 6.67f && fabsf(z1) <= 6.67f;
        s0 += z0; s00 += (double)z0 * z0;
        s1 += z1; s11 += (double)z1 * z1;
        s01 += (double)z0 * z1;
    }
    check(t, bounded, "rng_normal2: %d pairs finite and within sqrt(64 ln 2)", N);
    /* Sample mean: sd 1/sqrt(N). Sample second moment: sd sqrt(2/N) for N(0,1).
     * Mean of z0*z1 (independent N(0,1)): sd 1/sqrt(N). Allow 5 sd each. */
    double mb = 5.0 / sqrt(N), vb = 5.0 * sqrt(2.0 / N);
    double m0 = s0 / N, v0 = s00 / N - m0 * m0, m1 = s1 / N, v1 = s11 / N - m1 * m1;
    check(t, fabs(m0) <= mb && fabs(m1) <= mb,
          "normal means %.5f (cos) %.5f (sin) within %.5f of 0", m0, m1, mb);
    check(t, fabs(v0 - 1.0) <= vb && fabs(v1 - 1.0) <= vb,
          "normal variances %.5f (cos) %.5f (sin) within %.5f of 1", v0, v1, vb);
    check(t, fabs(s01 / N) <= mb, "cos and sin branches uncorrelated: E[z0 z1] = %.5f within %.5f",
          s01 / N, mb);

    /* Tail mass beyond 3 sd: P = 0.0026998; binomial sd sqrt(P (1-P) / N). */
    rng tail = stream(SEED, 1, RNG_PURPOSE_TEST, 3);
    long beyond = 0;
    for (int i = 0; i < N; i++) beyond += fabsf(rng_normal(&tail)) > 3.0f;
    double p = 0.0026997960632601866, frac = (double)beyond / N;
    double pb = 5.0 * sqrt(p * (1.0 - p) / N);
    check(t, fabs(frac - p) <= pb, "normal tail P(|z| > 3) = %.6f within %.6f of %.6f", frac, pb, p);
}

int main(void)
{
    tally t = { 0, 0 };
    test_kat(&t);
    test_layout(&t);
    test_identity(&t);
    test_skip_restore(&t);
    test_uniform(&t);
    test_below(&t);
    test_normal(&t);
    printf("%d passed, %d failed\n", t.passed, t.failed);
    return t.failed == 0 ? 0 : 1;
}
