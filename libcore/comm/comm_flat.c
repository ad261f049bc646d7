/* comm_flat — allreduce among the ranks of one group by point-to-point steps.
 *
 *   rd    recursive doubling, for messages up to COMM_FLAT_RD_MAX_BYTES: log2 n
 *         steps. With n not a power of two, the p2 = 2^floor(log2 n) lowest ranks
 *         first fold in rank r + p2 and hand it the result at the end.
 *   rab   Rabenseifner, for a power-of-two group: reduce-scatter by recursive
 *         halving, allgather by recursive doubling; 2 log2 n steps moving
 *         2(n-1)/n of the buffer per rank (Thakur, Rabenseifner & Gropp, 2005).
 *   ring  otherwise: n-1 reduce-scatter steps, n-1 allgather steps.
 *
 * Every element is combined in an order fixed by the group size; where two
 * partners both keep a result, the lower rank's data is the left operand on both,
 * so every rank ends with the same bits (NaN and signed zeros included). Steps of one op share a tag; MPI's non-overtaking rule
 * keeps consecutive steps between the same pair in order. */
#include <string.h>

#include "comm_impl.h"
#include "cpu/reduce.h"

static int pow2_floor(int n)
{
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}

static int log2_int(int p)
{
    int l = 0;
    while ((1 << l) < p) l++;
    return l;
}

static int flat_sub(int size, size_t count, size_t esz, bool ring)
{
    if (ring && count >= (size_t)size) return COMM_FLAT_RING;
    if (count * esz <= COMM_FLAT_RD_MAX_BYTES) return COMM_FLAT_RD;
    if (pow2_floor(size) == size && count >= (size_t)size) return COMM_FLAT_RAB;
    return COMM_FLAT_RING;
}

size_t comm_flat_scratch_bytes(const comm *c, int group, size_t count, reduce_dtype dt, bool ring)
{
    int size = c->be.group_size[group];
    size_t esz = reduce_dtype_size(dt), off, len;
    if (flat_sub(size, count, esz, ring) != COMM_FLAT_RING) return count * esz;
    comm_split_even(count, size, 0, &off, &len);
    return len * esz;
}

void comm_flat_begin(comm *c, comm_flat *f, int group, void *buf, size_t count, reduce_dtype dt, void *scratch,
                     uint64_t seq, bool ring)
{
    f->group = group;
    f->rank = c->be.group_rank[group];
    f->size = c->be.group_size[group];
    CHECK(f->rank >= 0, "flat allreduce on a group this rank is not in");
    f->sub = flat_sub(f->size, count, reduce_dtype_size(dt), ring);
    f->phase = f->size == 1 ? 99 : 0;  /* a group of one has nothing to do */
    f->step = 0;
    f->buf = buf;
    f->count = count;
    f->scratch = scratch;
    f->tag = (int)(seq % 32768);
}

bool comm_flat_done(const comm_flat *f)
{
    return f->phase >= (f->sub == COMM_FLAT_RD ? 3 : 2);
}

static status rd_post(comm *c, comm_op *o, comm_flat *f)
{
    int n = f->size, r = f->rank, p2 = pow2_floor(n);
    size_t bytes = f->count * reduce_dtype_size(o->dtype);
    const comm_backend_ops *be = c->be.ops;
    if (f->phase == 0) {
        if (r >= p2) TRY(be->isend(&c->be, f->group, f->buf, bytes, r - p2, f->tag, &o->req[o->nreq++]));
        else if (r + p2 < n) TRY(be->irecv(&c->be, f->group, f->scratch, bytes, r + p2, f->tag, &o->req[o->nreq++]));
    } else if (f->phase == 1) {
        if (r >= p2) return STATUS_OK;
        int peer = r ^ (1 << f->step);
        TRY(be->irecv(&c->be, f->group, f->scratch, bytes, peer, f->tag, &o->req[o->nreq++]));
        TRY(be->isend(&c->be, f->group, f->buf, bytes, peer, f->tag, &o->req[o->nreq++]));
    } else {
        if (r >= p2) TRY(be->irecv(&c->be, f->group, f->buf, bytes, r - p2, f->tag, &o->req[o->nreq++]));
        else if (r + p2 < n) TRY(be->isend(&c->be, f->group, f->buf, bytes, r + p2, f->tag, &o->req[o->nreq++]));
    }
    return STATUS_OK;
}

static void rd_complete(comm_op *o, comm_flat *f)
{
    int n = f->size, r = f->rank, p2 = pow2_floor(n), steps = log2_int(p2);
    /* Both partners of a doubling step keep the result: the lower rank's data is
     * always the left operand, so they compute the same bits (NaN, signed zero). */
    if (f->phase == 0 && r < p2 && r + p2 < n) reduce_apply(f->buf, f->scratch, f->count, o->dtype, o->op);
    if (f->phase == 1 && r < p2) {
        if (r < (r ^ (1 << f->step))) reduce_apply(f->buf, f->scratch, f->count, o->dtype, o->op);
        else reduce_apply_rev(f->buf, f->scratch, f->count, o->dtype, o->op);
    }
    if (f->phase == 1 && r < p2 && ++f->step < steps) return;
    f->step = 0;
    f->phase++;
}

