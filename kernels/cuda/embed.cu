// embed — CUDA variant of kernels/cpu/embed.h: out[n] = table[ids[n]] (or +=), and
// the backward scatter-add dtable[ids[n]] += dout[n].
//
// The one design decision: the backward is partitioned by table row, never by n.
// Block (g, y) owns the table rows v with v % EMB_GROUPS == g and the channels
// [256 y, 256 y + 256); it scans all N ids in order, compacts the n it owns (in
// order) into shared memory, and its thread for channel c adds dout[n][c] into
// dtable[v][c]. Each table element therefore has exactly one writer, which adds the
// contributions in the order of n: no atomics, the same bits on every run, and the
// same order of additions as the CPU path (which is bit-identical to it).
//
// Without V the kernels cannot check ids >= V (embedding_check_ids on the host does);
// a negative id writes a NaN row in the forward, so the bug shows in the loss, and
// adds nothing in the backward.
#include "transformer.h"

#include <cuda_runtime.h>
#include <math_constants.h>

#include "device.h"

#define EMB_THREADS 256  // also the channels per block of the backward and its id tile
#define EMB_GROUPS 256   // table rows are dealt to this many block rows by v % EMB_GROUPS

__global__ static void embedding_forward_kernel(float *out, const int32_t *ids, const float *table, int N, int C,
                                                int accumulate)
{
    const size_t total = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / C, c = i % C;
        const int32_t id = ids[n];
        const float t = id >= 0 ? table[(size_t)id * C + c] : CUDART_NAN_F;
        out[i] = accumulate ? out[i] + t : t;
    }
}

// grid (EMB_GROUPS, ceil(C / 256)), EMB_THREADS threads: see the file comment.
__global__ __launch_bounds__(EMB_THREADS) static void embedding_backward_kernel(float *dtable, const float *dout,
                                                                                const int32_t *ids, int N, int C)
{
    __shared__ int own_n[EMB_THREADS];   // owned n of the current id tile, in order
    __shared__ int own_v[EMB_THREADS];   // their ids
    __shared__ int warp_count[EMB_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int c = blockIdx.y * EMB_THREADS + tid;
    for (int n0 = 0; n0 < N; n0 += EMB_THREADS) {
        const int n = n0 + tid;
        const int32_t id = n < N ? ids[n] : -1;
        const bool own = id >= 0 && (int)(id % EMB_GROUPS) == (int)blockIdx.x;
        const unsigned ballot = __ballot_sync(0xffffffffu, own);
        if (lane == 0) warp_count[warp] = __popc(ballot);
        __syncthreads();
        int offset = 0, total = 0;
        for (int w = 0; w < EMB_THREADS / 32; w++) {
            offset += w < warp ? warp_count[w] : 0;
            total += warp_count[w];
        }
        if (own) {
            const int slot = offset + __popc(ballot & ((1u << lane) - 1u));  // rank among owned n < this n
            own_n[slot] = n;
            own_v[slot] = id;
        }
        __syncthreads();
        if (c < C)
            for (int e = 0; e < total; e++)
                dtable[(size_t)own_v[e] * C + c] += dout[(size_t)own_n[e] * C + c];
        __syncthreads();  // own_*, warp_count are rewritten by the next tile
    }
}

extern "C" void cuda_embedding_forward(float *out, const int32_t *ids, const float *table, int N, int C,
                                       int accumulate)
{
    if (N <= 0 || C <= 0) return;
    size_t blocks = ((size_t)N * C + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    embedding_forward_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)cuda_stream_current()>>>(out, ids, table, N,
                                                                                                 C, accumulate);
    CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

extern "C" void cuda_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    dim3 grid(EMB_GROUPS, (C + EMB_THREADS - 1) / EMB_THREADS);
    embedding_backward_kernel<<<grid, EMB_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(dtable, dout, ids, N,
                                                                                              C);
    CUDA_LAUNCH_CHECK("embedding_backward_kernel");
}
