/* figures — the training figures of nebula-report: curves across launches, the resource
 * heatmap of the ranks, the gradient distribution per layer, attention-head activity and
 * DGC-Pro's density per tensor (docs/pictures.md: what each shows and which records feed
 * it). Curves of several runs share one chart (a colour per run); heatmaps are one per
 * run. A figure without its records says so in a <p class="nodata">. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

#define FIG_W 1000 /* pixels: every chart is as wide as the page's column */

void fig_open(sbuf *b, const char *id, const char *caption)
{
    sb_printf(b, "<figure id=\"%s\">\n<figcaption>", id);
    sb_esc(b, caption);
    sb_printf(b, "</figcaption>\n");
}

void fig_close(sbuf *b)
{
    sb_printf(b, "</figure>\n");
}

void fig_nodata(sbuf *b, const char *run_label, const char *what)
{
    sb_printf(b, "<p class=\"nodata\">");
    if (run_label) { sb_esc(b, run_label); sb_printf(b, ": "); }
    sb_esc(b, what);
    sb_printf(b, "</p>\n");
}

void fig_run_heading(sbuf *b, const report *rep, const report_run *run)
{
    if (rep->nruns < 2) return;
    sb_printf(b, "<h3 class=\"run\">");
    sb_esc(b, run->label);
    sb_printf(b, "</h3>\n");
}

/* On a page of several runs, a directory without metrics.jsonl (bench tables, a trace
 * alone) has no part in the training figures: it is left out rather than "no data". */
static bool no_metrics(const report *rep, const report_run *run)
{
    return rep->nruns > 1 && !run->metrics_path[0];
}

/* A heatmap of one run with more columns than REPORT_MAX_COLS is binned first, and
 * the figure says so. */
static void heatmap_binned(sbuf *b, svg_heatmap *h)
{
    double *v = NULL, *k = NULL;
    int per = 1;
    const double *v0 = h->v, *k0 = h->col_keys;
    int c0 = h->cols;
    if (h->cols > REPORT_MAX_COLS) {
        h->cols = svg_bin_columns(h->v, h->col_keys, h->rows, h->cols, REPORT_MAX_COLS, &v, &k, &per);
        h->v = v, h->col_keys = k;
        sb_printf(b, "<p class=\"note\">%d samples binned by %d into %d columns (the mean of each bin; a column is "
                     "labelled by its first %s).</p>\n", c0, per, h->cols, h->xlabel);
    }
    svg_heatmap_draw(b, h);
    h->v = v0, h->col_keys = k0, h->cols = c0;
    free(v), free(k);
}

/* ---- curves ---------------------------------------------------------------------------- */

/* Where a launch after the first starts (its resume record's step, else 0) and what it was. */
static void launch_marks(const report_run *run, const char *prefix, svg_mark *m, int *nm, int cap, char (*lab)[200])
{
    size_t i;
    json_t *r, *prev = NULL;
    bool relaunch_asked = false;
    json_array_foreach(run->recs, i, r) {
        const char *kind = report_str(r, "kind", "");
        if (!strcmp(kind, "relaunch")) relaunch_asked = true;
        if (strcmp(kind, "launch")) continue;
        json_int_t launch = json_integer_value(json_object_get(r, "launch"));
        double at = 0;
        size_t j;
        json_t *q;
        json_array_foreach(run->recs, j, q)
            if (j > i && !strcmp(report_str(q, "kind", ""), "resume") &&
                json_integer_value(json_object_get(q, "launch")) == launch) { at = report_num(q, "step"); break; }
        if (prev && *nm < cap) {
            const char *job = report_str(r, "job", "-"), *pjob = report_str(prev, "job", "-");
            double w = report_num(r, "world"), pw = report_num(prev, "world");
            const char *why = w != pw ? "relaunch at another world size" : relaunch_asked ? "relaunch"
                            : strcmp(job, "-") && !strcmp(job, pjob) ? "requeue" : "resume";
            snprintf(lab[*nm], 200, "%slaunch %lld: %s (world %g, job %s), from step %g", prefix, (long long)launch,
                     why, w, job, at);
            m[*nm] = (svg_mark){ at, "launch", lab[*nm], true, NULL };
            (*nm)++;
        }
        prev = r;
        relaunch_asked = false;
    }
}

