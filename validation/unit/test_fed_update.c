/* test_fed_update — the update arithmetic of federated learning (fed/update.h) and the
 * client partitions (fed/part.h).
 *
 * Checks: the update check refuses each hostile case and accepts a good update; clipping
 * keeps fed_l2norm <= C on many vectors and leaves small ones bit-identical; the noise
 * has the right mean, variance and no lag-1 correlation (5 standard errors: a correct
 * generator fails with probability ~1e-6) and is a function of (seed, stream, index,
 * element); the weighted mean and sum equal their double reference; trimmed mean and
 * median equal a sort-based reference (ties, NaN, adversarial orders) and hold against
 * 3 of 23 clients sending -100x the true update; FedAdam and FedYogi follow a double
 * reference over several steps; adaptive clipping finds the target quantile; the sigma
 * split; the partitions (IID sizes, Dirichlet skew and determinism, no empty client,
 * whole source files, refusals naming the value). Fixed seeds throughout: deterministic.
 * One line per check; exit 1 on any failure. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed/part.h"
#include "fed/update.h"
#include "../check.h"

#define SEED UINT64_C(20260311)

static float *fvec(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) { perror("calloc"); exit(1); }
    return p;
}

/* ---- checks of updates ---------------------------------------------------------------- */

static void test_check(test_ctx *t, kc *k)
{
    enum { N = 100 };
    float u[N];
    kc_uniform(k, u, N, -1, 1);
    double ref = 0;
    for (int i = 0; i < N; i++) ref += (double)u[i] * u[i];
    ref = sqrt(ref);
    double norm = -1;
    fed_reject r = fed_update_check(u, N, N, 7, 7, 10.0, &norm);
    check(t, r == FED_REJECT_NONE && norm == ref, "check: a good update is accepted, its norm %.6f given", norm);
    check(t, fed_l2norm(u, N) == ref, "l2norm: squares summed in double in index order");

    r = fed_update_check(u, N - 1, N, 7, 7, 0, &norm);
    check(t, r == FED_REJECT_SIZE && isnan(norm), "check: a short update is refused (%s)", fed_reject_name(r));
    r = fed_update_check(NULL, N, N, 7, 7, 0, NULL);
    check(t, r == FED_REJECT_SIZE, "check: a missing update is refused (%s)", fed_reject_name(r));
    float keep = u[50];
    u[50] = NAN;
    r = fed_update_check(u, N, N, 7, 7, 0, &norm);
    check(t, r == FED_REJECT_NONFINITE && isnan(norm), "check: a NaN is refused (%s)", fed_reject_name(r));
    u[50] = -INFINITY;
    r = fed_update_check(u, N, N, 7, 7, 0, NULL);
    check(t, r == FED_REJECT_NONFINITE, "check: an infinity is refused (%s)", fed_reject_name(r));
    u[50] = FLT_MAX;
    r = fed_update_check(u, N, N, 7, 7, 0, &norm);
    check(t, r == FED_REJECT_NONE && isfinite(norm), "check: FLT_MAX is finite, norm %.3g, no limit set", norm);
    r = fed_update_check(u, N, N, 7, 7, 1e6, NULL);
    check(t, r == FED_REJECT_NORM, "check: a huge norm over the limit is refused (%s)", fed_reject_name(r));
    u[50] = keep;
    r = fed_update_check(u, N, N, 6, 7, 0, NULL);
    check(t, r == FED_REJECT_STALE, "check: an update of an old round is refused (%s)", fed_reject_name(r));
    r = fed_update_check(u, N, N, 8, 7, 0, NULL);
    check(t, r == FED_REJECT_STALE, "check: an update of a future round is refused (%s)", fed_reject_name(r));
    r = fed_update_check(u, N, N, 7, 7, ref * 0.999, &norm);
    check(t, r == FED_REJECT_NORM && norm == ref, "check: a norm just over the limit is refused (%s)",
          fed_reject_name(r));
    r = fed_update_check(u, N, N, 7, 7, ref, NULL);
    check(t, r == FED_REJECT_NONE, "check: a norm equal to the limit is accepted");
    const char *names[] = { fed_reject_name(FED_REJECT_NONE), fed_reject_name(FED_REJECT_SIZE),
                            fed_reject_name(FED_REJECT_NONFINITE), fed_reject_name(FED_REJECT_STALE),
                            fed_reject_name(FED_REJECT_NORM) };
    bool distinct = true;
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b < 5; b++) distinct &= strcmp(names[a], names[b]) != 0;
    check(t, distinct && strcmp(fed_reject_name((fed_reject)99), "unknown") == 0, "reject names are distinct");
}

