/* tracefile — a per-rank timeline of complete events, and the writer of Chrome's
 * trace-event JSON that Perfetto and chrome://tracing open (docs/profile.md,
 * "Communication timeline"; the format: Google's "Trace Event Format" document,
 * complete events "ph": "X" and metadata events "ph": "M").
 *
 * The one design decision: an event is a fixed 40-byte record in a ring sized once
 * (trace_buf_init), and its name is an index into a table filled at setup, so
 * recording is a store and an increment: no allocation, no formatting, no lock (one
 * thread records). When the ring is full the oldest event is overwritten and counted
 * as dropped. Text is made only by the writer, once, on the rank that writes the file,
 * from every rank's records and each rank's clock map (its offset to the reference
 * clock, interpolated for drift). Knows nothing of MPI: base only. */
#ifndef NEBULA_RECORD_TRACEFILE_H
#define NEBULA_RECORD_TRACEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/log.h"

#define TRACE_NAME_MAX 64     /* bytes of a name (event or track), NUL included */

/* The event categories ("cat"). */
typedef enum trace_cat {
    TRACE_CAT_COMPUTE = 0,
    TRACE_CAT_DATA,
    TRACE_CAT_COMM,
    TRACE_CAT_DGC,
    TRACE_CAT_OPTIM,
    TRACE_CAT_CKPT,
    TRACE_CAT_STEP,
    TRACE_CAT_COUNT
} trace_cat;

/* args.phase of an event ("none": no phase key). */
typedef enum trace_phase {
    TRACE_PHASE_NONE = 0,
    TRACE_PHASE_ALLREDUCE,              /* a bucket's whole allreduce, launch to completion */
    TRACE_PHASE_INTRA_REDUCE_SCATTER,   /* the hierarchical algorithm's three phases */
    TRACE_PHASE_INTER_ALLREDUCE,
    TRACE_PHASE_INTRA_ALLGATHER,
    TRACE_PHASE_FLAT,                   /* a one-phase algorithm's phase */
    TRACE_PHASE_WAIT,                   /* the step's wait for its communication */
    TRACE_PHASE_COUNT
} trace_phase;

/* One complete event: [t0, t1] on the recording rank's clock. The args (step,
 * layer, bucket, phase) are written when set (>= 0; phase not NONE). */
typedef struct trace_event {
    double t0;             /* start (s, trace_clock_s of the recording rank) */
    double t1;             /* end (s), >= t0 */
    int64_t step;          /* args.step: the training step (as the metrics line names it), -1 none */
    int32_t name;          /* index in the names table */
    int32_t layer;         /* args.layer: the parameter table's layer, -1 none */
    int32_t bucket;        /* args.bucket: the gradient bucket, -1 none */
    int16_t track;         /* "tid": index in the tracks table */
    uint8_t cat;           /* trace_cat */
    uint8_t phase;         /* trace_phase */
} trace_event;
_Static_assert(sizeof(trace_event) == 40, "trace_event is sent as plain bytes: no hidden padding");

/* A table of names (events or tracks); an event refers to one by index. Every rank
 * fills its tables in the same order at setup, so indices mean the same everywhere. */
typedef struct trace_names {
    int n;                 /* names held */
    int cap;               /* room */
    char (*name)[TRACE_NAME_MAX]; /* [cap] */
} trace_names;

/* The ring of one rank's events, oldest first from `head - n`. */
typedef struct trace_buf {
    trace_event *ev;       /* [cap] */
    size_t cap;            /* events it holds at most */
    size_t head;           /* where the next event goes */
    size_t n;              /* events held (<= cap) */
    uint64_t dropped;      /* events overwritten because the ring was full */
} trace_buf;

/* The recording clock: CLOCK_MONOTONIC in seconds (the profiler's clock, and what the
 * checkpoint writer's thread stamps with). */
static inline double trace_clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* STATUS_NOMEM when the allocation fails. cap >= 1. */
status trace_names_init(trace_names *t, int cap);
void trace_names_free(trace_names *t);
/* Appends name (cut at TRACE_NAME_MAX - 1 bytes): its index, or -1 when the table is
 * full. Names need not be distinct: a group of names is a run of indices. */
int trace_names_add(trace_names *t, const char *name);

status trace_buf_init(trace_buf *b, size_t cap);
void trace_buf_free(trace_buf *b);
/* Records e (the oldest event gives way when the ring is full). */
static inline void trace_add(trace_buf *b, const trace_event *e)
{
    b->ev[b->head] = *e;
    b->head = b->head + 1 == b->cap ? 0 : b->head + 1;
    if (b->n < b->cap) b->n++;
    else b->dropped++;
}
/* Rotates the ring in place so that ev[0 .. n) holds the events oldest first (no
 * allocation); recording may go on after it. */
void trace_buf_linearize(trace_buf *b);

/* A rank's clock against the reference (rank 0's): offset = local - reference, measured
 * at two points, a and b (local times), and interpolated linearly between them (and
 * beyond: clock drift is taken as constant). With b_local <= a_local the offset is
 * a's everywhere. */
typedef struct trace_clock_map {
    double a_local, a_offset;  /* s */
    double b_local, b_offset;  /* s */
} trace_clock_map;

/* t (local, s) on the reference clock. Increasing in t while the drift is below 1 s/s,
 * so events that nest on one clock nest on the other. */
double trace_clock_map_apply(const trace_clock_map *m, double t);

/* What one rank recorded, as the writer reads it. */
typedef struct trace_rank {
    int rank;                  /* "pid" */
    const char *host;          /* for the process name "rank R (host)" */
    const trace_event *ev;     /* [n], any order */
    size_t n;
    trace_clock_map clock;     /* onto the reference clock */
} trace_rank;

/* The file: every rank's events, the name and track tables (the same for every rank),
 * and otherData, already serialised as one JSON object (the caller's text; NULL: {}). */
typedef struct trace_doc {
    const trace_names *names;
    const trace_names *tracks;
    const trace_rank *ranks;   /* [nranks] */
    int nranks;
    const char *other_json;
} trace_doc;

/* The category's and phase's names, as written ("compute", "intra_reduce_scatter"). */
const char *trace_cat_name(trace_cat c);
const char *trace_phase_name(trace_phase p);

/* Writes d to path atomically (temporary name, fsync, rename: base/path.h) as
 * {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}: per rank a
 * process_name and process_sort_index metadata event, a thread_name and
 * thread_sort_index for each track it used, then its X events with ts and dur in
 * microseconds (3 decimals: nanoseconds, from whole nanoseconds so that nesting on
 * one track is exact) from the earliest event of any rank. STATUS_IO, logged with the
 * path, when it cannot. *nevents (may be NULL): the X events written. */
status trace_write_json(const char *path, const trace_doc *d, size_t *nevents);

#endif
