/* mpi_check — the verdict of one check of an MPI test suite: every rank agrees on
 * it, ranks that failed say why on stderr, rank 0 prints "ok - ..." or "FAIL - ...".
 * Each test program includes it once; `failures` counts its failed checks. */
#ifndef NEBULA_VALIDATION_MPI_CHECK_H
#define NEBULA_VALIDATION_MPI_CHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

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

#endif
