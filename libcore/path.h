/* path — file-system helpers the executables and modules share. */
#ifndef NEBULA_PATH_H
#define NEBULA_PATH_H

#include <stddef.h>

#include "log.h"

/* mkdir -p: creates dir and its missing parents (0755). STATUS_IO with a message
 * naming `what` (e.g. "checkpoint directory") and the path that failed, also when
 * dir exists but is not a directory. */
status path_mkdirs(const char *dir, const char *what);

/* write(2) until all n bytes are written: 0, or -1 when a write fails (errno set) or
 * writes nothing. */
int path_write_all(int fd, const void *p, size_t n);

#endif
