/* conv2d — see conv2d.h. */
#include "conv2d.h"

#include "precision.h"

#include <assert.h>
#include "blas.h"
#include <stdlib.h>
#include <string.h>

static void *conv2d_alloc(conv2d_plan *p, const dnnl_memory_desc_t *md)
{
    size_t bytes = dnnl_memory_desc_get_size(md);
    void *b = NULL;
    if (posix_memalign((void **)&b, 64, bytes ? bytes : 64) != 0) dnn_check(dnnl_out_of_memory, "conv2d buffer", __FILE__, __LINE__);
    p->bytes += bytes;
    return b;
}

/* A reorder from `from` to `to`; with `sum`, dst = dst + reorder(src). */
static dnnl_primitive_t conv2d_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, bool sum)
{
    dnnl_primitive_attr_t attr = dnn_sum_attr(sum);
    dnnl_primitive_desc_t pd;
    DNN_CHECK(dnnl_reorder_primitive_desc_create(&pd, from, dnn_engine(), to, dnn_engine(), attr));
    if (attr) DNN_CHECK(dnnl_primitive_attr_destroy(attr));
    return dnn_primitive(pd);
}

/* ---- the GEMM engine (small output maps, blocked layout) -----------------------
 * K index of (c, kh, kw) in the blocked order, B = dnn_block():
 * ((c/B * KH + kh) * KW + kw) * B + c%B, so one pixel's row of the column matrix is
 * built from whole B-channel vectors. */

static size_t gemm_k(const conv2d_shape *s)
{
    return (size_t)s->C * s->KH * s->KW;
}

static size_t gemm_pixels(const conv2d_shape *s)
{
    return (size_t)s->N * s->OH * s->OW;
}

static void gemm_im2col(float *cols, const float *x, const conv2d_shape *s)
{
    const int B = dnn_block(), CB = s->C / B;
    const size_t K = gemm_k(s);
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < s->N; n++)
        for (int oh = 0; oh < s->OH; oh++)
            for (int ow = 0; ow < s->OW; ow++) {
                float *row = cols + (((size_t)n * s->OH + oh) * s->OW + ow) * K;
                for (int cb = 0; cb < CB; cb++)
                    for (int kh = 0; kh < s->KH; kh++)
                        for (int kw = 0; kw < s->KW; kw++) {
                            int ih = oh * s->stride - s->pad + kh, iw = ow * s->stride - s->pad + kw;
                            float *d = row + (((size_t)cb * s->KH + kh) * s->KW + kw) * B;
                            if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) {
                                memset(d, 0, B * sizeof *d);
                            } else {
                                memcpy(d, x + ((((size_t)n * CB + cb) * s->H + ih) * s->W + iw) * B,
                                       B * sizeof *d);
                            }
                        }
            }
}

/* dx = col2im(dcols), the adjoint of gemm_im2col; one thread per image, pixels in
 * order: deterministic. */
static void gemm_col2im(float *dx, const float *dcols, const conv2d_shape *s)
{
    const int B = dnn_block(), CB = s->C / B;
    const size_t K = gemm_k(s), img = (size_t)s->C * s->H * s->W;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->N; n++) {
        float *xi = dx + (size_t)n * img;
        memset(xi, 0, img * sizeof *xi);
        for (int oh = 0; oh < s->OH; oh++)
            for (int ow = 0; ow < s->OW; ow++) {
                const float *row = dcols + (((size_t)n * s->OH + oh) * s->OW + ow) * K;
                for (int cb = 0; cb < CB; cb++)
                    for (int kh = 0; kh < s->KH; kh++)
                        for (int kw = 0; kw < s->KW; kw++) {
                            int ih = oh * s->stride - s->pad + kh, iw = ow * s->stride - s->pad + kw;
                            if (ih < 0 || ih >= s->H || iw < 0 || iw >= s->W) continue;
                            float *restrict d = xi + (((size_t)cb * s->H + ih) * s->W + iw) * B;
                            const float *restrict g = row + (((size_t)cb * s->KH + kh) * s->KW + kw) * B;
#pragma omp simd
                            for (int c = 0; c < B; c++) d[c] += g[c];
                        }
            }
    }
}

