/* train — the trainer: one data-parallel training run of any model family. It owns
 * the step (micro-batches forward, backward with the bucket hooks, gradient
 * reduction or DGC-Pro's exchange, clipping, the optimizer, ZeRO), evaluation, the
 * metrics lines and file, the checkpoint content and its schema (the group and blob
 * names every program that reads or writes a training checkpoint uses), and the
 * elastic control (heartbeat, control file, relaunch). nebula-train's main() is a
 * script over train_setup -> train_resume -> train_loop -> train_free, and
 * nebula-bench model times train_step itself (train_setup on one rank with
 * data.train = synthetic-fixed, then train_step in its own loop).
 *
 * Files, in three sub-modules with a one-way order core < control < observe
 * (tools/check-layers.sh; train_impl.h says how the top files compose them):
 * core/ (batch arithmetic and loaders, checkpoint content and schema, the step,
 * pipeline and tensor grids, evaluation, the seams upward), control/ (elastic and the
 * control file, hot reload, the run directory, divergence, alert rules, heterogeneous
 * shares), observe/ (metrics and its sinks, TensorBoard, profiler, trace, samples);
 * train.c (setup, resume, rollback, free) and loop.c (the step loop) on top.
 *
 * The one design decision: every source of randomness after initialisation is a
 * counter-based function of (seed, step, sample) — the data order and augmentation
 * (data.h), BERT's masking (keyed by the sample's index in the file) — so the whole
 * state of a run is the flat buffers plus (step, data position). That is what makes
 * a resumed run bit-identical to an uninterrupted one, and a run at another world
 * size with the same global batch read the same samples. */
#ifndef NEBULA_TRAIN_H
#define NEBULA_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/config.h"
#include "base/fault.h"
#include "base/runtime.h"
#include "ckpt/ckpt.h"
#include "comm/bucket.h"
#include "comm/comm.h"
#include "comm/grid.h"
#include "data/data.h"
#include "dgc/dgc.h"
#include "nn/device.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/zero.h"

/* ---- checkpoint schema: the one definition of what a training checkpoint holds ---- */

/* Tensor groups (one dataset per tensor under /GROUP/) and per-rank blobs (/rank/NAME). */
#define TRAIN_CKPT_PARAMS  "params"   /* the parameters (parameter table) */
#define TRAIN_CKPT_OPTIM_M "optim/m"  /* AdamW's first moment, SGD's momentum (parameter table) */
#define TRAIN_CKPT_OPTIM_V "optim/v"  /* AdamW's second moment (parameter table) */
#define TRAIN_CKPT_BUFFERS "buffers"  /* non-trainable state: ResNet's BN statistics (state table) */
#define TRAIN_CKPT_LOADER  "loader"   /* blob: data_state, the training loader's position */
#define TRAIN_CKPT_ELASTIC "elastic"  /* blob, optional: train_elastic */
#define TRAIN_CKPT_DGC     "dgc"      /* blob, optional: DGC-Pro's per-rank state */
#define TRAIN_CKPT_ALERT   "monitor"  /* blob, optional: train_alert_ckpt (the alert rules' state) */
#define TRAIN_CKPT_RELOAD  "reload"   /* blob, optional: train_reload's history (JSON text) */
#define TRAIN_CKPT_SCHED   "sched"    /* blob, optional: train_sched_ckpt, this rank's share */

/* The tensor groups of a model's checkpoint, in the order they are written. */
typedef enum train_ckpt_group {
    TRAIN_CKPT_GROUP_PARAMS = 0,
    TRAIN_CKPT_GROUP_OPTIM_M,
    TRAIN_CKPT_GROUP_OPTIM_V,
    TRAIN_CKPT_GROUP_BUFFERS,
    TRAIN_CKPT_NGROUPS
} train_ckpt_group;

/* "params", "optim/m", ... */
const char *train_ckpt_group_name(train_ckpt_group g);
/* The group a name denotes, or -1. */
int train_ckpt_group_find(const char *name);
/* The table a group is laid out by in m: the parameter table, or the state table for
 * buffers (NULL when the model keeps none). */
