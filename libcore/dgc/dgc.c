/* dgc — DGC-Pro's selection (dgc.h): per tensor of my slice, the accumulation with
 * momentum correction, the threshold and top-k, and the per-layer decisions (Pro 1's
 * dense fallback, Pro 2's densities). The state is dgc_state.c's, the step that calls
 * these dgc_exchange.c's.
 *
 * The one design decision: selection is exact to the schedule's budget per node,
 * not per rank — every local rank compresses its own whole tensors of the node's
 * summed gradient, so a tensor is selected once per node. */
#include "dgc_impl.h"

#include <float.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- compression of my slice ---------------------------------------------------- */

/* c = g * scale (+ wd * p / P where momentum correction takes the decay), then the
 * momentum correction and the accumulation, block by block. Pro 3: a block whose
 * contribution was zero last step and whose state is zero is predicted zero; a
 * read-only scan confirms it and the block is skipped (nothing to accumulate, nothing
 * to select: exact), or refutes it and the block is accumulated. Blocks with weight
 * decay folded in are never zero. */
void dgc_accumulate(dgc *d, const param_entry *pe, int e, size_t at, const float *params, float scale, bool plain,
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
void dgc_select_entry(dgc *d, int e, size_t at, double base, long step, double *energy)
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
status dgc_layer_ratios(dgc *d, long step)
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
