/* fed_state — the server's state around the rounds: its setup (server optimizer,
 * ledger, the privacy budget's derivation), checkpoints through libcore/ckpt (the
 * trainer's schema: params, optim/m, optim/v, buffers, plus the blob "fed", the
 * ledger), the held-out evaluation and the per-round metrics (metrics.jsonl, TensorBoard
 * under RUN_DIR/tb, one line on stdout).
 *
 * The one design decision: the server writes its checkpoints alone (a writer over
 * MPI_COMM_SELF): the clients hold no state between rounds, so the server's state is
 * the run's, and a checkpoint opens in nebula-ckpt like a training checkpoint of the
 * same model. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"
#include "fed_impl.h"

/* The privacy budget: the noise multiplier for fed.rounds, or the rounds sigma allows. */
static status fed_budget(fed_run *f)
{
    const config *cfg = f->cfg;
    if (!f->dp || f->target_eps <= 0) return STATUS_OK;
    if (!strcmp(config_str(cfg, "dp.budget"), "noise")) {
        double sigma;
        if (fed_rdp_sigma_for(f->q, f->rounds, f->delta, f->target_eps, &sigma) != STATUS_OK) {
            log_error0("dp.target_epsilon = %g (%s): no noise multiplier up to %g reaches it in %lld rounds at q = %g",
                       f->target_eps, config_origin(cfg, "dp.target_epsilon"), FED_RDP_SIGMA_MAX, (long long)f->rounds,
                       f->q);
            return STATUS_INPUT;
        }
        f->led.sigma = sigma;
        if (!f->quiet)
            printf("fed: privacy budget epsilon %g at delta %g over %lld rounds (q = %.4g): noise multiplier %.6g\n",
                   f->target_eps, f->delta, (long long)f->rounds, f->q, sigma);
    } else {
        int64_t n = fed_rdp_steps_for(f->q, f->led.sigma, f->delta, f->target_eps);
        if (n <= 0) {
            log_error0("dp.target_epsilon = %g (%s): even one round at noise multiplier %g and q = %g spends more",
                       f->target_eps, config_origin(cfg, "dp.target_epsilon"), f->led.sigma, f->q);
            return STATUS_INPUT;
        }
        if (n < f->rounds) f->rounds = n;
        if (!f->quiet)
            printf("fed: privacy budget epsilon %g at delta %g with noise multiplier %g (q = %.4g): %lld rounds\n",
                   f->target_eps, f->delta, f->led.sigma, f->q, (long long)f->rounds);
    }
    return STATUS_OK;
}

static int fed_fill_json(void *ctx, int fd)
{
    return json_dumpfd(ctx, fd, JSON_COMPACT) == 0 ? 0 : -1;
}

/* RUN_DIR/clients.json: each client's samples (its FedAvg weight without DP) and, for
 * images, its label counts: what the partition made. */
static status fed_write_clients(fed_run *f)
{
    json_t *j = json_object(), *samples = json_array(), *labels = json_array();
    int K = model_num_classes(&f->spec);
    for (int c = 0; c < f->nclients; c++) {
        json_array_append_new(samples, json_integer(f->shard_start[c + 1] - f->shard_start[c]));
        if (!f->train.images) continue;
        json_t *h = json_array();
        for (int k = 0; k < K; k++) {
            int64_t n = 0;
            for (int64_t i = f->shard_start[c]; i < f->shard_start[c + 1]; i++) n += f->train.labels[f->shard[i]] == k;
            json_array_append_new(h, json_integer(n));
        }
        json_array_append_new(labels, h);
    }
    json_object_set_new(j, "clients", json_integer(f->nclients));
    json_object_set_new(j, "partition", json_string(config_str(f->cfg, "fed.partition")));
    json_object_set_new(j, "samples", samples);
    json_object_set_new(j, "labels", labels);
    char path[4200];
    snprintf(path, sizeof path, "%s/clients.json", f->run_dir);
    status st = path_write_atomic(path, "clients table", fed_fill_json, j);
    json_decref(j);
    return st;
}

static void fed_content(fed_run *f, ckpt_content *c)
{
    train_ckpt_model_content(c, &f->ev, f->sm, f->sv, NULL, f->config_text);
    c->step = f->led.round;
    c->timeout_s = config_float(f->cfg, "comm.timeout");
    c->blobs[c->nblobs++] = (ckpt_blob){ "fed", &f->led, sizeof f->led, false, false };
}

