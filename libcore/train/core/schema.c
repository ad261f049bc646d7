/* schema — the trainer's config keys and the one definition of a training
 * checkpoint's content: the tensor groups and blobs (train.h, TRAIN_CKPT_*), for a
 * run (train_ckpt_content) and for a model alone (train_ckpt_model_content, what
 * nebula-ckpt convert writes). Readers name groups only through these functions,
 * so a new group is added here and nowhere else. */
#include <math.h>
#include <string.h>

#include "core.h"
#include "base/rng.h"

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
      .help = "where metrics.jsonl, config.ini (the resolved config), heartbeat and ckpt/ go (created); "
              "one run at a time (RUN_DIR/lock)" },
    { "train", "max_grad_norm", CONFIG_TYPE_FLOAT, "1.0", .min = 0, .max = 1e30,
      .help = "clip the global gradient L2 norm to this (0: no clipping)" },
    { "train", "max_skipped_steps", CONFIG_TYPE_INT, "10", .min = 0, .max = 1e9,
      .help = "steps in a row that may be skipped for a non-finite loss or gradient norm; one more ends the run "
              "as diverged (exit 1)" },
    { "train", "threads", CONFIG_TYPE_INT, "0", .min = 0, .max = 4096,
      .help = "OpenMP and BLAS threads per rank (0: the cores this rank is bound to)" },
    { "train", "bucket_bytes", CONFIG_TYPE_SIZE, "25M", .min = 4096, .max = 1ull << 34,
      .help = "gradient bucket size (PyTorch DDP's bucket_cap_mb = 25)" },

    { "sched", "mode", CONFIG_TYPE_ENUM, "off", .choices = "off|static|balanced|performance|economy",
      .help = "heterogeneous ranks: off (b x accum samples each), static (shares by sched.shares), balanced "
              "(by measured speed), performance (shortest predicted step), economy (cheapest ranks reaching "
              "sched.target)" },
    { "sched", "shares", CONFIG_TYPE_STRING, "",
      .help = "static: one positive weight per data-parallel rank, e.g. 1,1,0.4,0.4" },
    { "sched", "min_share", CONFIG_TYPE_FLOAT, "0.1", .min = 0, .max = 1,
      .help = "every rank gets at least this fraction of an equal share (at least 1 sample; 0: may get none)" },
    { "sched", "target", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e12,
      .help = "economy: samples per second to reach with the least cost" },
    { "sched", "costs", CONFIG_TYPE_STRING, "",
      .help = "economy: one positive cost per second per data-parallel rank (empty: all 1), e.g. 3,3,1,1" },
    { "sched", "interval", CONFIG_TYPE_INT, "10", .min = 1, .max = 1 << 30,
      .help = "balanced: steps between measurements and assignments" },
    { "zero", "stage", CONFIG_TYPE_INT, "0", .min = 0, .max = 1,
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
    { "optim", "freeze", CONFIG_TYPE_STRING, "",
      .help = "comma-separated glob patterns of tensor names (as nebula-ckpt info lists them: 'wte.weight,h.0.*') "
              "that do not train: the optimizer leaves them and their moments as they are and their gradients are "
              "zeroed before clipping (PyTorch's requires_grad = False; a frozen backbone); empty: none" },
    { "optim", "schedule", CONFIG_TYPE_ENUM, "cosine", .choices = "constant|cosine|linear|step",
      .help = "learning-rate shape after warmup (cosine and linear reach min_lr at train.steps)" },
    { "optim", "warmup_steps", CONFIG_TYPE_INT, "0", .min = 0, .max = 1e12, .help = "linear warmup" },
    { "optim", "min_lr", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e3, .help = "cosine/linear floor" },
    { "optim", "step_size", CONFIG_TYPE_INT, "1000", .min = 1, .max = 1e12, .help = "step schedule: period" },
    { "optim", "gamma", CONFIG_TYPE_FLOAT, "0.1", .min = 0, .max = 1e3, .help = "step schedule: factor" },
    { "data", "train", CONFIG_TYPE_STRING, "synthetic",
      .help = "training data: Nebula or llm.c token file, HDF5 or CIFAR-10 images, synthetic (a stream of random "
              "samples, a function of train.seed), or synthetic-fixed (one random batch from train.seed as every "
              "micro-batch, as nebula-bench model times it; not for data.val)" },
    { "data", "val", CONFIG_TYPE_STRING, "", .help = "held-out data in the same format (empty: no evaluation)" },
    { "data", "tokenizer", CONFIG_TYPE_STRING, "",
      .help = "the tokenizer of the token files (a directory or file: tokenizer.json, vocab.json + merges.txt, vocab.txt); "
              "empty: the one prepare wrote beside data.train, else bytes. Read by sample and convert --to hf" },
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
    { "ckpt", "keep_last", CONFIG_TYPE_INT, "3", .min = 1, .max = 1e6,
      .help = "the newest committed checkpoints kept (older ones are removed)" },
    { "ckpt", "async", CONFIG_TYPE_BOOL, "false",
      .help = "copy the state to memory and write it in a background thread" },
    { "ckpt", "resume", CONFIG_TYPE_STRING, "auto",
      .help = "auto (newest committed checkpoint of run_dir, if any), none, a checkpoint directory, or "
              "model:REPO@REF (a commit of a nebula-model repository, checked out under run_dir/model-checkout)" },
    { "ckpt", "commit_to", CONFIG_TYPE_STRING, "",
      .help = "REPO or REPO:BRANCH: rank 0 commits checkpoints into that nebula-model repository (made by "
              "`nebula-model init REPO`), on BRANCH, else on its HEAD's branch, in a background thread (empty: off)" },
    { "ckpt", "commit_every", CONFIG_TYPE_INT, "1", .min = 1, .max = 1e9,
      .help = "commit_to: every Nth committed checkpoint of the launch is committed" },
    { "ckpt", "commit_when", CONFIG_TYPE_ENUM, "always", .choices = "always|improved",
      .help = "commit_to: always, or improved (only when the held-out loss at the checkpoint's step is below the "
              "last commit's; needs data.val)" },
    { "elastic", "lr_rule", CONFIG_TYPE_ENUM, "linear", .choices = "linear|sqrt|none",
      .help = "how lr follows a global_batch change from run_dir/control (linear: Goyal et al. 2017; sqrt: "
              "Adam-family, Malladi et al. 2022), unless the file names lr_rule" },
    /* alert rules (control/alert.c, docs/monitor.md): a threshold (0: the rule is off) and the
     * actions it takes, a list of log, checkpoint, stop, lower_lr, rollback, disable_dgc */
    { "monitor", "explosion", CONFIG_TYPE_FLOAT, "1e5", .min = 0, .max = 1e300,
      .help = "gradient explosion: a global gradient norm above this (0: off)" },
    { "monitor", "explosion_action", CONFIG_TYPE_STRING, "log", .help = "actions of the explosion rule" },
    { "monitor", "nonfinite_action", CONFIG_TYPE_STRING, "rollback",
      .help = "divergence guard: actions when more than train.max_skipped_steps steps in a row had a non-finite "
              "loss or gradient (log: end the run as diverged, exit 1, as before)" },
    { "monitor", "spike_z", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e9,
      .help = "loss spike: the loss's robust z-score (median, MAD) over monitor.window above this (0: off)" },
    { "monitor", "spike_action", CONFIG_TYPE_STRING, "log", .help = "actions of the loss-spike rule" },
    { "monitor", "stagnation_patience", CONFIG_TYPE_INT, "0", .min = 0, .max = 1e9,
      .help = "stagnation: this many evaluations in a row without a better held-out loss (0: off; needs data.val)" },
    { "monitor", "stagnation_min_delta", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1e30,
      .help = "stagnation: how much lower a held-out loss must be to count as better" },
    { "monitor", "stagnation_action", CONFIG_TYPE_STRING, "log", .help = "actions of the stagnation rule" },
    { "monitor", "throughput_drop", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1,
      .help = "throughput drop: 3 steps in a row below this fraction of monitor.window's median (0: off)" },
    { "monitor", "throughput_drop_action", CONFIG_TYPE_STRING, "log", .help = "actions of the throughput rule" },
    { "monitor", "comm_stall", CONFIG_TYPE_FLOAT, "0", .min = 0, .max = 1,
      .help = "communication stall: a rank waited for gradient communication this fraction of the step (0: off)" },
    { "monitor", "comm_stall_action", CONFIG_TYPE_STRING, "log", .help = "actions of the comm-stall rule" },
    { "monitor", "memory_growth", CONFIG_TYPE_SIZE, "0", .min = 0, .max = 1ull << 50,
      .help = "memory growth: a rank's resident set grew this much since the warm-up steps (0: off)" },
    { "monitor", "memory_growth_action", CONFIG_TYPE_STRING, "log", .help = "actions of the memory-growth rule" },
    { "monitor", "window", CONFIG_TYPE_INT, "50", .min = 8, .max = TRAIN_ALERT_WINDOW_MAX,
      .help = "steps of loss and throughput history the spike and throughput rules compare with" },
    { "monitor", "cooldown", CONFIG_TYPE_INT, "10", .min = 1, .max = 1e9,
      .help = "steps before a rule that fired may fire again" },
    { "monitor", "lr_factor", CONFIG_TYPE_FLOAT, "0.5", .min = 1e-6, .max = 1,
      .help = "lower_lr: the factor each action multiplies the learning rate by" },
    { "monitor", "max_rollbacks", CONFIG_TYPE_INT, "1", .min = 0, .max = 1e6,
      .help = "rollbacks a run may take; a rollback past them ends the run as diverged (exit 1)" },
    /* what the pictures are drawn from besides the train records (samples.c, docs/pictures.md) */
    { "monitor", "attention_interval", CONFIG_TYPE_INT, "100", .min = 0, .max = 1e12,
      .help = "GPT-2, BERT: steps between attention records (per layer and head the entropy and largest weight "
              "on a fixed probe batch, rank 0; 0: off)" },
    { "runtime", "slowdown", CONFIG_TYPE_STRING, "",
      .help = "test hook RANK:MS: that rank sleeps MS ms in every step's compute (a planted straggler; empty: off)" },
    { "runtime", "zero_grad_layer", CONFIG_TYPE_INT, "-1", .min = -1, .max = 1 << 20,
      .help = "test hook: this layer's reduced gradient is zeroed every step (a planted dead layer; -1: off)" },
    /* what the run shows (tensorboard.c, docs/metrics.md) */
    { "monitor", "tensorboard", CONFIG_TYPE_BOOL, "false",
      .help = "TensorBoard event files in RUN_DIR/tb (a new file per launch): the train and eval records' numbers "
              "as scalars, and the layers' gradient and weight histograms (tensorboard --logdir RUN_DIR/tb)" },
    { "monitor", "histogram_interval", CONFIG_TYPE_INT, "100", .min = 0, .max = 1e12,
      .help = "every this many steps: per layer, the histogram of the averaged gradient before clipping (the "
              "grad_hist record of metrics.jsonl; with monitor.tensorboard also grad/ and weight/ histograms; 0: off)" },
    /* profiler mode (profile.c, docs/profile.md) */
    { "profile", "mode", CONFIG_TYPE_ENUM, "auto", .choices = "auto|on|off",
      .help = "per-phase and per-layer times (and PAPI counters): on for the whole run (table at the end, "
              "RUN_DIR/profile.json); auto: a one-screen profile of profile.steps steps when the model and batch "
              "shape are not in profile.shapes yet; off" },
    { "profile", "steps", CONFIG_TYPE_INT, "5", .min = 1, .max = 1e6,
      .help = "auto: steps the first-run profile covers (after one warm-up step)" },
    { "profile", "events", CONFIG_TYPE_STRING, "PAPI_TOT_CYC,PAPI_TOT_INS,PAPI_FP_OPS,PAPI_L2_TCM,PAPI_L3_TCM",
      .help = "PAPI events counted per phase and layer, comma-separated, at most 8 (none: no counters); an event "
              "this machine cannot count is reported n/a with PAPI's reason, never an error" },
    /* the communication timeline (trace.c, docs/profile.md) */
    { "trace", "enable", CONFIG_TYPE_BOOL, "false",
      .help = "record a timeline of the traced steps (layers, phases, every bucket's allreduce and its algorithm's "
              "phases, DGC-Pro, checkpoints) on every rank and write RUN_DIR/trace.json (Chrome trace-event JSON, "
              "for Perfetto or chrome://tracing) on a clock aligned to rank 0's" },
    { "trace", "steps", CONFIG_TYPE_STRING, "5",
      .help = "traced steps: N (the N steps after the launch's first, its warm-up), A-B (steps A to B as the "
              "metrics lines number them) or all" },
    { "trace", "max_events", CONFIG_TYPE_INT, "65536", .min = 64, .max = 1 << 25,
      .help = "events each rank keeps, 40 bytes each, allocated at setup; past it the oldest are dropped and counted" },
    { "profile", "shapes", CONFIG_TYPE_STRING, "",
      .help = "the record of shapes already profiled by auto mode (empty: RUN_DIR/profile-shapes; a shared path "
              "makes the rule span runs)" },
    /* behaviour switches (docs/compat.md): false is today's numerics, true an earlier release's */
    { "compat", "sched_floor_first", CONFIG_TYPE_BOOL, "false",
      .help = "sched balanced: every rank the floor first, the rest in proportion to its busy speed (before d9fa268; "
              "the floor dilutes the proportion)" },
    { "compat", "dgc_unscaled_lr", CONFIG_TYPE_BOOL, "false",
      .help = "DGC-Pro: momentum-corrected accumulation without the learning rate folded in (before 2b0c7fc; a "
              "delayed update is applied at the rate of the step that sends it)" },
};
const int train_schema_nkeys = (int)(sizeof train_schema_keys / sizeof train_schema_keys[0]);

