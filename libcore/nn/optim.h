/* optim — optimizers over the flat buffers (param.h), gradient clipping and
 * learning-rate schedules.
 *
 * The one design decision: each update mirrors PyTorch 1.13's single-tensor
 * path (foreach=False) operation by operation in fp32, including where torch's
 * CPU kernels fuse a multiply-add (add(.., alpha=) and addcmul are FMAs in its
 * vectorised kernels), so Nebula and torch.optim agree to the last bit or
 * within a few ulp. Every operation is elementwise and IEEE correctly rounded
 * (fmaf, sqrtf, division; the build's -std=c11 keeps the compiler from
 * contracting anything else), so results do not depend on the thread count, on
 * the vector (AVX2, NEON) or portable inner loop, or on the machine.
 *
 * Step counting: `t` is the number of the update being made, starting at 1
 * (torch's state['step'] after its increment). A loop whose step counter starts
 * at 0 calls optim_adamw_step(.., lr_at(&sched, step), step + 1).
 *
 * Weight decay applies to the entries whose param_entry.decay is set (torch's
 * two param groups, {decay} with weight_decay and {no decay} with 0), over each
 * entry's (offset, count) slice; padding is never touched. Entries marked frozen
 * (param_freeze) are skipped whole: parameters and moments stay as they are, as for a
 * tensor PyTorch's optimizer never sees (requires_grad = False). Gradients are read,
 * never written (clip them first with optim_clip_grad_norm). Nothing allocates. */
#ifndef NEBULA_OPTIM_H
#define NEBULA_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "param.h"

typedef struct adamw_hparams {
    double beta1;         /* first-moment decay, [0, 1) (torch default 0.9) */
    double beta2;         /* second-moment decay, [0, 1) (torch default 0.999) */
    double eps;           /* added to sqrt(v)/sqrt(1 - beta2^t), > 0 (torch default 1e-8) */
    double weight_decay;  /* decoupled: p *= 1 - lr*wd on decay entries (torch default 1e-2) */
    bool portable;        /* force the portable loop (same bits as the AVX2 or NEON one; for tests) */
} adamw_hparams;

typedef struct sgd_hparams {
    double momentum;      /* 0 disables the buffer (pb->m); [0, 1) otherwise; dampening is 0 */
    bool nesterov;        /* Nesterov momentum (needs momentum > 0) */
    double weight_decay;  /* coupled L2: g += wd*p on decay entries, before momentum */
    bool portable;        /* force the portable loop (same bits as the AVX2 or NEON one; for tests) */
    const uint8_t *plain; /* per entry, NULL for none: 1 = momentum and weight decay were applied
                             before the exchange (DGC's momentum correction), so p -= lr*g */
} sgd_hparams;

/* torch.optim.AdamW (Loshchilov & Hutter, ICLR 2019), per element of each entry:
 *   p = p * (1 - lr*wd)                       (decay entries only)
 *   m = fma(g, 1-b1, m*b1)
 *   v = fma((1-b2)*g, g, v*b2)
 *   p = p + (-(lr/(1-b1^t)) * m) / (sqrt(v)/sqrt(1-b2^t) + eps)
 * with the scalars formed in double and rounded to float where torch does.
 * Needs pb->m and pb->v; t >= 1. */
void optim_adamw_step(const param_table *pt, param_buffers *pb, const adamw_hparams *hp, double lr, long t);

/* torch.optim.SGD, per element:
 *   d = fma(p, wd, g)                         (decay entries, when wd != 0)
 *   b = t == 1 ? d : b*mu + d                 (momentum > 0; b lives in pb->m)
 *   d = nesterov ? fma(b, mu, d) : b
 *   p = fma(d, -lr, p)
 * t == 1 starts the momentum buffer from the gradient (torch's "buf is None"). */
void optim_sgd_step(const param_table *pt, param_buffers *pb, const sgd_hparams *hp, double lr, long t);

