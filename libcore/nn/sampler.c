/* sampler — see sampler.h. Top-k finds the k-th largest logit with a min-heap of k
 * values (O(V log k): GPT-2's 50257 logits against k = 50), so only the candidates are
 * sorted; without top-k every logit is a candidate and all of them are sorted
 * (O(V log V), small beside a GPT-2 step's matmuls over the same V rows of wte). */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

typedef struct sampler_cand {
    float logit;
    int32_t id;
} sampler_cand;

status sampler_init(sampler *s, const sampler_options *opt, int V)
{
    memset(s, 0, sizeof *s);
    if (!(opt->temperature >= 0) || !isfinite(opt->temperature)) {
        log_error0("--temperature must be a number >= 0 (0: greedy), got %g", opt->temperature);
        return STATUS_INPUT;
    }
    if (opt->top_k < 0) {
        log_error0("--top-k must be >= 0 (0: no top-k filter), got %d", opt->top_k);
        return STATUS_INPUT;
    }
    if (!(opt->top_p > 0 && opt->top_p <= 1)) {
        log_error0("--top-p must be in (0, 1] (1: no nucleus filter), got %g", opt->top_p);
        return STATUS_INPUT;
    }
    CHECK(V >= 1, "sampler_init: V >= 1");
    s->opt = *opt;
    s->V = V;
    s->order = malloc((size_t)V * sizeof *s->order);
    s->prob = malloc((size_t)V * sizeof *s->prob);
    s->cand = malloc((size_t)V * sizeof *s->cand);
    if (!s->order || !s->prob || !s->cand) {
        sampler_free(s);
        return STATUS_NOMEM;
    }
    return STATUS_OK;
}

void sampler_free(sampler *s)
{
    free(s->order);
    free(s->prob);
    free(s->cand);
    memset(s, 0, sizeof *s);
}

/* A NaN logit (a diverged model) ranks below every number, so the order stays total. */
static inline float logit_at(const float *logits, int i) { return isnan(logits[i]) ? -INFINITY : logits[i]; }

/* Larger logit first, then smaller id: a total order, so the result is the same on every libc. */
static int cand_cmp(const void *a, const void *b)
{
    const sampler_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The k-th largest of the V logits (1 <= k <= V): a min-heap of the k largest so far. */
static float kth_largest(const float *logits, int V, int k, double *heap)
{
    int n = 0;
    for (int i = 0; i < V; i++) {
        double x = logit_at(logits, i);
        if (n == k && x <= heap[0]) continue;
        int j;
        if (n < k) {  /* sift up from the new leaf */
            for (j = n++; j > 0 && heap[(j - 1) / 2] > x; j = (j - 1) / 2) heap[j] = heap[(j - 1) / 2];
        } else {      /* replace the root, sift down */
            for (j = 0;;) {
                int c = 2 * j + 1;
                if (c >= n) break;
                if (c + 1 < n && heap[c + 1] < heap[c]) c++;
                if (heap[c] >= x) break;
                heap[j] = heap[c];
                j = c;
            }
        }
        heap[j] = x;
    }
    return (float)heap[0];
}

int sampler_distribution(sampler *s, const float *logits)
{
    const sampler_options *o = &s->opt;
    int V = s->V, n = 0;
    if (o->temperature == 0) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logit_at(logits, i) > logit_at(logits, best)) best = i;
        s->order[0] = best;
        s->prob[0] = 1.0;
        return 1;
    }
    float floor = o->top_k > 0 && o->top_k < V ? kth_largest(logits, V, o->top_k, s->prob) : -INFINITY;
    for (int i = 0; i < V; i++) {
        float x = logit_at(logits, i);
        if (x >= floor) s->cand[n++] = (sampler_cand){ x, i };
    }
    qsort(s->cand, (size_t)n, sizeof *s->cand, cand_cmp);
    /* softmax of logit / T over the candidates, in double from the largest down */
    double top = s->cand[0].logit, z = 0;
    for (int i = 0; i < n; i++) {
        double e = top == -INFINITY ? 1.0 : exp(((double)s->cand[i].logit - top) / o->temperature);
        s->prob[i] = e;
        z += e;
    }
    int kept = n;
    if (o->top_p < 1) {
        double above = 0;  /* mass of the tokens ranked above candidate i */
        for (kept = 0; kept < n && (kept == 0 || above < o->top_p); kept++) above += s->prob[kept] / z;
        z = 0;
        for (int i = 0; i < kept; i++) z += s->prob[i];
    }
    for (int i = 0; i < kept; i++) {
        s->order[i] = s->cand[i].id;
        s->prob[i] /= z;
    }
    return kept;
}

int32_t sampler_pick(const sampler *s, int n, double u)
{
    double acc = 0;
    for (int i = 0; i < n - 1; i++) {
        acc += s->prob[i];
        if (u < acc) return s->order[i];
    }
    return s->order[n - 1];  /* u beyond the rounded total lands on the last kept token */
}

int32_t sampler_next(sampler *s, const float *logits, uint64_t index, double *p)
{
    int n = sampler_distribution(s, logits);
    double u = 0;
    if (n > 1) {
        rng r;
        rng_init(&r, s->opt.seed, 0, RNG_PURPOSE_GENERATE, index);
        u = rng_uniform_double(&r);
    }
    int32_t id = sampler_pick(s, n, u);
    if (p)
        for (int i = 0; i < n; i++)
            if (s->order[i] == id) *p = s->prob[i];
    return id;
}

void sampler_top_probs(const float *logits, int V, int k, int32_t *ids, double *prob)
{
    CHECK(k >= 1 && k <= V, "sampler_top_probs: 1 <= k <= V");
    float top = -INFINITY;
    for (int i = 0; i < V; i++) top = fmaxf(top, logit_at(logits, i));
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)logit_at(logits, i) - top);
    /* insertion into a sorted list of k: k is small (the pipeline's default is 5) */
    int n = 0;
    for (int i = 0; i < V; i++) {
        float x = logit_at(logits, i);
        if (n == k && !(x > logit_at(logits, ids[n - 1]))) continue;
        int j = n < k ? n++ : k - 1;
        for (; j > 0 && x > logit_at(logits, ids[j - 1]); j--) ids[j] = ids[j - 1];
        ids[j] = i;
    }
    for (int i = 0; i < k; i++) prob[i] = exp((double)logit_at(logits, ids[i]) - top) / z;
}
