/* deploy_ckpt — deploy_from_checkpoint (deploy.h): the inference graph of a Nebula
 * checkpoint (GPT-2, BERT, ResNet, and the MLP) as a nano_graph computing what the
 * family's eval forward in libcore/nn computes, its constants the checkpoint's tensors
 * (f32, owned by the graph) under their Hugging Face / torchvision names.
 *
 * The checkpoint is read as `nebula-ckpt convert` reads one: its catalog, the model its
 * stored [model] section describes, built for one sample for its tables, and
 * ckpt_catalog_load (every checksum verified; bf16/fp16 export copies widened; the
 * tensors are the whole model's whatever grid wrote them). The graphs, in nano ops:
 *   GPT-2  Gather(wte, input_ids) + Gather(wpe, position_ids); per block pre-norm
 *          LayerNorm (eps 1e-5), Gemm c_attn (Conv1D weights (in, out) stored transposed
 *          as (out, in): every Gemm has trans_b = 1), Split q|k|v, Q·Kᵀ · 1/sqrt(hd) +
 *          causal_mask (-1e9 above the diagonal: exp underflows to exactly 0, as the
 *          kernels' -inf; finite, so no inf - inf), Softmax, P·V, Gemm c_proj, residual,
 *          LayerNorm, Gemm c_fc, tanh GELU, Gemm c_proj, residual; ln_f; the head tied to
 *          wte, sliced from the padded to the real vocabulary: logits (B, T, V).
 *   BERT   word + position + token type 0 embeddings, LayerNorm (eps 1e-12), post-norm
 *          blocks with separate query/key/value Gemms, no mask (every key kept), erf
 *          GELU; the MLM head (transform dense, GELU, LayerNorm, decoder tied to
 *          word_embeddings with cls.predictions.bias): logits (B, T, V). No pooler: Nebula
 *          trains BertForMaskedLM, which has none.
 *   ResNet conv (no bias), BatchNorm with the running statistics (the checkpoint's
 *          /buffers group; eps 1e-5), ReLU, the ImageNet stem's 3x3/2 max pool, blocks
 *          with downsample branches, Add + ReLU, global average pool, flatten, fc:
 *          logits (B, classes) for pixels (B, 3, H, W) at the model's image size.
 *   MLP    flatten, Gemm + ReLU per hidden layer, Gemm: logits (B, classes).
 * Every tensor's shape is set as it is added.
 *
 * The one design decision: the graph is read off the model object libcore builds from
 * the checkpoint's config — its sizes, its parameter tables for names and shapes,
 * ResNet's units for every convolution's kernel, stride, padding and ReLU — rather than
 * from a second description of the architectures, so what Nebula can train (any depth,
 * width, stem or class count) is what is exported. */
#include "deploy.h"

#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/tool/offline.h"
#include "nn/model.h"
#include "train/train.h"

#define GPT2_EPS 1e-5f    /* gpt2.c GPT2_LN_EPS */
#define BERT_EPS 1e-12f   /* bert.c BERT_LN_EPS */
#define BN_EPS 1e-5f      /* resnet.c RESNET_BN_EPS */
#define MASK_NEG -1e9f    /* the causal mask above the diagonal */
#define NO_BIAS (-2)      /* gemm() without its C input (-1 is a failed operand) */

typedef struct shape {
    int n;
    int64_t d[NANO_MAX_DIMS];
} shape;
#define SH(...) ((shape){ (int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), { __VA_ARGS__ } })
#define NODE(b, op, name, a, s, ...) \
    node(b, op, name, a, s, (int)(sizeof((int[]){ __VA_ARGS__ }) / sizeof(int)), (const int[]){ __VA_ARGS__ })

/* The graph under construction and the model it is read from. The first failure is kept
 * (st, err) and every later call returns -1 at once, so the builders read straight. */
typedef struct bld {
    nano_graph *g;
    model *m;
    const param_table *tab[2];  /* the parameters, and the state (ResNet's BN statistics) or NULL */
    const float *val[2];        /* their flat buffers */
    const char *ckpt;           /* the checkpoint, for messages */
    nano_status st;
    char *err;
    size_t errlen;
    char name[160];             /* nm()'s activation name */
    char pname[PARAM_NAME_MAX]; /* par()'s tensor name */
} bld;

static int fail(bld *b, nano_status st, const char *fmt, ...)
{
    if (b->st == NANO_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, b->errlen, fmt, ap);
        va_end(ap);
        b->st = st;
    }
    return -1;
}

static const char *nm(bld *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->name, sizeof b->name, fmt, ap);
    va_end(ap);
    return b->name;
}

