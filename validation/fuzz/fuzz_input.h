/* fuzz_input — hands a fuzzer's bytes to a reader as a real file: a memfd
 * (anonymous memory file) opened again through /proc/self/fd, so st_open and
 * llmc_read run their production path (open, fstat, pread) with no disk I/O and
 * nothing left behind; or a temporary file, for HDF5. Shared by the harnesses; header-only, each harness is its
 * own program. */
#ifndef NEBULA_FUZZ_INPUT_H
#define NEBULA_FUZZ_INPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/path.h"

/* Writes data to a new memfd and its /proc path to `path`; returns the fd (the
 * caller closes it). A failure here is the machine's, not the input's: abort. */
static inline int fuzz_input_open(const uint8_t *data, size_t size, char *path, size_t len)
{
    int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd < 0 || path_write_all(fd, data, size) != 0) {
        perror("fuzz_input_open");
        abort();
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

/* The same as a file in $TMPDIR (or /tmp), for a reader that resolves the path it is
 * given (HDF5 takes its realpath, which a memfd has not): its path goes to `path`; the
 * caller closes the fd and unlinks the path. */
static inline int fuzz_input_file(const uint8_t *data, size_t size, char *path, size_t len)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/nebula-fuzz-XXXXXX", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0 || path_write_all(fd, data, size) != 0) {
        perror("fuzz_input_file");
        abort();
    }
    return fd;
}

/* An accepted input broke a promise of the reader: a bug, reported as a crash. */
static inline void fuzz_require(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz: invariant broken: %s\n", what);
        abort();
    }
}

#endif
