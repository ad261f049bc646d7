/* test_kernels_dense — the dense-layer CPU kernels (matmul, layernorm, gelu,
 * embedding, residual) against their double-precision specifications (the
 * kernel triad, docs/testing.md#kernel-triad). For every kernel, at 2-4 shapes with odd sizes:
 *   (a) fast float forward vs the double reference, tolerance derived from the
 *       reduction length, outputs surrounded by canaries;
 *   (b) the double reference backward vs central differences of
 *       L = sum(out * R) for a fixed random R;
 *   (c) fast backward vs reference backward (canaries again);
 *   (d) backward ADDS: onto random initial gradients it gives the zero-start
 *       result plus the initial values (within the one rounding of that add for
 *       Nebula's own loops; within the GEMM tolerance for BLAS, which may fold
 *       the initial value into its K loop);
 *   (e) layernorm and embedding backward are bit-identical for 1, 2 and 3 threads.
 * Plus: both matmul layouts, bias NULL, NULL gradient outputs, an out-of-range
 * embedding id dying, vmath.h's exp and erfc against libm, and GELU's builds per
 * vector level bit for bit. Run at each level (NEBULA_CPU_ISA, validation/tests.list). One line per check, exit 1 on any failure. */
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cpu/embed.h"
#include "cpu/gelu.h"
#include "cpu/gemm.h"
#include "cpu/blas.h"
#include "cpu/isa.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/precision.h"
#include "cpu/residual.h"
#include "cpu/vmath.h"
#include "../check.h"

/* Central differences in double with h = 1e-5: rounding noise ~ 1e-16 |L| / h,
 * below 1e-9 for the |L| < 100 used here; truncation ~ h^2 |f'''| ~ 1e-10. */
#define GRAD_ATOL 1e-7
#define GRAD_RTOL 1e-6
/* One float rounding of the final add (|fl(a+b) - (a+b)| <= eps/2 |a+b|). */
#define ONE_ROUNDING FLT_EPSILON

/* ---- buffers: every allocation of a test is released by pool_free() ---- */

static float *g_pool[128];  /* guarded float buffers (kc_guarded) */
static void *d_pool[128];   /* plain buffers */
static int g_n, d_n;

static float *gbuf(size_t n) /* guarded, zeroed */
{
    CHECK(g_n < 128, "raise the size of g_pool");
    float *p = kc_guarded(n);
    memset(p, 0, n * sizeof *p);
    g_pool[g_n++] = p;
    return p;
}

static float *grand(kc *k, size_t n, float lo, float hi)
{
    float *p = gbuf(n);
    kc_uniform(k, p, n, lo, hi);
    return p;
}

static float *gcopy(const float *x, size_t n)
{
    float *p = gbuf(n);
    memcpy(p, x, n * sizeof *p);
    return p;
}

static void *pbuf(size_t bytes) /* zeroed */
{
    CHECK(d_n < 128, "raise the size of d_pool");
    void *p = calloc(1, bytes ? bytes : 1);
    CHECK(p != NULL, "out of memory");
    d_pool[d_n++] = p;
    return p;
}

static double *dbuf(size_t n) /* zeroed */
{
    return pbuf(n * sizeof(double));
}

static double *dcopy(const float *x, size_t n)
{
    double *p = dbuf(n);
    kc_to_double(p, x, n);
    return p;
}

static void pool_free(void)
{
    while (g_n) kc_guarded_free(g_pool[--g_n]);
    while (d_n) free(d_pool[--d_n]);
}

/* ---- checks ---- */

__attribute__((format(printf, 1, 2)))
static const char *fmt(const char *f, ...)
{
    static char bufs[4][256]; /* rotating: a result may be an argument of the next call */
    static int next;
    char *buf = bufs[next++ % 4];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof bufs[0], f, ap);
    va_end(ap);
    return buf;
}

/* A fast output against its reference; the canaries around it must be intact. */
static void check_f(kc *k, const float *got, const double *ref, size_t n, double atol, double rtol,
                    const char *what)
{
    if (!kc_guards_intact(got, n)) {
        kc_report(k, false, fmt("%s: canaries overwritten", what), 0);
        return;
    }
    kc_close(k, got, ref, n, atol, rtol, fmt("%s, canaries intact", what));
}

/* Backward adds: got (started from init) equals zero_result + init. */
static void check_adds(kc *k, const float *got, const float *zero_result, const float *init, size_t n,
                       double atol, double rtol, const char *what)
{
    double *ref = dbuf(n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)zero_result[i] + (double)init[i];
    check_f(k, got, ref, n, atol, rtol, what);
}

