/* test_nano_ops — libnebula-nano's light operators (libcore/nano/nano_ops*.c) against
 * plain double-precision reference loops written here, one "ok/FAIL - what" line per
 * check; the exit status counts the failures.
 *
 * The one design decision: every tolerance is derived from the operation, in units of
 * U = 2^-24 (float's unit roundoff): a correctly rounded op may be U·|ref| off, a kernel
 * of k roundings k·U, and where the float input itself feeds an exponent (softmax's
 * x - max, GELU-tanh's polynomial) the error that rounding propagates, U·|exponent|. Every
 * output lies between canaries that must survive. The program uses check.h's line format
 * but carries its own few helpers: check.h pulls in kernels/cpu/isa.h and base/rng.c,
 * which the standalone nano build (-Ilibcore -Ivalidation, libc and libm only) lacks. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nano/nano_ops.h"

#define U (0x1p-24)
#define GUARD 64 /* canary bytes each side */

static int failures;

__attribute__((format(printf, 2, 3))) static int check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    return ok ? 1 : (failures++, 0);
}

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t rs = 0x9e3779b97f4a7c15ull; /* xorshift64, fixed seed */
static double urand(void) /* [0, 1) */
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) * 0x1p-53;
}
static float frand(float lo, float hi) { return (float)(lo + (hi - lo) * urand()); }
static void fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = frand(lo, hi);
}

/* n bytes between GUARD canary bytes on each side */
static void *galloc(size_t n)
{
    unsigned char *p = malloc(n + 2 * GUARD);
    memset(p, 0xA5, n + 2 * GUARD);
    return p + GUARD;
}
static int gintact(const void *q, size_t n)
{
    const unsigned char *p = (const unsigned char *)q - GUARD;
    for (size_t i = 0; i < GUARD; i++)
        if (p[i] != 0xA5 || p[GUARD + n + i] != 0xA5) return 0;
    return 1;
}
static void gfree(void *q) { free((unsigned char *)q - GUARD); }
/* |got - ref| <= tol[i] everywhere (tol NULL: atol + rtol|ref|); reports the worst ratio. */
static int close_to(const float *got, const double *ref, const double *tol, size_t n, double atol, double rtol,
                    const char *what)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double lim = tol ? tol[i] : atol + rtol * fabs(ref[i]);
        double e = fabs((double)got[i] - ref[i]);
        double r = (isnan(ref[i]) && isnan(got[i])) || (double)got[i] == ref[i] ? 0 : isfinite(e) ? e / lim : INFINITY;
        if (!(r <= worst)) { worst = r; at = i; }
    }
    if (!(worst <= 1)) printf("    worst at %zu: got %.9g ref %.9g\n", at, (double)got[at], ref[at]);
    return check(worst <= 1, "%s (worst %.3g of tolerance)", what, worst);
}

static nano_shape shp(int nd, const int64_t *d)
{
    nano_shape s = {0};
    s.ndim = nd;
    for (int i = 0; i < nd; i++) s.d[i] = d[i];
    return s;
}
static int64_t numel(const nano_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->d[i];
    return n;
}
static void shape_str(const nano_shape *s, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < s->ndim && o < len; i++) o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)s->d[i]);
    if (o < len) snprintf(buf + o, len - o, ")");
}
/* Offset in operand s (right-aligned, broadcast) of output index idx (ys). */
static int64_t bcast_off(const nano_shape *s, const nano_shape *ys, const int64_t *idx)
{
    int64_t off = 0, st = 1;
    for (int i = s->ndim - 1; i >= 0; i--) {
        int j = i + ys->ndim - s->ndim;
        off += (s->d[i] == 1 ? 0 : idx[j]) * st;
        st *= s->d[i];
    }
    return off;
}
static void unravel(const nano_shape *s, int64_t k, int64_t *idx)
{
    for (int i = s->ndim - 1; i >= 0; i--) {
        idx[i] = k % s->d[i];
        k /= s->d[i];
    }
}

/* ---- activations ------------------------------------------------------------------ */

