/* format — what a checkpoint file holds, as the reader and the offline tools see it:
 * the root attributes (ckpt_header), one dataset (ckpt_dataset) and whether a
 * checkpoint is committed. The layout itself is described at the top of ckpt.h. */
#ifndef NEBULA_CKPT_FORMAT_H
#define NEBULA_CKPT_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "nn/param.h"

#define CKPT_ITEM_PATH 160  /* bytes of a dataset path "/" group "/" name, with its NUL */

/* Whether loaders trust a checkpoint: its commit marker (top of this file). */
typedef enum ckpt_commit {
    CKPT_COMMIT_YES = 0,        /* its directory holds a COMMITTED marker of its step */
    CKPT_COMMIT_NO,             /* no marker: a save that did not finish; loaders skip it */
    CKPT_COMMIT_DAMAGED,        /* a marker that cannot be read or names another step */
} ckpt_commit;

/* The root attributes (config aside). */
typedef struct ckpt_header {
    int32_t version;            /* format_version, 1 .. CKPT_FORMAT_VERSION */
    int64_t step;               /* steps completed */
    char model[128];            /* preset name */
    uint64_t table_hash;        /* the writer's param_table hash */
    int32_t world_size;         /* ranks of the writer: rows of every blob */
    int32_t ranks_per_node;     /* of the writer */
    int32_t resharded_from;     /* 0, or the world size before an offline reshard */
    char nebula_version[64];    /* of the writer; "" when absent */
    ckpt_layout layout;         /* version 2 on: the root attributes parallel_dp/tp/pp and zero_stage;
                                   version 1: dp = world_size, tp = pp = 1, stage 0 (not recorded) */
    bool layout_recorded;       /* the file holds the layout attributes (version 2 on) */
} ckpt_header;

/* One dataset as the file holds it. */
typedef struct ckpt_dataset {
    char path[CKPT_ITEM_PATH];      /* "/params/wte.weight", "/rank/loader" */
    bool blob;                      /* under /rank: uint8 (world_size, bytes), one row per rank */
    char dtype[12];                 /* "float32", "uint8", ... (numbers only) */
    int ndim;                       /* 0 (scalar) .. PARAM_MAX_DIMS */
    uint64_t dims[PARAM_MAX_DIMS];  /* shape, outermost first */
    uint64_t bytes;                 /* of its data */
    uint64_t offset;                /* file offset of its data; UINT64_MAX when not contiguous */
    bool has_checksum;              /* it carries the "checksum" attribute */
    uint32_t checksum;              /* its value: the CRC-32 of the data as stored */
} ckpt_dataset;

#endif
