/* test_kernels_conv — the oneDNN kernels of a CNN (conv2d, batchnorm) against their
 * double-precision specifications (docs/testing.md#kernel-triad), in both activation layouts
 * and at the ISA level the process runs (validation/tests.list runs it at auto,
 * NEBULA_CPU_ISA=avx2 and =avx512; a level the CPU lacks is SKIP, 77).
 *
 * For each kernel and shape (odd ones on purpose: 9x9 images, 3 channels, 5
 * filters, strides that do not divide, rectangular kernels and images):
 *   (a) fast float forward vs the double reference, canaries around every output;
 *   (b) reference backward vs central differences of L = sum(out * R), rtol 1e-6;
 *   (c) fast backward vs reference backward;
 *   (d) backward adds into gradients that already hold values;
 *   (e) batchnorm running statistics after two training steps, and eval mode;
 *   (g) the blocked convolutions run oneDNN's generated kernels of the ISA level, and
 *       each forced algorithm (direct everywhere, Winograd on 3x3 stride 1 from avx512
 *       on) meets the same bounds.
 *
 * Tolerances are derived, not tuned: a float sum of k terms is within
 * kc_rtol_f32(k) * sum|terms| of the exact one, and sum|terms| is obtained by
 * running the reference on absolute values. One line per check; exit 1 on any
 * failure. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/isa.h"
#include "cpu/batchnorm.h"
#include "cpu/conv2d.h"
#include "cpu/precision.h"
#include "cpu/relu.h"
#include "../check.h"

/* The check line, formatted into the caller's `what` buffer. */
#define LABEL(...) (snprintf(what, sizeof what, __VA_ARGS__), what)

/* ---- conv2d ------------------------------------------------------------------- */

typedef struct conv_shape {
    const char *name;                     /* shown in check lines */
    int N, C, H, W, OC, KH, KW, stride, pad;
    int bias;                             /* 0: forward without bias */
} conv_shape;

typedef struct conv_ctx {
    const conv_shape *s;     /* the shape */
    int OH, OW;              /* output size */
    const double *x, *w, *b; /* (N,C,H,W), (OC,C,KH,KW), (OC) or NULL */
    const double *R;         /* (N,OC,OH,OW) loss weights */
    double *out;             /* (N,OC,OH,OW) scratch */
    size_t no;               /* output elements */
} conv_ctx;

static double conv_loss(void *p)
{
    const conv_ctx *c = p;
    const conv_shape *s = c->s;
    conv2d_forward_ref(c->out, c->x, c->w, c->b, s->N, s->C, s->H, s->W, s->OC, s->KH, s->KW, s->stride, s->pad,
                       c->OH, c->OW);
    return kc_ddot(c->out, c->R, c->no);
}

#define CONV_ARGS(s, OH, OW) (s)->N, (s)->C, (s)->H, (s)->W, (s)->OC, (s)->KH, (s)->KW, (s)->stride, (s)->pad, OH, OW

/* The tests keep every tensor in NCHW; the fast paths run in the layout under test
 * through these converters (guarded copies: the canaries watch the kernels' writes). */
static float *to_layout(const float *x, dnn_layout l, int N, int C, int HW)
{
    size_t n = (size_t)N * C * HW;
    float *y = kc_guarded(n);
    if (l == DNN_BLOCKED) dnn_nchw_to_blocked(y, x, N, C, HW);
    else memcpy(y, x, n * sizeof *y);
    return y;
}

static void from_layout(float *x, const float *y, dnn_layout l, int N, int C, int HW)
{
    if (l == DNN_BLOCKED) dnn_blocked_to_nchw(x, y, N, C, HW);
    else memcpy(x, y, (size_t)N * C * HW * sizeof *x);
}

static const char *layout_name(dnn_layout l)
{
    return dnn_layout_name(l);
}

/* A blocked convolution runs oneDNN's generated kernels of the active ISA level, not a
 * lower one: avx512_core from avx512 on (the 16-block), avx2 at avx2. The stem's
 * backward-data (an NCHW image's gradient) is oneDNN's reference code at every level;
 * a CNN never asks for it (resnet.c plans its first convolution without dinp). */
static void check_isa_kernels(kc *k, const conv2d_plan *p, dnn_layout lin, const char *name, bool wino)
{
    isa_level l = isa_active();
    if (l < ISA_AVX2) return;
    const char *want = l >= ISA_AVX512 ? "avx512_core" : "avx2";
    dnnl_primitive_t prims[3] = { p->fwd, lin == DNN_BLOCKED ? p->bwd_data : NULL, p->bwd_weights };
    const char *names[3] = { "forward", "backward-data", "backward-weights" };
    for (int i = 0; i < 3; i++) {
        const_dnnl_primitive_desc_t pd = NULL;
        if (!prims[i] || dnnl_primitive_get_primitive_desc(prims[i], &pd) != dnnl_success) continue;
        const char *impl = dnn_impl(pd);
        /* generated code: "jit..." or a brgemm kernel ("brg...", oneDNN's choice on newer
         * Xeons), never "ref" or "gemm" */
        bool gen = strncmp(impl, "jit", 3) == 0 || strncmp(impl, "brg", 3) == 0;
        bool ok = gen && strstr(impl, want) && (l >= ISA_AVX512 || !strstr(impl, "avx512")) &&
                  (!wino || strstr(impl, "wino"));
        char what[300];
        snprintf(what, sizeof what, "conv2d %s: %s runs %s at ISA level %s (want jit %s%s)", name, names[i], impl,
                 isa_name(l), want, wino ? ", Winograd" : "");
        kc_report(k, ok, what, 0);
    }
}

static void test_conv_alg(kc *k, const conv_shape *s, dnn_layout lin, dnn_layout lout, int alg);

static void test_conv(kc *k, const conv_shape *s, dnn_layout lin, dnn_layout lout)
{
    test_conv_alg(k, s, lin, lout, -1);
}

/* One convolution against the reference: the plan conv2d_plan_init builds (alg < 0), or
 * one with oneDNN's algorithm `alg` (skipped when oneDNN has none for the shape). The
 * bounds are the same for Winograd: its transforms cost accuracy, measured at 0.1-2% of
 * the bound's 4 eps K (a direct sum: 0.05-0.2%). */