static int tensor(bld *b, const char *name, int dtype, int kind, shape s, void *data)
{
    if (b->st != NANO_OK) {
        free(data);
        return -1;
    }
    int t = nano_graph_add_tensor(b->g, name, dtype, kind, s.n, s.d, data, 1);
    if (t < 0) {
        free(data);
        return fail(b, NANO_E_NOMEM, "out of memory adding tensor '%s' to the graph of %s", name, b->ckpt);
    }
    return t;
}

/* A node with one output, the activation `name` of shape s (kind: ACT, or OUTPUT). */
static int node_k(bld *b, int op, const char *name, const nano_attrs *a, shape s, int kind, int nin, const int *in)
{
    for (int i = 0; i < nin; i++)
        if (in[i] < 0) return -1;  /* an operand failed: its error is kept */
    int out = tensor(b, name, NANO_DT_F32, kind, s, NULL);
    if (out < 0) return -1;
    if (nano_graph_add_node(b->g, op, name, nin, (const int32_t *)in, 1, &out, a) < 0)
        return fail(b, NANO_E_NOMEM, "out of memory adding node '%s'", name);
    return out;
}

static int node(bld *b, int op, const char *name, const nano_attrs *a, shape s, int nin, const int *in)
{
    return node_k(b, op, name, a, s, NANO_T_ACT, nin, in);
}

/* Entry e of table k as an f32 constant under its name, transposed when `tr` (2-D);
 * a name already in the graph is that tensor (a tied weight used twice). Non-finite
 * values are refused: the weights of a run that diverged. */
static int cst(bld *b, int k, const param_entry *e, bool tr)
{
    if (b->st != NANO_OK) return -1;
    int t = nano_graph_find(b->g, e->name);
    if (t >= 0) return t;
    shape s = { e->ndim, { 0 } };
    for (int d = 0; d < e->ndim; d++) s.d[d] = (int64_t)e->shape[d];
    float *v = malloc(e->count * sizeof *v + 1);
    if (!v) return fail(b, NANO_E_NOMEM, "out of memory copying %s of %s", e->name, b->ckpt);
    const float *src = b->val[k] + e->offset;
    size_t bad = 0, R = e->ndim == 2 ? e->shape[0] : 1, C = e->ndim == 2 ? e->shape[1] : e->count;
    if (tr && e->ndim == 2) {
        for (size_t r = 0; r < R; r++)
            for (size_t c = 0; c < C; c++) v[c * R + r] = src[r * C + c];
        s.d[0] = (int64_t)C, s.d[1] = (int64_t)R;
    } else {
        memcpy(v, src, e->count * sizeof *v);
    }
    for (size_t i = 0; i < e->count; i++) bad += !isfinite(v[i]);
    if (bad) {
        free(v);
        return fail(b, NANO_E_FORMAT, "%s: %s holds %zu NaN or Inf value(s) of %zu (the weights of a run that "
                    "diverged): export an earlier checkpoint", b->ckpt, e->name, bad, e->count);
    }
    return tensor(b, e->name, NANO_DT_F32, NANO_T_CONST, s, v);
}

/* The tensor named by fmt in the parameters or the state, as cst() adds it. */
static int par_t(bld *b, bool tr, const char *fmt, ...)
{
    if (b->st != NANO_OK) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->pname, sizeof b->pname, fmt, ap);
    va_end(ap);
    for (int k = 0; k < 2 && b->tab[k]; k++) {
        int i = param_find(b->tab[k], b->pname);
        if (i >= 0) return cst(b, k, &b->tab[k]->entries[i], tr);
    }
    return fail(b, NANO_E_FORMAT, "%s: the model '%s' has no tensor '%s'", b->ckpt, b->m->spec.name, b->pname);
}
#define par(b, ...) par_t(b, false, __VA_ARGS__)

/* The entry of table k at flat offset off (ResNet's units name their tensors by offset). */
static const param_entry *entry_at(const bld *b, int k, size_t off)
{
    for (int i = 0; i < b->tab[k]->count; i++)
        if (b->tab[k]->entries[i].offset == off) return &b->tab[k]->entries[i];
    return NULL;
}

static int cst_at(bld *b, int k, size_t off)
{
    const param_entry *e = entry_at(b, k, off);
    return e ? cst(b, k, e, false) : fail(b, NANO_E_FORMAT, "%s: no tensor at offset %zu of %s's table", b->ckpt,
                                          off, b->m->spec.name);
}

