/* zero — ZeRO stage 1 (Rajbhandari et al., SC'20): optimizer-state sharding over the
 * data-parallel ranks. The gradient is reduce-scattered to the owners (each rank
 * receives the reduced gradient of its own shards only, zero_reduce_scatter_grads);
 * each rank keeps the moments (AdamW m and v, SGD momentum) of the shards it owns only,
 * in packed buffers of sum(owned) floats, updates only those parameters
 * (optim_*_step_ranges, bit-identical per element to the whole-buffer step), and one
 * all-gather gives every rank the full updated parameters again. Both travel on the
 * data-parallel group's comm_group (comm.h): G gradient bytes cost (n-1)/n G each way,
 * 2(n-1)/n G per step, where an allreduce of the gradient and the all-gather cost 3.
 * Across nodes (zero_use_nodes) both run in two levels, so that between nodes each
 * float crosses once each way, 2G per step as the hierarchical allreduce (zero_hier.c).
 *
 * Shards: every tensor of the table is cut into chunks of at most shard_numel floats
 * (never across a tensor, so per-tensor rules such as weight decay apply per shard).
 * A shard's identity is (FNV-1a of the tensor name, chunk index): independent of the
 * world size, the table's order and offsets.
 *
 * The one design decision: ownership is by consistent hashing (Karger et al., STOC'97),
 * not by cutting the flat buffer into N equal slices. Rank r has `vnodes` points
 * mix(r, v) on a 64-bit ring (splitmix64, a fixed integer hash: no RNG state, the same
 * on every rank with no communication); a shard belongs to the first point clockwise of
 * mix(its id). Going from N to M < N ranks only removes points, so every shard whose
 * owner is < M keeps it and only the removed ranks' shards move (about 1 - M/N of
 * them); going to M > N only adds points, so shards move only to the new ranks (about
 * 1 - N/M). Equal slices would move almost everything on any resize. With V points a
 * rank's share of the ring deviates by about 1/sqrt(V) from the mean: V = 256 (6%) puts
 * the largest share 7-11% above the mean at 2-8 ranks (64 points: 20-30% at 3-8), for
 * a ring of 256 x N points (3 MiB at 1024 ranks).
 *
 * Everything is sized at zero_init and zero_use_nodes; the step, the all-gather and the checkpoint
 * description allocate nothing. */
#ifndef NEBULA_ZERO_H
#define NEBULA_ZERO_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/log.h"
#include "comm/comm.h"
#include "optim.h"
#include "param.h"

#define ZERO_SHARD_NUMEL_DEFAULT 65536
#define ZERO_VNODES_DEFAULT      256
#define ZERO_PACK_NUMEL          (1u << 22)  /* the reduce-scatter's packing buffer: at most 16 MiB of floats */

/* splitmix64's finaliser (Steele et al., OOPSLA'14): a bijection of 64-bit integers. */
uint64_t zero_mix(uint64_t x);

/* The ring of `world` ranks with `vnodes` points each, sorted. */
typedef struct zero_ring {
    uint64_t *point;  /* [n] ring positions, ascending */
    int *rank;        /* [n] the rank of each point */
    int n;            /* world * vnodes */
} zero_ring;

/* STATUS_NOMEM (logged) when the ring cannot be allocated; dies on world < 1 or vnodes < 1. */
status zero_ring_init(zero_ring *ring, int world, int vnodes);
/* The rank owning `key`: the first point >= key, wrapping to the first point. */
int zero_ring_owner(const zero_ring *ring, uint64_t key);
void zero_ring_free(zero_ring *ring);

/* One shard: a chunk of one tensor. */
typedef struct zero_shard {
    int entry;        /* the tensor (table index) */
    int chunk;        /* chunk index within the tensor */
    size_t offset;    /* first float in the flat layout */
    size_t count;     /* floats, 1 .. shard_numel */
    uint64_t key;     /* ring position: mix(mix(name hash) + chunk) */
    int owner;        /* the owning rank */
    size_t gather;    /* first float in the all-gather buffer (the owner's block, offset order) */
} zero_shard;

