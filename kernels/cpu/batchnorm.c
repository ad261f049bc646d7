/* batchnorm — see batchnorm.h. */
#include "batchnorm.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Unbiased from biased variance: var * M/(M-1); M = 1 (undefined) keeps var. */
static double batchnorm_unbias(double var, size_t M)
{
    return M > 1 ? var * (double)M / (double)(M - 1) : var;
}

static void *batchnorm_alloc(batchnorm_plan *p, size_t bytes)
{
    void *b = NULL;
    if (posix_memalign(&b, 64, bytes ? bytes : 64) != 0)
        dnn_check(dnnl_out_of_memory, "batchnorm buffer", __FILE__, __LINE__);
    p->bytes += bytes;
    return b;
}

static void batchnorm_plan_build(batchnorm_plan *p, int N, int C, int H, int W, dnn_layout layout, float eps,
                                 bool relu, bool bf16)
{
    memset(p, 0, sizeof *p);
    p->N = N, p->C = C, p->H = H, p->W = W, p->layout = layout, p->eps = eps, p->relu = relu;
    dnnl_memory_desc_t data, stat;
    dnn_md_typed(&data, N, C, H, W, layout, bf16 ? dnnl_bf16 : dnnl_f32);
    dnnl_dims_t cd = { C };
    DNN_CHECK(dnnl_memory_desc_init_by_tag(&stat, 1, cd, dnnl_f32, dnnl_x));
    const unsigned affine = dnnl_use_scale | dnnl_use_shift, fuse = relu ? dnnl_fuse_norm_relu : 0;

    dnnl_batch_normalization_desc_t d;
    dnnl_primitive_desc_t fpd, pd;
    DNN_CHECK(dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_training, &data, eps, affine | fuse));
    DNN_CHECK(dnnl_primitive_desc_create(&fpd, &d, NULL, dnn_engine(), NULL));
    if (relu) {
        const dnnl_memory_desc_t *ws = dnnl_primitive_desc_query_md(fpd, dnnl_query_workspace_md, 0);
        p->ws_m = dnn_mem(ws);
        p->ws = batchnorm_alloc(p, dnnl_memory_desc_get_size(ws));
    }
    DNN_CHECK(dnnl_batch_normalization_backward_desc_init(&d, dnnl_backward, &data, &data, eps, affine | fuse));
    DNN_CHECK(dnnl_primitive_desc_create(&pd, &d, NULL, dnn_engine(), fpd));
    p->bwd = dnn_primitive(pd);
    p->fwd_train = dnn_primitive(fpd);
    DNN_CHECK(dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_inference, &data, eps,
                                                         affine | fuse | dnnl_use_global_stats));
    DNN_CHECK(dnnl_primitive_desc_create(&pd, &d, NULL, dnn_engine(), NULL));
    p->fwd_eval = dnn_primitive(pd);

    p->x = dnn_mem(&data), p->y = dnn_mem(&data), p->dx = dnn_mem(&data);
    p->scale = dnn_mem(&stat), p->shift = dnn_mem(&stat), p->mean_m = dnn_mem(&stat), p->var_m = dnn_mem(&stat);
    p->dscale = dnn_mem(&stat), p->dshift = dnn_mem(&stat);
    p->mean = batchnorm_alloc(p, 4 * (size_t)C * sizeof(float));
    p->var = p->mean + C, p->dscale_tmp = p->var + C, p->dshift_tmp = p->dscale_tmp + C;
}

void batchnorm_plan_init(batchnorm_plan *p, int N, int C, int H, int W, dnn_layout layout, float eps, bool relu)
{
    batchnorm_plan_build(p, N, C, H, W, layout, eps, relu, false);
}

void batchnorm_plan_init_bf16(batchnorm_plan *p, int N, int C, int H, int W, dnn_layout layout, float eps, bool relu)
{
    batchnorm_plan_build(p, N, C, H, W, layout, eps, relu, true);
}

void batchnorm_plan_free(batchnorm_plan *p)
{
    dnnl_primitive_t prims[] = { p->fwd_train, p->fwd_eval, p->bwd };
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
    dnnl_memory_t mems[] = { p->x, p->y, p->dx, p->scale, p->shift, p->mean_m, p->var_m, p->dscale, p->dshift, p->ws_m };
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    free(p->mean), free(p->ws);
    memset(p, 0, sizeof *p);
}

