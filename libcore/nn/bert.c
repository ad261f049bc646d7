/* bert — see bert.h. The forward and backward are flat lists of layer calls in the
 * order of HF modeling_bert (BertEmbeddings, BertLayer x L, BertLMPredictionHead);
 * every buffer is sized in bert_init. */
#include "bert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cpu/embed.h"
#include "cpu/xent.h"

#define BERT_LN_EPS 1e-12f  /* BertConfig.layer_norm_eps */

typedef struct bert_named {
    const char *name;
    bert_config cfg;
} bert_named;

/* Google's released checkpoints (uncased WordPiece vocabulary, 512 positions, 2 types). */
static const bert_named bert_configs[] = {
    { "bert-tiny", { 512, 2, 30522, 2, 2, 128, 512, 0 } },
    { "bert-base", { 512, 2, 30522, 12, 12, 768, 3072, 0 } },
    { "bert-large", { 512, 2, 30522, 24, 16, 1024, 4096, 0 } },
};

status bert_config_named(bert_config *cfg, const char *name)
{
    for (size_t i = 0; i < sizeof bert_configs / sizeof bert_configs[0]; i++)
        if (!strcmp(name, bert_configs[i].name)) { *cfg = bert_configs[i].cfg; return STATUS_OK; }
    log_error0("unknown model '%s'; BERT models: bert-tiny, bert-base, bert-large", name);
    return STATUS_INPUT;
}