/* A constant built here (positions, the mask, the scale): n values of `bytes` each. */
static int made(bld *b, const char *name, int dtype, shape s, const void *src, size_t bytes)
{
    int t = b->st == NANO_OK ? nano_graph_find(b->g, name) : -1;
    if (t >= 0 || b->st != NANO_OK) return t;
    void *v = malloc(bytes + 1);
    if (!v) return fail(b, NANO_E_NOMEM, "out of memory for constant %s", name);
    memcpy(v, src, bytes);
    return tensor(b, name, dtype, NANO_T_CONST, s, v);
}

/* ---- the transformers -------------------------------------------------------------- */

/* An I64 constant [T]: 0..T-1 (positions) or zeros (token types). */
static int ids_const(bld *b, const char *name, int T, bool count)
{
    int64_t *v = malloc((size_t)T * sizeof *v);
    if (!v) return fail(b, NANO_E_NOMEM, "out of memory for %s", name);
    for (int t = 0; t < T; t++) v[t] = count ? t : 0;
    int r = made(b, name, NANO_DT_I64, SH(T), v, (size_t)T * sizeof *v);
    free(v);
    return r;
}

/* x (B·T, N) = x · Wᵀ + bias, W (N, K) already as the graph holds it. */
static int gemm(bld *b, const char *name, int x, int w, int bias, int64_t M, int64_t N)
{
    const nano_attrs a = { .trans_b = 1, .alpha = 1.0f, .beta = 1.0f };
    if (bias == NO_BIAS) return NODE(b, NANO_OP_GEMM, name, &a, SH(M, N), x, w);
    return NODE(b, NANO_OP_GEMM, name, &a, SH(M, N), x, w, bias);
}

static int layernorm(bld *b, const char *name, int x, int w, int bias, int64_t M, int64_t C, float eps)
{
    const nano_attrs a = { .axis = 1, .eps = eps };
    return NODE(b, NANO_OP_LAYERNORM, name, &a, SH(M, C), x, w, bias);
}

/* One head split: (B·T, C) to (B, NH, T, HS), or keys to (B, NH, HS, T) when kt. */
static int heads(bld *b, const char *pfx, const char *what, int x, int B, int T, int NH, int HS, bool kt)
{
    int r = NODE(b, NANO_OP_RESHAPE, nm(b, "%s.%s_heads", pfx, what), NULL, SH(B, T, NH, HS), x);
    nano_attrs a = { .perm = { 0, 2, kt ? 3 : 1, kt ? 1 : 3 } };
    shape s = kt ? SH(B, NH, HS, T) : SH(B, NH, T, HS);
    return NODE(b, NANO_OP_TRANSPOSE, nm(b, "%s.%s_t", pfx, what), &a, s, r);
}

/* softmax(Q·Kᵀ / sqrt(HS) [+ causal mask]) · V for q, k, v (B·T, C); (B·T, C) out. */
static int attention(bld *b, const char *prefix, int q, int k, int v, int B, int T, int C, int NH, bool causal)
{
    char pfx[sizeof b->name];  /* prefix may be nm()'s buffer, which the names below reuse */
    snprintf(pfx, sizeof pfx, "%s", prefix);
    int HS = C / NH;
    q = heads(b, pfx, "q", q, B, T, NH, HS, false);
    k = heads(b, pfx, "k", k, B, T, NH, HS, true);
    v = heads(b, pfx, "v", v, B, T, NH, HS, false);
    float scale = 1.0f / sqrtf((float)HS);
    int sc = made(b, "attn_scale", NANO_DT_F32, SH(1), &scale, sizeof scale);
    int s = NODE(b, NANO_OP_MATMUL, nm(b, "%s.scores", pfx), NULL, SH(B, NH, T, T), q, k);
    s = NODE(b, NANO_OP_MUL, nm(b, "%s.scaled", pfx), NULL, SH(B, NH, T, T), s, sc);
    if (causal && b->st == NANO_OK) {
        int mask = nano_graph_find(b->g, "causal_mask");
        if (mask < 0) {
            float *mv = malloc((size_t)T * T * sizeof *mv);
            if (!mv) return fail(b, NANO_E_NOMEM, "out of memory for the causal mask");
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) mv[(size_t)i * T + j] = j > i ? MASK_NEG : 0.0f;
            mask = tensor(b, "causal_mask", NANO_DT_F32, NANO_T_CONST, SH(T, T), mv);
        }
        s = NODE(b, NANO_OP_ADD, nm(b, "%s.masked", pfx), NULL, SH(B, NH, T, T), s, mask);
    }
    const nano_attrs sm = { .axis = 3 };
    int p = NODE(b, NANO_OP_SOFTMAX, nm(b, "%s.probs", pfx), &sm, SH(B, NH, T, T), s);
    int o = NODE(b, NANO_OP_MATMUL, nm(b, "%s.context", pfx), NULL, SH(B, NH, T, HS), p, v);
    const nano_attrs tr = { .perm = { 0, 2, 1, 3 } };
    o = NODE(b, NANO_OP_TRANSPOSE, nm(b, "%s.context_t", pfx), &tr, SH(B, T, NH, HS), o);
    return NODE(b, NANO_OP_RESHAPE, nm(b, "%s.merged", pfx), NULL, SH((int64_t)B * T, C), o);
}