/* ---- clipping ------------------------------------------------------------------------- */

static void test_clip(test_ctx *t, kc *k)
{
    enum { N = 4099 };
    float *x = fvec(N), *x0 = fvec(N);
    kc_uniform(k, x, N, -3, 3);
    memcpy(x0, x, N * sizeof *x);
    double before = fed_l2norm(x, N), C = 1.5;
    double got = fed_clip(x, N, C), after = fed_l2norm(x, N);
    double cosine = 0;
    for (int i = 0; i < N; i++) cosine += (double)x[i] * x0[i];
    cosine /= after * before;
    check(t, got == before && after <= C && after >= C * (1 - 1e-6) && cosine > 1 - 1e-6,
          "clip: norm %.4f -> %.9f <= C = %.1f, direction kept (cos %.9f)", before, after, C, cosine);

    /* many sizes and clip norms: the bound holds exactly as fed_l2norm measures it */
    int over = 0, tries = 2000;
    for (int trial = 0; trial < tries; trial++) {
        size_t n = 1 + rng_below(&k->r, 3000);
        kc_uniform(k, x, n, -10, 10);
        double c = 0.001 + 20 * rng_uniform_double(&k->r);
        fed_clip(x, n, c);
        over += fed_l2norm(x, n) > c;
    }
    check(t, over == 0, "clip: fed_l2norm <= C after clipping in %d of %d random cases", tries - over, tries);

    kc_uniform(k, x, N, -1e-3f, 1e-3f);
    memcpy(x0, x, N * sizeof *x);
    double small = fed_clip(x, N, 1.0);
    check(t, memcmp(x, x0, N * sizeof *x) == 0 && small < 1.0,
          "clip: an update under C (norm %.4f) is unchanged bit for bit", small);
    x[7] = NAN;
    memcpy(x0, x, N * sizeof *x);
    check(t, isnan(fed_clip(x, N, 1.0)) && memcmp(x, x0, N * sizeof *x) == 0,
          "clip: a NaN update is returned untouched with a NaN norm");
    free(x);
    free(x0);
}

/* ---- noise ---------------------------------------------------------------------------- */

static void test_noise(test_ctx *t)
{
    const size_t n = (size_t)1 << 20;
    const double sd = 0.7;
    float *x = fvec(n), *y = fvec(n);
    fed_noise_add(x, n, sd, SEED, 3, 41);
    double sum = 0, sq = 0, lag = 0;
    for (size_t i = 0; i < n; i++) {
        sum += x[i];
        sq += (double)x[i] * x[i];
        if (i) lag += (double)x[i] * x[i - 1];
    }
    double mean = sum / (double)n, var = sq / (double)n - mean * mean, corr = lag / (double)(n - 1) / (sd * sd);
    /* standard errors: sd / sqrt(n) for the mean, sd^2 sqrt(2 / n) for the variance of a
     * normal sample, 1 / sqrt(n) for the lag-1 correlation */
    double se_mean = sd / sqrt((double)n), se_var = sd * sd * sqrt(2.0 / (double)n), se_corr = 1 / sqrt((double)n);
    check(t, fabs(mean) <= 5 * se_mean, "noise: mean %.2e within 5 standard errors (%.2e)", mean, 5 * se_mean);
    check(t, fabs(var - sd * sd) <= 5 * se_var, "noise: variance %.6f of %.6f within 5 standard errors (%.2e)", var,
          sd * sd, 5 * se_var);
    check(t, fabs(corr) <= 5 * se_corr, "noise: lag-1 correlation %.2e within 5 standard errors (%.2e)", corr,
          5 * se_corr);

    fed_noise_add(y, n, sd, SEED, 3, 41);
    check(t, memcmp(x, y, n * sizeof *x) == 0, "noise: the same (seed, stream, index) draws the same bits");
    memset(y, 0, n * sizeof *y);
    fed_noise_add(y, n, sd, SEED, 3, 42);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += x[i] == y[i];
    check(t, same < n / 1000, "noise: another index (round) draws other noise (%zu equal)", same);
    memset(y, 0, n * sizeof *y);
    fed_noise_add(y, n, sd, SEED, 4, 41);
    same = 0;
    for (size_t i = 0; i < n; i++) same += x[i] == y[i];
    check(t, same < n / 1000, "noise: another stream (client) draws other noise (%zu equal)", same);

    /* slices at odd and even starts, as threads would add them */
    memset(y, 0, n * sizeof *y);
    size_t cuts[] = { 0, 1, 4, 1001, 65536, 65537, 777777, n };
    for (size_t c = 0; c + 1 < sizeof cuts / sizeof *cuts; c++)
        fed_noise_add_at(y + cuts[c], cuts[c], cuts[c + 1] - cuts[c], sd, SEED, 3, 41);
    check(t, memcmp(x, y, n * sizeof *x) == 0, "noise: slices at odd and even offsets equal the whole vector");

    memcpy(y, x, n * sizeof *x);
    fed_noise_add(y, n, 0.0, SEED, 3, 41);
    check(t, memcmp(x, y, n * sizeof *x) == 0, "noise: std 0 leaves the vector unchanged");

    rng r1, r2;
    rng_init(&r1, SEED, 9, RNG_PURPOSE_FED, 5);
    rng_init(&r2, SEED, 9, RNG_PURPOSE_FED, 5);
    double z0, z1;
    fed_normal2(&r1, &z0, &z1);
    double again = fed_normal(&r2);
    check(t, z0 == again && rng_save(&r1).pos == 4 && rng_save(&r2).pos == 4,
          "normal: fed_normal is fed_normal2's first branch, 4 outputs each");
    free(x);
    free(y);
}

