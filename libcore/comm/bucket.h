/* bucket — gradient buckets over one flat gradient buffer: non-blocking allreduce
 * of contiguous slices while backward is still running (PyTorch DDP's Reducer,
 * Horovod's tensor fusion; Li et al., "PyTorch Distributed", VLDB 2020, §3.2).
 *
 * The one design decision: a bucket is an (offset, count) slice of the flat buffer,
 * never a gather. Buckets are filled in REVERSE layer order, because backward
 * produces the last layer's gradients first: bucket 0 holds the last tensors. Gaps
 * between tensors inside a bucket's range (alignment padding) travel with it; gaps
 * at a bucket boundary belong to no bucket and are left untouched.
 *
 * Layout rules (bucket_init):
 *   - a bucket closes when its slice reaches bucket_bytes; a tensor that would take
 *     it past bucket_bytes starts the next bucket, so a tensor of bucket_bytes or
 *     more gets a bucket of its own;
 *   - tensors under BUCKET_SMALL_BYTES never travel alone: a single small tensor
 *     that would close alone joins the next tensor's bucket, and a lone small
 *     trailing tensor (tensor 0) joins the previous bucket. Only a model of one
 *     tensor has a single small bucket. Such merges are the only way a bucket of
 *     several tensors exceeds bucket_bytes (by one small tensor at either end).
 *
 * Step protocol: backward calls bucket_mark_ready(t) as each tensor's gradient is
 * final; a bucket whose tensors are all ready starts its allreduce, but only after
 * every lower-numbered bucket has started, so every rank starts the same
 * collectives in the same order (comm.h) whatever order its tensors were marked in.
 * bucket_progress (between layers) and every mark advance the buckets in flight.
 * bucket_wait_all waits for the rest, scales each slice, and rearms the manager.
 *
 * Device buffers: with an nccl comm (comm_on_device) `grads` is device memory; the
 * same protocol holds, and each slice is scaled by the allreduce itself
 * (comm_allreduce_start_scaled), never by the host.
 *
 * Memory: everything is sized in bucket_init; mark, progress and wait allocate
 * nothing (each bucket's comm_op sizes its scratch at first use and reuses it).
 * After a status other than STATUS_OK the step is lost: the app ends the job. */
#ifndef NEBULA_BUCKET_H
#define NEBULA_BUCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "comm.h"

#define BUCKET_SMALL_BYTES   8192u              /* tensors below this are always fused */
#define BUCKET_DEFAULT_BYTES (25u * 1024 * 1024) /* DDP's bucket_cap_mb = 25 */

typedef enum bucket_state {
    BUCKET_STATE_FILLING = 0, /* some tensors not yet marked ready this step */
    BUCKET_STATE_COMPLETE,    /* all tensors ready, waiting for an earlier bucket to launch */
    BUCKET_STATE_INFLIGHT,    /* allreduce started */
    BUCKET_STATE_DONE,        /* allreduce finished and slice scaled */
} bucket_state;

typedef struct bucket {
    size_t offset;         /* first element of the slice in the flat buffer */
    size_t count;          /* elements of the slice, inner gaps included */
    int first_tensor;      /* lowest tensor index in the bucket (produced last in backward) */
    int last_tensor;       /* highest tensor index (produced first in backward) */
    int pending;           /* tensors of this bucket not yet marked ready this step */
    bucket_state state;    /* where the bucket is in the current step */
    comm_op op;            /* this bucket's allreduce; owns its reusable scratch */
    double t_start;        /* MPI_Wtime when its allreduce started this step (s) */
    double t_done;         /* MPI_Wtime when it was seen finished (a test or the wait; s): the profiler's
                              reduction time is t_done - t_start, an upper bound by the polling gap */
} bucket;

typedef struct bucket_manager {
    comm *c;               /* communicator the allreduces run on (not owned) */
    void *grads;           /* the flat gradient buffer (not owned), reduced in place */
    reduce_dtype dtype;    /* element type of grads */
    size_t esz;            /* bytes of one element */
    comm_algo algo;        /* allreduce algorithm of every bucket (AUTO: per bucket size) */
    double scale;          /* applied to each slice after its allreduce; 1.0 skips it */
    bool on_device;        /* grads is device memory (nccl comm): the allreduce applies scale */
    size_t bucket_bytes;   /* the size at which a bucket closes */
    int ntensors;          /* entries of the tensor table */
    int nbuckets;          /* buckets in the layout */
    bucket *buckets;       /* [nbuckets] in launch order */
    int *tensor_bucket;    /* [ntensors] bucket that holds each tensor */
    unsigned char *ready;  /* [ntensors] 1 when marked ready this step */
    int nready;            /* tensors marked ready this step */
    int next_launch;       /* buckets [0, next_launch) have started this step */
    int next_done;         /* buckets [0, next_done) have finished and been scaled */
    int *launched;         /* [nbuckets] bucket indices in the order they started, for tests and logs */
    int nlaunched;         /* entries of launched for the current (or last finished) step */
    long steps;            /* steps completed by bucket_wait_all */
} bucket_manager;

/* Lays out the buckets of a tensor table (offsets and counts in elements, sorted by
 * offset, non-overlapping, every count > 0; violations are bugs and die; the table
 * is not kept). bucket_bytes 0 means BUCKET_DEFAULT_BYTES. `scale`
 * multiplies each reduced slice (1/world for averaging); integer dtypes need 1.
 * STATUS_NOMEM when an allocation fails. Collective only in the sense that every
 * rank must pass the same table, size and algorithm. */
status bucket_init(bucket_manager *bm, comm *c, void *grads, reduce_dtype dt, const size_t *offsets,
                   const size_t *counts, int ntensors, size_t bucket_bytes, comm_algo algo, double scale);

/* Backward finished tensor `tensor`: launches every bucket that became ready in
 * bucket order, then progresses the buckets in flight. Marking twice in a step dies. */
status bucket_mark_ready(bucket_manager *bm, int tensor);

/* Tests the buckets in flight without blocking; call between layers. */
status bucket_progress(bucket_manager *bm);

/* Every tensor must have been marked (otherwise dies naming the first unmarked one).
 * Waits for every bucket (each wait bounded by comm's deadline), applies `scale`,
 * and resets the ready state for the next step. */
status bucket_wait_all(bucket_manager *bm);

/* Releases the layout and each bucket's scratch. Call with no bucket in flight
 * (after bucket_wait_all or before any mark); after a failed step the scratch of
 * buckets still in flight is left to process exit, as MPI may still write it. */
void bucket_free(bucket_manager *bm);

int bucket_count(const bucket_manager *bm);
/* Slice and tensors of bucket b; any output pointer may be NULL. */
void bucket_range(const bucket_manager *bm, int b, size_t *offset, size_t *count, int *first_tensor,
                  int *last_tensor);
/* One line per bucket: index, tensor range and count, bytes. */
void bucket_print(const bucket_manager *bm, FILE *f);

#endif
