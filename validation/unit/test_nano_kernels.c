/* test_nano_kernels — the edge runtime's heavy kernels (nano_kern.h) against plain loops
 * in double: fp32 GEMM, two-activation GEMM, convolution (dense, 1×1, grouped,
 * depthwise, strides, dilation, asymmetric pads), int8 GEMM and convolution (exact: the
 * output must equal, to the bit, the reference's integer sums dequantised by the same
 * float formula), the f16 conversions over all 65536 halves and the weight
 * quantisation; at every ISA level this CPU runs, with 1 and 2 threads, every epilogue.
 * `--bench` also prints GFLOP/s (not asserted).
 *
 * The one design decision: fp32 tolerances are derived per element from the inputs,
 * |got - ref| <= atol + rtol·Σ_k|a·b| with rtol = FLT_EPSILON·(K + 2), widened by the
 * act's slope and its own rounding; canaries around every output and in the gaps of
 * padded leading dimensions catch stray stores. Self-contained (no check.h: that pulls
 * in libraries these standalone builds do not link); output lines follow its format. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nano/nano.h"
#include "nano/nano_kern.h"
#include "nano/nano_kern_impl.h"

static int failures, checks;
static const char *level_name = "?";

static void report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s - [%s] ", ok ? "ok" : "FAIL", level_name);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
    checks++;
    if (!ok) failures++;
}

/* ---- random numbers (splitmix64) ----------------------------------------------------- */
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnext(void)
{
    uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float runi(float lo, float hi) { return lo + (hi - lo) * (float)((rnext() >> 40) * 0x1p-24); }
static float *frand(size_t n, float lo, float hi)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = runi(lo, hi);
    return p;
}

/* ---- guarded outputs ------------------------------------------------------------------ */
#define GUARD 32
static const float CANARY = -12345.678f;
static float *galloc(size_t n)
{
    float *p = malloc((n + 2 * GUARD) * sizeof *p);
    for (size_t i = 0; i < n + 2 * GUARD; i++) p[i] = CANARY;
    return p + GUARD;
}
static int gintact(const float *p, size_t n)
{
    for (int i = 1; i <= GUARD; i++)
        if (p[-i] != CANARY || p[n + i - 1] != CANARY) return 0;
    return 1;
}
static void gfree(float *p) { free(p - GUARD); }

/* ---- epilogues ---------------------------------------------------------------------------- */
static const char *act_name[] = {"none", "relu", "clip", "gelu", "gelu_tanh", "sigmoid", "tanh"};
static nano_epilogue epi(int act) { return (nano_epilogue){act, -0.25f, 0.5f}; }
static double act_ref(int act, double x)
{
    switch (act) {
    case NANO_ACT_RELU: return x > 0 ? x : 0;
    case NANO_ACT_CLIP: return x < -0.25 ? -0.25 : x > 0.5 ? 0.5 : x;
    case NANO_ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case NANO_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case NANO_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case NANO_ACT_TANH: return tanh(x);
    default: return x;
    }
}

/* Compares got (rows × cols, stride ld) with pre-act reference pre and bound sab
 * (Σ|a·b| per element, row-major rows × cols): |got - act(pre)| <= 1.2·(atol + rtol·sab)
 * + 4·eps·(|pre| + |act(pre)|) + 1e-6 (the act's slope is at most 1.13, its own rounding
 * a few ulp). Canaries in the gaps ld > cols stay. Returns ok. */
static int close_act(const float *got, int ld, const double *pre, const double *sab, int rows, int cols, int K,
                     int act, const char *what)
{
    double rtol = FLT_EPSILON * (K + 2), worst = 0;
    int wi = 0, gaps = 1;
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < cols; j++) {
            size_t r = (size_t)i * cols + j;
            double ref = act_ref(act, pre[r]);
            double lim = 1.2 * (1e-6 + rtol * sab[r]) + 4 * FLT_EPSILON * (fabs(pre[r]) + fabs(ref)) + 1e-6;
            double e = fabs((double)got[(size_t)i * ld + j] - ref) / lim;
            if (!(e <= worst)) worst = e, wi = (int)r;
            if (isnan(e)) worst = INFINITY;
        }
        for (int j = cols; j < ld && i + 1 < rows; j++)
            if (got[(size_t)i * ld + j] != CANARY) gaps = 0;
    }
    int ok = worst <= 1 && gaps;
    if (!ok)
        printf("    worst at %d (%d,%d): got %.9g ref %.9g%s\n", wi, wi / cols, wi % cols,
               (double)got[(size_t)(wi / cols) * ld + wi % cols], act_ref(act, pre[wi]), gaps ? "" : " (gap written)");
    report(ok, "%s (worst %.3g)", what, worst);
    return ok;
}

