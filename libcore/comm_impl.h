/* comm_impl — the backend interface and the communicator context, shared by
 * comm.c (algorithms, deadlines, tuning) and the backends (comm_mpi.c).
 * Never included from apps/. */
#ifndef NEBULA_COMM_IMPL_H
#define NEBULA_COMM_IMPL_H

#include "comm.h"

/* Groups of ranks an algorithm talks to. Each algorithm phase has its own group so
 * that phases of concurrent ops never interleave on one communicator. */
enum comm_group {
    COMM_GROUP_WORLD_COLL = 0, /* mpi: OpenMPI's own allreduce */
    COMM_GROUP_WORLD_P2P,      /* flat: ring point-to-point */
    COMM_GROUP_NODE_RS,        /* hier phase 0: intra-node reduce-scatter */
    COMM_GROUP_NODE_AG,        /* hier phase 2: intra-node allgather */
    COMM_GROUP_CHUNK0,         /* hier phase 1: chunk j's owners on every node, j < max_local_size */
};

typedef struct comm_backend comm_backend;

/* A collective backend: non-blocking primitives on groups; `req` receives a handle
 * that `test` completes. Counts are elements of `dt`. */
typedef struct comm_backend_ops {
    const char *name;
    status (*iallreduce)(comm_backend *be, int group, void *buf, size_t count, reduce_dtype dt,
                         reduce_op op, uint64_t *req);
    status (*ireduce_scatter)(comm_backend *be, int group, const void *send, void *recv,
                              const int *counts, reduce_dtype dt, reduce_op op, uint64_t *req);
    status (*iallgatherv)(comm_backend *be, int group, const void *send, int sendcount, void *recv,
                          const int *counts, const int *displs, reduce_dtype dt, uint64_t *req);
    status (*isend)(comm_backend *be, int group, const void *buf, size_t bytes, int peer, int tag,
                    uint64_t *req);
    status (*irecv)(comm_backend *be, int group, void *buf, size_t bytes, int peer, int tag,
                    uint64_t *req);
    /* *done = true when the request completed (the handle is then released). */
    status (*test)(comm_backend *be, uint64_t *req, bool *done);
    void (*free)(comm_backend *be);
} comm_backend_ops;

struct comm_backend {
    const comm_backend_ops *ops;  /* the vtable */
    void *impl;                   /* backend state */
    int group_rank[COMM_GROUP_CHUNK0 + COMM_OP_MAXREQ]; /* my rank in each group, -1 when not a member */
    int group_size[COMM_GROUP_CHUNK0 + COMM_OP_MAXREQ]; /* size of each group */
    char describe[160];           /* backend, library version, transport */
};

/* Timeout diagnosis (comm_diag.c): answer other ranks' probes while waiting;
 * on a missed deadline, probe everyone and name the ranks that did not arrive. */
void comm_diag_service(comm *c, uint64_t waiting_seq, bool force);
status comm_diag_timeout(comm *c, const comm_op *o);

/* Backends. */
status comm_mpi_backend_init(comm_backend *be, const runtime *rt);

typedef struct comm_tune_entry {
    size_t bytes;                       /* measured message size */
    comm_algo algo;                     /* chosen algorithm */
    double us[COMM_ALGO_COUNT];         /* median time per algorithm, slowest rank */
} comm_tune_entry;

#define COMM_TUNE_MAX 64
#define COMM_MAX_INFLIGHT 1024

struct comm {
    comm_backend be;               /* the backend in use */
    const runtime *rt;             /* placement (world, node ids, local ranks) */
    comm_options opt;              /* algorithm default, deadline */
    uint64_t seq;                  /* sequence number of the last started op */
    uint64_t ticket_issued[4];     /* per ordering class: tickets handed out at op start */
    uint64_t ticket_next[4];       /* per ordering class: the ticket allowed to post next */
    int ninflight;                 /* ops started and not completed */
    comm_op *inflight[COMM_MAX_INFLIGHT]; /* in start order */
    comm_op blocking;              /* the op behind comm_allreduce */
    MPI_Comm diag;                 /* probe/reply channel for timeout diagnosis */
    double diag_last;              /* MPI_Wtime of the last probe service */
    int ntune;                     /* entries in the auto table */
    comm_tune_entry tune[COMM_TUNE_MAX]; /* auto table, ascending bytes */
};

#endif
