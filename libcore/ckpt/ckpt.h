/* ckpt — HDF5 checkpoints (DESIGN.md §3): one directory per step holding one HDF5
 * file written by all ranks, committed atomically, found again by the newest commit
 * marker, verified by per-dataset checksums, and loaded into a model's flat buffers.
 *
 * On disk (run directory RUN):
 *   RUN/ckpt/step_00001200/state.h5     the checkpoint
 *   RUN/ckpt/step_00001200/COMMITTED    commit marker, written last (contains the step)
 * Written as RUN/ckpt/.step_00001200.tmp/, files fsync'd, directory renamed, parent
 * fsync'd, then the marker written (temporary name + fsync + rename) and its
 * directory fsync'd; only then are older checkpoints beyond keep_last removed (marker
 * first). A crash at any point leaves either a committed checkpoint or debris a loader
 * ignores (names starting with '.', or a step directory without COMMITTED).
 *
 * state.h5 layout (h5dump / h5py read it directly; names are the ecosystem's):
 *   /                      attributes: magic "NEBULA-CKPT", format_version, step,
 *                          model (preset name), table_hash, config (resolved config
 *                          text), world_size, ranks_per_node, nebula_version,
 *                          checksum_algorithm "crc32"; resharded_from only in files
 *                          nebula-ckpt reshard rewrote (every blob row is then rank 0's
 *                          of a run of that many ranks, and loads report resharded)
 *   /<group>/<tensor name> one float32 dataset per tensor, torch's shape; groups:
 *                          "params", "optim/m", "optim/v", "buffers" (ResNet BN stats);
 *                          each group has attribute table_hash (param_table_hash)
 *   /rank/<blob name>      uint8 (world_size, bytes): one row per rank (RNG states,
 *                          loader position, later DGC residuals); attribute
 *                          row_checksums (world_size uint32), one per row
 *   every dataset          attribute "checksum": CRC-32 of its bytes as stored
 *                          (zlib's crc32, the same as Python's zlib.crc32 and gzip;
 *                          float32 little-endian, rows in rank order)
 *
 * The one design decision: replicated state (identical on every rank in data
 * parallelism) is written once, per-rank state once per rank, into the same file.
 * Synchronous saves use parallel HDF5 (MPI-IO driver, collective transfers): every
 * rank writes 1/world_size of each flat buffer, an (offset, count) slice like a bucket
 * or a ZeRO shard, so the write bandwidth and the checksum work scale with the ranks.
 * Asynchronous saves keep the calling thread's work to the file's metadata: rank 0's
 * calling thread creates the file (HDF5, serial driver) and starts a background thread
 * that copies the tensors into staging memory, then pwrite()s them at the datasets'
 * offsets, fsyncs, and leaves the checksum attributes and the commit to ckpt_poll. The
 * copy overlaps the next step's forward and backward passes, which read the parameters
 * and optimizer state but do not change them; the caller calls ckpt_fence before the
 * optimizer step, which waits only if the copy is not finished by then (CheckFreq,
 * FAST'21, pipelines its snapshot with the next iteration the same way). The thread
 * calls neither MPI (initialised MPI_THREAD_FUNNELED) nor HDF5 (Debian's parallel build
 * is not thread-safe), so other modules may keep using both meanwhile. */
#ifndef NEBULA_CKPT_H
#define NEBULA_CKPT_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "nn/param.h"

#define CKPT_FORMAT_VERSION 1
#define CKPT_MAX_GROUPS 8
#define CKPT_MAX_BLOBS 8

/* A group held in shards (ZeRO, zero.h) rather than as a full flat buffer: the flat
 * layout is cut into n ranges that tile every tensor of the table (ascending offsets,
 * never crossing a tensor), each held by exactly one rank, which keeps the ranges it
 * holds packed in offset order. Save writes each rank's ranges with a union of
 * hyperslab selections (H5S_SELECT_OR) in one collective write per tensor; load reads
 * them the same way (from any checkpoint, sharded or not: the file holds full tensors
 * either way), and nothing is replicated. Checksums: one CRC-32 per range, exchanged
 * with one reduction, combined in offset order (crc32_combine). Not with async saves
 * (rank 0 would have to hold the whole group). */
typedef struct ckpt_shards {
    int n;                      /* ranges */
    const size_t *offset;       /* [n] first float of each range in the flat layout, ascending */
    const size_t *count;        /* [n] floats */
    const uint8_t *mine;        /* [n] 1 for the ranges this rank holds */
    const size_t *packed;       /* [n] where a range this rank holds starts in the group's data */
} ckpt_shards;

