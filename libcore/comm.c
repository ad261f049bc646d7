/* comm — algorithms, deadlines and the auto table; see comm.h.
 *
 * Every algorithm is a small state machine over non-blocking backend primitives,
 * advanced by comm_test. Two ordering rules keep concurrent ops safe:
 * each phase runs on its own group, and ops enter a phase in sequence order
 * (phase_next), so every rank posts the same collectives on a group in the same
 * order even when ops complete at different speeds on different ranks. */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "config.h"

static const char *algo_names[COMM_ALGO_COUNT] = { "auto", "mpi", "flat", "hier" };

const char *comm_algo_name(comm_algo algo)
{
    return algo >= 0 && algo < COMM_ALGO_COUNT ? algo_names[algo] : "?";
}

bool comm_algo_parse(const char *name, comm_algo *algo)
{
    for (int a = 0; a < COMM_ALGO_COUNT; a++)
        if (!strcmp(name, algo_names[a])) { *algo = (comm_algo)a; return true; }
    return false;
}

const char *comm_describe(const comm *c)
{
    return c->be.describe;
}

enum { FLAT_RING = 0, FLAT_RD, FLAT_RAB };  /* comm_op.sub for COMM_ALGO_FLAT */

static int phase_class(comm_algo algo, int phase);

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
static int algo_phases(comm_algo algo);

status comm_init(comm **out, const runtime *rt, const comm_options *opt)
{
    comm *c = calloc(1, sizeof *c);
    if (!c) return STATUS_NOMEM;
    c->rt = rt;
    c->opt = *opt;
    c->opt.tune_file = NULL;
    status st = comm_mpi_backend_init(&c->be, rt);
    if (st != STATUS_OK) { free(c); return st; }
    MPI_CHECK(MPI_Comm_dup(rt->world, &c->diag));
    if (opt->tune_file && opt->tune_file[0]) {
        st = comm_tune_load(c, opt->tune_file);
        if (st != STATUS_OK) { comm_free(c); return st; }
    }
    *out = c;
    return STATUS_OK;
}

void comm_free(comm *c)
{
    if (!c) return;
    comm_op_free(&c->blocking);
    c->be.ops->free(&c->be);
    MPI_Comm_free(&c->diag);
    free(c);
}

void comm_op_free(comm_op *o)
{
    CHECK(!o->active, "freeing a comm_op that is still in flight");
    free(o->scratch);
    o->scratch = NULL;
    o->scratch_bytes = 0;
}

comm_algo comm_auto_choice(const comm *c, size_t bytes)
{
    if (c->rt->size == 1) return COMM_ALGO_MPI;
    if (c->ntune == 0) return COMM_ALGO_MPI;
    /* Nearest measured size on a log scale. */
    int best = 0;
    double best_d = 1e300;
    for (int i = 0; i < c->ntune; i++) {
        double a = (double)(bytes ? bytes : 1), b = (double)(c->tune[i].bytes ? c->tune[i].bytes : 1);
        double d = a > b ? a / b : b / a;
        if (d < best_d) { best_d = d; best = i; }
    }
    return c->tune[best].algo;
}

static status op_scratch(comm_op *o, size_t bytes)
{
    if (o->scratch_bytes >= bytes) return STATUS_OK;
    void *p = realloc(o->scratch, bytes);
    if (!p) {
        log_error("cannot allocate %zu bytes of communication scratch", bytes);
        return STATUS_NOMEM;
    }
    o->scratch = p;
    o->scratch_bytes = bytes;
    return STATUS_OK;
}

/* Split `count` into n near-equal parts; part i starts at *off and has *len elements. */
static void split_even(size_t count, int n, int i, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, ui = (size_t)i;
    *off = ui * base + (ui < rem ? ui : rem);
    *len = base + (ui < rem ? 1 : 0);
}

/* Hierarchical split: max_local_size chunks; local rank lr of a node with Ls ranks
 * owns the contiguous chunks j with floor(j * Ls / L) == lr. */
