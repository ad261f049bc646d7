/* repo — version control of checkpoints (nebula-model, docs/model.md): content-addressed
 * tensor chunks, manifests and commits in a repository directory, branches and tags,
 * checkout into a checkpoint directory nebula-train resumes from, diff, push and pull.
 *
 * On disk (repository directory ROOT; a bare repository has no work tree):
 *   ROOT/.nebula-model/HEAD               "ref: refs/heads/main\n", or a commit id (detached)
 *   ROOT/.nebula-model/config.json        {"bare": false, "remotes": {"origin": "/path"}}
 *   ROOT/.nebula-model/objects/ab/cdef…   one object per file, named by its id
 *   ROOT/.nebula-model/refs/heads/NAME    a branch: its commit id and a newline
 *   ROOT/.nebula-model/refs/tags/NAME     a tag (never moved)
 *   ROOT/.nebula-model/refs/remotes/R/B   where branch B of remote R was at the last push or pull
 *   ROOT/.nebula-model/logs/…             the reflog: one line per change of HEAD or a ref
 *   ROOT/.nebula-model/worktree.json      the checkpoints under ROOT/ckpt put there or committed
 *   ROOT/ckpt/step_N/                     the work tree: the checked-out checkpoint
 *
 * An object's id is the XXH3-128 (libxxhash) of its content, 32 hex digits. Objects are
 * chunks (a fixed run of one tensor's elements, or one row of a per-rank blob), skeletons
 * (the bytes of state.h5 outside every tensor: HDF5's metadata and attributes), manifests
 * (JSON: every dataset's path, type, shape, file offset and chunk ids; the config) and
 * commits (JSON: manifest, parents, message, author, time and lineage). On disk an object
 * is a 40-byte header (magic, kind, encoding, size, the id of a delta's base) and a zstd
 * frame; a chunk may be stored as the XOR with the same chunk of the parent commit when
 * that compresses smaller (trained weights keep their sign, exponent and high mantissa
 * bits from one checkpoint to the next). Every read is checked against its id.
 *
 * The one design decision: a checkpoint is cut at its tensors' byte ranges in the file,
 * so state.h5 comes back byte for byte (skeleton and chunks interleaved by offset) while
 * a tensor is stored once whatever file, grid or commit it comes from: a checkpoint of
 * the same model written at another world size or process grid, or a fine-tune's frozen
 * tensors, add no tensor bytes. Objects are written before what names them (chunks,
 * skeleton, manifest, commit, then the ref, each by temporary file, fsync and rename),
 * so a store that holds a commit holds everything it reaches, and a crash leaves at most
 * unreferenced objects, which fsck reports and gc removes. */
#ifndef NEBULA_REPO_H
#define NEBULA_REPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/fault.h"
#include "base/log.h"
#include "ckpt/ckpt.h"
#include "ckpt/format.h"
#include "ckpt/tool/offline.h"

#define REPO_DIR ".nebula-model"
#define REPO_PATH_MAX 4096
#define REPO_NAME_MAX 128                   /* bytes of a branch, tag or remote name with its NUL */
#define REPO_CHUNK_BYTES ((uint64_t)1 << 20) /* a tensor's chunk: 1 MiB of its elements (the last shorter) */
#define REPO_OBJ_HEAD 40                    /* an object file's header: magic 8, kind 1, delta 1, shuffle 1,
                                               zero 5, size 8 (little-endian), delta base id 16 */
#define REPO_PUT_BATCH ((uint64_t)32 << 20) /* bytes of a tensor read at once, then stored in parallel */
#define REPO_DELTA_DEPTH 8                  /* longest chain of deltas before a chunk is stored whole */

typedef struct repo_id {
    uint8_t b[16];              /* XXH3-128, canonical (big-endian) bytes */
} repo_id;

typedef enum repo_kind {
    REPO_KIND_CHUNK = 1,
    REPO_KIND_SKELETON,
    REPO_KIND_MANIFEST,
    REPO_KIND_COMMIT,
} repo_kind;

typedef struct repo {
    char root[REPO_PATH_MAX];   /* the repository directory */
    char dir[REPO_PATH_MAX];    /* root/.nebula-model */
    bool bare;                  /* no work tree */
    fault_plan chaos;           /* the model.* fault points (CHAOS builds) */
    int threads;                /* threads compressing and decoding chunks (0: OpenMP's default; the
                                   trainer's commit thread sets 1, beside the step loop) */
} repo;

