/* test_cuda_transformer — the CUDA transformer kernels (kernels/cuda/transformer.h)
 * against the CPU fast kernels on the same random inputs (docs/testing.md#kernel-triad):
 * layernorm, GELU (tanh and erf), residual, embedding, cross-entropy, attention.
 *
 * Shapes include the awkward ones: C not a multiple of 32, C = 1, T = 1, odd B*T,
 * row counts that leave partial chunks/tiles, HS not a multiple of 16, ld > C,
 * causal and key_mask, fully masked rows and sequences, ignored targets, NaN in
 * padded vocabulary columns. Backward outputs are pre-filled with random values so
 * a kernel that stores instead of adding fails. Kernels that promise a fixed
 * reduction order are run twice and must give the same bits.
 *
 * Tolerances: |got - ref| <= atol + rtol |ref|, eps = FLT_EPSILON = 2^-23. Both sides
 * are float computations of the same formula in different orders, so their
 * difference is bounded by the sum of their rounding errors. The rule used for a
 * float sum of K terms t_i (recursive, tree or blocked): error ~ eps sqrt(K) sum|t_i|
 * (Higham's statistical estimate; the worst case is K eps sum|t_i|), taken with a
 * factor 8 for the two sides and safety. Single roundings add 4 eps of the rounded
 * value's magnitude (that is rtol = 8 eps, and atol terms for values that cancel).
 * Each test derives its own atol from the magnitudes of its inputs; see there.
 * Elementwise kernels with one rounding (residual, embedding copy/add, embedding
 * backward which adds in the same order of n as the CPU) must match exactly. */
#define CHECK_GPU  /* the CUDA checks */
#include "../check.h"

#include <float.h>

#include "cpu/attention.h"
#include "cpu/embed.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/residual.h"
#include "cpu/xent.h"
#include "cuda/transformer.h"
#include "base/log.h" /* CHECK; also pulls libcore's die_at, which libkernels needs, into the link */

#define EPS ((double)FLT_EPSILON)

/* The contract: cuda_<name> has the type of <name>, so both fit one function-pointer table. */
#define SAME_SIGNATURE(f) \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&f), __typeof__(&cuda_##f)), "cuda_" #f " != " #f)
SAME_SIGNATURE(layernorm_forward);
SAME_SIGNATURE(layernorm_backward);
SAME_SIGNATURE(gelu_tanh_forward);
SAME_SIGNATURE(gelu_tanh_backward);
SAME_SIGNATURE(gelu_erf_forward);
SAME_SIGNATURE(gelu_erf_backward);
SAME_SIGNATURE(residual_forward);
SAME_SIGNATURE(residual_backward);
SAME_SIGNATURE(embedding_forward);
SAME_SIGNATURE(embedding_backward);
SAME_SIGNATURE(xent_forward);
SAME_SIGNATURE(xent_backward);
SAME_SIGNATURE(attention_forward);
SAME_SIGNATURE(attention_backward);

static uint64_t seed = 0x2545f4914f6cdd1dull;

static float *rnd(size_t n, float lo, float hi)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    CHECK(x != NULL, "out of host memory for test inputs");
    gpu_fill_uniform(x, n, lo, hi, &seed);
    return x;
}

static float *dup(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof(float));
    CHECK(y != NULL, "out of host memory for test inputs");
    memcpy(y, x, n * sizeof(float));
    return y;
}

static double maxabs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* max_i |a_i - b_i|: the size of the gradient a backward added onto init b. */
static double maxdiff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > m) m = fabs((double)a[i] - b[i]);
    return m;
}

static float *download(const float *dev, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    gpu_sync("download");
    int e = cuda_memcpy_d2h(h, dev, n * sizeof(float));
    if (e) gpu_die("cuda_memcpy_d2h", e);
    return h;
}

static void upload_to(float *dev, const float *host, size_t n)
{
    int e = cuda_memcpy_h2d(dev, host, n * sizeof(float));
    if (e) gpu_die("cuda_memcpy_h2d", e);
}

/* gpu_check_close for outputs that may hold -inf (attention's lse of fully masked
 * rows): infinities must match exactly, finite values within atol + rtol |ref|. */
