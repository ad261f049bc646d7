/* ckpt_impl — internals shared by ckpt.c (writer, async thread, load policy),
 * ckpt_file.c and ckpt_read.c (the HDF5 file) and ckpt_dir.c (directories, commit,
 * pruning). Tests include it for the fault-injection fields of the writer; apps never do. */
#ifndef NEBULA_CKPT_IMPL_H
#define NEBULA_CKPT_IMPL_H

#include <hdf5.h>
#include <pthread.h>
#include <stdatomic.h>

#include "ckpt.h"
#include "format.h"
#include "base/fault.h"
#include "comm/ctl.h"

#define CKPT_PATH_MAX  4096
#define CKPT_GROUP_MAX 32    /* bytes of a group or blob name including its NUL */
#define CKPT_DSET_MAX  (2 + CKPT_GROUP_MAX + PARAM_NAME_MAX)  /* "/" group "/" name */
#define CKPT_WHY_MAX   2048  /* one problem description, agreed across ranks */
#define CKPT_LIST_MAX  8     /* names listed per kind in a mismatch message */
#define CKPT_MAGIC     "NEBULA-CKPT"
#define CKPT_FILE      "state.h5"
#define CKPT_MARKER    "COMMITTED"
#define CKPT_ALIGN     4096  /* file offsets and staging addresses of datasets: O_DIRECT writes */

/* One dataset of a checkpoint: a tensor of a group or a per-rank blob. */
typedef struct ckpt_dset {
    char path[CKPT_DSET_MAX];           /* "/params/h.0.attn.c_attn.weight", "/rank/rng" */
    int group;                          /* index into the content's groups; -1 for a blob */
    int index;                          /* tensor index in the group's table, or blob index */
    int ndim;                           /* 0 (scalar) .. PARAM_MAX_DIMS; 2 for a blob */
    hsize_t dims[PARAM_MAX_DIMS];       /* tensor: torch shape; blob: (world_size, bytes) */
    size_t bytes;                       /* of the whole dataset */
    uint32_t crc;                       /* CRC-32 of its bytes */
    uint32_t *row_crcs;                 /* blob: [world_size] CRC-32 of each row */
    haddr_t offset;                     /* async: file offset of the contiguous raw data */
    const void *src;                    /* async: the staged bytes (rank 0) */
    const void *from;                   /* async: the caller's bytes the thread copies to src
                                           before ckpt_fence returns; NULL: staged in ckpt_save */
} ckpt_dset;

/* Every dataset of a content description, in file order: groups' tensors, then blobs. */
typedef struct ckpt_plan {
    ckpt_dset *dsets;       /* [ndsets] */
    int ndsets;
    int ntensors;           /* the first ntensors are tensors */
    uint32_t *row_crcs;     /* [nblobs * world_size] storage for the blobs' row_crcs */
    int world_size;         /* rows of each blob */
    bool same_rows;         /* blobs' data is one row, the same on every rank, that each of the
                               world_size rows holds (an offline reshard: at another world size every
                               rank continues from rank 0's row); the ranks write the rows in turn.
                               Else each rank holds and writes its own row */
    struct ckpt_crc_piece *pieces;  /* [ntensors] scratch of ckpt_checksums_parallel */
    uint64_t *offsets;      /* [ndsets] scratch of a synchronous save: the offsets rank 0 broadcasts */
} ckpt_plan;

/* Where the background write stops, as if the process had been killed there. */
typedef enum ckpt_fault {
    CKPT_FAULT_NONE = 0,
    CKPT_FAULT_BEFORE_RENAME,  /* the .tmp directory is complete but not renamed */
    CKPT_FAULT_BEFORE_MARKER,  /* renamed to step_N, no COMMITTED marker */
} ckpt_fault;

/* The second kind of fault: a system call of the save fails with an errno and the real
 * error path runs (the first kind above stops as if killed and takes none): the CHAOS
 * build's fault points (base/fault.h), module "ckpt": ckpt.write (the data write of
 * state.h5), ckpt.fsync, ckpt.rename, ckpt.marker, ... They fire on rank 0, which makes
 * every other POSIX call of both writers, or on the rank a rule names: ckpt.write runs on
 * every rank of a synchronous save (chaos.rank is the writer's rank). */