/* The shards of `pt` (table order, then chunk order: ascending offsets) with their
 * keys; owners are not set. *shards is malloc'd. STATUS_NOMEM logged. */
status zero_shards_build(const param_table *pt, size_t shard_numel, zero_shard **shards, int *n);

typedef struct zero_options {
    size_t shard_numel;  /* most floats per shard (>= 1) */
    int vnodes;          /* points per rank on the ring (>= 1) */
    int moments;         /* packed buffers per owned float: 2 AdamW (m, v), 1 SGD momentum, 0 none */
    size_t pack_numel;   /* floats of one round of the reduce-scatter; 0: ZERO_PACK_NUMEL */
} zero_options;

/* One all-to-all of the two-level path (zero_hier.c), fixed at zero_use_nodes. */
typedef struct zero_hier_plan {
    int *sc, *sd, *rc, *rd;  /* [size] floats sent to and received from each rank, and where */
    int *send;               /* [nsend] the shards sent, in the send block's order (by receiver, then index) */
    int nsend;
} zero_hier_plan;

typedef struct zero {
    MPI_Comm comm;           /* the data-parallel communicator (not owned) */
    int rank, size;          /* in comm */
    zero_options opt;
    zero_ring ring;          /* this world size's ring */
    zero_shard *shards;      /* [nshards] every shard, ascending offsets */
    int nshards;
    optim_range *mine;       /* [nmine] the owned shards, ascending offsets, packed in that order */
    int nmine;
    size_t owned;            /* floats owned: the packed buffers' length */
    size_t numel;            /* floats in all shards (the model's parameter count) */
    float *m;                /* (owned) AdamW first moment / SGD momentum; NULL when moments == 0 */
    float *v;                /* (owned) AdamW second moment; NULL unless moments == 2 */
    int *counts, *displs;    /* [size] all-gather: each rank's owned floats and block start */
    comm_group *group;       /* the vector payloads on comm (mpi backend, host buffers) */
    size_t pack_numel;       /* floats of one round of the reduce-scatter (opt.pack_numel or ZERO_PACK_NUMEL) */
    float *pack;             /* (pack_numel + its share of mine) one round's packed gradient and my reduced
                                part; NULL on the two-level path */
    int *by_owner;           /* [nshards] shard indices by owner, then offset: each owner's block in order */
    int *rs_counts;          /* [size] one round's floats of each owner's block */
    /* the two-level path (zero_use_nodes, zero_hier.c) */
    bool hier;               /* several nodes with two ranks or more on one: reduce-scatter and all-gather
                                cross between nodes once per float each way */
    int nnodes;
    comm_group *node_group;  /* the stages inside nodes (on comm, counted apart): z->group's bytes are
                                then those between nodes */
    int *node_of, *lidx_of;  /* [size] each rank's node (0.., in node-id order) and local index */
    int *node_start, *node_rank;  /* [nnodes + 1], [size]: node n's ranks are node_rank[node_start[n] ..) */
    int nrounds, *round_first;    /* [nrounds + 1] the rounds' first shards */
    zero_hier_plan *hplan;   /* [nrounds * 4] each round's four stages */
    int *hpool;              /* the plans' arrays */
    int *hcur;               /* [size] one stage's receive cursors */
    const float **hsrc;      /* [size + 1] the operands of one shard's sum */
    float *hbuf;             /* (2 * hbuf_half) one round's send and receive */
    size_t hbuf_half;
    /* the moments' ranges, as a checkpoint writes and reads them */
    size_t *ck_offset, *ck_count, *ck_packed;  /* [nshards] */
    uint8_t *ck_mine;        /* [nshards] */
    param_shards ck;         /* points at the arrays above */
} zero;

/* Collective only in that every rank must pass the same table and options (nothing
 * is communicated). Builds the shards, the ownership and the all-gather layout and
 * allocates the packed moments, zero-filled. STATUS_NOMEM logged. */
