/* dgc_options — see dgc.h: the options from a config and the sparsity schedule they
 * describe, pure functions of the options (no state, no MPI). */
#include "dgc.h"
#include "base/config.h"

#include <math.h>
#include <string.h>

void dgc_options_from_config(const config *cfg, dgc_options *o)
{
    memset(o, 0, sizeof *o);
    const char *m = config_str(cfg, "dgc.mode");
    o->mode = !strcmp(m, "on") ? DGC_MODE_ON : !strcmp(m, "auto") ? DGC_MODE_AUTO : DGC_MODE_OFF;
    o->sparsity = config_float(cfg, "dgc.sparsity");
    o->warmup_steps = (long)config_int(cfg, "dgc.warmup_steps");
    o->warmup_stages = (int)config_int(cfg, "dgc.warmup_stages");
    o->warmup_sparsity = config_float(cfg, "dgc.warmup_sparsity");
    o->sample_fraction = config_float(cfg, "dgc.sample_fraction");
    o->exact_topk = config_bool(cfg, "dgc.exact_topk");
    o->values = !strcmp(config_str(cfg, "dgc.value_dtype"), "fp16") ? DGC_VALUES_FP16 : DGC_VALUES_FP32;
    o->min_numel = (size_t)config_int(cfg, "dgc.min_numel");
    o->min_energy = config_float(cfg, "dgc.min_energy");
    o->layer_ratios = config_bool(cfg, "dgc.layer_ratios");
    o->zero_predict = config_bool(cfg, "dgc.zero_predict");
    o->min_params = config_int(cfg, "dgc.min_params");
    o->min_comm_fraction = config_float(cfg, "dgc.min_comm_fraction");
    o->timeout_s = config_float(cfg, "comm.timeout");
}

double dgc_density_at(const dgc_options *o, long step)
{
    double final = 1.0 - o->sparsity;
    if (step < 0) step = 0;
    if (step >= o->warmup_steps) return final;
    long stage = step * o->warmup_stages / o->warmup_steps;
    double d = (1.0 - o->warmup_sparsity) * pow(0.25, (double)stage);
    return d > final ? d : final;
}