static void check_grad(kc *k, double *x, size_t n, kc_scalar_fn f, void *ctx, const double *analytic,
                       const char *what)
{
    double *g = dbuf(n);
    kc_numeric_grad(x, n, f, ctx, g);
    kc_close_d(k, analytic, g, n, GRAD_ATOL, GRAD_RTOL, what);
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- matmul ---- */

typedef struct mm_ctx {
    const double *inp, *w, *bias, *R; /* (BT, C), weight, (OC) or NULL, (BT, OC) */
    double *out;                      /* (BT, OC) scratch */
    int BT, C, OC;
    matmul_layout layout;
} mm_ctx;

static double mm_loss(void *p)
{
    mm_ctx *m = p;
    matmul_forward_ref(m->out, m->inp, m->w, m->bias, m->BT, m->C, m->OC, m->layout);
    return dot(m->out, m->R, (size_t)m->BT * m->OC);
}

static void test_matmul(kc *k, int BT, int C, int OC, matmul_layout layout, int with_bias, int numeric)
{
    char tag[128];
    snprintf(tag, sizeof tag, "matmul %s BT=%d C=%d OC=%d%s", layout == MATMUL_LAYOUT_OUT_IN ? "out_in" : "in_out",
             BT, C, OC, with_bias ? "" : " bias=NULL");
    size_t ni = (size_t)BT * C, nw = (size_t)C * OC, no = (size_t)BT * OC;
    float *inp = grand(k, ni, -1, 1), *w = grand(k, nw, -1, 1), *R = grand(k, no, -1, 1);
    float *bias = with_bias ? grand(k, (size_t)OC, -1, 1) : NULL;
    double *inp_d = dcopy(inp, ni), *w_d = dcopy(w, nw), *R_d = dcopy(R, no);
    double *bias_d = with_bias ? dcopy(bias, (size_t)OC) : NULL;

    /* (a) out = inp . W + bias, a reduction over C (+1 for the bias) */
    float *out = grand(k, no, -9, 9); /* garbage in out must not leak through */
    double *out_d = dbuf(no);
    matmul_forward(out, inp, w, bias, BT, C, OC, layout);
    matmul_forward_ref(out_d, inp_d, w_d, bias_d, BT, C, OC, layout);
    double tol = kc_rtol_f32((size_t)C + 1);
    check_f(k, out, out_d, no, tol, tol, fmt("%s: forward vs reference", tag));

    /* (b) */
    double *dinp_d = dbuf(ni), *dw_d = dbuf(nw), *db_d = with_bias ? dbuf((size_t)OC) : NULL;
    matmul_backward_ref(dinp_d, dw_d, db_d, R_d, inp_d, w_d, BT, C, OC, layout);
    if (numeric) {
        mm_ctx m = { inp_d, w_d, bias_d, R_d, dbuf(no), BT, C, OC, layout };
        check_grad(k, inp_d, ni, mm_loss, &m, dinp_d, fmt("%s: reference dinp vs central differences", tag));
        check_grad(k, w_d, nw, mm_loss, &m, dw_d, fmt("%s: reference dweight vs central differences", tag));
        if (with_bias)
            check_grad(k, bias_d, (size_t)OC, mm_loss, &m, db_d, fmt("%s: reference dbias vs central differences", tag));
    }

    /* (c) dinp reduces over OC, dweight and dbias over BT */
    float *dinp = gbuf(ni), *dw = gbuf(nw), *db = gbuf((size_t)OC);
    matmul_backward(dinp, dw, with_bias ? db : NULL, R, inp, w, BT, C, OC, layout);
    check_f(k, dinp, dinp_d, ni, kc_rtol_f32((size_t)OC), kc_rtol_f32((size_t)OC), fmt("%s: dinp vs reference", tag));
    check_f(k, dw, dw_d, nw, kc_rtol_f32((size_t)BT), kc_rtol_f32((size_t)BT), fmt("%s: dweight vs reference", tag));
    if (with_bias)
        check_f(k, db, db_d, (size_t)OC, kc_rtol_f32((size_t)BT), kc_rtol_f32((size_t)BT),
                fmt("%s: dbias vs reference", tag));

    /* (d) */
    float *i_in = grand(k, ni, -1, 1), *i_w = grand(k, nw, -1, 1), *i_b = grand(k, (size_t)OC, -1, 1);
    float *a_in = gcopy(i_in, ni), *a_w = gcopy(i_w, nw), *a_b = gcopy(i_b, (size_t)OC);
    matmul_backward(a_in, a_w, a_b, R, inp, w, BT, C, OC, layout);
    check_adds(k, a_in, dinp, i_in, ni, kc_rtol_f32((size_t)OC), kc_rtol_f32((size_t)OC), fmt("%s: dinp adds", tag));
    check_adds(k, a_w, dw, i_w, nw, kc_rtol_f32((size_t)BT), kc_rtol_f32((size_t)BT), fmt("%s: dweight adds", tag));
    if (with_bias) check_adds(k, a_b, db, i_b, (size_t)OC, 0, ONE_ROUNDING, fmt("%s: dbias adds", tag));

    /* NULL gradients are skipped and leave the others as they would be */
    float *o_in = gbuf(ni), *o_w = gbuf(nw), *o_b = gbuf((size_t)OC);
    matmul_backward(o_in, NULL, NULL, R, inp, w, BT, C, OC, layout);
    matmul_backward(NULL, o_w, NULL, R, inp, w, BT, C, OC, layout);
    matmul_backward(NULL, NULL, with_bias ? o_b : NULL, R, inp, w, BT, C, OC, layout);
    matmul_backward(NULL, NULL, NULL, R, inp, w, BT, C, OC, layout);
    bool same = memcmp(o_in, dinp, ni * sizeof(float)) == 0 && memcmp(o_w, dw, nw * sizeof(float)) == 0 &&
                memcmp(o_b, db, (size_t)OC * sizeof(float)) == 0 && kc_guards_intact(o_in, ni) &&
                kc_guards_intact(o_w, nw) && kc_guards_intact(o_b, (size_t)OC);
    kc_report(k, same, fmt("%s: NULL gradients skipped, the others bit-identical", tag), 0);
    pool_free();
}

/* ---- gemm: both paths ---- */

/* C (M, N) = [C +] op(A) op(B) in double, reading the operands' storage as gemm.h says. */
static void gemm_ref(bool ta, bool tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     const float *C0, int ldc, bool accumulate, double *out /* (M, N) dense */)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = accumulate ? C0[(size_t)i * ldc + j] : 0;
            for (int p = 0; p < K; p++) {
                double a = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                double b = tb ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
                acc += a * b;
            }
            out[(size_t)i * N + j] = acc;
        }
}

/* Each path on a shape with leading dimensions wider than the rows: the product within
 * the K-term tolerance, C's padding columns (between ldc and N) untouched, canaries
 * intact; with accumulate, C's old values added. */