const param_table *train_ckpt_group_table(model *m, train_ckpt_group g);
/* Whether a group holds optimizer state (a reader may leave it out). */
bool train_ckpt_group_is_optim(train_ckpt_group g);

/* The content of a checkpoint of model m alone: params (m's own buffer), the moments
 * given (moment_m / moment_v, each NULL to leave the group out), buffers (m's state,
 * when the family keeps any) and, when loader is not NULL, the loader blob. Header
 * fields: model name, table hash, config_text; step 0. Allocates nothing. */
void train_ckpt_model_content(ckpt_content *c, model *m, float *moment_m, float *moment_v, data_state *loader,
                              const char *config_text);
/* The checkpoint's values that a checksum cannot vouch for (ckpt_value_check; the
 * content above sets it, nebula-ckpt verify passes it): tensors finite, AdamW's second
 * moment >= 0; the blobs' fields within the ranges a run writes — the config schema's
 * (train.global_batch, monitor.max_rollbacks) or what the field is (a rate scale in
 * [0, 1], a share inside its global batch); DGC-Pro's state finite (dgc_state_check);
 * a blob whose check a sub-module above core registered (train_ckpt_blob_check_add: the
 * reload history), by that check. STATUS_CORRUPT naming the dataset and field. */
status train_ckpt_check_values(const char *dataset, const void *data, size_t bytes, char *why, size_t len);
/* The seam upward for value checks: a sub-module above core (control) adds the check of
 * a blob it owns, which train_ckpt_check_values then applies to /rank/BLOB's rows (a
 * blob added again replaces its check; at most 8 blobs). Process-wide and added before
 * any load: train_setup and nebula-ckpt verify call train_ckpt_checks_register. */
void train_ckpt_blob_check_add(const char *blob, ckpt_value_check check);
/* control: adds the value checks of the blobs the sub-modules above core own — the
 * reload history (train_reload_check_blob). Idempotent. */
void train_ckpt_checks_register(void);
/* The value check of one row of the reload blob (ckpt_value_check): NUL-terminated text,
 * empty (no history) or the history's JSON with its layout, every change an assignment
 * "section.key" = value that the trainer's config schema accepts, parsed as a resume
 * parses it (train_reload_resume) but applied to a scratch config. STATUS_CORRUPT with
 * why naming the dataset and what is wrong. */
status train_reload_check_blob(const char *dataset, const void *data, size_t bytes, char *why, size_t len);

/* ---- configuration ---- */

/* Config keys of nebula-train beyond runtime/comm/model/dgc/device. */
extern const config_key train_schema_keys[];
extern const int train_schema_nkeys;
/* Every key nebula-train reads (runtime, comm, model, dgc, device and the trainer's)
 * into out[cap]; returns how many. */
int train_config_schema(config_key *out, int cap);
/* The schema's history (renamed keys, the version), for config_set_compat. */
extern const config_compat train_config_compat;

/* Global batch = micro_batch x accum x data-parallel size (world / (tp x pp)); any two given (0 = not
 * given), the third is derived; accum defaults to 1 when only one is given. */
typedef struct train_batch {
    int micro_batch;           /* b: samples per forward */
    int accum;                 /* A: forwards per optimizer step */
    int global_batch;          /* GB = b * A * world */
} train_batch;

/* STATUS_INPUT naming the keys when the three given values disagree or GB does not
 * split evenly. */
status train_batch_resolve(train_batch *tb, const config *cfg, int world);

/* Heterogeneous ranks (sched.c): this data-parallel rank's share of every global batch
 * and its measured speed, checkpointed as the optional blob "sched" (fixed layout, no
 * padding) so that a resume at the same layout continues the same assignment. */
typedef struct train_sched_ckpt {
    int64_t first, count;      /* samples [first, first + count) of every global batch */
    int64_t global_batch;      /* GB the share is of; 0: no assignment (uniform shares) */
    int64_t dp_size;           /* data-parallel ranks it was assigned over */
    double speed;              /* samples per second of busy time (the step less its wait), EMA; 0: not measured */
    double rate;               /* samples per second of forward + backward, EMA (the part that grows with the share) */
    double fixed_s;            /* seconds per step that do not grow with the share (data, optimizer, delays), EMA */
    int64_t assigned_at;       /* step of the assignment */
} train_sched_ckpt;