static void test_conv_alg(kc *k, const conv_shape *s, dnn_layout lin, dnn_layout lout, int alg)
{
    const int OH = (s->H + 2 * s->pad - s->KH) / s->stride + 1, OW = (s->W + 2 * s->pad - s->KW) / s->stride + 1;
    const size_t ni = (size_t)s->N * s->C * s->H * s->W, nw = (size_t)s->OC * s->C * s->KH * s->KW,
                 no = (size_t)s->N * s->OC * OH * OW, nb = (size_t)s->OC;
    const size_t K = (size_t)s->C * s->KH * s->KW, Kdx = (size_t)s->OC * s->KH * s->KW,
                 Kdw = (size_t)s->N * OH * OW;
    const int HWi = s->H * s->W, HWo = OH * OW;
    char what[400], name[120];
    snprintf(name, sizeof name, "%s %s->%s%s", s->name, layout_name(lin), layout_name(lout),
             alg == CONV2D_ALG_WINOGRAD ? " Winograd" : alg == CONV2D_ALG_DIRECT ? " direct" : "");
    conv2d_plan p;
    conv2d_shape cs = { s->N, s->C, s->H, s->W, s->OC, s->KH, s->KW, s->stride, s->pad, OH, OW };
    if (alg >= 0 && !conv2d_plan_init_alg(&p, &cs, lin, lout, s->bias, true, (conv2d_alg)alg)) {
        /* oneDNN has Winograd for avx512_core only: from avx512 on it must be there */
        snprintf(what, sizeof what, "conv2d %s: oneDNN has no such kernel at ISA level %s", name,
                 isa_name(isa_active()));
        if (alg == CONV2D_ALG_WINOGRAD && isa_active() >= ISA_AVX512) kc_report(k, false, what, 0);
        else printf("# %s\n", what);
        return;
    }
    if (alg < 0) conv2d_plan_init(&p, &cs, lin, lout, s->bias, true);

    float *x = kc_frand(k, ni, -1, 1), *w = kc_frand(k, nw, -1, 1), *b = kc_frand(k, nb, -1, 1), *R = kc_frand(k, no, -1, 1);
    const float *bias = s->bias ? b : NULL;
    double *xd = kc_dfrom(x, ni), *wd = kc_dfrom(w, nw), *bd = s->bias ? kc_dfrom(b, nb) : NULL, *Rd = kc_dfrom(R, no);
    float *xl = to_layout(x, lin, s->N, s->C, HWi), *Rl = to_layout(R, lout, s->N, s->OC, HWo);
    /* the GEMM engine takes small blocked maps on the 8-block only; the shapes named for
     * it take it there */
    bool want_gemm = alg < 0 && lin == DNN_BLOCKED && lout == DNN_BLOCKED && !s->bias && s->KH * s->KW > 1 &&
                     HWo <= conv2d_gemm_max_pixels();
    bool named = alg < 0 && strstr(s->name, "GEMM engine") != NULL;
    snprintf(what, sizeof what, "conv2d %s: runs on the %s engine", name, want_gemm ? "GEMM" : "oneDNN");
    kc_report(k, p.gemm == want_gemm && (!named || want_gemm == (conv2d_gemm_max_pixels() > 0)), what, 0);
    if (!p.gemm && lout == DNN_BLOCKED) check_isa_kernels(k, &p, lin, name, alg == CONV2D_ALG_WINOGRAD);

    /* (a) forward; the magnitude bound is the convolution of the absolute values */
    float *outl = kc_guarded(no), *out = kc_gzero(no);
    conv2d_plan_forward(&p, outl, xl, w, bias);
    from_layout(out, outl, lout, s->N, s->OC, HWo);
    double *outd = kc_dzero(no), *xa = kc_dabs_of(xd, ni), *wa = kc_dabs_of(wd, nw), *ba = bd ? kc_dabs_of(bd, nb) : NULL,
           *Ra = kc_dabs_of(Rd, no), *outa = kc_dzero(no);
    conv2d_forward_ref(outd, xd, wd, bd, CONV_ARGS(s, OH, OW));
    conv2d_forward_ref(outa, xa, wa, ba, CONV_ARGS(s, OH, OW));
    snprintf(what, sizeof what, "conv2d %s: forward fast vs reference (%zu-term sums)", name, K + 1);
    kc_close(k, out, outd, no, kc_rtol_f32(K + 1) * kc_dmaxabs(outa, no), kc_rtol_f32(K + 1), what);
    snprintf(what, sizeof what, "conv2d %s: forward canaries intact", name);
    kc_report(k, kc_guards_intact(outl, no), what, 0);

    /* (b) reference backward vs central differences */
    double *dxd = kc_dzero(ni), *dwd = kc_dzero(nw), *dbd = kc_dzero(nb);
    conv2d_backward_ref(dxd, dwd, dbd, Rd, xd, wd, CONV_ARGS(s, OH, OW));
    conv_ctx ctx = { s, OH, OW, xd, wd, bd, Rd, kc_dzero(no), no };
    double fa = kc_fd_atol(no, kc_abs_dot(outd, Rd, no));
    if (lin == DNN_NCHW && lout == DNN_NCHW) {  /* the reference does not depend on the layout */
        snprintf(what, sizeof what, "conv2d %s: reference dinp vs central differences", s->name);
        kc_check_fd(k, xd, ni, conv_loss, &ctx, dxd, fa, what);
        snprintf(what, sizeof what, "conv2d %s: reference dweight vs central differences", s->name);
        kc_check_fd(k, wd, nw, conv_loss, &ctx, dwd, fa, what);
        if (bd) {
            snprintf(what, sizeof what, "conv2d %s: reference dbias vs central differences", s->name);
            kc_check_fd(k, bd, nb, conv_loss, &ctx, dbd, fa, what);
        }
    }

    /* (c) fast backward vs reference; bounds from the backward of absolute values.
     * dinp starts as garbage: it must be overwritten, not added to. */
    double *dxa = kc_dzero(ni), *dwa = kc_dzero(nw), *dba = kc_dzero(nb);
    conv2d_backward_ref(dxa, dwa, dba, Ra, xa, wa, CONV_ARGS(s, OH, OW));
    const double tx = kc_rtol_f32(Kdx), tw = kc_rtol_f32(Kdw);
    const double ax = tx * kc_dmaxabs(dxa, ni), aw = tw * kc_dmaxabs(dwa, nw), ab = tw * kc_dmaxabs(dba, nb);
    float *garbage = kc_frand(k, ni, 100, 200);
    float *dxl = to_layout(garbage, lin, s->N, s->C, HWi), *dx = kc_gzero(ni), *dw = kc_gzero(nw), *db = kc_gzero(nb);
    conv2d_plan_backward(&p, dxl, dw, s->bias ? db : NULL, Rl, xl);
    from_layout(dx, dxl, lin, s->N, s->C, HWi);
    snprintf(what, sizeof what, "conv2d %s: backward dinp fast vs reference, overwritten (%zu-term sums)", name, Kdx);
    kc_close(k, dx, dxd, ni, ax, tx, what);
    snprintf(what, sizeof what, "conv2d %s: backward dweight fast vs reference (%zu-term sums)", name, Kdw);
    kc_close(k, dw, dwd, nw, aw, tw, what);
    if (s->bias) {
        snprintf(what, sizeof what, "conv2d %s: backward dbias fast vs reference", name);
        kc_close(k, db, dbd, nb, ab, tw, what);
    }
    snprintf(what, sizeof what, "conv2d %s: backward canaries intact (dinp, dweight, dbias)", name);
    kc_report(k, kc_guards_intact(dxl, ni) && kc_guards_intact(dw, nw) && kc_guards_intact(db, nb), what, 0);

    /* NULL gradients are skipped and do not change the others */
    float *dxl2 = to_layout(garbage, lin, s->N, s->C, HWi), *dw2 = kc_gzero(nw);
    conv2d_plan_backward(&p, dxl2, NULL, NULL, Rl, xl);
    conv2d_plan_backward(&p, NULL, dw2, NULL, Rl, xl);
    snprintf(what, sizeof what, "conv2d %s: NULL gradients skipped, others bit-identical", name);
    kc_report(k, !memcmp(dxl2, dxl, ni * sizeof *dx) && !memcmp(dw2, dw, nw * sizeof *dw), what, 0);

    /* (d) dweight and dbias accumulate, fast and reference; the reference adds into dinp too */
    float *g0x = kc_frand(k, ni, -1, 1), *g0w = kc_frand(k, nw, -1, 1), *g0b = kc_frand(k, nb, -1, 1);
    float *dw3 = kc_gcopy(g0w, nw), *db3 = kc_gcopy(g0b, nb);
    conv2d_plan_backward(&p, NULL, dw3, s->bias ? db3 : NULL, Rl, xl);
    snprintf(what, sizeof what, "conv2d %s: backward adds into dweight", name);
    kc_check_adds(k, dw3, g0w, dwd, nw, aw, tw, what);
    if (s->bias) {
        snprintf(what, sizeof what, "conv2d %s: backward adds into dbias", name);
        kc_check_adds(k, db3, g0b, dbd, nb, ab, tw, what);
    }
    double *rx = kc_dfrom(g0x, ni), *rw = kc_dfrom(g0w, nw), *rb = kc_dfrom(g0b, nb);
    conv2d_backward_ref(rx, rw, rb, Rd, xd, wd, CONV_ARGS(s, OH, OW));
    if (lin == DNN_NCHW && lout == DNN_NCHW) {
        kc_check_adds_d(k, rx, g0x, dxd, ni, LABEL("conv2d %s: reference backward adds into dinp", s->name));
        kc_check_adds_d(k, rw, g0w, dwd, nw, LABEL("conv2d %s: reference backward adds into dweight", s->name));
        kc_check_adds_d(k, rb, g0b, dbd, nb, LABEL("conv2d %s: reference backward adds into dbias", s->name));
    }

    conv2d_plan_free(&p);
    free(x), free(w), free(b), free(R), free(xd), free(wd), free(bd), free(Rd), free(garbage);
    free(outd), free(xa), free(wa), free(ba), free(Ra), free(outa), free(ctx.out);
    free(dxd), free(dwd), free(dbd), free(dxa), free(dwa), free(dba), free(g0x), free(g0w), free(g0b);
    free(rx), free(rw), free(rb);
    kc_guarded_free(xl), kc_guarded_free(Rl), kc_guarded_free(outl), kc_guarded_free(out), kc_guarded_free(dxl);
    kc_guarded_free(dx), kc_guarded_free(dw), kc_guarded_free(db), kc_guarded_free(dxl2), kc_guarded_free(dw2);
    kc_guarded_free(dw3), kc_guarded_free(db3);
}

