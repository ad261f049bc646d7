/* comm — the public API: op start, progress, deadlines; see comm.h.
 *
 * Every algorithm is a small state machine over non-blocking steps, advanced by
 * comm_test (flat: comm_flat.c, hier: comm_hier.c, mpi: one MPI_Iallreduce).
 * Ops may overlap. Two rules keep every rank's messages matched: point-to-point
 * steps carry the op's sequence number as tag, and algorithms that use a
 * collective or a shared resource (mpi: a collective on one communicator; hier:
 * the node segment) run in start order within their ordering class (tickets).
 * Ops in flight form a list in start order; there is no limit on their number.
 * Every backend runs its ops through the op_* entries of its vtable: the mpi
 * backend's are the host algorithms here (comm_host_*), nccl's its device pipeline,
 * one op at a time in start order (ordering class COMM_CLASS_NCCL). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "base/config.h"
#include "base/watchdog.h"

static const char *algo_names[COMM_ALGO_COUNT] = { "auto", "mpi", "flat", "hier", "ring" };
static const char *backend_names[COMM_BACKEND_COUNT] = { "mpi", "nccl" };

const char *comm_algo_name(comm_algo algo)
{
    if (algo == COMM_ALGO_NCCL) return "nccl";
    return algo >= 0 && algo < COMM_ALGO_COUNT ? algo_names[algo] : "?";
}

const char *comm_backend_name(comm_backend_kind b)
{
    return b >= 0 && b < COMM_BACKEND_COUNT ? backend_names[b] : "?";
}

bool comm_backend_parse(const char *name, comm_backend_kind *b)
{
    for (int i = 0; i < COMM_BACKEND_COUNT; i++)
        if (!strcmp(name, backend_names[i])) { *b = (comm_backend_kind)i; return true; }
    return false;
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

bool comm_on_device(const comm *c)
{
    return c->opt.backend == COMM_BACKEND_NCCL;
}

const char *comm_late_ranks(const comm *c)
{
    return c->diag_late;
}

status comm_set_stream(comm *c, cuda_stream s)
{
    return c->be.ops->set_stream(c, s);
}

void comm_options_from_config(const config *cfg, comm_options *opt)
{
    *opt = (comm_options){ 0 };
    comm_backend_parse(config_str(cfg, "comm.backend"), &opt->backend);
    comm_algo_parse(config_str(cfg, "comm.algo"), &opt->algo);
    opt->timeout_s = config_float(cfg, "comm.timeout");
    opt->tune_file = config_str(cfg, "comm.tune_file");
    opt->segment_bytes = config_size(cfg, "comm.segment_bytes");
}

/* The nccl backend: no node segment, no tuning table (one algorithm); the algorithm
 * named in the options must be one it runs, so a wrong comm.algo fails here, once,
 * on every rank, instead of at each allreduce. */
static status nccl_init(comm **out, comm *c, const char *tune_file)
{
    if (c->opt.algo != COMM_ALGO_AUTO && c->opt.algo != COMM_ALGO_HIER) {
        log_error0("comm.algo = %s: the nccl backend runs one hierarchical algorithm on device buffers",
                   comm_algo_name(c->opt.algo));
        log_error0("HINT: set comm.algo = auto (or hier) with comm.backend = nccl, or use comm.backend = mpi");
        free(c);
        return STATUS_USAGE;
    }
    if (tune_file && tune_file[0])
        log_info0("comm: the nccl backend has one algorithm; comm.tune_file is not read");
    MPI_CHECK(MPI_Comm_dup(c->rt->world, &c->diag));
    status st = comm_nccl_backend_init(c);
    if (st != STATUS_OK) {  /* the backend freed its own part */
        MPI_Comm_free(&c->diag);
        free(c);
        return st;
    }
    *out = c;
    return STATUS_OK;
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
    CHECK(opt->backend >= 0 && opt->backend < COMM_BACKEND_COUNT, "comm_options.backend out of range");
    if (opt->backend == COMM_BACKEND_NCCL) return nccl_init(out, c, opt->tune_file);
    status st = comm_mpi_backend_init(&c->be, rt);
    if (st != STATUS_OK) { free(c); return st; }
    MPI_CHECK(MPI_Comm_dup(rt->world, &c->diag));
    st = comm_hier_init(c);
    if (st == STATUS_OK && opt->tune_file && opt->tune_file[0]) st = comm_tune_load(c, opt->tune_file);
    if (st != STATUS_OK) { comm_free(c); return st; }
    *out = c;
    return STATUS_OK;
}

