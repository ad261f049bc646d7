/* nebula-report — one self-contained HTML file of figures from one or more run directories.
 *
 *   nebula-report RUN_DIR [RUN_DIR ...] [--out FILE] [--title T] [--only fig-NAME]
 *
 * Inline SVG and CSS only (no scripts, nothing fetched): the file opens offline, in a
 * browser or attached to a ticket. Several run directories compare runs: their curves
 * share a chart, their heatmaps stand one per run. docs/pictures.md shows every figure
 * and the records it is drawn from. main() reads like a script: options -> runs -> page
 * -> the output rule -> an atomic write (path_write_atomic: temporary name, fsync, rename). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/log.h"
#include "base/path.h"
#include "base/runtime.h"
#include "report.h"

static const config_key schema[] = {
    { "report", "out", CONFIG_TYPE_STRING, "", .help = "the HTML file written (default: the first RUN_DIR/report.html)" },
    { "report", "title", CONFIG_TYPE_STRING, "", .help = "the page's title (default: the runs' names)" },
    { "report", "only", CONFIG_TYPE_STRING, "",
      .help = "one figure alone (fig-curves, fig-resources, ..., provenance): for screenshots" },
};

static const cli_option options[] = {
    { "out", "report.out", NULL },
    { "title", "report.title", NULL },
    { "only", "report.only", NULL },
};

static const char usage[] =
    "usage: nebula-report RUN_DIR [RUN_DIR ...] [--out FILE] [--title T] [--only fig-NAME]\n"
    "One self-contained HTML page (inline SVG, no scripts) of a run directory's figures: training curves across\n"
    "launches, resource use per rank, gradient and attention statistics, DGC-Pro densities, the trace timeline,\n"
    "a nebula-chaos soak, bench scaling curves and each run's provenance. Several RUN_DIRs compare runs.\n"
    "Exit: 0 written, 1 the output could not be written, 2 usage error, a missing or malformed input (the\n"
    "message names the file and line), or an --out that is a device, an input or a run directory's own file.";

typedef void (*figure_fn)(sbuf *b, const report *rep);
static const struct {
    const char *id;
    figure_fn draw;
} figures[] = {
    { "fig-curves", fig_curves },   { "fig-resources", fig_resources }, { "fig-gradients", fig_gradients },
    { "fig-attention", fig_attention }, { "fig-dgc", fig_dgc },     { "fig-timeline", fig_timeline },
    { "fig-soak", fig_soak },       { "fig-scaling", fig_scaling },     { "provenance", fig_provenance },
};
#define NFIGURES (int)(sizeof figures / sizeof figures[0])

static const char css[] =
    "body{font:14px/1.45 sans-serif;margin:16px auto;max-width:1010px;padding:0 8px;color:#222;background:#fff}"
    "body.only{margin:0;padding:4px 0 0 0;max-width:1000px}"
    "h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 6px}h3{font-size:15px;margin:14px 0 4px}"
    "figure{margin:26px 0 18px;padding:0}figcaption{margin:0 0 8px;color:#333}"
    "nav a{margin-right:10px}svg{display:block;margin:4px 0}"
    "svg text{font:11px sans-serif;fill:#333}svg text.title{font-weight:bold;font-size:12px}"
    "svg text.label{fill:#555}svg .axis line{stroke:#999}svg .axis line.grid{stroke:#ebebeb}"
    "svg rect.plot{fill:none;stroke:#d0d0d0}svg rect.empty{fill:#efefef}svg line.base{stroke:#ccc}"
    "p.nodata{color:#777;font-style:italic;border:1px dashed #ccc;padding:8px 12px;margin:6px 0}"
    "p.note{color:#555;font-size:12px;margin:4px 0}"
    "pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px;white-space:pre-wrap}"
    "table{border-collapse:collapse;font-size:12px;margin:4px 0}td,th{border:1px solid #ddd;padding:2px 8px}"
    ".prov{border-top:1px solid #eee;margin-top:10px}";

/* Splits argv into run directories and the options cli_parse reads. */
static int split_args(int argc, char **argv, char **dirs, int *ndirs, char **args)
{
    static const char *const valued[] = { "out", "title", "only", "config", "set" };
    int n = 0;
    args[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0) {
            if (*ndirs == REPORT_MAX_RUNS) {
                log_error("at most %d run directories on one report", REPORT_MAX_RUNS);
                return -1;
            }
            dirs[(*ndirs)++] = argv[i];
            continue;
        }
        args[n++] = argv[i];
        bool takes = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) takes |= !strcmp(argv[i] + 2, valued[k]);
        if (takes && i + 1 < argc) args[n++] = argv[++i];
    }
    args[n] = NULL;
    return n;
}