/* Schema version 2 renamed keys whose names broke the pattern of their neighbours (docs/compat.md). */
static const config_alias train_aliases[] = {
    { CONFIG_ALIAS_RENAMED, 2, "train.zero", "zero.stage", NULL, "ZeRO's keys live in [zero]" },
    { CONFIG_ALIAS_RENAMED, 2, "train.clip", "train.max_grad_norm", NULL, "says what is clipped" },
    { CONFIG_ALIAS_RENAMED, 2, "ckpt.keep", "ckpt.keep_last", NULL, "says which are kept" },
    { CONFIG_ALIAS_RENAMED, 2, "dgc.values", "dgc.value_dtype", NULL, "an encoding, not the values" },
    { CONFIG_ALIAS_RENAMED, 2, "monitor.throughput_action", "monitor.throughput_drop_action", NULL,
      "named after its rule's threshold, as the other rules' actions" },
    { CONFIG_ALIAS_RENAMED, 2, "monitor.memory_action", "monitor.memory_growth_action", NULL,
      "named after its rule's threshold, as the other rules' actions" },
};

const config_compat train_config_compat = {
    .version = 2,
    .aliases = train_aliases,
    .naliases = (int)(sizeof train_aliases / sizeof train_aliases[0]),
};

int train_config_schema(config_key *out, int cap)
{
    const config_key base[] = { RUNTIME_CONFIG_KEYS, COMM_CONFIG_KEYS, GRID_CONFIG_KEYS, MODEL_CONFIG_KEYS,
                                DGC_CONFIG_KEYS, DEVICE_CONFIG_KEYS };
    int n = 0, nbase = (int)(sizeof base / sizeof base[0]);
    CHECK(nbase + train_schema_nkeys <= cap, "the schema array holds every key");
    for (int i = 0; i < nbase; i++) out[n++] = base[i];
    for (int i = 0; i < train_schema_nkeys; i++) out[n++] = train_schema_keys[i];
    return n;
}