status fed_ckpt_init(fed_run *f)
{
    const config *cfg = f->cfg;
    const char *so = config_str(cfg, "fed.server_optimizer");
    fed_server_kind kind = !strcmp(so, "adam") ? FED_SERVER_ADAM : !strcmp(so, "yogi") ? FED_SERVER_YOGI : FED_SERVER_AVG;
    if (kind != FED_SERVER_AVG) {
        f->sm = malloc(f->np * sizeof *f->sm);
        f->sv = malloc(f->np * sizeof *f->sv);
        if (!f->sm || !f->sv) return STATUS_NOMEM;
    }
    fed_server_init(&f->sopt, kind, config_float(cfg, "fed.server_lr"), config_float(cfg, "fed.server_beta1"),
                    config_float(cfg, "fed.server_beta2"), config_float(cfg, "fed.server_tau"), f->sm, f->sv, f->np);
    memset(&f->led, 0, sizeof f->led);
    fed_rdp_init(&f->led.rdp);
    double sb = config_float(cfg, "dp.clip_noise");
    f->led.clip = (fed_clip_state){ config_float(cfg, "dp.clip"), config_float(cfg, "dp.clip_quantile"),
                                    config_float(cfg, "dp.clip_lr"), sb > 0 ? sb : fed_expected_clients(f) / 20 };
    f->led.sigma = config_float(cfg, "dp.noise_multiplier");
    if (f->dp && f->led.sigma <= 0 && f->target_eps <= 0) {
        log_error0("dp.mode = %s with dp.noise_multiplier = 0 (%s) adds no noise: set a noise multiplier or "
                   "dp.target_epsilon", config_str(cfg, "dp.mode"), config_origin(cfg, "dp.noise_multiplier"));
        return STATUS_INPUT;
    }
    TRY(fed_budget(f));
    f->sigma_update = f->led.sigma;
    if (f->adaptive) {
        f->sigma_update = fed_clip_sigma_update(f->led.sigma, f->led.clip.sigma_b);
        if (!isfinite(f->sigma_update)) {
            log_error0("dp.adaptive_clip: the count's noise (dp.clip_noise = %g) must exceed half the noise multiplier "
                       "%g for the updates to keep a share of the budget (Andrew et al., Theorem 1)",
                       f->led.clip.sigma_b, f->led.sigma);
            return STATUS_INPUT;
        }
    }
    f->t0 = MPI_Wtime();
    if (f->audit) return STATUS_OK;  /* the audit reads a checkpoint and writes nothing */
    char what[8400], why[256];
    bool self;
    if (path_in_run_state(f->run_dir, what, sizeof what, &self)) {
        log_error0("fed.run_dir %s %s %s: the run would write its metrics, clients table and checkpoints there\n"
                   "HINT: give another --run-dir (docs/design.md#outputs)", f->run_dir, self ? "is" : "lies inside", what);
        return STATUS_INPUT;
    }
    TRY(path_mkdirs(f->run_dir, "fed.run_dir"));
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", f->run_dir);
    if (path_create_regular(path, O_WRONLY | O_APPEND, 0644, &f->metrics_fd, why, sizeof why) != 0) {
        log_error0("cannot open %s for appending: %s", path, why);
        return STATUS_INPUT;
    }
    TRY(fed_write_clients(f));
    snprintf(path, sizeof path, "%s/tb", f->run_dir);
    if (tfevent_open(&f->tb, path) != STATUS_OK) f->tb = NULL;  /* logged; the run goes on without */
    if (f->ckpt_every > 0) {
        snprintf(path, sizeof path, "%s/ckpt", f->run_dir);
        ckpt_content shape;
        fed_content(f, &shape);
        TRY(ckpt_writer_init(&f->ckpt, MPI_COMM_SELF, path, (int)config_int(cfg, "ckpt.keep_last"), false, &shape));
    }
    return STATUS_OK;
}

status fed_ckpt_save(fed_run *f)
{
    ckpt_content c;
    fed_content(f, &c);
    TRY(ckpt_save(f->ckpt, &c));
    printf("fed: checkpoint of round %lld committed\n", (long long)f->led.round);
    return STATUS_OK;
}

