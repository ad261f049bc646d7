/* path — see path.h. */
#include "path.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fault.h"

const char *path_kind(mode_t mode)
{
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "a special file";
}

/* The fd is regular and small enough: back to blocking reads. Otherwise closed. `reading`:
 * a file that says it is empty must read as empty (/proc and /sys files say 0 bytes and
 * hold text, /proc/self/mem says 0 bytes and fails): anything else is refused, as a
 * reader sized by st_size would take it for an empty file. */
static int path_check_opened(int fd, struct stat *sb, uint64_t max_bytes, bool reading, char *why, size_t len)
{
    int err = 0;
    char probe;
    ssize_t got = 0;
    if (fstat(fd, sb) != 0) {
        err = errno;
        snprintf(why, len, "cannot be examined (fstat): %s", strerror(err));
    } else if (!S_ISREG(sb->st_mode)) {
        err = EINVAL;
        snprintf(why, len, "is %s, not a regular file", path_kind(sb->st_mode));
    } else if (reading && sb->st_size == 0 && (got = pread(fd, &probe, 1, 0)) != 0) {
        err = EINVAL;
        if (got > 0) snprintf(why, len, "says it holds 0 bytes but reads data (a /proc or /sys file): not a regular file on disk");
        else snprintf(why, len, "says it holds 0 bytes and cannot be read (%s): not a regular file on disk", strerror(errno));
    } else if (max_bytes > 0 && (uint64_t)sb->st_size > max_bytes) {
        err = EFBIG;
        snprintf(why, len, "is %" PRIu64 " bytes, more than the %" PRIu64 " this file may have",
                 (uint64_t)sb->st_size, max_bytes);
    } else {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
            err = errno;
            snprintf(why, len, "cannot be switched to blocking reads: %s", strerror(err));
        }
    }
    if (!err) return 0;
    close(fd);
    errno = err;
    return -1;
}

/* path_open_regular, and with `own` path_open_own: lstat and O_NOFOLLOW. */
static int path_open_read(const char *path, bool own, int *fd, struct stat *sb, uint64_t max_bytes, char *why,
                          size_t len)
{
    *fd = -1;
    /* stat first: a device is refused without being opened (opening some has effects) */
    if ((own ? lstat(path, sb) : stat(path, sb)) != 0) {
        snprintf(why, len, "cannot be opened: %s", strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb->st_mode)) {
        snprintf(why, len, "is %s, not a regular file%s", path_kind(sb->st_mode),
                 own && S_ISLNK(sb->st_mode) ? ": a file of the run directory is never read through a link" : "");
        errno = EINVAL;
        return -1;
    }
    /* and fstat after: the path may have been replaced in between */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (own ? O_NOFOLLOW : 0));
    if (f < 0) {
        int err = errno;
        if (own && err == ELOOP) snprintf(why, len, "is a symbolic link, not a regular file: a file of the run "
                                          "directory is never read through a link");
        else snprintf(why, len, "cannot be opened: %s", strerror(err));
        errno = own && err == ELOOP ? EINVAL : err;
        return -1;
    }
    if (path_check_opened(f, sb, max_bytes, true, why, len) != 0) return -1;
    *fd = f;
    return 0;
}

int path_open_regular(const char *path, int *fd, struct stat *sb, uint64_t max_bytes, char *why, size_t len)
{
    return path_open_read(path, false, fd, sb, max_bytes, why, len);
}

int path_open_own(const char *path, int *fd, struct stat *sb, uint64_t max_bytes, char *why, size_t len)
{
    return path_open_read(path, true, fd, sb, max_bytes, why, len);
}

int path_create_regular(const char *path, int flags, mode_t mode, int *fd, char *why, size_t len)
{
    *fd = -1;
    if ((flags & O_ACCMODE) == O_RDONLY) flags |= O_WRONLY;
    int f = open(path, O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | flags, mode);
    if (f < 0) {
        int err = errno;
        struct stat lsb;
        if (lstat(path, &lsb) == 0 && !S_ISREG(lsb.st_mode)) {
            snprintf(why, len, "is %s, not a regular file: Nebula creates it and never writes through %s",
                     path_kind(lsb.st_mode), S_ISLNK(lsb.st_mode) ? "a link" : "anything else");
            err = EINVAL;
        } else {
            snprintf(why, len, "cannot be created: %s", strerror(err));
        }
        errno = err;
        return -1;
    }
    struct stat sb;
    if (path_check_opened(f, &sb, 0, false, why, len) != 0) return -1;
    *fd = f;
    return 0;
}

status path_mkdirs(const char *dir, const char *what)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
        log_error("%s path is too long: %s", what, dir);
        return STATUS_IO;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) goto mkdir_failed;
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) goto mkdir_failed;
    struct stat sb;
    if (stat(dir, &sb) != 0) goto mkdir_failed;
    if (!S_ISDIR(sb.st_mode)) {
        log_error("%s %s exists and is not a directory", what, dir);
        return STATUS_IO;
    }
    return STATUS_OK;