/* Alerts and reloads (triangles), and commits into a model repository (lines tagged with
 * the commit's short id; tag[] holds the tags). */
static void event_marks(const report_run *run, const char *prefix, svg_mark *m, int *nm, int cap, char (*lab)[200],
                        char (*tag)[16])
{
    size_t i;
    json_t *r;
    json_array_foreach(run->recs, i, r) {
        const char *kind = report_str(r, "kind", "");
        if (*nm >= cap) break;
        if (!strcmp(kind, "alert")) {
            snprintf(lab[*nm], 200, "%salert at step %g: %s (%s)", prefix, report_num(r, "step"), report_str(r, "rule", "?"),
                     report_str(r, "reason", ""));
        } else if (!strcmp(kind, "reload")) {
            json_t *ap = json_object_get(r, "applied");
            snprintf(lab[*nm], 200, "%sreload version %g at step %g: %s%s", prefix, report_num(r, "version"),
                     report_num(r, "step"), json_is_true(ap) ? "applied" : "refused: ", json_is_true(ap) ? "" :
                     report_str(r, "reason", ""));
        } else if (!strcmp(kind, "commit")) {
            snprintf(tag[*nm], 16, "%.12s", report_str(r, "commit", "?"));
            snprintf(lab[*nm], 200, "%scommit %s of step %g into %s%s%s%s", prefix, tag[*nm], report_num(r, "step"),
                     report_str(r, "repo", "?"), json_object_get(r, "branch") ? " (" : "",
                     report_str(r, "branch", ""), json_object_get(r, "branch") ? ")" : "");
            m[*nm] = (svg_mark){ report_num(r, "step"), kind, lab[*nm], true, tag[*nm] };
            (*nm)++;
            continue;
        } else {
            continue;
        }
        m[*nm] = (svg_mark){ report_num(r, "step"), kind, lab[*nm], false, NULL };
        (*nm)++;
    }
}

#define MAX_MARKS 256

/* The curves of one run, with storage for their points. */
typedef struct run_curves {
    json_t **tr, **ev;         /* train and eval records, the last per step */
    int nt, ne;                /* their counts */
    double *x, *loss, *lr, *tput, *ex, *eloss; /* [nt] x4, [ne] x2 */
    char name[2][96];          /* legend texts: train loss, held-out loss */
} run_curves;

static int curves_load(run_curves *c, const report_run *run, const char *prefix, const char **unit)
{
    int rd1 = 0, rd2 = 0;
    c->nt = report_by_step(run, "train", &c->tr, &rd1);
    c->ne = report_by_step(run, "eval", &c->ev, &rd2);
    c->x = malloc(sizeof(double) * (4 * (size_t)c->nt + 2 * (size_t)c->ne + 1));
    CHECK(c->x, "out of memory");
    c->loss = c->x + c->nt, c->lr = c->loss + c->nt, c->tput = c->lr + c->nt;
    c->ex = c->tput + c->nt, c->eloss = c->ex + c->ne;
    for (int i = 0; i < c->nt; i++) {
        const json_t *t = c->tr[i];
        c->x[i] = report_num(t, "step"), c->loss[i] = report_num(t, "loss"), c->lr[i] = report_num(t, "lr");
        c->tput[i] = report_num(t, "tok/s");
        if (!isfinite(c->tput[i]) && isfinite(report_num(t, "img/s"))) c->tput[i] = report_num(t, "img/s"), *unit = "img/s";
    }
    for (int i = 0; i < c->ne; i++) c->ex[i] = report_num(c->ev[i], "step"), c->eloss[i] = report_num(c->ev[i], "loss");
    snprintf(c->name[0], sizeof c->name[0], "%strain loss", prefix);
    snprintf(c->name[1], sizeof c->name[1], "%sheld-out loss", prefix);
    return rd1 + rd2;
}