static const char *const train_ckpt_group_names[TRAIN_CKPT_NGROUPS] = {
    TRAIN_CKPT_PARAMS, TRAIN_CKPT_OPTIM_M, TRAIN_CKPT_OPTIM_V, TRAIN_CKPT_BUFFERS,
};

const char *train_ckpt_group_name(train_ckpt_group g)
{
    CHECK(g >= 0 && g < TRAIN_CKPT_NGROUPS, "a checkpoint group of train_ckpt_group");
    return train_ckpt_group_names[g];
}

int train_ckpt_group_find(const char *name)
{
    for (int g = 0; g < TRAIN_CKPT_NGROUPS; g++)
        if (!strcmp(train_ckpt_group_names[g], name)) return g;
    return -1;
}

const param_table *train_ckpt_group_table(model *m, train_ckpt_group g)
{
    return g == TRAIN_CKPT_GROUP_BUFFERS ? model_state_table(m) : model_params(m);
}

bool train_ckpt_group_is_optim(train_ckpt_group g)
{
    return g == TRAIN_CKPT_GROUP_OPTIM_M || g == TRAIN_CKPT_GROUP_OPTIM_V;
}

void train_ckpt_model_content(ckpt_content *c, model *m, float *moment_m, float *moment_v, data_state *loader,
                              const char *config_text)
{
    memset(c, 0, sizeof *c);
    param_table *pt = model_params(m);
    c->model = m->spec.name;
    c->table_hash = param_table_hash(pt);
    c->config_text = config_text;
    c->groups[c->ngroups++] = (ckpt_tensors){ TRAIN_CKPT_PARAMS, pt, model_buffers(m)->params, false };
    if (moment_m) c->groups[c->ngroups++] = (ckpt_tensors){ TRAIN_CKPT_OPTIM_M, pt, moment_m, false };
    if (moment_v) c->groups[c->ngroups++] = (ckpt_tensors){ TRAIN_CKPT_OPTIM_V, pt, moment_v, false };
    /* ResNet's running statistics change in the forward pass: staged at once (copy_in_save) */
    if (model_state_table(m))
        c->groups[c->ngroups++] = (ckpt_tensors){ TRAIN_CKPT_BUFFERS, model_state_table(m), model_state(m), true };
    if (loader) c->blobs[c->nblobs++] = (ckpt_blob){ TRAIN_CKPT_LOADER, loader, sizeof *loader, false, false };
    c->check = train_ckpt_check_values;  /* a load refuses what no run writes */
}

