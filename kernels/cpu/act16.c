/* act16 — see act16.h. Compiled once per x86 vector level (isa_variant.h): the loops
 * below vectorise into 16-lane conversions at AVX-512, where bf16 runs. */
#include "act16.h"

#include "dnn.h"
#include "isa_variant.h"
#include "precision.h"

/* Below this many elements a pass stays on one thread (relu.c's threshold). */
#define ACT16_OMP_MIN ((size_t)1 << 16)

ISA_VARIANTS(void, act16_add_relu, (uint16_t *out, const uint16_t *identity, size_t n));
ISA_VARIANTS(void, act16_relu_backward, (uint16_t *dinp, const uint16_t *out, const uint16_t *dout, size_t n));
ISA_VARIANTS(void, act16_add, (uint16_t *da, const uint16_t *dout, size_t n));
ISA_VARIANTS(void, act16_to_nchw, (float *dst, const uint16_t *src, int N, int C, int HW));
ISA_VARIANTS(void, act16_from_nchw, (uint16_t *dst, const float *src, int N, int C, int HW));

void ISA_FN(act16_add_relu)(uint16_t *out, const uint16_t *identity, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= ACT16_OMP_MIN)
    for (size_t i = 0; i < n; i++) {
        float s = f32_from_bf16_vec(out[i]) + f32_from_bf16_vec(identity[i]);
        out[i] = bf16_from_f32_vec(s < 0.0f ? 0.0f : s);
    }
}

void ISA_FN(act16_relu_backward)(uint16_t *dinp, const uint16_t *out, const uint16_t *dout, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= ACT16_OMP_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = f32_from_bf16_vec(out[i]) <= 0.0f ? 0.0f : f32_from_bf16_vec(dout[i]);
        dinp[i] = bf16_from_f32_vec(f32_from_bf16_vec(dinp[i]) + g);
    }
}

void ISA_FN(act16_add)(uint16_t *da, const uint16_t *dout, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= ACT16_OMP_MIN)
    for (size_t i = 0; i < n; i++) da[i] = bf16_from_f32_vec(f32_from_bf16_vec(da[i]) + f32_from_bf16_vec(dout[i]));
}

/* The converters: at the head (the last stage's small map) and, with the imagenet stem,
 * around the maxpool on the largest map (N x 64 x 112 x 112 at 224^2). */
void ISA_FN(act16_to_nchw)(float *dst, const uint16_t *src, int N, int C, int HW)
{
    const int B = dnn_block(), CB = C / B;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)N * C * HW >= ACT16_OMP_MIN)
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < CB; cb++) {
            const uint16_t *s = src + ((size_t)n * CB + cb) * HW * B;
            float *d = dst + ((size_t)n * C + (size_t)cb * B) * HW;
            for (int c = 0; c < B; c++)
                for (int i = 0; i < HW; i++) d[(size_t)c * HW + i] = f32_from_bf16_vec(s[(size_t)i * B + c]);
        }
}

void ISA_FN(act16_from_nchw)(uint16_t *dst, const float *src, int N, int C, int HW)
{
    const int B = dnn_block(), CB = C / B;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)N * C * HW >= ACT16_OMP_MIN)
    for (int n = 0; n < N; n++)
        for (int cb = 0; cb < CB; cb++) {
            const float *s = src + ((size_t)n * C + (size_t)cb * B) * HW;
            uint16_t *d = dst + ((size_t)n * CB + cb) * HW * B;
            for (int i = 0; i < HW; i++)
                for (int c = 0; c < B; c++) d[(size_t)i * B + c] = bf16_from_f32_vec(s[(size_t)c * HW + i]);
        }
}

#if ISA_ONCE
void act16_add_relu(uint16_t *out, const uint16_t *identity, size_t n)
{
    ISA_DISPATCH(act16_add_relu, (out, identity, n));
}

void act16_relu_backward(uint16_t *dinp, const uint16_t *out, const uint16_t *dout, size_t n)
{
    ISA_DISPATCH(act16_relu_backward, (dinp, out, dout, n));
}

void act16_add(uint16_t *da, const uint16_t *dout, size_t n)
{
    ISA_DISPATCH(act16_add, (da, dout, n));
}

void act16_to_nchw(float *dst, const uint16_t *src, int N, int C, int HW)
{
    ISA_DISPATCH(act16_to_nchw, (dst, src, N, C, HW));
}

void act16_from_nchw(uint16_t *dst, const float *src, int N, int C, int HW)
{
    ISA_DISPATCH(act16_from_nchw, (dst, src, N, C, HW));
}
#endif