status bert_config_check(const bert_config *c)
{
    if (c->num_layers < 1 || c->num_heads < 1 || c->channels < 1 || c->intermediate < 1 || c->vocab_size < 1 ||
        c->max_position < 1 || c->type_vocab_size < 1) {
        log_error0("model.n_layer = %d, model.n_head = %d, model.n_embd = %d, intermediate = %d, model.vocab_size = "
                   "%d, model.max_seq_len = %d and type_vocab_size = %d must all be positive", c->num_layers,
                   c->num_heads, c->channels, c->intermediate, c->vocab_size, c->max_position, c->type_vocab_size);
        return STATUS_INPUT;
    }
    if (c->channels % c->num_heads != 0) {
        log_error0("model.n_head = %d does not divide model.n_embd = %d", c->num_heads, c->channels);
        return STATUS_INPUT;
    }
    if (c->max_position > BERT_MAX_POSITION) {
        log_error0("model.max_seq_len = %d exceeds BERT's %d position embeddings", c->max_position,
                   BERT_MAX_POSITION);
        return STATUS_INPUT;
    }
    if (c->pad_token_id < 0 || c->pad_token_id >= c->vocab_size) {
        log_error0("pad_token_id = %d is outside the vocabulary 0..%d (model.vocab_size = %d)", c->pad_token_id,
                   c->vocab_size - 1, c->vocab_size);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static bool bert_is_special(int32_t id, const bert_special_tokens *s)
{
    return id == s->pad || id == s->unk || id == s->cls || id == s->sep || id == s->mask;
}

int bert_mask_tokens(int32_t *masked_ids, int32_t *targets, const int32_t *input_ids, const int32_t *attention_mask,
                     int B, int T, int V, const bert_special_tokens *special, uint64_t seed, uint32_t rank,
                     uint64_t step)
{
    CHECK(V > 0 && special->mask >= 0 && special->mask < V, "bert_mask_tokens needs V > 0 and [MASK] inside it");
    int selected = 0;
    for (int n = 0; n < B * T; n++) {
        int32_t id = input_ids[n];
        targets[n] = XENT_IGNORE;
        masked_ids[n] = id;
        if ((attention_mask && attention_mask[n] == 0) || bert_is_special(id, special)) continue;
        rng r;  /* block n of the step's stream: outputs 4n (select), 4n+1 (action), 4n+2.. (id) */
        rng_init(&r, seed, rank, RNG_PURPOSE_MASK, step);
        rng_skip(&r, 4 * (uint64_t)n);
        if (rng_uniform(&r) >= BERT_MASK_PROB) continue;
        float action = rng_uniform(&r);
        targets[n] = id;
        selected++;
        if (action < BERT_MASK_KEEP_MASK) masked_ids[n] = special->mask;
        else if (action < BERT_MASK_KEEP_MASK + BERT_MASK_KEEP_RANDOM) masked_ids[n] = (int32_t)rng_below(&r, (uint32_t)V);
    }
    return selected;
}

#define BERT_NO_VIEW SIZE_MAX  /* a view of a tensor another pipeline stage holds */

/* Appends tensor number `index` of the whole model (its init stream) to the table,
 * split over the tp ranks along `dim` (-1: whole), when `here`; returns its offset (the
 * view field's value), BERT_NO_VIEW when not here. */
static size_t bert_add(bert *m, bool here, int index, const char *name, int layer, int ndim, int d0, int d1, int dim)
{
    if (!here) return BERT_NO_VIEW;
    bool decay = param_decay_default(ndim);
    int i = dim < 0 ? param_add(&m->pt, name, layer, decay, ndim, (size_t)d0, (size_t)d1, 0, 0)
                    : param_add_split(&m->pt, name, layer, decay, ndim, (size_t)d0, (size_t)d1, dim, 1);
    m->init_index[i] = index;
    return m->pt.entries[i].offset;
}

/* Parameter table in BertForMaskedLM's state-dict order, with its names, and the named
 * views: each line names a tensor, its shape and the view field that holds its offset
 * (as gpt2_build_table). STATUS_NOMEM when the per-block views cannot be allocated. */
static status bert_build_table(bert *m)
{
    const bert_config *c = &m->cfg;
    int C = c->channels, IC = c->intermediate, L = c->num_layers, idx = 0;
    bool first = m->l0 == 0, last = m->l1 == L;
    bert_views *v = &m->views;
    char n[PARAM_NAME_MAX];
    if (!(v->layer = malloc((size_t)L * sizeof *v->layer)) ||
        !(m->init_index = malloc((size_t)(10 + BERT_LAYER_TENSORS * L) * sizeof *m->init_index)))
        return STATUS_NOMEM;
    param_table_init(&m->pt);
    param_table_set_tp(&m->pt, m->tp.size, m->tp.rank);
    /* tp (the last argument: the split dim, -1 whole): word_embeddings and the decoder's
     * bias by vocabulary rows; query, key, value and intermediate.dense (nn.Linear's
     * (out, in)) by output rows with their biases; the two row-parallel denses by input
     * columns. pp: the embeddings on the first stage, the head on the last, the word
     * embeddings on both (the tied decoder) */
    v->word_emb = bert_add(m, first || last, idx++, "embeddings.word_embeddings.weight", 0, 2, c->vocab_size, C, 0);
    v->pos_emb = bert_add(m, first, idx++, "embeddings.position_embeddings.weight", 0, 2, c->max_position, C, -1);
    v->type_emb = bert_add(m, first, idx++, "embeddings.token_type_embeddings.weight", 0, 2, c->type_vocab_size, C, -1);
    v->emb_ln_w = bert_add(m, first, idx++, "embeddings.LayerNorm.weight", 0, 1, C, 0, -1);
    v->emb_ln_b = bert_add(m, first, idx++, "embeddings.LayerNorm.bias", 0, 1, C, 0, -1);
    for (int l = 0; l < L; l++) {
        bert_layer_views *h = &v->layer[l];
        bool here = l >= m->l0 && l < m->l1;
#define PL(field, suffix, nd, a, b, dim)                              \
    snprintf(n, sizeof n, "encoder.layer.%d.%s", l, suffix);          \
    h->field = bert_add(m, here, idx++, n, l + 1, nd, a, b, dim)
        PL(q_w, "attention.self.query.weight", 2, C, C, 0);
        PL(q_b, "attention.self.query.bias", 1, C, 0, 0);
        PL(k_w, "attention.self.key.weight", 2, C, C, 0);
        PL(k_b, "attention.self.key.bias", 1, C, 0, 0);
        PL(v_w, "attention.self.value.weight", 2, C, C, 0);
        PL(v_b, "attention.self.value.bias", 1, C, 0, 0);
        PL(attn_out_w, "attention.output.dense.weight", 2, C, C, 1);
        PL(attn_out_b, "attention.output.dense.bias", 1, C, 0, -1);
        PL(attn_ln_w, "attention.output.LayerNorm.weight", 1, C, 0, -1);
        PL(attn_ln_b, "attention.output.LayerNorm.bias", 1, C, 0, -1);
        PL(inter_w, "intermediate.dense.weight", 2, IC, C, 0);
        PL(inter_b, "intermediate.dense.bias", 1, IC, 0, 0);
        PL(out_w, "output.dense.weight", 2, C, IC, 1);
        PL(out_b, "output.dense.bias", 1, C, 0, -1);
        PL(out_ln_w, "output.LayerNorm.weight", 1, C, 0, -1);
        PL(out_ln_b, "output.LayerNorm.bias", 1, C, 0, -1);
#undef PL
    }
    v->cls_b = bert_add(m, last, idx++, "cls.predictions.bias", L + 1, 1, c->vocab_size, 0, 0);
    v->tr_w = bert_add(m, last, idx++, "cls.predictions.transform.dense.weight", L + 1, 2, C, C, -1);
    v->tr_b = bert_add(m, last, idx++, "cls.predictions.transform.dense.bias", L + 1, 1, C, 0, -1);
    v->tr_ln_w = bert_add(m, last, idx++, "cls.predictions.transform.LayerNorm.weight", L + 1, 1, C, 0, -1);
    v->tr_ln_b = bert_add(m, last, idx++, "cls.predictions.transform.LayerNorm.bias", L + 1, 1, C, 0, -1);
    return STATUS_OK;
}

/* Every tensor of the table named by exactly one view field. */
_Static_assert(sizeof(bert_layer_views) == BERT_LAYER_TENSORS * sizeof(size_t),
               "bert_layer_views holds one size_t offset per block tensor");
static status bert_check_views(const bert *m)
{
    const bert_views *v = &m->views;
    const size_t top[] = { v->word_emb, v->pos_emb, v->type_emb, v->emb_ln_w, v->emb_ln_b,
                           v->cls_b,    v->tr_w,    v->tr_b,     v->tr_ln_w,  v->tr_ln_b };
    size_t L = (size_t)m->cfg.num_layers, n = 0, ntop = sizeof top / sizeof top[0];
    size_t *all = malloc((ntop + L * BERT_LAYER_TENSORS) * sizeof *all);
    if (!all) return STATUS_NOMEM;
    for (size_t i = 0; i < ntop; i++)
        if (top[i] != BERT_NO_VIEW) all[n++] = top[i];
    for (size_t l = (size_t)m->l0; l < (size_t)m->l1; l++, n += BERT_LAYER_TENSORS)
        memcpy(all + n, &v->layer[l], sizeof v->layer[l]);
    param_views_check(&m->pt, all, n, "bert");
    free(all);
    return STATUS_OK;
}

/* Each matrix drawn whole from its own stream (its index in the whole model's table: the
 * init depends on neither the tp size nor the pipeline stage) and this rank's shard
 * sliced out of it. */
static status bert_init_weights(bert *m, uint64_t seed)
{
    float *p = m->pb.params, *full = NULL;
    for (int i = 0; i < m->pt.count; i++) {
        const param_entry *e = &m->pt.entries[i];
        float *w = p + e->offset;
        if (strstr(e->name, "LayerNorm.weight")) { for (size_t k = 0; k < e->count; k++) w[k] = 1.0f; continue; }
        if (e->ndim < 2) { memset(w, 0, e->count * sizeof *w); continue; }  /* biases, LayerNorm biases */
        size_t n = param_entry_full_count(&m->pt, e);
        float *dst = w;
        if (e->tp_dim >= 0 && m->tp.size > 1) {
            free(full);
            if (!(full = malloc(n * sizeof *full))) return STATUS_NOMEM;
            dst = full;
        }
        rng r;  /* one stream per tensor: the init does not depend on table order */
        rng_init(&r, seed, 0, RNG_PURPOSE_INIT, (uint64_t)m->init_index[i]);
        for (size_t k = 0; k < n; k++) dst[k] = (float)(0.02 * rng_normal(&r));
        /* nn.Embedding(padding_idx=pad_token_id): HF zeroes that row at init. */
        if ((size_t)e->offset == m->views.word_emb)
            memset(dst + (size_t)m->cfg.pad_token_id * m->cfg.channels, 0, (size_t)m->cfg.channels * sizeof(float));
        if (dst != w) param_tp_copy(&m->pt, e, w, full, false);
    }
    free(full);
    return STATUS_OK;
}

/* One set of activations for the stage's blocks (the embeddings' only on the first
 * stage, the head's only on the last). */
static void bert_layout_grads(void *owner, float *base, size_t *used);

static void bert_layout_slot(bert *m, float *base, size_t *used)
{
    size_t L = (size_t)(m->l1 - m->l0), BT = (size_t)m->B * (size_t)m->T, C = (size_t)m->cfg.channels;
    size_t tp = (size_t)m->tp.size;  /* this rank's heads, columns, FFN units and vocabulary */
    size_t NH = (size_t)m->cfg.num_heads / tp, V = (size_t)m->cfg.vocab_size / tp, IC = (size_t)m->cfg.intermediate / tp;
    size_t Cl = C / tp, first = m->l0 == 0, head = m->l1 == m->cfg.num_layers;
    bert_acts *a = &m->acts;
    a->emb = param_carve(base, used, first * BT * C);
    a->emb_ln = param_carve(base, used, BT * C);
    a->emb_mean = param_carve(base, used, first * BT);
    a->emb_rstd = param_carve(base, used, first * BT);
    a->q = param_carve(base, used, L * BT * Cl);
    a->k = param_carve(base, used, L * BT * Cl);
    a->v = param_carve(base, used, L * BT * Cl);
    a->atty = param_carve(base, used, L * BT * Cl);
    a->att_lse = param_carve(base, used, L * BT * NH);
    a->attproj = param_carve(base, used, L * BT * C);
    a->res1 = param_carve(base, used, L * BT * C);
    a->ln1 = param_carve(base, used, L * BT * C);
    a->ln1_mean = param_carve(base, used, L * BT);
    a->ln1_rstd = param_carve(base, used, L * BT);
    a->fch = param_carve(base, used, L * BT * IC);
    a->fch_gelu = param_carve(base, used, L * BT * IC);
    a->fcproj = param_carve(base, used, L * BT * C);
    a->res2 = param_carve(base, used, L * BT * C);
    a->ln2 = param_carve(base, used, L * BT * C);
    a->ln2_mean = param_carve(base, used, L * BT);
    a->ln2_rstd = param_carve(base, used, L * BT);
    a->head_x = param_carve(base, used, head * BT * C);
    a->tr = param_carve(base, used, head * BT * C);
    a->tr_gelu = param_carve(base, used, head * BT * C);
    a->tr_ln = param_carve(base, used, head * BT * C);
    a->tr_mean = param_carve(base, used, head * BT);
    a->tr_rstd = param_carve(base, used, head * BT);
    a->logits = param_carve(base, used, head * BT * V);
    a->losses = param_carve(base, used, head * BT);
    a->xent_lse = param_carve(base, used, head * BT);
    a->key_mask = param_carve(base, used, BT);
    a->xent_part = tp > 1 ? (double *)param_carve(base, used, head * 4 * BT) : NULL;  /* 2 BT doubles, 64-byte aligned */
}

/* `slots` sets, one after the other; acts views set 0. */
static void bert_layout_acts(void *owner, float *base, size_t *used)
{
    bert *m = owner;
    size_t start = *used;
    bert_layout_slot(m, base, used);
    m->slot_floats = *used - start;
    *used += (size_t)(m->slots - 1) * m->slot_floats;
}

/* The host id arrays of set k (the GPU keeps its own device copies of the ids). */
static void bert_point_slot(bert *m, int k)
{
    size_t bt = (size_t)m->B * (size_t)m->T;
    int32_t *ids = m->slot_ids + (size_t)k * 4 * bt;
    if (!device_is_gpu(m->dev)) m->input_ids = ids, m->type_ids = ids + bt;
    m->head_pos = ids + 2 * bt;
    m->head_tgt = ids + 3 * bt;
}

void bert_set_slot(bert *m, int k)
{
    CHECK(k >= 0 && k < m->slots, "bert_set_slot: activation set out of range");
    m->slot_state[m->slot] = (bert_slot){ m->head_rows, m->head_targeted, m->mean_loss };
    size_t used = (size_t)k * m->slot_floats;
    bert_layout_slot(m, m->act_memory, &used);
    bert_point_slot(m, k);
    m->slot = k;
    m->head_rows = m->slot_state[k].head_rows;
    m->head_targeted = m->slot_state[k].head_targeted;
    m->mean_loss = m->slot_state[k].mean_loss;
}

void bert_set_batch(bert *m, int B)
{
    CHECK(B >= 1 && B <= m->capacity && !device_is_gpu(m->dev), "bert_set_batch: 1 <= B <= capacity, on the CPU");
    if (B == m->B) return;
    m->B = B;
    size_t used = (size_t)m->slot * m->slot_floats;
    bert_layout_slot(m, m->act_memory, &used);
    bert_point_slot(m, m->slot);
    used = 0;
    if (m->grad_memory) bert_layout_grads(m, m->grad_memory, &used);
}

float *bert_stage_in(bert *m) { return m->acts.emb_ln; }

float *bert_stage_out(bert *m)
{
    return m->acts.ln2 + (size_t)(m->l1 - m->l0 - 1) * (size_t)m->B * (size_t)m->T * (size_t)m->cfg.channels;
}

float *bert_stage_grad(bert *m) { return m->gs.dresidual; }

static void bert_layout_grads(void *owner, float *base, size_t *used)
{
    bert *m = owner;
    size_t tp = (size_t)m->tp.size, BT = (size_t)m->B * (size_t)m->T, C = (size_t)m->cfg.channels;
    size_t V = (size_t)m->cfg.vocab_size / tp, IC = (size_t)m->cfg.intermediate / tp;
    bert_grad_scratch *g = &m->gs;
    g->dresidual = param_carve(base, used, BT * C);
    g->dbtc = param_carve(base, used, BT * C);
    g->dbtc2 = param_carve(base, used, BT * C);
    g->dq = param_carve(base, used, BT * C);
    g->dk = param_carve(base, used, BT * C);
    g->dv = param_carve(base, used, BT * C);
    g->dbti = param_carve(base, used, BT * IC);
    g->dbti2 = param_carve(base, used, BT * IC);
    g->dlogits = param_carve(base, used, (m->l1 == m->cfg.num_layers) * BT * V);
    g->dlosses = param_carve(base, used, BT);
    g->pad_row = param_carve(base, used, C);
}

static bool bert_on_gpu(const bert *m) { return device_is_gpu(m->dev); }
/* The buffers the kernels read and write: host on the CPU, device copies on a GPU. */
static float *bert_params(const bert *m) { return bert_on_gpu(m) ? m->w.params : m->pb.params; }
static float *bert_grads(const bert *m) { return bert_on_gpu(m) ? m->w.grads : m->pb.grads; }

/* Device copies of the buffers and the id arrays; host staging for the per-batch uploads. */
static status bert_init_device(bert *m, bool train)
{
    const device *d = m->dev;
    size_t bt = (size_t)m->B * (size_t)m->T;
    /* the id arrays first: from here on bert_free treats them as device memory */
    int32_t *pos = m->pos_ids;
    m->input_ids = m->type_ids = NULL;  /* the host ones are slot_ids' */
    m->pos_ids = device_alloc(d, bt * sizeof(int32_t), "positions");
    if (m->pos_ids) device_upload(d, m->pos_ids, pos, bt * sizeof(int32_t));
    free(pos);
    if (!m->pos_ids || !(m->input_ids = device_alloc(d, bt * sizeof(int32_t), "input ids")) ||
        !(m->type_ids = device_alloc(d, bt * sizeof(int32_t), "token type ids")) ||
        !(m->dev_head_pos = device_alloc(d, bt * sizeof(int32_t), "MLM head positions")) ||
        !(m->dev_head_tgt = device_alloc(d, bt * sizeof(int32_t), "MLM head targets")) ||
        !(m->stage_ids = malloc(2 * bt * sizeof(int32_t))) || !(m->stage = malloc(2 * bt * sizeof(float))))
        return STATUS_NOMEM;
    return device_buffers_init(d, &m->w, &m->pb, train);
}

status bert_init(bert *m, const bert_config *cfg, int B, int T, uint64_t seed, bool train)
{
    return bert_init_on(m, cfg, B, T, seed, train, NULL);
}

status bert_init_on(bert *m, const bert_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev)
{
    return bert_init_tp(m, cfg, B, T, seed, train, dev, NULL);
}

status bert_check_tp(const bert_config *c, int tp)
{
    if (tp < 1 || c->num_heads % tp != 0) {
        log_error0("parallel.tp = %d does not divide model.n_head = %d: tensor parallelism splits the attention "
                   "by whole heads (choose a divisor of %d)", tp, c->num_heads, c->num_heads);
        return STATUS_INPUT;
    }
    if (c->vocab_size % tp != 0) {
        log_error0("parallel.tp = %d does not divide model.vocab_size = %d: the word embeddings and the MLM decoder "
                   "are split by whole rows (a divisor of %d, or a vocabulary padded to a multiple of %d)", tp,
                   c->vocab_size, c->vocab_size, tp);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status bert_table_whole(const bert_config *cfg, int tp_size, int tp_rank, param_table *out)
{
    bert b;
    memset(&b, 0, sizeof b);
    b.cfg = *cfg;
    b.tp = (nn_tp){ .size = tp_size, .rank = tp_rank };
    b.l0 = 0, b.l1 = cfg->num_layers;
    status st = bert_build_table(&b);
    free(b.views.layer);
    free(b.init_index);
    if (st != STATUS_OK) {
        param_table_free(&b.pt);
        return st;
    }
    *out = b.pt;
    return STATUS_OK;
}

status bert_init_tp(bert *m, const bert_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev,
                    const nn_tp *tp)
{
    return bert_init_parallel(m, cfg, B, T, seed, train, dev, tp, NULL);
}

status bert_init_parallel(bert *m, const bert_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev,
                          const nn_tp *tp, const nn_stage *stage)
{
    memset(m, 0, sizeof *m);
    m->tp = tp ? *tp : nn_tp_none();
    m->dev = dev;
    m->ops = dev ? dev->ops : &nn_ops_cpu;
    TRY(bert_config_check(cfg));
    nn_stage st = stage ? *stage : nn_stage_whole();
    if (st.end == 0) st = (nn_stage){ .first = 0, .end = cfg->num_layers, .slots = st.slots };
    CHECK(st.first >= 0 && st.first < st.end && st.end <= cfg->num_layers && st.slots >= 1,
          "bert_init_parallel: a stage is a non-empty range of the blocks with at least one activation set");
    m->l0 = st.first, m->l1 = st.end, m->slots = st.slots;
    bool staged = m->l0 > 0 || m->l1 < cfg->num_layers;
    if ((m->tp.size > 1 || staged) && device_is_gpu(dev)) {
        log_error0("parallel.tp = %d, a pipeline stage of blocks %d..%d: tensor and pipeline parallelism run on the "
                   "CPU only so far (device.kind = cpu)", m->tp.size, m->l0, m->l1 - 1);
        return STATUS_USAGE;
    }
    if (m->tp.size > 1) TRY(bert_check_tp(cfg, m->tp.size));
    if (T < 1 || T > cfg->max_position) {
        log_error0("sequence length T = %d is outside 1..model.max_seq_len = %d", T, cfg->max_position);
        return STATUS_INPUT;
    }
    if (B < 1) {
        log_error0("batch size B = %d must be positive", B);
        return STATUS_INPUT;
    }
    m->cfg = *cfg;
    m->B = m->capacity = B;
    m->T = T;
    TRY(bert_build_table(m));
    TRY(bert_check_views(m));
    TRY(param_buffers_init(&m->pb, &m->pt, train && !bert_on_gpu(m)));
    TRY(bert_init_weights(m, seed));
    TRY(device_arena(dev, bert_layout_acts, m, &m->act_memory, &m->act_floats, "activations"));
    if (train) TRY(device_arena(dev, bert_layout_grads, m, &m->grad_memory, &m->grad_floats, "activation gradients"));
    size_t bt = (size_t)B * (size_t)T;
    m->pos_ids = malloc(bt * sizeof *m->pos_ids);
    m->slot_ids = malloc((size_t)m->slots * 4 * bt * sizeof *m->slot_ids);
    m->slot_state = calloc((size_t)m->slots, sizeof *m->slot_state);
    if (!m->pos_ids || !m->slot_ids || !m->slot_state) return STATUS_NOMEM;
    for (int k = 0; k < m->slots; k++) m->slot_state[k].mean_loss = -1;
    bert_point_slot(m, 0);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) m->pos_ids[b * T + t] = t;
    if (bert_on_gpu(m)) TRY(bert_init_device(m, train));
    m->mean_loss = -1;
    m->loss_scale = 1.0f;
    return STATUS_OK;
}

void bert_free(bert *m)
{
    device_free(m->dev, m->act_memory);
    device_free(m->dev, m->grad_memory);
    device_free(m->dev, m->pos_ids);  /* host memory on the CPU, device memory on a GPU */
    if (bert_on_gpu(m)) {             /* on the CPU: slot_ids' */
        device_free(m->dev, m->input_ids);
        device_free(m->dev, m->type_ids);
    }
    device_free(m->dev, m->dev_head_pos);
    device_free(m->dev, m->dev_head_tgt);
    device_buffers_free(m->dev, &m->w);
    free(m->stage_ids);
    free(m->stage);
    free(m->slot_ids);
    free(m->slot_state);
    free(m->init_index);
    param_buffers_free(&m->pb);
    param_table_free(&m->pt);
    free(m->views.layer);
    memset(m, 0, sizeof *m);
}

/* STATUS_INPUT naming the first position whose id, type, mask or target is out of range. */
static status bert_check_inputs(const bert *m, const int32_t *ids, const int32_t *types, const int32_t *mask,
                                const int32_t *targets)
{
    const bert_config *c = &m->cfg;
    for (int i = 0; i < m->B * m->T; i++) {
        const char *what = NULL, *also = "";
        int32_t val = 0, hi = 0;
        if (ids[i] < 0 || ids[i] >= c->vocab_size) what = "input_ids", val = ids[i], hi = c->vocab_size - 1;
        else if (types && (types[i] < 0 || types[i] >= c->type_vocab_size))
            what = "token_type_ids", val = types[i], hi = c->type_vocab_size - 1;
        else if (mask && mask[i] != 0 && mask[i] != 1) what = "attention_mask", val = mask[i], hi = 1;
        else if (targets && (targets[i] < -1 || targets[i] >= c->vocab_size))
            what = "mlm_targets", val = targets[i], hi = c->vocab_size - 1, also = " or -1 (ignored)";
        if (what) {
            log_error("batch position %d (sequence %d, token %d): %s = %d outside 0..%d%s", i, i / m->T, i % m->T,
                      what, val, hi, also);
            return STATUS_INPUT;
        }
    }
    return STATUS_OK;
}

status bert_forward(bert *m, const int32_t *input_ids, const int32_t *token_type_ids, const int32_t *attention_mask,
                    const int32_t *mlm_targets)
{
    TRY(bert_check_inputs(m, input_ids, token_type_ids, attention_mask, mlm_targets));
    const bert_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, BT = B * T, tp = m->tp.size;
    /* this rank's heads, attention columns, FFN units and vocabulary rows (all of them at tp 1) */
    int NH = c->num_heads / tp, Cl = C / tp, IC = c->intermediate / tp, V = c->vocab_size / tp, lo = m->tp.rank * V;
    size_t btc = (size_t)BT * (size_t)C, btl = (size_t)BT * (size_t)Cl, bti = (size_t)BT * (size_t)IC;
    const nn_ops *kn = m->ops;
    const float *p = bert_params(m);
    const bert_views *vw = &m->views;
    bert_acts *a = &m->acts;
    bool gpu = bert_on_gpu(m);
    int32_t *ids = gpu ? m->stage_ids : m->input_ids, *types = gpu ? m->stage_ids + BT : m->type_ids;
    float *mask = gpu ? m->stage : a->key_mask;
    memcpy(ids, input_ids, (size_t)BT * sizeof *input_ids);
    for (int i = 0; i < BT; i++) {
        types[i] = token_type_ids ? token_type_ids[i] : 0;
        mask[i] = attention_mask ? (float)attention_mask[i] : 1.0f;
    }
    if (gpu) {  /* the batch goes to the device; the caller's arrays stay on the host */
        device_upload(m->dev, m->input_ids, ids, (size_t)BT * sizeof *ids);
        device_upload(m->dev, m->type_ids, types, (size_t)BT * sizeof *types);
        device_upload(m->dev, a->key_mask, mask, (size_t)BT * sizeof *mask);
    }
    /* BertEmbeddings: LayerNorm(word + position + token_type); a later pipeline stage's
     * emb_ln holds the hidden states entering block l0 instead. */
    bool first = m->l0 == 0, last_stage = m->l1 == c->num_layers;
    if (first) {
        if (tp == 1) {
            kn->embedding_forward(a->emb, m->input_ids, p + vw->word_emb, BT, C, 0);
        } else {  /* vocabulary-parallel: each rank looks up the ids it holds, the sum has them all */
            embedding_forward_rows(a->emb, m->input_ids, p + vw->word_emb, BT, C, lo, V);
            nn_tp_sum(&m->tp, a->emb, btc);
        }
        kn->embedding_forward(a->emb, m->pos_ids, p + vw->pos_emb, BT, C, 1);
        kn->embedding_forward(a->emb, m->type_ids, p + vw->type_emb, BT, C, 1);
        kn->layernorm_forward(a->emb_ln, a->emb_mean, a->emb_rstd, a->emb, p + vw->emb_ln_w, p + vw->emb_ln_b, BT, C,
                              BERT_LN_EPS);
        param_layer_time(&m->timer, 0, false);                              /* embeddings */
    }
    /* BertLayer: x1 = LN(x + Wo·attn(Wq x, Wk x, Wv x)), out = LN(x1 + W2·gelu(W1 x1)).
     * Row-parallel Wo and W2 add their bias on tp rank 0 before the sum (g). */
    bool bias_here = m->tp.rank == 0;
    for (int l = m->l0; l < m->l1; l++) {
        size_t j = (size_t)(l - m->l0);  /* the block's activations in this stage's set */
        const float *x = j == 0 ? a->emb_ln : a->ln2 + (j - 1) * btc;
        float *q = a->q + j * btl, *k = a->k + j * btl, *v = a->v + j * btl, *atty = a->atty + j * btl;
        float *attproj = a->attproj + j * btc, *res1 = a->res1 + j * btc, *ln1 = a->ln1 + j * btc;
        float *fch = a->fch + j * bti, *fchg = a->fch_gelu + j * bti, *fcproj = a->fcproj + j * btc;
        float *res2 = a->res2 + j * btc, *ln2 = a->ln2 + j * btc;
        const bert_layer_views *h = &vw->layer[l];
        kn->matmul_forward(q, x, p + h->q_w, p + h->q_b, BT, C, Cl, MATMUL_LAYOUT_OUT_IN);
        kn->matmul_forward(k, x, p + h->k_w, p + h->k_b, BT, C, Cl, MATMUL_LAYOUT_OUT_IN);
        kn->matmul_forward(v, x, p + h->v_w, p + h->v_b, BT, C, Cl, MATMUL_LAYOUT_OUT_IN);
        kn->attention_forward(atty, a->att_lse + j * BT * NH, q, k, v, Cl, a->key_mask, B, T, Cl, NH, 0);
        kn->matmul_forward(attproj, atty, p + h->attn_out_w, bias_here ? p + h->attn_out_b : NULL, BT, Cl, C,
                           MATMUL_LAYOUT_OUT_IN);
        nn_tp_sum(&m->tp, attproj, btc);                                    /* g */
        kn->residual_forward(res1, x, attproj, btc);
        kn->layernorm_forward(ln1, a->ln1_mean + j * BT, a->ln1_rstd + j * BT, res1, p + h->attn_ln_w, p + h->attn_ln_b,
                              BT, C, BERT_LN_EPS);
        kn->matmul_forward(fch, ln1, p + h->inter_w, p + h->inter_b, BT, C, IC, MATMUL_LAYOUT_OUT_IN);
        kn->gelu_erf_forward(fchg, fch, bti);
        kn->matmul_forward(fcproj, fchg, p + h->out_w, bias_here ? p + h->out_b : NULL, BT, IC, C,
                           MATMUL_LAYOUT_OUT_IN);
        nn_tp_sum(&m->tp, fcproj, btc);                                     /* g */
        kn->residual_forward(res2, ln1, fcproj, btc);
        kn->layernorm_forward(ln2, a->ln2_mean + j * BT, a->ln2_rstd + j * BT, res2, p + h->out_ln_w, p + h->out_ln_b,
                              BT, C, BERT_LN_EPS);
        param_layer_time(&m->timer, l + 1, false);                          /* encoder.layer.l */
    }
    if (!last_stage) {  /* the output goes on to the next stage; the loss is the last one's */
        m->head_rows = m->head_targeted = 0;
        m->mean_loss = mlm_targets ? 0.0f : -1;
        return STATUS_OK;
    }
    /* BertLMPredictionHead: LN(gelu(dense(h))) · word_embeddings^T + bias, on every
     * position without targets, on the targeted ones (gathered) with them. */
    const float *last = bert_stage_out(m), *hx = last;
    int R = BT, counted = BT;
    if (mlm_targets) {
        counted = 0;
        for (int i = 0; i < BT; i++)
            if (mlm_targets[i] >= 0) m->head_pos[counted] = i, m->head_tgt[counted++] = mlm_targets[i];
        /* rows in multiples of BERT_HEAD_ROWS: a few GEMM shapes across batches (bf16 caches
         * a primitive per shape); the padding rows repeat position 0 and are ignored */
        R = counted == 0 ? 0 : (counted + BERT_HEAD_ROWS - 1) / BERT_HEAD_ROWS * BERT_HEAD_ROWS;
        if (R > BT) R = BT;
        for (int j = counted; j < R; j++) m->head_pos[j] = 0, m->head_tgt[j] = XENT_IGNORE;
        if (gpu && R > 0) {
            device_upload(m->dev, m->dev_head_pos, m->head_pos, (size_t)R * sizeof(int32_t));
            device_upload(m->dev, m->dev_head_tgt, m->head_tgt, (size_t)R * sizeof(int32_t));
        }
        if (R > 0) kn->embedding_forward(a->head_x, gpu ? m->dev_head_pos : m->head_pos, last, R, C, 0);
        hx = a->head_x;
    }
    m->head_rows = R;
    m->head_targeted = counted;
    size_t rc = (size_t)R * (size_t)C;
    if (R > 0) {
        kn->matmul_forward(a->tr, hx, p + vw->tr_w, p + vw->tr_b, R, C, C, MATMUL_LAYOUT_OUT_IN);
        kn->gelu_erf_forward(a->tr_gelu, a->tr, rc);
        kn->layernorm_forward(a->tr_ln, a->tr_mean, a->tr_rstd, a->tr_gelu, p + vw->tr_ln_w, p + vw->tr_ln_b, R, C,
                              BERT_LN_EPS);
        kn->matmul_forward(a->logits, a->tr_ln, p + vw->word_emb, p + vw->cls_b, R, C, V, MATMUL_LAYOUT_OUT_IN);
    }
    m->mean_loss = -1;
    if (!mlm_targets) return STATUS_OK;
    m->mean_loss = 0.0f;  /* no targeted position */
    if (R == 0) return STATUS_OK;
    const float *losses = a->losses;
    if (tp == 1) {
        kn->xent_forward(a->losses, a->xent_lse, a->logits, gpu ? m->dev_head_tgt : m->head_tgt, R, V, V);
    } else {  /* vocabulary-parallel (xent.h): the group's max, then its sums */
        xent_vp_max(a->xent_lse, a->logits, R, V, V);
        nn_tp_max(&m->tp, a->xent_lse, (size_t)R);
        xent_vp_sums(a->xent_part, a->logits, a->xent_lse, m->head_tgt, R, lo, V, V);
        nn_tp_sum_f64(&m->tp, a->xent_part, 2 * (size_t)R);
        for (int i = 0; i < R; i++) {
            float lse = a->xent_lse[i] + (float)log(a->xent_part[2 * i]);
            a->xent_lse[i] = lse;
            a->losses[i] = m->head_tgt[i] == XENT_IGNORE ? 0.0f : lse - (float)a->xent_part[2 * i + 1];
        }
    }
    if (gpu) {
        device_download(m->dev, m->stage + BT, a->losses, (size_t)R * sizeof(float));
        losses = m->stage + BT;
    }
    double sum = 0;
    for (int i = 0; i < counted; i++) sum += losses[i];
    m->mean_loss = (float)(sum / counted);
    return STATUS_OK;
}

void bert_backward(bert *m)
{
    /* -1 is the "no targets" mark (a loss is never negative); a NaN or Inf loss is data
     * and differentiates like any other: the step decides to skip it */
    CHECK(m->grad_memory && m->mean_loss != -1.0f, "bert_backward needs train=true and a forward with targets");
    const bert_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, BT = B * T, tp = m->tp.size;
    int NH = c->num_heads / tp, Cl = C / tp, IC = c->intermediate / tp, V = c->vocab_size / tp, lo = m->tp.rank * V;
    size_t btc = (size_t)BT * (size_t)C, btl = (size_t)BT * (size_t)Cl, bti = (size_t)BT * (size_t)IC;
    const nn_ops *kn = m->ops;
    const float *p = bert_params(m);
    float *g = bert_grads(m);
    const bert_views *vw = &m->views;
    bert_acts *a = &m->acts;
    bert_grad_scratch *s = &m->gs;
    bool gpu = bert_on_gpu(m);
    int R = m->head_rows, counted = m->head_targeted;  /* the forward gathered the targeted positions */
    size_t rc = (size_t)R * (size_t)C;
    bool first = m->l0 == 0, last_stage = m->l1 == c->num_layers;
    if (last_stage) kn->zero(s->dresidual, btc);  /* else it holds the gradient of the stage's output */
    if (last_stage && R > 0) {
        const int32_t *tgt = gpu ? m->dev_head_tgt : m->head_tgt, *pos = gpu ? m->dev_head_pos : m->head_pos;
        float *dlosses = gpu ? m->stage + BT : s->dlosses;
        /* loss_scale 1: exactly 1/counted; a power of two (fp16's scaler) scales exactly; the
         * padding rows are ignored by xent */
        for (int i = 0; i < R; i++) dlosses[i] = m->loss_scale / (float)counted;
        if (gpu) device_upload(m->dev, s->dlosses, dlosses, (size_t)R * sizeof(float));
        kn->zero(s->dlogits, (size_t)R * (size_t)V);
        if (tp == 1) kn->xent_backward(s->dlogits, a->logits, a->xent_lse, tgt, s->dlosses, R, V, V);
        else xent_vp_backward(s->dlogits, a->logits, a->xent_lse, tgt, s->dlosses, R, lo, V, V);
        /* MLM head, tied decoder first: its weight gradient lands in word_embeddings. */
        kn->zero(s->dbtc, rc);
        kn->matmul_backward(s->dbtc, g + vw->word_emb, g + vw->cls_b, s->dlogits, a->tr_ln, p + vw->word_emb, R, C, V,
                            MATMUL_LAYOUT_OUT_IN);
        nn_tp_sum(&m->tp, s->dbtc, rc);                                     /* the transform's output: every rank's vocabulary */
        kn->zero(s->dbtc2, rc);
        kn->layernorm_backward(s->dbtc2, g + vw->tr_ln_w, g + vw->tr_ln_b, s->dbtc, a->tr_gelu, p + vw->tr_ln_w,
                               a->tr_mean, a->tr_rstd, R, C);
        kn->zero(s->dbtc, rc);
        kn->gelu_erf_backward(s->dbtc, a->tr, s->dbtc2, rc);
        kn->zero(s->dq, rc);  /* free until the last block's attention */
        kn->matmul_backward(s->dq, g + vw->tr_w, g + vw->tr_b, s->dbtc, a->head_x, p + vw->tr_w, R, C, C,
                            MATMUL_LAYOUT_OUT_IN);
        kn->embedding_backward(s->dresidual, s->dq, pos, R, C);  /* back to the positions (distinct, and zero rows
                                                                    for the padding: exact) */
    }
    if (last_stage) {
        param_layer_done(&m->hook, c->num_layers + 1);                      /* cls.predictions */
        param_layer_time(&m->timer, c->num_layers + 1, true);
    }
    for (int l = m->l1 - 1; l >= m->l0; l--) {
        size_t j = (size_t)(l - m->l0);
        const float *x = j == 0 ? a->emb_ln : a->ln2 + (j - 1) * btc;
        const float *q = a->q + j * btl, *k = a->k + j * btl, *v = a->v + j * btl, *atty = a->atty + j * btl;
        const float *res1 = a->res1 + j * btc, *ln1 = a->ln1 + j * btc;
        const float *fch = a->fch + j * bti, *fchg = a->fch_gelu + j * bti, *res2 = a->res2 + j * btc;
        const bert_layer_views *h = &vw->layer[l];
        /* dresidual holds d(ln2), the block's output. dbtc = d(res2) = d(ln1) skip + d(fcproj). */
        kn->zero(s->dbtc, btc);
        kn->layernorm_backward(s->dbtc, g + h->out_ln_w, g + h->out_ln_b, s->dresidual, res2, p + h->out_ln_w,
                               a->ln2_mean + j * BT, a->ln2_rstd + j * BT, BT, C);
        kn->zero(s->dbti, bti);
        kn->matmul_backward(s->dbti, g + h->out_w, g + h->out_b, s->dbtc, fchg, p + h->out_w, BT, IC, C,
                            MATMUL_LAYOUT_OUT_IN);
        kn->zero(s->dbti2, bti);
        kn->gelu_erf_backward(s->dbti2, fch, s->dbti, bti);
        /* d(ln1) = the skip already in dbtc + the FFN input gradient, added in place; a
         * shard's partial input gradient is summed first (f), the skip being whole */
        if (tp == 1) {
            kn->matmul_backward(s->dbtc, g + h->inter_w, g + h->inter_b, s->dbti2, ln1, p + h->inter_w, BT, C, IC,
                                MATMUL_LAYOUT_OUT_IN);
        } else {
            kn->zero(s->dbtc2, btc);
            kn->matmul_backward(s->dbtc2, g + h->inter_w, g + h->inter_b, s->dbti2, ln1, p + h->inter_w, BT, C, IC,
                                MATMUL_LAYOUT_OUT_IN);
            nn_tp_sum(&m->tp, s->dbtc2, btc);                               /* f */
            kn->residual_forward(s->dbtc, s->dbtc, s->dbtc2, btc);
        }
        /* dresidual = d(res1) = d(x) skip + d(attproj). */
        kn->zero(s->dresidual, btc);
        kn->layernorm_backward(s->dresidual, g + h->attn_ln_w, g + h->attn_ln_b, s->dbtc, res1, p + h->attn_ln_w,
                               a->ln1_mean + j * BT, a->ln1_rstd + j * BT, BT, C);
        kn->zero(s->dbtc2, btl);
        kn->matmul_backward(s->dbtc2, g + h->attn_out_w, g + h->attn_out_b, s->dresidual, atty, p + h->attn_out_w, BT,
                            Cl, C, MATMUL_LAYOUT_OUT_IN);
        kn->zero(s->dq, btl);
        kn->zero(s->dk, btl);
        kn->zero(s->dv, btl);
        kn->attention_backward(s->dq, s->dk, s->dv, s->dbtc2, q, k, v, Cl, atty, a->att_lse + j * BT * NH,
                               a->key_mask, B, T, Cl, NH, 0);
        /* d(x) = the skip already in dresidual + the three projections' input gradients
         * (a shard's partial sums reduced first, f) */
        float *dx = s->dresidual;
        if (tp > 1) kn->zero(dx = s->dbtc, btc);  /* dbtc is free since attention.output.LayerNorm's backward */
        kn->matmul_backward(dx, g + h->q_w, g + h->q_b, s->dq, x, p + h->q_w, BT, C, Cl, MATMUL_LAYOUT_OUT_IN);
        kn->matmul_backward(dx, g + h->k_w, g + h->k_b, s->dk, x, p + h->k_w, BT, C, Cl, MATMUL_LAYOUT_OUT_IN);
        kn->matmul_backward(dx, g + h->v_w, g + h->v_b, s->dv, x, p + h->v_w, BT, C, Cl, MATMUL_LAYOUT_OUT_IN);
        if (tp > 1) {
            nn_tp_sum(&m->tp, dx, btc);                                     /* f */
            kn->residual_forward(s->dresidual, s->dresidual, dx, btc);
        }
        param_layer_done(&m->hook, l + 1);                                  /* encoder.layer.l */
        param_layer_time(&m->timer, l + 1, true);
    }
    if (!first) {  /* dresidual holds the gradient of the stage's input, for the previous stage */
        if (last_stage) param_layer_done(&m->hook, 0);                      /* the tied decoder's word embeddings */
        return;
    }
    /* Embeddings: dresidual = d(emb_ln). */
    kn->zero(s->dbtc, btc);
    kn->layernorm_backward(s->dbtc, g + vw->emb_ln_w, g + vw->emb_ln_b, s->dresidual, a->emb, p + vw->emb_ln_w,
                           a->emb_mean, a->emb_rstd, BT, C);
    /* padding_idx: the lookup adds nothing to the [PAD] row; the decoder's share stays.
     * A shard adds into the rows it holds only (and holds [PAD] or not). */
    float *gwe = g + vw->word_emb;
    int pad = c->pad_token_id - lo;
    bool pad_here = pad >= 0 && pad < V;
    float *gpad = gwe + (size_t)(pad_here ? pad : 0) * C;
    if (pad_here) kn->copy(s->pad_row, gpad, (size_t)C);
    if (tp == 1) kn->embedding_backward(gwe, s->dbtc, m->input_ids, BT, C);
    else embedding_backward_rows(gwe, s->dbtc, m->input_ids, BT, C, lo, V);
    if (pad_here) kn->copy(gpad, s->pad_row, (size_t)C);
    kn->embedding_backward(g + vw->pos_emb, s->dbtc, m->pos_ids, BT, C);
    kn->embedding_backward(g + vw->type_emb, s->dbtc, m->type_ids, BT, C);
    param_layer_done(&m->hook, 0);                                          /* embeddings (and the tied decoder) */
    param_layer_time(&m->timer, 0, true);
}

/* 6 FLOPs per parameter per token (2 forward, 4 backward), as gpt2_flops_per_token;
 * attention's T-dependent FLOPs are not counted. */
double bert_flops_per_token(const bert *m)
{
    /* the whole model's parameters (bert_build_table's tensors): the embeddings, per
     * block 4 C^2 + 2 C IC + 9 C + IC, the head's transform and bias */
    const bert_config *c = &m->cfg;
    double C = c->channels;
    double n = (double)(c->vocab_size + c->max_position + c->type_vocab_size) * C + 2 * C +
               c->num_layers * bert_block_params(c) + c->vocab_size + C * C + 3 * C;
    return 6.0 * n;
}

double bert_block_params(const bert_config *c)
{
    double C = c->channels, IC = c->intermediate;
    return 4 * C * C + 2 * C * IC + 9 * C + IC;
}
