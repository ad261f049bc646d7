/* svg — see svg.h. Coordinates are pixels of the <svg> they are drawn in, written with
 * one decimal; text is 11 px sans-serif, whose width the layout estimates at 6.2 px per
 * character (no font metrics without a browser). */
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#define CHAR_W 6.2 /* estimated px per character of 11 px text */

void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        CHECK(n >= 0, "vsnprintf failed");
        if (b->p && (size_t)n < room) { b->len += (size_t)n; return; }
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap - b->len <= (size_t)n) cap *= 2;
        b->p = realloc(b->p, cap);
        CHECK(b->p, "out of memory for the report's text");
        b->cap = cap;
    }
}

void sb_esc(sbuf *b, const char *s)
{
    for (const char *c = s ? s : ""; *c; c++) {
        switch (*c) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        case '\'': sb_printf(b, "&#39;"); break;
        default:
            /* control characters other than tab and newline have no place in HTML text */
            if ((unsigned char)*c < 0x20 && *c != '\n' && *c != '\t') sb_printf(b, "?");
            else sb_printf(b, "%c", *c);
        }
    }
}

void sb_free(sbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

const char *svg_num(char buf[32], double v)
{
    if (!isfinite(v)) return snprintf(buf, 32, "nan"), buf;
    if (v == 0) return snprintf(buf, 32, "0"), buf;
    double a = fabs(v);
    if (a >= 1e-3 && a < 1e6) {
        snprintf(buf, 32, "%.4g", v);
        if (!strchr(buf, 'e')) return buf;
    }
    /* "1.5e-05" -> "1.5e-5", "1e+06" -> "1e6": shorter tick labels */
    char t[32], *e;
    snprintf(t, sizeof t, "%.3g", v);
    if ((e = strchr(t, 'e'))) {
        int x = atoi(e + 1);
        *e = '\0';
        snprintf(buf, 32, "%.12se%d", t, x % 1000);
    } else {
        snprintf(buf, 32, "%s", t);
    }
    return buf;
}

/* viridis (matplotlib's default map) at t = 0, 0.1, ..., 1, interpolated linearly: even
 * steps in lightness, so a reader's eye orders the cells as the values are ordered. */
static const unsigned char viridis[11][3] = {
    { 0x44, 0x01, 0x54 }, { 0x48, 0x24, 0x75 }, { 0x41, 0x44, 0x87 }, { 0x35, 0x5f, 0x8d },
    { 0x2a, 0x78, 0x8e }, { 0x21, 0x91, 0x8c }, { 0x22, 0xa8, 0x84 }, { 0x44, 0xbf, 0x70 },
    { 0x7a, 0xd1, 0x51 }, { 0xbd, 0xdf, 0x26 }, { 0xfd, 0xe7, 0x25 },
};

void svg_scale_colour(double t, char out[8])
{
    if (!(t >= 0)) t = 0;
    if (t > 1) t = 1;
    double f = t * 10;
    int i = (int)f;
    if (i > 9) i = 9;
    f -= i;
    int c[3];
    for (int k = 0; k < 3; k++) c[k] = (int)lround(viridis[i][k] + f * (viridis[i + 1][k] - viridis[i][k]));
    snprintf(out, 8, "#%02x%02x%02x", c[0], c[1], c[2]);
}

const char *svg_colour(int i)
{
    static const char *const pal[] = { "#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                       "#e69f00", "#56b4e9", "#000000", "#8c6d31" };
    return pal[(i % 8 + 8) % 8];
}

double svg_map(const svg_axis *a, double v)
{
    double lo = a->lo, hi = a->hi;
    if (a->log) v = log10(v), lo = log10(lo), hi = log10(hi);
    return a->p0 + (v - lo) / (hi - lo) * (a->p1 - a->p0);
}

/* 1, 2 or 5 times a power of ten, about range / n. */
static double nice_step(double range, int n)
{
    double raw = range / n, p = pow(10, floor(log10(raw))), f = raw / p;
    return p * (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10);
}

void svg_axis_fit(svg_axis *a, double lo, double hi, bool nice)
{
    if (!isfinite(lo) || !isfinite(hi)) lo = 0, hi = 1;
    if (a->log) {
        if (lo <= 0) lo = hi > 0 ? hi / 10 : 1;
        if (hi <= lo) hi = lo * 10;
        if (nice) lo = pow(10, floor(log10(lo) + 1e-9)), hi = pow(10, ceil(log10(hi) - 1e-9));
        if (hi <= lo) hi = lo * 10;
    } else {
        if (hi <= lo) {
            double d = lo != 0 ? fabs(lo) * 0.1 : 1;
            lo -= d, hi += d;
        }
        if (nice) {
            double s = nice_step(hi - lo, 5);
            lo = floor(lo / s + 1e-9) * s, hi = ceil(hi / s - 1e-9) * s;
        }
    }
    a->lo = lo, a->hi = hi;
}

/* Tick values of an axis into t[cap]; returns the count. */
static int ticks(const svg_axis *a, double *t, int cap)
{
    int n = 0;
    if (a->log) {
        int d0 = (int)floor(log10(a->lo) + 1e-9), d1 = (int)ceil(log10(a->hi) - 1e-9);
        int every = (d1 - d0) > 8 ? (d1 - d0 + 7) / 8 : 1;
        static const double sub[] = { 1, 2, 5 };
        for (int d = d0; d <= d1 && n < cap; d += every)
            for (int k = 0; k < (d1 - d0 <= 2 ? 3 : 1) && n < cap; k++) {
                double v = sub[k] * pow(10, d);
                if (v >= a->lo * (1 - 1e-9) && v <= a->hi * (1 + 1e-9)) t[n++] = v;
            }
        return n;
    }
    double s = nice_step(a->hi - a->lo, 5);
    for (double v = ceil(a->lo / s - 1e-9) * s; v <= a->hi + s * 1e-9 && n < cap; v += s)
        t[n++] = fabs(v) < s * 1e-9 ? 0 : v;
    return n;
}

void svg_xaxis(sbuf *b, const svg_axis *a, double y, double top, const char *label)
{
    double t[40];
    char num[32];
    int n = ticks(a, t, 40);
    sb_printf(b, "<g class=\"axis\">");
    for (int i = 0; i < n; i++) {
        double x = svg_map(a, t[i]);
        sb_printf(b, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, top, x, y);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", x, y + 14, svg_num(num, t[i]));
    }
    sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", a->p0, y, a->p1, y);
    if (label) {
        sb_printf(b, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (a->p0 + a->p1) / 2, y + 30);
        sb_esc(b, label);
        sb_printf(b, "</text>");
    }
    sb_printf(b, "</g>");
}

void svg_yaxis(sbuf *b, const svg_axis *a, double x, double right, const char *label)
{
    double t[40];
    char num[32];
    int n = ticks(a, t, 40);
    sb_printf(b, "<g class=\"axis\">");
    for (int i = 0; i < n; i++) {
        double y = svg_map(a, t[i]);
        sb_printf(b, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, y, right, y);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>", x - 4, y + 4, svg_num(num, t[i]));
    }
    sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, a->p0, x, a->p1);
    if (label) {
        double ym = (a->p0 + a->p1) / 2;
        sb_printf(b, "<text class=\"label\" x=\"12\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 12 %.1f)\">",
                  ym, ym);
        sb_esc(b, label);
        sb_printf(b, "</text>");
    }
    sb_printf(b, "</g>");
}

double svg_legend_item(sbuf *b, double x, double y, const char *colour, const char *text, bool dashed)
{
    if (dashed)
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" "
                     "stroke-dasharray=\"4 3\"/>", x, y - 4, x + 18, y - 4, colour);
    else
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"4\" fill=\"%s\"/>", x, y - 6, colour);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">", x + 22, y);
    sb_esc(b, text);
    sb_printf(b, "</text>");
    return 22 + CHAR_W * (double)strlen(text) + 14;
}

