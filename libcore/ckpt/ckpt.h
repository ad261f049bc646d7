/* ckpt — HDF5 checkpoints (docs/design.md#checkpoints): one directory per step holding one HDF5
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
 *                          checksum_algorithm "crc32", and since version 2 the
 *                          process grid parallel_dp, parallel_tp, parallel_pp (their
 *                          product is world_size) and zero_stage; resharded_from only in files
 *                          nebula-ckpt reshard rewrote (every blob row is then rank 0's
 *                          of a run of that many ranks, and loads report resharded)
 *   /<group>/<tensor name> one float32 dataset per tensor, torch's shape; groups:
 *                          "params", "optim/m", "optim/v", "buffers" (ResNet BN stats);
 *                          each group has attribute table_hash (param_table_hash)
 *   /rank/<blob name>      uint8 (world_size, bytes): one row per rank (RNG states,
 *                          loader position, later DGC residuals); attribute
 *                          row_checksums (world_size uint32), one per row
 *   every dataset          attribute "checksum": CRC-32 of its bytes as stored; since
 *                          version 2 attribute "dtype": "float32" (training saves),
 *                          "bfloat16" or "float16" (export copies, ckpt_export), "uint8" (blobs)
 *                          (zlib's crc32, the same as Python's zlib.crc32 and gzip;
 *                          float32 little-endian, rows in rank order)
 *
 * The one design decision: replicated state (identical on every rank in data
 * parallelism) is written once, per-rank state once per rank, into the same file.
 * Synchronous saves are written by every rank: rank 0 creates the file and its metadata
 * (serial driver), and every rank pwrite()s 1/world_size of each flat buffer, an (offset,
 * count) slice like a bucket or a ZeRO shard, at the datasets' offsets, so the write
 * bandwidth and the checksum work scale with the ranks. No collective HDF5 or MPI-IO call
 * takes part: the ranks agree on each phase's outcome with the control plane's deadline,
 * so one rank's I/O error ends the save on every rank at once (loads read in parallel).
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
#include "base/watchdog.h"
#include "nn/param.h"

#define CKPT_FORMAT_VERSION 2
#define CKPT_MAX_GROUPS 8
#define CKPT_MAX_BLOBS 8

/* The process grid of the run that wrote a checkpoint (format version 2 on): data-,
 * tensor- and pipeline-parallel sizes and the ZeRO stage. Informative: the tensors are
 * the whole model's at any grid, so a load never depends on it. */
typedef struct ckpt_layout {
    int32_t dp;                 /* data-parallel replicas; 0 in a content: the communicator's size */
    int32_t tp;                 /* tensor-parallel shards (1: none) */
    int32_t pp;                 /* pipeline stages (1: none) */
    int32_t zero_stage;         /* 0: moments replicated; 1: ZeRO-1 (moments sharded over dp) */
} ckpt_layout;

/* A group held in shards (ZeRO) rather than as a full flat buffer: param_shards
 * (nn/param.h) says which ranges this rank holds. Save writes each rank's ranges, each a
 * byte range of the tensor's contiguous dataset; load reads them with a union of hyperslab
 * selections (H5S_SELECT_OR) in one collective read per tensor (from any checkpoint, sharded or not: the file holds full
 * tensors either way), and nothing is replicated. Checksums: one CRC-32 per range,
 * exchanged with one reduction, combined in offset order (crc32_combine). Not with async
 * saves (rank 0 would have to hold the whole group). */
typedef param_shards ckpt_shards;

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

/* A check of values that a checksum cannot vouch for (a dataset rewritten with its CRC-32
 * made to match, or state a writer should never have written): `dataset` is a tensor's
 * path ("/optim/v/wte.weight", data a piece of its float32 values) or a blob's
 * ("/rank/monitor", data one row). STATUS_OK, or STATUS_CORRUPT with why naming the
 * dataset, the field, the value and the range a run writes. The trainer's schema holds
 * the rules (train_ckpt_check_values); loads and nebula-ckpt verify apply them. */
typedef status (*ckpt_value_check)(const char *dataset, const void *data, size_t bytes, char *why, size_t len);

/* What a checkpoint holds. The same description serves save and load. */
typedef struct ckpt_content {
    int64_t step;               /* steps completed (>= 0) */
    const char *model;          /* preset name; load refuses a checkpoint of another model */
    uint64_t table_hash;        /* param_table hash; load refuses a mismatch */
    const char *config_text;    /* resolved config (save only; NULL: empty) */
    int ranks_per_node;         /* save only: ranks per (virtual) node, runtime.max_local_size;
                                   0: counted from the communicator's shared-memory nodes */
    ckpt_layout layout;         /* save only: the writer's process grid (all zero: data parallel over
                                   the communicator, no ZeRO); dp x tp x pp must be the world size */
    int resharded_from;         /* save only: 0, or the world size whose rank 0 rows every blob row
                                   holds (ckpt_reshard); a load then reports info.resharded */
    double timeout_s;           /* deadline in seconds of each of the module's control collectives
                                   (agreements, votes, broadcasts; comm.timeout): a rank that does not
                                   arrive makes the others return STATUS_TIMEOUT; 0: none. The
                                   writer takes it from the shape given at init, loads from c */
    watchdog *wd;               /* the runtime's watchdog (base/watchdog.h) or NULL: guards a load's HDF5
                                   collective I/O (no deadline of its own) and a save's local I/O with
                                   timeout_s plus 1 s per 10 MB of the checkpoint, and shows a rank's
                                   failed write in its beacon; the writer takes it from the shape too */
    ckpt_tensors groups[CKPT_MAX_GROUPS];
    int ngroups;
    const ckpt_shards *shards[CKPT_MAX_GROUPS]; /* per group: NULL when its data is the full flat
                                   buffer; else the ranges its data holds (ckpt_shards) */
    ckpt_blob blobs[CKPT_MAX_BLOBS];
    int nblobs;
    ckpt_value_check check;     /* load only, or NULL: each rank checks the pieces it read (after their
                                   checksums verified) and the blob rows it loaded; a refusal, agreed,
                                   makes the checkpoint one `auto` skips (info.refused) */
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
    int version;                /* format_version of the file loaded (1 .. CKPT_FORMAT_VERSION) */
    ckpt_layout layout;         /* its writer's grid (version 1: dp = world_size, tp = pp = 1, stage 0) */
    bool refused;               /* set when a load failed because c->check refused a value: the file is
                                   intact, its content is not what a run writes */
    char dtype[12];             /* "float32"; "bfloat16" or "float16" when the tensors were stored in
                                   reduced precision (an export copy): they were widened on load and the
                                   run continues from rounded values, not bit-exactly */
} ckpt_info;

