/* ctl — blocking control-plane collectives with a deadline (ctl.h). */
#include "ctl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "0-3,6" — c's members as world ranks, into out (truncated with "..."), and my rank in c;
 * mask[world rank] = 1 for each member when mask is not NULL (world size entries, zeroed). */
static void ctl_members(comm_ctl c, char *out, size_t len, int *me, char *mask)
{
    int n = 0, used = 0;
    MPI_Comm_size(c.comm, &n);
    MPI_Comm_rank(c.comm, me);
    out[0] = 0;
    int *mine = malloc(sizeof(int) * (size_t)n * 2);
    if (!mine) return;
    int *world = mine + n;
    MPI_Group g, gw;
    MPI_Comm_group(c.comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &gw);
    for (int r = 0; r < n; r++) mine[r] = r;
    MPI_Group_translate_ranks(g, n, mine, gw, world);
    MPI_Group_free(&g);
    MPI_Group_free(&gw);
    for (int k = 0; mask && k < n; k++) mask[world[k]] = 1;
    int r = 0;
    for (; r < n && used + 24 < (int)len; r++) {
        int e = r;  /* a run of consecutive world ranks */
        while (e + 1 < n && world[e + 1] == world[e] + 1) e++;
        used += snprintf(out + used, len - (size_t)used, e > r ? "%s%d-%d" : "%s%d", r ? "," : "", world[r], world[e]);
        r = e;
    }
    if (r < n) snprintf(out + used, len - (size_t)used, ",...");
    free(mine);
}

/* c's deadline passed: which members, and what their beacons say when c is watched. */
void comm_ctl_report_timeout(comm_ctl c, const char *what)
{
    char members[256], who[1024] = "";
    int me = 0, world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    char *mask = c.wd ? calloc((size_t)world, 1) : NULL;
    ctl_members(c, members, sizeof members, &me, mask);
    if (mask) watchdog_describe_ranks(c.wd, mask, who, sizeof who);
    free(mask);
    log_error("%s on %s (world ranks %s; I am its rank %d) did not complete within comm.timeout = %g s: %s", what,
              c.name ? c.name : "a communicator", members, me, c.timeout_s,
              who[0] ? who : "one of those ranks stopped, died or is still computing");
    log_error("HINT: see the other ranks' last messages; raise comm.timeout if a rank is legitimately slow");
}

/* ctl_wait's loop over n requests; STATUS_TIMEOUT when c's deadline passes (the caller
 * reports it). */
static status ctl_poll(comm_ctl c, int n, MPI_Request *req, const char *what, int started)
{
    if (started != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(started, msg, &len);
        log_error("%s failed to start: %s", what, msg);
        return STATUS_PEER;
    }
    double t0 = MPI_Wtime(), end = c.timeout_s > 0 ? t0 + c.timeout_s : 0, prev = t0;
    for (long polls = 0;; polls++) {
        int done = 0;
        int rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, msg, &len);
            log_error("%s failed: %s", what, msg);
            return STATUS_PEER;
        }
        if (done) return STATUS_OK;
        double now = MPI_Wtime();
        /* polls come every 50 us at most: a gap of a second is this process stopped
         * (SIGSTOP), time it did not wait for the others */
        if (end > 0 && now - prev > 1) end += now - prev;
        prev = now;
        if (end > 0 && now > end) {
            /* The request stays posted: MPI may still write its buffers, and the job is ending. */
            return STATUS_TIMEOUT;
        }
        if (polls > 1000 && now - t0 > 0.01) {
            struct timespec ts = { 0, 50000 };  /* 50 us */
            nanosleep(&ts, NULL);
        }
    }
}

/* Polls `req` until it completes or c's deadline passes. The poll sleeps a little
 * between tests once the wait is long, so a rank waiting on a stalled peer does not
 * take a core from the ranks still computing. A watched ctl shows the wait in this
 * rank's beacon; the watchdog's deadline is a little later than c's own, which
 * normally fires first and returns STATUS_TIMEOUT up the stack. */
static status ctl_waitn(comm_ctl c, int n, MPI_Request *req, const char *what, int started)
{
    if (c.wd && started == MPI_SUCCESS) {
        char op[96];
        snprintf(op, sizeof op, "%s on %s", what, c.name ? c.name : "a communicator");
        watchdog_enter(c.wd, op, c.timeout_s > 0 ? c.timeout_s + 2 : 0);
    }
    status st = ctl_poll(c, n, req, what, started);
    if (c.wd && started == MPI_SUCCESS) watchdog_leave(c.wd);
    if (st == STATUS_TIMEOUT) comm_ctl_report_timeout(c, what);  /* unguarded: reading the beacons takes a few ticks */
    return st;
}

static status ctl_wait(comm_ctl c, MPI_Request *req, const char *what, int started)
{
    return ctl_waitn(c, 1, req, what, started);
}

status comm_ctl_allreduce(comm_ctl c, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op)
{
    MPI_Request r;
    return ctl_wait(c, &r, "allreduce", MPI_Iallreduce(sendbuf, recvbuf, count, dt, op, c.comm, &r));
}

status comm_ctl_reduce(comm_ctl c, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
                       int root)
{
    MPI_Request r;
    return ctl_wait(c, &r, "reduce", MPI_Ireduce(sendbuf, recvbuf, count, dt, op, root, c.comm, &r));
}

status comm_ctl_bcast(comm_ctl c, void *buf, int count, MPI_Datatype dt, int root)
{
    MPI_Request r;
    return ctl_wait(c, &r, "broadcast", MPI_Ibcast(buf, count, dt, root, c.comm, &r));
}