/* ---- ids ---- */
void repo_id_hex(const repo_id *id, char hex[33]);
bool repo_id_parse(const char *hex, repo_id *id);      /* exactly 32 hex digits */
bool repo_id_eq(const repo_id *a, const repo_id *b);
repo_id repo_hash(const void *p, size_t n);

/* ---- repositories (repo_store.c) ---- */
/* Creates ROOT/.nebula-model (ROOT made when missing) with HEAD on `branch` (no commit
 * yet). STATUS_INPUT when ROOT already holds a repository or is not a directory. */
status repo_init(const char *root, bool bare, const char *branch);
/* Opens the repository at `root` exactly (not searched upward: a job script names it).
 * STATUS_INPUT naming what is missing or damaged (no .nebula-model, HEAD unreadable, a
 * config.json that does not parse). */
status repo_open(repo *r, const char *root);
/* The repository directory that holds `start` or one of its parents (as git finds .git):
 * true with root set. */
bool repo_find(const char *start, char *root, size_t len);
/* The remote's path from config.json; STATUS_INPUT when there is none of that name. */
status repo_remote_path(const repo *r, const char *name, char *path, size_t len);
/* Adds (or, replace, changes) remote `name`. STATUS_INPUT for a bad name or an existing one. */
status repo_remote_add(const repo *r, const char *name, const char *path, bool replace);
/* The remotes as a JSON object {name: path} (new reference). */
json_t *repo_remotes(const repo *r);

/* ---- objects (repo_object.c) ---- */
/* The object directory of a repository directory: dir/objects. */
void repo_objdir(const char *dir, char *out, size_t len);
/* Stores `data` as an object of `kind` (a no-op when present: *added false). base: the
 * id and content (same size) of a chunk to store a delta against, or NULL; the delta is
 * kept only when smaller. *stored: bytes the object takes on disk (0 when present).
 * STATUS_IO on a failed write (nothing left under the object's name). */
status repo_object_put(repo *r, repo_kind kind, const void *data, size_t n, const repo_id *base_id, const void *base,
                       repo_id *id, bool *added, uint64_t *stored);
/* repo_object_put of a chunk of elem-byte elements (2, 4, 8; else bytes), stored as byte
 * planes: the exponent bytes of float32 values together compress. Thread-safe. */
status repo_object_put_chunk(repo *r, int elem, const void *data, size_t n, const repo_id *base_id, const void *base,
                             repo_id *id, bool *added, uint64_t *stored);
/* Reads and checks an object: its header, its size, its hash against its id (and its
 * delta base's, recursively); *data malloc'd (NUL-terminated past n), want 0: any kind.
 * STATUS_INPUT when it is missing, STATUS_CORRUPT when damaged, with `why` the reason. */
status repo_object_get(const char *objdir, const repo_id *id, repo_kind want, void **data, size_t *n, char *why,
                       size_t len);
/* Parses the 40-byte header of an object file: kind, encoding, raw size, delta base.
 * false when it is not one (hostile input: the fuzzed reader). */
typedef struct repo_object_head {
    repo_kind kind;
    int delta;                  /* 0: zstd of the content; 1: zstd of content XOR base */
    int shuffle;                /* 0, or 2, 4, 8: the frame holds the content's byte planes of elements
                                   of that size (float32's exponent bytes together compress) */
    uint64_t size;              /* the content's bytes */
    repo_id base;               /* delta: the base object */
} repo_object_head;
bool repo_object_head_parse(const void *p, size_t n, repo_object_head *h);
/* Byte planes of n bytes of elem-byte elements (plane b: byte b of every element), and back. */
void repo_shuffle(void *dst, const void *src, size_t n, int elem);
void repo_unshuffle(void *dst, const void *src, size_t n, int elem);
/* The header of object id in objdir (never through a link, a regular file only); false when
 * it is missing or not an object. */
bool repo_object_head_read(const char *objdir, const repo_id *id, repo_object_head *h);
/* Decodes an object file's bytes (header and frame) into out (h.size bytes); base: the
 * base content for a delta. false with why when the frame is damaged or of another size. */