static const char *mark_colour(const char *kind)
{
    if (!strcmp(kind, "alert")) return "#c0392b";
    if (!strcmp(kind, "reload")) return "#1b7f3b";
    if (!strcmp(kind, "fault")) return "#8b0000";
    if (!strcmp(kind, "commit")) return "#6c3483";
    return "#777777";
}

/* The legend of a chart from (x0, y) wrapping at x1: its series, then one entry per kind
 * of mark present. Returns the y below it. */
static double chart_legend(sbuf *b, const svg_chart *c, double x0, double x1, double y)
{
    double x = x0;
    const char *kinds[8];
    int nk = 0;
    int n = c->nseries + c->nmarks;
    for (int i = 0; i < n; i++) {
        const char *text, *colour;
        bool dashed;
        if (i < c->nseries) {
            const svg_series *s = &c->series[i];
            if (!s->label) continue;
            text = s->label, colour = svg_colour(s->colour), dashed = s->dashed;
        } else {
            const char *k = c->marks[i - c->nseries].kind;
            bool seen = false;
            for (int j = 0; j < nk; j++) seen |= !strcmp(kinds[j], k);
            if (seen || nk == 8) continue;
            kinds[nk++] = k;
            text = k, colour = mark_colour(k), dashed = c->marks[i - c->nseries].line;
        }
        double w = 22 + CHAR_W * (double)strlen(text) + 14;
        if (x > x0 && x + w > x1) x = x0, y += 15;
        x += svg_legend_item(b, x, y, colour, text, dashed);
    }
    return y + 8;
}

