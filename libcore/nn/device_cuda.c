/* device_cuda — the kernel tables of a CUDA device (device.h): the kernels/cuda
 * variants, whose signatures equal the CPU kernels', and the optimizer steps on
 * device buffers. The fp32 table uses exact-fp32 GEMMs (no TF32), so a GPU run can
 * be compared with the CPU kernels at fp32 tolerances; the bf16 table differs only
 * in its two matmul entries. */
#include "device.h"

#ifdef NEBULA_CUDA
#include <stdlib.h>

#include "cuda/cnn.h"
#include "cuda/device.h"
#include "cuda/matmul.h"
#include "optim_cuda.h"
#include "cuda/precision.h"
#include "cuda/transformer.h"
#include "device_impl.h"

static void cuda_zero(float *x, size_t n)
{
    int e = cuda_memset(x, 0, n * sizeof *x);
    if (e) cuda_error_record(e, "cudaMemsetAsync", __FILE__, __LINE__);
}

static void cuda_copy(float *dst, const float *src, size_t n)
{
    int e = cuda_memcpy_d2d(dst, src, n * sizeof *dst);
    if (e) cuda_error_record(e, "cudaMemcpyAsync", __FILE__, __LINE__);
}

/* cuDNN convolutions and Nebula's batch norm behind cnn_ops; activations NCHW. */
static void *gpu_conv_plan_new(const conv2d_shape *s, bool nchw_input, bool dinp, size_t *bytes)
{
    (void)nchw_input;  /* everything is NCHW on the GPU */
    cuda_conv2d_plan *p = calloc(1, sizeof *p);
    CHECK(p, "out of memory for a convolution plan");
    cuda_conv2d_plan_init(p, s, DNN_NCHW, DNN_NCHW, false, dinp);
    *bytes = p->ws_bytes;
    return p;
}
static void gpu_conv_plan_free(void *p) { if (p) { cuda_conv2d_plan_free(p); free(p); } }
static void gpu_conv_forward(void *p, float *out, const float *inp, const float *w, const float *b)
{
    cuda_conv2d_plan_forward(p, out, inp, w, b);
}
static void gpu_conv_backward(void *p, float *dinp, float *dw, float *db, const float *dout, const float *inp)
{
    cuda_conv2d_plan_backward(p, dinp, dw, db, dout, inp);
}
static void *gpu_bn_plan_new(int N, int C, int H, int W, float eps, bool relu, size_t *bytes)
{
    cuda_batchnorm_plan *p = calloc(1, sizeof *p);
    CHECK(p, "out of memory for a batch-norm plan");
    cuda_batchnorm_plan_init(p, N, C, H, W, DNN_NCHW, eps, relu);
    *bytes = p->bytes;
    return p;
}
static void gpu_bn_plan_free(void *p) { if (p) { cuda_batchnorm_plan_free(p); free(p); } }
static void gpu_bn_forward(void *p, float *out, const float *inp, const float *w, const float *b, float *rm, float *rv,
                           float momentum, bool training)
{
    cuda_batchnorm_plan_forward(p, out, inp, w, b, rm, rv, momentum, training);
}
static void gpu_bn_backward(void *p, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *b)
{
    cuda_batchnorm_plan_backward(p, dinp, dw, db, dout, inp, w, b);
}
static void gpu_layout_copy(float *dst, const float *src, int N, int C, int HW)
{
    int e = cuda_memcpy_d2d(dst, src, (size_t)N * (size_t)C * (size_t)HW * sizeof *dst);
    if (e) cuda_error_record(e, "cudaMemcpyAsync", __FILE__, __LINE__);
}

static void gpu_add_relu(float *out, const float *identity, size_t n)
{
    cuda_residual_forward(out, out, identity, n);
    cuda_relu_forward(out, out, n);
}

