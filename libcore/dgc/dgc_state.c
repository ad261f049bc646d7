/* dgc_state — DGC-Pro's state (dgc.h): the slice each local rank compresses, the
 * buffers of a step, and the checkpointed blob (header, per-tensor records, u and v).
 *
 * The one design decision: the blob is one allocation, its size agreed over the rows
 * of a process grid, so a checkpoint writes every rank's state as one dataset row and
 * a resume at another layout is refused by the header (dgc_state_loaded) rather than
 * misread. */
#include "dgc_impl.h"

#include <float.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Local rank l's entries: whole tensors, consecutive, the cut placed where the
 * running total first reaches l/L of the buffer. */
static void partition(const param_table *pt, int L, int *first_of)
{
    first_of[0] = 0;
    int e = 0;
    for (int l = 1; l < L; l++) {
        size_t goal = pt->total / (size_t)L * (size_t)l;
        while (e < pt->count && pt->entries[e].offset + pt->entries[e].count <= goal) e++;
        first_of[l] = e;
    }
    first_of[L] = pt->count;
}

static size_t entry_start(const param_table *pt, int e)
{
    return e < pt->count ? pt->entries[e].offset : pt->total;
}

status dgc_init(dgc **out, const runtime *rt, const param_table *pt, const dgc_options *o)
{
    *out = NULL;
    int sizes[2] = { rt->local_size, -rt->local_size }, agreed[2];
    TRY(comm_ctl_allreduce(comm_ctl_watched(comm_ctl_named(rt->world, o->timeout_s, "dgc world"), rt->wd), sizes,
                           agreed, 2, MPI_INT, MPI_MAX));
    if (agreed[0] != -agreed[1]) {
        log_error0("dgc: every node needs the same number of ranks (between %d and %d here)", -agreed[1], agreed[0]);
        return STATUS_INPUT;
    }
    CHECK(pt->total < (size_t)INT32_MAX, "dgc: flat buffers are limited to 2^31 floats");
    dgc *d = calloc(1, sizeof *d);
    CHECK(d, "out of memory");
    d->rt = rt;
    d->node = comm_ctl_watched(comm_ctl_named(rt->node, o->timeout_s, "dgc node"), rt->wd);
    d->peers = comm_ctl_watched(comm_ctl_named(rt->peers, o->timeout_s, "dgc peers"), rt->wd);
    if (o->norm_comm) d->norm = comm_ctl_watched(comm_ctl_named(*o->norm_comm, o->timeout_s, "dgc norm"), rt->wd);
    comm_group_options go = { .backend = COMM_BACKEND_MPI, .timeout_s = o->timeout_s, .name = "dgc node", .wd = rt->wd };
    TRY(comm_group_init(&d->node_g, rt->node, &go));  /* mpi: nothing communicated; d leaks on a failure */
    go.name = "dgc peers";
    TRY(comm_group_init(&d->peers_g, rt->peers, &go));
    d->pt = pt;
    d->o = *o;
    d->L = rt->local_size;
    d->lrank = rt->local_rank;
    MPI_Comm_size(rt->peers, &d->P);
    MPI_Comm_rank(rt->peers, &d->prank);
    int *first_of = malloc(sizeof(int) * (size_t)(d->L + 1));
    d->cnt = malloc(sizeof(int) * (size_t)d->L);
    d->dsp = malloc(sizeof(int) * (size_t)d->L);
    partition(pt, d->L, first_of);
    size_t smax = 0;
    for (int l = 0; l < d->L; l++) {
        size_t a = entry_start(pt, first_of[l]), b = l == d->L - 1 ? pt->total : entry_start(pt, first_of[l + 1]);
        d->dsp[l] = (int)a;
        d->cnt[l] = (int)(b - a);
        if (b - a > smax) smax = b - a;
    }
    d->first = first_of[d->lrank];
    d->last = first_of[d->lrank + 1];
    d->s0 = (size_t)d->dsp[d->lrank];
    d->S = (size_t)d->cnt[d->lrank];
    free(first_of);
    int nent = pt->count;
    bool has_u = o->momentum > 0;
    size_t ent_bytes = sizeof(dgc_entry_state) * (size_t)nent;
    d->state_bytes = sizeof(dgc_header) + ent_bytes + (has_u ? 2 : 1) * smax * sizeof(float);
    if (o->rows_comm) {  /* a grid's stages hold different slices: every row the largest one's size */
        unsigned long long mine = d->state_bytes, most;
        TRY(comm_ctl_allreduce(comm_ctl_watched(comm_ctl_named(*o->rows_comm, o->timeout_s, "dgc rows"), rt->wd),
                               &mine, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX));  /* d leaks on a timeout */
        d->state_bytes = (size_t)most;
    }
    d->state = aligned_alloc(64, (d->state_bytes + 63) / 64 * 64);
    size_t S = d->S ? d->S : 1, range = S / (size_t)d->P + 1, biggest = 1;
    for (int e = d->first; e < d->last; e++)
        if (pt->entries[e].count > biggest) biggest = pt->entries[e].count;
    /* selections stay below 2k + 16 per tensor at the schedule's largest density */
    double dmax = dgc_density_at(o, 0) * (o->layer_ratios ? DGC_SCALE_MAX : 1);
    if (dmax > 0.5) dmax = 0.5;
    d->cap = (size_t)(2 * dmax * (double)S) + 16 * (size_t)(d->last - d->first + 1);
    if (d->cap > S) d->cap = S;
    d->plain = calloc((size_t)nent, 1);
    d->plainf = calloc((size_t)nent + 1, sizeof(float));
    d->own_slice = d->L > 1 ? malloc(S * sizeof(float)) : NULL;
    d->scratch = malloc((range > biggest ? range : biggest) * sizeof(float));
    d->idx = malloc(d->cap * sizeof(uint32_t));
    d->val = malloc(d->cap * sizeof(float));
    d->uidx = malloc(range * sizeof(uint32_t));
    d->uval = malloc(range * sizeof(float));
    d->scount = calloc((size_t)d->P * 4, sizeof(int));
    d->acc = malloc(range * sizeof(float));
    d->dense_tmp = malloc(range * sizeof(float));
    d->touched = calloc(range / 64 + 1, sizeof(uint64_t));
    d->runs = malloc(sizeof(size_t) * 2 * (size_t)(nent + 1));
    d->energy = calloc(3 * (size_t)nent + 3, sizeof(double));
    d->blk_base = calloc((size_t)nent + 1, sizeof(size_t));
    size_t nblk = 0;
    for (int e = 0; e < nent; e++) {
        d->blk_base[e] = nblk;
        if (e >= d->first && e < d->last) nblk += (pt->entries[e].count + DGC_BLOCK - 1) / DGC_BLOCK;
    }
    d->blk_base[nent] = nblk;
    d->gzero = calloc(nblk + 1, 1);
    d->vzero = calloc(nblk + 1, 1);
    d->skip = calloc(nblk + 1, 1);
    d->runs2 = malloc(sizeof(size_t) * 2 * ((biggest + DGC_BLOCK - 1) / DGC_BLOCK + 1));
    CHECK(d->state && d->plain && d->plainf && (d->own_slice || d->L == 1) && d->scratch && d->idx && d->val && d->uidx &&
              d->uval && d->scount && d->acc &&
              d->dense_tmp && d->touched && d->runs && d->energy && d->blk_base && d->gzero && d->vzero && d->skip && d->runs2,
          "dgc: out of memory for the compression state");
    d->sdispl = d->scount + d->P;
    d->rcount = d->scount + 2 * d->P;
    d->rdispl = d->scount + 3 * d->P;
    memset(d->state, 0, d->state_bytes);
    d->hdr = (dgc_header *)d->state;
    d->es = (dgc_entry_state *)(d->state + sizeof(dgc_header));
    float *f = (float *)(d->state + sizeof(dgc_header) + ent_bytes);
    d->u = has_u ? f : NULL;
    d->v = has_u ? f + smax : f;
    *d->hdr = (dgc_header){ DGC_MAGIC, d->s0, d->S, d->first, d->last, has_u, 1, pt->total };
    dgc_state_reset(d);
    *out = d;
    return STATUS_OK;
}

