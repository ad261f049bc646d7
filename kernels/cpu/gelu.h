/* gelu — the Gaussian error linear unit (Hendrycks, Gimpel 2016), elementwise:
 *   tanh form (GPT-2; PyTorch approximate='tanh'):
 *       gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *   exact form (BERT; PyTorch's default):
 *       gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))
 *
 * The one design decision: the float paths evaluate the same functions in forms
 * without cancellation, 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) and
 * 1 + erf(z) = erfc(-z), with inline branch-free exp and erfc (vmath.h) so the
 * loops vectorise. For x < 0 the textbook forms subtract two numbers near 1 and
 * lose relative precision in the tail (x = -4: ~3 of 7 digits left); these keep
 * ~10 eps for |x| <= 3, growing like |2u| eps further left (the conditioning of
 * exp: ~100 eps at x = -9; the test allows 64 eps for |x| <= 5). The _ref
 * functions are the textbook forms in double, the specification.
 *
 * Backward ADDS: dinp += dout * gelu'(inp). */
#ifndef NEBULA_KERNELS_GELU_H
#define NEBULA_KERNELS_GELU_H

#include <stddef.h>

#include "isa_variant.h"

void gelu_tanh_forward(float *out,       /* (N) */
                       const float *inp, /* (N) */
                       size_t N);
void gelu_tanh_backward(float *dinp,       /* (N) */
                        const float *inp,  /* (N) */
                        const float *dout, /* (N) */
                        size_t N);
void gelu_erf_forward(float *out,       /* (N) */
                      const float *inp, /* (N) */
                      size_t N);
void gelu_erf_backward(float *dinp,       /* (N) */
                       const float *inp,  /* (N) */
                       const float *dout, /* (N) */
                       size_t N);

/* The builds per vector level that the calls above choose from (isa_variant.h);
 * the tests compare them bit for bit. */
ISA_VARIANTS(void, gelu_tanh_forward, (float *out, const float *inp, size_t N));
ISA_VARIANTS(void, gelu_tanh_backward, (float *dinp, const float *inp, const float *dout, size_t N));
ISA_VARIANTS(void, gelu_erf_forward, (float *out, const float *inp, size_t N));
ISA_VARIANTS(void, gelu_erf_backward, (float *dinp, const float *inp, const float *dout, size_t N));

/* The specification, in double. */
void gelu_tanh_forward_ref(double *out, const double *inp, size_t N);                    /* (N) each */
void gelu_tanh_backward_ref(double *dinp, const double *inp, const double *dout, size_t N); /* (N) each */
void gelu_erf_forward_ref(double *out, const double *inp, size_t N);                     /* (N) each */
void gelu_erf_backward_ref(double *dinp, const double *inp, const double *dout, size_t N);  /* (N) each */

#endif
