/* trace — the trainer's communication timeline (trace.enable, --trace; docs/profile.md,
 * "Communication timeline"): every traced step's phases and layers, each gradient
 * bucket's allreduce with its algorithm's phases, DGC-Pro's phases and the checkpoints,
 * per rank, written by rank 0 as RUN_DIR/trace.json (Chrome trace-event JSON).
 *
 * The one design decision: the trace takes its laps where the profiler does (the step's
 * observer list, core/step.c's train_lap; the model's layer timer), so a traced step is cut exactly as a profiled
 * one, and what it adds per step is a clock read and a 40-byte store per lap plus the
 * buckets' stamps that comm and the bucket manager keep anyway. Every rank records on
 * its own CLOCK_MONOTONIC; the clocks are compared with rank 0's by ping-pong when the
 * traced steps begin and again when they end, and rank 0 maps each rank's events onto
 * its own clock, the offset interpolated linearly between the two comparisons (drift). */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "observe.h"

#define TRACE_SYNC_ROUNDS 16     /* pings per rank and comparison: the shortest round trip is kept */
#define TRACE_TAG_EVENTS 0x4e54  /* "NT": a rank's events to rank 0 */

/* ---- the layer timer, shared with the profiler ---- */

static void layer_lap(void *ctx, int layer, bool backward)
{
    train_run *r = ctx;
    if (r->prof) train_profile_layer_lap(r->prof, layer, backward);
    train_trace *t = r->trace;
    if (!t || !t->in_step) return;  /* an untraced step, or an evaluation's forward */
    if (layer == PARAM_LAYER_LAST || layer >= r->nlayers) layer = r->nlayers - 1;
    double now = trace_clock_s();
    trace_add(&t->buf, &(trace_event){ .t0 = t->t_mark, .t1 = now, .step = r->step + 1,
                                       .name = (backward ? t->nm_bwd : t->nm_fwd) + layer, .layer = layer,
                                       .bucket = -1, .track = TRAIN_TRACE_TRACK_MAIN, .cat = TRACE_CAT_COMPUTE });
    t->t_mark = now;
}

void train_layer_timer_update(train_run *r)
{
    bool on = (r->prof && r->prof->active) || r->trace;
    model_set_layer_timer(&r->m, (param_layer_timer){ on ? layer_lap : NULL, r });
}

/* ---- setup ---- */

/* trace.steps: "N" (the N steps after the launch's first), "A-B" (inclusive), "all". */
static status parse_steps(train_trace *t, const config *cfg)
{
    const char *s = config_str(cfg, "trace.steps");
    char *end;
    t->first = 1, t->last = LONG_MAX, t->count = 0;
    if (!strcmp(s, "all")) {
        t->resolved = true;
        return STATUS_OK;
    }
    long a = strtol(s, &end, 10);
    if (end != s && *end == 0 && a >= 1) {
        t->count = a;
        return STATUS_OK;
    }
    if (end != s && *end == '-' && a >= 1) {
        char *e2;
        long b = strtol(end + 1, &e2, 10);
        if (e2 != end + 1 && *e2 == 0 && b >= a) {
            t->first = a, t->last = b, t->resolved = true;
            return STATUS_OK;
        }
    }
    log_error0("trace.steps = '%s' (%s): expected N (the N steps after the launch's first), A-B (steps A to B, "
               "1 <= A <= B, as the metrics lines number them) or all", s, config_origin(cfg, "trace.steps"));
    return STATUS_INPUT;
}

/* The trace clock minus MPI_Wtime, from the closest of a few bracketing reads (both are
 * CLOCK_MONOTONIC underneath in Open MPI; the difference is its origin). */
static double wtime_offset(void)
{
    double best = INFINITY, off = 0;
    for (int i = 0; i < 8; i++) {
        double a = trace_clock_s(), w = MPI_Wtime(), b = trace_clock_s();
        if (b - a < best) best = b - a, off = (a + b) / 2 - w;
    }
    return off;
}

/* Appends name to n; *id (may be NULL) its index. The tables are sized for every name. */
static void add_name(trace_names *n, const char *name, int *id)
{
    int k = trace_names_add(n, name);
    CHECK(k >= 0, "the trace's name tables are sized for every name at setup");
    if (id) *id = k;
}