typedef enum train_sched_mode {
    TRAIN_SCHED_MODE_OFF = 0,  /* every rank b x A samples (uniform data parallelism) */
    TRAIN_SCHED_MODE_STATIC,   /* shares in proportion to sched.shares */
    TRAIN_SCHED_MODE_BALANCED, /* shares in proportion to the measured speeds, every sched.interval steps */
    TRAIN_SCHED_MODE_PERFORMANCE, /* the shortest predicted step (fixed + share / rate per rank); a rank
                                     whose fixed time alone passes it is held at the floor */
    TRAIN_SCHED_MODE_ECONOMY,  /* the cheapest ranks (sched.costs per sample) that reach sched.target
                                  samples/s; the others held at the floor */
} train_sched_mode;

typedef struct train_sched {
    train_sched_mode mode;
    double min_share;          /* floor: this fraction of an equal share (GB / dp), at least 1 sample */
    bool floor_first;          /* compat.sched_floor_first: balanced shares as before d9fa268 (docs/compat.md) */
    long interval;             /* balanced: steps between assignments */
    train_sched_ckpt ck;       /* checkpointed */
    double *weights;           /* [dp] static: sched.shares; the other modes: the samples each would take */
    double *costs;             /* [dp] economy: sched.costs, cost per second of a rank */
    double *meas;              /* [3 dp] gathered speed, rate, fixed_s of every rank */
    double *plan;              /* [3 dp] the plan's scratch: rates, fixed times, samples */
    int *order;                /* [dp] economy's order by cost per sample */
    bool *in;                  /* [dp] the ranks at work beyond the floor */
    int64_t *counts;           /* [dp] the assignment in force */
    int64_t *next;             /* [dp] the assignment being made */
    double target;             /* economy: samples per second to reach */
    bool told;                 /* economy: the target's being out of reach was logged */
    double busy_s, fb_s;       /* this rank's busy and forward + backward seconds since the last assignment */
    long samples, steps;       /* its samples and steps over that time */
} train_sched;

/* The elastic state that outlives a step: checkpointed as the optional blob "elastic"
 * (fixed layout, no padding). The factor is relative to the configured global batch,
 * so successive changes do not compound. */
typedef struct train_elastic {
    int64_t global_batch;      /* GB in force: the config's until a control file changes it */
    double lr_factor;          /* multiplies the schedule's rate: lr_rule applied to GB / configured GB */
} train_elastic;

/* The alert rules' state that outlives a step and a rollback (control/alert.c): checkpointed as the
 * optional blob "monitor" (fixed layout, no padding), so a resumed run lowers and rolls
 * back exactly as the uninterrupted one would. */
typedef struct train_alert_ckpt {
    double lr_scale;           /* product of the lower_lr actions taken: multiplies the schedule's rate */
    int64_t rollbacks;         /* rollbacks taken by the run (monitor.max_rollbacks bounds them) */
} train_alert_ckpt;

#define TRAIN_ALERT_WINDOW_MAX 1024  /* monitor.window's bound: the alert rules' windows */
typedef struct train_alert train_alert;  /* control/alert.c's */

/* Hot reload (reload.c, docs/monitor.md "Hot reload"): the history of the changes applied
 * to the run's config, checkpointed as the optional blob "reload": JSON text, NUL-padded,
 * {"seen": N, "base": {KEY: VALUE}, "entries": [{"version", "step", "undo_of", "undone",
 * "changes": [{"key", "old", "new"}]}]} ("base": the net values of the oldest entries
 * once the text would not fit). */
#define TRAIN_RELOAD_BLOB_BYTES 16384
typedef struct train_reload {
    char blob[TRAIN_RELOAD_BLOB_BYTES]; /* checkpointed */
    long seen;                 /* the highest request version decided (applied or refused) */
    long long dir_mtime_ns;    /* rank 0: RUN_DIR/reload's mtime when it was last read */
    long wait_version;         /* rank 0: a change an earlier launch applied after step wait_step, */
    long wait_step;            /*   applied again when this launch gets there (0: none) */
} train_reload;