mkdir_failed:
    log_error("cannot create %s %s: %s", what, p, log_errno_str());
    return STATUS_IO;
}

int path_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int path_read_all_at(int fd, void *p, size_t n, uint64_t off)
{
    char *c = p;
    while (n > 0) {
        if (off > (uint64_t)INT64_MAX) { errno = EOVERFLOW; return -1; }
        ssize_t r = pread(fd, c, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) errno = 0;
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

#ifdef CHAOS
static fault_plan out_faults;
static void out_faults_init(void)
{
    if (fault_plan_init(&out_faults, "out") != STATUS_OK) out_faults.n = 0;  /* logged; the trainer refuses it */
}
#endif

/* The CHAOS build's fault points of every atomic write (module "out", base/fault.h): the
 * errno the call at `point` fails with, 0 in the normal build. */
static int out_fault(const char *point)
{
#ifdef CHAOS
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, out_faults_init);
    return fault_errno(&out_faults, point, -1);
#else
    (void)point;
    return 0;
#endif
}

/* errno = the injected e and -1; rc itself when nothing is injected at `point` */
static int injected(int rc, const char *point)
{
    int e = rc ? 0 : out_fault(point);
    if (e) errno = e;
    return e ? -1 : rc;
}

status path_write_atomic(const char *path, const char *what, int (*fill)(void *ctx, int fd), void *ctx)
{
    char tmp[4096], dir[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        log_error("%s path is too long: %s", what, path);
        return STATUS_IO;
    }
    /* the rename replaces a regular file or a link, never a device, FIFO or socket */
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
        log_error("%s %s is %s: Nebula writes its files as regular files and never replaces anything else",
                  what, path, path_kind(sb.st_mode));
        return STATUS_INPUT;
    }
    unlink(tmp);  /* left by a crashed writer of the same pid, or planted: unlink never follows */
    int fd;
    char why[256];
    if (injected(0, "out.create") != 0) {
        log_error("cannot create %s %s: %s", what, tmp, log_errno_str());
        return STATUS_IO;
    }
    if (path_create_regular(tmp, O_EXCL, 0644, &fd, why, sizeof why) != 0) {
        log_error("cannot create %s %s: %s", what, tmp, why);
        return STATUS_IO;
    }
    /* a write fault is injected after the fill: the temporary is whole, and must still go */
    int rc = injected(fill(ctx, fd), "out.write");
    if (!rc) rc = injected(fsync(fd), "out.fsync");
    if (close(fd) != 0) rc = -1;
    else rc = injected(rc, "out.close");
    if (!rc) rc = injected(0, "out.rename");  /* before the rename: an injected one never ran */
    if (!rc) rc = rename(tmp, path);
    if (rc) {
        log_error("cannot write %s %s: %s", what, path, log_errno_str());
        unlink(tmp);
        return STATUS_IO;
    }
    /* Make the rename itself durable; file systems that cannot fsync a directory
     * (some network mounts) have nothing more to offer, so failure is not an error. */
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return STATUS_OK;
}

/* ---- the output rule (docs/design.md#outputs) ---- */

/* A run directory's own files, and its directories whose every file is the run's. */
static const char *const run_files[] = { "lock", "heartbeat", "relaunch", "beacons", "control", "control.applied",
                                         "control.rejected", "config.ini", "metrics.jsonl", "trace.json",
                                         "profile.json", "profile-shapes" };
