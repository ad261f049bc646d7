/* dgc — see dgc.h. The state, the per-tensor compression of a slice and the
 * hierarchical exchange. */
#include "dgc.h"
#include "comm/comm.h"
#include "comm/ctl.h"

#include <float.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* "DGCPRO2". Version 2: with momentum correction v holds the rate-folded sum (dgc.h,
 * dgc_exchange); a version-1 state (v unscaled) is refused like another layout's. */
#define DGC_MAGIC 0x324f5250434744ull

/* Per tensor of the slice, part of the checkpoint blob. */
typedef struct dgc_entry_state {
    uint8_t dense;        /* sent dense this step: small, or too little energy in its top-k */
    uint8_t pad[3];
    float energy;         /* fraction of |v|^2 its last selection carried, over all nodes */
    float concentration;  /* Pro 2: moving average of the |v|^2 fraction above the base density's threshold */
    float scale;          /* Pro 2: its density is the scheduled density times this */
} dgc_entry_state;

#define DGC_BLOCK 1024  /* Pro 3: entries per block of the zero prediction */
#define DGC_SCALE_MIN 0.125f  /* Pro 2: a tensor's density stays within 1/8 .. 8 of the schedule's */
#define DGC_SCALE_MAX 8.0f

typedef struct dgc_header {
    uint64_t magic;
    uint64_t slice_off, slice_len;  /* elements of the flat buffer */
    int32_t first, last;            /* entries [first, last) */
    int32_t has_u, active;
    uint64_t table_total;
} dgc_header;

struct dgc {
    const runtime *rt;
    comm_ctl node, peers;            /* the node's ranks; the same local rank on every node (with the deadline):
                                        scalars and size agreements */
    comm_group *node_g, *peers_g;    /* the same ranks for the vector payloads (comm.h) */
    comm_ctl norm;                   /* o.norm_comm with the deadline (a process grid) */
    const param_table *pt;
    dgc_options o;
    int L, lrank, P, prank;          /* node size and my rank in it; peers (nodes) and mine */
    int *cnt, *dsp;                  /* [L] elements of each local rank's slice and its offset */
    int first, last;                 /* my entries */
    size_t s0, S;                    /* my slice of the flat buffer */
    /* state blob: header, entry states, u (momentum only), v */
    uint8_t *state;
    size_t state_bytes;
    dgc_header *hdr;
    dgc_entry_state *es;
    float *u, *v;
    uint8_t *plain;                  /* [pt->count] */
    float *plainf;                   /* [pt->count] the node's vote on plain, as floats (0 or 1) */
    float *slice;                    /* [S] node sum, then contribution (the caller's gradient on one-rank nodes) */
    float *own_slice;                /* [S] on nodes of several ranks */
    float *scratch;                  /* [max(range, largest tensor)] thresholds, packed dense runs */
    uint32_t *idx;                   /* [cap] selected entries, relative to the slice */
    float *val;                      /* [cap] their values as sent */
    size_t cap, nsel;
    uint32_t *uidx;                  /* [range] the union of a reduced range */
    float *uval;
    /* exchange */
    uint8_t *sbuf, *rbuf;
    size_t sbuf_cap, rbuf_cap;
    int *scount, *sdispl, *rcount, *rdispl;  /* [P] bytes */
    float *acc;                      /* [range] owner's sum */
    uint64_t *touched;               /* [range / 64 + 1] */
    float *out;                      /* this step: the caller's gradient at my slice, where the result goes */
    float fold;                      /* this step's lr_scale, folded into the momentum-corrected accumulation */
    /* Pro 3, per block of DGC_BLOCK entries of my tensors (not checkpointed: skipping is exact) */
    size_t *blk_base;                /* [entries + 1] first block of each tensor */
    uint8_t *gzero;                  /* the block's contribution was all zero last step */
    uint8_t *vzero;                  /* its v and u were all zero after the last accumulation */
    uint8_t *skip;                   /* skipped this step */
    float *dense_tmp;                /* [range] values of a range for a dense message */
    size_t *runs;                    /* [2 * entries] dense runs of a range */
    size_t *runs2;                   /* [2 * blocks of the largest tensor] its unskipped runs */
    double *energy;                  /* [3 * entries] selected, total, and above the base threshold |v|^2 */
};

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