/* Every name an event or track can carry, in one order on every rank; each group is a
 * run of consecutive indices (layer l's forward is nm_fwd + l). */
static void fill_names(train_run *r, train_trace *t)
{
    char name[TRACE_NAME_MAX], layer[TRACE_NAME_MAX - 16];
    for (int i = 0; i < TRAIN_PROFILE_NPHASES; i++)
        add_name(&t->names, train_profile_phase_name(i), i == 0 ? &t->nm_phase : NULL);
    for (int dir = 0; dir < 2; dir++)
        for (int l = 0; l < r->nlayers; l++) {
            train_layer_name(r, l, layer, sizeof layer - 8);
            if (l == r->nlayers - 1 && r->spec.family == MODEL_FAMILY_GPT2) strcat(layer, "+head");  /* the tied head */
            snprintf(name, sizeof name, "%s %s", dir ? "backward" : "forward", layer);
            add_name(&t->names, name, l > 0 ? NULL : dir ? &t->nm_bwd : &t->nm_fwd);
        }
    add_name(&t->names, "step", &t->nm_step);
    for (int b = 0; b < t->nbuckets; b++) {
        snprintf(name, sizeof name, "bucket %d", b);
        add_name(&t->names, name, b == 0 ? &t->nm_bucket : NULL);
    }
    for (int k = 0; k < COMM_PHASE_COUNT; k++)
        add_name(&t->names, comm_phase_name((comm_phase_kind)k), k == 0 ? &t->nm_comm : NULL);
    static const char *const more[] = { "dgc select", "dgc encode", "dgc exchange", "checkpoint stall",
                                        "checkpoint copy", "checkpoint write" };
    for (int k = 0; k < 6; k++) add_name(&t->names, more[k], k == 0 ? &t->nm_dgc : k == 3 ? &t->nm_ckpt : NULL);
    add_name(&t->tracks, "main: step, layers, phases", NULL);
    add_name(&t->tracks, "checkpoint writer", NULL);
    for (int b = 0; b < t->nbuckets; b++) {
        snprintf(name, sizeof name, "comm %d: bucket allreduces", b);
        add_name(&t->tracks, name, NULL);
    }
}

/* The step's laps, as an observer of the step (train_observe). */
static void trace_begin(void *ctx)
{
    train_trace_step_begin_(ctx);
}
static void trace_lap(void *ctx, int id)
{
    train_run *r = ctx;
    if (r->trace->in_step) train_trace_lap_(r, id);
}

status train_trace_setup(train_run *r)
{
    if (!config_bool(r->cfg, "trace.enable")) return STATUS_OK;
    train_trace *t = calloc(1, sizeof *t);
    if (!t) return STATUS_NOMEM;
    r->trace = t;
    TRY(parse_steps(t, r->cfg));
    t->nbuckets = bucket_count(&r->bm);
    int nnames = TRAIN_PROFILE_NPHASES + 2 * r->nlayers + 1 + t->nbuckets + COMM_PHASE_COUNT + 6;
    TRY(trace_names_init(&t->names, nnames));
    TRY(trace_names_init(&t->tracks, TRAIN_TRACE_TRACK_COMM0 + t->nbuckets));
    TRY(trace_buf_init(&t->buf, (size_t)config_int(r->cfg, "trace.max_events")));
    t->lane_end = calloc((size_t)t->nbuckets + 1, sizeof *t->lane_end);
    if (r->rt->rank == 0) t->sync = calloc(6 * (size_t)r->rt->size, sizeof *t->sync);
    if (!t->lane_end || (r->rt->rank == 0 && !t->sync)) return STATUS_NOMEM;
    fill_names(r, t);
    t->wtime_off = wtime_offset();
    t->ckpt_step = -1;
    train_layer_timer_update(r);
    train_observe(r, &(train_step_observer){ .begin = trace_begin, .lap = trace_lap, .ctx = r });
    return STATUS_OK;
}

