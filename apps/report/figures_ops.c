/* figures_ops — the figures of nebula-report that come from files beside metrics.jsonl:
 * a nebula-chaos soak (samples.csv, report.json), the scaling curves of bench tables (CSV,
 * JSON rows), and each run's provenance block (the trace timeline is timeline.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

#define FIG_W 1000

/* ---- soak ------------------------------------------------------------------------------ */

void fig_soak(sbuf *b, const report *rep)
{
    fig_open(b, "fig-soak", "Soak (nebula-chaos soak: samples.csv and report.json): the ranks' resident memory and open "
                            "descriptors and the training rate over the soak, with each injected fault (dark red) "
                            "and each launch (grey).");
    int R = rep->nruns, nsoak = 0;
    double tmax = 0;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < rep->runs[r].nsoak; i++) nsoak++, tmax = fmax(tmax, rep->runs[r].soak[i * SOAK_NCOLS]);
    if (!nsoak) {
        fig_nodata(b, NULL, "no samples.csv: not a nebula-chaos soak output directory");
        fig_close(b);
        return;
    }
    double scale = tmax > 7200 ? 3600 : 60;
    const char *tunit = tmax > 7200 ? "hours since the start" : "minutes since the start";
    enum { NPANEL = 3, MAXM = 512 };
    static const int col[NPANEL] = { SOAK_RSS, SOAK_FDS, SOAK_RATE };
    static const char *const id[NPANEL] = { "rss_mb", "fds", "steps_per_s" };
    static const char *const title[NPANEL] = { "resident memory of the ranks (MB, summed)", "open file descriptors of the ranks",
                                               "training rate (steps/s between samples)" };
    svg_series *s = calloc((size_t)R * NPANEL, sizeof *s);
    double *buf = calloc((size_t)nsoak * (NPANEL + 1) + 1, sizeof(double));
    svg_mark *m = calloc(MAXM, sizeof *m);
    char (*lab)[200] = calloc(MAXM, 200);
    CHECK(s && buf && m && lab, "out of memory");
    int nm = 0;
    double *p = buf;
    for (int r = 0; r < R; r++) {
        const report_run *run = &rep->runs[r];
        int n = run->nsoak;
        if (!n) continue;
        double *x = p;
        p += n;
        for (int i = 0; i < n; i++) x[i] = run->soak[i * SOAK_NCOLS + SOAK_T] / scale;
        for (int k = 0; k < NPANEL; k++, p += n) {
            for (int i = 0; i < n; i++) p[i] = run->soak[i * SOAK_NCOLS + col[k]];
            s[k * R + r] = (svg_series){ id[k], run->label, R > 1 ? run->label : NULL, x, p, n, r, false, false };
        }
        for (int i = 1; i < n && nm < MAXM; i++)
            if (run->soak[i * SOAK_NCOLS + SOAK_LAUNCH] != run->soak[(i - 1) * SOAK_NCOLS + SOAK_LAUNCH]) {
                snprintf(lab[nm], 200, "%s%slaunch %g", R > 1 ? run->label : "", R > 1 ? ": " : "",
                         run->soak[i * SOAK_NCOLS + SOAK_LAUNCH]);
                m[nm] = (svg_mark){ x[i], "launch", lab[nm], true, NULL }, nm++;
            }
        size_t i;
        json_t *f;
        json_array_foreach(json_object_get(run->soak_report, "fault_list"), i, f) {
            double t = report_num(f, "t_s");
            if (!(t >= 0) || nm >= MAXM) continue;
            snprintf(lab[nm], 200, "fault %zu: %s: %s at step %g (recovered after %g s, %g steps lost)", i + 1,
                     report_str(f, "kind", "?"), report_str(f, "what", ""), report_num(f, "step"), report_num(f, "recover_s"),
                     report_num(f, "lost_steps"));
            m[nm] = (svg_mark){ t / scale, "fault", lab[nm], true, NULL }, nm++;
        }
    }
    for (int k = 0; k < NPANEL; k++) {
        /* runs without samples leave an empty series slot: compact them */
        int n = 0;
        for (int r = 0; r < R; r++) if (s[k * R + r].n) s[k * R + n++] = s[k * R + r];
        svg_chart c = { id[k], title[k], tunit, id[k], false, false, FIG_W, 220, s + k * R, n, m, nm, NULL, 0 };
        svg_line_chart(b, &c);
    }
    for (int r = 0; r < R; r++) {
        const json_t *j = rep->runs[r].soak_report;
        if (!j) continue;
        sb_printf(b, "<p class=\"note\">");
        if (R > 1) { sb_esc(b, rep->runs[r].label); sb_printf(b, ": "); }
        sb_printf(b, "nebula-chaos soak %s: %g s, %g of %g planned faults, %g launches, goodput %.3g useful steps/s; memory slope "
                     "%.3g MB/h, descriptors %.3g /h.</p>\n", json_is_true(json_object_get(j, "pass")) ? "PASS" : "FAIL",
                  report_num(j, "seconds"), report_num(j, "faults"), report_num(j, "faults_planned"),
                  report_num(j, "launches"), report_num(j, "goodput_steps_per_s"), report_num(j, "rss_mb_per_h"),
                  report_num(j, "fds_per_h"));
    }
    free(s), free(buf), free(m), free(lab);
    fig_close(b);
}

