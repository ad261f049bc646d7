/* train — see train.h. */
#include "train.h"
#include "elastic.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "nn/param.h"
#include "base/path.h"

const config_key train_schema_keys[] = {
    { "train", "micro_batch", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 20,
      .help = "b: samples per forward on each rank (0: derived from global_batch and accum)" },
    { "train", "accum", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 20,
      .help = "A: forwards per optimizer step (0: derived; 1 when only one other size is given)" },
    { "train", "global_batch", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 30,
      .help = "GB = micro_batch x accum x ranks (0: derived)" },
    { "train", "seq_len", CONFIG_TYPE_INT, "64", .min = 1, .max = 1 << 20,
      .help = "T: tokens per sample (GPT-2, BERT); at most model.max_seq_len" },
    { "train", "steps", CONFIG_TYPE_INT, "100", .min = 1, .max = 1e12, .help = "optimizer steps of the run" },
    { "train", "seed", CONFIG_TYPE_INT, "1337", .min = 0, .max = 9e15,
      .help = "initialisation, data order, augmentation and masking" },
    { "train", "log_interval", CONFIG_TYPE_INT, "10", .min = 1, .max = 1e9, .help = "steps between metrics lines" },
    { "train", "eval_interval", CONFIG_TYPE_INT, "0", .min = 0, .max = 1e9,
      .help = "steps between evaluations on data.val (0: only at the end, when data.val is set)" },
    { "train", "eval_batches", CONFIG_TYPE_INT, "16", .min = 1, .max = 1e9,
      .help = "global batches of held-out data per evaluation (fewer when the file is smaller)" },
    { "train", "run_dir", CONFIG_TYPE_STRING, "runs/train",
      .help = "where metrics.jsonl, config.ini and ckpt/ go (created)" },
    { "train", "clip", CONFIG_TYPE_FLOAT, "1.0", .min = 0, .max = 1e30,
      .help = "max global gradient L2 norm (0: no clipping)" },
    { "train", "threads", CONFIG_TYPE_INT, "0", .min = 0, .max = 4096,
      .help = "OpenMP and BLAS threads per rank (0: the cores this rank is bound to)" },
    { "train", "bucket_bytes", CONFIG_TYPE_SIZE, "25M", .min = 4096, .max = 1ull << 34,
      .help = "gradient bucket size (PyTorch DDP's bucket_cap_mb = 25)" },
    { "train", "zero", CONFIG_TYPE_INT, "0", .min = 0, .max = 1,
      .help = "ZeRO stage: 1 shards the optimizer state (AdamW m, v; SGD momentum) over the ranks" },
    { "zero", "shard_numel", CONFIG_TYPE_INT, "65536", .min = 16, .max = 1 << 30,
      .help = "ZeRO: most floats per shard (tensors are cut into chunks of this size)" },
    { "zero", "vnodes", CONFIG_TYPE_INT, "256", .min = 1, .max = 4096,
      .help = "ZeRO: points per rank on the consistent-hashing ring (more: better balance)" },
    { "optim", "name", CONFIG_TYPE_ENUM, "auto", .choices = "auto|adamw|sgd",
      .help = "optimizer (auto: AdamW for GPT-2 and BERT, SGD with momentum for ResNet)" },
    { "optim", "lr", CONFIG_TYPE_FLOAT, "3e-4", .min = 0, .max = 1e3, .help = "peak learning rate" },
    { "optim", "weight_decay", CONFIG_TYPE_FLOAT, "0.1", .min = 0, .max = 1e3,
      .help = "AdamW: decoupled; SGD: coupled L2 (weights only, never biases and norms)" },
    { "optim", "beta1", CONFIG_TYPE_FLOAT, "0.9", .min = 0, .max = 0.999999, .help = "AdamW" },
    { "optim", "beta2", CONFIG_TYPE_FLOAT, "0.95", .min = 0, .max = 0.999999999, .help = "AdamW" },
    { "optim", "eps", CONFIG_TYPE_FLOAT, "1e-8", .min = 1e-30, .max = 1, .help = "AdamW" },
    { "optim", "momentum", CONFIG_TYPE_FLOAT, "0.9", .min = 0, .max = 0.999999, .help = "SGD" },
    { "optim", "nesterov", CONFIG_TYPE_BOOL, "false", .help = "SGD: Nesterov momentum" },
    { "optim", "schedule", CONFIG_TYPE_ENUM, "cosine", .choices = "constant|cosine|linear|step",
      .help = "learning-rate shape after warmup (cosine and linear reach min_lr at train.steps)" },
    { "optim", "warmup_steps", CONFIG_TYPE_INT, "0", .min = 0, .max = 1e12, .help = "linear warmup" },
    { "optim", "min_lr", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e3, .help = "cosine/linear floor" },
    { "optim", "step_size", CONFIG_TYPE_INT, "1000", .min = 1, .max = 1e12, .help = "step schedule: period" },
    { "optim", "gamma", CONFIG_TYPE_FLOAT, "0.1", .min = 0, .max = 1e3, .help = "step schedule: factor" },
    { "data", "train", CONFIG_TYPE_STRING, "synthetic",
      .help = "training data: Nebula or llm.c token file, HDF5 or CIFAR-10 images, or synthetic" },
    { "data", "val", CONFIG_TYPE_STRING, "", .help = "held-out data in the same format (empty: no evaluation)" },
    { "data", "shuffle", CONFIG_TYPE_BOOL, "true", .help = "a new permutation of the training samples every epoch" },
    { "data", "pad_crop", CONFIG_TYPE_INT, "0", .min = 0, .max = 1024,
      .help = "images: random crop after zero padding by this many pixels (CIFAR: 4)" },
    { "data", "flip", CONFIG_TYPE_BOOL, "false", .help = "images: random horizontal flip" },
    { "data", "mean", CONFIG_TYPE_STRING, "0.5,0.5,0.5",
      .help = "images: per-channel mean of x/255 (the file's attribute wins)" },
    { "data", "std", CONFIG_TYPE_STRING, "0.5,0.5,0.5",
      .help = "images: per-channel std of x/255 (the file's attribute wins)" },
    { "ckpt", "every_steps", CONFIG_TYPE_INT, "0", .min = 0, .max = 1e12,
      .help = "checkpoint every N steps (0: off; the last step is always saved when checkpoints are on)" },
    { "ckpt", "every_minutes", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e9,
      .help = "checkpoint when this many minutes passed since the last one (0: off)" },
    { "ckpt", "keep", CONFIG_TYPE_INT, "3", .min = 1, .max = 1e6, .help = "committed checkpoints kept" },
    { "ckpt", "async", CONFIG_TYPE_BOOL, "false",
      .help = "copy the state to memory and write it in a background thread" },
    { "ckpt", "resume", CONFIG_TYPE_STRING, "auto",
      .help = "auto (newest committed checkpoint of run_dir, if any), none, or a checkpoint directory" },
    { "elastic", "lr_rule", CONFIG_TYPE_ENUM, "linear", .choices = "linear|sqrt|none",
      .help = "how lr follows a global_batch change from run_dir/control (linear: Goyal et al. 2017; sqrt: "
              "Adam-family, Malladi et al. 2022), unless the file names lr_rule" },
};
const int train_schema_nkeys = (int)(sizeof train_schema_keys / sizeof train_schema_keys[0]);