/* A flat buffer laid out by `table`, stored as one dataset per tensor under `group`. */
typedef struct ckpt_tensors {
    const char *group;          /* "params", "optim/m", ... */
    const param_table *table;   /* names, shapes, offsets */
    float *data;                /* (table->total) the flat buffer: read on save, written on load */
    bool copy_in_save;          /* async: staged before ckpt_save returns, for state that changes
                                   before the optimizer step (ResNet's running statistics change in
                                   the forward pass); other groups are copied in the background and
                                   must not change until ckpt_fence returns */
} ckpt_tensors;

/* Per-rank bytes, the same size on every rank. */
typedef struct ckpt_blob {
    const char *name;           /* "rng", "loader", ... */
    void *data;                 /* (bytes) this rank's: read on save, written on load */
    size_t bytes;               /* 1 .. INT_MAX */
    bool optional;              /* load: a missing blob, or one of another size, is not an error (the
                                   caller resets that state: optional state added by a later config) */
    bool loaded;                /* load: set when the blob was read, cleared when an optional one was not */
} ckpt_blob;

/* What a checkpoint holds. The same description serves save and load. */
typedef struct ckpt_content {
    int64_t step;               /* steps completed (>= 0) */
    const char *model;          /* preset name; load refuses a checkpoint of another model */
    uint64_t table_hash;        /* param_table hash; load refuses a mismatch */
    const char *config_text;    /* resolved config (save only; NULL: empty) */
    int ranks_per_node;         /* save only: ranks per (virtual) node, runtime.max_local_size;
                                   0: counted from the communicator's shared-memory nodes */
    int resharded_from;         /* save only: 0, or the world size whose rank 0 rows every blob row
                                   holds (ckpt_reshard); a load then reports info.resharded */
    double timeout_s;           /* deadline in seconds of each of the module's control collectives
                                   (agreements, votes, broadcasts; comm.timeout): a rank that does not
                                   arrive makes the others return STATUS_TIMEOUT; 0: none. The
                                   writer takes it from the shape given at init, loads from c */
    ckpt_tensors groups[CKPT_MAX_GROUPS];
    int ngroups;
    const ckpt_shards *shards[CKPT_MAX_GROUPS]; /* per group: NULL when its data is the full flat
                                   buffer; else the ranges its data holds (ckpt_shards) */
    ckpt_blob blobs[CKPT_MAX_BLOBS];
    int nblobs;
} ckpt_content;

/* What load found. */
typedef struct ckpt_info {
    char path[4096];            /* the checkpoint directory loaded; "" when none */
    int64_t step;               /* -1 when nothing was loaded */
    int world_size;             /* of the run that wrote it (before an offline reshard) */
    int ranks_per_node;         /* of the run that wrote it */
    bool resharded;             /* world size differs, or the file was resharded offline: blobs hold
                                   rank 0's row, the caller adapts */
    int skipped;                /* newer checkpoints refused (corrupt or uncommitted) before this one */
} ckpt_info;

typedef struct ckpt_writer ckpt_writer;  /* opaque: staging memory and the async thread */

/* Collective. dir = RUN/ckpt (created when missing). keep_last >= 1. `shape` gives
 * the groups (tables) and blob sizes every save will have; its data pointers are not
 * read. async: save copies the content into staging memory sized here (rank 0 only:
 * every group's flat buffer plus world_size rows of each blob; no allocation per save)
 * and returns; a background thread writes it. STATUS_NOMEM or STATUS_IO (the
 * directory cannot be created), logged; CHAOS builds: STATUS_INPUT for a malformed
 * NEBULA_CHAOS_FAULT (ckpt_impl.h). */
status ckpt_writer_init(ckpt_writer **out, MPI_Comm comm, const char *dir, int keep_last, bool async,
                        const ckpt_content *shape);
/* Collective. Writes (or, async, stages and starts writing) a checkpoint of `c`, whose
 * groups and blobs must match the shape given at init (a mismatch is a bug: dies).
 * With a previous async save still running, waits for it first; if that save failed,
 * returns its error and writes nothing. Async: the per-rank blobs are gathered to rank
 * 0 here (MPI_Gather, in the calling thread) and may change as soon as this returns, as
 * may the groups marked copy_in_save; the other groups must stay unchanged until
 * ckpt_fence. A save of a step that is already committed replaces it. A failed save
 * (sync, or async as returned here or by ckpt_wait) leaves nothing of its step: rank 0
 * removes the debris and logs the errno and a HINT naming the last committed checkpoint. */