/* ---- scaling --------------------------------------------------------------------------- */

/* Distinct values of a text column in first-seen order (the categories of a chart). */
static int categories(const report_table *t, int col, const char **out, int cap)
{
    int n = 0;
    for (int i = 0; i < t->nrows; i++) {
        const char *v = t->cells[(size_t)i * t->ncols + col];
        int k = 0;
        while (k < n && strcmp(out[k], v)) k++;
        if (k == n && n < cap) out[n++] = v;
    }
    return n;
}

static bool numeric_col(const report_table *t, int c)
{
    for (int i = 0; i < t->nrows; i++)
        if (!isfinite(report_table_num(t, i, c))) return false;
    return t->nrows > 0;
}

/* One chart of a table: y column yc against x (numeric column xc, or the categories of
 * the text column xc), a series per value of the text column gc (-1: one series). */
static void table_chart(sbuf *b, const report_table *t, const char *panel, const char *title, int xc, int yc, int gc,
                        bool logx, bool logy, const char *xlabel, const char *ylabel)
{
    enum { MAXG = 16, MAXX = 64 };
    const char *groups[MAXG], *xcats[MAXX];
    int ng = gc >= 0 ? categories(t, gc, groups, MAXG) : 1, nx = 0;
    bool cat = !numeric_col(t, xc);
    if (cat) nx = categories(t, xc, xcats, MAXX);
    svg_series s[MAXG];
    double *buf = malloc(sizeof(double) * 2 * ((size_t)t->nrows + 1) * ng);
    char (*names)[96] = calloc(MAXG, 96);
    CHECK(buf && names, "out of memory");
    for (int g = 0; g < ng; g++) {
        double *x = buf + 2 * (size_t)g * (t->nrows + 1), *y = x + t->nrows + 1;
        int n = 0;
        for (int i = 0; i < t->nrows; i++) {
            if (gc >= 0 && strcmp(t->cells[(size_t)i * t->ncols + gc], groups[g])) continue;
            double xv = report_table_num(t, i, xc);
            if (cat) {
                const char *v = t->cells[(size_t)i * t->ncols + xc];
                xv = NAN;
                for (int k = 0; k < nx; k++) if (!strcmp(xcats[k], v)) xv = k;
            }
            x[n] = xv, y[n] = report_table_num(t, i, yc), n++;
        }
        /* sorted by x, so a curve runs left to right */
        for (int a = 1; a < n; a++)
            for (int c = a; c > 0 && x[c - 1] > x[c]; c--) {
                double tx = x[c], ty = y[c];
                x[c] = x[c - 1], y[c] = y[c - 1], x[c - 1] = tx, y[c - 1] = ty;
            }
        snprintf(names[g], 96, "%s", gc >= 0 ? groups[g] : ylabel);
        s[g] = (svg_series){ panel, t->name, names[g], x, y, n, g, false, true };
    }
    svg_chart c = { panel, title, xlabel, ylabel, logx && !cat, logy, FIG_W, 260, s, ng, NULL, 0,
                    cat ? xcats : NULL, cat ? nx : 0 };
    svg_line_chart(b, &c);
    free(buf), free(names);
}

/* nebula-bench comm rows (--out JSON, --csv): bus bandwidth and time against message size
 * per algorithm; auto's "auto:hier" counts as auto. */
static void scaling_comm(sbuf *b, report_table *t, int xc)
{
    int ac = report_table_col(t, "algo");
    for (int i = 0; i < t->nrows; i++) {
        char *a = t->cells[(size_t)i * t->ncols + ac], *colon = strchr(a, ':');
        if (colon) *colon = '\0';
    }
    char title[320];
    int bw = report_table_col(t, "busbw_GBps"), tm = report_table_col(t, "time_us");
    snprintf(title, sizeof title, "%s: bus bandwidth per algorithm", t->name);
    if (bw >= 0) table_chart(b, t, "busbw", title, xc, bw, ac, true, false, "message size (bytes)", "busbw (GB/s)");
    snprintf(title, sizeof title, "%s: allreduce time per algorithm", t->name);
    if (tm >= 0) table_chart(b, t, "time_us", title, xc, tm, ac, true, true, "message size (bytes)", "time (µs)");
}

