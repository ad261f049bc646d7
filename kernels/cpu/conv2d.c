/* conv2d — see conv2d.h. */
#include "conv2d.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static float *conv2d_alloc(conv2d_plan *p, const dnnl_memory_desc_t *md)
{
    size_t bytes = dnnl_memory_desc_get_size(md);
    float *b = NULL;
    if (posix_memalign((void **)&b, 64, bytes ? bytes : 64) != 0) dnn_check(dnnl_out_of_memory, "conv2d buffer", __FILE__, __LINE__);
    p->bytes += bytes;
    return b;
}

/* A reorder from `from` to `to`; with `sum`, dst = dst + reorder(src). */
static dnnl_primitive_t conv2d_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, bool sum)
{
    dnnl_primitive_attr_t attr = NULL;
    if (sum) {
        dnnl_post_ops_t po;
        DNN_CHECK(dnnl_post_ops_create(&po));
        DNN_CHECK(dnnl_post_ops_append_sum(po, 1.0f));
        DNN_CHECK(dnnl_primitive_attr_create(&attr));
        DNN_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
        DNN_CHECK(dnnl_post_ops_destroy(po));
    }
    dnnl_primitive_desc_t pd;
    DNN_CHECK(dnnl_reorder_primitive_desc_create(&pd, from, dnn_engine(), to, dnn_engine(), attr));
    if (attr) DNN_CHECK(dnnl_primitive_attr_destroy(attr));
    return dnn_primitive(pd);
}

void conv2d_plan_init(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias, bool dinp)
{
    assert(s->stride >= 1 && s->pad >= 0 && s->KH >= 1 && s->KW >= 1);
    assert(s->OH == (s->H + 2 * s->pad - s->KH) / s->stride + 1 && s->OW == (s->W + 2 * s->pad - s->KW) / s->stride + 1);
    memset(p, 0, sizeof *p);
    p->s = *s, p->in = in, p->out = out, p->bias = bias, p->dinp = dinp;
    dnnl_memory_desc_t src, dst, w_any, w_user, b_md;
    dnn_md(&src, s->N, s->C, s->H, s->W, in);
    dnn_md(&dst, s->N, s->OC, s->OH, s->OW, out);
    dnnl_dims_t wd = { s->OC, s->C, s->KH, s->KW }, bd = { s->OC };
    DNN_CHECK(dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DNN_CHECK(dnnl_memory_desc_init_by_tag(&w_user, 4, wd, dnnl_f32, dnnl_oihw));
    DNN_CHECK(dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_x));
    dnnl_dims_t strides = { s->stride, s->stride }, pad_l = { s->pad, s->pad };
    /* right padding so that the last window ends where the output size says */
    dnnl_dims_t pad_r = { (s->OH - 1) * s->stride + s->KH - s->H - s->pad, (s->OW - 1) * s->stride + s->KW - s->W - s->pad };

    dnnl_convolution_desc_t d;
    dnnl_primitive_desc_t fpd, pd;
    DNN_CHECK(dnnl_convolution_forward_desc_init(&d, dnnl_forward_training, dnnl_convolution_direct, &src, &w_any,
                                                 bias ? &b_md : NULL, &dst, strides, pad_l, pad_r));
    DNN_CHECK(dnnl_primitive_desc_create(&fpd, &d, NULL, dnn_engine(), NULL));
    const dnnl_memory_desc_t *w_fwd = dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0);
    p->src = dnn_mem(&src), p->dst = dnn_mem(&dst), p->w_user = dnn_mem(&w_user), p->w = dnn_mem(w_fwd);
    if (bias) p->bias_m = dnn_mem(&b_md), p->dbias_m = dnn_mem(&b_md);
    p->wbuf = conv2d_alloc(p, w_fwd);
    p->w_to_fwd = conv2d_reorder(&w_user, w_fwd, false);

    if (dinp) {
        DNN_CHECK(dnnl_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, &src, &w_any, &dst, strides,
                                                           pad_l, pad_r));
        DNN_CHECK(dnnl_primitive_desc_create(&pd, &d, NULL, dnn_engine(), fpd));
        const dnnl_memory_desc_t *w_bwd = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        if (!dnnl_memory_desc_equal(w_bwd, w_fwd)) {
            p->w_bwd = dnn_mem(w_bwd);
            p->wbuf_bwd = conv2d_alloc(p, w_bwd);
            p->w_to_bwd = conv2d_reorder(&w_user, w_bwd, false);
        }
        p->bwd_data = dnn_primitive(pd);
    }
    DNN_CHECK(dnnl_convolution_backward_weights_desc_init(&d, dnnl_convolution_direct, &src, &w_any,
                                                          bias ? &b_md : NULL, &dst, strides, pad_l, pad_r));
    DNN_CHECK(dnnl_primitive_desc_create(&pd, &d, NULL, dnn_engine(), fpd));
    const dnnl_memory_desc_t *dw = dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0);
    p->dw = dnn_mem(dw);
    p->dwbuf = conv2d_alloc(p, dw);
    p->dw_to_user = conv2d_reorder(dw, &w_user, true);
    if (bias) p->dbias_tmp = conv2d_alloc(p, &b_md);
    p->bwd_weights = dnn_primitive(pd);
    p->fwd = dnn_primitive(fpd);
}

void conv2d_plan_free(conv2d_plan *p)
{
    dnnl_primitive_t prims[] = { p->fwd, p->bwd_data, p->bwd_weights, p->w_to_fwd, p->w_to_bwd, p->dw_to_user };
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
    dnnl_memory_t mems[] = { p->src, p->dst, p->w_user, p->w, p->w_bwd, p->dw, p->bias_m, p->dbias_m };
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    free(p->wbuf), free(p->wbuf_bwd), free(p->dwbuf), free(p->dbias_tmp);
    memset(p, 0, sizeof *p);
}

void conv2d_plan_forward(conv2d_plan *p, float *out, const float *inp, const float *weight, const float *bias)
{
    assert(!bias == !p->bias);
    dnn_arg r[] = { { DNNL_ARG_FROM, p->w_user, weight }, { DNNL_ARG_TO, p->w, p->wbuf } };
    dnn_run(p->w_to_fwd, r, 2);
    dnn_arg a[] = { { DNNL_ARG_SRC, p->src, inp }, { DNNL_ARG_WEIGHTS, p->w, p->wbuf },
                    { DNNL_ARG_DST, p->dst, out }, { DNNL_ARG_BIAS, p->bias_m, bias } };
    dnn_run(p->fwd, a, p->bias ? 4 : 3);
    p->weight = weight;
}

void conv2d_plan_backward(conv2d_plan *p, float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp)
{
    assert(!dinp || p->dinp);
    if (dinp) {
        dnnl_memory_t wm = p->w;
        const float *wb = p->wbuf;
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
        dnn_arg a[] = { { DNNL_ARG_SRC, p->src, inp }, { DNNL_ARG_DIFF_DST, p->dst, dout },
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