bool repo_object_decode(const void *p, size_t n, const repo_object_head *h, const void *base, void *out, char *why,
                        size_t len);
bool repo_object_has(const char *objdir, const repo_id *id);
void repo_object_path(const char *objdir, const repo_id *id, char *path, size_t len);
/* Copies an object file from one store to another (checked on the way: it is read and
 * decoded as repo_object_get does), delta bases first. *copied counts objects copied,
 * *bytes their bytes on disk. */
status repo_object_copy(const char *from, const char *to, const repo_id *id, fault_plan *chaos, uint64_t *copied,
                        uint64_t *bytes);

/* ---- manifests (repo_manifest.c) ---- */
typedef struct repo_item {
    char path[CKPT_ITEM_PATH];  /* "/params/wte.weight", "/rank/loader" */
    bool blob;                  /* per-rank rows: one chunk per row */
    char dtype[12];             /* "float32", "uint8", ... */
    int ndim;
    uint64_t dims[PARAM_MAX_DIMS];
    uint64_t offset;            /* file offset of its data in state.h5 */
    uint64_t bytes;             /* of its data */
    bool has_crc;
    uint32_t crc;               /* the dataset's CRC-32 attribute */
    uint64_t chunk_bytes;       /* bytes per chunk (a blob row, or REPO_CHUNK_BYTES rounded to elements) */
    int nchunks;
    repo_id *chunks;            /* [nchunks] */
} repo_item;

typedef struct repo_manifest {
    uint64_t file_bytes;        /* of state.h5 */
    repo_id file_hash;          /* XXH3-128 of state.h5 */
    repo_id skeleton;           /* the file's bytes outside every item, in order */
    ckpt_header h;              /* the root attributes (step, model, world size, grid, ...) */
    char *config;               /* the resolved config text the run stored */
    repo_item *items;           /* [n] by path */
    int n;
} repo_manifest;

/* Parses and validates a manifest's JSON (hostile input: sizes, offsets, shapes and
 * chunk counts must agree; items inside the file, in ascending paths, not overlapping).
 * STATUS_CORRUPT with why. */
status repo_manifest_parse(const char *text, size_t n, repo_manifest *m, char *why, size_t len);
char *repo_manifest_dump(const repo_manifest *m);    /* canonical JSON, malloc'd */
/* The manifest's sizes against its objects' headers (no decoding): every chunk holds what
 * its item says and skeleton + items make file_bytes. STATUS_CORRUPT with why: a manifest
 * whose hash is right but whose sizes lie. Missing objects are not its concern (fsck). */
status repo_manifest_check(const char *objdir, const repo_manifest *m, char *why, size_t len);
void repo_manifest_free(repo_manifest *m);
status repo_manifest_load(const char *objdir, const repo_id *id, repo_manifest *m, char *why, size_t len);

/* What a commit of a checkpoint stored. */
typedef struct repo_put_stats {
    int tensors;                /* datasets cut into chunks */
    uint64_t chunks;            /* chunks of the checkpoint */
    uint64_t chunks_new;        /* of them not yet in the store */
    uint64_t deltas;            /* of the new ones stored as a delta */
    uint64_t raw_bytes;         /* state.h5's size */
    uint64_t new_raw;           /* the new chunks' and skeleton's bytes before compression */
    uint64_t new_tensor;        /* of them, chunks of tensors (not per-rank blobs, not the skeleton) */
    uint64_t stored;            /* bytes added to the store (objects as compressed on disk) */
    bool unchanged;             /* commit: the checkpoint is the branch tip's: no commit was made */
} repo_put_stats;

/* A checkpoint read for a commit: its catalog (HDF5, not thread-safe: the caller's
 * thread) and its file, open. repo_scan_open then repo_put (thread-safe: plain reads). */
typedef struct repo_scan {
    char dir[REPO_PATH_MAX];    /* the checkpoint directory */
    int fd;                     /* state.h5, open */
    repo_manifest m;            /* items, header and config; ids filled by repo_put */
} repo_scan;
/* path: a checkpoint directory, its state.h5, or a run directory (its newest committed
 * checkpoint). STATUS_INPUT: not a committed checkpoint, or a dataset that is not one
 * contiguous range (naming it). */