static volatile sig_atomic_t signal_usr1, signal_term;

static void train_on_signal(int sig)
{
    if (sig == SIGUSR1) signal_usr1 = 1;
    else signal_term = 1;
}

void train_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = train_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
}

status train_batch_resolve(train_batch *tb, const config *cfg, int world)
{
    long b = config_int(cfg, "train.micro_batch"), A = config_int(cfg, "train.accum");
    long GB = config_int(cfg, "train.global_batch");
    int given = (b > 0) + (A > 0) + (GB > 0);
    if (given == 0) {
        log_error0("train.micro_batch or train.global_batch must be set (global batch = micro_batch x accum x %d "
                   "ranks; give any two)", world);
        return STATUS_INPUT;
    }
    if (given == 1 && A == 0) A = 1;
    if (b > 0 && A > 0 && GB > 0 && b * A * world != GB) {
        log_error0("train.global_batch = %ld but train.micro_batch x train.accum x ranks = %ld x %ld x %d = %ld; "
                   "give any two of the three", GB, b, A, world, b * A * world);
        return STATUS_INPUT;
    }
    if (GB == 0) GB = b * A * world;
    if (b == 0 || A == 0) {
        long known = b ? b : A, per = (long)world * known;
        if (GB % per != 0) {
            log_error0("train.global_batch = %ld is not a multiple of train.%s x ranks = %ld x %d = %ld", GB,
                       b ? "micro_batch" : "accum", known, world, per);
            return STATUS_INPUT;
        }
        if (b == 0) b = GB / per;
        else A = GB / per;
    }
    tb->micro_batch = (int)b, tb->accum = (int)A, tb->global_batch = (int)GB;
    return STATUS_OK;
}

