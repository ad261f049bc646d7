/* timeline — the trace figure of nebula-report from RUN_DIR/trace.json (Chrome trace-event
 * JSON: one process per rank, tracks as threads, complete "X" events with ts/dur in µs on
 * rank 0's clock): the time per bucket phase per rank, stacked, and one traced step per
 * rank as a Gantt chart. A trace of a long run holds millions of events, so every part is
 * one or two passes over them; only the drawn step's events are looked at twice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

#define FIG_W 1000
#define MAX_RANKS 4096
#define MAX_LANES 256

/* The communication phases of the trace format, in the order they run: the buckets' (their
 * `args.phase`) and DGC-Pro's (the `dgc` events' names). `allreduce` spans a whole bucket
 * (launch to completion), so it is stacked only where no finer phase was traced. */
static const char *const phases[] = { "intra_reduce_scatter", "inter_allreduce", "intra_allgather", "flat",
                                      "dgc select", "dgc encode", "dgc exchange", "allreduce" };
#define NPHASES 8
static const char *const cats[] = { "compute", "data", "comm", "dgc", "optim", "ckpt", "step" };
#define NCATS 7

/* What the figure needs of a trace, gathered in one pass. */
typedef struct trace_view {
    const json_t *ev;        /* traceEvents */
    long ranks[MAX_RANKS];   /* pids with complete events, sorted */
    int nr;                  /* entries of ranks */
    const json_t **meta;     /* the "M" events (process and thread names) */
    int nmeta;
} trace_view;

static long ev_int(const json_t *e, const char *key)
{
    return (long)json_integer_value(json_object_get(e, key));
}

static bool is_x(const json_t *e)
{
    return !strcmp(report_str(e, "ph", ""), "X");
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

/* The index of pid in the sorted ranks, -1 if absent. */
static int rank_index(const trace_view *t, long pid)
{
    const long *p = bsearch(&pid, t->ranks, (size_t)t->nr, sizeof(long), cmp_long);
    return p ? (int)(p - t->ranks) : -1;
}

static void view_init(trace_view *t, const json_t *ev)
{
    memset(t, 0, sizeof *t);
    t->ev = ev;
    size_t i, n = json_array_size(ev);
    json_t *e;
    t->meta = malloc(sizeof(json_t *) * (n + 1));
    CHECK(t->meta, "out of memory");
    json_array_foreach(ev, i, e) {
        if (!strcmp(report_str(e, "ph", ""), "M")) { t->meta[t->nmeta++] = e; continue; }
        if (!is_x(e)) continue;
        long pid = ev_int(e, "pid");
        /* ranks arrive in runs: check the last one first */
        if (t->nr && t->ranks[t->nr - 1] == pid) continue;
        bool seen = false;
        for (int k = 0; k < t->nr && !seen; k++) seen = t->ranks[k] == pid;
        if (!seen && t->nr < MAX_RANKS) t->ranks[t->nr++] = pid;
    }
    qsort(t->ranks, (size_t)t->nr, sizeof(long), cmp_long);
}

/* "rank R (host)" from the process_name metadata, else "rank R"; a track's thread_name,
 * else "track T". */
static void name_of(const trace_view *t, long pid, long tid, bool thread, char *out, size_t cap)
{
    snprintf(out, cap, thread ? "track %ld" : "rank %ld", thread ? tid : pid);
    for (int k = 0; k < t->nmeta; k++) {
        const json_t *e = t->meta[k];
        if (strcmp(report_str(e, "name", ""), thread ? "thread_name" : "process_name") || ev_int(e, "pid") != pid ||
            (thread && ev_int(e, "tid") != tid))
            continue;
        snprintf(out, cap, "%s", report_str(json_object_get(e, "args"), "name", out));
    }
}

static const char *cat_colour(const char *cat)
{
    for (int i = 0; i < NCATS; i++)
        if (!strcmp(cat, cats[i])) return i == NCATS - 1 ? "#dddddd" : svg_colour(i);
    return "#999999";
}

static void draw_phase_bars(sbuf *b, const trace_view *t, double (*ms)[NPHASES], int np)
{
    double mx = 0;
    for (int r = 0; r < t->nr; r++) {
        double s = 0;
        for (int p = 0; p < np; p++) s += ms[r][p];
        mx = fmax(mx, s);
    }
    double left = 190, rowh = 24, top = 44;
    int H = (int)(top + rowh * t->nr + 44);
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-panel=\"phases\" width=\"%d\" "
                 "height=\"%d\" viewBox=\"0 0 %d %d\"><text class=\"title\" x=\"%.0f\" y=\"14\">time per "
                 "communication phase per rank over the trace (ms)</text>", FIG_W, H, FIG_W, H, left);
    double lx = left;
    for (int p = 0; p < np; p++) {
        double tot = 0;
        for (int r = 0; r < t->nr; r++) tot += ms[r][p];
        if (tot > 0) lx += svg_legend_item(b, lx, 32, svg_colour(p), phases[p], false);
    }
    svg_axis ax = { .p0 = left, .p1 = FIG_W - 26 };
    svg_axis_fit(&ax, 0, mx, true);
    svg_xaxis(b, &ax, top + rowh * t->nr + 4, top, "milliseconds (sum over the traced steps and buckets)");
    char name[128], num[32];
    for (int r = 0; r < t->nr; r++) {
        name_of(t, t->ranks[r], 0, false, name, sizeof name);
        double y = top + r * rowh + 3, x = left;
        sb_printf(b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", left - 6, y + 13);
        sb_esc(b, name);
        sb_printf(b, "</text>");
        for (int p = 0; p < np; p++) {
            double w = svg_map(&ax, ms[r][p]) - left;
            if (w <= 0) continue;
            sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" data-rank=\"%ld\" "
                         "data-phase=\"%s\" data-ms=\"%.4g\"><title>", x, y, w, rowh - 6, svg_colour(p), t->ranks[r],
                      phases[p], ms[r][p]);
            sb_esc(b, name);
            sb_printf(b, ", %s: %s ms</title></rect>", phases[p], svg_num(num, ms[r][p]));
            x += w;
        }
    }
    sb_printf(b, "</svg>\n");
}

