/* comm — collectives for gradient exchange: flat, hierarchical and OpenMPI's own,
 * blocking and non-blocking, every wait bounded by a deadline.
 *
 * Algorithms (all in-place on `buf`, deterministic reduction order per world layout):
 *   mpi   OpenMPI's MPI_Iallreduce on a duplicate of the world communicator
 *   flat  over all ranks: recursive doubling up to COMM_FLAT_RD_MAX_BYTES (latency);
 *         above it Rabenseifner (halving reduce-scatter, doubling allgather) on a
 *         power-of-two world, else a ring (reduce-scatter ring, allgather ring)
 *   hier  intra-node reduce-scatter -> inter-node flat allreduce among the ranks
 *         that own the same part on every node -> intra-node allgather; pipelined
 *         in chunks. Inside the node each rank reads its peers' buffers in place
 *         (Linux CMA, process_vm_readv: one copy) where the kernel permits it, else
 *         copies through a node shared-memory segment (comm_hier.c)
 *   ring  the flat engine's ring at every size and world: bandwidth-optimal and
 *         gentle on rate-limited links, where halving-doubling runs at half the rate
 *   auto  per message size, the algorithm a measured table chose (comm_tune)
 * The algorithms are written once against a small backend interface (comm_impl.h).
 *
 * Backends (comm_options.backend, config key comm.backend):
 *   mpi   host buffers; every algorithm above
 *   nccl  DEVICE buffers, one GPU per rank: NCCL reduce-scatter inside the node, MPI
 *         allreduce of each rank's part between nodes, NCCL all-gather, pipelined in
 *         chunks of nccl_chunk_bytes (comm_nccl.c). Its one algorithm is hierarchical:
 *         auto and hier select it; mpi, flat and ring are refused (STATUS_USAGE).
 *         f32 sums only. Ops run one at a time in start order (comm_nccl.c says why);
 *         comm_set_stream orders each op after the work that produced its buffer.
 * The same calls (start / test / wait / progress, the bucket manager) serve both.
 * Every other vector payload goes through a comm_group (below): its ops (allreduce,
 * reduce-scatter, all-gather, all-to-all, send-receive) on any group of ranks, also
 * implemented by both backends (comm_mpi.c, comm_nccl_group.c).
 *
 * A wait that passes the deadline probes every rank and names the ranks that did
 * not arrive, then returns STATUS_TIMEOUT. */
#ifndef NEBULA_COMM_H
#define NEBULA_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/log.h"
#include "base/runtime.h"
#include "cuda/device.h"

typedef enum comm_algo {
    COMM_ALGO_AUTO = 0,
    COMM_ALGO_MPI,
    COMM_ALGO_FLAT,
    COMM_ALGO_HIER,
    COMM_ALGO_RING,
    COMM_ALGO_COUNT,
} comm_algo;

typedef enum comm_backend_kind {
    COMM_BACKEND_MPI = 0,  /* host buffers (the default) */
    COMM_BACKEND_NCCL,     /* device buffers: NCCL in the node, MPI between nodes */
    COMM_BACKEND_COUNT,
} comm_backend_kind;

typedef struct comm comm; /* opaque: backend and communicators live in comm_impl.h */

typedef struct comm_options {
    comm_backend_kind backend; /* mpi (host buffers) or nccl (device buffers) */
    comm_algo algo;        /* algorithm of comm_allreduce when the caller passes AUTO */
    double timeout_s;      /* deadline of every wait in seconds; 0 disables it */
    const char *tune_file; /* JSON table of auto choices to load; NULL or "" for none */
    size_t segment_bytes;  /* mpi and flat run larger messages in segments of this size; 0 = COMM_SEGMENT_BYTES */
    size_t nccl_chunk_bytes; /* nccl: pipeline chunk (reduce-scatter, MPI, all-gather overlap); 0 = COMM_NCCL_CHUNK_BYTES */
    bool nccl_staged;      /* nccl: stage the MPI step through pinned host memory even when MPI is CUDA-aware */
    bool hier_copy;        /* hier: copy through node shared memory even where CMA could read peers in place
                              (the fallback, for tests and comparisons; env NEBULA_COMM_CMA=0 does the same) */
} comm_options;