/* "0.49,0.48,0.45" into three floats. */
static status parse3(const config *cfg, const char *key, float out[3])
{
    const char *s = config_str(cfg, key);
    if (sscanf(s, "%f,%f,%f", &out[0], &out[1], &out[2]) != 3) {
        log_error0("%s = '%s' (%s): expected three comma-separated numbers, e.g. 0.5,0.5,0.5", key, s,
                   config_origin(cfg, key));
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static double now_s(void)
{
    return MPI_Wtime();
}

/* The hook a model's backward calls as each layer's gradients become final: marks
 * the layer's tensors, which launches every bucket they complete. */
static void train_layer_done(void *ctx, int layer)
{
    train_run *r = ctx;
    if (r->hook_status != STATUS_OK || layer < 0 || layer >= r->nlayers) return;
    for (int i = 0; i < r->layer_count[layer]; i++) {
        status st = bucket_mark_ready(&r->bm, r->layer_first[layer] + i);
        if (st != STATUS_OK) {
            r->hook_status = st;
            return;
        }
    }
}

static void train_set_hook(train_run *r, bool on)
{
    param_layer_hook h = { on ? train_layer_done : NULL, r };
    r->m.gpt2.hook = h, r->m.bert.hook = h, r->m.resnet.hook = h;
}

status train_open_data(train_run *r, data_loader **out, const char *path, bool train)
{
    const config *cfg = r->cfg;
    data_config dc;
    memset(&dc, 0, sizeof dc);
    dc.path = path;
    dc.images = r->spec.family == MODEL_FAMILY_RESNET;
    dc.vocab_size = r->spec.family == MODEL_FAMILY_GPT2 ? r->spec.gpt2.vocab_size : r->spec.bert.vocab_size;
    dc.T = r->T;
    dc.H = dc.W = r->spec.image_size;
    dc.num_classes = r->spec.resnet.num_classes;
    dc.pad_crop = train ? (int)config_int(cfg, "data.pad_crop") : 0;
    dc.flip = train && config_bool(cfg, "data.flip");
    TRY(parse3(cfg, "data.mean", dc.mean));
    TRY(parse3(cfg, "data.std", dc.std));
    dc.micro_batch = r->tb.micro_batch;
    dc.accum = train ? r->tb.accum : 1;
    dc.dp_rank = r->rt->rank;
    dc.dp_size = r->rt->size;
    dc.seed = r->seed;
    dc.shuffle = train && config_bool(cfg, "data.shuffle");
    return data_open(out, &dc);
}

/* Per layer, the range of its tensors in the table (the three families add each
 * layer's tensors consecutively; anything else is a bug). */
static status train_layers(train_run *r)
{
    const param_table *pt = model_params(&r->m);
    int L = 0;
    for (int i = 0; i < pt->count; i++) L = pt->entries[i].layer + 1 > L ? pt->entries[i].layer + 1 : L;
    r->nlayers = L;
    r->layer_first = calloc((size_t)L, sizeof *r->layer_first);
    r->layer_count = calloc((size_t)L, sizeof *r->layer_count);
    if (!r->layer_first || !r->layer_count) return STATUS_NOMEM;
    for (int i = pt->count - 1; i >= 0; i--) {
        int l = pt->entries[i].layer;
        CHECK(l >= 0, "every tensor of a model belongs to a layer");
        CHECK(r->layer_count[l] == 0 || r->layer_first[l] == i + 1, "a layer's tensors are consecutive in the table");
        r->layer_first[l] = i;
        r->layer_count[l]++;
    }
    return STATUS_OK;
}

/* The time of one bucket pass without overlap: every tensor marked at once, then
 * waited; the grads are zero here. Median of 3: the communication a step would
 * expose with no overlap at all, against which comm_wait is reported. */
static status train_calibrate_comm(train_run *r)
{
    param_buffers *pb = model_buffers(&r->m);
    const param_table *pt = model_params(&r->m);
    double t[3];
    param_zero_grads(pb, pt);
    for (int k = 0; k < 3; k++) {
        MPI_Barrier(r->rt->world);
        double t0 = now_s();
        for (int i = pt->count - 1; i >= 0; i--) TRY(bucket_mark_ready(&r->bm, i));
        TRY(bucket_wait_all(&r->bm));
        t[k] = now_s() - t0;
    }
    double lo = fmin(t[0], fmin(t[1], t[2])), hi = fmax(t[0], fmax(t[1], t[2]));
    double med = t[0] + t[1] + t[2] - lo - hi;
    MPI_Allreduce(&med, &r->comm_ms, 1, MPI_DOUBLE, MPI_MAX, r->rt->world);
    r->comm_ms *= 1e3;
    return STATUS_OK;
}

/* What a checkpoint of this run holds: parameters, optimizer moments, ResNet's BN
 * statistics, and the loader position (the same on every rank; a blob so that later
 * per-rank state joins it the same way). */
static void train_ckpt_content(train_run *r, ckpt_content *c)
{
    memset(c, 0, sizeof *c);
    param_table *pt = model_params(&r->m);
    param_buffers *pb = model_buffers(&r->m);
    c->step = r->step;
    c->model = r->spec.name;
    c->table_hash = param_table_hash(pt);
    c->config_text = r->config_text;
    c->ranks_per_node = r->rt->max_local_size;
    c->groups[c->ngroups++] = (ckpt_tensors){ "params", pt, pb->params, false };
    /* ZeRO: each rank holds and writes its shards of the moments; the file holds full
     * tensors either way, so checkpoints load with or without ZeRO at any world size */
    if (r->use_zero) c->shards[c->ngroups] = &r->zero.ck;
    c->groups[c->ngroups++] = (ckpt_tensors){ "optim/m", pt, r->use_zero ? r->zero.m : pb->m, false };
    if (!r->use_sgd) {
        if (r->use_zero) c->shards[c->ngroups] = &r->zero.ck;
        c->groups[c->ngroups++] = (ckpt_tensors){ "optim/v", pt, r->use_zero ? r->zero.v : pb->v, false };
    }
    if (model_state_table(&r->m))
        c->groups[c->ngroups++] = (ckpt_tensors){ "buffers", model_state_table(&r->m), model_state(&r->m), true };
    c->blobs[c->nblobs++] = (ckpt_blob){ "loader", &r->loader_state, sizeof r->loader_state, false, false };
    /* optional: checkpoints older than elastic control resume with the config's batch */
    c->blobs[c->nblobs++] = (ckpt_blob){ "elastic", &r->elastic, sizeof r->elastic, true, false };
    /* optional: a checkpoint written without compression, or at another node size, resumes with a fresh state */
    if (r->dgc) c->blobs[c->nblobs++] = (ckpt_blob){ "dgc", dgc_state(r->dgc), dgc_state_bytes(r->dgc), true, false };
}

typedef struct step_stats {
    double loss;         /* mean over the global batch */
    double gnorm;        /* global gradient norm before clipping */
    double lr;
    double step_ms, comm_wait_ms;
} step_stats;

/* DGC-Pro: off, forced on, or auto — ruled out here for small models and single
 * nodes; the rest of auto's decision (communication against compute) is taken after
 * the first steps have been measured (train_dgc_decide). */
static status train_dgc_setup(train_run *r)
{
    dgc_options o;
    dgc_options_from_config(r->cfg, &o);
    if (o.mode == DGC_MODE_OFF) return STATUS_OK;
    if (r->use_zero) {
        if (o.mode == DGC_MODE_ON) {
            log_error0("dgc.mode = on and train.zero = 1 (%s) are not supported together: DGC-Pro's momentum "
                       "correction keeps full-size per-rank state and applies the update itself; set dgc.mode = off "
                       "or train.zero = 0", config_origin(r->cfg, "train.zero"));
            return STATUS_INPUT;
        }
        if (r->rt->rank == 0) printf("dgc: off (auto): not with train.zero = 1\n");
        return STATUS_OK;
    }
    const param_table *pt = model_params(&r->m);
    size_t nparams = 0;
    for (int e = 0; e < pt->count; e++) nparams += pt->entries[e].count;
    const char *why = NULL;
    char buf[256];
    if (o.mode == DGC_MODE_AUTO && r->rt->nnodes == 1) {
        why = "one node: its gradients are reduced densely in shared memory";
    } else if (o.mode == DGC_MODE_AUTO && (int64_t)nparams < o.min_params) {
        snprintf(buf, sizeof buf, "%zu parameters is below dgc.min_params = %" PRId64 " (set dgc.mode = on to force)",
                 nparams, o.min_params);
        why = buf;
    }
    if (why) {
        if (r->rt->rank == 0) printf("dgc: off (auto): %s\n", why);
        return STATUS_OK;
    }
    o.momentum = r->use_sgd ? r->sgd.momentum : 0;
    o.nesterov = r->use_sgd && r->sgd.nesterov;
    o.weight_decay = r->use_sgd ? r->sgd.weight_decay : 0;
    o.clip = r->clip;
    o.seed = r->seed;
    TRY(dgc_init(&r->dgc, r->rt, pt, &o));
    dgc_set_active(r->dgc, o.mode == DGC_MODE_ON);
    if (r->rt->rank == 0)
        printf("dgc: %s: sparsity %.4g after %ld warm-up steps in %d stages from %.4g, %s values, %s threshold, momentum correction %s, "
               "%d nodes x %d ranks\n", o.mode == DGC_MODE_ON ? "on" : "auto (decided in the first 5 steps)",
               o.sparsity, o.warmup_steps, o.warmup_stages, o.warmup_sparsity, o.values == DGC_VALUES_FP16 ? "fp16" : "fp32",
               o.exact_topk ? "exact top-k" : "sampled", o.momentum > 0 ? "on" : "off (AdamW: plain accumulation)",
               r->rt->nnodes, r->rt->local_size);
    return STATUS_OK;
}

/* Auto mode, in the first steps of a fresh run. After dense steps 1-3: off when dense
 * communication is under dgc.min_comm_fraction of the compute; otherwise steps 4-5 run
 * compressed as a trial, and after step 5 DGC-Pro stays on only if its steps were
 * faster than the dense ones (steps 2-3; step 1 warms up). Switching off flushes the
 * residuals into the next dense step, so nothing accumulated is lost. Rank 0 decides
 * for everyone; the decision is part of the checkpointed state. */
static void train_dgc_auto(train_run *r, const step_stats *ss, long first)
{
    long k = r->step - first;  /* steps of this run */
    if (first != 0 || k > 5) return;  /* a resumed run keeps what its checkpoint says */
    if (strcmp(config_str(r->cfg, "dgc.mode"), "auto") != 0) return;
    if (k >= 2 && k <= 3) r->dense_ms += ss->step_ms / 2, r->compute_ms += (ss->step_ms - ss->comm_wait_ms) / 2;
    if (k >= 4) r->trial_ms += ss->step_ms / 2;
    dgc_options o;
    dgc_options_from_config(r->cfg, &o);
    int on = -1;
    char why[256] = "";
    if (k == 3) {
        on = r->comm_ms >= o.min_comm_fraction * r->compute_ms;
        snprintf(why, sizeof why, "dense communication %.1f ms is %.0f%% of compute %.1f ms (dgc.min_comm_fraction = %g)%s",
                 r->comm_ms, 100 * r->comm_ms / r->compute_ms, r->compute_ms, o.min_comm_fraction,
                 on ? "; trying it for 2 steps" : "");
    } else if (k == 5) {
        on = r->trial_ms < r->dense_ms;
        snprintf(why, sizeof why, "its steps took %.1f ms against %.1f ms dense", r->trial_ms, r->dense_ms);
    }
    if (on < 0) return;
    MPI_Bcast(&on, 1, MPI_INT, 0, r->rt->world);
    if (!on && dgc_active(r->dgc)) r->dgc_flush = true;
    dgc_set_active(r->dgc, on);
    if (r->rt->rank == 0) printf("dgc: %s (auto): %s\n", on ? "on" : "off", why);
}

status train_setup(train_run *r, const config *cfg, const runtime *rt, comm *c)
{
    memset(r, 0, sizeof *r);
    r->cfg = cfg, r->rt = rt, r->c = c;
    r->heartbeat_fd = -1;
    r->seed = (uint64_t)config_int(cfg, "train.seed");
    r->steps = (long)config_int(cfg, "train.steps");
    r->clip = config_float(cfg, "train.clip");
    snprintf(r->run_dir, sizeof r->run_dir, "%s", config_str(cfg, "train.run_dir"));
    config_dump(cfg, r->config_text, sizeof r->config_text);
    r->threads = (int)config_int(cfg, "train.threads");
    if (r->threads == 0) {  /* the binding's cores: more threads than that would fight over them */
        cpu_set_t set;
        r->threads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
        if (r->threads < 1) r->threads = 1;
    }
    omp_set_num_threads(r->threads);
    openblas_set_num_threads(r->threads);
    TRY(model_spec_from_config(&r->spec, cfg));
    TRY(train_batch_resolve(&r->tb, cfg, rt->size));
    r->config_batch = r->tb.global_batch;
    r->elastic = (train_elastic){ r->tb.global_batch, 1.0 };
    r->T = r->spec.family == MODEL_FAMILY_RESNET ? 0 : (int)config_int(cfg, "train.seq_len");
    TRY(model_spec_check_batch(&r->spec, r->tb.micro_batch, r->T ? r->T : 1, "train.micro_batch", "train.seq_len"));

    /* Optimizer and schedule, checked before anything big is allocated. */
    const char *opt = config_str(cfg, "optim.name");
    r->use_sgd = !strcmp(opt, "sgd") || (!strcmp(opt, "auto") && r->spec.family == MODEL_FAMILY_RESNET);
    r->adamw = (adamw_hparams){ .beta1 = config_float(cfg, "optim.beta1"), .beta2 = config_float(cfg, "optim.beta2"),
                                .eps = config_float(cfg, "optim.eps"),
                                .weight_decay = config_float(cfg, "optim.weight_decay") };
    r->sgd = (sgd_hparams){ .momentum = config_float(cfg, "optim.momentum"),
                            .nesterov = config_bool(cfg, "optim.nesterov"),
                            .weight_decay = config_float(cfg, "optim.weight_decay") };
    if (r->sgd.nesterov && r->sgd.momentum == 0) {
        log_error0("optim.nesterov = true needs optim.momentum > 0");
        return STATUS_INPUT;
    }
    CHECK(lr_schedule_kind_parse(config_str(cfg, "optim.schedule"), &r->sched.kind), "schedule enum out of sync");
    r->sched.base_lr = config_float(cfg, "optim.lr");
    r->sched.warmup_steps = (long)config_int(cfg, "optim.warmup_steps");
    r->sched.total_steps = r->steps;
    r->sched.min_lr = config_float(cfg, "optim.min_lr");
    r->sched.step_size = (long)config_int(cfg, "optim.step_size");
    r->sched.gamma = config_float(cfg, "optim.gamma");
    const char *why = NULL;
    if (!lr_schedule_valid(&r->sched, &why)) {
        log_error0("the learning-rate schedule is not usable: %s (see the [optim] keys)", why);
        return STATUS_INPUT;
    }

    r->use_zero = config_int(cfg, "train.zero") == 1;
    if (r->use_zero && config_bool(cfg, "ckpt.async")) {
        log_error0("ckpt.async = true and train.zero = 1 (%s) are not supported together: the asynchronous writer "
                   "stages every tensor on rank 0, which a ZeRO run does not hold (gathering the moments there "
                   "would undo the memory ZeRO saves); set ckpt.async = false (ZeRO checkpoints are written in "
                   "parallel, each rank its shards)", config_origin(cfg, "train.zero"));
        return STATUS_INPUT;
    }

    /* Data before the model: a bad file fails fast. */
    TRY(train_open_data(r, &r->train_data, config_str(cfg, "data.train"), true));
    const char *val = config_str(cfg, "data.val");
    if (val[0]) TRY(train_open_data(r, &r->val_data, val, false));

    TRY(model_init(&r->m, &r->spec, r->tb.micro_batch, r->T, r->seed, true));
    TRY(model_batch_init(&r->batch, &r->m));
    if (r->spec.family == MODEL_FAMILY_BERT) {
        r->raw_ids = malloc((size_t)r->tb.micro_batch * (size_t)r->T * sizeof *r->raw_ids);
        r->samples = malloc((size_t)r->tb.micro_batch * sizeof *r->samples);
        if (!r->raw_ids || !r->samples) return STATUS_NOMEM;
    }
    /* Identical initial weights everywhere (they are already: same seed; DDP broadcasts
     * anyway, and so does Nebula, so a rank can never start from another state). */
    param_table *pt = model_params(&r->m);
    param_buffers *pb = model_buffers(&r->m);
    MPI_Bcast(pb->params, (int)pt->total, MPI_FLOAT, 0, rt->world);
    if (r->use_zero) {
        /* The moments live in zero's packed buffers, 1/N of them per rank. The models
         * allocate full ones when training (model_init has no flag to leave them out):
         * released here, before anything else is allocated. */
        free(pb->m), free(pb->v);
        pb->m = pb->v = NULL;
        zero_options zo = { (size_t)config_int(cfg, "zero.shard_numel"), (int)config_int(cfg, "zero.vnodes"),
                            r->use_sgd ? 1 : 2 };
        TRY(zero_init(&r->zero, rt->world, pt, &zo));
    }

    TRY(train_layers(r));
    size_t *off = malloc((size_t)pt->count * sizeof *off), *cnt = malloc((size_t)pt->count * sizeof *cnt);
    if (!off || !cnt) return STATUS_NOMEM;
    param_table_slices(pt, off, cnt);
    status st = bucket_init(&r->bm, c, pb->grads, REDUCE_DTYPE_F32, off, cnt, pt->count,
                            (size_t)config_size(cfg, "train.bucket_bytes"), COMM_ALGO_AUTO,
                            1.0 / ((double)r->tb.accum * rt->size));
    free(off), free(cnt);
    TRY(st);
    /* forced DGC-Pro never sends the dense gradient: no need to time it (slow links: minutes) */
    if (strcmp(config_str(cfg, "dgc.mode"), "on") != 0) TRY(train_calibrate_comm(r));
    TRY(train_dgc_setup(r));

    if (rt->rank == 0) TRY(path_mkdirs(r->run_dir, "run directory"));
    MPI_Barrier(rt->world);
    if (config_int(cfg, "ckpt.every_steps") > 0 || config_float(cfg, "ckpt.every_minutes") > 0) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
        ckpt_content shape;
        train_ckpt_content(r, &shape);
        TRY(ckpt_writer_init(&r->ckpt, rt->world, dir, (int)config_int(cfg, "ckpt.keep"),
                             config_bool(cfg, "ckpt.async"), &shape));
    }
    if (rt->rank == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/metrics.jsonl", r->run_dir);
        if (!(r->metrics = fopen(path, "a"))) {
            log_error("cannot open %s: %s", path, strerror(errno));
            return STATUS_IO;
        }
        TRY(train_heartbeat_open(r));
    }
    return STATUS_OK;
}

status train_resume(train_run *r)
{
    const char *which = config_str(r->cfg, "ckpt.resume");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", r->run_dir);
    ckpt_content c;
    train_ckpt_content(r, &c);
    ckpt_info info;
    TRY(ckpt_load(r->rt->world, dir, which, &c, &info));
    if (info.step < 0) return STATUS_OK;
    r->step = (long)info.step;
    TRY(train_elastic_resume(r, &c));
    TRY(data_set_state(r->train_data, &r->loader_state));
    if (r->dgc && !c.blobs[c.nblobs - 1].loaded) {
        dgc_state_reset(r->dgc);
        dgc_set_active(r->dgc, !strcmp(config_str(r->cfg, "dgc.mode"), "on"));
        log_warn0("dgc: the checkpoint holds no compression state for this layout (written without DGC-Pro, or "
                  "with another number of ranks per node): residuals and velocities start from zero");
    } else if (r->dgc && (info.resharded || dgc_state_loaded(r->dgc) != STATUS_OK)) {
        dgc_state_reset(r->dgc);
        log_warn0("dgc: the checkpoint's compression state belongs to another layout of ranks or an older "
                  "state format; residuals and velocities start from zero (what they held is not applied)");
    }
    if (r->use_zero && info.world_size != r->rt->size) {
        double fs, fe;
        TRY(zero_moved_fraction(&r->zero, info.world_size, &fs, &fe));
        int a = info.world_size, b = r->rt->size;
        if (r->rt->rank == 0)
            printf("zero: resharded from %d to %d ranks: %.1f%% of the optimizer shards (%.1f%% of the floats) "
                   "change owner (consistent hashing; expected about 1 - %d/%d = %.1f%%)\n", a, b, 100 * fs, 100 * fe,
                   a < b ? a : b, a < b ? b : a, 100.0 * (1.0 - (double)(a < b ? a : b) / (a < b ? b : a)));
    }
    if (r->rt->rank == 0)
        printf("resumed from %s at step %ld%s%s\n", info.path, r->step,
               info.resharded ? " (written at another world size: same global batch, accumulation recomputed)" : "",
               info.skipped ? " (newer checkpoints were skipped, see the warnings above)" : "");
    return STATUS_OK;
}

/* Fills the model's micro-batch a of the current step. */
static status train_fill(train_run *r, data_loader *d, int a)
{
    model_batch *b = &r->batch;
    if (r->spec.family == MODEL_FAMILY_RESNET) return data_next_images(d, a, b->images, b->targets);
    if (r->spec.family == MODEL_FAMILY_GPT2) return data_next_tokens(d, a, b->ids, b->targets);
    /* BERT: masked LM over the raw tokens, each sample's masking keyed by its index
     * in the file and the epoch, so that it depends on neither the rank that reads
     * it nor the world size. */
    TRY(data_next_tokens(d, a, r->raw_ids, NULL));
    data_batch_samples(d, a, r->samples);
    bert_special_tokens sp = BERT_SPECIAL_TOKENS_UNCASED;
    uint64_t epoch = data_get_state(d).epoch;
    for (int i = 0; i < r->tb.micro_batch; i++) {
        size_t at = (size_t)i * (size_t)r->T;
        bert_mask_tokens(b->ids + at, b->targets + at, r->raw_ids + at, b->mask + at, 1, r->T,
                         r->spec.bert.vocab_size, &sp, r->seed, (uint32_t)r->samples[i], epoch);
    }
    return STATUS_OK;
}


/* This step's learning rate relative to the peak: DGC-Pro folds it into what it
 * accumulates (dgc_exchange), so a delayed coordinate gets the rates of the steps
 * that produced it. */
static double train_lr_scale(const train_run *r)
{
    double s = lr_at(&r->sched, r->step) * r->elastic.lr_factor / r->sched.base_lr;
    return s > 0 ? s : 1.0;
}

/* One optimizer step: A micro-batches forward and backward (buckets launched from
 * the last backward), the wait for the buckets, clipping, the update. */
static status train_step(train_run *r, step_stats *ss)
{
    param_table *pt = model_params(&r->m);
    param_buffers *pb = model_buffers(&r->m);
    double t0 = now_s(), loss = 0;
    param_zero_grads(pb, pt);
    if (r->dgc_flush) {  /* DGC-Pro was switched off: its residuals go out with this dense step */
        dgc_flush(r->dgc, pb->grads, (float)(r->tb.accum * r->rt->size), train_lr_scale(r));
        r->dgc_flush = false;
    }
    r->hook_status = STATUS_OK;
    bool compress = r->dgc && dgc_active(r->dgc);
    for (int a = 0; a < r->tb.accum; a++) {
        TRY(train_fill(r, r->train_data, a));
        train_set_hook(r, !compress && a == r->tb.accum - 1);  /* earlier micro-batches only accumulate (DDP's no_sync) */
        TRY(model_forward(&r->m, &r->batch, true));
        loss += model_loss(&r->m);
        model_backward(&r->m);
        TRY(r->hook_status);
    }
    train_set_hook(r, false);
    double t1 = now_s();
    if (compress) {
        if (r->tb.accum > 1) {
            float inv = 1.0f / (float)r->tb.accum;
            for (size_t i = 0; i < pt->total; i++) pb->grads[i] *= inv;
        }
        TRY(dgc_exchange(r->dgc, pb->grads, pb->params, r->step, train_lr_scale(r), &r->dstats));
        r->dgc_sent += (double)r->dstats.bytes_sent;
        r->dgc_dense += (double)r->dstats.dense_bytes;
    } else {
        TRY(bucket_wait_all(&r->bm));
    }
    ss->comm_wait_ms = (now_s() - t1) * 1e3;
    double local = loss / r->tb.accum;
    MPI_Allreduce(&local, &ss->loss, 1, MPI_DOUBLE, MPI_SUM, r->rt->world);
    ss->loss /= r->rt->size;
    ss->gnorm = 0;
    /* the norm either way; DGC clipped each node's contribution before compressing */
    optim_clip_grad_norm(pb->grads, pt->total, r->clip > 0 && !compress ? r->clip : INFINITY, &ss->gnorm);
    ss->lr = lr_at(&r->sched, r->step) * r->elastic.lr_factor;
    ckpt_fence(r->ckpt);  /* an async checkpoint's background copy of the state must be done */
    if (!isfinite(ss->gnorm)) {
        log_error0("step %ld: the gradient norm is %g; the step is skipped (lower optim.lr or set train.clip)",
                   r->step, ss->gnorm);
    } else if (r->use_zero) {
        /* only the owned shards; then every rank's to every rank, through the gradient
         * buffer, which nothing reads after the update (zeroed at the next step) */
        if (r->use_sgd) zero_sgd_step(&r->zero, pt, pb, &r->sgd, ss->lr, r->step + 1);
        else zero_adamw_step(&r->zero, pt, pb, &r->adamw, ss->lr, r->step + 1);
        zero_allgather_params(&r->zero, pb->params, pb->grads);
    } else if (r->use_sgd) {
        r->sgd.plain = compress ? dgc_plain_entries(r->dgc) : NULL;
        optim_sgd_step(pt, pb, &r->sgd, ss->lr, r->step + 1);
    } else {
        optim_adamw_step(pt, pb, &r->adamw, ss->lr, r->step + 1);
    }
    /* ResNet's running statistics: rank 0's everywhere, as DDP's broadcast_buffers. */
    if (model_state_table(&r->m))
        MPI_Bcast(model_state(&r->m), (int)model_state_table(&r->m)->total, MPI_FLOAT, 0, r->rt->world);
    data_advance(r->train_data);
    r->loader_state = data_get_state(r->train_data);
    r->step++;
    ss->step_ms = (now_s() - t0) * 1e3;
    return STATUS_OK;
}

/* Loss (and perplexity or accuracy) over up to train.eval_batches global batches of
 * the held-out data, in its file order, every rank its share. */
static status train_eval(train_run *r, double *loss, double *acc, long *samples)
{
    data_state start = { 0, 0 };
    TRY(data_set_state(r->val_data, &start));
    long nb = (long)config_int(r->cfg, "train.eval_batches");
    long have = (long)data_steps_per_epoch(r->val_data);
    if (nb > have) nb = have;
    double sums[3] = { 0, 0, 0 };  /* loss sum over micro-batches, correct labels, labels */
    for (long i = 0; i < nb; i++) {
        TRY(train_fill(r, r->val_data, 0));
        TRY(model_forward(&r->m, &r->batch, false));
        sums[0] += model_loss(&r->m);
        if (r->spec.family == MODEL_FAMILY_RESNET) {
            const float *lg = r->m.resnet.acts.logits;
            int V = r->spec.resnet.num_classes;
            for (int n = 0; n < r->tb.micro_batch; n++) {
                int best = 0;
                for (int k = 1; k < V; k++)
                    if (lg[(size_t)n * V + k] > lg[(size_t)n * V + best]) best = k;
                sums[1] += best == r->batch.targets[n];
                sums[2] += 1;
            }
        }
        data_advance(r->val_data);
    }
    double tot[3];
    MPI_Allreduce(sums, tot, 3, MPI_DOUBLE, MPI_SUM, r->rt->world);
    *loss = nb ? tot[0] / ((double)nb * r->rt->size) : NAN;
    *acc = tot[2] > 0 ? tot[1] / tot[2] : NAN;
    *samples = nb * r->tb.micro_batch * r->rt->size;
    return STATUS_OK;
}

/* One record of metrics.jsonl (rank 0), flushed so a crash loses no line; takes j. */
static void train_metrics_write(train_run *r, json_t *j)
{
    json_dumpf(j, r->metrics, JSON_COMPACT);
    fputc('\n', r->metrics);
    fflush(r->metrics);
    json_decref(j);
}

static void train_log_eval(train_run *r, double loss, double acc, long samples)
{
    if (r->rt->rank != 0) return;
    if (r->spec.family == MODEL_FAMILY_RESNET)
        printf("eval step=%ld loss=%.6f acc=%.4f samples=%ld\n", r->step, loss, acc, samples);
    else
        printf("eval step=%ld loss=%.6f ppl=%.3f samples=%ld\n", r->step, loss, exp(loss), samples);
    json_t *j = json_pack("{s:s, s:I, s:f, s:I}", "kind", "eval", "step", (json_int_t)r->step, "loss", loss,
                          "samples", (json_int_t)samples);
    if (r->spec.family == MODEL_FAMILY_RESNET) json_object_set_new(j, "acc", json_real(acc));
    else json_object_set_new(j, "ppl", json_real(exp(loss)));
    train_metrics_write(r, j);
    fflush(stdout);
}

/* DGC-Pro's choice per tensor (collective): rank 0 writes every tensor's density,
 * concentration and dense flag to metrics.jsonl ("dgc_layers") and prints a summary. */
static void train_log_dgc_layers(train_run *r)
{
    const param_table *pt = model_params(&r->m);
    int n = pt->count;
    float *dens = calloc((size_t)n, sizeof(float)), *conc = calloc((size_t)n, sizeof(float));
    uint8_t *dense = calloc((size_t)n, 1);
    CHECK(dens && conc && dense, "out of memory");
    dgc_layer_table(r->dgc, dens, conc, dense, r->step);
    if (r->rt->rank == 0) {
        json_t *layers = json_array();
        int nd = 0;
        float lo = INFINITY, hi = 0;
        for (int e = 0; e < n; e++) {
            json_array_append_new(layers, json_pack("{s:s, s:f, s:f, s:b}", "name", pt->entries[e].name, "density",
                                                    (double)dens[e], "concentration", (double)conc[e], "dense",
                                                    (int)dense[e]));
            if (dense[e]) nd++;
            else lo = fminf(lo, dens[e]), hi = fmaxf(hi, dens[e]);
        }
        printf("dgc layers: %d compressed (density %.3g .. %.3g), %d dense\n", n - nd, nd < n ? lo : 0.0f,
               nd < n ? hi : 0.0f, nd);
        train_metrics_write(r, json_pack("{s:s, s:I, s:o}", "kind", "dgc_layers", "step", (json_int_t)r->step,
                                         "layers", layers));
    }
    free(dens), free(conc), free(dense);
}

static status train_checkpoint(train_run *r)
{
    ckpt_content c;
    train_ckpt_content(r, &c);
    double t0 = now_s();
    TRY(ckpt_save(r->ckpt, &c));
    double ms = (now_s() - t0) * 1e3;
    if (r->rt->rank != 0) return STATUS_OK;
    if (!config_bool(r->cfg, "ckpt.async")) {
        printf("checkpoint step=%ld stall_ms=%.1f\n", r->step, ms);
        return STATUS_OK;
    }
    /* The previous async save has finished inside ckpt_save at the latest: its whole
     * cost to the step loop is known now. */
    ckpt_stats p;
    ckpt_get_stats(r->ckpt, &p);
    printf("checkpoint step=%ld save_ms=%.1f memcpy_ms=%.1f (async: copied and written in the background)", r->step,
           ms, p.memcpy_s * 1e3);
    if (p.write_s > 0)
        printf(" previous_stall_ms=%.1f previous_save_ms=%.1f previous_fence_ms=%.1f previous_finish_ms=%.1f "
               "previous_copy_ms=%.1f bytes=%zu previous_write_MB/s=%.0f",
               (p.save_s + p.fence_s + p.finish_s) * 1e3, p.save_s * 1e3, p.fence_s * 1e3, p.finish_s * 1e3,
               p.copy_s * 1e3, p.bytes, (double)p.bytes / p.write_s / 1e6);
    printf("\n");
    return STATUS_OK;
}

status train_loop(train_run *r)
{
    const runtime *rt = r->rt;
    const config *cfg = r->cfg;
    long log_every = (long)config_int(cfg, "train.log_interval"), eval_every = (long)config_int(cfg, "train.eval_interval");
    long ck_steps = (long)config_int(cfg, "ckpt.every_steps");
    double ck_minutes = config_float(cfg, "ckpt.every_minutes");
    double units = r->spec.family == MODEL_FAMILY_RESNET ? r->tb.global_batch : (double)r->tb.global_batch * r->T;
    const char *unit = r->spec.family == MODEL_FAMILY_RESNET ? "img/s" : "tok/s";
    double t_run = now_s(), t_ckpt = t_run, sum_ms = 0, sum_wait = 0;
    long timed = 0, first = r->step, saved = -1;
    bool stopped = false;
    int relaunch = 0;  /* the world size a control file asked for */
    step_stats ss = { 0 };
    train_heartbeat(r);
    while (r->step < r->steps) {
        TRY(train_step(r, &ss));
        train_heartbeat(r);
        ckpt_poll(r->ckpt);  /* commits a finished background checkpoint without waiting */
        if (r->step - first > 1) { sum_ms += ss.step_ms; sum_wait += ss.comm_wait_ms; timed++; }  /* skip warm-up */
        bool log_now = r->step % log_every == 0 || r->step == r->steps;
        if (log_now && r->dgc && dgc_active(r->dgc)) train_log_dgc_layers(r);
        if (rt->rank == 0 && log_now) {
            double eta = (r->steps - r->step) * ss.step_ms / 1e3;
            /* One plain line per interval, ETA included: under mpirun every rank's stdout is
             * a pseudo-terminal, so a terminal cannot be told from a batch log here. */
            printf("step=%ld loss=%.6f lr=%.4e gnorm=%.4f %s=%.1f step_ms=%.1f comm_wait_ms=%.2f eta=%.0fs", r->step,
                   ss.loss, ss.lr, ss.gnorm, unit, units / (ss.step_ms / 1e3), ss.step_ms, ss.comm_wait_ms, eta);
            const dgc_stats *ds = &r->dstats;
            if (r->dgc && dgc_active(r->dgc))
                printf(" dgc_density=%.4g dgc_sent_kB=%.1f dgc_ratio=%.1f residual=%.4g select_ms=%.2f exchange_ms=%.2f"
                       " zero_skipped=%zu", ds->density, ds->bytes_sent / 1e3,
                       ds->bytes_sent ? (double)ds->dense_bytes / ds->bytes_sent : 0.0, ds->residual_norm,
                       ds->select_s * 1e3, ds->exchange_s * 1e3, ds->zero_skipped);
            printf("\n");
            fflush(stdout);
            json_t *j = json_pack("{s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "kind", "train", "step",
                                  (json_int_t)r->step, "loss", ss.loss, "lr", ss.lr, "gnorm", ss.gnorm, unit,
                                  units / (ss.step_ms / 1e3), "step_ms", ss.step_ms, "comm_wait_ms", ss.comm_wait_ms);
            if (r->dgc && dgc_active(r->dgc))
                json_object_update_new(j, json_pack("{s:f, s:I, s:I, s:f, s:f, s:f, s:f}", "dgc_density", ds->density,
                                                    "dgc_bytes_sent", (json_int_t)ds->bytes_sent, "dgc_bytes_recv",
                                                    (json_int_t)ds->bytes_recv, "dgc_residual_norm", ds->residual_norm,
                                                    "dgc_select_ms", ds->select_s * 1e3, "dgc_encode_ms",
                                                    ds->encode_s * 1e3, "dgc_exchange_ms", ds->exchange_s * 1e3));
            if (r->dgc && dgc_active(r->dgc))  /* Pro 3: rank 0's slice */
                json_object_update_new(j, json_pack("{s:I, s:f, s:f}", "dgc_zero_skipped", (json_int_t)ds->zero_skipped,
                                                    "dgc_zero_precision", ds->zero_predicted ?
                                                        (double)ds->zero_hit / ds->zero_predicted : 1.0,
                                                    "dgc_zero_recall", ds->zero_true ?
                                                        (double)ds->zero_hit / ds->zero_true : 1.0));
            train_metrics_write(r, j);
        }
        /* after the step's line: it describes the step as it ran */
        if (r->dgc) train_dgc_auto(r, &ss, first);
        if (r->val_data && eval_every > 0 && r->step % eval_every == 0 && r->step < r->steps) {
            double l, acc;
            long n;
            TRY(train_eval(r, &l, &acc, &n));
            train_log_eval(r, l, acc, n);
        }
        /* Checkpoint triggers, signals and a control file, agreed by every rank (rank 0's
         * clock and file system decide). */
        int flags[3] = { signal_usr1 || signal_term, (int)signal_term, rt->rank == 0 && train_control_exists(r) };
        if (rt->rank == 0 && ck_minutes > 0 && now_s() - t_ckpt >= ck_minutes * 60) flags[0] = 1;
        if (r->ckpt && ck_steps > 0 && r->step % ck_steps == 0) flags[0] = 1;
        int agreed[3];
        MPI_Allreduce(flags, agreed, 3, MPI_INT, MPI_MAX, rt->world);
        signal_usr1 = 0;
        if (agreed[2]) {  /* before the checkpoint: a batch change is part of the state it saves */
            TRY(train_control(r, &relaunch));
            units = r->spec.family == MODEL_FAMILY_RESNET ? r->tb.global_batch : (double)r->tb.global_batch * r->T;
            if (relaunch) agreed[0] = 1;
        }
        if (agreed[0] && r->ckpt) {
            TRY(train_checkpoint(r));
            t_ckpt = now_s();
            saved = r->step;
        }
        if (relaunch) {
            stopped = true;
            break;
        }
        if (agreed[1]) {
            if (rt->rank == 0)
                printf("stopping at step %ld of %ld on request (SIGTERM or SIGUSR2): %s; exit code 3\n", r->step,
                       r->steps, r->ckpt ? "checkpoint committed, a relaunch resumes from it" : "checkpoints are off");
            stopped = r->step < r->steps;
            break;
        }
    }
    if (r->ckpt && r->step == r->steps && saved != r->step) TRY(train_checkpoint(r));
    if (r->ckpt) {
        TRY(ckpt_wait(r->ckpt));
        ckpt_stats cs;
        ckpt_get_stats(r->ckpt, &cs);
        if (rt->rank == 0 && cs.write_s > 0)
            printf("checkpoint last background write: %.0f MB in %.2f s = %.0f MB/s\n", (double)cs.bytes / 1e6,
                   cs.write_s, (double)cs.bytes / cs.write_s / 1e6);
    }
    if (relaunch && rt->rank == 0) TRY(train_relaunch_write(r, relaunch));  /* after the commit it points to */
    if (r->val_data && !stopped) {  /* a stop is often on a deadline: evaluation waits for the end */
        double l, acc;
        long n;
        TRY(train_eval(r, &l, &acc, &n));
        train_log_eval(r, l, acc, n);
    }
    double traffic[2] = { r->dgc_sent, r->dgc_dense };
    MPI_Allreduce(MPI_IN_PLACE, traffic, 2, MPI_DOUBLE, MPI_SUM, rt->world);
    if (rt->rank == 0 && traffic[0] > 0)
        printf("dgc: gradient traffic between nodes %.3f MB against %.3f MB for dense ring allreduces: %.1fx less\n",
               traffic[0] / 1e6, traffic[1] / 1e6, traffic[1] / traffic[0]);
    if (rt->rank == 0) {
        double mean = timed ? sum_ms / timed : ss.step_ms, wait = timed ? sum_wait / timed : ss.comm_wait_ms;
        printf("summary: steps=%ld final_loss=%.6f mean_step_ms=%.1f %s=%.1f comm_wait_ms=%.2f comm_ms=%.2f "
               "exposed_comm=%.0f%% time_s=%.1f run_dir=%s\n", r->step, ss.loss, mean, unit, units / (mean / 1e3),
               wait, r->comm_ms, r->comm_ms > 0 ? 100 * wait / r->comm_ms : 0.0, now_s() - t_run, r->run_dir);
        json_t *j = json_pack("{s:s, s:I, s:f, s:f, s:f, s:f}", "kind", "summary", "steps", (json_int_t)r->step,
                              "final_loss", ss.loss, "mean_step_ms", mean, "comm_wait_ms", wait, "comm_ms", r->comm_ms);
        train_metrics_write(r, j);
        fflush(stdout);
    }
    return relaunch ? STATUS_RELAUNCH : stopped ? STATUS_STOPPED : STATUS_OK;
}

void train_free(train_run *r)
{
    if (r->ckpt) ckpt_writer_free(r->ckpt);
    dgc_free(r->dgc);
    if (r->use_zero) zero_free(&r->zero);
    if (r->metrics) fclose(r->metrics);
    if (r->heartbeat_fd >= 0) close(r->heartbeat_fd);
    bucket_free(&r->bm);
    free(r->layer_first), free(r->layer_count), free(r->raw_ids), free(r->samples);
    if (r->val_data) data_free(r->val_data);
    if (r->train_data) data_free(r->train_data);
    model_batch_free(&r->batch);
    if (r->m.spec.name[0]) model_free(&r->m);
    memset(r, 0, sizeof *r);
}