/* Stacked bars: per rank, the milliseconds of the trace spent in each communication phase. */
static void timeline_phases(sbuf *b, const trace_view *t)
{
    double (*ms)[NPHASES] = calloc((size_t)t->nr, sizeof *ms);
    CHECK(ms, "out of memory");
    bool fine = false, any = false;
    size_t i;
    json_t *e;
    json_array_foreach(t->ev, i, e) {
        if (!is_x(e)) continue;
        const char *cat = report_str(e, "cat", ""), *ph;
        if (!strcmp(cat, "comm")) ph = report_str(json_object_get(e, "args"), "phase", "");
        else if (!strcmp(cat, "dgc")) ph = report_str(e, "name", "");
        else continue;
        int p = 0, r = rank_index(t, ev_int(e, "pid"));
        while (p < NPHASES && strcmp(ph, phases[p])) p++;
        if (p == NPHASES || r < 0) continue;
        double dur = report_num(e, "dur");
        if (isfinite(dur)) ms[r][p] += dur / 1000;
        fine |= p < NPHASES - 1;
        any = true;
    }
    if (any) draw_phase_bars(b, t, ms, NPHASES - (fine ? 1 : 0));
    else fig_nodata(b, NULL, "trace.json has no bucket phases or DGC-Pro events");
    free(ms);
}

typedef struct step_ev {
    long step;  /* args.step */
    int rank;   /* index into the ranks */
    double t0;  /* ts, µs */
    double t1;  /* ts + dur */
} step_ev;

static int by_step(const void *a, const void *b)
{
    const step_ev *x = a, *y = b;
    return x->step != y->step ? (x->step < y->step ? -1 : 1) : x->rank - y->rank;
}

/* The step to draw: the last one every rank traced (else the last one traced at all); its
 * window [t0, t1] in microseconds. */
