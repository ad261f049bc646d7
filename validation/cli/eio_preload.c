/* eio_preload — an LD_PRELOAD library for validation/cli/test_io_faults.sh: on the MPI
 * rank NEBULA_TEST_EIO_RANK (OMPI_COMM_WORLD_RANK, or PMI_RANK), every write to a file
 * whose path contains NEBULA_TEST_EIO_PATH fails with EIO, as a failing disk or a
 * server's error would, in whatever library makes it (libc's pwrite, pwritev and write,
 * under Nebula, HDF5 or MPI-IO). Built by the test with `cc -shared -fPIC`. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static int hit(int fd)
{
    const char *want = getenv("NEBULA_TEST_EIO_RANK"), *path = getenv("NEBULA_TEST_EIO_PATH");
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = getenv("PMI_RANK");
    if (!want || !path || !rank || strcmp(want, rank) != 0) return 0;
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) return 0;
    target[n] = '\0';
    if (!strstr(target, path)) return 0;
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
