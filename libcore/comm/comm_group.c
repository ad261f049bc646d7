/* comm_group — vector payloads on a group of ranks (comm.h): start, test and wait of
 * allreduce, reduce-scatter, all-gather, all-to-all and point-to-point exchanges, each
 * one primitive of the group's backend (comm_impl.h), every wait bounded by the
 * group's deadline.
 *
 * The one design decision: a group is a backend instance of its own over the
 * members, not a view of the gradient path's comm. The gradient path's algorithms
 * (flat, hier, ring, nccl's pipeline) are for one large in-place sum; the payloads
 * here are many shapes on many groups (node, peers, tp, pp, dp), so each is handed to
 * the backend's own primitive for it — MPI's collective, NCCL's — and what this file
 * adds is the deadline, the report of a missed one, and the bytes counted.
 * (comm_group_init and _free are in comm.c, beside comm_init: code that only runs ops
 * on a group it was handed, such as a model's tensor-parallel sums, then links no
 * backend's library.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"
#include "ctl.h"

#define G COMM_GROUP_WORLD_COLL  /* every primitive of a group runs on its members */

int comm_group_rank(const comm_group *g)
{
    return g->rank;
}

int comm_group_size(const comm_group *g)
{
    return g->size;
}

void comm_group_set_timeout(comm_group *g, double timeout_s)
{
    g->opt.timeout_s = timeout_s;
}

uint64_t comm_group_bytes(const comm_group *g)
{
    return g->bytes;
}

/* The bus share of a collective over all members' `bytes`: (n-1)/n of it. */
static uint64_t bus(const comm_group *g, double bytes)
{
    return (uint64_t)(bytes * (g->size - 1) / g->size);
}

static void vop_begin(comm_group *g, comm_vop *v, const char *what)
{
    CHECK(!v->active, "starting a comm_vop that is still in flight");
    *v = (comm_vop){ .active = 1, .what = what };
    v->deadline = g->opt.timeout_s > 0 ? MPI_Wtime() + g->opt.timeout_s : 0;
}

/* A primitive that failed to start leaves nothing in flight. */
static status vop_started(comm_vop *v, status st)
{
    if (st != STATUS_OK) v->active = 0;
    return st;
}

static size_t sum_counts(const comm_group *g, const int *counts)
{
    size_t n = 0;
    for (int r = 0; r < g->size; r++) n += (size_t)counts[r];
    return n;
}

status comm_group_allreduce_start(comm_group *g, comm_vop *v, void *buf, size_t count, reduce_dtype dt,
                                  reduce_op op)
{
    vop_begin(g, v, "allreduce");
    g->bytes += 2 * bus(g, (double)(count * reduce_dtype_size(dt)));
    if (count == 0 || g->size == 1) return vop_started(v, STATUS_OK);
    v->nreq = 1;
    return vop_started(v, g->be.ops->iallreduce(&g->be, G, buf, count, dt, op, &v->req[0]));
}

status comm_group_reduce_scatter_start(comm_group *g, comm_vop *v, const void *send, void *recv,
                                       const int *counts, reduce_dtype dt, reduce_op op)
{
    vop_begin(g, v, "reduce-scatter");
    g->bytes += bus(g, (double)(sum_counts(g, counts) * reduce_dtype_size(dt)));
    v->nreq = 1;
    return vop_started(v, g->be.ops->ireduce_scatter(&g->be, G, send, recv, counts, dt, op, &v->req[0]));
}

status comm_group_allgatherv_start(comm_group *g, comm_vop *v, const void *send, void *recv, const int *counts,
                                   const int *displs, size_t esz)
{
    vop_begin(g, v, "allgatherv");
    g->bytes += bus(g, (double)(sum_counts(g, counts) * esz));
    v->nreq = 1;
    return vop_started(v, g->be.ops->iallgatherv(&g->be, G, send, recv, counts, displs, esz, &v->req[0]));
}

status comm_group_alltoallv_start(comm_group *g, comm_vop *v, const void *send, const int *scounts,
                                  const int *sdispls, void *recv, const int *rcounts, const int *rdispls, size_t esz)
{
    vop_begin(g, v, "alltoallv");
    g->bytes += (sum_counts(g, scounts) - (size_t)scounts[g->rank]) * esz;
    v->nreq = 1;
    return vop_started(v, g->be.ops->ialltoallv(&g->be, G, send, scounts, sdispls, recv, rcounts, rdispls, esz,
                                                &v->req[0]));
}

