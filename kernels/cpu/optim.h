/* optim — the element loops of the optimizers on the CPU: the twin of
 * kernels/cuda/optim.h. The AdamW and SGD updates of one slice, the clip norm's sum of
 * squares and the scaling it applies. libcore/nn/optim.c owns the orchestration: it
 * checks the hyper-parameters, forms each update's coefficients (adamw_coef, sgd_coef)
 * and decides which slice of which tensor each thread updates.
 *
 * The one design decision: these loops are the specification the CUDA kernels match
 * bit for bit. Each element goes through fp32 operations in torch's order, with fmaf
 * exactly where torch's ATen kernels fuse (see libcore/nn/optim.c); the AVX2+FMA loop
 * and the portable loop do the same operations, so the bits do not depend on which
 * one runs. The sum of squares uses a fixed partition (OPTIM_NORM_BLOCKS blocks of
 * whole lines, 8 interleaved lanes per block combined in a fixed tree, the partial
 * sums added in block order, all in double over exact squares): the same bits for
 * any thread count and on the GPU. */
#ifndef NEBULA_KERNELS_CPU_OPTIM_H
#define NEBULA_KERNELS_CPU_OPTIM_H

#include <stdbool.h>
#include <stddef.h>

#define OPTIM_LINE_FLOATS 16    /* floats in one 64-byte cache line */
#define OPTIM_NORM_BLOCKS 1024  /* fixed blocks of the clip-norm sum (thread-count independent) */

/* The calling thread's share of [0, n) inside an OpenMP team, in whole lines,
 * balanced over the team ([0, n) outside a parallel region). */
void optim_thread_share(size_t n, size_t *lo, size_t *hi);

/* AdamW update t's coefficients, rounded to float as torch rounds its Python scalars. */
typedef struct adamw_coef {
    float decay;     /* 1 - lr*wd for decay entries, exactly 1 otherwise */
    float b1;        /* beta1 */
    float a1;        /* 1 - beta1 */
    float b2;        /* beta2 */
    float a2;        /* 1 - beta2 */
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
    float eps;       /* eps */
    float neg_step;  /* -(lr / (1 - beta1^t)) */
} adamw_coef;

/* One AdamW update of n elements (cuda_adamw_step's per-element body): p, g (n) from
 * the flat layout, m, v (n) wherever the caller keeps the moments. portable: the
 * plain loop even where AVX2+FMA is there (the same bits; for tests). */
void adamw_update(float *p, const float *g, float *m, float *v, size_t n, const adamw_coef *c, bool portable);

/* SGD update t's coefficients for one tensor. */
typedef struct sgd_coef {
    float wd;       /* weight decay of this entry (0: not applied) */
    float mu;       /* momentum */
    float neg_lr;   /* -lr */
    bool momentum;  /* a momentum buffer is kept */
    bool first;     /* t == 1: the buffer starts as the gradient */
    bool nesterov;  /* Nesterov update */
} sgd_coef;

/* One SGD update of n elements (cuda_sgd_step's per-element body); b (n): the
 * momentum buffer, NULL when c->momentum is false. */
void sgd_update(float *p, const float *g, float *b, size_t n, const sgd_coef *c, bool portable);

/* cuda_grad_norm_sq on the CPU: the sum of x[i]^2 for i < n in double, in the fixed
 * order above (the clip norm is its square root). Runs its own OpenMP loop. x (n). */
double grad_norm_sq(const float *x, size_t n);

/* cuda_scale on the CPU: x[i] *= s for i < n (one correctly rounded fp32 multiply).
 * Runs its own OpenMP region. x (n). */
void grad_scale(float *x, size_t n, float s);

#endif
