/* fed_setup — building a federated run: the configuration checked as a whole, the data
 * read into memory through libcore/data (every rank reads the same files; the shards are
 * index lists, a pure function of the seed), the partition, the clients' model and
 * optimizer, the server's global model, and the planted faults of the tests.
 *
 * The one design decision: clients are dealt to ranks round-robin (client c on rank
 * 1 + c mod (world - 1); every client on rank 0 when it is alone), so which rank hosts a
 * client never changes what the client computes: a run at another world size trains the
 * same clients on the same shards and aggregates the same updates. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/blas.h"
#include "data/data.h"
#include "fed_impl.h"

int fed_client_rank(const fed_run *f, int client)
{
    return f->world == 1 ? 0 : 1 + client % (f->world - 1);
}

int fed_clients_on_rank(const fed_run *f, int rank)
{
    if (f->world == 1) return f->nclients;
    if (rank == 0) return 0;
    int k = rank - 1, hosts = f->world - 1;
    return f->nclients / hosts + (k < f->nclients % hosts);
}

bool fed_planted(const fed_run *f, fed_plant_kind k, int64_t id, int64_t round)
{
    for (int i = 0; i < f->nplant; i++)
        if (f->plant[i].kind == k && f->plant[i].id == id && (f->plant[i].round < 0 || f->plant[i].round == round))
            return true;
    return false;
}

static status fed_parse_plant(fed_run *f, const char *text)
{
    static const char *const names[] = { "scale", "nan", "size", "stale", "norm", "fail", "drop", "kill" };
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char what[16];
        long long id = -1, round = -1;
        int n = 0, k = -1;
        if (sscanf(item, " %15[a-z]:%lld%n", what, &id, &n) == 2) {
            if (item[n] == '@' && sscanf(item + n + 1, "%lld", &round) != 1) k = -2;
        }
        for (int i = 0; k == -1 && i < (int)(sizeof names / sizeof names[0]); i++)
            if (!strcmp(what, names[i])) k = i;
        if (k < 0 || id < 0 || f->nplant == FED_PLANTS_MAX || (k == FED_PLANT_KILL && round < 0)) {
            log_error0("fed.plant: '%s' is not WHAT:ID[@ROUND] with WHAT one of scale, nan, size, stale, norm, fail, "
                       "drop, kill (kill:RANK@ROUND), at most %d items", item, FED_PLANTS_MAX);
            return STATUS_INPUT;
        }
        f->plant[f->nplant++] = (fed_plant){ (fed_plant_kind)k, id, round };
    }
    return STATUS_OK;
}

/* Reads every sample of one file in the file's order (a loader of one sample per step). */
static status fed_read_file(fed_run *f, const char *path, fed_data *out, int64_t source)
{
    data_config dc;
    memset(&dc, 0, sizeof dc);
    dc.path = path;
    dc.images = model_num_classes(&f->spec) > 0;
    dc.vocab_size = model_vocab_size(&f->spec);
    dc.T = out->T;
    dc.H = dc.W = f->spec.image_size;
    dc.num_classes = model_num_classes(&f->spec);
    TRY(config_floats(f->cfg, "data.mean", dc.mean, 3));
    TRY(config_floats(f->cfg, "data.std", dc.std, 3));
    dc.micro_batch = dc.accum = dc.dp_size = 1;
    dc.seed = f->seed;
    dc.shuffle = false;
    data_loader *d = NULL;
    TRY(data_open(&d, &dc));
    int64_t k = (int64_t)data_samples(d), at = out->n;
    size_t img = dc.images ? 3 * (size_t)dc.H * (size_t)dc.W : 0, T = (size_t)out->T;
    status st = STATUS_OK;
    if (dc.images) {
        float *x = realloc(out->x, (size_t)(at + k) * img * sizeof *x);
        int32_t *l = realloc(out->labels, (size_t)(at + k) * sizeof *l);
        if (x) out->x = x;
        if (l) out->labels = l;
        if (!x || !l) st = STATUS_NOMEM;
        for (int64_t i = 0; st == STATUS_OK && i < k; i++, data_advance(d))
            st = data_next_images(d, 0, out->x + (size_t)(at + i) * img, out->labels + at + i);
    } else {
        int32_t *a = realloc(out->ids, (size_t)(at + k) * T * sizeof *a);
        int32_t *b = realloc(out->targets, (size_t)(at + k) * T * sizeof *b);
        int64_t *s = realloc(out->source, (size_t)(at + k) * sizeof *s);
        if (a) out->ids = a;
        if (b) out->targets = b;
        if (s) out->source = s;
        if (!a || !b || !s) st = STATUS_NOMEM;
        for (int64_t i = 0; st == STATUS_OK && i < k; i++, data_advance(d)) {
            st = data_next_tokens(d, 0, out->ids + (size_t)(at + i) * T, out->targets + (size_t)(at + i) * T);
            out->source[at + i] = source;
        }
    }
    data_free(d);
    if (st == STATUS_OK) out->n += k, out->nsources = source + 1;
    return st;
}