static void check_close_inf(const char *what, const float *dev_guarded, const float *ref, size_t n, double atol,
                            double rtol)
{
    gpu_sync(what);
    size_t total = n + 2 * GPU_GUARD, torn = 0, bad = 0, worst_i = 0;
    float *h = malloc(total * sizeof(float));
    int e = cuda_memcpy_d2h(h, dev_guarded - GPU_GUARD, total * sizeof(float));
    if (e) gpu_die("cuda_memcpy_d2h", e);
    for (size_t i = 0; i < GPU_GUARD; i++) {
        uint32_t a, b;
        memcpy(&a, &h[i], 4);
        memcpy(&b, &h[GPU_GUARD + n + i], 4);
        torn += (a != GPU_CANARY_BITS) + (b != GPU_CANARY_BITS);
    }
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = h[GPU_GUARD + i], r = ref[i];
        int ok = (isinf(g) || isinf(r)) ? g == r : fabs(g - r) <= atol + rtol * fabs(r);
        if (!ok) {
            bad++;
            double err = isfinite(g - r) ? fabs(g - r) : INFINITY;
            if (!(err <= worst)) { worst = err; worst_i = i; }
        }
    }
    if (bad || torn) {
        gpu_failed++;
        printf("FAIL  %s: %zu of %zu outside %.1e + %.1e*|ref| (worst [%zu] got %.9g ref %.9g); %zu canaries torn\n",
               what, bad, n, atol, rtol, worst_i, (double)h[GPU_GUARD + worst_i], (double)ref[worst_i], torn);
    } else {
        gpu_passed++;
        printf("ok    %s (%zu values)\n", what, n);
    }
    free(h);
}

/* ------------------------------------------------------------------ layernorm */

