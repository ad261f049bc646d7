/* test_kernels_cnn — the CNN kernels written in Nebula (maxpool, global avgpool,
 * relu) against their double-precision specifications (docs/testing.md#kernel-triad), and the
 * thread-count independence of every CNN kernel; conv2d and batchnorm (oneDNN) are
 * test_kernels_conv's.
 *
 * For each kernel and shape (odd ones on purpose):
 *   (a) fast float forward vs the double reference, canaries around every output;
 *   (b) reference backward vs central differences of L = sum(out * R), rtol 1e-6;
 *   (c) fast backward vs reference backward;
 *   (d) backward adds into gradients that already hold values;
 *   (f) bit-identical results with 1 and 2 OpenMP threads, at sizes above every
 *       kernel's OpenMP threshold (oneDNN's conv2d and batchnorm: when repeated).
 * One line per check; exit 1 on any failure. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/act16.h"
#include "cpu/batchnorm.h"
#include "cpu/conv2d.h"
#include "cpu/pool.h"
#include "cpu/precision.h"
#include "cpu/relu.h"
#include "cpu/residual.h"
#include "../check.h"

/* The check line, formatted into the caller's `what` buffer. */
#define LABEL(...) (snprintf(what, sizeof what, __VA_ARGS__), what)

/* ---- maxpool ------------------------------------------------------------------ */

typedef struct pool_shape {
    const char *name;
    int N, C, H, W, K, stride, pad;
} pool_shape;

typedef struct pool_ctx {
    const pool_shape *s;
    int OH, OW;
    const double *x, *R;
    double *out;
    int32_t *arg;
    size_t no;
} pool_ctx;

static double pool_loss(void *p)
{
    const pool_ctx *c = p;
    const pool_shape *s = c->s;
    maxpool2d_forward_ref(c->out, c->arg, c->x, s->N, s->C, s->H, s->W, s->K, s->stride, s->pad, c->OH, c->OW);
    return kc_ddot(c->out, c->R, c->no);
}

#define POOL_ARGS(s, OH, OW) (s)->N, (s)->C, (s)->H, (s)->W, (s)->K, (s)->stride, (s)->pad, OH, OW

/* Distinct values 0.01 apart in random order: no ties, and h = 1e-5 never flips a max. */
static float *distinct(kc *k, size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = 0.01f * (float)((long)i - (long)n / 2);
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_below(&k->r, (uint32_t)i);
        float t = x[i - 1];
        x[i - 1] = x[j], x[j] = t;
    }
    return x;
}