struct ckpt_writer {
    MPI_Comm comm;                       /* duplicate of the caller's communicator */
    comm_ctl ctl;                        /* comm with the deadline of the shape given at init */
    int rank, size;                      /* in comm */
    char dir[CKPT_PATH_MAX];             /* RUN/ckpt */
    int keep_last;                       /* committed checkpoints kept */
    bool async;                          /* background writes */
    int ranks_per_node;                  /* counted at init, used when content gives 0 */
    ckpt_plan plan;                      /* datasets of every save */
    int ngroups, nblobs;                 /* the shape given at init: */
    char group_name[CKPT_MAX_GROUPS][CKPT_GROUP_MAX];  /* groups, */
    size_t group_total[CKPT_MAX_GROUPS]; /* their flat buffer sizes (floats), */
    uint64_t group_hash[CKPT_MAX_GROUPS];/* their table hashes, */
    char blob_name[CKPT_MAX_BLOBS][CKPT_GROUP_MAX];    /* blobs */
    size_t blob_bytes[CKPT_MAX_BLOBS];   /* and their sizes */
    /* async, rank 0 */
    void *staging;                       /* groups' flat buffers, then blobs' rows */
    size_t staging_bytes;
    pthread_t thread;                    /* the background write */
    bool running;                        /* thread started and not joined */
    atomic_bool done;                    /* the thread has finished its work */
    pthread_mutex_t lock;                /* guards copied */
    pthread_cond_t copied_cond;          /* signalled when copied becomes true */
    bool copied;                         /* the thread has copied the caller's buffers (ckpt_fence) */
    status thread_status;                /* its result */
    status deferred;                     /* first failure of a finished background save, not yet reported */
    ckpt_stats stats;                    /* of the running async save (copy_s and write_s set by the thread) */
    ckpt_stats last;                     /* of the last finished one (ckpt_get_stats) */
    int64_t pending_step;                /* step it writes */
    ckpt_fault pending_fault;            /* fault of that write (copied: the thread never reads `fault`) */
    int thread_err;                      /* errno of the thread's failure (0: none or unknown) */
    int64_t deferred_step;               /* the step of `deferred` */
    int deferred_err;                    /* and its errno */
    fault_plan chaos;                    /* CHAOS builds: the "ckpt" faults of NEBULA_CHAOS_FAULT */
    /* tests */
    ckpt_fault fault;                    /* stop the commit early (rank 0) */
    unsigned delay_ms;                   /* the background thread sleeps before copying and before writing (rank 0) */
    int waited;                          /* saves that had to wait for a running write */
    /* rank 0: the saves this writer committed and the step of the last (ckpt_commits) */
    long commits;
    int64_t committed_step;
};

/* The module's control collectives on comm (HDF5 uses the same communicator), with a
 * deadline of timeout_s seconds (0: none). */
static inline comm_ctl ckpt_ctl(MPI_Comm comm, double timeout_s)
{
    return comm_ctl_named(comm, timeout_s, "checkpoint");
}

static inline bool ckpt_host_little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* The watchdog's deadline for a call that moves `bytes` of a checkpoint through HDF5:
 * comm.timeout plus 1 s per 10 MB, so that a large checkpoint on slow storage is never
 * cut short while a stopped rank is still caught (0: no deadline). */
static inline double ckpt_guard_s(double timeout_s, size_t bytes)
{
    return timeout_s > 0 ? timeout_s + (double)bytes / 10e6 : 0;
}

/* Agrees on a status across ctl's communicator: the first failing rank's status and
 * `why` (of `len` bytes on every rank) are broadcast; STATUS_OK when every rank
 * succeeded; STATUS_TIMEOUT (on the ranks that waited) when one did not arrive. */
status ckpt_agree(comm_ctl ctl, status st, char *why, size_t len);

/* HDF5 prints an error stack for every failed call. Failures here are expected (a
 * damaged checkpoint) and reported once by this module, so between begin and end
 * the stacks are shown only at debug verbosity. */
typedef struct ckpt_h5_quiet {
    H5E_auto2_t fn;  /* the handler to restore */
    void *data;      /* its argument */
    bool set;        /* silenced by us */
} ckpt_h5_quiet;
ckpt_h5_quiet ckpt_h5_quiet_begin(void);
void ckpt_h5_quiet_end(ckpt_h5_quiet q);

/* Collective: writes c (laid out by p, whose world_size may differ from comm's size
 * when p->same_rows) as dir/step_N through the commit protocol — .step_N.tmp, the
 * parallel write, fsync, rename, marker — then prunes to keep_last. Logs a failure.
 * The deadline is c->timeout_s. */