/* ---- fp32 GEMM with packed weights ------------------------------------------------------ */
static void test_gemm(int M, int N, int K, int act, int with_bias, int nthreads)
{
    int ldx = K + (M % 3), ldy = N + (N % 2) * 3;
    float *X = frand((size_t)M * ldx, -1, 1), *W = frand((size_t)N * K, -1, 1), *b = frand((size_t)N, -1, 1);
    double *pre = malloc((size_t)M * N * sizeof *pre), *sab = malloc((size_t)M * N * sizeof *sab);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = with_bias ? b[j] : 0, a = with_bias ? fabs(b[j]) : 0;
            for (int k = 0; k < K; k++) {
                double t = (double)X[(size_t)i * ldx + k] * W[(size_t)j * K + k];
                s += t, a += fabs(t);
            }
            pre[(size_t)i * N + j] = s, sab[(size_t)i * N + j] = a;
        }
    nano_gemm *g = nano_gemm_prepare(W, with_bias ? b : NULL, N, K, epi(act));
    size_t ny = (size_t)(M - 1) * ldy + N, ns = nano_gemm_scratch(g, M);
    float *Y = galloc(ny);
    void *s = malloc(ns + 1);
    char what[160];
    snprintf(what, sizeof what, "gemm M=%d N=%d K=%d %s%s t=%d", M, N, K, act_name[act], with_bias ? " bias" : "",
             nthreads);
    if (!g) report(0, "%s: prepare failed", what);
    else {
        nano_gemm_run(g, M, X, ldx, Y, ldy, s, nthreads);
        close_act(Y, ldy, pre, sab, M, N, K, act, what);
        if (!gintact(Y, ny)) report(0, "%s: canary overwritten", what);
        if (nano_gemm_bytes(g) < (size_t)N * K * sizeof(float)) report(0, "%s: bytes too small", what);
    }
    nano_gemm_free(g);
    gfree(Y);
    free(s), free(X), free(W), free(b), free(pre), free(sab);
}

static void test_sgemm(int M, int N, int K, int trans_b, int nthreads)
{
    int lda = K + 1, ldb = (trans_b ? K : N) + 2, ldc = N + 3;
    float *A = frand((size_t)M * lda, -1, 1), *B = frand((size_t)(trans_b ? N : K) * ldb, -1, 1);
    double *pre = malloc((size_t)M * N * sizeof *pre), *sab = malloc((size_t)M * N * sizeof *sab);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) {
                double t = (double)A[(size_t)i * lda + k] * (trans_b ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                s += t, a += fabs(t);
            }
            pre[(size_t)i * N + j] = s, sab[(size_t)i * N + j] = a;
        }
    size_t nc = (size_t)(M - 1) * ldc + N;
    float *C = galloc(nc);
    nano_sgemm(M, N, K, A, lda, B, ldb, trans_b, C, ldc, nthreads);
    char what[128];
    snprintf(what, sizeof what, "sgemm M=%d N=%d K=%d trans_b=%d t=%d", M, N, K, trans_b, nthreads);
    close_act(C, ldc, pre, sab, M, N, K, NANO_ACT_NONE, what);
    if (!gintact(C, nc)) report(0, "%s: canary overwritten", what);
    gfree(C);
    free(A), free(B), free(pre), free(sab);
}

/* ---- convolution ----------------------------------------------------------------------- */
static nano_conv_desc mkdesc(int N, int C, int H, int W, int M, int kh, int kw, int sh, int sw, int dh, int dw,
                             int pt, int pl, int pb, int pr, int group)
{
    nano_conv_desc d = {N, C, H, W, M, 0, 0, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, group};
    d.OH = (H + pt + pb - dh * (kh - 1) - 1) / sh + 1;
    d.OW = (W + pl + pr - dw * (kw - 1) - 1) / sw + 1;
    return d;
}