#define COMM_OP_MAXREQ 2                     /* requests one step keeps in flight */
#define COMM_FLAT_RD_MAX_BYTES (64 * 1024)   /* flat: recursive doubling up to here */
#define COMM_BLOCKING_MAX_BYTES (16u << 20)  /* comm_allreduce: OpenMPI's blocking MPI_Allreduce up to here when the algorithm is mpi (comm.c) */
#define COMM_SHM_SLOT_BYTES (4u << 20)       /* hier: pipeline chunk per rank in node shared memory */
#define COMM_SEGMENT_BYTES (1u << 30)        /* mpi, flat: default and largest segment (MPI counts are int) */
#define COMM_NCCL_CHUNK_BYTES (25u << 20)    /* nccl: default pipeline chunk, PyTorch DDP's 25 MiB */
#define COMM_NCCL_STAGE_SLOTS 4              /* nccl: staged MPI steps in flight (pinned slots) */
#define COMM_NCCL_INIT_MIN_S 30.0            /* nccl: NCCL's bootstrap waits at least this long (s) */

/* The flat engine's state: an allreduce among the ranks of one backend group, by
 * recursive doubling (small), Rabenseifner (power-of-two groups) or a ring. It runs
 * the flat algorithm over the world, and hier's inter-node step over a chunk group. */
typedef struct comm_flat {
    int group;             /* backend group (comm_impl.h) */
    int rank;              /* my rank in the group */
    int size;              /* ranks in the group */
    int sub;               /* COMM_FLAT_RD, COMM_FLAT_RAB or COMM_FLAT_RING */
    int phase;             /* rd: 0 fold-in, 1 doubling, 2 fold-out; rab: 0 halving, 1 doubling; ring: 0 rs, 1 ag */
    int step;              /* step within the phase */
    void *buf;             /* data, reduced in place */
    size_t count;          /* elements */
    void *scratch;         /* receive buffer: count elements (rd, rab) or one ring chunk */
    int tag;               /* message tag: the op's sequence number modulo 2^15 */
} comm_flat;

/* The phases of an allreduce as its algorithm ran them (comm_op_phases; what the
 * trainer's timeline draws inside a bucket's allreduce). */
typedef enum comm_phase_kind {
    COMM_PHASE_FLAT = 0,                /* a one-phase algorithm: mpi, flat, ring (and hier's one-node small variant) */
    COMM_PHASE_INTRA_REDUCE_SCATTER,    /* hier: each local rank sums its parts of the chunk over the node */
    COMM_PHASE_INTER_ALLREDUCE,         /* hier: each part among its owners on the other nodes (several nodes only) */
    COMM_PHASE_INTRA_ALLGATHER,         /* hier: every local rank collects the chunk's result */
    COMM_PHASE_COUNT
} comm_phase_kind;

typedef struct comm_phase {
    double t0, t1;         /* MPI_Wtime when the phase began and ended (s); from the op's first
                              progress after its turn came to when it was seen done */
    comm_phase_kind kind;
} comm_phase;

/* Phases an op records: hier has three per pipeline chunk (consecutive phases of one kind
 * merge), so a 25 MiB bucket in 4 MiB chunks (7 chunks, 21 phases) fits. */
#define COMM_OP_MAX_PHASES 24

/* One in-flight allreduce. Embed it where it is used (a bucket owns one); its
 * scratch is sized at first use and reused, so steady-state steps allocate nothing. */
typedef struct comm_op {
    int active;            /* started and not yet completed */
    struct comm_op *next;  /* next op in flight, in start order (comm's list) */
    comm_algo algo;        /* resolved algorithm (never AUTO) */
    uint64_t seq;          /* collective sequence number, equal on every rank */
    void *buf;             /* the data, reduced in place */
    size_t count;          /* elements */
    reduce_dtype dtype;    /* element type */
    reduce_op op;          /* reduction */
    double scale;          /* comm_allreduce_start_scaled's factor; 1 = plain reduction */
    int phase;             /* mpi: 0 post, 1 wait; hier: comm_hier.c's phases */
    int posted;            /* the current step's requests are in flight (nccl: the op is enqueued) */
    uint64_t ticket;       /* mpi, hier, nccl: position in the algorithm's ordering class */
    size_t seg_off;        /* mpi, flat: first element of the segment in progress */
    size_t seg_len;        /* mpi, flat: elements in that segment */
    size_t chunk_off;      /* hier: first element of the pipeline chunk in progress */
    size_t chunk_len;      /* hier: elements in that chunk */
    int part;              /* hier: the owned part whose inter-node allreduce runs */
    uint64_t barrier_gen;  /* hier: node barrier generation being waited for */
    double spin_since;     /* hier: when the current barrier wait started spinning, 0 = not yet */
    comm_flat flat;        /* flat, and hier's inter-node step */
    int nreq;              /* requests in flight */
    uint64_t req[COMM_OP_MAXREQ]; /* backend request handles (MPI_Request for MPI) */
    void *scratch;         /* algorithm scratch */
    size_t scratch_bytes;  /* capacity of scratch */
    double t_start;        /* MPI_Wtime at start */
    double deadline;       /* absolute MPI_Wtime deadline, 0 = none */
    int nphases;           /* phases recorded, at most COMM_OP_MAX_PHASES (nccl ops record none) */
    int phases_lost;       /* phases past COMM_OP_MAX_PHASES, not recorded */
    bool phase_open;       /* phases[nphases - 1] has not ended yet */
    comm_phase phases[COMM_OP_MAX_PHASES]; /* in the order they ran, a few clock reads per chunk */
} comm_op;