/* ---- bf16 plans ----------------------------------------------------------------- */

/* x (N, C, HW) NCHW fp32 -> blocked bf16, and back. */
static uint16_t *to_blocked16(const float *x, int N, int C, int HW)
{
    size_t n = (size_t)N * C * HW;
    float *b = malloc(n * sizeof *b);
    uint16_t *y = malloc(n * sizeof *y);
    dnn_nchw_to_blocked(b, x, N, C, HW);
    f32_to_bf16(b, y, n);
    free(b);
    return y;
}

static void from_blocked16(float *x, const uint16_t *y, int N, int C, int HW)
{
    size_t n = (size_t)N * C * HW;
    float *b = malloc(n * sizeof *b);
    bf16_to_f32(y, b, n);
    dnn_blocked_to_nchw(x, b, N, C, HW);
    free(b);
}

static double *rounded16(const float *x, size_t n)
{
    double *d = kc_dzero(n);
    for (size_t i = 0; i < n; i++) d[i] = f32_from_bf16(bf16_from_f32(x[i]));
    return d;
}

/* bf16 output rounding: half an ulp, at most 2^-8 of the value (8 significant bits), on top of the fp32 sum's bound
 * (which the rounded value may carry too). */
#define BF16_HALF_ULP 0x1p-8

/* A bf16 plan (conv2d_plan_init_bf16): activations bf16 in and out. Its specification
 * is the reference on the input, weights and dout rounded to bf16, with the fp32
 * summation bounds, and out and dinp then rounded once more (a plan that skipped a
 * rounding, or read a bf16 array as fp32, misses by far more). f32_input: an fp32 NCHW
 * input (a network's images), no dinp. */
