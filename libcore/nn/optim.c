/* optim — AdamW, SGD, gradient clipping and learning-rate schedules (see optim.h).
 *
 * Reference for every formula: torch 1.13 torch/optim/adamw.py
 * _single_tensor_adamw, torch/optim/sgd.py _single_tensor_sgd and
 * torch/nn/utils/clip_grad.py, together with the ATen CPU kernels they call:
 * add(x, alpha=a) is vec::fmadd(x, a, self) and addcmul is
 * self + value*t1*t2 contracted to fma(value*t1, t2, self) (both verified bit
 * for bit against torch on an AVX2 host); addcdiv is self + value*t1/t2; a
 * Python scalar operand is rounded to float before use.
 *
 * Here: the hyper-parameters, each update's coefficients and which slice each
 * thread updates. Each step runs one OpenMP parallel region; every thread updates
 * its static share (whole 64-byte lines) of each entry's slice, without barriers
 * between entries. The element loops (AVX2+FMA or portable, the same bits) and the
 * clip norm's fixed-order sum are kernels: kernels/cpu/optim.c, with
 * kernels/cuda/optim.cu their device twin. */
#include "optim.h"

#include <math.h>
#include <string.h>

#include "cpu/optim.h"

static void check_buffers(const param_table *pt, const param_buffers *pb)
{
    CHECK(pb->params && pb->grads && pb->total == pt->total,
          "the buffers must come from param_buffers_init with this table");
}

/* ---- AdamW ----------------------------------------------------------------- */

/* The coefficients of update t, exactly as torch forms them (Python doubles, rounded
 * to float in the kernel); *decay is the factor of decay entries. Shared by the
 * whole-buffer and the range steps, so both compute the same bits. */
static adamw_coef adamw_coefs(const adamw_hparams *hp, double lr, long t, float *decay)
{
    CHECK(t >= 1, "t counts updates from 1 (torch's state['step'])");
    CHECK(hp->beta1 >= 0 && hp->beta1 < 1 && hp->beta2 >= 0 && hp->beta2 < 1 && hp->eps > 0 && lr >= 0 &&
              hp->weight_decay >= 0,
          "AdamW needs 0 <= beta1, beta2 < 1, eps > 0, lr >= 0 and weight_decay >= 0 (validate the config)");
    double bc1 = 1.0 - pow(hp->beta1, (double)t), bc2 = 1.0 - pow(hp->beta2, (double)t);
    *decay = (float)(1.0 - lr * hp->weight_decay);
    return (adamw_coef){
        .decay = 1.0f,
        .b1 = (float)hp->beta1,
        .a1 = (float)(1.0 - hp->beta1),
        .b2 = (float)hp->beta2,
        .a2 = (float)(1.0 - hp->beta2),
        .bc2_sqrt = (float)sqrt(bc2),
        .eps = (float)hp->eps,
        .neg_step = (float)(-(lr / bc1)),
    };
}

void optim_adamw_step(const param_table *pt, param_buffers *pb, const adamw_hparams *hp, double lr, long t)
{
    check_buffers(pt, pb);
    CHECK(pb->m && pb->v, "AdamW needs moments: param_buffers_init(pb, pt, true)");
    float decay;
    const adamw_coef base = adamw_coefs(hp, lr, t, &decay);

#pragma omp parallel
    for (int e = 0; e < pt->count; e++) {
        const param_entry *pe = &pt->entries[e];
        size_t lo, hi;
        optim_thread_share(pe->count, &lo, &hi);
        if (hi == lo || pe->frozen) continue;
        adamw_coef c = base;
        if (pe->decay) c.decay = decay;
        size_t o = pe->offset + lo;
        adamw_update(pb->params + o, pb->grads + o, pb->m + o, pb->v + o, hi - lo, &c, hp->portable);
    }
}

/* A range must lie inside its tensor: its decay flag (and SGD's plain flag) is the tensor's. */
static void check_ranges(const param_table *pt, const optim_range *r, int n)
{
    for (int i = 0; i < n; i++) {
        CHECK(r[i].entry >= 0 && r[i].entry < pt->count, "an optim_range names a tensor outside the table");
        const param_entry *pe = &pt->entries[r[i].entry];
        CHECK(r[i].offset >= pe->offset && r[i].offset + r[i].count <= pe->offset + pe->count,
              "an optim_range crosses the boundary of its tensor");
    }
}