status ckpt_write_step(MPI_Comm comm, const char *dir, ckpt_plan *p, const ckpt_content *c, int ranks_per_node,
                       int keep_last, ckpt_fault fault);

/* ckpt_file.c: plan, checksums, slices, selections, attributes, create and write */
void ckpt_plan_build(ckpt_plan *p, const ckpt_content *c, int world_size);
void ckpt_plan_free(ckpt_plan *p);
uint32_t ckpt_crc_bytes(uint32_t crc, const void *p, size_t n);
/* CRC-32 of src[0, bytes), copying it to dst first when dst is not NULL (OpenMP
 * threads over pieces of at least 1 MiB, combined in order). */
uint32_t ckpt_crc_copy(void *dst, const void *src, size_t bytes);
/* CRC-32 of n rows of row_bytes each from the rows' CRC-32s. */
uint32_t ckpt_crc_rows(const uint32_t *rows, int n, size_t row_bytes);

/* (crc, len) of consecutive pieces, combined in rank order: inout = in ∘ inout. */
typedef struct ckpt_crc_piece {
    uint64_t crc;  /* CRC-32 of the bytes so far */
    uint64_t len;  /* their length */
} ckpt_crc_piece;
/* Collective: p[i] becomes the combination of every rank's p[i], in rank order. */
status ckpt_crc_allreduce(comm_ctl ctl, ckpt_crc_piece *p, int n);

/* The floats [*lo, *hi) of a flat buffer of `total` that `rank` of `size` owns: whole
 * blocks of PARAM_ALIGN_FLOATS, as equal as possible. */
void ckpt_flat_slice(size_t total, int rank, int size, size_t *lo, size_t *hi);
/* The elements [*a, *b) of tensor e inside this rank's slice of t's buffer; equal when none. */
void ckpt_tensor_piece(const param_table *t, const param_entry *e, MPI_Comm comm, size_t *a, size_t *b);
/* Selects the row-major elements [a, b) of an ndim-dimensional space (none when a >= b). */
void ckpt_select_flat(hid_t space, int ndim, const hsize_t *dims, size_t a, size_t b);
/* Sharded groups (ckpt_shards). The ranges of tensor e are [*first, *end) (they tile it:
 * checked when the plan is built and on load). */
void ckpt_shard_span(const ckpt_shards *s, const param_entry *e, int *first, int *end);
/* Selects, in the tensor's dataspace, the union of the ranges of [first, end) this rank
 * holds (H5S_SELECT_OR); returns their floats and, in *packed, where they start in the
 * group's data (they are consecutive there: packed in offset order). */
size_t ckpt_select_shards(hid_t space, const param_entry *e, const ckpt_shards *s, int first, int end,
                          size_t *packed);
/* Collective: out[i] = the CRC-32 of tensor i of t, whose ranges of s are held across the
 * ranks in their data (each rank hashes the ranges it holds, one bitwise-or reduction,
 * the ranges' CRC-32s combined in offset order). */
status ckpt_shard_group_crcs(comm_ctl ctl, const ckpt_shards *s, const param_table *t, const float *data,
                             uint32_t *out);
/* Dies unless the ranges of s tile every tensor of t. */
void ckpt_shards_check(const ckpt_shards *s, const param_table *t);
void ckpt_select_row(hid_t space, hsize_t row, hsize_t bytes);
/* A 1-D memory space of n elements (n == 0: one element, nothing selected). */
hid_t ckpt_mem_space(size_t n);
/* Reads the elements [a, b) (row-major, flat) of dataset ds, described by d, into buf
 * as mtype, or as stored (no conversion) when mtype < 0. 0, or -1 when HDF5 fails. */
int ckpt_read_flat(hid_t ds, const ckpt_dataset *d, hid_t mtype, uint64_t a, uint64_t b, void *buf);
/* Reads n values (a scalar when n == 0) of mtype; -1 when missing or of another size. */
int ckpt_attr_read(hid_t obj, const char *name, hid_t mtype, hsize_t n, void *v);
int ckpt_attr_read_str(hid_t obj, const char *name, char *out, size_t len);
/* File access: HDF5 1.8 object headers; MPI-IO over comm unless MPI_COMM_NULL (sec2). */
hid_t ckpt_file_access(MPI_Comm comm);

/* Collective: fills every dataset's crc (and blobs' row_crcs) from c's buffers,
 * each rank hashing its slice. */
