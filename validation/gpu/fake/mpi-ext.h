/* mpi-ext.h (fake) — shadows Open MPI's extension header in the fake build of
 * libcore/comm/comm_nccl.c, so whether MPI "is CUDA-aware" is the test binary's choice
 * (fake_mpi.c, built once staged and once CUDA-aware), not the installed MPI's.
 * The macro renames the query so no MPI library's own symbol is replaced. */
#ifndef NEBULA_FAKE_MPI_EXT_H
#define NEBULA_FAKE_MPI_EXT_H

#define OMPI_HAVE_MPI_EXT_CUDA 1
#define MPIX_Query_cuda_support fake_mpix_query_cuda_support
int fake_mpix_query_cuda_support(void);

#endif