/* (B·T, V) logits to the graph's output (B, T, V). */
static int lm_output(bld *b, int x, int B, int T, int V)
{
    return node_k(b, NANO_OP_RESHAPE, "logits", NULL, SH(B, T, V), NANO_T_OUTPUT, 1, (const int[]){ x });
}

static void gpt2_net(bld *b, int B, int T)
{
    const gpt2_config *c = &b->m->spec.gpt2;
    int C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    int64_t BT = (int64_t)B * T;
    const nano_attrs ax0 = { .axis = 0 }, gelu = { .act = NANO_ACT_GELU_TANH };
    int ids = tensor(b, "input_ids", NANO_DT_I64, NANO_T_INPUT, SH(B, T), NULL);
    int wte = par(b, "wte.weight");
    int tok = NODE(b, NANO_OP_GATHER, "embed.tokens", &ax0, SH(B, T, C), wte, ids);
    int pos = NODE(b, NANO_OP_GATHER, "embed.positions", &ax0, SH(T, C), par(b, "wpe.weight"),
                   ids_const(b, "position_ids", T, true));
    int x = NODE(b, NANO_OP_ADD, "embed", NULL, SH(B, T, C), tok, pos);
    x = NODE(b, NANO_OP_RESHAPE, "embed.rows", NULL, SH(BT, C), x);
    for (int l = 0; l < c->num_layers && b->st == NANO_OK; l++) {
        char p[32];
        snprintf(p, sizeof p, "h.%d", l);
        int h = layernorm(b, nm(b, "%s.ln_1", p), x, par(b, "%s.ln_1.weight", p), par(b, "%s.ln_1.bias", p), BT, C,
                          GPT2_EPS);
        int qkv = gemm(b, nm(b, "%s.attn.c_attn", p), h, par_t(b, true, "%s.attn.c_attn.weight", p),
                       par(b, "%s.attn.c_attn.bias", p), BT, 3 * C);
        int q = -1, k = -1, v = -1;
        if (qkv >= 0) {  /* Split along the columns: q | k | v, C each */
            int out[3];
            const char *part[3] = { "q", "k", "v" };
            for (int i = 0; i < 3; i++) out[i] = tensor(b, nm(b, "%s.attn.%s", p, part[i]), NANO_DT_F32, NANO_T_ACT,
                                                        SH(BT, C), NULL);
            const nano_attrs a = { .axis = 1 };
            if (b->st == NANO_OK && nano_graph_add_node(b->g, NANO_OP_SPLIT, nm(b, "%s.attn.split", p), 1, &qkv, 3,
                                                        out, &a) < 0)
                fail(b, NANO_E_NOMEM, "out of memory adding node '%s'", b->name);
            q = out[0], k = out[1], v = out[2];
        }
        int att = attention(b, nm(b, "%s.attn", p), q, k, v, B, T, C, c->num_heads, true);
        att = gemm(b, nm(b, "%s.attn.c_proj", p), att, par_t(b, true, "%s.attn.c_proj.weight", p),
                   par(b, "%s.attn.c_proj.bias", p), BT, C);
        int r2 = NODE(b, NANO_OP_ADD, nm(b, "%s.residual_1", p), NULL, SH(BT, C), x, att);
        h = layernorm(b, nm(b, "%s.ln_2", p), r2, par(b, "%s.ln_2.weight", p), par(b, "%s.ln_2.bias", p), BT, C,
                      GPT2_EPS);
        h = gemm(b, nm(b, "%s.mlp.c_fc", p), h, par_t(b, true, "%s.mlp.c_fc.weight", p), par(b, "%s.mlp.c_fc.bias", p),
                 BT, 4 * C);
        h = NODE(b, NANO_OP_GELU, nm(b, "%s.mlp.gelu", p), &gelu, SH(BT, 4 * C), h);
        h = gemm(b, nm(b, "%s.mlp.c_proj", p), h, par_t(b, true, "%s.mlp.c_proj.weight", p),
                 par(b, "%s.mlp.c_proj.bias", p), BT, C);
        x = NODE(b, NANO_OP_ADD, nm(b, "%s.residual_2", p), NULL, SH(BT, C), r2, h);
    }
    x = layernorm(b, "ln_f", x, par(b, "ln_f.weight"), par(b, "ln_f.bias"), BT, C, GPT2_EPS);
    x = gemm(b, "lm_head", x, wte, NO_BIAS, BT, Vp);  /* tied: wte (Vp, C) is already (N, K) */
    if (Vp != V) {  /* the padding rows are no tokens: the real vocabulary only */
        const nano_attrs a = { .begin = { 0, 0 }, .step = { 1, 1 } };
        x = NODE(b, NANO_OP_SLICE, "lm_head.vocab", &a, SH(BT, V), x);
    }
    lm_output(b, x, B, T, V);
}

