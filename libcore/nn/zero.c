/* zero — ZeRO-1 shards, consistent-hash ownership, the sharded step and the
 * parameter all-gather (see zero.h for the design). */
#include "zero.h"
#include "cpu/optim.h"

#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

uint64_t zero_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Point v of rank r: depends on (r, v) only, so other ranks' points never move it. */
static uint64_t ring_point(int r, int v)
{
    return zero_mix(zero_mix((uint64_t)r + 1) ^ ((uint64_t)v << 32 | 0x5a45524fu));
}

/* FNV-1a 64 of a name: a tensor's identity, independent of its place in the table. */
static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

typedef struct ring_item {
    uint64_t point;
    int rank;
} ring_item;

static int ring_cmp(const void *a, const void *b)
{
    const ring_item *x = a, *y = b;
    if (x->point != y->point) return x->point < y->point ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);  /* a tie (2^-64) decided by rank: still deterministic */
}

status zero_ring_init(zero_ring *ring, int world, int vnodes)
{
    CHECK(world >= 1 && vnodes >= 1, "a ring needs at least one rank and one point per rank");
    memset(ring, 0, sizeof *ring);
    int n = world * vnodes;
    ring_item *it = malloc((size_t)n * sizeof *it);
    ring->point = malloc((size_t)n * sizeof *ring->point);
    ring->rank = malloc((size_t)n * sizeof *ring->rank);
    if (!it || !ring->point || !ring->rank) {
        free(it);
        zero_ring_free(ring);
        log_error("zero: out of memory for a ring of %d points", n);
        return STATUS_NOMEM;
    }
    for (int r = 0; r < world; r++)
        for (int v = 0; v < vnodes; v++) it[r * vnodes + v] = (ring_item){ ring_point(r, v), r };
    qsort(it, (size_t)n, sizeof *it, ring_cmp);
    for (int i = 0; i < n; i++) ring->point[i] = it[i].point, ring->rank[i] = it[i].rank;
    ring->n = n;
    free(it);
    return STATUS_OK;
}

