/* tracefile — the event ring, the name tables and the trace-event JSON writer (tracefile.h).
 *
 * The writer prints with stdio into the temporary file path_write_atomic hands it:
 * the events are fixed-shape records whose only free text is a name of the tables
 * (escaped once per event) and the caller's otherData, already serialised. */
#include "tracefile.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/path.h"

static const char *const cat_names[TRACE_CAT_COUNT] = { "compute", "data", "comm", "dgc", "optim", "ckpt", "step" };
static const char *const phase_names[TRACE_PHASE_COUNT] = { "", "allreduce", "intra_reduce_scatter", "inter_allreduce",
                                                            "intra_allgather", "flat", "wait" };

const char *trace_cat_name(trace_cat c)
{
    return c >= 0 && c < TRACE_CAT_COUNT ? cat_names[c] : "?";
}

const char *trace_phase_name(trace_phase p)
{
    return p > TRACE_PHASE_NONE && p < TRACE_PHASE_COUNT ? phase_names[p] : "";
}

status trace_names_init(trace_names *t, int cap)
{
    t->n = 0;
    t->cap = cap;
    t->name = calloc((size_t)cap, sizeof *t->name);
    return t->name ? STATUS_OK : STATUS_NOMEM;
}

void trace_names_free(trace_names *t)
{
    free(t->name);
    t->name = NULL;
    t->n = t->cap = 0;
}

int trace_names_add(trace_names *t, const char *name)
{
    if (t->n == t->cap) return -1;
    snprintf(t->name[t->n], sizeof t->name[0], "%s", name);
    return t->n++;
}

status trace_buf_init(trace_buf *b, size_t cap)
{
    memset(b, 0, sizeof *b);
    CHECK(cap >= 1, "a trace ring holds at least one event");
    b->ev = calloc(cap, sizeof *b->ev);
    if (!b->ev) {
        log_error("cannot allocate the trace ring of %zu events (%zu MB)", cap, cap * sizeof *b->ev >> 20);
        return STATUS_NOMEM;
    }
    b->cap = cap;
    return STATUS_OK;
}

void trace_buf_free(trace_buf *b)
{
    free(b->ev);
    memset(b, 0, sizeof *b);
}

static void reverse(trace_event *e, size_t n)
{
    for (size_t i = 0, j = n; i + 1 < j; i++, j--) {
        trace_event x = e[i];
        e[i] = e[j - 1];
        e[j - 1] = x;
    }
}

void trace_buf_linearize(trace_buf *b)
{
    size_t oldest = b->n < b->cap ? 0 : b->head;  /* not full: the events are ev[0 .. n) already */
    if (oldest > 0) {  /* rotate left by `oldest`: three reversals */
        reverse(b->ev, oldest);
        reverse(b->ev + oldest, b->cap - oldest);
        reverse(b->ev, b->cap);
    }
    b->head = b->n == b->cap ? 0 : b->n;
}

double trace_clock_map_apply(const trace_clock_map *m, double t)
{
    double off = m->a_offset;
    if (m->b_local > m->a_local)
        off += (m->b_offset - m->a_offset) * (t - m->a_local) / (m->b_local - m->a_local);
    return t - off;
}

/* ---- the writer ---- */

typedef struct writer {
    FILE *f;
    const trace_doc *d;
    double base;           /* reference-clock time of ts = 0 (s) */
    bool first;            /* no event written yet: no comma before the next */
    size_t nx;             /* X events written */
} writer;

/* A JSON string: quote, backslash and control characters escaped; bytes past ASCII
 * (names here are ASCII; a host name might not be) as '?', so the file is valid UTF-8. */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c < 0x80 ? c : '?', f);
    }
    fputc('"', f);
}

/* Microseconds with 3 decimals from whole nanoseconds (>= 0). */
static void put_us(FILE *f, int64_t ns)
{
    if (ns < 0) ns = 0;
    fprintf(f, "%" PRId64 ".%03d", ns / 1000, (int)(ns % 1000));
}

static int64_t to_ns(const writer *w, const trace_rank *r, double t)
{
    return llround((trace_clock_map_apply(&r->clock, t) - w->base) * 1e9);
}

static void begin_event(writer *w)
{
    fputs(w->first ? "\n" : ",\n", w->f);
    w->first = false;
}