void dgc_free(dgc *d)
{
    if (!d) return;
    comm_group_free(d->node_g), comm_group_free(d->peers_g);
    free(d->cnt), free(d->dsp), free(d->state), free(d->plain), free(d->plainf), free(d->own_slice), free(d->scratch), free(d->uidx),
        free(d->uval);
    free(d->idx), free(d->val), free(d->sbuf), free(d->rbuf), free(d->scount), free(d->acc), free(d->dense_tmp);
    free(d->touched), free(d->runs), free(d->energy), free(d->blk_base), free(d->gzero), free(d->vzero), free(d->skip),
        free(d->runs2);
    free(d);
}

size_t dgc_state_bytes(const dgc *d)
{
    return d->state_bytes;
}

void *dgc_state(dgc *d)
{
    return d->state;
}

void dgc_state_reset(dgc *d)
{
    size_t off = sizeof(dgc_header);
    memset(d->state + off, 0, d->state_bytes - off);
    for (int e = d->first; e < d->last; e++) {
        /* a tensor whole on every tensor-parallel shard (norms, biases) goes dense: the
           shards' budgets differ, so selections would, and its copies would drift apart */
        d->es[e].dense = d->pt->entries[e].count < d->o.min_numel || dgc_whole_on_every_shard(d->pt, e);
        d->es[e].scale = 1.0f;
    }
    size_t nblk = d->blk_base[d->pt->count];
    memset(d->gzero, 0, nblk);
    memset(d->vzero, 1, nblk);  /* v and u are zero now */
}

