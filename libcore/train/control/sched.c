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
 * Modes: static (in proportion to sched.shares); balanced (in proportion to each rank's
 * measured samples per second of busy time: every rank then needs the same time, and
 * the step, the slowest rank's, is as short as it gets); performance (the shortest
 * predicted step of a fixed time plus the share over a forward-backward rate per rank,
 * water-filled; a rank whose fixed time alone passes it is held at the floor); economy
 * (the cheapest ranks per sample until sched.target samples/s, the rest at the floor).
 * Measurements are EMAs refreshed every sched.interval steps and gathered with one
 * allgather. Every rank gets at least sched.min_share of an equal share.
 *
 * The one design decision: the assignment is computed, not sent. Every rank runs the
 * same planning and largest-remainder apportionment on the same gathered numbers, so
 * all reach the same shares with no broadcast and no rank can disagree. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

/* Splits gb samples over n ranks in proportion to w (w <= 0 counts as 0; all 0: equal),
 * each at least `floor_n`: floor_n each, the rest by weight rounded down, then one more
 * to the largest remainders (the lower rank first on ties). frac: n doubles of scratch.
 * STATUS_INPUT when the floors alone exceed gb. */
status train_sched_apportion(const double *w, int n, int64_t gb, int64_t floor_n, int64_t *out, double *frac)
{
    if (floor_n * n > gb) return STATUS_INPUT;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += w[i] > 0 ? w[i] : 0;
    int64_t rest = gb - floor_n * n, given = 0;
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
    int64_t *counts = s->next;
    status st = train_sched_apportion(w, dp, r->tb.global_batch, sched_floor(r), counts, s->plan);
    if (st != STATUS_OK) {
        log_error0("sched.min_share = %g: %d ranks x %lld samples is more than the global batch of %d",
                   s->min_share, dp, (long long)sched_floor(r), r->tb.global_batch);
        return st;
    }
    bool changed = s->ck.global_batch != r->tb.global_batch;
    int64_t first = 0;
    for (int d = 0; d < dp; d++) {
        changed |= counts[d] != s->counts[d];
        if (d < me) first += counts[d];
        s->counts[d] = counts[d];
    }
    s->ck.first = first, s->ck.count = s->counts[me];
    s->ck.global_batch = r->tb.global_batch, s->ck.dp_size = dp, s->ck.assigned_at = r->step;
    data_set_share(r->train_data, (uint64_t)s->ck.first, (uint64_t)s->ck.count);
    if (changed && r->rt->rank == 0) {
        printf("sched: step %ld: shares of the global batch %d:", r->step, r->tb.global_batch);
        json_t *shares = json_array();
        for (int d = 0; d < dp; d++) {
            printf("%s%lld", d ? "," : " ", (long long)s->counts[d]);
            json_array_append_new(shares, json_integer((json_int_t)s->counts[d]));
        }
        printf(" (%s)\n", why);
        json_t *rec = json_pack("{s:s, s:I, s:s, s:o, s:s}", "kind", "sched", "step", (json_int_t)r->step, "mode",
                                config_str(r->cfg, "sched.mode"), "shares", shares, "reason", why);
        if (rec && s->meas[0] > 0) {  /* measured: each rank's busy samples/s, forward-backward samples/s, fixed s */
            json_t *v = json_array(), *f = json_array(), *c = json_array();
            for (int d = 0; d < dp; d++) {
                json_array_append_new(v, json_real(s->meas[3 * d]));
                json_array_append_new(f, json_real(s->meas[3 * d + 1]));
                json_array_append_new(c, json_real(s->meas[3 * d + 2]));
            }
            json_object_set_new(rec, "speeds", v), json_object_set_new(rec, "rates", f);
            json_object_set_new(rec, "fixed_s", c);
        }
        train_emit(r, rec);
    }
    return STATUS_OK;
}

status train_sched_reassign(train_run *r, const char *why)
{
    return r->share.mode == TRAIN_SCHED_MODE_OFF ? STATUS_OK : sched_assign(r, r->share.weights, why);
}

