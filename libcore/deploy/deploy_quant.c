/* deploy_quant — weight quantisation (FP16 storage, INT8 per-channel weights with
 * calibrated uint8 inputs, AUTO per layer) under an accuracy budget, and the top-1
 * accuracy measurement the budget and pruning use.
 *
 * The one design decision: every quantised variant of a layer is built once, up front —
 * its int8 weight and scale constants are added beside the fp32 weight, and the layer's
 * original node is kept in a snapshot — so switching a layer between fp32 and int8 is
 * just rewriting its node record. The budget loop (put layers back to fp32, most
 * sensitive first) and the per-layer timing of AUTO then only flip records and re-run;
 * nano_graph_compact drops whichever constants end up unused.
 *
 * Runs go through a planned "view" of the graph (the graph struct with its own copy of
 * the tensor table, which the memory plan writes into), so deploy_accuracy can measure a
 * const graph and the caller's graph is not re-planned by a measurement. */
#include "deploy/deploy.h"
#include "nano/nano.h"
#include "nano/nano_kern.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- running a graph over a data set -------------------------------------------- */

typedef struct runner {
    nano_graph view;      /* g with its own tensor table, planned */
    nano_model *m;
    nano_io in;           /* input 0: (batch, sample...) */
    int64_t batch;
    size_t sample_bytes;
} runner;

static void runner_close(runner *r)
{
    nano_model_free(r->m);
    free(r->view.tensors);
    memset(r, 0, sizeof *r);
}

/* A model of g fed from d (d may be NULL: no data checks). */
static nano_status runner_open(runner *r, const nano_graph *g, const deploy_data *d, int threads, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (g->ninputs != 1) {
        snprintf(err, errlen, "the graph has %d inputs; calibration and accuracy runs feed exactly one", g->ninputs);
        return NANO_E_UNSUPPORTED;
    }
    r->view = *g;
    r->view.tensors = malloc(((size_t)g->ntensors + 1) * sizeof *g->tensors);
    if (!r->view.tensors) {
        snprintf(err, errlen, "out of memory");
        return NANO_E_NOMEM;
    }
    memcpy(r->view.tensors, g->tensors, (size_t)g->ntensors * sizeof *g->tensors);
    nano_status st = nano_graph_plan(&r->view, err, errlen);
    if (st == NANO_OK) st = nano_model_from_graph(&r->m, &r->view, err, errlen);
    if (st != NANO_OK) {
        runner_close(r);
        return st;
    }
    nano_model_set_threads(r->m, threads > 0 ? threads : 1);
    r->in = nano_model_input(r->m, 0);
    r->batch = r->in.ndim ? r->in.shape[0] : 1;
    r->sample_bytes = r->in.bytes / (size_t)r->batch;
    if (!d) return NANO_OK;
    size_t have = nano_dtype_size(d->dtype);
    for (int k = 1; k < d->ndim; k++) have *= (size_t)d->shape[k];
    if (d->dtype != r->in.dtype || have != r->sample_bytes) {
        snprintf(err, errlen, "input %s takes samples of %zu bytes of %s (batch %lld), the data set has %zu bytes of %s",
                 r->in.name, r->sample_bytes, nano_dtype_name(r->in.dtype), (long long)r->batch, have,
                 nano_dtype_name(d->dtype));
        runner_close(r);
        return NANO_E_ARG;
    }
    return NANO_OK;
}

/* Copies samples first.. of d into the input; past the end it repeats from sample 0
 * (wrap) or writes zeros. Returns the real samples copied. */
static int64_t runner_fill(runner *r, const deploy_data *d, int64_t first, int wrap)
{
    int64_t n = d->shape[0], real = 0;
    for (int64_t b = 0; b < r->batch; b++) {
        char *dst = (char *)r->in.data + (size_t)b * r->sample_bytes;
        int64_t s = first + b;
        if (s < n) real++;
        if (s >= n && !wrap) memset(dst, 0, r->sample_bytes);
        else memcpy(dst, (const char *)d->x + (size_t)(s % n) * r->sample_bytes, r->sample_bytes);
    }
    return real;
}

static nano_status runner_run(runner *r, char *err, size_t errlen)
{
    nano_status st = nano_model_run(r->m);
    if (st != NANO_OK) snprintf(err, errlen, "the model failed to run (status %d)", (int)st);
    return st;
}