/* (pixels, C) pixel-major <-> the blocked layout. */
static void gemm_to_pm(float *pm, const float *y, int N, int C, int HW)
{
    const int B = dnn_block(), CB = C / B;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < CB; cb++)
            for (int i = 0; i < HW; i++)
                memcpy(pm + ((size_t)n * HW + i) * C + (size_t)cb * B,
                       y + (((size_t)n * CB + cb) * HW + i) * B, B * sizeof *pm);
}

static void gemm_from_pm(float *y, const float *pm, int N, int C, int HW)
{
    const int B = dnn_block(), CB = C / B;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < CB; cb++)
            for (int i = 0; i < HW; i++)
                memcpy(y + (((size_t)n * CB + cb) * HW + i) * B,
                       pm + ((size_t)n * HW + i) * C + (size_t)cb * B, B * sizeof *y);
}

/* The blocked K index of (c, kh, kw). */
static size_t gemm_kidx(const conv2d_shape *s, int B, int c, int kh, int kw)
{
    return (((size_t)(c / B) * s->KH + kh) * s->KW + kw) * B + (size_t)(c % B);
}

static void gemm_permute_weights(float *wp, const float *w, const conv2d_shape *s)
{
    const size_t K = gemm_k(s);
    const int B = dnn_block();
#pragma omp parallel for schedule(static)
    for (int oc = 0; oc < s->OC; oc++)
        for (int c = 0; c < s->C; c++)
            for (int kh = 0; kh < s->KH; kh++)
                for (int kw = 0; kw < s->KW; kw++)
                    wp[(size_t)oc * K + gemm_kidx(s, B, c, kh, kw)] = w[(((size_t)oc * s->C + c) * s->KH + kh) * s->KW + kw];
}

static void gemm_add_dweight(float *dw, const float *dwp, const conv2d_shape *s)
{
    const size_t K = gemm_k(s);
    const int B = dnn_block();
#pragma omp parallel for schedule(static)
    for (int oc = 0; oc < s->OC; oc++)
        for (int c = 0; c < s->C; c++)
            for (int kh = 0; kh < s->KH; kh++)
                for (int kw = 0; kw < s->KW; kw++)
                    dw[(((size_t)oc * s->C + c) * s->KH + kh) * s->KW + kw] += dwp[(size_t)oc * K + gemm_kidx(s, B, c, kh, kw)];
}

static void gemm_forward(conv2d_plan *p, float *out, const float *inp, const float *weight)
{
    const conv2d_shape *s = &p->s;
    const int P = (int)gemm_pixels(s), K = (int)gemm_k(s);
    gemm_permute_weights(p->wperm, weight, s);
    gemm_im2col(p->cols, inp, s);
    p->cols_hold_input = true;
    /* pm (P, OC) = cols (P, K) . wperm^T (K, OC) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, P, s->OC, K, 1.0f, p->cols, K, p->wperm, K, 0.0f, p->pm,
                s->OC);
    gemm_from_pm(out, p->pm, s->N, s->OC, s->OH * s->OW);
}

static void gemm_backward(conv2d_plan *p, float *dinp, float *dweight, const float *dout, const float *inp)
{
    const conv2d_shape *s = &p->s;
    const int P = (int)gemm_pixels(s), K = (int)gemm_k(s);
    gemm_to_pm(p->pm, dout, s->N, s->OC, s->OH * s->OW);
    if (dweight) {
        if (!p->cols_hold_input) gemm_im2col(p->cols, inp, s);
        p->cols_hold_input = true;
        /* dwperm (OC, K) = pm^T (OC, P) . cols (P, K) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s->OC, K, P, 1.0f, p->pm, s->OC, p->cols, K, 0.0f,
                    p->dwperm, K);
        gemm_add_dweight(dweight, p->dwperm, s);
    }
    if (dinp) {
        /* dcols (P, K) = pm (P, OC) . wperm (OC, K), in place of the columns */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, P, K, s->OC, 1.0f, p->pm, s->OC, p->wperm, K, 0.0f,
                    p->cols, K);
        p->cols_hold_input = false;
        gemm_col2im(dinp, p->cols, s);
    }
}

int conv2d_gemm_max_pixels(void) { return dnn_block() == 8 ? CONV2D_GEMM_MAX_PIXELS : 0; }