void batchnorm_plan_forward(batchnorm_plan *p, void *out, const void *inp, const float *weight, const float *bias,
                            float *running_mean, float *running_var, float momentum, bool training)
{
    if (!training) {
        dnn_arg a[] = { { DNNL_ARG_SRC, p->x, inp }, { DNNL_ARG_DST, p->y, out },
                        { DNNL_ARG_SCALE, p->scale, weight }, { DNNL_ARG_SHIFT, p->shift, bias },
                        { DNNL_ARG_MEAN, p->mean_m, running_mean }, { DNNL_ARG_VARIANCE, p->var_m, running_var } };
        dnn_run(p->fwd_eval, a, 6);
        return;
    }
    dnn_arg a[] = { { DNNL_ARG_SRC, p->x, inp }, { DNNL_ARG_DST, p->y, out },
                    { DNNL_ARG_SCALE, p->scale, weight }, { DNNL_ARG_SHIFT, p->shift, bias },
                    { DNNL_ARG_MEAN, p->mean_m, p->mean }, { DNNL_ARG_VARIANCE, p->var_m, p->var },
                    { DNNL_ARG_WORKSPACE, p->ws_m, p->ws } };
    dnn_run(p->fwd_train, a, p->relu ? 7 : 6);
    const size_t M = (size_t)p->N * p->H * p->W;
    for (int c = 0; c < p->C; c++) {
        if (running_mean)
            running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + (double)momentum * p->mean[c]);
        if (running_var)
            running_var[c] =
                (float)((1.0 - momentum) * running_var[c] + (double)momentum * batchnorm_unbias(p->var[c], M));
    }
}

void batchnorm_plan_backward(batchnorm_plan *p, void *dinp, float *dweight, float *dbias, const void *dout,
                             const void *inp, const float *weight, const float *bias)
{
    assert(dinp);
    dnn_arg a[] = { { DNNL_ARG_SRC, p->x, inp }, { DNNL_ARG_DIFF_DST, p->y, dout },
                    { DNNL_ARG_DIFF_SRC, p->dx, dinp }, { DNNL_ARG_SCALE, p->scale, weight },
                    { DNNL_ARG_MEAN, p->mean_m, p->mean }, { DNNL_ARG_VARIANCE, p->var_m, p->var },
                    { DNNL_ARG_SHIFT, p->shift, bias },
                    { DNNL_ARG_DIFF_SCALE, p->dscale, p->dscale_tmp }, { DNNL_ARG_DIFF_SHIFT, p->dshift, p->dshift_tmp },
                    { DNNL_ARG_WORKSPACE, p->ws_m, p->ws } };
    dnn_run(p->bwd, a, p->relu ? 10 : 9);
    for (int c = 0; c < p->C; c++) {
        if (dweight) dweight[c] += p->dscale_tmp[c];
        if (dbias) dbias[c] += p->dshift_tmp[c];
    }
}

void batchnorm_forward_ref(double *out, double *mean, double *rstd, double *running_mean, double *running_var,
                           const double *inp, const double *weight, const double *bias, int N, int C, int HW,
                           double eps, double momentum, int training)
{
    const size_t M = (size_t)N * HW;
    for (int c = 0; c < C; c++) {
        double mu, var;
        if (training) {
            double s = 0.0, q = 0.0;
            for (int n = 0; n < N; n++)
                for (int i = 0; i < HW; i++) s += inp[((size_t)n * C + c) * HW + i];
            mu = s / (double)M;
            for (int n = 0; n < N; n++)
                for (int i = 0; i < HW; i++) {
                    double d = inp[((size_t)n * C + c) * HW + i] - mu;
                    q += d * d;
                }
            var = q / (double)M;
            if (running_mean) running_mean[c] = (1.0 - momentum) * running_mean[c] + momentum * mu;
            if (running_var) running_var[c] = (1.0 - momentum) * running_var[c] + momentum * batchnorm_unbias(var, M);
        } else {
            mu = running_mean[c];
            var = running_var[c];
        }
        double rs = 1.0 / sqrt(var + eps);
        if (mean) mean[c] = mu;
        if (rstd) rstd[c] = rs;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                out[j] = (inp[j] - mu) * rs * (weight ? weight[c] : 1.0) + (bias ? bias[c] : 0.0);
            }
    }
}

void batchnorm_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                            const double *weight, const double *mean, const double *rstd, int N, int C, int HW)
{
    const size_t M = (size_t)N * HW;
    for (int c = 0; c < C; c++) {
        double sg = 0.0, sgx = 0.0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                sg += dout[j];
                sgx += dout[j] * (inp[j] - mean[c]) * rstd[c];
            }
        if (dbias) dbias[c] += sg;
        if (dweight) dweight[c] += sgx;
        if (!dinp) continue;
        double w = weight ? weight[c] : 1.0;
        for (int n = 0; n < N; n++)
            for (int i = 0; i < HW; i++) {
                size_t j = ((size_t)n * C + c) * HW + i;
                double xhat = (inp[j] - mean[c]) * rstd[c];
                dinp[j] += w * rstd[c] * (dout[j] - sg / (double)M - xhat * sgx / (double)M);
            }
    }
}