double deploy_accuracy(const nano_graph *g, const deploy_data *d, int threads, char *err, size_t errlen)
{
    if (!d || !d->labels) {
        snprintf(err, errlen, "accuracy needs a data set with labels");
        return -1;
    }
    runner r;
    if (runner_open(&r, g, d, threads, err, errlen) != NANO_OK) return -1;
    nano_io out = nano_model_output(r.m, 0);
    int64_t C = out.ndim ? out.shape[out.ndim - 1] : 1, rows = (int64_t)(out.bytes / sizeof(float)) / C;
    if (out.dtype != NANO_DT_F32 || rows != r.batch) {
        snprintf(err, errlen, "output %s has %lld rows of %lld scores for a batch of %lld: top-1 needs one f32 row per sample",
                 out.name, (long long)rows, (long long)C, (long long)r.batch);
        runner_close(&r);
        return -1;
    }
    int64_t correct = 0, n = d->shape[0];
    for (int64_t first = 0; first < n; first += r.batch) {
        int64_t real = runner_fill(&r, d, first, 0);
        if (runner_run(&r, err, errlen) != NANO_OK) {
            runner_close(&r);
            return -1;
        }
        const float *y = out.data;  /* (batch, C) */
        for (int64_t b = 0; b < real; b++) {
            int64_t best = 0;
            for (int64_t c = 1; c < C; c++)
                if (y[b * C + c] > y[b * C + best]) best = c;
            correct += best == d->labels[first + b];
        }
    }
    runner_close(&r);
    return (double)correct / (double)n;
}

/* Output 0 of g on the first batch of d (wrapped), malloc'd into *y (*n floats). */
static nano_status first_batch_output(const nano_graph *g, const deploy_data *d, int threads, float **y, size_t *n,
                                      char *err, size_t errlen)
{
    runner r;
    nano_status st = runner_open(&r, g, d, threads, err, errlen);
    if (st != NANO_OK) return st;
    runner_fill(&r, d, 0, 1);
    if ((st = runner_run(&r, err, errlen)) == NANO_OK) {
        nano_io out = nano_model_output(r.m, 0);
        *n = out.bytes / sizeof(float);
        if (!(*y = malloc(out.bytes + 1))) st = NANO_E_NOMEM;
        else memcpy(*y, out.data, out.bytes);
    }
    runner_close(&r);
    return st;
}

/* ---- calibration: the range of every conv/GEMM input ---------------------------- */

typedef struct ranges {
    const char *want; /* [ntensors] 1: record this tensor */
    float *lo, *hi;   /* [ntensors] */
} ranges;

static void widen_range(ranges *c, int t, const float *x, int64_t n)
{
    float lo = c->lo[t], hi = c->hi[t];
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    c->lo[t] = lo;
    c->hi[t] = hi;
}

static void observe(void *ctx, const nano_graph *g, int node, const float *const *outs)
{
    ranges *c = ctx;
    const nano_node *nd = &g->nodes[node];
    for (int o = 0; o < nd->nout; o++)
        if (c->want[nd->out[o]]) widen_range(c, nd->out[o], outs[o], nano_tensor_numel(&g->tensors[nd->out[o]]));
}

/* Runs g over every sample of d (the last batch wrapped) recording the wanted ranges. */
static nano_status calibrate(const nano_graph *g, const deploy_data *d, int threads, ranges *c, char *err, size_t errlen)
{
    runner r;
    nano_status st = runner_open(&r, g, d, threads, err, errlen);
    if (st != NANO_OK) return st;
    nano_model_set_observer(r.m, observe, c);
    int in = g->inputs[0];
    for (int64_t first = 0; st == NANO_OK && first < d->shape[0]; first += r.batch) {
        runner_fill(&r, d, first, 1);
        if (c->want[in]) widen_range(c, in, r.in.data, (int64_t)(r.in.bytes / sizeof(float)));
        st = runner_run(&r, err, errlen);
    }
    runner_close(&r);
    return st;
}

/* ---- layers ---------------------------------------------------------------------- */