static void test_maxpool(kc *k, const pool_shape *s)
{
    const int OH = (s->H + 2 * s->pad - s->K) / s->stride + 1, OW = (s->W + 2 * s->pad - s->K) / s->stride + 1;
    const size_t ni = (size_t)s->N * s->C * s->H * s->W, no = (size_t)s->N * s->C * OH * OW;
    /* an input gets at most ceil(K/stride)^2 output gradients */
    const size_t per = (size_t)((s->K + s->stride - 1) / s->stride) * (size_t)((s->K + s->stride - 1) / s->stride);
    char what[200];

    float *x = distinct(k, ni), *R = kc_frand(k, no, -1, 1);
    double *xd = kc_dfrom(x, ni), *Rd = kc_dfrom(R, no);

    /* (a) forward: a max is one of the inputs, so fast and reference agree exactly */
    float *out = kc_guarded(no);
    int32_t *arg = kc_iguarded(no), *argd = kc_iguarded(no);
    double *outd = kc_dzero(no);
    maxpool2d_forward(out, arg, x, POOL_ARGS(s, OH, OW));
    maxpool2d_forward_ref(outd, argd, xd, POOL_ARGS(s, OH, OW));
    bool same = !memcmp(arg, argd, no * sizeof *arg);
    for (size_t j = 0; j < no; j++) same &= (double)out[j] == outd[j];
    snprintf(what, sizeof what, "maxpool %s: forward fast vs reference (values exact, argmax equal)", s->name);
    kc_report(k, same, what, 0);
    snprintf(what, sizeof what, "maxpool %s: forward canaries intact (out, argmax)", s->name);
    kc_report(k, kc_guards_intact(out, no) && kc_iguards_intact(arg, no), what, 0);

    /* (b) */
    double *dxd = kc_dzero(ni);
    maxpool2d_backward_ref(dxd, Rd, argd, POOL_ARGS(s, OH, OW));
    pool_ctx ctx = { s, OH, OW, xd, Rd, kc_dzero(no), kc_iguarded(no), no };
    snprintf(what, sizeof what, "maxpool %s: reference dinp vs central differences", s->name);
    kc_check_fd(k, xd, ni, pool_loss, &ctx, dxd, kc_fd_atol(no, kc_abs_dot(outd, Rd, no)), what);

    /* (c), (d) */
    float *dx = kc_gzero(ni);
    maxpool2d_backward(dx, R, arg, POOL_ARGS(s, OH, OW));
    snprintf(what, sizeof what, "maxpool %s: backward fast vs reference", s->name);
    kc_close(k, dx, dxd, ni, kc_rtol_f32(per) * (double)per, kc_rtol_f32(per), what);
    float *g0 = kc_frand(k, ni, -1, 1), *dx3 = kc_gcopy(g0, ni);
    maxpool2d_backward(dx3, R, arg, POOL_ARGS(s, OH, OW));
    kc_check_adds(k, dx3, g0, dxd, ni, kc_rtol_f32(per) * (double)per, kc_rtol_f32(per),
               LABEL("maxpool %s: backward adds", s->name));
    kc_report(k, kc_guards_intact(dx, ni) && kc_guards_intact(dx3, ni),
              LABEL("maxpool %s: backward canaries intact", s->name), 0);
    double *rx = kc_dfrom(g0, ni);
    maxpool2d_backward_ref(rx, Rd, argd, POOL_ARGS(s, OH, OW));
    snprintf(what, sizeof what, "maxpool %s: reference backward adds", s->name);
    kc_check_adds_d(k, rx, g0, dxd, ni, what);

    /* Semantics. Ties: a constant image makes every window a tie; the winner is the
     * window's first in-image position. Padding is -inf, not 0: an all-negative
     * image pools to its own value. NaN propagates. */
    for (size_t i = 0; i < ni; i++) x[i] = -5.0f, xd[i] = -5.0;
    maxpool2d_forward(out, arg, x, POOL_ARGS(s, OH, OW));
    maxpool2d_forward_ref(outd, argd, xd, POOL_ARGS(s, OH, OW));
    bool ties = true, negs = true;
    for (size_t j = 0; j < no; j++) {
        int oh = (int)(j / OW % OH), ow = (int)(j % OW);
        int ih0 = oh * s->stride - s->pad, iw0 = ow * s->stride - s->pad;
        int32_t first = (ih0 < 0 ? 0 : ih0) * s->W + (iw0 < 0 ? 0 : iw0);
        ties &= arg[j] == first && argd[j] == first;
        negs &= out[j] == -5.0f && outd[j] == -5.0;
    }
    snprintf(what, sizeof what, "maxpool %s: ties go to the first maximum in scan order (fast, reference)", s->name);
    kc_report(k, ties, what, 0);
    snprintf(what, sizeof what, "maxpool %s: padding is -inf (all -5 image pools to -5)", s->name);
    kc_report(k, negs, what, 0);
    x[s->W + 1] = NAN; /* plane 0, row 1, column 1 */
    maxpool2d_forward(out, arg, x, POOL_ARGS(s, OH, OW));
    bool nan_ok = isnan(out[0]) && arg[0] == s->W + 1;
    snprintf(what, sizeof what, "maxpool %s: NaN propagates to its window with its index", s->name);
    kc_report(k, nan_ok, what, 0);

    free(x), free(R), free(xd), free(Rd), free(outd), free(dxd), free(ctx.out), free(g0), free(rx);
    free(ctx.arg - KC_GUARD), free(arg - KC_GUARD), free(argd - KC_GUARD);
    kc_guarded_free(out), kc_guarded_free(dx), kc_guarded_free(dx3);
}

/* ---- global average pool ------------------------------------------------------ */

typedef struct avg_ctx {
    int N, C, HW;
    const double *x, *R;
    double *out;
} avg_ctx;