/* A comma-separated list of files (tokens: each a source of by_file) into out. */
static status fed_read_data(fed_run *f, const char *list, fed_data *out)
{
    memset(out, 0, sizeof *out);
    out->images = model_num_classes(&f->spec) > 0;
    out->H = out->W = f->spec.image_size;
    out->T = out->images ? 0 : (int)config_int(f->cfg, "data.seq_len");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    int64_t source = 0;
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save), source++) {
        if (out->images && source > 0) {
            log_error0("data.train = '%s': image data is one file (an HDF5 image set or CIFAR-10 binary)", list);
            return STATUS_INPUT;
        }
        TRY(fed_read_file(f, p, out, source));
    }
    return STATUS_OK;
}

void fed_data_free(fed_data *d)
{
    free(d->x), free(d->labels), free(d->ids), free(d->targets), free(d->source);
    memset(d, 0, sizeof *d);
}

/* The shards: samples grouped by client in sample order (shard_start[c] .. [c + 1]). */
static status fed_partition(fed_run *f)
{
    const config *cfg = f->cfg;
    const char *how = config_str(cfg, "fed.partition");
    int64_t n = f->train.n;
    if (n < f->nclients) {
        log_error0("fed.clients = %d (%s) but data.train holds %lld samples: a client needs at least one", f->nclients,
                   config_origin(cfg, "fed.clients"), (long long)n);
        return STATUS_INPUT;
    }
    f->owner = malloc((size_t)n * sizeof *f->owner);
    f->shard = malloc((size_t)n * sizeof *f->shard);
    f->shard_start = calloc((size_t)f->nclients + 1, sizeof *f->shard_start);
    if (!f->owner || !f->shard || !f->shard_start) return STATUS_NOMEM;
    uint64_t seed = f->seed;
    if (!strcmp(how, "iid")) {
        TRY(fed_part_iid(f->owner, n, f->nclients, seed));
    } else if (!strcmp(how, "dirichlet")) {
        if (!f->train.images) {
            log_error0("fed.partition = dirichlet (%s) skews labels: it needs image data; text clients take "
                       "fed.partition = by_file or iid", config_origin(cfg, "fed.partition"));
            return STATUS_INPUT;
        }
        TRY(fed_part_dirichlet(f->owner, f->train.labels, n, model_num_classes(&f->spec), f->nclients,
                               config_float(cfg, "fed.alpha"), seed));
    } else {
        if (f->train.images) {
            log_error0("fed.partition = by_file (%s) deals whole token files: image data takes iid or dirichlet",
                       config_origin(cfg, "fed.partition"));
            return STATUS_INPUT;
        }
        TRY(fed_part_by_source(f->owner, f->train.source, n, f->train.nsources, f->nclients, seed));
    }
    for (int64_t i = 0; i < n; i++) f->shard_start[f->owner[i] + 1]++;
    for (int c = 0; c < f->nclients; c++) f->shard_start[c + 1] += f->shard_start[c];
    int64_t *fill = calloc((size_t)f->nclients, sizeof *fill);
    if (!fill) return STATUS_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        int c = f->owner[i];
        f->shard[f->shard_start[c] + fill[c]++] = i;
    }
    free(fill);
    return STATUS_OK;
}