/* A tensor every tensor-parallel shard holds whole (position embedding, norms, the
 * row-parallel layers' biases): equal on every shard, so it is compressed by none
 * (dgc_state_reset) and counted once in the clipping norm (dgc_exchange). */
static bool whole_on_every_shard(const param_table *pt, int e)
{
    return pt->tp_size > 1 && pt->entries[e].tp_dim < 0;
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
        d->es[e].dense = d->pt->entries[e].count < d->o.min_numel || whole_on_every_shard(d->pt, e);
        d->es[e].scale = 1.0f;
    }
    size_t nblk = d->blk_base[d->pt->count];
    memset(d->gzero, 0, nblk);
    memset(d->vzero, 1, nblk);  /* v and u are zero now */
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

/* ---- compression of my slice ---------------------------------------------------- */

/* c = g * scale (+ wd * p / P where momentum correction takes the decay), then the
 * momentum correction and the accumulation, block by block. Pro 3: a block whose
 * contribution was zero last step and whose state is zero is predicted zero; a
 * read-only scan confirms it and the block is skipped (nothing to accumulate, nothing
 * to select: exact), or refutes it and the block is accumulated. Blocks with weight
 * decay folded in are never zero. */
static void accumulate(dgc *d, const param_entry *pe, int e, size_t at, const float *params, float scale, bool plain,
                       dgc_stats *st)
{
    float *c = d->slice + at, *v = d->v + at, *u = d->u ? d->u + at : NULL;
    const float *p = params + d->s0 + at;
    const float wd = plain && pe->decay ? (float)(d->o.weight_decay / d->P) : 0.0f;
    const float m = (float)d->o.momentum, fold = d->fold;
    const bool nesterov = d->o.nesterov, can = d->o.zero_predict && wd == 0.0f;
    size_t n = pe->count, nb = (n + DGC_BLOCK - 1) / DGC_BLOCK;
    uint8_t *gz = d->gzero + d->blk_base[e], *vz = d->vzero + d->blk_base[e], *sk = d->skip + d->blk_base[e];
    size_t predicted = 0, hit = 0, truth = 0, skipped = 0;
#pragma omp parallel for schedule(static) reduction(+ : predicted, hit, truth, skipped)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * DGC_BLOCK, hi = lo + DGC_BLOCK < n ? lo + DGC_BLOCK : n;
        bool pred = can && vz[b] && gz[b], zero = can;
        for (size_t i = lo; i < hi && zero; i++) zero = c[i] == 0.0f;
        predicted += pred ? hi - lo : 0;
        truth += zero && vz[b] ? hi - lo : 0;
        if (pred && zero) {  /* confirmed: v and u stay zero */
            sk[b] = 1;
            hit += hi - lo;
            skipped += hi - lo;
            continue;
        }
        sk[b] = 0;
        bool state_zero = true;
#pragma omp simd reduction(&& : state_zero)
        for (size_t i = lo; i < hi; i++) {
            float ci = c[i] * scale + wd * p[i], vi;
            if (u) {
                float ui = m * u[i] + ci;
                u[i] = ui;
                vi = v[i] + fold * (nesterov ? ci + m * ui : ui);
                state_zero = state_zero && ui == 0.0f;
            } else {
                vi = v[i] + ci;
            }
            v[i] = vi;
            state_zero = state_zero && vi == 0.0f;
        }
        gz[b] = zero;
        vz[b] = state_zero;
    }
    st->zero_predicted += predicted;
    st->zero_hit += hit;
    st->zero_true += truth;
    st->zero_skipped += skipped;
}

/* The runs of consecutive blocks of tensor e not skipped this step, as [lo, hi) pairs
 * (entries of the tensor) in runs; returns their count. */
