// optim — CUDA AdamW, SGD and the clip's sum of squares (see optim.h).
//
// Steps: one grid-stride loop over the plan's elements, numbered 0 .. floats-1
// across the ranges in order; each thread finds the range of its element by a
// binary search over the ranges' running starts (its elements increase, so each
// search starts at the last range found). Every element is independent, so the
// launch shape cannot change a result. The arithmetic is written with explicitly
// rounded intrinsics in optim.c's order: see optim.h.
#include "optim.h"

#include <cmath>
#include <cuda_runtime.h>
#include <vector>

#include "device.h"

#define OPTIM_THREADS 256
#define NORM_BLOCKS 1024  // optim.c's NORM_BLOCKS: one warp per block
#define NORM_LINE 16      // optim.c's LINE_FLOATS: block sizes are rounded up to it
#define NORM_UNROLL 8     // 32-float chunks a warp has in flight per iteration

namespace {

struct optim_seg {
    size_t start;   // running start: elements before this range in the plan's numbering
    size_t offset;  // params/grads
    size_t packed;  // moments
    size_t count;
    int decay;
    int plain;
};

struct adamw_coef {  // optim.c's adamw_coef
    float decay;     // 1 - lr*wd, for decay ranges (others multiply by exactly 1)
    float b1, a1;    // beta1, 1 - beta1
    float b2, a2;    // beta2, 1 - beta2
    float bc2_sqrt;  // sqrt(1 - beta2^t)
    float eps;
    float neg_step;  // -(lr / (1 - beta1^t))
};

struct sgd_coef {    // optim.c's sgd_coef
    float wd;        // weight decay of decay ranges
    float mu;        // momentum
    float neg_lr;    // -lr
    int momentum;    // a buffer is kept
    int first;       // t == 1: the buffer starts as the gradient
    int nesterov;
};

}  // namespace

static unsigned optim_blocks(size_t n)
{
    size_t b = (n + OPTIM_THREADS - 1) / OPTIM_THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

static void bad_argument(const char *what, const char *file, int line)
{
    cuda_error_record((int)cudaErrorInvalidValue, what, file, line);
}
#define REFUSE_IF(cond)                                  \
    do {                                                 \
        if (cond) {                                      \
            bad_argument(#cond, __FILE__, __LINE__);     \
            return;                                      \
        }                                                \
    } while (0)

extern "C" int cuda_optim_plan_init(cuda_optim_plan *plan, const cuda_optim_range *r, int n)
{
    *plan = cuda_optim_plan{};
    std::vector<optim_seg> segs;
    size_t start = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].count == 0) continue;  // an empty range would share its start with the next one
        segs.push_back(optim_seg{ start, r[i].offset, r[i].packed, r[i].count, r[i].decay ? 1 : 0, r[i].plain ? 1 : 0 });
        start += r[i].count;
    }
    if (segs.empty()) return 0;
    size_t bytes = segs.size() * sizeof(optim_seg);
    cudaError_t e = cudaMalloc(&plan->segs, bytes);
    if (e != cudaSuccess) {
        plan->segs = nullptr;
        return (int)e;
    }
    if ((e = cudaMemcpy(plan->segs, segs.data(), bytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
        cudaFree(plan->segs);
        plan->segs = nullptr;
        return (int)e;
    }
    plan->count = (int)segs.size();
    plan->floats = start;
    return 0;
}

extern "C" void cuda_optim_plan_free(cuda_optim_plan *plan)
{
    if (plan->segs) cudaFree(plan->segs);
    *plan = cuda_optim_plan{};
}

// The last range whose start is <= j, searching [lo, n): starts increase strictly
// (empty ranges were dropped), so it is the range holding element j.
__device__ static inline int find_seg(const optim_seg *s, int n, size_t j, int lo)
{
    int hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (s[mid].start <= j) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, const optim_seg *segs, int nseg,
                                    size_t total, adamw_coef c)
{
    int k = 0;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < total; j += (size_t)gridDim.x * blockDim.x) {
        k = find_seg(segs, nseg, j, k);
        const optim_seg s = segs[k];
        size_t o = s.offset + (j - s.start), q = s.packed + (j - s.start);
        float gi = g[o];
        // optim.c adamw_portable, operation for operation:
        float pi = __fmul_rn(p[o], s.decay ? c.decay : 1.0f);                        // p * decay
        float mi = __fmaf_rn(gi, c.a1, __fmul_rn(m[q], c.b1));                        // fmaf(g, a1, m*b1)
        float vi = __fmaf_rn(__fmul_rn(c.a2, gi), gi, __fmul_rn(v[q], c.b2));         // fmaf(a2*g, g, v*b2)
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);        // sqrtf(v)/bc2 + eps
        p[o] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(c.neg_step, mi), denom));           // p + (ns*m)/denom
        m[q] = mi;
        v[q] = vi;
    }
}