static void test_layernorm(int BT, int C)
{
    char w[160];
    const size_t n = (size_t)BT * C;
    const float eps_ln = 1e-5f;
    float *inp = rnd(n, 1.0f, 5.0f); /* mean ~3: the two-pass variance matters */
    float *wt = rnd((size_t)C, 0.5f, 1.5f), *bs = rnd((size_t)C, -0.5f, 0.5f);
    float *out = malloc(n * sizeof(float)), *mean = malloc((size_t)BT * sizeof(float)),
          *rstd = malloc((size_t)BT * sizeof(float));
    layernorm_forward(out, mean, rstd, inp, wt, bs, BT, C, eps_ln);

    float *d_inp = gpu_upload(inp, n * sizeof(float)), *d_w = gpu_upload(wt, (size_t)C * sizeof(float)),
          *d_b = gpu_upload(bs, (size_t)C * sizeof(float));
    float *d_out = gpu_guarded(NULL, n), *d_mean = gpu_guarded(NULL, (size_t)BT), *d_rstd = gpu_guarded(NULL, (size_t)BT);
    cuda_layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, BT, C, eps_ln);

    /* Magnitudes: xmax = max|x|, smax = max rstd, Nmax = max |x - mean| rstd (normalised
     * value), wmax, bmax. mean sums C terms |x| <= xmax: 8 eps sqrt(C) xmax. The
     * variance sums C positive terms: relative 8 eps sqrt(C), half of it in rstd
     * (plus a few roundings). out = n w + b: the mean's error times smax wmax, rstd's
     * relative error times Nmax wmax, and 4 eps (Nmax wmax + bmax) for roundings
     * where n w and b cancel. */
    double xmax = maxabs(inp, n), smax = maxabs(rstd, (size_t)BT), wmax = maxabs(wt, (size_t)C),
           bmax = maxabs(bs, (size_t)C), Nmax = 0.0;
    for (int i = 0; i < BT; i++)
        for (int c = 0; c < C; c++) {
            double v = fabs((inp[(size_t)i * C + c] - mean[i]) * rstd[i]);
            if (v > Nmax) Nmax = v;
        }
    const double sq = sqrt((double)C);
    double atol_out = 8 * EPS * sq * (xmax * smax * wmax + Nmax * wmax) + 4 * EPS * (Nmax * wmax + bmax);
    snprintf(w, sizeof w, "layernorm_forward out  BT=%d C=%d", BT, C);
    gpu_check_close(w, d_out, out, n, atol_out, 8 * EPS);
    snprintf(w, sizeof w, "layernorm_forward mean BT=%d C=%d", BT, C);
    gpu_check_close(w, d_mean, mean, (size_t)BT, 8 * EPS * sq * xmax, 8 * EPS);
    snprintf(w, sizeof w, "layernorm_forward rstd BT=%d C=%d", BT, C);
    gpu_check_close(w, d_rstd, rstd, (size_t)BT, 0.0, 8 * EPS * sq + 8 * EPS);

    /* Inference: mean and rstd NULL. */
    float *d_out2 = gpu_guarded(NULL, n);
    cuda_layernorm_forward(d_out2, NULL, NULL, d_inp, d_w, d_b, BT, C, eps_ln);
    snprintf(w, sizeof w, "layernorm_forward out, mean/rstd NULL BT=%d C=%d", BT, C);
    gpu_check_close(w, d_out2, out, n, atol_out, 8 * EPS);

    /* Backward, from the CPU's saved mean/rstd on both sides, onto random gradients. */
    float *dout = rnd(n, -1.0f, 1.0f), *dinp0 = rnd(n, -1.0f, 1.0f), *dw0 = rnd((size_t)C, -1.0f, 1.0f),
          *db0 = rnd((size_t)C, -1.0f, 1.0f);
    float *dinp = dup(dinp0, n), *dw = dup(dw0, (size_t)C), *db = dup(db0, (size_t)C);
    layernorm_backward(dinp, dw, db, dout, inp, wt, mean, rstd, BT, C);
    float *d_dout = gpu_upload(dout, n * sizeof(float)), *d_mean_in = gpu_upload(mean, (size_t)BT * sizeof(float)),
          *d_rstd_in = gpu_upload(rstd, (size_t)BT * sizeof(float));
    float *d_dinp = gpu_guarded(dinp0, n), *d_dw = gpu_guarded(dw0, (size_t)C), *d_db = gpu_guarded(db0, (size_t)C);
    cuda_layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_in, d_rstd_in, BT, C);

    /* dinp = init + s (dn - mean(dn) - n mean(dn n)), dn = w g: the two means sum C
     * terms of size wmax gmax and wmax gmax Nmax, multiplied by s and (for the second)
     * by n: 8 eps sqrt(C) smax wmax gmax (1 + Nmax^2), plus 4 eps (1 + Nmax)^2 of the
     * same scale for the roundings of the difference, plus 4 eps |init| (cancellation
     * with init). dweight, dbias sum BT terms |n g| <= Nmax gmax and |g| <= gmax:
     * 8 eps sqrt(BT) sum|t|, with sum|t| measured per column (max over columns). */
    double gmax = maxabs(dout, n), imax = 1.0;
    double atol_dinp = 8 * EPS * sq * smax * wmax * gmax * (1 + Nmax * Nmax) +
                       4 * EPS * smax * wmax * gmax * (1 + Nmax) * (1 + Nmax) + 4 * EPS * imax;
    double sw = 0.0, sb = 0.0;
    for (int c = 0; c < C; c++) {
        double aw = 0.0, ab = 0.0;
        for (int i = 0; i < BT; i++) {
            double g = fabs(dout[(size_t)i * C + c]);
            aw += fabs((inp[(size_t)i * C + c] - mean[i]) * rstd[i]) * g;
            ab += g;
        }
        if (aw > sw) sw = aw;
        if (ab > sb) sb = ab;
    }
    const double sqr = sqrt((double)BT);
    snprintf(w, sizeof w, "layernorm_backward dinp BT=%d C=%d (adds)", BT, C);
    gpu_check_close(w, d_dinp, dinp, n, atol_dinp, 8 * EPS);
    snprintf(w, sizeof w, "layernorm_backward dweight BT=%d C=%d (adds)", BT, C);
    gpu_check_close(w, d_dw, dw, (size_t)C, 8 * EPS * sqr * sw + 4 * EPS * imax, 8 * EPS);
    snprintf(w, sizeof w, "layernorm_backward dbias BT=%d C=%d (adds)", BT, C);
    gpu_check_close(w, d_db, db, (size_t)C, 8 * EPS * sqr * sb + 4 * EPS * imax, 8 * EPS);

    /* Run to run: the same inputs give the same bits (fixed chunk partition, no atomics). */
    float *first_dw = download(d_dw, (size_t)C), *first_db = download(d_db, (size_t)C),
          *first_dinp = download(d_dinp, n);
    upload_to(d_dinp, dinp0, n);
    upload_to(d_dw, dw0, (size_t)C);
    upload_to(d_db, db0, (size_t)C);
    cuda_layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_in, d_rstd_in, BT, C);
    snprintf(w, sizeof w, "layernorm_backward rerun identical BT=%d C=%d: dweight", BT, C);
    gpu_check_bytes(w, d_dw, first_dw, (size_t)C * sizeof(float));
    snprintf(w, sizeof w, "layernorm_backward rerun identical BT=%d C=%d: dbias", BT, C);
    gpu_check_bytes(w, d_db, first_db, (size_t)C * sizeof(float));
    snprintf(w, sizeof w, "layernorm_backward rerun identical BT=%d C=%d: dinp", BT, C);
    gpu_check_bytes(w, d_dinp, first_dinp, n * sizeof(float));

    free(first_dw), free(first_db), free(first_dinp);
    gpu_release(d_inp, 0), gpu_release(d_w, 0), gpu_release(d_b, 0), gpu_release(d_dout, 0);
    gpu_release(d_mean_in, 0), gpu_release(d_rstd_in, 0);
    gpu_release(d_out, 1), gpu_release(d_out2, 1), gpu_release(d_mean, 1), gpu_release(d_rstd, 1);
    gpu_release(d_dinp, 1), gpu_release(d_dw, 1), gpu_release(d_db, 1);
    free(inp), free(wt), free(bs), free(out), free(mean), free(rstd);
    free(dout), free(dinp0), free(dw0), free(db0), free(dinp), free(dw), free(db);
}