status ckpt_save(ckpt_writer *w, const ckpt_content *c);
/* Not collective. Call before changing a group of the content of the last ckpt_save
 * (before the optimizer step): waits until an async save has copied it into staging
 * memory. Returns at once for sync saves, on ranks other than 0, and when the copy is
 * done (the usual case: it overlaps the forward and backward passes). */
void ckpt_fence(ckpt_writer *w);
/* Collective. Waits for an async save; returns its status (an I/O error of the
 * background write surfaces here or at the next ckpt_save). STATUS_OK when none ran. */
status ckpt_wait(ckpt_writer *w);
/* Timings of the last finished async save on rank 0 (zeros elsewhere, for sync saves,
 * and before the first async save has finished; memcpy_s from init on). The step
 * loop's stall is save_s + fence_s + finish_s. */
typedef struct ckpt_stats {
    size_t bytes;          /* tensor bytes staged and written */
    double save_s;         /* the caller in ckpt_save: a wait for the previous save, the gather,
                              the copy_in_save groups, creating the file and its metadata */
    double fence_s;        /* the caller in ckpt_fence, waiting for the background copy */
    double copy_s;         /* background: copying the tensors into staging memory */
    double write_s;        /* background: checksums, writing and fsync of the data */
    double finish_s;       /* the caller, between steps (ckpt_poll): checksum attributes and commit */
    double memcpy_s;       /* the peer, measured once at init: one plain memcpy of the same tensors
                              (single thread), what "copying the state in memory" costs */
} ckpt_stats;
void ckpt_get_stats(const ckpt_writer *w, ckpt_stats *s);

/* Not collective; call between steps. Rank 0 finishes an async save whose background
 * write is done — checksum attributes, commit — so checkpoints commit without a
 * wait; a failure is returned by the next ckpt_save or ckpt_wait. */
void ckpt_poll(ckpt_writer *w);
/* Collective (frees a communicator). Joins a running async save first; call ckpt_wait
 * before it to learn that save's status (free only logs a failure). */
void ckpt_writer_free(ckpt_writer *w);

/* Collective. `which` is "auto" (the newest committed checkpoint under dir that
 * verifies; corrupt, unreadable or uncommitted newer ones are reported with a warning
 * and skipped), a checkpoint directory path, or "none" (returns STATUS_OK with
 * info->step = -1 and touches nothing). "auto" with no committed checkpoint under dir
 * (or no dir) also returns STATUS_OK with info->step = -1: a fresh start; with
 * committed checkpoints none of which verifies it returns STATUS_CORRUPT. Loads every
 * group of `c` (names and shapes must match; missing and unexpected tensors are listed
 * in the error; groups of the file that c does not name are ignored) and every blob
 * (this rank's row, rank 0's when resharded). STATUS_INPUT for another model (naming
 * both), a table hash mismatch, a missing group or blob, a newer format version, an
 * older one (the message names `nebula-ckpt upgrade`), or an explicit path that is not
 * a committed checkpoint; STATUS_CORRUPT when an explicit
 * path fails its checksums (naming the dataset) or is truncated or unreadable;
 * STATUS_IO when a read fails. On an error the contents of c's buffers are unspecified.
 * Wait for a running async save of the same directory (ckpt_wait) before loading. */
status ckpt_load(MPI_Comm comm, const char *dir, const char *which, ckpt_content *c, ckpt_info *info);

/* ---- offline: inspect, verify, compare and rewrite (nebula-ckpt) -----------------
 * These read a checkpoint without the run that wrote it; only ckpt_check_tables and
 * ckpt_reshard need the model's parameter tables, which the caller builds from the
 * config the file stores. Trouble is logged where it is found (on rank 0) and
 * returned: STATUS_INPUT for a path that is not a Nebula checkpoint or a request that
 * does not fit it, STATUS_CORRUPT for a checkpoint that fails a check, STATUS_IO for a
 * read or write that fails. A rewrite (reshard, upgrade) goes through the commit
 * protocol of a save, so a failure leaves nothing a loader would trust. */

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
 * checksum. Rank 0 logs every problem with its dataset, row (rank) and file offset;
 * *nbad counts them, *first is the first in the file. STATUS_CORRUPT when there is one. */
status ckpt_verify(MPI_Comm comm, const ckpt_catalog *cat, int *nbad, ckpt_damage *first);

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

#endif