void fig_curves(sbuf *b, const report *rep)
{
    fig_open(b, "fig-curves", "Training curves per step across launches: training loss (solid) and held-out loss "
                              "(dashed, dots), learning rate, throughput. Dashed grey lines: launches after the first "
                              "(requeue, relaunch, resume; hover for which); triangles: alerts (red) and hot reloads "
                              "(green); purple lines on the loss: checkpoints committed into a model repository, "
                              "with the commit's id. A step that a later launch ran again is drawn with the later "
                              "launch's values.");
    int R = rep->nruns, ntrain = 0, redone = 0, nl = 0, nem = 0, nloss = 0, nlr = 0;
    run_curves *cv = calloc((size_t)R, sizeof *cv);
    svg_series *loss = calloc(2 * (size_t)R, sizeof(svg_series)), *lr = calloc((size_t)R, sizeof(svg_series)),
               *tput = calloc((size_t)R, sizeof(svg_series));
    /* marks[0, nl) launches, then [MAX_MARKS, MAX_MARKS + nem) alerts and reloads */
    svg_mark *marks = calloc(2 * MAX_MARKS, sizeof(svg_mark));
    char (*labels)[200] = calloc(2 * MAX_MARKS, 200), (*tags)[16] = calloc(MAX_MARKS, 16);
    CHECK(cv && loss && lr && tput && marks && labels && tags, "out of memory");
    const char *unit = "tok/s";
    for (int r = 0; r < R; r++) {
        const report_run *run = &rep->runs[r];
        char prefix[80] = "";
        if (R > 1) snprintf(prefix, sizeof prefix, "%s: ", run->label);
        run_curves *c = &cv[r];
        redone += curves_load(c, run, prefix, &unit);
        ntrain += c->nt;
        const char *legend = R > 1 ? run->label : NULL;
        if (c->nt) {
            loss[nloss++] = (svg_series){ "loss/train", run->label, c->name[0], c->x, c->loss, c->nt, r, false, false };
            lr[nlr] = (svg_series){ "lr", run->label, legend, c->x, c->lr, c->nt, r, false, false };
            tput[nlr++] = (svg_series){ "throughput", run->label, legend, c->x, c->tput, c->nt, r, false, false };
        }
        if (c->ne) loss[nloss++] = (svg_series){ "loss/eval", run->label, c->name[1], c->ex, c->eloss, c->ne, r, true, true };
        launch_marks(run, prefix, marks, &nl, MAX_MARKS, labels);
        event_marks(run, prefix, marks + MAX_MARKS, &nem, MAX_MARKS, labels + MAX_MARKS, tags);
    }
    if (!ntrain) {
        fig_nodata(b, NULL, "no train records in metrics.jsonl");
    } else {
        /* the loss panel carries every mark, the others the launches */
        memmove(marks + nl, marks + MAX_MARKS, sizeof(svg_mark) * (size_t)nem);
        svg_chart c = { "loss", "loss", "step", "loss", false, false, FIG_W, 300, loss, nloss, marks, nl + nem, NULL, 0 };
        svg_line_chart(b, &c);
        c = (svg_chart){ "lr", "learning rate", "step", "lr", false, false, FIG_W, 200, lr, nlr, marks, nl, NULL, 0 };
        svg_line_chart(b, &c);
        char title[64];
        snprintf(title, sizeof title, "throughput (%s)", unit);
        c = (svg_chart){ "throughput", title, "step", unit, false, false, FIG_W, 200, tput, nlr, marks, nl, NULL, 0 };
        svg_line_chart(b, &c);
        if (redone)
            sb_printf(b, "<p class=\"note\">%d train/eval records of steps run again (after a resume from an earlier "
                         "checkpoint, or a rollback) were replaced by the later launch's.</p>\n", redone);
    }
    for (int r = 0; r < R; r++)
        if (rep->runs[r].torn_tail)
            fig_nodata(b, rep->runs[r].label, "the last line of metrics.jsonl was torn (a crash inside its write) and "
                                              "is left out");
    for (int r = 0; r < R; r++) free(cv[r].tr), free(cv[r].ev), free(cv[r].x);
    free(cv), free(loss), free(lr), free(tput), free(marks), free(labels), free(tags);
    fig_close(b);
}

