/* tensorboard — what the run shows TensorBoard (RUN_DIR/tb/, monitor.tensorboard) and the
 * gradient histograms of metrics.jsonl (grad_hist, monitor.histogram_interval); rank 0.
 *
 * Scalars: every numeric key of each train and eval record of metrics.jsonl, as the
 * record's builder made it (train_metrics_write hands the record here before stamping it),
 * under the tag "<kind>/<key>" at the record's step: the two views cannot disagree.
 * Each launch opens a new event file in RUN_DIR/tb (events.out.tfevents.<time>.<host>.
 * <pid>.<n>), as TensorBoard expects of a job that is requeued; a record flushes the file.
 *
 * Histograms, every monitor.histogram_interval steps: per model layer (the parameter
 * table's layer index) the averaged gradient the optimizer applies, before clipping
 * (dense, ZeRO-1 and DGC-Pro alike: step.c calls train_tensorboard_grads where the
 * reduction or exchange has left it in the gradient buffer of every rank), and after the
 * update the layer's weights: TensorBoard histograms grad/<name> and weight/<name> over
 * TensorFlow's default buckets (exponential, both signs), and the grad_hist record of
 * log10 |g| in half decades. One pass over each layer's floats serves both gradient
 * histograms; everything is sized at setup, so a histogram step allocates only the
 * JSON record. */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record/tfevent.h"
#include "observe.h"

/* grad_hist's bins: edges 10^-10, 10^-9.5, .. 10^2 of |g|. */
#define TB_EDGE_LO   (-10.0)
#define TB_EDGE_STEP 0.5
#define TB_BINS      24

/* grad_hist's counts of a layer (or of a thread's share of it). */
typedef struct tb_bins {
    size_t zero, below, above; /* g == 0; 0 < |g| < 1e-10; |g| >= 1e2 or not finite */
    size_t bins[TB_BINS];      /* edge[k] <= log10 |g| < edge[k+1] */
} tb_bins;

/* One layer's grad_hist entry. */
typedef struct tb_layer {
    char name[TRAIN_PROFILE_NAME];  /* "h.3", "wte+wpe" (train_layer_name) */
    size_t count;              /* the layer's parameters */
    tb_bins b;                 /* of the last histogram step */
} tb_layer;

/* A TensorBoard histogram being filled (a layer's, or a thread's share of it). */
typedef struct tb_histo {
    double count[TFEVENT_DEFAULT_BUCKETS];
    double min, max, sum, sum_squares;  /* over the finite values */
} tb_histo;

/* What one OpenMP thread counts of a layer: merged in thread order afterwards. */
typedef struct tb_part {
    tb_histo h;
    tb_bins b;
} tb_part;

/* A thread's share of a tensor is cut in chunks of this many floats (256 KiB). */
#define TB_CHUNK 65536

struct train_tensorboard {
    tfevent *w;                /* RUN_DIR/tb's file of this launch; NULL until monitor.tensorboard is on */
    bool open_failed;          /* a later opening (a hot reload) failed: said once, not tried again */
    long due;                  /* the step whose gradient was histogrammed, 0 when none is pending */
    int nlayers;
    tb_layer *layer;           /* [nlayers] */
    double edge_abs[TB_BINS + 1]; /* 10^edge: the bins' bounds on |g| */
    double limit[TFEVENT_DEFAULT_BUCKETS];
    tb_histo h;                /* one layer's, reused */
    int nthreads;              /* the rank's OpenMP threads (train.threads) */
    tb_part *part;             /* [nthreads] */
};

/* RUN_DIR/tb's writer while monitor.tensorboard is on (opened the first time), else NULL. */
static tfevent *tb_writer(train_run *r, status *st)
{
    train_tensorboard *t = r->tensorboard;
    *st = STATUS_OK;
    if (!config_bool(r->cfg, "monitor.tensorboard")) return NULL;
    if (!t->w && !t->open_failed) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/tb", r->run_dir);
        *st = tfevent_open(&t->w, dir);
        t->open_failed = *st != STATUS_OK;
        if (*st == STATUS_OK) printf("tensorboard: writing %s (tensorboard --logdir %s)\n", tfevent_path(t->w), dir);
    }
    return t->w;
}