status fed_resume(fed_run *f)
{
    if (f->rank != 0) return STATUS_OK;
    const char *which = config_str(f->cfg, "ckpt.resume");
    if (!strcmp(which, "none")) return STATUS_OK;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", f->run_dir);
    ckpt_content c;
    fed_content(f, &c);
    ckpt_info info;
    fed_ledger keep = f->led;
    TRY(ckpt_load(MPI_COMM_SELF, dir, which, &c, &info));
    if (info.step < 0) return STATUS_OK;
    char why[256];
    if (fed_rdp_check(&f->led.rdp, why, sizeof why) != STATUS_OK || f->led.round != info.step || f->led.round < 0 ||
        !(f->led.clip.C > 0) || f->led.stop < 0 || f->led.stop > 2) {
        log_error0("%s: the ledger (blob fed) is not what a run writes: round %lld for step %lld, clip %g%s%s",
                   info.path, (long long)f->led.round, (long long)info.step, f->led.clip.C, why[0] ? ": " : "", why);
        f->led = keep;
        return STATUS_CORRUPT;
    }
    f->led.stop = 0;
    f->led.sigma = keep.sigma;  /* the configuration's (a budget derives the same) */
    f->sopt.t = f->led.round;
    printf("fed: resumed from %s (round %lld, epsilon %.4g)\n", info.path, (long long)f->led.round, f->led.eps);
    return STATUS_OK;
}

double fed_class_xent(const float *z, int C, int y, int *top)
{
    double mx = z[0];
    int arg = 0;
    for (int k = 1; k < C; k++)
        if (z[k] > mx) mx = z[k], arg = k;
    double s = 0;
    for (int k = 0; k < C; k++) s += exp(z[k] - mx);
    if (top) *top = arg;
    return log(s) + mx - z[y];
}

void fed_batch_put(model_batch *b, int j, const fed_data *d, int64_t s)
{
    if (d->images) {
        size_t img = 3 * (size_t)d->H * (size_t)d->W;
        memcpy(b->images + (size_t)j * img, d->x + (size_t)s * img, img * sizeof(float));
        b->targets[j] = d->labels[s];
    } else {
        size_t T = (size_t)d->T;
        memcpy(b->ids + (size_t)j * T, d->ids + (size_t)s * T, T * sizeof(int32_t));
        memcpy(b->targets + (size_t)j * T, d->targets + (size_t)s * T, T * sizeof(int32_t));
    }
}

status fed_evaluate(fed_run *f, double *loss, double *acc)
{
    const fed_data *d = &f->val;
    int B = f->eval_batch;
    double sum = 0;
    int64_t hits = 0, counted = 0;
    if (d->n < B) return STATUS_OK;
    for (int64_t start = 0; start < d->n; start += B) {
        int64_t s0 = start + B > d->n ? d->n - B : start;  /* the last batch overlaps: only its new samples count */
        for (int j = 0; j < B; j++) fed_batch_put(&f->evbatch, j, d, s0 + j);
        TRY(model_forward(&f->ev, &f->evbatch, false));
        int C = 0;
        const float *z = model_class_logits(&f->ev, &C);
        if (!z) {  /* a language model: its mean loss per batch */
            if (s0 == start) sum += model_loss(&f->ev) * B, counted += B;
            continue;
        }
        for (int j = 0; j < B; j++) {
            if (s0 + j < start) continue;
            int top;
            sum += fed_class_xent(z + (size_t)j * C, C, f->evbatch.targets[j], &top);
            hits += top == f->evbatch.targets[j], counted++;
        }
    }
    *loss = counted ? sum / counted : NAN;
    *acc = d->images && counted ? (double)hits / counted : NAN;
    return STATUS_OK;
}

/* A number, or null listed in `nonfinite` (docs/metrics.md). */
static void fed_num(json_t *j, json_t *nonfinite, const char *key, double v)
{
    json_object_set_new(j, key, isfinite(v) ? json_real(v) : json_null());
    if (!isfinite(v)) json_array_append_new(nonfinite, json_string(key));
}

/* The launch number: one more than the highest "launch" in the file so far. */
static int fed_launch_number(int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size == 0) return 1;
    size_t n = sb.st_size > 65536 ? 65536 : (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    int best = 0;
    if (buf && path_read_all_at(fd, buf, n, (uint64_t)sb.st_size - n) == 0) {
        buf[n] = 0;
        for (char *p = strstr(buf, "\"launch\":"); p; p = strstr(p + 1, "\"launch\":")) {
            int k = atoi(p + 9);
            if (k > best) best = k;
        }
    }
    free(buf);
    return best + 1;
}

