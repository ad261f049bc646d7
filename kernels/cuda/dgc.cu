// dgc — CUDA selection and sampling for DGC-Pro (see dgc.h).
//
// A tile is DGC_TILE = 8 rounds x 256 threads of consecutive entries: in round r,
// warp w of the block holds entries [tile + 256 r + 32 w, +32), one per lane, so the
// ascending order of a tile's entries is (round, warp, lane) and a warp's ballot plus
// the popcount of the lanes below gives a hit's rank inside its 32. The block turns
// its 64 (round, warp) counts into an exclusive prefix in that order, the tile scan
// gives the tile's base: slot = base + prefix[r][w] + popc(ballot & lanes below).
#include "dgc.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "device.h"

#define DGC_THREADS 256
#define DGC_WARPS (DGC_THREADS / 32)
#define DGC_ROUNDS 8
#define DGC_TILE (DGC_THREADS * DGC_ROUNDS)  // 2048 entries per block
#define DGC_SCAN_THREADS 1024
#define DGC_SAMPLE_RUN 16                    // dgc_select.c's window

// One round's hits of this warp; lanes past n count as misses. NaN compares false.
__device__ static inline unsigned tile_ballot(const float *x, size_t n, float thr, size_t i)
{
    bool hit = i < n && fabsf(x[i]) >= thr;
    return __ballot_sync(0xffffffffu, hit);
}

__global__ static void dgc_count_kernel(const float *x, size_t n, float thr, uint32_t *tile_count)
{
    __shared__ uint32_t warp_count[DGC_WARPS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t tile = (size_t)blockIdx.x * DGC_TILE;
    uint32_t c = 0;
#pragma unroll
    for (int r = 0; r < DGC_ROUNDS; r++) c += __popc(tile_ballot(x, n, thr, tile + r * DGC_THREADS + threadIdx.x));
    if (lane == 0) warp_count[warp] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t s = 0;
        for (int w = 0; w < DGC_WARPS; w++) s += warp_count[w];
        tile_count[blockIdx.x] = s;
    }
}

