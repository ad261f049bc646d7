/* precision — the precision kinds and the loss scaler (see precision.h); the casts
 * themselves are kernels (kernels/cpu/precision.c). */
#include "precision.h"

#include <math.h>
#include <string.h>

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