static int live_runs(const dgc *d, int e, size_t n, size_t *runs)
{
    const uint8_t *sk = d->skip + d->blk_base[e];
    size_t nb = (n + DGC_BLOCK - 1) / DGC_BLOCK;
    int k = 0;
    for (size_t b = 0; b < nb;) {
        if (sk[b]) {
            b++;
            continue;
        }
        size_t a = b;
        while (b < nb && !sk[b]) b++;
        runs[2 * k] = a * DGC_BLOCK;
        runs[2 * k + 1] = b * DGC_BLOCK < n ? b * DGC_BLOCK : n;
        k++;
    }
    return k;
}

/* The thresholds of `count` densities of v (one sample serves all). */
static void thresholds(dgc *d, const float *v, size_t n, const double *density, float *thr, int count, uint64_t seed)
{
    if (!d->o.exact_topk) {
        dgc_sampled_thresholds(v, n, density, thr, count, d->o.sample_fraction, seed, d->scratch);
        return;
    }
    for (int q = 0; q < count; q++) {
        size_t k = (size_t)ceil(density[q] * (double)n);
        thr[q] = dgc_kth_abs(v, n, k < 1 ? 1 : k, d->scratch);
    }
}

/* dgc_select over the runs of v, indices relative to v; counts past cap like it. */
static size_t select_runs(const float *v, const size_t *runs, int nr, float thr, uint32_t *idx, size_t cap)
{
    size_t got = 0;
    for (int r = 0; r < nr; r++) {
        size_t lo = runs[2 * r], room = got < cap ? cap - got : 0;
        size_t k = dgc_select(v + lo, runs[2 * r + 1] - lo, thr, idx + (got < cap ? got : cap), room);
        for (size_t j = 0; j < (k < room ? k : room); j++) idx[got + j] += (uint32_t)lo;
        got += k;
    }
    return got;
}

/* energy[0..2]: selected, total, and above the base density's threshold (Pro 2). */
static void select_entry(dgc *d, int e, size_t at, double base, long step, double *energy)
{
    const param_entry *pe = &d->pt->entries[e];
    size_t n = pe->count;
    float *v = d->v + at;
    double density = base * d->es[e].scale;
    if (density > 0.5) density = 0.5;
    size_t k = (size_t)ceil(density * (double)n);
    if (k < 1) k = 1;
    uint64_t seed = d->o.seed ^ ((uint64_t)step << 20) ^ (uint64_t)e;
    double want[2] = { density, base };  /* the selection's, and Pro 2's reference */
    float th[2] = { INFINITY, INFINITY };
    thresholds(d, v, n, want, th, d->o.layer_ratios ? 2 : 1, seed);
    float thr = th[0], ref = th[1];
    if (!(thr > 0)) thr = FLT_MIN;  /* nothing above 0 in the sample: every nonzero is a candidate */
    uint32_t *idx = d->idx + d->nsel;
    size_t cap = d->cap - d->nsel;
    size_t *runs = d->runs2;  /* skipped blocks hold zeros: only the others are read */
    int nr = live_runs(d, e, n, runs);
    size_t got = select_runs(v, runs, nr, thr, idx, cap);
    if (got > 2 * k + 16 || got > cap) {  /* the sample misjudged the tail: exact among all */
        thr = dgc_kth_abs(v, n, k, d->scratch);
        if (!(thr > 0)) thr = FLT_MIN;
        got = select_runs(v, runs, nr, thr, idx, cap);
        if (got > cap) got = cap;
    }
    double tot = 0, sel = 0, above = 0;
    if (!(ref > 0)) ref = FLT_MIN;
    for (int r = 0; r < nr; r++) {
#pragma omp parallel for simd reduction(+ : tot, above) schedule(static)
        for (size_t i = runs[2 * r]; i < runs[2 * r + 1]; i++) {
            double sq = (double)v[i] * v[i];
            tot += sq;
            above += fabsf(v[i]) >= ref ? sq : 0.0;
        }
    }
    float *val = d->val + d->nsel;
    for (size_t j = 0; j < got; j++) {
        uint32_t i = idx[j];
        float x = v[i];
        if (d->o.values == DGC_VALUES_FP16) x = fmaxf(-65504.0f, fminf(65504.0f, x));
        float sent = dgc_round_value(x, d->o.values);
        sel += (double)v[i] * v[i];
        val[j] = sent;
        v[i] -= sent;  /* 0, or the rounding: the residual keeps it */
        if (d->u) d->u[at + i] = 0;  /* momentum-factor masking */
        idx[j] = (uint32_t)(at + i);
    }
    d->nsel += got;
    energy[0] = sel;
    energy[1] = tot;
    energy[2] = above;
}

