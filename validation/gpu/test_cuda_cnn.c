/* test_cuda_cnn — the CUDA matmul (fp32, TF32, bf16) and CNN kernels (conv2d,
 * batchnorm, max/avg pooling, relu) against the CPU kernels on the same random
 * inputs, several shapes each (odd sizes, C not a multiple of 8, BT = 1, both
 * matmul layouts, NULL bias and gradients, misaligned pointers, ResNet's 7x7/2,
 * 3x3/1 and 1x1/2 convolutions), outputs in guarded device buffers.
 *
 * Tolerances, |got - ref| <= atol + rtol*|ref|, with u = FLT_EPSILON = 2^-23 and K
 * the reduction length, A and B the largest magnitudes of the two factors:
 *   fp32 (CUDA vs CPU, both fp32 with different summation orders): each of the K
 *     roundings of a partial sum is <= u/2 * |partial| and |partial| <= K*A*B; with
 *     two implementations and summation-order slack, atol = 2u(K+2)*A*B (+ 2u*|C0|
 *     for a bias or pre-filled gradient added on top), rtol = 4u. A TF32 leak
 *     (2^-11 per operand, ~sqrt(K)*A*B/3*2^-11 typical) is >= 10x above this for
 *     the K used here, so the fp32 checks also prove "no TF32".
 *   tensor-core accumulation of exactly representable (pre-rounded) operands: the
 *     products are exact in fp32 (8+8 significant bits), only the accumulation
 *     differs; Hopper's MMA may truncate while aligning, so allow a K^1.5 growth:
 *     atol = u*K*(4 + sqrt(K))*A*B.
 *   bf16 vs the unrounded CPU result: each operand is rounded to nearest even with
 *     relative error <= 2^-9, a product by <= 2^-8; the K errors are independent
 *     with std <= 0.14*2^-8*sqrt(K)*A*B for uniform data, so atol = 4*2^-8*sqrt(K)*A*B
 *     (~30 sigma; it also covers the worst case 2^-8*K*A*B for K <= 16) plus the
 *     tensor-core term, rtol = 2*2^-8.
 *   TF32 vs CPU: the same with 2^-10 per operand (conversion may truncate):
 *     atol = 4*2^-10*sqrt(K)*A*B + tensor-core term, rtol = 2^-9.
 *   batchnorm vs the double reference: the GPU's statistics are reduced in double,
 *     so mean, variance and rstd carry a few float roundings (<= 4u relative); the
 *     output (x - mean)*rstd*w + b is then within 16u*((|x|+|mean|)*rstd*|w| + |b|).
 *     Backward sums of K = M = N*H*W float terms in double: atol 4u*M*max|term|.
 *   relu, maxpool (values, argmax, backward) and avgpool backward: bit-exact (the
 *     kernels repeat the CPU's expressions in the CPU's order).
 * Backward tests pre-fill every ADDED gradient with random values (and every
 * WRITTEN one with garbage) on both sides. */
#define CHECK_GPU  /* the CUDA checks */
#include "../check.h"

#include <float.h>
#include <stdbool.h>

#include "cpu/batchnorm.h"
#include "cpu/conv2d.h"
#include "cpu/matmul.h"
#include "cpu/pool.h"
#include "cpu/relu.h"
#include "cuda/cnn.h"
#include "cuda/matmul.h"

static uint64_t seed = 0x2545f4914f6cdd1dull;
static const double U = FLT_EPSILON; /* 2^-23 */

static float *fnew(size_t n) { return (float *)calloc(n ? n : 1, sizeof(float)); }
static void fill(float *x, size_t n, float lo, float hi) { gpu_fill_uniform(x, n, lo, hi, &seed); }
static float *fcopy(const float *x, size_t n)
{
    float *y = fnew(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}
static double maxabs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* Round to bf16, nearest even (inputs here are finite). */
static float bf16r(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
static float *bf16_copy(const float *x, size_t n)
{
    float *y = fnew(n);
    for (size_t i = 0; i < n; i++) y[i] = bf16r(x[i]);
    return y;
}

/* A guarded device buffer whose data start `off` floats past the guarded start
 * (off = 1: 4-byte aligned, for the misaligned cases); the skipped floats hold
 * canary bits, so gpu_check_close's canary check still holds. */
static float *dev_off(const float *host, size_t n, int off)
{
    float *h = fnew(n + off);
    uint32_t c = GPU_CANARY_BITS;
    for (int i = 0; i < off; i++) memcpy(&h[i], &c, 4);
    if (host) memcpy(h + off, host, n * sizeof(float));
    float *d = gpu_guarded(h, n + off) + off;
    free(h);
    return d;
}
static void dev_free(float *d, int off)
{
    if (d) gpu_release(d - off, 1);
}
static void put(float *d, const float *h, size_t n)
{
    int e = cuda_memcpy_h2d(d, h, n * sizeof(float));
    if (e) gpu_die("cuda_memcpy_h2d", e);
}

static void verdict(bool ok, const char *what)
{
    ok ? gpu_passed++ : gpu_failed++;
    printf("%s %s\n", ok ? "ok   " : "FAIL ", what);
}

/* Compares a plain (unguarded) device buffer of n floats with a double reference. */
static void check_plain(const char *what, const float *dev, const double *ref, size_t n, double atol, double rtol)
{
    gpu_sync(what);
    float *h = fnew(n);
    int e = cuda_memcpy_d2h(h, dev, n * sizeof(float));
    if (e) gpu_die("cuda_memcpy_d2h", e);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)h[i] - ref[i]) <= atol + rtol * fabs(ref[i]))) bad++;
    char line[320];
    snprintf(line, sizeof line, "%s (%zu values%s)", what, n, bad ? ", some outside tolerance" : "");
    verdict(bad == 0, line);
    free(h);
}