static void test_conv_bf16(kc *k, const conv_shape *s, bool f32_input)
{
    const int OH = (s->H + 2 * s->pad - s->KH) / s->stride + 1, OW = (s->W + 2 * s->pad - s->KW) / s->stride + 1;
    const size_t ni = (size_t)s->N * s->C * s->H * s->W, nw = (size_t)s->OC * s->C * s->KH * s->KW,
                 no = (size_t)s->N * s->OC * OH * OW, nb = (size_t)s->OC;
    const size_t K = (size_t)s->C * s->KH * s->KW, Kdx = (size_t)s->OC * s->KH * s->KW, Kdw = (size_t)s->N * OH * OW;
    const int HWi = s->H * s->W, HWo = OH * OW;
    char what[400], name[160];
    snprintf(name, sizeof name, "%s bf16%s", s->name, f32_input ? " (fp32 nchw input)" : "");
    conv2d_plan p;
    conv2d_shape cs = { s->N, s->C, s->H, s->W, s->OC, s->KH, s->KW, s->stride, s->pad, OH, OW };
    bool built = conv2d_plan_init_bf16(&p, &cs, f32_input ? DNN_NCHW : DNN_BLOCKED, DNN_BLOCKED, s->bias, !f32_input,
                                       f32_input);
    kc_report(k, built, LABEL("conv2d %s: oneDNN has a bf16 kernel at ISA level %s", name, isa_name(isa_active())), 0);
    if (!built) return;
    float *x = kc_frand(k, ni, -1, 1), *w = kc_frand(k, nw, -1, 1), *b = kc_frand(k, nb, -1, 1), *R = kc_frand(k, no, -1, 1);
    const float *bias = s->bias ? b : NULL;
    double *xd = rounded16(x, ni), *wd = rounded16(w, nw), *Rd = rounded16(R, no), *bd = s->bias ? kc_dfrom(b, nb) : NULL;
    uint16_t *x16 = f32_input ? NULL : to_blocked16(x, s->N, s->C, HWi), *R16 = to_blocked16(R, s->N, s->OC, HWo);
    const void *inp = f32_input ? (const void *)x : x16;
    uint16_t *out16 = malloc(no * sizeof *out16);
    float *out = malloc(no * sizeof *out);
    conv2d_plan_forward(&p, out16, inp, w, bias);
    from_blocked16(out, out16, s->N, s->OC, HWo);
    double *outd = kc_dzero(no), *outa = kc_dzero(no), *xa = kc_dabs_of(xd, ni), *wa = kc_dabs_of(wd, nw),
           *ba = bd ? kc_dabs_of(bd, nb) : NULL, *Ra = kc_dabs_of(Rd, no);
    conv2d_forward_ref(outd, xd, wd, bd, CONV_ARGS(s, OH, OW));
    conv2d_forward_ref(outa, xa, wa, ba, CONV_ARGS(s, OH, OW));
    double tf = kc_rtol_f32(K + 1);
    kc_close(k, out, outd, no, tf * kc_dmaxabs(outa, no) * (1 + BF16_HALF_ULP), BF16_HALF_ULP * (1 + tf),
             LABEL("conv2d %s: forward vs reference on bf16 operands, output rounded (%zu-term sums)", name, K + 1));

    double *dxd = kc_dzero(ni), *dwd = kc_dzero(nw), *dbd = kc_dzero(nb), *dxa = kc_dzero(ni), *dwa = kc_dzero(nw),
           *dba = kc_dzero(nb);
    conv2d_backward_ref(dxd, dwd, dbd, Rd, xd, wd, CONV_ARGS(s, OH, OW));
    conv2d_backward_ref(dxa, dwa, dba, Ra, xa, wa, CONV_ARGS(s, OH, OW));
    const double tx = kc_rtol_f32(Kdx), tw = kc_rtol_f32(Kdw);
    float *g0w = kc_frand(k, nw, -1, 1), *g0b = kc_frand(k, nb, -1, 1);
    float *dw = malloc(nw * sizeof *dw), *db = malloc(nb * sizeof *db);
    memcpy(dw, g0w, nw * sizeof *dw), memcpy(db, g0b, nb * sizeof *db);
    uint16_t *dx16 = NULL;
    if (!f32_input) {  /* dinp starts as garbage: it must be overwritten */
        float *garbage = kc_frand(k, ni, 100, 200);
        dx16 = to_blocked16(garbage, s->N, s->C, HWi);
        free(garbage);
    }
    conv2d_plan_backward(&p, dx16, dw, s->bias ? db : NULL, R16, inp);
    if (dx16) {
        float *dx = malloc(ni * sizeof *dx);
        from_blocked16(dx, dx16, s->N, s->C, HWi);
        kc_close(k, dx, dxd, ni, tx * kc_dmaxabs(dxa, ni) * (1 + BF16_HALF_ULP), BF16_HALF_ULP * (1 + tx),
                 LABEL("conv2d %s: backward dinp (bf16) vs reference, overwritten (%zu-term sums)", name, Kdx));
        free(dx);
    }
    kc_check_adds(k, dw, g0w, dwd, nw, tw * kc_dmaxabs(dwa, nw), tw,
                  LABEL("conv2d %s: backward adds dweight (fp32) vs reference (%zu-term sums)", name, Kdw));
    if (s->bias)
        kc_check_adds(k, db, g0b, dbd, nb, tw * kc_dmaxabs(dba, nb), tw,
                      LABEL("conv2d %s: backward adds dbias (fp32) vs reference", name));
    conv2d_plan_free(&p);
    free(x), free(w), free(b), free(R), free(xd), free(wd), free(Rd), free(bd), free(x16), free(R16), free(out16);
    free(out), free(outd), free(outa), free(xa), free(wa), free(ba), free(Ra), free(dxd), free(dwd), free(dbd);
    free(dxa), free(dwa), free(dba), free(g0w), free(g0b), free(dw), free(db), free(dx16);
}

/* ---- batchnorm ---------------------------------------------------------------- */

typedef struct bn_ctx {
    int N, C, HW;
    const double *x, *w, *b, *R; /* (N,C,HW), (C), (C), (N,C,HW) */
    double *out, *mean, *rstd;   /* scratch */
    double eps;
} bn_ctx;

static double bn_loss(void *p)
{
    const bn_ctx *c = p;
    batchnorm_forward_ref(c->out, c->mean, c->rstd, NULL, NULL, c->x, c->w, c->b, c->N, c->C, c->HW, c->eps, 0.1,
                          1);
    return kc_ddot(c->out, c->R, (size_t)c->N * c->C * c->HW);
}

/* Channel c's values of x (N, C, HW) get offset `off * (c + 1)`: a large mean tests
 * the two-pass variance. */
static float *bn_input(kc *k, int N, int C, int HW, float off)
{
    float *x = kc_frand(k, (size_t)N * C * HW, -1, 1);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < HW; i++) x[((size_t)n * C + c) * HW + i] += off * (float)(c + 1);
    return x;
}

/* The fast path accumulates a channel's M = N*HW values in float (batchnorm.h), so
 * its statistics carry up to kc_rtol_f32(M) relative rounding of the terms summed
 * (|x| <= xm for the mean; (x - mean)^2 <= (2 xm)^2 for the variance); everything
 * downstream is a few more roundings. With `relu` the plan fuses a ReLU: the
 * reference is BN then relu_forward_ref, and backward masks dout by out > 0 first. */