static void chart_marks(sbuf *b, const svg_chart *c, const svg_axis *ax, double top, double bottom)
{
    char num[32];
    for (int i = 0; i < c->nmarks; i++) {
        const svg_mark *m = &c->marks[i];
        if (!isfinite(m->x) || (ax->log && m->x <= 0)) continue;
        double x = svg_map(ax, m->x);
        if (x < ax->p0 - 0.5 || x > ax->p1 + 0.5) continue;
        sb_printf(b, "<g class=\"mark\" data-marker=\"%s\" data-x=\"%s\"><title>", m->kind, svg_num(num, m->x));
        sb_esc(b, m->label);
        sb_printf(b, "</title>");
        if (m->line)
            sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.2\" "
                         "stroke-dasharray=\"5 3\"/>", x, top, x, bottom, mark_colour(m->kind));
        else
            sb_printf(b, "<path d=\"M%.1f %.1fl-5 -8h10z\" fill=\"%s\"/>", x, top + 9, mark_colour(m->kind));
        if (m->tag) {  /* upward, beside the line: tags of marks a few pixels apart do not overwrite each other */
            sb_printf(b, "<text class=\"tag\" font-size=\"9\" fill=\"%s\" transform=\"translate(%.1f %.1f) "
                         "rotate(-90)\" text-anchor=\"end\">", mark_colour(m->kind), x - 2, top + 4);
            sb_esc(b, m->tag);
            sb_printf(b, "</text>");
        }
        sb_printf(b, "</g>");
    }
}

/* Points of one pixel column of a curve: its first, lowest, highest and last, in order. */
typedef struct px_col {
    long col;          /* pixel column, -1: none yet */
    int first, lo, hi, last;
} px_col;

static void col_flush(sbuf *b, const svg_series *s, const svg_axis *ax, const svg_axis *ay, px_col *c)
{
    if (c->col < 0) return;
    int idx[4] = { c->first, c->lo, c->hi, c->last };
    for (int a = 1; a < 4; a++)
        for (int k = a; k > 0 && idx[k - 1] > idx[k]; k--) { int t = idx[k]; idx[k] = idx[k - 1]; idx[k - 1] = t; }
    for (int k = 0; k < 4; k++)
        if (k == 0 || idx[k] != idx[k - 1])
            sb_printf(b, "%.1f,%.1f ", svg_map(ax, s->x[idx[k]]), svg_map(ay, s->y[idx[k]]));
    c->col = -1;
}

/* One curve: a polyline per unbroken run of finite points (NaN and, on log axes,
 * non-positive values break it). A curve of more points than pixels keeps four per pixel
 * column (first, lowest, highest, last): the same picture, a page that stays small. */