static double avg_loss(void *p)
{
    const avg_ctx *c = p;
    avgpool_global_forward_ref(c->out, c->x, c->N, c->C, c->HW);
    return kc_ddot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_avgpool(kc *k, int N, int C, int HW)
{
    const size_t ni = (size_t)N * C * HW, no = (size_t)N * C;
    char what[200], name[64];
    snprintf(name, sizeof name, "N=%d C=%d HW=%d", N, C, HW);
    float *x = kc_frand(k, ni, -1, 1), *R = kc_frand(k, no, -1, 1);
    double *xd = kc_dfrom(x, ni), *Rd = kc_dfrom(R, no), *outd = kc_dzero(no), *dxd = kc_dzero(ni);
    float *out = kc_guarded(no);
    avgpool_global_forward(out, x, N, C, HW);
    avgpool_global_forward_ref(outd, xd, N, C, HW);
    kc_close(k, out, outd, no, kc_rtol_f32((size_t)HW + 1), kc_rtol_f32((size_t)HW + 1),
             LABEL("avgpool_global %s: forward fast vs reference", name));
    kc_report(k, kc_guards_intact(out, no), LABEL("avgpool_global %s: forward canaries intact", name), 0);

    avgpool_global_backward_ref(dxd, Rd, N, C, HW);
    avg_ctx ctx = { N, C, HW, xd, Rd, kc_dzero(no) };
    snprintf(what, sizeof what, "avgpool_global %s: reference dinp vs central differences", name);
    kc_check_fd(k, xd, ni, avg_loss, &ctx, dxd, kc_fd_atol(no * (size_t)HW, kc_abs_dot(outd, Rd, no)), what);

    float *dx = kc_gzero(ni), *g0 = kc_frand(k, ni, -1, 1), *dx3 = kc_gcopy(g0, ni);
    avgpool_global_backward(dx, R, N, C, HW);
    avgpool_global_backward(dx3, R, N, C, HW);
    snprintf(what, sizeof what, "avgpool_global %s: backward fast vs reference", name);
    kc_close(k, dx, dxd, ni, 0, kc_rtol_f32(2), what);
    kc_check_adds(k, dx3, g0, dxd, ni, 0, kc_rtol_f32(2), LABEL("avgpool_global %s: backward adds", name));
    kc_report(k, kc_guards_intact(dx, ni) && kc_guards_intact(dx3, ni),
              LABEL("avgpool_global %s: backward canaries intact", name), 0);
    double *rx = kc_dfrom(g0, ni);
    avgpool_global_backward_ref(rx, Rd, N, C, HW);
    snprintf(what, sizeof what, "avgpool_global %s: reference backward adds", name);
    kc_check_adds_d(k, rx, g0, dxd, ni, what);

    free(x), free(R), free(xd), free(Rd), free(outd), free(dxd), free(ctx.out), free(g0), free(rx);
    kc_guarded_free(out), kc_guarded_free(dx), kc_guarded_free(dx3);
}

/* ---- relu --------------------------------------------------------------------- */

typedef struct relu_ctx {
    const double *x, *R;
    double *out;
    size_t n;
} relu_ctx;

static double relu_loss(void *p)
{
    const relu_ctx *c = p;
    relu_forward_ref(c->out, c->x, c->n);
    return kc_ddot(c->out, c->R, c->n);
}

static void test_relu(kc *k, size_t n)
{
    char what[200];
    float *x = kc_frand(k, n, -1, 1), *R = kc_frand(k, n, -1, 1);
    for (size_t i = 0; i < n; i++) /* keep clear of the kink for central differences */
        if (fabsf(x[i]) < 1e-3f) x[i] = x[i] < 0 ? -1e-3f : 1e-3f;
    double *xd = kc_dfrom(x, n), *Rd = kc_dfrom(R, n), *outd = kc_dzero(n), *dxd = kc_dzero(n);

    float *out = kc_guarded(n), *inplace = kc_gcopy(x, n);
    relu_forward(out, x, n);
    relu_forward(inplace, inplace, n);
    relu_forward_ref(outd, xd, n);
    kc_close(k, out, outd, n, 0, 0, LABEL("relu n=%zu: forward fast vs reference (exact)", n));
    kc_report(k, !memcmp(out, inplace, n * sizeof *out) && kc_guards_intact(out, n) && kc_guards_intact(inplace, n),
              LABEL("relu n=%zu: in-place forward bit-identical, canaries intact", n), 0);

    relu_backward_ref(dxd, outd, Rd, n);
    relu_ctx ctx = { xd, Rd, kc_dzero(n), n };
    snprintf(what, sizeof what, "relu n=%zu: reference dinp vs central differences", n);
    kc_check_fd(k, xd, n, relu_loss, &ctx, dxd, kc_fd_atol(n, kc_abs_dot(outd, Rd, n)), what);

    float *dxo = kc_gzero(n), *dxi = kc_gzero(n), *g0 = kc_frand(k, n, -1, 1), *dx3 = kc_gcopy(g0, n);
    relu_backward(dxo, out, R, n);
    relu_backward(dxi, x, R, n);
    relu_backward(dx3, out, R, n);
    kc_close(k, dxo, dxd, n, 0, 0, LABEL("relu n=%zu: backward from the output vs reference (exact)", n));
    kc_report(k, !memcmp(dxo, dxi, n * sizeof *dxo), LABEL("relu n=%zu: backward from the input is bit-identical", n),
              0);
    kc_check_adds(k, dx3, g0, dxd, n, 0, 0, LABEL("relu n=%zu: backward adds", n));
    kc_report(k, kc_guards_intact(dxo, n) && kc_guards_intact(dxi, n) && kc_guards_intact(dx3, n),
              LABEL("relu n=%zu: backward canaries intact", n), 0);
    double *rx = kc_dfrom(g0, n);
    relu_backward_ref(rx, outd, Rd, n);
    snprintf(what, sizeof what, "relu n=%zu: reference backward adds", n);
    kc_check_adds_d(k, rx, g0, dxd, n, what);

    free(x), free(R), free(xd), free(Rd), free(outd), free(dxd), free(ctx.out), free(g0), free(rx);
    kc_guarded_free(out), kc_guarded_free(inplace), kc_guarded_free(dxo), kc_guarded_free(dxi);
    kc_guarded_free(dx3);
}

/* Edge values as PyTorch 1.13 gives them (torch.relu and its backward): the
 * derivative at exactly 0 (either sign) is 0; NaN passes forward with its
 * gradient; -0 stays -0. */
static void test_relu_edges(kc *k)
{
    const float x[5] = { -1.0f, 0.0f, -0.0f, 2.0f, NAN }, g[5] = { 1, 1, 1, 1, 1 };
    float y[5], dx[5] = { 0 }, dxi[5] = { 0 };
    relu_forward(y, x, 5);
    relu_backward(dx, y, g, 5);
    relu_backward(dxi, x, g, 5);
    bool fwd = y[0] == 0 && y[1] == 0 && y[2] == 0 && signbit(y[2]) && y[3] == 2 && isnan(y[4]);
    bool bwd = dx[0] == 0 && dx[1] == 0 && dx[2] == 0 && dx[3] == 1 && dx[4] == 1 && !memcmp(dx, dxi, sizeof dx);
    double yd[5], dd[5] = { 0 }, xd[5], gd[5] = { 1, 1, 1, 1, 1 };
    for (int i = 0; i < 5; i++) xd[i] = x[i];
    relu_forward_ref(yd, xd, 5);
    relu_backward_ref(dd, yd, gd, 5);
    fwd &= yd[0] == 0 && yd[1] == 0 && signbit(yd[2]) && yd[3] == 2 && isnan(yd[4]);
    bwd &= dd[0] == 0 && dd[1] == 0 && dd[2] == 0 && dd[3] == 1 && dd[4] == 1;
    kc_report(k, fwd, "relu edges: forward of -1, 0, -0, 2, NaN is 0, 0, -0, 2, NaN as PyTorch (fast, reference)", 0);
    kc_report(k, bwd, "relu edges: gradient 0, 0, 0, 1, 1 as PyTorch (0 at exactly 0; fast from output and input, reference)", 0);
}

/* ---- (f) thread-count independence -------------------------------------------- */

/* Runs the fast kernels, forward and backward, at sizes above each kernel's
 * OpenMP threshold and appends all outputs to `res` (bytes). `conv` selects the
 * convolutions (whose GEMMs are OpenBLAS's: with its OpenMP build, BLAS threads
 * follow the OpenMP thread count and may change the summation order) or every
 * other kernel (our own loops: independent of the thread count). */
static size_t run_all(float *res, const float *src, bool conv)
{
    size_t at = 0;
    if (conv) {
    /* conv 3x3 pad 1, 1x1, 1x1 stride 2 on the blocked layout, then a batch norm with ReLU */
    const int N = 2, C = 16, H = 24, W = 24, OC = 128;
    const size_t ni = (size_t)N * C * H * W, no = (size_t)N * OC * H * W;
    const float *x = src, *w = src + ni, *g = src + 3 * ni; /* src holds >= 3*ni + no */
    static const int ks[3][3] = { { 3, 1, 1 }, { 1, 1, 0 }, { 1, 2, 0 } }; /* K, stride, pad */
    for (int v = 0; v < 3; v++) {
        int K = ks[v][0], st = ks[v][1], pad = ks[v][2], OH = (H + 2 * pad - K) / st + 1;
        conv2d_shape cs = { N, C, H, W, OC, K, K, st, pad, OH, OH };
        conv2d_plan p;
        conv2d_plan_init(&p, &cs, DNN_BLOCKED, DNN_BLOCKED, false, true);
        size_t nout = (size_t)N * OC * OH * OH, nw = (size_t)OC * C * K * K;
        conv2d_plan_forward(&p, res + at, x, w, NULL);
        at += nout;
        memset(res + at + ni, 0, nw * sizeof *res);
        conv2d_plan_backward(&p, res + at, res + at + ni, NULL, g, x);
        at += ni + nw;
        conv2d_plan_free(&p);
    }
    batchnorm_plan bp;
    batchnorm_plan_init(&bp, N, OC, H, W, DNN_BLOCKED, 1e-5f, true);
    float *rm = res + at + no, *rv = rm + OC;
    for (int c = 0; c < OC; c++) rm[c] = 0, rv[c] = 1;
    batchnorm_plan_forward(&bp, res + at, g, w, w + OC, rm, rv, 0.1f, true);
    at += no + 2 * OC;
    memset(res + at + no, 0, 2 * OC * sizeof *res);
    batchnorm_plan_backward(&bp, res + at, res + at + no, res + at + no + OC, x, g, w, w + OC);
    at += no + 2 * OC;
    batchnorm_plan_free(&bp);
    return at;
    }

    /* maxpool on (4, 16) planes of 32x32 */
    const int BN = 4, BC = 16, BHW = 1024;
    const size_t nb = (size_t)BN * BC * BHW;
    const size_t npo = (size_t)BN * BC * 16 * 16;
    int32_t *arg = malloc(npo * sizeof *arg);
    maxpool2d_forward(res + at, arg, src, BN, BC, 32, 32, 3, 2, 1, 16, 16);
    at += npo;
    memcpy(res + at, arg, npo * sizeof *arg);
    at += npo;
    memset(res + at, 0, nb * sizeof *res);
    maxpool2d_backward(res + at, src + nb, arg, BN, BC, 32, 32, 3, 2, 1, 16, 16);
    at += nb;
    free(arg);
    avgpool_global_forward(res + at, src, BN * 4, BC, BHW / 4);
    at += (size_t)BN * 4 * BC;
    memset(res + at, 0, nb * sizeof *res);
    avgpool_global_backward(res + at, src, BN * 4, BC, BHW / 4);
    at += nb;

    /* relu, 2^17 elements, forward and backward */
    const size_t nr = (size_t)1 << 17;
    relu_forward(res + at, src, nr);
    memset(res + at + nr, 0, nr * sizeof *res);
    relu_backward(res + at + nr, res + at, src + nr, nr);
    at += 2 * nr;
    return at;
}

static void test_threads(kc *k)
{
    const size_t nsrc = (size_t)1 << 20, nres = (size_t)1 << 21;
    float *src = kc_frand(k, nsrc, -1, 1), *r1 = calloc(nres, sizeof *r1), *r2 = calloc(nres, sizeof *r2);
    omp_set_num_threads(1);
    size_t n1 = run_all(r1, src, false);
    omp_set_num_threads(2);
    size_t n2 = run_all(r2, src, false);
    bool same = n1 == n2 && n1 <= nres && !memcmp(r1, r2, n1 * sizeof *r1);
    kc_report(k, same, "pooling, relu, forward and backward: bit-identical with 1 and 2 OpenMP threads",
              (double)n1);
    n1 = run_all(r1, src, true);
    n2 = run_all(r2, src, true);
    same = n1 == n2 && n1 <= nres && !memcmp(r1, r2, n1 * sizeof *r1);
    kc_report(k, same, "conv2d and batchnorm (oneDNN) forward and backward: bit-identical when repeated at the same thread count", (double)n1);
    free(src), free(r1), free(r2);
}

/* act16 (bf16 activations): each pass is its fp32 counterpart's result rounded once,
 * bit for bit, on n values (above the threads' threshold, an odd tail) with a NaN, an
 * infinity and signed zeros among them; the layout converters round-trip exactly. */
static void test_act16(kc *k)
{
    enum { N = 3, C = 32, HW = 731 };
    const size_t n = (size_t)N * C * HW;
    float *a = kc_frand(k, n, -4, 4), *b = kc_frand(k, n, -4, 4), *g = kc_frand(k, n, -1, 1);
    a[0] = NAN, a[1] = -0.0f, b[1] = 0.0f, a[2] = INFINITY, b[3] = -a[3];
    uint16_t *a16 = malloc(n * 2), *b16 = malloc(n * 2), *g16 = malloc(n * 2), *want = malloc(n * 2), *got = malloc(n * 2);
    float *af = malloc(n * 4), *bf = malloc(n * 4), *gf = malloc(n * 4), *r = malloc(n * 4);
    f32_to_bf16(a, a16, n), f32_to_bf16(b, b16, n), f32_to_bf16(g, g16, n);
    bf16_to_f32(a16, af, n), bf16_to_f32(b16, bf, n), bf16_to_f32(g16, gf, n);

    memcpy(r, af, n * 4);
    residual_forward(r, r, bf, n);
    relu_forward(r, r, n);
    f32_to_bf16(r, want, n);
    memcpy(got, a16, n * 2);
    act16_add_relu(got, b16, n);
    kc_report(k, !memcmp(got, want, n * 2), "act16_add_relu = residual_forward then relu_forward, rounded", 0);
    memcpy(r, af, n * 4);
    add_relu_forward(r, bf, n);
    float *r2 = malloc(n * 4);
    memcpy(r2, af, n * 4);
    residual_forward(r2, r2, bf, n);
    relu_forward(r2, r2, n);
    kc_report(k, !memcmp(r, r2, n * 4), "add_relu_forward = residual_forward then relu_forward, bit for bit", 0);

    memcpy(r, gf, n * 4);  /* dinp starts non-zero: the pass adds */
    relu_backward(r, bf, af, n);
    f32_to_bf16(r, want, n);
    memcpy(got, g16, n * 2);
    act16_relu_backward(got, b16, a16, n);
    kc_report(k, !memcmp(got, want, n * 2), "act16_relu_backward = relu_backward (adds), rounded", 0);

    memcpy(r, gf, n * 4);
    residual_backward(r, NULL, af, n);
    f32_to_bf16(r, want, n);
    memcpy(got, g16, n * 2);
    act16_add(got, a16, n);
    kc_report(k, !memcmp(got, want, n * 2), "act16_add = residual_backward (adds), rounded", 0);

    float *blk = malloc(n * 4);
    dnn_nchw_to_blocked(blk, g, N, C, HW);
    f32_to_bf16(blk, want, n);
    act16_from_nchw(got, g, N, C, HW);
    kc_report(k, !memcmp(got, want, n * 2), "act16_from_nchw = dnn_nchw_to_blocked, rounded", 0);
    act16_to_nchw(r, got, N, C, HW);
    act16_from_nchw(a16, r, N, C, HW);
    kc_report(k, !memcmp(a16, got, n * 2), "act16_to_nchw then act16_from_nchw: the same bf16 values", 0);
    free(a), free(b), free(g), free(a16), free(b16), free(g16), free(want), free(got), free(af), free(bf), free(gf);
    free(r), free(r2), free(blk);
}

int main(void)
{
    kc k;
    kc_init(&k, 20240611);

    static const pool_shape pools[] = {
        { "N=2 C=3 9x9 K=3 s2 p1", 2, 3, 9, 9, 3, 2, 1 },
        { "N=2 C=3 15x15 K=3 s2 p1 (stem)", 2, 3, 15, 15, 3, 2, 1 },
        { "N=1 C=2 8x7 K=2 s2 p0 (floor drops a column)", 1, 2, 8, 7, 2, 2, 0 },
        { "N=2 C=2 6x5 K=3 s1 p1 (overlapping)", 2, 2, 6, 5, 3, 1, 1 },
    };
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) test_maxpool(&k, &pools[i]);

    test_avgpool(&k, 2, 3, 49);
    test_avgpool(&k, 2, 5, 1);
    test_relu(&k, 1037);
    test_relu_edges(&k);
    test_act16(&k);
    test_threads(&k);

    printf("%s: %d failure(s)\n", k.failures ? "FAIL" : "ok", k.failures);
    return k.failures ? 1 : 0;
}
