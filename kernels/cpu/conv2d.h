/* conv2d — 2-D convolution (cross-correlation, as torch.nn.Conv2d) on NCHW tensors:
 * groups = 1, dilation 1, zero padding, rectangular kernels, one stride for both axes.
 *
 *   out[n][oc][oh][ow] = bias[oc] + sum_{c,kh,kw} weight[oc][c][kh][kw]
 *                        * inp[n][c][oh*stride - pad + kh][ow*stride - pad + kw]
 *
 * (out-of-range input positions read as 0; OH = (H + 2*pad - KH) / stride + 1, and
 * likewise OW — the caller passes OH and OW, and they must agree with that.)
 *
 * The one design decision: im2col + one SGEMM per image, with a column buffer
 * sized for ONE image that the caller allocates once (conv2d_workspace_floats) and
 * that is reused for every image of the batch and by forward and backward. Memory
 * is C*KH*KW*OH*OW floats instead of N times that; each GEMM (OC x OH*OW x C*KH*KW)
 * is still large enough for OpenBLAS to run near its peak. A 1x1 stride-1 pad-0
 * convolution is a plain GEMM on the input (its column matrix IS the image) and
 * never touches the workspace.
 *
 * Determinism: im2col, col2im and the bias reduction are split over channels, each
 * written by one thread in a fixed order; dweight accumulates image by image
 * through GEMM's beta = 1. Results do not depend on the OpenMP thread count (GEMMs
 * are OpenBLAS's; its own threading partitions outputs, not the reduction). */
#ifndef NEBULA_KERNELS_CONV2D_H
#define NEBULA_KERNELS_CONV2D_H

#include <stddef.h>

/* Floats of the column buffer for one image: C*KH*KW * OH*OW. */
size_t conv2d_workspace_floats(int C, int KH, int KW, int OH, int OW);

/* Forward. `work` has conv2d_workspace_floats() floats (contents ignored and
 * clobbered; may be NULL for a 1x1 stride-1 pad-0 convolution). bias may be NULL. */
void conv2d_forward(float *out,          /* (N, OC, OH, OW) */
                    const float *inp,    /* (N, C, H, W) */
                    const float *weight, /* (OC, C, KH, KW) */
                    const float *bias,   /* (OC) or NULL */
                    float *work,         /* (C*KH*KW, OH*OW) scratch */
                    int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, int OH, int OW);

/* Backward: ADDS into every non-NULL gradient (NULL ones are skipped, and so is
 * their work). dinp goes through GEMM into columns, then col2im. */
void conv2d_backward(float *dinp,          /* (N, C, H, W) or NULL */
                     float *dweight,       /* (OC, C, KH, KW) or NULL */
                     float *dbias,         /* (OC) or NULL */
                     const float *dout,    /* (N, OC, OH, OW) */
                     const float *inp,     /* (N, C, H, W) */
                     const float *weight,  /* (OC, C, KH, KW) */
                     float *work,          /* (C*KH*KW, OH*OW) scratch, as in forward */
                     int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, int OH, int OW);

/* The specification: direct loops in double over the formula above, no workspace.
 * Backward adds into each non-NULL gradient, like the fast path. */
void conv2d_forward_ref(double *out, const double *inp, const double *weight, const double *bias,
                        int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, int OH, int OW);
void conv2d_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                         const double *weight, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                         int pad, int OH, int OW);

#endif
