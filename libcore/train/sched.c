/* sched — heterogeneous ranks: each data-parallel rank takes its own share of every
 * global batch instead of b x A samples, so that a slow rank gets less work and the
 * fast ones do not wait for it.
 *
 * Shares are contiguous: rank d reads samples [first_d, first_d + n_d) of the global
 * batch, first_d = n_0 + ... + n_(d-1), in micro-batches of at most b (the last one
 * partial; data_set_share), so the ranks' samples are disjoint and cover the batch
 * whatever the shares. The gradient stays the mean over the global batch's samples:
 * a micro-batch of k samples scales its loss's gradient by k / b (model_set_loss_scale),
 * and the buckets scale the sum by 1 / (A x dp) as for uniform data parallelism, so
 * each sample weighs 1 / GB exactly as there — the update is uniform data parallelism's
 * up to the order of the float sums, and with equal shares it is the same bits.
 *
 * Modes: static (shares in proportion to sched.shares) and balanced (in proportion to
 * each rank's measured samples per second of its busy time, the step less its wait for
 * the gradient exchange: an EMA refreshed every
 * sched.interval steps: the step time is the slowest rank's, minimised when every rank
 * needs the same time). Each rank gets at least sched.min_share of an equal share. The
 * apportionment is the largest-remainder method on numbers every rank holds alike, so
 * every rank computes the same assignment with no broadcast. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

/* Splits gb samples over n ranks in proportion to w (w <= 0 counts as 0; all 0: equal),
 * each at least `floor_n`: floor_n each, the rest by weight rounded down, then one more
 * to the largest remainders (the lower rank first on ties). STATUS_INPUT when the
 * floors alone exceed gb. */
status train_sched_apportion(const double *w, int n, int64_t gb, int64_t floor_n, int64_t *out)
{
    if (floor_n * n > gb) return STATUS_INPUT;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += w[i] > 0 ? w[i] : 0;
    int64_t rest = gb - floor_n * n, given = 0;
    double frac[n];
    for (int i = 0; i < n; i++) {
        double q = (double)rest * (sum > 0 ? (w[i] > 0 ? w[i] : 0) / sum : 1.0 / n);
        double fl = floor(q);
        out[i] = floor_n + (int64_t)fl;
        frac[i] = q - fl;
        given += (int64_t)fl;
    }
    for (int64_t left = rest - given; left > 0; left--) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (frac[i] > frac[best]) best = i;
        out[best]++;
        frac[best] = -1;
    }
    return STATUS_OK;
}

static int64_t sched_floor(const train_run *r)
{
    double equal = (double)r->tb.global_batch / train_dp_size(r);
    if (r->share.min_share <= 0) return 0;
    int64_t f = (int64_t)ceil(r->share.min_share * equal - 1e-9);
    return f < 1 ? 1 : f;
}

/* The assignment of weights w: counts, this rank's share, the loader's; logged on rank 0
 * when it changed. */
static status sched_assign(train_run *r, const double *w, const char *why)
{
    train_sched *s = &r->share;
    int dp = train_dp_size(r), me = train_dp_rank(r);
    int64_t *counts = malloc((size_t)dp * sizeof *counts);
    if (!counts) return STATUS_NOMEM;
    status st = train_sched_apportion(w, dp, r->tb.global_batch, sched_floor(r), counts);
    if (st != STATUS_OK) {
        log_error0("sched.min_share = %g: %d ranks x %lld samples is more than the global batch of %d",
                   s->min_share, dp, (long long)sched_floor(r), r->tb.global_batch);
        free(counts);
        return st;
    }
    bool changed = s->ck.global_batch != r->tb.global_batch;
    int64_t first = 0;
    for (int d = 0; d < dp; d++) {
        changed |= counts[d] != s->counts[d];
        if (d < me) first += counts[d];
        s->counts[d] = counts[d];
    }
    free(counts);
    s->ck.first = first, s->ck.count = s->counts[me];
    s->ck.global_batch = r->tb.global_batch, s->ck.dp_size = dp, s->ck.assigned_at = r->step;
    data_set_share(r->train_data, (uint64_t)s->ck.first, (uint64_t)s->ck.count);
    if (changed && r->rt->rank == 0) {
        printf("sched: step %ld: shares of the global batch %d:", r->step, r->tb.global_batch);
        for (int d = 0; d < dp; d++) printf("%s%lld", d ? "," : " ", (long long)s->counts[d]);
        printf(" (%s)\n", why);
    }
    return STATUS_OK;
}