/* The pre-act reference (in double) and Σ|w·x| of conv d: xv[c][h][w] → pre[n][m][p]. */
static void conv_ref(const nano_conv_desc *d, const double *x, const double *w, const double *b, double *pre,
                     double *sab)
{
    int Cg = d->C / d->group, Mg = d->M / d->group;
    for (int n = 0; n < d->N; n++)
        for (int m = 0; m < d->M; m++)
            for (int oh = 0; oh < d->OH; oh++)
                for (int ow = 0; ow < d->OW; ow++) {
                    double s = b ? b[m] : 0, a = b ? fabs(b[m]) : 0;
                    int g = m / Mg;
                    for (int c = 0; c < Cg; c++)
                        for (int i = 0; i < d->kh; i++)
                            for (int j = 0; j < d->kw; j++) {
                                int ih = oh * d->sh - d->pad_t + i * d->dh, iw = ow * d->sw - d->pad_l + j * d->dw;
                                if (ih < 0 || ih >= d->H || iw < 0 || iw >= d->W) continue;
                                double t = w[(((size_t)m * Cg + c) * d->kh + i) * d->kw + j] *
                                           x[(((size_t)n * d->C + g * Cg + c) * d->H + ih) * d->W + iw];
                                s += t, a += fabs(t);
                            }
                    size_t r = (((size_t)n * d->M + m) * d->OH + oh) * d->OW + ow;
                    pre[r] = s, sab[r] = a;
                }
}

static void desc_str(const nano_conv_desc *d, char *s, size_t n)
{
    snprintf(s, n, "N%d C%d %dx%d M%d k%dx%d s%d,%d d%d,%d p%d,%d,%d,%d g%d", d->N, d->C, d->H, d->W, d->M, d->kh,
             d->kw, d->sh, d->sw, d->dh, d->dw, d->pad_t, d->pad_l, d->pad_b, d->pad_r, d->group);
}

static void test_conv(nano_conv_desc d, int act, int with_bias, int nthreads)
{
    int K = d.C / d.group * d.kh * d.kw;
    size_t nx = (size_t)d.N * d.C * d.H * d.W, nw = (size_t)d.M * K, ny = (size_t)d.N * d.M * d.OH * d.OW;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *b = frand((size_t)d.M, -1, 1);
    double *xd = malloc(nx * sizeof *xd), *wd = malloc(nw * sizeof *wd), *bd = malloc((size_t)d.M * sizeof *bd);
    for (size_t i = 0; i < nx; i++) xd[i] = x[i];
    for (size_t i = 0; i < nw; i++) wd[i] = w[i];
    for (int i = 0; i < d.M; i++) bd[i] = b[i];
    double *pre = malloc(ny * sizeof *pre), *sab = malloc(ny * sizeof *sab);
    conv_ref(&d, xd, wd, with_bias ? bd : NULL, pre, sab);
    char ds[160], what[256];
    desc_str(&d, ds, sizeof ds);
    snprintf(what, sizeof what, "conv %s %s%s t=%d", ds, act_name[act], with_bias ? " bias" : "", nthreads);
    nano_conv *c = nano_conv_prepare(&d, w, with_bias ? b : NULL, epi(act));
    float *y = galloc(ny);
    if (!c) report(0, "%s: prepare failed", what);
    else {
        void *s = malloc(nano_conv_scratch(c) + 1);
        nano_conv_run(c, x, y, s, nthreads);
        close_act(y, (int)ny, pre, sab, 1, (int)ny, K, act, what);
        if (!gintact(y, ny)) report(0, "%s: canary overwritten", what);
        free(s);
    }
    nano_conv_free(c);
    gfree(y);
    free(x), free(w), free(b), free(xd), free(wd), free(bd), free(pre), free(sab);
}

/* ---- int8 ------------------------------------------------------------------------------- */
static int quant_ref(float x, float s, int z)
{
    float r = nearbyintf(x / s); /* ties to even */
    double v = (double)r + z;
    return v < 0 ? 0 : v > 255 ? 255 : (int)v;
}

/* got must equal act(sc·(float)(acc - z·Σw) + bias) with acc the exact integer sum: bit
 * for bit without an act, within the act's rounding otherwise. */