static void bert_net(bld *b, int B, int T)
{
    const bert_config *c = &b->m->spec.bert;
    int C = c->channels, IC = c->intermediate, V = c->vocab_size;
    int64_t BT = (int64_t)B * T;
    const nano_attrs ax0 = { .axis = 0 }, gelu = { .act = NANO_ACT_GELU };
    int ids = tensor(b, "input_ids", NANO_DT_I64, NANO_T_INPUT, SH(B, T), NULL);
    int wemb = par(b, "embeddings.word_embeddings.weight");
    int x = NODE(b, NANO_OP_GATHER, "embed.words", &ax0, SH(B, T, C), wemb, ids);
    int pos = NODE(b, NANO_OP_GATHER, "embed.positions", &ax0, SH(T, C), par(b, "embeddings.position_embeddings.weight"),
                   ids_const(b, "position_ids", T, true));
    int typ = NODE(b, NANO_OP_GATHER, "embed.token_types", &ax0, SH(T, C),
                   par(b, "embeddings.token_type_embeddings.weight"), ids_const(b, "token_type_ids", T, false));
    x = NODE(b, NANO_OP_ADD, "embed.sum_1", NULL, SH(B, T, C), x, pos);  /* bert.c's order: word + pos, + type */
    x = NODE(b, NANO_OP_ADD, "embed.sum_2", NULL, SH(B, T, C), x, typ);
    x = NODE(b, NANO_OP_RESHAPE, "embed.rows", NULL, SH(BT, C), x);
    x = layernorm(b, "embeddings.LayerNorm", x, par(b, "embeddings.LayerNorm.weight"),
                  par(b, "embeddings.LayerNorm.bias"), BT, C, BERT_EPS);
    for (int l = 0; l < c->num_layers && b->st == NANO_OK; l++) {
        char p[48];
        snprintf(p, sizeof p, "encoder.layer.%d", l);
        int qkv[3];
        const char *part[3] = { "query", "key", "value" };
        for (int i = 0; i < 3; i++)
            qkv[i] = gemm(b, nm(b, "%s.attention.self.%s", p, part[i]), x,
                          par(b, "%s.attention.self.%s.weight", p, part[i]),
                          par(b, "%s.attention.self.%s.bias", p, part[i]), BT, C);
        int att = attention(b, nm(b, "%s.attention.self", p), qkv[0], qkv[1], qkv[2], B, T, C, c->num_heads, false);
        att = gemm(b, nm(b, "%s.attention.output.dense", p), att, par(b, "%s.attention.output.dense.weight", p),
                   par(b, "%s.attention.output.dense.bias", p), BT, C);
        att = NODE(b, NANO_OP_ADD, nm(b, "%s.attention.residual", p), NULL, SH(BT, C), x, att);
        int x1 = layernorm(b, nm(b, "%s.attention.output.LayerNorm", p), att,
                           par(b, "%s.attention.output.LayerNorm.weight", p),
                           par(b, "%s.attention.output.LayerNorm.bias", p), BT, C, BERT_EPS);
        int h = gemm(b, nm(b, "%s.intermediate.dense", p), x1, par(b, "%s.intermediate.dense.weight", p),
                     par(b, "%s.intermediate.dense.bias", p), BT, IC);
        h = NODE(b, NANO_OP_GELU, nm(b, "%s.intermediate.gelu", p), &gelu, SH(BT, IC), h);
        h = gemm(b, nm(b, "%s.output.dense", p), h, par(b, "%s.output.dense.weight", p),
                 par(b, "%s.output.dense.bias", p), BT, C);
        h = NODE(b, NANO_OP_ADD, nm(b, "%s.output.residual", p), NULL, SH(BT, C), x1, h);
        x = layernorm(b, nm(b, "%s.output.LayerNorm", p), h, par(b, "%s.output.LayerNorm.weight", p),
                      par(b, "%s.output.LayerNorm.bias", p), BT, C, BERT_EPS);
    }
    x = gemm(b, "cls.predictions.transform.dense", x, par(b, "cls.predictions.transform.dense.weight"),
             par(b, "cls.predictions.transform.dense.bias"), BT, C);
    x = NODE(b, NANO_OP_GELU, "cls.predictions.transform.gelu", &gelu, SH(BT, C), x);
    x = layernorm(b, "cls.predictions.transform.LayerNorm", x, par(b, "cls.predictions.transform.LayerNorm.weight"),
                  par(b, "cls.predictions.transform.LayerNorm.bias"), BT, C, BERT_EPS);
    x = gemm(b, "cls.predictions.decoder", x, wemb, par(b, "cls.predictions.bias"), BT, V);  /* tied */
    lm_output(b, x, B, T, V);
}

