/* precision — the CPU casts and unscale-and-check (see precision.h).
 *
 * The casts work on the integer bits, so they are the same on every host and do not
 * depend on the FPU's rounding mode or on F16C being present; the array forms are
 * plain loops over them. */
#include "precision.h"

#include <math.h>
#include <string.h>

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- bf16: the top 16 bits of an fp32 ------------------------------------------- */

uint16_t bf16_from_f32(float x)
{
    uint32_t u = bits_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);  /* NaN: quiet, sign kept */
    /* Adding 0x7fff plus the kept lsb carries into bit 16 exactly when the dropped half
     * is above one half, or equal to it with an odd kept part (RNE); a carry out of the
     * mantissa bumps the exponent, and out of the largest finite value gives inf. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f32_from_bf16(uint16_t h)
{
    return float_of((uint32_t)h << 16);
}

/* ---- fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits ------------------------ */

uint16_t f16_from_f32(float x)
{
    uint32_t u = bits_of(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  /* NaN: quiet, top payload */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* >= 65520 = max + half an ulp: inf */
    if (a >= 0x38800000u) {
        /* Normal result (|x| >= 2^-14): rebias the exponent by 127 - 15 = 112 and round
         * the 13 dropped mantissa bits to nearest even; a carry moves into the exponent. */
        uint32_t r = a - 0x38000000u;
        r += 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) return sign;  /* <= 2^-25, half the smallest subnormal: ties to 0 */
    /* Subnormal result: |x| = mant * 2^(e - 150) and the fp16 subnormal step is 2^-24,
     * so the result is mant >> (126 - e), rounded to nearest even; e in [102, 112], the
     * shift in [14, 24]. A round up to 0x400 is the smallest normal, correctly encoded. */
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

float f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return float_of(sign | (m ? 0x7fc00000u | (m << 13) : 0x7f800000u));
    if (e == 0) {
        /* Subnormal: m * 2^-24, exact in fp32 (m < 2^10, the product is a normal fp32). */
        float f = (float)m * 0x1p-24f;
        return float_of(sign | bits_of(f));
    }
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- arrays --------------------------------------------------------------------- */

/* Below this many values one thread converts: a parallel region costs microseconds. */
#define CAST_PAR_MIN (1 << 16)

/* Through bf16_from_f32_vec, so the loop vectorises (the bf16 matmul rounds every
 * operand through it). */
void f32_to_bf16(const float *x, uint16_t *y, size_t n)
{
    #pragma omp parallel for simd schedule(static) if (n >= CAST_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = bf16_from_f32_vec(x[i]);
}

void bf16_to_f32(const uint16_t *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = f32_from_bf16(x[i]);
}

void f32_to_f16(const float *x, uint16_t *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = f16_from_f32(x[i]);
}

void f16_to_f32(const uint16_t *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = f32_from_f16(x[i]);
}

void unscale_check_finite(float *g, size_t n, float inv_scale, int *found_inf)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= !isfinite(g[i]);
        g[i] *= inv_scale;
    }
    if (bad) *found_inf = 1;
}