/* ---- resources ------------------------------------------------------------------------- */

/* Element i of the array rec[key] as a number (NaN when missing). */
static double arr_num(const json_t *rec, const char *key, size_t i)
{
    json_t *v = json_array_get(json_object_get(rec, key), i);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void resources_run(sbuf *b, const report *rep, const report_run *run, json_t **rs, int n)
{
    size_t world = 0;
    for (int i = 0; i < n; i++) {
        size_t w = json_array_size(json_object_get(rs[i], "step_ms"));
        world = w > world ? w : world;
    }
    if (!world) { fig_nodata(b, run->label, "ranks records without a step_ms array"); return; }
    enum { PANELS = 5 };
    double *v[PANELS], *keys = malloc(sizeof(double) * (size_t)n);
    char (*kb)[24] = calloc(world, 24), (*lb)[96] = calloc(world, 96);
    const char **rk = calloc(world, sizeof(char *)), **rl = calloc(world, sizeof(char *));
    CHECK(keys && kb && lb && rk && rl, "out of memory");
    for (int k = 0; k < PANELS; k++) {
        v[k] = malloc(sizeof(double) * world * (size_t)n);
        CHECK(v[k], "out of memory");
    }
    for (size_t r = 0; r < world; r++) {
        const char *host = json_string_value(json_array_get(json_object_get(rs[n - 1], "host"), r));
        snprintf(kb[r], 24, "%zu", r);
        snprintf(lb[r], 96, "rank %zu%s%s%s", r, host ? " (" : "", host ? host : "", host ? ")" : "");
        rk[r] = kb[r], rl[r] = lb[r];
        for (int i = 0; i < n; i++) {
            double sm = arr_num(rs[i], "step_ms", r), cw = arr_num(rs[i], "comm_wait_ms", r),
                   cm = arr_num(rs[i], "compute_ms", r);
            v[0][r * n + i] = arr_num(rs[i], "cpu_pct", r);
            v[1][r * n + i] = arr_num(rs[i], "rss_mb", r);
            v[2][r * n + i] = sm > 0 ? cw / sm : NAN;
            v[3][r * n + i] = isfinite(cm) ? cm : sm - cw;
            v[4][r * n + i] = sm;
        }
    }
    for (int i = 0; i < n; i++) keys[i] = report_num(rs[i], "step");
    static const char *const panel[PANELS] = { "cpu_pct", "rss_mb", "comm_wait_share", "compute_ms", "step_ms" };
    static const char *const title[PANELS] = { "CPU use (process CPU time / wall time, %)", "resident memory (MB)",
                                           "share of the step waiting for communication (comm_wait_ms / step_ms)",
                                           "compute time (step time less the wait for communication, ms)",
                                           "step time (ms)" };
    static const char *const unit[PANELS] = { "cpu %", "MB", "share", "ms", "ms" };
    fig_run_heading(b, rep, run);
    for (int k = 0; k < PANELS; k++) {
        svg_heatmap h = { .panel = panel[k], .run = run->label, .title = title[k], .rows = (int)world, .cols = n,
                          .v = v[k], .row_keys = rk, .row_labels = rl, .col_keys = keys, .xlabel = "step",
                          .ylabel = "rank", .unit = unit[k], .width = FIG_W };
        heatmap_binned(b, &h);
    }
    for (int k = 0; k < PANELS; k++) free(v[k]);
    free(keys), free(kb), free(lb), free(rk), free(rl);
}

void fig_resources(sbuf *b, const report *rep)
{
    fig_open(b, "fig-resources", "Resource use per rank over the run (ranks records, one column per log interval): "
                                 "CPU use, resident memory, the share of the step spent waiting for gradient "
                                 "communication, compute time and step time. In data parallelism every rank's step takes as long as the slowest "
                                 "one's, so a straggler is the bright row of compute time and the others are the bright "
                                 "rows of the wait.");
    for (int r = 0; r < rep->nruns; r++) {
        if (no_metrics(rep, &rep->runs[r])) continue;
        json_t **rs;
        int n = report_by_step(&rep->runs[r], "ranks", &rs, NULL);
        if (n) resources_run(b, rep, &rep->runs[r], rs, n);
        else fig_nodata(b, rep->nruns > 1 ? rep->runs[r].label : NULL, "no ranks records in metrics.jsonl");
        free(rs);
    }
    fig_close(b);
}

/* ---- gradients ------------------------------------------------------------------------- */

/* The small histograms of the newest grad_hist record: one row of bars per layer, the
 * bins zero, below the first edge, the edges' bins, and above the last edge. */
static void gradient_bars(sbuf *b, const report_run *run, const json_t *last)
{
    json_t *layers = json_object_get(last, "layers"), *edges = json_object_get(last, "edges_log10");
    size_t nl = json_array_size(layers), ne = json_array_size(edges);
    if (!nl || ne < 2) return;
    int nb = (int)ne - 1 + 3;  /* zero, below, ne-1 bins, above */
    double rowh = 26, left = 150, top = 26, W = FIG_W, bw = (W - left - 20) / nb;
    int H = (int)(top + rowh * nl + 40);
    char num[32];
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" data-panel=\"histogram\" data-run=\"");
    sb_esc(b, run->label);
    sb_printf(b, "\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\"><text class=\"title\" x=\"%.0f\" y=\"14\">"
                 "histogram of log10 |gradient| per layer at step %g (bar height: share of the layer's largest bin)"
                 "</text>", FIG_W, H, FIG_W, H, left, report_num(last, "step"));
    for (size_t l = 0; l < nl; l++) {
        json_t *L = json_array_get(layers, l);
        double c[64];
        int k = 0;
        c[k++] = report_num(L, "zero"), c[k++] = report_num(L, "below");
        for (size_t e = 0; e + 1 < ne && k < 63; e++) c[k++] = arr_num(L, "counts", e);
        c[k++] = report_num(L, "above");
        double mx = 0;
        for (int i = 0; i < k; i++) mx = isfinite(c[i]) && c[i] > mx ? c[i] : mx;
        double y0 = top + rowh * (l + 1) - 3;
        sb_printf(b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%g ", left - 6, y0 - 6, report_num(L, "layer"));
        sb_esc(b, report_str(L, "name", ""));
        sb_printf(b, "</text><line class=\"base\" x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\"/>", left, y0, W - 20, y0);
        for (int i = 0; i < k; i++) {
            if (!(c[i] > 0)) continue;
            double h = (rowh - 6) * c[i] / mx;
            const char *fill = i == 0 ? "#999999" : (i == 1 || i == k - 1) ? "#bbbbbb" : "#0072b2";
            char bin[32];
            if (i == 0) snprintf(bin, sizeof bin, "zero");
            else if (i == 1) snprintf(bin, sizeof bin, "below");
            else if (i == k - 1) snprintf(bin, sizeof bin, "above");
            else svg_num(bin, json_number_value(json_array_get(edges, (size_t)i - 2)));
            sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" data-layer=\"%g\" "
                         "data-bin=\"%s\" data-count=\"%.0f\"><title>layer %g, bin %s: %.0f</title></rect>",
                      left + i * bw + 1, y0 - h, bw - 2, h, fill, report_num(L, "layer"), bin, c[i],
                      report_num(L, "layer"), bin, c[i]);
        }
    }
    double yb = top + rowh * nl + 12;
    sb_printf(b, "<g class=\"axis\"><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">0</text>"
                 "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">&lt;</text>", left + bw / 2, yb, left + 1.5 * bw, yb);
    for (size_t e = 0; e + 1 < ne; e += 4)
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", left + (2 + e) * bw, yb,
                  svg_num(num, json_number_value(json_array_get(edges, e))));
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">&gt;</text><text class=\"label\" x=\"%.1f\" "
                 "y=\"%.1f\" text-anchor=\"middle\">log10 |g| (bin's lower edge; 0: exact zeros, &lt; and &gt;: "
                 "outside the edges)</text></g></svg>\n", left + (nb - 0.5) * bw, yb, (left + W) / 2, yb + 16);
}

