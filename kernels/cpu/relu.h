/* relu — rectified linear unit, elementwise on any layout: out = max(x, 0).
 *
 * The one design decision: backward takes either the forward's output or its
 * input (y > 0 exactly when x > 0), so the forward may run in place (out == inp,
 * as nn.ReLU(inplace=True)) and the input need not be kept. Edge values follow
 * PyTorch 1.13 bit for bit: the derivative at exactly 0 is 0, NaN propagates
 * forward and passes its gradient backward (mask is !(y <= 0), as
 * threshold_backward), and -0 stays -0. */
#ifndef NEBULA_KERNELS_RELU_H
#define NEBULA_KERNELS_RELU_H

#include <stddef.h>

/* out[i] = inp[i] < 0 ? 0 : inp[i] (NaN and -0 pass through). out == inp is
 * allowed (in place); any other overlap is not. */
void relu_forward(float *out,       /* (n) */
                  const float *inp, /* (n), may equal out */
                  size_t n);

/* out = relu(out + identity): residual_forward then relu_forward in one pass, the
 * same values. */
void add_relu_forward(float *out, const float *identity, size_t n); /* (n) each */

/* dinp[i] += out_or_inp[i] <= 0 ? 0 : dout[i]; ADDS. */
void relu_backward(float *dinp,             /* (n) */
                   const float *out_or_inp, /* (n) the forward's output, or its input */
                   const float *dout,       /* (n) */
                   size_t n);

/* The specification in double, plain loops, same contract. */
void relu_forward_ref(double *out, const double *inp, size_t n);
void relu_backward_ref(double *dinp, const double *out_or_inp, const double *dout, size_t n);

#endif
