/* precision — conversions and the loss scaler (see precision.h).
 *
 * The conversions work on the integer bits, so they are the same on every host
 * and do not depend on the FPU's rounding mode or on F16C being present. */
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

/* ---- precision kinds ------------------------------------------------------------ */

static const char *const precision_names[] = { "fp32", "bf16", "fp16" };

const char *precision_kind_name(precision_kind k)
{
    return (unsigned)k <= PRECISION_FP16 ? precision_names[k] : "unknown";
}

bool precision_kind_parse(const char *s, precision_kind *out, const char **why)
{
    for (int k = 0; k <= PRECISION_FP16; k++)
        if (s && strcmp(s, precision_names[k]) == 0) {
            *out = (precision_kind)k;
            if (why) *why = NULL;
            return true;
        }
    if (why) *why = "unknown precision: use fp32, bf16 or fp16";
    return false;
}

int precision_kind_bytes(precision_kind k)
{
    return k == PRECISION_FP32 ? 4 : 2;
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

/* ---- loss scaler ------------------------------------------------------------------ */

void loss_scaler_init(loss_scaler *ls)
{
    *ls = (loss_scaler){
        .scale = 65536.0f,
        .growth_factor = 2.0,
        .backoff_factor = 0.5,
        .growth_interval = 2000,
        .growth_tracker = 0,
        .min_scale = 1.0f,
        .max_scale = 16777216.0f,
        .skipped = 0,
    };
}

static float clamp_scale(const loss_scaler *ls, float s)
{
    return s < ls->min_scale ? ls->min_scale : s > ls->max_scale ? ls->max_scale : s;
}

bool loss_scaler_update(loss_scaler *ls, bool found_inf)
{
    if (found_inf) {
        ls->scale = clamp_scale(ls, (float)((double)ls->scale * ls->backoff_factor));
        ls->growth_tracker = 0;
        ls->skipped++;
        return true;
    }
    int successful = ls->growth_tracker + 1;
    if (successful >= ls->growth_interval) {
        float grown = (float)((double)ls->scale * ls->growth_factor);
        if (isfinite(grown)) ls->scale = clamp_scale(ls, grown);
        ls->growth_tracker = 0;
    } else {
        ls->growth_tracker = successful;
    }
    return false;
}

float loss_scaler_inv_scale(const loss_scaler *ls)
{
    return (float)(1.0 / (double)ls->scale);
}