/* The median of log10 |g| over a grad_hist layer's nonzero elements, read off its bins (linear
 * inside the bin it falls in; the first or last edge when it falls below or above them); NaN
 * when every element is zero. The record's own median_log10 counts the zeros, so with DGC-Pro
 * (mostly zeros) it is null for nearly every layer. */
static double nonzero_median(const json_t *rec, const json_t *L)
{
    json_t *edges = json_object_get(rec, "edges_log10"), *counts = json_object_get(L, "counts");
    size_t ne = json_array_size(edges), nc = json_array_size(counts);
    if (ne < 2 || nc + 1 != ne) return NAN;
    double below = report_num(L, "below"), above = report_num(L, "above");
    below = isfinite(below) ? below : 0, above = isfinite(above) ? above : 0;
    double total = below + above;
    for (size_t k = 0; k < nc; k++) total += json_number_value(json_array_get(counts, k));
    if (!(total > 0)) return NAN;
    double half = total / 2, cum = below;
    if (cum >= half) return json_number_value(json_array_get(edges, 0));
    for (size_t k = 0; k < nc; k++) {
        double c = json_number_value(json_array_get(counts, k));
        if (c > 0 && cum + c >= half) {
            double e0 = json_number_value(json_array_get(edges, k)), e1 = json_number_value(json_array_get(edges, k + 1));
            return e0 + (half - cum) / c * (e1 - e0);
        }
        cum += c;
    }
    return json_number_value(json_array_get(edges, ne - 1));
}

