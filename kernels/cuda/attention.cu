// attention — CUDA variant of kernels/cpu/attention.h (read its contract: ld stride,
// causal, key_mask, fully masked rows give out 0, lse -inf and no gradient).
// Fused, memory-efficient, fp32 (FlashAttention-2: Dao 2023), HS = C / NH <= 128.
//
// The one design decision: no atomics anywhere, so the backward is two kernels.
//   forward   block = 64 query rows of one (b, h); walks key tiles of 32 with an
//             online softmax (running max m, sum l per row); saves lse = m + log l.
//   backward  D_i = rowsum(dout_i * out_i) first (one warp per row), then
//             dk/dv: block = 64 keys of one (b, h), walks query tiles of 32 in order,
//                    recomputes P = exp(S - lse) and dS = P (dP - D), and owns
//                    dk, dv of its keys in registers (dV += P^T dO, dK += dS^T Q);
//             dq:    block = 64 query rows, walks key tiles of 32 in order,
//                    recomputes P and dS and owns dq (dQ += dS K).
// Each output element is summed by one thread in a fixed order and added to the
// caller's gradient once: the same bits on every run. The price is computing S and
// dP twice in the backward.
//
// Tiles live in shared memory with rows padded to 16 NJ + 1 floats (NJ = 4 for
// HS <= 64, 8 for HS <= 128; columns [HS, 16 NJ) and rows past T are zero-filled, so
// no product reads garbage). Every block has 256 threads, seen as a 16 x 16 grid
// (tx = tid % 16, ty = tid / 16); a thread's micro-tile is rows ty + 16 a, columns
// tx + 16 b, which makes the padded (odd) row stride free of bank conflicts.
#include "transformer.h"

#include <cuda_runtime.h>
#include <math_constants.h>

#include "device.h"

#define ATT_THREADS 256
#define ATT_HS_MAX 128
#define FW_BR 64  // forward: query rows per block
#define FW_BC 32  // forward: keys per tile
#define KV_BC 64  // backward dk/dv: keys per block
#define KV_BR 32  // backward dk/dv: query rows per tile
#define DQ_BR 64  // backward dq: query rows per block
#define DQ_BC 32  // backward dq: keys per tile
#define NEG_INF (-CUDART_INF_F)

// Key j is invisible to query i: past the end (padding of the last tile), in the
// future (causal), or masked out by key_mask (km: this sequence's (T) row, 0.0 masks).
static __device__ __forceinline__ bool att_masked(int i, int j, int T, const float *km, int causal)
{
    return j >= T || (causal && j > i) || (km && km[j] == 0.0f);
}

// dst (nrows, SD) <- rows [row0, row0 + nrows) of src (row stride lds), columns
// [0, W); zero where the row is >= T or the column >= HS.
template <int W>
static __device__ __forceinline__ void att_load(float *dst, int SD, const float *src, size_t lds, int row0,
                                                int nrows, int T, int HS)
{
    for (int idx = threadIdx.x; idx < nrows * W; idx += ATT_THREADS) {
        const int r = idx / W, d = idx % W, i = row0 + r;  // W is a power of two: shifts
        dst[r * SD + d] = (i < T && d < HS) ? src[(size_t)i * lds + d] : 0.0f;
    }
}

// acc[a][b] = sum_{d < HS} A[(ty + 16a) SD + d] * Bm[(tx + 16b) SD + d]   (A Bm^T)
template <int NA, int NB>
static __device__ __forceinline__ void att_dot(float (&acc)[NA][NB], const float *A, const float *Bm, int SD,
                                               int HS, int ty, int tx)
{
#pragma unroll
    for (int a = 0; a < NA; a++)
#pragma unroll
        for (int b = 0; b < NB; b++) acc[a][b] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < HS; d++) {
        float x[NA], y[NB];
#pragma unroll
        for (int a = 0; a < NA; a++) x[a] = A[(ty + 16 * a) * SD + d];
#pragma unroll
        for (int b = 0; b < NB; b++) y[b] = Bm[(tx + 16 * b) * SD + d];
#pragma unroll
        for (int a = 0; a < NA; a++)
#pragma unroll
            for (int b = 0; b < NB; b++) acc[a][b] += x[a] * y[b];
    }
}

