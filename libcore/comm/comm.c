/* comm — the public API: op start, progress, deadlines; see comm.h.
 *
 * Every algorithm is a small state machine over non-blocking steps, advanced by
 * comm_test (flat: comm_flat.c, hier: comm_hier.c, mpi: one MPI_Iallreduce).
 * Ops may overlap. Two rules keep every rank's messages matched: point-to-point
 * steps carry the op's sequence number as tag, and algorithms that use a
 * collective or a shared resource (mpi: a collective on one communicator; hier:
 * the node segment) run in start order within their ordering class (tickets).
 * Ops in flight form a list in start order; there is no limit on their number. */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "base/config.h"

static const char *algo_names[COMM_ALGO_COUNT] = { "auto", "mpi", "flat", "hier", "ring" };

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

void comm_options_from_config(const config *cfg, comm_options *opt)
{
    comm_algo_parse(config_str(cfg, "comm.algo"), &opt->algo);
    opt->timeout_s = config_float(cfg, "comm.timeout");
    opt->tune_file = config_str(cfg, "comm.tune_file");
    opt->segment_bytes = config_size(cfg, "comm.segment_bytes");
}

status comm_init(comm **out, const runtime *rt, const comm_options *opt)
{
    comm *c = calloc(1, sizeof *c);
    if (!c) return STATUS_NOMEM;
    c->rt = rt;
    c->opt = *opt;
    c->opt.tune_file = NULL;
    if (c->opt.segment_bytes == 0 || c->opt.segment_bytes > COMM_SEGMENT_BYTES) c->opt.segment_bytes = COMM_SEGMENT_BYTES;
    c->shm_win = MPI_WIN_NULL;
    c->diag = MPI_COMM_NULL;
    status st = comm_mpi_backend_init(&c->be, rt);
    if (st != STATUS_OK) { free(c); return st; }
    MPI_CHECK(MPI_Comm_dup(rt->world, &c->diag));
    st = comm_hier_init(c);
    if (st == STATUS_OK && opt->tune_file && opt->tune_file[0]) st = comm_tune_load(c, opt->tune_file);
    if (st != STATUS_OK) { comm_free(c); return st; }
    *out = c;
    return STATUS_OK;
}

void comm_free(comm *c)
{
    if (!c) return;
    comm_op_free(&c->blocking);
    if (c->failed || c->head) {  /* peers may never arrive: skip every collective free */
        free(c);
        return;
    }
    comm_hier_free(c);
    c->be.ops->free(&c->be);
    if (c->diag != MPI_COMM_NULL) MPI_Comm_free(&c->diag);
    free(c);
}

void comm_op_free(comm_op *o)
{
    if (o->active) return;  /* after a failed wait MPI may still write into the scratch */
    free(o->scratch);
    o->scratch = NULL;
    o->scratch_bytes = 0;
}

comm_algo comm_auto_choice(const comm *c, size_t bytes)
{
    if (c->rt->size == 1 || c->ntune == 0) return COMM_ALGO_MPI;
    int best = 0;  /* nearest measured size on a log scale */
    double best_d = 1e300;
    for (int i = 0; i < c->ntune; i++) {
        double a = (double)(bytes ? bytes : 1), b = (double)(c->tune[i].bytes ? c->tune[i].bytes : 1);
        double d = a > b ? a / b : b / a;
        if (d < best_d) { best_d = d; best = i; }
    }
    return c->tune[best].algo;
}

status comm_op_scratch(comm_op *o, size_t bytes)
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

void comm_split_even(size_t count, int n, int i, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, ui = (size_t)i;
    *off = ui * base + (ui < rem ? ui : rem);
    *len = base + (ui < rem ? 1 : 0);
}

/* mpi and flat split messages above segment_bytes (MPI counts are int). */
static void op_segment(const comm *c, comm_op *o)
{
    size_t max = c->opt.segment_bytes / reduce_dtype_size(o->dtype);
    max = max ? max : 1;
    o->seg_len = o->count - o->seg_off < max ? o->count - o->seg_off : max;
}

status comm_allreduce_start(comm *c, comm_op *o, void *buf, size_t count, reduce_dtype dt,
                            reduce_op op, comm_algo algo)
{
    CHECK(!o->active, "starting a comm_op that is still in flight");
    size_t esz = reduce_dtype_size(dt);
    if (algo == COMM_ALGO_AUTO) algo = c->opt.algo;
    if (algo == COMM_ALGO_AUTO) algo = comm_auto_choice(c, count * esz);
    if (c->rt->size == 1) algo = COMM_ALGO_MPI;
    *o = (comm_op){ .algo = algo, .seq = ++c->seq, .buf = buf, .count = count, .dtype = dt, .op = op,
                    .scratch = o->scratch, .scratch_bytes = o->scratch_bytes, .t_start = MPI_Wtime() };
    o->deadline = c->opt.timeout_s > 0 ? o->t_start + c->opt.timeout_s : 0;
    if (count == 0) return STATUS_OK;  /* nothing to exchange; the op is complete */
    op_segment(c, o);
    if (algo == COMM_ALGO_FLAT || algo == COMM_ALGO_RING) {
        bool ring = algo == COMM_ALGO_RING;
        TRY(comm_op_scratch(o, comm_flat_scratch_bytes(c, COMM_GROUP_WORLD_P2P, o->seg_len, dt, ring)));
        comm_flat_begin(c, &o->flat, COMM_GROUP_WORLD_P2P, buf, o->seg_len, dt, o->scratch, o->seq, ring);
    } else if (algo == COMM_ALGO_HIER) {
        TRY(comm_op_scratch(o, comm_hier_scratch_bytes(c, count, dt)));
        o->ticket = c->ticket_issued[COMM_CLASS_HIER]++;
    } else {
        o->ticket = c->ticket_issued[COMM_CLASS_MPI]++;
    }
    if (c->tail) c->tail->next = o;
    else c->head = o;
    c->tail = o;
    o->active = 1;
    return STATUS_OK;
}

