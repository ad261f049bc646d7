// cuda/matmul — see matmul.h.
//
// The one design decision: every GEMM is ONE cuBLASLt call on the caller's
// row-major buffers, read as column-major transposes (no copies, no transposes).
// A row-major (r, c) matrix X with leading dimension c is, to cuBLAS, the
// column-major (c x r) matrix X^T with ld = c. In math form out = inp · Wm with
// Wm (C, OC): Wm = W^T for OUT_IN (nn.Linear, W (OC, C)), Wm = W for IN_OUT
// (Conv1D, W (C, OC)). Each GEMM below is computed as its transpose,
//   D (m x n, col-major, ld) = op(A) (m x k) · op(B) (k x n),
// and the comment at each call spells out m, n, k, the ops and the lds.
//
// Precisions (matmul_mode): F32 (CUBLAS_COMPUTE_32F, pure FP32 FMA: cuBLAS uses
// TF32 only when asked), TF32 (CUBLAS_COMPUTE_32F_FAST_TF32), BF16 (A and B
// rounded to bf16 into the workspace, C/D fp32, compute 32F: bf16 tensor cores
// with fp32 accumulation). The forward bias goes in the epilogue
// (CUBLASLT_EPILOGUE_BIAS, a vector of m = OC entries broadcast along n = BT);
// when cuBLASLt offers no algorithm for a call (odd leading dimensions and
// alignments) the call falls back to cublasGemmEx with the bias pre-filled into
// out and beta = 1, so every shape works.
//
// Workspace (one cuda_workspace call per kernel call, carved in this order):
//   [cuBLASLt workspace MATMUL_LT_WS][bf16 operand 1][bf16 operand 2][bf16 operand 3][dbias partials]
// each region 256-byte aligned.
#include "matmul.h"

#include "device.h"

#include <cstdint>
#include <cstring>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

enum matmul_mode { MATMUL_MODE_F32 = 0, MATMUL_MODE_TF32, MATMUL_MODE_BF16, MATMUL_MODE_F16 };

// Modes whose operands are rounded to a 16-bit type in the workspace.
inline bool half_operands(matmul_mode m) { return m == MATMUL_MODE_BF16 || m == MATMUL_MODE_F16; }
inline cudaDataType_t operand_type(matmul_mode m)
{
    return m == MATMUL_MODE_BF16 ? CUDA_R_16BF : m == MATMUL_MODE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

// cuBLASLt's workspace: 32 MiB is what NVIDIA recommends for Hopper.
constexpr size_t MATMUL_LT_WS = (size_t)32 << 20;
// Row blocks of the dbias reduction (first stage): at most this many partial rows.
constexpr int MATMUL_DBIAS_SPLIT_MAX = 64;
constexpr int MATMUL_DBIAS_ROWS_MIN = 128;  // rows per split at least

// Handles, lazily created once per thread (never destroyed: they live as long as the thread).
thread_local cublasLtHandle_t lt_handle = nullptr;
thread_local cublasHandle_t blas_handle = nullptr;

// Heuristic results cached per call signature (the heuristic query costs ~10 us).
struct algo_key {
    int ta, tb, m, n, k, lda, ldb, ldd, mode, bias;
    unsigned align_a, align_b, align_d;
};
struct algo_entry {
    algo_key key;
    int found;  // 0: cuBLASLt has no algorithm, use the fallback
    cublasLtMatmulAlgo_t algo;
};
constexpr int MATMUL_ALGO_CACHE = 64;
thread_local algo_entry algo_cache[MATMUL_ALGO_CACHE];
thread_local int algo_cache_n = 0, algo_cache_next = 0;

size_t round_up(size_t x) { return (x + 255) & ~(size_t)255; }

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume.
unsigned alignment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && (a % al) != 0) al >>= 1;
    return al;
}