/* ------------------------------------------------------------------ gelu */

/* The CPU fast path is within 64 eps of the truth for |x| <= 5 (gelu.h), CUDA's
 * expf/erfcf within a few ulp plus the argument's rounding (|2u| eps <= 9 eps at
 * |x| = 5): rtol = 128 eps covers both. gelu'(x) crosses 0 near x = -0.75 where its
 * two terms (each <= ~1.2) cancel, and dinp = init + dout g cancels with init:
 * atol = 128 eps (2 max|dout| + max|init|). The forward has no cancellation (the
 * only zero is x = 0, where it is ~x/2): atol only guards underflow. */
static void test_gelu(size_t N)
{
    char w[160];
    float *inp = rnd(N, -5.0f, 5.0f);
    inp[0] = 0.0f;
    if (N > 2) inp[1] = -5.0f, inp[2] = 5.0f;
    float *dout = rnd(N, -1.0f, 1.0f), *init = rnd(N, -1.0f, 1.0f);
    float *out = malloc(N * sizeof(float)), *dinp = malloc(N * sizeof(float));
    float *d_inp = gpu_upload(inp, N * sizeof(float)), *d_dout = gpu_upload(dout, N * sizeof(float));
    float *d_out = gpu_guarded(NULL, N), *d_dinp = gpu_guarded(init, N);
    const double atol_f = 64 * EPS * 1e-6, atol_b = 128 * EPS * (2.0 + 1.0);

    gelu_tanh_forward(out, inp, N);
    cuda_gelu_tanh_forward(d_out, d_inp, N);
    snprintf(w, sizeof w, "gelu_tanh_forward N=%zu", N);
    gpu_check_close(w, d_out, out, N, atol_f, 128 * EPS);

    memcpy(dinp, init, N * sizeof(float));
    gelu_tanh_backward(dinp, inp, dout, N);
    cuda_gelu_tanh_backward(d_dinp, d_inp, d_dout, N);
    snprintf(w, sizeof w, "gelu_tanh_backward N=%zu (adds)", N);
    gpu_check_close(w, d_dinp, dinp, N, atol_b, 128 * EPS);

    gelu_erf_forward(out, inp, N);
    cuda_gelu_erf_forward(d_out, d_inp, N);
    snprintf(w, sizeof w, "gelu_erf_forward N=%zu", N);
    gpu_check_close(w, d_out, out, N, atol_f, 128 * EPS);

    memcpy(dinp, init, N * sizeof(float));
    upload_to(d_dinp, init, N);
    gelu_erf_backward(dinp, inp, dout, N);
    cuda_gelu_erf_backward(d_dinp, d_inp, d_dout, N);
    snprintf(w, sizeof w, "gelu_erf_backward N=%zu (adds)", N);
    gpu_check_close(w, d_dinp, dinp, N, atol_b, 128 * EPS);

    gpu_release(d_inp, 0), gpu_release(d_dout, 0), gpu_release(d_out, 1), gpu_release(d_dinp, 1);
    free(inp), free(dout), free(init), free(out), free(dinp);
}

/* ------------------------------------------------------------------ residual */