// acc[a][b] += sum_{k < K} X[(ty + 16a) xr + k xk] * Y[k SD + tx + 16b]
// (X Y with X read row-major (xr = row stride, xk = 1) or transposed (xr = 1, xk = stride)).
template <int NA, int NB>
static __device__ __forceinline__ void att_acc(float (&acc)[NA][NB], const float *X, int xr, int xk, const float *Y,
                                               int SD, int K, int ty, int tx)
{
#pragma unroll 4
    for (int k = 0; k < K; k++) {
        float x[NA], y[NB];
#pragma unroll
        for (int a = 0; a < NA; a++) x[a] = X[(ty + 16 * a) * xr + k * xk];
#pragma unroll
        for (int b = 0; b < NB; b++) y[b] = Y[k * SD + tx + 16 * b];
#pragma unroll
        for (int a = 0; a < NA; a++)
#pragma unroll
            for (int b = 0; b < NB; b++) acc[a][b] += x[a] * y[b];
    }
}

// ---------------------------------------------------------------- forward

template <int NJ>
static size_t att_forward_smem(void)
{
    const int SD = 16 * NJ + 1;
    return ((size_t)(FW_BR + 2 * FW_BC) * SD + (size_t)FW_BR * (FW_BC + 1) + 2 * FW_BR) * sizeof(float);
}

// grid (ceil(T / FW_BR), B * NH). Causal blocks run in reverse tile order: the last
// query tiles see the most keys and should start first.
template <int NJ>
__global__ __launch_bounds__(ATT_THREADS) static void att_forward_kernel(float *out, float *lse, const float *q,
                                                                         const float *k, const float *v, int ld,
                                                                         const float *key_mask, int T, int C, int NH,
                                                                         int causal, float scale)
{
    constexpr int W = 16 * NJ, SD = W + 1, PS = FW_BC + 1;
    extern __shared__ float sm[];
    float *Qs = sm;                  // (FW_BR, SD) query rows of this block
    float *Ks = Qs + FW_BR * SD;     // (FW_BC, SD) current key tile
    float *Vs = Ks + FW_BC * SD;     // (FW_BC, SD) current value tile
    float *Ps = Vs + FW_BC * SD;     // (FW_BR, PS) scaled scores, then probabilities
    float *alpha_s = Ps + FW_BR * PS; // (FW_BR) rescale of the old output this tile
    float *l_s = alpha_s + FW_BR;    // (FW_BR) final row sums

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int tile = causal ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int i0 = tile * FW_BR;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, HS = C / NH;
    const size_t base = (size_t)b * T * ld + (size_t)h * HS;
    const float *km = key_mask ? key_mask + (size_t)b * T : nullptr;

    att_load<W>(Qs, SD, q + base, ld, i0, FW_BR, T, HS);

    // Softmax bookkeeping: row sr is handled by the 4 lanes tid = 4 sr .. 4 sr + 3,
    // each over FW_BC / 4 columns starting at sc; all 4 keep the same m, l.
    const int sr = tid >> 2, sc = (tid & 3) * (FW_BC / 4);
    float m_run = NEG_INF, l_run = 0.0f;
    float o[4][NJ];  // output rows ty + 16a, columns tx + 16j, unnormalised
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int j = 0; j < NJ; j++) o[a][j] = 0.0f;

    const int jend = causal ? min(T, i0 + FW_BR) : T;  // keys past the last row of the tile are all masked
    for (int j0 = 0; j0 < jend; j0 += FW_BC) {
        att_load<W>(Ks, SD, k + base, ld, j0, FW_BC, T, HS);
        att_load<W>(Vs, SD, v + base, ld, j0, FW_BC, T, HS);
        __syncthreads();  // Qs (first pass), Ks, Vs ready

        float s[4][2];  // rows ty + 16a, keys tx + 16b
        att_dot<4, 2>(s, Qs, Ks, SD, HS, ty, tx);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int bb = 0; bb < 2; bb++) {
                const int r = ty + 16 * a, c = tx + 16 * bb;
                Ps[r * PS + c] = att_masked(i0 + r, j0 + c, T, km, causal) ? NEG_INF : s[a][bb] * scale;
            }
        __syncthreads();  // the score tile is complete

        float *pr = Ps + sr * PS + sc;
        float mx = m_run;