/* Pro 2: densities for the next step. A tensor whose |v|^2 is concentrated in its top
 * entries (measured at the schedule's density, a moving average over steps) needs few
 * of them: its density scale is proportional to the energy the base selection leaves
 * behind, normalised so that the node's sparse tensors select as many entries as the
 * schedule (the traffic budget), and kept within 1/8 .. 8. The energies are sums over
 * nodes, so every node chooses the same. Collective over the node. */
static status layer_ratios(dgc *d, long step)
{
    double weight = 0, sum = 0;
    for (int e = d->first; e < d->last; e++) {
        dgc_entry_state *es = &d->es[e];
        if (es->dense) continue;
        double tot = d->energy[3 * e + 1];
        float c = tot > 0 ? (float)(d->energy[3 * e + 2] / tot) : 1.0f;
        es->concentration = step == 0 || es->concentration == 0 ? c : 0.8f * es->concentration + 0.2f * c;
        double n = (double)d->pt->entries[e].count;
        weight += n;
        sum += n * (1.0 - es->concentration + 0.02);
    }
    double ws[2] = { weight, sum };  /* the budget is the node's: every local rank's tensors share it */
    TRY(comm_ctl_allreduce(d->node, MPI_IN_PLACE, ws, 2, MPI_DOUBLE, MPI_SUM));
    weight = ws[0], sum = ws[1];
    if (weight == 0) return STATUS_OK;
    double mean = sum / weight, total = 0;
    for (int e = d->first; e < d->last; e++) {
        dgc_entry_state *es = &d->es[e];
        if (es->dense) continue;
        float sc = (float)((1.0 - es->concentration + 0.02) / mean);
        es->scale = sc < DGC_SCALE_MIN ? DGC_SCALE_MIN : sc > DGC_SCALE_MAX ? DGC_SCALE_MAX : sc;
        total += (double)d->pt->entries[e].count * es->scale;
    }
    TRY(comm_ctl_allreduce(d->node, MPI_IN_PLACE, &total, 1, MPI_DOUBLE, MPI_SUM));
    float norm = (float)(weight / total);  /* the clamps moved the budget: restore it */
    for (int e = d->first; e < d->last; e++)
        if (!d->es[e].dense) d->es[e].scale *= norm;
    return STATUS_OK;
}

status dgc_layer_table(dgc *d, float *density, float *concentration, uint8_t *dense, long step)
{
    int n = d->pt->count;
    double base = dgc_density_at(&d->o, step);
    /* density, concentration and the dense flag (0 or 1) of my tensors, zeros elsewhere:
       the maximum over the node is each tensor's owner's value, exactly */
    float *f = calloc(3 * (size_t)n, sizeof(float));
    CHECK(f, "out of memory");
    for (int e = d->first; e < d->last; e++) {
        f[e] = d->es[e].dense ? 1.0f : (float)(base * d->es[e].scale);
        f[n + e] = d->es[e].concentration;
        f[2 * n + e] = d->es[e].dense;
    }
    status st = comm_group_allreduce(d->node_g, f, 3 * (size_t)n, REDUCE_DTYPE_F32, REDUCE_OP_MAX);
    if (st == STATUS_OK && d->rt->local_rank == 0) {
        memcpy(density, f, (size_t)n * sizeof(float));
        memcpy(concentration, f + n, (size_t)n * sizeof(float));
        for (int e = 0; e < n; e++) dense[e] = f[2 * n + e] != 0.0f;
    }
    if (st == STATUS_OK) free(f);  /* after a timeout MPI may still write it: left to the ending job */
    return st;
}