static void hier_owned(const runtime *rt, int lr, int *j0, int *j1)
{
    int L = rt->max_local_size, Ls = rt->local_size;
    *j0 = (int)(((long)lr * L + Ls - 1) / Ls);
    *j1 = (int)(((long)(lr + 1) * L + Ls - 1) / Ls);
}

status comm_allreduce_start(comm *c, comm_op *o, void *buf, size_t count, reduce_dtype dt,
                            reduce_op op, comm_algo algo)
{
    CHECK(!o->active, "starting a comm_op that is still in flight");
    size_t esz = reduce_dtype_size(dt);
    if (algo == COMM_ALGO_AUTO) algo = c->opt.algo;
    if (algo == COMM_ALGO_AUTO) algo = comm_auto_choice(c, count * esz);
    if (c->rt->size == 1) algo = COMM_ALGO_MPI;
    o->algo = algo;
    o->seq = ++c->seq;
    o->buf = buf;
    o->count = count;
    o->dtype = dt;
    o->op = op;
    o->phase = 0;
    o->step = 0;
    o->phase_started = 0;
    o->nreq = 0;
    o->t_start = MPI_Wtime();
    o->deadline = c->opt.timeout_s > 0 ? o->t_start + c->opt.timeout_s : 0;
    o->sub = FLAT_RING;
    if (algo == COMM_ALGO_FLAT && count * esz <= COMM_FLAT_RD_MAX_BYTES) o->sub = FLAT_RD;
    else if (algo == COMM_ALGO_FLAT && pow2_floor(c->rt->size) == c->rt->size && count >= (size_t)c->rt->size)
        o->sub = FLAT_RAB;
    if (algo == COMM_ALGO_FLAT) {
        size_t off, len;
        split_even(count, c->rt->size, 0, &off, &len);
        TRY(op_scratch(o, (o->sub != FLAT_RING ? count : len) * esz));
    } else if (algo == COMM_ALGO_HIER) {
        int j0, j1;
        size_t off0, len0, off1, len1;
        hier_owned(c->rt, c->rt->local_rank, &j0, &j1);
        split_even(count, c->rt->max_local_size, j0, &off0, &len0);
        split_even(count, c->rt->max_local_size, j1 - 1, &off1, &len1);
        TRY(op_scratch(o, (off1 + len1 - off0) * esz + 1));
    }
    for (int p = 0; p < algo_phases(algo); p++) {
        int cls = phase_class(algo, p);
        o->ticket[p] = cls >= 0 ? c->ticket_issued[cls]++ : 0;
    }
    CHECK(c->ninflight < COMM_MAX_INFLIGHT, "too many comm_ops in flight");
    c->inflight[c->ninflight++] = o;
    o->active = 1;
    return STATUS_OK;
}

/* Recursive doubling for small messages (latency: log2 n steps). With n not a
 * power of two, the p2 = 2^floor(log2 n) lowest ranks first fold in rank r + p2
 * (phase 0) and hand it the result at the end (phase 2). Partners combine
 * x + y and y + x, which IEEE addition makes bit-identical, so every rank ends
 * with the same bits. */
static status rd_post(comm *c, comm_op *o)
{
    int n = c->rt->size, r = c->rt->rank, p2 = pow2_floor(n), tag = (int)(o->seq % 32768);
    size_t bytes = o->count * reduce_dtype_size(o->dtype);
    const comm_backend_ops *be = c->be.ops;
    o->nreq = 0;
    if (o->phase == 0) {
        if (r >= p2) TRY(be->isend(&c->be, COMM_GROUP_WORLD_P2P, o->buf, bytes, r - p2, tag, &o->req[o->nreq++]));
        else if (r + p2 < n) TRY(be->irecv(&c->be, COMM_GROUP_WORLD_P2P, o->scratch, bytes, r + p2, tag, &o->req[o->nreq++]));
    } else if (o->phase == 1) {
        if (r >= p2) return STATUS_OK;
        int peer = r ^ (1 << o->step);
        TRY(be->irecv(&c->be, COMM_GROUP_WORLD_P2P, o->scratch, bytes, peer, tag, &o->req[o->nreq++]));
        TRY(be->isend(&c->be, COMM_GROUP_WORLD_P2P, o->buf, bytes, peer, tag, &o->req[o->nreq++]));
    } else {
        if (r >= p2) TRY(be->irecv(&c->be, COMM_GROUP_WORLD_P2P, o->buf, bytes, r - p2, tag, &o->req[o->nreq++]));
        else if (r + p2 < n) TRY(be->isend(&c->be, COMM_GROUP_WORLD_P2P, o->buf, bytes, r + p2, tag, &o->req[o->nreq++]));
    }
    return STATUS_OK;
}