status ckpt_checksums_parallel(comm_ctl ctl, ckpt_plan *p, const ckpt_content *c);
/* Rank 0: creates the file with every group, dataset and attribute (checksums included),
 * HDF5's serial driver, records each dataset's file offset in the plan (dsets[].offset
 * and offsets[]) and closes it. */
status ckpt_file_create(const char *path, ckpt_plan *p, const ckpt_content *c, int ranks_per_node, char *why);
/* How a rank's writes learn of the other ranks' failures (ckpt.c, write_step): failed(arg)
 * is true once another rank's part of the save failed; tell(arg) tells the others that
 * this rank's failed. */
typedef struct ckpt_peer_watch {
    bool (*failed)(void *arg);
    void (*tell)(void *arg);
    void *arg;
} ckpt_peer_watch;
/* Every rank of comm, no communication of its own: writes its slices of every tensor
 * (sharded groups: the ranges it holds) and its blob row(s) with pwrite at the datasets'
 * offsets (p->dsets[].offset, set on every rank), then fsyncs and closes. fault_errno != 0
 * (CHAOS builds): this rank's first write fails with it, instead of the call. On failure
 * why names what failed, the dataset, the file and the errno text, *err is the errno,
 * and watch->tell is called before the close. watch (NULL: none) is asked before each
 * dataset, every 64 MiB inside one and before the fsync: when another rank failed, this
 * one stops there (no fsync) and returns STATUS_PEER, why "stopped writing PATH after K
 * of N datasets: another rank failed", *err 0. */
status ckpt_file_write_slices(const char *path, MPI_Comm comm, const ckpt_plan *p, const ckpt_content *c,
                              int fault_errno, const ckpt_peer_watch *watch, char *why, int *err);

/* ckpt_read.c — collective: opens, checks and reads one checkpoint file into c (see
 * ckpt_load); marker_step is what its COMMITTED marker says; the deadline is c->timeout_s.
 * own: the file lies in the run's own checkpoint directory (`auto`) and is never opened
 * through a symbolic link (path_open_own; a link is a damaged checkpoint, STATUS_CORRUPT);
 * else a path a person named, probed by path_open_regular. */
status ckpt_file_read(MPI_Comm comm, const char *path, bool own, int64_t marker_step, ckpt_content *c,
                      ckpt_info *info, char *why);
/* The root attributes: STATUS_CORRUPT without the magic or with a missing or malformed
 * attribute, STATUS_INPUT for a newer format version; older versions are read. */
status ckpt_header_read(hid_t f, ckpt_header *h, char *why);
/* The root's magic attribute: 1 Nebula's, 0 absent or another (not a Nebula checkpoint),
 * -1 HDF5 could not read the root's attributes (damaged metadata). */
int ckpt_magic_read(hid_t f);
/* Opens every dataset c loads into ids (tensors in table order, then blobs; -1 for
 * those left out) and lists what does not match: STATUS_INPUT with the table hashes
 * and the missing, unexpected and reshaped tensors in why. */
status ckpt_check_layout(hid_t f, const ckpt_header *h, const ckpt_content *c, hid_t *ids, char *why);

/* ckpt_dtype.c — element types of tensors (format version 2). */
typedef enum ckpt_dtype {
    CKPT_DTYPE_F32 = 0,  /* "float32": every training save */
    CKPT_DTYPE_BF16,     /* "bfloat16": export copies */
    CKPT_DTYPE_F16,      /* "float16": export copies */
} ckpt_dtype;
const char *ckpt_dtype_name(ckpt_dtype t);
/* "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"; false for anything else. */
bool ckpt_dtype_parse(const char *s, ckpt_dtype *out);
size_t ckpt_dtype_size(ckpt_dtype t);
/* The HDF5 file type (little-endian) of t; the caller closes it. */
hid_t ckpt_dtype_h5(ckpt_dtype t);
/* The ckpt_dtype of an HDF5 type, or -1 when it is none of them. */
int ckpt_dtype_of(hid_t type);
/* float32 to 16 bits (to nearest, ties to even; NaN stays NaN) and back (exact). */
void ckpt_dtype_narrow(ckpt_dtype t, uint16_t *dst, const float *src, size_t n);
void ckpt_dtype_widen(ckpt_dtype t, float *dst, const uint16_t *src, size_t n);

