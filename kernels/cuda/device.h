/* device — the CUDA runtime behind a C interface, so that libcore and the tests
 * compile with mpicc and link libkernels_cuda only when nvcc is present.
 *
 * The one design decision: kernels keep the CPU kernels' signatures exactly
 * (kernels/cpu headers; cuda_<name> takes the same arguments as <name>, on device
 * pointers), so a model's flat list of layer calls runs on either device through a
 * table of function pointers. What the signatures cannot carry is bound to the
 * calling thread, as cuBLAS binds a stream to its handle: the stream kernels are
 * launched on (cuda_stream_use) and the first error a kernel hit (cuda_error_take).
 * Kernels never synchronise and never allocate after their first call with a given
 * size: scratch comes from one workspace that grows only when a bigger one is asked
 * for (at the first step). */
#ifndef NEBULA_KERNELS_CUDA_DEVICE_H
#define NEBULA_KERNELS_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *cuda_stream; /* = cudaStream_t */
typedef struct CUevent_st *cuda_event;   /* = cudaEvent_t */

/* Number of usable CUDA devices; 0 when there is no driver or no device. */
int cuda_device_count(void);

typedef struct cuda_device_info {
    char name[128];         /* e.g. "NVIDIA H200" */
    int sm_major, sm_minor; /* compute capability */
    int multiprocessors;    /* SM count */
    size_t memory_bytes;    /* global memory */
} cuda_device_info;

/* Makes device `ordinal` current for the calling thread and describes it; 0 or a CUDA error code. */
int cuda_device_select(int ordinal, cuda_device_info *info);

/* Memory and copies, on the current stream; 0 or a CUDA error code. Copies between
 * host and device are synchronous with respect to the host (they return when done). */
int cuda_malloc(void **p, size_t bytes);
int cuda_malloc_host(void **p, size_t bytes); /* pinned host memory */
void cuda_free(void *p);
void cuda_free_host(void *p);
int cuda_memcpy_h2d(void *dst, const void *src, size_t bytes);
int cuda_memcpy_d2h(void *dst, const void *src, size_t bytes);
int cuda_memcpy_d2d(void *dst, const void *src, size_t bytes);
int cuda_memset(void *p, int byte, size_t bytes);
int cuda_synchronize(void); /* the current stream */

/* Streams and events. cuda_stream_use binds s (NULL: the legacy default stream) to
 * the calling thread: every kernel the thread launches afterwards goes there. */
int cuda_stream_create(cuda_stream *s);
void cuda_stream_destroy(cuda_stream s);
void cuda_stream_use(cuda_stream s);
cuda_stream cuda_stream_current(void);
int cuda_event_create(cuda_event *e);
void cuda_event_destroy(cuda_event e);
int cuda_event_record(cuda_event e, cuda_stream s);
int cuda_stream_wait_event(cuda_stream s, cuda_event e);
/* 1 when the work before e is done, 0 while it is in flight, negative CUDA error otherwise. */
int cuda_event_done(cuda_event e);
/* Milliseconds between two recorded, completed events. */
float cuda_event_elapsed_ms(cuda_event start, cuda_event stop);

/* Scratch for kernels: at least `bytes`, 256-byte aligned, valid until the next
 * call with a larger size (so a kernel takes it once per call). NULL on failure,
 * with the error recorded. */
void *cuda_workspace(size_t bytes);

/* Errors. Kernels record the first failure of the thread (launch errors, cuBLAS,
 * cuDNN) with where it happened; cuda_error_take returns it (0 when none), copies
 * the message and clears it. It also picks up asynchronous errors already raised. */
void cuda_error_record(int code, const char *what, const char *file, int line);
int cuda_error_take(char *msg, size_t len);
const char *cuda_error_name(int code);

/* Records a launch error of the last kernel, if any, with the call site. */
#define CUDA_LAUNCH_CHECK(what) cuda_launch_check((what), __FILE__, __LINE__)
void cuda_launch_check(const char *what, const char *file, int line);

/* *x += v for one float on the device (a counter such as num_batches_tracked). */
void cuda_add_scalar(float *x, float v);

/* dst[i] += src[i] for i < n on device pointers (kernels/cpu/reduce.c's float sum). */
void cuda_reduce_sum_f32(float *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