void train_trace_free(train_run *r)
{
    train_trace *t = r->trace;
    if (!t) return;
    trace_buf_free(&t->buf);
    trace_names_free(&t->names);
    trace_names_free(&t->tracks);
    free(t->lane_end);
    free(t->sync);
    free(t);
    r->trace = NULL;
    if (r->m.base) train_layer_timer_update(r);  /* the profiler's, or none */
}

/* ---- recording ---- */

/* Rank 0: the clock comparison into sync[3 * at ...] (at 0: the start, 1: the end). */
static status clock_compare(train_run *r, int at)
{
    train_trace *t = r->trace;
    int n = r->rt->size;
    double *s = t->sync ? t->sync + 3 * (size_t)at * (size_t)n : NULL;
    return comm_ctl_clock_offsets(train_ctl(r), 0, TRACE_SYNC_ROUNDS, trace_clock_s, s, s ? s + n : NULL,
                                  s ? s + 2 * n : NULL);
}

status train_trace_begin(train_run *r)
{
    train_trace *t = r->trace;
    if (!t || t->synced || t->done) return STATUS_OK;
    long s = r->step + 1;  /* the step about to run */
    if (!t->resolved) {    /* N steps after this launch's first (its warm-up) */
        t->first = s + 1;
        t->last = t->first + t->count - 1;
        t->resolved = true;
    }
    if (t->first > r->steps) {  /* said before the first step, not found out at the end (docs/profile.md) */
        t->done = true;
        log_warn0("trace.steps = %s (%s): step %ld onwards lies past the end of this run (train.steps = %ld): no "
                  "trace.json will be written\nHINT: trace steps the run takes, e.g. trace.steps = %ld-%ld",
                  config_str(r->cfg, "trace.steps"), config_origin(r->cfg, "trace.steps"), t->first, r->steps,
                  s, s + 4 < r->steps ? s + 4 : r->steps);
        return STATUS_OK;
    }
    if (s < t->first) return STATUS_OK;
    if (s > t->last) {
        t->done = true;
        if (r->rt->rank == 0)
            printf("trace: no step of trace.steps = %s is run by this launch (it starts at step %ld): no trace.json\n",
                   config_str(r->cfg, "trace.steps"), s);
        return STATUS_OK;
    }
    TRY(clock_compare(r, 0));
    t->synced = true;
    t->t_begin = trace_clock_s();
    return STATUS_OK;
}

void train_trace_step_begin_(train_run *r)
{
    train_trace *t = r->trace;
    long s = r->step + 1;
    t->in_step = t->synced && !t->done && s >= t->first && s <= t->last;
    if (t->in_step) t->t_step0 = t->t_mark = trace_clock_s();
}

void train_trace_lap_(train_run *r, int id)
{
    static const uint8_t cats[TRAIN_PROFILE_NPHASES] = { TRACE_CAT_COMPUTE, TRACE_CAT_DATA, TRACE_CAT_COMM,
                                                         TRACE_CAT_OPTIM, TRACE_CAT_OPTIM };
    train_trace *t = r->trace;
    double now = trace_clock_s();
    trace_add(&t->buf, &(trace_event){ .t0 = t->t_mark, .t1 = now, .step = r->step + 1, .name = t->nm_phase + id,
                                       .layer = -1, .bucket = -1, .track = TRAIN_TRACE_TRACK_MAIN, .cat = cats[id],
                                       .phase = id == TRAIN_PROFILE_COMM_WAIT ? TRACE_PHASE_WAIT : TRACE_PHASE_NONE });
    if (id == TRAIN_PROFILE_COMM_WAIT) t->t_wait0 = t->t_mark, t->t_wait1 = now;
    t->t_mark = now;
}

static void record(train_trace *t, double t0, double t1, long step, int name, int bucket, int track, trace_cat cat,
                trace_phase phase)
{
    trace_add(&t->buf, &(trace_event){ .t0 = t0, .t1 = t1 > t0 ? t1 : t0, .step = step, .name = name, .layer = -1,
                                       .bucket = bucket, .track = (int16_t)track, .cat = (uint8_t)cat,
                                       .phase = (uint8_t)phase });
}

/* Each bucket's allreduce, launch to completion, on the lowest lane free at its launch,
 * with its algorithm's phases inside (clamped to it: the stamps come from two clocks
 * read at different instants, the bucket's and comm's). */
