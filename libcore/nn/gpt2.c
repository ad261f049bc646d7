/* gpt2 — see gpt2.h. The forward and backward are flat lists of layer calls, in
 * the order of the paper's equations, through the device's kernel table (device.h),
 * so the same lines run on the CPU and on a GPU; every buffer is sized in gpt2_init. */
#include "gpt2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cpu/embed.h"
#include "cpu/xent.h"

#define GPT2_LN_EPS 1e-5f

typedef struct gpt2_named {
    const char *name;
    gpt2_config cfg;
} gpt2_named;

/* HF's GPT-2 checkpoints: 1024 positions, vocabulary 50257 padded to 50304 (a
 * multiple of 128, as llm.c); gpt2-tiny is a byte-level model for tests. */
static const gpt2_named gpt2_configs[] = {
    { "gpt2-tiny", { 64, 256, 256, 2, 4, 64 } },
    { "gpt2", { 1024, 50257, 50304, 12, 12, 768 } },
    { "gpt2-medium", { 1024, 50257, 50304, 24, 16, 1024 } },
    { "gpt2-large", { 1024, 50257, 50304, 36, 20, 1280 } },
    { "gpt2-xl", { 1024, 50257, 50304, 48, 25, 1600 } },
};

status gpt2_config_named(gpt2_config *cfg, const char *name)
{
    for (size_t i = 0; i < sizeof gpt2_configs / sizeof gpt2_configs[0]; i++)
        if (!strcmp(name, gpt2_configs[i].name)) { *cfg = gpt2_configs[i].cfg; return STATUS_OK; }
    log_error0("unknown model '%s'; GPT-2 models: gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl", name);
    return STATUS_INPUT;
}