// Exclusive scan of ntiles counts by one block: thread t owns the contiguous chunk
// [t*per, (t+1)*per); chunk sums are scanned in shared memory, then each thread
// writes its chunk's running offsets. Integer sums: exact, order irrelevant.
__global__ static void dgc_scan_kernel(const uint32_t *tile_count, uint64_t *tile_base, size_t ntiles,
                                       uint64_t *total)
{
    __shared__ uint64_t chunk[DGC_SCAN_THREADS];
    size_t per = (ntiles + DGC_SCAN_THREADS - 1) / DGC_SCAN_THREADS;
    size_t lo = threadIdx.x * per, hi = lo + per;
    if (lo > ntiles) lo = ntiles;
    if (hi > ntiles) hi = ntiles;
    uint64_t s = 0;
    for (size_t i = lo; i < hi; i++) s += tile_count[i];
    chunk[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {  // 1024 additions: cheaper than a tree at this size
        uint64_t run = 0;
        for (int t = 0; t < DGC_SCAN_THREADS; t++) {
            uint64_t c = chunk[t];
            chunk[t] = run;
            run += c;
        }
        *total = run;
    }
    __syncthreads();
    if (tile_base) {
        uint64_t run = chunk[threadIdx.x];
        for (size_t i = lo; i < hi; i++) {
            tile_base[i] = run;
            run += tile_count[i];
        }
    }
}

__global__ static void dgc_write_kernel(const float *x, size_t n, float thr, const uint64_t *tile_base, uint32_t *idx,
                                        size_t cap)
{
    __shared__ uint32_t prefix[DGC_ROUNDS][DGC_WARPS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t tile = (size_t)blockIdx.x * DGC_TILE;
    unsigned ballot[DGC_ROUNDS];
#pragma unroll
    for (int r = 0; r < DGC_ROUNDS; r++) {
        ballot[r] = tile_ballot(x, n, thr, tile + r * DGC_THREADS + threadIdx.x);
        if (lane == 0) prefix[r][warp] = __popc(ballot[r]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // exclusive prefix in (round, warp) order = ascending entry order
        uint32_t run = 0;
        for (int r = 0; r < DGC_ROUNDS; r++)
            for (int w = 0; w < DGC_WARPS; w++) {
                uint32_t c = prefix[r][w];
                prefix[r][w] = run;
                run += c;
            }
    }
    __syncthreads();
    uint64_t base = tile_base[blockIdx.x];
    unsigned below = (1u << lane) - 1u;  // lanes lower than this one
#pragma unroll
    for (int r = 0; r < DGC_ROUNDS; r++) {
        if (!(ballot[r] >> lane & 1u)) continue;
        uint64_t slot = base + prefix[r][warp] + (uint64_t)__popc(ballot[r] & below);
        if (slot < cap) idx[slot] = (uint32_t)(tile + r * DGC_THREADS + threadIdx.x);
    }
}

// Passes 1 and the scan; returns the tile bases (NULL when not wanted or on failure).
static bool dgc_count(const float *x, size_t n, float thr, uint64_t *count_dev, uint64_t **tile_base)
{
    if (n > ((size_t)1 << 32)) {
        cuda_error_record((int)cudaErrorInvalidValue, "DGC selection of more than 2^32 entries (uint32 indices)",
                          __FILE__, __LINE__);
        return false;
    }
    cudaStream_t st = (cudaStream_t)cuda_stream_current();
    size_t ntiles = (n + DGC_TILE - 1) / DGC_TILE;
    if (ntiles == 0) {  // nothing selected: the count is 0
        cudaError_t e = cudaMemsetAsync(count_dev, 0, sizeof(uint64_t), st);
        if (e != cudaSuccess) cuda_error_record((int)e, "cudaMemsetAsync of the DGC count", __FILE__, __LINE__);
        if (tile_base) *tile_base = nullptr;
        return false;
    }
    // Workspace: tile bases (8 bytes each, first: aligned) then tile counts (4 bytes each).
    char *ws = (char *)cuda_workspace(ntiles * (sizeof(uint64_t) + sizeof(uint32_t)));
    if (!ws) return false;
    uint64_t *base = (uint64_t *)ws;
    uint32_t *count = (uint32_t *)(ws + ntiles * sizeof(uint64_t));
    dgc_count_kernel<<<(unsigned)ntiles, DGC_THREADS, 0, st>>>(x, n, thr, count);
    CUDA_LAUNCH_CHECK("dgc_count_kernel");
    dgc_scan_kernel<<<1, DGC_SCAN_THREADS, 0, st>>>(count, tile_base ? base : nullptr, ntiles, count_dev);
    CUDA_LAUNCH_CHECK("dgc_scan_kernel");
    if (tile_base) *tile_base = base;
    return true;
}

extern "C" void cuda_dgc_count_above(const float *x, size_t n, float thr, uint64_t *count_dev)
{
    dgc_count(x, n, thr, count_dev, nullptr);
}

extern "C" void cuda_dgc_select(const float *x, size_t n, float thr, uint32_t *idx, size_t cap, uint64_t *count_dev)
{
    uint64_t *base = nullptr;
    if (!dgc_count(x, n, thr, count_dev, &base) || cap == 0) return;
    size_t ntiles = (n + DGC_TILE - 1) / DGC_TILE;
    dgc_write_kernel<<<(unsigned)ntiles, DGC_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(x, n, thr, base,
                                                                                                    idx, cap);
    CUDA_LAUNCH_CHECK("dgc_write_kernel");
}

// ---- the threshold sample -------------------------------------------------------

// dgc_select.c's mix64 (splitmix64's finaliser): 64-bit integer operations only.
__device__ static inline uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Sample entry s = window j, offset q: dgc_sampled_thresholds' scratch[j * run + q].
__global__ static void dgc_sample_kernel(const float *x, size_t n, size_t strata, size_t run, uint64_t seed,
                                         float *sample)
{
    size_t m = strata * run;
    for (size_t s = (size_t)blockIdx.x * blockDim.x + threadIdx.x; s < m; s += (size_t)gridDim.x * blockDim.x) {
        size_t j = s / run, q = s % run;
        size_t a = j * n / strata, b = (j + 1) * n / strata;  // b - a >= run since m <= n
        size_t at = a + (size_t)(mix64(seed ^ (uint64_t)j * 0xd1342543de82ef95ull) % (b - a - run + 1));
        sample[s] = fabsf(x[at + q]);
    }
}

extern "C" size_t cuda_dgc_sample_abs(const float *x, size_t n, double fraction, uint64_t seed, float *sample)
{
    if (n == 0) return 0;
    // dgc_sampled_thresholds' sizes, the same expressions on the host.
    size_t m = (size_t)ceil(fraction * (double)n);
    if (m < 1) m = 1;
    if (m > n) m = n;
    size_t run = m >= 4 * DGC_SAMPLE_RUN ? DGC_SAMPLE_RUN : 1, strata = m / run;
    m = strata * run;
    size_t blocks = (m + DGC_THREADS - 1) / DGC_THREADS;
    dgc_sample_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), DGC_THREADS, 0,
                        (cudaStream_t)cuda_stream_current()>>>(x, n, strata, run, seed, sample);
    CUDA_LAUNCH_CHECK("dgc_sample_kernel");
    return m;
}

// ---- gather ---------------------------------------------------------------------

// (float)(_Float16)v as gcc computes it: the hardware's RNE for numbers; for a NaN,
// soft-fp's quiet NaN with the top 10 payload bits, widened back with the quiet bit.
__device__ static inline float round_f16(float v)
{
    uint32_t u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float((u & 0x80000000u) | 0x7fc00000u | (u & 0x003fe000u));
    return __half2float(__float2half_rn(v));
}

__global__ static void dgc_gather_kernel(const float *x, const uint32_t *idx, const uint64_t *count, size_t cap,
                                         float *val, int fp16)
{
    uint64_t c = *count;
    size_t n = c < cap ? (size_t)c : cap;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x) {
        float v = x[idx[j]];
        val[j] = fp16 ? round_f16(v) : v;
    }
}

extern "C" void cuda_dgc_gather_values(const float *x, const uint32_t *idx, const uint64_t *count_dev, size_t cap,
                                       float *val, bool fp16)
{
    if (cap == 0) return;
    size_t blocks = (cap + DGC_THREADS - 1) / DGC_THREADS;
    dgc_gather_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), DGC_THREADS, 0,
                        (cudaStream_t)cuda_stream_current()>>>(x, idx, count_dev, cap, val, fp16 ? 1 : 0);
    CUDA_LAUNCH_CHECK("dgc_gather_kernel");
}