/* ---- adaptive clipping and the sigma split ------------------------------------------- */

/* Rounds of adaptive clipping over m norms spread evenly on (0, 10): the
 * gamma-quantile is 10 gamma. Returns C averaged over the last `avg` rounds. */
static double adapt_rounds(fed_clip_state *s, int rounds, int avg)
{
    enum { M = 200 };
    double tail = 0;
    for (int round = 0; round < rounds; round++) {
        int64_t bits = 0;
        for (int i = 0; i < M; i++) bits += fed_clip_bit(10.0 * (i + 0.5) / M, s->C);
        fed_clip_adapt(s, fed_clip_fraction(s, bits, M, SEED, 77, (uint64_t)round));
        if (round >= rounds - avg) tail += s->C;
    }
    return tail / avg;
}

static void test_adaptive(test_ctx *t)
{
    /* No noise: C settles where the fraction under it crosses gamma. Each step changes
     * log C by at most lr |b - gamma| <= lr, and near the quantile by lr times a few
     * grid steps (1/M), so C ends within a few percent. */
    fed_clip_state s = { .C = 0.1, .quantile = 0.5, .lr = 0.2, .sigma_b = 0 };
    double c = adapt_rounds(&s, 400, 50);
    check(t, fabs(c - 5.0) <= 0.1, "adaptive clip: C from 0.1 to %.4f, the median 5 of norms uniform on (0, 10)", c);
    s = (fed_clip_state){ .C = 50.0, .quantile = 0.9, .lr = 0.2, .sigma_b = 0 };
    c = adapt_rounds(&s, 400, 50);
    check(t, fabs(c - 9.0) <= 0.1, "adaptive clip: C from 50 to %.4f, the 0.9-quantile 9", c);
    /* With bit noise sigma_b = 10 over M = 200 the fraction has std 0.05; averaged over
     * 200 rounds C stays near the quantile (dC/db = 10 around it). */
    s = (fed_clip_state){ .C = 1.0, .quantile = 0.5, .lr = 0.2, .sigma_b = 10 };
    c = adapt_rounds(&s, 600, 200);
    check(t, fabs(c - 5.0) <= 0.5, "adaptive clip: with noisy bits (sigma_b 10) C averages %.3f near 5", c);
    fed_clip_state a = { .C = 1, .quantile = 0.5, .lr = 0.2, .sigma_b = 3 };
    double b1 = fed_clip_fraction(&a, 40, 100, SEED, 1, 9), b2 = fed_clip_fraction(&a, 40, 100, SEED, 1, 9);
    double b3 = fed_clip_fraction(&a, 40, 100, SEED, 1, 10);
    check(t, b1 == b2 && b1 != b3 && b1 != 0.4, "adaptive clip: the bit noise is a function of (seed, stream, round)");
    check(t, fed_clip_bit(2.0, 2.0) == 1 && fed_clip_bit(2.0000001, 2.0) == 0 && fed_clip_bit(NAN, 2.0) == 0,
          "adaptive clip: the bit is 1[norm <= C], 0 for NaN");
    check(t, sizeof(fed_clip_state) == 4 * sizeof(double), "adaptive clip: the state is 4 doubles, no padding");

    double su = fed_clip_sigma_update(1.0, 10.0), want = 1.0 / sqrt(1.0 - 1.0 / 400.0);
    check(t, fabs(su - want) <= 1e-15, "sigma split: sigma 1, sigma_b 10 leaves %.12f for the updates", su);
    su = fed_clip_sigma_update(1.1, 10.0);
    double back = 1.0 / (su * su) + 1.0 / 400.0;
    check(t, fabs(back - 1.0 / 1.21) <= 1e-14, "sigma split: the two queries compose back to sigma 1.1");
    check(t, isnan(fed_clip_sigma_update(1.0, 0.4)) && isnan(fed_clip_sigma_update(1.0, 0.5)) &&
                 isnan(fed_clip_sigma_update(0.0, 3.0)) && isnan(fed_clip_sigma_update(1.0, 0.0)),
          "sigma split: refused (NaN) when 2 sigma_b <= sigma or an argument is not > 0");
    check(t, fed_clip_sigma_update(1.3, INFINITY) == 1.3, "sigma split: no bit noise leaves sigma");
}

