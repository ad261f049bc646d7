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
 * Each step runs one OpenMP parallel region; every thread updates its static
 * share (whole 64-byte lines) of each entry's slice, without barriers between
 * entries. Inner loops: AVX2+FMA intrinsics where the CPU has them, else the
 * portable loop with the same operations (fmaf is exact everywhere), so the
 * bits do not depend on which one runs. */
#include "optim.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define OPTIM_HAVE_AVX2 1
#endif

#define LINE_FLOATS   16    /* floats in one 64-byte cache line */
#define NORM_BLOCKS   1024  /* fixed blocks of the clip-norm sum (thread-count independent) */

/* This thread's share of [0, n) in whole lines, balanced over the team. */
static void thread_share(size_t n, size_t *lo, size_t *hi)
{
    size_t nth = (size_t)omp_get_num_threads(), tid = (size_t)omp_get_thread_num();
    size_t lines = (n + LINE_FLOATS - 1) / LINE_FLOATS, q = lines / nth, r = lines % nth;
    size_t a = tid * q + (tid < r ? tid : r), b = a + q + (tid < r);
    *lo = a * LINE_FLOATS < n ? a * LINE_FLOATS : n;
    *hi = b * LINE_FLOATS < n ? b * LINE_FLOATS : n;
}

static bool use_avx2(bool portable)
{
#ifdef OPTIM_HAVE_AVX2
    return !portable && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    (void)portable;
    return false;
#endif
}

static void check_buffers(const param_table *pt, const param_buffers *pb)
{
    CHECK(pb->params && pb->grads && pb->total == pt->total,
          "the buffers must come from param_buffers_init with this table");
}

/* ---- AdamW ----------------------------------------------------------------- */

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

static void adamw_portable(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                           size_t n, const adamw_coef *c)
{
    for (size_t i = 0; i < n; i++) {
        float pi = p[i] * c->decay;
        float mi = fmaf(g[i], c->a1, m[i] * c->b1);
        float vi = fmaf(c->a2 * g[i], g[i], v[i] * c->b2);
        float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
        p[i] = pi + (c->neg_step * mi) / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

#ifdef OPTIM_HAVE_AVX2
__attribute__((target("avx2,fma")))
static void adamw_avx2(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n,
                       const adamw_coef *c)
{
    const __m256 decay = _mm256_set1_ps(c->decay), b1 = _mm256_set1_ps(c->b1), a1 = _mm256_set1_ps(c->a1);
    const __m256 b2 = _mm256_set1_ps(c->b2), a2 = _mm256_set1_ps(c->a2), bc2 = _mm256_set1_ps(c->bc2_sqrt);
    const __m256 eps = _mm256_set1_ps(c->eps), neg_step = _mm256_set1_ps(c->neg_step);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gi = _mm256_loadu_ps(g + i);
        __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), decay);
        __m256 mi = _mm256_fmadd_ps(gi, a1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
        __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(a2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        pi = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(neg_step, mi), denom));
        _mm256_storeu_ps(p + i, pi);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
    }
    adamw_portable(p + i, g + i, m + i, v + i, n - i, c);
}
#endif

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

/* n elements: p, g from the flat layout, m, v wherever the caller keeps them. */
static void adamw_run(float *p, const float *g, float *m, float *v, size_t n, const adamw_coef *c, bool avx2)
{
#ifdef OPTIM_HAVE_AVX2
    if (avx2) {
        adamw_avx2(p, g, m, v, n, c);
        return;
    }
#endif
    (void)avx2;
    adamw_portable(p, g, m, v, n, c);
}

