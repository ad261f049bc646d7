/* ctl — the control plane's collectives: the small, blocking exchanges around the
 * gradient path (a loss sum, a broadcast of parameters or a decision, an agreement
 * on sizes, the checkpoint writer's votes), each waited on with a deadline. Vector
 * payloads (DGC-Pro's exchange, ZeRO's shards, tensor-parallel sums, pipeline
 * activations) are not its business: they go through comm.h's comm_group, which any
 * backend (MPI, NCCL) implements.
 *
 * Every call is a non-blocking MPI collective polled until it completes or the
 * deadline passes; a missed deadline logs which operation on which communicator (its
 * name and its members as world ranks: the ranks one of which did not arrive) and how
 * long it waited, and returns STATUS_TIMEOUT: the caller passes it up and the job
 * ends with the documented exit code instead of hanging. A ctl is a value (a
 * communicator, a deadline, a name), not a context: it costs nothing to make one per
 * call site from a runtime communicator. Having no state, it cannot ask which
 * members did not arrive (comm.h's gradient path can: its ranks answer probes on a
 * channel of their own while they wait); with the runtime's watchdog (comm_ctl_watched)
 * it reads the answer from the members' beacons, else it names the candidates.
 *
 * The one design decision: counts and types stay MPI's (MPI_Datatype, MPI_Op, int
 * counts). The callers are the modules that already own MPI communicators (runtime's
 * world/node/peers, the checkpoint writer's communicator that HDF5 also uses); what
 * they gain is one place that bounds every wait. The gradient path itself (buckets,
 * flat/hier/ring allreduce) and every vector payload are comm.h. */
#ifndef NEBULA_COMM_CTL_H
#define NEBULA_COMM_CTL_H

#include <mpi.h>
#include <stddef.h>

#include "base/log.h"
#include "base/watchdog.h"

typedef struct comm_ctl {
    MPI_Comm comm;       /* the communicator the collective runs on */
    double timeout_s;    /* deadline of one call in seconds; 0 = wait forever */
    const char *name;    /* what the communicator is, for messages ("dgc peers"); NULL: unnamed */
    watchdog *wd;        /* the runtime's (rt->wd), or NULL: while a call waits, this rank's beacon
                            shows it, and a missed deadline names the members whose beacons say they
                            made no progress (base/watchdog.h) instead of all the candidates */
} comm_ctl;

/* A ctl on `comm` with a deadline of timeout_s seconds (0: none). */
static inline comm_ctl comm_ctl_make(MPI_Comm comm, double timeout_s)
{
    return (comm_ctl){ .comm = comm, .timeout_s = timeout_s, .name = NULL, .wd = NULL };
}

/* The same, named for the timeout message; `name` must outlive the ctl (a literal). */
static inline comm_ctl comm_ctl_named(MPI_Comm comm, double timeout_s, const char *name)
{
    return (comm_ctl){ .comm = comm, .timeout_s = timeout_s, .name = name, .wd = NULL };
}

/* c, watched by wd (the runtime's watchdog; NULL: none). */
static inline comm_ctl comm_ctl_watched(comm_ctl c, watchdog *wd)
{
    c.wd = wd;
    return c;
}

/* c's deadline passed in `what`: logs the operation, the communicator's members (world
 * ranks) and, when c is watched, what their beacons say (comm_group's waits report
 * through it too). */
void comm_ctl_report_timeout(comm_ctl c, const char *what);

/* sendbuf may be MPI_IN_PLACE where MPI allows it. */
status comm_ctl_allreduce(comm_ctl c, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op);
status comm_ctl_reduce(comm_ctl c, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op,
                       int root);
status comm_ctl_bcast(comm_ctl c, void *buf, int count, MPI_Datatype dt, int root);
/* Broadcast of `bytes` bytes of any size (split into int-sized pieces). */
status comm_ctl_bcast_bytes(comm_ctl c, void *buf, size_t bytes, int root);
/* recvbuf is read on root only. */
status comm_ctl_gather(comm_ctl c, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                       int recvcount, MPI_Datatype recvtype, int root);
status comm_ctl_allgather(comm_ctl c, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                          int recvcount, MPI_Datatype recvtype);
status comm_ctl_allgatherv(comm_ctl c, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                           const int *recvcounts, const int *displs, MPI_Datatype recvtype);
status comm_ctl_alltoall(comm_ctl c, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                         int recvcount, MPI_Datatype recvtype);
status comm_ctl_alltoallv(comm_ctl c, const void *sendbuf, const int *sendcounts, const int *sdispls,
                          MPI_Datatype sendtype, void *recvbuf, const int *recvcounts, const int *rdispls,
                          MPI_Datatype recvtype);
status comm_ctl_reduce_scatter(comm_ctl c, const void *sendbuf, void *recvbuf, const int *recvcounts,
                               MPI_Datatype dt, MPI_Op op);
status comm_ctl_barrier(comm_ctl c);

/* Point-to-point on c: a message of count elements to / from rank `peer` of c with
 * `tag`, waited on with c's deadline (a blocking send or receive, one at a time). */
status comm_ctl_send(comm_ctl c, const void *buf, int count, MPI_Datatype dt, int peer, int tag);
status comm_ctl_recv(comm_ctl c, void *buf, int count, MPI_Datatype dt, int peer, int tag);
/* Both at once, waited on together with one deadline: sendcount elements to `dest` and
 * recvcount from `source` (the pipeline's exchange of an activation against a gradient,
 * where two blocking calls in a row could each wait for the other's peer). */
status comm_ctl_sendrecv(comm_ctl c, const void *sendbuf, int sendcount, int dest, int sendtag, void *recvbuf,
                         int recvcount, int source, int recvtag, MPI_Datatype dt);

/* Collective over c: every member's clock against root's, by ping-pong (Cristian's
 * estimate, as NTP and Horovod's timeline align clocks): root pings each member in
 * turn `rounds` times; the member answers with its clock read when the ping arrived;
 * with root's send and receive times t0, t1 the member's offset is tm - (t0 + t1) / 2,
 * off by at most half the round trip t1 - t0, so the round with the shortest trip is
 * kept. On root, per member k (root's own entry 0): offset[k] = k's clock minus root's
 * (s), rtt[k] that round's trip (s), at[k] root's clock at its midpoint (s); not read
 * elsewhere (may be NULL). `clock` is the clock compared (seconds). */
status comm_ctl_clock_offsets(comm_ctl c, int root, int rounds, double (*clock)(void), double *offset, double *rtt,
                              double *at);

/* The peer row of a benchmark: OpenMPI's own blocking MPI_Allreduce, in place, with no
 * deadline and no polling (what is measured is MPI's blocking call itself). Nothing
 * else calls it; a failure dies. */
void comm_mpi_allreduce_blocking(void *buf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm);

#endif
