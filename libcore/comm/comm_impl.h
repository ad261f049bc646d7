/* comm_impl — the backend interface and the communicator context, shared by
 * comm.c (algorithms, deadlines, tuning) and the backends (comm_mpi.c, comm_nccl.c).
 * Never included from apps/. */
#ifndef NEBULA_COMM_IMPL_H
#define NEBULA_COMM_IMPL_H

#include "comm.h"

/* Groups of ranks an algorithm talks to. Each algorithm phase has its own group so
 * that phases of concurrent ops never interleave on one communicator. */
enum comm_group_index {
    COMM_GROUP_WORLD_COLL = 0, /* mpi: OpenMPI's own allreduce */
    COMM_GROUP_WORLD_P2P,      /* flat: point-to-point over all ranks */
    COMM_GROUP_CHUNK0,         /* hier: part j's owners on every node, j < max_local_size */
};

#define COMM_MAX_LOCAL 64      /* ranks per node the hierarchical split supports */
#define COMM_NGROUPS (COMM_GROUP_CHUNK0 + COMM_MAX_LOCAL)

enum { COMM_FLAT_RING = 0, COMM_FLAT_RD, COMM_FLAT_RAB };  /* comm_flat.sub */
enum { COMM_CLASS_MPI = 0, COMM_CLASS_HIER, COMM_CLASS_NCCL, COMM_NCLASSES }; /* ordering classes */

/* The resolved algorithm of every op of the nccl backend (comm_nccl.c's hierarchical
 * pipeline). Internal: never a table index, never parsed; comm_algo_name says "nccl". */
#define COMM_ALGO_NCCL ((comm_algo)COMM_ALGO_COUNT)

typedef struct comm_backend comm_backend;

/* A collective backend: non-blocking primitives on groups; `req` receives a handle
 * that `test` completes. Counts are elements of `dt`. */
typedef struct comm_backend_ops {
    const char *name;
    status (*iallreduce)(comm_backend *be, int group, void *buf, size_t count, reduce_dtype dt,
                         reduce_op op, uint64_t *req);
    /* Blocking, no deadline of its own: comm_allreduce's fast path only (comm.c says when). */
    status (*allreduce)(comm_backend *be, int group, void *buf, size_t count, reduce_dtype dt, reduce_op op);
    status (*ireduce_scatter)(comm_backend *be, int group, const void *send, void *recv,
                              const int *counts, reduce_dtype dt, reduce_op op, uint64_t *req);
    /* send NULL: in place. Elements of esz bytes are moved, never combined. */
    status (*iallgatherv)(comm_backend *be, int group, const void *send, void *recv, const int *counts,
                          const int *displs, size_t esz, uint64_t *req);
    status (*ialltoallv)(comm_backend *be, int group, const void *send, const int *scounts, const int *sdispls,
                         void *recv, const int *rcounts, const int *rdispls, size_t esz, uint64_t *req);
    status (*isend)(comm_backend *be, int group, const void *buf, size_t bytes, int peer, int tag,
                    uint64_t *req);
    status (*irecv)(comm_backend *be, int group, void *buf, size_t bytes, int peer, int tag,
                    uint64_t *req);
    /* send_bytes to dest and recv_bytes from source in one step (a peer of -1 or 0
     * bytes: none), as two handles req[0..1] that testall completes together (a zero
     * handle is complete): posted apart, two ranks exchanging both ways could each
     * wait for the other's second half (nccl runs a stream's work in order). */
    status (*isendrecv)(comm_backend *be, int group, const void *send, size_t send_bytes, int dest, int send_tag,
                        void *recv, size_t recv_bytes, int source, int recv_tag, uint64_t *req);
    /* *done = true when all n requests completed (their handles are then released). */
    status (*testall)(comm_backend *be, uint64_t *reqs, int n, bool *done);
    void (*free)(comm_backend *be);
    /* Local frees only, after a failed wait: collective frees would wait for the very
     * ranks that did not arrive (comm_free). */
    void (*abandon)(comm_backend *be);
    /* The gradient path's allreduce engine, filled by every backend (comm.c calls only
     * these): mpi runs the host algorithms (flat, hier, ring, mpi: comm_host_* below),
     * nccl its device pipeline, one op at a time in start order (COMM_CLASS_NCCL). */
    status (*op_resolve)(comm *c, comm_algo *algo, size_t bytes, bool blocking); /* AUTO -> an algorithm; refuse one it cannot run */
    status (*op_start)(comm *c, comm_op *o);                /* at comm_allreduce_start: set up, take its ticket */
    status (*op_progress)(comm *c, comm_op *o, bool *done); /* advance without blocking; *done when complete */
    status (*op_timeout)(comm *c, const comm_op *o);        /* deadline passed: say where, name late ranks */
    status (*set_stream)(comm *c, cuda_stream s);           /* comm_set_stream (mpi: nothing to order) */
} comm_backend_ops;

struct comm_backend {
    const comm_backend_ops *ops;  /* the vtable */
    void *impl;                   /* backend state */
    int group_rank[COMM_NGROUPS]; /* my rank in each group, -1 when not a member */
    int group_size[COMM_NGROUPS]; /* size of each group */
    char describe[160];           /* backend, library version, transport */
};

/* The mpi backend's allreduce engine (comm.c): the host algorithms. */
status comm_host_resolve(comm *c, comm_algo *algo, size_t bytes, bool blocking);
status comm_host_op_start(comm *c, comm_op *o);
status comm_host_op_progress(comm *c, comm_op *o, bool *done);
status comm_host_set_stream(comm *c, cuda_stream s);

