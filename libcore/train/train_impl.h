/* train_impl — what the trainer's files share (never included outside libcore/train).
 * The layering, one direction only: batch.c (batch arithmetic, loaders, filling a
 * micro-batch) and schema.c are the bottom; elastic.c uses them; step.c, eval.c and
 * metrics.c use those; loop.c and train.c (setup, resume) sit on top. */
#ifndef NEBULA_TRAIN_IMPL_H
#define NEBULA_TRAIN_IMPL_H

#include <mpi.h>
#include <stdbool.h>

#include "comm/ctl.h"
#include "monitor/trace.h"
#include "profile.h"
#include "train.h"

/* The control plane's deadline for the trainer's own collectives (comm.timeout),
 * watched by the runtime's watchdog (a timeout names the ranks that made no progress). */
static inline comm_ctl train_ctl(const train_run *r)
{
    return comm_ctl_watched(comm_ctl_named(r->rt->world, r->timeout_s, "world"), r->rt->wd);
}

/* The control plane over my data-parallel group (the replicas of my shard). */
static inline comm_ctl train_dp_ctl(const train_run *r)
{
    return comm_ctl_watched(comm_ctl_named(r->grid.dp_comm, r->timeout_s, "dp"), r->rt->wd);
}

/* hybrid.c: a tensor-parallel shard's checkpoint layout (after the model is built), the
 * content's switch to it (the whole model's table, the pieces this rank writes or, with
 * load, reads; no-op at tp 1), and its release. */
/* pipeline.c: pp > 1. The stages' blocks from parallel.stages or balanced by counted
 * FLOPs (STATUS_INPUT naming the key); the forwards and backwards of one step's
 * micro-batches in the 1F1B order (adds the last stage's losses to *loss, the compute
 * times to ss, the idle fraction to ss->bubble); the tied wte's gradient summed over
 * the first and last stage; the per-step setup and teardown. */
status train_pp_plan(train_run *r);
/* train.c: whether the run's other settings allow grid gs (ckpt.async, zero.stage and
 * dgc.mode = on are data-parallel only so far); STATUS_INPUT with the reason. */
status train_grid_allowed(const config *cfg, const grid_shape *gs);
/* step.c: the bucket hook on the model's backward, on or off. */
void train_set_hook(train_run *r, bool on);
status train_pp_init(train_run *r);
status train_pipeline(train_run *r, double *loss, train_step_stats *ss);
/* A forward of batch b through the stages in turn (evaluation), in activation set 0. */
status train_pp_forward_only(train_run *r, model_batch *b);
status train_pp_tie_grads(train_run *r, float *grads);
/* Whether table entry e counts in the global gradient norm (the tied wte once: the first stage's). */
bool train_pp_counted(const train_run *r, const param_entry *e);
void train_pp_free(train_run *r);
status train_tp_layout(train_run *r);
void train_tp_content(train_run *r, ckpt_content *c, bool load);
void train_tp_free(train_run *r);

/* The data-parallel replicas and mine: what the batch splits over and the gradients average over. */
static inline int train_dp_size(const train_run *r) { return r->grid.shape.dp; }
static inline int train_dp_rank(const train_run *r) { return r->grid.dp_rank; }

static inline double train_now_s(void)
{
    return MPI_Wtime();
}

/* ---- trace.c: the communication timeline (trace.*, --trace; docs/profile.md) ---- */
/* Tracks ("tid") of a rank: the main thread's step, the checkpoint writer's thread, and
 * lanes for the buckets' allreduces (a bucket takes the lowest lane free at its launch:
 * allreduces in flight together overlap, and events on one track must nest). */
enum { TRAIN_TRACE_TRACK_MAIN = 0, TRAIN_TRACE_TRACK_CKPT, TRAIN_TRACE_TRACK_COMM0 };

