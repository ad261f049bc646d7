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
 * The one design decision: statistics are accumulated in double by two passes
 * (mean, then sum of squared deviations), one channel per thread. Two passes cost
 * one more read of the input but avoid the cancellation of E[x^2] - E[x]^2 on
 * activations with a large mean; double accumulators keep the float path within
 * a few ulps of the reference for any batch size, and the fixed per-channel order
 * makes results independent of the thread count. */
#ifndef NEBULA_KERNELS_BATCHNORM_H
#define NEBULA_KERNELS_BATCHNORM_H

/* training != 0: batch statistics, writes mean and rstd (the backward's saved
 * state) and updates running_mean/running_var unless they are NULL (as
 * track_running_stats=False). training == 0: uses running_mean/running_var (which
 * must be given); mean and rstd, if non-NULL, receive the statistics used.
 * weight/bias NULL means 1/0 (affine=False). */
void batchnorm_forward(float *out,          /* (N, C, HW) */
                       float *mean,         /* (C) saved batch mean */
                       float *rstd,         /* (C) saved 1/sqrt(var + eps) */
                       float *running_mean, /* (C) updated in training, read in eval */
                       float *running_var,  /* (C) updated in training, read in eval */
                       const float *inp,    /* (N, C, HW) */
                       const float *weight, /* (C) or NULL */
                       const float *bias,   /* (C) or NULL */
                       int N, int C, int HW, float eps, float momentum, int training);

/* Training-mode backward (through the batch statistics); ADDS into each non-NULL
 * gradient. mean and rstd are what the training forward saved.
 *   xhat = (x - mean)*rstd,  dbias += sum dy,  dweight += sum dy*xhat,
 *   dinp += weight*rstd*(dy - mean(dy) - xhat*mean(dy*xhat)). */
void batchnorm_backward(float *dinp,         /* (N, C, HW) or NULL */
                        float *dweight,      /* (C) or NULL */
                        float *dbias,        /* (C) or NULL */
                        const float *dout,   /* (N, C, HW) */
                        const float *inp,    /* (N, C, HW) */
                        const float *weight, /* (C) or NULL (= 1) */
                        const float *mean,   /* (C) */
                        const float *rstd,   /* (C) */
                        int N, int C, int HW);

/* The specification in double, plain loops, same contract. */
void batchnorm_forward_ref(double *out, double *mean, double *rstd, double *running_mean, double *running_var,
                           const double *inp, const double *weight, const double *bias, int N, int C, int HW,
                           double eps, double momentum, int training);
void batchnorm_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                            const double *weight, const double *mean, const double *rstd, int N, int C, int HW);

#endif