static bool gantt_step(const trace_view *t, long *step, double *t0, double *t1)
{
    size_t n = json_array_size(t->ev), m = 0, i;
    step_ev *s = malloc(sizeof(step_ev) * (n + 1));
    CHECK(s, "out of memory");
    json_t *e;
    json_array_foreach(t->ev, i, e) {
        if (!is_x(e) || strcmp(report_str(e, "cat", ""), "step")) continue;
        double ts = report_num(e, "ts"), dur = report_num(e, "dur");
        int r = rank_index(t, ev_int(e, "pid"));
        if (r >= 0 && isfinite(ts) && isfinite(dur))
            s[m++] = (step_ev){ ev_int(json_object_get(e, "args"), "step"), r, ts, ts + dur };
    }
    qsort(s, m, sizeof *s, by_step);
    long best = m ? s[m - 1].step : -1;
    for (size_t a = 0, z; a < m; a = z) {  /* runs of one step: count their distinct ranks */
        int ranks = 0;
        for (z = a; z < m && s[z].step == s[a].step; z++) ranks += z == a || s[z].rank != s[z - 1].rank;
        if (ranks == t->nr) best = s[a].step;
    }
    *step = best, *t0 = INFINITY, *t1 = -INFINITY;
    for (size_t k = 0; k < m; k++)
        if (s[k].step == best) *t0 = fmin(*t0, s[k].t0), *t1 = fmax(*t1, s[k].t1);
    free(s);
    return m && *t1 > *t0;
}

/* The lane of an event in the window, added when new; -1 past MAX_LANES. */
static int lane_of(long *lp, long *lt, int *nl, long pid, long tid)
{
    for (int k = 0; k < *nl; k++)
        if (lp[k] == pid && lt[k] == tid) return k;
    if (*nl == MAX_LANES) return -1;
    lp[*nl] = pid, lt[*nl] = tid;
    return (*nl)++;
}

static void gantt_event(sbuf *b, const json_t *e, const svg_axis *ax, double t0, double t1, double y, double h)
{
    double ts = report_num(e, "ts"), dur = report_num(e, "dur");
    double x0 = svg_map(ax, (fmax(ts, t0) - t0) / 1000), x1 = svg_map(ax, (fmin(ts + dur, t1) - t0) / 1000);
    const char *cat = report_str(e, "cat", "?");
    char num[32];
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"#fff\" "
                 "stroke-width=\"0.5\" data-rank=\"%ld\" data-cat=\"", x0, y, fmax(x1 - x0, 0.8), h, cat_colour(cat),
              ev_int(e, "pid"));
    sb_esc(b, cat);
    sb_printf(b, "\" data-dur-ms=\"%.4g\"><title>", dur / 1000);
    sb_esc(b, report_str(e, "name", "?"));
    sb_printf(b, " (");
    sb_esc(b, cat);
    sb_printf(b, "): %s ms</title></rect>", svg_num(num, dur / 1000));
}

/* Drawing order: by start, the longer first at equal starts, so an enclosing event (a step
 * is written after the events inside it) is painted under them. */
static int by_start_longer_first(const void *pa, const void *pb)
{
    const json_t *a = *(const json_t *const *)pa, *b = *(const json_t *const *)pb;
    double ta = report_num(a, "ts"), tb = report_num(b, "ts");
    if (ta != tb) return ta < tb ? -1 : 1;
    double da = report_num(a, "dur"), db = report_num(b, "dur");
    return da > db ? -1 : da < db ? 1 : 0;
}