static const cnn_ops cnn_ops_cuda = {
    .act_bytes = sizeof(float),
    .conv_plan_new = gpu_conv_plan_new,
    .conv_plan_free = gpu_conv_plan_free,
    .conv_forward = gpu_conv_forward,
    .conv_backward = gpu_conv_backward,
    .bn_plan_new = gpu_bn_plan_new,
    .bn_plan_free = gpu_bn_plan_free,
    .bn_forward = gpu_bn_forward,
    .bn_backward = gpu_bn_backward,
    .to_nchw = gpu_layout_copy,
    .from_nchw = gpu_layout_copy,
    .maxpool2d_forward = cuda_maxpool2d_forward,
    .maxpool2d_backward = cuda_maxpool2d_backward,
    .avgpool_global_forward = cuda_avgpool_global_forward,
    .avgpool_global_backward = cuda_avgpool_global_backward,
    .add_relu = gpu_add_relu,
    .relu_backward = cuda_relu_backward,
    .residual_backward = cuda_residual_backward,
    .add_scalar = cuda_add_scalar,
};

#define NN_OPS_CUDA_COMMON                                   \
    .cnn = &cnn_ops_cuda,                                    \
    .zero = cuda_zero,                                       \
    .copy = cuda_copy,                                       \
    .embedding_forward = cuda_embedding_forward,             \
    .embedding_backward = cuda_embedding_backward,           \
    .layernorm_forward = cuda_layernorm_forward,             \
    .layernorm_backward = cuda_layernorm_backward,           \
    .attention_forward = cuda_attention_forward,             \
    .attention_backward = cuda_attention_backward,           \
    .residual_forward = cuda_residual_forward,               \
    .gelu_tanh_forward = cuda_gelu_tanh_forward,             \
    .gelu_tanh_backward = cuda_gelu_tanh_backward,           \
    .gelu_erf_forward = cuda_gelu_erf_forward,               \
    .gelu_erf_backward = cuda_gelu_erf_backward,             \
    .xent_forward = cuda_xent_forward,                       \
    .xent_backward = cuda_xent_backward

static const nn_ops nn_ops_cuda_fp32 = {
    .name = "cuda fp32",
    NN_OPS_CUDA_COMMON,
    .matmul_forward = cuda_matmul_forward,
    .matmul_backward = cuda_matmul_backward,
};

static const nn_ops nn_ops_cuda_bf16 = {
    .name = "cuda bf16",
    NN_OPS_CUDA_COMMON,
    .matmul_forward = cuda_matmul_forward_bf16,
    .matmul_backward = cuda_matmul_backward_bf16,
};

static const nn_ops nn_ops_cuda_fp16 = {
    .name = "cuda fp16",
    NN_OPS_CUDA_COMMON,
    .matmul_forward = cuda_matmul_forward_f16,
    .matmul_backward = cuda_matmul_backward_f16,
};

const nn_ops *device_cuda_ops(precision_kind p)
{
    return p == PRECISION_BF16 ? &nn_ops_cuda_bf16 : p == PRECISION_FP16 ? &nn_ops_cuda_fp16 : &nn_ops_cuda_fp32;
}

bool device_cuda_unscale(float *grads, size_t n, float inv_scale, int *flag_dev)
{
    int found = 0;
    if (cuda_memset(flag_dev, 0, sizeof *flag_dev) != 0) return true;
    cuda_unscale_check_finite(grads, n, inv_scale, flag_dev);
    if (cuda_memcpy_d2h(&found, flag_dev, sizeof found) != 0) return true;  /* also waits for the kernel */
    return found != 0;
}

status device_cuda_optim_init(void **plan, const param_table *pt)
{
    cuda_optim_range *r = malloc((size_t)pt->count * sizeof *r);
    cuda_optim_plan *p = calloc(1, sizeof *p);
    if (!r || !p) { free(r); free(p); return STATUS_NOMEM; }
    int n = cuda_optim_ranges_from_table(pt, NULL, r);
    int e = cuda_optim_plan_init(p, r, n);
    free(r);
    if (e) {
        log_error("cannot upload the optimizer plan to the GPU: %s", cuda_error_name(e));
        free(p);
        return STATUS_DEVICE;
    }
    *plan = p;
    return STATUS_OK;
}

void device_cuda_optim_free(void *plan)
{
    if (!plan) return;
    cuda_optim_plan_free(plan);
    free(plan);
}

void device_cuda_adamw_step(void *plan, param_buffers *w, const adamw_hparams *hp, double lr, long t)
{
    cuda_adamw_hparams h = cuda_adamw_hparams_from(hp);
    cuda_adamw_step(w->params, w->grads, w->m, w->v, plan, &h, lr, t);
}
#endif
