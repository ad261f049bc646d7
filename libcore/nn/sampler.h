/* sampler — the next token from a row of logits: greedy (argmax), or a draw from the
 * softmax after temperature, top-k and top-p (nucleus, Holtzman et al. ICLR 2020), in
 * that order, as transformers' generate() applies its TemperatureLogitsWarper,
 * TopKLogitsWarper and TopPLogitsWarper:
 *   - temperature T > 0 divides the logits (T = 0 means greedy);
 *   - top-k keeps every token whose logit is >= the k-th largest (ties at the k-th
 *     are all kept, as `scores < topk(scores, k)[..., -1]` removes only smaller ones);
 *   - top-p sorts the kept tokens by probability, descending, and keeps token i when
 *     the probability of the tokens ranked above it is < p (the most likely token is
 *     always kept): HF's "remove where the ascending cumulative sum <= 1 - p".
 * Only the V real tokens are candidates; logits of padded vocabulary rows (GPT-2's
 * embedding is padded to a multiple of 128) are never read.
 *
 * The one design decision: a draw is a pure function of (seed, index of the token):
 * token i uses the counter stream (seed, 0, RNG_PURPOSE_GENERATE, i) (base/rng.h), so
 * the same seed gives the same text, and a generation that stops and continues draws
 * what one run would have. */
#ifndef NEBULA_SAMPLER_H
#define NEBULA_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/log.h"

typedef struct sampler_options {
    double temperature;   /* > 0; 0: greedy (argmax, the first on ties) */
    int top_k;            /* keep the k most likely (ties at the k-th kept); 0: all */
    double top_p;         /* nucleus mass in (0, 1]; 1: all */
    uint64_t seed;        /* the draws' stream */
} sampler_options;

typedef struct sampler {
    sampler_options opt;  /* as given */
    int V;                /* real tokens: logits[0..V) are candidates */
    int32_t *order;       /* (V) the kept ids, most likely first (sampler_distribution) */
    double *prob;         /* (V) the kept tokens' probabilities, in `order`'s order */
    struct sampler_cand *cand; /* (V) scratch: candidates (logit, id) being ranked */
} sampler;

/* Checks the options (STATUS_INPUT naming the option: temperature >= 0, top_k >= 0,
 * 0 < top_p <= 1) and allocates scratch for V tokens (STATUS_NOMEM). */
status sampler_init(sampler *s, const sampler_options *opt, int V);
void sampler_free(sampler *s);

/* The distribution a draw comes from: n kept tokens, s->order[0..n) their ids by
 * descending probability (ties by ascending id), s->prob[0..n) their probabilities
 * (summing to 1). Greedy: n = 1, the argmax with probability 1. */
int sampler_distribution(sampler *s, const float *logits /* (V) */);
/* The token a uniform u in [0, 1) picks from that distribution (walking it in order). */
int32_t sampler_pick(const sampler *s, int n, double u);
/* Token number `index` of a generation: the distribution of `logits` and the draw of
 * stream (seed, 0, RNG_PURPOSE_GENERATE, index). *p receives its probability (NULL: not). */
int32_t sampler_next(sampler *s, const float *logits /* (V) */, uint64_t index, double *p);

/* The fill-mask view (transformers' fill-mask pipeline): the k most likely of V tokens
 * under the plain softmax of the whole row (no temperature, no renormalisation over the
 * k), exactly k of them (1 <= k <= V; ties by ascending id), into ids (k) and prob (k). */
void sampler_top_probs(const float *logits /* (V) */, int V, int k, int32_t *ids, double *prob);

#endif