/* What a checkpoint of this run holds: parameters, optimizer moments, ResNet's BN
 * statistics, and the loader position (the same on every rank; a blob so that later
 * per-rank state joins it the same way). */
void train_ckpt_content(train_run *r, ckpt_content *c)
{
    param_buffers *pb = model_buffers(&r->m);
    float *mm = r->use_zero ? r->zero.m : pb->m, *mv = r->use_zero ? r->zero.v : pb->v;
    train_ckpt_model_content(c, &r->m, mm, r->opt.use_sgd ? NULL : mv, &r->loader_state, r->config_text);
    c->step = r->step;
    c->ranks_per_node = r->rt->max_local_size;
    c->timeout_s = r->timeout_s;  /* comm.timeout bounds the writer's and the loader's collectives */
    c->wd = r->rt->wd;            /* and, through the watchdog, their HDF5 collective I/O */
    /* ZeRO: each rank holds and writes its shards of the moments; the file holds full
     * tensors either way, so checkpoints load with or without ZeRO at any world size */
    if (r->use_zero)
        for (int g = 0; g < c->ngroups; g++)
            if (train_ckpt_group_is_optim(train_ckpt_group_find(c->groups[g].group))) c->shards[g] = &r->zero.ck;
    /* optional: checkpoints older than elastic control resume with the config's batch */
    c->blobs[c->nblobs++] = (ckpt_blob){ TRAIN_CKPT_ELASTIC, &r->elastic, sizeof r->elastic, true, false };
    /* optional: a checkpoint written without compression, or at another node size, resumes with a fresh state */
    if (r->dgc)
        c->blobs[c->nblobs++] = (ckpt_blob){ TRAIN_CKPT_DGC, dgc_state(r->dgc), dgc_state_bytes(r->dgc), true, false };
    /* optional: a checkpoint older than the monitor resumes with no lowered rate and no rollback taken */
    c->blobs[c->nblobs++] = (ckpt_blob){ TRAIN_CKPT_ALERT, &r->alert_ck, sizeof r->alert_ck, true, false };
    /* optional: a checkpoint older than hot reload resumes with no change applied */
    c->blobs[c->nblobs++] = (ckpt_blob){ TRAIN_CKPT_RELOAD, r->reload.blob, sizeof r->reload.blob, true, false };
    /* optional: heterogeneous shares; without them (another layout, an older checkpoint) the config's */
    if (r->share.mode != TRAIN_SCHED_MODE_OFF)
        c->blobs[c->nblobs++] = (ckpt_blob){ TRAIN_CKPT_SCHED, &r->share.ck, sizeof r->share.ck, true, false };
    train_tp_content(r, c, false);  /* tensor parallelism: the whole model's tensors, this shard's pieces */
}