void optim_adamw_step_ranges(const param_table *pt, param_buffers *pb, const optim_range *r, int n, float *m,
                             float *v, const adamw_hparams *hp, double lr, long t)
{
    check_buffers(pt, pb);
    CHECK(n == 0 || (m && v), "AdamW over ranges needs the packed moments m and v");
    check_ranges(pt, r, n);
    float decay;
    const adamw_coef base = adamw_coefs(hp, lr, t, &decay);

#pragma omp parallel
    for (int i = 0; i < n; i++) {
        size_t lo, hi;
        optim_thread_share(r[i].count, &lo, &hi);
        if (hi == lo || pt->entries[r[i].entry].frozen) continue;
        adamw_coef c = base;
        if (pt->entries[r[i].entry].decay) c.decay = decay;
        size_t o = r[i].offset + lo, q = r[i].packed + lo;
        adamw_update(pb->params + o, pb->grads + o, m + q, v + q, hi - lo, &c, hp->portable);
    }
}

/* ---- SGD ------------------------------------------------------------------- */

static sgd_coef sgd_coefs(const sgd_hparams *hp, double lr, long t)
{
    CHECK(t >= 1, "t counts updates from 1 (the first step starts the momentum buffer)");
    CHECK(hp->momentum >= 0 && hp->momentum < 1 && lr >= 0 && hp->weight_decay >= 0,
          "SGD needs 0 <= momentum < 1, lr >= 0 and weight_decay >= 0 (validate the config)");
    CHECK(!hp->nesterov || hp->momentum > 0, "Nesterov momentum needs momentum > 0 (torch refuses it too)");
    return (sgd_coef){
        .wd = 0.0f,
        .mu = (float)hp->momentum,
        .neg_lr = (float)-lr,
        .momentum = hp->momentum != 0,
        .first = t == 1,
        .nesterov = hp->nesterov,
    };
}

/* The coefficients of tensor e; b: its momentum buffer at the same element, or NULL. */
static void sgd_run(float *p, const float *g, float *b, size_t n, const sgd_hparams *hp, int e, bool decay,
                    sgd_coef c)
{
    if (decay) c.wd = (float)hp->weight_decay;
    if (hp->plain && hp->plain[e]) c.wd = 0.0f, c.momentum = false, c.nesterov = false;
    if (!c.momentum) b = NULL;
    sgd_update(p, g, b, n, &c, hp->portable);
}

void optim_sgd_step(const param_table *pt, param_buffers *pb, const sgd_hparams *hp, double lr, long t)
{
    check_buffers(pt, pb);
    const sgd_coef base = sgd_coefs(hp, lr, t);
    CHECK(hp->momentum == 0 || pb->m, "SGD momentum keeps its buffer in pb->m: param_buffers_init(pb, pt, true)");

#pragma omp parallel
    for (int e = 0; e < pt->count; e++) {
        const param_entry *pe = &pt->entries[e];
        size_t lo, hi;
        optim_thread_share(pe->count, &lo, &hi);
        if (hi == lo || pe->frozen) continue;
        size_t o = pe->offset + lo;
        sgd_run(pb->params + o, pb->grads + o, pb->m ? pb->m + o : NULL, hi - lo, hp, e, pe->decay, base);
    }
}

void optim_sgd_step_ranges(const param_table *pt, param_buffers *pb, const optim_range *r, int n, float *b,
                           const sgd_hparams *hp, double lr, long t)
{
    check_buffers(pt, pb);
    const sgd_coef base = sgd_coefs(hp, lr, t);
    CHECK(n == 0 || hp->momentum == 0 || b, "SGD momentum over ranges needs the packed buffer b");
    check_ranges(pt, r, n);

#pragma omp parallel
    for (int i = 0; i < n; i++) {
        size_t lo, hi;
        optim_thread_share(r[i].count, &lo, &hi);
        if (hi == lo || pt->entries[r[i].entry].frozen) continue;
        int e = r[i].entry;
        size_t o = r[i].offset + lo;
        sgd_run(pb->params + o, pb->grads + o, b ? b + r[i].packed + lo : NULL, hi - lo, hp, e,
                pt->entries[e].decay, base);
    }
}

