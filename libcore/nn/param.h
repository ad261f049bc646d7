/* param — the parameter table and the flat buffers it describes (docs/design.md#flat-buffers;
 * llm.c's ParameterTensors).
 *
 * The one design decision: a model's parameters are ONE allocation of
 * `total` floats, and gradients and optimizer moments are further allocations
 * with exactly the same layout. A tensor is an (offset, count) slice of each;
 * buckets, DGC, ZeRO shards and checkpoints work on slices, never on gathers.
 * Every tensor starts at a multiple of PARAM_ALIGN_FLOATS (16 floats = 64
 * bytes) so it begins on a cache line and is aligned for any SIMD width up to
 * AVX-512. The alignment gaps (and the tail up to `total`) are padding: they
 * are zero after param_buffers_init and param_zero_grads, and no kernel writes
 * them, so whole-buffer operations (norms, allreduce of a slice) may include them.
 *
 * Names follow the ecosystem (Hugging Face GPT-2/BERT, torchvision ResNet:
 * "h.0.attn.c_attn.weight", "layer1.0.conv1.weight") so checkpoints convert to
 * safetensors that PyTorch users load directly. Shapes are PyTorch's (outermost
 * first). Duplicate names, bad shapes and over-long names are bugs: they die.
 *
 * Tables are built once at init (param_add appends; offsets grow in call order)
 * and are read-only afterwards; nothing here allocates after init. */
#ifndef NEBULA_PARAM_H
#define NEBULA_PARAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/log.h"

#define PARAM_NAME_MAX      96   /* bytes of a name including its NUL (95 characters) */
#define PARAM_MAX_DIMS      4    /* most dimensions of a tensor */
#define PARAM_ALIGN_FLOATS  16   /* every offset is a multiple of this (64 bytes) */
#define PARAM_ALIGN_BYTES   64   /* alignment of every buffer allocation */

typedef struct param_entry {
    char name[PARAM_NAME_MAX];     /* ecosystem name, e.g. "h.0.attn.c_attn.weight" */
    size_t offset;                 /* first float in every flat buffer; multiple of PARAM_ALIGN_FLOATS */
    size_t count;                  /* floats in the tensor: product of shape[0..ndim) (1 when ndim == 0) */
    int ndim;                      /* dimensions, 0 (scalar) to PARAM_MAX_DIMS */
    size_t shape[PARAM_MAX_DIMS];  /* PyTorch shape, outermost first; entries past ndim are 1 */
    int layer;                     /* backward unit: the model reports it done (param_layer_hook) once every
                                      tensor of the layer holds its final gradient; -1 for none */
    bool decay;                    /* weight decay applies (AdamW, SGD); see param_decay_default */
    bool frozen;                   /* optim.freeze: the optimizer leaves the tensor and its moments as they
                                      are (PyTorch's requires_grad = False); param_freeze sets it */
    int tp_dim;                    /* tensor parallelism: the dimension split over the table's tp ranks
                                      (shape[] is this rank's shard), -1 when every rank holds it whole */
    int tp_parts;                  /* the split dimension is this many equal blocks, each split on its own
                                      (the fused q, k, v of c_attn: 3, so each rank holds whole heads); 1 */
} param_entry;

typedef struct param_table {
    param_entry *entries;  /* [count] in call order, which is also offset order */
    int count;             /* tensors in the table */
    int capacity;          /* allocated entries */
    size_t total;          /* floats in each flat buffer, padding included; multiple of PARAM_ALIGN_FLOATS */
    int tp_size;           /* tensor-parallel ranks the split entries are sharded over (1: none) */
    int tp_rank;           /* this rank's shard, 0..tp_size-1 */
} param_table;

/* A flat layout held in shards (ZeRO, zero.h): it is cut into n ranges that tile every
 * tensor of the table (ascending offsets, never crossing a tensor), each held by exactly
 * one rank, which keeps the ranges it holds packed in offset order. Checkpoints write
 * and read such a group range by range (ckpt/ckpt.h). */
