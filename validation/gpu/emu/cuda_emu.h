// cuda_emu — runs Nebula's CUDA kernels on the CPU, so `make check` catches indexing
// and synchronisation regressions in kernels/cuda without a GPU (C++17, g++ -pthread).
//
// tools/cuda-emu-rewrite turns kernels/cuda/X.cu into build/emu/X.cpp that includes
// this header instead of the CUDA headers; launches become EMU_LAUNCH, __shared__
// declarations become per-block arena lookups (see the rewriter for the conventions).
//
// The one design decision: every CUDA thread is a fiber (its own 64 KiB stack, a
// 7-instruction context switch on x86-64, ucontext elsewhere). The threads of a block
// run on one OS thread, each until it reaches __syncthreads or a warp operation
// (__shfl_*_sync, __ballot_sync, __syncwarp), then the next one; a barrier releases
// when every live thread has arrived. Blocks run in parallel on a few OS threads
// (NEBULA_GPU_EMU_THREADS, default min(4, cores)). A kernel without barriers costs one
// context switch per CUDA thread, so grids of a million threads take tens of ms.
//
// What it checks, beyond the values the tests compare:
//   - launch configuration (block <= 1024 threads, grid limits), dynamic shared memory
//     over 48 KiB without cudaFuncSetAttribute, over 227 KiB: launch errors as CUDA;
//   - kernel pointer arguments that are not device memory (cudaMalloc/cudaMallocHost);
//     cudaMemcpy/cudaMemset ranges outside device allocations (fatal, with the call);
//   - shared memory starts poisoned (0xff bytes: NaN floats, -1 integers), as does
//     cudaMalloc'd memory; writes just past a shared array hit a guard checked at
//     the end of each block;
//   - __syncthreads reached from two different source lines in one phase (divergent
//     barrier), deadlocks (a barrier or warp operation that can never complete), warp
//     operations whose mask names a lane that exited, does not exist or is not the
//     caller's, lanes of one warp in different warp operations;
//   - missing __syncthreads between a shared-memory write and another thread's read:
//     a block's threads run in order 0..n-1 up to their next sync point, then n-1..0,
//     alternating (odd blocks start reversed), so a read of another thread's write with
//     no barrier between sees stale or poisoned data in some pass.
//
// Where it cannot be faithful (so it cannot catch these):
//   - memory ordering: within a block execution is sequential between switch points,
//     so missing __threadfence/volatile and races between blocks go unseen (blocks run
//     concurrently, but with CPU ordering); atomics are plain host atomics;
//   - warp lockstep: lanes do not run in lockstep, so code that relies on implicit
//     warp synchrony fails here (correct: that is a bug since Volta), and __activemask
//     returns the lanes that have not exited, not the converged set;
//   - device memory is host memory: a host dereference of a device pointer works here;
//     kernels run synchronously at launch, so missing stream/event synchronisation is
//     unseen; out-of-bounds global accesses are only caught by the tests' canaries;
//   - arithmetic: g++ -ffp-contract=off, while nvcc fuses a*b+c into fma by default;
//     expf/logf/erfcf/__expf are glibc's, not CUDA's (different ulps); the explicitly
//     rounded intrinsics (__fmul_rn, __fmaf_rn, __dadd_rn, ...) and the fp16/bf16
//     conversions are bit-exact; __launch_bounds__ and register limits are ignored.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <math.h>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// ---- qualifiers and built-in variables -------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// __shared__ is deliberately not defined: the rewriter replaces every declaration,
// and one it missed fails to compile instead of becoming a global.

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline thread_local uint3 threadIdx;  // set by the scheduler before each switch into a thread
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

#define CUDART_INF_F HUGE_VALF
#define CUDART_NAN_F __builtin_nanf("")
#define CUDART_INF HUGE_VAL
#define CUDART_NAN __builtin_nan("")
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931e+0