bool handles_ok()
{
    if (!lt_handle) {
        cublasStatus_t st = cublasLtCreate(&lt_handle);
        if (st != CUBLAS_STATUS_SUCCESS) {
            lt_handle = nullptr;
            cuda_error_record((int)st, "cublasLtCreate", __FILE__, __LINE__);
            return false;
        }
    }
    if (!blas_handle) {
        cublasStatus_t st = cublasCreate(&blas_handle);
        if (st != CUBLAS_STATUS_SUCCESS) {
            blas_handle = nullptr;
            cuda_error_record((int)st, "cublasCreate", __FILE__, __LINE__);
            return false;
        }
    }
    return true;
}

// ---- small kernels ---------------------------------------------------------

// dst[i] = bf16(src[i]), round to nearest even (NaN stays NaN).
__global__ void round_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] = __float2bfloat16_rn(src[i]);
}

void round_bf16(__nv_bfloat16 *dst, const float *src, size_t n, cudaStream_t s)
{
    if (n == 0) return;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65535u * 4u) blocks = 65535u * 4u;
    round_bf16_kernel<<<(unsigned)blocks, 256, 0, s>>>(dst, src, n);
    CUDA_LAUNCH_CHECK("round_bf16_kernel");
}

// dst[i] = fp16(src[i]), round to nearest even; beyond 65504 it is inf, which the
// loss scaler (libcore/precision.h) detects in the gradients and backs off from.
__global__ void round_f16_kernel(__half *dst, const float *src, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] = __float2half_rn(src[i]);
}

// The operands of a 16-bit mode: bf16 or fp16 copies of src in dst (2 bytes each).
void round_half(void *dst, const float *src, size_t n, matmul_mode mode, cudaStream_t s)
{
    if (mode == MATMUL_MODE_BF16) { round_bf16((__nv_bfloat16 *)dst, src, n, s); return; }
    if (n == 0) return;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65535u * 4u) blocks = 65535u * 4u;
    round_f16_kernel<<<(unsigned)blocks, 256, 0, s>>>((__half *)dst, src, n);
    CUDA_LAUNCH_CHECK("round_f16_kernel");
}

// out (rows, cols) row-major: every row = bias (cols), or 0 when bias is NULL.
__global__ void fill_rows_kernel(float *out, const float *bias, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) out[i] = bias ? bias[i % (size_t)cols] : 0.0f;
}

void fill_rows(float *out, const float *bias, int rows, int cols, cudaStream_t s)
{
    size_t n = (size_t)rows * cols;
    if (n == 0) return;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65535u * 4u) blocks = 65535u * 4u;
    fill_rows_kernel<<<(unsigned)blocks, 256, 0, s>>>(out, bias, rows, cols);
    CUDA_LAUNCH_CHECK("fill_rows_kernel");
}

// dbias, stage 1: partial[s][o] = sum of dout[i][o] over the rows i of split s,
// in a fixed order: thread (x, y) of a (32, 8) block sums rows y, y+8, ... of its
// split for column o = 32*blockIdx.x + x, then the 8 row sums are added in y order.
__global__ void dbias_partial_kernel(float *partial, const float *dout, int BT, int OC, int rows_per_split)
{
    __shared__ float sh[8][33];
    int o = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per_split, r1 = min(BT, r0 + rows_per_split);
    float acc = 0.0f;
    if (o < OC)
        for (int i = r0 + threadIdx.y; i < r1; i += 8) acc += dout[(size_t)i * OC + o];
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        float s = 0.0f;
        for (int y = 0; y < 8; y++) s += sh[y][threadIdx.x];
        partial[(size_t)blockIdx.y * OC + o] = s;
    }
}

// dbias, stage 2: dbias[o] += sum over splits s (in order) of partial[s][o].
__global__ void dbias_final_kernel(float *dbias, const float *partial, int splits, int OC)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float s = 0.0f;
    for (int k = 0; k < splits; k++) s += partial[(size_t)k * OC + o];
    dbias[o] += s;
}