status dgc_state_check(const char *dataset, const void *row, size_t bytes, char *why, size_t len)
{
    dgc_header h;
    if (bytes < sizeof h || (bytes - sizeof h) % sizeof(float) != 0) return STATUS_OK;
    memcpy(&h, row, sizeof h);
    if (h.magic != DGC_MAGIC) return STATUS_OK;
    const unsigned char *p = (const unsigned char *)row + sizeof h;
    size_t n = (bytes - sizeof h) / sizeof(float), bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, p + i * sizeof x, sizeof x);
        if (!isfinite(x) && !bad++) first = sizeof h + i * sizeof x;
    }
    if (!bad) return STATUS_OK;
    snprintf(why, len, "%s holds %zu NaN or Inf value(s) among DGC-Pro's residuals, velocities and per-tensor "
             "records (the first at byte %zu of the row): written by a run that had diverged, or forged", dataset,
             bad, first);
    return STATUS_CORRUPT;
}

status dgc_state_loaded(dgc *d)
{
    memset(d->vzero, 0, d->blk_base[d->pt->count]);  /* unknown until each block is accumulated once */
    dgc_header want = { DGC_MAGIC, d->s0, d->S, d->first, d->last, d->u != NULL, d->hdr->active, d->pt->total };
    if (memcmp(d->hdr, &want, sizeof want) == 0) return STATUS_OK;
    want.active = d->hdr->active != 0;  /* the decision (auto) stands at any layout */
    *d->hdr = want;
    dgc_state_reset(d);
    return STATUS_INPUT;
}

bool dgc_active(const dgc *d)
{
    return d->hdr->active != 0;
}

void dgc_set_active(dgc *d, bool on)
{
    d->hdr->active = on;
}

void dgc_set_live(dgc *d, const dgc_options *o)
{
    CHECK((o->momentum > 0) == (d->o.momentum > 0), "a reload keeps the momentum zero or non-zero under DGC-Pro");
    d->o.sparsity = o->sparsity;
    d->o.warmup_steps = o->warmup_steps;
    d->o.warmup_stages = o->warmup_stages;
    d->o.warmup_sparsity = o->warmup_sparsity;
    d->o.momentum = o->momentum;
    d->o.nesterov = o->nesterov;
    d->o.weight_decay = o->weight_decay;
    d->o.clip = o->clip;
}

const float *dgc_residual(const dgc *d, size_t *offset, size_t *count)
{
    *offset = d->s0;
    *count = d->S;
    return d->v;
}

void dgc_flush(dgc *d, float *grads, float factor, double lr_scale)
{
    float *g = grads + d->s0;
    if (d->u) factor = (float)(factor / lr_scale);  /* momentum correction folded the rate in */
    for (size_t i = 0; i < d->S; i++) g[i] += factor * d->v[i];
    dgc_state_reset(d);
}

const uint8_t *dgc_plain_entries(const dgc *d)
{
    return d->plain;
}