typedef struct train_trace {
    trace_buf buf;             /* this rank's events (trace.max_events) */
    trace_names names;         /* event names, filled at setup in the same order on every rank */
    trace_names tracks;        /* track names: index = tid */
    long count;                /* trace.steps = N: N steps after the launch's first; 0 for a range */
    long first, last;          /* the traced steps as the metrics lines number them (inclusive) */
    bool resolved;             /* first and last are known (count: at the loop's first step) */
    bool synced;               /* the clocks were compared at the start of the traced steps */
    bool done;                 /* the trace was written (or there is nothing to trace) */
    bool in_step;              /* this step is traced: the laps record */
    double t_mark, t_step0;    /* trace clock (s): the last lap, the step's first */
    double t_wait0, t_wait1;   /* the comm_wait lap of this step */
    double t_begin;            /* trace clock when tracing began (after the first clock comparison) */
    double wtime_off;          /* trace clock minus MPI_Wtime (s): onto the trace clock for comm's stamps */
    int nm_phase;              /* name of phase 0 (TRAIN_PROFILE_ZERO ...), the others follow */
    int nm_fwd, nm_bwd;        /* names of layer 0's forward and backward, the other layers follow */
    int nm_step, nm_bucket, nm_comm, nm_dgc, nm_ckpt; /* step; bucket 0..; comm phases; dgc x3; ckpt x3 */
    int nbuckets;              /* the bucket manager's */
    double *lane_end;          /* [nbuckets] when each lane's last allreduce of this step ended (trace clock) */
    double ckpt_seen;          /* the background save last recorded (its copy's start) */
    long ckpt_step;            /* the step of the last checkpoint saved while tracing */
    double *sync;              /* rank 0: [6][world]: offset, rtt, at of the start, then of the end (s) */
} train_trace;

/* Setup (after the profiler's): r->trace stays NULL when trace.enable is false;
 * STATUS_INPUT, logged naming the key, for a bad trace.steps. */
status train_trace_setup(train_run *r);
void train_trace_free(train_run *r);
/* The model's layer timer for whoever needs it: the profiler while it is active, the
 * trace while it is on; none when neither is (one NULL check per layer). */
void train_layer_timer_update(train_run *r);
/* Before each step (collective when the traced steps begin: the first clock comparison). */
status train_trace_begin(train_run *r);
void train_trace_step_begin_(train_run *r);
void train_trace_lap_(train_run *r, int id);
/* After each step: the step event, the buckets' allreduces and phases, DGC-Pro's phases. */
void train_trace_step(train_run *r, const train_step_stats *ss);
/* After a checkpoint's save (loop.c): its stall, from t0 (train_now_s) for ms. */
void train_trace_ckpt(train_run *r, double t0, double ms);
/* At each step end (collective): the trace is written once the last traced step is over
 * and the run goes on; train_trace_finish writes it at the end of the run otherwise. */
status train_trace_step_end(train_run *r);
status train_trace_finish(train_run *r);

/* The step's laps (step.c), for the profiler and the trace alike: the step's start, then
 * a lap charged to phase id (TRAIN_PROFILE_ZERO ...) at each phase's end. */
static inline void train_lap_begin(train_run *r)
{
    train_profile_step_begin(r->prof);
    if (r->trace) train_trace_step_begin_(r);
}
static inline void train_lap(train_run *r, int id)
{
    train_profile_lap(r->prof, id);
    if (r->trace && r->trace->in_step) train_trace_lap_(r, id);
}

/* ---- schema.c ---- */
void train_ckpt_content(train_run *r, ckpt_content *c);
/* The blob called name in c, or NULL. */
const ckpt_blob *train_ckpt_blob(const ckpt_content *c, const char *name);
/* The learning-rate schedule the [optim] keys and train.steps describe (not checked). */
void train_schedule_from_config(lr_schedule *s, const config *cfg);

/* ---- batch.c ---- */
/* Opens data file path for this run's model and micro-batch; train: the training
 * loader (accumulation, shuffling, augmentation), else held-out data in file order. */
status train_open_data(train_run *r, data_loader **out, const char *path, bool train);
/* Fills the model's micro-batch a of the current step from d (BERT: masked here). */
status train_fill(train_run *r, data_loader *d, int a);
/* The same into batch b (a pipeline's activation set's). */
status train_fill_into(train_run *r, data_loader *d, int a, model_batch *b);