static void q_compare(const float *got, int ld, const int64_t *acc, const int64_t *zc, const float *sc,
                      const float *bias, int rows, int cols, int chan_rows, int act, const char *what)
{
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            int c = chan_rows ? i : j;
            float v = sc[c] * (float)(int32_t)(acc[(size_t)i * cols + j] - zc[c]);
            if (bias) v += bias[c];
            float g = got[(size_t)i * ld + j];
            if (act == NANO_ACT_NONE) {
                if (memcmp(&g, &v, sizeof g) != 0) {
                    if (!bad) printf("    first mismatch (%d,%d): got %.9g want %.9g\n", i, j, (double)g, (double)v);
                    bad++;
                }
            } else {
                double ref = act_ref(act, v), e = fabs(g - ref) / (8 * FLT_EPSILON * (fabs(v) + fabs(ref)) + 1e-7);
                if (!(e <= worst)) worst = e;
            }
        }
    if (act == NANO_ACT_NONE) report(!bad, "%s (exact, %d differ)", what, bad);
    else report(worst <= 1, "%s (worst %.3g)", what, worst);
}

static void test_qgemm(int M, int N, int K, int act, int with_bias, int nthreads)
{
    int ldx = K + 2, ldy = N + 1;
    float xs = 0.0123f;
    int xz = (int)(rnext() % 256);
    float *X = frand((size_t)M * ldx, -2.2f, 2.2f); /* beyond the range: clamps both ends */
    int8_t *W = malloc((size_t)N * K);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = (int8_t)((int)(rnext() % 255) - 127);
    float *ws = frand((size_t)N, 0.001f, 0.02f), *b = frand((size_t)N, -1, 1);
    int64_t *acc = malloc((size_t)M * N * sizeof *acc), *zc = malloc((size_t)N * sizeof *zc);
    float *sc = malloc((size_t)N * sizeof *sc);
    for (int j = 0; j < N; j++) {
        int64_t s = 0;
        for (int k = 0; k < K; k++) s += W[(size_t)j * K + k];
        zc[j] = xz * s, sc[j] = xs * ws[j];
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            int64_t s = 0;
            for (int k = 0; k < K; k++) s += (int64_t)quant_ref(X[(size_t)i * ldx + k], xs, xz) * W[(size_t)j * K + k];
            acc[(size_t)i * N + j] = s;
        }
    char what[160];
    snprintf(what, sizeof what, "qgemm M=%d N=%d K=%d z=%d %s%s t=%d", M, N, K, xz, act_name[act],
             with_bias ? " bias" : "", nthreads);
    nano_qgemm *g = nano_qgemm_prepare(W, ws, with_bias ? b : NULL, N, K, xs, xz, epi(act));
    size_t ny = (size_t)(M - 1) * ldy + N;
    float *Y = galloc(ny);
    if (!g) report(0, "%s: prepare failed", what);
    else {
        void *s = malloc(nano_qgemm_scratch(g, M) + 1);
        nano_qgemm_run(g, M, X, ldx, Y, ldy, s, nthreads);
        q_compare(Y, ldy, acc, zc, sc, with_bias ? b : NULL, M, N, 0, act, what);
        if (!gintact(Y, ny)) report(0, "%s: canary overwritten", what);
        free(s);
    }
    nano_qgemm_free(g);
    gfree(Y);
    free(X), free(W), free(ws), free(b), free(acc), free(zc), free(sc);
}

