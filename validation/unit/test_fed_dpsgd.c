/* test_fed_dpsgd — nebula-fed's per-example clipping (fed_dpsgd_accumulate, sample-level
 * DP-SGD) on an MLP over 8x8 images, against its definition:
 *   (a) unclipped (C = inf), the sum of the per-example gradients over n examples is n x
 *       the gradient of the batch's mean loss from a model built for n (the trainer's
 *       gradient, itself checked against PyTorch), and the losses' sum is n x its loss;
 *   (b) clipped at the median per-example norm, the sum is sum_i min(1, C / |g_i|) g_i
 *       from each example's gradient taken alone, in double, and the count of clipped
 *       examples is the count with |g_i| > C;
 *   (c) at a tiny C every contribution has norm C: |sum| <= n C, and each example alone
 *       gives a vector of norm C;
 * Tolerances: float sums of n terms of per-example gradients against one batched
 * backward, kc_rtol_f32 of the longest reduction (the hidden layer's inputs + n),
 * applied to the largest gradient entry. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "fed/fed_impl.h"

#define N 8          /* examples */
#define HW 8         /* image side */
#define HIDDEN 16
#define SEED 20261207

static const config_key schema[] = { MODEL_CONFIG_KEYS };

static void spec_mlp(model_spec *s)
{
    config cfg;
    CHECK(config_init(&cfg, schema, (int)(sizeof schema / sizeof schema[0])) == STATUS_OK, "model schema");
    CHECK(config_set(&cfg, "model.name=mlp") == STATUS_OK && config_set(&cfg, "model.image_size=8") == STATUS_OK &&
          config_set(&cfg, "model.mlp_hidden=16") == STATUS_OK, "the test's model keys");
    CHECK(model_spec_from_config(s, &cfg) == STATUS_OK, "the MLP spec");
}

static void optim_cpu(train_optim *o, model *m)
{
    static const device cpu = { .kind = DEVICE_KIND_CPU, .precision = PRECISION_FP32, .ordinal = -1,
                                .ops = &nn_ops_cpu, .describe = "cpu" };
    memset(o, 0, sizeof *o);
    o->use_sgd = true;
    CHECK(device_optim_init(&o->dopt, &cpu, model_params(m)) == STATUS_OK, "the optimizer");
}