int zero_ring_owner(const zero_ring *ring, uint64_t key)
{
    int lo = 0, hi = ring->n;  /* first point >= key */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ring->point[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return ring->rank[lo == ring->n ? 0 : lo];
}

void zero_ring_free(zero_ring *ring)
{
    free(ring->point);
    free(ring->rank);
    memset(ring, 0, sizeof *ring);
}

status zero_shards_build(const param_table *pt, size_t shard_numel, zero_shard **shards, int *n)
{
    CHECK(shard_numel >= 1, "zero: shard_numel >= 1");
    size_t total = 0;
    for (int e = 0; e < pt->count; e++) total += (pt->entries[e].count + shard_numel - 1) / shard_numel;
    CHECK(total <= (size_t)INT32_MAX, "zero: more than 2^31 shards (raise zero.shard_numel)");
    zero_shard *s = calloc(total + 1, sizeof *s);
    if (!s) {
        log_error("zero: out of memory for %zu shards", total);
        return STATUS_NOMEM;
    }
    int k = 0;
    for (int e = 0; e < pt->count; e++) {
        const param_entry *pe = &pt->entries[e];
        uint64_t id = zero_mix(name_hash(pe->name));
        for (size_t at = 0, c = 0; at < pe->count; at += shard_numel, c++, k++) {
            s[k].entry = e;
            s[k].chunk = (int)c;
            s[k].offset = pe->offset + at;
            s[k].count = pe->count - at < shard_numel ? pe->count - at : shard_numel;
            s[k].key = zero_mix(id + c);
            s[k].owner = -1;
        }
    }
    *shards = s;
    *n = k;
    return STATUS_OK;
}

static status zero_rs_setup(zero *z);

status zero_init(zero *z, MPI_Comm comm, const param_table *pt, const zero_options *o)
{
    memset(z, 0, sizeof *z);
    CHECK(o->moments >= 0 && o->moments <= 2, "zero: 0, 1 or 2 moment buffers");
    z->comm = comm;
    z->opt = *o;
    comm_group_options go = { .backend = COMM_BACKEND_MPI, .name = "zero" };
    TRY(comm_group_init(&z->group, comm, &go));  /* mpi: on comm itself, nothing communicated */
    MPI_Comm_rank(comm, &z->rank);
    MPI_Comm_size(comm, &z->size);
    TRY(zero_ring_init(&z->ring, z->size, o->vnodes));
    TRY(zero_shards_build(pt, o->shard_numel, &z->shards, &z->nshards));
    size_t n = (size_t)z->nshards + 1;
    size_t *own = calloc((size_t)z->size, sizeof *own);
    z->counts = calloc((size_t)z->size, sizeof *z->counts);
    z->displs = calloc((size_t)z->size, sizeof *z->displs);
    z->mine = calloc(n, sizeof *z->mine);
    z->ck_offset = calloc(n, sizeof *z->ck_offset);
    z->ck_count = calloc(n, sizeof *z->ck_count);
    z->ck_packed = calloc(n, sizeof *z->ck_packed);
    z->ck_mine = calloc(n, 1);
    if (!own || !z->counts || !z->displs || !z->mine || !z->ck_offset || !z->ck_count || !z->ck_packed ||
        !z->ck_mine) {
        free(own);
        log_error("zero: out of memory for the shard tables");
        return STATUS_NOMEM;
    }
    for (int i = 0; i < z->nshards; i++) {
        zero_shard *s = &z->shards[i];
        s->owner = zero_ring_owner(&z->ring, s->key);
        s->gather = own[s->owner];  /* relative to the owner's block until the blocks are placed */
        own[s->owner] += s->count;
        z->numel += s->count;
        z->ck_offset[i] = s->offset;
        z->ck_count[i] = s->count;
        if (s->owner == z->rank) {
            z->mine[z->nmine++] = (optim_range){ s->entry, s->offset, s->count, z->owned };
            z->ck_mine[i] = 1;
            z->ck_packed[i] = z->owned;
            z->owned += s->count;
        }
    }
    CHECK(z->numel <= (size_t)INT32_MAX, "zero: MPI counts are int: more than 2^31 parameters");
    size_t at = 0;
    for (int r = 0; r < z->size; r++) {
        z->counts[r] = (int)own[r];
        z->displs[r] = (int)at;
        at += own[r];
    }
    for (int i = 0; i < z->nshards; i++) z->shards[i].gather += (size_t)z->displs[z->shards[i].owner];
    free(own);
    z->ck = (param_shards){ z->nshards, z->ck_offset, z->ck_count, z->ck_mine, z->ck_packed };
    size_t bytes = (z->owned ? z->owned : 1) * sizeof(float);
    bytes = (bytes + PARAM_ALIGN_BYTES - 1) / PARAM_ALIGN_BYTES * PARAM_ALIGN_BYTES;
    for (int k = 0; k < o->moments; k++) {
        float **buf = k == 0 ? &z->m : &z->v;
        *buf = aligned_alloc(PARAM_ALIGN_BYTES, bytes);
        if (!*buf) {
            log_error("zero: out of memory for %.1f MiB of optimizer state", (double)bytes / MIB);
            return STATUS_NOMEM;
        }
        memset(*buf, 0, bytes);
    }
    return zero_rs_setup(z);
}

void zero_free(zero *z)
{
    zero_ring_free(&z->ring);
    free(z->shards), free(z->mine), free(z->counts), free(z->displs);
    free(z->ck_offset), free(z->ck_count), free(z->ck_packed), free(z->ck_mine);
    free(z->m), free(z->v), free(z->pack), free(z->by_owner), free(z->rs_counts);
    free(z->node_of), free(z->lidx_of), free(z->node_start), free(z->node_rank);
    free(z->round_first), free(z->hplan), free(z->hpool), free(z->hcur), free(z->hsrc), free(z->hbuf);
    comm_group_free(z->group);
    if (z->node_group) comm_group_free(z->node_group);
    memset(z, 0, sizeof *z);
}

int zero_shard_index(const zero *z, size_t offset)
{
    int lo = 0, hi = z->nshards;  /* the last shard starting at or before offset */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (z->shards[mid].offset <= offset) lo = mid;
        else hi = mid;
    }
    CHECK(z->nshards && z->shards[lo].offset <= offset && offset < z->shards[lo].offset + z->shards[lo].count,
          "zero_shard_index: an offset outside every shard");
    return lo;
}

