/* profile — the trainer's profiler mode (profile.mode, --profile; docs/profile.md):
 * per-phase and per-layer times of the step with counts, min / median / max, the
 * reductions of the gradient buckets, DGC-Pro's phases, the checkpoint's copy and
 * write, and hardware counters through PAPI where the machine has them. Rank 0 prints
 * the table and writes RUN_DIR/profile.json; the first run of a model and batch shape
 * prints a short one-screen profile with batch advice (profile.mode = auto).
 * Private to libcore/train/observe (and the top files: loop.c, train.c).
 *
 * The one design decision: the step is cut by consecutive clock reads ("laps"), each
 * lap charged to the phase or layer that just ended, so the phases and layers tile
 * the step with nothing counted twice or lost; the layers are cut by the model's
 * param_layer_timer at its layer boundaries. Everything is sized at setup: per timer
 * streaming count, total, min and max, plus a ring of the last TRAIN_PROFILE_RING
 * samples for the median. Off, the profiler is a NULL pointer: one check per hook. */
#ifndef NEBULA_TRAIN_PROFILE_H
#define NEBULA_TRAIN_PROFILE_H

#include <stdbool.h>
#include <time.h>

#include "train/core/core.h"

#define TRAIN_PROFILE_RING       256  /* samples per timer kept for the median: the last 256 profiled steps */
#define TRAIN_PROFILE_EVENTS_MAX 8    /* PAPI events of profile.events */
#define TRAIN_PROFILE_NAME       64   /* bytes of a timer's name */

/* What a timer measures. PHASE, FORWARD and BACKWARD tile the step; DETAIL timers
 * overlap them (a bucket's reduction runs during the backward) or lie outside the
 * step (checkpoints). */
typedef enum train_profile_kind {
    TRAIN_PROFILE_KIND_PHASE = 0,
    TRAIN_PROFILE_KIND_FORWARD,
    TRAIN_PROFILE_KIND_BACKWARD,
    TRAIN_PROFILE_KIND_DETAIL,
} train_profile_kind;

typedef struct train_profile_timer {
    char name[TRAIN_PROFILE_NAME];   /* "data", "forward h.3", "bucket 2", ... */
    train_profile_kind kind;
    int layer;                       /* the parameter table's layer, -1 for none */
    double cur;                      /* ms charged in the current step */
    bool touched;                    /* charged in the current step */
    long count;                      /* samples (profiled steps, checkpoints) */
    double total, min, max;          /* ms over the samples */
    double ring[TRAIN_PROFILE_RING]; /* the last samples (ms), for the median */
    double ev_cur[TRAIN_PROFILE_EVENTS_MAX];   /* counter deltas in the current step */
    double ev_total[TRAIN_PROFILE_EVENTS_MAX]; /* over the samples */
} train_profile_timer;

/* The PAPI side (profile_papi.c): the events of profile.events, which of them count. */
typedef struct train_profile_papi {
    int n;                           /* events asked for */
    char name[TRAIN_PROFILE_EVENTS_MAX][64];
    char why[TRAIN_PROFILE_EVENTS_MAX][192];   /* "" when it counts, else "n/a: reason" */
    int slot[TRAIN_PROFILE_EVENTS_MAX];        /* its index in the event set, -1 when n/a */
    int ncounting;                   /* events in the running event set */
    int eventset;                    /* PAPI's handle (PAPI_NULL without one) */
    long long last[TRAIN_PROFILE_EVENTS_MAX];  /* the values at the last lap */
    long long now[TRAIN_PROFILE_EVENTS_MAX];   /* scratch of PAPI_read */
} train_profile_papi;

typedef struct train_profile {
    bool active;                     /* laps are charged (false after the first-run window) */
    bool in_step;                    /* between step_begin and the step's commit */
    bool first_run;                  /* profile.mode = auto on a new shape: the one-screen profile */
    long window;                     /* auto: profiled steps before the one-screen profile (profile.steps) */
    long seen;                       /* steps of this launch that ended (the first is the warm-up) */
    bool reported;                   /* the report of this run was made */
    double t_mark, t_step0;          /* ms: the last lap, the step's first clock read */
    int nlayers;                     /* the model's layers (param table) */
    int fwd0, bwd0;                  /* timer ids of forward layer 0 and backward layer 0 */
    int step_id, trainer_id;         /* the step by the laps' clock, by the trainer's (ss->step_ms) */
    int bucket0, nbuckets;           /* the buckets' reductions */
    int dgc0;                        /* DGC-Pro's select, encode, exchange */
    int ckpt0;                       /* checkpoint stall, copy, write */
    double ckpt_copy_seen, ckpt_write_seen; /* the writer's last stats already sampled (s) */
    int ntimers;
    train_profile_timer *timers;     /* [ntimers] */
    train_profile_papi papi;
    char shape[512];                 /* the shape key of the first-run rule */
    char shapes_path[4200];          /* the record of seen shapes */
    bool shapes_own;                 /* it is the default RUN_DIR/profile-shapes: never read through a link */
} train_profile;

static inline double train_profile_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Charges the time since the last lap (and the counters' deltas) to timer id. */
void train_profile_lap_(train_profile *p, int id);
static inline void train_profile_lap(train_profile *p, int id)
{
    if (p && p->in_step) train_profile_lap_(p, id);
}
/* The step's first clock read (step.c, train_step's start). */
void train_profile_step_begin_(train_profile *p);
static inline void train_profile_step_begin(train_profile *p)
{
    if (p && p->active) train_profile_step_begin_(p);
}

/* The model's layer timer's lap for the profiler (train_layer_timer_update installs it):
 * charged to the layer that just finished. */
void train_profile_layer_lap(train_profile *p, int layer, bool backward);
/* "zero_grads", "data", "comm_wait", "loss+clip", "optimizer": the phases' names. */
const char *train_profile_phase_name(int id);
/* Layer l's name from the parameter table: the dotted prefix its tensors share ("h.3"),
 * else their first components joined ("wte+wpe"). */
void train_layer_name(const train_run *r, int l, char *out, size_t cap);

/* ---- profile.c, called by train.c and loop.c ---- */
/* At setup: STATUS_INPUT, logged, for a bad profile.events; r->prof stays NULL when
 * the mode is off, or auto on a shape already seen (collective: rank 0 decides). */
status train_profile_setup(train_run *r);
/* After each train_step: the step's samples; collective when the first-run window
 * closes (the one-screen profile). */
status train_profile_step(train_run *r, const train_step_stats *ss);
/* Rank 0 after a checkpoint's save: its stall (ms) and the writer's copy and write. */
void train_profile_ckpt(train_run *r, double stall_ms);
/* At the end of the loop (collective): the summary table and RUN_DIR/profile.json,
 * unless the first-run profile already reported. */
status train_profile_finish(train_run *r);
void train_profile_free(train_run *r);

/* ---- profile_papi.c ---- */
/* Parses the comma-separated list (STATUS_INPUT, logged, past TRAIN_PROFILE_EVENTS_MAX
 * or for an empty name) and adds what can be added; never fails on an event that
 * cannot count: its why says "n/a: reason". */
status train_profile_papi_init(train_profile_papi *pp, const char *events);
/* Reads the counters into pp->now (no-op without counters). */
void train_profile_papi_read(train_profile_papi *pp);
void train_profile_papi_free(train_profile_papi *pp);

#endif