/* ---- weighted mean and sum ------------------------------------------------------------ */

static void test_mean(kc *k)
{
    enum { K = 7, N = 1000 };  /* N not a multiple of the 256-element block */
    float *u[K], *out = fvec(N);
    double w[K], ref[N], ref_sum[N], wsum = 0;
    for (int i = 0; i < K; i++) {
        u[i] = fvec(N);
        kc_uniform(k, u[i], N, -2, 2);
        w[i] = 1 + rng_below(&k->r, 500);  /* sample counts */
        wsum += w[i];
    }
    for (int j = 0; j < N; j++) {
        double s = 0;
        for (int i = 0; i < K; i++) s += w[i] * u[i][j];
        ref[j] = s / wsum;
        ref_sum[j] = s;
    }
    /* The reference sums the same terms in the same order: one float rounding apart. */
    fed_agg_mean(out, (const float *const *)u, w, K, N);
    kc_close(k, out, ref, N, 0, FLT_EPSILON / 2, "agg mean: weighted by sample counts, equals the double reference");
    fed_agg_sum(out, (const float *const *)u, w, K, N);
    kc_close(k, out, ref_sum, N, 0, FLT_EPSILON / 2, "agg sum: weighted, equals the double reference");
    for (int j = 0; j < N; j++) {
        double s = 0;
        for (int i = 0; i < K; i++) s += u[i][j];
        ref[j] = s / K;
    }
    fed_agg_mean(u[0], (const float *const *)u, NULL, K, N);  /* in place over the first client */
    kc_close(k, u[0], ref, N, 0, FLT_EPSILON / 2, "agg mean: equal weights, written over the first update");
    for (int i = 0; i < K; i++) free(u[i]);
    free(out);
}

/* ---- trimmed mean and median ---------------------------------------------------------- */

static uint32_t key_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

static int cmp_key(const void *a, const void *b)
{
    uint32_t x = key_of(*(const float *)a), y = key_of(*(const float *)b);
    return (x > y) - (x < y);
}

/* The definition: sort the k values, average ranks trim .. k-1-trim in double. */
static double trimmed_ref(const float *const *u, int k, size_t j, int trim, float *s)
{
    for (int i = 0; i < k; i++) s[i] = u[i][j];
    qsort(s, (size_t)k, sizeof *s, cmp_key);
    double sum = 0;
    for (int i = trim; i < k - trim; i++) sum += s[i];
    return sum / (k - 2 * trim);
}

/* Robust rules against the sort definition on one input pattern; NaN equal NaN. */
static bool robust_matches(float **u, int k, size_t n, int trim, float *out, float *s)
{
    fed_agg_trimmed_mean(out, (const float *const *)u, k, n, trim, s);
    for (size_t j = 0; j < n; j++) {
        double ref = trimmed_ref((const float *const *)u, k, j, trim, s);
        if (isnan(ref) ? !isnan(out[j]) : fabs(out[j] - ref) > FLT_EPSILON * fabs(ref) + 1e-30) return false;
    }
    return true;
}

