/* dgc_exchange — DGC-Pro's step (dgc.h: dgc_exchange): the node's reduce-scatter, local
 * clipping, selection (dgc.c), the sparse exchange among the peers and the node's
 * all-gather.
 *
 * The one design decision: every vector payload goes through comm.h's comm_group (the
 * node's and the peers' groups, with the run's deadline), so the exchange runs on any
 * backend that implements the group ops; comm/ctl.h carries only scalars (the clipping
 * norm's sums) and size agreements (each message's length). */
#include "dgc_impl.h"

#include <float.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

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
            if (!dgc_whole_on_every_shard(d->pt, e)) continue;
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
        dgc_accumulate(d, pe, e, at, params, scale, d->plain[e], st);
        dgc_select_entry(d, e, at, density, step, &d->energy[3 * e]);
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
        if (d->o.layer_ratios) TRY(dgc_layer_ratios(d, step));
    }
    if (d->L > 1)
        TRY(comm_group_allgatherv(d->node_g, NULL, grads, d->cnt, d->dsp, sizeof(float)));
    st->dense_bytes = d->P > 1 ? (size_t)(2.0 * (d->P - 1) / d->P * (double)d->S * 4) : 0;
    st->total_s = MPI_Wtime() - t0;
    return STATUS_OK;
}
