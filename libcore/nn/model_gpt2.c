/* model_gpt2 — the GPT-2 family behind model.h's table (model_impl.h): its [model]
 * keys, its batch of (B, T) token ids with next-token targets, and the calls into
 * gpt2.h. Throughput counts tokens. */
#include <stdlib.h>

#include "model_impl.h"

#define MODEL_GPT2_VOCAB_ALIGN 128  /* GPT-2's embedding rows: V padded to a multiple of this (50257 -> 50304) */

static const char *const model_gpt2_keys[] = {
    "model.n_layer", "model.n_head", "model.n_embd", "model.max_seq_len", "model.vocab_size", NULL,
};

static status model_gpt2_resolve(model_spec *s, const config *cfg)
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

static status model_gpt2_check_batch(const model_spec *s, int B, int T, const char *batch_key, const char *seq_key)
{
    (void)B;
    (void)batch_key;
    return model_check_seq_len(s, T, s->gpt2.max_seq_len, seq_key);
}

static void model_gpt2_print(const model_spec *s, FILE *f)
{
    const gpt2_config *g = &s->gpt2;
    fprintf(f, "%s (GPT-2): n_layer %d, n_head %d, n_embd %d, max_seq_len %d, vocab_size %d (padded to %d)\n",
            s->name, g->num_layers, g->num_heads, g->channels, g->max_seq_len, g->vocab_size, g->padded_vocab_size);
}

static status model_gpt2_init(model *m, uint64_t seed, bool train, const device *dev)
{
    m->base = &m->gpt2.base;
    return gpt2_init_parallel(&m->gpt2, &m->spec.gpt2, m->B, m->T, seed, train, dev, &m->tp, &m->stage);
}

static void model_gpt2_free(model *m) { gpt2_free(&m->gpt2); }

static bool model_gpt2_batch_alloc(model_batch *b, const model *m)
{
    size_t bt = (size_t)m->B * (size_t)m->T;
    b->ids = malloc(bt * sizeof *b->ids);
    b->targets = malloc(bt * sizeof *b->targets);
    return b->ids && b->targets;
}

/* Uniform ids and uniform next-token targets, drawn in that order per position. */
static void model_gpt2_batch_synthetic(model_batch *b, const model *m, rng *r)
{
    uint32_t V = (uint32_t)m->spec.gpt2.vocab_size;
    for (size_t i = 0; i < (size_t)m->B * (size_t)m->T; i++) {
        b->ids[i] = (int32_t)rng_below(r, V);
        b->targets[i] = (int32_t)rng_below(r, V);
    }
}

static status model_gpt2_forward(model *m, const model_batch *b, bool training)
{
    (void)training;
    return gpt2_forward(&m->gpt2, b->ids, b->targets);
}

static void model_gpt2_backward(model *m, const model_batch *b) { gpt2_backward(&m->gpt2, b->ids); }

static void model_gpt2_set_batch(model *m, int B) { gpt2_set_batch(&m->gpt2, B); }

static double model_gpt2_flops(const model *m) { return gpt2_flops_per_token(&m->gpt2) * m->B * m->T; }

static size_t model_gpt2_activation_bytes(const model *m)
{
    return (m->gpt2.act_floats + m->gpt2.grad_floats) * sizeof(float);
}

static void model_gpt2_outputs(const model_spec *s, int *vocab, int *padded_vocab, int *classes)
{
    *vocab = s->gpt2.vocab_size, *padded_vocab = s->gpt2.padded_vocab_size, *classes = 0;
}

static void model_gpt2_attention_shape(const model_spec *s, int *L, int *NH)
{
    *L = s->gpt2.num_layers, *NH = s->gpt2.num_heads;
}

static void model_gpt2_attention_stats(const model *m, double *entropy, double *maxw)
{
    const gpt2 *g = &m->gpt2;
    int L = g->cfg.num_layers, NH = g->cfg.num_heads, B = g->B, T = g->T, C = g->cfg.channels;
    CHECK(g->tp.size == 1, "attention statistics of a tensor-parallel shard (model_attention_stats refuses them)");
    for (int l = 0; l < L; l++) {
        double nq[NH];
        for (int h = 0; h < NH; h++) entropy[l * NH + h] = maxw[l * NH + h] = nq[h] = 0;
        const float *qkv = g->acts.qkv + (size_t)l * B * T * 3 * C;
        attn_head_stats(entropy + l * NH, maxw + l * NH, nq, qkv, qkv + C, 3 * C,
                        g->acts.att_lse + (size_t)l * B * NH * T, NULL, B, T, C, NH, 1);
        for (int h = 0; h < NH; h++)
            if (nq[h] > 0) entropy[l * NH + h] /= nq[h], maxw[l * NH + h] /= nq[h];
    }
}

const model_family_ops model_family_gpt2 = {
    .name = "GPT-2",
    .prefix = "gpt2",
    .unit = "tok",
    .sequences = true,
    .unit_per_token = true,
    .keys = model_gpt2_keys,
    .keys_text = "model.n_layer, model.n_head, model.n_embd, model.max_seq_len, model.vocab_size",
    .spec_resolve = model_gpt2_resolve,
    .spec_check_batch = model_gpt2_check_batch,
    .spec_print = model_gpt2_print,
    .init = model_gpt2_init,
    .free = model_gpt2_free,
    .batch_alloc = model_gpt2_batch_alloc,
    .batch_synthetic = model_gpt2_batch_synthetic,
    .forward = model_gpt2_forward,
    .backward = model_gpt2_backward,
    .set_batch = model_gpt2_set_batch,
    .flops_per_step = model_gpt2_flops,
    .activation_bytes = model_gpt2_activation_bytes,
    .spec_outputs = model_gpt2_outputs,
    .attention_shape = model_gpt2_attention_shape,
    .attention_stats = model_gpt2_attention_stats,
    /* no state besides the parameters: state_table and state stay NULL */
};