static void test_batchnorm(kc *k, int N, int C, int H, int W, float off, float eps, dnn_layout l, bool relu)
{
    const int HW = H * W;
    const size_t n = (size_t)N * C * HW, M = (size_t)N * HW;
    const float momentum = 0.1f;
    char what[400], name[120];
    snprintf(name, sizeof name, "N=%d C=%d HW=%d mean~%g eps=%g %s%s", N, C, HW, (double)off, (double)eps,
             layout_name(l), relu ? " +relu" : "");

    float *x = bn_input(k, N, C, HW, off), *w = kc_frand(k, (size_t)C, 0.5f, 1.5f), *b = kc_frand(k, (size_t)C, -1, 1);
    float *R = kc_frand(k, n, -1, 1);
    double *xd = kc_dfrom(x, n), *wd = kc_dfrom(w, (size_t)C), *bd = kc_dfrom(b, (size_t)C), *Rd = kc_dfrom(R, n);
    batchnorm_plan p;
    batchnorm_plan_init(&p, N, C, H, W, l, eps, relu);
    float *xl = to_layout(x, l, N, C, HW);

    /* (a) training forward */
    float *outl = kc_guarded(n), *out = kc_gzero(n), *rm = kc_guarded((size_t)C), *rv = kc_guarded((size_t)C);
    for (int c = 0; c < C; c++) rm[c] = 0.0f, rv[c] = 1.0f;
    batchnorm_plan_forward(&p, outl, xl, w, b, rm, rv, momentum, true);
    from_layout(out, outl, l, N, C, HW);
    double *outd = kc_dzero(n), *meand = kc_dzero((size_t)C), *rstdd = kc_dzero((size_t)C), *rmd = kc_dzero((size_t)C),
           *rvd = kc_dzero((size_t)C);
    for (int c = 0; c < C; c++) rvd[c] = 1.0;
    batchnorm_forward_ref(outd, meand, rstdd, rmd, rvd, xd, wd, bd, N, C, HW, eps, momentum, 1);
    if (relu) relu_forward_ref(outd, outd, n);
    const double xm = kc_fmaxabs(x, n), rsm = kc_dmaxabs(rstdd, (size_t)C), wm = kc_fmaxabs(w, (size_t)C);
    const double tM = kc_rtol_f32(M), em = tM * xm, ev = tM * 4 * xm * xm;
    double rel_rstd = 0; /* worst relative error of rstd implied by ev */
    for (int c = 0; c < C; c++) {
        double var = 1.0 / (rstdd[c] * rstdd[c]);  /* var + eps */
        rel_rstd = fmax(rel_rstd, 0.5 * ev / var + kc_rtol_f32(2));
    }
    const double X = 2 * xm * rsm; /* bounds |xhat| */
    const double ay = wm * (em * rsm + X * rel_rstd) + kc_rtol_f32(4) * (X * wm + kc_fmaxabs(b, (size_t)C));
    snprintf(what, sizeof what, "batchnorm %s: training forward out fast vs reference", name);
    kc_close(k, out, outd, n, ay, kc_rtol_f32(4), what);
    double *rstdf = kc_dzero((size_t)C);
    for (int c = 0; c < C; c++) rstdf[c] = 1.0 / sqrt((double)p.var[c] + eps);
    kc_close(k, p.mean, meand, (size_t)C, em, kc_rtol_f32(1), LABEL("batchnorm %s: saved mean fast vs reference", name));
    kc_close_d(k, rstdf, rstdd, (size_t)C, 0, rel_rstd, LABEL("batchnorm %s: saved variance fast vs reference", name));
    kc_close(k, rm, rmd, (size_t)C, em, kc_rtol_f32(4), LABEL("batchnorm %s: running mean after one step", name));
    kc_close(k, rv, rvd, (size_t)C, ev, kc_rtol_f32(4), LABEL("batchnorm %s: running var after one step", name));
    snprintf(what, sizeof what, "batchnorm %s: forward canaries intact (out, running)", name);
    kc_report(k, kc_guards_intact(outl, n) && kc_guards_intact(rm, (size_t)C) && kc_guards_intact(rv, (size_t)C),
              what, 0);

    /* (b) reference backward vs central differences (once per shape: NCHW, no relu) */
    double *Rm = kc_dfrom(R, n); /* dout masked by the ReLU, as the fused backward sees it */
    if (relu)
        for (size_t i = 0; i < n; i++) Rm[i] = outd[i] > 0 ? Rm[i] : 0.0;
    double *dxd = kc_dzero(n), *dwd = kc_dzero((size_t)C), *dbd = kc_dzero((size_t)C);
    batchnorm_backward_ref(dxd, dwd, dbd, Rm, xd, wd, meand, rstdd, N, C, HW);
    bn_ctx ctx = { N, C, HW, xd, wd, bd, Rd, kc_dzero(n), kc_dzero((size_t)C), kc_dzero((size_t)C), eps };
    if (l == DNN_NCHW && !relu) {
        double fa = kc_fd_atol(n, kc_abs_dot(outd, Rd, n));
        snprintf(what, sizeof what, "batchnorm %s: reference dinp vs central differences", name);
        kc_check_fd(k, xd, n, bn_loss, &ctx, dxd, fa, what);
        snprintf(what, sizeof what, "batchnorm %s: reference dweight vs central differences", name);
        kc_check_fd(k, wd, (size_t)C, bn_loss, &ctx, dwd, fa, what);
        snprintf(what, sizeof what, "batchnorm %s: reference dbias vs central differences", name);
        kc_check_fd(k, bd, (size_t)C, bn_loss, &ctx, dbd, fa, what);
    }

    /* (c) fast backward vs reference: dinp = w*rstd*(dy - mean dy - xhat*mean(dy*xhat))
     * with float sums of M terms (|dy| <= 1, |dy*xhat| <= X) and xhat off by the
     * statistics' errors; dinp starts as garbage and must be overwritten. */
    const double exh = em * rsm + X * rel_rstd; /* error of xhat */
    const double ax = wm * rsm * ((tM + kc_rtol_f32(8)) * (2 + 2 * X * X) + exh * (1 + 2 * X) + rel_rstd * (2 + X * X));
    const double aw = tM * X * (double)M + exh * (double)M, ab = tM * (double)M;
    float *Rl = to_layout(R, l, N, C, HW), *garbage = kc_frand(k, n, 100, 200), *dxl = to_layout(garbage, l, N, C, HW);
    float *dx = kc_gzero(n), *dw = kc_gzero((size_t)C), *db = kc_gzero((size_t)C);
    batchnorm_plan_backward(&p, dxl, dw, db, Rl, xl, w, b);
    from_layout(dx, dxl, l, N, C, HW);
    snprintf(what, sizeof what, "batchnorm %s: backward dinp fast vs reference, overwritten", name);
    kc_close(k, dx, dxd, n, ax, kc_rtol_f32(8), what);
    snprintf(what, sizeof what, "batchnorm %s: backward dweight fast vs reference", name);
    kc_close(k, dw, dwd, (size_t)C, aw, kc_rtol_f32(8), what);
    snprintf(what, sizeof what, "batchnorm %s: backward dbias fast vs reference", name);
    kc_close(k, db, dbd, (size_t)C, ab, kc_rtol_f32(1), what);
    snprintf(what, sizeof what, "batchnorm %s: backward canaries intact", name);
    kc_report(k, kc_guards_intact(dxl, n) && kc_guards_intact(dw, (size_t)C) && kc_guards_intact(db, (size_t)C),
              what, 0);

    /* (d) dweight and dbias accumulate; the reference adds into dinp too */
    float *g0x = kc_frand(k, n, -1, 1), *g0w = kc_frand(k, (size_t)C, -1, 1), *g0b = kc_frand(k, (size_t)C, -1, 1);
    float *dw3 = kc_gcopy(g0w, (size_t)C), *db3 = kc_gcopy(g0b, (size_t)C);
    batchnorm_plan_backward(&p, dxl, dw3, db3, Rl, xl, w, b);
    kc_check_adds(k, dw3, g0w, dwd, (size_t)C, aw, kc_rtol_f32(8), LABEL("batchnorm %s: backward adds into dweight", name));
    kc_check_adds(k, db3, g0b, dbd, (size_t)C, ab, kc_rtol_f32(1), LABEL("batchnorm %s: backward adds into dbias", name));
    double *rx = kc_dfrom(g0x, n), *rw = kc_dfrom(g0w, (size_t)C), *rb = kc_dfrom(g0b, (size_t)C);
    if (l == DNN_NCHW && !relu) {
        batchnorm_backward_ref(rx, rw, rb, Rd, xd, wd, meand, rstdd, N, C, HW);
        kc_check_adds_d(k, rx, g0x, dxd, n, LABEL("batchnorm %s: reference backward adds into dinp", name));
        kc_check_adds_d(k, rw, g0w, dwd, (size_t)C, LABEL("batchnorm %s: reference backward adds into dweight", name));
        kc_check_adds_d(k, rb, g0b, dbd, (size_t)C, LABEL("batchnorm %s: reference backward adds into dbias", name));
    }

    /* (e) a second training step on new data, then eval. Expected values come from
     * the formula written out here, not from the reference implementation. */
    float *x2 = bn_input(k, N, C, HW, off), *x2l = to_layout(x2, l, N, C, HW);
    batchnorm_plan_forward(&p, outl, x2l, w, b, rm, rv, momentum, true);
    double *wantm = kc_dzero((size_t)C), *wantv = kc_dzero((size_t)C);
    for (int c = 0; c < C; c++) {
        double e_m = 0.0, e_v = 1.0; /* PyTorch's initial running stats */
        for (int step = 0; step < 2; step++) {
            const float *xs = step ? x2 : x;
            double sum = 0, q = 0;
            for (int i = 0; i < N; i++)
                for (int j = 0; j < HW; j++) sum += xs[((size_t)i * C + c) * HW + j];
            double mu = sum / (double)M;
            for (int i = 0; i < N; i++)
                for (int j = 0; j < HW; j++) q += pow(xs[((size_t)i * C + c) * HW + j] - mu, 2);
            e_m = (1 - (double)momentum) * e_m + (double)momentum * mu;
            e_v = (1 - (double)momentum) * e_v + (double)momentum * q / (double)(M - 1); /* unbiased */
        }
        wantm[c] = e_m, wantv[c] = e_v;
    }
    snprintf(what, sizeof what, "batchnorm %s: running mean after 2 steps = (1-m)^2*0 + (1-m)*m*mu1 + m*mu2", name);
    kc_close(k, rm, wantm, (size_t)C, em, kc_rtol_f32(8), what);
    snprintf(what, sizeof what, "batchnorm %s: running var after 2 steps uses the unbiased variance", name);
    kc_close(k, rv, wantv, (size_t)C, ev, kc_rtol_f32(8), what);

    float rm_keep[64], rv_keep[64];
    memcpy(rm_keep, rm, (size_t)C * sizeof *rm);
    memcpy(rv_keep, rv, (size_t)C * sizeof *rv);
    float *x3 = bn_input(k, N, C, HW, off), *x3l = to_layout(x3, l, N, C, HW);
    batchnorm_plan_forward(&p, outl, x3l, w, b, rm, rv, momentum, false);
    from_layout(out, outl, l, N, C, HW);
    double *wanty = kc_dzero(n);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            for (int j = 0; j < HW; j++) {
                size_t at = ((size_t)i * C + c) * HW + j;
                wanty[at] = (x3[at] - (double)rm[c]) / sqrt((double)rv[c] + eps) * w[c] + b[c];
                if (relu && !(wanty[at] > 0)) wanty[at] = 0;
            }
    double rs_eval = 0;
    for (int c = 0; c < C; c++) rs_eval = fmax(rs_eval, 1.0 / sqrt((double)rv[c] + eps));
    const double ay_eval = kc_rtol_f32(4) * ((xm + kc_fmaxabs(rm, (size_t)C)) * rs_eval * wm + kc_fmaxabs(b, (size_t)C));
    snprintf(what, sizeof what, "batchnorm %s: eval normalises with the running statistics", name);
    kc_close(k, out, wanty, n, ay_eval, kc_rtol_f32(4), what);
    snprintf(what, sizeof what, "batchnorm %s: eval leaves running statistics untouched", name);
    kc_report(k, !memcmp(rm_keep, rm, (size_t)C * sizeof *rm) && !memcmp(rv_keep, rv, (size_t)C * sizeof *rv),
              what, 0);

    batchnorm_plan_free(&p);
    free(x), free(w), free(b), free(R), free(xd), free(wd), free(bd), free(Rd), free(outd), free(meand), free(Rm);
    free(rstdd), free(rmd), free(rvd), free(dxd), free(dwd), free(dbd), free(ctx.out), free(ctx.mean), free(rstdf);
    free(ctx.rstd), free(g0x), free(g0w), free(g0b), free(rx), free(rw), free(rb), free(x2), free(wantm);
    free(wantv), free(x3), free(wanty), free(garbage);
    kc_guarded_free(xl), kc_guarded_free(outl), kc_guarded_free(out), kc_guarded_free(rm), kc_guarded_free(rv);
    kc_guarded_free(Rl), kc_guarded_free(dxl), kc_guarded_free(dx), kc_guarded_free(dw), kc_guarded_free(db);
    kc_guarded_free(dw3), kc_guarded_free(db3), kc_guarded_free(x2l), kc_guarded_free(x3l);
}