static void record_buckets(train_run *r, train_trace *t, long step)
{
    static const trace_phase kinds[COMM_PHASE_COUNT] = { TRACE_PHASE_FLAT, TRACE_PHASE_INTRA_REDUCE_SCATTER,
                                                         TRACE_PHASE_INTER_ALLREDUCE, TRACE_PHASE_INTRA_ALLGATHER };
    int lanes = 0;
    for (int b = 0; b < t->nbuckets; b++) {
        const bucket *k = &r->bm.buckets[b];
        double a = k->t_start + t->wtime_off, e = k->t_done + t->wtime_off;
        if (a < t->t_step0) continue;  /* not launched in this step */
        int lane = 0;
        while (lane < lanes && t->lane_end[lane] > a) lane++;
        if (lane == lanes) lanes++;
        t->lane_end[lane] = e;
        record(t, a, e, step, t->nm_bucket + b, b, TRAIN_TRACE_TRACK_COMM0 + lane, TRACE_CAT_COMM,
               TRACE_PHASE_ALLREDUCE);
        int n;
        const comm_phase *ph = comm_op_phases(&k->op, &n, NULL);
        for (int i = 0; i < n; i++) {
            double p0 = fmax(a, ph[i].t0 + t->wtime_off), p1 = fmin(e, ph[i].t1 + t->wtime_off);
            record(t, p0, p1 > p0 ? p1 : p0, step, t->nm_comm + ph[i].kind, b, TRAIN_TRACE_TRACK_COMM0 + lane,
                TRACE_CAT_COMM, kinds[ph[i].kind]);
        }
    }
}

/* DGC-Pro reports its phases as durations (dgc_stats); encode and exchange interleave
 * inside its exchange, so they are drawn one after another from the exchange's start
 * (the end of the comm_wait lap minus its total), inside the comm_wait lap. */
static void record_dgc(train_run *r, train_trace *t, long step)
{
    const dgc_stats *d = &r->dstats;
    double at = fmax(t->t_wait0, t->t_wait1 - d->total_s);
    double dur[3] = { d->select_s, d->encode_s, d->exchange_s };
    for (int k = 0; k < 3; k++) {
        double e = fmin(t->t_wait1, at + dur[k]);
        record(t, at, e, step, t->nm_dgc + k, -1, TRAIN_TRACE_TRACK_MAIN, TRACE_CAT_DGC, TRACE_PHASE_NONE);
        at = e;
    }
}

/* A background save (rank 0's writer thread) that finished since the last look: its
 * copy and write on the writer's track, when it began after tracing did. */
static void record_ckpt_background(train_run *r, train_trace *t)
{
    if (!r->ckpt) return;
    ckpt_stats cs;
    ckpt_get_stats(r->ckpt, &cs);
    if (cs.copy_t0 <= 0 || cs.copy_t0 == t->ckpt_seen || cs.copy_t0 < t->t_begin) return;
    t->ckpt_seen = cs.copy_t0;
    record(t, cs.copy_t0, cs.copy_t0 + cs.copy_s, t->ckpt_step, t->nm_ckpt + 1, -1, TRAIN_TRACE_TRACK_CKPT,
        TRACE_CAT_CKPT, TRACE_PHASE_NONE);
    if (cs.write_t0 > 0)
        record(t, cs.write_t0, cs.write_t0 + cs.write_s, t->ckpt_step, t->nm_ckpt + 2, -1, TRAIN_TRACE_TRACK_CKPT,
            TRACE_CAT_CKPT, TRACE_PHASE_NONE);
}

void train_trace_step(train_run *r, const train_step_stats *ss)
{
    train_trace *t = r->trace;
    if (!t || !t->in_step) return;
    t->in_step = false;
    long step = r->step;  /* the step just run */
    record(t, t->t_step0, t->t_mark, step, t->nm_step, -1, TRAIN_TRACE_TRACK_MAIN, TRACE_CAT_STEP, TRACE_PHASE_NONE);
    bool compressed = r->dgc && dgc_active(r->dgc);
    if (!compressed) record_buckets(r, t, step);
    else if (isfinite(ss->gnorm)) record_dgc(r, t, step);  /* a step skipped before the exchange has none */
    record_ckpt_background(r, t);
}