status repo_scan_open(repo_scan *s, const char *path);
void repo_scan_close(repo_scan *s);
/* Stores the scanned checkpoint's chunks, skeleton and manifest (parent: the manifest to
 * take delta bases from, or NULL). Checks the file against its CRC-32 attributes while
 * reading it (a checkpoint damaged on disk is refused, STATUS_CORRUPT). */
status repo_put(repo *r, repo_scan *s, const repo_manifest *parent, repo_id *manifest, repo_put_stats *st);
/* Writes the commit's checkpoint as out_root/step_N, committed as a save is (temporary
 * directory, fsync, rename, COMMITTED marker), verified on the way: every chunk against its
 * id, every dataset against its CRC-32 (the checkpoint's own checksum attribute), the whole
 * file against the manifest's XXH3-128; path gets the checkpoint directory. threads decode
 * chunks in parallel (0: OpenMP's default). STATUS_INPUT when out_root/step_N
 * exists; STATUS_CORRUPT when an object is damaged (nothing is left). */
status repo_materialize(const char *objdir, const repo_manifest *m, const char *out_root, int threads,
                        fault_plan *chaos, char *path, size_t len);

/* ---- commits (repo_commit.c) ---- */
typedef struct repo_commit {
    repo_id manifest;
    repo_id parents[2];
    int nparents;
    char *message;
    char author[REPO_NAME_MAX];
    int64_t time;               /* seconds since the epoch */
    json_t *lineage;            /* run_dir, step, config_hash, data, code_version, metrics */
} repo_commit;
status repo_commit_load(const char *objdir, const repo_id *id, repo_commit *c, char *why, size_t len);
status repo_commit_parse(const char *text, size_t n, repo_commit *c, char *why, size_t len);
char *repo_commit_dump(const repo_commit *c);   /* canonical JSON, malloc'd */
void repo_commit_free(repo_commit *c);
/* The lineage of a scanned checkpoint: its run directory, step, config hash, the data
 * files the config names with their size and hash, the code version, and the metrics
 * record of that step from the run's metrics.jsonl when there is one. */
json_t *repo_lineage(const repo_scan *s);

/* Options and result of a commit. */
typedef struct repo_commit_opts {
    const char *message;
    const char *author;         /* NULL: $NEBULA_AUTHOR, else user@host */
    const char *branch;         /* NULL: HEAD's branch (or detached HEAD) */
    bool delta;                 /* try each new chunk as a delta against the parent commit's chunk of the
                                   same tensor and index (kept when smaller): pays when checkpoints are
                                   close (low learning rates, few steps apart), costs a decode and a
                                   second compression per chunk */
} repo_commit_opts;
/* Commits the checkpoint at `path` (repo_scan_open) on top of the branch; a checkpoint
 * under ROOT/ckpt enters the work tree. *out: the new commit, or the tip itself when the
 * checkpoint is the tip's (st->unchanged: nothing to commit). */
status repo_commit_path(repo *r, const char *path, const repo_commit_opts *o, repo_id *out, repo_put_stats *st);
/* The same from an open scan (the trainer's background thread). */
status repo_commit_scan(repo *r, repo_scan *s, const repo_commit_opts *o, repo_id *out, repo_put_stats *st);

/* ---- refs (repo_refs.c) ---- */
/* ref: "refs/heads/NAME", "refs/tags/NAME", "refs/remotes/R/NAME". *found false when it
 * does not exist; STATUS_CORRUPT when it holds no id. */
status repo_ref_read(const char *dir, const char *ref, repo_id *id, bool *found);
/* Moves a ref under its lock file (O_EXCL, holder "host pid"; a holder that is dead on
 * this host is stale and broken), compare-and-swap: old NULL means "must not exist",
 * old_any any value; to NULL deletes the ref. STATUS_PEER when the ref is no longer at
 * `old` (a concurrent update) or the lock is held longer than wait_s; writes the reflog. */
status repo_ref_update(const char *dir, const char *ref, const repo_id *old, bool old_any, const repo_id *to,
                       const char *why, double wait_s, fault_plan *chaos);
