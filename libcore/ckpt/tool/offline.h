/* offline — nebula-ckpt's library: a checkpoint read without the run that wrote it.
 * Catalog (header and every dataset), verify, diff, reshard and upgrade; the training
 * writer and loader (ckpt/ckpt.h) never depend on this header. */
#ifndef NEBULA_CKPT_OFFLINE_H
#define NEBULA_CKPT_OFFLINE_H

#include "ckpt/ckpt.h"
#include "ckpt/format.h"

/* These read a checkpoint without the run that wrote it; only ckpt_check_tables and
 * ckpt_reshard need the model's parameter tables, which the caller builds from the
 * config the file stores. Trouble is logged where it is found (on rank 0) and
 * returned: STATUS_INPUT for a path that is not a Nebula checkpoint or a request that
 * does not fit it, STATUS_CORRUPT for a checkpoint that fails a check, STATUS_IO for a
 * read or write that fails. A rewrite (reshard, upgrade) goes through the commit
 * protocol of a save, so a failure leaves nothing a loader would trust. */

typedef struct ckpt_catalog {
    char dir[4096];             /* the checkpoint directory */
    char file[4096];            /* its state.h5 */
    uint64_t file_bytes;        /* size of the file */
    ckpt_commit commit;         /* whether loaders trust it */
    int64_t marker_step;        /* what COMMITTED says; -1 without a readable marker */
    ckpt_header h;              /* root attributes */
    char *config;               /* the resolved config text the run stored */
    ckpt_dataset *items;        /* [n] every dataset, by path */
    int n;
} ckpt_catalog;

/* Not collective (each rank may call it). `path`: a checkpoint directory or its
 * state.h5. Reads the header and lists every dataset. STATUS_INPUT: no such path, not
 * an HDF5 file, no Nebula magic, a newer format version; STATUS_CORRUPT: truncated (the
 * file's size against the size HDF5 recorded), damaged attributes, a dataset of a type
 * or rank no checkpoint holds, a soft or external link. */
status ckpt_catalog_open(ckpt_catalog *cat, const char *path);
void ckpt_catalog_free(ckpt_catalog *cat);
/* The dataset at `path` ("/params/wte.weight"), or NULL. */
const ckpt_dataset *ckpt_catalog_find(const ckpt_catalog *cat, const char *path);
/* Collective: loads c's groups (tables and buffers; its blobs too, when it names any)
 * from a committed checkpoint with ckpt_load's reader — every checksum verified, each
 * rank reading its slices — without ckpt_load's policy (no fallback, no messages about
 * resuming). STATUS_INPUT for an uncommitted checkpoint or another layout, logged. */
status ckpt_catalog_load(MPI_Comm comm, const ckpt_catalog *cat, ckpt_content *c);
/* Not collective: row `row` of blob d (one of cat's) into dst (d->dims[1] bytes),
 * checked against its row_checksums; STATUS_CORRUPT, logged, when it does not match. */
status ckpt_catalog_read_row(const ckpt_catalog *cat, const ckpt_dataset *d, int row, void *dst);

/* The first problem ckpt_verify found, by file offset. */
typedef struct ckpt_damage {
    char path[CKPT_ITEM_PATH];  /* the dataset */
    int row;                    /* the blob row (rank) whose bytes fail; -1: the whole dataset */
    uint64_t offset;            /* file offset of the bytes that fail */
    uint64_t bytes;             /* how many */
} ckpt_damage;

/* Collective: recomputes the CRC-32 of every dataset (each rank hashes a slice; parallel
 * HDF5 reads) and of every blob row, and checks that the rows combine to the dataset's
 * checksum; a float32 tensor with NaN or Inf values (a run that diverged) is a problem
 * too, named with its count, and so is a float32 tensor piece or a blob row that `check`
 * refuses (the loader's value check, ckpt_content.check; NULL: none), with its reason.
 * Rank 0 logs every problem with its dataset, row (rank) and file offset;
 * *nbad counts them, *first is the first in the file. STATUS_CORRUPT when there is one. */
status ckpt_verify(MPI_Comm comm, const ckpt_catalog *cat, ckpt_value_check check, int *nbad, ckpt_damage *first);