static void test_gemm(kc *k, gemm_path path, int M, int N, int K, bool ta, bool tb, bool accumulate)
{
    const char *tag = fmt("gemm %s M=%d N=%d K=%d%s%s%s", gemm_path_name(path), M, N, K, ta ? " A^T" : "",
                          tb ? " B^T" : "", accumulate ? " C+=" : "");
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = grand(k, na, -1, 1), *B = grand(k, nb, -1, 1), *C = grand(k, nc, -9, 9);
    float *C0 = gcopy(C, nc);
    double *ref = dbuf((size_t)M * N);
    gemm_ref(ta, tb, M, N, K, A, lda, B, ldb, C0, ldc, accumulate, ref);
    gemm_f32_on(path, ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
    double worst = 0, tol = kc_rtol_f32((size_t)K + 1);
    bool pad_kept = kc_guards_intact(C, nc);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double r = ref[(size_t)i * N + j], d = fabs(C[(size_t)i * ldc + j] - r) / (tol + tol * fabs(r));
            if (!(d <= worst)) worst = d;  /* NaN counts as the worst */
        }
        for (int j = N; j < ldc; j++) pad_kept &= C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
    }
    kc_report(k, worst <= 1, fmt("%s: vs reference (worst |got-ref| / (atol + rtol |ref|) = %.3g)", tag, worst), 0);
    kc_report(k, pad_kept, fmt("%s: padding between rows and canaries untouched", tag), 0);
    pool_free();
}

/* Which path: a BLAS that names kernels below the CPU's vector width is not trusted. */
static void test_gemm_choice(kc *k)
{
    const char *core = blas_core(), *forced = getenv("NEBULA_GEMM");
    char d[256];
    gemm_describe(d, sizeof d);
    printf("      fp32 GEMMs: %s\n", d);
    if (forced && forced[0] && strcmp(forced, "auto") != 0) {
        kc_report(k, !strcmp(gemm_path_name(gemm_default()), forced), fmt("NEBULA_GEMM=%s is the path taken", forced), 0);
    } else if (core && !strcmp(core, "Prescott")) { /* OPENBLAS_CORETYPE=Prescott (validation/tests.list) */
        kc_report(k, gemm_blas_level() == ISA_BASE, "OpenBLAS core Prescott is read as base kernels", 0);
        kc_report(k, gemm_default() == (isa_active() >= ISA_AVX2 ? GEMM_PATH_ONEDNN : GEMM_PATH_BLAS),
                  fmt("core Prescott at isa level %s: the GEMMs take %s", isa_name(isa_active()),
                      isa_active() >= ISA_AVX2 ? "oneDNN" : "the BLAS (no wider kernels to miss)"), 0);
        kc_report(k, gemm_default() == GEMM_PATH_BLAS || strstr(d, "core Prescott = base kernels, below this CPU's"),
                  "the start-up line says why", 0);
    } else {
        kc_report(k, gemm_default() == GEMM_PATH_BLAS || isa_active() > ISA_BASE,
                  "at isa level base the BLAS is never below the CPU", 0);
    }
}

/* The bf16 matmul (--precision bf16 on the CPU): its specification is the double
 * reference on the operands rounded to bf16 (bf16_from_f32), so the only error left is
 * fp32 summation (the same 4·eps·K bound as sgemm). A kernel that skipped the rounding
 * would be off by ~2^-9·sqrt(K)·|x·w|, 10-100x the bound at these sizes; one that
 * rounded its output to bf16 too would be off by 2^-9·|out|. */
static double *dcopy_bf16(const float *x, size_t n)
{
    double *p = dbuf(n);
    for (size_t i = 0; i < n; i++) p[i] = f32_from_bf16(bf16_from_f32(x[i]));
    return p;
}

