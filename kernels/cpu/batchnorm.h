/* batchnorm — 2-D batch normalisation (torch.nn.BatchNorm2d) on NCHW tensors, with
 * statistics per channel over the N*HW values of that channel (HW = H*W).
 *
 *   training: mean_c, var_c = biased batch variance (divide by M = N*HW)
 *             out = (x - mean_c) * rstd_c * weight_c + bias_c,  rstd_c = 1/sqrt(var_c + eps)
 *             running_mean_c = (1 - momentum)*running_mean_c + momentum*mean_c
 *             running_var_c  = (1 - momentum)*running_var_c  + momentum*var_c*M/(M-1)
 *   eval:     the same normalisation with running_mean / running_var in place of
 *             the batch statistics; running stats are read, never written.
 *
 * As in PyTorch, normalisation uses the biased variance while running_var
 * tracks the UNBIASED one. Training needs M >= 2 (PyTorch refuses M = 1).
 *
 * The one design decision: the fast path is a plan over oneDNN's batch
 * normalisation, in the layout of the convolutions around it (dnn.h), with the
 * ReLU that follows most ResNet batch norms fused into it (one pass over the
 * activations instead of two, forward and backward; the backward reads oneDNN's
 * ReLU mask instead of the output). oneDNN reports the biased batch variance;
 * the plan turns it into the unbiased running update itself, as PyTorch does.
 * oneDNN accumulates the statistics in float, so the fast path's mean and
 * variance carry float rounding over the M values of a channel; the tests bound
 * it accordingly. The reference below is the plain two-pass specification in
 * double, on NCHW.
 *
 * bf16 plans (batchnorm_plan_init_bf16, the CNN's bf16 activations, conv2d.h): inp,
 * out, dout and dinp are bf16 arrays (uint16_t); oneDNN reads them into fp32, keeps
 * the statistics, weight, bias and their gradients in fp32 and rounds out and dinp
 * once, as PyTorch's batch norm does on bf16 tensors under CPU autocast. */
#ifndef NEBULA_KERNELS_BATCHNORM_H
#define NEBULA_KERNELS_BATCHNORM_H

#include <stdbool.h>
#include <stddef.h>

#include "dnn.h"

typedef struct batchnorm_plan {
    int N, C, H, W;
    dnn_layout layout;          /* of input and output */
    bool relu;                  /* a ReLU fused after the normalisation */
    float eps;
    dnnl_primitive_t fwd_train, fwd_eval, bwd;
    dnnl_memory_t x, y, dx, scale, shift, mean_m, var_m, dscale, dshift, ws_m;
    float *mean, *var;          /* (C) the last training forward's batch mean and biased variance */
    float *dscale_tmp, *dshift_tmp; /* (C) */
    void *ws;                   /* ReLU mask of the last training forward (oneDNN's format) */
    size_t bytes;               /* memory the plan owns */
} batchnorm_plan;

/* Primitives for (N, C, H, W) in `layout`, epsilon `eps`, with a fused ReLU
 * (out = max(bn(x), 0)) or not. */
void batchnorm_plan_init(batchnorm_plan *p, int N, int C, int H, int W, dnn_layout layout, float eps, bool relu);
/* The same with bf16 activations (see above). */
void batchnorm_plan_init_bf16(batchnorm_plan *p, int N, int C, int H, int W, dnn_layout layout, float eps, bool relu);
void batchnorm_plan_free(batchnorm_plan *p);

/* training: normalises with the batch statistics (kept in p->mean, p->var for
 * backward) and moves running_mean / running_var toward them unless NULL
 * (track_running_stats=False); eval: normalises with running_mean / running_var,
 * which are read only. weight and bias (C) are required (affine=True). out may
 * equal inp only in eval. Activations float, or bf16 in a bf16 plan. */
void batchnorm_plan_forward(batchnorm_plan *p, void *out, const void *inp, const float *weight, const float *bias,
                            float *running_mean, float *running_var, float momentum, bool training);
/* Training-mode backward of the last training forward (through the fused ReLU when
 * the plan has one: dout is the gradient of the ReLU's output). dinp WRITTEN;
 * dweight and dbias ADDED; NULL skips dinp only when the others are wanted. */
void batchnorm_plan_backward(batchnorm_plan *p, void *dinp, float *dweight, float *dbias, const void *dout,
                             const void *inp, const float *weight, const float *bias);

/* The specification in double, plain loops on NCHW (N, C, HW). training != 0:
 * batch statistics into mean and rstd (1/sqrt(var + eps)) and running stats
 * updated unless NULL; 0: running stats used. Backward ADDS into every non-NULL
 * gradient; weight NULL means 1, bias NULL means 0. */
void batchnorm_forward_ref(double *out, double *mean, double *rstd, double *running_mean, double *running_var,
                           const double *inp, const double *weight, const double *bias, int N, int C, int HW,
                           double eps, double momentum, int training);
void batchnorm_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                            const double *weight, const double *mean, const double *rstd, int N, int C, int HW);

#endif