/* A bf16 batch-norm plan against the fp32 plan (tested above) on the same input rounded
 * to bf16 and the same dout rounded to bf16: out and dinp are the fp32 plan's values
 * rounded once (half an ulp, 2^-8, doubled for the fp32 plans' own difference in
 * summation order, bounded by the fp32 test's order of error), dweight and dbias the
 * fp32 plan's within two float sums of M terms. */
static void test_batchnorm_bf16(kc *k, int N, int C, int H, int W, float off, bool relu)
{
    const int HW = H * W;
    const size_t n = (size_t)N * C * HW, M = (size_t)N * HW;
    const float eps = 1e-5f;
    char what[400], name[120];
    snprintf(name, sizeof name, "N=%d C=%d HW=%d mean~%g bf16%s", N, C, HW, (double)off, relu ? " +relu" : "");
    float *x = bn_input(k, N, C, HW, off), *w = kc_frand(k, (size_t)C, 0.5f, 1.5f), *b = kc_frand(k, (size_t)C, -1, 1);
    float *R = kc_frand(k, n, -1, 1);
    uint16_t *x16 = to_blocked16(x, N, C, HW), *R16 = to_blocked16(R, N, C, HW);
    float *xr = malloc(n * sizeof *xr), *Rr = malloc(n * sizeof *Rr);  /* blocked fp32 of the rounded values */
    bf16_to_f32(x16, xr, n), bf16_to_f32(R16, Rr, n);
    batchnorm_plan p16, p32;
    batchnorm_plan_init_bf16(&p16, N, C, H, W, DNN_BLOCKED, eps, relu);
    batchnorm_plan_init(&p32, N, C, H, W, DNN_BLOCKED, eps, relu);
    uint16_t *out16 = malloc(n * sizeof *out16), *dx16 = malloc(n * sizeof *dx16);
    float *out32 = malloc(n * sizeof *out32), *dx32 = malloc(n * sizeof *dx32), *got = malloc(n * sizeof *got);
    float rm16[64], rv16[64], rm32[64], rv32[64], dw16[64] = { 0 }, db16[64] = { 0 }, dw32[64] = { 0 }, db32[64] = { 0 };
    for (int c = 0; c < C; c++) rm16[c] = rm32[c] = 0.0f, rv16[c] = rv32[c] = 1.0f;
    batchnorm_plan_forward(&p16, out16, x16, w, b, rm16, rv16, 0.1f, true);
    batchnorm_plan_forward(&p32, out32, xr, w, b, rm32, rv32, 0.1f, true);
    double rsm = 0, xm = kc_fmaxabs(xr, n), wm = kc_fmaxabs(w, (size_t)C), X = 0;  /* X bounds |xhat| */
    for (int c = 0; c < C; c++) rsm = fmax(rsm, 1.0 / sqrt((double)p32.var[c] + eps));
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i / (size_t)HW % (size_t)C);
        X = fmax(X, fabs(f32_from_bf16(bf16_from_f32(x[i])) - p32.mean[c]) / sqrt((double)p32.var[c] + eps));
    }
    /* the fp32 test's dinp bound without the statistics' terms, twice (two fp32 plans) */
    const double tM = kc_rtol_f32(M), e32 = 2 * wm * rsm * (tM + kc_rtol_f32(8)) * (2 + 2 * X * X);
    double *want = kc_dzero(n);
    bf16_to_f32(out16, got, n);
    for (size_t i = 0; i < n; i++) want[i] = out32[i];
    kc_close(k, got, want, n, e32, 2 * BF16_HALF_ULP, LABEL("batchnorm %s: training forward = fp32 plan's, rounded", name));
    bool stats = true;  /* two float sums of M terms apart: |x| <= xm, (x - mean)^2 <= 4 xm^2 */
    for (int c = 0; c < C; c++)
        stats &= fabsf(p16.mean[c] - p32.mean[c]) <= 2 * tM * xm && fabsf(rm16[c] - rm32[c]) <= 2 * tM * xm &&
                 fabsf(rv16[c] - rv32[c]) <= 8 * tM * xm * xm;
    kc_report(k, stats, LABEL("batchnorm %s: batch and running statistics = fp32 plan's (%zu-term sums)", name, M), 0);
    batchnorm_plan_backward(&p16, dx16, dw16, db16, R16, x16, w, b);
    batchnorm_plan_backward(&p32, dx32, dw32, db32, Rr, xr, w, b);
    bf16_to_f32(dx16, got, n);
    for (size_t i = 0; i < n; i++) want[i] = dx32[i];
    kc_close(k, got, want, n, e32, 2 * BF16_HALF_ULP, LABEL("batchnorm %s: backward dinp = fp32 plan's, rounded", name));
    double *wdw = kc_dfrom(dw32, (size_t)C), *wdb = kc_dfrom(db32, (size_t)C);
    kc_close(k, dw16, wdw, (size_t)C, 2 * tM * X * (double)M, 0, LABEL("batchnorm %s: backward dweight (fp32) = fp32 plan's", name));
    kc_close(k, db16, wdb, (size_t)C, 2 * tM * (double)M, 0, LABEL("batchnorm %s: backward dbias (fp32) = fp32 plan's", name));
    /* eval: the running statistics (one step from 0 and 1) normalise; no sums over M */
    batchnorm_plan_forward(&p16, out16, x16, w, b, rm16, rv16, 0.1f, false);
    batchnorm_plan_forward(&p32, out32, xr, w, b, rm16, rv16, 0.1f, false);
    bf16_to_f32(out16, got, n);
    for (size_t i = 0; i < n; i++) want[i] = out32[i];
    kc_close(k, got, want, n, kc_rtol_f32(8) * kc_fmaxabs(out32, n), 2 * BF16_HALF_ULP,
             LABEL("batchnorm %s: eval forward = fp32 plan's, rounded", name));
    batchnorm_plan_free(&p16), batchnorm_plan_free(&p32);
    free(x), free(w), free(b), free(R), free(x16), free(R16), free(xr), free(Rr), free(out16), free(dx16), free(out32);
    free(dx32), free(got), free(want), free(wdw), free(wdb);
}

