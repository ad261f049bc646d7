// cuda_emu_runtime — the host runtime API of the CPU emulator (cuda_emu.h): device memory
// is host memory, work runs at launch. Not a header of its own: cuda_emu.h includes it
// last, after the kernel-side emulation and cuda_emu_math.h.
#ifndef NEBULA_CUDA_EMU_RUNTIME_H
#define NEBULA_CUDA_EMU_RUNTIME_H

// ---- host runtime API: device memory is host memory, work runs at launch ------------
inline cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return emu::set_error(d == 0 ? cudaSuccess : cudaErrorInvalidDevice); }
inline cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d != 0) return emu::set_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulator (validation/gpu/emu, %d threads)", emu::workers());
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = emu::workers();
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    p->totalGlobalMem = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)1 << 32;
    p->sharedMemPerBlock = emu::kStaticSmemMax;
    p->sharedMemPerBlockOptin = emu::kSmemOptinMax;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    return cudaSuccess;
}
inline cudaError_t cudaGetLastError()
{
    cudaError_t e = emu::last_error;
    emu::last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() { return emu::last_error; }
inline const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}
inline const char *cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }

namespace emu {
inline cudaError_t alloc(void **p, size_t bytes)
{
    void *m = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    if (!m) {
        *p = nullptr;
        return set_error(cudaErrorMemoryAllocation);
    }
    memset(m, 0xff, bytes);  // poison: uninitialised floats read as NaN
    memory_registry &r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.ranges[(uintptr_t)m] = bytes;
    *p = m;
    return cudaSuccess;
}
inline cudaError_t release(void *p)
{
    if (!p) return cudaSuccess;
    memory_registry &r = registry();
    {
        std::lock_guard<std::mutex> g(r.mu);
        auto it = r.ranges.find((uintptr_t)p);
        if (it == r.ranges.end()) fatal("cudaFree/cudaFreeHost of %p, which is not the start of an allocation", p);
        r.ranges.erase(it);
    }
    free(p);
    return cudaSuccess;
}
inline void check_range(const char *what, const void *p, size_t n)
{
    if (n && !is_device(p, n)) fatal("%s: [%p, +%zu) is not inside one device allocation", what, p, n);
}
}  // namespace emu

inline cudaError_t cudaMalloc(void **p, size_t bytes) { return emu::alloc(p, bytes); }
template <class T> inline cudaError_t cudaMalloc(T **p, size_t bytes) { return emu::alloc((void **)p, bytes); }
inline cudaError_t cudaMallocHost(void **p, size_t bytes) { return emu::alloc(p, bytes); }
template <class T> inline cudaError_t cudaMallocHost(T **p, size_t bytes) { return emu::alloc((void **)p, bytes); }
inline cudaError_t cudaFree(void *p) { return emu::release(p); }
inline cudaError_t cudaFreeHost(void *p) { return emu::release(p); }
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) emu::check_range("cudaMemcpy dst", dst, n);
    if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) emu::check_range("cudaMemcpy src", src, n);
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t = nullptr)
{
    return cudaMemcpy(dst, src, n, kind);
}
inline cudaError_t cudaMemset(void *p, int byte, size_t n)
{
    emu::check_range("cudaMemset", p, n);
    if (n) memset(p, byte, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *p, int byte, size_t n, cudaStream_t = nullptr) { return cudaMemset(p, byte, n); }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    *s = new CUstream_st{ (int)flags };
    emu::memory_registry &r = emu::registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.streams.insert(*s);
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    emu::memory_registry &r = emu::registry();
    {
        std::lock_guard<std::mutex> g(r.mu);
        if (!r.streams.erase(s)) return emu::set_error(cudaErrorInvalidResourceHandle);
    }
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    *e = new CUevent_st{ 0.0, false };
    return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr)
{
    using namespace std::chrono;
    e->ms = duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
    e->recorded = true;
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!a->recorded || !b->recorded) return emu::set_error(cudaErrorInvalidResourceHandle);
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}
template <class F> inline cudaError_t cudaFuncSetAttribute(F *func, cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > emu::kSmemOptinMax)
        return emu::set_error(cudaErrorInvalidValue);
    emu::memory_registry &r = emu::registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.func_smem[(const void *)func] = (size_t)value;
    return cudaSuccess;
}

#endif
