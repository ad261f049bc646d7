/* tool_model — the model a checkpoint (or a converted file) describes, built for its
 * parameter tables.
 *
 * A checkpoint stores the whole resolved config of its run (every section of
 * nebula-train's schema); only its [model] section decides the tables
 * (model_config_from_ini), the other sections, which this program does not know,
 * are left alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_tool.h"

static const config_key model_schema[] = { MODEL_CONFIG_KEYS };
#define NMODEL_KEYS (int)(sizeof model_schema / sizeof model_schema[0])

void tool_model_config(config *mc)
{
    config_init(mc, model_schema, NMODEL_KEYS);
}

/* At least as many parameters as the spec describes (the weight matrices alone). ResNets
 * have fixed widths: nothing to bound. */
static double spec_min_params(const model_spec *s)
{
    if (s->family == MODEL_FAMILY_GPT2) {
        double C = s->gpt2.channels;
        return (double)s->gpt2.vocab_size * C + (double)s->gpt2.num_layers * 12 * C * C;
    }
    if (s->family == MODEL_FAMILY_BERT) {
        double C = s->bert.channels;
        return (double)s->bert.vocab_size * C + (double)s->bert.num_layers * (4 * C * C + 2 * C * s->bert.intermediate);
    }
    if (s->family == MODEL_FAMILY_MLP) {
        double D = 3.0 * s->image_size * s->image_size, H = s->mlp.hidden, K = s->mlp.num_classes;
        int L = s->mlp.layers;
        return L ? D * H + (L - 1) * H * H + H * K : D * K;
    }
    return 0;
}

status tool_model_from_config(tool_model *tm, const config *cfg, const char *origin, uint64_t file_bytes)
{
    config mc;
    tool_model_config(&mc);
    for (int k = 0; k < NMODEL_KEYS; k++) {  /* cfg may hold other sections: keep [model] alone */
        char key[2 * CONFIG_NAME_MAX + 2], assignment[CONFIG_STR_MAX + 2 * CONFIG_NAME_MAX + 8];
        snprintf(key, sizeof key, "model.%s", model_schema[k].name);
        if (model_schema[k].type == CONFIG_TYPE_INT)
            snprintf(assignment, sizeof assignment, "%s=%lld", key, (long long)config_int(cfg, key));
        else
            snprintf(assignment, sizeof assignment, "%s=%s", key, config_str(cfg, key));
        TRY(config_set(&mc, assignment));
    }
    model_spec spec;
    TRY(model_spec_from_config(&spec, &mc));
    /* The sizes come from a file that may lie: a model its own file could not hold (at 16
     * bits a value) is refused before anything is allocated for it. */
    double need = 2 * spec_min_params(&spec);
    if (file_bytes && need > (double)file_bytes) {
        log_error0("%s: its sizes describe %s with at least %.4g parameters (%.4g GB at 16 bits a value), more than "
                   "the file's %.4g GB: the sizes are wrong or the file is not what it claims", origin, spec.name,
                   need / 2, need / 1e9, (double)file_bytes / 1e9);
        return STATUS_INPUT;
    }
    config_dump(&mc, tm->ini, sizeof tm->ini);
    memset(&tm->m, 0, sizeof tm->m);
    return model_init(&tm->m, &spec, 1, model_spec_images(&spec) ? 0 : 1, 0, false);
}

status tool_model_from_ini(tool_model *tm, const char *ini, const char *origin, const char *want, uint64_t file_bytes)
{
    config mc;
    model_spec spec;
    if (model_config_from_ini(&mc, ini) != STATUS_OK || model_spec_from_config(&spec, &mc) != STATUS_OK) {
        log_error0("%s: its stored [model] section does not describe a model (see the message above)", origin);
        return STATUS_INPUT;
    }
    if (want && strcmp(spec.name, want) != 0) {
        log_error0("%s: its stored config describes model '%s', its attribute model says '%s'", origin, spec.name,
                   want);
        return STATUS_INPUT;
    }
    return tool_model_from_config(tm, &mc, origin, file_bytes);
}

void tool_model_free(tool_model *tm)
{
    model_free(&tm->m);
}

/* "/GROUP/wte.weight" -> "GROUP" in out (a group may hold a slash); false for a dataset outside a group. */
static bool group_of(const ckpt_dataset *d, char *out, size_t len)
{
    const char *slash = strrchr(d->path, '/');
    if (d->blob || slash == d->path || (size_t)(slash - d->path) > len) return false;
    snprintf(out, len, "%.*s", (int)(slash - d->path - 1), d->path + 1);
    return true;
}

float *tool_zeros(const param_table *t)
{
    float *p = aligned_alloc(PARAM_ALIGN_BYTES, t->total * sizeof *p);
    if (p) memset(p, 0, t->total * sizeof *p);  /* padding is zero, as in a training run */
    return p;
}

status tool_add_group(ckpt_content *c, model *m, const char *name, bool data, const char *origin)
{
    for (int g = 0; g < c->ngroups; g++)
        if (!strcmp(c->groups[g].group, name)) return STATUS_OK;
    int kind = train_ckpt_group_find(name);
    const param_table *t = kind >= 0 ? train_ckpt_group_table(m, (train_ckpt_group)kind) : NULL;
    if (!t) {
        log_error0("%s: group /%s is not one the model '%s' keeps (%s, %s, %s%s%s)", origin, name, m->spec.name,
                   TRAIN_CKPT_PARAMS, TRAIN_CKPT_OPTIM_M, TRAIN_CKPT_OPTIM_V, model_state_table(m) ? ", " : "",
                   model_state_table(m) ? TRAIN_CKPT_BUFFERS : "");
        return STATUS_INPUT;
    }
    float *buf = NULL;
    if (data && !(buf = kind == TRAIN_CKPT_GROUP_PARAMS    ? model_buffers(m)->params
                        : kind == TRAIN_CKPT_GROUP_BUFFERS ? model_state(m)
                                                           : tool_zeros(t))) {
        log_error0("cannot allocate %zu bytes for /%s", t->total * sizeof(float), name);
        return STATUS_NOMEM;
    }
    c->groups[c->ngroups++] = (ckpt_tensors){ train_ckpt_group_name((train_ckpt_group)kind), t, buf, false };
    return STATUS_OK;
}

status tool_content(ckpt_content *c, const ckpt_catalog *cat, model *m, bool data, bool moments)
{
    memset(c, 0, sizeof *c);
    c->model = cat->h.model;
    c->table_hash = param_table_hash(model_params(m));
    c->step = cat->h.step;
    for (int k = 0; k < cat->n; k++) {
        char name[CKPT_ITEM_PATH];
        if (!group_of(&cat->items[k], name, sizeof name)) continue;
        int g = train_ckpt_group_find(name);
        if (!moments && g >= 0 && train_ckpt_group_is_optim((train_ckpt_group)g)) continue;
        status st = tool_add_group(c, m, name, data, cat->file);
        if (st != STATUS_OK) {
            tool_content_free(c, m);
            return st;
        }
    }
    return STATUS_OK;
}

void tool_content_free(ckpt_content *c, model *m)
{
    for (int g = 0; g < c->ngroups; g++)
        if (c->groups[g].data && c->groups[g].data != model_buffers(m)->params && c->groups[g].data != model_state(m))
            free(c->groups[g].data);
    c->ngroups = 0;
}