status comm_ctl_bcast_bytes(comm_ctl c, void *buf, size_t bytes, int root)
{
    const size_t piece = (size_t)1 << 30;  /* MPI counts are int */
    for (size_t at = 0; at < bytes; at += piece) {
        size_t n = bytes - at < piece ? bytes - at : piece;
        TRY(comm_ctl_bcast(c, (char *)buf + at, (int)n, MPI_BYTE, root));
    }
    return STATUS_OK;
}

status comm_ctl_gather(comm_ctl c, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                       int recvcount, MPI_Datatype recvtype, int root)
{
    MPI_Request r;
    return ctl_wait(c, &r, "gather",
                    MPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, c.comm, &r));
}

status comm_ctl_allgather(comm_ctl c, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                          int recvcount, MPI_Datatype recvtype)
{
    MPI_Request r;
    return ctl_wait(c, &r, "allgather",
                    MPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c.comm, &r));
}

status comm_ctl_allgatherv(comm_ctl c, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                           const int *recvcounts, const int *displs, MPI_Datatype recvtype)
{
    MPI_Request r;
    return ctl_wait(c, &r, "allgatherv",
                    MPI_Iallgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, c.comm, &r));
}

status comm_ctl_alltoall(comm_ctl c, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                         int recvcount, MPI_Datatype recvtype)
{
    MPI_Request r;
    return ctl_wait(c, &r, "alltoall",
                    MPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c.comm, &r));
}

status comm_ctl_alltoallv(comm_ctl c, const void *sendbuf, const int *sendcounts, const int *sdispls,
                          MPI_Datatype sendtype, void *recvbuf, const int *recvcounts, const int *rdispls,
                          MPI_Datatype recvtype)
{
    MPI_Request r;
    return ctl_wait(c, &r, "alltoallv",
                    MPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                                   c.comm, &r));
}

status comm_ctl_reduce_scatter(comm_ctl c, const void *sendbuf, void *recvbuf, const int *recvcounts,
                               MPI_Datatype dt, MPI_Op op)
{
    MPI_Request r;
    return ctl_wait(c, &r, "reduce-scatter",
                    MPI_Ireduce_scatter(sendbuf, recvbuf, recvcounts, dt, op, c.comm, &r));
}

status comm_ctl_barrier(comm_ctl c)
{
    MPI_Request r;
    return ctl_wait(c, &r, "barrier", MPI_Ibarrier(c.comm, &r));
}

status comm_ctl_send(comm_ctl c, const void *buf, int count, MPI_Datatype dt, int peer, int tag)
{
    MPI_Request r;
    return ctl_wait(c, &r, "send", MPI_Isend(buf, count, dt, peer, tag, c.comm, &r));
}

status comm_ctl_recv(comm_ctl c, void *buf, int count, MPI_Datatype dt, int peer, int tag)
{
    MPI_Request r;
    return ctl_wait(c, &r, "receive", MPI_Irecv(buf, count, dt, peer, tag, c.comm, &r));
}

status comm_ctl_sendrecv(comm_ctl c, const void *sendbuf, int sendcount, int dest, int sendtag, void *recvbuf,
                         int recvcount, int source, int recvtag, MPI_Datatype dt)
{
    MPI_Request r[2];
    int a = MPI_Irecv(recvbuf, recvcount, dt, source, recvtag, c.comm, &r[0]);
    int b = a == MPI_SUCCESS ? MPI_Isend(sendbuf, sendcount, dt, dest, sendtag, c.comm, &r[1]) : a;
    return ctl_waitn(c, 2, r, "send and receive", b);
}

#define CTL_CLOCK_TAG 0x4e43  /* "NC": the pings' tag; nothing else sends point-to-point on a ctl's communicator */

status comm_ctl_clock_offsets(comm_ctl c, int root, int rounds, double (*clock)(void), double *offset, double *rtt,
                              double *at)
{
    int me = 0, n = 0;
    MPI_Comm_rank(c.comm, &me);
    MPI_Comm_size(c.comm, &n);
    if (me != root) {  /* answer every ping with my clock as it arrived */
        for (int i = 0; i < rounds; i++) {
            char ping;
            TRY(comm_ctl_recv(c, &ping, 1, MPI_CHAR, root, CTL_CLOCK_TAG));
            double t = clock();
            TRY(comm_ctl_send(c, &t, 1, MPI_DOUBLE, root, CTL_CLOCK_TAG));
        }
        return STATUS_OK;
    }
    for (int k = 0; k < n; k++) {
        double best = INFINITY, off = 0, mid = clock();
        for (int i = 0; i < rounds && k != root; i++) {
            char ping = 0;
            double tm, t0 = clock();
            TRY(comm_ctl_send(c, &ping, 1, MPI_CHAR, k, CTL_CLOCK_TAG));
            TRY(comm_ctl_recv(c, &tm, 1, MPI_DOUBLE, k, CTL_CLOCK_TAG));
            double t1 = clock();
            if (t1 - t0 < best) best = t1 - t0, off = tm - (t0 + t1) / 2, mid = (t0 + t1) / 2;
        }
        if (offset) offset[k] = off;
        if (rtt) rtt[k] = k == root ? 0 : best;
        if (at) at[k] = mid;
    }
    return STATUS_OK;
}

void comm_mpi_allreduce_blocking(void *buf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, count, dt, op, comm));
}
