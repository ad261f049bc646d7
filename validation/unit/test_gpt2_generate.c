/* test_gpt2_generate — text generation's numerics: the cached attention kernel against
 * attention.h's double reference, GPT-2's incremental forward with a KV cache against
 * the training forward (gpt2_forward) on the same sequence, and the sampler's filters
 * (temperature, top-k, top-p) against distributions computed by hand, as exact sets of
 * token ids with their probabilities. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "cpu/attention.h"
#include "cpu/attention_kv.h"
#include "nn/gpt2.h"
#include "nn/gpt2_generate.h"
#include "nn/sampler.h"

/* ---- attention over a cache ------------------------------------------------------- */

static void test_attention_kv(kc *k)
{
    enum { T = 37, C = 64, NH = 4 };
    int HS = C / NH;
    float *qkv = kc_frand(k, (size_t)T * 3 * C, -2.0f, 2.0f);
    double *dqkv = malloc(sizeof(double) * T * 3 * C), *ref = malloc(sizeof(double) * T * C);
    double *lse = malloc(sizeof(double) * NH * T);
    float *kc_ = malloc(sizeof(float) * T * C), *vc = malloc(sizeof(float) * T * C);
    kc_to_double(dqkv, qkv, (size_t)T * 3 * C);
    attention_forward_ref(ref, lse, dqkv, dqkv + C, dqkv + 2 * C, 3 * C, NULL, 1, T, C, NH, 1);
    for (int t = 0; t < T; t++) {
        memcpy(kc_ + t * C, qkv + t * 3 * C + C, sizeof(float) * C);
        memcpy(vc + t * C, qkv + t * 3 * C + 2 * C, sizeof(float) * C);
    }
    /* softmax over up to T keys, each score a dot of HS products */
    double rtol = kc_rtol_f32((size_t)(T + HS)), atol = rtol;
    /* every query at once (a prefill), the last 5 after 32 cached, and the last alone */
    int tq[] = { T, 5, 1 };
    for (int c = 0; c < 3; c++) {
        int n = tq[c], P = T - n;
        float *out = kc_guarded((size_t)n * C);
        attention_kv_forward(out, qkv + (size_t)P * 3 * C, 3 * C, kc_, vc, n, T, C, NH);
        char what[128];
        snprintf(what, sizeof what, "attention_kv: %d new queries after %d cached = the causal reference's rows", n, P);
        kc_close(k, out, ref + (size_t)P * C, (size_t)n * C, atol, rtol, what);
        check_line(&k->failures, kc_guards_intact(out, (size_t)n * C), "attention_kv (Tq %d): canaries intact", n);
        kc_guarded_free(out);
    }
    free(qkv), free(dqkv), free(ref), free(lse), free(kc_), free(vc);
}

/* ---- GPT-2 with a KV cache against the training forward --------------------------- */

