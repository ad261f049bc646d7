/* precision — mixed-precision training on the host: the precision a run trains in,
 * the fp32 <-> bf16 / fp16 conversions, and the dynamic loss scaler.
 *
 * The one design decision: these conversions are the bit-level specification of
 * every cast in Nebula (kernels/cuda/precision.cu is tested against them pattern
 * for pattern), so each is written on the integer bits, independent of the
 * compiler's _Float16 and of the FPU's rounding mode:
 *   - rounding is to nearest, ties to even (IEEE 754 roundTiesToEven);
 *   - values beyond the largest finite value round to +-inf, as RNE does;
 *   - fp16 keeps subnormals (2^-24 .. 2^-14); bf16 keeps fp32's subnormals;
 *   - a NaN stays a NaN of the same sign: narrowing keeps the top payload bits and
 *     sets the quiet bit (x86 soft-fp's _Float16 and AVX512-BF16 do the same);
 *     widening fp16 -> fp32 also sets the quiet bit (as gcc's _Float16 does);
 *     widening bf16 -> fp32 is the exact 16-bit shift.
 * bf16 and fp16 values are held as uint16_t bit patterns.
 *
 * The loss scaler is torch.cuda.amp.GradScaler's update rule (torch 1.13,
 * _amp_update_scale_cuda_kernel): a step with an inf/NaN gradient is skipped, the
 * scale multiplied by backoff_factor and the growth counter reset; after
 * growth_interval consecutive clean steps the scale is multiplied by growth_factor
 * (only when the result is finite) and the counter reset. The scale is a float and
 * each product is formed in double and rounded to float, as torch does. Nebula adds
 * one rule: the scale is clamped to [min_scale, max_scale] (1 and 2^24 by default),
 * so a run of bad steps cannot drive it to 0 and growth cannot overflow fp16's
 * range of useful gradients. Within the clamp the trajectory is torch's. */
#ifndef NEBULA_PRECISION_H
#define NEBULA_PRECISION_H

#include <stdbool.h>
#include <stdint.h>

typedef enum precision_kind {
    PRECISION_FP32 = 0,  /* everything in fp32 */
    PRECISION_BF16,      /* bf16 activations/matmuls, fp32 master weights and optimizer */
    PRECISION_FP16,      /* fp16 with dynamic loss scaling, fp32 master weights and optimizer */
} precision_kind;

/* For a config schema's CONFIG_TYPE_ENUM .choices (train.precision) and --help. */
#define PRECISION_CHOICES "fp32|bf16|fp16"

/* "fp32", "bf16", "fp16" ("unknown" outside the enum). */
const char *precision_kind_name(precision_kind k);
/* Parses one of the names above; on false *why (if not NULL) is a message that
 * names the valid values, for the caller to print with the key or flag. */
bool precision_kind_parse(const char *s, precision_kind *out, const char **why);
/* Bytes of one value stored in this precision (4 or 2). */
int precision_kind_bytes(precision_kind k);

/* Conversions (see the top of the file for the rules). */
uint16_t bf16_from_f32(float x);
float f32_from_bf16(uint16_t h);
uint16_t f16_from_f32(float x);
float f32_from_f16(uint16_t h);

/* Dynamic loss scaling (GradScaler). Per step: loss * scale -> backward ->
 * unscale the gradients by loss_scaler_inv_scale and detect inf/NaN
 * (cuda_unscale_check_finite) -> skipped = loss_scaler_update(ls, found_inf) ->
 * step only when not skipped. With the defaults every scale is a power of two, so
 * scaling and unscaling are exact. */
typedef struct loss_scaler {
    float scale;            /* current loss scale (init 2^16) */
    double growth_factor;   /* scale *= this after growth_interval clean steps (2) */
    double backoff_factor;  /* scale *= this after a step with inf/NaN gradients (0.5) */
    int growth_interval;    /* consecutive clean steps before a growth (2000) */
    int growth_tracker;     /* clean steps since the last growth or backoff (torch's _growth_tracker) */
    float min_scale;        /* clamp, Nebula's addition (1) */
    float max_scale;        /* clamp, Nebula's addition (2^24) */
    long skipped;           /* steps skipped so far */
} loss_scaler;

/* The defaults above (GradScaler's, plus the clamp). */
void loss_scaler_init(loss_scaler *ls);
/* Records one step; returns true when the step must be skipped (found_inf). */
bool loss_scaler_update(loss_scaler *ls, bool found_inf);
/* 1 / scale rounded to float, as torch forms it (scale.double().reciprocal().float()). */
float loss_scaler_inv_scale(const loss_scaler *ls);

#endif
