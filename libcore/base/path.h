/* path — file-system helpers the executables and modules share. */
#ifndef NEBULA_PATH_H
#define NEBULA_PATH_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"

/* mkdir -p: creates dir and its missing parents (0755). STATUS_IO with a message
 * naming `what` (e.g. "checkpoint directory") and the path that failed, also when
 * dir exists but is not a directory. */
status path_mkdirs(const char *dir, const char *what);

/* write(2) until all n bytes are written: 0, or -1 when a write fails (errno set) or
 * writes nothing. */
int path_write_all(int fd, const void *p, size_t n);

/* pread(2) until all n bytes from offset `off` are read: 0, or -1 when a read
 * fails (errno set) or the file ends first (errno 0). */
int path_read_all_at(int fd, void *p, size_t n, uint64_t off);

/* Writes the file `path` atomically (DESIGN.md §3 durable writes): fill(ctx, fd)
 * writes the contents into `path.tmp.PID`, which is fsync'd and renamed over
 * `path`, then the directory is fsync'd, so a reader finds the old file or the
 * whole new one, never a part. fill returns 0, or -1 with errno set. STATUS_IO
 * naming `what` (e.g. "safetensors file") and the path; the temporary is removed. */
status path_write_atomic(const char *path, const char *what, int (*fill)(void *ctx, int fd), void *ctx);

#endif