static void test_kv_cache(kc *k)
{
    enum { T = 64, PREFILL = 9 };
    gpt2_config cfg;
    CHECK(gpt2_config_named(&cfg, "gpt2-tiny") == STATUS_OK, "gpt2-tiny is a preset");
    cfg.vocab_size = 250;  /* padded rows 250..255: present in the logits, never a token */
    gpt2 m;
    CHECK(gpt2_init(&m, &cfg, 1, T, 1234, false) == STATUS_OK, "gpt2_init");
    /* O(1) activations (test_gpt2_ref's reason): weights x10, random biases and gains */
    for (int i = 0; i < m.pt.count; i++) {
        const param_entry *e = &m.pt.entries[i];
        float *w = m.pb.params + e->offset;
        bool bias = strstr(e->name, ".bias") != NULL, norm = strstr(e->name, "ln_") != NULL;
        for (size_t j = 0; j < e->count; j++) {
            if (bias) w[j] = 0.2f * (rng_uniform(&k->r) - 0.5f);
            else if (norm) w[j] = 1.0f + 0.4f * (rng_uniform(&k->r) - 0.5f);
            else w[j] *= 10.0f;
        }
    }
    int32_t tokens[T];
    for (int t = 0; t < T; t++) tokens[t] = (int32_t)rng_below(&k->r, (uint32_t)cfg.vocab_size);
    CHECK(gpt2_forward(&m, tokens, NULL) == STATUS_OK, "gpt2_forward");
    int Vp = cfg.padded_vocab_size;
    double *ref = malloc(sizeof(double) * T * Vp);
    kc_to_double(ref, m.acts.logits, (size_t)T * Vp);

    gpt2_kv kv;
    CHECK(gpt2_kv_init(&kv, &m, T, PREFILL) == STATUS_OK, "gpt2_kv_init");
    float *got = malloc(sizeof(float) * T * Vp);
    status st = gpt2_kv_forward(&kv, &m, tokens, PREFILL, got);
    for (int t = PREFILL; t < T && st == STATUS_OK; t++) {
        st = gpt2_kv_forward(&kv, &m, tokens + t, 1, NULL);
        memcpy(got + (size_t)t * Vp, kv.logits, sizeof(float) * Vp);
    }
    check_line(&k->failures, st == STATUS_OK && kv.len == T, "prefill of %d, then %d steps of one token: %d positions",
               PREFILL, T - PREFILL, kv.len);
    /* The two paths run the same kernels in other summation orders (a GEMV per row
     * against a GEMM over the batch, the cached attention against the tiled one). Each
     * logit ends a chain of L blocks whose longest sums have 4C terms, through layer
     * norms that rescale the residual stream by its inverse deviation; float rounding
     * of a k-term sum is at most k eps of its terms' magnitude, so the bound is the
     * kernel tests' rtol for one 4C-term sum per block, times the blocks, and the same
     * as atol for logits near zero. Measured worst: 1.4% of it. */
    double rtol = kc_rtol_f32((size_t)(4 * cfg.channels * cfg.num_layers)), atol = rtol;
    kc_close(k, got, ref, (size_t)T * Vp, atol, rtol,
             "KV-cache logits = the training forward's, every position (padded rows too)");
    /* greedy tokens of the two paths agree: the argmax of each row */
    int same = 0;
    for (int t = 0; t < T; t++) {
        int a = 0, b = 0;
        for (int v = 1; v < cfg.vocab_size; v++) {
            if (got[(size_t)t * Vp + v] > got[(size_t)t * Vp + a]) a = v;
            if (ref[(size_t)t * Vp + v] > ref[(size_t)t * Vp + b]) b = v;
        }
        same += a == b;
    }
    check_line(&k->failures, same == T, "argmax of every position agrees (%d of %d)", same, T);
    /* the same sequence again after a reset: the cache is all a forward depends on */
    gpt2_kv_reset(&kv);
    float *again = malloc(sizeof(float) * PREFILL * Vp);  /* the head on every row again: the same GEMM as before */
    st = gpt2_kv_forward(&kv, &m, tokens, PREFILL, again);
    check_line(&k->failures, st == STATUS_OK && !memcmp(again, got, sizeof(float) * PREFILL * Vp),
               "after gpt2_kv_reset the prefill gives the same logits bit for bit");
    free(again);
    kv.len = T - 1;
    int32_t two[2] = { 1, 2 };
    check_line(&k->failures, gpt2_kv_forward(&kv, &m, two, 2, NULL) == STATUS_INPUT,
               "a forward past the cache's positions is STATUS_INPUT");
    kv.len = 0;
    int32_t bad = cfg.vocab_size;  /* a padded row: not a token */
    check_line(&k->failures, gpt2_kv_forward(&kv, &m, &bad, 1, NULL) == STATUS_INPUT,
               "a token id in the padded rows is STATUS_INPUT");
    gpt2_kv_free(&kv);
    free(got), free(ref);
    gpt2_free(&m);
}

/* ---- the sampler's filters ---------------------------------------------------------- */

/* V = 8 real logits, then two padded rows holding the largest values: never candidates. */
static const float LOGITS[10] = { 2.0f, 1.0f, 0.5f, 3.0f, 1.0f, -1.0f, 0.0f, 2.0f, 50.0f, 40.0f };
enum { V = 8 };

/* The distribution for (T, k, p) is exactly `ids` (in order) with probabilities
 * proportional to exp(logit / T) over that set. */
static void expect_set(kc *k, double T, int top_k, double top_p, const int32_t *ids, int n)
{
    sampler s;
    sampler_options o = { T, top_k, top_p, 1 };
    CHECK(sampler_init(&s, &o, V) == STATUS_OK, "sampler_init");
    int got = sampler_distribution(&s, LOGITS);
    bool ok = got == n;
    double z = 0, worst = 0;
    for (int i = 0; i < n; i++) z += T > 0 ? exp(LOGITS[ids[i]] / T) : 1.0;
    for (int i = 0; ok && i < n; i++) {
        double want = T > 0 ? exp(LOGITS[ids[i]] / T) / z : 1.0;
        ok = s.order[i] == ids[i];
        worst = fmax(worst, fabs(s.prob[i] - want));
    }
    ok = ok && worst <= 1e-12;
    char set[64] = "", *w = set;
    for (int i = 0; i < n; i++) w += snprintf(w, (size_t)(set + sizeof set - w), "%s%d", i ? "," : "", ids[i]);
    check_line(&k->failures, ok, "temperature %g, top-k %d, top-p %g: the set {%s} with softmax(logit/T) over it "
               "(got %d tokens, worst |dp| %.2g)", T, top_k, top_p, set, got, worst);
    sampler_free(&s);
}

