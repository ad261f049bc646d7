/* train_impl — what the trainer's files share (never included outside libcore/train).
 * The layering, one direction only: batch.c (batch arithmetic, loaders, filling a
 * micro-batch) and schema.c are the bottom; elastic.c uses them; step.c, eval.c and
 * metrics.c use those; loop.c and train.c (setup, resume) sit on top. */
#ifndef NEBULA_TRAIN_IMPL_H
#define NEBULA_TRAIN_IMPL_H

#include <mpi.h>
#include <stdbool.h>

#include "comm/ctl.h"
#include "train.h"

/* The control plane's deadline for the trainer's own collectives (comm.timeout),
 * watched by the runtime's watchdog (a timeout names the ranks that made no progress). */
static inline comm_ctl train_ctl(const train_run *r)
{
    return comm_ctl_watched(comm_ctl_named(r->rt->world, r->timeout_s, "world"), r->rt->wd);
}

static inline double train_now_s(void)
{
    return MPI_Wtime();
}

/* ---- schema.c ---- */
void train_ckpt_content(train_run *r, ckpt_content *c);
/* The blob called name in c, or NULL. */
const ckpt_blob *train_ckpt_blob(const ckpt_content *c, const char *name);

/* ---- batch.c ---- */
/* Opens data file path for this run's model and micro-batch; train: the training
 * loader (accumulation, shuffling, augmentation), else held-out data in file order. */
status train_open_data(train_run *r, data_loader **out, const char *path, bool train);
/* Fills the model's micro-batch a of the current step from d (BERT: masked here). */
status train_fill(train_run *r, data_loader *d, int a);

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
/* Rank 0, after the checkpoint committed: RUN_DIR/relaunch, control renamed control.applied. */
status train_relaunch_write(train_run *r, int world);

/* ---- step.c ---- */
/* DGC-Pro at setup: off, forced on, or auto (ruled out for small models, one node). */
status train_dgc_setup(train_run *r);
/* Auto mode's decision after the first steps of a fresh run (collective). */
status train_dgc_auto(train_run *r, const train_step_stats *ss, long first);

/* ---- eval.c ---- */
/* Loss (and accuracy) over train.eval_batches of held-out data; rank 0 logs it. */
status train_evaluate(train_run *r);

/* ---- metrics.c ---- */
/* One record of metrics.jsonl (rank 0), flushed; takes j (a json_t *). */
void train_metrics_write(train_run *r, void *j);
/* Rank 0: the step's metrics line and record. */
void train_log_step(train_run *r, const train_step_stats *ss, double units, const char *unit);
/* Collective: DGC-Pro's choice per tensor; rank 0 logs it. */
status train_log_dgc_layers(train_run *r);
/* Throughput units of one global batch: images, or tokens. */
double train_units(const train_run *r, const char **unit);

#endif