/* nebula-train control (no MPI): the keys that may change in a live run, for --help. */
const char *train_reload_live_list(void);
/* Why key cannot change in a live run, or NULL when it can. */
const char *train_reload_refusal(const char *key);
struct train_reload_request;
/* Writes RUN_DIR/reload/vN.req atomically with the next free version N (*version);
 * req's own version is not read. STATUS_INPUT, nothing created, when RUN_DIR holds no
 * run (path_is_run_dir: no lock, metrics.jsonl or heartbeat). */
status train_reload_request_write(const char *run_dir, const struct train_reload_request *req, long *version);
/* The answer to request `version`: 1 applied, 2 refused (text: the answer file), 0 none yet. */
int train_reload_outcome(const char *run_dir, long version, char *text, size_t cap);
/* Every request of RUN_DIR/reload in version order with its answer; returns how many,
 * or -1 (logged) when RUN_DIR holds no run. */
int train_reload_list(const char *run_dir, FILE *f);

/* Requests from signal handlers, owned by the program: the handler sets a field, the
 * loop reads them at each step end (all ranks agree on them there). */
typedef struct train_signals {
    volatile sig_atomic_t checkpoint;  /* SIGUSR1: checkpoint and go on (cleared by train_loop) */
    volatile sig_atomic_t stop;        /* SIGTERM / SIGUSR2: checkpoint and stop (exit 3) */
} train_signals;

/* The optimizer of a step: AdamW through the device table's optimizer, or SGD with
 * momentum on the host. */
typedef struct train_optim {
    bool use_sgd;
    adamw_hparams adamw;
    sgd_hparams sgd;
    device_optim dopt;         /* AdamW's; on the CPU the host step itself */
    double clip;               /* max global gradient norm, 0 = off */
} train_optim;

/* What one step reports. The phases are host-clock times (ms) taken between the
 * phases, a few clock reads per micro-batch: fwd = zeroing the gradients + the
 * forwards, bwd = the backwards (bucket launches included), comm_wait = the wait for
 * the gradient buckets (or DGC-Pro's exchange), opt = loss sum, clipping, update and
 * ResNet's statistics; step = the whole step, data included. */
typedef struct train_step_stats {
    double loss;               /* mean over the global batch */
    double gnorm;              /* global gradient norm before clipping */
    double lr;
    double step_ms, comm_wait_ms;
    double fwd_ms, bwd_ms, opt_ms; /* the phases (fwd, bwd summed over the micro-batches) */
    double bubble;             /* pipeline (pp > 1): the schedule's idle fraction against its makespan, mean over the ranks; else 0 */
    /* the divergence verdict, for the loop to hand to control/diverge.c */
    bool skipped;              /* the update was not applied (a non-finite loss, norm or statistic) */
    double state_bad;          /* non-finite batch-norm statistics the step produced, summed over the ranks */
    double grads_bad;          /* non-finite local gradients under DGC-Pro, summed over the ranks */
} train_step_stats;

/* An observer of the step (observe/ adds them at setup, core/step.c calls them in that
 * order); each reads the step as it goes and never writes back. NULL: not wanted. */
typedef struct train_step_observer {
    void (*begin)(void *ctx);            /* the step's first clock read */
    void (*lap)(void *ctx, int phase);   /* phase (TRAIN_PROFILE_ZERO ...) just ended */
    void (*grads)(void *ctx, long step); /* the averaged gradient of step, complete, not clipped yet */
    void (*applied)(void *ctx);          /* the update applied or skipped: the step's statistics are final */
    void *ctx;
} train_step_observer;
#define TRAIN_OBSERVERS_MAX 4

/* Where records go (train_emit): metrics.c registers itself at setup. */
typedef struct train_sink {
    void (*write)(void *ctx, void *record);  /* takes the record (a json_t *) */
    void *ctx;
} train_sink;