#pragma unroll
        for (int c = 0; c < FW_BC / 4; c++) mx = fmaxf(mx, pr[c]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float alpha = 1.0f, sum = 0.0f;
        if (mx == NEG_INF) {  // every key so far masked: the row adds nothing (avoids -inf - -inf)
#pragma unroll
            for (int c = 0; c < FW_BC / 4; c++) pr[c] = 0.0f;
        } else {
            alpha = expf(m_run - mx);  // 0 when m_run = -inf (o is 0 then anyway)
#pragma unroll
            for (int c = 0; c < FW_BC / 4; c++) {
                const float p = expf(pr[c] - mx);  // masked: exp(-inf) = 0
                pr[c] = p;
                sum += p;
            }
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        l_run = l_run * alpha + sum;
        m_run = mx;
        if ((tid & 3) == 0) alpha_s[sr] = alpha;
        __syncthreads();  // probabilities and alphas complete

#pragma unroll
        for (int a = 0; a < 4; a++) {
            const float al = alpha_s[ty + 16 * a];
#pragma unroll
            for (int j = 0; j < NJ; j++) o[a][j] *= al;
        }
        att_acc<4, NJ>(o, Ps, PS, 1, Vs, SD, FW_BC, ty, tx);  // O += P V
        __syncthreads();  // Ks, Vs, Ps are overwritten next tile
    }

    if ((tid & 3) == 0) {
        l_s[sr] = l_run;
        const int i = i0 + sr;
        // l = 0 exactly when every key was masked (otherwise the max term adds exp(0) = 1)
        if (i < T) lse[(size_t)bh * T + i] = l_run == 0.0f ? NEG_INF : m_run + logf(l_run);
    }
    __syncthreads();
#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int r = ty + 16 * a, i = i0 + r;
        if (i >= T) continue;
        const float l = l_s[r], inv = l == 0.0f ? 0.0f : 1.0f / l;
        float *orow = out + ((size_t)b * T + i) * C + (size_t)h * HS;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int d = tx + 16 * j;
            if (d < HS) orow[d] = o[a][j] * inv;  // all masked: o = 0, inv = 0 -> 0
        }
    }
}

// ---------------------------------------------------------------- backward

// D[bh T + i] = dout_i . out_i over the head's HS columns; one warp per (bh, i).
__global__ static void att_rowdot_kernel(float *D, const float *dout, const float *out, int B, int T, int C, int NH)
{
    const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= (long long)B * NH * T) return;
    const int bh = (int)(w / T), i = (int)(w % T), b = bh / NH, h = bh % NH, HS = C / NH;
    const size_t off = ((size_t)b * T + i) * C + (size_t)h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32) s += dout[off + d] * out[off + d];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) D[w] = s;
}

// P and scale * dS of one score: 0 for masked keys, rows past T and fully masked rows (L = -inf).
static __device__ __forceinline__ void att_p_ds(float &p, float &ds, float s, float dp, float L, float Di,
                                                bool masked, float scale)
{
    p = 0.0f;
    ds = 0.0f;
    if (!masked && L != NEG_INF) {
        p = expf(s * scale - L);
        ds = scale * p * (dp - Di);
    }
}

template <int NJ>
static size_t att_dkdv_smem(void)
{
    const int SD = 16 * NJ + 1;
    return ((size_t)(2 * KV_BC + 2 * KV_BR) * SD + 2 * (size_t)KV_BR * (KV_BC + 1) + 2 * KV_BR) * sizeof(float);
}

