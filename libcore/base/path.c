/* path — see path.h. */
#include "path.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The fd is regular and small enough: back to blocking reads. Otherwise closed. */
static int path_check_opened(int fd, struct stat *sb, uint64_t max_bytes, char *why, size_t len)
{
    int err = 0;
    if (fstat(fd, sb) != 0) {
        err = errno;
        snprintf(why, len, "cannot be examined (fstat): %s", strerror(err));
    } else if (!S_ISREG(sb->st_mode)) {
        err = EINVAL;
        snprintf(why, len, "is %s, not a regular file", path_kind(sb->st_mode));
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

int path_open_regular(const char *path, int *fd, struct stat *sb, uint64_t max_bytes, char *why, size_t len)
{
    *fd = -1;
    /* stat first: a device is refused without being opened (opening some has effects) */
    if (stat(path, sb) != 0) {
        snprintf(why, len, "cannot be opened: %s", strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb->st_mode)) {
        snprintf(why, len, "is %s, not a regular file", path_kind(sb->st_mode));
        errno = EINVAL;
        return -1;
    }
    /* and fstat after: the path may have been replaced in between */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) {
        snprintf(why, len, "cannot be opened: %s", strerror(errno));
        return -1;
    }
    if (path_check_opened(f, sb, max_bytes, why, len) != 0) return -1;
    *fd = f;
    return 0;
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
    if (path_check_opened(f, &sb, 0, why, len) != 0) return -1;
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

status path_write_atomic(const char *path, const char *what, int (*fill)(void *ctx, int fd), void *ctx)
{
    char tmp[4096], dir[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        log_error("%s path is too long: %s", what, path);
        return STATUS_IO;
    }
    unlink(tmp);  /* left by a crashed writer of the same pid, or planted: unlink never follows */
    int fd;
    char why[256];
    if (path_create_regular(tmp, O_EXCL, 0644, &fd, why, sizeof why) != 0) {
        log_error("cannot create %s %s: %s", what, tmp, why);
        return STATUS_IO;
    }
    int rc = fill(ctx, fd);
    if (!rc) rc = fsync(fd);
    if (close(fd) != 0) rc = -1;
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
