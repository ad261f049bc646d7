/* test_reduce — the vectorised reduction kernels against their plain-loop
 * specification, for every dtype and op, at lengths around vector widths, with
 * canaries guarding the bytes after each output. An elementwise op has one
 * rounding per element, so fast and reference must agree bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cpu/reduce.h"
#include "base/rng.h"

#define CANARY 0xA5

int main(void)
{
    static const char *dt_names[] = { "f32", "f64", "i32", "i64" };
    static const char *op_names[] = { "sum", "max", "min" };
    static const size_t lens[] = { 0, 1, 3, 7, 8, 15, 16, 17, 31, 64, 1000, 4099 };
    static unsigned char dst_fast[4099 * 8 + 64], dst_ref[4099 * 8 + 64], src[4099 * 8];
    int failures = 0;
    rng r;
    rng_init(&r, 42, 0, RNG_PURPOSE_TEST, 0);
    for (int dt = 0; dt < 4; dt++)
        for (int op = 0; op < 3; op++) {
            int ok = 1;
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                size_t n = lens[li], esz = reduce_dtype_size((reduce_dtype)dt);
                for (size_t i = 0; i < n; i++) {
                    double a = (rng_uniform_double(&r) - 0.5) * 1e3, b = (rng_uniform_double(&r) - 0.5) * 1e3;
                    switch (dt) {
                    case REDUCE_DTYPE_F32: ((float *)dst_ref)[i] = (float)a; ((float *)src)[i] = (float)b; break;
                    case REDUCE_DTYPE_F64: ((double *)dst_ref)[i] = a; ((double *)src)[i] = b; break;
                    case REDUCE_DTYPE_I32: ((int32_t *)dst_ref)[i] = (int32_t)a; ((int32_t *)src)[i] = (int32_t)b; break;
                    case REDUCE_DTYPE_I64: ((int64_t *)dst_ref)[i] = (int64_t)(a * 1e9); ((int64_t *)src)[i] = (int64_t)(b * 1e9); break;
                    }
                }
                memset(dst_ref + n * esz, CANARY, 64);
                memcpy(dst_fast, dst_ref, n * esz + 64);
                static unsigned char rev_fast[4099 * 8 + 64], rev_ref[4099 * 8 + 64];
                memcpy(rev_fast, dst_ref, n * esz + 64);
                memcpy(rev_ref, dst_ref, n * esz + 64);
                reduce_apply(dst_fast, src, n, (reduce_dtype)dt, (reduce_op)op);
                reduce_apply_ref(dst_ref, src, n, (reduce_dtype)dt, (reduce_op)op);
                reduce_apply_rev(rev_fast, src, n, (reduce_dtype)dt, (reduce_op)op);
                reduce_apply_rev_ref(rev_ref, src, n, (reduce_dtype)dt, (reduce_op)op);
                if (memcmp(dst_fast, dst_ref, n * esz + 64) != 0) ok = 0;
                if (memcmp(rev_fast, rev_ref, n * esz + 64) != 0) ok = 0;
                for (int k = 0; k < 64; k++)
                    if (dst_fast[n * esz + (size_t)k] != CANARY || rev_fast[n * esz + (size_t)k] != CANARY) ok = 0;
            }
            printf("%s - reduce %s %s (both operand orders) fast path equals reference bit for bit, canaries intact\n",
                   ok ? "ok" : "FAIL", dt_names[dt], op_names[op]);
            failures += !ok;
        }
    /* Swapped operands: a op b computed by the holder of a and by the holder of b
     * must agree bit for bit, NaN and signed zeros included. */
    float a[4] = { NAN, 1.0f, 0.0f, -0.0f }, b[4] = { 1.0f, NAN, -0.0f, 0.0f };
    int sym = 1;
    for (int op = 0; op < 3; op++) {
        float x[4], y[4];
        memcpy(x, a, sizeof x);
        memcpy(y, b, sizeof y);
        reduce_apply(x, b, 4, REDUCE_DTYPE_F32, (reduce_op)op);     /* holder of a: a op b */
        reduce_apply_rev(y, a, 4, REDUCE_DTYPE_F32, (reduce_op)op); /* holder of b: a op b */
        if (memcmp(x, y, sizeof x) != 0) sym = 0;
    }
    printf("%s - a op b agrees bitwise on both holders for NaN and signed zeros\n", sym ? "ok" : "FAIL");
    failures += !sym;
    return failures ? 1 : 0;
}