/* ---- the image classifiers --------------------------------------------------------- */

/* conv, BN (running statistics), and ReLU when the unit has one; N images. */
static int unit(bld *b, const resnet_unit *u, int x, int N)
{
    const param_entry *we = entry_at(b, 0, u->w), *be = entry_at(b, 0, u->bn_w);
    if (!we || !be) return fail(b, NANO_E_FORMAT, "%s: a ResNet unit whose tensors are not in the table", b->ckpt);
    char conv[PARAM_NAME_MAX], bn[PARAM_NAME_MAX];
    snprintf(conv, sizeof conv, "%.*s", (int)(strlen(we->name) - strlen(".weight")), we->name);
    snprintf(bn, sizeof bn, "%.*s", (int)(strlen(be->name) - strlen(".weight")), be->name);
    const nano_attrs ca = { .kernel = { u->K, u->K }, .stride = { u->stride, u->stride },
                            .pad = { u->pad, u->pad, u->pad, u->pad }, .dilation = { 1, 1 }, .group = 1 };
    const nano_attrs ba = { .eps = BN_EPS };
    shape s = SH(N, u->OC, u->OH, u->OW);
    x = NODE(b, NANO_OP_CONV, conv, &ca, s, x, cst(b, 0, we, false));
    x = NODE(b, NANO_OP_BATCHNORM, bn, &ba, s, x, cst(b, 0, be, false), cst_at(b, 0, u->bn_b), cst_at(b, 1, u->rmean),
             cst_at(b, 1, u->rvar));
    return u->relu ? NODE(b, NANO_OP_RELU, nm(b, "%s.relu", bn), NULL, s, x) : x;
}

/* fc: (N, K) features to the graph's output (N, classes). */
static void classifier(bld *b, int x, int w, int bias, int N, int classes)
{
    const nano_attrs a = { .trans_b = 1, .alpha = 1.0f, .beta = 1.0f };
    node_k(b, NANO_OP_GEMM, "logits", &a, SH(N, classes), NANO_T_OUTPUT, 3, (const int[]){ x, w, bias });
}

static void resnet_net(bld *b, int N)
{
    const resnet *r = &b->m->resnet;
    const resnet_acts *a = &r->acts;
    int S = b->m->spec.image_size, x = tensor(b, "pixels", NANO_DT_F32, NANO_T_INPUT, SH(N, 3, S, S), NULL);
    x = unit(b, &a->stem, x, N);
    if (r->cfg.stem == RESNET_STEM_IMAGENET) {
        const nano_attrs mp = { .kernel = { 3, 3 }, .stride = { 2, 2 }, .pad = { 1, 1, 1, 1 }, .dilation = { 1, 1 } };
        x = NODE(b, NANO_OP_MAXPOOL, "maxpool", &mp, SH(N, r->cfg.width, a->PH, a->PW), x);
    }
    for (int i = 0; i < a->nblocks && b->st == NANO_OK; i++) {
        const resnet_block *k = &a->blocks[i];
        const resnet_unit *last = &k->unit[k->nunits - 1];
        const param_entry *e = entry_at(b, 0, k->unit[0].w);
        const char *dot = e ? strrchr(e->name, '.') : NULL;  /* "layerK.J.conv1.weight": the block is "layerK.J" */
        while (dot && dot > e->name && strncmp(dot, ".conv", 5) != 0) dot--;
        char blk[PARAM_NAME_MAX];
        snprintf(blk, sizeof blk, "%.*s", e && dot ? (int)(dot - e->name) : 0, e ? e->name : "");
        int y = x;
        for (int u = 0; u < k->nunits; u++) y = unit(b, &k->unit[u], y, N);
        int id = k->has_down ? unit(b, &k->down, x, N) : x;
        shape s = SH(N, last->OC, last->OH, last->OW);
        y = NODE(b, NANO_OP_ADD, nm(b, "%s.add", blk), NULL, s, y, id);
        x = NODE(b, NANO_OP_RELU, nm(b, "%s.relu", blk), NULL, s, y);
    }
    x = NODE(b, NANO_OP_GLOBALAVGPOOL, "avgpool", NULL, SH(N, a->feat_C, 1, 1), x);
    x = NODE(b, NANO_OP_RESHAPE, "flatten", NULL, SH(N, a->feat_C), x);
    classifier(b, x, par(b, "fc.weight"), par(b, "fc.bias"), N, r->cfg.num_classes);
}

