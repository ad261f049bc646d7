/* tp — a model's tensor-parallel group (Megatron-LM, Shoeybi et al. 2019): the ranks
 * that hold the shards of every split tensor (param.h: param_add_split) and the two
 * reductions per transformer block each way that make their partial results whole.
 *
 *   f (column-parallel input):  forward identity, backward SUM of the input gradient
 *   g (row-parallel output):    forward SUM of the partial outputs, backward identity
 *
 * The one design decision: the reductions are a blocking allreduce on the tp group
 * (comm.h's comm_group, the grid's tp_group), with the run's deadline — activations
 * are needed right away by the next kernel, so nothing overlaps them — and a failure
 * (a timeout, a lost peer) is kept in the context rather than returned through every
 * layer call: the model skips the rest of its communication and the caller reads
 * nn_tp_status once after its forward or backward. */
#ifndef NEBULA_NN_TP_H
#define NEBULA_NN_TP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/log.h"
#include "comm/comm.h"

typedef struct nn_tp {
    int size;              /* ranks in the group; 1: no tensor parallelism */
    int rank;              /* my shard, 0..size-1 */
    comm_group *group;     /* the tp group (grid.h: tp_group), with its deadline; NULL when size is 1 */
    status failed;         /* the first failure of a reduction; STATUS_OK while none */
} nn_tp;

/* The context of no tensor parallelism (size 1: every call below is a no-op). */
static inline nn_tp nn_tp_none(void)
{
    return (nn_tp){ .size = 1, .rank = 0, .group = NULL, .failed = STATUS_OK };
}

/* buf[n] summed over the group, in place (after a failure: nothing). */
static inline void nn_tp_sum(nn_tp *t, float *buf, size_t n)
{
    if (t->size == 1 || t->failed != STATUS_OK) return;
    CHECK(n <= (size_t)INT32_MAX, "nn_tp_sum: a reduction of more than 2^31 floats");
    t->failed = comm_group_allreduce(t->group, buf, n, REDUCE_DTYPE_F32, REDUCE_OP_SUM);
}

static inline void nn_tp_sum_f64(nn_tp *t, double *buf, size_t n)
{
    if (t->size == 1 || t->failed != STATUS_OK) return;
    CHECK(n <= (size_t)INT32_MAX, "nn_tp_sum_f64: a reduction of more than 2^31 doubles");
    t->failed = comm_group_allreduce(t->group, buf, n, REDUCE_DTYPE_F64, REDUCE_OP_SUM);
}

static inline void nn_tp_max(nn_tp *t, float *buf, size_t n)
{
    if (t->size == 1 || t->failed != STATUS_OK) return;
    CHECK(n <= (size_t)INT32_MAX, "nn_tp_max: a reduction of more than 2^31 floats");
    t->failed = comm_group_allreduce(t->group, buf, n, REDUCE_DTYPE_F32, REDUCE_OP_MAX);
}

/* A pipeline stage (Huang et al. 2019; Narayanan et al. 2021's 1F1B schedule): the blocks
 * [first, end) of a model, the embedding with block 0 and the head with the last block
 * (GPT-2's tied wte on both ends), and `slots` sets of activations, one per micro-batch
 * in flight at once (1F1B on stage s of p: min(p - s, micro-batches)). end 0: the whole
 * model, one set. */
typedef struct nn_stage {
    int first, end;
    int slots;
} nn_stage;

static inline nn_stage nn_stage_whole(void)
{
    return (nn_stage){ .first = 0, .end = 0, .slots = 1 };
}

/* The first failure since the last call, which clears it. */
static inline status nn_tp_status(nn_tp *t)
{
    status st = t->failed;
    t->failed = STATUS_OK;
    return st;
}

#endif