static void test_qconv(nano_conv_desc d, int act, int with_bias, int nthreads)
{
    int Cg = d.C / d.group, Mg = d.M / d.group, K = Cg * d.kh * d.kw, P = d.OH * d.OW;
    size_t nx = (size_t)d.N * d.C * d.H * d.W, nw = (size_t)d.M * K, ny = (size_t)d.N * d.M * P;
    float xs = 0.01f;
    int xz = (int)(rnext() % 256);
    float *x = frand(nx, -1.5f, 1.5f), *ws = frand((size_t)d.M, 0.001f, 0.02f), *b = frand((size_t)d.M, -1, 1);
    int8_t *w = malloc(nw);
    for (size_t i = 0; i < nw; i++) w[i] = (int8_t)((int)(rnext() % 255) - 127);
    int64_t *acc = malloc(ny * sizeof *acc), *zc = malloc((size_t)d.M * sizeof *zc);
    float *sc = malloc((size_t)d.M * sizeof *sc);
    for (int m = 0; m < d.M; m++) {
        int64_t s = 0;
        for (int k = 0; k < K; k++) s += w[(size_t)m * K + k];
        zc[m] = xz * s, sc[m] = xs * ws[m];
    }
    for (int n = 0; n < d.N; n++)
        for (int m = 0; m < d.M; m++)
            for (int p = 0; p < P; p++) {
                int oh = p / d.OW, ow = p % d.OW, g = m / Mg;
                int64_t s = 0;
                for (int c = 0; c < Cg; c++)
                    for (int i = 0; i < d.kh; i++)
                        for (int j = 0; j < d.kw; j++) {
                            int ih = oh * d.sh - d.pad_t + i * d.dh, iw = ow * d.sw - d.pad_l + j * d.dw;
                            int q = (ih < 0 || ih >= d.H || iw < 0 || iw >= d.W)
                                        ? xz : quant_ref(x[(((size_t)n * d.C + g * Cg + c) * d.H + ih) * d.W + iw], xs, xz);
                            s += (int64_t)q * w[(((size_t)m * Cg + c) * d.kh + i) * d.kw + j];
                        }
                acc[((size_t)n * d.M + m) * P + p] = s;
            }
    char ds[160], what[256];
    desc_str(&d, ds, sizeof ds);
    snprintf(what, sizeof what, "qconv %s z=%d %s%s t=%d", ds, xz, act_name[act], with_bias ? " bias" : "", nthreads);
    nano_qconv *c = nano_qconv_prepare(&d, w, ws, with_bias ? b : NULL, xs, xz, epi(act));
    float *y = galloc(ny);
    if (!c) report(0, "%s: prepare failed", what);
    else {
        void *s = malloc(nano_qconv_scratch(c) + 1);
        nano_qconv_run(c, x, y, s, nthreads);
        /* rows = (n, m) pairs: the channel of row r is r % M */
        int64_t *zr = malloc((size_t)d.N * d.M * sizeof *zr);
        float *sr = malloc((size_t)d.N * d.M * sizeof *sr), *br = malloc((size_t)d.N * d.M * sizeof *br);
        for (int r = 0; r < d.N * d.M; r++) zr[r] = zc[r % d.M], sr[r] = sc[r % d.M], br[r] = b[r % d.M];
        q_compare(y, P, acc, zr, sr, with_bias ? br : NULL, d.N * d.M, P, 1, act, what);
        if (!gintact(y, ny)) report(0, "%s: canary overwritten", what);
        free(zr), free(sr), free(br), free(s);
    }
    nano_qconv_free(c);
    gfree(y);
    free(x), free(ws), free(b), free(w), free(acc), free(zc), free(sc);
}

/* ---- f16 and weight quantisation (ISA independent) ------------------------------------- */
static double h2d_ref(uint16_t h) /* by the definition */
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_f16(void)
{
    int bad_widen = 0, bad_trip = 0, bad_round = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nano_f16_to_f32((uint16_t)h);
        double r = h2d_ref((uint16_t)h);
        if (isnan(r) ? !isnan(f) : (double)f != r || !signbit(f) != !signbit(r)) bad_widen++;
        uint16_t back = nano_f32_to_f16(f);
        int quiet_nan = isnan(r) && (h & 0x200);
        if (isnan(r) ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff) && (!quiet_nan || back == h)) : back != h)
            bad_trip++;
        /* midpoints to the next half up in magnitude (finite pairs): ties to even, and one
         * float ulp either side goes to the nearer */
        uint32_t e = (h >> 10) & 31;
        if (e < 31 && (h & 0x7fff) != 0x7bff) {
            float a = f, b = nano_f16_to_f32((uint16_t)(h + 1));
            float mid = (float)(((double)a + b) / 2); /* exact: 12 significant bits */
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            if (nano_f32_to_f16(mid) != even) bad_round++;
            if (nano_f32_to_f16(nextafterf(mid, a)) != h) bad_round++;
            if (nano_f32_to_f16(nextafterf(mid, b)) != (uint16_t)(h + 1)) bad_round++;
        }
    }
    /* the top: 65504 is the largest half, 65520 (the midpoint to 65536) rounds to inf */
    if (nano_f32_to_f16(65519.996f) != 0x7bff || nano_f32_to_f16(65520.0f) != 0x7c00 ||
        nano_f32_to_f16(-1e30f) != 0xfc00 || nano_f32_to_f16(0x1p-25f) != 0 || nano_f32_to_f16(0x1.000002p-25f) != 1)
        bad_round++;
    report(!bad_widen, "f16 -> f32 all 65536 halves (%d wrong)", bad_widen);
    report(!bad_trip, "f16 -> f32 -> f16 round trip all 65536 (%d wrong)", bad_trip);
    report(!bad_round, "f32 -> f16 ties to even at every midpoint, overflow, underflow (%d wrong)", bad_round);
    uint16_t src[37];
    float dst[37];
    for (int i = 0; i < 37; i++) src[i] = (uint16_t)rnext();
    nano_f16_to_f32_n(src, dst, 37);
    int bad = 0;
    for (int i = 0; i < 37; i++) {
        float one = nano_f16_to_f32(src[i]);
        if (memcmp(&one, &dst[i], 4)) bad++;
    }
    report(!bad, "f16 -> f32 array matches the scalar");
}