void zero_adamw_step(zero *z, const param_table *pt, param_buffers *pb, const adamw_hparams *hp, double lr, long t)
{
    CHECK(z->opt.moments == 2, "zero: AdamW needs zero_init with moments = 2");
    optim_adamw_step_ranges(pt, pb, z->mine, z->nmine, z->m, z->v, hp, lr, t);
}

void zero_sgd_step(zero *z, const param_table *pt, param_buffers *pb, const sgd_hparams *hp, double lr, long t)
{
    CHECK(hp->momentum == 0 || z->opt.moments >= 1, "zero: SGD momentum needs zero_init with moments >= 1");
    optim_sgd_step_ranges(pt, pb, z->mine, z->nmine, hp->momentum != 0 ? z->m : NULL, hp, lr, t);
}

status zero_allgather_params(zero *z, float *params, float *scratch, double timeout_s)
{
    if (z->hier) return zero_hier_allgather(z, params, timeout_s);
    float *block = scratch + z->displs[z->rank];
#pragma omp parallel for schedule(static)
    for (int i = 0; i < z->nmine; i++)
        memcpy(block + z->mine[i].packed, params + z->mine[i].offset, z->mine[i].count * sizeof(float));
    comm_group_set_timeout(z->group, timeout_s);
    TRY(comm_group_allgatherv(z->group, NULL, scratch, z->counts, z->displs, sizeof(float)));
#pragma omp parallel for schedule(static)
    for (int i = 0; i < z->nshards; i++) {
        const zero_shard *s = &z->shards[i];
        if (s->owner != z->rank) memcpy(params + s->offset, scratch + s->gather, s->count * sizeof(float));
    }
    return STATUS_OK;
}

/* The packing tables, at zero_init: shards grouped by owner (each owner's in offset order,
 * which is its block's order), the rounds' buffer. */
static status zero_rs_setup(zero *z)
{
    z->pack_numel = z->opt.pack_numel ? z->opt.pack_numel : ZERO_PACK_NUMEL;
    size_t rounds = (z->numel + z->pack_numel - 1) / z->pack_numel, mine_part = z->owned / (rounds ? rounds : 1) + 1;
    z->pack = malloc((z->pack_numel + (size_t)z->size + mine_part + 1) * sizeof(float));
    z->by_owner = malloc(((size_t)z->nshards + 1) * sizeof(int));
    z->rs_counts = malloc((2 * (size_t)z->size + 1) * sizeof(int));  /* then the owners' first index in by_owner */
    if (!z->pack || !z->by_owner || !z->rs_counts) {
        log_error("zero: out of memory for the reduce-scatter's %.1f MiB", (double)z->pack_numel * 4 / MIB);
        return STATUS_NOMEM;
    }
    int k = 0, *first = z->rs_counts + z->size;
    for (int r = 0; r < z->size; r++) {
        first[r] = k;
        for (int i = 0; i < z->nshards; i++)
            if (z->shards[i].owner == r) z->by_owner[k++] = i;
    }
    first[z->size] = k;
    return STATUS_OK;
}

/* Copies floats [lo, hi) of owner r's block between `block` (packed) and the flat
 * buffer: to_flat false packs grads into block, true writes block back scaled. */
static void zero_block_copy(const zero *z, int r, size_t lo, size_t hi, float *block, float *flat, bool to_flat,
                            double scale)
{
    const int *first = z->rs_counts + z->size;  /* r's shards: by_owner[first[r] .. first[r + 1]) */
    for (int k = first[r]; k < first[r + 1]; k++) {
        const zero_shard *s = &z->shards[z->by_owner[k]];
        size_t a = s->gather - (size_t)z->displs[r], b = a + s->count;  /* the shard in r's block */
        if (b <= lo || a >= hi) continue;
        size_t from = a > lo ? a : lo, to = b < hi ? b : hi;
        float *g = flat + s->offset + (from - a), *p = block + (from - lo);
        if (!to_flat) memcpy(p, g, (to - from) * sizeof(float));
        else if (scale == 1.0) memcpy(g, p, (to - from) * sizeof(float));
        else
            for (size_t i = 0; i < to - from; i++) g[i] = (float)(p[i] * scale);
    }
}