/* Config keys of [comm], for an app's schema. */
#define COMM_CONFIG_KEYS                                                                             \
    { "comm", "backend", CONFIG_TYPE_ENUM, "mpi", .choices = "mpi|nccl",                            \
      .help = "gradient allreduce backend: mpi (host buffers) or nccl (device buffers, one GPU per rank)" }, \
    { "comm", "algo", CONFIG_TYPE_ENUM, "auto", .choices = "auto|mpi|flat|hier|ring",                  \
      .help = "allreduce algorithm; auto picks per message size from the tuning table" },          \
    { "comm", "timeout", CONFIG_TYPE_FLOAT, "300", .min = 0, .max = 1e6,                            \
      .help = "seconds any collective may wait before naming the ranks that did not arrive (0: never)" }, \
    { "comm", "tune_file", CONFIG_TYPE_STRING, "",                                                  \
      .help = "JSON tuning table for auto (written by nebula-bench comm --save-tune)" },             \
    { "comm", "segment_bytes", CONFIG_TYPE_SIZE, "1G", .min = 64, .max = 1 << 30,                   \
      .help = "mpi and flat allreduce larger messages in segments of this size" }

struct config;
/* Fills options from the [comm] keys of cfg (tune_file points into cfg). */
void comm_options_from_config(const struct config *cfg, comm_options *opt);

status comm_init(comm **out, const runtime *rt, const comm_options *opt);
/* After a failed wait (timeout), frees only local resources: collective frees
 * would wait for the very ranks that did not arrive. */
void comm_free(comm *c);

/* "mpi (Open MPI v4.1.4, pml ob1)" — what the backend runs on. */
const char *comm_describe(const comm *c);

/* True when the backend reduces device buffers (nccl): every buffer passed to an
 * allreduce is then device memory of this rank's GPU, never touched by the host. */
bool comm_on_device(const comm *c);

const char *comm_backend_name(comm_backend_kind b);
/* "mpi|nccl" -> backend; false when the name is unknown. */
bool comm_backend_parse(const char *name, comm_backend_kind *b);

/* nccl: the CUDA stream that produces and consumes the buffers. Each allreduce's
 * first device work waits for what was queued on it before the start call (an
 * event); a completed op's result is visible to every stream. NULL (the default):
 * no wait, the caller has synchronised before starting. No-op on mpi. */
status comm_set_stream(comm *c, cuda_stream s);

/* The ranks the last timeout named as not arrived, e.g. "1" or "2-3,5" ("" if none). */
const char *comm_late_ranks(const comm *c);

/* How hier exchanges data inside this rank's node: "cma" (peers' buffers read in
 * place), "copy" (through node shared memory), "none" (a node of one), "nccl". */
const char *comm_hier_exchange(const comm *c);

const char *comm_algo_name(comm_algo algo);
/* "auto|mpi|flat|hier|ring" -> algo; false when the name is unknown. */
bool comm_algo_parse(const char *name, comm_algo *algo);

/* Blocking allreduce with the deadline of the options. Up to COMM_BLOCKING_MAX_BYTES
 * with algorithm mpi (named or auto's choice) it is OpenMPI's blocking MPI_Allreduce,
 * after the ops in flight complete, guarded by the runtime's watchdog (comm.c). */
status comm_allreduce(comm *c, void *buf, size_t count, reduce_dtype dt, reduce_op op, comm_algo algo);