static void test_quantize_rows(void)
{
    int N = 5, K = 33, bad = 0;
    float *W = frand((size_t)N * K, -3, 3), s[5];
    int8_t q[5 * 33];
    for (int k = 0; k < K; k++) W[2 * K + k] = 0; /* a zero row: scale 1 */
    nano_quantize_rows(W, N, K, q, s);
    for (int n = 0; n < N; n++) {
        double mx = 0;
        for (int k = 0; k < K; k++) mx = fmax(mx, fabs(W[n * K + k]));
        float want = mx > 0 ? (float)mx / 127.0f : 1.0f;
        if (s[n] != want) bad++;
        for (int k = 0; k < K; k++) {
            double v = nearbyint((double)(W[n * K + k] / want));
            v = v < -127 ? -127 : v > 127 ? 127 : v;
            if (q[n * K + k] != (int8_t)v) bad++;
        }
    }
    report(!bad, "quantize_rows: scales and rounding (%d wrong)", bad);
    free(W);
}

/* ---- the suite at one level ---------------------------------------------------------- */
static void suite(void)
{
    static const int gs[][3] = {{1, 1, 1},     {1, 7, 1},      {3, 5, 300},   {13, 33, 17},  {12, 32, 256},
                                {25, 67, 513}, {64, 100, 130}, {100, 61, 31}, {2, 300, 64},  {97, 5, 257},
                                {7, 49, 1},    {130, 40, 600}, {5, 1, 1000},  {33, 97, 40}};
    int ng = (int)(sizeof gs / sizeof gs[0]);
    for (int i = 0; i < ng; i++)
        for (int t = 1; t <= 2; t++) test_gemm(gs[i][0], gs[i][1], gs[i][2], (i + t) % 7, (i + t) % 3 != 0, t);
    for (int a = 0; a < 7; a++) test_gemm(29, 45, 70, a, 1, 2);
    static const int ss[][3] = {{1, 1, 1}, {7, 9, 64}, {40, 33, 129}, {64, 64, 300}, {100, 130, 17}, {3, 200, 5}};
    for (int i = 0; i < (int)(sizeof ss / sizeof ss[0]); i++)
        for (int tb = 0; tb <= 1; tb++) test_sgemm(ss[i][0], ss[i][1], ss[i][2], tb, 1 + (i + tb) % 2);

    nano_conv_desc cs[] = {
        mkdesc(1, 3, 9, 11, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),    /* 3×3 same */
        mkdesc(2, 16, 7, 7, 33, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1),   /* 1×1 direct */
        mkdesc(1, 5, 13, 10, 14, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1),  /* stride 2 */
        mkdesc(1, 4, 12, 12, 6, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1),   /* dilation 2 */
        mkdesc(1, 6, 9, 8, 13, 2, 4, 1, 2, 1, 1, 0, 2, 1, 1, 1),    /* kh≠kw, asymmetric pads */
        mkdesc(1, 8, 6, 6, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4),    /* grouped */
        mkdesc(2, 12, 10, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 12), /* depthwise */
        mkdesc(1, 9, 11, 13, 9, 3, 3, 2, 2, 1, 1, 0, 1, 1, 0, 9),   /* depthwise stride 2, asym */
        mkdesc(1, 7, 12, 40, 7, 5, 5, 1, 1, 2, 2, 4, 3, 4, 5, 7),   /* depthwise dilated 5×5 */
        mkdesc(1, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4),     /* depthwise multiplier 2 */
        mkdesc(1, 64, 6, 5, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),   /* K = 576: K blocks */
        mkdesc(1, 2, 5, 5, 3, 5, 5, 1, 1, 1, 1, 0, 0, 0, 0, 1),     /* 1×1 output */
        mkdesc(1, 3, 20, 21, 5, 1, 1, 2, 3, 1, 1, 0, 0, 1, 0, 1),   /* 1×1 strided, padded */
        mkdesc(1, 32, 7, 9, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),   /* Winograd: odd output, edge tiles */
        mkdesc(2, 17, 12, 5, 33, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1),  /* Winograd: no pads, N = 2 */
        mkdesc(1, 24, 10, 11, 16, 3, 3, 1, 1, 1, 1, 2, 1, 0, 3, 1), /* Winograd: asymmetric pads */
        mkdesc(1, 16, 70, 66, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1), /* Winograd: several tile blocks */
        mkdesc(1, 300, 5, 6, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1),  /* Winograd: C > the K block */
        mkdesc(2, 300, 7, 7, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1),  /* 1×1, pixels as rows, N = 2 */
        mkdesc(1, 40, 14, 14, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1), /* im2col, pixels as rows */
    };
    int nc = (int)(sizeof cs / sizeof cs[0]);
    for (int i = 0; i < nc; i++)
        for (int t = 1; t <= 2; t++) test_conv(cs[i], (i + 2 * t) % 7, (i + t) % 3 != 2, t);
    for (int a = 0; a < 7; a++) test_conv(cs[a % 2 ? 6 : 0], a, 1, 2);

    static const int qs[][3] = {{1, 1, 1},   {1, 33, 5},    {13, 33, 17}, {12, 32, 256}, {25, 67, 513},
                                {7, 5, 3},   {64, 100, 130}, {100, 61, 31}, {3, 40, 1000}};
    for (int i = 0; i < (int)(sizeof qs / sizeof qs[0]); i++)
        for (int t = 1; t <= 2; t++) test_qgemm(qs[i][0], qs[i][1], qs[i][2], t == 1 ? 0 : i % 7, i % 2, t);
    for (int a = 1; a < 7; a++) test_qgemm(20, 35, 50, a, 1, 2);
    for (int i = 0; i < nc; i++)
        for (int t = 1; t <= 2; t++) test_qconv(cs[i], t == 1 ? 0 : (i + 1) % 7, (i + t) % 2, t);
}

