/* fed_dpsgd — sample-level differential privacy inside a client: DP-SGD (Abadi et al.,
 * "Deep Learning with Differential Privacy", CCS 2016) for the client's local steps
 * (dp.sample_clip > 0). Each local step draws a Poisson sample of the client's shard
 * (every example with probability q = fed.local_batch / shard size), takes every
 * example's gradient alone, clips it to L2 norm C = dp.sample_clip, sums, adds Gaussian
 * noise of standard deviation sigma C (sigma = dp.sample_noise) and divides by the
 * expected batch fed.local_batch (the fixed denominator Opacus uses with Poisson
 * sampling), then steps the model's optimizer on that gradient.
 *
 * Guarantee and accounting: the noise is added on the client, so the update it sends —
 * and everything the server or another client sees — is (epsilon, delta)-DP with
 * respect to each of the client's examples. The accountant (rdp.h, the subsampled
 * Gaussian) composes q and sigma over E steps per round for every round of the run: an
 * upper bound, since a client that sits out a round spends nothing, and it ignores the
 * amplification by client sampling; the worst client (the smallest shard, the largest
 * q) is reported.
 *
 * The one design decision: per-example gradients come from a model built for a batch of
 * one (forward and backward per example) rather than from per-sample gradient hooks in
 * every layer: the layers stay as they are, which is what makes the gradient of the
 * sum exactly the trainer's; the price is B small GEMMs instead of one. Batch norm mixes
 * the examples of a batch, so families with it are refused (as Opacus refuses BatchNorm). */
#include <math.h>
#include <string.h>

#include "fed_impl.h"

/* The counter of a local step in a client's streams: above every round number the
 * client-level noise uses (index = round), below RNG_STEP_LIMIT for round < 2^31 and
 * step < 2^16 (fed_dpsgd_check). */
static uint64_t fed_dpsgd_index(int64_t round, int step)
{
    return (UINT64_C(1) << 47) | ((uint64_t)round << 16) | (uint64_t)step;
}

status fed_dpsgd_check(const fed_run *f)
{
    if (!(f->dpsgd_clip > 0)) return STATUS_OK;
    const config *cfg = f->cfg;
    if (f->spec.family == MODEL_FAMILY_RESNET) {
        log_error0("dp.sample_clip = %g (%s): per-example clipping needs each example's gradient alone, and ResNet's "
                   "batch norm mixes the examples of a batch (Opacus refuses BatchNorm for the same reason); use "
                   "model.name = mlp, or client-level DP alone (dp.mode with dp.sample_clip = 0)",
                   f->dpsgd_clip, config_origin(cfg, "dp.sample_clip"));
        return STATUS_INPUT;
    }
    if (f->local_steps >= 1 << 16 || f->rounds >= INT64_C(1) << 31) {
        log_error0("dp.sample_clip: DP-SGD's random streams count fed.local_steps below 65536 and fed.rounds below "
                   "2^31 (%d local steps, %lld rounds)", f->local_steps, (long long)f->rounds);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

double fed_dpsgd_rate(const fed_run *f)
{
    int64_t least = INT64_MAX;
    for (int c = 0; c < f->nclients; c++) {
        int64_t k = f->shard_start[c + 1] - f->shard_start[c];
        if (k > 0 && k < least) least = k;
    }
    if (least == INT64_MAX) return 1;
    double q = (double)f->local_batch / (double)least;
    return q < 1 ? q : 1;
}

double fed_dpsgd_epsilon(const fed_run *f, int64_t rounds)
{
    fed_rdp r;
    fed_rdp_init(&r);
    if (rounds > 0) fed_rdp_compose(&r, fed_dpsgd_rate(f), f->dpsgd_sigma, rounds * f->local_steps);
    return rounds > 0 ? fed_rdp_epsilon(&r, f->delta, NULL) : 0;
}

status fed_dpsgd_accumulate(model *m1, train_optim *o, model_batch *b1, const fed_data *d, const int64_t *idx,
                            int64_t n, double C, float *acc, double *loss_sum, int64_t *clipped)
{
    const param_table *pt = model_params(m1);
    const float *g = model_device_buffers(m1)->grads;
    size_t np = pt->total;
    for (int64_t i = 0; i < n; i++) {
        fed_batch_put(b1, 0, d, idx[i]);
        double loss = 0;
        train_step_stats ss;
        TRY(train_grad_batch(m1, o, b1, &loss, &ss));
        *loss_sum += loss;
        double norm = fed_l2norm(g, np);
        if (!isfinite(norm)) {
            log_warn("fed: DP-SGD: an example's gradient is not finite; the local step fails");
            return STATUS_DIVERGED;
        }
        float scale = norm > C ? (float)(C / norm) : 1.0f;
        *clipped += norm > C;
        for (size_t j = 0; j < np; j++) acc[j] += scale * g[j];
    }
    return STATUS_OK;
}

status fed_dpsgd_step(fed_run *f, int client, int64_t round, int step, double lr, double *loss)
{
    int64_t first = f->shard_start[client], k = f->shard_start[client + 1] - first;
    double q = (double)f->local_batch / (double)(k > 0 ? k : 1);
    uint64_t at = fed_dpsgd_index(round, step);
    rng r;
    rng_init(&r, f->seed, (uint32_t)client, RNG_PURPOSE_DATA, at);
    int64_t n = 0;
    for (int64_t i = 0; i < k; i++)  /* Poisson sampling: each example alone, with probability q */
        if (q >= 1 || rng_uniform_double(&r) < q) f->perm[n++] = f->shard[first + i];
    memset(f->dpsgd_acc, 0, f->np * sizeof(float));
    double sum = 0;
    int64_t clipped = 0;
    TRY(fed_dpsgd_accumulate(&f->m, &f->opt, &f->batch, &f->train, f->perm, n, f->dpsgd_clip, f->dpsgd_acc, &sum,
                             &clipped));
    fed_noise_add(f->dpsgd_acc, f->np, f->dpsgd_sigma * f->dpsgd_clip, f->seed, (uint32_t)client, at);
    float *g = model_device_buffers(&f->m)->grads;
    for (size_t j = 0; j < f->np; j++) g[j] = f->dpsgd_acc[j] / (float)f->local_batch;
    train_step_stats ss;
    TRY(train_update_batch(&f->m, &f->opt, lr, step + 1, &ss));
    *loss = n > 0 ? sum / (double)n : NAN;
    return STATUS_OK;
}