status comm_group_sendrecv_start(comm_group *g, comm_vop *v, const void *send, size_t send_bytes, int dest,
                                 int send_tag, void *recv, size_t recv_bytes, int source, int recv_tag)
{
    vop_begin(g, v, dest >= 0 && source >= 0 ? "send and receive" : dest >= 0 ? "send" : "receive");
    if (dest >= 0) g->bytes += send_bytes;
    v->nreq = 2;
    return vop_started(v, g->be.ops->isendrecv(&g->be, COMM_GROUP_WORLD_P2P, send, send_bytes, dest, send_tag, recv,
                                               recv_bytes, source, recv_tag, v->req));
}

status comm_group_test(comm_group *g, comm_vop *v, bool *done)
{
    *done = !v->active;
    if (*done) return STATUS_OK;
    if (v->nreq > 0) TRY(g->be.ops->testall(&g->be, v->req, v->nreq, done));
    else *done = true;
    if (*done) v->active = 0, v->nreq = 0;
    return STATUS_OK;
}

/* Polls until done or past the deadline, as the control plane's calls do (ctl.c): a
 * short sleep between tests once the wait is long, a stopped process's gap not
 * counted against the peers, and the wait shown in the watchdog's beacon. */
status comm_group_wait(comm_group *g, comm_vop *v)
{
    if (!v->active) return STATUS_OK;
    char op[96];
    snprintf(op, sizeof op, "%s on %s", v->what, g->opt.name ? g->opt.name : "a group");
    if (g->opt.wd) watchdog_enter(g->opt.wd, op, g->opt.timeout_s > 0 ? g->opt.timeout_s + 2 : 0);
    double t0 = MPI_Wtime(), prev = t0;
    status st = STATUS_OK;
    for (long polls = 0;; polls++) {
        bool done = false;
        st = comm_group_test(g, v, &done);
        if (st != STATUS_OK || done) break;
        double now = MPI_Wtime();
        if (v->deadline > 0 && now - prev > 1) v->deadline += now - prev;  /* this process was stopped */
        prev = now;
        if (v->deadline > 0 && now > v->deadline) {
            st = STATUS_TIMEOUT;  /* the requests stay posted: the backend may still write, the job is ending */
            break;
        }
        if (polls > 1000 && now - t0 > 0.01) {
            struct timespec ts = { 0, 50000 };  /* 50 us */
            nanosleep(&ts, NULL);
        }
    }
    if (g->opt.wd) watchdog_leave(g->opt.wd);
    if (st == STATUS_TIMEOUT)
        comm_ctl_report_timeout(comm_ctl_watched(comm_ctl_named(g->members, g->opt.timeout_s, g->opt.name),
                                                 g->opt.wd), v->what);
    return st;
}

status comm_group_allreduce(comm_group *g, void *buf, size_t count, reduce_dtype dt, reduce_op op)
{
    comm_vop v = { 0 };
    TRY(comm_group_allreduce_start(g, &v, buf, count, dt, op));
    return comm_group_wait(g, &v);
}

status comm_group_reduce_scatter(comm_group *g, const void *send, void *recv, const int *counts, reduce_dtype dt,
                                 reduce_op op)
{
    comm_vop v = { 0 };
    TRY(comm_group_reduce_scatter_start(g, &v, send, recv, counts, dt, op));
    return comm_group_wait(g, &v);
}

status comm_group_allgatherv(comm_group *g, const void *send, void *recv, const int *counts, const int *displs,
                             size_t esz)
{
    comm_vop v = { 0 };
    TRY(comm_group_allgatherv_start(g, &v, send, recv, counts, displs, esz));
    return comm_group_wait(g, &v);
}

status comm_group_alltoallv(comm_group *g, const void *send, const int *scounts, const int *sdispls, void *recv,
                            const int *rcounts, const int *rdispls, size_t esz)
{
    comm_vop v = { 0 };
    TRY(comm_group_alltoallv_start(g, &v, send, scounts, sdispls, recv, rcounts, rdispls, esz));
    return comm_group_wait(g, &v);
}

status comm_group_sendrecv(comm_group *g, const void *send, size_t send_bytes, int dest, int send_tag, void *recv,
                           size_t recv_bytes, int source, int recv_tag)
{
    comm_vop v = { 0 };
    TRY(comm_group_sendrecv_start(g, &v, send, send_bytes, dest, send_tag, recv, recv_bytes, source, recv_tag));
    return comm_group_wait(g, &v);
}
