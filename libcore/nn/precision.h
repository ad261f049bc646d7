/* precision — mixed-precision training on the host: the precision a run trains in
 * and the dynamic loss scaler. The fp32 <-> bf16 / fp16 casts, the bit-level
 * specification of every cast in Nebula, are kernels: kernels/cpu/precision.h (with
 * kernels/cuda/precision.h their device twin), included here for libcore's callers.
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

#include "cpu/precision.h" /* bf16_from_f32, f32_from_bf16, f16_from_f32, f32_from_f16 */

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

/* Dynamic loss scaling (GradScaler). Per step: loss * scale -> backward ->
 * unscale the gradients by loss_scaler_inv_scale and detect inf/NaN
 * (unscale_check_finite, cuda_unscale_check_finite) -> skipped = loss_scaler_update(ls, found_inf) ->
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