typedef struct qlayer {
    int node;            /* the CONV or GEMM */
    int wq, ws;          /* its int8 weight (shape of W) and per-row scales (M) */
    float x_scale;       /* the input's uint8 quantisation */
    int x_zero;
    double macs;         /* multiply-adds per run */
    double sens;         /* relative L2 error of output 0 with only this layer int8 */
    int want;            /* int8 chosen (AUTO: faster here, or big enough on arm64) */
} qlayer;

/* A CONV, or a GEMM the int8 kernel takes (W (N,K) constant, trans_b, alpha 1, C a bias). */
static int quantisable(const nano_graph *g, int n)
{
    const nano_node *nd = &g->nodes[n];
    if ((nd->op != NANO_OP_CONV && nd->op != NANO_OP_GEMM) || nd->nin < 2) return 0;
    const nano_tensor *w = &g->tensors[nd->in[1]];
    if (w->kind != NANO_T_CONST || w->dtype != NANO_DT_F32 || g->tensors[nd->in[0]].dtype != NANO_DT_F32) return 0;
    if (nd->op == NANO_OP_CONV) return w->ndim == 4;
    return w->ndim == 2 && nd->a.trans_b && !nd->a.trans_a && nd->a.alpha == 1.0f &&
           (nd->nin < 3 || nd->in[2] < 0 || nd->a.beta == 1.0f);
}

/* The int8 node of layer L made from the fp32 node fp. */
static nano_node int8_node(const nano_node *fp, const qlayer *L)
{
    nano_node q = *fp;
    if (q.nin < 3) q.in[2] = -1;
    q.in[1] = L->wq;
    q.in[3] = L->ws;
    q.nin = 4;
    q.a.q_scale = L->x_scale;
    q.a.q_zero = L->x_zero;
    return q;
}

static void set_layer(nano_graph *g, const nano_node *orig, const qlayer *L, int int8)
{
    g->nodes[L->node] = int8 ? int8_node(&orig[L->node], L) : orig[L->node];
}

/* Adds layer L's int8 weight and scales; (x_scale, x_zero) covers [min(0,lo), max(0,hi)]. */
static nano_status make_int8(nano_graph *g, qlayer *L, float lo, float hi, char *err, size_t errlen)
{
    const nano_node *nd = &g->nodes[L->node];
    int w = nd->in[1];
    const nano_tensor *wt = &g->tensors[w];
    int64_t N = wt->shape[0], K = nano_tensor_numel(wt) / N, shape[NANO_MAX_DIMS];
    int ndim = wt->ndim;
    memcpy(shape, wt->shape, sizeof shape);
    L->macs = (double)nano_tensor_numel(&g->tensors[nd->out[0]]) * (double)K;
    int8_t *q = malloc((size_t)(N * K));
    float *s = malloc((size_t)N * sizeof *s);
    char name[256];
    if (!q || !s) goto nomem;
    nano_quantize_rows(wt->data, (int)N, (int)K, q, s);
    snprintf(name, sizeof name, "%s:w_int8", nano_node_name(g, L->node));
    if ((L->wq = nano_graph_add_tensor(g, name, NANO_DT_I8, NANO_T_CONST, ndim, shape, q, 1)) < 0) goto nomem;
    q = NULL;
    snprintf(name, sizeof name, "%s:w_scale", nano_node_name(g, L->node));
    if ((L->ws = nano_graph_add_tensor(g, name, NANO_DT_F32, NANO_T_CONST, 1, &N, s, 1)) < 0) goto nomem;
    lo = lo < 0 ? lo : 0;
    hi = hi > 0 ? hi : 0;
    if (!(hi - lo > 1e-30f)) hi = lo + 1.0f;  /* never seen, or all zero: any scale serves */
    L->x_scale = (hi - lo) / 255.0f;
    long z = lround(-lo / L->x_scale);
    L->x_zero = (int)(z < 0 ? 0 : z > 255 ? 255 : z);
    return NANO_OK;
nomem:
    free(q);
    free(s);
    snprintf(err, errlen, "node %s: out of memory quantising its weight", nano_node_name(g, L->node));
    return NANO_E_NOMEM;
}

/* ---- AUTO: time a layer on its own ----------------------------------------------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of 7 runs of node nd of g alone (a one-node graph borrowing its
 * constants, input zeros), or -1 when it cannot run (err says why). */