static void test_matmul_bf16(kc *k, int BT, int C, int OC, matmul_layout layout, int with_bias)
{
    char tag[128];
    snprintf(tag, sizeof tag, "matmul bf16 %s BT=%d C=%d OC=%d%s", layout == MATMUL_LAYOUT_OUT_IN ? "out_in" : "in_out",
             BT, C, OC, with_bias ? "" : " bias=NULL");
    size_t ni = (size_t)BT * C, nw = (size_t)C * OC, no = (size_t)BT * OC;
    float *inp = grand(k, ni, -1, 1), *w = grand(k, nw, -1, 1), *R = grand(k, no, -1, 1);
    float *bias = with_bias ? grand(k, (size_t)OC, -1, 1) : NULL;
    double *inp_d = dcopy_bf16(inp, ni), *w_d = dcopy_bf16(w, nw), *R_d = dcopy_bf16(R, no);
    double *bias_d = with_bias ? dcopy(bias, (size_t)OC) : NULL; /* the bias stays fp32 */

    float *out = grand(k, no, -9, 9);
    double *out_d = dbuf(no);
    matmul_forward_bf16(out, inp, w, bias, BT, C, OC, layout);
    matmul_forward_ref(out_d, inp_d, w_d, bias_d, BT, C, OC, layout);
    double tol = kc_rtol_f32((size_t)C + 1);
    check_f(k, out, out_d, no, tol, tol, fmt("%s: forward vs reference on bf16-rounded operands", tag));

    /* backward onto random initial gradients: it adds */
    double *dinp_d = dbuf(ni), *dw_d = dbuf(nw), *db_d = dbuf((size_t)OC);
    matmul_backward_ref(dinp_d, dw_d, db_d, R_d, inp_d, w_d, BT, C, OC, layout);
    if (with_bias) { /* dbias sums the fp32 dout */
        memset(db_d, 0, (size_t)OC * sizeof *db_d);
        double *Rf = dcopy(R, no);
        matmul_backward_ref(NULL, NULL, db_d, Rf, inp_d, w_d, BT, C, OC, layout);
    }
    float *dinp = grand(k, ni, -1, 1), *dw = grand(k, nw, -1, 1), *db = grand(k, (size_t)OC, -1, 1);
    for (size_t i = 0; i < ni; i++) dinp_d[i] += dinp[i];
    for (size_t i = 0; i < nw; i++) dw_d[i] += dw[i];
    for (int i = 0; i < OC; i++) db_d[i] += db[i];
    matmul_backward_bf16(dinp, dw, with_bias ? db : NULL, R, inp, w, BT, C, OC, layout);
    double ti = kc_rtol_f32((size_t)OC + 1), tw = kc_rtol_f32((size_t)BT + 1);
    check_f(k, dinp, dinp_d, ni, ti, ti, fmt("%s: dinp (added) vs reference", tag));
    check_f(k, dw, dw_d, nw, tw, tw, fmt("%s: dweight (added) vs reference", tag));
    if (with_bias) check_f(k, db, db_d, (size_t)OC, tw, tw, fmt("%s: dbias (added) vs reference", tag));

    /* NULL gradients are skipped and leave the others as they would be */
    float *o_in = gbuf(ni), *o_w = gbuf(nw), *a_in = gbuf(ni), *a_w = gbuf(nw);
    matmul_backward_bf16(o_in, NULL, NULL, R, inp, w, BT, C, OC, layout);
    matmul_backward_bf16(NULL, o_w, NULL, R, inp, w, BT, C, OC, layout);
    matmul_backward_bf16(a_in, a_w, NULL, R, inp, w, BT, C, OC, layout);
    bool same = memcmp(o_in, a_in, ni * sizeof(float)) == 0 && memcmp(o_w, a_w, nw * sizeof(float)) == 0 &&
                kc_guards_intact(o_in, ni) && kc_guards_intact(o_w, nw);
    kc_report(k, same, fmt("%s: NULL gradients skipped, the others bit-identical", tag), 0);
    /* the backward reuses its forward's bf16 copy of the weight; a weight no forward saw
     * is rounded on the spot, to the same bits */
    matmul_bf16_release();  /* no copy left, whatever address w2 gets */
    float *w2 = gcopy(w, nw), *n_in = gbuf(ni);
    matmul_backward_bf16(n_in, NULL, NULL, R, inp, w2, BT, C, OC, layout);
    kc_report(k, memcmp(n_in, a_in, ni * sizeof(float)) == 0,
              fmt("%s: dinp with a weight no forward rounded is bit-identical", tag), 0);
    pool_free();
}

/* ---- layernorm ---- */

#define LN_EPS 1e-5

typedef struct ln_ctx {
    const double *inp, *w, *b, *R; /* (BT, C), (C), (C), (BT, C) */
    double *out;                   /* (BT, C) scratch */
    int BT, C;
} ln_ctx;

static double ln_loss(void *p)
{
    ln_ctx *l = p;
    layernorm_forward_ref(l->out, NULL, NULL, l->inp, l->w, l->b, l->BT, l->C, LN_EPS);
    return dot(l->out, l->R, (size_t)l->BT * l->C);
}

static void test_layernorm(kc *k, int BT, int C, int numeric)
{
    char tag[64];
    snprintf(tag, sizeof tag, "layernorm BT=%d C=%d", BT, C);
    size_t n = (size_t)BT * C, nc = (size_t)C, nr = (size_t)BT;
    float *inp = grand(k, n, -2, 3), *w = grand(k, nc, 0.5f, 1.5f), *b = grand(k, nc, -1, 1), *R = grand(k, n, -1, 1);
    double *inp_d = dcopy(inp, n), *w_d = dcopy(w, nc), *b_d = dcopy(b, nc), *R_d = dcopy(R, n);

    /* (a) mean and variance reduce over C; |x| <= 3 */
    float *out = gbuf(n), *mean = gbuf(nr), *rstd = gbuf(nr);
    double *out_d = dbuf(n), *mean_d = dbuf(nr), *rstd_d = dbuf(nr);
    layernorm_forward(out, mean, rstd, inp, w, b, BT, C, (float)LN_EPS);
    layernorm_forward_ref(out_d, mean_d, rstd_d, inp_d, w_d, b_d, BT, C, LN_EPS);
    double tol = kc_rtol_f32(nc);
    check_f(k, out, out_d, n, tol, tol, fmt("%s: forward vs reference", tag));
    check_f(k, mean, mean_d, nr, tol, tol, fmt("%s: mean vs reference", tag));
    check_f(k, rstd, rstd_d, nr, tol, tol, fmt("%s: rstd vs reference", tag));

    /* (b) */
    double *dinp_d = dbuf(n), *dw_d = dbuf(nc), *db_d = dbuf(nc);
    layernorm_backward_ref(dinp_d, dw_d, db_d, R_d, inp_d, w_d, mean_d, rstd_d, BT, C);
    if (numeric) {
        ln_ctx l = { inp_d, w_d, b_d, R_d, dbuf(n), BT, C };
        check_grad(k, inp_d, n, ln_loss, &l, dinp_d, fmt("%s: reference dinp vs central differences", tag));
        check_grad(k, w_d, nc, ln_loss, &l, dw_d, fmt("%s: reference dweight vs central differences", tag));
        check_grad(k, b_d, nc, ln_loss, &l, db_d, fmt("%s: reference dbias vs central differences", tag));
    }

    /* (c) dinp reduces over C; dweight over BT rows of terms that carry the C error */
    float *dinp = gbuf(n), *dw = gbuf(nc), *db = gbuf(nc);
    layernorm_backward(dinp, dw, db, R, inp, w, mean, rstd, BT, C);
    check_f(k, dinp, dinp_d, n, tol, tol, fmt("%s: dinp vs reference", tag));
    double tol_w = kc_rtol_f32(nr + nc);
    check_f(k, dw, dw_d, nc, tol_w, tol_w, fmt("%s: dweight vs reference", tag));
    check_f(k, db, db_d, nc, tol_w, tol_w, fmt("%s: dbias vs reference", tag));

    /* (d) */
    float *i_in = grand(k, n, -1, 1), *i_w = grand(k, nc, -1, 1), *i_b = grand(k, nc, -1, 1);
    float *a_in = gcopy(i_in, n), *a_w = gcopy(i_w, nc), *a_b = gcopy(i_b, nc);
    layernorm_backward(a_in, a_w, a_b, R, inp, w, mean, rstd, BT, C);
    check_adds(k, a_in, dinp, i_in, n, 0, ONE_ROUNDING, fmt("%s: dinp adds", tag));
    check_adds(k, a_w, dw, i_w, nc, 0, ONE_ROUNDING, fmt("%s: dweight adds", tag));
    check_adds(k, a_b, db, i_b, nc, 0, ONE_ROUNDING, fmt("%s: dbias adds", tag));
    pool_free();
}