/* A comma-separated list of dp positive numbers (key's value) into w; STATUS_INPUT naming
 * the key otherwise. */
static status sched_parse_list(train_run *r, const char *key, double *w, const char *example)
{
    const char *text = config_str(r->cfg, key), *p = text;
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
    const char *mode = config_str(r->cfg, "sched.mode");
    bool read = !strcmp(key, "sched.shares") ? !strcmp(mode, "static") : !strcmp(mode, "economy");
    log_error0("%s = '%s' (%s): needs %d positive numbers, one per data-parallel rank, comma-separated (e.g. %s)",
               key, text, config_origin(r->cfg, key), dp, example);
    if (!read) log_error0("HINT: sched.mode = %s does not read %s, but a value given is checked all the same (a "
                          "typo must not pass in one mode and fail in another); leave it empty", mode, key);
    return STATUS_INPUT;
}

/* This rank's memory headroom in MiB: the host's available memory (MemAvailable) over the
 * ranks that share it, or what its cgroup still allows if that is less; -1 unknown. */
static double sched_headroom_mib(const train_run *r)
{
    double avail = -1, v;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &v) == 1) avail = v / 1024 / (r->rt->local_size > 0 ? r->rt->local_size : 1);
    if (f) fclose(f);
    static const char *const limits[][2] = { { "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current" },
                                             { "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                               "/sys/fs/cgroup/memory/memory.usage_in_bytes" } };
    for (int k = 0; k < 2; k++) {
        double lim, use;
        FILE *a = fopen(limits[k][0], "r"), *b = fopen(limits[k][1], "r");
        if (a && b && fscanf(a, "%lf", &lim) == 1 && fscanf(b, "%lf", &use) == 1 && lim < 1e18 && lim > use) {
            double cg = (lim - use) / 1048576 / (r->rt->local_size > 0 ? r->rt->local_size : 1);
            if (avail < 0 || cg < avail) avail = cg;
        }
        if (a) fclose(a);
        if (b) fclose(b);
    }
    return avail;
}

/* Rank 0 prints each rank's host, CPUs, memory headroom and device with the precision it
 * runs (device.precision = auto resolves per rank: a GPU's tensor cores, a CPU's fp32). A
 * share never needs more memory than the configured micro-batch (it is more micro-batches,
 * not larger ones), so the headroom is reported, not planned with. */
static status sched_print_ranks(train_run *r)
{
    enum { W = 512 };
    char mine[W], *all = r->rt->rank == 0 ? malloc((size_t)W * (size_t)r->rt->size) : NULL;
    if (r->rt->rank == 0 && !all) return STATUS_NOMEM;
    snprintf(mine, sizeof mine, "%.64s cpus %.64s, %.0f MiB headroom: %.256s", r->rt->host, r->rt->cpus[0] ? r->rt->cpus : "-",
             sched_headroom_mib(r), r->dev.describe);
    status st = comm_ctl_gather(train_ctl(r), mine, W, MPI_CHAR, all, W, MPI_CHAR, 0);
    for (int k = 0; st == STATUS_OK && all && k < r->rt->size; k++) printf("sched: rank %d: %.*s\n", k, W, all + (size_t)k * W);
    free(all);
    return st;
}

status train_sched_setup(train_run *r)
{
    train_sched *s = &r->share;
    const char *mode = config_str(r->cfg, "sched.mode");
    memset(s, 0, sizeof *s);
    static const char *const names[] = { "off", "static", "balanced", "performance", "economy" };
    for (int k = 0; k < 5; k++)
        if (!strcmp(mode, names[k])) s->mode = (train_sched_mode)k;
    if (s->mode == TRAIN_SCHED_MODE_OFF) return STATUS_OK;
    s->min_share = config_float(r->cfg, "sched.min_share");
    s->floor_first = config_bool(r->cfg, "compat.sched_floor_first");
    s->interval = (long)config_int(r->cfg, "sched.interval");
    s->target = config_float(r->cfg, "sched.target");
    const char *why = NULL;
    char bn[96];
    snprintf(bn, sizeof bn, "%s's batch normalisation depends on the micro-batch", model_family_name(&r->spec));
    if (model_state_table(&r->m)) why = bn;  /* batch-norm statistics: model_set_micro_batch refuses them */
    else if (device_is_gpu(&r->dev)) why = "device.kind = cpu only so far";
    else if (r->fixed_batch) why = "data.train = synthetic-fixed trains on one fixed micro-batch";
    if (why) {
        log_error0("sched.mode = %s (%s) is not supported here: %s; set sched.mode = off", mode,
                   config_origin(r->cfg, "sched.mode"), why);
        return STATUS_INPUT;
    }
    if (s->mode == TRAIN_SCHED_MODE_ECONOMY && !(s->target > 0)) {
        log_error0("sched.mode = economy (%s) needs sched.target, the samples per second to reach with the least "
                   "cost (e.g. --set sched.target=400)", config_origin(r->cfg, "sched.mode"));
        return STATUS_INPUT;
    }
    int dp = train_dp_size(r);
    s->weights = calloc((size_t)dp, sizeof *s->weights);
    s->costs = calloc((size_t)dp, sizeof *s->costs);
    s->meas = calloc(3 * (size_t)dp, sizeof *s->meas);
    s->plan = calloc(3 * (size_t)dp, sizeof *s->plan);
    s->order = calloc((size_t)dp, sizeof *s->order);
    s->in = calloc((size_t)dp, sizeof *s->in);
    s->counts = calloc((size_t)dp, sizeof *s->counts);
    s->next = calloc((size_t)dp, sizeof *s->next);
    if (!s->weights || !s->costs || !s->meas || !s->plan || !s->order || !s->in || !s->counts || !s->next)
        return STATUS_NOMEM;
    for (int d = 0; d < dp; d++) s->weights[d] = s->costs[d] = 1.0;
    /* a list is checked in every mode, also one the mode does not read (economy reads the costs,
       static the shares): a typo must not pass in one mode that another refuses */
    if (s->mode == TRAIN_SCHED_MODE_STATIC || config_str(r->cfg, "sched.shares")[0])
        TRY(sched_parse_list(r, "sched.shares", s->mode == TRAIN_SCHED_MODE_STATIC ? s->weights : s->plan,
                             "1,1,0.4,0.4"));
    if (config_str(r->cfg, "sched.costs")[0])
        TRY(sched_parse_list(r, "sched.costs", s->mode == TRAIN_SCHED_MODE_ECONOMY ? s->costs : s->plan, "3,3,1,1"));
    TRY(sched_print_ranks(r));
    if (r->rt->rank == 0) {
        printf("sched: %s over %d data-parallel ranks, global batch %d, micro-batches of at most %d, floor %lld "
               "samples (sched.min_share = %g)", mode, dp, r->tb.global_batch, r->tb.micro_batch,
               (long long)sched_floor(r), s->min_share);
        if (s->mode != TRAIN_SCHED_MODE_STATIC) printf(", measured every %ld steps", s->interval);
        if (s->mode == TRAIN_SCHED_MODE_ECONOMY) printf(", target %g samples/s", s->target);
        printf("\n");
    }
    return sched_assign(r, s->weights, s->mode == TRAIN_SCHED_MODE_STATIC ? "sched.shares" : "equal until measured");
}

void train_sched_free(train_run *r)
{
    train_sched *s = &r->share;
    free(s->weights), free(s->costs), free(s->meas), free(s->plan), free(s->order), free(s->in), free(s->counts), free(s->next);
    s->weights = s->costs = s->meas = s->plan = NULL, s->order = NULL, s->in = NULL, s->counts = s->next = NULL;
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

/* The samples x[d] each rank takes when the ranks in `in` finish together at T (a rank's
 * predicted step: fixed + x / rate), the others held at `floor`; sum x = gb. Returns T,
 * found by bisection (the sum grows with T). */
static double sched_waterfill(const double *rate, const double *fixed, const bool *in, int n, double gb, double floor_n,
                              double *x)
{
    double rest = gb, lo = 0, hi = 0;
    for (int d = 0; d < n; d++) {
        if (!in[d]) rest -= floor_n;
        else hi = fmax(hi, fixed[d] + gb / rate[d]);
    }
    for (int it = 0; it < 200; it++) {
        double T = 0.5 * (lo + hi), sum = 0;
        for (int d = 0; d < n; d++)
            if (in[d]) sum += fmax(floor_n, rate[d] * (T - fixed[d]));
        if (sum < rest) lo = T;
        else hi = T;
    }
    for (int d = 0; d < n; d++) x[d] = in[d] ? fmax(floor_n, rate[d] * (hi - fixed[d])) : floor_n;
    return hi;
}

/* The predicted step of an assignment: its slowest rank's fixed + x / rate. */
static double sched_step_time(const double *rate, const double *fixed, const double *x, int n)
{
    double t = 0;
    for (int d = 0; d < n; d++) t = fmax(t, fixed[d] + x[d] / rate[d]);
    return t;
}

void train_sched_balanced_weights(const double *speed, int n, double gb, double floor_n, bool floor_first,
                                  double *scratch, bool *in, double *weights)
{
    double *rate = scratch, *fixed = scratch + n, *x = scratch + 2 * n;
    for (int d = 0; d < n; d++) {
        if (floor_first) weights[d] = speed[d];  /* the floor first, the rest by speed: the floor dilutes it */
        rate[d] = fmax(speed[d], 1e-9), fixed[d] = 0, in[d] = true;
    }
    if (floor_first) return;
    sched_waterfill(rate, fixed, in, n, gb, floor_n, x);  /* no fixed part: in proportion above the floor */
    for (int d = 0; d < n; d++) weights[d] = x[d] - floor_n;
}

/* The modes' plans from the gathered measurements (meas: speed, rate, fixed_s per rank):
 * the samples each rank should take into s->weights, what was decided into why. Every
 * rank computes the same from the same numbers. */
static void sched_plan(train_run *r, char *why, size_t cap)
{
    train_sched *s = &r->share;
    int dp = train_dp_size(r);
    double gb = r->tb.global_batch, fl = (double)sched_floor(r);
    double *rate = s->plan, *fixed = s->plan + dp, *x = s->plan + 2 * dp;
    bool *in = s->in;
    bool balanced = s->mode == TRAIN_SCHED_MODE_BALANCED;
    for (int d = 0; d < dp; d++) {  /* balanced: the busy speed, no fixed part (in proportion above the floor) */
        rate[d] = fmax(s->meas[3 * d + (balanced ? 0 : 1)], 1e-9), fixed[d] = balanced ? 0 : s->meas[3 * d + 2];
        in[d] = true;
    }
    size_t at = 0;
    if (balanced) {
        for (int d = 0; d < dp; d++) rate[d] = s->meas[3 * d];
        train_sched_balanced_weights(rate, dp, gb, fl, s->floor_first, s->plan, in, s->weights);
        at += (size_t)snprintf(why, cap, "balanced%s: busy samples/s", s->floor_first ? " (compat.sched_floor_first)" : "");
        for (int d = 0; d < dp && at < cap - 12; d++)
            at += (size_t)snprintf(why + at, cap - at, "%s%.1f", d ? "," : " ", fmax(s->meas[3 * d], 1e-9));
        return;
    } else if (s->mode == TRAIN_SCHED_MODE_PERFORMANCE) {
        double T = sched_waterfill(rate, fixed, in, dp, gb, fl, x);
        at += (size_t)snprintf(why, cap, "performance: predicted step %.1f ms", 1e3 * sched_step_time(rate, fixed, x, dp));
        for (int d = 0; d < dp && at < cap - 80; d++)  /* ranks whose floor alone passes the others' step */
            if (fixed[d] + fl / rate[d] > T * (1 + 1e-9))
                at += (size_t)snprintf(why + at, cap - at, "; rank %d %s (%.1f ms fixed + %.2f ms per sample "
                                       "against %.1f ms)", d, fl > 0 ? "held at the floor" : "excluded", 1e3 * fixed[d], 1e3 / rate[d], 1e3 * T);
    } else {  /* economy: the cheapest per sample first, until the predicted rate reaches the target */
        int *order = s->order;
        for (int d = 0; d < dp; d++) order[d] = d, in[d] = false;
        for (int i = 1; i < dp; i++)  /* insertion sort by cost / rate, rank on ties */
            for (int j = i; j > 0 && s->costs[order[j]] / rate[order[j]] < s->costs[order[j - 1]] / rate[order[j - 1]]; j--) {
                int t = order[j];
                order[j] = order[j - 1], order[j - 1] = t;
            }
        double step = 0, cost = 0;
        int k = 0;
        while (k < dp) {
            in[order[k++]] = true;
            sched_waterfill(rate, fixed, in, dp, gb, fl, x);
            step = sched_step_time(rate, fixed, x, dp);
            if (gb / step >= s->target) break;
        }
        for (int d = 0; d < dp; d++) cost += in[d] ? s->costs[d] : 0;
        bool reach = gb / step >= s->target;
        at += (size_t)snprintf(why, cap, "economy: %d of %d ranks (cost %.3g per s) for a predicted %.1f samples/s, "
                               "target %g%s", k, dp, cost, gb / step, s->target,
                               reach ? "" : " (out of reach: every rank at work)");
        if (!reach && !s->told && r->rt->rank == 0)
            printf("sched: step %ld: sched.target = %g samples/s is out of reach: %.1f predicted with every rank at work\n",
                   r->step, s->target, gb / step);
        s->told = !reach;
    }
    for (int d = 0; d < dp; d++) s->weights[d] = x[d] - fl;  /* apportioned above the floor */
}

/* After each step: this rank's busy time (the step less its wait for the others: a slow
 * rank's own delays count, the fast ranks' waits for it do not) and forward + backward
 * time; every sched.interval steps (balanced, performance, economy) the EMAs gathered,
 * the plan made and the shares assigned anew. */
status train_sched_after_step(train_run *r, const train_step_stats *ss)
{
    train_sched *s = &r->share;
    if (s->mode == TRAIN_SCHED_MODE_OFF) return STATUS_OK;
    if (s->ck.global_batch != r->tb.global_batch)  /* the global batch changed (elastic, reload) */
        TRY(sched_assign(r, s->weights, "the global batch changed"));
    if (s->mode == TRAIN_SCHED_MODE_STATIC) return STATUS_OK;
    s->busy_s += (ss->step_ms - ss->comm_wait_ms) * 1e-3;
    s->fb_s += (ss->fwd_ms + ss->bwd_ms) * 1e-3;
    s->samples += s->ck.count;
    if (++s->steps < s->interval) return STATUS_OK;
    train_sched_ckpt *ck = &s->ck;
    double speed = s->busy_s > 0 && s->samples > 0 ? (double)s->samples / s->busy_s : ck->speed;
    double rate = s->fb_s > 0 && s->samples > 0 ? (double)s->samples / s->fb_s : ck->rate;
    double fixed = fmax(0.0, (s->busy_s - s->fb_s) / (double)s->steps);
    bool first = ck->speed <= 0;
    ck->speed = first ? speed : 0.5 * ck->speed + 0.5 * speed;
    ck->rate = first ? rate : 0.5 * ck->rate + 0.5 * rate;
    ck->fixed_s = first ? fixed : 0.5 * ck->fixed_s + 0.5 * fixed;
    s->busy_s = s->fb_s = 0, s->samples = 0, s->steps = 0;
    double mine[3] = { ck->speed, ck->rate, ck->fixed_s };
    TRY(comm_ctl_allgather(train_dp_ctl(r), mine, 3, MPI_DOUBLE, s->meas, 3, MPI_DOUBLE));
    char why[512];
    sched_plan(r, why, sizeof why);
    return sched_assign(r, s->weights, why);
}