int dbias_splits(int BT)
{
    int s = (BT + MATMUL_DBIAS_ROWS_MIN - 1) / MATMUL_DBIAS_ROWS_MIN;
    return s < 1 ? 1 : (s > MATMUL_DBIAS_SPLIT_MAX ? MATMUL_DBIAS_SPLIT_MAX : s);
}

// Deterministic: a fixed split of the rows and fixed summation orders, no atomics.
void dbias_colsum(float *dbias, const float *dout, int BT, int OC, float *partial, cudaStream_t s)
{
    int splits = dbias_splits(BT);
    int rows = (BT + splits - 1) / splits;
    dim3 grid((unsigned)((OC + 31) / 32), (unsigned)splits), block(32, 8);
    dbias_partial_kernel<<<grid, block, 0, s>>>(partial, dout, BT, OC, rows);
    CUDA_LAUNCH_CHECK("dbias_partial_kernel");
    dbias_final_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, s>>>(dbias, partial, splits, OC);
    CUDA_LAUNCH_CHECK("dbias_final_kernel");
}

// ---- one GEMM ----------------------------------------------------------------

// D (m x n, col-major, ldd, fp32) = op(A) · op(B) + beta * D (+ bias[m] broadcast along n).
struct gemm_call {
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A;
    int lda;
    const void *B;
    int ldb;
    float *D;
    int ldd;
    float beta;        // 0 (write) or 1 (accumulate)
    const float *bias; // (m) or NULL; only with beta = 0
    matmul_mode mode;
};

#define LT_TRY(call, what)                                                     \
    do {                                                                       \
        cublasStatus_t st_ = (call);                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                    \
            cuda_error_record((int)st_, what, __FILE__, __LINE__);             \
            ok = false;                                                        \
            goto release;                                                      \
        }                                                                      \
    } while (0)

// cublasGemmEx, for the shapes cuBLASLt declines: any ld, any alignment.
// prefilled: the bias is already in D (gemm did it), so accumulate onto it.
void gemm_fallback(const gemm_call *g, bool prefilled, cudaStream_t stream)
{
    float beta = prefilled ? 1.0f : g->beta;
    if (g->bias && !prefilled) {  // out = bias broadcast, then accumulate; D (m x n) col-major = (n, m) row-major
        fill_rows(g->D, g->bias, g->n, g->m, stream);
        beta = 1.0f;
    }
    const float alpha = 1.0f;
    cudaDataType_t ab = operand_type(g->mode);
    cublasComputeType_t ct = g->mode == MATMUL_MODE_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t st = cublasSetStream(blas_handle, stream);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasGemmEx(blas_handle, g->ta, g->tb, g->m, g->n, g->k, &alpha, g->A, ab, g->lda, g->B, ab, g->ldb, &beta,
                          g->D, CUDA_R_32F, g->ldd, ct, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) cuda_error_record((int)st, "cublasGemmEx (matmul fallback)", __FILE__, __LINE__);
}