typedef struct tol {
    double atol, rtol;
} tol;

static tol tol_f32(double K, double A, double B, double extra)
{
    return (tol){ 2 * U * (K + 2) * A * B + 2 * U * extra, 4 * U };
}
static double tc_atol(double K, double A, double B) { return U * K * (4 + sqrt(K)) * A * B; }
static tol tol_tc(double K, double A, double B, double extra)
{
    return (tol){ tc_atol(K, A, B) + 2 * U * extra, 4 * U };
}
static tol tol_bf16(double K, double A, double B, double extra)
{
    return (tol){ 4 * ldexp(1, -8) * sqrt(K) * A * B + tc_atol(K, A, B) + 2 * U * extra, 2 * ldexp(1, -8) };
}
static tol tol_tf32(double K, double A, double B, double extra)
{
    return (tol){ 4 * ldexp(1, -10) * sqrt(K) * A * B + tc_atol(K, A, B) + 2 * U * extra, ldexp(1, -9) };
}

/* ---- matmul ------------------------------------------------------------------ */

typedef void (*mm_fwd)(float *, const float *, const float *, const float *, int, int, int, matmul_layout);
typedef void (*mm_bwd)(float *, float *, float *, const float *, const float *, const float *, int, int, int,
                       matmul_layout);
enum { MODE_F32, MODE_TF32, MODE_BF16, MODES };
static const char *mode_name[MODES] = { "fp32", "tf32", "bf16" };
static const mm_fwd mm_fwds[MODES] = { cuda_matmul_forward, cuda_matmul_forward_tf32, cuda_matmul_forward_bf16 };
static const mm_bwd mm_bwds[MODES] = { cuda_matmul_backward, cuda_matmul_backward_tf32, cuda_matmul_backward_bf16 };

static tol mm_tol(int mode, double K, double A, double B, double extra)
{
    return mode == MODE_F32 ? tol_f32(K, A, B, extra) : mode == MODE_TF32 ? tol_tf32(K, A, B, extra)
                                                                          : tol_bf16(K, A, B, extra);
}

/* nulls: bit 0 dinp, bit 1 dweight, bit 2 dbias are passed as NULL. off: 1 makes
 * every device pointer 4-byte aligned only (and the bias unfit for the epilogue). */