static void chart_series(sbuf *b, const svg_series *s, const svg_axis *ax, const svg_axis *ay)
{
    const char *colour = svg_colour(s->colour);
    bool open = false;
    px_col c = { .col = -1 };
    for (int i = 0; i <= s->n; i++) {
        bool ok = i < s->n && isfinite(s->x[i]) && isfinite(s->y[i]) && !(ax->log && s->x[i] <= 0) &&
                  !(ay->log && s->y[i] <= 0);
        if (ok && !open) {
            sb_printf(b, "<polyline data-series=\"");
            sb_esc(b, s->id);
            sb_printf(b, "\"");
            if (s->run) { sb_printf(b, " data-run=\""); sb_esc(b, s->run); sb_printf(b, "\""); }
            sb_printf(b, " fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"", colour,
                      s->dashed ? " stroke-dasharray=\"6 3\"" : "");
            open = true;
        } else if (!ok && open) {
            col_flush(b, s, ax, ay, &c);
            sb_printf(b, "\"/>");
            open = false;
        }
        if (!ok) continue;
        long col = lround(svg_map(ax, s->x[i]));
        if (col != c.col) {
            col_flush(b, s, ax, ay, &c);
            c = (px_col){ col, i, i, i, i };
        }
        c.last = i;
        if (s->y[i] < s->y[c.lo]) c.lo = i;
        if (s->y[i] > s->y[c.hi]) c.hi = i;
    }
    if (s->dots && s->n <= 400)  /* beyond that the dots would be a second line */
        for (int i = 0; i < s->n; i++)
            if (isfinite(s->x[i]) && isfinite(s->y[i]) && !(ay->log && s->y[i] <= 0))
                sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>", svg_map(ax, s->x[i]),
                          svg_map(ay, s->y[i]), colour);
}

void svg_line_chart(sbuf *b, const svg_chart *c)
{
    double W = c->width, H = c->height, left = 72, right = 26;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int k = 0; k < c->nseries; k++)
        for (int i = 0; i < c->series[k].n; i++) {
            double x = c->series[k].x[i], y = c->series[k].y[i];
            if (!isfinite(x) || !isfinite(y) || (c->logx && x <= 0) || (c->logy && y <= 0)) continue;
            xlo = fmin(xlo, x), xhi = fmax(xhi, x), ylo = fmin(ylo, y), yhi = fmax(yhi, y);
        }
    for (int i = 0; i < c->nmarks; i++)
        if (isfinite(c->marks[i].x) && !(c->logx && c->marks[i].x <= 0) && isfinite(xlo))
            xlo = fmin(xlo, c->marks[i].x), xhi = fmax(xhi, c->marks[i].x);
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-panel=\"%s\" width=\"%d\" "
                 "height=\"%d\" viewBox=\"0 0 %d %d\">", c->panel, c->width, c->height, c->width, c->height);
    sb_printf(b, "<text class=\"title\" x=\"%.1f\" y=\"14\">", left);
    sb_esc(b, c->title);
    sb_printf(b, "</text>");
    double top = chart_legend(b, c, left, W - right, 32) + 4, bottom = H - 40;
    svg_axis ax = { .p0 = left, .p1 = W - right, .log = c->logx };
    svg_axis ay = { .p0 = bottom, .p1 = top, .log = c->logy };
    if (c->nxcats) ax.lo = -0.5, ax.hi = c->nxcats - 0.5, ax.log = false;
    else svg_axis_fit(&ax, xlo, xhi, c->logx);
    svg_axis_fit(&ay, ylo, yhi, true);
    sb_printf(b, "<rect class=\"plot\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", left, top,
              W - right - left, bottom - top);
    svg_yaxis(b, &ay, left, W - right, c->ylabel);
    if (c->nxcats) {
        sb_printf(b, "<g class=\"axis\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", left, bottom, W - right,
                  bottom);
        for (int i = 0; i < c->nxcats; i++) {
            sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", svg_map(&ax, i), bottom + 14);
            sb_esc(b, c->xcats[i]);
            sb_printf(b, "</text>");
        }
        sb_printf(b, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (left + W - right) / 2,
                  bottom + 30);
        sb_esc(b, c->xlabel);
        sb_printf(b, "</text></g>");
    } else {
        svg_xaxis(b, &ax, bottom, top, c->xlabel);
    }
    chart_marks(b, c, &ax, top, bottom);
    for (int k = 0; k < c->nseries; k++) chart_series(b, &c->series[k], &ax, &ay);
    sb_printf(b, "</svg>\n");
}