static double time_node(const nano_graph *g, const nano_node *nd, int threads, char *err, size_t errlen)
{
    nano_graph one;
    nano_graph_init(&one);
    int32_t in[NANO_MAX_IN], out;
    double t = -1, runs[7];
    for (int i = 0; i < nd->nin; i++) {
        const nano_tensor *x = nd->in[i] >= 0 ? &g->tensors[nd->in[i]] : NULL;
        in[i] = !x ? -1
              : nano_graph_add_tensor(&one, nano_tensor_name(g, nd->in[i]), x->dtype,
                                      x->kind == NANO_T_CONST ? NANO_T_CONST : NANO_T_INPUT, x->ndim, x->shape, x->data, 0);
    }
    const nano_tensor *y = &g->tensors[nd->out[0]];
    out = nano_graph_add_tensor(&one, nano_tensor_name(g, nd->out[0]), y->dtype, NANO_T_OUTPUT, y->ndim, y->shape, NULL, 0);
    runner r;
    if (out < 0 || nano_graph_add_node(&one, nd->op, "timed", nd->nin, in, 1, &out, &nd->a) < 0 ||
        runner_open(&r, &one, NULL, threads, err, errlen) != NANO_OK)
        goto done;
    int ok = runner_run(&r, err, errlen) == NANO_OK;
    for (int k = 0; ok && k < 7; k++) {
        double t0 = now();
        ok = runner_run(&r, err, errlen) == NANO_OK;
        runs[k] = now() - t0;
    }
    runner_close(&r);
    if (ok) {
        qsort(runs, 7, sizeof *runs, cmp_double);
        t = runs[3];
    }
done:
    nano_graph_free(&one);
    return t;
}

/* ---- the pass -------------------------------------------------------------------- */

/* Bytes of the constants some node reads. */
static int64_t weight_bytes(const nano_graph *g)
{
    char *seen = calloc((size_t)g->ntensors + 1, 1);
    int64_t b = 0;
    for (int n = 0; seen && n < g->nnodes; n++)
        for (int i = 0; i < g->nodes[n].nin; i++) {
            int t = g->nodes[n].in[i];
            if (t >= 0 && g->tensors[t].kind == NANO_T_CONST && !seen[t]) {
                seen[t] = 1;
                b += (int64_t)nano_tensor_bytes(&g->tensors[t]);
            }
        }
    free(seen);
    return b;
}

/* FP16: conv/GEMM weights, and other f32 constants of 1024+ elements that no node reads
 * as a bias or normalisation vector, become IEEE half. */
static nano_status to_fp16(nano_graph *g, deploy_report *rep, char *err, size_t errlen)
{
    char *role = calloc((size_t)g->ntensors + 1, 1);  /* 1 weight, 2 bias-like */
    if (!role) goto nomem;
    for (int n = 0; n < g->nnodes; n++) {
        const nano_node *nd = &g->nodes[n];
        int wt = nd->op == NANO_OP_CONV || nd->op == NANO_OP_GEMM;
        int norm = nd->op == NANO_OP_BATCHNORM || nd->op == NANO_OP_LAYERNORM;
        for (int i = 0; i < nd->nin; i++)
            if (nd->in[i] >= 0 && ((wt && i >= 2) || (norm && i >= 1))) role[nd->in[i]] = 2;
        if (wt && nd->nin >= 2 && role[nd->in[1]] != 2) role[nd->in[1]] = 1;
    }
    for (int n = 0; n < g->nnodes; n++) {
        const nano_node *nd = &g->nodes[n];
        if ((nd->op == NANO_OP_CONV || nd->op == NANO_OP_GEMM) && nd->nin >= 2 && role[nd->in[1]] == 1 &&
            g->tensors[nd->in[1]].kind == NANO_T_CONST && g->tensors[nd->in[1]].dtype == NANO_DT_F32)
            rep->layers_fp16++;
    }
    for (int t = 0; t < g->ntensors; t++) {
        nano_tensor *x = &g->tensors[t];
        size_t n = (size_t)nano_tensor_numel(x);
        if (x->kind != NANO_T_CONST || x->dtype != NANO_DT_F32 || role[t] == 2 || (role[t] != 1 && n < 1024)) continue;
        uint16_t *h = malloc(n * sizeof *h + 1);
        if (!h) goto nomem;
        for (size_t i = 0; i < n; i++) h[i] = nano_f32_to_f16(((const float *)x->data)[i]);
        nano_graph_set_data(g, t, NANO_DT_F16, x->ndim, x->shape, h, 1);
    }
    free(role);
    return NANO_OK;
nomem:
    free(role);
    snprintf(err, errlen, "fp16: out of memory");
    return NANO_E_NOMEM;
}