static void mlp_net(bld *b, int N)
{
    const param_table *t = b->tab[0];
    int S = b->m->spec.image_size, x = tensor(b, "pixels", NANO_DT_F32, NANO_T_INPUT, SH(N, 3, S, S), NULL);
    x = NODE(b, NANO_OP_RESHAPE, "flatten", NULL, SH(N, 3 * S * S), x);
    int n = t->count / 2;  /* layers.{2i}.weight (out, in), layers.{2i}.bias (out) */
    for (int i = 0; i + 1 < n && b->st == NANO_OK; i++) {
        const param_entry *w = &t->entries[2 * i];
        x = gemm(b, nm(b, "layers.%d", 2 * i), x, cst(b, 0, w, false), cst(b, 0, &t->entries[2 * i + 1], false), N,
                 (int64_t)w->shape[0]);
        x = NODE(b, NANO_OP_RELU, nm(b, "layers.%d", 2 * i + 1), NULL, SH(N, (int64_t)w->shape[0]), x);
    }
    const param_entry *w = &t->entries[2 * (n - 1)];
    classifier(b, x, cst(b, 0, w, false), cst(b, 0, &t->entries[2 * n - 1], false), N, (int)w->shape[0]);
}

/* ---- the checkpoint ---------------------------------------------------------------- */

static nano_status say(char *err, size_t errlen, nano_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return st;
}

/* A failure libcore logged (the message above names the dataset or key) as a nano status. */
static nano_status from_status(status st)
{
    return st == STATUS_IO ? NANO_E_IO : st == STATUS_NOMEM ? NANO_E_NOMEM : NANO_E_FORMAT;
}

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* path (a run directory, its ckpt/, a step directory or a state.h5) to what
 * ckpt_catalog_open takes: the step directory or file; the newest committed step of a
 * run or ckpt/ directory. */
static nano_status locate(const char *path, char *out, size_t len, char *err, size_t errlen)
{
    struct stat sb;
    char p[4096];
    if (stat(path, &sb) != 0) return say(err, errlen, NANO_E_IO, "%s: no such file or directory", path);
    snprintf(p, sizeof p, "%s/state.h5", path);
    if (!S_ISDIR(sb.st_mode) || stat(p, &sb) == 0) {
        snprintf(out, len, "%s", path);
        return NANO_OK;
    }
    snprintf(p, sizeof p, "%s/ckpt", path);
    int64_t step;
    if (ckpt_last_committed(is_dir(p) ? p : path, out, len, &step)) return NANO_OK;
    return say(err, errlen, NANO_E_ARG, "%s holds no committed checkpoint: give a run directory, its ckpt/ or a "
               "ckpt/step_N directory with a COMMITTED marker", path);
}

/* MPI for the checkpoint reader (ckpt_catalog_load reads through parallel HDF5 on
 * MPI_COMM_SELF): a program that has not started it (a singleton, no mpirun needed) gets
 * it started here, and finalised at exit. */