void gemm(const gemm_call *g, void *lt_ws)
{
    cudaStream_t stream = (cudaStream_t)cuda_stream_current();
    if (!handles_ok()) return;
    // The bias epilogue wants a 16-byte aligned vector (conservative); else pre-fill.
    const bool epi_bias = g->bias && (uintptr_t)g->bias % 16 == 0;
    const bool prefilled = g->bias && !epi_bias;
    if (prefilled) fill_rows(g->D, g->bias, g->n, g->m, stream);  // D (m x n) col-major = (n, m) row-major
    algo_key key;
    memset(&key, 0, sizeof key);  // padding-free, but memcmp below compares every byte
    key.ta = (int)g->ta, key.tb = (int)g->tb, key.m = g->m, key.n = g->n, key.k = g->k;
    key.lda = g->lda, key.ldb = g->ldb, key.ldd = g->ldd, key.mode = (int)g->mode, key.bias = epi_bias;
    key.align_a = alignment_of(g->A), key.align_b = alignment_of(g->B), key.align_d = alignment_of(g->D);

    cudaDataType_t ab = operand_type(g->mode);
    cublasComputeType_t ct = g->mode == MATMUL_MODE_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    bool ok = true, found = false;
    cublasLtMatmulAlgo_t algo;
    memset(&algo, 0, sizeof algo);
    const float alpha = 1.0f, beta = prefilled ? 1.0f : g->beta;
    {
        int32_t ta = (int32_t)g->ta, tb = (int32_t)g->tb;
        LT_TRY(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F), "cublasLtMatmulDescCreate");
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
        if (epi_bias) {
            uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
            const void *bp = g->bias;
            LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "set EPILOGUE");
            LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                   "set BIAS_POINTER");
        }
        // Stored shapes: op(A) is m x k, so A is stored (m x k) when N, (k x m) when T; likewise B (k x n) or (n x k).
        const bool an = g->ta == CUBLAS_OP_N, bn = g->tb == CUBLAS_OP_N;
        LT_TRY(cublasLtMatrixLayoutCreate(&la, ab, an ? g->m : g->k, an ? g->k : g->m, g->lda), "layout A");
        LT_TRY(cublasLtMatrixLayoutCreate(&lb, ab, bn ? g->k : g->n, bn ? g->n : g->k, g->ldb), "layout B");
        LT_TRY(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, g->m, g->n, g->ldd), "layout C/D");

        int hit = -1;
        for (int i = 0; i < algo_cache_n; i++)
            if (memcmp(&algo_cache[i].key, &key, sizeof key) == 0) { hit = i; break; }
        if (hit >= 0) {
            found = algo_cache[hit].found;
            algo = algo_cache[hit].algo;
        } else {
            uint64_t wsb = MATMUL_LT_WS;
            LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
            LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb),
                   "set MAX_WORKSPACE_BYTES");
            uint32_t al[3] = { key.align_a, key.align_b, key.align_d };
            LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4), "align A");
            LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4), "align B");
            LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4), "align C");
            LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], 4), "align D");
            cublasLtMatmulHeuristicResult_t res;
            int nres = 0;
            cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_handle, op, la, lb, ld, ld, pref, 1, &res, &nres);
            found = st == CUBLAS_STATUS_SUCCESS && nres > 0 && res.state == CUBLAS_STATUS_SUCCESS;
            if (found) algo = res.algo;
            algo_entry *e = algo_cache_n < MATMUL_ALGO_CACHE ? &algo_cache[algo_cache_n++]
                                                              : &algo_cache[algo_cache_next++ % MATMUL_ALGO_CACHE];
            e->key = key;
            e->found = found;
            if (found) e->algo = algo;
        }
        if (found) {
            cublasStatus_t st = cublasLtMatmul(lt_handle, op, &alpha, g->A, la, g->B, lb, &beta, g->D, ld, g->D, ld,
                                               &algo, lt_ws, MATMUL_LT_WS, stream);
            if (st != CUBLAS_STATUS_SUCCESS) found = false;  // argument trouble: the fallback handles any shape
        }
    }
release:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    if (ok && !found) gemm_fallback(g, prefilled, stream);
}

// ---- the layer ---------------------------------------------------------------