static double gelu_d(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double gelu_tanh_d(double x)
{
    /* 0.5x(1 + tanh(u)) = x / (1 + exp(-2u)): the same function without the cancellation */
    return x / (1 + exp(-2 * sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_acts(void)
{
    enum { N = 40011 }; /* past the parallel threshold, not a multiple of any vector */
    float *x = malloc(N * sizeof *x), *y = galloc(N * sizeof *y), *orty = malloc(N * sizeof *orty);
    double *ref = malloc(N * sizeof *ref), *tol = malloc(N * sizeof *tol);
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 0.5f, -0.5f, 0.625f, -0.625f, 1.0f, -1.0f,
                             5.0f, -5.0f, 9.0f, -9.0f, 13.0f, -13.0f, 30.0f, -30.0f, 100.0f, -100.0f, INFINITY,
                             -INFINITY};
    size_t ns = sizeof special / sizeof *special;
    for (int rangei = 0; rangei < 2; rangei++) {
        float r = rangei ? 14.0f : 3.0f;
        for (size_t i = 0; i < N; i++) x[i] = i < ns ? special[i] : frand(-r, r);
        for (int nt = 1; nt <= 2; nt++) {
            const struct { int act; const char *name; } acts[] = {
                {NANO_ACT_RELU, "relu"}, {NANO_ACT_CLIP, "clip(-1,6)"}, {NANO_ACT_GELU, "gelu"},
                {NANO_ACT_GELU_TANH, "gelu_tanh"}, {NANO_ACT_SIGMOID, "sigmoid"}, {NANO_ACT_TANH, "tanh"},
                {100, "erf"}, {101, "sqrt"}};
            for (size_t a = 0; a < sizeof acts / sizeof *acts; a++) {
                int act = acts[a].act;
                for (size_t i = 0; i < N; i++) {
                    double v = x[i];
                    switch (act) {
                    case NANO_ACT_RELU: ref[i] = v < 0 ? 0 : v; tol[i] = 0; break;
                    case NANO_ACT_CLIP: ref[i] = v < -1 ? -1 : v > 6 ? 6 : v; tol[i] = 0; break;
                    case NANO_ACT_GELU: /* exp, the erfc fit, a few roundings */
                        ref[i] = isinf(v) && v < 0 ? NAN : isinf(v) ? v : gelu_d(v);
                        tol[i] = 8 * U * fabs(ref[i]) + 0x1p-149;
                        break;
                    case NANO_ACT_GELU_TANH: { /* exp's argument v' = 2√(2/π)(x + .044715x³) is rounded */
                        double vv = 2 * sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
                        ref[i] = isinf(v) && v < 0 ? NAN : isinf(v) ? v : gelu_tanh_d(v);
                        tol[i] = (8 + 3 * fabs(vv)) * U * fabs(ref[i]) + 0x1p-149;
                        break;
                    }
                    case NANO_ACT_SIGMOID: ref[i] = 1 / (1 + exp(-v)); tol[i] = 8 * U * ref[i] + 0x1p-149; break;
                    case NANO_ACT_TANH: ref[i] = tanh(v); tol[i] = 8 * U * fabs(ref[i]) + 0x1p-149; break;
                    case 100: ref[i] = erf(v); tol[i] = 8 * U * fabs(ref[i]) + 0x1p-149; break;
                    default: ref[i] = sqrt(v); tol[i] = U * ref[i]; break;
                    }
                }
                memset(y, 0, N * sizeof *y);
                if (act == 100) nano_erf(x, y, N, nt);
                else if (act == 101) nano_sqrt(x, y, N, nt);
                else nano_act_apply(act, -1.0f, 6.0f, x, y, N, nt);
                char what[96];
                snprintf(what, sizeof what, "%s on [-%g,%g] + specials, %d thread(s)", acts[a].name, r, r, nt);
                close_to(y, ref, tol, N, 0, 0, what);
                check(gintact(y, N * sizeof *y), "%s: canaries intact", what);
                if (act == NANO_ACT_GELU && nt == 1) { /* ONNX Runtime's formula in float */
                    double d = 0, s = 0;
                    for (size_t i = ns; i < N; i++) {
                        orty[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f));
                        d += ((double)y[i] - orty[i]) * ((double)y[i] - orty[i]);
                        s += (double)orty[i] * orty[i];
                    }
                    check(sqrt(d / s) <= 1e-5, "gelu on [-%g,%g] matches the float 0.5x(1+erf(x/sqrt2)) (rel %.2g)",
                          r, r, sqrt(d / s));
                }
            }
        }
    }
    /* in place */
    fill(x, 1000, -4, 4);
    memcpy(y, x, 1000 * sizeof *y);
    nano_act_apply(NANO_ACT_GELU, 0, 0, y, y, 1000, 1);
    for (int i = 0; i < 1000; i++) { ref[i] = gelu_d(x[i]); tol[i] = 8 * U * fabs(ref[i]) + 0x1p-149; }
    close_to(y, ref, tol, 1000, 0, 0, "gelu in place (x == y)");
    free(x); gfree(y); free(orty); free(ref); free(tol);
}

/* ---- binary, where ---------------------------------------------------------------- */

static double binop_d(int op, double a, double b)
{
    switch (op) {
    case NANO_OP_ADD: return a + b;
    case NANO_OP_SUB: return a - b;
    case NANO_OP_MUL: return a * b;
    case NANO_OP_DIV: return a / b;
    default: return pow(a, b);
    }
}

typedef struct bcase { int na; int64_t a[6]; int nb; int64_t b[6]; } bcase;

static void out_shape(const nano_shape *a, const nano_shape *b, nano_shape *y)
{
    y->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < y->ndim; i++) {
        int ia = i - (y->ndim - a->ndim), ib = i - (y->ndim - b->ndim);
        int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
        y->d[i] = da == 1 ? db : da;
    }
}

static void test_binary(void)
{
    static const bcase cases[] = {
        {4, {2, 3, 4, 5}, 4, {2, 3, 4, 5}},          /* same shape */
        {2, {6, 37}, 1, {37}},                        /* bias add */
        {4, {2, 3, 4, 5}, 4, {1, 3, 1, 1}},          /* per channel */
        {4, {2, 3, 4, 5}, 3, {3, 1, 1}},
        {2, {3, 4}, 0, {0}},                          /* scalar b */
        {0, {0}, 2, {3, 4}},                          /* scalar a */
        {3, {3, 1, 5}, 3, {1, 4, 1}},                 /* both broadcast */
        {2, {7, 1}, 2, {1, 9}},                       /* outer product */
        {2, {7, 1}, 2, {7, 9}},                       /* per row */
        {1, {5}, 3, {2, 3, 5}},                       /* fewer dims */
        {3, {1, 1, 1}, 1, {1}},                       /* one element */
        {6, {2, 1, 3, 1, 2, 1}, 6, {1, 4, 1, 5, 1, 3}},
        {5, {1, 2, 1, 3, 1}, 4, {4, 1, 3, 7}},
        {3, {2, 3, 1}, 3, {2, 1, 17}},
        {3, {8, 64, 128}, 2, {64, 1}},                /* large: threads */
        {2, {3, 70001}, 2, {3, 70001}},               /* few long rows: column blocks */
        {2, {3, 70001}, 1, {70001}},
    };
    const char *names[] = {"", "", "", "", "", "", "", "", "", "", "", "add", "sub", "mul", "div", "pow"};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        nano_shape as = shp(cases[c].na, cases[c].a), bs = shp(cases[c].nb, cases[c].b), ys;
        out_shape(&as, &bs, &ys);
        int64_t na = numel(&as), nb = numel(&bs), ny = numel(&ys);
        float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4), *y = galloc((size_t)ny * 4);
        double *ref = malloc((size_t)ny * 8), *tol = malloc((size_t)ny * 8);
        char sa[64], sb[64];
        shape_str(&as, sa, sizeof sa);
        shape_str(&bs, sb, sizeof sb);
        for (int op = NANO_OP_ADD; op <= NANO_OP_POW; op++) {
            fill(a, (size_t)na, op == NANO_OP_POW ? 0.5f : -3, 3);
            fill(b, (size_t)nb, op == NANO_OP_POW ? -2.5f : -3, op == NANO_OP_POW ? 2.5f : 3);
            if (op == NANO_OP_DIV)
                for (int64_t i = 0; i < nb; i++) b[i] += b[i] < 0 ? -0.25f : 0.25f;
            for (int nt = 1; nt <= 2; nt++) {
                for (int64_t k = 0; k < ny; k++) {
                    int64_t idx[6];
                    unravel(&ys, k, idx);
                    ref[k] = binop_d(op, a[bcast_off(&as, &ys, idx)], b[bcast_off(&bs, &ys, idx)]);
                    tol[k] = (op == NANO_OP_POW ? 2 : 1) * U * fabs(ref[k]); /* one rounding; powf 1 ulp */
                }
                nano_binary(op, a, &as, b, &bs, y, &ys, NANO_ACT_NONE, 0, 0, nt);
                char what[160];
                snprintf(what, sizeof what, "%s %s %s, %d thread(s)", names[op], sa, sb, nt);
                close_to(y, ref, tol, (size_t)ny, 0, 0, what);
                check(gintact(y, (size_t)ny * 4), "%s: canaries intact", what);
                if (op == NANO_OP_MUL || op == NANO_OP_ADD) { /* fused activation on the rounded result */
                    int act = op == NANO_OP_ADD ? NANO_ACT_RELU : NANO_ACT_GELU;
                    for (int64_t k = 0; k < ny; k++) {
                        double v = (float)ref[k];
                        ref[k] = act == NANO_ACT_RELU ? (v < 0 ? 0 : v) : gelu_d(v);
                        tol[k] = act == NANO_ACT_RELU ? 0 : 8 * U * fabs(ref[k]) + 0x1p-149;
                    }
                    nano_binary(op, a, &as, b, &bs, y, &ys, act, 0, 0, nt);
                    snprintf(what, sizeof what, "%s %s %s + %s, %d thread(s)", names[op], sa, sb,
                             act == NANO_ACT_RELU ? "relu" : "gelu", nt);
                    close_to(y, ref, tol, (size_t)ny, 0, 0, what);
                }
            }
        }
        free(a); free(b); gfree(y); free(ref); free(tol);
    }
    /* Pow by a scalar 2: the x·x path */
    {
        int64_t d[2] = {5, 33};
        nano_shape as = shp(2, d), bs = shp(0, d);
        float a[165], two = 2.0f, *y = galloc(sizeof a);
        double ref[165];
        fill(a, 165, -10, 10);
        for (int i = 0; i < 165; i++) ref[i] = (double)a[i] * a[i];
        nano_binary(NANO_OP_POW, a, &as, &two, &bs, y, &as, NANO_ACT_NONE, 0, 0, 1);
        close_to(y, ref, NULL, 165, 0, U, "pow (5,33) by scalar 2");
        check(gintact(y, sizeof a), "pow by 2: canaries intact");
        gfree(y);
    }
}