static void finalize_mpi(void)
{
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

static nano_status need_mpi(char *err, size_t errlen)
{
    int on = 0, done = 0, provided;
    MPI_Initialized(&on);
    MPI_Finalized(&done);
    if (on && !done) return NANO_OK;
    if (done) return say(err, errlen, NANO_E_ARG, "MPI was finalised: a checkpoint cannot be read after MPI_Finalize");
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return say(err, errlen, NANO_E_IO, "cannot start MPI, which the checkpoint reader needs");
    atexit(finalize_mpi);
    return NANO_OK;
}

/* The model the checkpoint's [model] section describes, for one sample, with its
 * parameters (and buffers) loaded; *spec filled first so the caller can check the
 * shape. The model is built (m->base set) whenever this returns NANO_OK. */
static nano_status load(const char *path, model *m, int batch, int seq, int *T, char *err, size_t errlen)
{
    char dir[4096];
    nano_status ns = locate(path, dir, sizeof dir, err, errlen);
    if (ns == NANO_OK) ns = need_mpi(err, errlen);
    if (ns != NANO_OK) return ns;
    ckpt_catalog cat;
    status st = ckpt_catalog_open(&cat, dir);
    if (st != STATUS_OK)
        return say(err, errlen, from_status(st), "%s is not a readable Nebula checkpoint (%s; the message above says "
                   "why)", dir, status_str(st));
    config mc;
    model_spec s;
    if (model_config_from_ini(&mc, cat.config) != STATUS_OK || model_spec_from_config(&s, &mc) != STATUS_OK ||
        strcmp(s.name, cat.h.model) != 0) {
        ns = say(err, errlen, NANO_E_FORMAT, "%s: its stored config's [model] section does not describe the model '%s' "
                 "the checkpoint holds", cat.dir, cat.h.model);
    } else if (batch < 1) {
        ns = say(err, errlen, NANO_E_ARG, "batch %d: at least 1", batch);
    } else if (model_spec_images(&s)) {
        *T = 0;
        if (seq != 0) ns = say(err, errlen, NANO_E_ARG, "seq %d: %s takes images (3 x %d x %d), not sequences; seq "
                               "must be 0", seq, s.name, s.image_size, s.image_size);
    } else {
        int ctx = s.family == MODEL_FAMILY_GPT2 ? s.gpt2.max_seq_len : s.bert.max_position;
        *T = seq ? seq : ctx;
        if (seq < 0 || seq > ctx)
            ns = say(err, errlen, NANO_E_ARG, "seq %d: %s's context is 1..%d tokens (model.max_seq_len; 0 for all of "
                     "it)", seq, s.name, ctx);
    }
    if (ns == NANO_OK && s.family != MODEL_FAMILY_GPT2 && s.family != MODEL_FAMILY_BERT &&
        s.family != MODEL_FAMILY_RESNET && s.family != MODEL_FAMILY_MLP)
        ns = say(err, errlen, NANO_E_UNSUPPORTED, "%s: model %s (%s) has no inference graph here", cat.dir, s.name,
                 model_family_name(&s));
    if (ns == NANO_OK && (st = model_init(m, &s, 1, model_spec_images(&s) ? 0 : 1, 0, false)) != STATUS_OK)
        ns = say(err, errlen, from_status(st), "cannot build %s for %s (%s)", s.name, cat.dir, status_str(st));
    if (ns != NANO_OK) {
        ckpt_catalog_free(&cat);
        return ns;
    }
    ckpt_content c = { .step = cat.h.step, .model = cat.h.model, .table_hash = param_table_hash(model_params(m)) };
    c.groups[c.ngroups++] = (ckpt_tensors){ TRAIN_CKPT_PARAMS, model_params(m), model_buffers(m)->params, false };
    if (model_state_table(m))
        c.groups[c.ngroups++] = (ckpt_tensors){ TRAIN_CKPT_BUFFERS, model_state_table(m), model_state(m), false };
    st = ckpt_catalog_load(MPI_COMM_SELF, &cat, &c);
    if (st != STATUS_OK) {
        ns = say(err, errlen, from_status(st), "cannot load the %s of %s (%s; the message above names the tensor)",
                 model_state_table(m) ? "parameters and batch-norm statistics" : "parameters", cat.dir,
                 status_str(st));
        model_free(m);
    }
    ckpt_catalog_free(&cat);
    return ns;
}

/* g->meta: where the graph came from. */
static void set_meta(nano_graph *g, const char *path, const model *m, int B, int T)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i}", "source", "nebula-checkpoint", "checkpoint", path, "model",
                          m->spec.name, "family", model_family_name(&m->spec), "batch", B, "seq", T);
    g->meta = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
}

nano_status deploy_from_checkpoint(nano_graph *g, const char *path, int batch, int seq, char *err, size_t errlen)
{
    nano_graph_init(g);
    model m;
    memset(&m, 0, sizeof m);
    int T = 0;
    nano_status ns = load(path, &m, batch, seq, &T, err, errlen);
    if (ns != NANO_OK) return ns;
    bld b = { .g = g, .m = &m, .tab = { model_params(&m), model_state_table(&m) },
              .val = { model_buffers(&m)->params, model_state(&m) }, .ckpt = path, .err = err, .errlen = errlen };
    switch (m.spec.family) {
    case MODEL_FAMILY_GPT2: gpt2_net(&b, batch, T); break;
    case MODEL_FAMILY_BERT: bert_net(&b, batch, T); break;
    case MODEL_FAMILY_RESNET: resnet_net(&b, batch); break;
    default: mlp_net(&b, batch); break;
    }
    if (b.st == NANO_OK) set_meta(g, path, &m, batch, T);
    model_free(&m);
    if (b.st != NANO_OK) nano_graph_free(g);
    return b.st;
}
