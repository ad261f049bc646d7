/* xent — see xent.h. One OpenMP thread per row block; within a row, a vectorised
 * max, then one pass of exp summed in double (V ~ 50k terms: a float sum would
 * lose ~1e-5 relative in lse, a double sum loses nothing visible). The exp is
 * vmath.h's, and the row loops are built per vector level (isa_variant.h). */
#include "xent.h"

#include <math.h>
#include <stdlib.h>

#include "base/log.h"
#include "isa_variant.h"
#include "vmath.h"

/* Shapes and targets are checked serially, before any parallel region, so a bad
 * target dies with one clear message. */
static void xent_check(const int32_t *targets, int BT, int V, int Vp)
{
    CHECK(BT >= 0 && V >= 1 && Vp >= V, "xent: need BT >= 0 and 1 <= V <= Vp");
    for (int i = 0; i < BT; i++)
        if (targets[i] != XENT_IGNORE && (targets[i] < 0 || targets[i] >= V))
            die("xent: targets[i] outside [0, V)", "a target is neither a real token id nor -1 (ignore)",
                "targets must index the real vocabulary [0, V), not the padded columns [V, Vp); "
                "check the tokenizer's vocabulary size against the model's V");
}

/* log sum_j exp(x_j) over n floats, stable for any magnitude. */
static float xent_lse_row(const float *restrict x, int n)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
    if (mx == INFINITY) return mx; /* exp(inf - inf) would turn an infinite logit into NaN */
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) sum += (double)vm_expf(x[j] - mx);
    return mx + (float)log(sum);
}

void ISA_FN(xent_forward)(float *losses, float *lse, const float *logits, const int32_t *targets, int BT, int V, int Vp)
{
    xent_check(targets, BT, V, Vp);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < BT; i++) {
        const float *x = logits + (size_t)i * Vp;
        lse[i] = xent_lse_row(x, V);
        losses[i] = targets[i] == XENT_IGNORE ? 0.0f : lse[i] - x[targets[i]];
    }
}

void ISA_FN(xent_backward)(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                   const float *dlosses, int BT, int V, int Vp)
{
    xent_check(targets, BT, V, Vp);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < BT; i++) {
        if (targets[i] == XENT_IGNORE) continue;
        const float *restrict x = logits + (size_t)i * Vp;
        float *restrict dx = dlogits + (size_t)i * Vp;
        const float g = dlosses[i], L = lse[i];
        const int t = targets[i];
#pragma omp simd
        for (int j = 0; j < V; j++) { /* one rounding into dx per entry: exactly init + gradient */
            float p = vm_expf(x[j] - L);
            p -= j == t ? 1.0f : 0.0f;
            dx[j] += g * p;
        }
    }
}

#if ISA_ONCE
/* The vocabulary-parallel pieces: one variant (they run once per row and rank, next to
 * a matmul that dominates); the exp is vmath.h's as in xent_forward, so the sums agree
 * with the undivided kernel's to the double sum's rounding. */
void xent_vp_max(float *mx, const float *logits, int BT, int Vr, int Vl)
{
    CHECK(BT >= 0 && Vr >= 0 && Vr <= Vl, "xent_vp_max: need 0 <= Vr <= Vl");
#pragma omp parallel for schedule(static)
    for (int i = 0; i < BT; i++) {
        const float *x = logits + (size_t)i * Vl;
        float m = -INFINITY;
        for (int j = 0; j < Vr; j++) m = x[j] > m ? x[j] : m;
        mx[i] = m;
    }
}

