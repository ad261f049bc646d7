/* gelu — see gelu.h. Derivatives, with u = k (x + a x^3), k = sqrt(2/pi), a = 0.044715,
 * s = sigmoid(2u) = 0.5 (1 + tanh u):
 *   tanh form:  gelu'(x) = s + 2 x s (1 - s) k (1 + 3 a x^2)
 *   exact form: gelu'(x) = Phi(x) + x phi(x),  Phi(x) = 0.5 erfc(-x / sqrt 2),
 *               phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
 * libm's expf/erfcf are opaque calls that GCC does not vectorise without
 * -ffast-math, so the float paths use the branch-free inline versions below
 * (selects, integer bit ops and polynomials only), which it does. */
#include "gelu.h"

#include <math.h>
#include <stdint.h>

#define GELU_K        0.7978845608028654   /* sqrt(2 / pi) */
#define GELU_A        0.044715
#define GELU_RSQRT2   0.7071067811865476   /* 1 / sqrt(2) */
#define GELU_RSQRT2PI 0.3989422804014327   /* 1 / sqrt(2 pi) */

/* Below this many elements a call runs on one thread. */
#define GELU_PAR_MIN (1 << 15)

/* exp(x) for float, within ~2 ulp for |x| <= 87; |x| is clamped to 87, so the
 * result is always finite and nonzero (exp(-87) = 1.6e-38 > FLT_MIN, exp(87) =
 * 6e37); the callers only need "tiny" and "huge" out there, and a NaN x becomes
 * +-87 (every caller multiplies by x, which carries the NaN on).
 * Cephes expf: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 split in an exact
 * 9-bit head and a tail), exp(r) by its Taylor polynomial to r^7 (truncation
 * < 0.35^8 / 8! = 5e-9), times 2^n built in the exponent bits.
 * The clamp is an integer min on the magnitude's bits (IEEE order for x >= 0):
 * a float select here lets GCC fold exp(+-87) into constants on branches, and
 * under -ftrapping-math it then cannot if-convert the loop back into vector code. */
static inline float gelu_expf(float x)
{
    union { float f; int32_t i; } u = { .f = x }, lim = { .f = 87.0f };
    int32_t mag = u.i & INT32_MAX, sign = u.i & INT32_MIN;
    u.i = (mag < lim.i ? mag : lim.i) | sign;
    x = u.f;
    /* n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer (round to nearest) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { int32_t i; float f; } scale = { .i = ((int32_t)n + 127) << 23 };
    return p * scale.f;
}

/* erfc(z) for float with a relative error of a few ulp for all z (where the result
 * is above FLT_MIN): the Chebyshev fit of Press et al., Numerical Recipes in C,
 * 2nd ed., section 6.2 (fractional error < 1.2e-7 in exact arithmetic), in the form
 * erfc(|z|) = t exp(-z^2 + P(t)), t = 1 / (1 + |z|/2), and erfc(z) = 2 - erfc(-z). */
static inline float gelu_erfcf(float z)
{
    float az = fabsf(z);
    float t = 1.0f / (1.0f + 0.5f * az);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float e = t * gelu_expf(p - az * az);
    /* z >= 0: 0 + 1 * e (exact); z < 0: 2 - e. Selecting constants, not the
     * results, keeps the loop branch-free: GCC will not hoist 2 - e out of a
     * branch under -ftrapping-math (its default). */
    float off = z < 0.0f ? 2.0f : 0.0f, sgn = z < 0.0f ? -1.0f : 1.0f;
    return off + sgn * e;
}

void gelu_tanh_forward(float *out, const float *inp, size_t N)
{
    const float k = (float)GELU_K, a = (float)GELU_A;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= GELU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i], u = k * (x + a * x * x * x);
        out[i] = x / (1.0f + gelu_expf(-2.0f * u));
    }
}

void gelu_tanh_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
    const float k = (float)GELU_K, a = (float)GELU_A;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= GELU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i], u = k * (x + a * x * x * x);
        float s = 1.0f / (1.0f + gelu_expf(-2.0f * u));
        float g = s + 2.0f * x * s * (1.0f - s) * k * (1.0f + 3.0f * a * x * x);
        dinp[i] += dout[i] * g;
    }
}

void gelu_erf_forward(float *out, const float *inp, size_t N)
{
    const float r2 = (float)GELU_RSQRT2;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= GELU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * gelu_erfcf(-x * r2);
    }
}

void gelu_erf_backward(float *dinp, const float *inp, const float *dout, size_t N)
{
    const float r2 = (float)GELU_RSQRT2, r2pi = (float)GELU_RSQRT2PI;
    #pragma omp parallel for simd schedule(static) if (parallel : N >= GELU_PAR_MIN)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float g = 0.5f * gelu_erfcf(-x * r2) + x * r2pi * gelu_expf(-0.5f * x * x);
        dinp[i] += dout[i] * g;
    }
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