/* pd of one pass; NULL when oneDNN has no kernel for it and the caller `may_fail` (an
 * explicit algorithm, or bf16), else that dies like any other oneDNN failure */
static dnnl_primitive_desc_t conv2d_pd(const void *desc, const_dnnl_primitive_desc_t hint, bool may_fail)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, desc, NULL, dnn_engine(), hint);
    if (st == dnnl_unimplemented && may_fail) return NULL;
    DNN_CHECK(st);
    return pd;
}

/* The primitives of a plan. bf16: the activations (input, output, dout, dinp) and the
 * weights in bf16, dweight in f32; an f32 plan uses the f32 descriptors throughout. */
static bool conv2d_plan_build(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias,
                              bool dinp, conv2d_alg alg)
{
    static const dnnl_alg_kind_t kinds[] = { dnnl_convolution_auto, dnnl_convolution_direct,
                                             dnnl_convolution_winograd };
    const dnnl_alg_kind_t kind = kinds[alg];
    const bool may_fail = p->bf16 || alg != CONV2D_ALG_AUTO;  /* the caller has a way out */
    const dnnl_data_type_t op = p->bf16 ? dnnl_bf16 : dnnl_f32;  /* the operands' type */
    dnnl_memory_desc_t src, dst, w_any, dw_any, w_user, b_md;
    dnn_md_typed(&src, s->N, s->C, s->H, s->W, in, op);
    dnn_md_typed(&dst, s->N, s->OC, s->OH, s->OW, out, op);
    dnnl_dims_t wd = { s->OC, s->C, s->KH, s->KW }, bd = { s->OC };
    DNN_CHECK(dnnl_memory_desc_init_by_tag(&w_any, 4, wd, op, dnnl_format_tag_any));
    DNN_CHECK(dnnl_memory_desc_init_by_tag(&dw_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DNN_CHECK(dnnl_memory_desc_init_by_tag(&w_user, 4, wd, dnnl_f32, dnnl_oihw));
    DNN_CHECK(dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_x));
    dnnl_dims_t strides = { s->stride, s->stride }, pad_l = { s->pad, s->pad };
    /* right padding so that the last window ends where the output size says */
    dnnl_dims_t pad_r = { (s->OH - 1) * s->stride + s->KH - s->H - s->pad, (s->OW - 1) * s->stride + s->KW - s->W - s->pad };

    dnnl_convolution_desc_t d;
    dnnl_primitive_desc_t fpd, pd;
    DNN_CHECK(dnnl_convolution_forward_desc_init(&d, dnnl_forward_training, kind, &src, &w_any,
                                                 bias ? &b_md : NULL, &dst, strides, pad_l, pad_r));
    if (!(fpd = conv2d_pd(&d, NULL, may_fail))) return false;
    if (p->f32_input) p->src16buf = conv2d_alloc(p, &src);
    const dnnl_memory_desc_t *w_fwd = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
    p->src = dnn_mem(&src), p->dst = dnn_mem(&dst), p->w_user = dnn_mem(&w_user), p->w = dnn_mem(w_fwd);
    if (bias) p->bias_m = dnn_mem(&b_md), p->dbias_m = dnn_mem(&b_md);
    p->wbuf = conv2d_alloc(p, w_fwd);
    p->w_to_fwd = conv2d_reorder(&w_user, w_fwd, false);
    p->fwd = dnn_primitive(fpd);  /* destroys fpd: the hints below take the primitive's own */
    const_dnnl_primitive_desc_t hint;
    DNN_CHECK(dnnl_primitive_get_primitive_desc(p->fwd, &hint));
    w_fwd = dnnl_primitive_desc_query_md(hint, dnnl_query_weights_md, 0);

    if (dinp) {
        DNN_CHECK(dnnl_convolution_backward_data_desc_init(&d, kind, &src, &w_any, &dst, strides, pad_l, pad_r));
        if (!(pd = conv2d_pd(&d, hint, may_fail))) return false;
        const dnnl_memory_desc_t *w_bwd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (!dnnl_memory_desc_equal(w_bwd, w_fwd)) {
            p->w_bwd = dnn_mem(w_bwd);
            p->wbuf_bwd = conv2d_alloc(p, w_bwd);
            p->w_to_bwd = conv2d_reorder(&w_user, w_bwd, false);
        }
        p->bwd_data = dnn_primitive(pd);
    }
    DNN_CHECK(dnnl_convolution_backward_weights_desc_init(&d, kind, &src, &dw_any, bias ? &b_md : NULL, &dst,
                                                          strides, pad_l, pad_r));
    if (!(pd = conv2d_pd(&d, hint, may_fail))) return false;
    const dnnl_memory_desc_t *dw = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0);
    p->dw = dnn_mem(dw);
    p->dwbuf = conv2d_alloc(p, dw);
    p->dw_to_user = conv2d_reorder(dw, &w_user, true);
    if (bias) p->dbias_tmp = conv2d_alloc(p, &b_md);
    p->bwd_weights = dnn_primitive(pd);
    return true;
}

