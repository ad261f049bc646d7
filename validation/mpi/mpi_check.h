/* mpi_check — the verdict of one check of an MPI test suite: every rank agrees on
 * it, ranks that failed say why on stderr, rank 0 prints "ok - ..." or "FAIL - ...".
 * Each test program includes it once; `failures` counts its failed checks. */
#ifndef NEBULA_VALIDATION_MPI_CHECK_H
#define NEBULA_VALIDATION_MPI_CHECK_H

#include <stdbool.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/runtime.h"

static int failures;

static void check(const runtime *rt, bool ok, const char *what, const char *why)
{
    int all_ok = ok;
    if (!ok && why && why[0]) fprintf(stderr, "# rank %d: %s: %s\n", rt->rank, what, why);
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_LAND, rt->world);
    if (rt->rank == 0) printf("%s - %s\n", all_ok ? "ok" : "FAIL", what);
    fflush(stdout);
    if (!all_ok) failures++;
}

/* The runtime of a test program that takes only --ranks-per-node N (virtual nodes),
 * unbound; exits through runtime_exit when it cannot start. */
static inline void mpi_test_start(runtime *rt, int *argc, char ***argv)
{
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };
    for (int i = 1; i < *argc; i++)
        if (!strcmp((*argv)[i], "--ranks-per-node") && i + 1 < *argc) ro.ranks_per_node = atoi((*argv)[++i]);
    status st = runtime_init(rt, argc, argv, &ro);
    if (st != STATUS_OK) runtime_exit(rt, st);
}

/* A fresh directory $TMPDIR/nebula-test-TAG-XXXXXX made by rank 0, its name given to
 * every rank in dir (size bytes). */
static inline void mpi_test_tmpdir(const runtime *rt, const char *tag, char *dir, size_t size)
{
    if (rt->rank == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, size, "%s/nebula-test-%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp", tag);
        CHECK(mkdtemp(dir), "mkdtemp");
    }
    MPI_Bcast(dir, (int)size, MPI_CHAR, 0, rt->world);
}

static inline int mpi_test_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Rank 0 removes dir and everything under it. */
static inline void mpi_test_rmtree(const runtime *rt, const char *dir)
{
    if (rt->rank == 0) nftw(dir, mpi_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