/* ---- gradient clipping ------------------------------------------------------- */

float optim_clip_grad_norm(float *grads, size_t n, double max_norm, double *norm)
{
    CHECK(max_norm > 0, "max_norm must be > 0 (validate the config)");
    double total = sqrt(grad_norm_sq(grads, n));
    if (norm) *norm = total;

    double coef = max_norm / (total + 1e-6);
    if (!isfinite(total) || !(coef < 1.0)) return 1.0f;
    const float s = (float)coef;
    grad_scale(grads, n, s);
    return s;
}

/* ---- learning-rate schedules ------------------------------------------------- */

double lr_at(const lr_schedule *s, long step)
{
    CHECK(step >= 0, "steps are counted from 0");
    if (step < s->warmup_steps) return s->base_lr * (double)(step + 1) / (double)s->warmup_steps;
    long since = step - s->warmup_steps;
    switch (s->kind) {
    case LR_SCHEDULE_CONSTANT:
        return s->base_lr;
    case LR_SCHEDULE_COSINE:
    case LR_SCHEDULE_LINEAR: {
        if (step >= s->total_steps) return s->min_lr;
        double r = (double)since / (double)(s->total_steps - s->warmup_steps);
        double coeff = s->kind == LR_SCHEDULE_COSINE ? 0.5 * (1.0 + cos(M_PI * r)) : 1.0 - r;
        return s->min_lr + coeff * (s->base_lr - s->min_lr);
    }
    case LR_SCHEDULE_STEP:
        CHECK(s->step_size > 0, "a step schedule needs step_size > 0 (validate the config)");
        return s->base_lr * pow(s->gamma, (double)(since / s->step_size));
    }
    die("lr_at", "unknown lr_schedule_kind", "use one of LR_SCHEDULE_CONSTANT, _COSINE, _LINEAR, _STEP");
}

bool lr_schedule_valid(const lr_schedule *s, const char **why)
{
    const char *bad = NULL;
    if ((unsigned)s->kind > LR_SCHEDULE_STEP) bad = "kind must be constant, cosine, linear or step";
    else if (!(s->base_lr >= 0) || !isfinite(s->base_lr)) bad = "base_lr must be a finite number >= 0";
    else if (s->warmup_steps < 0) bad = "warmup_steps must be >= 0";
    else if ((s->kind == LR_SCHEDULE_COSINE || s->kind == LR_SCHEDULE_LINEAR) &&
             (!(s->min_lr >= 0) || s->min_lr > s->base_lr))
        bad = "min_lr must be in [0, base_lr]";
    else if ((s->kind == LR_SCHEDULE_COSINE || s->kind == LR_SCHEDULE_LINEAR) && s->total_steps <= s->warmup_steps)
        bad = "total_steps must be greater than warmup_steps";
    else if (s->kind == LR_SCHEDULE_STEP && s->step_size <= 0) bad = "step_size must be > 0";
    else if (s->kind == LR_SCHEDULE_STEP && !(s->gamma > 0 && s->gamma <= 1)) bad = "gamma must be in (0, 1]";
    if (why) *why = bad;
    return bad == NULL;
}

static const char *const lr_schedule_kind_names[] = { "constant", "cosine", "linear", "step" };

const char *lr_schedule_kind_name(lr_schedule_kind k)
{
    return (unsigned)k <= LR_SCHEDULE_STEP ? lr_schedule_kind_names[k] : "unknown";
}

bool lr_schedule_kind_parse(const char *s, lr_schedule_kind *out)
{
    for (int k = 0; k <= LR_SCHEDULE_STEP; k++)
        if (strcmp(s, lr_schedule_kind_names[k]) == 0) {
            *out = (lr_schedule_kind)k;
            return true;
        }
    return false;
}