static double norm_d(const double *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

int main(void)
{
    kc k;
    kc_init(&k, SEED);
    model_spec spec;
    spec_mlp(&spec);
    model m1, mn;
    model_batch b1, bn;
    CHECK(model_init(&m1, &spec, 1, 0, 7, true) == STATUS_OK && model_init(&mn, &spec, N, 0, 7, true) == STATUS_OK,
          "the models of batch 1 and N");
    CHECK(model_batch_init(&b1, &m1) == STATUS_OK && model_batch_init(&bn, &mn) == STATUS_OK, "the batches");
    size_t np = model_params(&m1)->total, img = 3 * HW * HW;
    memcpy(model_buffers(&m1)->params, model_buffers(&mn)->params, np * sizeof(float));
    train_optim o1, on;
    optim_cpu(&o1, &m1), optim_cpu(&on, &mn);

    fed_data d = { .n = N, .images = true, .H = HW, .W = HW };
    d.x = malloc(N * img * sizeof *d.x);
    d.labels = malloc(N * sizeof *d.labels);
    CHECK(d.x && d.labels, "out of memory");
    kc_uniform(&k, d.x, N * img, -1.5f, 1.5f);
    int64_t idx[N];
    for (int i = 0; i < N; i++) idx[i] = i, d.labels[i] = (int32_t)(rng_u32(&k.r) % 10);
    memcpy(bn.images, d.x, N * img * sizeof(float));
    for (int i = 0; i < N; i++) bn.targets[i] = d.labels[i];

    /* (a) unclipped sum = N x the batch gradient */
    double loss_n = 0, loss_sum = 0;
    train_step_stats ss;
    CHECK(train_grad_batch(&mn, &on, &bn, &loss_n, &ss) == STATUS_OK, "the batch gradient");
    float *acc = calloc(np, sizeof *acc);
    double *ref = malloc(np * sizeof *ref), *gi = malloc((size_t)N * np * sizeof *gi);
    CHECK(acc && ref && gi, "out of memory");
    int64_t clipped = 0;
    CHECK(fed_dpsgd_accumulate(&m1, &o1, &b1, &d, idx, N, INFINITY, acc, &loss_sum, &clipped) == STATUS_OK,
          "accumulate, unclipped");
    const float *gn = model_buffers(&mn)->grads;
    double big = 0;
    for (size_t j = 0; j < np; j++) {
        ref[j] = N * (double)gn[j];
        if (fabs(ref[j]) > big) big = fabs(ref[j]);  /* no fmax reduction: GCC 12 for aarch64 ICEs on it */
    }
    double rtol = kc_rtol_f32(3 * HW * HW + N);
    kc_close(&k, acc, ref, np, rtol * big, rtol, "unclipped: the per-example gradients sum to N x the batch gradient");
    kc_report(&k, fabs(loss_sum - N * loss_n) <= rtol * N * fabs(loss_n) + 1e-6, "unclipped: the losses sum to N x the "
              "batch's mean loss", fabs(loss_sum - N * loss_n));
    kc_report(&k, clipped == 0, "unclipped: no example counted clipped", (double)clipped);

    /* each example alone, then (b) clipping at the median norm */
    double norms[N], sorted[N];
    for (int i = 0; i < N; i++) {
        memset(acc, 0, np * sizeof *acc);
        double l = 0;
        int64_t c = 0;
        CHECK(fed_dpsgd_accumulate(&m1, &o1, &b1, &d, &idx[i], 1, INFINITY, acc, &l, &c) == STATUS_OK, "one example");
        for (size_t j = 0; j < np; j++) gi[(size_t)i * np + j] = acc[j];
        norms[i] = sorted[i] = norm_d(gi + (size_t)i * np, np);
    }
    for (int i = 1; i < N; i++)  /* insertion sort: the median */
        for (int j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1], sorted[j - 1] = t;
        }
    double C = 0.5 * (sorted[N / 2 - 1] + sorted[N / 2]);
    int64_t want = 0;
    memset(ref, 0, np * sizeof *ref);
    for (int i = 0; i < N; i++) {
        double s = norms[i] > C ? C / norms[i] : 1;
        want += norms[i] > C;
        for (size_t j = 0; j < np; j++) ref[j] += s * gi[(size_t)i * np + j];
    }
    memset(acc, 0, np * sizeof *acc);
    loss_sum = 0, clipped = 0;
    CHECK(fed_dpsgd_accumulate(&m1, &o1, &b1, &d, idx, N, C, acc, &loss_sum, &clipped) == STATUS_OK, "clipped");
    big = 0;
    for (size_t j = 0; j < np; j++)
        if (fabs(ref[j]) > big) big = fabs(ref[j]);
    kc_close(&k, acc, ref, np, kc_rtol_f32(N + 2) * big, kc_rtol_f32(N + 2),
             "clipped at the median norm: sum of min(1, C/|g_i|) g_i");
    kc_report(&k, clipped == want && want > 0 && want < N, "clipped: the count of examples above C", (double)clipped);

    /* (c) a tiny C: every contribution has norm C */
    double tiny = 1e-4 * sorted[0];
    memset(acc, 0, np * sizeof *acc);
    CHECK(fed_dpsgd_accumulate(&m1, &o1, &b1, &d, &idx[0], 1, tiny, acc, &loss_sum, &clipped) == STATUS_OK, "tiny C");
    double nrm = 0;
    for (size_t j = 0; j < np; j++) nrm += (double)acc[j] * acc[j];
    nrm = sqrt(nrm);
    kc_report(&k, fabs(nrm - tiny) <= kc_rtol_f32((int)np) * tiny, "one example at a tiny C: norm C",
              fabs(nrm - tiny) / tiny);
    memset(acc, 0, np * sizeof *acc);
    CHECK(fed_dpsgd_accumulate(&m1, &o1, &b1, &d, idx, N, tiny, acc, &loss_sum, &clipped) == STATUS_OK, "tiny C, N");
    nrm = 0;
    for (size_t j = 0; j < np; j++) nrm += (double)acc[j] * acc[j];
    kc_report(&k, sqrt(nrm) <= N * tiny * (1 + 1e-5), "N examples at a tiny C: |sum| <= N C", sqrt(nrm) / (N * tiny));

    free(acc), free(ref), free(gi), free(d.x), free(d.labels);
    train_optim_free(&o1), train_optim_free(&on);
    model_batch_free(&b1), model_batch_free(&bn);
    model_free(&m1), model_free(&mn);
    printf("%s: %d failure(s)\n", k.failures ? "FAIL" : "ok", k.failures);
    return k.failures ? 1 : 0;
}
