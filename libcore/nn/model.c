/* model — see model.h. Resolution applies the [model] overrides to the preset the
 * family module names; every architecture rule the family modules already check
 * (gpt2_config_check, bert_config_check, resnet_config_check) is reused, and their
 * messages use the [model] key names. The rest is a switch on the family. */
#include "model.h"

#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

#define MODEL_GPT2_VOCAB_ALIGN 128  /* GPT-2's embedding rows: V padded to a multiple of this (50257 -> 50304) */

static const char *const model_transformer_keys[] = {
    "model.n_layer", "model.n_head", "model.n_embd", "model.max_seq_len", "model.vocab_size",
};
static const char *const model_resnet_keys[] = { "model.num_classes", "model.image_size" };
#define MODEL_COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *model_family_name(model_family f)
{
    return f == MODEL_FAMILY_GPT2 ? "GPT-2" : f == MODEL_FAMILY_BERT ? "BERT" : "ResNet";
}

/* ResNet's downsampling from input to layer4: 7x7/2 conv and 3x3/2 max-pool, then
 * stride 2 in layer2..4 (imagenet); 3x3/1 conv, no pool, then the same (cifar). */
static int model_resnet_stride(resnet_stem stem)
{
    return stem == RESNET_STEM_IMAGENET ? 32 : 8;
}

/* The value of an override key, or `preset` when it is 0. */
static int model_pick(const config *cfg, const char *key, int preset)
{
    int64_t v = config_int(cfg, key);
    return v ? (int)v : preset;
}

/* A key of the other family set to anything but "the preset's value" is an error:
 * ignoring it would run a model other than the one the user asked for. */
