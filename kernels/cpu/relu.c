/* relu — see relu.h. One compare-and-select per element; comparisons with NaN are
 * false, so `x < 0 ? 0 : x` passes NaN (and -0) through and `y <= 0 ? 0 : g` passes
 * the gradient of a NaN. In place is safe because element i is read before it is
 * written and no other element is touched. */
#include "relu.h"

/* Below this many elements a call stays on one thread: an elementwise pass over
 * 256 KiB is about as long as waking a thread team. */
#define RELU_OMP_MIN ((size_t)1 << 16)

void relu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= RELU_OMP_MIN)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] < 0.0f ? 0.0f : inp[i];
}

void add_relu_forward(float *out, const float *identity, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= RELU_OMP_MIN)
    for (size_t i = 0; i < n; i++) {
        float s = out[i] + identity[i];
        out[i] = s < 0.0f ? 0.0f : s;
    }
}

void relu_backward(float *dinp, const float *out_or_inp, const float *dout, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= RELU_OMP_MIN)
    for (size_t i = 0; i < n; i++) dinp[i] += out_or_inp[i] <= 0.0f ? 0.0f : dout[i];
}

void relu_forward_ref(double *out, const double *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = inp[i] < 0.0 ? 0.0 : inp[i];
}

void relu_backward_ref(double *dinp, const double *out_or_inp, const double *dout, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(out_or_inp[i] <= 0.0)) dinp[i] += dout[i];
}
