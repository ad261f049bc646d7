/* device_cuda — the kernel tables of a CUDA device (device.h): the kernels/cuda
 * variants, whose signatures equal the CPU kernels', and the optimizer steps on
 * device buffers. The fp32 table uses exact-fp32 GEMMs (no TF32), so a GPU run can
 * be compared with the CPU kernels at fp32 tolerances; the bf16 table differs only
 * in its two matmul entries. */
#include "device.h"

#ifdef NEBULA_CUDA
#include <stdlib.h>

#include "cuda/device.h"
#include "cuda/matmul.h"
#include "cuda/optim.h"
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

#define NN_OPS_CUDA_COMMON                                   \
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