/* ---- elastic.c: heartbeat and control file ---- */
/* Rank 0, at setup: creates RUN_DIR/heartbeat at its fixed size (STATUS_IO when it cannot). */
status train_heartbeat_open(train_run *r);
/* Every rank after each step (a no-op without the file): rewrites the heartbeat line. */
void train_heartbeat(train_run *r);
/* After a checkpoint load: the global batch and lr factor a control file set, or the config's. */
status train_elastic_resume(train_run *r, const ckpt_content *c);
/* Rank 0, every step: whether RUN_DIR/control is there (one stat). */
bool train_control_exists(const train_run *r);
/* Collective: rank 0 decides, every rank applies; a new world size only sets *relaunch. */
status train_control(train_run *r, int *relaunch);
/* Every rank: global batch gb at the same micro-batch (accumulation, averaging and the
 * loader follow) and lr_factor, as train_elastic records them. */
status train_elastic_set_batch(train_run *r, int64_t gb, double lr_factor);
/* Rank 0, after the checkpoint committed: RUN_DIR/relaunch, control renamed control.applied. */
status train_relaunch_write(train_run *r, int world);

/* ---- samples.c: what the pictures are drawn from (docs/pictures.md) ---- */
typedef struct train_samples train_samples;
/* At setup (collective: the host names): the test hooks' keys checked (STATUS_INPUT),
 * rank 0's probe batch read. */
status train_samples_setup(train_run *r);
/* After each step, every rank (collective at a log step): the "ranks" record at log
 * steps, the "attention" record every monitor.attention_interval steps. */
status train_samples_step(train_run *r, const train_step_stats *ss, bool log_now);
/* runtime.slowdown: the slowed rank sleeps (in the step's compute, before the reduction wait). */
void train_samples_slowdown(train_run *r);
/* runtime.zero_grad_layer: that layer's reduced gradient set to 0 (every rank). */
void train_samples_zero_layer(train_run *r, float *grads);
void train_samples_free(train_run *r);
/* This process's resident memory (bytes; 0 when /proc cannot tell). */
double train_rss(void);

/* ---- reload.c: hot reload (docs/monitor.md) ---- */
/* At setup: an empty history. */
void train_reload_init(train_run *r);
/* Rank 0, every step: whether RUN_DIR/reload holds a version to decide now (one stat;
 * the directory is read when it changed). */
bool train_reload_pending(train_run *r);
/* Collective, when rank 0 saw one: rank 0 decides, every rank applies (or nobody). */
status train_reload_take(train_run *r);
/* After a checkpoint load, before train_elastic_resume: the history it holds replayed
 * onto the run's config (STATUS_CORRUPT when it is not readable). */
status train_reload_resume(train_run *r, const ckpt_content *c);

/* ---- diverge.c: non-finite losses, gradients and parameters (see train.max_skipped_steps) ---- */
/* NaN and Inf values among x[0..n). */
size_t train_count_nonfinite(const float *x, size_t n);
/* Before the first step: STATUS_INPUT, logged with the tensor, when the parameters the
 * run starts from (a resumed checkpoint's) are not finite. */
status train_check_start(train_run *r);
/* The update of `step` was applied: the run of skipped steps ends. */
void train_step_applied(train_run *r, long step);
/* Before a checkpoint (collective under ZeRO): STATUS_DIVERGED, logged, when a parameter
 * or optimizer moment is not finite (an update overflowed), so that none is saved. */
status train_check_state(train_run *r);
/* `step` is skipped (state_bad: non-finite batch-norm statistics it produced; grads_bad:
 * non-finite local gradients under DGC-Pro, summed over the ranks): logs it;
 * STATUS_DIVERGED, logged with the last commit and a HINT, past train.max_skipped_steps. */
status train_skip(train_run *r, long step, double loss, double gnorm, double state_bad, double grads_bad);