/* The configuration's rules across keys (each named in its message). */
static status fed_check_config(fed_run *f)
{
    const config *cfg = f->cfg;
    const char *mode = config_str(cfg, "dp.mode"), *agg = config_str(cfg, "fed.aggregator");
    f->dp = !strcmp(mode, "central") ? 1 : !strcmp(mode, "distributed") ? 2 : 0;
    f->secagg = config_bool(cfg, "secagg.enable");
    f->robust = strcmp(agg, "mean") != 0;
    f->robust_median = !strcmp(agg, "median");
    f->trim = config_float(cfg, "fed.trim");
    f->adaptive = f->dp && config_bool(cfg, "dp.adaptive_clip");
    if (f->dp == 2 && !f->secagg) {
        log_error0("dp.mode = distributed (%s) lets every client add a share of the noise, so each update alone "
                   "carries less than the full noise: without secagg.enable = true the server would see it; "
                   "set secagg.enable = true or dp.mode = central", config_origin(cfg, "dp.mode"));
        return STATUS_INPUT;
    }
    if (f->robust && (f->secagg || f->dp)) {
        log_error0("fed.aggregator = %s (%s) reads every update coordinate by coordinate: it needs the updates one "
                   "by one, which secure aggregation hides, and its sensitivity is not DP-FedAvg's; use "
                   "fed.aggregator = mean with secagg.enable or dp.mode", agg, config_origin(cfg, "fed.aggregator"));
        return STATUS_INPUT;
    }
    if (config_bool(cfg, "dp.adaptive_clip") && !f->dp) {
        log_error0("dp.adaptive_clip = true (%s) adapts the clip norm of DP-FedAvg: set dp.mode = central or "
                   "distributed", config_origin(cfg, "dp.adaptive_clip"));
        return STATUS_INPUT;
    }
    if (f->spec.family == MODEL_FAMILY_BERT) {
        log_error0("model.name = %s: nebula-fed trains ResNet clients on images and GPT-2 clients on text; BERT's "
                   "masked-LM clients are not built", f->spec.name);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static status fed_model_setup(fed_run *f)
{
    const config *cfg = f->cfg;
    int T = f->train.T ? f->train.T : 1;
    TRY(model_spec_check_batch(&f->spec, f->local_batch, T, "fed.local_batch", "data.seq_len"));
    int B = f->dpsgd_clip > 0 ? 1 : f->local_batch;  /* DP-SGD: one example per forward */
    TRY(model_init(&f->m, &f->spec, B, f->train.T, f->seed, true));
    TRY(model_batch_init(&f->batch, &f->m));
    const char *opt = config_str(cfg, "optim.name");
    memset(&f->opt, 0, sizeof f->opt);
    f->opt.use_sgd = !strcmp(opt, "sgd") || (!strcmp(opt, "auto") && model_spec_images(&f->spec));
    f->opt.adamw = (adamw_hparams){ .beta1 = config_float(cfg, "optim.beta1"), .beta2 = config_float(cfg, "optim.beta2"),
                                    .eps = config_float(cfg, "optim.eps"),
                                    .weight_decay = config_float(cfg, "optim.weight_decay") };
    f->opt.sgd = (sgd_hparams){ .momentum = config_float(cfg, "optim.momentum"),
                                .weight_decay = config_float(cfg, "optim.weight_decay") };
    static const device cpu = { .kind = DEVICE_KIND_CPU, .precision = PRECISION_FP32, .ordinal = -1,
                                .ops = &nn_ops_cpu, .describe = "cpu" };
    TRY(device_optim_init(&f->opt.dopt, &cpu, model_params(&f->m)));
    f->lr = config_float(cfg, "optim.lr");
    f->np = model_params(&f->m)->total;
    const param_table *st = model_state_table(&f->m);
    f->ns = st ? st->total : 0;
    f->d = f->np + f->ns;
    if (f->dpsgd_clip > 0 && !(f->dpsgd_acc = malloc(f->np * sizeof *f->dpsgd_acc))) return STATUS_NOMEM;
    if (f->rank == 0) {
        B = f->val.n > 0 && f->val.n < f->eval_batch ? (int)f->val.n : f->eval_batch;
        if (f->spec.family == MODEL_FAMILY_RESNET && B < 2) B = 2;
        TRY(model_init(&f->ev, &f->spec, B, f->train.T, f->seed, false));
        TRY(model_batch_init(&f->evbatch, &f->ev));
        f->have_ev = true;
        f->eval_batch = B;
    }
    return STATUS_OK;
}

/* The largest message one rank's clients exchange in any phase. */
static size_t fed_msg_bytes(const fed_run *f, int clients)
{
    size_t n = (size_t)f->nclients, e = f->d + FED_SA_EXTRA;
    size_t per = sizeof(fed_msg_client) + 4 * e;
    size_t sa[] = { fed_secagg_masked_bytes(e), n * fed_secagg_share_bytes(), fed_secagg_reveal_bytes(n),
                    fed_secagg_advertise_bytes() };
    for (size_t i = 0; i < sizeof sa / sizeof sa[0]; i++)
        if (8 + sa[i] > per) per = 8 + sa[i];
    size_t round = sizeof(fed_msg_round) + 4 * (size_t)clients + 4 * f->d;
    size_t whole = sizeof(fed_msg_head) + (size_t)clients * per + fed_secagg_roster_bytes(n) +
                   fed_secagg_request_bytes(n, n) + 64;
    return whole > round ? whole : round;
}

/* How a run is set up: nebula-fed's (all false), the audit's (nothing written), a
 * shadow's of the audit (nothing written or printed; its training data given). */
typedef struct fed_setup_how {
    bool audit;                /* write nothing: no run directory, metrics or checkpoints */
    bool quiet;                /* print no round lines */
    fed_data *train;           /* given: moved into the run (data.train and data.val are not read) */
    bool seed_given;
    uint64_t seed;             /* with seed_given: instead of fed.seed */
} fed_setup_how;

static status fed_setup_mode(fed_run **out, const config *cfg, const runtime *rt, const fed_setup_how *how)
{
    fed_run *f = calloc(1, sizeof *f);
    if (!f) return STATUS_NOMEM;
    *out = f;
    f->audit = how->audit;
    f->quiet = how->quiet;
    f->cfg = cfg;
    f->rt = rt;
    f->metrics_fd = -1;
    MPI_Comm_size(rt->world, &f->world);
    MPI_Comm_rank(rt->world, &f->rank);
    f->seed = how->seed_given ? how->seed : (uint64_t)config_int(cfg, "fed.seed");
    f->rounds = config_int(cfg, "fed.rounds");
    f->nclients = (int)config_int(cfg, "fed.clients");
    f->poisson = !strcmp(config_str(cfg, "fed.sampling"), "poisson");
    f->per_round = (int)config_int(cfg, "fed.clients_per_round");
    if (f->per_round == 0 || f->per_round > f->nclients) f->per_round = f->nclients;
    f->q = f->poisson ? config_float(cfg, "fed.sample_rate") : (double)f->per_round / f->nclients;
    f->local_steps = (int)config_int(cfg, "fed.local_steps");
    f->local_batch = (int)config_int(cfg, "fed.local_batch");
    f->eval_batch = (int)config_int(cfg, "fed.eval_batch");
    f->eval_every = (int)config_int(cfg, "fed.eval_every");
    f->round_timeout = config_float(cfg, "fed.round_timeout");
    f->delta = config_float(cfg, "dp.delta");
    f->target_eps = config_float(cfg, "dp.target_epsilon");
    f->max_norm = config_float(cfg, "fed.max_update_norm");
    f->dpsgd_clip = config_float(cfg, "dp.sample_clip");
    f->dpsgd_sigma = config_float(cfg, "dp.sample_noise");
    f->secagg_t = (int)config_int(cfg, "secagg.threshold");
    f->frac_bits = (int)config_int(cfg, "secagg.frac_bits");
    f->ckpt_every = config_int(cfg, "ckpt.every_rounds");
    snprintf(f->run_dir, sizeof f->run_dir, "%s", config_str(cfg, "fed.run_dir"));
    config_dump(cfg, f->config_text, sizeof f->config_text);
    TRY(fed_parse_plant(f, config_str(cfg, "fed.plant")));
    int threads = runtime_threads(rt, config_int(cfg, "fed.threads"));  /* nebula-train's rule */
    omp_set_num_threads(threads);
    blas_set_threads(threads);
    TRY(model_spec_from_config(&f->spec, cfg));
    TRY(fed_check_config(f));
    const char *train = config_str(cfg, "data.train"), *val = config_str(cfg, "data.val");
    if (how->train) {
        f->train = *how->train;
        memset(how->train, 0, sizeof *how->train);
    } else if (!train[0]) {
        log_error0("data.train is empty: nebula-fed needs the clients' data (an HDF5 image set, a CIFAR-10 file, or "
                   "token files)");
        return STATUS_INPUT;
    }
    if (!how->train) TRY(fed_read_data(f, train, &f->train));
    if (!how->train && val[0] && f->rank == 0) TRY(fed_read_data(f, val, &f->val));
    TRY(fed_partition(f));
    TRY(fed_dpsgd_check(f));
    TRY(fed_model_setup(f));
    int mine = f->rank == 0 ? (f->world == 1 ? f->nclients : 0) : fed_clients_on_rank(f, f->rank);
    int most = fed_clients_on_rank(f, f->world == 1 ? 0 : 1);
    f->msg_cap = fed_msg_bytes(f, f->rank == 0 ? most : mine);
    f->msg = malloc(f->msg_cap + 1);
    f->in = malloc(f->msg_cap + 1);
    int64_t big = 1;
    for (int c = 0; c < f->nclients; c++)
        if (f->shard_start[c + 1] - f->shard_start[c] > big) big = f->shard_start[c + 1] - f->shard_start[c];
    f->perm = malloc((size_t)big * sizeof *f->perm);
    f->global = malloc(f->d * sizeof *f->global);
    f->upd = malloc((f->d + FED_SA_EXTRA) * sizeof *f->upd);
    if (!f->msg || !f->in || !f->perm || !f->global || !f->upd) return STATUS_NOMEM;
    TRY(comm_star_init(&f->star, rt->world, f->round_timeout, "fed", rt->wd));
    if (f->rank == 0) TRY(fed_ckpt_init(f));
    return STATUS_OK;
}

status fed_setup(fed_run **out, const config *cfg, const runtime *rt)
{
    return fed_setup_mode(out, cfg, rt, &(fed_setup_how){ 0 });
}

status fed_setup_audit(fed_run **out, const config *cfg, const runtime *rt)
{
    return fed_setup_mode(out, cfg, rt, &(fed_setup_how){ .audit = true });
}

status fed_setup_shadow(fed_run **out, const config *cfg, const runtime *rt, fed_data *train, uint64_t seed)
{
    return fed_setup_mode(out, cfg, rt,
                          &(fed_setup_how){ .audit = true, .quiet = true, .train = train, .seed_given = true, .seed = seed });
}

void fed_print(const fed_run *f, FILE *out)
{
    if (f->rank != 0) return;
    fprintf(out, "model: ");
    model_spec_print(&f->spec, out);
    fprintf(out, "clients: %d on %d rank(s), %s; %lld training samples in %s shards\n", f->nclients,
            f->world == 1 ? 1 : f->world - 1, f->poisson ? "poisson sampling" : "fixed sampling",
            (long long)f->train.n, config_str(f->cfg, "fed.partition"));
    int64_t lo = INT64_MAX, hi = 0;
    for (int c = 0; c < f->nclients; c++) {
        int64_t k = f->shard_start[c + 1] - f->shard_start[c];
        if (k < lo) lo = k;
        if (k > hi) hi = k;
    }
    fprintf(out, "round: q = %.4g (%s), E = %d local steps of %d, update %zu floats (%zu parameters, %zu state)\n",
            f->q, f->poisson ? "per client" : "clients per round / clients", f->local_steps, f->local_batch, f->d,
            f->np, f->ns);
    fprintf(out, "shards: %lld to %lld samples per client; held-out: %lld samples\n", (long long)lo, (long long)hi,
            (long long)f->val.n);
    fprintf(out, "privacy: dp %s%s, secure aggregation %s, aggregator %s, server optimizer %s\n",
            f->dp == 0 ? "off" : f->dp == 1 ? "central" : "distributed", f->adaptive ? " (adaptive clip)" : "",
            f->secagg ? "on" : "off", config_str(f->cfg, "fed.aggregator"), config_str(f->cfg, "fed.server_optimizer"));
    if (f->dpsgd_clip > 0)
        fprintf(out, "sample-level DP-SGD: per-example clip %g, noise multiplier %g, Poisson rate %.4g (local batch over "
                "the smallest shard); epsilon %.4g at delta %g per client after %lld rounds of E steps (a bound: every "
                "round counted)\n", f->dpsgd_clip, f->dpsgd_sigma, fed_dpsgd_rate(f), fed_dpsgd_epsilon(f, f->rounds),
                f->delta, (long long)f->rounds);
}

const fed_ledger *fed_get_ledger(const fed_run *f)
{
    return &f->led;
}

void fed_free(fed_run *f)
{
    if (!f) return;
    if (f->rank == 0 && f->ckpt) ckpt_writer_free(f->ckpt);
    if (f->tb) tfevent_close(f->tb);
    if (f->metrics_fd >= 0) close(f->metrics_fd);
    comm_star_free(&f->star);
    train_optim_free(&f->opt);
    model_batch_free(&f->batch);
    model_free(&f->m);
    if (f->have_ev) {
        model_batch_free(&f->evbatch);
        model_free(&f->ev);
    }
    fed_data_free(&f->train);
    fed_data_free(&f->val);
    free(f->owner), free(f->shard), free(f->shard_start);
    free(f->msg), free(f->in), free(f->perm), free(f->global), free(f->upd), free(f->agg), free(f->sm), free(f->sv);
    free(f->dpsgd_acc);
    free(f);
}