/* The averaged gradient and the applied update, as an observer of the step. */
static void tb_grads(void *ctx, long step)
{
    train_tensorboard_grads(ctx, step);
}
static void tb_weights(void *ctx)
{
    train_tensorboard_weights(ctx);
}

status train_tensorboard_setup(train_run *r)
{
    if (r->rt->rank != 0) return STATUS_OK;
    train_tensorboard *t = calloc(1, sizeof *t);
    int nthreads = r->threads > 0 ? r->threads : 1;
    tb_layer *layer = calloc((size_t)r->nlayers, sizeof *layer);
    tb_part *part = calloc((size_t)nthreads, sizeof *part);
    if (!t || !layer || !part) {
        free(t), free(layer), free(part);
        log_error("tensorboard: cannot allocate the histogram state of %d layers and %d threads", r->nlayers,
                  nthreads);
        return STATUS_NOMEM;
    }
    t->nlayers = r->nlayers;
    t->layer = layer;
    t->nthreads = nthreads;
    t->part = part;
    const param_table *pt = model_params(&r->m);
    for (int l = 0; l < t->nlayers; l++) {
        train_layer_name(r, l, layer[l].name, sizeof layer[l].name);
        for (int i = 0; i < r->layer_count[l]; i++) layer[l].count += pt->entries[r->layer_first[l] + i].count;
    }
    for (int k = 0; k <= TB_BINS; k++) t->edge_abs[k] = pow(10.0, TB_EDGE_LO + TB_EDGE_STEP * k);
    tfevent_default_limits(t->limit);
    r->tensorboard = t;
    train_observe(r, &(train_step_observer){ .grads = tb_grads, .applied = tb_weights, .ctx = r });
    status st;
    (void)tb_writer(r, &st);  /* asked for at launch: a file that cannot be made stops the run, as metrics.jsonl */
    return st;
}

void train_tensorboard_free(train_run *r)
{
    train_tensorboard *t = r->tensorboard;
    if (!t) return;
    if (t->w && tfevent_close(t->w) != STATUS_OK) log_warn("tensorboard: the last records may be lost");
    free(t->layer);
    free(t->part);
    free(t);
    r->tensorboard = NULL;
}

void train_tensorboard_record(train_run *r, const void *record)
{
    const json_t *j = record;
    if (!r->tensorboard || !j) return;
    const char *kind = json_string_value(json_object_get(j, "kind"));
    if (!kind || (strcmp(kind, "train") && strcmp(kind, "eval"))) return;
    status st;
    tfevent *w = tb_writer(r, &st);
    if (!w) return;
    json_int_t step = json_integer_value(json_object_get(j, "step"));
    const char *key;
    const json_t *v;
    char tag[TFEVENT_TAG_MAX + 1];
    json_object_foreach((json_t *)j, key, v) {  /* null (a non-finite number) and strings are left out */
        if (!json_is_number(v) || !strcmp(key, "step")) continue;
        snprintf(tag, sizeof tag, "%s/%s", kind, key);
        (void)tfevent_scalar(w, (int64_t)step, tag, json_number_value(v));  /* failures: logged by the writer */
    }
    (void)tfevent_flush(w);
}

/* log10 |v| to within 0.005, for the bins' first guesses: v's exponent, and log2(1 + m)
 * of its mantissa m in [0, 1) as m + 0.3466 m (1 - m) (error under 0.011 in log2);
 * libm's log10 costs ~100 ns per call on some inputs, which made a GPT-2 124M
 * histogram step 40 s. v finite and nonzero. */
static inline double tb_log10_guess(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    int e = (int)(u >> 23 & 0xff);
    if (e == 0) return log10(fabs((double)v));  /* subnormal: rare */
    double m = (double)(u & 0x7fffff) * (1.0 / 8388608.0);
    return ((double)(e - 127) + m + 0.3466 * m * (1 - m)) * 0.30102999566398120;
}

/* One pass over x[0..n): the TensorBoard buckets into h (when h), and grad_hist's bins
 * into g (when g). log10 |x| is estimated once and gives both bins a first guess, which
 * the exact bounds then correct (a step either way at most). */