status train_sched_reassign(train_run *r, const char *why)
{
    return r->share.mode == TRAIN_SCHED_MODE_OFF ? STATUS_OK : sched_assign(r, r->share.weights, why);
}

/* "1,1,0.4,0.4" into dp positive weights; STATUS_INPUT naming the key otherwise. */
static status sched_parse_shares(train_run *r, double *w)
{
    const char *text = config_str(r->cfg, "sched.shares"), *p = text;
    int dp = train_dp_size(r), n = 0;
    while (*p && n <= dp) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0) || !isfinite(v) || (*end && *end != ',')) n = dp + 1;
        else if (n < dp) w[n] = v;
        n++;
        p = *end ? end + 1 : end;
    }
    if (n == dp) return STATUS_OK;
    log_error0("sched.shares = '%s' (%s): sched.mode = static needs %d positive weights, one per data-parallel "
               "rank, comma-separated (e.g. %s)", text, config_origin(r->cfg, "sched.shares"), dp,
               dp == 4 ? "1,1,0.4,0.4" : "1,0.5");
    return STATUS_INPUT;
}

status train_sched_setup(train_run *r)
{
    train_sched *s = &r->share;
    const char *mode = config_str(r->cfg, "sched.mode");
    memset(s, 0, sizeof *s);
    s->mode = !strcmp(mode, "static") ? TRAIN_SCHED_MODE_STATIC
            : !strcmp(mode, "balanced") ? TRAIN_SCHED_MODE_BALANCED : TRAIN_SCHED_MODE_OFF;
    if (s->mode == TRAIN_SCHED_MODE_OFF) return STATUS_OK;
    s->min_share = config_float(r->cfg, "sched.min_share");
    s->interval = (long)config_int(r->cfg, "sched.interval");
    const char *why = NULL;
    if (r->grid.shape.tp > 1 || r->grid.shape.pp > 1) why = "parallel.tp and parallel.pp must be 1 (data parallelism)";
    else if (r->spec.family == MODEL_FAMILY_RESNET) why = "ResNet's batch normalisation depends on the micro-batch";
    else if (device_is_gpu(&r->dev)) why = "device.kind = cpu only so far";
    else if (r->fixed_batch) why = "data.train = synthetic-fixed trains on one fixed micro-batch";
    if (why) {
        log_error0("sched.mode = %s (%s) is not supported here: %s; set sched.mode = off", mode,
                   config_origin(r->cfg, "sched.mode"), why);
        return STATUS_INPUT;
    }
    int dp = train_dp_size(r);
    s->weights = calloc((size_t)dp, sizeof *s->weights);
    s->counts = calloc((size_t)dp, sizeof *s->counts);
    if (!s->weights || !s->counts) return STATUS_NOMEM;
    for (int d = 0; d < dp; d++) s->weights[d] = 1.0;
    if (s->mode == TRAIN_SCHED_MODE_STATIC) TRY(sched_parse_shares(r, s->weights));
    return sched_assign(r, s->weights, s->mode == TRAIN_SCHED_MODE_STATIC ? "sched.shares" : "equal until measured");
}

void train_sched_free(train_run *r)
{
    free(r->share.weights), free(r->share.counts);
    r->share.weights = NULL, r->share.counts = NULL;
}

int train_micro_batches(const train_run *r)
{
    return r->share.mode == TRAIN_SCHED_MODE_OFF ? r->tb.accum : data_micro_batches(r->train_data);
}