static void test_trimmed_ref(test_ctx *t, kc *k)
{
    enum { KMAX = 301, N = 64 };
    float *u[KMAX], *out = fvec(N), s[KMAX];
    for (int i = 0; i < KMAX; i++) u[i] = fvec(N);
    int bad = 0, cases = 0;
    int ks[] = { 1, 2, 3, 4, 5, 8, 17, 40, 301 };
    for (size_t a = 0; a < sizeof ks / sizeof *ks; a++) {
        int kk = ks[a];
        for (int pattern = 0; pattern < 5; pattern++) {
            for (int i = 0; i < kk; i++)
                for (int j = 0; j < N; j++) {
                    float v;
                    switch (pattern) {
                    case 0: v = rng_uniform(&k->r) * 2 - 1; break;                   /* distinct */
                    case 1: v = (float)((int)rng_below(&k->r, 3) - 1); break;         /* many ties */
                    case 2: v = (float)i; break;                                      /* sorted */
                    case 3: v = (float)(kk - i); break;                               /* reversed */
                    default: v = (float)((i * 7919 + j) % 5) * (i % 2 ? -0.0f : 1.0f); /* +-0 ties */
                    }
                    u[i][j] = v;
                }
            for (int trim = 0; 2 * trim < kk; trim += (kk > 8 ? kk / 5 + 1 : 1)) {
                cases++;
                bad += !robust_matches(u, kk, N, trim, out, s);
            }
            cases++;
            bad += !robust_matches(u, kk, N, (kk - 1) / 2, out, s);
        }
    }
    check(t, bad == 0, "trimmed mean: equals the sorted definition in %d of %d cases (k 1..301, ties, orders, +-0)",
          cases - bad, cases);
    /* hostile NaNs and infinities are trimmed like the largest values */
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < N; j++) u[i][j] = (float)i;
    for (int j = 0; j < N; j++) {
        u[8][j] = NAN;
        u[9][j] = -INFINITY;
    }
    fed_agg_trimmed_mean(out, (const float *const *)u, 10, N, 1, s);
    check(t, out[0] == 3.5f && out[N - 1] == 3.5f, "trimmed mean: a NaN and a -inf are trimmed (got %g)", out[0]);
    float *m4[4] = { u[0], u[1], u[2], u[3] };
    for (int j = 0; j < N; j++) {
        m4[0][j] = 4;
        m4[1][j] = -1;
        m4[2][j] = 100;
        m4[3][j] = 2;
    }
    fed_agg_median(out, (const float *const *)m4, 4, N, s);
    check(t, out[0] == 3.0f, "median: even k takes the mean of the two middle values (got %g)", out[0]);
    for (int i = 0; i < KMAX; i++) free(u[i]);
    free(out);
}

/* 20 honest clients near a true update, 3 attackers sending -100 times it. */
static void test_robust(test_ctx *t, kc *k)
{
    enum { H = 20, A = 3, K = H + A, N = 1000 };
    float *u[K], *truth = fvec(N), *out = fvec(N), s[K];
    double honest[N], dist_spread = 0, norm_truth = 0;
    kc_uniform(k, truth, N, -1, 1);
    for (int i = 0; i < K; i++) {
        u[i] = fvec(N);
        for (int j = 0; j < N; j++)
            u[i][j] = i < H ? truth[j] + 0.01f * (rng_uniform(&k->r) * 2 - 1) : -100.0f * truth[j];
    }
    for (int j = 0; j < N; j++) {
        double sum = 0, lo = INFINITY, hi = -INFINITY;
        for (int i = 0; i < H; i++) {
            sum += u[i][j];
            lo = u[i][j] < lo ? u[i][j] : lo;  /* not fmin: aarch64 GCC 12 ICEs vectorising the reduction */
            hi = u[i][j] > hi ? u[i][j] : hi;
        }
        honest[j] = sum / H;
        dist_spread += (hi - lo) * (hi - lo);
        norm_truth += (double)truth[j] * truth[j];
    }
    dist_spread = sqrt(dist_spread);  /* the bound an aggregate inside the honest range meets */
    norm_truth = sqrt(norm_truth);
    const char *names[] = { "mean", "trimmed mean (trim 3)", "median" };
    for (int rule = 0; rule < 3; rule++) {
        if (rule == 0) fed_agg_mean(out, (const float *const *)u, NULL, K, N);
        if (rule == 1) fed_agg_trimmed_mean(out, (const float *const *)u, K, N, A, s);
        if (rule == 2) fed_agg_median(out, (const float *const *)u, K, N, s);
        double d = 0;
        int outside = 0;
        for (int j = 0; j < N; j++) {
            d += (out[j] - honest[j]) * (out[j] - honest[j]);
            double lo = INFINITY, hi = -INFINITY;
            for (int i = 0; i < H; i++) {
                lo = u[i][j] < lo ? u[i][j] : lo;  /* not fmin: aarch64 GCC 12 ICEs vectorising the reduction */
                hi = u[i][j] > hi ? u[i][j] : hi;
            }
            outside += out[j] < lo || out[j] > hi;
        }
        d = sqrt(d);
        if (rule == 0)
            check(t, d > norm_truth, "robust: the %s is ruined, %.1f from the honest mean (|truth| %.1f)", names[rule],
                  d, norm_truth);
        else
            check(t, outside == 0 && d <= dist_spread && d <= 0.01 * norm_truth,
                  "robust: the %s stays in the honest range, %.4f from the honest mean (spread %.3f, |truth| %.1f)",
                  names[rule], d, dist_spread, norm_truth);
    }
    for (int i = 0; i < K; i++) free(u[i]);
    free(truth);
    free(out);
}

