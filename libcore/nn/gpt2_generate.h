/* gpt2_generate — GPT-2 inference one position at a time with a key/value cache, for
 * text generation (nebula-train sample): the same blocks as gpt2_forward (pre-norm,
 * tanh GELU, the tied head) on the CPU, but each forward computes only positions it
 * has not seen, reading the keys and values of the earlier ones from the cache.
 *
 * The one design decision: the cache holds the attention's K and V of every layer and
 * position, (L, maxT, C) each, and nothing else; a forward of n new tokens appends n
 * rows per layer. A step then costs one row's matmuls and an attention over the cache
 * (O(T C) per layer) instead of the whole sequence again (O(T C^2)); the price is
 * 2 L maxT C floats (GPT-2 124M at 1024 positions: 72 MiB). The prompt goes through
 * the same path as one forward of many rows (prefill); gpt2_kv_reset empties the
 * cache, so recomputing the whole sequence per token (the comparison without a
 * cache) is the same code with a reset before each forward.
 *
 * The model is a whole GPT-2 on the CPU (tp 1, every block); only its parameters are
 * read (m->pb.params), its training activations are not touched. */
#ifndef NEBULA_GPT2_GENERATE_H
#define NEBULA_GPT2_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "gpt2.h"

typedef struct gpt2_kv {
    int L, C, NH, Vp;      /* the model's sizes */
    int maxT;              /* positions the cache holds (<= max_seq_len) */
    int rows;              /* most positions one forward computes (the scratch's rows) */
    int len;               /* positions filled: the next forward starts at this one */
    float *k;              /* (L, maxT, C) keys, heads concatenated */
    float *v;              /* (L, maxT, C) values */
    float *x;              /* (rows, C) residual stream */
    float *ln;             /* (rows, C) layer-norm output */
    float *qkv;            /* (rows, 3C) */
    float *atty;           /* (rows, C) attention output */
    float *proj;           /* (rows, C) attn.c_proj or mlp.c_proj output */
    float *fch;            /* (rows, 4C) */
    float *fch_gelu;       /* (rows, 4C) */
    float *logits;         /* (Vp) logits of the last position of the last forward */
    int32_t *pos;          /* (rows) positions of the rows */
    float *memory;         /* one allocation behind the views above */
    size_t bytes;          /* its size */
} gpt2_kv;

/* A cache of maxT positions (1 <= maxT <= max_seq_len) and scratch for forwards of up to
 * `rows` new positions at a time. Dies when m is not a whole CPU model; STATUS_NOMEM. */
status gpt2_kv_init(gpt2_kv *kv, const gpt2 *m, int maxT, int rows);
/* Empties the cache: the next forward starts at position 0. */
void gpt2_kv_reset(gpt2_kv *kv);
void gpt2_kv_free(gpt2_kv *kv);
/* Bytes of the cache proper (K and V), what generation keeps besides the weights. */
size_t gpt2_kv_cache_bytes(const gpt2_kv *kv);

/* The n tokens at positions len .. len+n-1 (1 <= n <= rows, len + n <= maxT) through
 * every block, their K and V appended to the cache; kv->logits receives the last
 * position's logits (Vp, the padded rows included), and all_logits (n, Vp), when not
 * NULL, every new position's. STATUS_INPUT (logged) for a token outside the
 * vocabulary or a forward past maxT. */
status gpt2_kv_forward(gpt2_kv *kv, const gpt2 *m, const int32_t *tokens, int n, float *all_logits);

#endif