/* Non-blocking: start, then test (progress) or wait. Ops must be started in the
 * same order on every rank; they may complete in any order. */
status comm_allreduce_start(comm *c, comm_op *o, void *buf, size_t count, reduce_dtype dt,
                            reduce_op op, comm_algo algo);
/* Sum of scale * x over ranks. nccl: each input is multiplied on the device before
 * the sum (NCCL's pre-multiplied sum; 1/world averages, exactly for power-of-two
 * worlds); mpi: the sum, then each element times scale in double, rounded once. */
status comm_allreduce_start_scaled(comm *c, comm_op *o, void *buf, size_t count, reduce_dtype dt, double scale,
                                   comm_algo algo);
status comm_test(comm *c, comm_op *o, bool *done);
/* The phases of o's last allreduce, in order, complete once o is (*n of them, *lost
 * more that did not fit; either pointer may be NULL for the count). A phase that
 * waited for the peers (a node barrier, a message) includes the wait. */
const comm_phase *comm_op_phases(const comm_op *o, int *n, int *lost);
/* "flat", "intra_reduce_scatter", "inter_allreduce", "intra_allgather". */
const char *comm_phase_name(comm_phase_kind k);
status comm_wait(comm *c, comm_op *o);
/* Advances every op in flight without blocking (one pass); an op is complete when
 * its `active` is 0. Checks the deadline of the oldest op. */
status comm_progress(comm *c);
/* Releases an op's scratch. An op still in flight (after a failed wait) keeps it:
 * MPI may still write there, and the job is ending anyway. */
void comm_op_free(comm_op *o);

/* ---- vector payloads on a group: comm_group ------------------------------------
 * Every vector that is not a dense gradient bucket — DGC-Pro's sparse exchange, ZeRO's
 * reduce-scatter and all-gather, tensor-parallel sums, pipeline activations and tied
 * gradients — travels through these ops, on a group of ranks (the world, a node, the
 * peers, or a grid's tp/pp/dp group: comm/grid.h). They follow the allreduce ops'
 * shape: start, then test or wait, every wait bounded by the group's deadline; a
 * missed deadline names the group and its members (world ranks) and returns
 * STATUS_TIMEOUT. Blocking forms start and wait. Ops on one group must be started in
 * the same order on every member; each is one backend primitive (comm_impl.h):
 *   mpi   the collective of the same name on the members' communicator itself (not a
 *         duplicate: the results, and their reduction order, are the MPI library's,
 *         exactly as the control plane's calls were), host buffers
 *   nccl  NCCL on a communicator of its own over the members, DEVICE buffers
 * Scalars and decisions (a loss sum, a vote, a size agreement) stay on comm/ctl.h. */
typedef struct comm_group comm_group;  /* opaque: backend and members live in comm_impl.h */

typedef struct comm_group_options {
    comm_backend_kind backend; /* mpi (host buffers) or nccl (device buffers) */
    double timeout_s;      /* deadline of every wait in seconds; 0 disables it */
    const char *name;      /* what the group is, for messages ("dgc peers"); a literal */
    watchdog *wd;          /* the runtime's watchdog (or NULL): a wait shows in this rank's beacon */
} comm_group_options;

/* One op in flight on a group. Embed it where it is used; it owns nothing. */
typedef struct comm_vop {
    int active;            /* started and not yet complete */
    int nreq;              /* backend requests in flight */
    uint64_t req[2];       /* backend request handles (send and receive of an exchange) */
    const char *what;      /* "allgatherv", for messages */
    double deadline;       /* absolute MPI_Wtime deadline, 0 = none */
} comm_vop;

/* A group over `members` (a communicator every member passes, MPI_COMM_NULL: none,
 * *out NULL). mpi: local, nothing is communicated; nccl: collective over members
 * (its NCCL communicator). STATUS_USAGE when the backend cannot (nccl without CUDA). */
status comm_group_init(comm_group **out, MPI_Comm members, const comm_group_options *o);
void comm_group_free(comm_group *g);
int comm_group_rank(const comm_group *g);
int comm_group_size(const comm_group *g);
/* A new deadline for the group's later ops (seconds, 0: none). */
void comm_group_set_timeout(comm_group *g, double timeout_s);
/* Bytes this rank's ops put on the wire so far, by the bus model of nccl-tests
 * (docs/benchmarks.md): allreduce 2(n-1)/n of the buffer, reduce-scatter and
 * all-gather (n-1)/n of the whole, an all-to-all or a send what leaves this rank. */