/* The colour of a value of a heatmap whose scale runs over [lo, hi] (already log10 when
 * the map colours by logarithm); t in [0.12, 1] when a floor takes 0. */
static void cell_colour(const svg_heatmap *h, double v, double lo, double hi, char out[8])
{
    if (h->has_floor && v <= h->floor) { svg_scale_colour(0, out); return; }
    double f = h->log_colour ? log10(fmax(v, 1e-30)) : v;
    double t = hi > lo ? (f - lo) / (hi - lo) : 0.5;
    if (h->has_floor) t = 0.12 + 0.88 * t;
    svg_scale_colour(t, out);
}

/* The colour legend at (x, y): a bar of 40 steps from hi (top) to lo, 5 values beside it,
 * and the floor's swatch under it. */
static void heat_legend(sbuf *b, const svg_heatmap *h, double x, double y, double height, double lo, double hi)
{
    char col[8], num[32];
    sb_printf(b, "<g class=\"scale\"><text x=\"%.1f\" y=\"%.1f\">", x, y - 10);
    sb_esc(b, h->unit);
    sb_printf(b, "</text>");
    for (int i = 0; i < 40; i++) {
        double t = 1 - (i + 0.5) / 40;
        svg_scale_colour(h->has_floor ? 0.12 + 0.88 * t : t, col);
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"%.2f\" fill=\"%s\"/>", x, y + i * height / 40,
                  height / 40 + 0.3, col);
    }
    /* the ends (the smallest and largest value drawn), and round values between them */
    double vlo = h->log_colour ? pow(10, lo) : lo, vhi = h->log_colour ? pow(10, hi) : hi;
    if (!(hi > lo)) {
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", x + 16, y + height / 2 + 4, svg_num(num, vlo));
    } else {
        svg_axis a = { .lo = vlo, .hi = vhi, .p0 = y + height, .p1 = y, .log = h->log_colour };
        double t[40];
        int n = ticks(&a, t, 40);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", x + 16, y + 4, svg_num(num, vhi));
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", x + 16, y + height + 4, svg_num(num, vlo));
        double last = y + height;  /* labels at least 18 px apart, the ends included */
        for (int i = 0; i < n; i++) {
            double py = svg_map(&a, t[i]);
            if (py <= y + 18 || py >= last - 18) continue;
            last = py;
            sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">%s</text><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                         "y2=\"%.1f\" stroke=\"#fff\"/>", x + 16, py + 4, svg_num(num, t[i]), x, py, x + 12, py);
        }
    }
    if (h->has_floor) {
        svg_scale_colour(0, col);
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>", x, y + height + 8, col);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">", x + 16, y + height + 17);
        sb_esc(b, h->floor_label);
        sb_printf(b, "</text>");
    }
    sb_printf(b, "</g>");
}

static void heat_cells(sbuf *b, const svg_heatmap *h, double left, double top, double cw, double rh, double lo,
                       double hi)
{
    char col[8], num[32], key[32];
    for (int r = 0; r < h->rows; r++)
        for (int c = 0; c < h->cols; c++) {
            double v = h->v[(size_t)r * h->cols + c];
            if (!isfinite(v)) continue;
            cell_colour(h, v, lo, hi, col);
            sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" data-row=\"", left + c * cw,
                      top + r * rh, cw + (c + 1 < h->cols ? 0.6 : 0), rh + (r + 1 < h->rows ? 0.6 : 0), col);
            sb_esc(b, h->row_keys[r]);
            sb_printf(b, "\" data-col=\"%s\" data-value=\"%.6g\"><title>", svg_num(key, h->col_keys[c]), v);
            sb_esc(b, h->row_labels[r]);
            sb_printf(b, ", %s %s: %s</title></rect>", h->xlabel, key, svg_num(num, v));
        }
}