typedef struct param_shards {
    int n;                      /* ranges */
    const size_t *offset;       /* [n] first float of each range in the flat layout, ascending */
    const size_t *count;        /* [n] floats */
    const uint8_t *mine;        /* [n] 1 for the ranges this rank holds */
    const size_t *packed;       /* [n] where a range this rank holds starts in the group's data */
} param_shards;

typedef struct param_buffers {
    float *params;  /* (total) parameter values, PARAM_ALIGN_BYTES-aligned */
    float *grads;   /* (total) gradients, same layout */
    float *m;       /* (total) AdamW first moment / SGD momentum buffer; NULL without moments */
    float *v;       /* (total) AdamW second moment; NULL without moments */
    size_t total;   /* floats in each buffer (the table's total at init) */
} param_buffers;

/* Called by a model's backward as each layer's gradients become final (highest
 * layer first, as backward runs): what lets gradient buckets start their allreduce
 * while the rest of backward still computes (bucket.h). fn NULL: no calls. */
typedef struct param_layer_hook {
    void (*fn)(void *ctx, int layer);
    void *ctx;
} param_layer_hook;

static inline void param_layer_done(const param_layer_hook *h, int layer)
{
    if (h->fn) h->fn(h->ctx, layer);
}

/* Called by a model at each layer boundary of its forward and backward, for the
 * trainer's profiler (libcore/train/observe/profile.c): `layer` has just finished — forward in
 * ascending layer order, backward right after its param_layer_done. PARAM_LAYER_LAST
 * closes the forward (model_forward, after the family's: final norm, head and loss go
 * to the highest layer). fn NULL: no calls, one NULL check per layer. */
typedef struct param_layer_timer {
    void (*fn)(void *ctx, int layer, bool backward);
    void *ctx;
} param_layer_timer;

#define PARAM_LAYER_LAST (-1)

static inline void param_layer_time(const param_layer_timer *t, int layer, bool backward)
{
    if (t->fn) t->fn(t->ctx, layer, backward);
}

/* An empty table. */
void param_table_init(param_table *pt);

/* Appends tensor `name` of shape (d0, .., d[ndim-1]) at the next aligned
 * offset and returns its index. Dimensions past ndim are ignored (pass 0).
 * Dies on a duplicate or empty name, a name of PARAM_NAME_MAX or more bytes,
 * ndim outside [0, PARAM_MAX_DIMS], a zero dimension, or size overflow. */
int param_add(param_table *pt, const char *name, int layer, bool decay, int ndim, size_t d0, size_t d1,
              size_t d2, size_t d3);

/* Tensor parallelism (Megatron-LM): a table whose split tensors hold one shard each.
 * param_table_set_tp before any param_add; param_add_split adds a tensor by its FULL
 * shape, split along `dim` into tp_size shards (in `parts` equal blocks, each split:
 * shard r of every block, concatenated), and the entry's shape is the shard's. Dies
 * when the dimension does not divide. A table with tp_size 1 is the full model. */
void param_table_set_tp(param_table *pt, int tp_size, int tp_rank);
int param_add_split(param_table *pt, const char *name, int layer, bool decay, int ndim, size_t d0, size_t d1,
                    int dim, int parts);
/* The full tensor's shape and floats of entry e (its own for a whole one). */
void param_entry_full_shape(const param_table *pt, const param_entry *e, size_t shape[PARAM_MAX_DIMS]);
size_t param_entry_full_count(const param_table *pt, const param_entry *e);
/* Between the full tensor (`full`, param_entry_full_count floats, row-major) and this
 * rank's shard (`shard`, e->count floats): to_full copies the shard into its place in
 * full, else the shard out of full. A whole tensor is one memcpy. */
void param_tp_copy(const param_table *pt, const param_entry *e, float *shard, float *full, bool to_full);

/* The whole model's table of a tensor-parallel one: the same entries in the same order
 * with their full shapes (tp_size 1), so offsets, total and param_table_hash are those
 * of the model built without tensor parallelism. *full is initialised here. */
void param_table_full(const param_table *pt, param_table *full);

