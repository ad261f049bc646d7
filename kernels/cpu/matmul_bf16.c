/* matmul_bf16 — the fully connected layer with bf16 operands on the CPU: the contracts
 * of matmul.h, computed as PyTorch's CPU autocast does (torch.autocast("cpu",
 * torch.bfloat16)): each operand rounded to bf16 (nearest even, f32_to_bf16's bits),
 * products summed in fp32, results fp32. oneDNN's matmul runs the products: AMX tiles
 * where the CPU has them, AVX512-BF16 dot products otherwise (device_open refuses bf16
 * below isa level avx512_bf16, where oneDNN would emulate it slower than fp32).
 *
 * The one design decision: each forward rounds its weight into a bf16 copy kept per
 * weight (by address), and the backward of that layer reuses it — PyTorch's autocast
 * keeps the same cache of weight casts for a step. That is the contract: backward runs
 * after the forward of the same weight, with the weight unchanged in between (as
 * conv2d_plan_backward's). The copies take half the weights' bytes (250 MB for GPT-2
 * 124M); a bf16 shadow kept by the optimizer instead would save the forward's pass too,
 * but every writer of the parameters (checkpoint load, broadcast, hot reload) would have
 * to keep it in sync. Activations and dout are rounded into a process-wide workspace
 * per call. Both grow on the first step and live until matmul_bf16_release; oneDNN
 * primitives are kept per shape.
 *
 * Transposes are memory-descriptor strides, never copies (dnn_matmul). dbias is fp32
 * from the fp32 dout. */
#include "matmul.h"

#include "dnn.h"
#include "precision.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One oneDNN matmul C (M, N) [+]= A (M, K) · B (K, N) with bf16 A and B, f32 C. */
typedef struct mm_key {
    int M, N, K;
    int a_trans, b_trans; /* operand stored transposed ("ba") */
    int accumulate;       /* C += (a sum post-op), else C = */
} mm_key;

typedef struct mm_entry {
    mm_key key;
    dnn_matmul mm;
} mm_entry;

/* GPT-2 and BERT use ~12 shapes per batch size (3 per fully connected layer kind). */
#define MM_CACHE 64
static mm_entry cache[MM_CACHE];
static int ncache;

static uint16_t *ws;     /* bf16 operands, carved per call */
static size_t ws_elems;  /* capacity in bf16 values */

/* The forward's bf16 copy of each weight. 4 linear layers per transformer block: 48
 * blocks of GPT-2 or BERT fit; a model with more weights converts the rest per call. */
#define WCACHE 256
typedef struct wcopy {
    const float *w;  /* the fp32 weight */
    size_t n;        /* its values */
    uint16_t *h;     /* rounded by the last forward */
} wcopy;
static wcopy wcache[WCACHE];
static int nwcache;

static uint16_t *workspace(size_t elems)
{
    if (elems > ws_elems) {
        free(ws);
        ws = aligned_alloc(64, (elems * sizeof *ws + 63) / 64 * 64);
        if (!ws) dnn_check(dnnl_out_of_memory, "the bf16 matmul workspace", __FILE__, __LINE__);
        ws_elems = elems;
    }
    return ws;
}

/* The forward's copy of weight w (n values), rounded now; NULL when the cache is full
 * or out of memory (the caller rounds into the workspace). */
static const uint16_t *weight_round(const float *w, size_t n)
{
    wcopy *c = NULL;
    for (int i = 0; i < nwcache && !c; i++)
        if (wcache[i].w == w) c = &wcache[i];
    if (!c) {
        if (nwcache == WCACHE) return NULL;
        c = &wcache[nwcache++];
        *c = (wcopy){ w, 0, NULL };
    }
    if (c->n != n) {
        free(c->h);
        c->h = aligned_alloc(64, (n * sizeof *c->h + 63) / 64 * 64);
        c->n = c->h ? n : 0;
        if (!c->h) return NULL;
    }
    f32_to_bf16(w, c->h, n);
    return c->h;
}

/* The copy the forward made of w, or NULL. */
static const uint16_t *weight_rounded(const float *w, size_t n)
{
    for (int i = 0; i < nwcache; i++)
        if (wcache[i].w == w && wcache[i].n == n) return wcache[i].h;
    return NULL;
}