static void test_where(void)
{
    static const int64_t cd[][4] = {{3, 2, 1, 4}, {3, 2, 3, 4}, {1, 4, 0, 0}, {2, 1, 1, 0}, {1, 1, 0, 0}};
    static const int64_t xd[][4] = {{2, 3, 1, 0}, {3, 2, 3, 4}, {3, 2, 3, 1}, {1, 4, 0, 0}, {3, 4, 1, 3}};
    static const int64_t zd[][4] = {{1, 1, 0, 0}, {3, 2, 3, 4}, {2, 1, 1, 0}, {3, 1, 1, 1}, {0, 0, 0, 0}};
    for (int c = 0; c < 5; c++) {
        nano_shape cs = shp((int)cd[c][0], cd[c] + 1), xs = shp((int)xd[c][0], xd[c] + 1);
        nano_shape zs = shp((int)zd[c][0], zd[c] + 1), t, ys;
        out_shape(&cs, &xs, &t);
        out_shape(&t, &zs, &ys);
        int64_t n = numel(&ys);
        uint8_t cond[64];
        float x[64], z[64], *y = galloc((size_t)n * 4);
        double ref[256];
        for (int i = 0; i < 64; i++) cond[i] = (uint8_t)(urand() < 0.5 ? 0 : 1 + (int)(urand() * 200));
        fill(x, 64, -5, 5);
        fill(z, 64, -5, 5);
        for (int64_t k = 0; k < n; k++) {
            int64_t idx[6];
            unravel(&ys, k, idx);
            ref[k] = cond[bcast_off(&cs, &ys, idx)] ? x[bcast_off(&xs, &ys, idx)] : z[bcast_off(&zs, &ys, idx)];
        }
        nano_where(cond, &cs, x, &xs, z, &zs, y, &ys, 2);
        char s1[48], s2[48], s3[48];
        shape_str(&cs, s1, sizeof s1);
        shape_str(&xs, s2, sizeof s2);
        shape_str(&zs, s3, sizeof s3);
        char what[160];
        snprintf(what, sizeof what, "where %s ? %s : %s", s1, s2, s3);
        close_to(y, ref, NULL, (size_t)n, 0, 0, what);
        check(gintact(y, (size_t)n * 4), "%s: canaries intact", what);
        gfree(y);
    }
}

