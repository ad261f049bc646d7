/* dgc_impl — DGC-Pro's state shared by its files (dgc.h): the compression state of one
 * rank (struct dgc), the checkpointed blob's header and per-tensor records, and the
 * calls between the three seams:
 *   dgc_state.c     the state: init, the checkpoint blob, reset, activation, flush
 *   dgc.c           selection: accumulation with momentum correction, thresholds and
 *                   top-k, Pro 1 (dense fallback) and Pro 2 (per-layer densities)
 *   dgc_exchange.c  the step: the node's reduce-scatter, clipping, the sparse
 *                   exchange among peers (comm.h's comm_group), the node's all-gather
 * Never included from outside libcore/dgc. */
#ifndef NEBULA_DGC_IMPL_H
#define NEBULA_DGC_IMPL_H

#include "dgc.h"
#include "comm/comm.h"
#include "comm/ctl.h"

/* "DGCPRO2". Version 2: with momentum correction v holds the rate-folded sum (dgc.h,
 * dgc_exchange); a version-1 state (v unscaled) is refused like another layout's. */
#define DGC_MAGIC 0x324f5250434744ull

/* Per tensor of the slice, part of the checkpoint blob. */
typedef struct dgc_entry_state {
    uint8_t dense;        /* sent dense this step: small, or too little energy in its top-k */
    uint8_t pad[3];
    float energy;         /* fraction of |v|^2 its last selection carried, over all nodes */
    float concentration;  /* Pro 2: moving average of the |v|^2 fraction above the base density's threshold */
    float scale;          /* Pro 2: its density is the scheduled density times this */
} dgc_entry_state;

#define DGC_BLOCK 1024  /* Pro 3: entries per block of the zero prediction */
#define DGC_SCALE_MIN 0.125f  /* Pro 2: a tensor's density stays within 1/8 .. 8 of the schedule's */
#define DGC_SCALE_MAX 8.0f

typedef struct dgc_header {
    uint64_t magic;
    uint64_t slice_off, slice_len;  /* elements of the flat buffer */
    int32_t first, last;            /* entries [first, last) */
    int32_t has_u, active;
    uint64_t table_total;
} dgc_header;

struct dgc {
    const runtime *rt;
    comm_ctl node, peers;            /* the node's ranks; the same local rank on every node (with the deadline):
                                        scalars and size agreements */
    comm_group *node_g, *peers_g;    /* the same ranks for the vector payloads (comm.h) */
    comm_ctl norm;                   /* o.norm_comm with the deadline (a process grid) */
    const param_table *pt;
    dgc_options o;
    int L, lrank, P, prank;          /* node size and my rank in it; peers (nodes) and mine */
    int *cnt, *dsp;                  /* [L] elements of each local rank's slice and its offset */
    int first, last;                 /* my entries */
    size_t s0, S;                    /* my slice of the flat buffer */
    /* state blob: header, entry states, u (momentum only), v */
    uint8_t *state;
    size_t state_bytes;
    dgc_header *hdr;
    dgc_entry_state *es;
    float *u, *v;
    uint8_t *plain;                  /* [pt->count] */
    float *plainf;                   /* [pt->count] the node's vote on plain, as floats (0 or 1) */
    float *slice;                    /* [S] node sum, then contribution (the caller's gradient on one-rank nodes) */
    float *own_slice;                /* [S] on nodes of several ranks */
    float *scratch;                  /* [max(range, largest tensor)] thresholds, packed dense runs */
    uint32_t *idx;                   /* [cap] selected entries, relative to the slice */
    float *val;                      /* [cap] their values as sent */
    size_t cap, nsel;
    uint32_t *uidx;                  /* [range] the union of a reduced range */
    float *uval;
    /* exchange */
    uint8_t *sbuf, *rbuf;
    size_t sbuf_cap, rbuf_cap;
    int *scount, *sdispl, *rcount, *rdispl;  /* [P] bytes */
    float *acc;                      /* [range] owner's sum */
    uint64_t *touched;               /* [range / 64 + 1] */
    float *out;                      /* this step: the caller's gradient at my slice, where the result goes */
    float fold;                      /* this step's lr_scale, folded into the momentum-corrected accumulation */
    /* Pro 3, per block of DGC_BLOCK entries of my tensors (not checkpointed: skipping is exact) */
    size_t *blk_base;                /* [entries + 1] first block of each tensor */
    uint8_t *gzero;                  /* the block's contribution was all zero last step */
    uint8_t *vzero;                  /* its v and u were all zero after the last accumulation */
    uint8_t *skip;                   /* skipped this step */
    float *dense_tmp;                /* [range] values of a range for a dense message */
    size_t *runs;                    /* [2 * entries] dense runs of a range */
    size_t *runs2;                   /* [2 * blocks of the largest tensor] its unskipped runs */
    double *energy;                  /* [3 * entries] selected, total, and above the base threshold |v|^2 */
};

/* A tensor every tensor-parallel shard holds whole (position embedding, norms, the
 * row-parallel layers' biases): equal on every shard, so it is compressed by none
 * (dgc_state_reset) and counted once in the clipping norm (dgc_exchange). */
static inline bool dgc_whole_on_every_shard(const param_table *pt, int e)
{
    return pt->tp_size > 1 && pt->entries[e].tp_dim < 0;
}

/* Selection (dgc.c). accumulate: c = g * scale into u and v for tensor e at slice
 * offset `at` (plain: momentum correction folded in); select_entry: its entries above
 * the threshold into idx/val, the energies in energy[3]; layer_ratios: Pro 2's next
 * densities, collective over the node. */
void dgc_accumulate(dgc *d, const param_entry *pe, int e, size_t at, const float *params, float scale, bool plain,
                    dgc_stats *st);
void dgc_select_entry(dgc *d, int e, size_t at, double base, long step, double *energy);
status dgc_layer_ratios(dgc *d, long step);

#endif