/* ---- gelu ---- */

typedef void (*gelu_fwd_fn)(float *, const float *, size_t);
typedef void (*gelu_bwd_fn)(float *, const float *, const float *, size_t);
typedef void (*gelu_fwd_ref_fn)(double *, const double *, size_t);
typedef void (*gelu_bwd_ref_fn)(double *, const double *, const double *, size_t);

typedef struct gelu_ctx {
    gelu_fwd_ref_fn fwd;
    const double *inp, *R; /* (N) */
    double *out;           /* (N) scratch */
    size_t N;
} gelu_ctx;

static double gelu_loss(void *p)
{
    gelu_ctx *g = p;
    g->fwd(g->out, g->inp, g->N);
    return dot(g->out, g->R, g->N);
}

static void test_gelu(kc *k, const char *name, gelu_fwd_fn fwd, gelu_bwd_fn bwd, gelu_fwd_ref_fn fwd_ref,
                      gelu_bwd_ref_fn bwd_ref, size_t N, float range, int numeric)
{
    char tag[64];
    snprintf(tag, sizeof tag, "gelu_%s N=%zu x in [-%g, %g]", name, N, range, range);
    float *inp = grand(k, N, -range, range), *R = grand(k, N, -1, 1);
    double *inp_d = dcopy(inp, N), *R_d = dcopy(R, N);

    /* (a) elementwise, but exp/erfc amplify the rounding of their argument by up
     * to |2u| ~ 17 at |x| = 5: rtol 64 eps; atol only for the values below 1e-8
     * (beyond |x| = 5 they are all below it: the tails check finiteness and sign) */
    float *out = gbuf(N);
    double *out_d = dbuf(N);
    fwd(out, inp, N);
    fwd_ref(out_d, inp_d, N);
    check_f(k, out, out_d, N, 1e-8, kc_rtol_f32(16), fmt("%s: forward vs reference", tag));

    /* (b) */
    double *dinp_d = dbuf(N);
    bwd_ref(dinp_d, inp_d, R_d, N);
    if (numeric) {
        gelu_ctx g = { fwd_ref, inp_d, R_d, dbuf(N), N };
        check_grad(k, inp_d, N, gelu_loss, &g, dinp_d, fmt("%s: reference dinp vs central differences", tag));
    }

    /* (c) gelu' is a difference of O(1) terms where it crosses zero: atol as rtol */
    float *dinp = gbuf(N);
    bwd(dinp, inp, R, N);
    check_f(k, dinp, dinp_d, N, kc_rtol_f32(16), kc_rtol_f32(16), fmt("%s: dinp vs reference", tag));

    /* (d) */
    float *init = grand(k, N, -1, 1), *acc = gcopy(init, N);
    bwd(acc, inp, R, N);
    check_adds(k, acc, dinp, init, N, 0, ONE_ROUNDING, fmt("%s: dinp adds", tag));
    pool_free();
}

/* vmath.h's exp against libm's double over [-87, 87] (relative error, in float eps)
 * and at its edges: exactly 0 below -87 and at -inf, finite above 87, NaN kept. */
static void test_vmath(kc *k)
{
    double worst = 0;
    for (float x = -87.0f; x <= 87.0f; x += 0.00731f) {
        double e = exp((double)x), r = fabs(((double)vm_expf(x) - e) / e);
        worst = r > worst ? r : worst;
    }
    kc_report(k, worst <= 4 * FLT_EPSILON, "vm_expf within 4 eps of exp on [-87, 87]", worst / FLT_EPSILON);
    bool edges = vm_expf(-87.5f) == 0.0f && vm_expf(-INFINITY) == 0.0f && vm_expf(0.0f) == 1.0f &&
                 isfinite(vm_expf(100.0f)) && vm_expf(INFINITY) > 1e37f && isnan(vm_expf(NAN)) &&
                 isnan(vm_expf(-NAN));
    kc_report(k, edges, "vm_expf: 0 below -87 and at -inf, 1 at 0, finite above 87, NaN for NaN", 0);
    /* erfc(z) ~ exp(-z^2): the rounding of -z^2 (z^2 eps/2) carries into the result */
    worst = 0;
    for (float z = -9.0f; z <= 9.0f; z += 0.0013f) {
        double e = erfc((double)z);
        if (e > 1e-30) worst = fmax(worst, fabs(((double)vm_erfcf(z) - e) / e) / (8 + 2.0 * z * z));
    }
    kc_report(k, worst <= FLT_EPSILON, "vm_erfcf within (8 + 2 z^2) eps of erfc on [-9, 9]", worst / FLT_EPSILON);
}