/* ---- normalisation, softmax, reductions ------------------------------------------- */

static void test_norms(void)
{
    /* batch norm: y = (x - m)·s + b, s = scale/sqrt(var+eps): each term rounded a few times */
    static const int64_t bd[][5] = {{4, 2, 3, 4, 5}, {2, 5, 3, 0, 0}, {3, 1, 7, 9, 0}};
    for (int c = 0; c < 3; c++) {
        nano_shape xs = shp((int)bd[c][0], bd[c] + 1);
        int64_t n = numel(&xs), C = xs.d[1], inner = n / (xs.d[0] * C);
        float *x = malloc((size_t)n * 4), *y = galloc((size_t)n * 4), sc[8], bi[8], mu[8], va[8];
        double *ref = malloc((size_t)n * 8), *tol = malloc((size_t)n * 8);
        fill(x, (size_t)n, -4, 4);
        fill(sc, 8, -2, 2);
        fill(bi, 8, -1, 1);
        fill(mu, 8, -1, 1);
        fill(va, 8, 0.1f, 3);
        for (int64_t i = 0; i < n; i++) {
            int64_t ch = i / inner % C;
            double s = sc[ch] / sqrt((double)va[ch] + 1e-5f);
            ref[i] = ((double)x[i] - mu[ch]) * s + bi[ch];
            tol[i] = 4 * U * (fabs(((double)x[i] - mu[ch]) * s) + fabs(bi[ch]));
        }
        nano_batchnorm(x, &xs, sc, bi, mu, va, 1e-5f, y, 2);
        char s1[64], what[96];
        shape_str(&xs, s1, sizeof s1);
        snprintf(what, sizeof what, "batchnorm %s", s1);
        close_to(y, ref, tol, (size_t)n, 0, 0, what);
        check(gintact(y, (size_t)n * 4), "%s: canaries intact", what);
        free(x); gfree(y); free(ref); free(tol);
    }
    /* layer norm: mean and variance in double; (x - m)·r·scale + bias rounds 4 times */
    static const int64_t ld[][5] = {{3, 3, 7, 33, 0}, {3, 3, 7, 33, 0}, {2, 64, 768, 0, 0}, {3, 2, 5, 1, 0}, {2, 5, 1, 0, 0}};
    static const int lax[] = {2, 1, 1, 1, 1};
    for (int c = 0; c < 5; c++) {
        nano_shape xs = shp((int)ld[c][0], ld[c] + 1);
        int64_t n = numel(&xs), inner = 1;
        for (int i = lax[c]; i < xs.ndim; i++) inner *= xs.d[i];
        float *x = malloc((size_t)n * 4), *y = galloc((size_t)n * 4), *sc = malloc((size_t)inner * 4);
        float *bi = malloc((size_t)inner * 4);
        double *ref = malloc((size_t)n * 8), *tol = malloc((size_t)n * 8);
        fill(x, (size_t)n, -3, 5);
        fill(sc, (size_t)inner, -2, 2);
        fill(bi, (size_t)inner, -1, 1);
        int nobias = c == 1;
        for (int64_t r = 0; r < n / inner; r++) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < inner; i++) m += x[r * inner + i];
            m /= (double)inner;
            for (int64_t i = 0; i < inner; i++) v += (x[r * inner + i] - m) * (x[r * inner + i] - m);
            double rs = 1 / sqrt(v / (double)inner + 1e-5f);
            for (int64_t i = 0; i < inner; i++) {
                double xv = x[r * inner + i], b = nobias ? 0 : bi[i];
                ref[r * inner + i] = (xv - m) * rs * sc[i] + b;
                tol[r * inner + i] = 6 * U * ((fabs(xv) + fabs(m)) * rs * fabs(sc[i]) + fabs(b));
            }
        }
        nano_layernorm(x, &xs, lax[c], sc, nobias ? NULL : bi, 1e-5f, y, 2);
        char s1[64], what[96];
        shape_str(&xs, s1, sizeof s1);
        snprintf(what, sizeof what, "layernorm %s axis %d%s", s1, lax[c], nobias ? " no bias" : "");
        close_to(y, ref, tol, (size_t)n, 0, 0, what);
        check(gintact(y, (size_t)n * 4), "%s: canaries intact", what);
        free(x); gfree(y); free(sc); free(bi); free(ref); free(tol);
    }
    /* softmax: exp(x - max) carries x - max's rounding, U·|x - max|, into its relative error */
    static const int64_t sd[][5] = {{2, 4, 37, 0, 0}, {3, 3, 5, 7, 0}, {3, 3, 5, 7, 0}, {3, 2, 5, 300, 0},
                                    {2, 512, 129, 0, 0}, {1, 1, 0, 0, 0}, {4, 2, 1, 3, 1}};
    static const int sax[] = {1, 1, 0, 1, 1, 0, 2};
    for (int c = 0; c < 7; c++) {
        nano_shape xs = shp((int)sd[c][0], sd[c] + 1);
        int64_t n = numel(&xs), K = xs.d[sax[c]], inner = 1;
        for (int i = sax[c] + 1; i < xs.ndim; i++) inner *= xs.d[i];
        float *x = malloc((size_t)n * 4), *y = galloc((size_t)n * 4);
        double *ref = malloc((size_t)n * 8), *tol = malloc((size_t)n * 8);
        fill(x, (size_t)n, -40, 40);
        for (int64_t o = 0; o < n / (K * inner); o++)
            for (int64_t j = 0; j < inner; j++) {
                const float *xc = x + o * K * inner + j;
                double m = -INFINITY, s = 0;
                for (int64_t k = 0; k < K; k++) m = fmax(m, xc[k * inner]);
                for (int64_t k = 0; k < K; k++) s += exp(xc[k * inner] - m);
                for (int64_t k = 0; k < K; k++) {
                    int64_t at = o * K * inner + j + k * inner;
                    ref[at] = exp(xc[k * inner] - m) / s;
                    tol[at] = (8 + fabs(xc[k * inner] - m)) * U * ref[at] + 0x1p-149;
                }
            }
        nano_softmax(x, &xs, sax[c], y, 2);
        char s1[64], what[96];
        shape_str(&xs, s1, sizeof s1);
        snprintf(what, sizeof what, "softmax %s axis %d", s1, sax[c]);
        close_to(y, ref, tol, (size_t)n, 0, 0, what);
        check(gintact(y, (size_t)n * 4), "%s: canaries intact", what);
        free(x); gfree(y); free(ref); free(tol);
    }
}

