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
 * needs it (each shard its pieces, every rank the whole tensors).
 *
 * Under ZeRO the moments' pieces are the same pieces cut where ZeRO's shards of the
 * local tensors end (multiples of zero.shard_numel from a local tensor's start: the same
 * cut whichever rank computes it, so every rank lists the same ranges, as the
 * checkpoint's checksums need); a piece of the moments is written and read by the rank
 * of its replica's data-parallel group that owns the shard, the rules of stage and
 * shard above otherwise unchanged. */
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* Calls fn for every piece of the full layout in ascending offset order: its full
 * offset and count, the tp rank holding it (-1: a whole tensor, held by every tp rank),
 * whether this rank's stage holds the tensor, where the piece starts within the local
 * tensor (the same at every tp rank), and the local tensor's offset in this rank's buffer.
 * `ref` is the whole model's table at this tp rank, `full` its full shapes, `pt` this
 * rank's (its stage's tensors). */
typedef void (*tp_piece_fn)(void *ctx, const char *name, size_t off, size_t count, int owner, bool here, size_t rel,
                            size_t base);

static void tp_pieces(const param_table *ref, const param_table *full, const param_table *pt, tp_piece_fn fn, void *ctx)
{
    size_t tp = (size_t)ref->tp_size;
    for (int i = 0; i < ref->count; i++) {
        const param_entry *e = &ref->entries[i], *f = &full->entries[i];
        int li = param_find(pt, e->name);
        size_t base = li >= 0 ? pt->entries[li].offset : 0;
        if (e->tp_dim < 0) {
            fn(ctx, e->name, f->offset, f->count, -1, li >= 0, 0, base);
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
                       li >= 0, (o * local + part * blk) * inner, base);
    }
}

typedef struct tp_fill {
    train_run *r;
    train_pieces *p;   /* NULL: count the ranges only */
    bool zero;         /* the moments under ZeRO: cut at its shards */
    int n;             /* ranges so far */
} tp_fill;

static void tp_fill_piece(void *ctx, const char *name, size_t off, size_t count, int owner, bool here, size_t rel,
                          size_t base)
{
    tp_fill *f = ctx;
    train_run *r = f->r;
    int me = r->grid.tp_rank;
    bool held = here && (owner < 0 || owner == me);
    bool writer = (owner >= 0 || me == 0) && (r->grid.pp_rank == 0 || strcmp(name, model_tied_name(&r->spec)));
    size_t numel = f->zero ? r->zero.opt.shard_numel : 0;
    for (size_t at = 0, end; at < count; at = end) {
        end = numel ? (rel + at) / numel * numel + numel - rel : count;  /* the next shard boundary */
        if (end > count) end = count;
        int k = f->n++;
        if (!f->p) continue;
        int n = f->p->save.n;
        size_t local = base + rel + at, packed = local;
        bool owns = r->grid.dp_rank == 0, reads = true;
        if (f->zero && held) {
            int s = zero_shard_index(&r->zero, local);
            owns = reads = r->zero.ck_mine[s];
            packed = r->zero.ck_packed[s] + (local - r->zero.shards[s].offset);
        }
        f->p->ranges[k] = off + at;
        f->p->ranges[n + k] = end - at;
        f->p->ranges[2 * n + k] = packed;
        f->p->mine[k] = held && writer && owns;
        f->p->mine[n + k] = held && reads;
    }
}

static status tp_pieces_build(train_run *r, const param_table *ref, bool zero, train_pieces *p)
{
    const param_table *pt = model_params(&r->m);
    tp_fill f = { r, NULL, zero, 0 };
    tp_pieces(ref, &r->tp_full, pt, tp_fill_piece, &f);
    int n = f.n;
    p->ranges = malloc(3 * (size_t)n * sizeof *p->ranges);
    p->mine = malloc(2 * (size_t)n);
    if (!p->ranges || !p->mine) return STATUS_NOMEM;
    p->save = (param_shards){ .n = n, .offset = p->ranges, .count = p->ranges + n, .packed = p->ranges + 2 * n,
                              .mine = p->mine };
    p->load = p->save;
    p->load.mine = p->mine + n;
    f = (tp_fill){ r, p, zero, 0 };
    tp_pieces(ref, &r->tp_full, pt, tp_fill_piece, &f);
    return STATUS_OK;
}

status train_tp_layout(train_run *r)
{
    const param_table *pt = model_params(&r->m);
    if (pt->tp_size == 1 && r->grid.shape.pp == 1) return STATUS_OK;
    param_table ref;
    TRY(model_table_whole(&r->spec, pt->tp_size, pt->tp_rank, &ref));
    param_table_full(&ref, &r->tp_full);
    status st = tp_pieces_build(r, &ref, false, &r->tp_params);
    if (st == STATUS_OK && r->use_zero) st = tp_pieces_build(r, &ref, true, &r->tp_moments);
    param_table_free(&ref);
    return st;
}

void train_tp_content(train_run *r, ckpt_content *c, bool load)
{
    if (!r->tp_params.ranges) return;
    c->table_hash = param_table_hash(&r->tp_full);
    for (int g = 0; g < c->ngroups; g++) {
        bool moments = r->use_zero && train_ckpt_group_is_optim(train_ckpt_group_find(c->groups[g].group));
        const train_pieces *p = moments ? &r->tp_moments : &r->tp_params;
        c->groups[g].table = &r->tp_full;
        c->shards[g] = load ? &p->load : &p->save;
    }
}

void train_tp_free(train_run *r)
{
    if (r->tp_params.ranges) param_table_free(&r->tp_full);
    for (int k = 0; k < 2; k++) {
        train_pieces *p = k ? &r->tp_moments : &r->tp_params;
        free(p->ranges);
        free(p->mine);
    }
}