/* CHAOS build: whether the environment variable var (NEBULA_CHAOS_NAN: a NaN loss,
 * NEBULA_CHAOS_SPIKE: the loss reported x 10, NEBULA_CHAOS_SLOW: a step 0.5 s longer,
 * NEBULA_CHAOS_LEAK: 64 MiB allocated, touched and never freed)
 * lists this step among the process's step counts; false in the normal build. */
bool train_chaos_at(const train_run *r, const char *var);
/* Ends the run as diverged (rank 0 logs why, the last commit and a HINT): STATUS_DIVERGED. */
status train_diverged(train_run *r, long step, const char *why);

/* ---- monitor.c: alert rules and actions (docs/monitor.md) ---- */
/* The actions a rule may take, as bits in the step-end agreement. */
#define TRAIN_MONITOR_LOG         (1 << 0)
#define TRAIN_MONITOR_CHECKPOINT  (1 << 1)
#define TRAIN_MONITOR_STOP        (1 << 2)
#define TRAIN_MONITOR_LOWER_LR    (1 << 3)
#define TRAIN_MONITOR_ROLLBACK    (1 << 4)
#define TRAIN_MONITOR_DISABLE_DGC (1 << 5)
#define TRAIN_MONITOR_SUSPECT     (1 << 6)  /* not an action: the state may be bad (explosion, non-finite) */
#define TRAIN_MONITOR_REBASE_RSS  (1 << 7)  /* not an action: the memory rule fired, its baseline moves up */
/* Whether cfg's [monitor] action lists parse: 0, or -1 with why naming the key (setup, reload). */
int train_monitor_check(const config *cfg, char *why, size_t len);
/* At setup: checks the keys (STATUS_INPUT, logged) and clears the state. */
status train_monitor_setup(train_run *r);
/* After each step and its evaluation (collective while a per-rank rule is on): rank 0's
 * decision in *actions (0 elsewhere), its alerts logged and recorded. */
status train_monitor_step(train_run *r, const train_step_stats *ss, double units, int *actions);
/* Every rank, with the agreed actions: lowers the rate, switches DGC-Pro off, rolls back
 * (STATUS_DIVERGED past monitor.max_rollbacks). Checkpoint and stop are the loop's. */
status train_monitor_act(train_run *r, int actions);
/* train_skip: more than train.max_skipped_steps in a row; the guard's rule fires next. */
void train_monitor_note_skip(train_run *r);
/* Whether the guard's actions take over from ending the run (rollback or stop among them). */
bool train_monitor_guards_nonfinite(const train_run *r);

/* ---- train.c ---- */
/* Collective: restores the newest committed checkpoint below the monitor's floor (the
 * initial state, from the seed, when there is none), keeping the loader's position (the
 * data of the undone steps is skipped), the elastic batch and the monitor's own state;
 * newer checkpoints are removed; recorded as a rollback. */
status train_rollback(train_run *r);

/* ---- step.c ---- */
/* DGC-Pro's options from the run's config and optimizer (momentum correction, decay, clip). */
void train_dgc_options(const train_run *r, dgc_options *o);
/* DGC-Pro at setup: off, forced on, or auto (ruled out for small models, one node). */
status train_dgc_setup(train_run *r);
/* sched.c: heterogeneous ranks' shares of the global batch (mode off: nothing). Setup
 * after the loaders (STATUS_INPUT naming the key for what it cannot do); the micro-batches
 * of this rank's share in a step and the size of each; the checkpoint's shares after a
 * load; an assignment anew (the global batch changed); balanced mode's measurement and
 * assignment after each step. */
status train_sched_setup(train_run *r);
void train_sched_free(train_run *r);
int train_micro_batches(const train_run *r);
int train_micro_batch_size(const train_run *r, int a);
status train_sched_resume(train_run *r, const ckpt_content *c, const ckpt_info *info);
status train_sched_reassign(train_run *r, const char *why);
status train_sched_after_step(train_run *r, const train_step_stats *ss);
status train_sched_apportion(const double *w, int n, int64_t gb, int64_t floor_n, int64_t *out, double *frac);
/* Balanced mode's weights for train_sched_apportion from the ranks' busy speeds: the
 * samples above the floor that make every rank's busy time equal (water-filled), or, with
 * floor_first (compat.sched_floor_first, before d9fa268), the speeds themselves, so the
 * rest after everyone's floor goes in proportion to speed. scratch: 3 n doubles, in: n. */
