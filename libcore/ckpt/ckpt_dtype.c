/* ckpt_dtype — the element types a checkpoint tensor may be stored in (format version 2):
 * float32 (every training save), and bfloat16 or float16 (export copies, ckpt_export in
 * tool/). Readers widen the 16-bit types to float32 on load, which is exact.
 *
 * The one design decision: the 16-bit types are HDF5 floating-point types (IEEE half,
 * and bfloat16 as a float of 8 exponent and 7 mantissa bits), so h5dump prints values
 * and HDF5 can convert them, but Nebula never lets HDF5 convert: it reads and writes the
 * stored bits and rounds float32 to 16 bits itself (to nearest, ties to even), so the
 * CRC-32 of the bytes as stored is computed over exactly what is written. */
#include "ckpt_impl.h"

#include <string.h>

static const char *const names[] = { [CKPT_DTYPE_F32] = "float32", [CKPT_DTYPE_BF16] = "bfloat16",
                                     [CKPT_DTYPE_F16] = "float16" };

const char *ckpt_dtype_name(ckpt_dtype t)
{
    return names[t];
}

bool ckpt_dtype_parse(const char *s, ckpt_dtype *out)
{
    static const struct { const char *name; ckpt_dtype t; } alias[] = {
        { "fp32", CKPT_DTYPE_F32 }, { "float32", CKPT_DTYPE_F32 }, { "bf16", CKPT_DTYPE_BF16 },
        { "bfloat16", CKPT_DTYPE_BF16 }, { "fp16", CKPT_DTYPE_F16 }, { "float16", CKPT_DTYPE_F16 },
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(s, alias[i].name)) return *out = alias[i].t, true;
    return false;
}

size_t ckpt_dtype_size(ckpt_dtype t)
{
    return t == CKPT_DTYPE_F32 ? 4 : 2;
}

hid_t ckpt_dtype_h5(ckpt_dtype t)
{
    hid_t h = H5Tcopy(H5T_IEEE_F32LE);
    H5_CHECK(h);
    if (t == CKPT_DTYPE_F32) return h;
    /* sign bit 15; exponent at 10 (5 bits, bias 15) or at 7 (8 bits, bias 127); mantissa at 0 */
    bool bf = t == CKPT_DTYPE_BF16;
    H5_CHECK(H5Tset_fields(h, 15, bf ? 7 : 10, bf ? 8 : 5, 0, bf ? 7 : 10));
    H5_CHECK(H5Tset_offset(h, 0));
    H5_CHECK(H5Tset_precision(h, 16));
    H5_CHECK(H5Tset_size(h, 2));
    H5_CHECK(H5Tset_ebias(h, bf ? 127 : 15));
    return h;
}

int ckpt_dtype_of(hid_t type)
{
    if (H5Tget_class(type) != H5T_FLOAT) return -1;
    size_t size = H5Tget_size(type), spos, epos, esize, mpos, msize;
    if (size == 4) return CKPT_DTYPE_F32;
    if (size != 2 || H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0 || spos != 15 || mpos != 0)
        return -1;
    if (epos == 7 && esize == 8 && msize == 7) return CKPT_DTYPE_BF16;
    if (epos == 10 && esize == 5 && msize == 10) return CKPT_DTYPE_F16;
    return -1;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  /* NaN stays a (quiet) NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);                  /* to nearest, ties to even */
}

static uint16_t to_f16(float f)
{
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);      /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);     /* rounds past 65504: infinity */
    if (a < 0x38800000u) {                                       /* below 2^-14: a subnormal half */
        float r = bits_f32(a) * 16777216.0f;                     /* exact: in units of 2^-24 */
        uint32_t q = (uint32_t)r;
        float rem = r - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t m = a + 0xfffu + ((a >> 13) & 1);                   /* to nearest, ties to even */
    return (uint16_t)(sign | ((m - 0x38000000u) >> 13));
}

static float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) return bits_f32(sign) + (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;  /* m x 2^-24 */
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

void ckpt_dtype_narrow(ckpt_dtype t, uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = t == CKPT_DTYPE_BF16 ? to_bf16(src[i]) : to_f16(src[i]);
}

void ckpt_dtype_widen(ckpt_dtype t, float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = t == CKPT_DTYPE_BF16 ? bits_f32((uint32_t)src[i] << 16) : from_f16(src[i]);
}