status zero_reduce_scatter_grads(zero *z, float *grads, double scale, double timeout_s)
{
    if (z->hier) return zero_hier_reduce_scatter(z, grads, scale, timeout_s);
    size_t rounds = (z->numel + z->pack_numel - 1) / z->pack_numel;
    if (rounds == 0) rounds = 1;
    comm_group_set_timeout(z->group, timeout_s);
    for (size_t k = 0; k < rounds; k++) {
        size_t at = 0;  /* round k carries part k of every owner's block, the parts back to back */
        for (int r = 0; r < z->size; r++) {
            size_t n = (size_t)z->counts[r], lo = n * k / rounds, hi = n * (k + 1) / rounds;
            z->rs_counts[r] = (int)(hi - lo);
            zero_block_copy(z, r, lo, hi, z->pack + at, grads, false, 1.0);
            at += hi - lo;
        }
        float *mine = z->pack + at;
        TRY(comm_group_reduce_scatter(z->group, z->pack, mine, z->rs_counts, REDUCE_DTYPE_F32, REDUCE_OP_SUM));
        size_t n = (size_t)z->counts[z->rank];
        zero_block_copy(z, z->rank, n * k / rounds, n * (k + 1) / rounds, mine, grads, true, scale);
    }
    return STATUS_OK;
}

status zero_grad_norm_sq(zero *z, const param_table *pt, const float *grads, double timeout_s, double *sq,
                         double *sq_entry)
{
    double *part = calloc((size_t)z->nshards + 1, sizeof *part);
    if (!part) return STATUS_NOMEM;
    for (int i = 0; i < z->nshards; i++)
        if (z->shards[i].owner == z->rank) part[i] = grad_norm_sq(grads + z->shards[i].offset, z->shards[i].count);
    comm_group_set_timeout(z->group, timeout_s);
    status st = comm_group_allreduce(z->group, part, (size_t)z->nshards, REDUCE_DTYPE_F64, REDUCE_OP_SUM);
    if (st != STATUS_OK) return st;  /* part leaks: MPI may still write it, and the job is ending */
    if (sq_entry) memset(sq_entry, 0, (size_t)pt->count * sizeof *sq_entry);
    double total = 0;
    for (int i = 0; i < z->nshards; i++) {  /* one owner per shard: the others added 0, exactly */
        total += part[i];
        if (sq_entry) sq_entry[z->shards[i].entry] += part[i];
    }
    *sq = total;
    free(part);
    return STATUS_OK;
}

status zero_moved_fraction(const zero *z, int old_world, double *shard_frac, double *elem_frac)
{
    zero_ring old;
    TRY(zero_ring_init(&old, old_world, z->opt.vnodes));
    size_t moved = 0, moved_el = 0;
    for (int i = 0; i < z->nshards; i++)
        if (zero_ring_owner(&old, z->shards[i].key) != z->shards[i].owner) moved++, moved_el += z->shards[i].count;
    zero_ring_free(&old);
    *shard_frac = z->nshards ? (double)moved / z->nshards : 0.0;
    *elem_frac = z->numel ? (double)moved_el / (double)z->numel : 0.0;
    return STATUS_OK;
}

void zero_balance(const zero *z, size_t *max_owned, double *mean_owned)
{
    size_t mx = 0;
    for (int r = 0; r < z->size; r++) mx = (size_t)z->counts[r] > mx ? (size_t)z->counts[r] : mx;
    *max_owned = mx;
    *mean_owned = (double)z->numel / z->size;
}

void zero_print_memory(const zero *z, const param_table *pt, size_t activation_bytes, size_t comm_bytes, FILE *f)
{
    size_t mx, numel = param_numel(pt);
    double mean;
    zero_balance(z, &mx, &mean);
    double unsharded = (double)z->opt.moments * (double)pt->total * sizeof(float);
    char note[256];
    snprintf(note, sizeof note, "ZeRO-1: %d shards of <= %zu floats over %d ranks, largest share %.1f%% of the "
             "parameters; unsharded %.1f; the parameter all-gather reuses the gradient buffer, the gradient's "
             "reduce-scatter packs at most 16 MiB at a time", z->nshards,
             z->opt.shard_numel, z->size, numel ? 100.0 * (double)mx / (double)numel : 0.0, unsharded / MIB);
    param_optim_memory o = { (double)z->opt.moments * (double)mx * sizeof(float), z->opt.moments == 2 ? "m, v" : "m",
                             note };
    param_print_memory(pt, activation_bytes, comm_bytes, &o, f);
}
