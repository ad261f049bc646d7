/* repo_impl — what the repository module's files share: paths, durable small writes,
 * locks. Not for apps/. */
#ifndef NEBULA_REPO_IMPL_H
#define NEBULA_REPO_IMPL_H

#include "repo.h"

#define REPO_OBJ_MAGIC "NBMOBJ1"            /* 8 bytes with its NUL */
#define REPO_OBJ_MAX ((uint64_t)1 << 34)    /* no object is larger (16 GiB): a bigger size field lies */
#define REPO_ZSTD_LEVEL 1                   /* on byte planes as small as level 3, twice as fast */

/* Writes `n` bytes as the file `path` durably (temporary name in its directory, fsync,
 * rename, fsync of the directory), never through a link; the fault points model.NAME_write,
 * NAME_fsync and NAME_rename fire with point prefix `point` ("model.object"). */
status repo_write_file(const char *path, const void *p, size_t n, fault_plan *chaos, const char *point);
/* The same, the directory's fsync left to the caller when !dirsync: chunks and skeletons,
 * whose names repo_objects_sync makes durable at once before a manifest names them (the
 * file itself is always fsync'd before its rename: a name never stands for lost bytes). */
status repo_write_file_sync(const char *path, const void *p, size_t n, fault_plan *chaos, const char *point,
                            bool dirsync);
/* fsync of the objects/xx directories touched[xx] marks (NULL: all): the names of the
 * objects written without it. */
void repo_objects_sync(const char *objdir, const uint8_t *touched);
/* Reads a whole small file Nebula keeps (never through a link, at most max bytes),
 * NUL-terminated; STATUS_INPUT when missing, STATUS_CORRUPT when not a regular file. */
status repo_read_file(const char *path, uint64_t max, char **out, size_t *n, char *why, size_t len);
/* A lock file (O_EXCL) holding "host pid"; a stale one (its holder dead on this host) is
 * removed. Waits up to wait_s. STATUS_PEER when another process holds it. */
status repo_lock(const char *lock, double wait_s, fault_plan *chaos);
void repo_unlock(const char *lock);
/* mkdir -p of the parent of path */
status repo_mkparent(const char *path);
/* "user@host", or $NEBULA_AUTHOR */
void repo_default_author(char *out, size_t len);
double repo_now(void);

#endif