status comm_group_init(comm_group **out, MPI_Comm members, const comm_group_options *o)
{
    *out = NULL;
    if (members == MPI_COMM_NULL) return STATUS_OK;
    comm_group *g = calloc(1, sizeof *g);
    if (!g) return STATUS_NOMEM;
    g->members = members;
    g->opt = *o;
    MPI_Comm_rank(members, &g->rank);
    MPI_Comm_size(members, &g->size);
    status st = o->backend == COMM_BACKEND_NCCL ? comm_nccl_group_backend_init(g)
                                                : comm_mpi_group_backend_init(&g->be, members);
    if (st != STATUS_OK) {
        free(g);
        return st;
    }
    *out = g;
    return STATUS_OK;
}

void comm_group_free(comm_group *g)
{
    if (!g) return;
    if (g->be.ops) g->be.ops->free(&g->be);
    free(g);
}

void comm_free(comm *c)
{
    if (!c) return;
    comm_op_free(&c->blocking);
    if (c->failed || c->head) {  /* peers may never arrive: skip every collective free */
        if (c->be.ops) c->be.ops->abandon(&c->be);
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

/* The auto table's row nearest to `bytes` on a log scale; NULL without a table. */
static const comm_tune_entry *tune_nearest(const comm *c, size_t bytes)
{
    if (c->rt->size == 1 || c->ntune == 0) return NULL;
    int best = 0;
    double best_d = 1e300;
    for (int i = 0; i < c->ntune; i++) {
        double a = (double)(bytes ? bytes : 1), b = (double)(c->tune[i].bytes ? c->tune[i].bytes : 1);
        double d = a > b ? a / b : b / a;
        if (d < best_d) { best_d = d; best = i; }
    }
    return &c->tune[best];
}

comm_algo comm_auto_choice(const comm *c, size_t bytes)
{
    if (comm_on_device(c)) return COMM_ALGO_HIER;
    const comm_tune_entry *e = tune_nearest(c, bytes);
    return e ? e->algo : COMM_ALGO_MPI;
}

comm_algo comm_auto_choice_start(const comm *c, size_t bytes)
{
    if (comm_on_device(c)) return COMM_ALGO_HIER;
    const comm_tune_entry *e = tune_nearest(c, bytes);
    return e ? e->algo_start : COMM_ALGO_MPI;
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

void comm_phase_mark(comm_op *o, int kind)
{
    comm_phase *last = o->nphases > 0 ? &o->phases[o->nphases - 1] : NULL;
    if (o->phase_open ? last->kind == (comm_phase_kind)kind : kind < 0) return;  /* nothing changes */
    double t = MPI_Wtime();
    if (o->phase_open) last->t1 = t;
    o->phase_open = false;
    if (kind < 0) return;
    if (o->nphases == COMM_OP_MAX_PHASES) {
        o->phases_lost++;
        return;
    }
    o->phases[o->nphases++] = (comm_phase){ .t0 = t, .t1 = t, .kind = (comm_phase_kind)kind };
    o->phase_open = true;
}

const comm_phase *comm_op_phases(const comm_op *o, int *n, int *lost)
{
    if (n) *n = o->nphases;
    if (lost) *lost = o->phases_lost;
    return o->phases;
}

const char *comm_phase_name(comm_phase_kind k)
{
    static const char *const names[COMM_PHASE_COUNT] = { "flat", "intra_reduce_scatter", "inter_allreduce",
                                                         "intra_allgather" };
    return k >= 0 && k < COMM_PHASE_COUNT ? names[k] : "?";
}

void comm_split_even(size_t count, int n, int i, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, ui = (size_t)i;
    *off = ui * base + (ui < rem ? ui : rem);
    *len = base + (ui < rem ? 1 : 0);
}

/* An allreduce's bus bytes: 2(n-1)/n of the buffer (comm.h). */
static uint64_t comm_bus_bytes(const comm *c, size_t bytes)
{
    return (uint64_t)(2.0 * (double)bytes * (c->rt->size - 1) / c->rt->size);
}

/* mpi and flat split messages above segment_bytes (MPI counts are int). */
static void op_segment(const comm *c, comm_op *o)
{
    size_t max = c->opt.segment_bytes / reduce_dtype_size(o->dtype);
    max = max ? max : 1;
    o->seg_len = o->count - o->seg_off < max ? o->count - o->seg_off : max;
}

status comm_host_resolve(comm *c, comm_algo *algo, size_t bytes, bool blocking)
{
    if (*algo == COMM_ALGO_AUTO) *algo = c->opt.algo;
    if (*algo == COMM_ALGO_AUTO) *algo = blocking ? comm_auto_choice(c, bytes) : comm_auto_choice_start(c, bytes);
    if (c->rt->size == 1) *algo = COMM_ALGO_MPI;
    return STATUS_OK;
}

status comm_host_set_stream(comm *c, cuda_stream s)
{
    (void)c, (void)s;  /* host buffers: the caller has finished writing them */
    return STATUS_OK;
}

status comm_host_op_start(comm *c, comm_op *o)
{
    if (o->algo == COMM_ALGO_FLAT || o->algo == COMM_ALGO_RING) {
        bool ring = o->algo == COMM_ALGO_RING;
        TRY(comm_op_scratch(o, comm_flat_scratch_bytes(c, COMM_GROUP_WORLD_P2P, o->seg_len, o->dtype, ring)));
        comm_flat_begin(c, &o->flat, COMM_GROUP_WORLD_P2P, o->buf, o->seg_len, o->dtype, o->scratch, o->seq, ring);
    } else if (o->algo == COMM_ALGO_HIER) {
        TRY(comm_op_scratch(o, comm_hier_scratch_bytes(c, o->count, o->dtype)));
        o->ticket = c->ticket_issued[COMM_CLASS_HIER]++;
    } else {
        o->ticket = c->ticket_issued[COMM_CLASS_MPI]++;
    }
    return STATUS_OK;
}

static status op_start(comm *c, comm_op *o, void *buf, size_t count, reduce_dtype dt, reduce_op op, double scale,
                       comm_algo algo)
{
    CHECK(!o->active, "starting a comm_op that is still in flight");
    size_t esz = reduce_dtype_size(dt);
    TRY(c->be.ops->op_resolve(c, &algo, count * esz, false));
    *o = (comm_op){ .algo = algo, .seq = ++c->seq, .buf = buf, .count = count, .dtype = dt, .op = op,
                    .scale = scale, .scratch = o->scratch, .scratch_bytes = o->scratch_bytes, .t_start = MPI_Wtime() };
    o->deadline = c->opt.timeout_s > 0 ? o->t_start + c->opt.timeout_s : 0;
    if (count == 0) return STATUS_OK;  /* nothing to exchange; the op is complete */
    c->bytes += comm_bus_bytes(c, count * esz);
    op_segment(c, o);
    TRY(c->be.ops->op_start(c, o));
    if (c->tail) c->tail->next = o;
    else c->head = o;
    c->tail = o;
    o->active = 1;
    return STATUS_OK;
}

uint64_t comm_bytes(const comm *c)
{
    return c->bytes;
}

status comm_allreduce_start(comm *c, comm_op *o, void *buf, size_t count, reduce_dtype dt,
                            reduce_op op, comm_algo algo)
{
    return op_start(c, o, buf, count, dt, op, 1.0, algo);
}

status comm_allreduce_start_scaled(comm *c, comm_op *o, void *buf, size_t count, reduce_dtype dt, double scale,
                                   comm_algo algo)
{
    CHECK(isfinite(scale), "the allreduce scale must be finite");
    if ((dt == REDUCE_DTYPE_I32 || dt == REDUCE_DTYPE_I64) && scale != 1.0)
        die("comm_allreduce_start_scaled", "integer buffers cannot be scaled", "pass scale = 1 for integer dtypes");
    return op_start(c, o, buf, count, dt, REDUCE_OP_SUM, scale, algo);
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
            comm_phase_mark(o, COMM_PHASE_FLAT);  /* its turn came: the first segment, or continued */
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
    comm_phase_mark(o, COMM_PHASE_FLAT);  /* no turn to wait for: from the first progress */
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

/* mpi: the sum, then scale in double with one rounding (bucket.c's formula). */
static void op_scale_host(comm_op *o)
{
    if (o->dtype == REDUCE_DTYPE_F32) {
        float *g = o->buf;
        double s = o->scale;
        for (size_t i = 0; i < o->count; i++) g[i] = (float)(g[i] * s);
    } else {
        double *g = o->buf, s = o->scale;
        for (size_t i = 0; i < o->count; i++) g[i] *= s;
    }
}

/* The host algorithms; a scaled op is scaled by the host once its sum is complete. */
status comm_host_op_progress(comm *c, comm_op *o, bool *done)
{
    if (o->algo == COMM_ALGO_FLAT || o->algo == COMM_ALGO_RING) TRY(flat_segments_progress(c, o, done));
    else if (o->algo == COMM_ALGO_HIER) TRY(comm_hier_progress(c, o, done));
    else TRY(mpi_progress(c, o, done));
    if (*done && o->scale != 1.0) op_scale_host(o);
    return STATUS_OK;
}

/* One pass over the ops in flight, oldest first, up to `last` (NULL: all). A later
 * op may wait for an earlier one's ticket, so every earlier op is advanced too. */
static status progress_until(comm *c, const comm_op *last)
{
    comm_op *prev = NULL, *p = c->head;
    while (p) {
        comm_op *next = p->next;
        bool fin = false;
        status st = c->be.ops->op_progress(c, p, &fin);
        if (st != STATUS_OK) {
            c->failed = true;
            return st;
        }
        if (fin) {  /* unlink */
            comm_phase_mark(p, -1);
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
    return c->be.ops->op_timeout(c, o);
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

/* comm_allreduce's fast path: OpenMPI's blocking MPI_Allreduce for a message of up
 * to COMM_BLOCKING_MAX_BYTES (16 MiB) whose algorithm (named, or auto's choice) is mpi.
 *
 * Why: the mpi algorithm of the non-blocking API is MPI_Iallreduce, which OpenMPI 4.1
 * runs in coll/libnbc, a schedule built per call and advanced by polling; measured
 * 2-3x slower than its blocking MPI_Allreduce (coll/tuned) at 8 B - 512 KiB on 2
 * ranks (0.8 against 0.3 us at 8 B). A caller that waits right away gains nothing
 * from a non-blocking op, so the blocking entry makes MPI's blocking call.
 *
 * What keeps it safe:
 *  - the deadline: a blocking call cannot be polled, so it runs only where the
 *    runtime's watchdog guards it with comm.timeout (past it the watchdog ends the
 *    job, exit 1, naming the ranks that made no progress, as for every blocking call
 *    outside comm) or where there is no deadline (timeout 0). A comm with a deadline
 *    and no watchdog keeps the polled MPI_Iallreduce, with comm's own diagnosis.
 *  - up to 16 MiB only. The watchdog bounds a blocking call of any size, but a
 *    blocking call is the exception to comm's own deadlines, so it is kept to the
 *    sizes where OpenMPI's blocking call can be the fastest: on 2 ranks and on
 *    2 x 2 (Zen 4, OpenMPI 4.1, vader with CMA) it ties hier up to 16 MiB and is
 *    at most half as fast from 32 MiB on. Larger messages stay polled (mpi:
 *    MPI_Iallreduce), under comm's deadline; auto does not pick mpi there.
 *  - ops in flight complete first, polled under their deadlines: a peer may wait in
 *    an op that needs this rank's code to run (hier's node barriers, flat's next
 *    step), which a rank inside MPI_Allreduce never runs. Every rank completes the
 *    same earlier ops before it blocks, so this adds no deadlock; it only ends the
 *    overlap of those ops with the caller (who is waiting anyway).
 *  - every rank decides alike (size, algorithm, options and the watchdog, which
 *    exists on every rank or none): a blocking collective never meets a
 *    non-blocking one, and both run on the mpi group's communicator in call order.
 * comm_tune times mpi both ways, so auto compares the others against the call each
 * entry makes: this one for comm_allreduce, MPI_Iallreduce for started ops. */
static bool blocking_fast_path(const comm *c, size_t bytes, comm_algo algo)
{
    if (comm_on_device(c) || c->rt->size == 1 || bytes > COMM_BLOCKING_MAX_BYTES)
        return false;
    if (c->opt.timeout_s > 0 && !c->rt->wd) return false;
    return algo == COMM_ALGO_MPI;
}

status comm_allreduce(comm *c, void *buf, size_t count, reduce_dtype dt, reduce_op op, comm_algo algo)
{
    size_t bytes = count * reduce_dtype_size(dt);
    TRY(c->be.ops->op_resolve(c, &algo, bytes, true));  /* resolved once here, not again at start */
    if (count > 0 && blocking_fast_path(c, bytes, algo)) {
        while (c->head) TRY(comm_wait(c, c->head));
        c->seq++;  /* one sequence number per allreduce, as the polled path takes */
        c->bytes += comm_bus_bytes(c, bytes);
        watchdog_enter(c->rt->wd, "comm_allreduce: OpenMPI's blocking MPI_Allreduce", c->opt.timeout_s);
        status st = c->be.ops->allreduce(&c->be, COMM_GROUP_WORLD_COLL, buf, count, dt, op);
        watchdog_leave(c->rt->wd);
        return st;
    }
    TRY(comm_allreduce_start(c, &c->blocking, buf, count, dt, op, algo));
    return comm_wait(c, &c->blocking);
}