__global__ static void sgd_kernel(float *p, const float *g, float *b, const optim_seg *segs, int nseg, size_t total,
                                  sgd_coef c)
{
    int k = 0;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < total; j += (size_t)gridDim.x * blockDim.x) {
        k = find_seg(segs, nseg, j, k);
        const optim_seg s = segs[k];
        size_t o = s.offset + (j - s.start), q = s.packed + (j - s.start);
        // optim.c sgd_run + sgd_portable: a plain range has no decay and no momentum.
        float wd = s.decay && !s.plain ? c.wd : 0.0f;
        float pi = p[o], d = g[o];
        if (wd != 0.0f) d = __fmaf_rn(pi, wd, d);                                    // fmaf(p, wd, g)
        if (c.momentum && !s.plain) {
            float bi = c.first ? d : __fadd_rn(__fmul_rn(b[q], c.mu), d);            // b*mu + d, unfused
            b[q] = bi;
            d = c.nesterov ? __fmaf_rn(bi, c.mu, d) : bi;                             // fmaf(b, mu, d)
        }
        p[o] = __fmaf_rn(d, c.neg_lr, pi);                                            // fmaf(d, -lr, p)
    }
}

extern "C" void cuda_adamw_step(float *params, const float *grads, float *m, float *v, const cuda_optim_plan *plan,
                                const cuda_adamw_hparams *hp, double lr, long t)
{
    REFUSE_IF(t < 1);
    REFUSE_IF(!(hp->beta1 >= 0 && hp->beta1 < 1 && hp->beta2 >= 0 && hp->beta2 < 1 && hp->eps > 0 && lr >= 0 &&
                hp->weight_decay >= 0));
    if (plan->floats == 0) return;
    REFUSE_IF(!params || !grads || !m || !v);
    // optim.c adamw_coefs: the same double expressions, rounded to float in the same places.
    double bc1 = 1.0 - std::pow(hp->beta1, (double)t), bc2 = 1.0 - std::pow(hp->beta2, (double)t);
    adamw_coef c;
    c.decay = (float)(1.0 - lr * hp->weight_decay);
    c.b1 = (float)hp->beta1;
    c.a1 = (float)(1.0 - hp->beta1);
    c.b2 = (float)hp->beta2;
    c.a2 = (float)(1.0 - hp->beta2);
    c.bc2_sqrt = (float)std::sqrt(bc2);
    c.eps = (float)hp->eps;
    c.neg_step = (float)(-(lr / bc1));
    adamw_kernel<<<optim_blocks(plan->floats), OPTIM_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(
        params, grads, m, v, (const optim_seg *)plan->segs, plan->count, plan->floats, c);
    CUDA_LAUNCH_CHECK("adamw_kernel");
}

extern "C" void cuda_sgd_step(float *params, const float *grads, float *b, const cuda_optim_plan *plan,
                              const cuda_sgd_hparams *hp, double lr, long t)
{
    REFUSE_IF(t < 1);
    REFUSE_IF(!(hp->momentum >= 0 && hp->momentum < 1 && lr >= 0 && hp->weight_decay >= 0));
    REFUSE_IF(hp->nesterov && !(hp->momentum > 0));
    if (plan->floats == 0) return;
    REFUSE_IF(!params || !grads || (hp->momentum != 0 && !b));
    sgd_coef c;
    c.wd = (float)hp->weight_decay;
    c.mu = (float)hp->momentum;
    c.neg_lr = (float)-lr;
    c.momentum = hp->momentum != 0;
    c.first = t == 1;
    c.nesterov = hp->nesterov;
    sgd_kernel<<<optim_blocks(plan->floats), OPTIM_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(
        params, grads, b, (const optim_seg *)plan->segs, plan->count, plan->floats, c);
    CUDA_LAUNCH_CHECK("sgd_kernel");
}

