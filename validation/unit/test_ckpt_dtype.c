/* test_ckpt_dtype — the 16-bit element types of checkpoint format version 2
 * (libcore/ckpt/ckpt_dtype.c): every bfloat16 and float16 value widens to the float32 it
 * denotes and narrows back to itself; float32 values (one in every 4099 of all 2^32, plus
 * the edges: the halfway points, subnormals, the largest finite values, infinities, NaN)
 * round to the nearest 16-bit value with ties to even, checked against an independent
 * reference computed in double from the two neighbouring 16-bit values; the HDF5 types
 * are recognised again. One line per check, exit 1 on failure. */
#include "ckpt/ckpt_impl.h"
#include "../check.h"

#include <math.h>
#include <string.h>

static float f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static double widen1(ckpt_dtype t, uint16_t h)
{
    float f;
    ckpt_dtype_widen(t, &f, &h, 1);
    return f;
}

/* The reference rounding: the 16-bit value nearest x among all finite ones (ties: the
 * even one), infinity past the largest finite value's half-ulp (IEEE 754 round to
 * nearest). Values are monotonic in the bits of each sign, so a binary search finds
 * the neighbours. */
static uint16_t reference(ckpt_dtype t, float x)
{
    if (isnan(x)) return 0x7fff;  /* any NaN: compared by class */
    uint16_t sign = signbit(x) ? 0x8000 : 0, maxbits = t == CKPT_DTYPE_BF16 ? 0x7f7f : 0x7bff;
    double a = fabs((double)x), top = widen1(t, maxbits), ulp = top - widen1(t, (uint16_t)(maxbits - 1));
    if (a >= top + ulp / 2) return sign | (uint16_t)(maxbits + 1);  /* infinity */
    uint16_t lo = 0, hi = maxbits;
    while (lo < hi) {  /* the largest bits whose value <= a */
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (widen1(t, mid) <= a) lo = mid;
        else hi = (uint16_t)(mid - 1);
    }
    if (lo == maxbits) return sign | lo;
    double below = widen1(t, lo), above = widen1(t, (uint16_t)(lo + 1));
    uint16_t pick = a - below < above - a ? lo : a - below > above - a ? (uint16_t)(lo + 1) : (lo & 1 ? lo + 1 : lo);
    return sign | pick;
}

static void check_type(int *fails, ckpt_dtype t)
{
    const char *name = ckpt_dtype_name(t);
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {  /* widen, narrow: the identity (NaN stays NaN) */
        float f;
        uint16_t in = (uint16_t)h, back;
        ckpt_dtype_widen(t, &f, &in, 1);
        ckpt_dtype_narrow(t, &back, &f, 1);
        bool nan = isnan(f);
        if (nan ? !isnan(widen1(t, back)) : back != in) bad++;
    }
    check_line(fails, bad == 0, "%s: all 65536 values widen and narrow back to themselves (%d differ)", name, bad);

    float edge[64];
    int n = 0;
    uint16_t maxbits = t == CKPT_DTYPE_BF16 ? 0x7f7f : 0x7bff;  /* the largest finite value */
    for (uint16_t h = 0; h < maxbits; h = (uint16_t)(h + 0x3d1)) {
        double v = widen1(t, h), next = widen1(t, (uint16_t)(h + 1));
        if (n < 48) edge[n++] = (float)((v + next) / 2);  /* halfway: ties to even */
    }
    edge[n++] = f32(0x00000001u), edge[n++] = f32(0x33000000u), edge[n++] = f32(0x33000001u);  /* tiny */
    edge[n++] = 65504.0f, edge[n++] = 65519.99f, edge[n++] = 65520.0f, edge[n++] = f32(0x7f7fffffu);
    edge[n++] = INFINITY, edge[n++] = -INFINITY, edge[n++] = NAN, edge[n++] = -0.0f, edge[n++] = f32(0x387fe000u);
    bad = 0;
    for (uint64_t k = 0; k < (uint64_t)1 << 32; k += k < (uint64_t)n ? 1 : 4099) {
        float x = k < (uint64_t)n ? edge[k] : f32((uint32_t)k);
        uint16_t got, want = reference(t, x);
        ckpt_dtype_narrow(t, &got, &x, 1);
        bool ok = isnan(x) ? isnan(widen1(t, got)) : got == want;
        if (!ok && bad++ < 3)
            printf("    %s: %a -> 0x%04x, expected 0x%04x\n", name, (double)x, got, want);
    }
    check_line(fails, bad == 0, "%s: float32 rounds to nearest, ties to even, overflow to infinity (%d of ~1M differ)",
               name, bad);
    hid_t h5 = ckpt_dtype_h5(t);
    check_line(fails, ckpt_dtype_of(h5) == (int)t && H5Tget_size(h5) == 2, "%s: its HDF5 type is recognised", name);
    H5Tclose(h5);
}

int main(void)
{
    int fails = 0;
    ckpt_dtype t;
    check_type(&fails, CKPT_DTYPE_BF16);
    check_type(&fails, CKPT_DTYPE_F16);
    check_line(&fails, ckpt_dtype_of(H5T_IEEE_F32LE) == CKPT_DTYPE_F32 && ckpt_dtype_of(H5T_IEEE_F64LE) < 0 &&
                       ckpt_dtype_of(H5T_STD_U16LE) < 0, "float32 is recognised; float64 and uint16 are not");
    check_line(&fails, ckpt_dtype_parse("bf16", &t) && t == CKPT_DTYPE_BF16 && ckpt_dtype_parse("float16", &t) &&
                       t == CKPT_DTYPE_F16 && !ckpt_dtype_parse("int8", &t), "dtype names parse");
    return fails ? 1 : 0;
}