static void test_matmul(int BT, int C, int OC, matmul_layout L, bool has_bias, int off, int nulls)
{
    const size_t nx = (size_t)BT * C, nw = (size_t)C * OC, ny = (size_t)BT * OC;
    const char *ln = L == MATMUL_LAYOUT_OUT_IN ? "OUT_IN" : "IN_OUT";
    char what[256];
    float *x = fnew(nx), *w = fnew(nw), *b = fnew(OC), *g = fnew(ny);
    float *g0x = fnew(nx), *g0w = fnew(nw), *g0b = fnew(OC);
    fill(x, nx, -1, 1), fill(w, nw, -0.5f, 0.5f), fill(b, OC, -1, 1), fill(g, ny, -1, 1);
    fill(g0x, nx, -1, 1), fill(g0w, nw, -1, 1), fill(g0b, OC, -1, 1);
    const float *bias = has_bias ? b : NULL;
    const double X = maxabs(x, nx), Wm = maxabs(w, nw), G = maxabs(g, ny), Bm = has_bias ? maxabs(b, OC) : 0.0;

    /* CPU references: on the originals, and on bf16-rounded operands. */
    float *y = fnew(ny), *xr = bf16_copy(x, nx), *wr = bf16_copy(w, nw), *gr = bf16_copy(g, ny), *yr = fnew(ny);
    matmul_forward(y, x, w, bias, BT, C, OC, L);
    matmul_forward(yr, xr, wr, bias, BT, C, OC, L);
    float *dx = fcopy(g0x, nx), *dw = fcopy(g0w, nw), *db = fcopy(g0b, OC);
    float *dxr = fcopy(g0x, nx), *dwr = fcopy(g0w, nw);
    matmul_backward(dx, dw, db, g, x, w, BT, C, OC, L);
    matmul_backward(dxr, dwr, NULL, gr, xr, wr, BT, C, OC, L);

    float *d_x = dev_off(x, nx, off), *d_w = dev_off(w, nw, off), *d_b = has_bias ? dev_off(b, OC, off) : NULL;
    float *d_g = dev_off(g, ny, off), *d_y = dev_off(NULL, ny, off);
    float *d_dx = dev_off(NULL, nx, off), *d_dw = dev_off(NULL, nw, off), *d_db = dev_off(NULL, OC, off);
    float *p_dx = nulls & 1 ? NULL : d_dx, *p_dw = nulls & 2 ? NULL : d_dw, *p_db = nulls & 4 ? NULL : d_db;

    for (int m = 0; m < MODES; m++) {
#define LABEL(...) (snprintf(what, sizeof what, __VA_ARGS__), what)
        const char *mn = mode_name[m];
        tol t = mm_tol(m, C, X, Wm, Bm);
        mm_fwds[m](d_y, d_x, d_w, bias ? d_b : NULL, BT, C, OC, L);
        gpu_check_close(LABEL("matmul %s fwd BT=%d C=%d OC=%d %s%s%s vs CPU", mn, BT, C, OC, ln,
                              has_bias ? "" : " no-bias", off ? " misaligned" : ""),
                        d_y, y, ny, t.atol, t.rtol);
        if (m == MODE_BF16) {
            t = tol_tc(C, maxabs(xr, nx), maxabs(wr, nw), Bm);
            gpu_check_close(LABEL("matmul bf16 fwd BT=%d C=%d OC=%d %s vs CPU on bf16-rounded inputs", BT, C, OC, ln),
                            d_y, yr, ny, t.atol, t.rtol);
        }
        put(d_dx, g0x, nx), put(d_dw, g0w, nw), put(d_db, g0b, OC);
        mm_bwds[m](p_dx, p_dw, p_db, d_g, d_x, d_w, BT, C, OC, L);
        if (p_dx) {
            t = mm_tol(m, OC, G, Wm, maxabs(g0x, nx));
            gpu_check_close(LABEL("matmul %s bwd dinp (adds) BT=%d C=%d OC=%d %s vs CPU", mn, BT, C, OC, ln), d_dx, dx,
                            nx, t.atol, t.rtol);
            if (m == MODE_BF16) {
                t = tol_tc(OC, maxabs(gr, ny), maxabs(wr, nw), maxabs(g0x, nx));
                gpu_check_close(LABEL("matmul bf16 bwd dinp %s vs CPU on bf16-rounded inputs", ln), d_dx, dxr, nx,
                                t.atol, t.rtol);
            }
        } else {
            gpu_check_close(LABEL("matmul %s bwd dinp=NULL leaves the buffer alone", mn), d_dx, g0x, nx, 0, 0);
        }
        if (p_dw) {
            t = mm_tol(m, BT, X, G, maxabs(g0w, nw));
            gpu_check_close(LABEL("matmul %s bwd dweight (adds) BT=%d C=%d OC=%d %s vs CPU", mn, BT, C, OC, ln), d_dw,
                            dw, nw, t.atol, t.rtol);
            if (m == MODE_BF16) {
                t = tol_tc(BT, maxabs(xr, nx), maxabs(gr, ny), maxabs(g0w, nw));
                gpu_check_close(LABEL("matmul bf16 bwd dweight %s vs CPU on bf16-rounded inputs", ln), d_dw, dwr, nw,
                                t.atol, t.rtol);
            }
        } else {
            gpu_check_close(LABEL("matmul %s bwd dweight=NULL leaves the buffer alone", mn), d_dw, g0w, nw, 0, 0);
        }
        if (p_db) {  /* an fp32 column sum in every mode */
            t = tol_f32(BT, G, 1, maxabs(g0b, OC));
            gpu_check_close(LABEL("matmul %s bwd dbias (adds) BT=%d OC=%d vs CPU", mn, BT, OC), d_db, db, OC, t.atol,
                            t.rtol);
        } else {
            gpu_check_close(LABEL("matmul %s bwd dbias=NULL leaves the buffer alone", mn), d_db, g0b, OC, 0, 0);
        }
    }
    dev_free(d_x, off), dev_free(d_w, off), dev_free(d_b, off), dev_free(d_g, off), dev_free(d_y, off);
    dev_free(d_dx, off), dev_free(d_dw, off), dev_free(d_db, off);
    free(x), free(w), free(b), free(g), free(g0x), free(g0w), free(g0b), free(y), free(xr), free(wr), free(gr);
    free(yr), free(dx), free(dw), free(db), free(dxr), free(dwr);
}