void matmul_bf16_release(void)
{
    for (int i = 0; i < nwcache; i++) free(wcache[i].h);
    nwcache = 0;
    free(ws);
    ws = NULL;
    ws_elems = 0;
}

static mm_entry *mm_get(const mm_key *k)
{
    for (int i = 0; i < ncache; i++)
        if (!memcmp(&cache[i].key, k, sizeof *k)) return &cache[i];
    if (ncache == MM_CACHE) { /* a model with more shapes: start over rather than grow */
        for (int i = 0; i < ncache; i++) dnn_matmul_free(&cache[i].mm);
        ncache = 0;
    }
    mm_entry *e = &cache[ncache++];
    e->key = *k;
    /* dense operands: the leading dimension is the stored row (K, or M / N transposed) */
    dnn_matmul_init(&e->mm, dnnl_bf16, k->M, k->N, k->K, k->a_trans, k->a_trans ? k->M : k->K, k->b_trans,
                    k->b_trans ? k->K : k->N, k->N, k->accumulate);
    return e;
}

static void mm_run(const mm_key *k, const uint16_t *a, const uint16_t *b, float *c)
{
    dnn_matmul_run(&mm_get(k)->mm, a, b, c);
}

void matmul_forward_bf16(float *out, const float *inp, const float *weight, const float *bias, int BT, int C,
                         int OC, matmul_layout layout)
{
    if (BT <= 0 || OC <= 0) return;
    if (C <= 0 || bias) { /* the bias first, the product added onto it (as sgemm's beta = 1) */
        matmul_forward(out, inp, weight, bias, BT, 0, OC, layout);
        if (C <= 0) return;
    }
    size_t ni = (size_t)BT * C, nw = (size_t)C * OC;
    const uint16_t *w16 = weight_round(weight, nw);
    uint16_t *i16 = workspace(ni + (w16 ? 0 : nw));
    f32_to_bf16(inp, i16, ni);
    if (!w16) {
        f32_to_bf16(weight, i16 + ni, nw);
        w16 = i16 + ni;
    }
    /* out (BT, OC) = inp (BT, C) · Wm (C, OC); Wm = W^T ("ba") for OUT_IN */
    mm_key k = { BT, OC, C, 0, layout == MATMUL_LAYOUT_OUT_IN, bias != NULL };
    mm_run(&k, i16, w16, out);
}

void matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int BT, int C, int OC, matmul_layout layout)
{
    if (BT <= 0 || C <= 0 || OC <= 0) return;
    int out_in = layout == MATMUL_LAYOUT_OUT_IN;
    size_t nd = (size_t)BT * OC, nw = (size_t)C * OC, ni = (size_t)BT * C;
    const uint16_t *w16 = dinp ? weight_rounded(weight, nw) : NULL;
    bool wround = dinp && !w16;  /* no forward copy: round here */
    uint16_t *d16 = workspace(nd + (wround ? nw : 0) + (dweight ? ni : 0));
    uint16_t *i16 = d16 + nd + (wround ? nw : 0);
    f32_to_bf16(dout, d16, nd);
    if (dinp) {
        if (wround) {
            f32_to_bf16(weight, d16 + nd, nw);
            w16 = d16 + nd;
        }
        /* dinp (BT, C) += dout (BT, OC) · Wm^T (OC, C); Wm^T = W for OUT_IN */
        mm_key k = { BT, C, OC, 0, !out_in, 1 };
        mm_run(&k, d16, w16, dinp);
    }
    if (dweight) {
        f32_to_bf16(inp, i16, ni);
        if (out_in) { /* dW (OC, C) += dout^T (OC, BT) · inp (BT, C) */
            mm_key k = { OC, C, BT, 1, 0, 1 };
            mm_run(&k, d16, i16, dweight);
        } else {      /* dW (C, OC) += inp^T (C, BT) · dout (BT, OC) */
            mm_key k = { C, OC, BT, 1, 0, 1 };
            mm_run(&k, i16, d16, dweight);
        }
    }
    if (dbias) matmul_backward(NULL, NULL, dbias, dout, inp, weight, BT, C, OC, layout);
}