void fed_metrics_round(fed_run *f, int64_t sampled, int64_t dropped, int64_t refused, int64_t aggregated,
                       double loss, double eval_loss, double eval_acc, double secs)
{
    int64_t r = f->led.round;
    double eps = f->dp ? f->led.eps : NAN, clip = f->dp ? f->led.clip.C : NAN;
    bool evaluated = isfinite(eval_loss);
    double eps_s = f->dpsgd_clip > 0 ? fed_dpsgd_epsilon(f, r) : NAN;
    if (f->quiet) return;  /* a shadow run of the audit: nothing printed or written */
    printf("round=%lld sampled=%lld dropped=%lld refused=%lld aggregated=%lld loss=%.4f", (long long)r,
           (long long)sampled, (long long)dropped, (long long)refused, (long long)aggregated, loss);
    if (evaluated) printf(" eval_loss=%.4f", eval_loss);
    if (isfinite(eval_acc)) printf(" acc=%.4f", eval_acc);
    if (f->dp) printf(" eps=%.4f clip=%.4g", eps, clip);
    if (f->dpsgd_clip > 0) printf(" eps_sample=%.4f", eps_s);
    printf(" round_s=%.3f\n", secs);
    fflush(stdout);
    if (!f->launch) f->launch = f->metrics_fd >= 0 ? fed_launch_number(f->metrics_fd) : 1;
    json_t *j = json_object(), *nonfinite = json_array();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[80];
    snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    const char *job = getenv("SLURM_JOB_ID");
    json_object_set_new(j, "kind", json_string("fed_round"));
    json_object_set_new(j, "step", json_integer(r));
    json_object_set_new(j, "time", json_string(when));
    json_object_set_new(j, "elapsed_s", json_real(MPI_Wtime() - f->t0));
    json_object_set_new(j, "launch", json_integer(f->launch));
    json_object_set_new(j, "job", json_string(job && job[0] ? job : "-"));
    json_object_set_new(j, "round", json_integer(r));
    json_object_set_new(j, "clients_sampled", json_integer(sampled));
    json_object_set_new(j, "clients_dropped", json_integer(dropped));
    json_object_set_new(j, "updates_refused", json_integer(refused));
    json_object_set_new(j, "clients_aggregated", json_integer(aggregated));
    fed_num(j, nonfinite, "loss", loss);
    if (evaluated) fed_num(j, nonfinite, "eval_loss", eval_loss);
    if (isfinite(eval_acc)) fed_num(j, nonfinite, "acc", eval_acc);
    if (f->dp) {
        fed_num(j, nonfinite, "eps", eps);
        json_object_set_new(j, "delta", json_real(f->delta));
        json_object_set_new(j, "sigma", json_real(f->led.sigma));
        fed_num(j, nonfinite, "clip", clip);
    }
    if (f->dpsgd_clip > 0) {
        fed_num(j, nonfinite, "eps_sample", eps_s);
        json_object_set_new(j, "sigma_sample", json_real(f->dpsgd_sigma));
        json_object_set_new(j, "delta", json_real(f->delta));
    }
    json_object_set_new(j, "round_ms", json_real(secs * 1e3));
    if (json_array_size(nonfinite)) json_object_set(j, "nonfinite", nonfinite);
    json_decref(nonfinite);
    char *line = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (line && f->metrics_fd >= 0) {
        size_t n = strlen(line);
        line[n] = '\n';  /* json_dumps leaves room: the terminator becomes the newline */
        if (path_write_all(f->metrics_fd, line, n + 1) != 0) log_warn("fed: a metrics record was not written");
    }
    free(line);
    if (f->tb) {
        const struct { const char *tag; double v; } s[] = {
            { "fed/loss", loss }, { "fed/eval_loss", eval_loss }, { "fed/eval_acc", eval_acc }, { "fed/epsilon", eps },
            { "fed/clip", clip }, { "fed/epsilon_sample", eps_s }, { "fed/clients_dropped", (double)dropped }, { "fed/updates_refused", (double)refused },
        };
        for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
            if (isfinite(s[i].v)) tfevent_scalar(f->tb, r, s[i].tag, s[i].v);
        tfevent_flush(f->tb);
    }
}