// grid (ceil(T / KV_BC), B * NH): dk, dv of keys [j0, j0 + KV_BC) of one (b, h).
template <int NJ>
__global__ __launch_bounds__(ATT_THREADS) static void att_dkdv_kernel(float *dk, float *dv, const float *dout,
                                                                      const float *q, const float *k, const float *v,
                                                                      int ld, const float *lse, const float *D,
                                                                      const float *key_mask, int T, int C, int NH,
                                                                      int causal, float scale)
{
    constexpr int W = 16 * NJ, SD = W + 1, PS = KV_BC + 1;
    extern __shared__ float sm[];
    float *Ks = sm;                 // (KV_BC, SD) this block's keys
    float *Vs = Ks + KV_BC * SD;    // (KV_BC, SD) their values
    float *Qs = Vs + KV_BC * SD;    // (KV_BR, SD) current query tile
    float *dOs = Qs + KV_BR * SD;   // (KV_BR, SD) its dout rows
    float *Ps = dOs + KV_BR * SD;   // (KV_BR, PS) P
    float *dSs = Ps + KV_BR * PS;   // (KV_BR, PS) scale * dS
    float *Ls = dSs + KV_BR * PS;   // (KV_BR) lse of the tile's rows, -inf past T
    float *Ds = Ls + KV_BR;         // (KV_BR) D of the tile's rows

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int j0 = blockIdx.x * KV_BC;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, HS = C / NH;
    const size_t base = (size_t)b * T * ld + (size_t)h * HS, obase = (size_t)b * T * C + (size_t)h * HS;
    const float *km = key_mask ? key_mask + (size_t)b * T : nullptr;

    att_load<W>(Ks, SD, k + base, ld, j0, KV_BC, T, HS);
    att_load<W>(Vs, SD, v + base, ld, j0, KV_BC, T, HS);

    float gk[4][NJ], gv[4][NJ];  // dk, dv of keys ty + 16a, columns tx + 16j
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int j = 0; j < NJ; j++) gk[a][j] = gv[a][j] = 0.0f;

    // Causal: query rows < j0 see none of these keys; start at the tile holding row j0.
    for (int i0 = causal ? j0 / KV_BR * KV_BR : 0; i0 < T; i0 += KV_BR) {
        att_load<W>(Qs, SD, q + base, ld, i0, KV_BR, T, HS);
        att_load<W>(dOs, SD, dout + obase, C, i0, KV_BR, T, HS);
        if (tid < KV_BR) {
            const int i = i0 + tid;
            Ls[tid] = i < T ? lse[(size_t)bh * T + i] : NEG_INF;
            Ds[tid] = i < T ? D[(size_t)bh * T + i] : 0.0f;
        }
        __syncthreads();  // Ks, Vs (first pass), Qs, dOs, Ls, Ds ready

        float s[2][4], dp[2][4];  // query rows ty + 16a, keys tx + 16b
        att_dot<2, 4>(s, Qs, Ks, SD, HS, ty, tx);
        att_dot<2, 4>(dp, dOs, Vs, SD, HS, ty, tx);
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int bb = 0; bb < 4; bb++) {
                const int r = ty + 16 * a, c = tx + 16 * bb;
                float p, ds;
                att_p_ds(p, ds, s[a][bb], dp[a][bb], Ls[r], Ds[r], att_masked(i0 + r, j0 + c, T, km, causal),
                         scale);
                Ps[r * PS + c] = p;
                dSs[r * PS + c] = ds;
            }
        __syncthreads();  // P, dS complete

        att_acc<4, NJ>(gv, Ps, 1, PS, dOs, SD, KV_BR, ty, tx);  // dV += P^T dO
        att_acc<4, NJ>(gk, dSs, 1, PS, Qs, SD, KV_BR, ty, tx);  // dK += (scale dS)^T Q
        __syncthreads();  // Qs, dOs, Ps, dSs are overwritten next tile
    }

#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int j = j0 + ty + 16 * a;
        if (j >= T) continue;
        float *dkr = dk + base + (size_t)j * ld, *dvr = dv + base + (size_t)j * ld;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) {
            const int d = tx + 16 * jj;
            if (d < HS) {
                dkr[d] += gk[a][jj];
                dvr[d] += gv[a][jj];
            }
        }
    }
}

template <int NJ>
static size_t att_dq_smem(void)
{
    const int SD = 16 * NJ + 1;
    return ((size_t)(2 * DQ_BR + 2 * DQ_BC) * SD + (size_t)DQ_BR * (DQ_BC + 1) + 2 * DQ_BR) * sizeof(float);
}