/* HEAD: its branch ("" when detached), its commit (*born false before the first one). */
status repo_head(const repo *r, char *branch, size_t len, repo_id *id, bool *born);
/* Points HEAD at a branch (symbolic) or, branch NULL, at a commit (detached). */
status repo_head_set(repo *r, const char *branch, const repo_id *id, const char *why);
/* A name to a commit: HEAD, a branch, a tag, REMOTE/BRANCH, a full id or a unique prefix of
 * 4 or more hex digits, each optionally followed by ~N (N first parents back). STATUS_INPUT
 * naming what was tried. */
status repo_resolve(const repo *r, const char *name, repo_id *id);
/* Whether `name` is a valid branch/tag/remote name (git's rules, simplified: [A-Za-z0-9._-/],
 * no "..", no leading '-' or '.', no trailing '/' or ".lock"). */
bool repo_name_ok(const char *name);
/* Whether `a` is `b` or one of its ancestors. */
bool repo_is_ancestor(const char *objdir, const repo_id *a, const repo_id *b);
/* Every ref under refs/ as (name, id) pairs, sorted; returns the count; *names and *ids malloc'd. */
int repo_refs_list(const char *dir, const char *prefix, char (**names)[256], repo_id **ids);
/* Appends a reflog line for `ref` ("HEAD" or refs/...). */
void repo_reflog_append(const char *dir, const char *ref, const repo_id *old, const repo_id *to, const char *why);

/* ---- the work tree (repo_work.c) ---- */
#define REPO_WORK_MAX 256   /* checkpoints of ROOT/ckpt listed by status (a run keeps ckpt.keep_last) */
typedef struct repo_status {
    char clean[REPO_WORK_MAX][32];  /* checkpoint names (step_N) that match a commit */
    int nclean;
    char dirty[REPO_WORK_MAX][32];  /* new or changed checkpoints under ROOT/ckpt */
    int ndirty;
} repo_status;
status repo_work_status(repo *r, repo_status *st);
/* Records that ROOT/ckpt/NAME holds the checkpoint of manifest m (a commit or a checkout). */
status repo_work_record(repo *r, const char *name, const repo_manifest *m);
/* Replaces the work tree by the commit's checkpoint (refused over uncommitted changes
 * unless force: STATUS_INPUT listing them). */
status repo_work_checkout(repo *r, const repo_id *commit, bool force, char *path, size_t len);

/* ---- store-wide (repo_fsck.c, repo_remote.c, repo_diff.c) ---- */
typedef struct repo_fsck_report {
    uint64_t objects, bad, missing, unreachable, debris;
} repo_fsck_report;
status repo_fsck(repo *r, repo_fsck_report *rep);
/* Removes the objects nothing reaches and debris, both only when older than grace_s: a
 * commit or push running meanwhile has written objects nothing names yet (git's prune
 * expiry, for the same reason). */
status repo_gc(repo *r, bool keep_reflog, double grace_s, uint64_t *removed, uint64_t *freed);
/* Objects reachable from commit `tip` missing in `to`, copied from `from` (dependencies
 * first), commits last. */
status repo_transfer(const char *from, const char *to, const repo_id *tip, fault_plan *chaos, uint64_t *copied,
                     uint64_t *bytes, uint64_t *present);
/* push: objects, then the remote branch moved under its lock if it fast-forwards;
 * STATUS_PEER (rejected) when it does not, naming both commits. */
status repo_push(repo *r, const char *remote, const char *branch, bool force, uint64_t *copied, uint64_t *bytes,
                 uint64_t *present);
status repo_pull(repo *r, const char *remote, const char *branch, uint64_t *copied, uint64_t *bytes,
                 uint64_t *present);
status repo_clone(const char *src, const char *root, bool bare, uint64_t *copied, uint64_t *bytes);

/* Two commits' checkpoints compared as nebula-ckpt diff compares two files (same rows,
 * kinds and statistics: ckpt/tool/offline.h), from the store: a tensor whose chunk ids
 * all agree is the same without a read; otherwise every chunk of both is read and the
 * statistics summed in element order. rows: a->n + b->n entries; changed[i]: the chunks
 * of row i whose ids differ. */
status repo_diff(const char *objdir, const repo_manifest *a, const repo_manifest *b, ckpt_diff_row *rows,
                 uint64_t *changed, int *nrows);

#endif