/* A metadata event: {"name": what, "ph": "M", "pid", "tid", "ts": 0, "args": {key: value}}. */
static void put_meta(writer *w, int pid, int tid, const char *what, const char *text, int num)
{
    begin_event(w);
    fprintf(w->f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"ts\":0,\"args\":{", what, pid, tid);
    if (text) {
        fputs("\"name\":", w->f);
        put_str(w->f, text);
    } else {
        fprintf(w->f, "\"sort_index\":%d", num);
    }
    fputs("}}", w->f);
}

static void put_event(writer *w, const trace_rank *r, const trace_event *e)
{
    const trace_doc *d = w->d;
    int64_t a = to_ns(w, r, e->t0), b = to_ns(w, r, e->t1 > e->t0 ? e->t1 : e->t0);
    begin_event(w);
    fputs("{\"name\":", w->f);
    put_str(w->f, e->name >= 0 && e->name < d->names->n ? d->names->name[e->name] : "?");
    fprintf(w->f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":", trace_cat_name((trace_cat)e->cat),
            r->rank, e->track);
    put_us(w->f, a);
    fputs(",\"dur\":", w->f);
    put_us(w->f, b > a ? b - a : 0);
    fputs(",\"args\":{", w->f);
    const char *sep = "";
    if (e->step >= 0) fprintf(w->f, "%s\"step\":%" PRId64, sep, e->step), sep = ",";
    if (e->layer >= 0) fprintf(w->f, "%s\"layer\":%d", sep, (int)e->layer), sep = ",";
    if (e->bucket >= 0) fprintf(w->f, "%s\"bucket\":%d", sep, (int)e->bucket), sep = ",";
    if (e->phase != TRACE_PHASE_NONE) fprintf(w->f, "%s\"phase\":\"%s\"", sep, trace_phase_name((trace_phase)e->phase));
    fputs("}}", w->f);
    w->nx++;
}

/* One rank: its process name and order, the names and order of the tracks it used,
 * then its events. */
static void put_rank(writer *w, const trace_rank *r, bool *used)
{
    const trace_names *tracks = w->d->tracks;
    char pname[TRACE_NAME_MAX + 32];
    snprintf(pname, sizeof pname, "rank %d (%s)", r->rank, r->host ? r->host : "?");
    put_meta(w, r->rank, 0, "process_name", pname, 0);
    put_meta(w, r->rank, 0, "process_sort_index", NULL, r->rank);
    memset(used, 0, (size_t)tracks->n);
    if (tracks->n > 0) used[0] = true;  /* the main track, named even when empty */
    for (size_t i = 0; i < r->n; i++)
        if (r->ev[i].track >= 0 && r->ev[i].track < tracks->n) used[r->ev[i].track] = true;
    for (int t = 0; t < tracks->n; t++) {
        if (!used[t]) continue;
        put_meta(w, r->rank, t, "thread_name", tracks->name[t], 0);
        put_meta(w, r->rank, t, "thread_sort_index", NULL, t);
    }
    for (size_t i = 0; i < r->n; i++) put_event(w, r, &r->ev[i]);
}

static int fill(void *ctx, int fd)
{
    writer *w = ctx;
    int fd2 = dup(fd);
    w->f = fd2 >= 0 ? fdopen(fd2, "w") : NULL;
    if (!w->f) {
        if (fd2 >= 0) close(fd2);
        return -1;
    }
    bool *used = malloc((size_t)w->d->tracks->n + 1);
    if (!used) {
        fclose(w->f);
        return -1;
    }
    fputs("{\"traceEvents\":[", w->f);
    for (int k = 0; k < w->d->nranks; k++) put_rank(w, &w->d->ranks[k], used);
    fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":", w->f);
    fputs(w->d->other_json ? w->d->other_json : "{}", w->f);
    fputs("}\n", w->f);
    free(used);
    bool bad = ferror(w->f);
    if (fclose(w->f) != 0 || bad) return -1;  /* errno from the failed write or close */
    return 0;
}

status trace_write_json(const char *path, const trace_doc *d, size_t *nevents)
{
    writer w = { .d = d, .first = true, .base = INFINITY };
    for (int k = 0; k < d->nranks; k++)
        for (size_t i = 0; i < d->ranks[k].n; i++)
            w.base = fmin(w.base, trace_clock_map_apply(&d->ranks[k].clock, d->ranks[k].ev[i].t0));
    if (!isfinite(w.base)) w.base = 0;  /* no events: only the metadata */
    status st = path_write_atomic(path, "trace", fill, &w);
    if (nevents) *nevents = w.nx;
    return st;
}
