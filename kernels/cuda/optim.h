/* optim — CUDA variants of libcore/optim.h: AdamW and SGD steps over the flat
 * buffers, the sum of squares of the gradient-norm clip and the scaling it applies.
 *
 * The one design decision: the device step is libcore's step, bit for bit. Each
 * element goes through the same fp32 operations in the same order, with the fused
 * multiply-adds exactly where optim.c has fmaf (torch's FMAs) and every other
 * product, sum, quotient and square root written as an explicitly rounded intrinsic
 * (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn), so nvcc cannot contract or
 * approximate anything; the scalars are formed on the host in double and rounded to
 * float exactly as optim.c forms them. The sum of squares uses optim.c's partition
 * and order (1024 fixed blocks, 8 interleaved lanes per block combined in a fixed
 * tree, the partial sums added in block order, all in double over exact squares), so
 * the clip norm, its factor and the clipped gradients are bit-identical too.
 *
 * Which elements are updated, and whether they decay, is a plan: a list of disjoint
 * (offset, count, packed, decay, plain) ranges uploaded once at init, covering
 * both of optim.c's forms — the whole table (one range per tensor, packed = offset,
 * padding never touched) and ZeRO's optim_range lists (moments packed elsewhere).
 *
 * Device pointers; kernels run on cuda_stream_current(), never synchronise, never
 * allocate (the norm's 1024 partial sums live in cuda_workspace). Bad arguments and
 * launch failures are recorded for cuda_error_take, and the call does nothing. */
#ifndef NEBULA_KERNELS_CUDA_OPTIM_H
#define NEBULA_KERNELS_CUDA_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_optim_range {
    size_t offset;  /* first float of params and grads in the flat layout */
    size_t count;   /* floats */
    size_t packed;  /* first float in the moment buffers (m, v, SGD's momentum); = offset for whole buffers */
    bool decay;     /* weight decay applies (the tensor's param_entry.decay) */
    bool plain;     /* SGD only: p -= lr*g, no decay, no momentum (sgd_hparams.plain of the tensor) */
} cuda_optim_range;

typedef struct cuda_optim_plan {
    void *segs;     /* device array of the non-empty ranges with their running starts */
    int count;      /* non-empty ranges */
    size_t floats;  /* elements the steps update: the sum of the counts */
} cuda_optim_plan;

/* Uploads n ranges (synchronous copy, once at init); 0 or a CUDA error code. */
int cuda_optim_plan_init(cuda_optim_plan *plan, const cuda_optim_range *r, int n);
void cuda_optim_plan_free(cuda_optim_plan *plan);

typedef struct cuda_adamw_hparams {
    double beta1, beta2;  /* moment decays, [0, 1) */
    double eps;           /* > 0 */
    double weight_decay;  /* decoupled, on decay ranges; >= 0 */
} cuda_adamw_hparams;

typedef struct cuda_sgd_hparams {
    double momentum;      /* [0, 1); 0: no buffer */
    bool nesterov;        /* needs momentum > 0 */
    double weight_decay;  /* coupled L2 on decay ranges; >= 0 */
} cuda_sgd_hparams;

/* optim_adamw_step / optim_adamw_step_ranges on the device. params, grads: the flat
 * layout (total floats); m, v: the moments, indexed by each range's packed offset.
 * t >= 1 is the number of this update (optim.h). */
void cuda_adamw_step(float *params, const float *grads, float *m, float *v, const cuda_optim_plan *plan,
                     const cuda_adamw_hparams *hp, double lr, long t);

/* optim_sgd_step / optim_sgd_step_ranges on the device; b: the momentum buffer
 * (packed offsets; NULL when momentum is 0). */
void cuda_sgd_step(float *params, const float *grads, float *b, const cuda_optim_plan *plan,
                   const cuda_sgd_hparams *hp, double lr, long t);

/* *sum_dev = sum of x[i]^2 for i < n in double, in optim_clip_grad_norm's exact
 * order (its norm is sqrt of this). sum_dev: one double on the device; the caller
 * copies it (cuda_memcpy_d2h) when it needs it. x (n). */
void cuda_grad_norm_sq(const float *x, size_t n, double *sum_dev);

/* x[i] *= s for i < n (one correctly rounded fp32 multiply). The clip, as optim.c:
 *   norm = sqrt(sum); coef = max_norm / (norm + 1e-6);
 *   if (isfinite(norm) && coef < 1) cuda_scale(grads, n, (float)coef); */
void cuda_scale(float *x, size_t n, float s);

#ifdef __cplusplus
}
#endif

#endif