// ---- runtime types -------------------------------------------------------------
enum cudaError {  // the values of CUDA's driver_types.h
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
struct CUstream_st { int flags; };
struct CUevent_st { double ms; bool recorded; };
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
struct cudaDeviceProp {
    char name[256];
    int major, minor;
    int multiProcessorCount;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    int maxThreadsPerBlock;
    int warpSize;
};

namespace emu {

constexpr size_t kStaticSmemMax = 48 * 1024;    // static __shared__ per block
constexpr size_t kDefaultDynSmemMax = 48 * 1024;  // dynamic without the attribute
constexpr size_t kSmemOptinMax = 232448;          // sm_90: 227 KiB per block
constexpr size_t kGuard = 64;                     // guard bytes after each shared array
constexpr size_t kStackBytes = 64 * 1024;         // per CUDA thread
constexpr unsigned char kGuardByte = 0xa5;

[[noreturn]] inline void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda_emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stdout);
    abort();
}

// ---- device memory registry ------------------------------------------------------
struct memory_registry {
    std::mutex mu;
    std::map<uintptr_t, size_t> ranges;  // start -> bytes (cudaMalloc and cudaMallocHost)
    std::map<const void *, size_t> func_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize
    std::set<const void *> streams, events;
};
inline memory_registry &registry()
{
    static memory_registry r;
    return r;
}
// True when [p, p + n) lies in one allocation (n = 0: p may be one past its end).
inline bool is_device(const void *p, size_t n)
{
    memory_registry &r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    uintptr_t a = (uintptr_t)p;
    auto it = r.ranges.upper_bound(a);
    if (it == r.ranges.begin()) return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second;
}

inline thread_local cudaError_t last_error = cudaSuccess;
inline cudaError_t set_error(cudaError_t e)
{
    if (e != cudaSuccess) last_error = e;
    return e;
}

inline int env_int(const char *name, int dflt)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}
inline int workers()
{
    static int n = [] {
        int hw = (int)std::thread::hardware_concurrency();
        int w = env_int("NEBULA_GPU_EMU_THREADS", std::min(4, hw > 0 ? hw : 1));
        return w < 1 ? 1 : w;
    }();
    return n;
}

#include "cuda_emu_fiber.h"

// ---- synchronisation called from kernels --------------------------------------------
inline void syncthreads(const char *file, int line)
{
    block_ctx *b = cur;
    if (b->bar_arrived == 0) {
        b->bar_file = file;
        b->bar_line = line;
    } else if (b->bar_line != line || strcmp(b->bar_file, file) != 0) {
        fatal("kernel %s block (%u,%u,%u): divergent __syncthreads: thread %d at %s:%d while others wait at %s:%d",
              b->kernel, blockIdx.x, blockIdx.y, blockIdx.z, b->current, file, line, b->bar_file, b->bar_line);
    }
    fiber &f = b->fibers[b->current];
    b->bar_arrived++;
    if (b->bar_arrived == b->alive) {
        b->bar_arrived = 0;
        b->bar_gen++;
        return;
    }
    f.state = FIBER_WAIT_BAR;
    f.wait_gen = b->bar_gen;
    yield_to_scheduler();
}

