/* svg.h — the drawing primitives of nebula-report: a growable text buffer, axes, line
 * charts, heatmaps with a perceptual colour scale, and legends, written as inline SVG.
 *
 * Every element that carries data says so in attributes a test can read back without a
 * browser: a curve is `<polyline data-series=... data-run=... points=...>`, a heatmap cell
 * `<rect data-row=... data-col=... data-value=...>`, a marker `<g data-marker=KIND
 * data-x=...>`. No scripts, no external resources: the page works offline. */
#ifndef NEBULA_REPORT_SVG_H
#define NEBULA_REPORT_SVG_H

#include <stdbool.h>
#include <stddef.h>

/* The output under construction; allocation failure dies (a report is small). */
typedef struct sbuf {
    char *p;     /* text, NUL-terminated */
    size_t len;  /* bytes used, without the NUL */
    size_t cap;  /* bytes allocated */
} sbuf;

void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s with & < > " ' escaped (HTML text and attribute values). */
void sb_esc(sbuf *b, const char *s);
void sb_free(sbuf *b);

/* A number as short text: 4 significant digits, "1.5e-05", "1200", "0.25"; "nan". */
const char *svg_num(char buf[32], double v);
/* "#rrggbb" at t in [0, 1] of the perceptual scale (viridis: dark violet -> yellow). */
void svg_scale_colour(double t, char out[8]);
/* The categorical colour i (Okabe-Ito order, readable for colour-blind readers). */
const char *svg_colour(int i);

/* A linear or log10 axis: data [lo, hi] onto pixels [p0, p1]. */
typedef struct svg_axis {
    double lo, hi;   /* data range (log: both > 0) */
    double p0, p1;   /* pixel range (p1 < p0 for a y axis) */
    bool log;        /* log10 scale */
} svg_axis;
double svg_map(const svg_axis *a, double v);
/* Sets the data range to [lo, hi], widened when empty; `nice` rounds a linear range out to
 * tick values and a log range out to decades. */
void svg_axis_fit(svg_axis *a, double lo, double hi, bool nice);
/* Ticks, grid lines and labels along a horizontal axis at pixel row y (grid up to top),
 * or a vertical axis at pixel column x (grid across to right). */
void svg_xaxis(sbuf *b, const svg_axis *a, double y, double top, const char *label);
void svg_yaxis(sbuf *b, const svg_axis *a, double x, double right, const char *label);

/* One legend entry (a line or a swatch) at (x, y); returns the width it took. */
double svg_legend_item(sbuf *b, double x, double y, const char *colour, const char *text, bool dashed);

/* A curve of a line chart. */
typedef struct svg_series {
    const char *id;      /* data-series: what it is ("loss/train", "rss_mb") */
    const char *run;     /* data-run: the run's label, or NULL */
    const char *label;   /* legend text */
    const double *x;     /* [n] */
    const double *y;     /* [n]; NaN leaves a gap */
    int n;               /* points */
    int colour;          /* svg_colour index */
    bool dashed;         /* drawn dashed */
    bool dots;           /* each point also drawn as a dot (sparse series) */
} svg_series;

/* An event on a chart's x axis. */
typedef struct svg_mark {
    double x;            /* where, in x units */
    const char *kind;    /* data-marker: launch, alert, reload, fault, commit */
    const char *label;   /* tooltip, and the text beside a line */
    bool line;           /* a vertical line across the plot (else a triangle at its top) */
    const char *tag;     /* a short text written beside the line's top (a commit's id), or NULL */
} svg_mark;

typedef struct svg_chart {
    const char *panel;          /* data-panel of the <svg> */
    const char *title;          /* above the plot */
    const char *xlabel;         /* under the x axis */
    const char *ylabel;         /* beside the y axis */
    bool logx, logy;            /* log10 axes (non-positive values are left out) */
    int width, height;          /* pixels of the whole <svg> */
    const svg_series *series;   /* [nseries] */
    int nseries;
    const svg_mark *marks;      /* [nmarks] */
    int nmarks;
    const char *const *xcats;   /* categorical x: x values are indices into [nxcats] labels */
    int nxcats;
} svg_chart;
void svg_line_chart(sbuf *b, const svg_chart *c);

/* A rows x cols matrix of cells coloured by value. */
typedef struct svg_heatmap {
    const char *panel;               /* data-panel */
    const char *run;                 /* data-run, or NULL */
    const char *title;               /* above the cells */
    int rows, cols;                  /* cells */
    const double *v;                 /* [rows * cols]; NaN: no sample (light grey) */
    const char *const *row_keys;     /* [rows] data-row values */
    const char *const *row_labels;   /* [rows] text at the left */
    const double *col_keys;          /* [cols] data-col values (steps, heads) */
    const char *xlabel, *ylabel;     /* axis captions */
    const char *unit;                /* the colour legend's caption */
    bool log_colour;                 /* colour by log10(value) (densities); legend in values */
    bool has_floor;                  /* values <= floor are drawn with the coldest colour and */
    double floor;                    /*   named floor_label in the legend */
    const char *floor_label;
    int width;                       /* pixels of the whole <svg> */
} svg_heatmap;
void svg_heatmap_draw(sbuf *b, const svg_heatmap *h);

/* Bins cols columns into at most maxcols, the mean of each bin's non-NaN values, the key
 * of a bin the key of its first column. Writes new arrays to *vout, *kout (free them);
 * returns the new column count and the columns per bin in *per (1: nothing binned). */
int svg_bin_columns(const double *v, const double *keys, int rows, int cols, int maxcols, double **vout,
                    double **kout, int *per);

#endif