static status model_refuse_foreign_keys(const model_spec *s, const config *cfg)
{
    bool resnet = s->family == MODEL_FAMILY_RESNET;
    const char *const *keys = resnet ? model_transformer_keys : model_resnet_keys;
    size_t n = resnet ? MODEL_COUNT(model_transformer_keys) : MODEL_COUNT(model_resnet_keys);
    const char *own = resnet ? "model.stem, model.num_classes, model.image_size"
                             : "model.n_layer, model.n_head, model.n_embd, model.max_seq_len, model.vocab_size";
    for (size_t i = 0; i < n; i++)
        if (config_int(cfg, keys[i]) != 0) {
            log_error0("%s = %lld (%s) does not apply to %s, a %s model; its keys are %s", keys[i],
                       (long long)config_int(cfg, keys[i]), config_origin(cfg, keys[i]), s->name,
                       model_family_name(s->family), own);
            return STATUS_INPUT;
        }
    if (!resnet && strcmp(config_str(cfg, "model.stem"), "preset") != 0) {
        log_error0("model.stem = %s (%s) does not apply to %s, a %s model; its keys are %s",
                   config_str(cfg, "model.stem"), config_origin(cfg, "model.stem"), s->name,
                   model_family_name(s->family), own);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static status model_resolve_gpt2(model_spec *s, const config *cfg)
{
    gpt2_config *g = &s->gpt2;
    TRY(gpt2_config_named(g, s->name));
    g->num_layers = model_pick(cfg, "model.n_layer", g->num_layers);
    g->num_heads = model_pick(cfg, "model.n_head", g->num_heads);
    g->channels = model_pick(cfg, "model.n_embd", g->channels);
    g->max_seq_len = model_pick(cfg, "model.max_seq_len", g->max_seq_len);
    if (config_int(cfg, "model.vocab_size")) {
        g->vocab_size = (int)config_int(cfg, "model.vocab_size");
        g->padded_vocab_size = (g->vocab_size + MODEL_GPT2_VOCAB_ALIGN - 1) / MODEL_GPT2_VOCAB_ALIGN *
                               MODEL_GPT2_VOCAB_ALIGN;
    }
    return gpt2_config_check(g);
}

static status model_resolve_bert(model_spec *s, const config *cfg)
{
    bert_config *b = &s->bert;
    TRY(bert_config_named(b, s->name));
    b->num_layers = model_pick(cfg, "model.n_layer", b->num_layers);
    b->num_heads = model_pick(cfg, "model.n_head", b->num_heads);
    if (config_int(cfg, "model.n_embd")) {
        b->channels = (int)config_int(cfg, "model.n_embd");
        b->intermediate = 4 * b->channels;  /* as in every named BERT */
    }
    b->max_position = model_pick(cfg, "model.max_seq_len", b->max_position);
    b->vocab_size = model_pick(cfg, "model.vocab_size", b->vocab_size);
    TRY(bert_config_check(b));
    /* The masked-LM corruption and its data treat ids 0..[MASK] as special tokens. */
    int need = BERT_SPECIAL_TOKENS_UNCASED.mask + 1;
    if (b->vocab_size < need) {
        log_error0("model.vocab_size = %d is too small for BERT: the special tokens [PAD] 0, [UNK] 100, [CLS] 101, "
                   "[SEP] 102 and [MASK] 103 need at least %d", b->vocab_size, need);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static status model_resolve_resnet(model_spec *s, const config *cfg)
{
    resnet_config *r = &s->resnet;
    TRY(resnet_config_named(r, s->name));
    const char *stem = config_str(cfg, "model.stem");
    if (strcmp(stem, "preset") != 0)
        CHECK(resnet_stem_parse(stem, &r->stem), "MODEL_CONFIG_KEYS lists a stem that resnet does not know");
    r->num_classes = model_pick(cfg, "model.num_classes", r->num_classes);
    TRY(resnet_config_check(r));
    int stride = model_resnet_stride(r->stem);
    s->image_size = model_pick(cfg, "model.image_size", r->stem == RESNET_STEM_IMAGENET ? 224 : 32);
    if (s->image_size < stride) {
        log_error0("model.image_size = %d is smaller than %d, the total stride of the %s stem and the four stages "
                   "(224 is the imagenet stem's size, 32 the cifar stem's)", s->image_size, stride,
                   resnet_stem_name(r->stem));
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status model_spec_from_config(model_spec *s, const config *cfg)
{
    memset(s, 0, sizeof *s);
    const char *name = config_str(cfg, "model.name");
    snprintf(s->name, sizeof s->name, "%s", name);
    if (!strncmp(name, "gpt2", 4)) s->family = MODEL_FAMILY_GPT2;
    else if (!strncmp(name, "bert", 4)) s->family = MODEL_FAMILY_BERT;
    else if (!strncmp(name, "resnet", 6)) s->family = MODEL_FAMILY_RESNET;
    else die("model.name", "MODEL_NAMES holds a name of no family", "every name starts with gpt2, bert or resnet");
    TRY(model_refuse_foreign_keys(s, cfg));
    if (s->family == MODEL_FAMILY_GPT2) return model_resolve_gpt2(s, cfg);
    if (s->family == MODEL_FAMILY_BERT) return model_resolve_bert(s, cfg);
    return model_resolve_resnet(s, cfg);
}

status model_spec_check_batch(const model_spec *s, int B, int T, const char *batch_key, const char *seq_key)
{
    if (B < 1) {
        log_error0("%s = %d: a batch needs at least 1 sample", batch_key, B);
        return STATUS_INPUT;
    }
    if (s->family == MODEL_FAMILY_RESNET) {
        /* Every stride-2 step maps n pixels to ceil(n / 2), so layer4 sees ceil(size / stride)^2. */
        int stride = model_resnet_stride(s->resnet.stem);
        long long side = (s->image_size + stride - 1) / stride, values = (long long)B * side * side;
        if (values < 2) {
            log_error0("%s = %d with model.image_size = %d leaves layer4's batch norm %lld value per channel in a "
                       "training step; it needs at least 2 (raise %s or model.image_size)", batch_key, B,
                       s->image_size, values, batch_key);
            return STATUS_INPUT;
        }
        return STATUS_OK;
    }
    int ctx = s->family == MODEL_FAMILY_GPT2 ? s->gpt2.max_seq_len : s->bert.max_position;
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

void model_spec_print(const model_spec *s, FILE *f)
{
    if (s->family == MODEL_FAMILY_GPT2) {
        const gpt2_config *g = &s->gpt2;
        fprintf(f, "%s (GPT-2): n_layer %d, n_head %d, n_embd %d, max_seq_len %d, vocab_size %d (padded to %d)\n",
                s->name, g->num_layers, g->num_heads, g->channels, g->max_seq_len, g->vocab_size,
                g->padded_vocab_size);
    } else if (s->family == MODEL_FAMILY_BERT) {
        const bert_config *b = &s->bert;
        fprintf(f, "%s (BERT, masked LM): n_layer %d, n_head %d, n_embd %d (FFN %d), max_seq_len %d, vocab_size %d\n",
                s->name, b->num_layers, b->num_heads, b->channels, b->intermediate, b->max_position, b->vocab_size);
    } else {
        const resnet_config *r = &s->resnet;
        fprintf(f, "%s (ResNet, %s blocks %d-%d-%d-%d): stem %s, num_classes %d, image_size %d\n", s->name,
                r->block == RESNET_BLOCK_KIND_BOTTLENECK ? "Bottleneck" : "Basic", r->layers[0], r->layers[1],
                r->layers[2], r->layers[3], resnet_stem_name(r->stem), r->num_classes, s->image_size);
    }
}

status model_init(model *m, const model_spec *s, int B, int T, uint64_t seed, bool train)
{
    return model_init_on(m, s, B, T, seed, train, NULL);
}

status model_init_on(model *m, const model_spec *s, int B, int T, uint64_t seed, bool train, const device *dev)
{
    memset(m, 0, sizeof *m);
    m->spec = *s;
    m->B = B;
    m->T = s->family == MODEL_FAMILY_RESNET ? 0 : T;
    status st;
    if (s->family == MODEL_FAMILY_GPT2) st = gpt2_init_on(&m->gpt2, &s->gpt2, B, T, seed, train, dev);
    else if (s->family == MODEL_FAMILY_BERT) st = bert_init_on(&m->bert, &s->bert, B, T, seed, train, dev);
    else st = resnet_init_on(&m->resnet, &s->resnet, B, s->image_size, s->image_size, seed, train, dev);
    if (st != STATUS_OK) model_free(m);  /* the family inits zero their object first: a partial one frees */
    return st;
}

void model_free(model *m)
{
    if (m->spec.family == MODEL_FAMILY_GPT2) gpt2_free(&m->gpt2);
    else if (m->spec.family == MODEL_FAMILY_BERT) bert_free(&m->bert);
    else resnet_free(&m->resnet);
    memset(m, 0, sizeof *m);
}

status model_batch_init(model_batch *b, const model *m)
{
    memset(b, 0, sizeof *b);
    size_t B = (size_t)m->B;
    if (m->spec.family == MODEL_FAMILY_RESNET) {
        size_t hw = (size_t)m->spec.image_size * (size_t)m->spec.image_size;
        b->images = malloc(B * 3 * hw * sizeof *b->images);
        b->targets = malloc(B * sizeof *b->targets);
    } else {
        size_t bt = B * (size_t)m->T;
        b->ids = malloc(bt * sizeof *b->ids);
        b->targets = malloc(bt * sizeof *b->targets);
        if (m->spec.family == MODEL_FAMILY_BERT && (b->mask = malloc(bt * sizeof *b->mask)))
            for (size_t i = 0; i < bt; i++) b->mask[i] = 1;
    }
    bool ok = b->targets && (m->spec.family == MODEL_FAMILY_RESNET ? b->images != NULL
                             : b->ids && (m->spec.family != MODEL_FAMILY_BERT || b->mask));
    if (!ok) {
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
    if (m->spec.family == MODEL_FAMILY_RESNET) {
        size_t n = (size_t)m->B * 3 * (size_t)m->spec.image_size * (size_t)m->spec.image_size;
        for (size_t i = 0; i < n; i++) b->images[i] = rng_uniform(&r) - 0.5f;
        for (int i = 0; i < m->B; i++) b->targets[i] = (int32_t)rng_below(&r, (uint32_t)m->spec.resnet.num_classes);
        return;
    }
    bool bert = m->spec.family == MODEL_FAMILY_BERT;
    int V = bert ? m->spec.bert.vocab_size : m->spec.gpt2.vocab_size;
    int32_t lo = bert && V > 104 ? 104 : 0;  /* clear of BERT's special ids 0..103 */
    for (size_t i = 0; i < (size_t)m->B * (size_t)m->T; i++) {
        b->ids[i] = lo + (int32_t)rng_below(&r, (uint32_t)(V - lo));
        /* GPT-2: next-token targets everywhere; BERT: 15% of positions are MLM targets. */
        b->targets[i] = bert ? (rng_uniform(&r) < 0.15f ? b->ids[i] : -1) : (int32_t)rng_below(&r, (uint32_t)V);
    }
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
    if (m->spec.family == MODEL_FAMILY_GPT2) return gpt2_forward(&m->gpt2, b->ids, b->targets);
    if (m->spec.family == MODEL_FAMILY_BERT) return bert_forward(&m->bert, b->ids, NULL, b->mask, b->targets);
    return resnet_forward(&m->resnet, b->images, b->targets, training);
}

void model_backward(model *m)
{
    CHECK(m->last, "model_backward needs a model_forward first");
    if (m->spec.family == MODEL_FAMILY_GPT2) gpt2_backward(&m->gpt2, m->last->ids);
    else if (m->spec.family == MODEL_FAMILY_BERT) bert_backward(&m->bert);
    else resnet_backward(&m->resnet);
}

float model_loss(const model *m)
{
    if (m->spec.family == MODEL_FAMILY_GPT2) return m->gpt2.mean_loss;
    if (m->spec.family == MODEL_FAMILY_BERT) return m->bert.mean_loss;
    return m->resnet.mean_loss;
}

param_table *model_params(model *m)
{
    if (m->spec.family == MODEL_FAMILY_GPT2) return &m->gpt2.pt;
    if (m->spec.family == MODEL_FAMILY_BERT) return &m->bert.pt;
    return &m->resnet.pt;
}

param_buffers *model_device_buffers(model *m)
{
    if (m->spec.family == MODEL_FAMILY_GPT2 && device_is_gpu(m->gpt2.dev)) return &m->gpt2.w;
    if (m->spec.family == MODEL_FAMILY_BERT && device_is_gpu(m->bert.dev)) return &m->bert.w;
    if (m->spec.family == MODEL_FAMILY_RESNET && device_is_gpu(m->resnet.dev)) return &m->resnet.w;
    return model_buffers(m);
}

void model_set_loss_scale(model *m, float scale)
{
    if (m->spec.family == MODEL_FAMILY_GPT2) m->gpt2.loss_scale = scale;
    else if (m->spec.family == MODEL_FAMILY_BERT) m->bert.loss_scale = scale;
    else m->resnet.loss_scale = scale;
}

param_buffers *model_buffers(model *m)
{
    if (m->spec.family == MODEL_FAMILY_GPT2) return &m->gpt2.pb;
    if (m->spec.family == MODEL_FAMILY_BERT) return &m->bert.pb;
    return &m->resnet.pb;
}

const param_table *model_state_table(const model *m)
{
    return m->spec.family == MODEL_FAMILY_RESNET ? &m->resnet.bt : NULL;
}

float *model_state(model *m)
{
    return m->spec.family == MODEL_FAMILY_RESNET ? m->resnet.stats : NULL;
}

double model_flops_per_step(const model *m)
{
    if (m->spec.family == MODEL_FAMILY_GPT2) return gpt2_flops_per_token(&m->gpt2) * m->B * m->T;
    if (m->spec.family == MODEL_FAMILY_BERT) return bert_flops_per_token(&m->bert) * m->B * m->T;
    return resnet_flops_per_image(&m->resnet) * m->B;
}

size_t model_activation_bytes(const model *m)
{
    size_t floats = m->spec.family == MODEL_FAMILY_GPT2   ? m->gpt2.act_floats + m->gpt2.grad_floats
                    : m->spec.family == MODEL_FAMILY_BERT ? m->bert.act_floats + m->bert.grad_floats
                                                          : m->resnet.act_floats + m->resnet.grad_floats;
    size_t plans = m->spec.family == MODEL_FAMILY_RESNET ? m->resnet.plan_bytes : 0;  /* blocked weights, masks */
    return floats * sizeof(float) + plans;
}

const char *model_unit(const model *m)
{
    return m->spec.family == MODEL_FAMILY_GPT2 ? "tok" : m->spec.family == MODEL_FAMILY_BERT ? "seq" : "img";
}

double model_units_per_step(const model *m)
{
    return m->spec.family == MODEL_FAMILY_GPT2 ? (double)m->B * m->T : (double)m->B;
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
    m->gpt2.hook = h, m->bert.hook = h, m->resnet.hook = h;
}

const float *model_class_logits(const model *m, int *num_classes)
{
    if (m->spec.family != MODEL_FAMILY_RESNET) return NULL;
    *num_classes = m->spec.resnet.num_classes;
    return m->resnet.acts.logits;
}

int model_vocab_size(const model_spec *s)
{
    return s->family == MODEL_FAMILY_GPT2 ? s->gpt2.vocab_size : s->family == MODEL_FAMILY_BERT ? s->bert.vocab_size : 0;
}

int model_padded_vocab_size(const model_spec *s)
{
    return s->family == MODEL_FAMILY_GPT2 ? s->gpt2.padded_vocab_size : model_vocab_size(s);
}

int model_num_classes(const model_spec *s)
{
    return s->family == MODEL_FAMILY_RESNET ? s->resnet.num_classes : 0;
}

const gpt2_config *model_gpt2_config(const model_spec *s)
{
    return s->family == MODEL_FAMILY_GPT2 ? &s->gpt2 : NULL;
}
