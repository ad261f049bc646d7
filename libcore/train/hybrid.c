/* hybrid — what a run on a process grid adds to the data-parallel trainer: the
 * checkpoint layout of a tensor-parallel shard and of a pipeline stage.
 *
 * The one design decision: a checkpoint always holds the whole model's tensors, by the
 * whole model's table (same names, shapes, offsets and table hash as a run without
 * tensor or pipeline parallelism), so a checkpoint written at tp2 x pp2 loads at dp4
 * and the reverse with nothing converted. A stage holds some of the tensors (the tied
 * embedding on both ends: the first stage writes it), a shard pieces of them in the full flat layout:
 * a split by rows is one range per rank, a split by columns one range per row and
 * rank (and per q/k/v block). Those pieces go to the checkpoint module as a sharded
 * group (ckpt_shards, as ZeRO's moments do): every piece written by exactly one rank
 * (the replicas' dp rank 0; a whole tensor by tp rank 0 too), read by every rank that
 * needs it (each shard its pieces, every rank the whole tensors). */
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

/* Calls fn for every piece of the full layout in ascending offset order: its full
 * offset and count, the tp rank holding it (-1: a whole tensor, held by every tp rank),
 * whether this rank's stage holds the tensor, and where the piece sits in this rank's
 * local buffer. `ref` is the whole model's table at this tp rank, `full` its full shapes,
 * `pt` this rank's (its stage's tensors). */
typedef void (*tp_piece_fn)(void *ctx, const char *name, size_t off, size_t count, int owner, bool here, size_t local);

static void tp_pieces(const param_table *ref, const param_table *full, const param_table *pt, tp_piece_fn fn, void *ctx)
{
    size_t tp = (size_t)ref->tp_size;
    for (int i = 0; i < ref->count; i++) {
        const param_entry *e = &ref->entries[i], *f = &full->entries[i];
        int li = param_find(pt, e->name);
        size_t base = li >= 0 ? pt->entries[li].offset : 0;
        if (e->tp_dim < 0) {
            fn(ctx, e->name, f->offset, f->count, -1, li >= 0, base);
            continue;
        }
        size_t outer = 1, inner = 1;
        for (int k = 0; k < e->tp_dim; k++) outer *= e->shape[k];
        for (int k = e->tp_dim + 1; k < e->ndim; k++) inner *= e->shape[k];
        size_t local = e->shape[e->tp_dim], blk = local / (size_t)e->tp_parts;
        for (size_t o = 0; o < outer; o++)
            for (size_t part = 0; part < (size_t)e->tp_parts; part++)
                for (size_t r = 0; r < tp; r++)
                    fn(ctx, e->name, f->offset + (o * local * tp + (part * tp + r) * blk) * inner, blk * inner, (int)r,
                       li >= 0, base + (o * local + part * blk) * inner);
    }
}

typedef struct tp_fill {
    train_run *r;
    int n;             /* pieces so far */
    bool count_only;
} tp_fill;

static void tp_fill_piece(void *ctx, const char *name, size_t off, size_t count, int owner, bool here, size_t local)
{
    tp_fill *f = ctx;
    train_run *r = f->r;
    int k = f->n++;
    if (f->count_only) return;
    int n = r->tp_save.n, me = r->grid.tp_rank;
    r->tp_ranges[k] = off;
    r->tp_ranges[n + k] = count;
    r->tp_ranges[2 * n + k] = local;
    bool held = here && (owner < 0 || owner == me);
    bool writer = r->grid.dp_rank == 0 && (owner >= 0 || me == 0) && (r->grid.pp_rank == 0 || strcmp(name, model_tied_name(&r->spec)));
    r->tp_mine[k] = held && writer;
    r->tp_mine[n + k] = held;
}

status train_tp_layout(train_run *r)
{
    const param_table *pt = model_params(&r->m);
    if (pt->tp_size == 1 && r->grid.shape.pp == 1) return STATUS_OK;
    param_table ref;
    TRY(model_table_whole(&r->spec, pt->tp_size, pt->tp_rank, &ref));
    param_table_full(&ref, &r->tp_full);
    tp_fill f = { r, 0, true };
    tp_pieces(&ref, &r->tp_full, pt, tp_fill_piece, &f);
    int n = f.n;
    r->tp_ranges = malloc(3 * (size_t)n * sizeof *r->tp_ranges);
    r->tp_mine = malloc(2 * (size_t)n);
    if (!r->tp_ranges || !r->tp_mine) {
        param_table_free(&ref);
        return STATUS_NOMEM;
    }
    r->tp_save = (param_shards){ .n = n, .offset = r->tp_ranges, .count = r->tp_ranges + n,
                                 .packed = r->tp_ranges + 2 * n, .mine = r->tp_mine };
    r->tp_load = r->tp_save;
    r->tp_load.mine = r->tp_mine + n;
    f = (tp_fill){ r, 0, false };
    tp_pieces(&ref, &r->tp_full, pt, tp_fill_piece, &f);
    param_table_free(&ref);
    return STATUS_OK;
}

void train_tp_content(train_run *r, ckpt_content *c, bool load)
{
    if (!r->tp_ranges) return;
    c->table_hash = param_table_hash(&r->tp_full);
    for (int g = 0; g < c->ngroups; g++) {
        c->groups[g].table = &r->tp_full;
        c->shards[g] = load ? &r->tp_load : &r->tp_save;
    }
}

void train_tp_free(train_run *r)
{
    if (r->tp_ranges) param_table_free(&r->tp_full);
    free(r->tp_ranges);
    free(r->tp_mine);
}