status gpt2_config_check(const gpt2_config *c)
{
    if (c->num_layers < 1 || c->num_heads < 1 || c->channels < 1 || c->vocab_size < 1 || c->max_seq_len < 1) {
        log_error0("model.n_layer = %d, model.n_head = %d, model.n_embd = %d, model.vocab_size = %d and "
                   "model.max_seq_len = %d must all be positive", c->num_layers, c->num_heads, c->channels,
                   c->vocab_size, c->max_seq_len);
        return STATUS_INPUT;
    }
    if (c->channels % c->num_heads != 0) {
        log_error0("model.n_head = %d does not divide model.n_embd = %d", c->num_heads, c->channels);
        return STATUS_INPUT;
    }
    if (c->padded_vocab_size < c->vocab_size) {
        log_error0("padded_vocab_size = %d is smaller than model.vocab_size = %d", c->padded_vocab_size,
                   c->vocab_size);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

#define GPT2_NO_VIEW SIZE_MAX  /* a view of a tensor another pipeline stage holds */

/* Appends tensor number `index` of the whole model (its init stream) to the table, split
 * over the tp ranks along dim in `parts` blocks (dim -1: whole), when `here`; returns
 * its offset (the view field's value), GPT2_NO_VIEW when not here. */
static size_t gpt2_add(gpt2 *m, bool here, int index, const char *name, int layer, bool decay, int ndim, int d0,
                       int d1, int dim, int parts)
{
    if (!here) return GPT2_NO_VIEW;
    int i = dim < 0 ? param_add(&m->pt, name, layer, decay, ndim, (size_t)d0, (size_t)d1, 0, 0)
                    : param_add_split(&m->pt, name, layer, decay, ndim, (size_t)d0, (size_t)d1, dim, parts);
    m->init_index[i] = index;
    return m->pt.entries[i].offset;
}

/* Parameter table in forward order, with HF GPT-2 names, and the named views: each
 * line names a tensor, its shape and the view field that holds its offset, so a view
 * cannot disagree with the table; param_views_check then proves every tensor has
 * exactly one field. A pipeline stage adds only its own tensors. STATUS_NOMEM when
 * the per-block views cannot be allocated. */
static status gpt2_build_table(gpt2 *m)
{
    const gpt2_config *c = &m->cfg;
    int C = c->channels, L = c->num_layers, idx = 0;
    bool first = m->l0 == 0, last = m->l1 == L;
    gpt2_views *v = &m->views;
    char n[PARAM_NAME_MAX];
    if (!(v->h = malloc((size_t)L * sizeof *v->h)) || !(m->init_index = malloc((size_t)(4 + 12 * L) * sizeof(int))))
        return STATUS_NOMEM;
    param_table_init(&m->pt);
    param_table_set_tp(&m->pt, m->tp.size, m->tp.rank);
    /* tp: wte by rows (vocabulary-parallel), the column-parallel c_attn (q, k, v each by
     * heads) and c_fc by output columns with their biases, the row-parallel c_proj
     * weights by input rows; everything else whole */
    v->wte = gpt2_add(m, first || last, idx++, "wte.weight", 0, true, 2, c->padded_vocab_size, C, 0, 1);
    v->wpe = gpt2_add(m, first, idx++, "wpe.weight", 0, true, 2, c->max_seq_len, C, -1, 0);
    for (int l = 0; l < L; l++) {
        gpt2_layer_views *h = &v->h[l];
        bool here = l >= m->l0 && l < m->l1;
#define P(field, suffix, decay, nd, a, b)                             \
    snprintf(n, sizeof n, "h.%d.%s", l, suffix);                      \
    h->field = gpt2_add(m, here, idx++, n, l + 1, decay, nd, a, b, -1, 0)
#define S(field, suffix, decay, nd, a, b, dim, parts)                 \
    snprintf(n, sizeof n, "h.%d.%s", l, suffix);                      \
    h->field = gpt2_add(m, here, idx++, n, l + 1, decay, nd, a, b, dim, parts)
        P(ln_1_w, "ln_1.weight", false, 1, C, 0);
        P(ln_1_b, "ln_1.bias", false, 1, C, 0);
        S(c_attn_w, "attn.c_attn.weight", true, 2, C, 3 * C, 1, 3);
        S(c_attn_b, "attn.c_attn.bias", false, 1, 3 * C, 0, 0, 3);
        S(attn_proj_w, "attn.c_proj.weight", true, 2, C, C, 0, 1);
        P(attn_proj_b, "attn.c_proj.bias", false, 1, C, 0);
        P(ln_2_w, "ln_2.weight", false, 1, C, 0);
        P(ln_2_b, "ln_2.bias", false, 1, C, 0);
        S(fc_w, "mlp.c_fc.weight", true, 2, C, 4 * C, 1, 1);
        S(fc_b, "mlp.c_fc.bias", false, 1, 4 * C, 0, 0, 1);
        S(fc_proj_w, "mlp.c_proj.weight", true, 2, 4 * C, C, 0, 1);
        P(fc_proj_b, "mlp.c_proj.bias", false, 1, C, 0);
#undef P
#undef S
    }
    v->ln_f_w = gpt2_add(m, last, idx++, "ln_f.weight", L + 1, false, 1, C, 0, -1, 0);
    v->ln_f_b = gpt2_add(m, last, idx++, "ln_f.bias", L + 1, false, 1, C, 0, -1, 0);
    return STATUS_OK;
}

/* Every tensor of the table named by exactly one view field. */
_Static_assert(sizeof(gpt2_layer_views) == GPT2_LAYER_TENSORS * sizeof(size_t),
               "gpt2_layer_views holds one size_t offset per block tensor");
static status gpt2_check_views(const gpt2 *m)
{
    const gpt2_views *v = &m->views;
    size_t L = (size_t)m->cfg.num_layers, n = 0;
    size_t *all = malloc((4 + L * GPT2_LAYER_TENSORS) * sizeof *all);
    if (!all) return STATUS_NOMEM;
    size_t top[4] = { v->wte, v->wpe, v->ln_f_w, v->ln_f_b };
    for (int i = 0; i < 4; i++)
        if (top[i] != GPT2_NO_VIEW) all[n++] = top[i];
    for (size_t l = (size_t)m->l0; l < (size_t)m->l1; l++, n += GPT2_LAYER_TENSORS)
        memcpy(all + n, &v->h[l], sizeof v->h[l]);
    param_views_check(&m->pt, all, n, "gpt2");
    free(all);
    return STATUS_OK;
}

/* Each tensor is drawn whole (one counter stream per tensor of the whole model, so the
 * init depends on neither the tp size nor the pipeline stage) and this rank's shard
 * sliced out of it. */
static status gpt2_init_weights(gpt2 *m, uint64_t seed)
{
    float *p = m->pb.params, *full = NULL;
    double proj_std = 0.02 / sqrt(2.0 * m->cfg.num_layers);
    const gpt2_config *c = &m->cfg;
    for (int i = 0; i < m->pt.count; i++) {
        const param_entry *e = &m->pt.entries[i];
        float *w = p + e->offset;
        bool is_norm = strstr(e->name, "ln_") != NULL, is_bias = strstr(e->name, ".bias") != NULL;
        if (is_bias) { memset(w, 0, e->count * sizeof *w); continue; }
        if (is_norm) { for (size_t k = 0; k < e->count; k++) w[k] = 1.0f; continue; }
        size_t n = param_entry_full_count(&m->pt, e);
        float *dst = w;
        if (e->tp_dim >= 0 && m->tp.size > 1) {
            free(full);
            if (!(full = malloc(n * sizeof *full))) return STATUS_NOMEM;
            dst = full;
        }
        double std = strstr(e->name, "c_proj.weight") ? proj_std : 0.02;
        rng r;
        rng_init(&r, seed, 0, RNG_PURPOSE_INIT, (uint64_t)m->init_index[i]);
        for (size_t k = 0; k < n; k++) dst[k] = (float)(std * rng_normal(&r));
        /* padded vocabulary rows never receive gradient; keep them zero */
        if (!strcmp(e->name, "wte.weight"))
            memset(dst + (size_t)c->vocab_size * (size_t)c->channels, 0,
                   (size_t)(c->padded_vocab_size - c->vocab_size) * (size_t)c->channels * sizeof(float));
        if (dst != w) param_tp_copy(&m->pt, e, w, full, false);
    }
    free(full);
    return STATUS_OK;
}

static void gpt2_layout_grads(void *owner, float *base, size_t *used);

/* One set of activations for the stage's blocks (the head's only on the last stage). */
static void gpt2_layout_slot(gpt2 *m, float *base, size_t *used)
{
    size_t L = (size_t)(m->l1 - m->l0), BT = (size_t)m->B * (size_t)m->T, C = (size_t)m->cfg.channels;
    size_t tp = (size_t)m->tp.size, NH = (size_t)m->cfg.num_heads / tp, Vp = (size_t)m->cfg.padded_vocab_size / tp;
    size_t Cl = C / tp;  /* this rank's columns of attention; 4 Cl of the MLP */
    size_t head = m->l1 == m->cfg.num_layers;
    gpt2_acts *a = &m->acts;
    a->encoded = param_carve(base, used, BT * C);
    a->ln1 = param_carve(base, used, L * BT * C);
    a->ln1_mean = param_carve(base, used, L * BT);
    a->ln1_rstd = param_carve(base, used, L * BT);
    a->qkv = param_carve(base, used, L * BT * 3 * Cl);
    a->atty = param_carve(base, used, L * BT * Cl);
    a->att_lse = param_carve(base, used, L * BT * NH);
    a->attproj = param_carve(base, used, L * BT * C);
    a->residual2 = param_carve(base, used, L * BT * C);
    a->ln2 = param_carve(base, used, L * BT * C);
    a->ln2_mean = param_carve(base, used, L * BT);
    a->ln2_rstd = param_carve(base, used, L * BT);
    a->fch = param_carve(base, used, L * BT * 4 * Cl);
    a->fch_gelu = param_carve(base, used, L * BT * 4 * Cl);
    a->fcproj = param_carve(base, used, L * BT * C);
    a->residual3 = param_carve(base, used, L * BT * C);
    a->lnf = param_carve(base, used, head * BT * C);
    a->lnf_mean = param_carve(base, used, head * BT);
    a->lnf_rstd = param_carve(base, used, head * BT);
    a->logits = param_carve(base, used, head * BT * Vp);
    a->losses = param_carve(base, used, BT);
    a->xent_lse = param_carve(base, used, head * BT);
    a->xent_part = tp > 1 ? (double *)param_carve(base, used, head * 4 * BT) : NULL;  /* 2 BT doubles, 64-byte aligned */
}

/* `slots` sets, one after the other; acts views set 0. */
static void gpt2_layout_acts(void *owner, float *base, size_t *used)
{
    gpt2 *m = owner;
    size_t start = *used;
    gpt2_layout_slot(m, base, used);
    m->slot_floats = *used - start;
    *used += (size_t)(m->slots - 1) * m->slot_floats;
}

void gpt2_set_slot(gpt2 *m, int k)
{
    CHECK(k >= 0 && k < m->slots, "gpt2_set_slot: activation set out of range");
    size_t used = (size_t)k * m->slot_floats;
    gpt2_layout_slot(m, m->act_memory, &used);
    m->slot = k;
    m->targets = m->slot_targets + (size_t)k * (size_t)m->B * (size_t)m->T;
    m->mean_loss = m->slot_loss[k];
}

void gpt2_set_batch(gpt2 *m, int B)
{
    CHECK(B >= 1 && B <= m->capacity && !device_is_gpu(m->dev), "gpt2_set_batch: 1 <= B <= capacity, on the CPU");
    if (B == m->B) return;
    m->B = B;
    gpt2_set_slot(m, m->slot);
    size_t used = 0;
    if (m->grad_memory) gpt2_layout_grads(m, m->grad_memory, &used);
}

float *gpt2_stage_in(gpt2 *m) { return m->acts.encoded; }

float *gpt2_stage_out(gpt2 *m)
{
    return m->acts.residual3 + (size_t)(m->l1 - m->l0 - 1) * (size_t)m->B * (size_t)m->T * (size_t)m->cfg.channels;
}

float *gpt2_stage_grad(gpt2 *m) { return m->gs.dresidual; }

static void gpt2_layout_grads(void *owner, float *base, size_t *used)
{
    gpt2 *m = owner;
    size_t BT = (size_t)m->B * (size_t)m->T, C = (size_t)m->cfg.channels, tp = (size_t)m->tp.size;
    size_t Vp = (size_t)m->cfg.padded_vocab_size / tp;
    gpt2_grad_scratch *g = &m->gs;
    g->dresidual = param_carve(base, used, BT * C);
    g->dbt4c = param_carve(base, used, BT * 4 * C / tp);
    g->dbt4c2 = param_carve(base, used, BT * 4 * C / tp);
    g->dbt3c = param_carve(base, used, BT * 3 * C / tp);
    g->dbtc = param_carve(base, used, BT * C);
    g->dbtc2 = param_carve(base, used, BT * C);
    g->dlogits = param_carve(base, used, (m->l1 == m->cfg.num_layers) * BT * Vp);
    g->dlosses = param_carve(base, used, BT);
}

static bool gpt2_on_gpu(const gpt2 *m) { return device_is_gpu(m->dev); }
/* The buffers the kernels read and write: host on the CPU, device copies on a GPU. */
static float *gpt2_params(const gpt2 *m) { return gpt2_on_gpu(m) ? m->w.params : m->pb.params; }
static float *gpt2_grads(const gpt2 *m) { return gpt2_on_gpu(m) ? m->w.grads : m->pb.grads; }

/* The device copies: params, grads and moments (device_buffers_init), positions and
 * the (tokens, targets) staging area. */
static status gpt2_init_device(gpt2 *m, bool train)
{
    const device *d = m->dev;
    size_t bt = (size_t)m->B * (size_t)m->T;
    /* positions first: from here on gpt2_free treats pos_ids as device memory */
    int32_t *pos = m->pos_ids;
    m->pos_ids = device_alloc(d, bt * sizeof(int32_t), "positions");
    if (m->pos_ids) device_upload(d, m->pos_ids, pos, bt * sizeof(int32_t));
    free(pos);
    if (!m->pos_ids) return STATUS_NOMEM;
    TRY(device_buffers_init(d, &m->w, &m->pb, train));
    if (!(m->dev_ids = device_alloc(d, 2 * bt * sizeof(int32_t), "token ids")) ||
        !(m->host_losses = malloc(bt * sizeof(float))))
        return STATUS_NOMEM;
    return STATUS_OK;
}

status gpt2_init(gpt2 *m, const gpt2_config *cfg, int B, int T, uint64_t seed, bool train)
{
    return gpt2_init_on(m, cfg, B, T, seed, train, NULL);
}

status gpt2_init_on(gpt2 *m, const gpt2_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev)
{
    return gpt2_init_tp(m, cfg, B, T, seed, train, dev, NULL);
}

status gpt2_table_whole(const gpt2_config *cfg, int tp_size, int tp_rank, param_table *out)
{
    gpt2 g;
    memset(&g, 0, sizeof g);
    g.cfg = *cfg;
    g.tp = (nn_tp){ .size = tp_size, .rank = tp_rank };
    g.l0 = 0, g.l1 = cfg->num_layers;
    status st = gpt2_build_table(&g);
    free(g.views.h);
    free(g.init_index);
    if (st != STATUS_OK) {
        param_table_free(&g.pt);
        return st;
    }
    *out = g.pt;
    return STATUS_OK;
}

status gpt2_check_tp(const gpt2_config *c, int tp)
{
    if (tp < 1 || c->num_heads % tp != 0) {
        log_error0("parallel.tp = %d does not divide model.n_head = %d: tensor parallelism splits the attention "
                   "by whole heads (choose a divisor of %d)", tp, c->num_heads, c->num_heads);
        return STATUS_INPUT;
    }
    if (c->padded_vocab_size % tp != 0) {
        log_error0("parallel.tp = %d does not divide the padded vocabulary %d (model.vocab_size = %d padded to a "
                   "multiple of 128): choose a power of two up to 128", tp, c->padded_vocab_size, c->vocab_size);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status gpt2_init_tp(gpt2 *m, const gpt2_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev,
                    const nn_tp *tp)
{
    return gpt2_init_parallel(m, cfg, B, T, seed, train, dev, tp, NULL);
}

status gpt2_init_parallel(gpt2 *m, const gpt2_config *cfg, int B, int T, uint64_t seed, bool train, const device *dev,
                          const nn_tp *tp, const nn_stage *stage)
{
    memset(m, 0, sizeof *m);
    m->tp = tp ? *tp : nn_tp_none();
    nn_stage st = stage ? *stage : nn_stage_whole();
    if (st.end == 0) st = (nn_stage){ .first = 0, .end = cfg->num_layers, .slots = st.slots };
    CHECK(st.first >= 0 && st.first < st.end && st.end <= cfg->num_layers && st.slots >= 1,
          "gpt2_init_parallel: a stage is a non-empty range of the blocks with at least one activation set");
    m->l0 = st.first, m->l1 = st.end, m->slots = st.slots;
    bool staged = m->l0 > 0 || m->l1 < cfg->num_layers;
    if ((m->tp.size > 1 || staged) && device_is_gpu(dev)) {
        log_error0("parallel.tp = %d, a pipeline stage of blocks %d..%d: tensor and pipeline parallelism run on the "
                   "CPU only so far (device.kind = cpu)", m->tp.size, m->l0, m->l1 - 1);
        return STATUS_USAGE;
    }
    if (m->tp.size > 1) TRY(gpt2_check_tp(cfg, m->tp.size));
    m->dev = dev;
    m->ops = dev ? dev->ops : &nn_ops_cpu;
    TRY(gpt2_config_check(cfg));
    if (T > cfg->max_seq_len || B < 1 || T < 1) {
        log_error0("sequence length T = %d is outside 1..model.max_seq_len = %d (the context), or batch B = %d < 1",
                   T, cfg->max_seq_len, B);
        return STATUS_INPUT;
    }
    m->cfg = *cfg;
    m->B = m->capacity = B;
    m->T = T;
    TRY(gpt2_build_table(m));
    TRY(gpt2_check_views(m));
    TRY(param_buffers_init(&m->pb, &m->pt, train && !gpt2_on_gpu(m)));
    TRY(gpt2_init_weights(m, seed));
    TRY(device_arena(dev, gpt2_layout_acts, m, &m->act_memory, &m->act_floats, "activations"));
    if (train) TRY(device_arena(dev, gpt2_layout_grads, m, &m->grad_memory, &m->grad_floats, "activation gradients"));
    m->pos_ids = malloc((size_t)B * (size_t)T * sizeof *m->pos_ids);
    m->slot_targets = malloc((size_t)m->slots * (size_t)B * (size_t)T * sizeof *m->slot_targets);
    m->slot_loss = malloc((size_t)m->slots * sizeof *m->slot_loss);
    if (!m->pos_ids || !m->slot_targets || !m->slot_loss) return STATUS_NOMEM;
    for (int k = 0; k < m->slots; k++) m->slot_loss[k] = -1;
    m->targets = m->slot_targets;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) m->pos_ids[b * T + t] = t;
    if (gpt2_on_gpu(m)) TRY(gpt2_init_device(m, train));
    m->mean_loss = -1;
    m->loss_scale = 1.0f;
    return STATUS_OK;
}

void gpt2_free(gpt2 *m)
{
    device_free(m->dev, m->act_memory);
    device_free(m->dev, m->grad_memory);
    device_free(m->dev, m->pos_ids);  /* host memory on the CPU, device memory on a GPU */
    device_free(m->dev, m->dev_ids);
    device_buffers_free(m->dev, &m->w);
    free(m->host_losses);
    free(m->slot_targets);
    free(m->slot_loss);
    free(m->init_index);
    param_buffers_free(&m->pb);
    param_table_free(&m->pt);
    free(m->views.h);
    memset(m, 0, sizeof *m);
}

/* The tied head's logits and the cross-entropy: whole on one rank, or vocabulary-
 * parallel (xent.h's three pieces, the group's MAX and SUM between them). */
static void gpt2_head_forward(gpt2 *m, const int32_t *tgt, int BT)
{
    const gpt2_config *c = &m->cfg;
    const nn_ops *k = m->ops;
    gpt2_acts *a = &m->acts;
    const float *p = gpt2_params(m);
    int C = c->channels, tp = m->tp.size, Vl = c->padded_vocab_size / tp, lo = m->tp.rank * Vl;
    /* Tied head: wte (Vp, C) is an nn.Linear-layout weight of the logits (this rank's rows). */
    k->matmul_forward(a->logits, a->lnf, p + m->views.wte, NULL, BT, C, Vl, MATMUL_LAYOUT_OUT_IN);
    if (!tgt) return;
    if (tp == 1) {
        k->xent_forward(a->losses, a->xent_lse, a->logits, tgt, BT, c->vocab_size, Vl);
        return;
    }
    int Vr = c->vocab_size - lo < 0 ? 0 : c->vocab_size - lo < Vl ? c->vocab_size - lo : Vl;
    xent_vp_max(a->xent_lse, a->logits, BT, Vr, Vl);
    nn_tp_max(&m->tp, a->xent_lse, (size_t)BT);
    xent_vp_sums(a->xent_part, a->logits, a->xent_lse, tgt, BT, lo, Vr, Vl);
    nn_tp_sum_f64(&m->tp, a->xent_part, 2 * (size_t)BT);
    for (int i = 0; i < BT; i++) {
        float lse = a->xent_lse[i] + (float)log(a->xent_part[2 * i]);
        a->xent_lse[i] = lse;
        a->losses[i] = tgt[i] == XENT_IGNORE ? 0.0f : lse - (float)a->xent_part[2 * i + 1];
    }
}

status gpt2_forward(gpt2 *m, const int32_t *tokens, const int32_t *targets)
{
    const gpt2_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, BT = B * T, tp = m->tp.size;
    int NH = c->num_heads / tp, Cl = C / tp, Vl = c->padded_vocab_size / tp;  /* this rank's heads and columns */
    size_t btc = (size_t)BT * (size_t)C, btl = (size_t)BT * (size_t)Cl;
    for (int i = 0; i < BT; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size || (targets && (targets[i] < -1 || targets[i] >= c->vocab_size))) {
            log_error("batch position %d (sequence %d, token %d): id %d outside the vocabulary 0..%d", i, i / T,
                      i % T, tokens[i] < 0 || tokens[i] >= c->vocab_size ? tokens[i] : targets[i], c->vocab_size - 1);
            return STATUS_INPUT;
        }
    const nn_ops *k = m->ops;
    const float *p = gpt2_params(m);
    const gpt2_views *v = &m->views;
    gpt2_acts *a = &m->acts;
    const int32_t *ids = tokens, *tgt = targets;
    if (gpt2_on_gpu(m)) {  /* the batch goes to the device; the host copies stay the caller's */
        device_upload(m->dev, m->dev_ids, tokens, (size_t)BT * sizeof *tokens);
        if (targets) device_upload(m->dev, m->dev_ids + BT, targets, (size_t)BT * sizeof *targets);
        ids = m->dev_ids;
        tgt = m->dev_ids + BT;
    }
    bool first = m->l0 == 0, last_stage = m->l1 == c->num_layers;
    if (!first) {
        /* a later pipeline stage: encoded holds the residual stream entering block l0 */
    } else if (tp == 1) {
        k->embedding_forward(a->encoded, ids, p + v->wte, BT, C, 0);
    } else {  /* vocabulary-parallel: each rank looks up the ids it holds, the sum has them all */
        embedding_forward_rows(a->encoded, ids, p + v->wte, BT, C, m->tp.rank * Vl, Vl);
        nn_tp_sum(&m->tp, a->encoded, btc);
    }
    if (first) {
        k->embedding_forward(a->encoded, m->pos_ids, p + v->wpe, BT, C, 1);
        param_layer_time(&m->timer, 0, false);                             /* wte, wpe */
    }
    /* row-parallel layers add their bias on one rank, before the sum */
    bool bias_here = m->tp.rank == 0;
    for (int l = m->l0; l < m->l1; l++) {
        size_t j = (size_t)(l - m->l0);  /* the block's activations in this stage's set */
        const float *residual = j == 0 ? a->encoded : a->residual3 + (j - 1) * btc;
        float *ln1 = a->ln1 + j * btc, *qkv = a->qkv + j * btl * 3, *atty = a->atty + j * btl;
        float *attproj = a->attproj + j * btc, *res2 = a->residual2 + j * btc, *ln2 = a->ln2 + j * btc;
        float *fch = a->fch + j * btl * 4, *fchg = a->fch_gelu + j * btl * 4, *fcproj = a->fcproj + j * btc;
        float *res3 = a->residual3 + j * btc;
        const gpt2_layer_views *h = &v->h[l];
        k->layernorm_forward(ln1, a->ln1_mean + j * BT, a->ln1_rstd + j * BT, residual, p + h->ln_1_w, p + h->ln_1_b,
                             BT, C, GPT2_LN_EPS);
        k->matmul_forward(qkv, ln1, p + h->c_attn_w, p + h->c_attn_b, BT, C, 3 * Cl, MATMUL_LAYOUT_IN_OUT);
        k->attention_forward(atty, a->att_lse + j * BT * NH, qkv, qkv + Cl, qkv + 2 * Cl, 3 * Cl, NULL, B, T,
                             Cl, NH, 1);
        k->matmul_forward(attproj, atty, p + h->attn_proj_w, bias_here ? p + h->attn_proj_b : NULL, BT, Cl, C,
                          MATMUL_LAYOUT_IN_OUT);
        nn_tp_sum(&m->tp, attproj, btc);                                   /* g */
        k->residual_forward(res2, residual, attproj, btc);
        k->layernorm_forward(ln2, a->ln2_mean + j * BT, a->ln2_rstd + j * BT, res2, p + h->ln_2_w, p + h->ln_2_b, BT, C,
                             GPT2_LN_EPS);
        k->matmul_forward(fch, ln2, p + h->fc_w, p + h->fc_b, BT, C, 4 * Cl, MATMUL_LAYOUT_IN_OUT);
        k->gelu_tanh_forward(fchg, fch, btl * 4);
        k->matmul_forward(fcproj, fchg, p + h->fc_proj_w, bias_here ? p + h->fc_proj_b : NULL, BT, 4 * Cl, C,
                          MATMUL_LAYOUT_IN_OUT);
        nn_tp_sum(&m->tp, fcproj, btc);                                    /* g */
        k->residual_forward(res3, res2, fcproj, btc);
        param_layer_time(&m->timer, l + 1, false);                         /* h.l */
    }
    m->mean_loss = m->slot_loss[m->slot] = -1;
    if (!last_stage) {  /* the output goes on to the next stage; the loss is the last one's */
        if (!targets) return STATUS_OK;
        memcpy(m->targets, targets, (size_t)BT * sizeof *targets);
        m->mean_loss = m->slot_loss[m->slot] = 0.0f;
        return STATUS_OK;
    }
    const float *last = gpt2_stage_out(m);
    k->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, p + v->ln_f_w, p + v->ln_f_b, BT, C, GPT2_LN_EPS);
    gpt2_head_forward(m, targets ? tgt : NULL, BT);
    if (!targets) return STATUS_OK;
    memcpy(m->targets, targets, (size_t)BT * sizeof *targets);
    const float *losses = a->losses;
    if (gpt2_on_gpu(m)) {
        device_download(m->dev, m->host_losses, a->losses, (size_t)BT * sizeof(float));
        losses = m->host_losses;
    }
    double sum = 0;
    int counted = 0;
    for (int i = 0; i < BT; i++)
        if (targets[i] >= 0) { sum += losses[i]; counted++; }
    m->mean_loss = m->slot_loss[m->slot] = counted ? (float)(sum / counted) : 0.0f;
    return STATUS_OK;
}

void gpt2_backward(gpt2 *m, const int32_t *tokens)
{
    /* -1 is the "no targets" mark (a loss is never negative); a NaN or Inf loss is data
     * and differentiates like any other: the step decides to skip it */
    CHECK(m->grad_memory && m->mean_loss != -1.0f, "gpt2_backward needs train=true and a forward with targets");
    const gpt2_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->channels, BT = B * T, tp = m->tp.size;
    int NH = c->num_heads / tp, Cl = C / tp, Vl = c->padded_vocab_size / tp, lo = m->tp.rank * Vl;
    size_t btc = (size_t)BT * (size_t)C, btl = (size_t)BT * (size_t)Cl;
    const nn_ops *k = m->ops;
    const float *p = gpt2_params(m);
    float *g = gpt2_grads(m);
    const gpt2_views *v = &m->views;
    gpt2_acts *a = &m->acts;
    gpt2_grad_scratch *s = &m->gs;
    const int32_t *ids = tokens, *tgt = m->targets;
    float *dlosses = s->dlosses;
    if (gpt2_on_gpu(m)) {
        ids = m->dev_ids;
        tgt = m->dev_ids + BT;
        dlosses = m->host_losses;
    }
    bool first = m->l0 == 0, last_stage = m->l1 == c->num_layers;
    if (last_stage) {
        int counted = 0;
        for (int i = 0; i < BT; i++) counted += m->targets[i] >= 0;
        /* loss_scale 1: exactly 1/counted as before; a power of two (fp16's scaler) scales exactly */
        for (int i = 0; i < BT; i++) dlosses[i] = counted ? m->loss_scale / (float)counted : 0.0f;
        if (dlosses != s->dlosses) device_upload(m->dev, s->dlosses, dlosses, (size_t)BT * sizeof(float));
        k->zero(s->dlogits, (size_t)BT * (size_t)Vl);
        if (tp == 1) {
            k->xent_backward(s->dlogits, a->logits, a->xent_lse, tgt, s->dlosses, BT, c->vocab_size, Vl);
        } else {
            int Vr = c->vocab_size - lo < 0 ? 0 : c->vocab_size - lo < Vl ? c->vocab_size - lo : Vl;
            xent_vp_backward(s->dlogits, a->logits, a->xent_lse, tgt, s->dlosses, BT, lo, Vr, Vl);
        }
        k->zero(s->dbtc, btc);
        k->matmul_backward(s->dbtc, g + v->wte, NULL, s->dlogits, a->lnf, p + v->wte, BT, C, Vl, MATMUL_LAYOUT_OUT_IN);
        nn_tp_sum(&m->tp, s->dbtc, btc);                                   /* the head's input: every rank's vocabulary */
        k->zero(s->dresidual, btc);
        k->layernorm_backward(s->dresidual, g + v->ln_f_w, g + v->ln_f_b, s->dbtc, gpt2_stage_out(m), p + v->ln_f_w,
                              a->lnf_mean, a->lnf_rstd, BT, C);
        param_layer_done(&m->hook, c->num_layers + 1);                     /* ln_f */
        param_layer_time(&m->timer, c->num_layers + 1, true);
    }  /* else dresidual holds the gradient of the stage's output, from the next stage */
    for (int l = m->l1 - 1; l >= m->l0; l--) {
        size_t j = (size_t)(l - m->l0);
        const float *residual = j == 0 ? a->encoded : a->residual3 + (j - 1) * btc;
        const float *ln1 = a->ln1 + j * btc, *qkv = a->qkv + j * btl * 3, *atty = a->atty + j * btl;
        const float *res2 = a->residual2 + j * btc, *ln2 = a->ln2 + j * btc;
        const float *fch = a->fch + j * btl * 4, *fchg = a->fch_gelu + j * btl * 4;
        const gpt2_layer_views *h = &v->h[l];
        /* dresidual holds d(residual3); residual3 = residual2 + fcproj. Row-parallel
         * c_proj: its input gradient is this rank's columns, its bias gradient whole. */
        k->zero(s->dbt4c, btl * 4);
        k->matmul_backward(s->dbt4c, g + h->fc_proj_w, g + h->fc_proj_b, s->dresidual, fchg, p + h->fc_proj_w, BT,
                           4 * Cl, C, MATMUL_LAYOUT_IN_OUT);
        k->zero(s->dbt4c2, btl * 4);
        k->gelu_tanh_backward(s->dbt4c2, fch, s->dbt4c, btl * 4);
        k->zero(s->dbtc, btc);
        k->matmul_backward(s->dbtc, g + h->fc_w, g + h->fc_b, s->dbt4c2, ln2, p + h->fc_w, BT, C, 4 * Cl,
                           MATMUL_LAYOUT_IN_OUT);
        nn_tp_sum(&m->tp, s->dbtc, btc);                                   /* f */
        /* d(residual2) = dresidual (the skip) + layernorm_2's input gradient, added in place. */
        k->layernorm_backward(s->dresidual, g + h->ln_2_w, g + h->ln_2_b, s->dbtc, res2, p + h->ln_2_w,
                              a->ln2_mean + j * BT, a->ln2_rstd + j * BT, BT, C);
        k->zero(s->dbtc, btl);
        k->matmul_backward(s->dbtc, g + h->attn_proj_w, g + h->attn_proj_b, s->dresidual, atty, p + h->attn_proj_w, BT,
                           Cl, C, MATMUL_LAYOUT_IN_OUT);
        k->zero(s->dbt3c, btl * 3);
        k->attention_backward(s->dbt3c, s->dbt3c + Cl, s->dbt3c + 2 * Cl, s->dbtc, qkv, qkv + Cl, qkv + 2 * Cl, 3 * Cl,
                              atty, a->att_lse + j * BT * NH, NULL, B, T, Cl, NH, 1);
        k->zero(s->dbtc2, btc);
        k->matmul_backward(s->dbtc2, g + h->c_attn_w, g + h->c_attn_b, s->dbt3c, ln1, p + h->c_attn_w, BT, C, 3 * Cl,
                           MATMUL_LAYOUT_IN_OUT);
        nn_tp_sum(&m->tp, s->dbtc2, btc);                                  /* f */
        /* d(residual) = d(residual2) (the skip) + layernorm_1's input gradient. */
        k->layernorm_backward(s->dresidual, g + h->ln_1_w, g + h->ln_1_b, s->dbtc2, residual, p + h->ln_1_w,
                              a->ln1_mean + j * BT, a->ln1_rstd + j * BT, BT, C);
        param_layer_done(&m->hook, l + 1);                                 /* h.l */
        param_layer_time(&m->timer, l + 1, true);
    }
    if (first) {
        if (tp == 1) k->embedding_backward(g + v->wte, s->dresidual, ids, BT, C);
        else embedding_backward_rows(g + v->wte, s->dresidual, ids, BT, C, lo, Vl);
        k->embedding_backward(g + v->wpe, s->dresidual, m->pos_ids, BT, C);
    }  /* else dresidual holds the gradient of the stage's input, for the previous stage */
    /* the bucket launch inside the layer's lap, as every other layer's */
    if (first || last_stage) param_layer_done(&m->hook, 0);                /* wte (also the tied head), wpe */
    if (first) param_layer_time(&m->timer, 0, true);
}

/* 6 FLOPs per parameter per token (2 forward, 4 backward), the convention of the
 * benchmark tables; attention's own T-dependent FLOPs are not counted. */
double gpt2_flops_per_token(const gpt2 *m)
{
    /* the whole model's parameters, wte's padding rows included (the tables' convention):
     * wte, wpe, per block 12 C^2 + 13 C, ln_f */
    const gpt2_config *c = &m->cfg;
    double C = c->channels;
    double n = (double)c->padded_vocab_size * C + (double)c->max_seq_len * C + c->num_layers * gpt2_block_params(c) +
               2 * C;
    return 6.0 * n;
}

double gpt2_block_params(const gpt2_config *c)
{
    double C = c->channels;
    return 12 * C * C + 13 * C;
}
