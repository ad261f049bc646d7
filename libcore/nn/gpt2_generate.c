/* gpt2_generate — see gpt2_generate.h. The block is gpt2_forward's list of layer calls
 * on n rows, with the attention reading the cache (kernels/cpu/attention_kv.h); the
 * kernels are the CPU ones the training forward uses, so the two paths differ only in
 * summation order (the test bounds that). */
#include "gpt2_generate.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/attention_kv.h"
#include "cpu/embed.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/residual.h"

#define GPT2_LN_EPS 1e-5f  /* gpt2.c's, HF's layer_norm_epsilon */

static void gpt2_kv_layout(void *owner, float *base, size_t *used)
{
    gpt2_kv *kv = owner;
    size_t C = (size_t)kv->C, R = (size_t)kv->rows, cache = (size_t)kv->L * (size_t)kv->maxT * C;
    kv->k = param_carve(base, used, cache);
    kv->v = param_carve(base, used, cache);
    kv->x = param_carve(base, used, R * C);
    kv->ln = param_carve(base, used, R * C);
    kv->qkv = param_carve(base, used, R * 3 * C);
    kv->atty = param_carve(base, used, R * C);
    kv->proj = param_carve(base, used, R * C);
    kv->fch = param_carve(base, used, R * 4 * C);
    kv->fch_gelu = param_carve(base, used, R * 4 * C);
    kv->logits = param_carve(base, used, (size_t)kv->Vp);
    kv->pos = (int32_t *)param_carve(base, used, R);  /* int32 and float are both 4 bytes */
}

status gpt2_kv_init(gpt2_kv *kv, const gpt2 *m, int maxT, int rows)
{
    const gpt2_config *c = &m->cfg;
    CHECK(!device_is_gpu(m->dev) && m->tp.size == 1 && m->l0 == 0 && m->l1 == c->num_layers,
          "gpt2_kv_init: a whole GPT-2 on the CPU");
    CHECK(maxT >= 1 && maxT <= c->max_seq_len && rows >= 1 && rows <= maxT,
          "gpt2_kv_init: 1 <= rows <= maxT <= max_seq_len");
    memset(kv, 0, sizeof *kv);
    kv->L = c->num_layers, kv->C = c->channels, kv->NH = c->num_heads, kv->Vp = c->padded_vocab_size;
    kv->maxT = maxT, kv->rows = rows;
    size_t floats = 0;
    TRY(param_arena_alloc(gpt2_kv_layout, kv, &kv->memory, &floats, "the generation cache"));
    kv->bytes = floats * sizeof(float);
    return STATUS_OK;
}

void gpt2_kv_reset(gpt2_kv *kv) { kv->len = 0; }

void gpt2_kv_free(gpt2_kv *kv)
{
    free(kv->memory);
    memset(kv, 0, sizeof *kv);
}

size_t gpt2_kv_cache_bytes(const gpt2_kv *kv)
{
    return 2 * (size_t)kv->L * (size_t)kv->maxT * (size_t)kv->C * sizeof(float);
}

status gpt2_kv_forward(gpt2_kv *kv, const gpt2 *m, const int32_t *tokens, int n, float *all_logits)
{
    const gpt2_config *c = &m->cfg;
    int C = kv->C, NH = kv->NH, Vp = kv->Vp, P = kv->len;
    if (n < 1 || n > kv->rows || P + n > kv->maxT) {
        log_error("gpt2_kv_forward: %d new positions after %d do not fit (at most %d at a time, %d in all)", n, P,
                  kv->rows, kv->maxT);
        return STATUS_INPUT;
    }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size) {
            log_error("token %d of the forward: id %d outside the vocabulary 0..%d", i, tokens[i], c->vocab_size - 1);
            return STATUS_INPUT;
        }
    const float *p = m->pb.params;
    const gpt2_views *w = &m->views;
    size_t nc = (size_t)n * (size_t)C, cache_layer = (size_t)kv->maxT * (size_t)C;
    for (int i = 0; i < n; i++) kv->pos[i] = P + i;
    embedding_forward(kv->x, tokens, p + w->wte, n, C, 0);
    embedding_forward(kv->x, kv->pos, p + w->wpe, n, C, 1);
    for (int l = 0; l < kv->L; l++) {
        const gpt2_layer_views *h = &w->h[l];
        float *kc = kv->k + (size_t)l * cache_layer, *vc = kv->v + (size_t)l * cache_layer;
        layernorm_forward(kv->ln, NULL, NULL, kv->x, p + h->ln_1_w, p + h->ln_1_b, n, C, GPT2_LN_EPS);
        matmul_forward(kv->qkv, kv->ln, p + h->c_attn_w, p + h->c_attn_b, n, C, 3 * C, MATMUL_LAYOUT_IN_OUT);
        for (int i = 0; i < n; i++) {  /* append this forward's keys and values: rows P .. P+n-1 */
            memcpy(kc + (size_t)(P + i) * C, kv->qkv + (size_t)i * 3 * C + C, (size_t)C * sizeof(float));
            memcpy(vc + (size_t)(P + i) * C, kv->qkv + (size_t)i * 3 * C + 2 * C, (size_t)C * sizeof(float));
        }
        attention_kv_forward(kv->atty, kv->qkv, 3 * C, kc, vc, n, P + n, C, NH);
        matmul_forward(kv->proj, kv->atty, p + h->attn_proj_w, p + h->attn_proj_b, n, C, C, MATMUL_LAYOUT_IN_OUT);
        residual_forward(kv->x, kv->x, kv->proj, nc);
        layernorm_forward(kv->ln, NULL, NULL, kv->x, p + h->ln_2_w, p + h->ln_2_b, n, C, GPT2_LN_EPS);
        matmul_forward(kv->fch, kv->ln, p + h->fc_w, p + h->fc_b, n, C, 4 * C, MATMUL_LAYOUT_IN_OUT);
        gelu_tanh_forward(kv->fch_gelu, kv->fch, 4 * nc);
        matmul_forward(kv->proj, kv->fch_gelu, p + h->fc_proj_w, p + h->fc_proj_b, n, 4 * C, C, MATMUL_LAYOUT_IN_OUT);
        residual_forward(kv->x, kv->x, kv->proj, nc);
    }
    kv->len = P + n;
    /* the head on the rows asked for: every row for all_logits, else the last one only */
    int first = all_logits ? 0 : n - 1, rows = n - first;
    const float *xs = kv->x + (size_t)first * C;
    layernorm_forward(kv->ln, NULL, NULL, xs, p + w->ln_f_w, p + w->ln_f_b, rows, C, GPT2_LN_EPS);
    float *out = all_logits ? all_logits : kv->logits;
    matmul_forward(out, kv->ln, p + w->wte, NULL, rows, C, Vp, MATMUL_LAYOUT_OUT_IN);  /* tied head: wte (Vp, C) */
    if (all_logits) memcpy(kv->logits, all_logits + (size_t)(n - 1) * Vp, (size_t)Vp * sizeof(float));
    return STATUS_OK;
}