// The calling lane joins warp operation `op` with `mask` and deposits v; returns the
// slot row holding every participant's value once all lanes of mask have arrived.
inline const uint64_t *warp_exchange(int op, unsigned mask, uint64_t v)
{
    block_ctx *b = cur;
    int t = b->current, lane = t % 32;
    warp_state &w = b->warps[t / 32];
    if (!(mask >> lane & 1u))
        fatal("kernel %s: thread %d calls %s with mask 0x%08x that does not name its lane %d", b->kernel, t,
              warp_op_name(op), mask, lane);
    if (mask & ~w.exist)
        fatal("kernel %s: thread %d calls %s with mask 0x%08x naming lanes that do not exist (warp has 0x%08x)",
              b->kernel, t, warp_op_name(op), mask, w.exist);
    if (mask & ~w.live)
        fatal("kernel %s: thread %d calls %s with mask 0x%08x naming lanes that have exited (live 0x%08x)", b->kernel,
              t, warp_op_name(op), mask, w.live);
    if (w.arrived == 0) {
        w.op = op;
        w.mask = mask;
    } else if (w.op != op || w.mask != mask) {
        fatal("kernel %s: thread %d calls %s (mask 0x%08x) while lanes 0x%08x of its warp wait in %s (mask 0x%08x)",
              b->kernel, t, warp_op_name(op), mask, w.arrived, warp_op_name(w.op), w.mask);
    }
    unsigned g = w.gen;
    w.slot[g & 1][lane] = v;
    w.arrived |= 1u << lane;
    if (w.arrived == mask) {
        w.arrived = 0;
        w.gen++;
    } else {
        fiber &f = b->fibers[t];
        f.state = FIBER_WAIT_WARP;
        f.wait_gen = g;
        yield_to_scheduler();
    }
    return b->warps[t / 32].slot[g & 1];
}

template <class T> inline uint64_t to_bits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> inline T from_bits(uint64_t u)
{
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
// Source lane src of a shuffle; a lane outside the mask gives poison (undefined in CUDA).
template <class T> inline T shfl(unsigned mask, T v, int src)
{
    const uint64_t *row = warp_exchange(WARP_SHFL, mask, to_bits(v));
    return (mask >> src & 1u) ? from_bits<T>(row[src]) : from_bits<T>(~(uint64_t)0);
}
inline int lane_id() { return cur->current % 32; }

// ---- kernel launch ---------------------------------------------------------------
template <class Tuple, size_t... I>
inline void check_pointer_args(const char *kernel, const char *file, int line, const Tuple &t,
                               std::index_sequence<I...>)
{
    auto one = [&](size_t i, const auto &a) {
        using A = std::decay_t<decltype(a)>;
        if constexpr (std::is_pointer<A>::value) {
            if (a && !is_device((const void *)a, 0))
                fatal("%s:%d: kernel %s argument %zu (%p) is not device memory", file, line, kernel, i + 1,
                      (const void *)a);
        }
    };
    (one(I, std::get<I>(t)), ...);
}

template <class... P> struct launcher {
    const char *name;
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char *file;
    int line;

    using args_t = std::tuple<std::decay_t<P>...>;
    struct call {
        void (*kernel)(P...);
        const args_t *args;
    };
    static void thunk(const void *p)
    {
        const call *c = (const call *)p;
        std::apply(c->kernel, *c->args);  // each thread gets its own copy of the parameters
    }

    template <class... A> void operator()(A &&...a) const
    {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        args_t args(std::forward<A>(a)...);
        if (!valid()) return;
        check_pointer_args(name, file, line, args, std::index_sequence_for<P...>{});
        call c{ kernel, &args };
        run(&c);
    }

    bool valid() const
    {
        unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
        if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z || threads > 1024 || block.z > 64 ||
            grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
            set_error(cudaErrorInvalidConfiguration);
            return false;
        }
        size_t limit = kDefaultDynSmemMax;
        {
            memory_registry &r = registry();
            std::lock_guard<std::mutex> g(r.mu);
            auto it = r.func_smem.find((const void *)kernel);
            if (it != r.func_smem.end()) limit = std::max(limit, it->second);
            if (stream && !r.streams.count((const void *)stream)) {
                last_error = cudaErrorInvalidResourceHandle;
                return false;
            }
        }
        if (smem > limit || smem > kSmemOptinMax) {
            set_error(cudaErrorInvalidValue);
            return false;
        }
        return true;
    }

    void run(const call *c) const
    {
        size_t nblocks = (size_t)grid.x * grid.y * grid.z;
        std::atomic<size_t> next{ 0 };
        auto work = [&] {
            std::unique_ptr<block_ctx> b = ctx_take();
            block_ctx *saved = cur;
            cur = b.get();
            gridDim = grid;
            blockDim = block;
            b->thunk = thunk;
            b->thunk_arg = c;
            b->kernel = name;
            b->dyn_bytes = (smem + 15) & ~(size_t)15;
            for (size_t i; (i = next.fetch_add(1)) < nblocks;)
                run_block(b.get(), uint3{ (unsigned)(i % grid.x), (unsigned)(i / grid.x % grid.y),
                                          (unsigned)(i / ((size_t)grid.x * grid.y)) },
                          block);
            cur = saved;
            ctx_give(std::move(b));
        };
        size_t nw = std::min<size_t>((size_t)workers(), nblocks);
        std::vector<std::thread> extra;
        for (size_t w = 1; w < nw; w++) extra.emplace_back(work);
        work();
        for (auto &t : extra) t.join();
    }
};