// ---- sum of squares, in optim.c's order ------------------------------------------
//
// optim.c: block b of NORM_BLOCKS covers [b*B, (b+1)*B) clipped to n, B =
// ceil(n / 1024) rounded up to 16; inside it, lane k (0..7) sums in double, in
// increasing order, the squares of the elements whose offset from the block start is
// k mod 8; the lanes are combined as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); the 1024
// partials are added in block order starting from 0.
//
// Here warp w computes block w. It reads 32 consecutive floats per chunk (chunks
// start at the block start, a multiple of 16, so lane t of the warp holds an element
// of chain t mod 8); lane k < 8 adds its own square and then those of lanes k+8,
// k+16, k+24 (shuffled down), which is chain k's increasing order. Elements past the
// block's end read as 0: adding +0.0 to a sum of squares (>= +0, or inf/NaN) changes
// nothing. Squares of floats are exact in double, so only the order matters, and it
// is optim.c's: the sum is bit-identical.

__global__ static void norm_partials_kernel(const float *x, size_t n, size_t block, double *partial)
{
    const unsigned full = 0xffffffffu;
    size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x & 31;
    if (w >= NORM_BLOCKS) return;  // whole warps only: blockDim.x is a multiple of 32
    size_t lo = w * block, hi = lo + block;
    if (lo > n) lo = n;
    if (hi > n) hi = n;
    double acc = 0.0;  // lanes 0..7: chains 0..7
    for (size_t base = lo; base < hi; base += 32 * NORM_UNROLL) {
        float val[NORM_UNROLL];
#pragma unroll
        for (int u = 0; u < NORM_UNROLL; u++) {  // all loads first: 8 chunks in flight
            size_t i = base + 32 * (size_t)u + (size_t)lane;
            val[u] = i < hi ? x[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < NORM_UNROLL; u++) {
            double s0 = __dmul_rn((double)val[u], (double)val[u]);  // exact
            double s1 = __shfl_down_sync(full, s0, 8);
            double s2 = __shfl_down_sync(full, s0, 16);
            double s3 = __shfl_down_sync(full, s0, 24);
            acc = __dadd_rn(acc, s0);
            acc = __dadd_rn(acc, s1);
            acc = __dadd_rn(acc, s2);
            acc = __dadd_rn(acc, s3);
        }
    }
    // ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), read by lane 0; other lanes compute unused values.
    double t1 = __dadd_rn(acc, __shfl_down_sync(full, acc, 1));  // lane 2k: l2k + l2k+1
    double t2 = __dadd_rn(t1, __shfl_down_sync(full, t1, 2));    // lanes 0, 4: the two halves
    double t3 = __dadd_rn(t2, __shfl_down_sync(full, t2, 4));    // lane 0: the whole block
    if (lane == 0) partial[w] = t3;
}

// The partials in block order, as optim.c's serial loop: one thread adds, the block
// only stages them in shared memory so the loads are not serialised behind the adds.
__global__ static void norm_total_kernel(const double *partial, double *sum)
{
    __shared__ double p[NORM_BLOCKS];
    for (int i = threadIdx.x; i < NORM_BLOCKS; i += blockDim.x) p[i] = partial[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int i = 0; i < NORM_BLOCKS; i++) s = __dadd_rn(s, p[i]);
        *sum = s;
    }
}

extern "C" void cuda_grad_norm_sq(const float *x, size_t n, double *sum_dev)
{
    double *partial = (double *)cuda_workspace(NORM_BLOCKS * sizeof(double));
    if (!partial) return;  // recorded by cuda_workspace
    size_t block = (n + NORM_BLOCKS - 1) / NORM_BLOCKS;
    block = (block + NORM_LINE - 1) / NORM_LINE * NORM_LINE;
    cudaStream_t st = (cudaStream_t)cuda_stream_current();
    const unsigned threads = 256, blocks = NORM_BLOCKS * 32 / threads;  // one warp per optim.c block
    norm_partials_kernel<<<blocks, threads, 0, st>>>(x, n, block, partial);
    CUDA_LAUNCH_CHECK("norm_partials_kernel");
    norm_total_kernel<<<1, 256, 0, st>>>(partial, sum_dev);
    CUDA_LAUNCH_CHECK("norm_total_kernel");
}

__global__ static void scale_kernel(float *x, size_t n, float s)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

extern "C" void cuda_scale(float *x, size_t n, float s)
{
    if (n == 0) return;
    scale_kernel<<<optim_blocks(n), OPTIM_THREADS, 0, (cudaStream_t)cuda_stream_current()>>>(x, n, s);
    CUDA_LAUNCH_CHECK("scale_kernel");
}