void forward(float *out, const float *inp, const float *weight, const float *bias, int BT, int C, int OC,
             matmul_layout layout, matmul_mode mode)
{
    if (BT <= 0 || OC <= 0) return;
    cudaStream_t stream = (cudaStream_t)cuda_stream_current();
    if (C <= 0) {  // an empty sum: out = bias (or 0), as the CPU kernel
        fill_rows(out, bias, BT, OC, stream);
        return;
    }
    const size_t n_in = (size_t)BT * C, n_w = (size_t)C * OC;
    size_t bytes = MATMUL_LT_WS;
    if (half_operands(mode)) bytes += round_up(n_in * 2) + round_up(n_w * 2);
    char *ws = (char *)cuda_workspace(bytes);
    if (!ws) return;
    const void *A = weight, *Bm = inp;
    if (half_operands(mode)) {
        char *w16 = ws + MATMUL_LT_WS, *x16 = ws + MATMUL_LT_WS + round_up(n_w * 2);
        round_half(w16, weight, n_w, mode, stream);
        round_half(x16, inp, n_in, mode, stream);
        A = w16, Bm = x16;
    }
    // out^T (OC x BT, ld OC) = Wm^T (OC x C) · inp^T (C x BT):  m = OC, n = BT, k = C.
    //   B = inp: row-major (BT, C) is col-major (C x BT) ld C = inp^T, op N, ldb = C.
    //   A = W, OUT_IN: row-major (OC, C) is col-major (C x OC) ld C = W^T = Wm; we need
    //              Wm^T, so op T, lda = C.
    //          IN_OUT: row-major (C, OC) is col-major (OC x C) ld OC = W^T = Wm^T, op N, lda = OC.
    //   D = out: row-major (BT, OC) is col-major (OC x BT), ldd = OC; bias (OC) runs along m.
    gemm_call g;
    g.ta = layout == MATMUL_LAYOUT_OUT_IN ? CUBLAS_OP_T : CUBLAS_OP_N;
    g.tb = CUBLAS_OP_N;
    g.m = OC, g.n = BT, g.k = C;
    g.A = A, g.lda = layout == MATMUL_LAYOUT_OUT_IN ? C : OC;
    g.B = Bm, g.ldb = C;
    g.D = out, g.ldd = OC;
    g.beta = 0.0f, g.bias = bias, g.mode = mode;
    gemm(&g, ws);
}

void backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight,
              int BT, int C, int OC, matmul_layout layout, matmul_mode mode)
{
    if (BT <= 0 || C <= 0 || OC <= 0) return;
    if (!dinp && !dweight && !dbias) return;
    cudaStream_t stream = (cudaStream_t)cuda_stream_current();
    const bool out_in = layout == MATMUL_LAYOUT_OUT_IN, bf16 = half_operands(mode);  // bf16 or fp16
    const size_t n_in = (size_t)BT * C, n_w = (size_t)C * OC, n_out = (size_t)BT * OC;
    // Carve: [Lt ws][dout16][w16 if dinp][x16 if dweight][dbias partials].
    size_t off_d = MATMUL_LT_WS, off_w = off_d + (bf16 ? round_up(n_out * 2) : 0);
    size_t off_x = off_w + (bf16 && dinp ? round_up(n_w * 2) : 0);
    size_t off_p = off_x + (bf16 && dweight ? round_up(n_in * 2) : 0);
    size_t bytes = off_p + (dbias ? round_up((size_t)dbias_splits(BT) * OC * sizeof(float)) : 0);
    char *ws = (char *)cuda_workspace(bytes);
    if (!ws) return;

    if (dbias) dbias_colsum(dbias, dout, BT, OC, (float *)(ws + off_p), stream);
    const void *g16 = dout, *w16 = weight, *x16 = inp;
    if (bf16 && (dinp || dweight)) {
        round_half(ws + off_d, dout, n_out, mode, stream);
        g16 = ws + off_d;
        if (dinp) round_half(ws + off_w, weight, n_w, mode, stream), w16 = ws + off_w;
        if (dweight) round_half(ws + off_x, inp, n_in, mode, stream), x16 = ws + off_x;
    }
    gemm_call g;
    g.beta = 1.0f, g.bias = nullptr, g.mode = mode;  // backward ADDS
    if (dinp) {
        // dinp^T (C x BT, ld C) += Wm (C x OC) · dout^T (OC x BT):  m = C, n = BT, k = OC.
        //   B = dout: row-major (BT, OC) is col-major (OC x BT) ld OC = dout^T, op N, ldb = OC.
        //   A = W, OUT_IN: col-major view (C x OC) ld C is W^T = Wm, op N, lda = C.
        //          IN_OUT: col-major view (OC x C) ld OC is W^T = Wm^T, op T, lda = OC.
        //   D = dinp: row-major (BT, C) is col-major (C x BT), ldd = C.
        g.ta = out_in ? CUBLAS_OP_N : CUBLAS_OP_T, g.tb = CUBLAS_OP_N;
        g.m = C, g.n = BT, g.k = OC;
        g.A = w16, g.lda = out_in ? C : OC;
        g.B = g16, g.ldb = OC;
        g.D = dinp, g.ldd = C;
        gemm(&g, ws);
    }
    if (dweight && out_in) {
        // dW (OC, C) += dout^T · inp, as dW^T (C x OC, ld C) += inp^T (C x BT) · dout (BT x OC):
        //   m = C, n = OC, k = BT.
        //   A = inp: col-major view (C x BT) ld C = inp^T, op N, lda = C.
        //   B = dout: col-major view (OC x BT) ld OC = dout^T; we need dout, op T, ldb = OC.
        //   D = dW: row-major (OC, C) is col-major (C x OC), ldd = C.
        g.ta = CUBLAS_OP_N, g.tb = CUBLAS_OP_T;
        g.m = C, g.n = OC, g.k = BT;
        g.A = x16, g.lda = C;
        g.B = g16, g.ldb = OC;
        g.D = dweight, g.ldd = C;
        gemm(&g, ws);
    } else if (dweight) {
        // dW (C, OC) += inp^T · dout, as dW^T (OC x C, ld OC) += dout^T (OC x BT) · inp (BT x C):
        //   m = OC, n = C, k = BT.
        //   A = dout: col-major view (OC x BT) ld OC = dout^T, op N, lda = OC.
        //   B = inp: col-major view (C x BT) ld C = inp^T; we need inp, op T, ldb = C.
        //   D = dW: row-major (C, OC) is col-major (OC x C), ldd = OC.
        g.ta = CUBLAS_OP_N, g.tb = CUBLAS_OP_T;
        g.m = OC, g.n = C, g.k = BT;
        g.A = g16, g.lda = OC;
        g.B = x16, g.ldb = C;
        g.D = dweight, g.ldd = OC;
        gemm(&g, ws);
    }
}

}  // namespace

