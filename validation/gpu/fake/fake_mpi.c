/* fake_mpi — the MPI side of the fake, built twice: FAKE_MPI_CUDA_AWARE=0 (MPI on
 * host memory: comm_nccl must stage through its pinned slots) and =1 (MPI takes
 * device pointers). mpi-ext.h (fake) points comm_nccl.c's MPIX_Query_cuda_support
 * here, so the path tested does not depend on how the installed MPI was built.
 *
 * Every MPI_Iallreduce (only comm_nccl's inter-node step calls it in this test) is
 * checked through the profiling interface: its buffer lies in a pinned staging
 * block (staged) or a device block (CUDA-aware), and no queued device work still
 * reads or writes it — the event comm_nccl waited for really covers the copy or the
 * reduce-scatter that produced it. */
#include <mpi.h>

#include "fake_impl.h"
#include "mpi-ext.h"

#ifndef FAKE_MPI_CUDA_AWARE
#error "build with -DFAKE_MPI_CUDA_AWARE=0 (staged) or 1 (CUDA-aware)"
#endif

int fake_mpix_query_cuda_support(void)
{
    return FAKE_MPI_CUDA_AWARE;
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request)
{
    int size = 0;
    MPI_Type_size(type, &size);
    size_t bytes = (size_t)count * (size_t)size;
    if (sendbuf != MPI_IN_PLACE) {
        if (FAKE_MPI_CUDA_AWARE) fake_check_device(sendbuf, bytes, "MPI_Iallreduce send buffer (CUDA-aware)");
        else fake_check_pinned(sendbuf, bytes, "MPI_Iallreduce send buffer (staged)");
        fake_check_idle(sendbuf, bytes, "MPI_Iallreduce send buffer");
    }
    if (FAKE_MPI_CUDA_AWARE) fake_check_device(recvbuf, bytes, "MPI_Iallreduce buffer (CUDA-aware MPI step)");
    else fake_check_pinned(recvbuf, bytes, "MPI_Iallreduce buffer (staged MPI step)");
    fake_check_idle(recvbuf, bytes, "MPI_Iallreduce buffer");
    return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
}