/* ---- values a checksum cannot vouch for (ckpt_value_check) ---- */

/* The schema's bounds of section.key (it is one of train_schema_keys). */
static const config_key *schema_key(const char *section, const char *name)
{
    for (int k = 0; k < train_schema_nkeys; k++)
        if (!strcmp(train_schema_keys[k].section, section) && !strcmp(train_schema_keys[k].name, name))
            return &train_schema_keys[k];
    CHECK(false, "the value checks name keys of train_schema_keys");
    return NULL;
}

/* A float32 tensor piece: finite everywhere; AdamW's second moment, a mean of squares,
 * never below 0. */
static status check_tensor(const char *dataset, const float *v, size_t n, char *why, size_t len)
{
    size_t bad = 0, negative = 0;
    float first_negative = 0;
    bool second_moment = !strncmp(dataset, "/" TRAIN_CKPT_OPTIM_V "/", strlen(TRAIN_CKPT_OPTIM_V) + 2);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) bad++;
        else if (second_moment && v[i] < 0 && !negative++) first_negative = v[i];
    }
    if (bad) {
        snprintf(why, len, "%s holds %zu NaN or Inf value(s) of %zu read here: written by a run that had diverged, "
                 "or forged", dataset, bad, n);
        return STATUS_CORRUPT;
    }
    if (negative) {
        snprintf(why, len, "%s holds %zu negative value(s) (the first %g) of %zu read here: AdamW's second moment is "
                 "a mean of squares, >= 0", dataset, negative, (double)first_negative, n);
        return STATUS_CORRUPT;
    }
    return STATUS_OK;
}