static void tb_pass(const train_tensorboard *t, const float *x, size_t n, tb_histo *h, tb_bins *g)
{
    const int nb = TFEVENT_DEFAULT_BUCKETS, mid = nb / 2;  /* limit[mid] = 0 */
    const double per_decade = 1.0 / log10(1.1);            /* TensorBoard's buckets per decade */
    const double *ea = t->edge_abs;
    double mn = INFINITY, mx = -INFINITY, s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        if (v == 0) {
            if (g) g->zero++;
            if (h) h->count[mid + 1] += 1;  /* [0, 1e-12) */
            mn = mn < 0 ? mn : 0, mx = mx > 0 ? mx : 0;
            continue;
        }
        if (!isfinite(v)) {  /* NaN, +inf in the last bucket, -inf in the first */
            if (g) g->above++;
            if (h) h->count[v < 0 ? 0 : nb - 1] += 1;
            continue;
        }
        double a = fabs((double)v), l = tb_log10_guess(v);
        if (g) {
            if (a < ea[0]) g->below++;
            else if (a >= ea[TB_BINS]) g->above++;
            else {
                int k = (int)((l - TB_EDGE_LO) / TB_EDGE_STEP);
                k = k < 0 ? 0 : k > TB_BINS - 1 ? TB_BINS - 1 : k;
                while (k > 0 && a < ea[k]) k--;
                while (k < TB_BINS - 1 && a >= ea[k + 1]) k++;
                g->bins[k]++;
            }
        }
        if (h) {
            double e = (l + 12) * per_decade + 1;  /* positive limits: 1e-12 x 1.1^i */
            int i0 = e < 0 ? 0 : e > mid ? mid : (int)e;
            int guess = v > 0 ? mid + 1 + i0 : mid - i0;
            h->count[tfevent_bucket(t->limit, nb, v, guess)] += 1;
            mn = v < mn ? v : mn, mx = v > mx ? v : mx;
            s += v, s2 += (double)v * v;
        }
    }
    if (h) {
        h->min = fmin(h->min, mn), h->max = fmax(h->max, mx);
        h->sum += s, h->sum_squares += s2;
    }
}

static void tb_histo_reset(tb_histo *h)
{
    memset(h->count, 0, sizeof h->count);
    h->min = INFINITY, h->max = -INFINITY, h->sum = h->sum_squares = 0;
}

/* Layer l of buffer base (the gradients or the parameters) through tb_pass on the rank's
 * OpenMP threads, each into its own part (chunks of every tensor, static schedule), then
 * merged: the TensorBoard histogram into t->h (with_histo), grad_hist's bins into *g (g
 * not NULL). Counts are exact whatever the threads; sum and sum_squares round in their order. */
static void tb_layer_pass(train_run *r, int l, const float *base, bool with_histo, tb_bins *g)
{
    const param_table *pt = model_params(&r->m);
    train_tensorboard *t = r->tensorboard;
    for (int k = 0; k < t->nthreads; k++) {
        if (with_histo) tb_histo_reset(&t->part[k].h);
        memset(&t->part[k].b, 0, sizeof t->part[k].b);
    }
    int first = r->layer_first[l], ntensors = r->layer_count[l];
#pragma omp parallel num_threads(t->nthreads)
    {
        tb_part *p = &t->part[omp_get_thread_num()];
        for (int i = 0; i < ntensors; i++) {
            const param_entry *e = &pt->entries[first + i];
            size_t chunks = (e->count + TB_CHUNK - 1) / TB_CHUNK;
#pragma omp for schedule(static) nowait
            for (size_t c = 0; c < chunks; c++) {
                size_t lo = c * TB_CHUNK, n = e->count - lo < TB_CHUNK ? e->count - lo : TB_CHUNK;
                tb_pass(t, base + e->offset + lo, n, with_histo ? &p->h : NULL, g ? &p->b : NULL);
            }
        }
    }
    if (with_histo) tb_histo_reset(&t->h);
    if (g) memset(g, 0, sizeof *g);
    for (int k = 0; k < t->nthreads; k++) {
        const tb_part *p = &t->part[k];
        if (with_histo) {
            for (int j = 0; j < TFEVENT_DEFAULT_BUCKETS; j++) t->h.count[j] += p->h.count[j];
            t->h.min = fmin(t->h.min, p->h.min), t->h.max = fmax(t->h.max, p->h.max);
            t->h.sum += p->h.sum, t->h.sum_squares += p->h.sum_squares;
        }
        if (g) {
            g->zero += p->b.zero, g->below += p->b.below, g->above += p->b.above;
            for (int j = 0; j < TB_BINS; j++) g->bins[j] += p->b.bins[j];
        }
    }
}

