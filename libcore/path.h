/* path — file-system helpers the executables and modules share. */
#ifndef NEBULA_PATH_H
#define NEBULA_PATH_H

#include "log.h"

/* mkdir -p: creates dir and its missing parents (0755). STATUS_IO with a message
 * naming `what` (e.g. "checkpoint directory") and the path that failed, also when
 * dir exists but is not a directory. */
status path_mkdirs(const char *dir, const char *what);

#endif