/* The usual decay rule (nanoGPT configure_optimizers, Loshchilov & Hutter
 * practice): matrices, convolution kernels and embeddings (ndim >= 2) decay;
 * biases and normalisation weights (ndim <= 1) do not. */
bool param_decay_default(int ndim);

/* Freezes the entries whose names match one of the comma-separated glob patterns
 * (fnmatch: "wte.weight,h.0.*"): the optimizer steps skip them and the trainer zeroes their
 * gradients before clipping. Returns the number frozen, or -1 with `why` naming the first
 * pattern that matches no tensor (a typo must not train everything). */
int param_freeze(param_table *pt, const char *patterns, char *why, size_t len);
/* Zeroes the gradients of frozen entries in the flat gradient buffer. */
void param_zero_frozen(const param_table *pt, float *grads);

/* Index of `name`, or -1. Linear search: for init and tools, not the step loop. */
int param_find(const param_table *pt, const char *name);

/* The init-time check of a family's named views (gpt2_views, bert_views, ResNet's
 * units): `offsets` holds every view field, n of them. Each table entry must be named
 * by exactly one of them and n must equal the entry count, so no field is left
 * unresolved and no tensor is reached by two names. Dies naming the first tensor that
 * breaks it. O(n * count) without allocation: for init, not the step loop. */
void param_views_check(const param_table *pt, const size_t *offsets, size_t n, const char *family);

/* Floats in all tensors, padding excluded (the model's parameter count). */
size_t param_numel(const param_table *pt);

/* Fills offsets[count] and counts[count] (e.g. for bucket_init). */
void param_table_slices(const param_table *pt, size_t *offsets, size_t *counts);

/* FNV-1a 64 over the layout: for each entry its name with the NUL, then ndim,
 * each of its ndim dimensions, offset and count as 8-byte little-endian
 * integers; finally total. Independent of host byte order. Layer and decay
 * flags are not part of it (they do not change what a checkpoint's bytes
 * mean). Checkpoints store it and refuse a table that differs. */
uint64_t param_table_hash(const param_table *pt);

void param_table_free(param_table *pt);

/* Allocates params and grads (and m, v when with_moments) of pt->total floats
 * each, PARAM_ALIGN_BYTES-aligned, zero-filled in parallel by the OpenMP
 * threads (first touch spreads the pages over the threads' memory nodes).
 * On failure logs the bytes that could not be allocated, frees what
 * was allocated and returns STATUS_NOMEM, leaving every pointer NULL.
 * Dies on an empty table. */
status param_buffers_init(param_buffers *pb, const param_table *pt, bool with_moments);

/* Sets the whole gradient buffer, padding included, to zero (in parallel, no allocation). */
void param_zero_grads(param_buffers *pb, const param_table *pt);

void param_buffers_free(param_buffers *pb);

/* The optimizer row of param_print_memory when it is not every parameter's m and v
 * (ZeRO, zero.h): its bytes, what it holds ("m, v", "m") and a note after the figure. */
typedef struct param_optim_memory {
    double bytes;
    const char *what;
    const char *note;
} param_optim_memory;

/* The memory table of docs/design.md#no-allocation, in MiB: params, grads, optimizer (the m
 * and v buffers that param_buffers_init(.., true) allocates: 2 x params; or
 * `optim` when not NULL), activations, comm buffers and total. The caller prints
 * it on rank 0 only. */
void param_print_memory(const param_table *pt, size_t activation_bytes, size_t comm_bytes,
                        const param_optim_memory *optim, FILE *f);

/* Many views in one 64-byte-aligned allocation (activations, scratch), laid out in
 * two passes by one layout function: with base NULL, param_carve only advances
 * *used; param_arena_alloc sizes, allocates (STATUS_NOMEM naming `what`) and lays
 * out for real, so the views and the allocation cannot disagree. */
typedef void (*param_layout_fn)(void *owner, float *base, size_t *used);
float *param_carve(float *base, size_t *used, size_t count);
status param_arena_alloc(param_layout_fn layout, void *owner, float **memory, size_t *floats, const char *what);

#endif