void xent_vp_sums(double *part, const float *logits, const float *mx, const int32_t *targets, int BT, int lo, int Vr,
                  int Vl)
{
    CHECK(BT >= 0 && Vr >= 0 && Vr <= Vl, "xent_vp_sums: need 0 <= Vr <= Vl");
#pragma omp parallel for schedule(static)
    for (int i = 0; i < BT; i++) {
        const float *restrict x = logits + (size_t)i * Vl;
        const float m = mx[i];
        double sum = 0.0;
        if (m != INFINITY)
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < Vr; j++) sum += (double)vm_expf(x[j] - m);
        int t = targets[i] == XENT_IGNORE ? -1 : targets[i] - lo;
        part[2 * (size_t)i] = sum;
        part[2 * (size_t)i + 1] = t >= 0 && t < Vr ? (double)x[t] : 0.0;
    }
}

void xent_vp_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                      const float *dlosses, int BT, int lo, int Vr, int Vl)
{
    CHECK(BT >= 0 && Vr >= 0 && Vr <= Vl, "xent_vp_backward: need 0 <= Vr <= Vl");
#pragma omp parallel for schedule(static)
    for (int i = 0; i < BT; i++) {
        if (targets[i] == XENT_IGNORE) continue;
        const float *restrict x = logits + (size_t)i * Vl;
        float *restrict dx = dlogits + (size_t)i * Vl;
        const float g = dlosses[i], L = lse[i];
        const int t = targets[i] - lo;
#pragma omp simd
        for (int j = 0; j < Vr; j++) {
            float p = vm_expf(x[j] - L);
            p -= j == t ? 1.0f : 0.0f;
            dx[j] += g * p;
        }
    }
}

ISA_VARIANTS(void, xent_forward, (float *losses, float *lse, const float *logits, const int32_t *targets, int BT,
                                   int V, int Vp));
ISA_VARIANTS(void, xent_backward, (float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                                    const float *dlosses, int BT, int V, int Vp));

void xent_forward(float *losses, float *lse, const float *logits, const int32_t *targets, int BT, int V, int Vp)
{
    ISA_DISPATCH(xent_forward, (losses, lse, logits, targets, BT, V, Vp));
}

void xent_backward(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                   const float *dlosses, int BT, int V, int Vp)
{
    ISA_DISPATCH(xent_backward, (dlogits, logits, lse, targets, dlosses, BT, V, Vp));
}

/* ---- The specification: double, plain loops. ---- */

/* p (V) = softmax of one row; returns its lse. */
static double xent_ref_softmax(double *p, const double *x, int V)
{
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < V; j++) if (x[j] > mx) mx = x[j];
    for (int j = 0; j < V; j++) sum += exp(x[j] - mx);
    for (int j = 0; j < V; j++) p[j] = exp(x[j] - mx) / sum;
    return mx + log(sum);
}

void xent_forward_ref(double *losses, double *lse, const double *logits, const int32_t *targets, int BT, int V,
                      int Vp)
{
    xent_check(targets, BT, V, Vp);
    double *p = malloc((size_t)V * sizeof(double));
    CHECK(p != NULL, "xent_forward_ref: out of memory for one softmax row");
    for (int i = 0; i < BT; i++) {
        const double *x = logits + (size_t)i * Vp;
        lse[i] = xent_ref_softmax(p, x, V);
        losses[i] = targets[i] == XENT_IGNORE ? 0.0 : -log(p[targets[i]]);
    }
    free(p);
}

void xent_backward_ref(double *dlogits, const double *logits, const double *lse, const int32_t *targets,
                       const double *dlosses, int BT, int V, int Vp)
{
    (void)lse; /* the specification recomputes the softmax */
    xent_check(targets, BT, V, Vp);
    double *p = malloc((size_t)V * sizeof(double));
    CHECK(p != NULL, "xent_backward_ref: out of memory for one softmax row");
    for (int i = 0; i < BT; i++) {
        if (targets[i] == XENT_IGNORE) continue;
        xent_ref_softmax(p, logits + (size_t)i * Vp, V);
        for (int j = 0; j < V; j++)
            dlogits[(size_t)i * Vp + j] += dlosses[i] * (p[j] - (j == targets[i] ? 1.0 : 0.0));
    }
    free(p);
}
#endif
