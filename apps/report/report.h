/* report.h — nebula-report's shared types: what read.c loads from a run directory and
 * what figures.c and figures_ops.c draw from it (docs/pictures.md lists the figures).
 *
 * The one decision to know: records are kept as parsed JSON (jansson) in file order and
 * each figure picks what it needs, so a record kind the trainer does not write yet (or
 * an older run without it) is only a figure that says "no data", never an error. */
#ifndef NEBULA_REPORT_H
#define NEBULA_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/log.h"
#include "svg.h"

#define REPORT_MAX_RUNS   16
#define REPORT_MAX_TABLES 16
#define REPORT_PATH_MAX   4096
/* heatmaps show at most this many step columns; more are binned (mean per bin) */
#define REPORT_MAX_COLS   200

/* One bench table file (CSV with `#` comment lines, or JSON rows) as text cells. */
typedef struct report_table {
    char name[256];    /* file name inside the run directory */
    int ncols;         /* columns of the header */
    int nrows;         /* data rows */
    char **cols;       /* [ncols] header names */
    char **cells;      /* [nrows * ncols] cell text, "" where a row is short */
    char *comments;    /* the `#` lines (without '#'), newline-separated, or NULL */
} report_table;

/* The columns of samples.csv (apps/chaos/soak.c); NaN where a cell is "nan" or empty. */
enum { SOAK_T, SOAK_LAUNCH, SOAK_STEP, SOAK_RSS, SOAK_FDS, SOAK_DISK, SOAK_RATE, SOAK_NCOLS };

typedef struct report_run {
    char dir[REPORT_PATH_MAX];      /* as given on the command line */
    char label[64];                 /* short unique name: the directory's base name */
    char metrics_path[2 * REPORT_PATH_MAX]; /* the metrics.jsonl read ("" if none) */
    json_t *recs;                   /* every record of metrics.jsonl in file order (array) */
    bool torn_tail;                 /* the last line was incomplete and left out */
    json_t *trace;                  /* trace.json, or NULL */
    char *config_text;              /* config.ini, or NULL */
    double *soak;                   /* [nsoak * SOAK_NCOLS] samples.csv, or NULL */
    int nsoak;                      /* rows of soak */
    json_t *soak_report;            /* the soak's report.json, or NULL */
    report_table tables[REPORT_MAX_TABLES]; /* bench table outputs found in the directory */
    int ntables;                    /* entries of tables */
    char **inputs;                  /* [ninputs] every file read, which --out must not replace */
    int ninputs;
} report_run;

typedef struct report {
    report_run *runs;   /* [nruns] in command-line order */
    int nruns;          /* runs on this report */
    const char *title;  /* the page's title */
    const char *only;   /* "" or one figure id (fig-NAME): the page holds that figure alone */
} report;

/* read.c: loads RUN_DIR into run; STATUS_INPUT with one message naming the file (and
 * line) for a missing directory, an unreadable file or a malformed record. */
status report_read_run(report_run *run, const char *dir);
void report_free_run(report_run *run);
/* Records of `kind` with a step, the last one per step (later launches win: redone steps
 * and rollbacks), sorted by step. Returns the count; *out is a new array of borrowed
 * pointers (free it), *redone counts the records replaced by later ones. */
int report_by_step(const report_run *run, const char *kind, json_t ***out, int *redone);
/* A number of a record, NaN when missing or null. */
double report_num(const json_t *rec, const char *key);
/* A string of a record, def when missing or not a string. */
const char *report_str(const json_t *rec, const char *key, const char *def);
/* The index of a column of t by name, -1 if absent. */
int report_table_col(const report_table *t, const char *name);
/* The cell as a number, NaN when empty or not a number. */
double report_table_num(const report_table *t, int row, int col);

/* figures.c: the training figures */
void fig_curves(sbuf *b, const report *rep);
void fig_resources(sbuf *b, const report *rep);
void fig_gradients(sbuf *b, const report *rep);
void fig_attention(sbuf *b, const report *rep);
void fig_dgc(sbuf *b, const report *rep);
/* timeline.c: the trace figure; figures_ops.c: the soak, bench and provenance figures */
void fig_timeline(sbuf *b, const report *rep);
void fig_soak(sbuf *b, const report *rep);
void fig_scaling(sbuf *b, const report *rep);
void fig_provenance(sbuf *b, const report *rep);

/* The opening and closing of a figure: `<figure id="ID">` with its caption. */
void fig_open(sbuf *b, const char *id, const char *caption);
void fig_close(sbuf *b);
/* The text of a figure (or a run's part of it) that has no data. */
void fig_nodata(sbuf *b, const char *run_label, const char *what);
/* The run's name above its part of a figure, on a page of several runs. */
void fig_run_heading(sbuf *b, const report *rep, const report_run *run);

#endif