/* mean over the axes of mask, double reference; the result rounds once (plus a double
 * sum's error, relative to Σ|x|). */
static void reduce_case(const nano_shape *xs, int mask, int nt)
{
    int64_t n = numel(xs), idx[6];
    nano_shape ys = *xs;
    int64_t cnt = 1;
    for (int i = 0; i < xs->ndim; i++)
        if (mask >> i & 1) { cnt *= xs->d[i]; ys.d[i] = 1; }
    int64_t ny = numel(&ys);
    float *x = malloc((size_t)n * 4), *y = galloc((size_t)ny * 4);
    double *ref = calloc((size_t)ny, 8), *ab = calloc((size_t)ny, 8), *tol = malloc((size_t)ny * 8);
    fill(x, (size_t)n, -2, 3);
    for (int64_t k = 0; k < n; k++) {
        unravel(xs, k, idx);
        int64_t o = 0;
        for (int i = 0; i < xs->ndim; i++) o = o * ys.d[i] + (mask >> i & 1 ? 0 : idx[i]);
        ref[o] += x[k];
        ab[o] += fabs(x[k]);
    }
    for (int64_t o = 0; o < ny; o++) {
        ref[o] /= (double)cnt;
        tol[o] = U * fabs(ref[o]) + 1e-13 * ab[o] / (double)cnt;
    }
    nano_reducemean(x, xs, mask, y, nt);
    char s1[64], what[128];
    shape_str(xs, s1, sizeof s1);
    snprintf(what, sizeof what, "reducemean %s mask 0x%x, %d thread(s)", s1, mask, nt);
    close_to(y, ref, tol, (size_t)ny, 0, 0, what);
    check(gintact(y, (size_t)ny * 4), "%s: canaries intact", what);
    free(x); gfree(y); free(ref); free(ab); free(tol);
}

static void test_reduce(void)
{
    int64_t d4[4] = {2, 3, 4, 5}, d5[5] = {3, 1, 4, 1, 6}, dl[3] = {4, 300, 70}, d1[3] = {1, 1, 1};
    nano_shape s4 = shp(4, d4), s5 = shp(5, d5), sl = shp(3, dl), s1 = shp(3, d1);
    for (int m = 1; m < 16; m++) reduce_case(&s4, m, 1);
    for (int m = 1; m < 32; m += 3) reduce_case(&s5, m, 1);
    for (int m = 1; m < 8; m++) reduce_case(&sl, m, 2);
    reduce_case(&s1, 5, 1);
    /* global average pool = mean over the spatial dims */
    static const int64_t gd[][5] = {{4, 2, 3, 5, 7}, {3, 2, 3, 9, 0}, {4, 1, 1, 1, 1}, {4, 4, 64, 28, 28}};
    for (int c = 0; c < 4; c++) {
        nano_shape xs = shp((int)gd[c][0], gd[c] + 1);
        int64_t n = numel(&xs), planes = xs.d[0] * xs.d[1], hw = n / planes;
        float *x = malloc((size_t)n * 4), *y = galloc((size_t)planes * 4);
        double *ref = calloc((size_t)planes, 8);
        fill(x, (size_t)n, 0, 4);
        for (int64_t k = 0; k < n; k++) ref[k / hw] += x[k] / (double)hw;
        nano_globalavgpool(x, &xs, y, 2);
        char s1b[64], what[96];
        shape_str(&xs, s1b, sizeof s1b);
        snprintf(what, sizeof what, "globalavgpool %s", s1b);
        close_to(y, ref, NULL, (size_t)planes, 0, 2 * U, what);
        check(gintact(y, (size_t)planes * 4), "%s: canaries intact", what);
        free(x); gfree(y); free(ref);
    }
}

/* ---- pools -------------------------------------------------------------------------- */

typedef struct pcase { int H, W, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, ceil; } pcase;

/* ONNX/PyTorch output size: floor or ceil, and with ceil a last window must start
 * inside the input or its leading padding. */
static int64_t pool_out(int64_t in, int k, int s, int p0, int p1, int d, int ceil_mode)
{
    int64_t span = in + p0 + p1 - ((int64_t)(k - 1) * d + 1);
    int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (o - 1) * s >= in + p0) o--;
    return o;
}