/* Not collective: the file's layout against c's groups as ckpt_load checks it — model,
 * table hashes, missing, unexpected and reshaped tensors (c's buffers are not read).
 * STATUS_INPUT, logged, when they differ. */
status ckpt_check_tables(const ckpt_catalog *cat, const ckpt_content *c);

typedef enum ckpt_diff_kind {
    CKPT_DIFF_KIND_SAME = 0,    /* bit for bit */
    CKPT_DIFF_KIND_VALUES,      /* same shape and type, other bytes */
    CKPT_DIFF_KIND_SHAPE,       /* another shape or type */
    CKPT_DIFF_KIND_ONLY_A,      /* in the first file only */
    CKPT_DIFF_KIND_ONLY_B,      /* in the second file only */
} ckpt_diff_kind;

/* One dataset of either file. The statistics are in double, over float32 tensors of
 * the same shape (NAN otherwise); a, b are the first and the second file's values. */
typedef struct ckpt_diff_row {
    char path[CKPT_ITEM_PATH];
    ckpt_diff_kind kind;
    double max_abs;             /* max |a - b| */
    double rel_l2;              /* ||a - b|| / ||a||: 0 when a = b, inf when only a is zero */
    double cosine;              /* a.b / (||a|| ||b||): 1 when both are zero, 0 when one is */
    uint64_t differ;            /* elements (tensors) or rows (blobs) that differ */
} ckpt_diff_row;

/* Collective: one row per dataset path of either file, by path, into rows (a->n + b->n
 * entries); each rank compares a slice (parallel HDF5 reads). STATUS_IO when a read
 * fails. */
status ckpt_diff(MPI_Comm comm, const ckpt_catalog *a, const ckpt_catalog *b, ckpt_diff_row *rows, int *nrows);

/* Collective, any number of processes: rewrites a committed checkpoint for a run of
 * `world_size` ranks. The tensors go through ckpt_load's reader (c: model, table_hash
 * and the groups the file holds, tables and buffers; its blobs are ignored), new rank r
 * gets the blob row a load at world_size would give rank r (ckpt_reshard_row: rank 0's,
 * read and checked for every blob of the file), resharded_from records the size the
 * rows come from, and the synchronous saver writes out_root/step_N and commits it
 * (out_root NULL: the checkpoint's own directory, replaced). ranks_per_node 0: the
 * writer's, at most world_size. STATUS_INPUT for an uncommitted checkpoint, the world
 * size it has, or an in-place rewrite of a directory not named step_N. */
status ckpt_reshard(MPI_Comm comm, const ckpt_catalog *cat, const ckpt_content *c, int world_size,
                    int ranks_per_node, const char *out_root);

/* Collective (rank 0 works): migrates a committed checkpoint of an older format version
 * to CKPT_FORMAT_VERSION, one registered function per version step (ckpt_upgrade.c), on
 * a copy that is verified and committed as ckpt_reshard's output is; `changes` receives
 * one line per change (len bytes at most). A current version: STATUS_OK, nothing
 * written, changes "". */
status ckpt_upgrade(MPI_Comm comm, const ckpt_catalog *cat, const char *out_root, char *changes, size_t len);

/* Collective (rank 0 works): a copy of a committed checkpoint, format version 2, with
 * every tensor stored as dtype ("bf16", "fp16" or "fp32": rounded to nearest even, or
 * widened exactly) and its checksum recomputed; blobs and attributes as they are. The
 * original is verified first, the copy after; committed as out_root/step_N (out_root
 * must be given: an export never replaces the checkpoint it copies). */
status ckpt_export(MPI_Comm comm, const ckpt_catalog *cat, const char *dtype, const char *out_root);

/* Not collective. STATUS_INPUT, logged naming the checkpoint, when the directory root of
 * a checkpoint output is not a directory, is a committed checkpoint or lies inside one,
 * or root/step_N exists (committed or not) and is not same_as (an in-place rewrite;
 * NULL: none). A file output follows path_output_check (base/path.h). */
status ckpt_out_check_step(const char *root, int64_t step, const char *same_as);

#endif
