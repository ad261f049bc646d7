/* observe — what the trainer's observers share (metrics and its sinks, TensorBoard,
 * the profiler, the trace, the samples behind the pictures). Private to libcore/train:
 * only observe/ and the top files include it.
 *
 * The one design decision: observers read and never write back. They see the step
 * through the observer list core's step calls (train_observe), the step's statistics
 * from the loop, and records through the one sink metrics.c registers (train_emit),
 * which feeds metrics.jsonl and then TensorBoard, one way. */
#ifndef NEBULA_TRAIN_OBSERVE_H
#define NEBULA_TRAIN_OBSERVE_H

#include "record/tracefile.h"
#include "train/control/rules.h"
#include "train/observe/profile.h"

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

/* ---- samples.c: what the pictures are drawn from (docs/pictures.md) ---- */
typedef struct train_samples train_samples;
/* At setup (collective: the host names): the test hooks' keys checked (STATUS_INPUT),
 * rank 0's probe batch read. */
status train_samples_setup(train_run *r);
/* After each step, every rank (collective at a log step): the "ranks" record at log
 * steps, the "attention" record every monitor.attention_interval steps. */
status train_samples_step(train_run *r, const train_step_stats *ss, bool log_now);
void train_samples_free(train_run *r);

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
/* Makes train_metrics_write the run's sink of records (train_emit), first thing at setup. */
void train_metrics_attach(train_run *r);
/* Rank 0: opens RUN_DIR/metrics.jsonl for appending (train_rundir_open_file's statuses). */
status train_metrics_open(train_run *r);
/* One record of metrics.jsonl (rank 0, a no-op elsewhere), one line written whole or not
 * at all; takes j (a json_t *; NULL counts as a lost record). A failure is logged and
 * counted, never returned: training goes on. */
void train_metrics_write(train_run *r, void *j);
/* Closes metrics.jsonl (a failure is a warning). */
void train_metrics_close(train_run *r);
/* Rank 0: the step's metrics line and record. */
void train_log_step(train_run *r, const train_step_stats *ss, double units, const char *unit);
/* Collective: DGC-Pro's choice per tensor; rank 0 logs it. */
status train_log_dgc_layers(train_run *r);

#endif
