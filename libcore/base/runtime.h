/* runtime — MPI start-up, rank placement and the communicators every module shares.
 *
 * MPI_COMM_WORLD is split into a node communicator (MPI_COMM_TYPE_SHARED, or a
 * virtual node of `ranks_per_node` ranks so one host can test every hierarchical
 * path), a leaders communicator (local rank 0 of each node) and a peers
 * communicator (same local rank on every node). Ranks are bound to cores with
 * hwloc when the launcher left them unbound. Rank 0 prints the placement table. */
#ifndef NEBULA_RUNTIME_H
#define NEBULA_RUNTIME_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"
#include "watchdog.h"

/* The wire protocol: what ranks send each other (message layouts, collective sequences,
 * the start-up exchange). A build speaks every version from NEBULA_PROTOCOL_OLDEST to
 * NEBULA_PROTOCOL_VERSION; runtime_init refuses a job whose ranks share none. Bump the
 * version with any change another build could misread; raise OLDEST only when the old
 * behaviour is no longer kept (docs/design.md#versions). */
#define NEBULA_PROTOCOL_VERSION 1
#define NEBULA_PROTOCOL_OLDEST  1

typedef enum runtime_bind {
    RUNTIME_BIND_AUTO = 0, /* bind to a core only if the launcher did not bind */
    RUNTIME_BIND_CORE,     /* always bind to one core (by local rank on the host) */
    RUNTIME_BIND_NONE,     /* leave affinity as the launcher set it */
} runtime_bind;

typedef struct runtime_options {
    int ranks_per_node;    /* >0: virtual nodes of this many ranks; 0: NEBULA_RANKS_PER_NODE or real nodes */
    runtime_bind bind;     /* core binding policy */
    int gpus;              /* GPUs visible on this host (nn/device.h: device_gpu_count()); a rank is
                              given GPU host_local_rank % gpus; 0: none (rt->gpu = -1) */
    double timeout_s;      /* comm.timeout: starts the watchdog (base/watchdog.h), which bounds the
                              start-up splits and MPI_Finalize too; 0: no watchdog */
} runtime_options;

typedef struct runtime {
    MPI_Comm world;        /* duplicate of MPI_COMM_WORLD */
    MPI_Comm node;         /* ranks of my (virtual) node */
    MPI_Comm leaders;      /* local rank 0 of each node; MPI_COMM_NULL on other ranks */
    MPI_Comm peers;        /* ranks with my local rank, one per node, ordered by node id */
    int rank;              /* world rank */
    int size;              /* world size */
    int node_id;           /* index of my (virtual) node, 0..nnodes-1 */
    int nnodes;            /* number of (virtual) nodes */
    int local_rank;        /* rank within my node */
    int local_size;        /* ranks on my node */
    int max_local_size;    /* largest node (nodes may differ in size) */
    int ranks_per_node;    /* virtual node size, 0 when nodes are real hosts */
    int host_local_rank;   /* rank among the processes on this physical host */
    int host_size;         /* processes of this job on this physical host */
    int cpu_sharers;       /* ranks of this job on this kernel whose CPU sets overlap mine, me included:
                              network namespaces and containers on one machine count, though MPI
                              sees them as separate hosts */
    bool oversubscribed;   /* more ranks on this host (or kernel) than hardware threads: waits must yield */
    int gpu;               /* CUDA device index, -1 when none */
    bool bound_by_us;      /* this process was bound by runtime_init */
    char host[64];         /* short host name */
    char cpus[64];         /* CPU list this rank is bound to, e.g. "0-1" */
    double t_start;        /* MPI_Wtime at init */
    watchdog *wd;          /* this rank's watchdog (a pointer: modules guard their blocking calls
                              through a const runtime); NULL when opt.timeout_s is 0 */
    double timeout_s;      /* opt.timeout_s: the watchdog's deadline for runtime's own calls */
    int protocol;          /* the wire protocol version the job runs: the newest every rank speaks */
} runtime;

