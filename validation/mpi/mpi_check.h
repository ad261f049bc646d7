/* mpi_check — the verdict of one check of an MPI test suite: every rank agrees on
 * it, ranks that failed say why on stderr, rank 0 prints "ok - ..." or "FAIL - ...".
 * Each test program includes it once; `failures` counts its failed checks. */
#ifndef NEBULA_VALIDATION_MPI_CHECK_H
#define NEBULA_VALIDATION_MPI_CHECK_H

#include <stdbool.h>
#include <stdio.h>

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

#endif