/* One (offset, count) slice of a tensor whose optimizer state is kept elsewhere
 * (ZeRO shards, zero.h): params and grads at `offset` of the flat layout, the
 * moments at `packed` of the caller's packed buffers. */
typedef struct optim_range {
    int entry;       /* the tensor (table index): its decay and plain flags apply */
    size_t offset;   /* first float in the flat layout; the range lies inside the tensor */
    size_t count;    /* floats */
    size_t packed;   /* first float in the packed moment buffers */
} optim_range;

/* optim_adamw_step over n ranges only, with moments m and v packed as the ranges say
 * (pb->m and pb->v are not used): the same operations in the same order, so an
 * element's result is bit-identical to the whole-buffer step's. */
void optim_adamw_step_ranges(const param_table *pt, param_buffers *pb, const optim_range *r, int n, float *m,
                             float *v, const adamw_hparams *hp, double lr, long t);

/* optim_sgd_step over n ranges only, the momentum buffer packed in b (NULL when
 * momentum is 0); bit-identical per element to the whole-buffer step. */
void optim_sgd_step_ranges(const param_table *pt, param_buffers *pb, const optim_range *r, int n, float *b,
                           const sgd_hparams *hp, double lr, long t);

/* torch.nn.utils.clip_grad_norm_ (L2): *norm = ||grads[0, n)||_2, the squares
 * summed in double over 1024 fixed blocks whose partial sums are added in block
 * order, so the norm is the same for every thread count. When
 * max_norm / (norm + 1e-6) < 1 every gradient is multiplied by that factor
 * (rounded to float). Returns the factor applied (1 when not clipped).
 * Unlike torch, a non-finite norm leaves the gradients untouched (torch turns
 * them all into NaN); the caller sees *norm and skips the step. Pass the whole
 * buffer (pb->grads, pt->total): padding is zero. max_norm > 0. */
float optim_clip_grad_norm(float *grads, size_t n, double max_norm, double *norm);

typedef enum lr_schedule_kind {
    LR_SCHEDULE_CONSTANT = 0,  /* base_lr after warmup */
    LR_SCHEDULE_COSINE,        /* cosine from base_lr to min_lr at total_steps (nanoGPT get_lr) */
    LR_SCHEDULE_LINEAR,        /* straight line from base_lr to min_lr at total_steps */
    LR_SCHEDULE_STEP,          /* base_lr * gamma^floor((step - warmup) / step_size) */
} lr_schedule_kind;

typedef struct lr_schedule {
    lr_schedule_kind kind;  /* shape after warmup */
    double base_lr;         /* peak learning rate, reached at the end of warmup */
    long warmup_steps;      /* linear warmup length; 0 for none */
    long total_steps;       /* cosine/linear: step at which min_lr is reached and kept */
    double min_lr;          /* cosine/linear floor */
    long step_size;         /* step: steps between decays, > 0 */
    double gamma;           /* step: factor per decay */
} lr_schedule;

/* Learning rate at `step` (counted from 0, the step about to be taken).
 * Warmup (llm.c train_gpt2.c): step < warmup_steps gives
 *   base_lr * (step + 1) / warmup_steps,
 * so step 0 already trains at base_lr/warmup and step warmup-1 reaches base_lr.
 * After it, with r = (step - warmup) / (total - warmup):
 *   cosine  min + 0.5 * (1 + cos(pi r)) * (base - min), min_lr from total_steps on
 *   linear  min + (1 - r) * (base - min),                min_lr from total_steps on
 *   step    base * gamma^floor((step - warmup) / step_size)
 *   constant base
 * Dies on step < 0. */
double lr_at(const lr_schedule *s, long step);

/* Whether the schedule is usable; on false *why (if not NULL) names the field. */
bool lr_schedule_valid(const lr_schedule *s, const char **why);

/* "constant", "cosine", "linear", "step"; parse returns false on anything else. */
const char *lr_schedule_kind_name(lr_schedule_kind k);
bool lr_schedule_kind_parse(const char *s, lr_schedule_kind *out);

#endif