/* One rounding per element on both sides: exact. */
static void test_residual(size_t N)
{
    char w[160];
    float *a = rnd(N, -1.0f, 1.0f), *b = rnd(N, -1.0f, 1.0f), *g = rnd(N, -1.0f, 1.0f);
    float *out = malloc(N * sizeof(float)), *da = dup(a, N), *db = dup(b, N);
    float *d_a = gpu_upload(a, N * sizeof(float)), *d_b = gpu_upload(b, N * sizeof(float)),
          *d_g = gpu_upload(g, N * sizeof(float));
    float *d_out = gpu_guarded(NULL, N), *d_da = gpu_guarded(a, N), *d_db = gpu_guarded(b, N);

    residual_forward(out, a, b, N);
    cuda_residual_forward(d_out, d_a, d_b, N);
    snprintf(w, sizeof w, "residual_forward N=%zu (exact)", N);
    gpu_check_close(w, d_out, out, N, 0.0, 0.0);

    residual_backward(da, db, g, N);
    cuda_residual_backward(d_da, d_db, d_g, N);
    snprintf(w, sizeof w, "residual_backward da N=%zu (adds, exact)", N);
    gpu_check_close(w, d_da, da, N, 0.0, 0.0);
    snprintf(w, sizeof w, "residual_backward db N=%zu (adds, exact)", N);
    gpu_check_close(w, d_db, db, N, 0.0, 0.0);

    /* One branch NULL: only the other one moves. */
    residual_backward(NULL, db, g, N);
    cuda_residual_backward(NULL, d_db, d_g, N);
    residual_backward(da, NULL, g, N);
    cuda_residual_backward(d_da, NULL, d_g, N);
    snprintf(w, sizeof w, "residual_backward da, db NULL in turn N=%zu (exact)", N);
    gpu_check_close(w, d_da, da, N, 0.0, 0.0);
    snprintf(w, sizeof w, "residual_backward db, da NULL in turn N=%zu (exact)", N);
    gpu_check_close(w, d_db, db, N, 0.0, 0.0);

    gpu_release(d_a, 0), gpu_release(d_b, 0), gpu_release(d_g, 0);
    gpu_release(d_out, 1), gpu_release(d_da, 1), gpu_release(d_db, 1);
    free(a), free(b), free(g), free(out), free(da), free(db);
}

/* ------------------------------------------------------------------ embedding */

/* Copies and single adds are exact; the backward adds each table element's
 * contributions in the order of n on both sides (embed.h, embed.cu): exact too. */
static void test_embedding(int N, int C, int V, int positions)
{
    char w[160];
    const size_t nt = (size_t)V * C, no = (size_t)N * C;
    int32_t *ids = malloc((size_t)(N ? N : 1) * sizeof(int32_t));
    for (int n = 0; n < N; n++) {
        uint64_t s = seed;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17, seed = s;
        /* Token ids: skewed so some rows repeat many times; positions: n % V. */
        ids[n] = positions ? n % V : (int32_t)((s >> 33) % (uint64_t)((s >> 20) % 2 ? V : (V + 3) / 4));
    }
    float *table = rnd(nt, -1.0f, 1.0f), *base = rnd(no, -1.0f, 1.0f), *dout = rnd(no, -1.0f, 1.0f);
    float *dtab0 = rnd(nt, -1.0f, 1.0f);
    float *out = dup(base, no), *dtab = dup(dtab0, nt);
    int32_t *d_ids = gpu_upload(ids, (size_t)(N ? N : 1) * sizeof(int32_t));
    float *d_table = gpu_upload(table, nt * sizeof(float)), *d_dout = gpu_upload(dout, no * sizeof(float));
    float *d_out = gpu_guarded(base, no), *d_dtab = gpu_guarded(dtab0, nt);

    embedding_forward(out, ids, table, N, C, 0);
    cuda_embedding_forward(d_out, d_ids, d_table, N, C, 0);
    snprintf(w, sizeof w, "embedding_forward N=%d C=%d V=%d%s (exact)", N, C, V, positions ? " positions" : "");
    gpu_check_close(w, d_out, out, no, 0.0, 0.0);
    embedding_forward(out, ids, table, N, C, 1);
    cuda_embedding_forward(d_out, d_ids, d_table, N, C, 1);
    snprintf(w, sizeof w, "embedding_forward accumulate N=%d C=%d V=%d (exact)", N, C, V);
    gpu_check_close(w, d_out, out, no, 0.0, 0.0);

    embedding_backward(dtab, dout, ids, N, C);
    cuda_embedding_backward(d_dtab, d_dout, d_ids, N, C);
    snprintf(w, sizeof w, "embedding_backward N=%d C=%d V=%d%s (adds, exact)", N, C, V,
             positions ? " positions" : "");
    gpu_check_close(w, d_dtab, dtab, nt, 0.0, 0.0);

    gpu_release(d_ids, 0), gpu_release(d_table, 0), gpu_release(d_dout, 0);
    gpu_release(d_out, 1), gpu_release(d_dtab, 1);
    free(ids), free(table), free(base), free(dout), free(dtab0), free(out), free(dtab);
}

/* ------------------------------------------------------------------ cross-entropy */

