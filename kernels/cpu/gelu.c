/* gelu — see gelu.h. Derivatives, with u = k (x + a x^3), k = sqrt(2/pi), a = 0.044715,
 * s = sigmoid(2u) = 0.5 (1 + tanh u):
 *   tanh form:  gelu'(x) = s + 2 x s (1 - s) k (1 + 3 a x^2)
 *   exact form: gelu'(x) = Phi(x) + x phi(x),  Phi(x) = 0.5 erfc(-x / sqrt 2),
 *               phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
 * The float paths use vmath.h's vectorisable exp and erfc, and are built per vector
 * level (isa_variant.h). */
#include "gelu.h"

#include <math.h>

#include "isa_variant.h"
#include "vmath.h"

#define GELU_K        0.7978845608028654   /* sqrt(2 / pi) */
#define GELU_A        0.044715
#define GELU_RSQRT2   0.7071067811865476   /* 1 / sqrt(2) */
#define GELU_RSQRT2PI 0.3989422804014327   /* 1 / sqrt(2 pi) */

/* Below this many elements a call runs on one thread. */
#define GELU_PAR_MIN (1 << 15)

void ISA_FN(gelu_tanh_forward)(float *out, const float *inp, size_t N)
{
    const float k = (float)GELU_K, a = (float)GELU_A;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= GELU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i], u = k * (x + a * x * x * x);
        out[i] = x / (1.0f + vm_expf(-2.0f * u));
    }
}

void ISA_FN(gelu_tanh_backward)(float *dinp, const float *inp, const float *dout, size_t N)
{
    const float k = (float)GELU_K, a = (float)GELU_A;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= GELU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i], u = k * (x + a * x * x * x);
        float s = 1.0f / (1.0f + vm_expf(-2.0f * u));
        float g = s + 2.0f * x * s * (1.0f - s) * k * (1.0f + 3.0f * a * x * x);
        dinp[i] += dout[i] * g;
    }
}

void ISA_FN(gelu_erf_forward)(float *out, const float *inp, size_t N)
{
    const float r2 = (float)GELU_RSQRT2;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= GELU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * vm_erfcf(-x * r2);
    }
}

void ISA_FN(gelu_erf_backward)(float *dinp, const float *inp, const float *dout, size_t N)
{
    const float r2 = (float)GELU_RSQRT2, r2pi = (float)GELU_RSQRT2PI;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= GELU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float g = 0.5f * vm_erfcf(-x * r2) + x * r2pi * vm_expf(-0.5f * x * x);
        dinp[i] += dout[i] * g;
    }
}

#if ISA_ONCE
void gelu_tanh_forward(float *out, const float *inp, size_t N) { ISA_DISPATCH(gelu_tanh_forward, (out, inp, N)); }
void gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
    ISA_DISPATCH(gelu_tanh_backward, (dinp, inp, dout, N));
}
void gelu_erf_forward(float *out, const float *inp, size_t N) { ISA_DISPATCH(gelu_erf_forward, (out, inp, N)); }
void gelu_erf_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
    ISA_DISPATCH(gelu_erf_backward, (dinp, inp, dout, N));
}

void gelu_tanh_forward_ref(double *out, const double *inp, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_A * x * x * x)));
    }
}

void gelu_tanh_backward_ref(double *dinp, const double *inp, const double *dout, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        double x = inp[i], t = tanh(GELU_K * (x + GELU_A * x * x * x));
        double g = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
        dinp[i] += dout[i] * g;
    }
}

void gelu_erf_forward_ref(double *out, const double *inp, size_t N)
{
    for (size_t i = 0; i < N; i++) out[i] = 0.5 * inp[i] * (1.0 + erf(inp[i] * GELU_RSQRT2));
}

void gelu_erf_backward_ref(double *dinp, const double *inp, const double *dout, size_t N)
{
    for (size_t i = 0; i < N; i++) {
        double x = inp[i];
        double g = 0.5 * (1.0 + erf(x * GELU_RSQRT2)) + x * GELU_RSQRT2PI * exp(-0.5 * x * x);
        dinp[i] += dout[i] * g;
    }
}
#endif
