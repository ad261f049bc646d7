/* eio_preload — an LD_PRELOAD library for validation/cli/test_io_faults.sh: on the MPI
 * rank NEBULA_TEST_EIO_RANK (OMPI_COMM_WORLD_RANK, or PMI_RANK), every write to a file
 * whose path contains NEBULA_TEST_EIO_PATH fails with EIO, as a failing disk or a
 * server's error would, in whatever library makes it (libc's pwrite, pwritev and write,
 * under Nebula, HDF5 or MPI-IO). Built by the test with `cc -shared -fPIC`.
 * With NEBULA_TEST_EIO_SIGNAL set as well, that rank creates the file it names when it
 * closes such a file after a write to it failed: by then Nebula has told the other ranks
 * of the failure (ckpt_file_write_slices tells them before its close). On the rank
 * NEBULA_TEST_HOLD_RANK, the first write to such a file opened write-only (a rank's
 * slices; HDF5 opens its files read-write) waits until the signal file exists (20 s at
 * most): a healthy rank that has its share still to write when the failure is known, as
 * one with gigabytes to write has, whatever the scheduling of the test machine. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static int failed_once;

/* This process is the rank named by env var `which`, and fd is a file on the path. */
static int on_path(int fd, const char *which)
{
    const char *want = getenv(which), *path = getenv("NEBULA_TEST_EIO_PATH");
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = getenv("PMI_RANK");
    if (!want || !path || !rank || strcmp(want, rank) != 0) return 0;
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) return 0;
    target[n] = '\0';
    return strstr(target, path) != NULL;
}

static void hold(int fd)
{
    static int held;
    const char *sig = getenv("NEBULA_TEST_EIO_SIGNAL");
    if (held || !sig || !on_path(fd, "NEBULA_TEST_HOLD_RANK") || (fcntl(fd, F_GETFL) & O_ACCMODE) != O_WRONLY) return;
    held = 1;
    struct timespec ms5 = { 0, 5000000L };
    for (int i = 0; i < 4000 && access(sig, F_OK) != 0; i++) nanosleep(&ms5, NULL);
}

static int hit(int fd)
{
    hold(fd);
    if (!on_path(fd, "NEBULA_TEST_EIO_RANK")) return 0;
    failed_once = 1;
    errno = EIO;
    return 1;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t at)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    return hit(fd) ? -1 : real(fd, buf, n, at);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t at)
{
    return pwrite(fd, buf, n, at);
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t at)
{
    static ssize_t (*real)(int, const struct iovec *, int, off_t);
    if (!real) real = (ssize_t (*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "pwritev");
    return hit(fd) ? -1 : real(fd, iov, n, at);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    return hit(fd) ? -1 : real(fd, buf, n);
}

int close(int fd)
{
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "close");
    const char *sig = getenv("NEBULA_TEST_EIO_SIGNAL");
    if (failed_once && sig && on_path(fd, "NEBULA_TEST_EIO_RANK")) {
        int e = errno, s = open(sig, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (s >= 0) real(s);
        errno = e;
    }
    return real(fd);
}