/* data.train = synthetic-fixed: one synthetic batch (model_batch_synthetic, seeded by
 * train.seed) is every micro-batch of every step, as in Horovod's and PyTorch's
 * synthetic benchmarks; no file is read. The loader's position still advances over
 * the synthetic stream (data.train = synthetic), so checkpoints, resume and elastic
 * batch changes work as with any data. Training data only: refused as data.val. */
#define TRAIN_DATA_SYNTHETIC_FIXED "synthetic-fixed"

/* Everything a run owns. */
/* A checkpoint group's pieces of the full layout on a process grid (hybrid.c): the
 * ranges this rank writes and those it reads, over one range list shared by every rank. */
typedef struct train_pieces {
    param_shards save, load;
    size_t *ranges;            /* the arrays behind both: offset, count, packed (3 x n) */
    uint8_t *mine;             /* mine flags: save's (n), then load's (n) */
} train_pieces;

typedef struct train_run {
    const config *cfg;         /* &live */
    config live;               /* the run's config: the program's, then every hot reload applied */
    train_reload reload;       /* the applied history (reload.c) */
    const runtime *rt;
    comm *c;                   /* the program's, over the world */
    grid grid;                 /* the process grid (parallel.*): tp x pp x dp */
    comm *dpc;                 /* the gradient path over the data-parallel group: c when dp is the world */
    comm *dpc_owned;           /* dpc when the run made it (tp or pp > 1), NULL otherwise */
    grid_shape regrid;         /* a control file's new grid (tp > 0): train_loop checkpoints and returns
                                  STATUS_REGRID; nebula-train sets the run up again on it */
    nn_stage stage;            /* pp > 1: this rank's blocks (parallel.stages, or balanced by counted FLOPs) */
    MPI_Comm tie_comm;         /* pp > 1: the first and last stage of my pipeline (the tied wte's gradient);
                                  MPI_COMM_NULL on the stages between */
    MPI_Comm dgc_norm_comm;    /* DGC-Pro on a grid: the ranks of my dp node index (every shard and stage of
                                  the replicas there: DGC's clipping norm); MPI_COMM_NULL otherwise */
    model_batch *pp_batches;   /* pp > 1: one batch per activation set (stage.slots) */
    double timeout_s;          /* comm.timeout: the deadline of the trainer's own collectives */
    device dev;                /* the CPU so far (device.kind = cuda is refused at setup) */
    model_spec spec;
    model m;                   /* sized for one micro-batch */
    model_batch batch;         /* the micro-batch fed to the model */
    bool fixed_batch;          /* data.train = synthetic-fixed: batch is filled once at setup */
    int32_t *raw_ids;          /* (b, T) BERT: the tokens before masking */
    bert_special_tokens bert_special; /* BERT: [PAD] [UNK] [CLS] [SEP] [MASK] of data.train's tokenizer (bert-base's ids without one) */
    uint64_t *samples;         /* (b) BERT: the file's samples of the micro-batch (masking keys) */
    train_batch tb;
    int T;                     /* sequence length (transformers), 0 for ResNet */
    data_loader *train_data;
    data_loader *val_data;     /* NULL without held-out data */
    bucket_manager bm;
    int nlayers;               /* 1 + the highest param_entry.layer */
    int *layer_first, *layer_count; /* [nlayers] each layer's tensors as a range of table indices */
    status hook_status;        /* first failure inside the hook */
    train_optim opt;
    lr_schedule sched;
    ckpt_writer *ckpt;         /* NULL when checkpoints are off */
    char run_dir[4096];
    long step;                 /* optimizer steps completed */
    long steps;                /* total steps of the run */
    uint64_t seed;
    int threads;               /* OpenMP / BLAS threads of this rank */
    double comm_ms;            /* calibrated: one blocking allreduce of all buckets */
    bool use_zero;             /* zero.stage = 1: optimizer state sharded over the ranks (ZeRO-1) */
    bool compat_dgc_unscaled_lr; /* compat.dgc_unscaled_lr: DGC-Pro without the rate folded in (docs/compat.md) */
    zero zero;                 /* the shards, their packed moments and the all-gather; use_zero only */
    /* tensor parallelism (hybrid.c): checkpoints hold the whole model's tensors, so they load at
       any layout; a shard reads and writes its pieces of them as ranges of the full layout */
    param_table tp_full;       /* tp > 1: the whole model's table (param_table_full) */
    train_pieces tp_params;    /* the parameters' pieces (each written once: dp rank 0, the whole
                                  tensors by tp rank 0 too) */
    train_pieces tp_moments;   /* under ZeRO, the moments': the pieces cut at ZeRO's shards, each
                                  written and read by its owner in the data-parallel group */
    dgc *dgc;                  /* DGC-Pro when configured and not ruled out at setup; NULL otherwise */
    dgc_stats dstats;          /* of the last step it ran */
    double dgc_sent, dgc_dense;/* bytes sent between nodes by this rank over the run, and a dense ring's */
    double compute_ms;         /* auto mode: mean compute time of dense steps 2-3 */
    double dense_ms, trial_ms; /* auto mode: mean step time of dense steps 2-3 and compressed steps 4-5 */
    bool dgc_flush;            /* auto switched DGC-Pro off: flush its residuals into the next step */
    data_state loader_state;   /* the training loader's position after the last step (checkpointed) */
    train_elastic elastic;     /* checkpointed; see train_elastic */
    train_sched share;         /* heterogeneous ranks' shares (sched.c); mode off: uniform */
    int config_batch;          /* the global batch the config resolves to at this world size */
    int heartbeat_fd;          /* run_dir/heartbeat on rank 0, -1 elsewhere */
    /* elastic.c, rank 0: a control file that could be neither renamed nor removed (a
     * directory with a directory of the same name in the way, a read-only run dir) is
     * ignored by identity after its one error, instead of once a step */
    uint64_t control_stuck_dev, control_stuck_ino;
    long control_postponed;    /* the first step of the skip streak that postponed a relaunch or new
                                  grid (its one line); 0: none */
    train_signals *signals;    /* the program's, or no_signals; never NULL after train_setup */
    train_signals no_signals;  /* stays zero: a run set up without signals */
    char config_text[65536];   /* the resolved config, as config_dump writes it */
    /* the run directory's lock and the metrics writer (rundir.c, metrics.c); rank 0 */
    int lock_fd;               /* RUN_DIR/lock while this run holds its flock, -1 otherwise */
    int metrics_fd;            /* RUN_DIR/metrics.jsonl (O_APPEND) on rank 0, -1 elsewhere */
    long metrics_records;      /* records the run tried to write */
    long metrics_lost;         /* of them, not written (an I/O error or a record that would not serialise) */
    int metrics_errno;         /* the error of the last failed record; 0 once a record goes through */
    int launch;                /* this launch's number: 1 + the highest in metrics.jsonl's tail */
    long prev_step;            /* the furthest step earlier launches' records reached, -1 if none */
    long redo_until;           /* records of steps up to this one redo an earlier launch's (resume) */
    double t_launch;           /* train_now_s() when this launch set up its metrics */
    double eta_ms;             /* smoothed step time for the progress line's ETA; 0 before the first */
    fault_plan metrics_fault;  /* CHAOS build: NEBULA_CHAOS_FAULT's metrics.* rules */
    fault_plan rundir_fault;   /* CHAOS build: NEBULA_CHAOS_FAULT's rundir.* rules */
    /* divergence (step.c): a step with a non-finite loss or gradient norm is skipped; more
     * than train.max_skipped_steps of them in a row end the run (STATUS_DIVERGED) */
    long skipped_in_a_row;     /* consecutive skipped steps up to the last step */
    long last_applied;         /* the last step whose update was applied (or the step the run started at) */
    double last_loss;          /* the last step's loss and gradient norm (for the divergence message) */
    double last_gnorm;
    long ticks;                /* steps run by this launch (a rollback does not rewind it; the alert
                                  rules count them, the CHAOS switches name them) */
    double last_eval;          /* the held-out loss of the last evaluation (eval.c) */
    long last_eval_step;       /* the step of that evaluation (0: none in this launch) */
    bool eval_new;             /* an evaluation ran at this step (the stagnation rule reads and clears it) */
    /* planted effects of the tests (runtime.slowdown, runtime.zero_grad_layer; samples.c parses them) */
    int slow_rank;             /* this rank sleeps slow_us in its first micro-batch's forward */
    long slow_us;              /* 0: off */
    bool zero_on;              /* zero_layer's reduced gradient is set to 0 on every rank */
    int zero_layer;
    train_step_observer observers[TRAIN_OBSERVERS_MAX];
    int nobservers;
    train_sink sink;           /* records (train_emit); metrics.c's after train_setup's start */
    struct train_samples *smp; /* per-rank samples, the attention probe, the test hooks (samples.c) */
    train_alert_ckpt alert_ck; /* the alert rules' checkpointed state: the rate scale, the rollbacks */
    struct train_alert *alert; /* the alert rules' windows and own state (control/alert.c) */
    struct train_profile *prof; /* profiler mode (profile.h, profile.mode); NULL when off */
    struct train_trace *trace; /* the communication timeline (trace.c, trace.enable); NULL when off */
    struct train_tensorboard *tensorboard; /* rank 0: RUN_DIR/tb and the histograms (tensorboard.c); NULL elsewhere */
    struct train_commits *commits; /* rank 0 with ckpt.commit_to: the model repository that checkpoints are
                                      committed into and the commit thread (control/commit.c); NULL otherwise */
} train_run;