/* Timeout diagnosis (comm_diag.c): answer other ranks' probes while waiting;
 * on a missed deadline, probe everyone and name the ranks that did not arrive. */
void comm_diag_service(comm *c, uint64_t waiting_seq, bool force);
status comm_diag_timeout(comm *c, const comm_op *o);

/* The algorithms' phase marks (comm_op.phases): ends the open phase now and begins one
 * of `kind` (-1: only ends it); a phase of the open one's kind continues it. */
void comm_phase_mark(comm_op *o, int kind);

/* Helpers shared by the algorithm files. */
void comm_split_even(size_t count, int n, int i, size_t *off, size_t *len);
status comm_op_scratch(comm_op *o, size_t bytes);

/* Flat engine (comm_flat.c): set up, post the current step, complete it;
 * comm_flat_done tells when every phase is over. Scratch bytes it needs: */
size_t comm_flat_scratch_bytes(const comm *c, int group, size_t count, reduce_dtype dt, bool ring);
void comm_flat_begin(comm *c, comm_flat *f, int group, void *buf, size_t count, reduce_dtype dt, void *scratch,
                     uint64_t seq, bool ring);  /* ring: the ring at every size (COMM_ALGO_RING) */
status comm_flat_post(comm *c, comm_op *o, comm_flat *f);
void comm_flat_complete(comm *c, comm_op *o, comm_flat *f);
bool comm_flat_done(const comm_flat *f);
/* Posts and tests steps until one is still in flight (*done false) or all are over. */
status comm_flat_progress(comm *c, comm_op *o, comm_flat *f, bool *done);
/* Tests o's requests; *done when none is left in flight. */
status comm_op_test_reqs(comm *c, comm_op *o, bool *done);

/* Hierarchical algorithm (comm_hier.c). Parts per chunk: the largest node's
 * size, capped at COMM_MAX_LOCAL (ranks beyond it own no part). */
int comm_hier_nparts(const runtime *rt);
status comm_hier_init(comm *c);
void comm_hier_free(comm *c);
size_t comm_hier_scratch_bytes(const comm *c, size_t count, reduce_dtype dt);
/* Advances a hier op as far as it can without blocking; *done when complete. */
status comm_hier_progress(comm *c, comm_op *o, bool *done);

/* A group for vector payloads (comm.h: comm_group): its own backend instance whose
 * group COMM_GROUP_WORLD_COLL is the members (every primitive runs there). */
struct comm_group {
    comm_backend be;               /* the backend over the members */
    MPI_Comm members;              /* the members' communicator (not owned) */
    comm_group_options opt;        /* backend, deadline, name, watchdog */
    int rank, size;                /* mine in members, and their number */
    uint64_t bytes;                /* bus bytes of the ops started (comm_group_bytes) */
};

/* Group backends: mpi runs on `members` itself; nccl builds an NCCL communicator over
 * them (collective; STATUS_USAGE without CUDA). */
status comm_mpi_group_backend_init(comm_backend *be, MPI_Comm members);
status comm_nccl_group_backend_init(comm_group *g);

/* Backends. The nccl backend reads c->rt and c->opt and needs c->diag; built
 * without CUDA it says so and returns STATUS_USAGE. */
status comm_mpi_backend_init(comm_backend *be, const runtime *rt);
status comm_nccl_backend_init(comm *c);

typedef struct comm_tune_entry {
    size_t bytes;                       /* measured message size */
    comm_algo algo;                     /* chosen for comm_allreduce (mpi: the blocking call up to 16 MiB) */
    comm_algo algo_start;               /* chosen for ops started non-blocking (mpi: MPI_Iallreduce) */
    double us[COMM_ALGO_COUNT];         /* time per algorithm through comm_allreduce: fastest round, slowest rank */
    double us_mpi_start;                /* mpi started and waited (MPI_Iallreduce), likewise */
} comm_tune_entry;

#define COMM_TUNE_MAX 64

struct comm {
    comm_backend be;               /* the backend in use */
    const runtime *rt;             /* placement (world, node ids, local ranks) */
    comm_options opt;              /* algorithm default, deadline */
    uint64_t seq;                  /* sequence number of the last started op */
    uint64_t bytes;                /* bus bytes of the allreduces started (comm_bytes) */
    uint64_t ticket_issued[COMM_NCLASSES]; /* per ordering class: tickets handed out at op start */
    uint64_t ticket_next[COMM_NCLASSES];   /* per ordering class: the ticket allowed to run next */
    MPI_Win shm_win;               /* node shared memory of hier */
    size_t shm_slot_bytes;         /* bytes of one slot = one pipeline chunk (copy and cma alike) */
    char *shm_base;                /* header (barrier counter, one line per local rank), then on nodes
                                      of two or more the small area, local_size slots and the result */
    bool cma;                      /* hier: this node reads peers' buffers in place (process_vm_readv) */
    uint64_t shm_gen;              /* node barriers this rank has arrived at */
    comm_op *head;                 /* ops in flight, oldest first (linked by comm_op.next) */
    comm_op *tail;                 /* newest op in flight */
    bool failed;                   /* a wait failed: ops may be stuck, collectives unsafe */
    uint64_t diag_probe;           /* send buffer of timeout probes (outlives the call) */
    comm_op blocking;              /* the op behind comm_allreduce */
    MPI_Comm diag;                 /* probe/reply channel for timeout diagnosis */
    double diag_last;              /* MPI_Wtime of the last probe service */
    char diag_late[256];           /* ranks the last timeout named as not arrived, "" if none */
    int ntune;                     /* entries in the auto table */
    comm_tune_entry tune[COMM_TUNE_MAX]; /* auto table, ascending bytes */
};

#endif
