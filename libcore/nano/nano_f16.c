/* nano_f16 — IEEE binary16 <-> binary32 conversions (weights stored as f16 are widened
 * at load) and the int8 row quantisation of weights.
 *
 * The one design decision: integer bit manipulation only, no F16C/FP16 instructions, so
 * every platform rounds the same way (nearest, ties to even, subnormals kept, NaN stays a
 * quiet NaN with the top payload bits); the conversions run at load time, not per run. */
#include <math.h>
#include <string.h>

#include "nano_kern.h"

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float nano_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m · 2^-24, exact in float */
        float v = (float)m * 0x1p-24f;
        return u2f(f2u(v) | sign);
    }
    if (e == 31) return u2f(sign | 0x7f800000u | (m << 13)); /* inf, NaN (payload kept) */
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t nano_f32_to_f16(float f)
{
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, top 9 payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x1ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (units of 2^-24) or zero */
        if (ax <= 0x33000000u) return sign; /* <= 2^-25: the tie at 2^-25 goes to even 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u; /* value m · 2^(e-150) */
        uint32_t s = 126 - e;                                      /* 14 .. 24 */
        uint32_t r = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
        if (rem > half || (rem == half && (r & 1))) r++; /* may carry into 0x400: 2^-14 */
        return (uint16_t)(sign | r);
    }
    uint32_t h = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu; /* rebias 127 -> 15 */
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;       /* carry may bump the exponent */
    return (uint16_t)(sign | h);
}

void nano_f16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = nano_f16_to_f32(src[i]);
}

void nano_quantize_rows(const float *W, int N, int K, int8_t *q, float *scale)
{
    for (int n = 0; n < N; n++) {
        const float *w = W + (size_t)n * K;
        float mx = 0.0f;
        for (int k = 0; k < K; k++) mx = fmaxf(mx, fabsf(w[k]));
        float s = mx > 0.0f ? mx / 127.0f : 1.0f;
        scale[n] = s;
        for (int k = 0; k < K; k++) {
            float v = nearbyintf(w[k] / s); /* ties to even, as ONNX QuantizeLinear */
            if (!(v > -127.0f)) v = -127.0f; /* NaN -> -127 rather than undefined */
            if (v > 127.0f) v = 127.0f;
            q[(size_t)n * K + k] = (int8_t)v;
        }
    }
}