static void gradients_run(sbuf *b, const report *rep, const report_run *run, json_t **gs, int n)
{
    /* rows: every layer index seen, in order */
    int maxl = -1;
    for (int i = 0; i < n; i++) {
        size_t j;
        json_t *L;
        json_array_foreach(json_object_get(gs[i], "layers"), j, L) {
            double l = report_num(L, "layer");
            if (l >= 0 && l < 100000 && l > maxl) maxl = (int)l;
        }
    }
    if (maxl < 0) { fig_nodata(b, run->label, "grad_hist records without layers"); return; }
    int rows = maxl + 1;
    double *v = malloc(sizeof(double) * (size_t)rows * n), *keys = malloc(sizeof(double) * (size_t)n);
    char (*kb)[16] = calloc((size_t)rows, 16), (*lb)[64] = calloc((size_t)rows, 64);
    const char **rk = calloc((size_t)rows, sizeof(char *)), **rl = calloc((size_t)rows, sizeof(char *));
    CHECK(v && keys && kb && lb && rk && rl, "out of memory");
    for (size_t i = 0; i < (size_t)rows * n; i++) v[i] = NAN;
    double edge0 = arr_num(gs[n - 1], "edges_log10", 0), lo = isfinite(edge0) ? edge0 : -10;
    for (int r = 0; r < rows; r++) snprintf(kb[r], 16, "%d", r), snprintf(lb[r], 64, "%d", r), rk[r] = kb[r], rl[r] = lb[r];
    /* a layer all exact zeros is marked -inf here, then drawn below every real value (the
     * coldest colour) once the lowest is known; a layer a record lacks stays NaN (no data) */
    for (int i = 0; i < n; i++) {
        keys[i] = report_num(gs[i], "step");
        size_t j;
        json_t *L;
        json_array_foreach(json_object_get(gs[i], "layers"), j, L) {
            double l = report_num(L, "layer"), med = nonzero_median(gs[i], L);
            if (isfinite(med) && med < lo) lo = med;
            if (!(l >= 0 && l < rows)) continue;
            v[(size_t)l * n + i] = isfinite(med) ? med : -INFINITY;
            const char *name = report_str(L, "name", "");
            if (name[0]) snprintf(lb[(int)l], 64, "%d %s", (int)l, name);
        }
    }
    double floor = lo - 0.5;
    for (size_t k = 0; k < (size_t)rows * n; k++)
        if (v[k] == -INFINITY) v[k] = floor;
    fig_run_heading(b, rep, run);
    svg_heatmap h = { .panel = "median_log10", .run = run->label, .title = "median log10 |gradient| of the nonzero elements per layer",
                      .rows = rows, .cols = n, .v = v, .row_keys = rk, .row_labels = rl, .col_keys = keys,
                      .xlabel = "step", .ylabel = "layer", .unit = "log10 |g|", .has_floor = true, .floor = floor,
                      .floor_label = "all zero", .width = FIG_W };
    heatmap_binned(b, &h);
    gradient_bars(b, run, gs[n - 1]);
    free(v), free(keys), free(kb), free(lb), free(rk), free(rl);
}