/* ---- server optimizers ---------------------------------------------------------------- */

static void test_server(test_ctx *t, kc *k)
{
    enum { N = 300, STEPS = 6 };
    const double lr = 0.05, b1 = 0.9, b2 = 0.99, tau = 1e-3;
    float *g = fvec(N), *m = fvec(N), *v = fvec(N), *d = fvec(N), *g0 = fvec(N);
    double rg[N], rm[N], rv[N], moved[N];
    kc_uniform(k, g0, N, -1, 1);
    for (int kind = FED_SERVER_ADAM; kind <= FED_SERVER_YOGI; kind++) {
        fed_server_opt o;
        fed_server_init(&o, (fed_server_kind)kind, lr, b1, b2, tau, m, v, N);
        memcpy(g, g0, N * sizeof *g);
        for (int j = 0; j < N; j++) {
            rg[j] = g0[j];
            rm[j] = 0;
            rv[j] = tau * tau;
            moved[j] = 0;
        }
        for (int step = 0; step < STEPS; step++) {
            kc_uniform(k, d, N, -0.5f, 0.5f);
            fed_server_step(&o, g, d, N);
            for (int j = 0; j < N; j++) {  /* Reddi et al., Algorithm 2, in double */
                double dd = d[j], d2 = dd * dd;
                rm[j] = b1 * rm[j] + (1 - b1) * dd;
                if (kind == FED_SERVER_ADAM) rv[j] = b2 * rv[j] + (1 - b2) * d2;
                else rv[j] = rv[j] - (1 - b2) * d2 * (rv[j] > d2 ? 1.0 : rv[j] < d2 ? -1.0 : 0.0);
                double step_j = lr * rm[j] / (sqrt(rv[j]) + tau);
                rg[j] += step_j;
                moved[j] += fabs(step_j);
            }
        }
        /* Each step rounds m, v and the parameter once to float: the relative error of a
         * step grows by ~2 eps_f per step through m and v, so the parameter is off by at most
         * eps_f |g| per step plus ~2 STEPS eps_f times the distance moved. */
        double worst = 0;
        for (int j = 0; j < N; j++) {
            double lim = STEPS * FLT_EPSILON * (fabs(rg[j]) + 4.0 * STEPS * moved[j]);
            { double e = fabs(g[j] - rg[j]) / lim; worst = e > worst ? e : worst; }
        }
        check(t, worst <= 1 && o.t == STEPS, "server %s: %d steps follow the double reference (worst %.3g of the bound)",
              kind == FED_SERVER_ADAM ? "FedAdam" : "FedYogi", STEPS, worst);
    }
    fed_server_opt o;
    fed_server_init(&o, FED_SERVER_AVG, 1.0, 0, 0, 0, NULL, NULL, N);
    memcpy(g, g0, N * sizeof *g);
    kc_uniform(k, d, N, -0.5f, 0.5f);
    fed_server_step(&o, g, d, N);
    bool exact = true;
    for (int j = 0; j < N; j++) exact &= g[j] == (float)((double)g0[j] + d[j]);
    check(t, exact && o.t == 1, "server FedAvg: global += delta, one rounding");
    free(g);
    free(m);
    free(v);
    free(d);
    free(g0);
}

/* ---- partitions ----------------------------------------------------------------------- */

/* The mean over clients of the largest class's share of the client's samples. */
static double mean_max_class_share(const int32_t *owner, const int32_t *labels, int64_t n, int classes, int clients)
{
    int64_t *cnt = calloc((size_t)classes * clients, sizeof *cnt), *tot = calloc((size_t)clients, sizeof *tot);
    for (int64_t i = 0; i < n; i++) {
        cnt[(size_t)owner[i] * classes + labels[i]]++;
        tot[owner[i]]++;
    }
    double sum = 0;
    for (int j = 0; j < clients; j++) {
        int64_t top = 0;
        for (int c = 0; c < classes; c++) top = cnt[(size_t)j * classes + c] > top ? cnt[(size_t)j * classes + c] : top;
        sum += tot[j] ? (double)top / tot[j] : 0;
    }
    free(cnt);
    free(tot);
    return sum / clients;
}