/* "DATASET: field = value, outside RANGE (why)"; always STATUS_CORRUPT. */
static status refuse(char *why, size_t len, const char *dataset, const char *field, double value, const char *range,
                     const char *reason)
{
    snprintf(why, len, "%s: %s = %.17g, outside %s (%s)", dataset, field, value, range, reason);
    return STATUS_CORRUPT;
}

static bool within(double v, double lo, double hi)
{
    return v >= lo && v <= hi;  /* false for NaN */
}

/* The checks of blobs owned above core (train_ckpt_blob_check_add), by blob name. */
#define BLOB_CHECKS_MAX 8
static struct {
    const char *blob;
    ckpt_value_check check;
} blob_checks[BLOB_CHECKS_MAX];

void train_ckpt_blob_check_add(const char *blob, ckpt_value_check check)
{
    int i = 0;
    while (i < BLOB_CHECKS_MAX && blob_checks[i].blob && strcmp(blob_checks[i].blob, blob) != 0) i++;
    CHECK(i < BLOB_CHECKS_MAX, "more blob checks than BLOB_CHECKS_MAX");
    blob_checks[i].blob = blob;
    blob_checks[i].check = check;
}

status train_ckpt_check_values(const char *dataset, const void *data, size_t bytes, char *why, size_t len)
{
    if (strncmp(dataset, "/rank/", 6) != 0) return check_tensor(dataset, data, bytes / sizeof(float), why, len);
    const char *blob = dataset + 6;
    for (int i = 0; i < BLOB_CHECKS_MAX && blob_checks[i].blob; i++)
        if (!strcmp(blob_checks[i].blob, blob)) return blob_checks[i].check(dataset, data, bytes, why, len);
    char range[96];
    double gb_max = schema_key("train", "global_batch")->max;
    if (!strcmp(blob, TRAIN_CKPT_DGC)) return dgc_state_check(dataset, data, bytes, why, len);
    if (!strcmp(blob, TRAIN_CKPT_ALERT) && bytes == sizeof(train_alert_ckpt)) {
        train_alert_ckpt a;
        memcpy(&a, data, sizeof a);
        /* 0 is allowed: lower_lr multiplies the scale by monitor.lr_factor without a floor,
         * so a long run of lowerings may underflow it to 0 (the rate stays 0) */
        if (!within(a.lr_scale, 0, 1))
            return refuse(why, len, dataset, "lr_scale", a.lr_scale, "[0, 1]",
                          "a product of monitor.lr_factor values, each in [1e-6, 1]");
        double most = schema_key("monitor", "max_rollbacks")->max;
        snprintf(range, sizeof range, "[0, %.0f]", most);
        if (!within((double)a.rollbacks, 0, most))
            return refuse(why, len, dataset, "rollbacks", (double)a.rollbacks, range, "monitor.max_rollbacks' range");
    } else if (!strcmp(blob, TRAIN_CKPT_ELASTIC) && bytes == sizeof(train_elastic)) {
        train_elastic e;
        memcpy(&e, data, sizeof e);
        snprintf(range, sizeof range, "[1, %.0f]", gb_max);
        if (!within((double)e.global_batch, 1, gb_max))
            return refuse(why, len, dataset, "global_batch", (double)e.global_batch, range, "train.global_batch's range");
        snprintf(range, sizeof range, "(0, %.0f]", gb_max);
        if (!within(e.lr_factor, 1e-300, gb_max))
            return refuse(why, len, dataset, "lr_factor", e.lr_factor, range,
                          "elastic.lr_rule of a ratio of two global batches");
    } else if (!strcmp(blob, TRAIN_CKPT_SCHED) && bytes == sizeof(train_sched_ckpt)) {
        train_sched_ckpt k;
        memcpy(&k, data, sizeof k);
        snprintf(range, sizeof range, "[0, %.0f]", gb_max);
        if (!within((double)k.global_batch, 0, gb_max))
            return refuse(why, len, dataset, "global_batch", (double)k.global_batch, range, "train.global_batch's range");
        double most = k.global_batch ? (double)k.global_batch : gb_max;
        snprintf(range, sizeof range, "[0, %.0f]", most);
        if (!within((double)k.first, 0, most) || !within((double)k.count, 0, most - (double)k.first))
            return refuse(why, len, dataset, within((double)k.first, 0, most) ? "count" : "first",
                          within((double)k.first, 0, most) ? (double)k.count : (double)k.first, range,
                          "a share of the global batch");
        if (!within(k.speed, 0, 1e300) || !within(k.rate, 0, 1e300) || !within(k.fixed_s, 0, 1e300))
            return refuse(why, len, dataset, !within(k.speed, 0, 1e300) ? "speed" : !within(k.rate, 0, 1e300) ? "rate"
                                                                                                             : "fixed_s",
                          !within(k.speed, 0, 1e300) ? k.speed : !within(k.rate, 0, 1e300) ? k.rate : k.fixed_s,
                          "[0, 1e300]", "a measured rate or time: finite, >= 0");
    } else if (!strcmp(blob, TRAIN_CKPT_LOADER) && bytes == sizeof(data_state)) {
        data_state d;
        memcpy(&d, data, sizeof d);
        snprintf(range, sizeof range, "[0, %.0f]", (double)(RNG_STEP_LIMIT - 2));
        if (d.epoch > RNG_STEP_LIMIT - 2)
            return refuse(why, len, dataset, "epoch", (double)d.epoch, range, "the epochs a sample order can number");
    }
    return STATUS_OK;
}