/* ---- the exchange among peers ------------------------------------------------------ */

static void range_of(const dgc *d, int r, size_t *lo, size_t *hi)
{
    *lo = d->S / (size_t)d->P * (size_t)r;
    *hi = r == d->P - 1 ? d->S : d->S / (size_t)d->P * (size_t)(r + 1);
}

/* Dense runs of [lo, hi) (pairs relative to lo); returns their count. */
static int dense_runs(const dgc *d, size_t lo, size_t hi, size_t *runs)
{
    int n = 0;
    for (int e = d->first; e < d->last; e++) {
        if (!d->es[e].dense) continue;
        size_t a = d->pt->entries[e].offset - d->s0, b = a + d->pt->entries[e].count;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a < b) {
            runs[2 * n] = a - lo;
            runs[2 * n + 1] = b - lo;
            n++;
        }
    }
    return n;
}

static void reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return;
    free(*buf);
    *cap = need + need / 4;
    *buf = malloc(*cap);
    CHECK(*buf, "dgc: out of memory for exchange buffers");
}

/* Encodes the entries in [lo, hi): sparse (dense runs from `dense_src`, entries
 * idx[a, b) with values val) or dense, whichever is smaller. */
static size_t encode_range(dgc *d, uint8_t *out, size_t lo, size_t hi, const float *dense_src, const size_t *runs,
                           int nruns, const uint32_t *idx, const float *val, size_t count)
{
    size_t n = hi - lo, nd = 0;
    for (int r = 0; r < nruns; r++) nd += runs[2 * r + 1] - runs[2 * r];
    float *dv = d->scratch;  /* the dense-run values, packed */
    size_t at = 0;
    for (int r = 0; r < nruns; r++)
        for (size_t i = runs[2 * r]; i < runs[2 * r + 1]; i++) dv[at++] = dense_src[lo + i];
    if (dgc_sparse_msg_bytes(nd, idx, count, d->o.values) < DGC_MSG_HEADER + 4 * n)
        return dgc_encode_sparse(out, dv, nd, idx, val, count, d->o.values);
    float *full = d->dense_tmp;
    memset(full, 0, n * sizeof(float));
    for (int r = 0; r < nruns; r++)
        for (size_t i = runs[2 * r]; i < runs[2 * r + 1]; i++) full[i] = dense_src[lo + i];
    for (size_t j = 0; j < count; j++) full[idx[j]] = val[j];
    return dgc_encode_dense(out, full, n);
}