/* GELU is element-wise and nothing is contracted (-ffp-contract=off): every vector-level
 * build the machine runs gives the base build's bits, NaN, infinities and the tails
 * included (isa_variant.h). */
static void test_gelu_variants(kc *k)
{
#if ISA_HAS_VARIANTS
    const size_t N = 40011; /* above the parallel threshold, not a multiple of 16 */
    float *x = grand(k, N, -12, 12), *g = grand(k, N, -1, 1);
    const float special[] = { NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f, 90.0f, -90.0f, 1e30f, -1e30f };
    memcpy(x, special, sizeof special);
    typedef struct { const char *name; isa_level need; gelu_fwd_fn tf, ef; gelu_bwd_fn tb, eb; } build;
    const build b[] = {
        { "base", ISA_BASE, gelu_tanh_forward_base, gelu_erf_forward_base, gelu_tanh_backward_base, gelu_erf_backward_base },
        { "avx2", ISA_AVX2, gelu_tanh_forward_avx2, gelu_erf_forward_avx2, gelu_tanh_backward_avx2, gelu_erf_backward_avx2 },
        { "avx512", ISA_AVX512, gelu_tanh_forward_avx512, gelu_erf_forward_avx512, gelu_tanh_backward_avx512,
          gelu_erf_backward_avx512 },
    };
    float *out[3][4];
    for (int v = 0; v < 3; v++) {
        if (isa_machine() < b[v].need) {
            printf("SKIP  gelu %s build: the machine runs %s at most\n", b[v].name, isa_name(isa_machine()));
            continue;
        }
        for (int j = 0; j < 4; j++) out[v][j] = gbuf(N);
        b[v].tf(out[v][0], x, N), b[v].ef(out[v][1], x, N), b[v].tb(out[v][2], x, g, N), b[v].eb(out[v][3], x, g, N);
        if (v == 0) continue;
        bool same = true;
        for (int j = 0; j < 4; j++) same &= memcmp(out[v][j], out[0][j], N * sizeof(float)) == 0;
        kc_report(k, same, fmt("gelu tanh and erf, forward and backward: the %s build gives the base build's bits",
                               b[v].name), 0);
    }
    pool_free();
#else
    (void)k;
    printf("SKIP  gelu builds per vector level: none on this architecture\n");
#endif
}

/* ---- embedding ---- */

typedef struct emb_ctx {
    const int32_t *ids;        /* (N) */
    const double *table, *R;   /* (V, C), (N, C) */
    double *out;               /* (N, C) scratch */
    int N, C;
} emb_ctx;

static double emb_loss(void *p)
{
    emb_ctx *e = p;
    embedding_forward_ref(e->out, e->ids, e->table, e->N, e->C, 0);
    return dot(e->out, e->R, (size_t)e->N * e->C);
}

static int32_t *rand_ids(kc *k, int N, int V)
{
    int32_t *ids = pbuf((size_t)N * sizeof *ids);
    for (int n = 0; n < N; n++) ids[n] = (int32_t)rng_below(&k->r, (uint32_t)V);
    return ids;
}

static void test_embedding(kc *k, int N, int V, int C, int numeric)
{
    char tag[64];
    snprintf(tag, sizeof tag, "embedding N=%d V=%d C=%d", N, V, C);
    size_t no = (size_t)N * C, nt = (size_t)V * C;
    int32_t *ids = rand_ids(k, N, V);
    float *table = grand(k, nt, -1, 1), *R = grand(k, no, -1, 1);
    double *table_d = dcopy(table, nt), *R_d = dcopy(R, no);

    /* (a) a copy is exact; accumulate = 1 is one rounding per element */
    float *out = grand(k, no, -9, 9);
    double *out_d = dbuf(no);
    embedding_forward(out, ids, table, N, C, 0);
    embedding_forward_ref(out_d, ids, table_d, N, C, 0);
    check_f(k, out, out_d, no, 1e-30, 0, fmt("%s: forward vs reference (exact)", tag));
    float *acc = grand(k, no, -1, 1);
    double *acc_d = dcopy(acc, no);
    embedding_forward(acc, ids, table, N, C, 1);
    embedding_forward_ref(acc_d, ids, table_d, N, C, 1);
    check_f(k, acc, acc_d, no, 0, ONE_ROUNDING, fmt("%s: forward accumulate vs reference", tag));

    /* (b) */
    double *dt_d = dbuf(nt);
    embedding_backward_ref(dt_d, R_d, ids, N, C);
    if (numeric) {
        emb_ctx e = { ids, table_d, R_d, dbuf(no), N, C };
        check_grad(k, table_d, nt, emb_loss, &e, dt_d, fmt("%s: reference dtable vs central differences", tag));
    }

    /* (c) a row of dtable sums the dout rows of its id: at most N terms */
    float *dt = gbuf(nt);
    embedding_backward(dt, R, ids, N, C);
    check_f(k, dt, dt_d, nt, kc_rtol_f32((size_t)N), kc_rtol_f32((size_t)N), fmt("%s: dtable vs reference", tag));

    /* (d) repeated ids add into the initial value one by one: derived tolerance */
    float *init = grand(k, nt, -1, 1), *a = gcopy(init, nt);
    embedding_backward(a, R, ids, N, C);
    check_adds(k, a, dt, init, nt, kc_rtol_f32((size_t)N + 1), kc_rtol_f32((size_t)N + 1),
               fmt("%s: dtable adds", tag));
    pool_free();
}

/* An id outside [0, V) must die (abort): a negative id in either kernel, one
 * at or above V in embedding_check_ids. kind: 0 forward, 1 backward, 2 check. */