extern "C" void cuda_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int BT,
                                    int C, int OC, matmul_layout layout)
{
    forward(out, inp, weight, bias, BT, C, OC, layout, MATMUL_MODE_F32);
}

extern "C" void cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                     const float *weight, int BT, int C, int OC, matmul_layout layout)
{
    backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, layout, MATMUL_MODE_F32);
}

extern "C" void cuda_matmul_forward_tf32(float *out, const float *inp, const float *weight, const float *bias, int BT,
                                         int C, int OC, matmul_layout layout)
{
    forward(out, inp, weight, bias, BT, C, OC, layout, MATMUL_MODE_TF32);
}

extern "C" void cuda_matmul_backward_tf32(float *dinp, float *dweight, float *dbias, const float *dout,
                                          const float *inp, const float *weight, int BT, int C, int OC,
                                          matmul_layout layout)
{
    backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, layout, MATMUL_MODE_TF32);
}

extern "C" void cuda_matmul_forward_bf16(float *out, const float *inp, const float *weight, const float *bias, int BT,
                                         int C, int OC, matmul_layout layout)
{
    forward(out, inp, weight, bias, BT, C, OC, layout, MATMUL_MODE_BF16);
}

extern "C" void cuda_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout,
                                          const float *inp, const float *weight, int BT, int C, int OC,
                                          matmul_layout layout)
{
    backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, layout, MATMUL_MODE_BF16);
}

extern "C" void cuda_matmul_forward_f16(float *out, const float *inp, const float *weight, const float *bias, int BT,
                                        int C, int OC, matmul_layout layout)
{
    forward(out, inp, weight, bias, BT, C, OC, layout, MATMUL_MODE_F16);
}

extern "C" void cuda_matmul_backward_f16(float *dinp, float *dweight, float *dbias, const float *dout,
                                         const float *inp, const float *weight, int BT, int C, int OC,
                                         matmul_layout layout)
{
    backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, layout, MATMUL_MODE_F16);
}
