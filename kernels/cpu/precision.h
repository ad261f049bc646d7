/* precision — the casts between fp32 and bf16 / fp16 and the unscale-and-check of
 * dynamic loss scaling, on the CPU: the twin of kernels/cuda/precision.h (the same
 * functions without the cuda_ prefix; libcore/nn/precision.h holds the precision kinds
 * and the loss scaler that decides what to do with the flag).
 *
 * The one design decision: these casts are the bit-level specification of every cast
 * in Nebula (kernels/cuda/precision.cu is tested against them pattern for pattern), so
 * each is written on the integer bits, independent of the compiler's _Float16 and of
 * the FPU's rounding mode:
 *   - rounding is to nearest, ties to even (IEEE 754 roundTiesToEven);
 *   - values beyond the largest finite value round to +-inf, as RNE does;
 *   - fp16 keeps subnormals (2^-24 .. 2^-14); bf16 keeps fp32's subnormals;
 *   - a NaN stays a NaN of the same sign: narrowing keeps the top payload bits and
 *     sets the quiet bit (x86 soft-fp's _Float16 and AVX512-BF16 do the same);
 *     widening fp16 -> fp32 also sets the quiet bit (as gcc's _Float16 does);
 *     widening bf16 -> fp32 is the exact 16-bit shift.
 * bf16 and fp16 values are held as uint16_t bit patterns. */
#ifndef NEBULA_KERNELS_CPU_PRECISION_H
#define NEBULA_KERNELS_CPU_PRECISION_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One value (the specification of each cast). */
uint16_t bf16_from_f32(float x);
float f32_from_bf16(uint16_t h);
uint16_t f16_from_f32(float x);
float f32_from_f16(uint16_t h);

/* bf16_from_f32 and f32_from_bf16 without branches, inline, for loops that vectorise
 * (f32_to_bf16, the bf16 activation passes of act16.c); the tests check the narrowing
 * against bf16_from_f32 bit for bit. */
static inline uint16_t bf16_from_f32_vec(float x)
{
    uint32_t v;
    memcpy(&v, &x, sizeof v);
    uint32_t rne = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16, qnan = (v >> 16) | 0x0040u;
    return (uint16_t)((v & 0x7fffffffu) > 0x7f800000u ? qnan : rne);
}

static inline float f32_from_bf16_vec(uint16_t h)
{
    uint32_t v = (uint32_t)h << 16;
    float x;
    memcpy(&x, &v, sizeof x);
    return x;
}

/* y[i] = cast(x[i]) for i < n; x (n), y (n). cuda_f32_to_bf16 ... on the CPU. */
void f32_to_bf16(const float *x, uint16_t *y, size_t n);
void bf16_to_f32(const uint16_t *x, float *y, size_t n);
void f32_to_f16(const float *x, uint16_t *y, size_t n);
void f16_to_f32(const uint16_t *x, float *y, size_t n);

/* Loss-scale unscaling (torch's _amp_foreach_non_finite_check_and_unscale_), as
 * cuda_unscale_check_finite: g[i] *= inv_scale for i < n (one fp32 multiply), and
 * *found_inf = 1 when any g[i] was inf or NaN before the multiply; the flag is only
 * ever set, never cleared (zero it once per step). g (n). */
void unscale_check_finite(float *g, size_t n, float inv_scale, int *found_inf);

#endif