void train_trace_ckpt(train_run *r, double t0, double ms)
{
    train_trace *t = r->trace;
    if (!t || !t->synced || t->done || r->step < t->first || r->step > t->last) return;
    double a = t0 + t->wtime_off;
    record_ckpt_background(r, t);  /* the previous save's, finished inside this one at the latest */
    record(t, a, a + ms / 1e3, r->step, t->nm_ckpt, -1, TRAIN_TRACE_TRACK_MAIN, TRACE_CAT_CKPT, TRACE_PHASE_NONE);
    t->ckpt_step = r->step;
}

/* ---- writing: every rank's events to rank 0, which maps and writes them ---- */

typedef struct train_trace_header {
    int64_t n;             /* events sent */
    uint64_t dropped;      /* overwritten in the ring */
    char host[64];
} train_trace_header;

/* otherData: what the trace is of, the clock comparisons, the dropped counts. */
static char *other_json(const train_run *r, const train_trace *t, const train_trace_header *h, size_t total)
{
    int n = r->rt->size;
    const double *s = t->sync;
    json_t *sync = json_array(), *dropped = json_array(), *events = json_array();
    for (int k = 0; k < n; k++) {
        json_t *row = json_pack("{s:i, s:s}", "rank", k, "host", h[k].host);
        for (int at = 0; at < 2; at++) {
            const double *p = s + 3 * (size_t)at * (size_t)n;
            json_object_set_new(row, at ? "end" : "start",
                                json_pack("{s:o, s:o, s:o}", "offset_us", train_json_num(p[k] * 1e6), "rtt_us",
                                          train_json_num(p[n + k] * 1e6), "rank0_clock_s",
                                          train_json_num(p[2 * n + k])));
        }
        json_array_append_new(sync, row);
        json_array_append_new(dropped, json_integer((json_int_t)h[k].dropped));
        json_array_append_new(events, json_integer((json_int_t)h[k].n));
    }
    json_t *j = json_pack("{s:i, s:s, s:s, s:i, s:i, s:i, s:[I, I], s:s, s:s, s:I, s:i, s:I, s:I}", "version", 1,
                          "model", r->spec.name, "clock",
                          "CLOCK_MONOTONIC of each rank, mapped onto rank 0's; ts 0 = the earliest event", "world", n,
                          "nodes", r->rt->nnodes, "ranks_per_node", r->rt->max_local_size, "steps",
                          (json_int_t)t->first, (json_int_t)(r->step < t->last ? r->step : t->last), "comm_algo",
                          config_str(r->cfg, "comm.algo"), "comm_exchange", comm_hier_exchange(r->c), "bucket_bytes",
                          (json_int_t)config_size(r->cfg, "train.bucket_bytes"), "buckets", t->nbuckets,
                          "max_events", (json_int_t)t->buf.cap, "events_total", (json_int_t)total);
    json_object_set_new(j, "clock_sync", sync);
    json_object_set_new(j, "clock_sync_method",
                        json_string("ping-pong with rank 0, the round with the shortest trip of 16 (offset = the "
                                    "rank's clock at the ping minus the midpoint of rank 0's send and receive), at "
                                    "the start and the end of the traced steps; linear between them"));
    json_object_set_new(j, "events", events);
    json_object_set_new(j, "dropped", dropped);
    char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    return text;
}