/* ---- --bench: GFLOP/s (not asserted) --------------------------------------------------- */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void bench_gemm(int M, int N, int K, int nthreads)
{
    float *X = frand((size_t)M * K, -1, 1), *W = frand((size_t)N * K, -1, 1), *Y = malloc((size_t)M * N * 4);
    nano_gemm *g = nano_gemm_prepare(W, NULL, N, K, epi(0));
    void *s = malloc(nano_gemm_scratch(g, M));
    double best = 1e30, flop = 2.0 * M * N * K;
    int reps = (int)(2e9 / flop) + 1;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        for (int i = 0; i < reps; i++) nano_gemm_run(g, M, X, K, Y, N, s, nthreads);
        double t = (now() - t0) / reps;
        best = t < best ? t : best;
    }
    double sb = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        for (int i = 0; i < reps; i++) nano_sgemm(M, N, K, X, K, W, K, 1, Y, N, nthreads);
        double t = (now() - t0) / reps;
        sb = t < sb ? t : sb;
    }
    printf("  %-7s t=%d gemm %4dx%4dx%4d  %7.1f GFLOP/s   sgemm %7.1f GFLOP/s\n", level_name, nthreads, M, N, K,
           flop / best * 1e-9, flop / sb * 1e-9);
    nano_gemm_free(g);
    free(X), free(W), free(Y), free(s);
}

