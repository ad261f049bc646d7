// device — see device.h.
#include "device.h"

#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

namespace {

// Per-thread state that the CPU signatures cannot carry (device.h).
struct thread_state {
    cudaStream_t stream = nullptr;  // where this thread's kernels go
    void *workspace = nullptr;      // scratch for kernels
    size_t workspace_bytes = 0;
    int error = 0;                  // first recorded failure, 0 when none
    char message[256] = "";
};
thread_local thread_state ts;

}  // namespace

extern "C" int cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

extern "C" int cuda_device_select(int ordinal, cuda_device_info *info)
{
    cudaError_t e = cudaSetDevice(ordinal);
    if (e != cudaSuccess) return (int)e;
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, ordinal)) != cudaSuccess) return (int)e;
    if (info) {
        snprintf(info->name, sizeof info->name, "%.127s", p.name);
        info->sm_major = p.major;
        info->sm_minor = p.minor;
        info->multiprocessors = p.multiProcessorCount;
        info->memory_bytes = p.totalGlobalMem;
    }
    return 0;
}

extern "C" int cuda_malloc(void **p, size_t bytes) { return (int)cudaMalloc(p, bytes ? bytes : 1); }
extern "C" int cuda_malloc_host(void **p, size_t bytes) { return (int)cudaMallocHost(p, bytes ? bytes : 1); }
extern "C" void cuda_free(void *p) { if (p) cudaFree(p); }
extern "C" void cuda_free_host(void *p) { if (p) cudaFreeHost(p); }

static int copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    if (bytes == 0) return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, ts.stream);
    if (e == cudaSuccess && kind != cudaMemcpyDeviceToDevice) e = cudaStreamSynchronize(ts.stream);
    return (int)e;
}
extern "C" int cuda_memcpy_h2d(void *d, const void *s, size_t n) { return copy(d, s, n, cudaMemcpyHostToDevice); }
extern "C" int cuda_memcpy_d2h(void *d, const void *s, size_t n) { return copy(d, s, n, cudaMemcpyDeviceToHost); }
extern "C" int cuda_memcpy_d2d(void *d, const void *s, size_t n) { return copy(d, s, n, cudaMemcpyDeviceToDevice); }
extern "C" int cuda_memset(void *p, int byte, size_t bytes) { return (int)cudaMemsetAsync(p, byte, bytes, ts.stream); }
extern "C" int cuda_synchronize(void) { return (int)cudaStreamSynchronize(ts.stream); }

extern "C" int cuda_stream_create(cuda_stream *s)
{
    cudaStream_t st;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    *s = e == cudaSuccess ? st : nullptr;
    return (int)e;
}
extern "C" void cuda_stream_destroy(cuda_stream s) { if (s) cudaStreamDestroy(s); }
extern "C" void cuda_stream_use(cuda_stream s) { ts.stream = s; }
extern "C" cuda_stream cuda_stream_current(void) { return ts.stream; }

extern "C" int cuda_event_create(cuda_event *e)
{
    cudaEvent_t ev;
    cudaError_t r = cudaEventCreate(&ev);
    *e = r == cudaSuccess ? ev : nullptr;
    return (int)r;
}
extern "C" void cuda_event_destroy(cuda_event e) { if (e) cudaEventDestroy(e); }
extern "C" int cuda_event_record(cuda_event e, cuda_stream s) { return (int)cudaEventRecord(e, s); }
extern "C" int cuda_stream_wait_event(cuda_stream s, cuda_event e) { return (int)cudaStreamWaitEvent(s, e, 0); }
extern "C" int cuda_event_done(cuda_event e)
{
    cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return 1;
    if (r == cudaErrorNotReady) return 0;
    return -(int)r;
}
extern "C" float cuda_event_elapsed_ms(cuda_event start, cuda_event stop)
{
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) return -1.0f;
    return ms;
}

extern "C" void *cuda_workspace(size_t bytes)
{
    if (bytes <= ts.workspace_bytes) return ts.workspace;
    // The old workspace may still be read by queued kernels: wait for them first.
    cudaStreamSynchronize(ts.stream);
    cudaFree(ts.workspace);
    ts.workspace = nullptr;
    ts.workspace_bytes = 0;
    size_t want = (bytes + 255) & ~(size_t)255;
    cudaError_t e = cudaMalloc(&ts.workspace, want);
    if (e != cudaSuccess) {
        cuda_error_record((int)e, "cudaMalloc of the kernel workspace", __FILE__, __LINE__);
        ts.workspace = nullptr;
        return nullptr;
    }
    ts.workspace_bytes = want;
    return ts.workspace;
}

extern "C" void cuda_error_record(int code, const char *what, const char *file, int line)
{
    if (code == 0 || ts.error != 0) return;  // keep the first
    ts.error = code;
    snprintf(ts.message, sizeof ts.message, "%s:%d: %s failed (code %d)", file, line, what, code);
}

extern "C" int cuda_error_take(char *msg, size_t len)
{
    if (ts.error == 0) {
        cudaError_t e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaStreamQuery(ts.stream) == cudaErrorNotReady ? cudaSuccess : cudaPeekAtLastError();
        if (e != cudaSuccess)
            snprintf(ts.message, sizeof ts.message, "asynchronous CUDA error: %s", cudaGetErrorString(e));
        ts.error = (int)e;
    }
    int code = ts.error;
    if (msg && len) snprintf(msg, len, "%s", code ? ts.message : "");
    ts.error = 0;
    ts.message[0] = '\0';
    return code;
}

extern "C" const char *cuda_error_name(int code) { return cudaGetErrorString((cudaError_t)code); }

extern "C" void cuda_launch_check(const char *what, const char *file, int line)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        bool first = ts.error == 0;  // only the first error is kept, with its own reason
        cuda_error_record((int)e, what, file, line);
        if (first)
            snprintf(ts.message + strlen(ts.message), sizeof ts.message - strlen(ts.message), ": %s",
                     cudaGetErrorString(e));
    }
}

__global__ static void add_scalar_kernel(float *x, float v) { *x += v; }

extern "C" void cuda_add_scalar(float *x, float v)
{
    add_scalar_kernel<<<1, 1, 0, ts.stream>>>(x, v);
    CUDA_LAUNCH_CHECK("add_scalar_kernel");
}

__global__ static void reduce_sum_f32_kernel(float *dst, const float *src, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] += src[i];
}

extern "C" void cuda_reduce_sum_f32(float *dst, const float *src, size_t n)
{
    if (n == 0) return;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65535u * 8u) blocks = 65535u * 8u;
    reduce_sum_f32_kernel<<<(unsigned)blocks, 256, 0, ts.stream>>>(dst, src, n);
    CUDA_LAUNCH_CHECK("reduce_sum_f32_kernel");
}
