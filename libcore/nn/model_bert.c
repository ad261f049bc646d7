/* model_bert — the BERT family (masked LM) behind model.h's table (model_impl.h): its
 * [model] keys, its batch of (B, T) token ids with an attention mask and MLM targets,
 * and the calls into bert.h. Throughput counts sequences. */
#include <stdlib.h>

#include "model_impl.h"

static const char *const model_bert_keys[] = {
    "model.n_layer", "model.n_head", "model.n_embd", "model.max_seq_len", "model.vocab_size", NULL,
};

static status model_bert_resolve(model_spec *s, const config *cfg)
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

static status model_bert_check_batch(const model_spec *s, int B, int T, const char *batch_key, const char *seq_key)
{
    (void)B;
    (void)batch_key;
    return model_check_seq_len(s, T, s->bert.max_position, seq_key);
}

static void model_bert_print(const model_spec *s, FILE *f)
{
    const bert_config *b = &s->bert;
    fprintf(f, "%s (BERT, masked LM): n_layer %d, n_head %d, n_embd %d (FFN %d), max_seq_len %d, vocab_size %d\n",
            s->name, b->num_layers, b->num_heads, b->channels, b->intermediate, b->max_position, b->vocab_size);
}

static status model_bert_init(model *m, uint64_t seed, bool train, const device *dev)
{
    m->base = &m->bert.base;
    return bert_init_parallel(&m->bert, &m->spec.bert, m->B, m->T, seed, train, dev, &m->tp, &m->stage);
}

static void model_bert_free(model *m) { bert_free(&m->bert); }

/* ids, targets and the attention mask, all 1 (no padding). */
static bool model_bert_batch_alloc(model_batch *b, const model *m)
{
    size_t bt = (size_t)m->B * (size_t)m->T;
    b->ids = malloc(bt * sizeof *b->ids);
    b->targets = malloc(bt * sizeof *b->targets);
    if ((b->mask = malloc(bt * sizeof *b->mask)))
        for (size_t i = 0; i < bt; i++) b->mask[i] = 1;
    return b->ids && b->targets && b->mask;
}

/* Uniform ids clear of the special ids 0..103 (when V > 104), then per position a 15%
 * draw that makes the id its own MLM target. */
static void model_bert_batch_synthetic(model_batch *b, const model *m, rng *r)
{
    int V = m->spec.bert.vocab_size;
    int32_t lo = V > 104 ? 104 : 0;
    for (size_t i = 0; i < (size_t)m->B * (size_t)m->T; i++) {
        b->ids[i] = lo + (int32_t)rng_below(r, (uint32_t)(V - lo));
        b->targets[i] = rng_uniform(r) < 0.15f ? b->ids[i] : -1;
    }
}

static status model_bert_forward(model *m, const model_batch *b, bool training)
{
    (void)training;
    return bert_forward(&m->bert, b->ids, NULL, b->mask, b->targets);
}

static void model_bert_backward(model *m, const model_batch *b)
{
    (void)b;  /* bert_backward reads the inputs its forward copied */
    bert_backward(&m->bert);
}

static void model_bert_set_batch(model *m, int B) { bert_set_batch(&m->bert, B); }

static double model_bert_flops(const model *m) { return bert_flops_per_token(&m->bert) * m->B * m->T; }

static size_t model_bert_activation_bytes(const model *m)
{
    return (m->bert.act_floats + m->bert.grad_floats) * sizeof(float);
}

static void model_bert_outputs(const model_spec *s, int *vocab, int *padded_vocab, int *classes)
{
    *vocab = *padded_vocab = s->bert.vocab_size, *classes = 0;
}

static void model_bert_attention_shape(const model_spec *s, int *L, int *NH)
{
    *L = s->bert.num_layers, *NH = s->bert.num_heads;
}

static void model_bert_attention_stats(const model *m, double *entropy, double *maxw)
{
    const bert *e = &m->bert;
    int L = e->cfg.num_layers, NH = e->cfg.num_heads, B = e->B, T = e->T, C = e->cfg.channels;
    const int32_t *mask = m->last ? m->last->mask : NULL;
    for (int l = 0; l < L; l++) {
        double nq[NH];
        for (int h = 0; h < NH; h++) entropy[l * NH + h] = maxw[l * NH + h] = nq[h] = 0;
        size_t at = (size_t)l * B * T * C;
        attn_head_stats(entropy + l * NH, maxw + l * NH, nq, e->acts.q + at, e->acts.k + at, C,
                        e->acts.att_lse + (size_t)l * B * NH * T, mask, B, T, C, NH, 0);
        for (int h = 0; h < NH; h++)
            if (nq[h] > 0) entropy[l * NH + h] /= nq[h], maxw[l * NH + h] /= nq[h];
    }
}

const model_family_ops model_family_bert = {
    .name = "BERT",
    .prefix = "bert",
    .unit = "seq",
    .sequences = true,
    .unit_per_token = false,
    .keys = model_bert_keys,
    .keys_text = "model.n_layer, model.n_head, model.n_embd, model.max_seq_len, model.vocab_size",
    .spec_resolve = model_bert_resolve,
    .spec_check_batch = model_bert_check_batch,
    .spec_print = model_bert_print,
    .init = model_bert_init,
    .free = model_bert_free,
    .batch_alloc = model_bert_batch_alloc,
    .batch_synthetic = model_bert_batch_synthetic,
    .forward = model_bert_forward,
    .backward = model_bert_backward,
    .set_batch = model_bert_set_batch,
    .flops_per_step = model_bert_flops,
    .activation_bytes = model_bert_activation_bytes,
    .spec_outputs = model_bert_outputs,
    .attention_shape = model_bert_attention_shape,
    .attention_stats = model_bert_attention_stats,
    /* no state besides the parameters: state_table and state stay NULL */
};