void fig_gradients(sbuf *b, const report *rep)
{
    fig_open(b, "fig-gradients", "Gradient distribution per layer (grad_hist records): the median log10 magnitude of "
                                 "the nonzero elements of the averaged gradient the optimizer applies, before clipping, per "
                                 "layer and step (DGC-Pro's exchanged gradient is mostly exact zeros: the bars below "
                                 "show how many); a layer whose gradient is all zero is the coldest colour. Below: "
                                 "the last sample's histogram per layer.");
    for (int r = 0; r < rep->nruns; r++) {
        if (no_metrics(rep, &rep->runs[r])) continue;
        json_t **gs;
        int n = report_by_step(&rep->runs[r], "grad_hist", &gs, NULL);
        if (n) gradients_run(b, rep, &rep->runs[r], gs, n);
        else fig_nodata(b, rep->nruns > 1 ? rep->runs[r].label : NULL,
                        "no grad_hist records in metrics.jsonl (monitor.histogram_interval = 0?)");
        free(gs);
    }
    fig_close(b);
}

/* ---- attention ------------------------------------------------------------------------- */

static void attention_run(sbuf *b, const report *rep, const report_run *run, const json_t *a)
{
    int L = (int)report_num(a, "layers"), NH = (int)report_num(a, "heads");
    if (!(L > 0 && NH > 0 && L <= 4096 && NH <= 4096)) { fig_nodata(b, run->label, "an attention record without layers and heads"); return; }
    double *v[2], *keys = malloc(sizeof(double) * NH);
    char (*kb)[16] = calloc((size_t)L, 16), (*lb)[32] = calloc((size_t)L, 32);
    const char **rk = calloc((size_t)L, sizeof(char *)), **rl = calloc((size_t)L, sizeof(char *));
    CHECK(keys && kb && lb && rk && rl, "out of memory");
    static const char *const key[2] = { "entropy", "max_weight" };
    for (int k = 0; k < 2; k++) {
        v[k] = malloc(sizeof(double) * (size_t)L * NH);
        CHECK(v[k], "out of memory");
        json_t *m = json_object_get(a, key[k]);
        for (int l = 0; l < L; l++)
            for (int h = 0; h < NH; h++) {
                json_t *x = json_array_get(json_array_get(m, (size_t)l), (size_t)h);
                v[k][(size_t)l * NH + h] = json_is_number(x) ? json_number_value(x) : NAN;
            }
    }
    for (int h = 0; h < NH; h++) keys[h] = h;
    for (int l = 0; l < L; l++) snprintf(kb[l], 16, "%d", l), snprintf(lb[l], 32, "layer %d", l), rk[l] = kb[l], rl[l] = lb[l];
    fig_run_heading(b, rep, run);
    char t0[96], t1[96];
    snprintf(t0, sizeof t0, "entropy of the attention distribution (nats), step %g", report_num(a, "step"));
    snprintf(t1, sizeof t1, "largest attention weight, step %g", report_num(a, "step"));
    svg_heatmap h = { .panel = "entropy", .run = run->label, .title = t0, .rows = L, .cols = NH, .v = v[0],
                      .row_keys = rk, .row_labels = rl, .col_keys = keys, .xlabel = "head", .ylabel = "layer",
                      .unit = "nats", .width = FIG_W / 2 + 100 };
    svg_heatmap_draw(b, &h);
    h.panel = "max_weight", h.title = t1, h.v = v[1], h.unit = "weight";
    svg_heatmap_draw(b, &h);
    free(v[0]), free(v[1]), free(keys), free(kb), free(lb), free(rk), free(rl);
}