static void rd_complete_step(comm *c, comm_op *o)
{
    int n = c->rt->size, r = c->rt->rank, p2 = pow2_floor(n), steps = 0;
    while ((1 << steps) < p2) steps++;
    bool received = (o->phase == 0 && r < p2 && r + p2 < n) || (o->phase == 1 && r < p2);
    if (received) reduce_apply(o->buf, o->scratch, o->count, o->dtype, o->op);
    if (o->phase == 1 && r < p2 && ++o->step < steps) return;
    o->step = 0;
    o->phase++;
}

/* Rabenseifner's allreduce for a power-of-two world (mid and large messages):
 * reduce-scatter by recursive halving, then allgather by recursive doubling;
 * 2 log2 n steps moving 2(n-1)/n of the buffer, like the ring in fewer steps.
 * The segment a rank holds at level l follows from the first l bits of its rank. */
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

static status rab_post(comm *c, comm_op *o)
{
    int r = c->rt->rank, p2 = c->rt->size, L = log2_int(p2), tag = (int)(o->seq % 32768);
    int level = o->phase == 0 ? o->step : L - o->step;
    int peer = r ^ (o->phase == 0 ? p2 >> (level + 1) : p2 >> level);
    size_t esz = reduce_dtype_size(o->dtype), lo, hi, plo, phi;
    char *base = o->buf;
    const comm_backend_ops *be = c->be.ops;
    if (o->phase == 0) {  /* send the half the partner keeps, receive its copy of mine */
        rab_segment(o->count, r, p2, level + 1, &lo, &hi);
        rab_segment(o->count, peer, p2, level + 1, &plo, &phi);
        TRY(be->irecv(&c->be, COMM_GROUP_WORLD_P2P, o->scratch, (hi - lo) * esz, peer, tag, &o->req[0]));
    } else {              /* send my reduced segment, receive the partner's into place */
        rab_segment(o->count, r, p2, level, &lo, &hi);
        rab_segment(o->count, peer, p2, level, &plo, &phi);
        TRY(be->irecv(&c->be, COMM_GROUP_WORLD_P2P, base + plo * esz, (phi - plo) * esz, peer, tag, &o->req[0]));
        plo = lo;
        phi = hi;
    }
    TRY(be->isend(&c->be, COMM_GROUP_WORLD_P2P, base + plo * esz, (phi - plo) * esz, peer, tag, &o->req[1]));
    o->nreq = 2;
    return STATUS_OK;
}

static void rab_complete_step(comm *c, comm_op *o)
{
    int r = c->rt->rank, p2 = c->rt->size, L = log2_int(p2);
    if (o->phase == 0) {
        size_t lo, hi;
        rab_segment(o->count, r, p2, o->step + 1, &lo, &hi);
        reduce_apply((char *)o->buf + lo * reduce_dtype_size(o->dtype), o->scratch, hi - lo, o->dtype, o->op);
    }
    if (++o->step == L) { o->step = 0; o->phase++; }
}

/* Ring allreduce over the world: n-1 reduce-scatter steps, n-1 allgather steps.
 * In reduce-scatter step s rank r sends chunk (r-s) and receives chunk (r-s-1),
 * which it adds to its own copy; afterwards it holds the sum of chunk (r+1). */
