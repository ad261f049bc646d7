/* residual — the skip connection out = a + b and its backward, elementwise.
 *
 * The one design decision: backward adds dout into both branches in one pass
 * (da += dout, db += dout), so the residual stream's gradient needs no copy and
 * either branch may be NULL (skipped) when its producer takes no gradient. */
#ifndef NEBULA_KERNELS_RESIDUAL_H
#define NEBULA_KERNELS_RESIDUAL_H

#include <stddef.h>

void residual_forward(float *out,     /* (N) */
                      const float *a, /* (N) */
                      const float *b, /* (N) */
                      size_t N);
/* da += dout, db += dout; da or db may be NULL. */
void residual_backward(float *da,         /* (N) or NULL */
                       float *db,         /* (N) or NULL */
                       const float *dout, /* (N) */
                       size_t N);

/* The specification, in double. */
void residual_forward_ref(double *out, const double *a, const double *b, size_t N); /* (N) each */
void residual_backward_ref(double *da, double *db, const double *dout, size_t N);   /* (N) each */

#endif