static void test_pools(void)
{
    static const pcase cases[] = {
        {7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0},   /* ResNet stem */
        {8, 9, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1, 1},   /* ceil_mode: last window clipped */
        {6, 7, 2, 3, 1, 2, 1, 0, 0, 1, 2, 1, 0},   /* asymmetric pads, dilation */
        {5, 5, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* ceil_mode with padding */
        {3, 3, 4, 4, 1, 1, 2, 2, 2, 2, 1, 1, 0},   /* kernel larger than the input */
        {11, 10, 3, 2, 2, 3, 1, 1, 0, 2, 2, 2, 1}, /* everything at once */
        {1, 9, 1, 3, 1, 1, 0, 1, 0, 1, 1, 1, 0},   /* 1-D along W */
        {30, 31, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0}, /* large: threads */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const pcase *p = &cases[c];
        int64_t N = 2, C = c == 7 ? 64 : 3;
        int64_t OH = pool_out(p->H, p->kh, p->sh, p->pt, p->pb, p->dh, p->ceil);
        int64_t OW = pool_out(p->W, p->kw, p->sw, p->pl, p->pr, p->dw, p->ceil);
        int64_t xd[4] = {N, C, p->H, p->W}, yd[4] = {N, C, OH, OW};
        nano_shape xs = shp(4, xd), ys = shp(4, yd);
        int64_t n = numel(&xs), ny = numel(&ys);
        float *x = malloc((size_t)n * 4), *y = galloc((size_t)ny * 4);
        double *ref = malloc((size_t)ny * 8), *tol = malloc((size_t)ny * 8);
        fill(x, (size_t)n, -3, 3);
        nano_attrs a;
        memset(&a, 0, sizeof a);
        a.kernel[0] = p->kh, a.kernel[1] = p->kw, a.stride[0] = p->sh, a.stride[1] = p->sw;
        a.pad[0] = p->pt, a.pad[1] = p->pl, a.pad[2] = p->pb, a.pad[3] = p->pr;
        a.dilation[0] = p->dh, a.dilation[1] = p->dw, a.ceil_mode = p->ceil;
        for (int kind = 0; kind < 3; kind++) { /* max, avg, avg count_include_pad */
            a.count_include_pad = kind == 2;
            for (int64_t q = 0; q < N * C; q++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double mx = -INFINITY, s = 0, sa = 0;
                        int64_t in = 0, padded = 0;
                        for (int i = 0; i < p->kh; i++)
                            for (int j = 0; j < p->kw; j++) {
                                int64_t h = oh * p->sh - p->pt + i * p->dh, w = ow * p->sw - p->pl + j * p->dw;
                                if (h >= -p->pt && h < p->H + p->pb && w >= -p->pl && w < p->W + p->pr) padded++;
                                if (h < 0 || h >= p->H || w < 0 || w >= p->W) continue;
                                double v = x[(q * p->H + h) * p->W + w];
                                mx = fmax(mx, v);
                                s += v;
                                sa += fabs(v);
                                in++;
                            }
                        int64_t at = (q * OH + oh) * OW + ow, div = kind == 2 ? padded : in;
                        ref[at] = kind == 0 ? mx : s / (double)div;
                        tol[at] = kind == 0 ? 0 : (p->kh * p->kw + 1) * U * sa / (double)div;
                    }
            if (kind >= 1 && p->dh == 1 && p->dw == 1) a.dilation[0] = a.dilation[1] = 0; /* unset: 1 */
            if (kind == 0) nano_maxpool(x, &xs, &a, y, &ys, 2);
            else nano_avgpool(x, &xs, &a, y, &ys, 2);
            char what[160];
            snprintf(what, sizeof what, "%s %dx%d k%dx%d s%dx%d pad %d,%d,%d,%d dil %dx%d ceil %d -> %lldx%lld",
                     kind == 0 ? "maxpool" : kind == 1 ? "avgpool" : "avgpool count_include_pad", p->H, p->W, p->kh,
                     p->kw, p->sh, p->sw, p->pt, p->pl, p->pb, p->pr, p->dh, p->dw, p->ceil, (long long)OH,
                     (long long)OW);
            close_to(y, ref, tol, (size_t)ny, 0, 0, what);
            check(gintact(y, (size_t)ny * 4), "%s: canaries intact", what);
        }
        free(x); gfree(y); free(ref); free(tol);
    }
}

/* ---- data movers (exact) ---------------------------------------------------------------- */

/* element k of a buffer of esize-byte elements as a number (the low bytes of k's pattern) */
static uint64_t elem(const void *p, size_t esize, int64_t k)
{
    uint64_t v = 0;
    memcpy(&v, (const char *)p + (size_t)k * esize, esize);
    return v;
}
static void *pattern(int64_t n, size_t esize)
{
    unsigned char *p = malloc((size_t)n * esize);
    for (size_t i = 0; i < (size_t)n * esize; i++) p[i] = (unsigned char)(urand() * 256);
    return p;
}

static void test_transpose(void)
{
    static const struct { int nd; int64_t d[6]; int32_t p[6]; } cases[] = {
        {2, {37, 45}, {1, 0}}, {3, {4, 33, 17}, {0, 2, 1}}, {4, {2, 5, 3, 8}, {0, 2, 1, 3}},
        {4, {2, 3, 5, 7}, {0, 2, 3, 1}}, {4, {2, 3, 5, 7}, {0, 3, 1, 2}}, {4, {2, 3, 5, 7}, {3, 2, 1, 0}},
        {5, {2, 3, 4, 5, 6}, {4, 0, 3, 1, 2}}, {6, {2, 1, 3, 4, 1, 5}, {5, 3, 1, 0, 2, 4}},
        {6, {2, 3, 2, 3, 2, 3}, {1, 0, 3, 2, 5, 4}}, {4, {1, 3, 1, 5}, {2, 0, 3, 1}}, {3, {4, 5, 6}, {0, 1, 2}},
        {0, {0}, {0}}, {3, {64, 96, 33}, {2, 0, 1}}, {4, {2, 128, 12, 64}, {0, 2, 1, 3}},
    };
    static const size_t es[] = {4, 1, 2, 8, 3};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t e = 0; e < sizeof es / sizeof *es; e++) {
            if (c >= 12 && e > 0) continue; /* the large ones: f32 only */
            size_t esize = es[e];
            nano_shape xs = shp(cases[c].nd, cases[c].d), ys = xs;
            for (int i = 0; i < xs.ndim; i++) ys.d[i] = xs.d[cases[c].p[i]];
            int64_t n = numel(&xs), bad = 0, idx[6], xi[6];
            void *x = pattern(n, esize), *y = galloc((size_t)n * esize);
            nano_transpose(x, &xs, cases[c].p, y, esize, 2);
            for (int64_t k = 0; k < n; k++) {
                unravel(&ys, k, idx);
                for (int i = 0; i < xs.ndim; i++) xi[cases[c].p[i]] = idx[i];
                int64_t off = 0;
                for (int i = 0; i < xs.ndim; i++) off = off * xs.d[i] + xi[i];
                bad += elem(y, esize, k) != elem(x, esize, off);
            }
            char s1[64], what[128];
            shape_str(&xs, s1, sizeof s1);
            snprintf(what, sizeof what, "transpose %s perm #%zu, %zu-byte elements", s1, c, esize);
            check(bad == 0, "%s (%lld wrong)", what, (long long)bad);
            check(gintact(y, (size_t)n * esize), "%s: canaries intact", what);
            free(x); gfree(y);
        }
}