status comm_op_test_reqs(comm *c, comm_op *o, bool *done)
{
    *done = true;
    if (o->nreq == 0) return STATUS_OK;
    TRY(c->be.ops->testall(&c->be, o->req, o->nreq, done));
    if (*done) o->nreq = 0;
    return STATUS_OK;
}

/* mpi: one MPI_Iallreduce per segment. The op keeps its place in the MPI class
 * until its last segment is posted, so segments of overlapping ops never interleave. */
static status mpi_progress(comm *c, comm_op *o, bool *done)
{
    size_t esz = reduce_dtype_size(o->dtype);
    for (;;) {
        if (!o->posted) {
            *done = false;
            if (c->ticket_next[COMM_CLASS_MPI] != o->ticket) return STATUS_OK;
            o->nreq = 1;
            TRY(c->be.ops->iallreduce(&c->be, COMM_GROUP_WORLD_COLL, (char *)o->buf + o->seg_off * esz, o->seg_len,
                                      o->dtype, o->op, &o->req[0]));
            if (o->seg_off + o->seg_len == o->count) c->ticket_next[COMM_CLASS_MPI]++;
            o->posted = 1;
        }
        TRY(comm_op_test_reqs(c, o, done));
        if (!*done) return STATUS_OK;
        o->seg_off += o->seg_len;
        if (o->seg_off == o->count) return STATUS_OK;
        op_segment(c, o);
        o->posted = 0;
    }
}

static status flat_segments_progress(comm *c, comm_op *o, bool *done)
{
    for (;;) {
        TRY(comm_flat_progress(c, o, &o->flat, done));
        if (!*done) return STATUS_OK;
        o->seg_off += o->seg_len;
        if (o->seg_off == o->count) return STATUS_OK;
        op_segment(c, o);
        comm_flat_begin(c, &o->flat, COMM_GROUP_WORLD_P2P, (char *)o->buf + o->seg_off * reduce_dtype_size(o->dtype),
                        o->seg_len, o->dtype, o->scratch, o->seq, o->algo == COMM_ALGO_RING);
    }
}

static status op_progress(comm *c, comm_op *o, bool *done)
{
    if (o->algo == COMM_ALGO_FLAT || o->algo == COMM_ALGO_RING) return flat_segments_progress(c, o, done);
    if (o->algo == COMM_ALGO_HIER) return comm_hier_progress(c, o, done);
    return mpi_progress(c, o, done);
}

/* One pass over the ops in flight, oldest first, up to `last` (NULL: all). A later
 * op may wait for an earlier one's ticket, so every earlier op is advanced too. */
static status progress_until(comm *c, const comm_op *last)
{
    comm_op *prev = NULL, *p = c->head;
    while (p) {
        comm_op *next = p->next;
        bool fin = false;
        status st = op_progress(c, p, &fin);
        if (st != STATUS_OK) {
            c->failed = true;
            return st;
        }
        if (fin) {  /* unlink */
            p->active = 0;
            p->next = NULL;
            if (prev) prev->next = next;
            else c->head = next;
            if (c->tail == p) c->tail = prev;
        } else {
            prev = p;
        }
        if (p == last) break;
        p = next;
    }
    return STATUS_OK;
}

static status check_deadline(comm *c, const comm_op *o)
{
    if (o->deadline <= 0) return STATUS_OK;
    comm_diag_service(c, o->seq, false);
    if (MPI_Wtime() <= o->deadline) return STATUS_OK;
    c->failed = true;
    return comm_diag_timeout(c, o);
}

/* An op may already have completed while another op was being tested. */
status comm_test(comm *c, comm_op *o, bool *done)
{
    CHECK(o->seq != 0, "testing a comm_op that was never started");
    *done = !o->active;
    if (*done) return STATUS_OK;
    TRY(progress_until(c, o));
    *done = !o->active;
    return *done ? STATUS_OK : check_deadline(c, o);
}

status comm_progress(comm *c)
{
    TRY(progress_until(c, NULL));
    return c->head ? check_deadline(c, c->head) : STATUS_OK;
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