static bool owners_valid(const int32_t *owner, int64_t n, int clients, int64_t *counts, int64_t *lo, int64_t *hi)
{
    for (int64_t i = 0; i < n; i++)
        if (owner[i] < 0 || owner[i] >= clients) return false;
    fed_part_counts(owner, n, clients, counts);
    int64_t total = 0;
    *lo = INT64_MAX;
    *hi = 0;
    for (int j = 0; j < clients; j++) {
        total += counts[j];
        *lo = counts[j] < *lo ? counts[j] : *lo;
        *hi = counts[j] > *hi ? counts[j] : *hi;
    }
    return total == n;
}

static void test_part_iid(test_ctx *t)
{
    enum { N = 10007, CL = 37 };
    int32_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    int64_t counts[CL], lo = 0, hi = 0;
    status st = fed_part_iid(a, N, CL, SEED);
    bool ok = st == STATUS_OK && owners_valid(a, N, CL, counts, &lo, &hi);
    check(t, ok && hi - lo <= 1, "part iid: every sample one owner, sizes %lld..%lld differ by <= 1", (long long)lo,
          (long long)hi);
    fed_part_iid(b, N, CL, SEED);
    bool same = memcmp(a, b, N * sizeof *a) == 0;
    fed_part_iid(b, N, CL, SEED + 1);
    check(t, same && memcmp(a, b, N * sizeof *a) != 0, "part iid: the same for a seed, another for another seed");
    int64_t run = 0;  /* a shuffled deal, not the plain one: few samples follow i % clients */
    for (int64_t i = 0; i < N; i++) run += a[i] == (int32_t)(i % CL);
    check(t, run < N / 10, "part iid: the deal is shuffled (%lld samples at i %% clients)", (long long)run);
    capture_begin(t);
    status s1 = fed_part_iid(a, N, 0, SEED), s2 = fed_part_iid(a, 5, 6, SEED);
    const char *msg = capture_end(t, false);
    check(t, s1 == STATUS_INPUT && s2 == STATUS_INPUT && strstr(msg, "clients = 6"),
          "part iid: refuses clients < 1 and clients > nsamples, naming the value");
    free(a);
    free(b);
}

static void test_part_dirichlet(test_ctx *t)
{
    enum { N = 20000, CLS = 10, CL = 20 };
    int32_t *labels = malloc(N * sizeof *labels), *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    int64_t counts[100], lo = 0, hi = 0;
    for (int i = 0; i < N; i++) labels[i] = (int32_t)((i * 7) % CLS);
    status st = fed_part_dirichlet(a, labels, N, CLS, CL, 0.1, SEED);
    bool ok = st == STATUS_OK && owners_valid(a, N, CL, counts, &lo, &hi);
    double skew = mean_max_class_share(a, labels, N, CLS, CL);
    check(t, ok && lo >= 1 && skew >= 0.45, "part dirichlet alpha 0.1: skewed, mean top-class share %.3f, sizes %lld..%lld",
          skew, (long long)lo, (long long)hi);
    /* alpha 1000: proportions 1/CL +- ~3%, so each client holds ~N/CL samples with every
     * class near 1/CLS of them */
    st = fed_part_dirichlet(b, labels, N, CLS, CL, 1000.0, SEED);
    ok = st == STATUS_OK && owners_valid(b, N, CL, counts, &lo, &hi);
    double flat = mean_max_class_share(b, labels, N, CLS, CL);
    check(t, ok && flat <= 0.13 && lo >= 0.85 * N / CL && hi <= 1.15 * N / CL,
          "part dirichlet alpha 1000: near uniform, mean top-class share %.3f (1/%d = 0.1), sizes %lld..%lld", flat,
          CLS, (long long)lo, (long long)hi);
    fed_part_dirichlet(b, labels, N, CLS, CL, 0.1, SEED);
    bool same = memcmp(a, b, N * sizeof *a) == 0;
    fed_part_dirichlet(b, labels, N, CLS, CL, 0.1, SEED + 1);
    check(t, same && memcmp(a, b, N * sizeof *a) != 0, "part dirichlet: the same for a seed, another for another seed");
    /* 100 clients, 2 classes, alpha 0.01: most clients get nothing from the draw */
    for (int i = 0; i < 1000; i++) labels[i] = i % 2;
    st = fed_part_dirichlet(a, labels, 1000, 2, 100, 0.01, SEED);
    ok = st == STATUS_OK && owners_valid(a, 1000, 100, counts, &lo, &hi);
    check(t, ok && lo >= 1, "part dirichlet alpha 0.01, 100 clients: no client empty (sizes %lld..%lld)",
          (long long)lo, (long long)hi);
    st = fed_part_dirichlet(a, labels, 100, 2, 100, 0.01, SEED);
    ok = st == STATUS_OK && owners_valid(a, 100, 100, counts, &lo, &hi);
    check(t, ok && lo == 1 && hi == 1, "part dirichlet: as many clients as samples gives one each");

    struct { double alpha; int classes, clients; int64_t n; int32_t bad_label; const char *want; } bad[] = {
        { 0.0, 2, 4, 100, 0, "alpha = 0" },        { -1.0, 2, 4, 100, 0, "alpha = -1" },
        { NAN, 2, 4, 100, 0, "alpha = nan" },      { 0.5, 2, 0, 100, 0, "clients = 0" },
        { 0.5, 2, 101, 100, 0, "clients = 101" },  { 0.5, 0, 4, 100, 0, "classes = 0" },
        { 0.5, 2, 4, 100, 2, "label 2 of sample 50" }, { 0.5, 2, 4, 100, -1, "label -1 of sample 50" },
    };
    int refused = 0, nbad = (int)(sizeof bad / sizeof *bad);
    for (int c = 0; c < nbad; c++) {
        for (int i = 0; i < 100; i++) labels[i] = i % 2;
        if (bad[c].bad_label) labels[50] = bad[c].bad_label;
        capture_begin(t);
        st = fed_part_dirichlet(a, labels, bad[c].n, bad[c].classes, bad[c].clients, bad[c].alpha, SEED);
        const char *msg = capture_end(t, false);
        bool named = strstr(msg, bad[c].want) != NULL;
        if (st == STATUS_INPUT && named) refused++;
        else printf("    case %d: %s, message: %s", c, status_str(st), msg);
    }
    check(t, refused == nbad, "part dirichlet: %d of %d bad inputs refused naming the value", refused, nbad);
    free(labels);
    free(a);
    free(b);
}