/* Builds the run: batch, data, model, optimizer, ZeRO, buckets, DGC-Pro, checkpoint
 * writer, run directory. signals: the program's (NULL: none arrive). */
status train_setup(train_run *r, const config *cfg, const runtime *rt, comm *c, train_signals *signals);
/* Rank 0: the model, batch, data, memory and bucket tables. */
void train_print(const train_run *r, FILE *f);
/* Loads the checkpoint ckpt.resume names (auto|PATH|none|model:REPO@REF: a commit of a
 * nebula-model repository, checked out first under RUN_DIR/model-checkout); no-op without one. */
status train_resume(train_run *r);
/* The step loop up to train.steps, with logging, evaluation, checkpoints and signals.
 * STATUS_STOPPED after a stop request, STATUS_RELAUNCH after a world-size change. */
status train_loop(train_run *r);
/* One optimizer step of the run: A micro-batches, reduction, clipping, update; the
 * step nebula-train's loop runs and nebula-bench model times. Collective. */
status train_step(train_run *r, train_step_stats *ss);
void train_free(train_run *r);

/* ---- the step on one GPU (nebula-bench model --device cuda) until the trainer runs on a device ---- */

/* The optimizer nebula-train would use for m's family with the default [optim] keys
 * of a benchmark (AdamW: beta 0.9/0.95, eps 1e-8, decay 0.1; SGD for ResNet: momentum
 * 0.9, decay 1e-4), through the device table of dev (NULL: the CPU). */
status train_optim_init_default(train_optim *o, model *m, const device *dev);
void train_optim_free(train_optim *o);
/* One optimizer step of m on one batch without reduction (one process): zero the
 * gradients, forward, backward, clip, update at rate lr (step t, from 1), through
 * train_step's own helpers. Each phase ends with a device synchronisation so the host
 * clock times it. The GPU-only path: on the CPU, nebula-bench times train_step. */
status train_step_batch(model *m, train_optim *o, const model_batch *b, double lr, long t, train_step_stats *ss);
/* Its two halves, for callers that work on the gradient in between (nebula-fed's
 * per-example clipping): train_grad_batch zeroes the gradients and runs forward and
 * backward (the gradient of the batch's mean loss in model_device_buffers(m)->grads, the
 * loss into *loss, ss's fwd_ms and bwd_ms); train_update_batch clips to o->clip and
 * updates from whatever the gradients hold (ss's gnorm and opt_ms). */
status train_grad_batch(model *m, train_optim *o, const model_batch *b, double *loss, train_step_stats *ss);
status train_update_batch(model *m, train_optim *o, double lr, long t, train_step_stats *ss);

#endif