template <class... P>
inline launcher<P...> make_launcher(const char *name, const char *file, int line, void (*k)(P...), dim3 grid,
                                    dim3 block, size_t smem = 0, cudaStream_t stream = nullptr)
{
    return launcher<P...>{ name, k, grid, block, smem, stream, file, line };
}

// ---- shared memory ---------------------------------------------------------------
// Static __shared__ T name[...]: the first thread of the block to reach the declaration
// places it in the arena (poisoned, followed by a guard), the others find it by key.
template <class T> inline T &shared_static(int key)
{
    block_ctx *b = cur;
    for (const block_ctx::static_array &s : b->statics)
        if (s.key == key) return *reinterpret_cast<T *>(b->smem + s.offset);
    size_t off = (b->used + 15) & ~(size_t)15;
    b->static_bytes += sizeof(T);
    if (b->static_bytes > kStaticSmemMax)
        fatal("kernel %s: static __shared__ memory over 48 KiB (%zu bytes)", b->kernel, b->static_bytes);
    if (off + sizeof(T) + kGuard > sizeof b->smem)
        fatal("kernel %s: shared memory over %zu bytes (dynamic %zu + static)", b->kernel, kSmemOptinMax,
              b->dyn_bytes);
    memset(b->smem + off, 0xff, sizeof(T));
    b->guard(off + sizeof(T));
    b->used = off + sizeof(T) + kGuard;
    b->statics.push_back(block_ctx::static_array{ key, off, sizeof(T) });
    return *reinterpret_cast<T *>(b->smem + off);
}
// extern __shared__ T name[]: the launch's dynamic shared memory.
template <class T> inline T *shared_dynamic() { return reinterpret_cast<T *>(cur->smem); }

}  // namespace emu

#define EMU_LAUNCH(k, ...) ::emu::make_launcher(#k, __FILE__, __LINE__, k, __VA_ARGS__)
#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)

// ---- warp intrinsics ---------------------------------------------------------------
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    int lane = emu::lane_id();
    return emu::shfl(mask, v, (lane & ~(width - 1)) + (src & (width - 1)));
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    int lane = emu::lane_id(), src = lane ^ lane_mask;
    if (src >= ((lane & ~(width - 1)) + width)) src = lane;  // later groups: own value
    return emu::shfl(mask, v, src);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int lane = emu::lane_id(), src = lane + (int)delta;
    if (src >= ((lane & ~(width - 1)) + width)) src = lane;
    return emu::shfl(mask, v, src);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int lane = emu::lane_id(), src = lane - (int)delta;
    if (src < (lane & ~(width - 1))) src = lane;
    return emu::shfl(mask, v, src);
}
inline unsigned __ballot_sync(unsigned mask, int pred)
{
    const uint64_t *row = emu::warp_exchange(emu::WARP_BALLOT, mask, pred != 0);
    unsigned r = 0;
    for (int l = 0; l < 32; l++)
        if ((mask >> l & 1u) && row[l]) r |= 1u << l;
    return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_exchange(emu::WARP_SYNC, mask, 0); }
inline unsigned __activemask()
{
    return emu::cur->warps[emu::cur->current / 32].live;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

#include "cuda_emu_math.h"

#include "cuda_emu_runtime.h"