void fig_attention(sbuf *b, const report *rep)
{
    fig_open(b, "fig-attention", "Attention-head activity (the newest attention record; GPT-2 and BERT): per layer and "
                                 "head, the mean entropy of the attention distribution over the probe batch's queries "
                                 "(low: focused heads) and its mean largest weight (near 1: a head that looks at one "
                                 "token).");
    for (int r = 0; r < rep->nruns; r++) {
        if (no_metrics(rep, &rep->runs[r])) continue;
        json_t **as;
        int n = report_by_step(&rep->runs[r], "attention", &as, NULL);
        if (n) attention_run(b, rep, &rep->runs[r], as[n - 1]);
        else fig_nodata(b, rep->nruns > 1 ? rep->runs[r].label : NULL,
                        "no attention records in metrics.jsonl (a GPT-2 or BERT run with monitor.attention_interval > 0)");
        free(as);
    }
    fig_close(b);
}

/* ---- DGC-Pro --------------------------------------------------------------------------- */

static void dgc_run(sbuf *b, const report *rep, const report_run *run, json_t **ds, int n)
{
    /* rows: the tensors of the newest record, in table order */
    json_t *names = json_object_get(ds[n - 1], "layers");
    int rows = (int)json_array_size(names);
    if (!rows) { fig_nodata(b, run->label, "dgc_layers records without layers"); return; }
    double *v = malloc(sizeof(double) * (size_t)rows * n), *keys = malloc(sizeof(double) * (size_t)n);
    const char **rk = calloc((size_t)rows, sizeof(char *));
    CHECK(v && keys && rk, "out of memory");
    for (int r = 0; r < rows; r++) rk[r] = report_str(json_array_get(names, (size_t)r), "name", "?");
    for (int i = 0; i < n; i++) {
        keys[i] = report_num(ds[i], "step");
        json_t *ls = json_object_get(ds[i], "layers");
        for (int r = 0; r < rows; r++) {
            /* the same tensor at the same index in every record of one model; else by name */
            json_t *L = json_array_get(ls, (size_t)r);
            if (!L || strcmp(report_str(L, "name", ""), rk[r])) {
                L = NULL;
                size_t j;
                json_t *q;
                json_array_foreach(ls, j, q) if (!strcmp(report_str(q, "name", ""), rk[r])) L = q;
            }
            v[(size_t)r * n + i] = L ? report_num(L, "density") : NAN;
        }
    }
    fig_run_heading(b, rep, run);
    svg_heatmap h = { .panel = "density", .run = run->label, .title = "density sent per tensor (log colour)",
                      .rows = rows, .cols = n, .v = v, .row_keys = rk, .row_labels = rk, .col_keys = keys,
                      .xlabel = "step", .ylabel = "tensor", .unit = "density", .log_colour = true, .width = FIG_W };
    heatmap_binned(b, &h);
    free(v), free(keys), free(rk);
}

void fig_dgc(sbuf *b, const report *rep)
{
    fig_open(b, "fig-dgc", "DGC-Pro per tensor (dgc_layers records): the density each tensor's gradient is sent at, "
                           "per step (a tensor sent dense counts as density 1).");
    for (int r = 0; r < rep->nruns; r++) {
        if (no_metrics(rep, &rep->runs[r])) continue;
        json_t **ds;
        int n = report_by_step(&rep->runs[r], "dgc_layers", &ds, NULL);
        if (n) dgc_run(b, rep, &rep->runs[r], ds, n);
        else fig_nodata(b, rep->nruns > 1 ? rep->runs[r].label : NULL, "no dgc_layers records (DGC-Pro off)");
        free(ds);
    }
    fig_close(b);
}