static int cmp_sens_desc(const void *a, const void *b)
{
    const qlayer *x = *(const qlayer *const *)a, *y = *(const qlayer *const *)b;
    return (x->sens < y->sens) - (x->sens > y->sens);
}

/* Relative L2 error of output 0 on the first calibration batch with only layer L int8. */
static nano_status sensitivity(nano_graph *g, const nano_node *orig, qlayer *L, const float *ref, size_t nref,
                               const deploy_opts *o, char *err, size_t errlen)
{
    float *y = NULL;
    size_t n = 0;
    set_layer(g, orig, L, 1);
    nano_status st = first_batch_output(g, o->calib, o->threads, &y, &n, err, errlen);
    set_layer(g, orig, L, 0);
    if (st != NANO_OK) return st;
    double e = 0, r = 0;
    for (size_t i = 0; i < n && i < nref; i++) {
        e += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    L->sens = r > 0 ? sqrt(e / r) : sqrt(e);
    free(y);
    return NANO_OK;
}

/* The budget: layers back to fp32, most sensitive first, until the top-1 drop on
 * opts->eval is within max_drop. */
static nano_status keep_budget(nano_graph *g, const nano_node *orig, qlayer *L, int nl, const deploy_opts *o,
                               deploy_report *rep, char *err, size_t errlen)
{
    double drop = rep->acc_before - rep->acc_after;
    if (drop <= o->max_drop) return NANO_OK;
    float *ref = NULL;
    size_t nref = 0;
    qlayer **order = malloc(((size_t)nl + 1) * sizeof *order);
    int k = 0;
    for (int i = 0; i < nl; i++) set_layer(g, orig, &L[i], 0);
    nano_status st = order ? first_batch_output(g, o->calib, o->threads, &ref, &nref, err, errlen) : NANO_E_NOMEM;
    for (int i = 0; st == NANO_OK && i < nl; i++)
        if (L[i].want) {
            order[k++] = &L[i];
            st = sensitivity(g, orig, &L[i], ref, nref, o, err, errlen);
        }
    for (int i = 0; i < nl; i++) set_layer(g, orig, &L[i], L[i].want);
    if (st == NANO_OK) qsort(order, (size_t)k, sizeof *order, cmp_sens_desc);
    for (int i = 0; st == NANO_OK && i < k && drop > o->max_drop; i++) {
        order[i]->want = 0;
        set_layer(g, orig, order[i], 0);
        rep->acc_after = deploy_accuracy(g, o->eval, o->threads, err, errlen);
        if (rep->acc_after < 0) st = NANO_E_ARG;
        drop = rep->acc_before - rep->acc_after;
    }
    if (st == NANO_OK && drop > o->max_drop) {
        snprintf(err, errlen, "int8: a top-1 drop of %.4f stays above the budget %.4f with every layer in fp32", drop, o->max_drop);
        st = NANO_E_ARG;
    }
    free(ref);
    free(order);
    return st;
}

/* INT8 and AUTO. */
static nano_status to_int8(nano_graph *g, const deploy_opts *o, deploy_report *rep, char *err, size_t errlen)
{
    if (!o->calib) {
        snprintf(err, errlen, "int8 quantisation needs a calibration set (opts->calib)");
        return NANO_E_ARG;
    }
    int nn = g->nnodes, nl = 0;
    nano_node *orig = malloc(((size_t)nn + 1) * sizeof *orig);
    qlayer *L = calloc((size_t)nn + 1, sizeof *L);
    ranges c = {calloc((size_t)g->ntensors + 1, 1), malloc(((size_t)g->ntensors + 1) * sizeof(float)),
                malloc(((size_t)g->ntensors + 1) * sizeof(float))};
    nano_status st = NANO_OK;
    if (!orig || !L || !c.want || !c.lo || !c.hi) {
        snprintf(err, errlen, "int8: out of memory");
        st = NANO_E_NOMEM;
        goto done;
    }
    memcpy(orig, g->nodes, (size_t)nn * sizeof *orig);
    for (int t = 0; t < g->ntensors; t++) c.lo[t] = INFINITY, c.hi[t] = -INFINITY;
    for (int n = 0; n < nn; n++)
        if (quantisable(g, n)) {
            L[nl++].node = n;
            ((char *)c.want)[g->nodes[n].in[0]] = 1;
        }
    if ((st = calibrate(g, o->calib, o->threads, &c, err, errlen)) != NANO_OK) goto done;
    for (int i = 0; st == NANO_OK && i < nl; i++) {
        int x = g->nodes[L[i].node].in[0];
        st = make_int8(g, &L[i], c.lo[x], c.hi[x], err, errlen);
        L[i].want = 1;
    }
    for (int i = 0; st == NANO_OK && o->quant == DEPLOY_QUANT_AUTO && i < nl; i++) {
        if (o->target_arm64) {
            L[i].want = L[i].macs >= 1e5;
            continue;
        }
        nano_node q = int8_node(&orig[L[i].node], &L[i]);
        double tf = time_node(g, &orig[L[i].node], o->threads, err, errlen), tq = time_node(g, &q, o->threads, err, errlen);
        if (tf < 0 || tq < 0) st = NANO_E_ARG;
        L[i].want = tq < tf;
    }
    if (st != NANO_OK) goto done;
    for (int i = 0; i < nl; i++) set_layer(g, orig, &L[i], L[i].want);
    if (o->eval && o->eval->labels) {
        rep->acc_after = deploy_accuracy(g, o->eval, o->threads, err, errlen);
        st = rep->acc_after < 0 ? NANO_E_ARG : keep_budget(g, orig, L, nl, o, rep, err, errlen);
    }
    for (int i = 0; i < nl; i++) rep->layers_int8 += L[i].want;
done:
    if (st != NANO_OK && orig) memcpy(g->nodes, orig, (size_t)nn * sizeof *orig);  /* as it came */
    free(orig);
    free(L);
    free((char *)c.want);
    free(c.lo);
    free(c.hi);
    return st;
}

nano_status deploy_quantize(nano_graph *g, const deploy_opts *opts, deploy_report *rep, char *err, size_t errlen)
{
    deploy_report local;
    if (!rep) rep = &local;
    memset(rep, 0, sizeof *rep);
    rep->acc_before = rep->acc_after = -1;
    rep->weight_bytes_before = rep->weight_bytes_after = weight_bytes(g);
    for (int n = 0; n < g->nnodes; n++)
        rep->layers += (g->nodes[n].op == NANO_OP_CONV || g->nodes[n].op == NANO_OP_GEMM) && g->nodes[n].nin >= 2 &&
                       g->tensors[g->nodes[n].in[1]].kind == NANO_T_CONST;
    if (opts->quant == DEPLOY_QUANT_NONE) return NANO_OK;
    if (opts->quant < DEPLOY_QUANT_NONE || opts->quant > DEPLOY_QUANT_AUTO) {
        snprintf(err, errlen, "quantize: unknown mode %d", opts->quant);
        return NANO_E_ARG;
    }
    nano_status st = NANO_OK;
    if (opts->eval && opts->eval->labels) {
        rep->acc_before = deploy_accuracy(g, opts->eval, opts->threads, err, errlen);
        if (rep->acc_before < 0) return NANO_E_ARG;
    }
    st = opts->quant == DEPLOY_QUANT_FP16 ? to_fp16(g, rep, err, errlen) : to_int8(g, opts, rep, err, errlen);
    if (st != NANO_OK) return st;
    nano_graph_compact(g);
    char why[256];
    if ((st = nano_graph_infer_shapes(g, why, sizeof why)) != NANO_OK) {
        snprintf(err, errlen, "quantize: the quantised graph does not check: %s", why);
        return st;
    }
    if (opts->quant == DEPLOY_QUANT_FP16 && rep->acc_before >= 0) {
        rep->acc_after = deploy_accuracy(g, opts->eval, opts->threads, err, errlen);
        if (rep->acc_after < 0) return NANO_E_ARG;
    }
    rep->weight_bytes_after = weight_bytes(g);
    return NANO_OK;
}
