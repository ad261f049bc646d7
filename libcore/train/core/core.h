/* core — what the trainer's core files share (batch, schema, step, pipeline, hybrid,
 * eval, report), and the seams the sub-modules above reach it through. Private to
 * libcore/train: control/ and observe/ and the top files include it, apps never.
 *
 * The one design decision: core never calls up. What the step's observers want comes
 * out through a registered list (train_observe: laps, the averaged gradient, the
 * applied update), every record through one registered sink (train_emit: metrics.c
 * feeds metrics.jsonl and TensorBoard from it), and the step's divergence verdict is
 * returned in train_step_stats for the loop to hand to control/diverge.c. */
#ifndef NEBULA_TRAIN_CORE_H
#define NEBULA_TRAIN_CORE_H

#include <mpi.h>
#include <stdbool.h>

#include "comm/ctl.h"
#include "train/train.h"

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

/* The data-parallel replicas and mine: what the batch splits over and the gradients average over. */
static inline int train_dp_size(const train_run *r) { return r->grid.shape.dp; }
static inline int train_dp_rank(const train_run *r) { return r->grid.dp_rank; }

static inline double train_now_s(void)
{
    return MPI_Wtime();
}

/* ---- report.c: the seams upward (records, observers) and the figures records use ---- */
/* The phases of the step partition, in step order (the profiler's timer ids, the trace's names). */
enum {
    TRAIN_PROFILE_ZERO = 0,    /* zeroing the gradients */
    TRAIN_PROFILE_DATA,        /* filling the micro-batches, advancing the loader */
    TRAIN_PROFILE_COMM_WAIT,   /* the wait for the buckets, or DGC-Pro's exchange */
    TRAIN_PROFILE_CLIP,        /* the loss allreduce, the non-finite check, clipping */
    TRAIN_PROFILE_OPTIM,       /* the update (ZeRO's all-gather, ResNet's statistics broadcast) */
    TRAIN_PROFILE_NPHASES
};
/* Adds an observer of every later step (observe/'s setups; at most TRAIN_OBSERVERS_MAX). */
void train_observe(train_run *r, const train_step_observer *o);
/* Hands record j (a json_t *, NULL: a lost record) to the sink train_setup registered
 * (metrics.c); dropped when there is none. */
void train_emit(train_run *r, void *j);
/* A JSON number, or null for NaN and infinities (JSON has neither); a json_t *. */
void *train_json_num(double v);
/* Throughput units of one global batch: images, or tokens. */
double train_units(const train_run *r, const char **unit);
/* This process's resident memory (bytes; 0 when /proc cannot tell). */
double train_rss(void);
/* NaN and Inf values among x[0..n). */
size_t train_count_nonfinite(const float *x, size_t n);

/* The step's laps (step.c), for the observers: the step's start, then a lap charged to
 * phase id (TRAIN_PROFILE_ZERO ...) at each phase's end. */
static inline void train_lap_begin(train_run *r)
{
    for (int i = 0; i < r->nobservers; i++)
        if (r->observers[i].begin) r->observers[i].begin(r->observers[i].ctx);
}
static inline void train_lap(train_run *r, int id)
{
    for (int i = 0; i < r->nobservers; i++)
        if (r->observers[i].lap) r->observers[i].lap(r->observers[i].ctx, id);
}

/* ---- hybrid.c, pipeline.c ---- */
/* hybrid.c: a tensor-parallel shard's checkpoint layout (after the model is built), the
 * content's switch to it (the whole model's table, the pieces this rank writes or, with
 * load, reads; no-op at tp 1), and its release. */
/* pipeline.c: pp > 1. The stages' blocks from parallel.stages or balanced by counted
 * FLOPs (STATUS_INPUT naming the key); the forwards and backwards of one step's
 * micro-batches in the 1F1B order (adds the last stage's losses to *loss, the compute
 * times to ss, the idle fraction to ss->bubble); the tied wte's gradient summed over
 * the first and last stage; the per-step setup and teardown. */
status train_pp_plan(train_run *r);
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

/* ---- schema.c ---- */
void train_ckpt_content(train_run *r, ckpt_content *c);
/* The blob called name in c, or NULL. */
const ckpt_blob *train_ckpt_blob(const ckpt_content *c, const char *name);
/* The learning-rate schedule the [optim] keys and train.steps describe (not checked). */
void train_schedule_from_config(lr_schedule *s, const config *cfg);
/* Whether the run's other settings allow grid gs (ckpt.async, zero.stage and dgc.mode =
 * on are data-parallel only so far); STATUS_INPUT with the reason. */
status train_grid_allowed(const config *cfg, const grid_shape *gs);

/* ---- batch.c ---- */
/* Opens data file path for this run's model and micro-batch; train: the training
 * loader (accumulation, shuffling, augmentation), else held-out data in file order. */
status train_open_data(train_run *r, data_loader **out, const char *path, bool train);
/* Collective: the same on every rank, each rank's error held back, and the reason of the
 * first rank that failed printed once by rank 0 (naming that rank unless all failed);
 * every rank then returns that rank's status and *out is NULL. */
status train_open_data_agreed(train_run *r, data_loader **out, const char *path, bool train);
/* Fills the model's micro-batch a of the current step from d (BERT: masked here). */
status train_fill(train_run *r, data_loader *d, int a);
/* The same into batch b (a pipeline's activation set's). */
status train_fill_into(train_run *r, data_loader *d, int a, model_batch *b);
/* The micro-batches of this rank's share in a step and the size of each (the share
 * control/sched.c assigned; b x A without one). */
int train_micro_batches(const train_run *r);
int train_micro_batch_size(const train_run *r, int a);

/* ---- step.c ---- */
/* DGC-Pro's options from the run's config and optimizer (momentum correction, decay, clip). */
void train_dgc_options(const train_run *r, dgc_options *o);
/* DGC-Pro at setup: off, forced on, or auto (ruled out for small models, one node). */
status train_dgc_setup(train_run *r);
/* Auto mode's decision after the first steps of a fresh run (collective). */
status train_dgc_auto(train_run *r, const train_step_stats *ss, long first);

/* ---- eval.c ---- */
/* Loss (and accuracy) over train.eval_batches of held-out data; rank 0 logs it. */
status train_evaluate(train_run *r);

#endif
