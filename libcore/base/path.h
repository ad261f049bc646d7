/* path — file-system helpers the executables and modules share. */
#ifndef NEBULA_PATH_H
#define NEBULA_PATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "log.h"

/* mkdir -p: creates dir and its missing parents (0755). STATUS_IO with a message
 * naming `what` (e.g. "checkpoint directory") and the path that failed, also when
 * dir exists but is not a directory. */
status path_mkdirs(const char *dir, const char *what);

/* Opens a path someone else chose (a config, a data set, a tuning table) for reading,
 * never blocking and never reading without end: anything but a regular
 * file (a FIFO with no writer would block open(2), /dev/zero never ends) is refused,
 * seen by stat(2) before opening, and by fstat(2) after an O_NONBLOCK open in case
 * the path changed in between; so is a file that says it holds 0 bytes but does not read
 * as empty (/proc/self/status, /proc/self/mem). The fd returned reads blocking, O_CLOEXEC. max_bytes
 * > 0 also refuses a larger file. Returns 0 with *fd and *sb (fstat of the opened
 * file), or -1 with errno and `why` set: the reason as a predicate, without the path
 * ("is a FIFO (named pipe), not a regular file", "cannot be opened: ..."). */
int path_open_regular(const char *path, int *fd, struct stat *sb, uint64_t max_bytes, char *why, size_t len);

/* path_open_regular for a file Nebula keeps in a run directory and reads back (a hot-reload
 * request or answer, the elastic control file): never through a symbolic link (lstat, then
 * O_NOFOLLOW), since a link planted there would make a run as root read the link's target
 * and copy it into an answer file. A link is refused with errno EINVAL and `why` "is a
 * symbolic link, not a regular file: ...". */
int path_open_own(const char *path, int *fd, struct stat *sb, uint64_t max_bytes, char *why, size_t len);

/* Creates or opens, for writing, a file Nebula itself keeps in its run directory (the
 * heartbeat, the lock, metrics.jsonl): never through a symbolic link (O_NOFOLLOW: a
 * link planted there would make a run overwrite the link's target with its
 * permissions), never blocking on a FIFO, never anything but a regular file. `flags`
 * adds to O_CREAT: O_RDWR (O_WRONLY when no access mode is given), O_APPEND, O_TRUNC,
 * O_EXCL. Same returns as path_open_regular; errno is EINVAL when a link or anything
 * but a regular file stands under the name. */
int path_create_regular(const char *path, int flags, mode_t mode, int *fd, char *why, size_t len);

/* "a directory", "a FIFO", ... for a file type in messages. */
const char *path_kind(mode_t mode);

/* write(2) until all n bytes are written: 0, or -1 when a write fails (errno set) or
 * writes nothing. */
int path_write_all(int fd, const void *p, size_t n);

/* pread(2) until all n bytes from offset `off` are read: 0, or -1 when a read
 * fails (errno set) or the file ends first (errno 0). */
int path_read_all_at(int fd, void *p, size_t n, uint64_t off);

/* Writes the file `path` atomically (docs/design.md#durable-writes): fill(ctx, fd)
 * writes the contents into `path.tmp.PID`, which is fsync'd and renamed over
 * `path`, then the directory is fsync'd, so a reader finds the old file or the
 * whole new one, never a part. The temporary is created with O_EXCL|O_NOFOLLOW (a
 * stale one is removed first), so a link planted under its name is never written
 * through, and rename replaces a link at `path` itself, not its target. fill returns 0, or -1 with errno set. STATUS_IO
 * naming `what` (e.g. "safetensors file") and the path; the temporary is removed.
 * STATUS_INPUT, before anything is written, when a device, FIFO, socket or directory
 * stands at `path`: the rename never replaces one. */
status path_write_atomic(const char *path, const char *what, int (*fill)(void *ctx, int fd), void *ctx);

/* The one output rule (docs/design.md#outputs): every file a Nebula program writes at a
 * path a user gave (--out, -o, profile.shapes, a bench table, ...) passes this check before
 * anything is computed or written, and is then written by path_write_atomic. Refused,
 * STATUS_INPUT (exit 2) with one message (rank 0) naming `flag` (the option), the output
 * and what it would replace:
 *   - anything but a regular file or a symbolic link under the name: a directory, and a
 *     device node, FIFO or socket, which is neither replaced nor written into (decided:
 *     `--out /dev/null` is an error, not a way to discard an output; a FIFO would block);
 *   - one of `inputs` (the command's input files), compared by device and inode, so a
 *     hard link or another spelling of an input is the input;
 *   - a file a run directory keeps (lock, heartbeat, relaunch, beacons, control,
 *     control.applied, control.rejected, config.ini, metrics.jsonl, trace.json,
 *     profile.json, profile-shapes), or any path inside its ckpt/, reload/ or tb/, or
 *     inside a committed checkpoint (a directory holding COMMITTED), whether or not that
 *     run directory is an input (path_in_run_state).
 * A new name in a run directory (RUN_DIR/report.html) is allowed; a symbolic link under
 * the output's name is allowed only for a writer that replaces it (path_write_atomic's
 * rename, or unlink and an O_EXCL create): its target is never written. */
status path_output_check(const char *out, const char *flag, const char *const *inputs, int ninputs);

/* Whether dir is, or lies inside, a committed checkpoint (a directory holding COMMITTED)
 * or a run directory's ckpt/, reload/ or tb/: the places whose every file belongs to a run.
 * dir need not exist: its missing tail counts as created inside its nearest existing
 * directory (RUN_DIR/ckpt/new is inside ckpt/ even before RUN_DIR/ckpt exists). The
 * directories above are walked by "..", so a link on the way does not hide one. true
 * with `what` naming the place ("the committed checkpoint /abs/RUN/ckpt/step_00000004",
 * "tb/ of the run directory /abs/RUN, ...") and *self when dir itself is that place.
 * The output rule's walk, and the trainer's check of its own --run-dir. */
bool path_in_run_state(const char *dir, char *what, size_t len, bool *self);

/* Whether dir holds a run: the lock file every run creates at its start, metrics.jsonl or
 * heartbeat (regular files, not links). */
bool path_is_run_dir(const char *dir);

#endif