static const char *const run_subdirs[] = { "ckpt", "reload", "tb" };
#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* Whether dir holds a regular file (not a link) of that name. */
static bool path_holds(const char *dir, const char *name)
{
    char p[PATH_MAX + 64];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && lstat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

bool path_is_run_dir(const char *dir)
{
    return path_holds(dir, "lock") || path_holds(dir, "metrics.jsonl") || path_holds(dir, "heartbeat");
}

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* The resolved name of dir for a message (the path as built when it cannot be resolved). */
static const char *shown(const char *dir, char *buf)
{
    return realpath(dir, buf) ? buf : dir;
}

/* p: the nearest directory of p that exists, p itself when it does (*cur its stat); the
 * name below it on the way to the missing one in `child` ("" when p exists). The number
 * of names taken off, -1 when nothing of it exists. */
static int nearest_existing(char *p, size_t cap, struct stat *cur, char *child, size_t clen)
{
    int missing = 0;
    child[0] = '\0';
    for (; stat(p, cur) != 0; missing++) {
        size_t n = strlen(p);
        while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
        char *s = strrchr(p, '/');
        if (!s && !strcmp(p, ".")) return -1;
        snprintf(child, clen, "%s", s ? s + 1 : p);
        if (!s) snprintf(p, cap, ".");
        else s[s == p ? 1 : 0] = '\0';
    }
    return missing;
}

bool path_in_run_state(const char *dir, char *what, size_t len, bool *self)
{
    char p[PATH_MAX + 16], res[PATH_MAX], child[NAME_MAX + 1];
    struct stat cur, prev;
    int missing = -1;
    *self = false;
    if (snprintf(p, sizeof p, "%s", dir) < (int)sizeof p)
        missing = nearest_existing(p, sizeof p, &cur, child, sizeof child);
    if (missing < 0) return false;
    /* the place found is dir itself when it lies no name above dir */
    for (int level = 0; level < PATH_MAX / 4; level++) {
        if (path_holds(p, "COMMITTED")) {
            *self = missing + level == 0;
            snprintf(what, len, "the committed checkpoint %s", shown(p, res));
            return true;
        }
        for (size_t i = 0; path_is_run_dir(p) && i < NELEMS(run_subdirs); i++) {
            char d[PATH_MAX + 64];
            struct stat dsb;
            snprintf(d, sizeof d, "%s/%s", p, run_subdirs[i]);
            /* at the first level the directory on the way is one still to be created */
            if (level == 0 ? strcmp(child, run_subdirs[i]) != 0 : stat(d, &dsb) != 0 || !same_file(&dsb, &prev))
                continue;
            snprintf(what, len, "%s/ of the run directory %s, which holds only that run's own files", run_subdirs[i],
                     shown(p, res));
            *self = missing + level == 1;
            return true;
        }
        prev = cur;
        size_t n = strlen(p);
        if (n + 4 >= sizeof p) break;
        memcpy(p + n, "/..", 4);
        if (stat(p, &cur) != 0 || same_file(&cur, &prev)) break;  /* / is its own parent */
    }
    return false;
}

static status output_refuse(const char *flag, const char *out, const char *what)
{
    log_error0("%s %s: %s\nHINT: give another path: an output never replaces a device, a FIFO, an input of the "
               "same command, a run directory's own files or a checkpoint (docs/design.md#outputs)", flag, out, what);
    return STATUS_INPUT;
}

/* The directory out would be written in: not a run directory whose own file out would be,
 * and, with every directory above it, not a committed checkpoint nor a run directory's
 * ckpt/, reload/ or tb/ (path_in_run_state: a directory still to be created counts as inside
 * the one it would be created in). */
static status output_ancestors(const char *out, const char *flag, const struct stat *osb)
{
    char p[PATH_MAX + 16], msg[2 * PATH_MAX + 256], res[PATH_MAX], what[2 * PATH_MAX + 128];
    const char *slash = strrchr(out, '/'), *base = slash ? slash + 1 : out;
    if (!slash) snprintf(p, sizeof p, ".");
    else snprintf(p, sizeof p, "%.*s", slash == out ? 1 : (int)(slash - out), out);
    for (size_t i = 0; path_is_run_dir(p) && i < NELEMS(run_files); i++) {
        char f[PATH_MAX + 64];
        struct stat fsb;
        snprintf(f, sizeof f, "%s/%s", p, run_files[i]);
        if (strcmp(base, run_files[i]) != 0 && !(osb && lstat(f, &fsb) == 0 && same_file(osb, &fsb))) continue;
        snprintf(msg, sizeof msg, "it would replace %s, a file the run directory %s keeps", run_files[i],
                 shown(p, res));
        return output_refuse(flag, out, msg);
    }
    bool self;
    if (!path_in_run_state(p, what, sizeof what, &self)) return STATUS_OK;
    snprintf(msg, sizeof msg, "it would be inside %s", what);
    return output_refuse(flag, out, msg);
}

status path_output_check(const char *out, const char *flag, const char *const *inputs, int ninputs)
{
    char msg[2 * PATH_MAX + 256];
    struct stat osb, isb;
    bool exists = lstat(out, &osb) == 0;
    if (exists && S_ISDIR(osb.st_mode)) return output_refuse(flag, out, "it is a directory; the output is a file");
    if (exists && !S_ISREG(osb.st_mode) && !S_ISLNK(osb.st_mode)) {
        snprintf(msg, sizeof msg, "it is %s; an output is written only as a regular file, never over "
                 "or into a device, FIFO or socket", path_kind(osb.st_mode));
        return output_refuse(flag, out, msg);
    }
    bool reg = exists && S_ISREG(osb.st_mode);  /* a link is replaced by the rename, its target untouched */
    TRY(output_ancestors(out, flag, reg ? &osb : NULL));
    for (int i = 0; i < ninputs && reg; i++) {
        if (!inputs[i] || !inputs[i][0] || stat(inputs[i], &isb) != 0 || !same_file(&osb, &isb)) continue;
        snprintf(msg, sizeof msg, "it is the input %s of this command (the same file)", inputs[i]);
        return output_refuse(flag, out, msg);
    }
    return STATUS_OK;
}