static status exchange(dgc *d, dgc_stats *st)
{
    int P = d->P;
    double t0 = MPI_Wtime();
    /* phase 1: my entries of range r to peer r */
    size_t need = 0;
    for (int r = 0; r < P; r++) {
        size_t lo, hi;
        range_of(d, r, &lo, &hi);
        need += DGC_MSG_HEADER + 4 * (hi - lo) + 16;
    }
    reserve(&d->sbuf, &d->sbuf_cap, need);
    size_t j = 0, off = 0;
    for (int r = 0; r < P; r++) {
        size_t lo, hi;
        range_of(d, r, &lo, &hi);
        size_t a = j;
        while (j < d->nsel && d->idx[j] < hi) j++;
        for (size_t q = a; q < j; q++) d->idx[q] -= (uint32_t)lo;  /* relative to the range */
        int nr = dense_runs(d, lo, hi, d->runs);
        size_t len = encode_range(d, d->sbuf + off, lo, hi, d->slice, d->runs, nr, d->idx + a, d->val + a, j - a);
        for (size_t q = a; q < j; q++) d->idx[q] += (uint32_t)lo;
        CHECK(len < INT32_MAX && off + len < INT32_MAX, "dgc: a message exceeds 2 GiB");
        d->scount[r] = (int)len;
        d->sdispl[r] = (int)off;
        off += len;
    }
    double t1 = MPI_Wtime();
    TRY(comm_ctl_alltoall(d->peers, d->scount, 1, MPI_INT, d->rcount, 1, MPI_INT));
    size_t rtotal = 0;
    for (int r = 0; r < P; r++) {
        d->rdispl[r] = (int)rtotal;
        rtotal += (size_t)d->rcount[r];
    }
    reserve(&d->rbuf, &d->rbuf_cap, rtotal + 1);
    TRY(comm_group_alltoallv(d->peers_g, d->sbuf, d->scount, d->sdispl, d->rbuf, d->rcount, d->rdispl, 1));
    for (int r = 0; r < P; r++)
        if (r != d->prank) {
            st->bytes_sent += (size_t)d->scount[r];
            st->bytes_recv += (size_t)d->rcount[r];
        }
    double t2 = MPI_Wtime();
    /* my range: the sum in peer order, then its union re-encoded */
    size_t lo, hi;
    range_of(d, d->prank, &lo, &hi);
    size_t n = hi - lo;
    int nr = dense_runs(d, lo, hi, d->runs);
    memset(d->acc, 0, n * sizeof(float));
    memset(d->touched, 0, (n / 64 + 1) * sizeof(uint64_t));
    for (int q = 0; q < P; q++) {
        status s = dgc_decode_add(d->rbuf + d->rdispl[q], (size_t)d->rcount[q], d->acc, n, d->runs, nr, d->touched);
        if (s != STATUS_OK) {
            log_error("dgc: a malformed message from node %d (range %d)", q, d->prank);
            return s;
        }
    }
    /* the union, outside the dense runs, ascending */
    size_t cnt = 0, pos = 0;
    uint32_t *uidx = d->uidx;
    float *uval = d->uval;
    size_t ucap = n;
    for (int r = 0; r <= nr; r++) {
        size_t end = r < nr ? d->runs[2 * r] : n;
        for (size_t i = pos; i < end; i++)
            if (d->touched[i >> 6] >> (i & 63) & 1) {
                if (cnt == ucap) break;
                float x = d->acc[i];
                if (d->o.values == DGC_VALUES_FP16) x = fmaxf(-65504.0f, fminf(65504.0f, x));
                float sent = dgc_round_value(x, d->o.values);
                uidx[cnt] = (uint32_t)i;
                uval[cnt++] = sent;
            }
        if (r < nr) pos = d->runs[2 * r + 1];
    }
    bool overflow = cnt == ucap && ucap < n;
    reserve(&d->sbuf, &d->sbuf_cap, DGC_MSG_HEADER + 4 * n + 16);
    size_t len;
    if (overflow) {
        len = dgc_encode_dense(d->sbuf, d->acc, n);
    } else {
        /* dense_src for the runs is acc, shifted: encode_range reads dense_src[lo + i] */
        len = encode_range(d, d->sbuf, 0, n, d->acc, d->runs, nr, uidx, uval, cnt);
    }
    if (d->sbuf[0] == 1 && d->o.values == DGC_VALUES_FP16) {  /* sent sparse: the rounding of a sum stays in my residual */
        int e = d->first;
        for (size_t q = 0; q < cnt; q++) {
            size_t at = lo + uidx[q];
            float r = d->acc[uidx[q]] - uval[q];
            if (r == 0.0f) continue;
            d->v[at] += r;
            while (e + 1 < d->last && d->pt->entries[e + 1].offset - d->s0 <= at) e++;  /* ascending */
            d->vzero[d->blk_base[e] + (at - (d->pt->entries[e].offset - d->s0)) / DGC_BLOCK] = 0;
        }
    }
    double t_enc = MPI_Wtime();
    int mylen = (int)len;
    TRY(comm_ctl_allgather(d->peers, &mylen, 1, MPI_INT, d->rcount, 1, MPI_INT));
    rtotal = 0;
    for (int r = 0; r < P; r++) {
        d->rdispl[r] = (int)rtotal;
        rtotal += (size_t)d->rcount[r];
    }
    reserve(&d->rbuf, &d->rbuf_cap, rtotal + 1);
    TRY(comm_group_allgatherv(d->peers_g, d->sbuf, d->rbuf, d->rcount, d->rdispl, 1));
    st->bytes_sent += (size_t)mylen * (size_t)(P - 1);
    st->bytes_recv += rtotal - (size_t)mylen;
    double t3 = MPI_Wtime();
    float *out = d->out;  /* the slice may alias it: phase 1 has read it */
    memset(out, 0, d->S * sizeof(float));
    for (int r = 0; r < P; r++) {
        size_t a, b;
        range_of(d, r, &a, &b);
        int k = dense_runs(d, a, b, d->runs);
        status s = dgc_decode_add(d->rbuf + d->rdispl[r], (size_t)d->rcount[r], out + a, b - a, d->runs, k, NULL);
        if (s != STATUS_OK) {
            log_error("dgc: a malformed reduced range from node %d", r);
            return s;
        }
    }
    double t4 = MPI_Wtime();
    st->encode_s += (t1 - t0) + (t_enc - t2) + (t4 - t3);  /* encoding, the owner's sum, decoding */
    st->exchange_s += (t2 - t1) + (t3 - t_enc);           /* alltoallv, allgatherv */
    return STATUS_OK;
}

