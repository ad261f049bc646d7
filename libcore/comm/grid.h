/* grid — the process grid of hybrid parallelism: the world as tp x pp x dp ranks
 * (parallel.tp, parallel.pp, parallel.dp), and a communicator for each group.
 *
 *   tp  tensor parallel: the ranks that hold one layer's shards (Megatron's column-
 *       and row-parallel linears) and reduce activations twice per block each way
 *   pp  pipeline parallel: the stages of one model replica, which pass activations on
 *   dp  data parallel: the replicas, which average gradients (buckets, ZeRO, DGC-Pro)
 *
 * The one design decision: the rank order is tp fastest, then pp, then dp
 * (rank = t + tp * (p + pp * d)), as Megatron-LM orders tensor parallelism innermost.
 * With ranks placed node by node, a tensor-parallel group is consecutive ranks, so it
 * stays inside a node (shared memory, NVLink) whenever tp divides the ranks per node,
 * pipeline neighbours come next, and the data-parallel groups, the ones with the
 * bandwidth-tolerant traffic (one allreduce per step, overlapped with the backward),
 * span the nodes. grid_init says when a tp group has to cross a node.
 *
 * Each group has an MPI communicator for the control plane (comm/ctl.h: scalars and
 * decisions), a comm_group on it for the vector payloads (comm.h: activations'
 * reductions, the pipeline's sends, ZeRO's shards, each with a deadline) and the dp
 * group also a runtime view (runtime_sub_init), so comm_init builds the gradient path's algorithms
 * (flat, hier, ring) over the replicas as it does over the world. */
#ifndef NEBULA_COMM_GRID_H
#define NEBULA_COMM_GRID_H

#include <stdbool.h>
#include <stdio.h>

#include "base/log.h"
#include "base/runtime.h"
#include "comm.h"

/* Config keys of [parallel], for an app's schema. */
#define GRID_CONFIG_KEYS                                                                             \
    { "parallel", "tp", CONFIG_TYPE_INT, "1", .min = 1, .max = 4096,                                \
      .help = "tensor-parallel ranks per layer (Megatron column/row-parallel; must divide the heads)" }, \
    { "parallel", "pp", CONFIG_TYPE_INT, "1", .min = 1, .max = 4096,                                \
      .help = "pipeline stages (at most the model's blocks)" },                                     \
    { "parallel", "stages", CONFIG_TYPE_STRING, "",                                                  \
      .help = "blocks per pipeline stage, e.g. \"7,5\" (empty: balanced by counted FLOPs)" },        \
    { "parallel", "dp", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 20,                             \
      .help = "data-parallel replicas (0: the world size / (tp x pp)); tp x pp x dp = world size" }

/* The shape asked for: 0 for dp means "what the world leaves". */
typedef struct grid_shape {
    int tp, pp, dp;
} grid_shape;

struct config;
/* The [parallel] keys of cfg. */
void grid_shape_from_config(const struct config *cfg, grid_shape *s);

/* Fills dp when it is 0 and checks tp x pp x dp = world. STATUS_INPUT with a message
 * that names the keys (and `origin`, e.g. "config.ini:12", when not NULL), the product,
 * the world size and the divisors that would fit. */
status grid_shape_resolve(grid_shape *s, int world, const char *origin);

/* "tp2 x pp1 x dp2" (the layout name the tables use). */
void grid_shape_name(const grid_shape *s, char *buf, size_t cap);

typedef struct grid {
    grid_shape shape;      /* resolved: tp x pp x dp = world */
    int tp_rank;           /* my coordinate in the tensor-parallel group, 0..tp-1 */
    int pp_rank;           /* my pipeline stage, 0..pp-1 */
    int dp_rank;           /* my replica, 0..dp-1 */
    MPI_Comm tp_comm;      /* ranks with my (pp, dp): rank in it = tp_rank */
    MPI_Comm pp_comm;      /* ranks with my (tp, dp): rank in it = pp_rank */
    MPI_Comm dp_comm;      /* ranks with my (tp, pp): rank in it = dp_rank */
    comm_group *tp_group;  /* vector payloads on tp_comm (comm.h; mpi backend, the deadline below) */
    comm_group *pp_group;  /* on pp_comm */
    comm_group *dp_group;  /* on dp_comm */
    runtime dp_rt;         /* the dp group as a runtime (its nodes: the world's restricted to it) */
    bool tp_in_node;       /* every tp group lies inside one (virtual) node */
    double timeout_s;      /* deadline of the groups' control-plane calls (comm.timeout) */
    watchdog *wd;          /* the runtime's */
} grid;

/* World rank of the grid coordinates (t, p, d). */
static inline int grid_rank_of(const grid_shape *s, int t, int p, int d)
{
    return t + s->tp * (p + s->pp * d);
}

/* Splits the world into the groups of a resolved shape. Collective over rt->world. */
status grid_init(grid *g, const runtime *rt, const grid_shape *shape, double timeout_s);
/* Rank 0 prints the grid: the shape, each group kind's members and whether they stay
 * inside a node, and a warning when a tp group crosses one. Collective. */
void grid_print(const grid *g, const runtime *rt, FILE *f);
void grid_free(grid *g);

#endif