static void page_head(sbuf *b, const report *rep)
{
    sb_printf(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>");
    sb_esc(b, rep->title);
    sb_printf(b, "</title>\n<style>%s</style>\n</head>\n<body%s>\n", css, rep->only[0] ? " class=\"only\"" : "");
    if (rep->only[0]) return;
    char when[32];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%SZ", gmtime(&now));
    sb_printf(b, "<h1>");
    sb_esc(b, rep->title);
    sb_printf(b, "</h1>\n<p class=\"note\">nebula-report %s, %s; runs:", cli_version(), when);
    for (int r = 0; r < rep->nruns; r++) {
        sb_printf(b, "%s <code>", r ? "," : "");
        sb_esc(b, rep->runs[r].dir);
        sb_printf(b, "</code>");
    }
    sb_printf(b, "</p>\n<nav>");
    for (int f = 0; f < NFIGURES; f++) sb_printf(b, "<a href=\"#%s\">%s</a>", figures[f].id, figures[f].id);
    sb_printf(b, "</nav>\n");
}

static int page_fill(void *ctx, int fd)
{
    const sbuf *b = ctx;
    return path_write_all(fd, b->p, b->len);
}

int main(int argc, char **argv)
{
    runtime_preinit(argv[0]);
    config cfg;
    config_init(&cfg, schema, (int)(sizeof schema / sizeof schema[0]));
    char *dirs[REPORT_MAX_RUNS], **args = calloc((size_t)argc + 1, sizeof(char *));
    int ndirs = 0, nargs = split_args(argc, argv, dirs, &ndirs, args);
    if (nargs < 0) return 2;
    cli_action action;
    status st = cli_parse(&cfg, options, (int)(sizeof options / sizeof options[0]), nargs, args, 1, usage, &action);
    free(args);
    if (st != STATUS_OK) return status_exit_code(st);
    if (action == CLI_ACTION_EXIT) return 0;
    if (!ndirs) {
        log_error("no RUN_DIR given (nebula-report RUN_DIR [RUN_DIR ...]; --help)");
        return 2;
    }
    report rep = { .only = config_str(&cfg, "report.only") };
    bool known = !rep.only[0];
    for (int f = 0; f < NFIGURES; f++) known |= !strcmp(rep.only, figures[f].id);
    if (!known) {
        log_error("--only %s: not a figure; expected one of fig-curves, fig-resources, fig-gradients, fig-attention, "
                  "fig-dgc, fig-timeline, fig-soak, fig-scaling, provenance", rep.only);
        return 2;
    }
    rep.runs = calloc((size_t)ndirs, sizeof(report_run));
    CHECK(rep.runs, "out of memory");
    for (int r = 0; r < ndirs; r++, rep.nruns++)
        if (report_read_run(&rep.runs[r], dirs[r]) != STATUS_OK) return 2;
    /* the same base name twice (run/ of two soaks): the later ones get a number */
    for (int r = 1; r < rep.nruns; r++)
        for (int q = 0; q < r; q++)
            if (!strcmp(rep.runs[r].label, rep.runs[q].label)) {
                char l[64];
                snprintf(l, sizeof l, "%.50s-%d", rep.runs[r].label, r + 1);
                snprintf(rep.runs[r].label, sizeof rep.runs[r].label, "%s", l);
            }
    char title[1024], out[REPORT_PATH_MAX + 16];
    int tl = snprintf(title, sizeof title, "Nebula report:");
    for (int r = 0; r < rep.nruns && tl < (int)sizeof title; r++)
        tl += snprintf(title + tl, sizeof title - (size_t)tl, "%s %s", r ? "," : "", rep.runs[r].label);
    rep.title = config_str(&cfg, "report.title")[0] ? config_str(&cfg, "report.title") : title;
    if (config_str(&cfg, "report.out")[0]) snprintf(out, sizeof out, "%s", config_str(&cfg, "report.out"));
    else snprintf(out, sizeof out, "%s/report.html", rep.runs[0].dir);
    /* the output rule: never a device, an input, a run directory's own file or a checkpoint */
    int nin = 0;
    for (int r = 0; r < rep.nruns; r++) nin += rep.runs[r].ninputs;
    const char **inputs = calloc((size_t)nin + 1, sizeof *inputs);
    CHECK(inputs, "out of memory");
    nin = 0;
    for (int r = 0; r < rep.nruns; r++)
        for (int i = 0; i < rep.runs[r].ninputs; i++) inputs[nin++] = rep.runs[r].inputs[i];
    st = path_output_check(out, config_str(&cfg, "report.out")[0] ? "--out" : "the default output", inputs, nin);
    free(inputs);
    if (st != STATUS_OK) return status_exit_code(st);

    sbuf page = { 0 };
    page_head(&page, &rep);
    for (int f = 0; f < NFIGURES; f++)
        if (!rep.only[0] || !strcmp(rep.only, figures[f].id)) figures[f].draw(&page, &rep);
    sb_printf(&page, "</body>\n</html>\n");
    st = path_write_atomic(out, "report", page_fill, &page);
    if (st == STATUS_OK) printf("nebula-report: wrote %s (%zu KiB, %d run%s)\n", out, page.len / 1024, rep.nruns,
                                rep.nruns > 1 ? "s" : "");
    sb_free(&page);
    for (int r = 0; r < rep.nruns; r++) report_free_run(&rep.runs[r]);
    free(rep.runs);
    return status_exit_code(st);
}
