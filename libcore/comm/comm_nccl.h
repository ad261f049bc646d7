/* comm_nccl — gradient allreduce on device memory: NCCL inside a node, MPI between
 * nodes, every wait bounded by a deadline.
 *
 * One allreduce of `count` floats on the GPU, cut into buckets (boundaries fixed by
 * the bucket size and the node size, so the reduction order is fixed for a given
 * world layout). Per bucket, on a communication stream that first waits for the
 * caller's `ready` event:
 *   reduce-scatter  ncclReduceScatter over the node: local rank lr owns part lr;
 *   inter           MPI allreduce of that part among the ranks with the same local
 *                   rank on every node (runtime's peers), run by the host once the
 *                   stream reached it: device pointers when MPI is CUDA-aware,
 *                   otherwise through pinned host staging slots;
 *   allgather       ncclAllGather over the node, in place.
 * While the host runs the MPI step of bucket b, the GPU reduce-scatters later buckets
 * and all-gathers earlier ones.
 *
 * The one design decision: the order of NCCL calls is fixed before any of them runs.
 * All reduce-scatters are queued at start, the all-gathers afterwards in bucket order,
 * and only one allreduce is in flight at a time (start, then wait), so host timing can
 * never make two ranks of a node issue NCCL collectives in different orders (which
 * would hang or mix buckets).
 *
 * The node communicator is non-blocking (ncclConfig.blocking = 0): init, enqueues and
 * the wait poll instead of blocking, so a missing rank costs a deadline, after which
 * the node communicator is aborted, the ranks that did not arrive are named (the
 * probe of comm_diag.c) and STATUS_TIMEOUT is returned.
 *
 * Without CUDA (NEBULA_CUDA undefined) every function compiles; init fails with
 * "built without CUDA". */
#ifndef NEBULA_COMM_NCCL_H
#define NEBULA_COMM_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda/device.h"
#include "base/log.h"
#include "base/runtime.h"

#define COMM_NCCL_BUCKET_BYTES (25u << 20) /* default bucket: PyTorch DDP's 25 MiB */
#define COMM_NCCL_STAGE_SLOTS 4            /* staged MPI steps in flight (pinned slots) */

typedef struct comm_nccl comm_nccl; /* opaque */

typedef struct comm_nccl_options {
    size_t max_count;      /* largest allreduce, floats: sizes the events and the staging */
    size_t bucket_bytes;   /* bytes per bucket; 0 = COMM_NCCL_BUCKET_BYTES */
    bool average;          /* divide by the world size (each input is pre-scaled by 1/size) */
    bool force_staged;     /* stage through pinned memory even when MPI is CUDA-aware */
    double timeout_s;      /* deadline of init and of a wait without its own; 0 = none */
} comm_nccl_options;

/* Collective over the world. Makes rt->gpu the calling thread's current device;
 * creates the node's NCCL communicator (bootstrapped over MPI), a duplicate of the
 * peers communicator, streams, events and pinned staging, all sized here.
 * STATUS_USAGE when this rank has no GPU, two ranks of a node share one GPU, or nodes
 * differ in size; STATUS_TIMEOUT when NCCL init misses the deadline; STATUS_PEER on
 * an NCCL or CUDA failure. */
status comm_nccl_init(comm_nccl **out, const runtime *rt, const comm_nccl_options *o);

/* After a failed wait, frees only local host resources (device work or MPI may still
 * reference the rest, and the job is ending). */
void comm_nccl_free(comm_nccl *c);

/* "nccl 2.28.9 (4 nodes of 2, MPI staged through 4 pinned slots of 12800 KiB, buckets 25600 KiB, sum)" */
const char *comm_nccl_describe(const comm_nccl *c);

/* Starts an in-place allreduce of dev_buf[0..count) (device memory, untouched by the
 * caller until comm_nccl_wait returns) after the work before `ready` on the caller's
 * stream (NULL: no wait). Every rank starts the same counts in the same order; one
 * allreduce at a time. count <= options.max_count. */
status comm_nccl_allreduce_start(comm_nccl *c, float *dev_buf, size_t count, cuda_event ready);

/* Advances the host steps (MPI, queueing all-gathers) without blocking; call it
 * between layers so the inter-node step does not wait for comm_nccl_wait. */
status comm_nccl_progress(comm_nccl *c);

/* Waits until the allreduce is complete on the device (results visible to every
 * stream afterwards). timeout_s > 0: seconds from now; <= 0: the options' timeout
 * (0 there: no deadline). On the deadline: names the ranks that did not arrive,
 * aborts the NCCL communicator, STATUS_TIMEOUT. An NCCL asynchronous error or a
 * CUDA failure: STATUS_PEER. After any failure the communicator is unusable. */
status comm_nccl_wait(comm_nccl *c, double timeout_s);

/* The ranks the last timeout named as not arrived, e.g. "1" or "2-3,5" ("" if none). */
const char *comm_nccl_late_ranks(const comm_nccl *c);

#endif