/* ckpt_read.c — the rule of a world-size change, shared by ckpt_load and nebula-ckpt
 * reshard: the blob row that rank `rank` of a run of `world` ranks continues from, in
 * a file whose blobs have `rows` rows — its own at the same size, else rank 0's. */
hsize_t ckpt_reshard_row(int rows, int world, int rank);
/* Whether a load at `world` ranks is resharded: another size, or rows that were
 * already resharded offline (rank 0's everywhere). */
bool ckpt_resharded(const ckpt_header *h, int world);
/* ckpt_dir.c — plain POSIX; safe in the background thread. */
typedef enum ckpt_entry_kind {
    CKPT_ENTRY_COMMITTED = 0,  /* step_N with COMMITTED */
    CKPT_ENTRY_UNCOMMITTED,    /* step_N without COMMITTED (died between rename and marker) */
    CKPT_ENTRY_TMP,            /* .step_N.tmp (died while writing) */
    CKPT_ENTRY_OLD,            /* .step_N.old (died while replacing a checkpoint of step N) */
    CKPT_ENTRY_LINK,           /* step_N that is a symbolic link: never loaded, never pruned */
} ckpt_entry_kind;

typedef struct ckpt_entry {
    int64_t step;
    ckpt_entry_kind kind;
} ckpt_entry;

/* out (CKPT_PATH_MAX bytes) = dir/name; dies when too long (dir was checked at init). */
void ckpt_path_join(char *out, const char *dir, const char *name);
void ckpt_dir_step_path(char *out, size_t len, const char *dir, int64_t step);
void ckpt_dir_tmp_path(char *out, size_t len, const char *dir, int64_t step);
void ckpt_dir_old_path(char *out, size_t len, const char *dir, int64_t step);
/* The path of a listed entry. */
void ckpt_dir_entry_path(char *out, size_t len, const char *dir, const ckpt_entry *e);
/* Entries of dir, newest step first (at equal steps debris before the commit);
 * *n = 0 when dir does not exist. The array is malloc'd (free it); NULL on error. */
status ckpt_dir_list(const char *dir, ckpt_entry **entries, int *n);
/* Removes a stale .step_N.tmp and creates it empty. */
status ckpt_dir_prepare_tmp(const char *dir, int64_t step);
/* The same with the CHAOS fault point ckpt.mkdir of `chaos` (NULL: none). */
status ckpt_dir_prepare_tmp_at(const char *dir, int64_t step, fault_plan *chaos);
/* fsync of a file or directory by path. */
status ckpt_dir_fsync(const char *path);
/* The same, failing with fault_errno instead when it is not 0 (CHAOS builds). */
status ckpt_dir_fsync_at(const char *path, int fault_errno);
/* STATUS_OK when path/COMMITTED exists and holds *step; else a reason in why: STATUS_INPUT
 * when there is none, STATUS_IO when it cannot be read (or, with own, is a symbolic link:
 * a marker in the run's own checkpoint directory is never read through one), STATUS_CORRUPT
 * when it does not hold a step. */
status ckpt_dir_marker(const char *path, bool own, int64_t *step, char *why);
/* The commit of .step_N.tmp (whose state.h5 is durable), then pruning. errno is
 * that of the failure when it returns STATUS_IO (a fault of `fault` aside). */
status ckpt_dir_commit(const char *dir, int64_t step, int keep_last, ckpt_fault fault);
/* The same with the CHAOS fault points of `chaos` (NULL: none): every directory
 * fsync, the move-aside, the rename, each call of the marker's write, pruning. */
status ckpt_dir_commit_at(const char *dir, int64_t step, int keep_last, ckpt_fault fault, fault_plan *chaos);
/* After a failed save of `step`, which was not stopped by a ckpt_fault: removes what
 * it left — .step_N.tmp, and step_N when it holds no COMMITTED marker — and puts back
 * a committed step_N it had moved aside to .step_N.old. Committed checkpoints are
 * never removed. Logs what it removed. */
void ckpt_dir_discard(const char *dir, int64_t step);
/* Async saves: writes every dataset's "checksum" attribute (and a blob's
 * row_checksums) from the plan into the file at path, then fsyncs it; the CHAOS fault
 * points ckpt.checksums (the reopen, standing for HDF5's calls) and ckpt.fsync of
 * `chaos` (NULL: none). errno is the failure's when it returns STATUS_IO. */
status ckpt_file_set_checksums(const char *path, const ckpt_plan *p, fault_plan *chaos, int64_t step, char *why);

#endif