static status flat_post(comm *c, comm_op *o)
{
    int n = c->rt->size, r = c->rt->rank;
    int right = (r + 1) % n, left = (r + n - 1) % n;
    size_t esz = reduce_dtype_size(o->dtype), soff, slen, roff, rlen;
    int send_chunk = o->phase == 0 ? (r - o->step + 2 * n) % n : (r - o->step + 1 + 2 * n) % n;
    int recv_chunk = (send_chunk + n - 1) % n;
    split_even(o->count, n, send_chunk, &soff, &slen);
    split_even(o->count, n, recv_chunk, &roff, &rlen);
    char *base = o->buf;
    void *rbuf = o->phase == 0 ? o->scratch : base + roff * esz;
    int tag = (int)(o->seq % 32768);
    TRY(c->be.ops->irecv(&c->be, COMM_GROUP_WORLD_P2P, rbuf, rlen * esz, left, tag, &o->req[0]));
    TRY(c->be.ops->isend(&c->be, COMM_GROUP_WORLD_P2P, base + soff * esz, slen * esz, right, tag, &o->req[1]));
    o->nreq = 2;
    return STATUS_OK;
}

static void flat_complete_step(comm *c, comm_op *o)
{
    int n = c->rt->size, r = c->rt->rank;
    if (o->phase == 0) {
        size_t esz = reduce_dtype_size(o->dtype), roff, rlen;
        int recv_chunk = (r - o->step - 1 + 2 * n) % n;
        split_even(o->count, n, recv_chunk, &roff, &rlen);
        reduce_apply((char *)o->buf + roff * esz, o->scratch, rlen, o->dtype, o->op);
    }
    if (++o->step == n - 1) { o->step = 0; o->phase++; }
}

static status hier_post(comm *c, comm_op *o)
{
    const runtime *rt = c->rt;
    int L = rt->max_local_size, Ls = rt->local_size;
    int counts[COMM_OP_MAXREQ], displs[COMM_OP_MAXREQ], j0, j1;
    size_t esz = reduce_dtype_size(o->dtype), off, len, my_off = 0;
    for (int lr = 0; lr < Ls; lr++) {
        size_t a, alen, b, blen;
        hier_owned(rt, lr, &j0, &j1);
        split_even(o->count, L, j0, &a, &alen);
        split_even(o->count, L, j1 - 1, &b, &blen);
        counts[lr] = (int)(b + blen - a);
        displs[lr] = (int)a;
        if (lr == rt->local_rank) my_off = a;
    }
    o->nreq = 0;
    if (o->phase == 0) {
        TRY(c->be.ops->ireduce_scatter(&c->be, COMM_GROUP_NODE_RS, o->buf, o->scratch, counts, o->dtype,
                                       o->op, &o->req[o->nreq++]));
    } else if (o->phase == 1) {
        if (rt->nnodes == 1) return STATUS_OK;
        hier_owned(rt, rt->local_rank, &j0, &j1);
        for (int j = j0; j < j1; j++) {
            split_even(o->count, L, j, &off, &len);
            TRY(c->be.ops->iallreduce(&c->be, COMM_GROUP_CHUNK0 + j, (char *)o->scratch + (off - my_off) * esz,
                                      len, o->dtype, o->op, &o->req[o->nreq++]));
        }
    } else {
        TRY(c->be.ops->iallgatherv(&c->be, COMM_GROUP_NODE_AG, o->scratch, counts[rt->local_rank], o->buf,
                                   counts, displs, o->dtype, &o->req[o->nreq++]));
    }
    return STATUS_OK;
}

/* Ordering class of a phase: ops post collectives of one class in ticket order. */
static int phase_class(comm_algo algo, int phase)
{
    if (algo == COMM_ALGO_MPI) return 0;
    if (algo == COMM_ALGO_HIER) return 1 + phase;
    return -1; /* ring steps are matched by tag, not order */
}

static int algo_phases(comm_algo algo)
{
    return algo == COMM_ALGO_HIER ? 3 : algo == COMM_ALGO_FLAT ? 2 : 1;
}