// grid (ceil(T / DQ_BR), B * NH): dq of query rows [i0, i0 + DQ_BR) of one (b, h);
// reverse tile order when causal, as the forward.
template <int NJ>
__global__ __launch_bounds__(ATT_THREADS) static void att_dq_kernel(float *dq, const float *dout, const float *q,
                                                                    const float *k, const float *v, int ld,
                                                                    const float *lse, const float *D,
                                                                    const float *key_mask, int T, int C, int NH,
                                                                    int causal, float scale)
{
    constexpr int W = 16 * NJ, SD = W + 1, PS = DQ_BC + 1;
    extern __shared__ float sm[];
    float *Qs = sm;                 // (DQ_BR, SD) this block's query rows
    float *dOs = Qs + DQ_BR * SD;   // (DQ_BR, SD) their dout rows
    float *Ks = dOs + DQ_BR * SD;   // (DQ_BC, SD) current key tile
    float *Vs = Ks + DQ_BC * SD;    // (DQ_BC, SD) its values
    float *dSs = Vs + DQ_BC * SD;   // (DQ_BR, PS) scale * dS
    float *Ls = dSs + DQ_BR * PS;   // (DQ_BR) lse, -inf past T
    float *Ds = Ls + DQ_BR;         // (DQ_BR) D

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int tile = causal ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int i0 = tile * DQ_BR;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, HS = C / NH;
    const size_t base = (size_t)b * T * ld + (size_t)h * HS, obase = (size_t)b * T * C + (size_t)h * HS;
    const float *km = key_mask ? key_mask + (size_t)b * T : nullptr;

    att_load<W>(Qs, SD, q + base, ld, i0, DQ_BR, T, HS);
    att_load<W>(dOs, SD, dout + obase, C, i0, DQ_BR, T, HS);
    if (tid < DQ_BR) {
        const int i = i0 + tid;
        Ls[tid] = i < T ? lse[(size_t)bh * T + i] : NEG_INF;
        Ds[tid] = i < T ? D[(size_t)bh * T + i] : 0.0f;
    }

    float g[4][NJ];  // dq of rows ty + 16a, columns tx + 16j
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int j = 0; j < NJ; j++) g[a][j] = 0.0f;

    const int jend = causal ? min(T, i0 + DQ_BR) : T;
    for (int j0 = 0; j0 < jend; j0 += DQ_BC) {
        att_load<W>(Ks, SD, k + base, ld, j0, DQ_BC, T, HS);
        att_load<W>(Vs, SD, v + base, ld, j0, DQ_BC, T, HS);
        __syncthreads();  // Qs, dOs, Ls, Ds (first pass), Ks, Vs ready

        float s[4][2], dp[4][2];  // query rows ty + 16a, keys tx + 16b
        att_dot<4, 2>(s, Qs, Ks, SD, HS, ty, tx);
        att_dot<4, 2>(dp, dOs, Vs, SD, HS, ty, tx);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int bb = 0; bb < 2; bb++) {
                const int r = ty + 16 * a, c = tx + 16 * bb;
                float p, ds;
                att_p_ds(p, ds, s[a][bb], dp[a][bb], Ls[r], Ds[r], att_masked(i0 + r, j0 + c, T, km, causal),
                         scale);
                dSs[r * PS + c] = ds;
            }
        __syncthreads();  // dS complete

        att_acc<4, NJ>(g, dSs, PS, 1, Ks, SD, DQ_BC, ty, tx);  // dQ += (scale dS) K
        __syncthreads();  // Ks, Vs, dSs are overwritten next tile
    }

#pragma unroll
    for (int a = 0; a < 4; a++) {
        const int i = i0 + ty + 16 * a;
        if (i >= T) continue;
        float *dqr = dq + base + (size_t)i * ld;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) {
            const int d = tx + 16 * jj;
            if (d < HS) dqr[d] += g[a][jj];
        }
    }
}

// ---------------------------------------------------------------- host side

static bool att_shape_ok(const char *who, int ld, int B, int T, int C, int NH)
{
    if (B >= 0 && T >= 0 && NH > 0 && C > 0 && C % NH == 0 && ld >= C && C / NH <= ATT_HS_MAX &&
        (long long)B * NH <= 65535)
        return true;
    cuda_error_record((int)cudaErrorInvalidValue, who, __FILE__, __LINE__);
    return false;
}