void train_sched_balanced_weights(const double *speed, int n, double gb, double floor_n, bool floor_first,
                                  double *scratch, bool *in, double *weights);
/* Auto mode's decision after the first steps of a fresh run (collective). */
status train_dgc_auto(train_run *r, const train_step_stats *ss, long first);

/* ---- eval.c ---- */
/* Loss (and accuracy) over train.eval_batches of held-out data; rank 0 logs it. */
status train_evaluate(train_run *r);

/* ---- rundir.c: the run directory's lock, config.ini and file opening (rank 0) ---- */
/* Opens RUN_DIR/name with flags (| O_NOFOLLOW, mode 0644 when created) into *fd: STATUS_INPUT,
 * logged with the file named, for a symbolic link or a non-regular file (never written
 * through); STATUS_IO for another failure or an injected fault at point (f may be NULL). */
status train_rundir_open_file(const train_run *r, const char *name, int flags, fault_plan *f, const char *point,
                              int *fd);
/* Creates RUN_DIR and takes its lock for the run's life: STATUS_INPUT naming the holder when
 * another run holds it (exit 2), or when a link or special file stands in the run
 * directory under a name the trainer writes; a stale lock is taken over with a line. */
status train_rundir_lock(train_run *r);
/* Releases the lock (empties the holder line: a clean end, not a stale lock). */
void train_rundir_unlock(train_run *r);
/* Writes RUN_DIR/config.ini (the resolved config) atomically; a failure is a warning. */
void train_rundir_write_config(train_run *r);

/* ---- tensorboard.c: RUN_DIR/tb event files and the gradient histograms (docs/metrics.md) ---- */
typedef struct train_tensorboard train_tensorboard;
/* Rank 0 at setup, after metrics.jsonl: the per-layer histogram state, and RUN_DIR/tb's new
 * event file when monitor.tensorboard is on (STATUS_IO, logged, when it cannot be made). */
status train_tensorboard_setup(train_run *r);
void train_tensorboard_free(train_run *r);
/* train_metrics_write, before stamping: the numeric keys of a train or eval record (a
 * json_t *) as scalars "<kind>/<key>" at its step, then a flush; other kinds are ignored. */
void train_tensorboard_record(train_run *r, const void *record);
/* step.c, at a step divisible by monitor.histogram_interval, when the averaged gradient is
 * in the gradient buffer and not clipped yet: each layer's grad_hist bins and, with
 * monitor.tensorboard, its grad/<name> histogram. Rank 0; a no-op elsewhere. */
void train_tensorboard_grads(train_run *r, long step);
/* The end of that step (the update applied): the layers' weight/<name> histograms and the
 * grad_hist record. A no-op when train_tensorboard_grads did not run at the step. */
void train_tensorboard_weights(train_run *r);

/* ---- metrics.c ---- */
/* Rank 0: opens RUN_DIR/metrics.jsonl for appending (train_rundir_open_file's statuses). */
status train_metrics_open(train_run *r);
/* One record of metrics.jsonl (rank 0, a no-op elsewhere), one line written whole or not
 * at all; takes j (a json_t *; NULL counts as a lost record). A failure is logged and
 * counted, never returned: training goes on. */
void train_metrics_write(train_run *r, void *j);
/* Closes metrics.jsonl (a failure is a warning). */
void train_metrics_close(train_run *r);
/* A JSON number, or null for NaN and infinities (JSON has neither); a json_t *. */
void *train_json_num(double v);
/* Rank 0: the step's metrics line and record. */
void train_log_step(train_run *r, const train_step_stats *ss, double units, const char *unit);
/* Collective: DGC-Pro's choice per tensor; rank 0 logs it. */
status train_log_dgc_layers(train_run *r);
/* Throughput units of one global batch: images, or tokens. */
double train_units(const train_run *r, const char **unit);

#endif