/* nebula-bench table dgc --csv: ms/step dense and DGC-Pro per link rate, and the speed-up. */
static void scaling_dgc(sbuf *b, report_table *t)
{
    int mc = report_table_col(t, "model"), lc = report_table_col(t, "link");
    int dc = report_table_col(t, "dense_ms_per_step"), gc = report_table_col(t, "dgc_ms_per_step");
    int sc = report_table_col(t, "speedup");
    /* one series per model and method: a table with the two times as rows of one column */
    report_table u = { .ncols = 3, .nrows = 2 * t->nrows };
    char *cols[3] = { "link", "series", "ms_per_step" };
    u.cols = cols;
    snprintf(u.name, sizeof u.name, "%s", t->name);
    u.cells = calloc((size_t)u.nrows * 3, sizeof(char *));
    char (*txt)[160] = calloc((size_t)u.nrows * 2, 160);
    CHECK(u.cells && txt, "out of memory");
    for (int i = 0; i < t->nrows; i++)
        for (int k = 0; k < 2; k++) {
            int row = 2 * i + k;
            u.cells[row * 3] = t->cells[(size_t)i * t->ncols + lc];
            snprintf(txt[2 * row], 160, "%s %s", mc >= 0 ? t->cells[(size_t)i * t->ncols + mc] : "", k ? "DGC-Pro" : "dense");
            snprintf(txt[2 * row + 1], 160, "%s", t->cells[(size_t)i * t->ncols + (k ? gc : dc)]);
            u.cells[row * 3 + 1] = txt[2 * row], u.cells[row * 3 + 2] = txt[2 * row + 1];
        }
    char title[320];
    snprintf(title, sizeof title, "%s: step time, dense ring allreduce against DGC-Pro", t->name);
    table_chart(b, &u, "ms_per_step", title, 0, 2, 1, false, true, "link rate between nodes", "ms/step");
    snprintf(title, sizeof title, "%s: DGC-Pro's speed-up (dense / DGC-Pro)", t->name);
    if (sc >= 0) table_chart(b, t, "speedup", title, lc, sc, mc, false, false, "link rate between nodes", "speed-up (x)");
    free(u.cells), free(txt);
}

/* Any other table: x the first numeric column named like a scale (ranks, world, nodes,
 * batch, bytes...), else the first numeric column; a series per value of the first text
 * column; a chart per other numeric column (at most 3). */
static void scaling_generic(sbuf *b, const report_table *t)
{
    static const char *const xnames[] = { "ranks", "world", "world_size", "np", "nodes", "gpus", "batch", "bytes",
                                          "size", "seq", "threads" };
    int xc = -1, gc = -1;
    for (size_t k = 0; k < sizeof xnames / sizeof xnames[0] && xc < 0; k++) {
        int c = report_table_col(t, xnames[k]);
        if (c >= 0 && numeric_col(t, c)) xc = c;
    }
    for (int c = 0; c < t->ncols; c++) {
        if (xc < 0 && numeric_col(t, c)) xc = c;
        if (gc < 0 && !numeric_col(t, c)) gc = c;
    }
    if (xc < 0) { fig_nodata(b, t->name, "a table without a numeric column"); return; }
    int charts = 0;
    for (int c = 0; c < t->ncols && charts < 3; c++) {
        if (c == xc || !numeric_col(t, c)) continue;
        char title[320];
        snprintf(title, sizeof title, "%s: %s against %s", t->name, t->cols[c], t->cols[xc]);
        table_chart(b, t, t->cols[c], title, xc, c, gc, false, false, t->cols[xc], t->cols[c]);
        charts++;
    }
    if (!charts) fig_nodata(b, t->name, "a table with one numeric column: nothing to draw against it");
}

void fig_scaling(sbuf *b, const report *rep)
{
    fig_open(b, "fig-scaling", "Scaling curves from bench table outputs in the directory (nebula-bench comm --out or "
                               "--csv, nebula-bench table dgc --csv, other CSV/JSON tables); the tables' # comment "
                               "lines (their provenance) are quoted under each.");
    int any = 0;
    for (int r = 0; r < rep->nruns; r++) {
        report_run *run = &rep->runs[r];
        if (run->ntables) fig_run_heading(b, rep, run);
        for (int i = 0; i < run->ntables; i++, any++) {
            report_table *t = &run->tables[i];
            int xc = report_table_col(t, "bytes");
            if (xc < 0) xc = report_table_col(t, "size");
            if (report_table_col(t, "algo") >= 0 && xc >= 0) scaling_comm(b, t, xc);
            else if (report_table_col(t, "dense_ms_per_step") >= 0 && report_table_col(t, "dgc_ms_per_step") >= 0 &&
                     report_table_col(t, "link") >= 0) scaling_dgc(b, t);
            else scaling_generic(b, t);
            if (t->comments) {
                sb_printf(b, "<pre class=\"comments\">");
                sb_esc(b, t->comments);
                sb_printf(b, "</pre>\n");
            }
        }
    }
    if (!any) fig_nodata(b, NULL, "no bench table outputs (*.csv, *.json with rows) in the run directories");
    fig_close(b);
}