static int op_phases(const comm_op *o)
{
    return o->algo == COMM_ALGO_FLAT && o->sub == FLAT_RD ? 3 : algo_phases(o->algo);
}

/* Posts the current phase/step if allowed, and tests what is in flight. */
static status op_progress(comm *c, comm_op *o, bool *done)
{
    for (;;) {
        if (o->phase >= op_phases(o)) { *done = true; return STATUS_OK; }
        if (!o->phase_started) {
            /* Ops enter a collective phase in start order (ring steps use tags instead). */
            int cls = phase_class(o->algo, o->phase);
            if (cls >= 0 && c->ticket_next[cls] != o->ticket[o->phase]) {
                CHECK(c->ticket_next[cls] < o->ticket[o->phase], "phase tickets out of order");
                *done = false;
                return STATUS_OK;
            }
            if (o->algo == COMM_ALGO_MPI) {
                TRY(c->be.ops->iallreduce(&c->be, COMM_GROUP_WORLD_COLL, o->buf, o->count, o->dtype, o->op,
                                          &o->req[0]));
                o->nreq = 1;
            } else if (o->algo == COMM_ALGO_FLAT) {
                TRY(o->sub == FLAT_RD ? rd_post(c, o) : o->sub == FLAT_RAB ? rab_post(c, o) : flat_post(c, o));
            }
            else TRY(hier_post(c, o));
            if (cls >= 0) c->ticket_next[cls]++;
            o->phase_started = 1;
        }
        while (o->nreq > 0) {
            bool fin = false;
            TRY(c->be.ops->test(&c->be, &o->req[o->nreq - 1], &fin));
            if (!fin) { *done = false; return STATUS_OK; }
            o->nreq--;
        }
        o->phase_started = 0;
        if (o->algo == COMM_ALGO_FLAT && o->sub == FLAT_RD) rd_complete_step(c, o);
        else if (o->algo == COMM_ALGO_FLAT && o->sub == FLAT_RAB) rab_complete_step(c, o);
        else if (o->algo == COMM_ALGO_FLAT) flat_complete_step(c, o);
        else o->phase++;
    }
}

/* Progresses every op in flight up to `o` in start order: a later op may wait for
 * an earlier one to enter a phase, so testing only `o` could stall. */
status comm_test(comm *c, comm_op *o, bool *done)
{
    CHECK(o->seq != 0, "testing a comm_op that was never started");
    /* An op may already have completed while a later op was being tested. */
    for (int i = 0; i < c->ninflight;) {
        comm_op *p = c->inflight[i];
        if (p->seq > o->seq) break;
        bool fin = false;
        TRY(op_progress(c, p, &fin));
        if (fin) {
            p->active = 0;
            memmove(&c->inflight[i], &c->inflight[i + 1], (size_t)(c->ninflight - i - 1) * sizeof c->inflight[0]);
            c->ninflight--;
        } else {
            i++;
        }
    }
    *done = !o->active;
    if (*done) return STATUS_OK;
    if (o->deadline > 0) {
        double now = MPI_Wtime();
        comm_diag_service(c, o->seq, false);
        if (now > o->deadline) return comm_diag_timeout(c, o);
    }
    return STATUS_OK;
}

status comm_wait(comm *c, comm_op *o)
{
    bool done = false;
    while (!done) TRY(comm_test(c, o, &done));
    return STATUS_OK;
}

status comm_allreduce(comm *c, void *buf, size_t count, reduce_dtype dt, reduce_op op, comm_algo algo)
{
    TRY(comm_allreduce_start(c, &c->blocking, buf, count, dt, op, algo));
    return comm_wait(c, &c->blocking);
}

void comm_options_from_config(const config *cfg, comm_options *opt)
{
    comm_algo_parse(config_str(cfg, "comm.algo"), &opt->algo);
    opt->timeout_s = config_float(cfg, "comm.timeout");
    opt->tune_file = config_str(cfg, "comm.tune_file");
}