/* Both sides sum exp in double: lse differs by the exp's ulp (<= 3 eps relative per
 * term, so <= 3 eps in log(sum)) and the final roundings: atol 8 eps + 4 eps |lse|.
 * loss = lse - x[t] cancels: atol 8 eps (1 + max|lse| + max|x|). The backward gets the
 * same lse on both sides, so x - lse is the same float and p = exp(x - lse) differs by
 * <= 3 ulp; dx = init + g (p - [j = t]) with a possible FMA on the device:
 * atol 4 eps (max|init| + max|g|), rtol 8 eps. */
static void test_xent(int BT, int V, int Vp, float spread, int big_row)
{
    char w[160];
    const size_t n = (size_t)BT * Vp;
    float *logits = rnd(n, -spread, spread);
    for (int i = 0; i < BT; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = NAN; /* never read */
    if (big_row >= 0 && big_row < BT)
        for (int j = 0; j < V; j++) logits[(size_t)big_row * Vp + j] += 1000.0f;
    int32_t *tg = malloc((size_t)BT * sizeof(int32_t));
    for (int i = 0; i < BT; i++) {
        uint64_t s = seed;
        s ^= s << 13, s ^= s >> 7, s ^= s << 17, seed = s;
        tg[i] = (i % 3 == 1) ? XENT_IGNORE : (int32_t)((s >> 30) % (uint64_t)V);
    }
    if (BT > 0) tg[BT - 1] = V - 1; /* the last real column */
    float *losses = malloc((size_t)BT * sizeof(float)), *lse = malloc((size_t)BT * sizeof(float));
    xent_forward(losses, lse, logits, tg, BT, V, Vp);

    float *d_logits = gpu_upload(logits, n * sizeof(float));
    int32_t *d_tg = gpu_upload(tg, (size_t)BT * sizeof(int32_t));
    float *d_losses = gpu_guarded(NULL, (size_t)BT), *d_lse = gpu_guarded(NULL, (size_t)BT);
    cuda_xent_forward(d_losses, d_lse, d_logits, d_tg, BT, V, Vp);
    double lmax = maxabs(lse, (size_t)BT), xmax = maxabs(logits, n);
    snprintf(w, sizeof w, "xent_forward lse BT=%d V=%d Vp=%d", BT, V, Vp);
    gpu_check_close(w, d_lse, lse, (size_t)BT, 8 * EPS + 4 * EPS * lmax, 8 * EPS);
    snprintf(w, sizeof w, "xent_forward losses BT=%d V=%d Vp=%d (ignored rows 0)", BT, V, Vp);
    gpu_check_close(w, d_losses, losses, (size_t)BT, 8 * EPS * (1 + lmax + xmax), 8 * EPS);

    float *first = download(d_lse, (size_t)BT);
    cuda_xent_forward(d_losses, d_lse, d_logits, d_tg, BT, V, Vp);
    snprintf(w, sizeof w, "xent_forward rerun identical BT=%d V=%d: lse", BT, V);
    gpu_check_bytes(w, d_lse, first, (size_t)BT * sizeof(float));

    float *dl = rnd((size_t)BT, 0.1f, 1.0f), *init = rnd(n, -1.0f, 1.0f), *dx = dup(init, n);
    xent_backward(dx, logits, lse, tg, dl, BT, V, Vp);
    float *d_dl = gpu_upload(dl, (size_t)BT * sizeof(float)), *d_lse_in = gpu_upload(lse, (size_t)BT * sizeof(float));
    float *d_dx = gpu_guarded(init, n);
    cuda_xent_backward(d_dx, d_logits, d_lse_in, d_tg, d_dl, BT, V, Vp);
    snprintf(w, sizeof w, "xent_backward BT=%d V=%d Vp=%d (adds; ignored rows, padding untouched)", BT, V, Vp);
    gpu_check_close(w, d_dx, dx, n, 4 * EPS * (1.0 + 1.0), 8 * EPS);

    free(first);
    gpu_release(d_logits, 0), gpu_release(d_tg, 0), gpu_release(d_dl, 0), gpu_release(d_lse_in, 0);
    gpu_release(d_losses, 1), gpu_release(d_lse, 1), gpu_release(d_dx, 1);
    free(logits), free(tg), free(losses), free(lse), free(dl), free(init), free(dx);
}

/* ------------------------------------------------------------------ attention */

typedef struct att_case {
    int B, T, C, NH;
    int fused;     /* 1: one (B, T, 3C) buffer, q/k/v at columns 0, C, 2C (GPT-2); 0: three buffers */
    int ld_extra;  /* three buffers: ld = C + ld_extra (padding columns must stay untouched) */
    int causal;
    int mask;      /* 0 none; 1 padded sequences, the last one fully masked (BERT); 2 leading keys masked */
    float amp;     /* q, k, v uniform in [-amp, amp]: larger is a peakier softmax */
} att_case;

static float *att_mask(const att_case *t)
{
    if (!t->mask) return NULL;
    float *m = malloc((size_t)t->B * t->T * sizeof(float));
    for (int b = 0; b < t->B; b++)
        for (int j = 0; j < t->T; j++) {
            int keep = 1;
            if (t->mask == 1) keep = b < t->B - 1 && j < t->T - b * (t->T / 4); /* b = B-1: all masked */
            if (t->mask == 2) keep = b % 2 ? j >= 5 : j % 7 != 3;
            m[(size_t)b * t->T + j] = keep ? 1.0f : 0.0f;
        }
    return m;
}

/* Errors. Scores s = scale q.k sum HS terms q_d k_d with E|q_d k_d| = amp^2 / 4
 * (uniform inputs): abs error dS = 8 eps sqrt(HS) scale HS amp^2 / 4, which is a
 * relative error of P = exp(s - lse);
 * out and lse are P-weighted sums over T keys: delta = dS + 8 eps sqrt(T) relative,
 * so out: atol delta amp (|v| <= amp), lse: atol delta. The backward also forms
 * dP = dout.v (HS terms, relative error ~ 8 eps HS against its typical size) and sums
 * over T; its elements are bounded by sums of |terms| that for random data stay
 * within a small factor of the largest gradient element G, so the bound is normwise:
 * atol = 8 (delta + 8 eps HS) G + 4 eps max|init|, rtol 8 eps. */
static void test_attention(const att_case *t)
{
    char w[200], tag[120];
    const int B = t->B, T = t->T, C = t->C, NH = t->NH, HS = C / NH;
    const int ld = t->fused ? 3 * C : C + t->ld_extra, nx = t->fused ? 1 : 3;
    const size_t nrow = (size_t)B * T, nb = nrow * ld, no = nrow * C, nl = (size_t)B * NH * T;
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d NH=%d HS=%d ld=%d%s%s", B, T, C, NH, HS, ld,
             t->causal ? " causal" : "", t->mask == 1 ? " padded+masked seq" : t->mask == 2 ? " key_mask" : "");

    float *X[3] = { 0 }, *G0[3] = { 0 }, *G[3] = { 0 }, *dX[3] = { 0 }, *dG[3] = { 0 };
    for (int i = 0; i < nx; i++) {
        X[i] = rnd(nb, -t->amp, t->amp);
        G0[i] = rnd(nb, -1.0f, 1.0f);
        G[i] = dup(G0[i], nb);
        dX[i] = gpu_guarded(X[i], nb);
        dG[i] = gpu_guarded(G0[i], nb);
    }
    /* q, k, v and dq, dk, dv on host (h*) and device (d*). */
    const float *hq = X[0], *hk = t->fused ? X[0] + C : X[1], *hv = t->fused ? X[0] + 2 * C : X[2];
    float *hdq = G[0], *hdk = t->fused ? G[0] + C : G[1], *hdv = t->fused ? G[0] + 2 * C : G[2];
    const float *dq_in = dX[0], *dk_in = t->fused ? dX[0] + C : dX[1], *dv_in = t->fused ? dX[0] + 2 * C : dX[2];
    float *ddq = dG[0], *ddk = t->fused ? dG[0] + C : dG[1], *ddv = t->fused ? dG[0] + 2 * C : dG[2];
    float *km = att_mask(t), *d_km = km ? gpu_upload(km, nrow * sizeof(float)) : NULL;

    float *out = malloc(no * sizeof(float)), *lse = malloc(nl * sizeof(float));
    attention_forward(out, lse, hq, hk, hv, ld, km, B, T, C, NH, t->causal);
    float *d_out = gpu_guarded(NULL, no), *d_lse = gpu_guarded(NULL, nl);
    cuda_attention_forward(d_out, d_lse, dq_in, dk_in, dv_in, ld, d_km, B, T, C, NH, t->causal);

    const double scale = 1.0 / sqrt((double)HS), amp = t->amp;
    const double dS = 8 * EPS * sqrt((double)HS) * scale * HS * amp * amp / 4, delta = dS + 8 * EPS * sqrt((double)T);
    snprintf(w, sizeof w, "attention_forward out %s", tag);
    gpu_check_close(w, d_out, out, no, delta * amp, 8 * EPS);
    snprintf(w, sizeof w, "attention_forward lse %s (-inf rows match)", tag);
    check_close_inf(w, d_lse, lse, nl, delta, 8 * EPS);

    /* Backward from the CPU's out and lse on both sides. */
    float *dout = rnd(no, -1.0f, 1.0f);
    float *d_dout = gpu_upload(dout, no * sizeof(float)), *d_out_in = gpu_upload(out, no * sizeof(float)),
          *d_lse_in = gpu_upload(lse, nl * sizeof(float));
    attention_backward(hdq, hdk, hdv, dout, hq, hk, hv, ld, out, lse, km, B, T, C, NH, t->causal);
    cuda_attention_backward(ddq, ddk, ddv, d_dout, dq_in, dk_in, dv_in, ld, d_out_in, d_lse_in, d_km, B, T, C, NH,
                            t->causal);
    double Gm = 0.0;
    for (int i = 0; i < nx; i++) {
        double m = maxdiff(G[i], G0[i], nb);
        if (m > Gm) Gm = m;
    }
    const double atol_g = 8 * (delta + 8 * EPS * HS) * Gm + 4 * EPS * 1.0;
    static const char *names[3] = { "dq", "dk", "dv" };
    for (int i = 0; i < nx; i++) {
        snprintf(w, sizeof w, "attention_backward %s %s (adds)", t->fused ? "dqkv" : names[i], tag);
        gpu_check_close(w, dG[i], G[i], nb, atol_g, 8 * EPS);
    }

    /* Run to run: no atomics, so the same bits again. */
    float *first[3] = { 0 };
    for (int i = 0; i < nx; i++) {
        first[i] = download(dG[i], nb);
        upload_to(dG[i], G0[i], nb);
    }
    cuda_attention_backward(ddq, ddk, ddv, d_dout, dq_in, dk_in, dv_in, ld, d_out_in, d_lse_in, d_km, B, T, C, NH,
                            t->causal);
    for (int i = 0; i < nx; i++) {
        snprintf(w, sizeof w, "attention_backward rerun identical %s %s", t->fused ? "dqkv" : names[i], tag);
        gpu_check_bytes(w, dG[i], first[i], nb * sizeof(float));
        free(first[i]);
    }

    for (int i = 0; i < nx; i++) {
        gpu_release(dX[i], 1), gpu_release(dG[i], 1);
        free(X[i]), free(G0[i]), free(G[i]);
    }
    gpu_release(d_km, 0), gpu_release(d_dout, 0), gpu_release(d_out_in, 0), gpu_release(d_lse_in, 0);
    gpu_release(d_out, 1), gpu_release(d_lse, 1);
    free(km), free(out), free(lse), free(dout);
}

