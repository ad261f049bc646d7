/* precision — CUDA casts between fp32 and bf16 / fp16, and the unscale-and-check
 * of dynamic loss scaling (libcore/precision.h holds the scaler itself).
 *
 * The one design decision: libcore/precision.c is the specification, bit for bit.
 * Numbers round to nearest even with subnormals kept and overflow to inf (what the
 * hardware cvt.rn does); NaNs, where the hardware would return its canonical NaN,
 * follow libcore's rule instead (narrowing keeps the sign and the top payload bits
 * and sets the quiet bit; fp16 -> fp32 widening sets the quiet bit), so a cast gives
 * the same bits on either device. bf16 and fp16 values are uint16_t bit patterns.
 *
 * Device pointers; launched on cuda_stream_current(); no synchronisation, no
 * allocation. Launch errors are recorded (cuda_error_take). */
#ifndef NEBULA_KERNELS_CUDA_PRECISION_H
#define NEBULA_KERNELS_CUDA_PRECISION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = cast(x[i]) for i < n; x (n), y (n). */
void cuda_f32_to_bf16(const float *x, uint16_t *y, size_t n);
void cuda_bf16_to_f32(const uint16_t *x, float *y, size_t n);
void cuda_f32_to_f16(const float *x, uint16_t *y, size_t n);
void cuda_f16_to_f32(const uint16_t *x, float *y, size_t n);

/* Loss-scale unscaling (torch's _amp_foreach_non_finite_check_and_unscale_):
 * g[i] *= inv_scale for i < n (one fp32 multiply: exact when inv_scale is a power of
 * two and the result is normal), and *found_inf_dev = 1 when any g[i] was inf or NaN
 * before the multiply. The flag is only ever set, never cleared: zero it once per step
 * (cuda_memset) and pass it to every gradient buffer of the step, then copy it to the
 * host for loss_scaler_update. g (n); found_inf_dev: one int on the device. */
void cuda_unscale_check_finite(float *g, size_t n, float inv_scale, int *found_inf_dev);

#ifdef __cplusplus
}
#endif

#endif
