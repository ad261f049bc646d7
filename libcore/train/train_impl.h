/* train_impl — what the trainer's top files share (train.c: setup, resume, rollback,
 * free; loop.c: the step loop), never included outside libcore/train and its tests.
 *
 * The one design decision: the top files are the only ones that see all three
 * sub-modules. Below them the order is one-way, core < control < observe
 * (tools/check-layers.sh): core/ (batch, schema, step, pipeline, hybrid, eval) calls
 * nothing above it, control/ (elastic, control file, hot reload, run directory,
 * divergence, alert rules, shares) calls into core only, observe/ (metrics,
 * TensorBoard, profiler, trace, samples) into both; the loop composes them. */
#ifndef NEBULA_TRAIN_IMPL_H
#define NEBULA_TRAIN_IMPL_H

#include "train/observe/observe.h"

/* ---- train.c ---- */
/* Collective: restores the newest committed checkpoint below the alert rules' floor (the
 * initial state, from the seed, when there is none), keeping the loader's position (the
 * data of the undone steps is skipped), the elastic batch and the rules' own state;
 * newer checkpoints are removed; recorded as a rollback. The loop runs it when the
 * agreed actions hold TRAIN_ALERT_ROLLBACK. */
status train_rollback(train_run *r);

#endif
