/* fake_impl.h — what the fake's files share: the streams' work queues (fake_cuda.c),
 * the checks on device and pinned memory, and the one way to fail. */
#ifndef NEBULA_FAKE_IMPL_H
#define NEBULA_FAKE_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda_runtime.h"

/* A "kernel" run by the host when it reaches the head of its stream; the stream
 * stays blocked until it returns true (an NCCL collective waiting for its peers). */
typedef bool (*fake_step_fn)(void *arg);

/* Queues step(arg) on s (NULL: the legacy stream); it reads [rd, rd+rd_bytes) and
 * writes [wr, wr+wr_bytes) of device memory (for the hazard checks below). */
void fake_enqueue_step(cudaStream_t s, fake_step_fn step, void *arg, const void *rd, size_t rd_bytes, void *wr,
                       size_t wr_bytes);

/* "Time passes": each stream runs one queued operation (fake_cuda.c says why). */
void fake_progress(void);

/* Fail unless [p, p+bytes) lies inside one live cudaMalloc block (device) or
 * cudaMallocHost block (pinned); what names the caller in the message. */
void fake_check_device(const void *p, size_t bytes, const char *what);
void fake_check_pinned(const void *p, size_t bytes, const char *what);

/* Fail if queued device work still reads or writes [p, p+bytes): the host (or MPI)
 * is about to touch memory the device has not finished with. */
void fake_check_idle(const void *p, size_t bytes, const char *what);

/* Prints "FAIL  fake CUDA/NCCL (rank R): ..." and ends the job (MPI_Abort). */
_Noreturn void fake_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* World rank, or -1 before MPI_Init. */
int fake_rank(void);

/* Communicators aborted by this process (fake_nccl.c): after an abort comm_nccl_free
 * frees host memory only, by design, so the exit-time leak check stands down. */
extern int fake_nccl_aborts;
/* Communicators initialised and not yet destroyed or aborted. */
extern int fake_nccl_live;

#endif
