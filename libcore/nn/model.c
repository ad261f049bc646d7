/* model — see model.h. Resolution applies the [model] overrides to the preset the
 * family module names; every architecture rule the family modules already check
 * (gpt2_config_check, bert_config_check, resnet_config_check, mlp_config_check) is reused,
 * and their messages use the [model] key names. Everything that differs by family goes
 * through the family's table (model_impl.h: model_gpt2.c, model_bert.c, model_resnet.c,
 * model_mlp.c);
 * what every family shares is read through m->base. */
#include "model.h"

#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "model_impl.h"

/* The families by model_family value. */
static const model_family_ops *const model_families[] = {
    [MODEL_FAMILY_GPT2] = &model_family_gpt2,
    [MODEL_FAMILY_BERT] = &model_family_bert,
    [MODEL_FAMILY_RESNET] = &model_family_resnet,
    [MODEL_FAMILY_MLP] = &model_family_mlp,
};
#define MODEL_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Every integer override key of [model], in the order a foreign one is reported, with
 * the value that means "the preset's" (0, but for model.mlp_layers, where 0 is a model). */
static const struct model_override_key {
    const char *key;
    int64_t preset;
} model_override_keys[] = {
    { "model.n_layer", 0 }, { "model.n_head", 0 }, { "model.n_embd", 0 }, { "model.max_seq_len", 0 },
    { "model.vocab_size", 0 }, { "model.num_classes", 0 }, { "model.image_size", 0 }, { "model.width", 0 },
    { "model.mlp_hidden", 0 }, { "model.mlp_layers", -1 },
};

static const model_family_ops *model_family_of(model_family f)
{
    CHECK((size_t)f < MODEL_COUNT(model_families), "a model_spec's family is one of model_family");
    return model_families[f];
}

int model_pick(const config *cfg, const char *key, int preset)
{
    int64_t v = config_int(cfg, key);
    return v ? (int)v : preset;
}

static bool model_owns_key(const model_family_ops *ops, const char *key)
{
    for (const char *const *k = ops->keys; *k; k++)
        if (!strcmp(*k, key)) return true;
    return false;
}

/* A key of another family set to anything but "the preset's value" is an error:
 * ignoring it would run a model other than the one the user asked for. */