static void conv2d_plan_check(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias,
                              bool dinp)
{
    assert(s->stride >= 1 && s->pad >= 0 && s->KH >= 1 && s->KW >= 1);
    assert(s->OH == (s->H + 2 * s->pad - s->KH) / s->stride + 1 && s->OW == (s->W + 2 * s->pad - s->KW) / s->stride + 1);
    memset(p, 0, sizeof *p);
    p->s = *s, p->in = in, p->out = out, p->bias = bias, p->dinp = dinp;
}

bool conv2d_plan_init_alg(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias, bool dinp,
                          conv2d_alg alg)
{
    conv2d_plan_check(p, s, in, out, bias, dinp);
    if (conv2d_plan_build(p, s, in, out, bias, dinp, alg)) return true;
    conv2d_plan_free(p);
    return false;
}

bool conv2d_plan_init_bf16(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias,
                           bool dinp, bool f32_input)
{
    assert(!(f32_input && dinp));  /* an fp32 input has no bf16 gradient */
    assert(!f32_input || in == DNN_NCHW);  /* the rounding pass takes the images' plain layout */
    conv2d_plan_check(p, s, in, out, bias, dinp);
    p->bf16 = true, p->f32_input = f32_input;
    /* dnnl_convolution_auto: oneDNN has no bf16 Winograd, so it runs direct; an
     * unimplemented pass is reported as for an explicit algorithm */
    if (conv2d_plan_build(p, s, in, out, bias, dinp, CONV2D_ALG_AUTO)) return true;
    conv2d_plan_free(p);
    return false;
}

void conv2d_plan_init(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias, bool dinp)
{
    conv2d_plan_check(p, s, in, out, bias, dinp);
    if (in == DNN_BLOCKED && out == DNN_BLOCKED && !bias && s->KH * s->KW > 1 &&
        s->OH * s->OW <= conv2d_gemm_max_pixels()) {
        size_t P = gemm_pixels(s), K = gemm_k(s), fl = sizeof(float);
        p->gemm = true;
        p->bytes = (P * K + P * (size_t)s->OC + 2 * (size_t)s->OC * K) * fl;
        if (posix_memalign((void **)&p->cols, 64, P * K * fl) || posix_memalign((void **)&p->pm, 64, P * s->OC * fl) ||
            posix_memalign((void **)&p->wperm, 64, (size_t)s->OC * K * fl) ||
            posix_memalign((void **)&p->dwperm, 64, (size_t)s->OC * K * fl))
            dnn_check(dnnl_out_of_memory, "conv2d GEMM engine buffers", __FILE__, __LINE__);
        return;
    }
    conv2d_plan_build(p, s, in, out, bias, dinp, CONV2D_ALG_AUTO);
}

void conv2d_plan_free(conv2d_plan *p)
{
    dnnl_primitive_t prims[] = { p->fwd, p->bwd_data, p->bwd_weights, p->w_to_fwd, p->w_to_bwd, p->dw_to_user };
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
    dnnl_memory_t mems[] = { p->src, p->dst, p->w_user, p->w, p->w_bwd, p->dw, p->bias_m, p->dbias_m };
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    free(p->wbuf), free(p->wbuf_bwd), free(p->dwbuf), free(p->dbias_tmp), free(p->src16buf);
    free(p->cols), free(p->pm), free(p->wperm), free(p->dwperm);
    memset(p, 0, sizeof *p);
}