static void test_sampler(kc *k)
{
    /* greedy: the largest real logit (id 3), not the padded rows' 50 */
    expect_set(k, 0, 0, 1, (int32_t[]){ 3 }, 1);
    expect_set(k, 0, 5, 0.5, (int32_t[]){ 3 }, 1);
    /* no filter: every token, by logit then id */
    expect_set(k, 1, 0, 1, (int32_t[]){ 3, 0, 7, 1, 4, 2, 6, 5 }, 8);
    /* top-k: the k-th largest is the floor, its ties kept (HF's `scores < kth` rule) */
    expect_set(k, 1, 1, 1, (int32_t[]){ 3 }, 1);
    expect_set(k, 1, 2, 1, (int32_t[]){ 3, 0, 7 }, 3);
    expect_set(k, 1, 3, 1, (int32_t[]){ 3, 0, 7 }, 3);
    expect_set(k, 1, 4, 1, (int32_t[]){ 3, 0, 7, 1, 4 }, 5);
    expect_set(k, 1, 8, 1, (int32_t[]){ 3, 0, 7, 1, 4, 2, 6, 5 }, 8);
    /* top-p at T = 1: p = e^l / 43.316: id 3 .464, ids 0 and 7 .171 each, ids 1 and 4
     * .063 each, id 2 .038: a token stays while the mass above it is < p */
    expect_set(k, 1, 0, 0.4, (int32_t[]){ 3 }, 1);
    expect_set(k, 1, 0, 0.5, (int32_t[]){ 3, 0 }, 2);
    expect_set(k, 1, 0, 0.9, (int32_t[]){ 3, 0, 7, 1, 4 }, 5);
    /* temperature before top-p, top-k before top-p: within top-k 4 (five tokens) at T = 1
     * the masses are .498, .183, .183 (p 0.6 keeps {3, 0}); at T = 2 they are .339, .206,
     * .206, .125 (p 0.6 keeps {3, 0, 7}) */
    expect_set(k, 1, 4, 0.6, (int32_t[]){ 3, 0 }, 2);
    expect_set(k, 2, 4, 0.6, (int32_t[]){ 3, 0, 7 }, 3);

    /* the draw walks the kept distribution in order */
    sampler s;
    sampler_options o = { 1, 4, 0.6, 42 };
    CHECK(sampler_init(&s, &o, V) == STATUS_OK, "sampler_init");
    int n = sampler_distribution(&s, LOGITS);
    double p0 = s.prob[0];
    check_line(&k->failures, n == 2 && sampler_pick(&s, n, 0.0) == 3 && sampler_pick(&s, n, p0 * 0.999) == 3 &&
                   sampler_pick(&s, n, p0 * 1.001) == 0 && sampler_pick(&s, n, 0.999999) == 0,
               "sampler_pick: u below the first mass picks it, above picks the next");
    /* draws: only kept ids, at their probabilities (4 sigma of 20000 Bernoulli draws) */
    enum { DRAWS = 20000 };
    int count[V] = { 0 }, outside = 0;
    for (int i = 0; i < DRAWS; i++) {
        int32_t id = sampler_next(&s, LOGITS, (uint64_t)i, NULL);
        if (id != 3 && id != 0) outside++;
        else count[id]++;
    }
    double sigma = sqrt(p0 * (1 - p0) / DRAWS), f3 = (double)count[3] / DRAWS;
    check_line(&k->failures, outside == 0 && fabs(f3 - p0) <= 4 * sigma,
               "20000 draws: only the kept ids, token 3 at %.4f against p = %.4f (4 sigma %.4f)", f3, p0, 4 * sigma);
    int32_t a = sampler_next(&s, LOGITS, 7, NULL), b = sampler_next(&s, LOGITS, 7, NULL);
    int differ = 0;
    sampler t;
    sampler_options o2 = o;
    o2.seed = 43;
    CHECK(sampler_init(&t, &o2, V) == STATUS_OK, "sampler_init");
    for (int i = 0; i < 64; i++) differ += sampler_next(&s, LOGITS, (uint64_t)i, NULL) != sampler_next(&t, LOGITS, (uint64_t)i, NULL);
    check_line(&k->failures, a == b && differ > 0, "a draw is a function of (seed, index): the same twice, another "
               "seed differs (%d of 64 draws)", differ);
    sampler_free(&t);
    sampler_free(&s);

    sampler_options bad[] = { { -1, 0, 1, 0 }, { NAN, 0, 1, 0 }, { 1, -1, 1, 0 }, { 1, 0, 0, 0 }, { 1, 0, 1.5, 0 } };
    int refused = 0;
    for (int i = 0; i < 5; i++) refused += sampler_init(&s, &bad[i], V) == STATUS_INPUT;
    check_line(&k->failures, refused == 5, "temperature < 0 or NaN, top-k < 0, top-p outside (0, 1]: refused (%d of 5)",
               refused);
}

int main(void)
{
    kc k;
    kc_init(&k, 2024);
    test_attention_kv(&k);
    test_kv_cache(&k);
    test_sampler(&k);
    printf("%s: %d failed\n", k.failures ? "FAIL" : "ok", k.failures);
    return k.failures ? 1 : 0;
}