void svg_heatmap_draw(sbuf *b, const svg_heatmap *h)
{
    size_t maxlab = 4;
    for (int r = 0; r < h->rows; r++) maxlab = strlen(h->row_labels[r]) > maxlab ? strlen(h->row_labels[r]) : maxlab;
    double left = 30 + CHAR_W * (double)(maxlab > 28 ? 28 : maxlab), right = 150, top = 26;
    double rh = h->rows <= 16 ? 18 : fmax(3, 400.0 / h->rows), height = rh * h->rows;
    double cw = (h->width - left - right) / (h->cols > 0 ? h->cols : 1);
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (size_t)h->rows * h->cols; i++) {
        double v = h->v[i];
        if (!isfinite(v) || (h->has_floor && v <= h->floor) || (h->log_colour && v <= 0)) continue;
        double f = h->log_colour ? log10(v) : v;
        lo = fmin(lo, f), hi = fmax(hi, f);
    }
    if (!isfinite(lo)) lo = 0, hi = 1;
    int H = (int)(top + fmax(height, 90) + (h->has_floor ? 70 : 50));
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heatmap\" data-panel=\"%s\"", h->panel);
    if (h->run) { sb_printf(b, " data-run=\""); sb_esc(b, h->run); sb_printf(b, "\""); }
    sb_printf(b, " width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">", h->width, H, h->width, H);
    sb_printf(b, "<text class=\"title\" x=\"%.1f\" y=\"14\">", left);
    sb_esc(b, h->title);
    sb_printf(b, "</text><rect class=\"empty\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", left, top,
              cw * h->cols, height);
    heat_cells(b, h, left, top, cw, rh, lo, hi);
    /* row labels: every row when rows are tall enough for text, else every k-th */
    int every = rh >= 10 ? 1 : (int)ceil(11 / rh);
    sb_printf(b, "<g class=\"axis\">");
    for (int r = 0; r < h->rows; r += every) {
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", left - 4, top + r * rh + rh / 2 + 4);
        char lab[32];  /* the left margin holds 28 characters */
        snprintf(lab, sizeof lab, "%.28s", h->row_labels[r]);
        sb_esc(b, lab);
        sb_printf(b, "</text>");
    }
    /* column labels: about 8 along the bottom */
    char num[32];
    int cstep = h->cols > 8 ? (h->cols + 7) / 8 : 1;
    for (int c = 0; c < h->cols; c += cstep)
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", left + (c + 0.5) * cw,
                  top + height + 14, svg_num(num, h->col_keys[c]));
    sb_printf(b, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", left + cw * h->cols / 2,
              top + height + 30);
    sb_esc(b, h->xlabel);
    sb_printf(b, "</text><text class=\"label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", left - 4, top - 4);
    sb_esc(b, h->ylabel);
    sb_printf(b, "</text></g>");
    heat_legend(b, h, h->width - right + 24, top + 16, fmax(height, 90) - 16, lo, hi);
    sb_printf(b, "</svg>\n");
}

int svg_bin_columns(const double *v, const double *keys, int rows, int cols, int maxcols, double **vout,
                    double **kout, int *per)
{
    int p = cols > maxcols ? (cols + maxcols - 1) / maxcols : 1, nc = cols > 0 ? (cols + p - 1) / p : 0;
    double *ov = malloc(sizeof(double) * ((size_t)rows * nc + 1)), *ok = malloc(sizeof(double) * ((size_t)nc + 1));
    CHECK(ov && ok, "out of memory for a heatmap");
    for (int j = 0; j < nc; j++) {
        ok[j] = keys[j * p];
        for (int r = 0; r < rows; r++) {
            double s = 0;
            int n = 0;
            for (int c = j * p; c < (j + 1) * p && c < cols; c++) {
                double x = v[(size_t)r * cols + c];
                if (isfinite(x)) s += x, n++;
            }
            ov[(size_t)r * nc + j] = n ? s / n : NAN;
        }
    }
    *vout = ov, *kout = ok, *per = p;
    return nc;
}