static void test_embedding_bad_id(kc *k, int32_t bad, int kind)
{
    static const char *names[3] = { "embedding_forward", "embedding_backward", "embedding_check_ids" };
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        int32_t ids[3] = { 0, bad, 1 };
        float table[4 * 2] = { 0 }, out[3 * 2] = { 0 };
        if (kind == 0) embedding_forward(out, ids, table, 3, 2, 0);
        else if (kind == 1) embedding_backward(table, out, ids, 3, 2);
        else embedding_check_ids(ids, 3, 4);
        _exit(0); /* returned: the bad id went through */
    }
    int st = 0;
    bool died = pid > 0 && waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
    kc_report(k, died, fmt("%s with id %d (V = 4) dies (SIGABRT from die())", names[kind], (int)bad), 0);
}

/* In-range ids pass the check (it returns). */
static void test_embedding_ids_ok(kc *k)
{
    int32_t ids[4] = { 0, 3, 1, 2 };
    embedding_check_ids(ids, 4, 4);
    kc_report(k, true, "embedding_check_ids accepts ids in [0, V)", 0);
}

/* ---- residual ---- */

typedef struct res_ctx {
    const double *a, *b, *R; /* (N) */
    double *out;             /* (N) scratch */
    size_t N;
} res_ctx;

static double res_loss(void *p)
{
    res_ctx *r = p;
    residual_forward_ref(r->out, r->a, r->b, r->N);
    return dot(r->out, r->R, r->N);
}

static void test_residual(kc *k, size_t N, int numeric)
{
    char tag[64];
    snprintf(tag, sizeof tag, "residual N=%zu", N);
    float *a = grand(k, N, -1, 1), *b = grand(k, N, -1, 1), *R = grand(k, N, -1, 1);
    double *a_d = dcopy(a, N), *b_d = dcopy(b, N), *R_d = dcopy(R, N);

    float *out = gbuf(N);
    double *out_d = dbuf(N);
    residual_forward(out, a, b, N);
    residual_forward_ref(out_d, a_d, b_d, N);
    check_f(k, out, out_d, N, 0, ONE_ROUNDING, fmt("%s: forward vs reference", tag));

    double *da_d = dbuf(N), *db_d = dbuf(N);
    residual_backward_ref(da_d, db_d, R_d, N);
    if (numeric) {
        res_ctx r = { a_d, b_d, R_d, dbuf(N), N };
        check_grad(k, a_d, N, res_loss, &r, da_d, fmt("%s: reference da vs central differences", tag));
        check_grad(k, b_d, N, res_loss, &r, db_d, fmt("%s: reference db vs central differences", tag));
    }

    float *da = gbuf(N), *db = gbuf(N);
    residual_backward(da, db, R, N);
    check_f(k, da, da_d, N, 0, ONE_ROUNDING, fmt("%s: da vs reference", tag));
    check_f(k, db, db_d, N, 0, ONE_ROUNDING, fmt("%s: db vs reference", tag));

    float *i_a = grand(k, N, -1, 1), *i_b = grand(k, N, -1, 1);
    float *x_a = gcopy(i_a, N), *x_b = gcopy(i_b, N), *o_a = gcopy(i_a, N), *o_b = gcopy(i_b, N);
    residual_backward(x_a, x_b, R, N);
    check_adds(k, x_a, da, i_a, N, 0, ONE_ROUNDING, fmt("%s: da adds", tag));
    check_adds(k, x_b, db, i_b, N, 0, ONE_ROUNDING, fmt("%s: db adds", tag));
    residual_backward(o_a, NULL, R, N);
    residual_backward(NULL, o_b, R, N);
    residual_backward(NULL, NULL, R, N);
    bool same = memcmp(o_a, x_a, N * sizeof(float)) == 0 && memcmp(o_b, x_b, N * sizeof(float)) == 0 &&
                kc_guards_intact(o_a, N) && kc_guards_intact(o_b, N);
    kc_report(k, same, fmt("%s: NULL da or db skipped, the other bit-identical", tag), 0);
    pool_free();
}

/* ---- (e) thread-count determinism ---- */

static void test_determinism(kc *k)
{
    const int BT = 300, C = 200, N = 5000, V = 23, EC = 64; /* above both kernels' parallel thresholds */
    size_t n = (size_t)BT * C, ne = (size_t)N * EC, nt = (size_t)V * EC;
    float *inp = grand(k, n, -2, 3), *w = grand(k, (size_t)C, 0.5f, 1.5f), *b = grand(k, (size_t)C, -1, 1);
    float *dout = grand(k, n, -1, 1), *i_in = grand(k, n, -1, 1), *i_w = grand(k, (size_t)C, -1, 1);
    float *i_b = grand(k, (size_t)C, -1, 1);
    int32_t *ids = rand_ids(k, N, V);
    float *table = grand(k, nt, -1, 1), *edout = grand(k, ne, -1, 1), *i_t = grand(k, nt, -1, 1);
    static const int threads[3] = { 1, 2, 3 };
    float *ln[3][6], *em[3][2]; /* per run: out, mean, rstd, dinp, dweight, dbias / out, dtable */
    int keep = omp_get_max_threads();
    for (int r = 0; r < 3; r++) {
        omp_set_num_threads(threads[r]);
        ln[r][0] = gbuf(n), ln[r][1] = gbuf((size_t)BT), ln[r][2] = gbuf((size_t)BT);
        ln[r][3] = gcopy(i_in, n), ln[r][4] = gcopy(i_w, (size_t)C), ln[r][5] = gcopy(i_b, (size_t)C);
        layernorm_forward(ln[r][0], ln[r][1], ln[r][2], inp, w, b, BT, C, (float)LN_EPS);
        layernorm_backward(ln[r][3], ln[r][4], ln[r][5], dout, inp, w, ln[r][1], ln[r][2], BT, C);
        em[r][0] = gbuf(ne), em[r][1] = gcopy(i_t, nt);
        embedding_forward(em[r][0], ids, table, N, EC, 0);
        embedding_backward(em[r][1], edout, ids, N, EC);
    }
    omp_set_num_threads(keep);
    const size_t ln_n[6] = { n, (size_t)BT, (size_t)BT, n, (size_t)C, (size_t)C }, em_n[2] = { ne, nt };
    bool ln_same = true, em_same = true;
    for (int r = 1; r < 3; r++) {
        for (int j = 0; j < 6; j++) ln_same &= memcmp(ln[r][j], ln[0][j], ln_n[j] * sizeof(float)) == 0;
        for (int j = 0; j < 2; j++) em_same &= memcmp(em[r][j], em[0][j], em_n[j] * sizeof(float)) == 0;
    }
    kc_report(k, ln_same, fmt("layernorm BT=%d C=%d forward and backward bit-identical for 1, 2, 3 threads", BT, C), 0);
    kc_report(k, em_same, fmt("embedding N=%d V=%d C=%d forward and backward bit-identical for 1, 2, 3 threads",
                              N, V, EC), 0);
    pool_free();
}

