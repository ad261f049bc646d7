/* pool — max pooling (torch.nn.MaxPool2d: square window K, one stride, implicit
 * -inf padding, dilation 1, floor mode) and global average pooling
 * (nn.AdaptiveAvgPool2d(1), ResNet's head) on NCHW tensors.
 *
 * The one design decision: max pooling records, per output, the index of the
 * winning input inside its (H, W) plane (as PyTorch's `indices`), so backward is
 * a scatter-add that never re-reads the input. The scan follows PyTorch exactly:
 * rows then columns of the window clipped to the image, `v > best || isnan(v)`
 * starting from -inf at the window's first in-image position, so ties go to the
 * first maximum in scan order and NaN propagates. OH = (H + 2*pad - K)/stride + 1
 * and pad <= K/2 (PyTorch's rule: every window holds at least one input). */
#ifndef NEBULA_KERNELS_POOL_H
#define NEBULA_KERNELS_POOL_H

#include <stdint.h>

void maxpool2d_forward(float *out,         /* (N, C, OH, OW) */
                       int32_t *argmax,    /* (N, C, OH, OW) index into the input's (H, W) plane */
                       const float *inp,   /* (N, C, H, W) */
                       int N, int C, int H, int W, int K, int stride, int pad, int OH, int OW);

/* dinp[n][c][argmax] += dout; ADDS. Windows overlap when stride < K; each plane is
 * summed by one thread in output order, so the result is deterministic. */
void maxpool2d_backward(float *dinp,          /* (N, C, H, W) */
                        const float *dout,    /* (N, C, OH, OW) */
                        const int32_t *argmax,/* (N, C, OH, OW) from the forward */
                        int N, int C, int H, int W, int K, int stride, int pad, int OH, int OW);

/* out[n][c] = mean of the HW values of plane (n, c). */
void avgpool_global_forward(float *out,       /* (N, C) i.e. (N, C, 1, 1) */
                            const float *inp, /* (N, C, HW) */
                            int N, int C, int HW);

/* dinp[n][c][i] += dout[n][c] / HW; ADDS. */
void avgpool_global_backward(float *dinp,       /* (N, C, HW) */
                             const float *dout, /* (N, C) */
                             int N, int C, int HW);

/* The specification in double, plain loops, same contracts (argmax included). */
void maxpool2d_forward_ref(double *out, int32_t *argmax, const double *inp, int N, int C, int H, int W, int K,
                           int stride, int pad, int OH, int OW);
void maxpool2d_backward_ref(double *dinp, const double *dout, const int32_t *argmax, int N, int C, int H, int W,
                            int K, int stride, int pad, int OH, int OW);
void avgpool_global_forward_ref(double *out, const double *inp, int N, int C, int HW);
void avgpool_global_backward_ref(double *dinp, const double *dout, int N, int C, int HW);

#endif