void optim_adamw_step(const param_table *pt, param_buffers *pb, const adamw_hparams *hp, double lr, long t)
{
    check_buffers(pt, pb);
    CHECK(pb->m && pb->v, "AdamW needs moments: param_buffers_init(pb, pt, true)");
    float decay;
    const adamw_coef base = adamw_coefs(hp, lr, t, &decay);
    const bool avx2 = use_avx2(hp->portable);

#pragma omp parallel
    for (int e = 0; e < pt->count; e++) {
        const param_entry *pe = &pt->entries[e];
        size_t lo, hi;
        thread_share(pe->count, &lo, &hi);
        if (hi == lo) continue;
        adamw_coef c = base;
        if (pe->decay) c.decay = decay;
        size_t o = pe->offset + lo;
        adamw_run(pb->params + o, pb->grads + o, pb->m + o, pb->v + o, hi - lo, &c, avx2);
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
    const bool avx2 = use_avx2(hp->portable);

#pragma omp parallel
    for (int i = 0; i < n; i++) {
        size_t lo, hi;
        thread_share(r[i].count, &lo, &hi);
        if (hi == lo) continue;
        adamw_coef c = base;
        if (pt->entries[r[i].entry].decay) c.decay = decay;
        size_t o = r[i].offset + lo, q = r[i].packed + lo;
        adamw_run(pb->params + o, pb->grads + o, m + q, v + q, hi - lo, &c, avx2);
    }
}

/* ---- SGD ------------------------------------------------------------------- */

typedef struct sgd_coef {
    float wd;       /* weight decay of this entry (0: not applied) */
    float mu;       /* momentum */
    float neg_lr;   /* -lr */
    bool momentum;  /* a momentum buffer is kept */
    bool first;     /* t == 1: the buffer starts as the gradient */
    bool nesterov;  /* Nesterov update */
} sgd_coef;

static void sgd_portable(float *restrict p, const float *restrict g, float *restrict b, size_t n,
                         const sgd_coef *c)
{
    for (size_t i = 0; i < n; i++) {
        float d = c->wd != 0.0f ? fmaf(p[i], c->wd, g[i]) : g[i];
        if (c->momentum) {
            float bi = c->first ? d : b[i] * c->mu + d;
            b[i] = bi;
            d = c->nesterov ? fmaf(bi, c->mu, d) : bi;
        }
        p[i] = fmaf(d, c->neg_lr, p[i]);
    }
}

#ifdef OPTIM_HAVE_AVX2
__attribute__((target("avx2,fma")))
static void sgd_avx2(float *restrict p, const float *restrict g, float *restrict b, size_t n, const sgd_coef *c)
{
    const __m256 wd = _mm256_set1_ps(c->wd), mu = _mm256_set1_ps(c->mu), neg_lr = _mm256_set1_ps(c->neg_lr);
    const bool has_wd = c->wd != 0.0f;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i);
        __m256 d = _mm256_loadu_ps(g + i);
        if (has_wd) d = _mm256_fmadd_ps(pi, wd, d);
        if (c->momentum) {
            __m256 bi = c->first ? d : _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(b + i), mu), d);
            _mm256_storeu_ps(b + i, bi);
            d = c->nesterov ? _mm256_fmadd_ps(bi, mu, d) : bi;
        }
        _mm256_storeu_ps(p + i, _mm256_fmadd_ps(d, neg_lr, pi));
    }
    sgd_portable(p + i, g + i, b ? b + i : NULL, n - i, c);
}
#endif

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
                    sgd_coef c, bool avx2)
{
    if (decay) c.wd = (float)hp->weight_decay;
    if (hp->plain && hp->plain[e]) c.wd = 0.0f, c.momentum = false, c.nesterov = false;
    if (!c.momentum) b = NULL;
#ifdef OPTIM_HAVE_AVX2
    if (avx2) {
        sgd_avx2(p, g, b, n, &c);
        return;
    }
#endif
    (void)avx2;
    sgd_portable(p, g, b, n, &c);
}

void optim_sgd_step(const param_table *pt, param_buffers *pb, const sgd_hparams *hp, double lr, long t)
{
    check_buffers(pt, pb);
    const sgd_coef base = sgd_coefs(hp, lr, t);
    CHECK(hp->momentum == 0 || pb->m, "SGD momentum keeps its buffer in pb->m: param_buffers_init(pb, pt, true)");
    const bool avx2 = use_avx2(hp->portable);

#pragma omp parallel
    for (int e = 0; e < pt->count; e++) {
        const param_entry *pe = &pt->entries[e];
        size_t lo, hi;
        thread_share(pe->count, &lo, &hi);
        if (hi == lo) continue;
        size_t o = pe->offset + lo;
        sgd_run(pb->params + o, pb->grads + o, pb->m ? pb->m + o : NULL, hi - lo, hp, e, pe->decay, base, avx2);
    }
}

void optim_sgd_step_ranges(const param_table *pt, param_buffers *pb, const optim_range *r, int n, float *b,
                           const sgd_hparams *hp, double lr, long t)
{
    check_buffers(pt, pb);
    const sgd_coef base = sgd_coefs(hp, lr, t);
    CHECK(n == 0 || hp->momentum == 0 || b, "SGD momentum over ranges needs the packed buffer b");
    check_ranges(pt, r, n);
    const bool avx2 = use_avx2(hp->portable);

#pragma omp parallel
    for (int i = 0; i < n; i++) {
        size_t lo, hi;
        thread_share(r[i].count, &lo, &hi);
        if (hi == lo) continue;
        int e = r[i].entry;
        size_t o = r[i].offset + lo;
        sgd_run(pb->params + o, pb->grads + o, b ? b + r[i].packed + lo : NULL, hi - lo, hp, e,
                pt->entries[e].decay, base, avx2);
    }
}

/* ---- gradient clipping ------------------------------------------------------- */

/* Sum of squares in double; 8 lanes combined in a fixed tree (squares of floats are exact). */
static double sum_squares(const float *x, size_t n)
{
    double lane[8] = { 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) lane[k] += (double)x[i + k] * (double)x[i + k];
    for (int k = 0; i < n; i++, k++) lane[k] += (double)x[i] * (double)x[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

float optim_clip_grad_norm(float *grads, size_t n, double max_norm, double *norm)
{
    CHECK(max_norm > 0, "max_norm must be > 0 (validate the config)");
    double partial[NORM_BLOCKS];
    size_t block = (n + NORM_BLOCKS - 1) / NORM_BLOCKS;
    block = (block + LINE_FLOATS - 1) / LINE_FLOATS * LINE_FLOATS;

#pragma omp parallel for schedule(static)
    for (int b = 0; b < NORM_BLOCKS; b++) {
        size_t lo = (size_t)b * block, hi = lo + block;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
        partial[b] = sum_squares(grads + lo, hi - lo);
    }
    double sum = 0.0;
    for (int b = 0; b < NORM_BLOCKS; b++) sum += partial[b];
    double total = sqrt(sum);
    if (norm) *norm = total;

    double coef = max_norm / (total + 1e-6);
    if (!isfinite(total) || !(coef < 1.0)) return 1.0f;
    const float s = (float)coef;
#pragma omp parallel
    {
        size_t lo, hi;
        thread_share(n, &lo, &hi);
        for (size_t i = lo; i < hi; i++) grads[i] *= s;
    }
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
