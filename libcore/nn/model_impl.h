/* model_impl — the table each model family fills (model_gpt2.c, model_bert.c,
 * model_resnet.c, model_mlp.c) and model.c dispatches through; private to libcore/nn.
 *
 * The one design decision: model.c never branches on the family. What differs per
 * family — resolving and checking its [model] keys, its batch layout, the forward and
 * backward calls, its FLOP count and throughput unit — is a function or a constant
 * here; what every family shares (table, buffers, device, hook, loss scale, loss) is
 * read through model.base (model_base.h) without a call. */
#ifndef NEBULA_MODEL_IMPL_H
#define NEBULA_MODEL_IMPL_H

#include "base/rng.h"
#include "model.h"

typedef struct model_family_ops {
    const char *name;          /* "GPT-2": in messages */
    const char *prefix;        /* model.name starts with this ("gpt2", "bert", "resnet", "mlp") */
    const char *unit;          /* what throughput counts: "tok", "seq" or "img" */
    bool sequences;            /* the batch is (B, T) token ids; false: images, T = 0 */
    bool unit_per_token;       /* a batch holds B * T units; false: B */
    const char *const *keys;   /* the override keys of [model] it reads, NULL-terminated */
    const char *keys_text;     /* the same, comma-separated, for messages */

    /* The preset s->name with the overrides of cfg, checked (s->name is set). */
    status (*spec_resolve)(model_spec *s, const config *cfg);
    /* The family's rules for a batch shape; B >= 1 is checked before. */
    status (*spec_check_batch)(const model_spec *s, int B, int T, const char *batch_key, const char *seq_key);
    /* model_spec_print's line. */
    void (*spec_print)(const model_spec *s, FILE *f);

    /* Builds the family object for m->spec, m->B, m->T and points m->base at its base. */
    status (*init)(model *m, uint64_t seed, bool train, const device *dev);
    void (*free)(model *m);
    /* Allocates the family's arrays of a batch (b is zeroed); false when out of memory. */
    bool (*batch_alloc)(model_batch *b, const model *m);
    void (*batch_synthetic)(model_batch *b, const model *m, rng *r);
    status (*forward)(model *m, const model_batch *b, bool training);
    void (*backward)(model *m, const model_batch *b);
    /* The next forwards take B samples, 1 <= B <= m->B (model_set_micro_batch); NULL when
     * the family cannot (batch norm's statistics depend on the micro-batch). CPU only. */
    void (*set_batch)(model *m, int B);

    double (*flops_per_step)(const model *m);
    size_t (*activation_bytes)(const model *m);
    /* What the outputs index: the real and the padded vocabulary (0 for a classifier)
     * and the classes (0 for a language model). */
    void (*spec_outputs)(const model_spec *s, int *vocab, int *padded_vocab, int *classes);
    /* A classifier's logits of the last forward, (B, classes); NULL for the others. */
    const float *(*class_logits)(const model *m);
    /* Non-trainable state saved with the model; both NULL when the family has none. */
    const param_table *(*state_table)(const model *m);
    float *(*state)(model *m);
    /* A second buffer of the state's size (NULL without state): the trainer's copy of the
     * state before a step, put back when the step is skipped. */
    float *(*state_saved)(model *m);
    /* Transformers: the attention's layers and heads, and per (layer, head) the mean over
     * the last forward's queries of the attention entropy (nats) and largest weight
     * (attn_stats.c); both NULL for a family without attention. */
    void (*attention_shape)(const model_spec *s, int *L, int *NH);
    void (*attention_stats)(const model *m, double *entropy, double *maxw);
} model_family_ops;

extern const model_family_ops model_family_gpt2;
extern const model_family_ops model_family_bert;
extern const model_family_ops model_family_resnet;
extern const model_family_ops model_family_mlp;

/* The value of override key `key` in cfg, or `preset` when it is 0. */
int model_pick(const config *cfg, const char *key, int preset);
/* 1 <= T <= ctx, the positions of the sequence model; STATUS_INPUT naming seq_key. */
status model_check_seq_len(const model_spec *s, int T, int ctx, const char *seq_key);

/* attn_stats.c: per head h, ADDS over the valid queries of (B, T) the entropy, the
 * largest weight and the count nq[h] (kernels/cpu/attention.h's layout and lse). */
void attn_head_stats(double *entropy, double *maxw, double *nq, const float *q, const float *k, int ld,
                     const float *lse, const int32_t *key_mask, int B, int T, int C, int NH, int causal);

#endif