/* The segment a rank holds after `level` halvings follows from its top bits. */
static void rab_segment(size_t count, int r, int p2, int level, size_t *lo, size_t *hi)
{
    *lo = 0;
    *hi = count;
    for (int k = 0; k < level; k++) {
        size_t mid = *lo + (*hi - *lo) / 2;
        if (r & (p2 >> (k + 1))) *lo = mid;
        else *hi = mid;
    }
}

static status rab_post(comm *c, comm_op *o, comm_flat *f)
{
    int r = f->rank, p2 = f->size, L = log2_int(p2);
    int level = f->phase == 0 ? f->step : L - f->step;
    int peer = r ^ (f->phase == 0 ? p2 >> (level + 1) : p2 >> level);
    size_t esz = reduce_dtype_size(o->dtype), lo, hi, plo, phi;
    char *base = f->buf;
    const comm_backend_ops *be = c->be.ops;
    if (f->phase == 0) {  /* receive the partner's copy of the half I keep, send it the other half */
        rab_segment(f->count, r, p2, level + 1, &lo, &hi);
        rab_segment(f->count, peer, p2, level + 1, &plo, &phi);
        TRY(be->irecv(&c->be, f->group, f->scratch, (hi - lo) * esz, peer, f->tag, &o->req[o->nreq++]));
        TRY(be->isend(&c->be, f->group, base + plo * esz, (phi - plo) * esz, peer, f->tag, &o->req[o->nreq++]));
    } else {              /* send my reduced segment, receive the partner's into place */
        rab_segment(f->count, r, p2, level, &lo, &hi);
        rab_segment(f->count, peer, p2, level, &plo, &phi);
        TRY(be->irecv(&c->be, f->group, base + plo * esz, (phi - plo) * esz, peer, f->tag, &o->req[o->nreq++]));
        TRY(be->isend(&c->be, f->group, base + lo * esz, (hi - lo) * esz, peer, f->tag, &o->req[o->nreq++]));
    }
    return STATUS_OK;
}

static void rab_complete(comm_op *o, comm_flat *f)
{
    int p2 = f->size, L = log2_int(p2);
    if (f->phase == 0) {
        size_t lo, hi;
        rab_segment(f->count, f->rank, p2, f->step + 1, &lo, &hi);
        reduce_apply((char *)f->buf + lo * reduce_dtype_size(o->dtype), f->scratch, hi - lo, o->dtype, o->op);
    }
    if (++f->step == L) { f->step = 0; f->phase++; }
}

/* Ring: in reduce-scatter step s rank r sends chunk (r-s) and receives chunk
 * (r-s-1), which it adds to its copy; afterwards it holds the sum of chunk (r+1). */
static int ring_send_chunk(const comm_flat *f)
{
    int n = f->size;
    return f->phase == 0 ? (f->rank - f->step + 2 * n) % n : (f->rank - f->step + 1 + 2 * n) % n;
}

static status ring_post(comm *c, comm_op *o, comm_flat *f)
{
    int n = f->size, right = (f->rank + 1) % n, left = (f->rank + n - 1) % n;
    int send_chunk = ring_send_chunk(f), recv_chunk = (send_chunk + n - 1) % n;
    size_t esz = reduce_dtype_size(o->dtype), soff, slen, roff, rlen;
    comm_split_even(f->count, n, send_chunk, &soff, &slen);
    comm_split_even(f->count, n, recv_chunk, &roff, &rlen);
    char *base = f->buf;
    void *rbuf = f->phase == 0 ? f->scratch : base + roff * esz;
    TRY(c->be.ops->irecv(&c->be, f->group, rbuf, rlen * esz, left, f->tag, &o->req[o->nreq++]));
    TRY(c->be.ops->isend(&c->be, f->group, base + soff * esz, slen * esz, right, f->tag, &o->req[o->nreq++]));
    return STATUS_OK;
}

static void ring_complete(comm_op *o, comm_flat *f)
{
    int n = f->size;
    if (f->phase == 0) {
        size_t esz = reduce_dtype_size(o->dtype), roff, rlen;
        comm_split_even(f->count, n, (ring_send_chunk(f) + n - 1) % n, &roff, &rlen);
        reduce_apply((char *)f->buf + roff * esz, f->scratch, rlen, o->dtype, o->op);
    }
    if (++f->step == n - 1) { f->step = 0; f->phase++; }
}

status comm_flat_post(comm *c, comm_op *o, comm_flat *f)
{
    if (f->sub == COMM_FLAT_RD) return rd_post(c, o, f);
    if (f->sub == COMM_FLAT_RAB) return rab_post(c, o, f);
    return ring_post(c, o, f);
}

void comm_flat_complete(comm *c, comm_op *o, comm_flat *f)
{
    (void)c;
    if (f->sub == COMM_FLAT_RD) rd_complete(o, f);
    else if (f->sub == COMM_FLAT_RAB) rab_complete(o, f);
    else ring_complete(o, f);
}

status comm_flat_progress(comm *c, comm_op *o, comm_flat *f, bool *done)
{
    for (;;) {
        if (comm_flat_done(f)) { *done = true; return STATUS_OK; }
        if (!o->posted) {
            o->nreq = 0;
            TRY(comm_flat_post(c, o, f));
            o->posted = 1;
        }
        bool fin;
        TRY(comm_op_test_reqs(c, o, &fin));
        if (!fin) { *done = false; return STATUS_OK; }
        o->posted = 0;
        comm_flat_complete(c, o, f);
    }
}