static void test_slice(void)
{
    static const struct { int nd; int64_t d[6], b[6], s[6], o[6]; } cases[] = {
        {3, {5, 6, 7}, {4, 0, 6}, {-1, 2, -3}, {5, 3, 3}},
        {2, {9, 10}, {1, 2}, {3, 1}, {3, 7}},
        {6, {2, 3, 1, 4, 2, 5}, {1, 2, 0, 3, 0, 4}, {-1, -2, 1, -1, 1, -2}, {2, 2, 1, 4, 2, 3}},
        {1, {10}, {9}, {-1}, {10}},
        {4, {2, 3, 4, 5}, {0, 1, 1, 0}, {1, 1, 2, 1}, {2, 2, 2, 5}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t esize = 1; esize <= 8; esize *= 2) {
            nano_shape xs = shp(cases[c].nd, cases[c].d), ys = shp(cases[c].nd, cases[c].o);
            int64_t n = numel(&xs), ny = numel(&ys), bad = 0, idx[6];
            void *x = pattern(n, esize), *y = galloc((size_t)ny * esize);
            nano_slice(x, &xs, cases[c].b, cases[c].s, y, &ys, esize);
            for (int64_t k = 0; k < ny; k++) {
                unravel(&ys, k, idx);
                int64_t off = 0;
                for (int i = 0; i < xs.ndim; i++) off = off * xs.d[i] + cases[c].b[i] + idx[i] * cases[c].s[i];
                bad += elem(y, esize, k) != elem(x, esize, off);
            }
            char s1[64], s2[64];
            shape_str(&xs, s1, sizeof s1);
            shape_str(&ys, s2, sizeof s2);
            check(bad == 0 && gintact(y, (size_t)ny * esize), "slice %s -> %s case %zu, %zu-byte elements, canaries",
                  s1, s2, c, esize);
            free(x); gfree(y);
        }
}

static void test_concat_split_gather(void)
{
    for (int axis = 0; axis < 3; axis++)
        for (size_t esize = 4; esize <= 8; esize += 4) {
            nano_shape sh[3];
            const void *xs[3];
            void *outs[3];
            int64_t base[3] = {2, 3, 4}, tot = 0;
            for (int k = 0; k < 3; k++) {
                sh[k] = shp(3, base);
                sh[k].d[axis] = k + 1;
                tot += numel(&sh[k]);
                xs[k] = pattern(numel(&sh[k]), esize);
                outs[k] = galloc((size_t)numel(&sh[k]) * esize);
            }
            nano_shape ysh = shp(3, base);
            ysh.d[axis] = 6;
            void *y = galloc((size_t)tot * esize);
            nano_concat(xs, sh, 3, axis, y, esize);
            int64_t bad = 0, idx[6];
            for (int64_t k = 0; k < tot; k++) {
                unravel(&ysh, k, idx);
                int part = idx[axis] < 1 ? 0 : idx[axis] < 3 ? 1 : 2;
                idx[axis] -= part == 0 ? 0 : part == 1 ? 1 : 3;
                int64_t off = (idx[0] * sh[part].d[1] + idx[1]) * sh[part].d[2] + idx[2];
                bad += elem(y, esize, k) != elem(xs[part], esize, off);
            }
            check(bad == 0 && gintact(y, (size_t)tot * esize), "concat of 3 along axis %d, %zu-byte elements", axis, esize);
            nano_split(y, &ysh, axis, outs, sh, 3, esize);
            for (int k = 0; k < 3; k++) {
                size_t nb = (size_t)numel(&sh[k]) * esize;
                check(memcmp(outs[k], xs[k], nb) == 0 && gintact(outs[k], nb), "split part %d along axis %d (%zu-byte)",
                      k, axis, esize);
                free((void *)xs[k]);
                gfree(outs[k]);
            }
            gfree(y);
        }
    /* gather: data (3, 5, 4) */
    int64_t dd[3] = {3, 5, 4};
    nano_shape ds = shp(3, dd);
    float data[60];
    for (int i = 0; i < 60; i++) data[i] = (float)i;
    for (int axis = 0; axis < 3; axis++)
        for (int i64 = 0; i64 <= 1; i64++)
            for (int scalar = 0; scalar <= 1; scalar++) {
                int64_t K = dd[axis], id[6] = {0, -1, K - 1, 1 - K, 1, -K};
                int32_t id32[6];
                for (int i = 0; i < 6; i++) id32[i] = (int32_t)id[i];
                int64_t isd[2] = {2, 3};
                nano_shape is = shp(scalar ? 0 : 2, isd);
                int64_t ni = scalar ? 1 : 6, outer = 1, inner = 1;
                for (int i = 0; i < axis; i++) outer *= dd[i];
                for (int i = axis + 1; i < 3; i++) inner *= dd[i];
                int64_t ny = outer * ni * inner, bad = 0;
                float *y = galloc((size_t)ny * 4);
                int rc = nano_gather(data, &ds, axis, i64 ? (const void *)(id + scalar) : (const void *)(id32 + scalar),
                                     i64, &is, y, 4);
                for (int64_t o = 0; o < outer; o++)
                    for (int64_t t = 0; t < ni; t++)
                        for (int64_t j = 0; j < inner; j++) {
                            int64_t v = id[t + scalar];
                            v += v < 0 ? K : 0;
                            bad += y[(o * ni + t) * inner + j] != data[(o * K + v) * inner + j];
                        }
                check(rc == 0 && bad == 0 && gintact(y, (size_t)ny * 4), "gather axis %d %s indices%s (negatives)", axis,
                      i64 ? "int64" : "int32", scalar ? ", scalar index" : " (2,3)");
                /* out of range: K and -K-1 refused, nothing written */
                for (int w = 0; w < 2; w++) {
                    int64_t badi[6] = {0, 1, 2, 0, 1, w ? -K - 1 : K};
                    int32_t badi32[6];
                    for (int i = 0; i < 6; i++) badi32[i] = (int32_t)badi[i];
                    memset(y, 0x5A, (size_t)ny * 4);
                    int rc2 = scalar ? nano_gather(data, &ds, axis, i64 ? (const void *)(badi + 5) : (const void *)(badi32 + 5),
                                                   i64, &is, y, 4)
                                     : nano_gather(data, &ds, axis, i64 ? (const void *)badi : (const void *)badi32, i64,
                                                   &is, y, 4);
                    int untouched = 1;
                    for (size_t b = 0; b < (size_t)ny * 4; b++) untouched &= ((unsigned char *)y)[b] == 0x5A;
                    check(rc2 == -1 && untouched && gintact(y, (size_t)ny * 4),
                          "gather axis %d %s%s refuses index %lld: -1, nothing written", axis, i64 ? "int64" : "int32",
                          scalar ? " scalar" : "", (long long)badi[5]);
                }
                gfree(y);
            }
}

static void test_cast(void)
{
    const float f[] = {0.0f, -0.0f, 2.7f, -2.7f, -0.5f, 0.99f, 254.9f, 255.5f, 300.0f, -1.0f, -3.5f, 1e10f, -1e10f,
                       2147483520.0f, -2147483648.0f, 16777217.0f, NAN};
    const int32_t i32w[] = {0, 0, 2, -2, 0, 0, 254, 255, 300, -1, -3, INT32_MAX, INT32_MIN, 2147483520, INT32_MIN,
                            16777216, 0};
    const uint8_t u8w[] = {0, 0, 2, 0, 0, 0, 254, 255, 255, 0, 0, 255, 0, 255, 0, 255, 0};
    enum { N = sizeof f / sizeof *f };
    int32_t *o32 = galloc(N * 4);
    int64_t *o64 = galloc(N * 8);
    uint8_t *o8 = galloc(N);
    nano_cast(f, NANO_DT_F32, o32, NANO_DT_I32, N);
    nano_cast(f, NANO_DT_F32, o64, NANO_DT_I64, N);
    nano_cast(f, NANO_DT_F32, o8, NANO_DT_U8, N);
    int b32 = 0, b64 = 0, b8 = 0;
    for (int i = 0; i < N; i++) {
        b32 += o32[i] != i32w[i];
        int64_t w64 = i == 11 ? 10000000000LL : i == 12 ? -10000000000LL : i == 16 ? 0 : (int64_t)i32w[i];
        b64 += o64[i] != w64;
        b8 += o8[i] != u8w[i];
    }
    check(b32 == 0 && gintact(o32, N * 4), "cast f32 -> i32 truncates toward zero, saturates, NaN -> 0");
    check(b64 == 0 && gintact(o64, N * 8), "cast f32 -> i64 truncates toward zero");
    check(b8 == 0 && gintact(o8, N), "cast f32 -> u8 truncates and saturates");
    const int64_t iv[] = {0, 1, -1, 255, 256, -129, 16777217, (int64_t)1 << 40, INT64_MIN};
    enum { M = sizeof iv / sizeof *iv };
    float *of = galloc(M * 4);
    nano_cast(iv, NANO_DT_I64, of, NANO_DT_F32, M);
    nano_cast(iv, NANO_DT_I64, o32, NANO_DT_I32, M);
    nano_cast(iv, NANO_DT_I64, o8, NANO_DT_U8, M);
    int bf = 0, bi = 0, bu = 0;
    for (int i = 0; i < M; i++) {
        bf += of[i] != (float)iv[i];
        bi += o32[i] != (int32_t)(uint32_t)(uint64_t)iv[i];
        bu += o8[i] != (uint8_t)(uint64_t)iv[i];
    }
    check(bf == 0 && bi == 0 && bu == 0 && gintact(of, M * 4), "cast i64 -> f32 (rounded once), i32 and u8 (wrap)");
    const uint8_t u[] = {0, 1, 7, 128, 255};
    nano_cast(u, NANO_DT_U8, of, NANO_DT_F32, 5);
    nano_cast(u, NANO_DT_U8, o64, NANO_DT_I64, 5);
    int bu2 = 0;
    for (int i = 0; i < 5; i++) bu2 += of[i] != (float)u[i] || o64[i] != u[i];
    nano_cast(o64, NANO_DT_I64, o32, NANO_DT_I32, 5);
    nano_cast(o32, NANO_DT_I32, of, NANO_DT_F32, 5);
    nano_cast(of, NANO_DT_F32, o8, NANO_DT_U8, 5);
    check(bu2 == 0 && memcmp(o8, u, 5) == 0, "cast u8 -> f32, i64 -> i32 -> f32 -> u8 round trip");
    gfree(o32); gfree(o64); gfree(o8); gfree(of);
}

int main(void)
{
    test_acts(), test_binary(), test_where(), test_norms(), test_reduce();
    test_pools(), test_transpose(), test_slice(), test_concat_split_gather(), test_cast();
    printf("# %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