status zero_init(zero *z, MPI_Comm comm, const param_table *pt, const zero_options *o);
void zero_free(zero *z);

/* Collective over the group: every rank passes the id of its node (any int; ranks with
 * the same id share a node, runtime.h). With several nodes and two ranks or more on
 * one, the reduce-scatter and the all-gather then run in two levels (zero_hier.c): a
 * shard's floats cross between nodes once each way, 2G bytes per step for G of
 * gradient where the flat path moves up to 4G. Sums run in a fixed order: each node's
 * ranks in local-index order (ascending group rank), then the nodes in id order, as
 * the hierarchical allreduce (comm_hier.c) sums with two nodes. Otherwise the flat
 * path stays. STATUS_TIMEOUT after timeout_s (0: none); STATUS_NOMEM. */
status zero_use_nodes(zero *z, int node_id, double timeout_s);
/* The two-level forms zero_reduce_scatter_grads and zero_allgather_params call when
 * z->hier (the same contracts). */
status zero_hier_reduce_scatter(zero *z, float *grads, double scale, double timeout_s);
status zero_hier_allgather(zero *z, float *params, double timeout_s);

/* The shard holding flat offset `offset` (binary search; dies when no shard does). */
int zero_shard_index(const zero *z, size_t offset);

/* The owned shards' update (optim_adamw_step_ranges / optim_sgd_step_ranges with the
 * packed moments); params of other shards are left as they are. */
void zero_adamw_step(zero *z, const param_table *pt, param_buffers *pb, const adamw_hparams *hp, double lr, long t);
void zero_sgd_step(zero *z, const param_table *pt, param_buffers *pb, const sgd_hparams *hp, double lr, long t);

/* Collective: the gradient summed over the ranks and times `scale` (in double, one
 * rounding: the buckets' formula), each rank receiving its own shards only, written
 * back at their offsets in grads; the other shards' floats in grads are left as they
 * were (this rank's unreduced contribution: read them no more this step). The
 * shards are packed into owner blocks (the all-gather's layout) and reduce-scattered
 * in rounds of at most pack_numel floats (each owner's block cut into as many equal
 * parts), so the extra memory is bounded whatever the model's size; each float is
 * summed over the ranks once, in whichever round carries it.
 * STATUS_TIMEOUT after timeout_s seconds (0: no deadline); STATUS_NOMEM logged. */
status zero_reduce_scatter_grads(zero *z, float *grads, double scale, double timeout_s);

/* Collective: the squared norm of the reduced gradient, from the owned shards (each
 * shard's squares summed in double where it is owned, then every shard's sum added in
 * shard order on every rank: the same value on every rank and at every world size).
 * sq_entry[pt->count] (may be NULL) receives each tensor's share. */
status zero_grad_norm_sq(zero *z, const param_table *pt, const float *grads, double timeout_s, double *sq,
                         double *sq_entry);

/* Collective: every rank's owned params to every rank. scratch holds >= z->numel
 * floats and is overwritten (nebula-train passes the gradient buffer, which is dead
 * after the update, so the all-gather costs no memory); params is the flat buffer.
 * STATUS_TIMEOUT when a rank does not arrive within timeout_s seconds (0: no deadline). */
status zero_allgather_params(zero *z, float *params, float *scratch, double timeout_s);

/* Fraction of the shards (and, in *elem_frac, of the floats) whose owner at
 * `old_world` ranks differs from the owner now. STATUS_NOMEM logged. */
status zero_moved_fraction(const zero *z, int old_world, double *shard_frac, double *elem_frac);

/* The largest and the mean owned floats over the ranks (every rank knows every
 * rank's share: no communication). */
void zero_balance(const zero *z, size_t *max_owned, double *mean_owned);

/* param_print_memory with the optimizer row at the largest rank's share (every rank
 * knows every share: no communication; print on rank 0). */
void zero_print_memory(const zero *z, const param_table *pt, size_t activation_bytes, size_t comm_bytes, FILE *f);

#endif