/* ---- provenance ------------------------------------------------------------------------ */

static void provenance_run(sbuf *b, const report_run *run)
{
    sb_printf(b, "<div class=\"prov\" data-run=\"");
    sb_esc(b, run->label);
    sb_printf(b, "\"><h3>");
    sb_esc(b, run->label);
    sb_printf(b, "</h3>\n<p>directory <code>");
    sb_esc(b, run->dir);
    sb_printf(b, "</code>");
    if (run->metrics_path[0]) {
        sb_printf(b, "; %zu records in <code>", json_array_size(run->recs));
        sb_esc(b, run->metrics_path);
        sb_printf(b, "</code>%s", run->torn_tail ? " (a torn last line left out)" : "");
    }
    if (run->trace) sb_printf(b, "; trace.json (%zu events)", json_array_size(json_object_get(run->trace, "traceEvents")));
    if (run->nsoak) sb_printf(b, "; samples.csv (%d samples)%s", run->nsoak, run->soak_report ? ", report.json" : "");
    for (int t = 0; t < run->ntables; t++) {
        sb_printf(b, "%s<code>", t ? ", " : "; bench tables ");
        sb_esc(b, run->tables[t].name);
        sb_printf(b, "</code> (%d rows)", run->tables[t].nrows);
    }
    sb_printf(b, "</p>\n");
    size_t i;
    json_t *r;
    int nl = 0;
    json_array_foreach(run->recs, i, r) {
        const char *kind = report_str(r, "kind", "");
        bool launch = !strcmp(kind, "launch"), summary = !strcmp(kind, "summary");
        if (!launch && !summary) continue;
        if (launch && !nl++)
            sb_printf(b, "<table><tr><th>launch</th><th>time</th><th>host</th><th>world</th><th>job</th>"
                         "<th>Slurm restarts</th><th>previous step</th></tr>\n");
        if (launch) {
            char rc[32];
            json_t *src = json_object_get(r, "slurm_restart_count");
            if (json_is_string(src)) snprintf(rc, sizeof rc, "%s", json_string_value(src));
            else snprintf(rc, sizeof rc, "%g", report_num(r, "slurm_restart_count"));
            sb_printf(b, "<tr data-launch=\"%g\"><td>%g</td><td>", report_num(r, "launch"), report_num(r, "launch"));
            sb_esc(b, report_str(r, "time", ""));
            sb_printf(b, "</td><td>");
            sb_esc(b, report_str(r, "host", ""));
            sb_printf(b, "</td><td>%g</td><td>", report_num(r, "world"));
            sb_esc(b, report_str(r, "job", "-"));
            sb_printf(b, "</td><td>");
            sb_esc(b, rc);
            sb_printf(b, "</td><td>%g</td></tr>\n", report_num(r, "previous_step"));
        }
    }
    if (nl) sb_printf(b, "</table>\n");
    json_array_foreach(run->recs, i, r)
        if (!strcmp(report_str(r, "kind", ""), "summary"))
            sb_printf(b, "<p>launch %g ended at step %g: %g steps run, final loss %.4g, mean step %.4g ms, exposed "
                         "communication %.3g%%.</p>\n", report_num(r, "launch"), report_num(r, "step"),
                      report_num(r, "steps_run"), report_num(r, "final_loss"), report_num(r, "mean_step_ms"),
                      report_num(r, "exposed_comm_pct"));
    if (run->config_text) {
        sb_printf(b, "<details><summary>config.ini (the resolved config)</summary><pre>");
        sb_esc(b, run->config_text);
        sb_printf(b, "</pre></details>\n");
    }
    sb_printf(b, "</div>\n");
}

void fig_provenance(sbuf *b, const report *rep)
{
    sb_printf(b, "<section id=\"provenance\">\n<h2>Provenance</h2>\n<p>Where each run's records come from: its launches "
                 "(launch records: host, world size, job) and its resolved config.</p>\n");
    for (int r = 0; r < rep->nruns; r++) provenance_run(b, &rep->runs[r]);
    sb_printf(b, "</section>\n");
}