const ckpt_blob *train_ckpt_blob(const ckpt_content *c, const char *name)
{
    for (int i = 0; i < c->nblobs; i++)
        if (!strcmp(c->blobs[i].name, name)) return &c->blobs[i];
    return NULL;
}

void train_schedule_from_config(lr_schedule *s, const config *cfg)
{
    CHECK(lr_schedule_kind_parse(config_str(cfg, "optim.schedule"), &s->kind), "schedule enum out of sync");
    s->base_lr = config_float(cfg, "optim.lr");
    s->warmup_steps = (long)config_int(cfg, "optim.warmup_steps");
    s->total_steps = (long)config_int(cfg, "train.steps");
    s->min_lr = config_float(cfg, "optim.min_lr");
    s->step_size = (long)config_int(cfg, "optim.step_size");
    s->gamma = config_float(cfg, "optim.gamma");
}

status train_grid_allowed(const config *cfg, const grid_shape *g)
{
    const grid_shape gs = *g;
    bool hybrid = gs.tp > 1 || gs.pp > 1;
    if (hybrid && config_bool(cfg, "ckpt.async")) {
        log_error0("ckpt.async = true with parallel.tp = %d, parallel.pp = %d: a shard or stage writes its pieces "
                   "of the whole tensors collectively (parallel HDF5), which the background writer does not; set "
                   "ckpt.async = false", gs.tp, gs.pp);
        return STATUS_INPUT;
    }
    if (gs.pp > 1 && config_str(cfg, "optim.freeze")[0]) {
        log_error0("optim.freeze (%s) with parallel.pp = %d: a stage holds only its own tensors, so a pattern could "
                   "match on one stage and not another; freeze with parallel.pp = 1", config_origin(cfg, "optim.freeze"),
                   gs.pp);
        return STATUS_INPUT;
    }
    if (hybrid && strcmp(config_str(cfg, "sched.mode"), "off")) {
        log_error0("sched.mode = %s (%s) with parallel.tp = %d, parallel.pp = %d: heterogeneous shares are for data "
                   "parallelism; parallel.tp and parallel.pp must be 1 (or set sched.mode = off)",
                   config_str(cfg, "sched.mode"), config_origin(cfg, "sched.mode"), gs.tp, gs.pp);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}