/* ---- conv2d ------------------------------------------------------------------ */

static void test_conv(int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, bool has_bias)
{
    conv2d_shape s = { N, C, H, W, OC, KH, KW, stride, pad, (H + 2 * pad - KH) / stride + 1,
                       (W + 2 * pad - KW) / stride + 1 };
    const size_t nx = (size_t)N * C * H * W, nw = (size_t)OC * C * KH * KW, ny = (size_t)N * OC * s.OH * s.OW;
    char what[256], name[96];
    snprintf(name, sizeof name, "N=%d C=%d %dx%d OC=%d k%dx%d/%d pad %d%s", N, C, H, W, OC, KH, KW, stride, pad,
             has_bias ? " bias" : "");
    float *x = fnew(nx), *w = fnew(nw), *b = fnew(OC), *g = fnew(ny), *g0w = fnew(nw), *g0b = fnew(OC);
    float *junk = fnew(nx);
    fill(x, nx, -1, 1), fill(w, nw, -0.5f, 0.5f), fill(b, OC, -1, 1), fill(g, ny, -1, 1);
    fill(g0w, nw, -1, 1), fill(g0b, OC, -1, 1), fill(junk, nx, 5, 9);

    conv2d_plan cp;
    conv2d_plan_init(&cp, &s, DNN_NCHW, DNN_NCHW, has_bias, true);
    float *y = fnew(ny), *dx = fcopy(junk, nx), *dw = fcopy(g0w, nw), *db = fcopy(g0b, OC);
    conv2d_plan_forward(&cp, y, x, w, has_bias ? b : NULL);
    conv2d_plan_backward(&cp, dx, dw, db, g, x);

    cuda_conv2d_plan gp;
    cuda_conv2d_plan_init(&gp, &s, DNN_NCHW, DNN_NCHW, has_bias, true);
    float *d_x = gpu_guarded(x, nx), *d_w = gpu_guarded(w, nw), *d_b = gpu_guarded(b, OC), *d_g = gpu_guarded(g, ny);
    float *d_y = gpu_guarded(NULL, ny), *d_dx = gpu_guarded(junk, nx), *d_dw = gpu_guarded(g0w, nw);
    float *d_db = gpu_guarded(g0b, OC);
    cuda_conv2d_plan_forward(&gp, d_y, d_x, d_w, has_bias ? d_b : NULL);
    tol t = tol_f32((double)C * KH * KW, maxabs(x, nx), maxabs(w, nw), has_bias ? maxabs(b, OC) : 0);
    snprintf(what, sizeof what, "conv2d fwd %s vs CPU plan", name);
    gpu_check_close(what, d_y, y, ny, t.atol, t.rtol);
    cuda_conv2d_plan_backward(&gp, d_dx, d_dw, d_db, d_g, d_x);
    const double G = maxabs(g, ny), P = (double)N * s.OH * s.OW;
    t = tol_f32((double)OC * KH * KW, G, maxabs(w, nw), 0);
    snprintf(what, sizeof what, "conv2d bwd dinp (written) %s vs CPU plan", name);
    gpu_check_close(what, d_dx, dx, nx, t.atol, t.rtol);
    t = tol_f32(P, maxabs(x, nx), G, maxabs(g0w, nw));
    snprintf(what, sizeof what, "conv2d bwd dweight (adds) %s vs CPU plan", name);
    gpu_check_close(what, d_dw, dw, nw, t.atol, t.rtol);
    t = tol_f32(P, G, 1, maxabs(g0b, OC));
    snprintf(what, sizeof what, "conv2d bwd dbias (adds) %s vs CPU plan", name);
    gpu_check_close(what, d_db, db, OC, t.atol, t.rtol);

    /* dweight only: dinp and dbias NULL leave everything else alone. */
    put(d_dw, g0w, nw), put(d_dx, junk, nx);
    cuda_conv2d_plan_backward(&gp, NULL, d_dw, NULL, d_g, d_x);
    t = tol_f32(P, maxabs(x, nx), G, maxabs(g0w, nw));
    snprintf(what, sizeof what, "conv2d bwd dweight alone %s", name);
    gpu_check_close(what, d_dw, dw, nw, t.atol, t.rtol);
    snprintf(what, sizeof what, "conv2d bwd dinp=NULL leaves the buffer alone %s", name);
    gpu_check_close(what, d_dx, junk, nx, 0, 0);

    cuda_conv2d_plan_free(&gp);
    conv2d_plan_free(&cp);
    gpu_release(d_x, 1), gpu_release(d_w, 1), gpu_release(d_b, 1), gpu_release(d_g, 1), gpu_release(d_y, 1);
    gpu_release(d_dx, 1), gpu_release(d_dw, 1), gpu_release(d_db, 1);
    free(x), free(w), free(b), free(g), free(g0w), free(g0b), free(junk), free(y), free(dx), free(dw), free(db);
}