static status model_refuse_foreign_keys(const model_spec *s, const config *cfg)
{
    const model_family_ops *ops = model_family_of(s->family);
    for (size_t i = 0; i < MODEL_COUNT(model_override_keys); i++) {
        const char *key = model_override_keys[i].key;
        if (model_owns_key(ops, key) || config_int(cfg, key) == model_override_keys[i].preset) continue;
        log_error0("%s = %lld (%s) does not apply to %s, a %s model; its keys are %s", key,
                   (long long)config_int(cfg, key), config_origin(cfg, key), s->name, ops->name, ops->keys_text);
        return STATUS_INPUT;
    }
    if (!model_owns_key(ops, "model.stem") && strcmp(config_str(cfg, "model.stem"), "preset") != 0) {
        log_error0("model.stem = %s (%s) does not apply to %s, a %s model; its keys are %s",
                   config_str(cfg, "model.stem"), config_origin(cfg, "model.stem"), s->name, ops->name,
                   ops->keys_text);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status model_spec_from_config(model_spec *s, const config *cfg)
{
    memset(s, 0, sizeof *s);
    const char *name = config_str(cfg, "model.name");
    snprintf(s->name, sizeof s->name, "%s", name);
    size_t f = 0;
    while (f < MODEL_COUNT(model_families) &&
           strncmp(name, model_families[f]->prefix, strlen(model_families[f]->prefix)) != 0)
        f++;
    if (f == MODEL_COUNT(model_families))
        die("model.name", "MODEL_NAMES holds a name of no family", "every name starts with gpt2, bert, resnet or mlp");
    s->family = (model_family)f;
    TRY(model_refuse_foreign_keys(s, cfg));
    return model_families[f]->spec_resolve(s, cfg);
}

bool model_spec_images(const model_spec *s)
{
    return !model_family_of(s->family)->sequences;
}

const char *model_family_name(const model_spec *s)
{
    return model_family_of(s->family)->name;
}

/* Tensor and pipeline parallelism are built for the transformers. */
static bool model_spec_transformer(const model_spec *s)
{
    return s->family == MODEL_FAMILY_GPT2 || s->family == MODEL_FAMILY_BERT;
}

status model_check_seq_len(const model_spec *s, int T, int ctx, const char *seq_key)
{
    if (T < 1) {
        log_error0("%s = %d: a sequence needs at least 1 token", seq_key, T);
        return STATUS_INPUT;
    }
    if (T > ctx) {
        log_error0("%s = %d is longer than model.max_seq_len = %d, the context of %s (it has position embeddings "
                   "for %d tokens)", seq_key, T, ctx, s->name, ctx);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status model_spec_check_batch(const model_spec *s, int B, int T, const char *batch_key, const char *seq_key)
{
    if (B < 1) {
        log_error0("%s = %d: a batch needs at least 1 sample", batch_key, B);
        return STATUS_INPUT;
    }
    return model_family_of(s->family)->spec_check_batch(s, B, T, batch_key, seq_key);
}

void model_spec_print(const model_spec *s, FILE *f)
{
    model_family_of(s->family)->spec_print(s, f);
}

status model_init(model *m, const model_spec *s, int B, int T, uint64_t seed, bool train)
{
    return model_init_on(m, s, B, T, seed, train, NULL);
}

status model_init_on(model *m, const model_spec *s, int B, int T, uint64_t seed, bool train, const device *dev)
{
    return model_init_parallel(m, s, B, T, seed, train, dev, NULL, NULL);
}

status model_spec_check_grid(const model_spec *s, int tp, int pp)
{
    int layers = s->family == MODEL_FAMILY_GPT2 ? s->gpt2.num_layers
                 : s->family == MODEL_FAMILY_BERT ? s->bert.num_layers : 0;
    if (tp > 1 && !model_spec_transformer(s)) {
        log_error0("parallel.tp = %d: tensor parallelism is built for the transformers (GPT-2, BERT), not %s (%s); "
                   "set parallel.tp = 1", tp, s->name, model_family_of(s->family)->name);
        return STATUS_INPUT;
    }
    if (tp > 1) TRY(s->family == MODEL_FAMILY_GPT2 ? gpt2_check_tp(&s->gpt2, tp) : bert_check_tp(&s->bert, tp));
    if (pp > 1 && !model_spec_transformer(s)) {
        log_error0("parallel.pp = %d: %s trains data-parallel only; set parallel.pp = 1", pp, s->name);
        return STATUS_INPUT;
    }
    if (pp > 1 && pp > layers) {
        log_error0("parallel.pp = %d is more than the %d blocks of %s (model.n_layer): every pipeline stage needs at "
                   "least one block", pp, layers, s->name);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status model_tp_status(model *m)
{
    if (!m->base) return STATUS_OK;
    if (m->spec.family == MODEL_FAMILY_GPT2) return nn_tp_status(&m->gpt2.tp);
    if (m->spec.family == MODEL_FAMILY_BERT) return nn_tp_status(&m->bert.tp);
    return STATUS_OK;
}

status model_table_whole(const model_spec *s, int tp_size, int tp_rank, param_table *out)
{
    CHECK(model_spec_transformer(s), "model_table_whole: only the transformers have a tensor-parallel layout");
    return s->family == MODEL_FAMILY_GPT2 ? gpt2_table_whole(&s->gpt2, tp_size, tp_rank, out)
                                          : bert_table_whole(&s->bert, tp_size, tp_rank, out);
}

status model_init_parallel(model *m, const model_spec *s, int B, int T, uint64_t seed, bool train, const device *dev,
                           const nn_tp *tp, const nn_stage *stage)
{
    memset(m, 0, sizeof *m);
    m->tp = tp ? *tp : nn_tp_none();
    m->stage = stage ? *stage : nn_stage_whole();
    if (m->tp.size > 1) TRY(model_spec_check_grid(s, m->tp.size, 1));
    if (m->stage.end != 0 && !model_spec_transformer(s)) TRY(model_spec_check_grid(s, 1, 2));
    m->spec = *s;
    m->ops = model_family_of(s->family);
    m->B = B;
    m->T = m->ops->sequences ? T : 0;
    status st = m->ops->init(m, seed, train, dev);
    if (st != STATUS_OK) model_free(m);  /* the family inits zero their object first: a partial one frees */
    return st;
}

static bool model_is_gpt2(const model *m)
{
    CHECK(model_spec_transformer(&m->spec), "pipeline stages are the transformers' (GPT-2, BERT)");
    return m->spec.family == MODEL_FAMILY_GPT2;
}

void model_set_slot(model *m, int k, const model_batch *b)
{
    if (model_is_gpt2(m)) gpt2_set_slot(&m->gpt2, k);
    else bert_set_slot(&m->bert, k);
    m->last = b;
}

float *model_stage_in(model *m) { return model_is_gpt2(m) ? gpt2_stage_in(&m->gpt2) : bert_stage_in(&m->bert); }
float *model_stage_out(model *m) { return model_is_gpt2(m) ? gpt2_stage_out(&m->gpt2) : bert_stage_out(&m->bert); }
float *model_stage_grad(model *m) { return model_is_gpt2(m) ? gpt2_stage_grad(&m->gpt2) : bert_stage_grad(&m->bert); }

size_t model_stage_floats(const model *m)
{
    int C = model_is_gpt2(m) ? m->spec.gpt2.channels : m->spec.bert.channels;
    return (size_t)m->B * (size_t)m->T * (size_t)C;
}

double model_block_cost(const model_spec *s, int T, int l)
{
    CHECK(model_spec_transformer(s), "model_block_cost: only the transformers have pipeline stages");
    if (s->family == MODEL_FAMILY_GPT2) {
        const gpt2_config *c = &s->gpt2;
        double C = c->channels, cost = 6 * gpt2_block_params(c) + 12.0 * T * C;
        if (l == c->num_layers - 1) cost += 6.0 * c->padded_vocab_size * C;
        return cost;
    }
    const bert_config *c = &s->bert;
    double C = c->channels, cost = 6 * bert_block_params(c) + 12.0 * T * C;
    /* the MLM head runs at the masked positions only (bert.h): their share of the tokens */
    if (l == c->num_layers - 1) cost += 6.0 * BERT_MASK_PROB * (C * C + (double)c->vocab_size * C);
    return cost;
}

const char *model_tied_name(const model_spec *s)
{
    return s->family == MODEL_FAMILY_GPT2   ? "wte.weight"
           : s->family == MODEL_FAMILY_BERT ? "embeddings.word_embeddings.weight"
                                            : NULL;
}

void model_free(model *m)
{
    if (m->ops) m->ops->free(m);
    memset(m, 0, sizeof *m);
}

status model_batch_init(model_batch *b, const model *m)
{
    memset(b, 0, sizeof *b);
    if (!m->ops->batch_alloc(b, m)) {
        log_error("out of memory for a batch of %d samples of %s", m->B, m->spec.name);
        model_batch_free(b);
        return STATUS_NOMEM;
    }
    return STATUS_OK;
}

void model_batch_synthetic(model_batch *b, const model *m, uint64_t seed)
{
    rng r;
    rng_init(&r, seed, 0, RNG_PURPOSE_DATA, 0);
    m->ops->batch_synthetic(b, m, &r);
}

void model_batch_free(model_batch *b)
{
    free(b->ids);
    free(b->targets);
    free(b->mask);
    free(b->images);
    memset(b, 0, sizeof *b);
}

status model_forward(model *m, const model_batch *b, bool training)
{
    m->last = b;
    status st = m->ops->forward(m, b, training);
    param_layer_time(&m->base->timer, PARAM_LAYER_LAST, false);  /* final norm, head, loss */
    return st;
}

void model_backward(model *m)
{
    CHECK(m->last, "model_backward needs a model_forward first");
    m->ops->backward(m, m->last);
}

float model_loss(const model *m)
{
    return m->base->mean_loss;
}

param_table *model_params(model *m)
{
    return &m->base->pt;
}

param_buffers *model_device_buffers(model *m)
{
    return model_base_buffers(m->base);
}

status model_set_micro_batch(model *m, int B)
{
    if (!m->ops->set_batch || device_is_gpu(m->base->dev)) {
        log_error0("micro-batches of unequal size run on the CPU for GPT-2, BERT and the MLP only (%s%s): batch "
                   "normalisation's statistics depend on the micro-batch", m->spec.name,
                   device_is_gpu(m->base->dev) ? " on a GPU" : "");
        return STATUS_USAGE;
    }
    m->ops->set_batch(m, B);
    return STATUS_OK;
}

void model_set_loss_scale(model *m, float scale)
{
    m->base->loss_scale = scale;
}

param_buffers *model_buffers(model *m)
{
    return &m->base->pb;
}

const param_table *model_state_table(const model *m)
{
    return m->ops->state_table ? m->ops->state_table(m) : NULL;
}

float *model_state(model *m)
{
    return m->ops->state ? m->ops->state(m) : NULL;
}

float *model_state_saved(model *m)
{
    return m->ops->state_saved ? m->ops->state_saved(m) : NULL;
}

double model_flops_per_step(const model *m)
{
    return m->ops->flops_per_step(m);
}

size_t model_activation_bytes(const model *m)
{
    return m->ops->activation_bytes(m);
}

const char *model_unit(const model *m)
{
    return m->ops->unit;
}

double model_units_per_step(const model *m)
{
    return m->ops->unit_per_token ? (double)m->B * m->T : (double)m->B;
}

static const config_key model_only_schema[] = { MODEL_CONFIG_KEYS };

typedef struct model_keys {
    config *cfg;
    status st;  /* the first key that did not fit the schema */
} model_keys;

static int model_key(void *user, const char *section, const char *name, const char *value)
{
    model_keys *k = user;
    if (strcmp(section, "model") != 0 || k->st != STATUS_OK) return 1;
    char assignment[CONFIG_STR_MAX + 2 * CONFIG_NAME_MAX + 8];
    snprintf(assignment, sizeof assignment, "model.%s=%s", name, value);
    k->st = config_set(k->cfg, assignment);
    return 1;
}

status model_config_from_ini(config *mc, const char *ini)
{
    config_init(mc, model_only_schema, (int)(sizeof model_only_schema / sizeof model_only_schema[0]));
    model_keys k = { mc, STATUS_OK };
    int line = ini_parse_string(ini ? ini : "", model_key, &k);
    if (line != 0) {
        log_error("the stored config is not INI text (line %d)", line);
        return STATUS_INPUT;
    }
    return k.st;
}

/* ---- The trainer's view of a model ------------------------------------------------ */

void model_set_layer_hook(model *m, param_layer_hook h)
{
    m->base->hook = h;
}

void model_set_layer_timer(model *m, param_layer_timer t)
{
    m->base->timer = t;
}

const float *model_class_logits(const model *m, int *num_classes)
{
    if (!m->ops->class_logits) return NULL;
    *num_classes = model_num_classes(&m->spec);
    return m->ops->class_logits(m);
}

bool model_attention_shape(const model_spec *s, int *L, int *NH)
{
    const model_family_ops *ops = model_family_of(s->family);
    if (!ops->attention_shape) return false;
    ops->attention_shape(s, L, NH);
    return true;
}

bool model_attention_stats(const model *m, double *entropy, double *maxw)
{
    /* a tensor-parallel shard holds NH/tp heads: not the whole matrix */
    if (!m->ops->attention_stats || !m->last || device_is_gpu(m->base->dev) || m->tp.size > 1 || m->stage.end != 0)
        return false;
    m->ops->attention_stats(m, entropy, maxw);
    return true;
}

int model_vocab_size(const model_spec *s)
{
    int v, pv, c;
    model_family_of(s->family)->spec_outputs(s, &v, &pv, &c);
    return v;
}

int model_padded_vocab_size(const model_spec *s)
{
    int v, pv, c;
    model_family_of(s->family)->spec_outputs(s, &v, &pv, &c);
    return pv;
}

int model_num_classes(const model_spec *s)
{
    int v, pv, c;
    model_family_of(s->family)->spec_outputs(s, &v, &pv, &c);
    return c;
}

/* The one family-specific accessor: llm.c's file format exists for GPT-2 only. */
const gpt2_config *model_gpt2_config(const model_spec *s)
{
    return s->family == MODEL_FAMILY_GPT2 ? &s->gpt2 : NULL;
}