typedef struct ckpt_writer ckpt_writer;  /* opaque: staging memory and the async thread */

/* Collective. dir = RUN/ckpt (created when missing). keep_last >= 1. `shape` gives
 * the groups (tables) and blob sizes every save will have; its data pointers are not
 * read. async: save copies the content into staging memory sized here (rank 0 only:
 * every group's flat buffer plus world_size rows of each blob; no allocation per save)
 * and returns; a background thread writes it. STATUS_NOMEM or STATUS_IO (the
 * directory cannot be created), logged; CHAOS builds: STATUS_INPUT for a malformed
 * NEBULA_CHAOS_FAULT (base/fault.h). */
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
    double copy_t0;        /* background: when the copy began (CLOCK_MONOTONIC, s; 0: no copy yet) */
    double write_t0;       /* background: when the write began (CLOCK_MONOTONIC, s; 0: no write yet) */
} ckpt_stats;
void ckpt_get_stats(const ckpt_writer *w, ckpt_stats *s);

/* Not collective; call between steps. Rank 0 finishes an async save whose background
 * write is done — checksum attributes, commit — so checkpoints commit without a
 * wait; a failure is returned by the next ckpt_save or ckpt_wait. */
void ckpt_poll(ckpt_writer *w);
/* Not collective. Rank 0 (0 and -1 elsewhere): how many saves this writer has committed
 * so far (a synchronous save when ckpt_save returned; an asynchronous one when ckpt_poll,
 * ckpt_save or ckpt_wait committed it), and in *step (may be NULL) the step of the last
 * (-1 before the first). A caller that acts on each commit compares the count with the
 * one it saw (a rollback may commit a step again). */
long ckpt_commits(const ckpt_writer *w, int64_t *step);
/* Collective (frees a communicator). Joins a running async save first; call ckpt_wait
 * before it to learn that save's status (free only logs a failure). */
void ckpt_writer_free(ckpt_writer *w);

/* Not collective. The newest committed checkpoint under dir = RUN/ckpt (its directory
 * in path, its step in *step), without verifying it; false when there is none or dir
 * cannot be listed. What a message points a resume at. */
bool ckpt_last_committed(const char *dir, char *path, size_t len, int64_t *step);
/* Not collective. The same for the newest committed checkpoint of a step below `before`. */
bool ckpt_committed_before(const char *dir, int64_t before, char *path, size_t len, int64_t *step);
/* Not collective (rank 0, no save running): removes every checkpoint under dir newer than
 * `step` (marker first, durably, as pruning does), so that a resume with `auto` cannot take
 * a state a rollback abandoned; returns how many committed ones it removed. */
int ckpt_retire_after(const char *dir, int64_t step);

/* Collective (ckpt_load.c). `which` is "auto" (the newest committed checkpoint under dir
 * that opens, verifies and passes c->check; every newer one — uncommitted, its state.h5
 * missing or not a regular file, truncated, damaged HDF5 metadata, a checksum mismatch, a
 * value c->check refuses — is skipped and named with its reason in one warning line), a
 * checkpoint directory path, or "none" (returns STATUS_OK with info->step = -1 and
 * touches nothing). "auto" with no committed checkpoint under dir (or no dir) also
 * returns STATUS_OK with info->step = -1: a fresh start; with committed checkpoints none
 * of which qualifies it returns STATUS_INPUT, the error listing each with its reason.
 * Every verdict is agreed, so every rank loads the same checkpoint. Loads every
 * group of `c` (names and shapes must match; missing and unexpected tensors are listed
 * in the error; groups of the file that c does not name are ignored) and every blob
 * (this rank's row, rank 0's when resharded). Reads every format version from 1 on
 * (info->version says which). STATUS_INPUT for another model (naming
 * both), a table hash mismatch, a missing group or blob, a newer format version (naming
 * both versions) — these stop "auto" at once, older checkpoints being the same run's —,
 * an explicit path that is not a committed checkpoint, or one whose values c->check
 * refuses; STATUS_CORRUPT when an explicit path fails its checksums (naming the dataset),
 * is truncated or unreadable, or its HDF5 metadata is damaged; STATUS_IO when a read
 * fails. On an error the contents of c's buffers are unspecified. Files of the run's own
 * checkpoint directory — every one "auto" tries, and an explicit path dir/ENTRY as dir
 * spells it (a rollback's) — are never read through a symbolic link: a step_N, state.h5
 * or COMMITTED that is one makes the checkpoint damaged ("auto" skips it); dir itself may
 * be a link. STATUS_TIMEOUT (a rank missed comm.timeout) stops "auto" at once.
 * Wait for a running async save of the same directory (ckpt_wait) before loading. */
status ckpt_load(MPI_Comm comm, const char *dir, const char *which, ckpt_content *c, ckpt_info *info);

#endif