int train_micro_batch_size(const train_run *r, int a)
{
    return r->share.mode == TRAIN_SCHED_MODE_OFF ? r->tb.micro_batch : data_micro_batch_size(r->train_data, a);
}

/* After a resume: the checkpoint's shares when they were assigned over this many ranks
 * for this global batch and tile it (checked over the ranks), else the config's. */
status train_sched_resume(train_run *r, const ckpt_content *c, const ckpt_info *info)
{
    train_sched *s = &r->share;
    if (s->mode == TRAIN_SCHED_MODE_OFF) return STATUS_OK;
    const ckpt_blob *b = train_ckpt_blob(c, TRAIN_CKPT_SCHED);
    int dp = train_dp_size(r);
    int ok = b && b->loaded && !info->resharded && s->ck.dp_size == dp && s->ck.global_batch == r->tb.global_batch;
    int64_t mine[2] = { s->ck.first, s->ck.count }, *all = malloc(2 * (size_t)dp * sizeof *all);
    if (!all) return STATUS_NOMEM;
    status st = comm_ctl_allgather(train_dp_ctl(r), mine, 2, MPI_INT64_T, all, 2, MPI_INT64_T);
    int64_t at = 0;
    for (int d = 0; d < dp && st == STATUS_OK; d++) {
        ok &= all[2 * d] == at && all[2 * d + 1] >= 0;
        at += all[2 * d + 1];
    }
    ok &= at == r->tb.global_batch;
    if (st == STATUS_OK) st = comm_ctl_allreduce(train_dp_ctl(r), MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND);
    if (st == STATUS_OK && ok) {
        for (int d = 0; d < dp; d++) s->counts[d] = all[2 * d + 1];
        data_set_share(r->train_data, (uint64_t)s->ck.first, (uint64_t)s->ck.count);
        if (r->rt->rank == 0) printf("sched: resumed with the checkpoint's shares (assigned at step %lld)\n",
                                     (long long)s->ck.assigned_at);
    } else if (st == STATUS_OK) {
        s->ck.global_batch = 0, s->ck.speed = 0;
        st = sched_assign(r, s->weights, "the checkpoint holds no shares for this layout");
    }
    free(all);
    return st;
}

/* Balanced: this rank's compute time of the step; every sched.interval steps the
 * speeds (an EMA, samples per second) gathered and the shares assigned anew. */
status train_sched_after_step(train_run *r, const train_step_stats *ss)
{
    train_sched *s = &r->share;
    if (s->mode == TRAIN_SCHED_MODE_OFF) return STATUS_OK;
    if (s->ck.global_batch != r->tb.global_batch)  /* the global batch changed (elastic, reload) */
        TRY(sched_assign(r, s->weights, "the global batch changed"));
    if (s->mode != TRAIN_SCHED_MODE_BALANCED) return STATUS_OK;
    /* busy: the step but its wait for the others (a slow rank's own delays count, the
       fast ranks' waits for it do not) */
    s->compute_s += (ss->step_ms - ss->comm_wait_ms) * 1e-3;
    s->samples += s->ck.count;
    if (++s->steps < s->interval) return STATUS_OK;
    double now = s->compute_s > 0 && s->samples > 0 ? (double)s->samples / s->compute_s : s->ck.speed;
    s->ck.speed = s->ck.speed > 0 ? 0.5 * s->ck.speed + 0.5 * now : now;
    s->compute_s = 0, s->samples = 0, s->steps = 0;
    TRY(comm_ctl_allgather(train_dp_ctl(r), &s->ck.speed, 1, MPI_DOUBLE, s->weights, 1, MPI_DOUBLE));
    char why[160];
    snprintf(why, sizeof why, "balanced: speeds measured over %ld steps, samples/s", s->interval);
    size_t at = strlen(why);
    for (int d = 0; d < train_dp_size(r) && at < sizeof why - 12; d++)
        at += (size_t)snprintf(why + at, sizeof why - at, "%s%.1f", d ? "," : " ", s->weights[d]);
    return sched_assign(r, s->weights, why);
}