/* Rank 0 with every rank's header and events (ev: rank k's from off[k]): maps, writes. */
static status write_file(train_run *r, train_trace *t, const train_trace_header *h, const trace_event *ev,
                         const size_t *off, size_t total)
{
    int n = r->rt->size;
    trace_rank *ranks = calloc((size_t)n, sizeof *ranks);
    char *other = other_json(r, t, h, total);
    if (!ranks || !other) {
        free(ranks), free(other);
        return STATUS_NOMEM;
    }
    const double *a = t->sync, *b = t->sync + 3 * (size_t)n;
    for (int k = 0; k < n; k++) {
        /* a comparison's local time: rank 0's clock at its midpoint plus the offset */
        ranks[k] = (trace_rank){ .rank = k, .host = h[k].host, .ev = ev + off[k], .n = (size_t)h[k].n,
                                 .clock = { .a_local = a[2 * n + k] + a[k], .a_offset = a[k],
                                            .b_local = b[2 * n + k] + b[k], .b_offset = b[k] } };
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/trace.json", r->run_dir);
    trace_doc d = { .names = &t->names, .tracks = &t->tracks, .ranks = ranks, .nranks = n, .other_json = other };
    size_t written = 0;
    status st = trace_write_json(path, &d, &written);
    uint64_t lost = 0;
    for (int k = 0; k < n; k++) lost += h[k].dropped;
    if (st == STATUS_OK)
        printf("trace: %s: %zu events of steps %ld-%ld from %d rank%s%s; open it in https://ui.perfetto.dev or "
               "chrome://tracing\n", path, written, t->first, r->step < t->last ? r->step : t->last, n,
               n == 1 ? "" : "s", lost ? " (the oldest were dropped: raise trace.max_events)" : "");
    else
        log_warn("trace: %s could not be written; the run goes on", path);
    if (lost) log_warn("trace: %llu events were dropped (trace.max_events = %zu per rank is full)",
                       (unsigned long long)lost, t->buf.cap);
    fflush(stdout);
    free(ranks), free(other);
    return STATUS_OK;  /* a trace that cannot be written does not end the training */
}

/* Collective: the clock comparison at the end, every rank's events to rank 0, the file. */
static status trace_flush(train_run *r)
{
    train_trace *t = r->trace;
    t->done = true;
    t->in_step = false;
    record_ckpt_background(r, t);
    TRY(clock_compare(r, 1));
    trace_buf_linearize(&t->buf);
    int n = r->rt->size, me = r->rt->rank;
    train_trace_header mine = { .n = (int64_t)t->buf.n, .dropped = t->buf.dropped };
    snprintf(mine.host, sizeof mine.host, "%s", r->rt->host);
    train_trace_header *h = me == 0 ? calloc((size_t)n, sizeof *h) : NULL;
    size_t *off = me == 0 ? calloc((size_t)n + 1, sizeof *off) : NULL;
    if (me == 0 && (!h || !off)) die("trace", "out of memory for the trace headers", "lower trace.max_events");
    comm_ctl ctl = train_ctl(r);
    ctl.name = "world (trace events to rank 0)";
    status st = comm_ctl_gather(ctl, &mine, (int)sizeof mine, MPI_BYTE, h, (int)sizeof mine, MPI_BYTE, 0);
    if (st != STATUS_OK || me != 0) {
        /* trace.max_events <= 2^25: a rank's events fit an int count of bytes */
        if (st == STATUS_OK && mine.n > 0)
            st = comm_ctl_send(ctl, t->buf.ev, (int)(mine.n * (int64_t)sizeof *t->buf.ev), MPI_BYTE, 0,
                               TRACE_TAG_EVENTS);
        free(h), free(off);
        return st;
    }
    for (int k = 0; k < n; k++) off[k + 1] = off[k] + (size_t)h[k].n;
    trace_event *all = malloc((off[n] ? off[n] : 1) * sizeof *all);
    if (!all) die("trace", "out of memory for every rank's events on rank 0", "lower trace.max_events");
    memcpy(all, t->buf.ev, (size_t)mine.n * sizeof *all);
    for (int k = 1; k < n && st == STATUS_OK; k++)
        if (h[k].n > 0)
            st = comm_ctl_recv(ctl, all + off[k], (int)(h[k].n * (int64_t)sizeof *all), MPI_BYTE, k, TRACE_TAG_EVENTS);
    if (st == STATUS_OK) st = write_file(r, t, h, all, off, off[n]);
    free(all), free(h), free(off);
    return st;
}

status train_trace_step_end(train_run *r)
{
    train_trace *t = r->trace;
    if (!t || !t->synced || t->done || r->step < t->last || r->step >= r->steps) return STATUS_OK;
    return trace_flush(r);  /* the run goes on untraced */
}

status train_trace_finish(train_run *r)
{
    train_trace *t = r->trace;
    if (!t || !t->synced || t->done) return STATUS_OK;
    return trace_flush(r);
}
