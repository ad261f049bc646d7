/* ctl — blocking control-plane collectives with a deadline (ctl.h). */
#include "ctl.h"

#include <time.h>

/* Polls `req` until it completes or c's deadline passes. The poll sleeps a little
 * between tests once the wait is long, so a rank waiting on a stalled peer does not
 * take a core from the ranks still computing. */
static status ctl_wait(comm_ctl c, MPI_Request *req, const char *what, int started)
{
    if (started != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(started, msg, &len);
        log_error("%s failed to start: %s", what, msg);
        return STATUS_PEER;
    }
    double t0 = MPI_Wtime(), end = c.timeout_s > 0 ? t0 + c.timeout_s : 0;
    for (long polls = 0;; polls++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, msg, &len);
            log_error("%s failed: %s", what, msg);
            return STATUS_PEER;
        }
        if (done) return STATUS_OK;
        double now = MPI_Wtime();
        if (end > 0 && now > end) {
            int size = 0;
            MPI_Comm_size(c.comm, &size);
            log_error("%s on %d ranks did not complete within comm.timeout = %g s: a rank of this "
                      "communicator stopped, died or is still computing",
                      what, size, c.timeout_s);
            log_error("HINT: see the other ranks' last messages; raise comm.timeout if a rank is legitimately slow");
            /* The request stays posted: MPI may still write its buffers, and the job is ending. */
            return STATUS_TIMEOUT;
        }
        if (polls > 1000 && now - t0 > 0.01) {
            struct timespec ts = { 0, 50000 };  /* 50 us */
            nanosleep(&ts, NULL);
        }
    }
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