void conv2d_plan_forward(conv2d_plan *p, void *out, const void *inp, const float *weight, const float *bias)
{
    assert(!bias == !p->bias);
    if (p->gemm) {
        gemm_forward(p, out, inp, weight);
        return;
    }
    dnn_arg r[] = { { DNNL_ARG_FROM, p->w_user, weight }, { DNNL_ARG_TO, p->w, p->wbuf } };
    dnn_run(p->w_to_fwd, r, 2);  /* bf16: the reorder rounds the weights */
    const void *x = inp;
    if (p->f32_input) {
        const conv2d_shape *s = &p->s;
        f32_to_bf16(inp, p->src16buf, (size_t)s->N * s->C * s->H * s->W);
        x = p->src16buf;
    }
    dnn_arg a[] = { { DNNL_ARG_SRC, p->src, x }, { DNNL_ARG_WEIGHTS, p->w, p->wbuf },
                    { DNNL_ARG_DST, p->dst, out }, { DNNL_ARG_BIAS, p->bias_m, bias } };
    dnn_run(p->fwd, a, p->bias ? 4 : 3);
    p->weight = weight;
}

void conv2d_plan_backward(conv2d_plan *p, void *dinp, float *dweight, float *dbias, const void *dout,
                          const void *inp)
{
    assert(!dinp || p->dinp);
    if (p->gemm) {
        gemm_backward(p, dinp, dweight, dout, inp);
        return;
    }
    const void *x = p->f32_input ? p->src16buf : inp;  /* the forward's rounding of the same inp */
    if (dinp) {
        dnnl_memory_t wm = p->w;
        const void *wb = p->wbuf;
        if (p->w_to_bwd) {
            dnn_arg r[] = { { DNNL_ARG_FROM, p->w_user, p->weight }, { DNNL_ARG_TO, p->w_bwd, p->wbuf_bwd } };
            dnn_run(p->w_to_bwd, r, 2);
            wm = p->w_bwd, wb = p->wbuf_bwd;
        }
        dnn_arg a[] = { { DNNL_ARG_DIFF_SRC, p->src, dinp }, { DNNL_ARG_WEIGHTS, wm, wb },
                        { DNNL_ARG_DIFF_DST, p->dst, dout } };
        dnn_run(p->bwd_data, a, 3);
    }
    if (dweight || dbias) {
        dnn_arg a[] = { { DNNL_ARG_SRC, p->src, x }, { DNNL_ARG_DIFF_DST, p->dst, dout },
                        { DNNL_ARG_DIFF_WEIGHTS, p->dw, p->dwbuf }, { DNNL_ARG_DIFF_BIAS, p->dbias_m, p->dbias_tmp } };
        dnn_run(p->bwd_weights, a, p->bias ? 4 : 3);
        if (dweight) {
            dnn_arg r[] = { { DNNL_ARG_FROM, p->dw, p->dwbuf }, { DNNL_ARG_TO, p->w_user, dweight } };
            dnn_run(p->dw_to_user, r, 2);
        }
        if (dbias)
            for (int oc = 0; oc < p->s.OC; oc++) dbias[oc] += p->dbias_tmp[oc];
    }
}

/* ---- the specification ------------------------------------------------------ */

void conv2d_forward_ref(double *out, const double *inp, const double *weight, const double *bias, int N, int C,
                        int H, int W, int OC, int KH, int KW, int stride, int pad, int OH, int OW)
{
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double s = bias ? bias[oc] : 0.0;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                s += weight[((oc * C + c) * KH + kh) * KW + kw] * inp[((n * C + c) * H + ih) * W + iw];
                            }
                    out[((n * OC + oc) * OH + oh) * OW + ow] = s;
                }
}

void conv2d_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                         const double *weight, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                         int pad, int OH, int OW)
{
    for (int n = 0; n < N; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double g = dout[((n * OC + oc) * OH + oh) * OW + ow];
                    if (dbias) dbias[oc] += g;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                int wi = ((oc * C + c) * KH + kh) * KW + kw, xi = ((n * C + c) * H + ih) * W + iw;
                                if (dweight) dweight[wi] += g * inp[xi];
                                if (dinp) dinp[xi] += g * weight[wi];
                            }
                }
}