status dgc_exchange(dgc *d, float *grads, const float *params, long step, double lr_scale, dgc_stats *st)
{
    memset(st, 0, sizeof *st);
    d->fold = (float)lr_scale;
    double t0 = MPI_Wtime();
    const runtime *rt = d->rt;
    d->out = grads + d->s0;
    d->slice = d->L > 1 ? d->own_slice : d->out;
    if (d->L > 1) TRY(comm_group_reduce_scatter(d->node_g, grads, d->slice, d->cnt, REDUCE_DTYPE_F32, REDUCE_OP_SUM));
    float scale = 1.0f / (float)rt->size;
    if (d->o.clip > 0) {  /* local clipping of the node's contribution to clip / sqrt(nodes) */
        double ss = 0, all;
        const float *x = d->slice;
#pragma omp parallel for simd reduction(+ : ss) schedule(static)
        for (size_t i = 0; i < d->S; i++) ss += (double)x[i] * x[i];
        /* a tensor whole on every tensor-parallel shard (norms, biases) counts once: tp
           rank 0's copy; the others take theirs back out (small tensors, one pass each) */
        for (int e = d->first; e < d->last && d->o.norm_comm && d->pt->tp_rank > 0; e++) {
            if (!whole_on_every_shard(d->pt, e)) continue;
            const param_entry *pe = &d->pt->entries[e];
            const float *w = d->slice + (pe->offset - d->s0);
            for (size_t i = 0; i < pe->count; i++) ss -= (double)w[i] * w[i];
        }
        ss = fmax(ss, 0.0);  /* the subtraction's rounding */
        TRY(comm_ctl_allreduce(d->node, &ss, &all, 1, MPI_DOUBLE, MPI_SUM));
        if (d->o.norm_comm) {  /* a grid: the node's other shards and stages, each node once */
            double part = d->lrank == 0 ? all : 0;
            TRY(comm_ctl_allreduce(d->norm, &part, &all, 1, MPI_DOUBLE, MPI_SUM));
        }
        double norm = sqrt(all) * scale, limit = d->o.clip / sqrt((double)d->P);
        if (norm > limit) scale = (float)(scale * limit / (norm + 1e-6));
    }
    double density = dgc_density_at(&d->o, step);
    st->density = density;
    d->nsel = 0;
    memset(d->energy, 0, sizeof(double) * 3 * (size_t)d->pt->count);
    double ts = MPI_Wtime();
    for (int e = d->first; e < d->last; e++) {
        const param_entry *pe = &d->pt->entries[e];
        size_t at = pe->offset - d->s0;
        bool dense = d->es[e].dense;
        d->plain[e] = !dense && d->o.momentum > 0;
        if (dense) {  /* the gradient, plus any residual left from when the tensor was compressed */
            float *c = d->slice + at, *v = d->v + at, *u = d->u ? d->u + at : NULL;
            const float unfold = u ? 1.0f / d->fold : 1.0f;  /* momentum correction folded the rate into v */
            for (size_t i = 0; i < pe->count; i++) {
                c[i] = c[i] * scale + v[i] * unfold;
                v[i] = 0;
                if (u) u[i] = 0;
            }
            st->dense_tensors++;
            continue;
        }
        accumulate(d, pe, e, at, params, scale, d->plain[e], st);
        select_entry(d, e, at, density, step, &d->energy[3 * e]);
        st->compressed += pe->count;
    }
    st->selected = d->nsel;
    /* what selection left in v, from the energies it summed (no second pass over v) */
    double rn = 0;
    for (int e = d->first; e < d->last; e++)
        if (!d->es[e].dense) rn += fmax(0.0, d->energy[3 * e + 1] - d->energy[3 * e]);
    st->residual_norm = sqrt(rn);
    st->select_s = MPI_Wtime() - ts;
    /* Tell the other ranks of the node which entries are plain (every rank's optimizer needs all). */
    for (int e = 0; e < d->pt->count; e++) d->plainf[e] = d->plain[e];
    TRY(comm_group_allreduce(d->node_g, d->plainf, (size_t)d->pt->count, REDUCE_DTYPE_F32, REDUCE_OP_MAX));
    for (int e = 0; e < d->pt->count; e++) d->plain[e] = d->plainf[e] != 0.0f;
    if (d->P > 1) {
        TRY(exchange(d, st));
    } else {
        for (int e = d->first; e < d->last; e++) {  /* dense tensors as they are, the rest as selected */
            size_t at = d->pt->entries[e].offset - d->s0, n = d->pt->entries[e].count;
            if (!d->es[e].dense) memset(d->out + at, 0, n * sizeof(float));
            else if (d->slice != d->out) memcpy(d->out + at, d->slice + at, n * sizeof(float));
        }
        for (size_t j = 0; j < d->nsel; j++) d->out[d->idx[j]] = d->val[j];
    }
    /* The compressed tensors' sums carry the rate they were accumulated with: take it out. */
    if (d->u && d->fold != 1.0f) {
        const float inv = 1.0f / d->fold;
        for (int e = d->first; e < d->last; e++) {
            if (!d->plain[e]) continue;
            float *o = d->out + (d->pt->entries[e].offset - d->s0);
            for (size_t i = 0; i < d->pt->entries[e].count; i++) o[i] *= inv;
        }
    }
    /* Pro 1: a tensor whose top-k carried too little of its energy (over all nodes) goes
     * dense; Pro 2: the others' densities for the next step. */
    int ne = d->last - d->first;
    if (d->o.min_energy > 0 || d->o.layer_ratios) {
        if (ne > 0)
            TRY(comm_group_allreduce(d->peers_g, d->energy + 3 * d->first, 3 * (size_t)ne, REDUCE_DTYPE_F64,
                                     REDUCE_OP_SUM));
        for (int e = d->first; e < d->last && d->o.min_energy > 0; e++) {
            if (d->es[e].dense) continue;
            double tot = d->energy[3 * e + 1];
            d->es[e].energy = tot > 0 ? (float)(d->energy[3 * e] / tot) : 1.0f;
            if (tot > 0 && d->es[e].energy < d->o.min_energy)
                d->es[e].dense = 1;  /* its residual goes out with its next (dense) gradient */
        }
        if (d->o.layer_ratios) TRY(layer_ratios(d, step));
    }
    if (d->L > 1)
        TRY(comm_group_allgatherv(d->node_g, NULL, grads, d->cnt, d->dsp, sizeof(float)));
    st->dense_bytes = d->P > 1 ? (size_t)(2.0 * (d->P - 1) / d->P * (double)d->S * 4) : 0;
    st->total_s = MPI_Wtime() - t0;
    return STATUS_OK;
}
