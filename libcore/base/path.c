/* path — see path.h. */
#include "path.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

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
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        log_error("cannot create %s %s: %s", what, tmp, log_errno_str());
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