uint64_t comm_group_bytes(const comm_group *g);

/* buf[count] reduced over the group, in place. */
status comm_group_allreduce_start(comm_group *g, comm_vop *v, void *buf, size_t count, reduce_dtype dt,
                                  reduce_op op);
/* send holds every member's block in member order (counts[r] elements each, r's
 * block first at the sum of the counts before it); recv[counts[my rank]] gets my
 * block reduced over the group. */
status comm_group_reduce_scatter_start(comm_group *g, comm_vop *v, const void *send, void *recv,
                                       const int *counts, reduce_dtype dt, reduce_op op);
/* Element size esz bytes (1, 2, 4 or 8: data are moved, never combined). Member r's
 * counts[r] elements land at recv + displs[r] elements on every member; send NULL:
 * in place, my block is already at my displacement in recv. */
status comm_group_allgatherv_start(comm_group *g, comm_vop *v, const void *send, void *recv, const int *counts,
                                   const int *displs, size_t esz);
/* scounts[r] elements from send + sdispls[r] to member r; rcounts[r] from r into
 * recv + rdispls[r] (elements of esz bytes). */
status comm_group_alltoallv_start(comm_group *g, comm_vop *v, const void *send, const int *scounts,
                                  const int *sdispls, void *recv, const int *rcounts, const int *rdispls, size_t esz);
/* Point to point: send_bytes to member `dest` with send_tag and recv_bytes from member
 * `source` with recv_tag, waited on together (a peer of -1, or 0 bytes, leaves out that
 * half): the pipeline's activations and their gradients. (nccl matches a pair's
 * messages in call order; the tags are for mpi.) */
status comm_group_sendrecv_start(comm_group *g, comm_vop *v, const void *send, size_t send_bytes, int dest,
                                 int send_tag, void *recv, size_t recv_bytes, int source, int recv_tag);
status comm_group_test(comm_group *g, comm_vop *v, bool *done);
status comm_group_wait(comm_group *g, comm_vop *v);

/* Blocking forms: start and wait. */
status comm_group_allreduce(comm_group *g, void *buf, size_t count, reduce_dtype dt, reduce_op op);
status comm_group_reduce_scatter(comm_group *g, const void *send, void *recv, const int *counts, reduce_dtype dt,
                                 reduce_op op);
status comm_group_allgatherv(comm_group *g, const void *send, void *recv, const int *counts, const int *displs,
                             size_t esz);
status comm_group_alltoallv(comm_group *g, const void *send, const int *scounts, const int *sdispls, void *recv,
                            const int *rcounts, const int *rdispls, size_t esz);
status comm_group_sendrecv(comm_group *g, const void *send, size_t send_bytes, int dest, int send_tag, void *recv,
                           size_t recv_bytes, int source, int recv_tag);

/* Bytes the comm's allreduces put on the wire so far (each 2(n-1)/n of its buffer, the
 * bus model above): with comm_group_bytes, what a training step costs. */
uint64_t comm_bytes(const comm *c);

/* The algorithm AUTO resolves to for a message of `bytes` in comm_allreduce, and for an
 * op started non-blocking (comm_allreduce_start, the buckets) — they differ where mpi
 * wins only as OpenMPI's blocking call (nccl: always hier). */
comm_algo comm_auto_choice(const comm *c, size_t bytes);
comm_algo comm_auto_choice_start(const comm *c, size_t bytes);

/* Measures mpi, flat, hier and ring at each size (the fastest of `reps` interleaved
 * rounds, each the slowest rank's time) and records the fastest in the auto table, twice:
 * for comm_allreduce (mpi timed as its blocking call) and for started ops (mpi timed as
 * MPI_Iallreduce). A Nebula algorithm replaces OpenMPI's only when it is at least 5%
 * faster. Collective.
 * mpi backend only (nccl has one algorithm: STATUS_USAGE). */
status comm_tune(comm *c, const size_t *bytes, int nsizes, int reps);
/* The auto table as JSON, written atomically by rank 0 / read by every rank. */
status comm_tune_save(const comm *c, const char *path);
/* The same with a "provenance" object (base/provenance.h; NULL: none), which the
 * loader ignores. */
struct json_t;
status comm_tune_save_with(const comm *c, const char *path, const struct json_t *provenance);
status comm_tune_load(comm *c, const char *path);

#endif