static void tb_write_histo(train_run *r, tfevent *w, long step, const char *what, int l)
{
    train_tensorboard *t = r->tensorboard;
    tb_histo *h = &t->h;
    char tag[TFEVENT_TAG_MAX + 1];
    snprintf(tag, sizeof tag, "%s/%s", what, t->layer[l].name);
    tfevent_histo p = { .min = isfinite(h->min) ? h->min : 0, .max = isfinite(h->max) ? h->max : 0,
                        .num = (double)t->layer[l].count, .sum = h->sum, .sum_squares = h->sum_squares,
                        .n = TFEVENT_DEFAULT_BUCKETS, .limit = t->limit, .count = h->count };
    (void)tfevent_histogram(w, step, tag, &p);  /* failures: logged by the writer */
}

void train_tensorboard_grads(train_run *r, long step)
{
    train_tensorboard *t = r->tensorboard;
    long every = (long)config_int(r->cfg, "monitor.histogram_interval");
    if (!t || every <= 0 || step % every != 0) return;
    status st;
    tfevent *w = tb_writer(r, &st);
    const float *grads = model_buffers(&r->m)->grads;
    for (int l = 0; l < t->nlayers; l++) {
        tb_layer_pass(r, l, grads, w != NULL, &t->layer[l].b);
        if (w) tb_write_histo(r, w, step, "grad", l);
    }
    t->due = step;
}

/* The median of log10 |g| read off the bins (linear inside the bin it falls in; the
 * bound of below or above when it falls there); NaN when more than half are zero. */
static double tb_median(const tb_bins *g, size_t count)
{
    double half = 0.5 * (double)count, cum = (double)g->zero;
    if (cum > half || count == 0) return NAN;
    cum += (double)g->below;
    if (cum > half) return TB_EDGE_LO;
    for (int k = 0; k < TB_BINS; k++) {
        double c = (double)g->bins[k];
        if (cum + c > half) return TB_EDGE_LO + TB_EDGE_STEP * (k + (half - cum) / c);
        cum += c;
    }
    return TB_EDGE_LO + TB_EDGE_STEP * TB_BINS;
}

static json_t *tb_grad_hist_record(const train_tensorboard *t, long step)
{
    json_t *edges = json_array(), *layers = json_array();
    for (int k = 0; k <= TB_BINS; k++) json_array_append_new(edges, json_real(TB_EDGE_LO + TB_EDGE_STEP * k));
    for (int l = 0; l < t->nlayers; l++) {
        const tb_layer *y = &t->layer[l];
        const tb_bins *g = &y->b;
        json_t *bins = json_array();
        for (int k = 0; k < TB_BINS; k++) json_array_append_new(bins, json_integer((json_int_t)g->bins[k]));
        double med = tb_median(g, y->count);
        json_array_append_new(layers, json_pack("{s:i, s:s, s:I, s:I, s:I, s:I, s:o, s:o}", "layer", l, "name", y->name,
                                                "count", (json_int_t)y->count, "zero", (json_int_t)g->zero, "below",
                                                (json_int_t)g->below, "above", (json_int_t)g->above, "counts", bins,
                                                "median_log10",
                                                isfinite(med) ? json_real(med) : json_null()));
    }
    return json_pack("{s:s, s:I, s:o, s:o}", "kind", "grad_hist", "step", (json_int_t)step, "edges_log10", edges,
                     "layers", layers);
}

void train_tensorboard_weights(train_run *r)
{
    train_tensorboard *t = r->tensorboard;
    if (!t || t->due == 0) return;
    long step = t->due;
    t->due = 0;
    status st;
    tfevent *w = tb_writer(r, &st);
    if (w) {
        const float *params = model_buffers(&r->m)->params;
        for (int l = 0; l < t->nlayers; l++) {
            tb_layer_pass(r, l, params, true, NULL);
            tb_write_histo(r, w, step, "weight", l);
        }
        (void)tfevent_flush(w);
    }
    train_emit(r, tb_grad_hist_record(t, step));
}