static void test_part_source(test_ctx *t, kc *k)
{
    enum { N = 5000, FILES = 60, CL = 8 };
    int64_t *src = malloc(N * sizeof *src), counts[CL], lo = 0, hi = 0;
    int32_t *a = malloc(N * sizeof *a), where[FILES];
    for (int i = 0; i < N; i++) src[i] = (int64_t)rng_below(&k->r, FILES - 3);  /* files 57..59 empty */
    status st = fed_part_by_source(a, src, N, FILES, CL, SEED);
    bool ok = st == STATUS_OK && owners_valid(a, N, CL, counts, &lo, &hi), whole = true;
    for (int f = 0; f < FILES; f++) where[f] = -1;
    for (int i = 0; i < N; i++) {
        if (where[src[i]] < 0) where[src[i]] = a[i];
        whole &= where[src[i]] == a[i];
    }
    int files_of[CL] = { 0 }, flo = FILES, fhi = 0;
    for (int f = 0; f < FILES; f++)
        if (where[f] >= 0) files_of[where[f]]++;
    for (int j = 0; j < CL; j++) {
        flo = files_of[j] < flo ? files_of[j] : flo;
        fhi = files_of[j] > fhi ? files_of[j] : fhi;
    }
    check(t, ok && whole && lo >= 1 && fhi - flo <= 1,
          "part by source: files kept whole, %d..%d files per client, no client empty", flo, fhi);
    capture_begin(t);
    status s1 = fed_part_by_source(a, src, N, 5, CL, SEED);
    for (int i = 0; i < N; i++) src[i] = i % 3;
    status s2 = fed_part_by_source(a, src, N, FILES, CL, SEED);
    src[9] = FILES;
    status s3 = fed_part_by_source(a, src, N, FILES, CL, SEED);
    const char *msg = capture_end(t, false);
    check(t, s1 == STATUS_INPUT && s2 == STATUS_INPUT && s3 == STATUS_INPUT && strstr(msg, "5 source files for 8") &&
                 strstr(msg, "3 of the 60") && strstr(msg, "source 60 of sample 9"),
          "part by source: refuses fewer (non-empty) files than clients and a source out of range");
    free(src);
    free(a);
}

int main(void)
{
    test_ctx t = { 0 };
    kc k;
    kc_init(&k, SEED);
    test_check(&t, &k);
    test_clip(&t, &k);
    test_noise(&t);
    test_adaptive(&t);
    test_mean(&k);
    test_trimmed_ref(&t, &k);
    test_robust(&t, &k);
    test_server(&t, &k);
    test_part_iid(&t);
    test_part_dirichlet(&t);
    test_part_source(&t, &k);
    t.failures += k.failures;
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