static void test_conv_refuses_blocked(void)
{
    conv2d_shape s = { 2, 8, 8, 8, 8, 3, 3, 1, 1, 8, 8 };
    cuda_conv2d_plan gp;
    char msg[256];
    cuda_error_take(msg, sizeof msg);
    cuda_conv2d_plan_init(&gp, &s, DNN_BLOCKED, DNN_BLOCKED, false, true);
    int e = cuda_error_take(msg, sizeof msg);
    cuda_conv2d_plan_free(&gp);
    cuda_batchnorm_plan bp;
    cuda_batchnorm_plan_init(&bp, 2, 8, 4, 4, DNN_BLOCKED, 1e-5f, false);
    int e2 = cuda_error_take(msg, sizeof msg);
    cuda_batchnorm_plan_free(&bp);
    verdict(e != 0 && !gp.ok && e2 != 0, "conv2d and batchnorm plans refuse DNN_BLOCKED with a recorded error");
}

/* ---- batchnorm ---------------------------------------------------------------- */

static double *dnew(size_t n) { return (double *)calloc(n ? n : 1, sizeof(double)); }
static double *to_d(const float *x, size_t n)
{
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float *to_f(const double *x, size_t n)
{
    float *f = fnew(n);
    for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}

static void test_batchnorm(int N, int C, int H, int W, float off, bool relu)
{
    const int HW = H * W;
    const size_t n = (size_t)N * C * HW, M = (size_t)N * HW;
    const float eps = 1e-5f, momentum = 0.1f;
    char what[256], name[80];
    snprintf(name, sizeof name, "N=%d C=%d %dx%d offset %g%s", N, C, H, W, off, relu ? " +relu" : "");
    float *x = fnew(n), *w = fnew(C), *b = fnew(C), *g = fnew(n), *rm = fnew(C), *rv = fnew(C);
    float *g0w = fnew(C), *g0b = fnew(C), *junk = fnew(n);
    fill(x, n, off - 2, off + 2), fill(w, C, 0.5f, 1.5f), fill(b, C, -0.5f, 0.5f), fill(g, n, -1, 1);
    fill(rm, C, -1, 1), fill(rv, C, 0.5f, 2), fill(g0w, C, -1, 1), fill(g0b, C, -1, 1), fill(junk, n, 5, 9);

    /* Reference (double): training forward, ReLU applied after, running stats. */
    double *xd = to_d(x, n), *wd = to_d(w, C), *bd = to_d(b, C), *rmd = to_d(rm, C), *rvd = to_d(rv, C);
    double *yd = dnew(n), *mean = dnew(C), *rstd = dnew(C);
    batchnorm_forward_ref(yd, mean, rstd, rmd, rvd, xd, wd, bd, N, C, HW, eps, momentum, 1);
    double *gd = to_d(g, n), *outd = dnew(n);
    for (size_t i = 0; i < n; i++) {
        outd[i] = relu && !(yd[i] > 0) ? 0.0 : yd[i];
        if (relu && !(yd[i] > 0)) gd[i] = 0.0; /* the gradient through the ReLU */
    }
    double *dxd = dnew(n), *sgx = dnew(C), *sg = dnew(C);
    batchnorm_backward_ref(dxd, sgx, sg, gd, xd, wd, mean, rstd, N, C, HW);

    cuda_batchnorm_plan p;
    cuda_batchnorm_plan_init(&p, N, C, H, W, DNN_NCHW, eps, relu);
    float *d_x = gpu_guarded(x, n), *d_w = gpu_guarded(w, C), *d_b = gpu_guarded(b, C), *d_g = gpu_guarded(g, n);
    float *d_y = gpu_guarded(NULL, n), *d_rm = gpu_guarded(rm, C), *d_rv = gpu_guarded(rv, C);
    cuda_batchnorm_plan_forward(&p, d_y, d_x, d_w, d_b, d_rm, d_rv, momentum, true);

    double X = 0, rsm = 0, wm = maxabs(w, C), bm = maxabs(b, C), mm = 0;
    for (int c = 0; c < C; c++) rsm = fmax(rsm, rstd[c]), mm = fmax(mm, fabs(mean[c]));
    X = maxabs(x, n) + mm;
    float *outf = to_f(outd, n);
    snprintf(what, sizeof what, "batchnorm train fwd %s vs reference", name);
    gpu_check_close(what, d_y, outf, n, 16 * U * (X * rsm * wm + bm), 16 * U);
    snprintf(what, sizeof what, "batchnorm saved mean %s", name);
    check_plain(what, p.mean, mean, C, 2 * U * mm, 2 * U); /* double-accurate, then rounded to float */
    double *var = dnew(C);
    for (int c = 0; c < C; c++) var[c] = 1.0 / (rstd[c] * rstd[c]) - eps;
    snprintf(what, sizeof what, "batchnorm saved biased variance %s", name);
    double vm = 0;
    for (int c = 0; c < C; c++) vm = fmax(vm, var[c]);
    check_plain(what, p.var, var, C, 2 * U * vm, 2 * U);
    float *rmf = to_f(rmd, C), *rvf = to_f(rvd, C);
    snprintf(what, sizeof what, "batchnorm running mean after a step %s", name);
    gpu_check_close(what, d_rm, rmf, C, 4 * U * X, 4 * U);
    snprintf(what, sizeof what, "batchnorm running var (unbiased) after a step %s", name);
    gpu_check_close(what, d_rv, rvf, C, 4 * U * (vm + maxabs(rv, C)), 4 * U);

    /* Backward: dinp WRITTEN over junk, dweight and dbias ADDED onto g0. */
    float *d_dx = gpu_guarded(junk, n), *d_dw = gpu_guarded(g0w, C), *d_db = gpu_guarded(g0b, C);
    cuda_batchnorm_plan_backward(&p, d_dx, d_dw, d_db, d_g, d_x, d_w, d_b);
    double sgm = 0, sgxm = 0, gm = maxabs(g, n), xh = X * rsm;
    for (int c = 0; c < C; c++) sgm = fmax(sgm, fabs(sg[c])), sgxm = fmax(sgxm, fabs(sgx[c]));
    float *dwf = fnew(C), *dbf = fnew(C), *dxf = to_f(dxd, n);
    for (int c = 0; c < C; c++) dwf[c] = (float)(g0w[c] + sgx[c]), dbf[c] = (float)(g0b[c] + sg[c]);
    snprintf(what, sizeof what, "batchnorm bwd dinp (written) %s vs reference", name);
    gpu_check_close(what, d_dx, dxf, n, 16 * U * wm * rsm * (gm + sgm / M + xh * sgxm / M + xh * gm), 16 * U);
    snprintf(what, sizeof what, "batchnorm bwd dweight (adds) %s vs reference", name);
    gpu_check_close(what, d_dw, dwf, C, 4 * U * (double)M * gm * xh + 2 * U * maxabs(g0w, C), 4 * U);
    snprintf(what, sizeof what, "batchnorm bwd dbias (adds) %s vs reference", name);
    gpu_check_close(what, d_db, dbf, C, 4 * U * (double)M * gm + 2 * U * maxabs(g0b, C), 4 * U);

    /* Eval, in place, on the GPU's updated running stats. */
    float *rm_now = fnew(C), *rv_now = fnew(C);
    gpu_sync("batchnorm eval setup");
    if (cuda_memcpy_d2h(rm_now, d_rm, C * sizeof(float)) || cuda_memcpy_d2h(rv_now, d_rv, C * sizeof(float)))
        gpu_die("cuda_memcpy_d2h", 1);
    double *rmn = to_d(rm_now, C), *rvn = to_d(rv_now, C), *ye = dnew(n);
    batchnorm_forward_ref(ye, NULL, NULL, rmn, rvn, xd, wd, bd, N, C, HW, eps, momentum, 0);
    for (size_t i = 0; i < n; i++)
        if (relu && !(ye[i] > 0)) ye[i] = 0.0;
    float *yef = to_f(ye, n);
    double rse = 0, me = maxabs(rm_now, C);
    for (int c = 0; c < C; c++) rse = fmax(rse, 1.0 / sqrt(rvn[c] + eps));
    put(d_y, x, n);
    cuda_batchnorm_plan_forward(&p, d_y, d_y, d_w, d_b, d_rm, d_rv, momentum, false);
    snprintf(what, sizeof what, "batchnorm eval fwd in place %s vs reference", name);
    gpu_check_close(what, d_y, yef, n, 16 * U * ((maxabs(x, n) + me) * rse * wm + bm), 16 * U);
    gpu_check_close("batchnorm eval leaves running mean alone", d_rm, rm_now, C, 0, 0);

    cuda_batchnorm_plan_free(&p);
    gpu_release(d_x, 1), gpu_release(d_w, 1), gpu_release(d_b, 1), gpu_release(d_g, 1), gpu_release(d_y, 1);
    gpu_release(d_rm, 1), gpu_release(d_rv, 1), gpu_release(d_dx, 1), gpu_release(d_dw, 1), gpu_release(d_db, 1);
    free(x), free(w), free(b), free(g), free(rm), free(rv), free(g0w), free(g0b), free(junk);
    free(xd), free(wd), free(bd), free(rmd), free(rvd), free(yd), free(mean), free(rstd), free(gd), free(outd);
    free(dxd), free(sgx), free(sg), free(outf), free(var), free(rmf), free(rvf), free(dwf), free(dbf), free(dxf);
    free(rm_now), free(rv_now), free(rmn), free(rvn), free(ye), free(yef);
}

/* ---- pooling and relu ---------------------------------------------------------- */

static void test_maxpool(int N, int C, int H, int W, int K, int stride, int pad, bool nan)
{
    const int OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
    const size_t n = (size_t)N * C * H * W, no = (size_t)N * C * OH * OW;
    char what[256], name[96];
    snprintf(name, sizeof name, "N=%d C=%d %dx%d k%d/%d pad %d%s", N, C, H, W, K, stride, pad, nan ? " NaNs" : "");
    float *x = fnew(n), *g = fnew(no), *g0 = fnew(n), *y = fnew(no);
    int32_t *am = (int32_t *)calloc(no, sizeof(int32_t));
    fill(x, n, -2, 2), fill(g, no, -1, 1), fill(g0, n, -1, 1);
    for (size_t i = 0; i < n; i++) x[i] = roundf(x[i] * 4) / 4; /* few levels: many ties */
    if (nan) x[n / 3] = NAN, x[n / 3 + 1] = NAN;
    maxpool2d_forward(y, am, x, N, C, H, W, K, stride, pad, OH, OW);
    float *dx = fcopy(g0, n);
    maxpool2d_backward(dx, g, am, N, C, H, W, K, stride, pad, OH, OW);

    float *d_x = gpu_guarded(x, n), *d_y = gpu_guarded(NULL, no), *d_g = gpu_guarded(g, no), *d_dx = gpu_guarded(g0, n);
    int32_t *d_am = (int32_t *)gpu_upload(am, no * sizeof(int32_t));
    cuda_memset(d_am, 0xff, no * sizeof(int32_t));
    cuda_maxpool2d_forward(d_y, d_am, d_x, N, C, H, W, K, stride, pad, OH, OW);
    snprintf(what, sizeof what, "maxpool fwd values %s (bit-exact)", name);
    gpu_check_bytes(what, d_y, y, no * sizeof(float));
    snprintf(what, sizeof what, "maxpool fwd argmax %s (exact)", name);
    gpu_check_bytes(what, d_am, am, no * sizeof(int32_t));
    cuda_maxpool2d_backward(d_dx, d_g, d_am, N, C, H, W, K, stride, pad, OH, OW);
    snprintf(what, sizeof what, "maxpool bwd (adds, gather) %s (bit-exact)", name);
    gpu_check_bytes(what, d_dx, dx, n * sizeof(float));
    if (!nan) {
        snprintf(what, sizeof what, "maxpool canaries %s", name);
        gpu_check_close(what, d_dx, dx, n, 0, 0);
    }
    cuda_free(d_am);
    gpu_release(d_x, 1), gpu_release(d_y, 1), gpu_release(d_g, 1), gpu_release(d_dx, 1);
    free(x), free(g), free(g0), free(y), free(am), free(dx);
}

static void test_avgpool(int N, int C, int HW)
{
    const size_t n = (size_t)N * C * HW, no = (size_t)N * C;
    char what[160];
    float *x = fnew(n), *g = fnew(no), *g0 = fnew(n), *y = fnew(no);
    fill(x, n, -1, 1), fill(g, no, -1, 1), fill(g0, n, -1, 1);
    avgpool_global_forward(y, x, N, C, HW);
    float *dx = fcopy(g0, n);
    avgpool_global_backward(dx, g, N, C, HW);
    float *d_x = gpu_guarded(x, n), *d_y = gpu_guarded(NULL, no), *d_g = gpu_guarded(g, no), *d_dx = gpu_guarded(g0, n);
    cuda_avgpool_global_forward(d_y, d_x, N, C, HW);
    snprintf(what, sizeof what, "avgpool global fwd N=%d C=%d HW=%d", N, C, HW);
    gpu_check_close(what, d_y, y, no, 2 * U * (HW + 2) * maxabs(x, n) / HW, 4 * U);
    cuda_avgpool_global_backward(d_dx, d_g, N, C, HW);
    snprintf(what, sizeof what, "avgpool global bwd (adds) N=%d C=%d HW=%d (bit-exact)", N, C, HW);
    gpu_check_close(what, d_dx, dx, n, 0, 0);
    gpu_release(d_x, 1), gpu_release(d_y, 1), gpu_release(d_g, 1), gpu_release(d_dx, 1);
    free(x), free(g), free(g0), free(y), free(dx);
}

static void test_relu(size_t n)
{
    char what[160];
    float *x = fnew(n), *g = fnew(n), *g0 = fnew(n), *y = fnew(n);
    fill(x, n, -1, 1), fill(g, n, -1, 1), fill(g0, n, -1, 1);
    if (n >= 3) x[0] = 0.0f, x[1] = -0.0f, x[2] = NAN; /* PyTorch's edge values */
    relu_forward(y, x, n);
    float *dx = fcopy(g0, n);
    relu_backward(dx, x, g, n);
    float *d_x = gpu_guarded(x, n), *d_y = gpu_guarded(NULL, n), *d_g = gpu_guarded(g, n), *d_dx = gpu_guarded(g0, n);
    cuda_relu_forward(d_y, d_x, n);
    snprintf(what, sizeof what, "relu fwd n=%zu (bit-exact, -0 and NaN pass)", n);
    gpu_check_bytes(what, d_y, y, n * sizeof(float));
    cuda_relu_backward(d_dx, d_x, d_g, n);
    snprintf(what, sizeof what, "relu bwd (adds) from the input n=%zu (bit-exact)", n);
    gpu_check_bytes(what, d_dx, dx, n * sizeof(float));
    cuda_relu_forward(d_x, d_x, n); /* in place */
    snprintf(what, sizeof what, "relu fwd in place n=%zu (bit-exact)", n);
    gpu_check_bytes(what, d_x, y, n * sizeof(float));
    gpu_release(d_x, 1), gpu_release(d_y, 1), gpu_release(d_g, 1), gpu_release(d_dx, 1);
    free(x), free(g), free(g0), free(y), free(dx);
}

int main(void)
{
    gpu_test_start("test_cuda_cnn");

    /* cuBLAS and cuDNN do not run on the CPU emulator (make check's gpu-emu tests). */
    if (gpu_emulated) {
        printf("SKIP  matmul and conv2d (cuBLAS, cuDNN): not run on the CPU emulator\n");
    } else {
        /* matmul: (BT, C, OC), layout, bias, misaligned, NULL gradients (bits: dinp, dweight, dbias) */
        test_matmul(1, 7, 5, MATMUL_LAYOUT_OUT_IN, true, 0, 0);
        test_matmul(1, 7, 5, MATMUL_LAYOUT_IN_OUT, false, 0, 0);
        test_matmul(33, 64, 48, MATMUL_LAYOUT_OUT_IN, false, 0, 1);
        test_matmul(33, 64, 48, MATMUL_LAYOUT_IN_OUT, true, 0, 2);
        test_matmul(257, 130, 67, MATMUL_LAYOUT_OUT_IN, true, 0, 4);
        test_matmul(257, 130, 67, MATMUL_LAYOUT_IN_OUT, true, 1, 0);
        test_matmul(128, 96, 200, MATMUL_LAYOUT_OUT_IN, true, 1, 0);
        test_matmul(512, 768, 768, MATMUL_LAYOUT_IN_OUT, true, 0, 0);
        test_matmul(256, 768, 2304, MATMUL_LAYOUT_OUT_IN, true, 0, 0);

        /* conv2d: ResNet's stem 7x7/2 pad 3, 3x3/1 pad 1, 1x1/2 downsample, odd shapes */
        test_conv(2, 3, 32, 32, 16, 7, 7, 2, 3, false);
        test_conv(2, 3, 33, 31, 8, 7, 7, 2, 3, true);
        test_conv(2, 16, 9, 9, 12, 3, 3, 1, 1, false);
        test_conv(1, 5, 7, 10, 6, 3, 3, 2, 1, true);
        test_conv(3, 20, 11, 11, 24, 1, 1, 2, 0, false);
        test_conv(2, 64, 8, 8, 64, 3, 3, 1, 1, false);
        test_conv(1, 3, 6, 5, 2, 1, 3, 1, 0, true);
        test_conv_refuses_blocked();
    }

    /* batchnorm: M = 2 (smallest), odd sizes, offset means (variance cancellation), fused relu */
    test_batchnorm(2, 5, 1, 1, 0.0f, false);
    test_batchnorm(4, 3, 5, 7, 0.0f, false);
    test_batchnorm(1, 10, 8, 8, 3.0f, true);
    test_batchnorm(8, 16, 14, 14, 100.0f, false);
    test_batchnorm(16, 6, 33, 35, 0.5f, true); /* M = 18480: several blocks per channel */

    /* pooling: ResNet's 3x3/2 pad 1, 2x2/2, overlapping 3x3/1, odd windows, NaNs */
    test_maxpool(2, 3, 15, 15, 3, 2, 1, false);
    test_maxpool(2, 3, 16, 16, 3, 2, 1, true);
    test_maxpool(1, 5, 8, 9, 2, 2, 0, false);
    test_maxpool(2, 4, 7, 7, 3, 1, 1, false);
    test_maxpool(1, 2, 11, 6, 5, 3, 2, false);
    test_avgpool(3, 5, 49);
    test_avgpool(2, 7, 1);
    test_avgpool(1, 3, 1000);

    test_relu(1000003);
    test_relu(1);

    return gpu_test_end("test_cuda_cnn");
}
