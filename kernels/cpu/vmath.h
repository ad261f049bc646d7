/* vmath — exp and erfc for float loops that GCC vectorises.
 *
 * libm's expf/erfcf are opaque calls that GCC does not vectorise without
 * -ffast-math, so the kernels' hot loops (GELU, softmax rows of attention and the
 * cross-entropy) use these branch-free inline versions instead: selects, integer bit
 * operations and polynomials only. Both are a few ulp from the exact value
 * (validation/unit/test_kernels_dense.c checks them against libm's double). */
#ifndef NEBULA_KERNELS_VMATH_H
#define NEBULA_KERNELS_VMATH_H

#include <math.h>
#include <stdint.h>

/* exp(x) within ~2 ulp; exactly 0 below -87 (and for -inf), 6e37 (finite) above 87,
 * NaN for NaN. Cephes expf: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 split in
 * an exact 9-bit head and a tail), exp(r) by its Taylor polynomial to r^7 (truncation
 * < 0.35^8 / 8! = 5e-9), times 2^n built in the exponent bits. The clamp of |x| to 87
 * and the two special cases are integer operations on the bits (IEEE order for
 * x >= 0): float selects here let GCC fold exp(+-87) into constants on branches, and
 * under -ftrapping-math it then cannot if-convert the loop back into vector code. */
static inline float vm_expf(float x)
{
    union { float f; int32_t i; } u = { .f = x }, r;
    const int32_t in = u.i, lim = 0x42ae0000; /* 87.0f */
    int32_t mag = in & INT32_MAX, sign = in & INT32_MIN;
    int32_t nan = -(int32_t)(mag > 0x7f800000);                   /* all ones for NaN */
    int32_t under = -(int32_t)(sign != 0) & -(int32_t)(mag > lim); /* all ones below -87 */
    u.i = (mag < lim ? mag : lim) | sign;
    x = u.f;
    /* n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer (round to nearest) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float t = x - n * 0.693359375f;
    t = t - n * -2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * t + 1.0f / 720.0f;
    p = p * t + 1.0f / 120.0f;
    p = p * t + 1.0f / 24.0f;
    p = p * t + 1.0f / 6.0f;
    p = p * t + 0.5f;
    p = p * t + 1.0f;
    p = p * t + 1.0f;
    union { int32_t i; float f; } scale = { .i = ((int32_t)n + 127) << 23 };
    r.f = p * scale.f;
    r.i = (r.i & ~under & ~nan) | (in & nan);
    return r.f;
}

/* erfc(z) for float with a relative error of a few ulp for all z (where the result
 * is above FLT_MIN): the Chebyshev fit of Press et al., Numerical Recipes in C,
 * 2nd ed., section 6.2 (fractional error < 1.2e-7 in exact arithmetic), in the form
 * erfc(|z|) = t exp(-z^2 + P(t)), t = 1 / (1 + |z|/2), and erfc(z) = 2 - erfc(-z). */
static inline float vm_erfcf(float z)
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
    float e = t * vm_expf(p - az * az);
    /* z >= 0: 0 + 1 * e (exact); z < 0: 2 - e. Selecting constants, not the
     * results, keeps the loop branch-free: GCC will not hoist 2 - e out of a
     * branch under -ftrapping-math (its default). */
    float off = z < 0.0f ? 2.0f : 0.0f, sgn = z < 0.0f ? -1.0f : 1.0f;
    return off + sgn * e;
}

#endif