int main(void)
{
    gpu_test_start("test_cuda_transformer");

    test_layernorm(1, 768);
    test_layernorm(7, 33);
    test_layernorm(5, 1);
    test_layernorm(130, 100);   /* 5 chunks of 32 rows, the last partial */
    test_layernorm(257, 1024);

    test_gelu(100003);
    test_gelu(1);

    test_residual(1000003);
    test_residual(1);

    test_embedding(333, 300, 50, 0);   /* 2 id tiles, 2 channel blocks (one partial), repeated ids */
    test_embedding(1, 7, 3, 0);
    test_embedding(2 * 64, 768, 64, 1); /* positions: every row used twice */
    test_embedding(1000, 37, 1000, 0);

    test_xent(4, 50257, 50304, 4.0f, -1); /* GPT-2 vocabulary */
    test_xent(33, 1000, 1024, 8.0f, 5);   /* one row + 1000: stable lse */
    test_xent(1, 3, 3, 2.0f, -1);
    test_xent(7, 1, 4, 1.0f, -1);

    static const att_case cases[] = {
        /* B  T    C    NH fused ld+ causal mask amp */
        { 2, 70, 128, 2, 1, 0, 1, 0, 1.0f },  /* GPT-2 layout, HS 64, partial tiles */
        { 3, 33, 96, 3, 0, 0, 0, 1, 1.0f },   /* BERT: padding, last sequence fully masked */
        { 2, 65, 160, 2, 0, 7, 1, 2, 1.0f },  /* HS 80, ld = C + 7, causal rows 0..4 of b=1 fully masked */
        { 3, 1, 64, 4, 1, 0, 1, 0, 1.0f },    /* T = 1, HS 16 */
        { 1, 130, 256, 2, 0, 0, 0, 0, 2.0f }, /* HS 128, peaky softmax */
        { 1, 97, 72, 3, 1, 0, 1, 2, 1.0f },   /* HS 24, causal + key_mask */
        { 2, 64, 64, 1, 0, 3, 0, 2, 1.0f },   /* exactly one tile, HS 64, one head */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_attention(&cases[i]);

    return gpu_test_end("test_cuda_transformer");
}