/* Config keys of [runtime], for an app's schema (needs <math.h> for INFINITY). */
#define RUNTIME_CONFIG_KEYS                                                                          \
    { "runtime", "ranks_per_node", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 20,                  \
      .help = "virtual nodes of N ranks for one-host testing (0: real nodes; env NEBULA_RANKS_PER_NODE)" }, \
    { "runtime", "bind", CONFIG_TYPE_ENUM, "auto", .choices = "auto|core|none",                    \
      .help = "core binding: auto binds only when the launcher did not" }

struct config;
/* Fills options from the [runtime] keys of cfg. */
void runtime_options_from_config(const struct config *cfg, runtime_options *opt);

/* Before MPI_Init: guess the rank from the launcher's environment so that usage
 * errors are printed once, not once per rank. */
void runtime_preinit(const char *prog);
/* An exit before runtime_init (a usage error every rank finds alike): returns code. Under
 * a launcher with more than one rank, a failing exit first meets the other ranks (MPI_Init,
 * a barrier, MPI_Finalize): a rank that exits ahead of rank 0 would otherwise let the
 * launcher kill rank 0 before its message is out, leaving only the launcher's lines. The
 * wait is bounded (10 s): ranks that did not fail never join, and then this one exits
 * without finalizing, which ends the job as an exit without the wait would. */
int runtime_exit_early(int code);

/* MPI_Init_thread (FUNNELED), communicators, binding, launch checks.
 * STATUS_PEER when the launch is inconsistent (for example singletons under srun). */
status runtime_init(runtime *rt, int *argc, char ***argv, const runtime_options *opt);

/* Collective over rt->world, called by runtime_init before the communicators are split:
 * every rank's build string (cli_version) and protocol range are exchanged; rt->protocol
 * is set to the newest version every rank speaks, and rank 0 logs one line listing the
 * builds when they differ. STATUS_USAGE on every rank, rank 0 naming each kind of rank
 * (build, protocol range, ranks, hosts), when no version is common; STATUS_INPUT for a
 * malformed test hook. Test hooks: NEBULA_TEST_BUILD replaces this rank's build string,
 * NEBULA_TEST_PROTOCOL ("N" or "LO-HI") its protocol range. */
status runtime_check_versions(runtime *rt);

/* Rank 0 prints host, node id, local rank, bound cores and GPU of every rank. */
void runtime_print_placement(const runtime *rt, FILE *f);

/* A runtime over a subset of the ranks (`members`, a communicator every member passes,
 * e.g. a data-parallel group of the process grid, comm/grid.h): its world is a duplicate
 * of `members`, its nodes the parent's nodes restricted to the members (ordered by the
 * parent's node id), its leaders and peers split the same way; host, binding, GPU and
 * watchdog are the parent's. What lets comm_init build every algorithm (flat, hier,
 * ring) over a group as over the world. Collective over `members`. Free it with
 * runtime_sub_free (never runtime_free: it does not own MPI). */
void runtime_sub_init(runtime *sub, const runtime *rt, MPI_Comm members);
void runtime_sub_free(runtime *sub);

/* Frees the communicators and finalizes MPI (guarded by the watchdog), then stops it. */
void runtime_free(runtime *rt);

/* Ends the job with the status's exit code. A timeout, lost peer, I/O or memory
 * failure aborts the whole job (other ranks may be stuck in communication); other
 * statuses are reached by every rank alike, which finalize and exit. */
_Noreturn void runtime_exit(runtime *rt, status st);
/* True for the statuses runtime_exit ends with MPI_Abort: call runtime_exit before
 * freeing communicators, whose collective frees could wait for a stuck rank. */
bool runtime_must_abort(status st);
/* The OpenMP and BLAS threads of a rank: `configured` when > 0, otherwise the cores of
 * its binding shared among the ranks bound to them (torchrun's rule: more threads than
 * cores fight over them; GPT-2 at 4 ranks on 2 cores stepped 2.3x slower with 2 threads
 * per rank than with 1). At least 1. */
int runtime_threads(const runtime *rt, int64_t configured);

#endif