int main(void)
{
    kc k;
    kc_init(&k, 20240611);
    if (kc_isa_skip("")) return 77;

    /* BT, C, OC, numeric-gradient check (only where the O(n^2) cost is small) */
    /* BT = 1 takes the matrix-vector path (generation with a KV cache) */
    static const int mm[][4] = { { 7, 33, 65, 1 }, { 1, 1, 1, 1 }, { 1, 96, 130, 1 }, { 13, 128, 47, 0 }, { 300, 17, 260, 0 } };
    for (size_t s = 0; s < sizeof mm / sizeof mm[0]; s++)
        for (int layout = 0; layout < 2; layout++)
            for (int with_bias = 1; with_bias >= 0; with_bias--)
                test_matmul(&k, mm[s][0], mm[s][1], mm[s][2], (matmul_layout)layout, with_bias, mm[s][3]);
    test_gemm_choice(&k);
    static const int gs[][3] = { { 7, 33, 65 }, { 1, 1, 1 }, { 13, 128, 47 }, { 300, 17, 260 }, { 5, 4, 0 } };
    for (int path = 0; path < GEMM_PATHS; path++)
        for (size_t s = 0; s < sizeof gs / sizeof gs[0]; s++)
            for (int t = 0; t < 4; t++)
                for (int acc = 0; acc < 2; acc++)
                    test_gemm(&k, (gemm_path)path, gs[s][0], gs[s][1], gs[s][2], t & 1, t & 2, acc);
    /* bf16 needs oneDNN's bf16 kernels: AVX512-BF16 or AMX (device_open refuses it below) */
    if (isa_active() >= ISA_AVX512_BF16) {
        static const int mb[][3] = { { 7, 33, 65 }, { 1, 1, 1 }, { 64, 768, 200 }, { 300, 17, 260 } };
        for (size_t s = 0; s < sizeof mb / sizeof mb[0]; s++)
            for (int layout = 0; layout < 2; layout++)
                for (int with_bias = 1; with_bias >= 0; with_bias--)
                    test_matmul_bf16(&k, mb[s][0], mb[s][1], mb[s][2], (matmul_layout)layout, with_bias);
    } else {
        printf("SKIP  matmul bf16: isa level %s is below avx512_bf16\n", isa_name(isa_active()));
    }

    static const int ln[][3] = { { 7, 33, 1 }, { 1, 1, 1 }, { 3, 768, 1 }, { 260, 160, 0 } };
    for (size_t s = 0; s < sizeof ln / sizeof ln[0]; s++) test_layernorm(&k, ln[s][0], ln[s][1], ln[s][2]);

    /* N, |x| range, numeric-gradient check; the last is above the parallel threshold */
    static const struct { size_t N; float range; int numeric; } gn[] = {
        { 1, 5, 1 }, { 7, 5, 1 }, { 1000, 5, 1 }, { 1000, 40, 0 }, { 40011, 5, 0 } };
    for (size_t s = 0; s < sizeof gn / sizeof gn[0]; s++) {
        test_gelu(&k, "tanh", gelu_tanh_forward, gelu_tanh_backward, gelu_tanh_forward_ref, gelu_tanh_backward_ref,
                  gn[s].N, gn[s].range, gn[s].numeric);
        test_gelu(&k, "erf", gelu_erf_forward, gelu_erf_backward, gelu_erf_forward_ref, gelu_erf_backward_ref,
                  gn[s].N, gn[s].range, gn[s].numeric);
    }

    test_vmath(&k);
    test_gelu_variants(&k);

    static const int em[][4] = { { 5, 3, 7, 1 }, { 64, 11, 33, 1 }, { 3000, 50, 40, 0 } };
    for (size_t s = 0; s < sizeof em / sizeof em[0]; s++) test_embedding(&k, em[s][0], em[s][1], em[s][2], em[s][3]);
    test_embedding_bad_id(&k, -1, 0);
    test_embedding_bad_id(&k, -7, 1);
    test_embedding_bad_id(&k, 4, 2);
    test_embedding_bad_id(&k, -1, 2);
    test_embedding_ids_ok(&k);

    static const size_t rn[][2] = { { 1, 1 }, { 7, 1 }, { 1000, 1 }, { 100003, 0 } };
    for (size_t s = 0; s < sizeof rn / sizeof rn[0]; s++) test_residual(&k, rn[s][0], (int)rn[s][1]);

    test_determinism(&k);

    printf("%s - %d check(s) failed\n", k.failures ? "FAIL" : "ok", k.failures);
    return k.failures ? 1 : 0;
}
