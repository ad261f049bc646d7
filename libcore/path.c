/* path — see path.h. */
#include "path.h"

#include <errno.h>
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