// Dynamic shared memory above 48 KiB must be opted into per kernel.
template <typename K>
static bool att_smem_optin(K kernel, size_t bytes, const char *who)
{
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) {
        cuda_error_record((int)e, who, __FILE__, __LINE__);
        return false;
    }
    return true;
}

template <int NJ>
static void att_forward_launch(float *out, float *lse, const float *q, const float *k, const float *v, int ld,
                               const float *key_mask, int B, int T, int C, int NH, int causal)
{
    const size_t smem = att_forward_smem<NJ>();
    if (!att_smem_optin(att_forward_kernel<NJ>, smem, "cudaFuncSetAttribute(att_forward_kernel)")) return;
    const float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid((T + FW_BR - 1) / FW_BR, B * NH);
    att_forward_kernel<NJ><<<grid, ATT_THREADS, smem, (cudaStream_t)cuda_stream_current()>>>(
        out, lse, q, k, v, ld, key_mask, T, C, NH, causal, scale);
    CUDA_LAUNCH_CHECK("att_forward_kernel");
}

template <int NJ>
static void att_backward_launch(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                const float *v, int ld, const float *lse, const float *D, const float *key_mask,
                                int B, int T, int C, int NH, int causal)
{
    cudaStream_t st = (cudaStream_t)cuda_stream_current();
    const float scale = 1.0f / sqrtf((float)(C / NH));
    const size_t s1 = att_dkdv_smem<NJ>(), s2 = att_dq_smem<NJ>();
    if (!att_smem_optin(att_dkdv_kernel<NJ>, s1, "cudaFuncSetAttribute(att_dkdv_kernel)")) return;
    if (!att_smem_optin(att_dq_kernel<NJ>, s2, "cudaFuncSetAttribute(att_dq_kernel)")) return;
    dim3 g1((T + KV_BC - 1) / KV_BC, B * NH), g2((T + DQ_BR - 1) / DQ_BR, B * NH);
    att_dkdv_kernel<NJ><<<g1, ATT_THREADS, s1, st>>>(dk, dv, dout, q, k, v, ld, lse, D, key_mask, T, C, NH, causal,
                                                     scale);
    CUDA_LAUNCH_CHECK("att_dkdv_kernel");
    att_dq_kernel<NJ><<<g2, ATT_THREADS, s2, st>>>(dq, dout, q, k, v, ld, lse, D, key_mask, T, C, NH, causal, scale);
    CUDA_LAUNCH_CHECK("att_dq_kernel");
}

extern "C" void cuda_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                       int ld, const float *key_mask, int B, int T, int C, int NH, int causal)
{
    if (!att_shape_ok("cuda_attention_forward: need C % NH == 0, C / NH <= 128, ld >= C, B * NH <= 65535", ld, B,
                      T, C, NH))
        return;
    if (B == 0 || T == 0) return;
    if (C / NH <= 64) att_forward_launch<4>(out, lse, q, k, v, ld, key_mask, B, T, C, NH, causal);
    else att_forward_launch<8>(out, lse, q, k, v, ld, key_mask, B, T, C, NH, causal);
}

extern "C" void cuda_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, int ld, const float *out, const float *lse,
                                        const float *key_mask, int B, int T, int C, int NH, int causal)
{
    if (!att_shape_ok("cuda_attention_backward: need C % NH == 0, C / NH <= 128, ld >= C, B * NH <= 65535", ld,
                      B, T, C, NH))
        return;
    if (B == 0 || T == 0) return;
    const size_t rows = (size_t)B * NH * T;
    float *D = (float *)cuda_workspace(rows * sizeof(float));  // (B, NH, T)
    if (!D) return;  // the failure is recorded
    const size_t blocks = (rows * 32 + 255) / 256;
    att_rowdot_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)cuda_stream_current()>>>(D, dout, out, B, T, C, NH);
    CUDA_LAUNCH_CHECK("att_rowdot_kernel");
    if (C / NH <= 64) att_backward_launch<4>(dq, dk, dv, dout, q, k, v, ld, lse, D, key_mask, B, T, C, NH, causal);
    else att_backward_launch<8>(dq, dk, dv, dout, q, k, v, ld, lse, D, key_mask, B, T, C, NH, causal);
}