static void bench_qgemm(int M, int N, int K, int nthreads)
{
    float *X = frand((size_t)M * K, -1, 1), *ws = frand((size_t)N, 0.01f, 0.02f), *Y = malloc((size_t)M * N * 4);
    int8_t *W = malloc((size_t)N * K);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = (int8_t)(rnext() % 255 - 127);
    nano_qgemm *g = nano_qgemm_prepare(W, ws, NULL, N, K, 0.01f, 128, epi(0));
    void *s = malloc(nano_qgemm_scratch(g, M));
    double best = 1e30, op = 2.0 * M * N * K;
    int reps = (int)(4e9 / op) + 1;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        for (int i = 0; i < reps; i++) nano_qgemm_run(g, M, X, K, Y, N, s, nthreads);
        double t = (now() - t0) / reps;
        best = t < best ? t : best;
    }
    printf("  %-7s t=%d qgemm %4dx%4dx%4d %7.1f GOP/s\n", level_name, nthreads, M, N, K, op / best * 1e-9);
    nano_qgemm_free(g);
    free(X), free(ws), free(Y), free(W), free(s);
}

static void bench_conv(nano_conv_desc d, int q, int nthreads, const char *name)
{
    int K = d.C / d.group * d.kh * d.kw;
    size_t nx = (size_t)d.N * d.C * d.H * d.W, nw = (size_t)d.M * K, ny = (size_t)d.N * d.M * d.OH * d.OW;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *y = malloc(ny * 4), *ws = frand((size_t)d.M, .01f, .02f);
    int8_t *wq = malloc(nw);
    for (size_t i = 0; i < nw; i++) wq[i] = (int8_t)(rnext() % 255 - 127);
    nano_conv *c = q ? NULL : nano_conv_prepare(&d, w, NULL, epi(1));
    nano_qconv *qc = q ? nano_qconv_prepare(&d, wq, ws, NULL, 0.01f, 128, epi(1)) : NULL;
    void *s = malloc((q ? nano_qconv_scratch(qc) : nano_conv_scratch(c)) + 1);
    double best = 1e30, flop = 2.0 * ny * K;
    int reps = (int)(1e9 / flop) + 1;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        for (int i = 0; i < reps; i++)
            if (q) nano_qconv_run(qc, x, y, s, nthreads);
            else nano_conv_run(c, x, y, s, nthreads);
        double t = (now() - t0) / reps;
        best = t < best ? t : best;
    }
    printf("  %-7s t=%d %sconv %-28s %7.1f G%s/s  (%.3f ms)\n", level_name, nthreads, q ? "q" : " ", name,
           flop / best * 1e-9, q ? "OP" : "FLOP", best * 1e3);
    nano_conv_free(c);
    nano_qconv_free(qc);
    free(x), free(w), free(y), free(ws), free(wq), free(s);
}

static void bench(void)
{
    for (int t = 1; t <= 2; t++) {
        int sz[] = {256, 512, 1024};
        for (int i = 0; i < 3; i++) bench_gemm(sz[i], sz[i], sz[i], t);
        bench_gemm(1, 1024, 1024, t);
        bench_gemm(128, 768, 3072, t);
        bench_conv(mkdesc(1, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1), 0, t, "3x3 64->64 56x56");
        bench_conv(mkdesc(1, 256, 56, 56, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1), 0, t, "1x1 256->64 56x56");
        bench_conv(mkdesc(1, 32, 112, 112, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 32), 0, t, "dw3x3 32 112x112");
        bench_conv(mkdesc(1, 3, 224, 224, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1), 0, t, "3x3s2 3->32 224x224");
        if (nano_isa() != NANO_ISA_AVX512) { /* int8 of AVX-512 is AVX2's kernel */
            bench_qgemm(512, 512, 512, t);
            bench_qgemm(128, 768, 3072, t);
            bench_conv(mkdesc(1, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1), 1, t, "3x3 64->64 56x56");
        }
    }
}

int main(int argc, char **argv)
{
    int do_bench = argc > 1 && !strcmp(argv[1], "--bench");
    level_name = "any";
    test_f16();
    test_quantize_rows();
    static const nano_isa_level levels[] = {NANO_ISA_PORTABLE, NANO_ISA_NEON, NANO_ISA_AVX2, NANO_ISA_AVX512,
                                            NANO_ISA_AVX512_VNNI};
    for (int i = 0; i < 5; i++) {
        if (!nano_isa_runs(levels[i])) continue;
        nano_isa_force(levels[i]);
        level_name = nano_isa_name();
        report(nano_isa() == levels[i], "forced level is in effect");
        if (!do_bench || getenv("NANO_BENCH_TESTS")) suite();
        if (do_bench) bench();
    }
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