/* A Gantt chart of one traced step: a lane per rank and track, events coloured by category. */
static void timeline_gantt(sbuf *b, const trace_view *t)
{
    long step;
    double t0, t1;
    if (!gantt_step(t, &step, &t0, &t1)) { fig_nodata(b, NULL, "trace.json has no step events"); return; }
    /* the window's events once: their lanes (rank, track), ordered by rank, then track */
    size_t n = json_array_size(t->ev), m = 0, i;
    const json_t **in = malloc(sizeof(json_t *) * (n + 1));
    CHECK(in, "out of memory");
    long lp[MAX_LANES], lt[MAX_LANES];
    int nl = 0;
    json_t *e;
    json_array_foreach(t->ev, i, e) {
        double ts = report_num(e, "ts"), dur = report_num(e, "dur");
        if (is_x(e) && ts < t1 && ts + dur > t0 && lane_of(lp, lt, &nl, ev_int(e, "pid"), ev_int(e, "tid")) >= 0)
            in[m++] = e;
    }
    for (int a = 1; a < nl; a++)
        for (int c = a; c > 0 && (lp[c - 1] > lp[c] || (lp[c - 1] == lp[c] && lt[c - 1] > lt[c])); c--) {
            long x = lp[c], y = lt[c];
            lp[c] = lp[c - 1], lt[c] = lt[c - 1], lp[c - 1] = x, lt[c - 1] = y;
        }
    double left = 230, rowh = 20, top = 44;
    int H = (int)(top + rowh * nl + 44);
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-panel=\"gantt\" width=\"%d\" "
                 "height=\"%d\" viewBox=\"0 0 %d %d\"><text class=\"title\" x=\"%.0f\" y=\"14\">step %ld per rank and "
                 "track (the ranks' clocks aligned to rank 0's)</text>", FIG_W, H, FIG_W, H, left, step);
    double lx = left;
    for (int c = 0; c < NCATS; c++) lx += svg_legend_item(b, lx, 32, cat_colour(cats[c]), cats[c], false);
    svg_axis ax = { .p0 = left, .p1 = FIG_W - 26 };
    svg_axis_fit(&ax, 0, (t1 - t0) / 1000, false);
    svg_xaxis(b, &ax, top + rowh * nl + 4, top, "milliseconds from the step's first start");
    char rn[128], tn[128];
    for (int k = 0; k < nl; k++) {
        name_of(t, lp[k], 0, false, rn, sizeof rn);
        name_of(t, lp[k], lt[k], true, tn, sizeof tn);
        sb_printf(b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", left - 6, top + k * rowh + 14);
        sb_esc(b, rn);
        sb_printf(b, " / ");
        sb_esc(b, tn);
        sb_printf(b, "</text>");
    }
    qsort(in, m, sizeof *in, by_start_longer_first);
    for (size_t k = 0; k < m; k++) {
        int l = 0;
        while (l < nl && !(lp[l] == ev_int(in[k], "pid") && lt[l] == ev_int(in[k], "tid"))) l++;
        gantt_event(b, in[k], &ax, t0, t1, top + l * rowh + 2, rowh - 4);
    }
    sb_printf(b, "</svg>\n");
    free(in);
}

void fig_timeline(sbuf *b, const report *rep)
{
    fig_open(b, "fig-timeline", "Trace timeline (RUN_DIR/trace.json, written by a traced nebula-train run): the time "
                                "each rank spent in each phase of the gradient buckets' reduction and of DGC-Pro's "
                                "exchange, stacked; and one "
                                "traced step per rank as a Gantt chart, one lane per rank and track.");
    for (int r = 0; r < rep->nruns; r++) {
        const report_run *run = &rep->runs[r];
        const char *who = rep->nruns > 1 ? run->label : NULL;
        if (!run->trace) {
            if (!(rep->nruns > 1 && !run->metrics_path[0])) fig_nodata(b, who, "no trace.json (a traced run writes it)");
            continue;
        }
        trace_view *t = malloc(sizeof *t);
        CHECK(t, "out of memory");
        view_init(t, json_object_get(run->trace, "traceEvents"));
        if (t->nr) {
            fig_run_heading(b, rep, run);
            timeline_phases(b, t);
            timeline_gantt(b, t);
        } else {
            fig_nodata(b, who, "trace.json has no complete (\"X\") events");
        }
        free(t->meta);
        free(t);
    }
    fig_close(b);
}