int main(void)
{
    kc k;
    kc_init(&k, 20240611);
    if (kc_isa_skip("")) return 77;
    printf("# blocked activations %s\n", dnn_layout_name(DNN_BLOCKED));
    kc_report(&k, dnn_block() == (isa_active() >= ISA_AVX512 ? 16 : 8),
              "the blocked layout's channel block is one vector of floats at the ISA level (16 from avx512 on, 8 below)",
              dnn_block());

    static const conv_shape convs[] = {
        { "N=2 C=3 9x9 OC=5 3x3 s2 p1", 2, 3, 9, 9, 5, 3, 3, 2, 1, 1 },
        { "N=2 C=3 9x9 OC=5 3x3 s1 p1 (ResNet body)", 2, 3, 9, 9, 5, 3, 3, 1, 1, 1 },
        { "N=2 C=3 9x9 OC=5 1x1 s1 (direct GEMM)", 2, 3, 9, 9, 5, 1, 1, 1, 0, 1 },
        { "N=2 C=3 15x15 OC=4 7x7 s2 p3 (stem)", 2, 3, 15, 15, 4, 7, 7, 2, 3, 0 },
        { "N=2 C=4 9x9 OC=6 1x1 s2 (downsample)", 2, 4, 9, 9, 6, 1, 1, 2, 0, 0 },
        { "N=1 C=2 7x6 OC=3 3x2 s1 p1 (rectangular)", 1, 2, 7, 6, 3, 3, 2, 1, 1, 1 },
        { "N=2 C=2 5x8 OC=3 2x4 s3 p2 (rectangular, wide pad)", 2, 2, 5, 8, 3, 2, 4, 3, 2, 1 },
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) test_conv(&k, &convs[i], DNN_NCHW, DNN_NCHW);
    /* the layouts a CNN runs in: channels in blocks of 16 or 8 (the ISA level's; every
     * count here is a multiple of 16 so each shape runs at every level), and NCHW
     * images into conv1 */
    static const conv_shape blocked[] = {
        { "N=2 C=16 9x9 OC=32 3x3 s1 p1", 2, 16, 9, 9, 32, 3, 3, 1, 1, 0 },
        { "N=2 C=32 9x9 OC=16 3x3 s2 p1", 2, 32, 9, 9, 16, 3, 3, 2, 1, 0 },
        { "N=2 C=16 7x7 OC=48 1x1 s1", 2, 16, 7, 7, 48, 1, 1, 1, 0, 0 },
        { "N=2 C=16 9x9 OC=32 1x1 s2 (downsample)", 2, 16, 9, 9, 32, 1, 1, 2, 0, 0 },
        { "N=2 C=32 4x4 OC=16 3x3 s1 p1 (GEMM engine)", 2, 32, 4, 4, 16, 3, 3, 1, 1, 0 },
        { "N=3 C=16 8x7 OC=32 3x3 s2 p1 (GEMM engine)", 3, 16, 8, 7, 32, 3, 3, 2, 1, 0 },
        { "N=2 C=16 3x4 OC=48 3x2 s1 p1 (GEMM engine, rectangular)", 2, 16, 3, 4, 48, 3, 2, 1, 1, 0 },
    };
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++) test_conv(&k, &blocked[i], DNN_BLOCKED, DNN_BLOCKED);
    /* Winograd, which conv2d_plan_init lets oneDNN choose for 3x3 stride-1 layers, forced
     * on the shapes here (too small for oneDNN to choose it) */
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
        if (blocked[i].KH == 3 && blocked[i].KW == 3 && blocked[i].stride == 1)
            test_conv_alg(&k, &blocked[i], DNN_BLOCKED, DNN_BLOCKED, CONV2D_ALG_WINOGRAD);
    /* direct, oneDNN's other algorithm, forced on every blocked shape: it must exist */
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
        test_conv_alg(&k, &blocked[i], DNN_BLOCKED, DNN_BLOCKED, CONV2D_ALG_DIRECT);
    /* bf16 plans (--precision bf16) where the ISA level has bf16 kernels */
    if (isa_active() >= ISA_AVX512_BF16)
        for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
            test_conv_bf16(&k, &blocked[i], false);
    else
        printf("SKIP  conv2d bf16: isa level %s is below avx512_bf16\n", isa_name(isa_active()));
    static const conv_shape biased = { "N=2 C=16 9x9 OC=32 3x3 s1 p1 (bias)", 2, 16, 9, 9, 32, 3, 3, 1, 1, 1 };
    if (isa_active() >= ISA_AVX512_BF16) test_conv_bf16(&k, &biased, false);
    static const conv_shape stems[] = {
        { "N=2 C=3 15x15 OC=16 7x7 s2 p3 (imagenet stem)", 2, 3, 15, 15, 16, 7, 7, 2, 3, 0 },
        { "N=2 C=3 8x8 OC=16 3x3 s1 p1 (cifar stem)", 2, 3, 8, 8, 16, 3, 3, 1, 1, 0 },
    };
    for (size_t i = 0; i < sizeof stems / sizeof stems[0]; i++) test_conv(&k, &stems[i], DNN_NCHW, DNN_BLOCKED);
    if (isa_active() >= ISA_AVX512_BF16)
        for (size_t i = 0; i < sizeof stems / sizeof stems[0]; i++) test_conv_bf16(&k, &stems[i], true);

    /* a large eps makes a misplaced eps visible above float rounding */
    test_batchnorm(&k, 2, 3, 9, 9, 0.0f, 1e-5f, DNN_NCHW, false);
    test_batchnorm(&k, 3, 5, 7, 1, 3.0f, 0.1f, DNN_NCHW, false);
    test_batchnorm(&k, 4, 2, 1, 1, 1.0f, 1e-3f, DNN_NCHW, false);
    test_batchnorm(&k, 2, 3, 9, 9, 0.0f, 1e-5f, DNN_NCHW, true);
    test_batchnorm(&k, 2, 16, 9, 9, 0.0f, 1e-5f, DNN_BLOCKED, false);
    test_batchnorm(&k, 3, 32, 5, 3, 2.0f, 1e-5f, DNN_BLOCKED, true);
    if (isa_active() >= ISA_AVX512_BF16) {
        test_batchnorm_bf16(&k, 2, 16, 9, 9, 0.0f, false);
        test_batchnorm_bf16(&k, 3, 32, 5, 3, 2.0f, true);
    } else {
        printf("SKIP  batchnorm bf16: isa level %s is below avx512_bf16\n", isa_name(isa_active()));
    }

    printf("%s: %d failure(s)\n", k.failures ? "FAIL" : "ok", k.failures);
    return k.failures ? 1 : 0;
}
