/* deploy_prune — conv/GEMM weight pruning: unstructured (the smallest |w| of each layer
 * set to zero) or structured (whole output channels of a conv removed, with the matching
 * input channels of the conv that reads it, which shrinks the tensors and the work).
 *
 * The one design decision: a pruning level is applied to a snapshot of the node records
 * and always writes NEW constants (the original weights stay in the graph, unread, until
 * the final nano_graph_compact). Trying another level is then "restore the records,
 * apply again" with no copy of the graph, which is what the search for the largest level
 * within the accuracy budget (opts->eval, opts->max_drop) does: the target first, then a
 * bisection between 0 and it, assuming the drop grows with the sparsity. */
#include "deploy/deploy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BISECT_STEPS 4

static int const_w(const nano_graph *g, int t)
{
    return t >= 0 && g->tensors[t].kind == NANO_T_CONST && g->tensors[t].dtype == NANO_DT_F32 && g->tensors[t].data;
}

/* The node reading t when it is the only one and t is no graph output, else -1. */
static int only_reader(const nano_graph *g, int t)
{
    int r = -1;
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == t) return -1;
    for (int n = 0; n < g->nnodes; n++)
        for (int i = 0; i < g->nodes[n].nin; i++)
            if (g->nodes[n].in[i] == t) {
                if (r >= 0 && r != n) return -1;
                r = n;
            }
    return r;
}

/* A new constant named "<node>:<what>" (data taken over); -1 when out of memory. */
static int new_const(nano_graph *g, int n, const char *what, int ndim, const int64_t *shape, float *data)
{
    char name[256];
    snprintf(name, sizeof name, "%s:%s", nano_node_name(g, n), what);
    int t = nano_graph_add_tensor(g, name, NANO_DT_F32, NANO_T_CONST, ndim, shape, data, 1);
    if (t < 0) free(data);
    return t;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* ---- unstructured ---------------------------------------------------------------- */

/* Layer n's weight with its floor(s·n) smallest |w| set to zero, as a new constant. */
static nano_status prune_magnitude(nano_graph *g, int n, double s, int64_t *zeros, char *err, size_t errlen)
{
    int w = g->nodes[n].in[1];
    const nano_tensor *wt = &g->tensors[w];
    int64_t cnt = nano_tensor_numel(wt), k = (int64_t)floor(s * (double)cnt), shape[NANO_MAX_DIMS];
    int ndim = wt->ndim;
    memcpy(shape, wt->shape, sizeof shape);
    float *mag = malloc((size_t)cnt * sizeof *mag + 1), *out = malloc((size_t)cnt * sizeof *out + 1);
    if (!mag || !out) {
        free(mag), free(out);
        snprintf(err, errlen, "prune: out of memory for node %s", nano_node_name(g, n));
        return NANO_E_NOMEM;
    }
    const float *src = wt->data;
    for (int64_t i = 0; i < cnt; i++) mag[i] = fabsf(src[i]);
    memcpy(out, src, (size_t)cnt * sizeof *out);
    if (k > 0) {
        qsort(mag, (size_t)cnt, sizeof *mag, cmp_float);
        float thr = mag[k - 1];
        int64_t z = 0;
        for (int64_t i = 0; i < cnt; i++)
            if (fabsf(out[i]) < thr) out[i] = 0, z++;
        for (int64_t i = 0; i < cnt && z < k; i++)
            if (fabsf(out[i]) == thr && out[i] != 0) out[i] = 0, z++;
    }
    for (int64_t i = 0; i < cnt; i++) *zeros += out[i] == 0;
    free(mag);
    int t = new_const(g, n, "w_pruned", ndim, shape, out);
    if (t < 0) {
        snprintf(err, errlen, "prune: out of memory for node %s", nano_node_name(g, n));
        return NANO_E_NOMEM;
    }
    g->nodes[n].in[1] = t;
    return NANO_OK;
}

/* ---- structured: conv A -> [BN] -> conv B --------------------------------------- */

/* The rows of the (rows, per) f32 constant t listed in keep, as a new constant with
 * dimension `dim` (0: rows, 1: the second dimension, for B's input channels) shrunk. */
static int take(nano_graph *g, int n, const char *what, int t, int dim, const int *keep, int nk)
{
    const nano_tensor *x = &g->tensors[t];
    int64_t shape[NANO_MAX_DIMS], outer = 1, inner = 1;
    int ndim = x->ndim > 0 ? x->ndim : 1;
    memcpy(shape, x->shape, sizeof shape);
    if (x->ndim == 0) shape[0] = 1;
    for (int d = 0; d < dim; d++) outer *= shape[d];
    for (int d = dim + 1; d < ndim; d++) inner *= shape[d];
    int64_t full = shape[dim];
    shape[dim] = nk;
    float *y = malloc((size_t)(outer * nk * inner) * sizeof *y + 1);
    if (!y) return -1;
    const float *src = x->data;
    for (int64_t o = 0; o < outer; o++)
        for (int j = 0; j < nk; j++)
            memcpy(y + (o * nk + j) * inner, src + (o * full + keep[j]) * inner, (size_t)inner * sizeof *y);
    return new_const(g, n, what, ndim, shape, y);
}

/* The node after conv a whose input channels follow a's output channels: a conv B
 * (dense) reading a's output directly or through a batch norm; *bn gets the BN or -1. */
static int channel_reader(const nano_graph *g, int a, int *bn)
{
    *bn = -1;
    int r = only_reader(g, g->nodes[a].out[0]);
    if (r >= 0 && g->nodes[r].op == NANO_OP_BATCHNORM && g->nodes[r].in[0] == g->nodes[a].out[0]) {
        *bn = r;
        r = only_reader(g, g->nodes[r].out[0]);
    }
    if (r < 0 || g->nodes[r].op != NANO_OP_CONV || g->nodes[r].a.group != 1 || !const_w(g, g->nodes[r].in[1])) return -1;
    if (g->nodes[r].in[0] != g->nodes[*bn >= 0 ? *bn : a].out[0]) return -1;
    return r;
}

static int cmp_l1_desc(const void *x, const void *y, void *ctx)
{
    const double *l1 = ctx;
    double a = l1[*(const int *)x], b = l1[*(const int *)y];
    return (a < b) - (a > b);
}

static int cmp_int(const void *x, const void *y)
{
    return *(const int *)x - *(const int *)y;
}

/* Removes the output channels of conv a with the smallest L1 norms, keeping
 * max(1, round(M·(1−s))); counts the weights removed in *removed. */
static nano_status prune_channels(nano_graph *g, int a, double s, int64_t *removed, char *err, size_t errlen)
{
    int bn, b = channel_reader(g, a, &bn);
    const nano_tensor *wa = &g->tensors[g->nodes[a].in[1]];
    int M = (int)wa->shape[0], nk = (int)lround(M * (1.0 - s));
    int64_t per = nano_tensor_numel(wa) / M;
    if (nk < 1) nk = 1;
    if (b < 0 || nk == M) return NANO_OK;
    int *idx = malloc((size_t)M * sizeof *idx);
    double *l1 = calloc((size_t)M, sizeof *l1);
    if (!idx || !l1) goto nomem;
    const float *w = wa->data;
    for (int m = 0; m < M; m++) {
        idx[m] = m;
        for (int64_t k = 0; k < per; k++) l1[m] += fabs(w[m * per + k]);
    }
    qsort_r(idx, (size_t)M, sizeof *idx, cmp_l1_desc, l1);
    qsort(idx, (size_t)nk, sizeof *idx, cmp_int);  /* the kept channels in their order */
    int64_t per_b = nano_tensor_numel(&g->tensors[g->nodes[b].in[1]]) / g->tensors[g->nodes[b].in[1]].shape[1];
    *removed += (int64_t)(M - nk) * (per + per_b);
    int t;
    if ((t = take(g, a, "w_ch", g->nodes[a].in[1], 0, idx, nk)) < 0) goto nomem;
    g->nodes[a].in[1] = t;
    if (g->nodes[a].nin >= 3 && g->nodes[a].in[2] >= 0) {
        if (!const_w(g, g->nodes[a].in[2]) || (t = take(g, a, "b_ch", g->nodes[a].in[2], 0, idx, nk)) < 0) goto nomem;
        g->nodes[a].in[2] = t;
    }
    for (int i = 1; bn >= 0 && i < 5; i++) {
        if (!const_w(g, g->nodes[bn].in[i]) || (t = take(g, bn, "bn_ch", g->nodes[bn].in[i], 0, idx, nk)) < 0) goto nomem;
        g->nodes[bn].in[i] = t;
    }
    if ((t = take(g, b, "w_in_ch", g->nodes[b].in[1], 1, idx, nk)) < 0) goto nomem;
    g->nodes[b].in[1] = t;
    free(idx);
    free(l1);
    return NANO_OK;
nomem:
    free(idx);
    free(l1);
    snprintf(err, errlen, "prune: node %s: out of memory (or a non-constant bias/BN operand)", nano_node_name(g, a));
    return NANO_E_NOMEM;
}

/* ---- levels and the budget ------------------------------------------------------- */

typedef struct pruner {
    nano_graph *g;
    const deploy_opts *o;
    const nano_node *orig;  /* the node records before any level */
    int first_conv, last_gemm;
    int64_t total;          /* conv/GEMM weight elements before pruning */
    double sparsity;        /* of the level applied last */
} pruner;

/* Restores the records, applies level s and re-infers the shapes. */
static nano_status apply_level(pruner *p, double s, char *err, size_t errlen)
{
    nano_graph *g = p->g;
    memcpy(g->nodes, p->orig, (size_t)g->nnodes * sizeof *g->nodes);
    int64_t count = 0;
    nano_status st = NANO_OK;
    for (int n = 0; st == NANO_OK && s > 0 && n < g->nnodes; n++) {
        int op = g->nodes[n].op;
        if ((op != NANO_OP_CONV && op != NANO_OP_GEMM) || !const_w(g, g->nodes[n].in[1])) continue;
        if (p->o->prune_channels) {
            if (op == NANO_OP_CONV && g->nodes[n].a.group == 1) st = prune_channels(g, n, s, &count, err, errlen);
        } else if (n != p->first_conv && n != p->last_gemm) {
            st = prune_magnitude(g, n, s, &count, err, errlen);
        }
    }
    p->sparsity = p->total ? (double)count / (double)p->total : 0;
    char why[256];
    if (st == NANO_OK && (st = nano_graph_infer_shapes(g, why, sizeof why)) != NANO_OK)
        snprintf(err, errlen, "prune: the pruned graph does not check: %s", why);
    return st;
}

nano_status deploy_prune(nano_graph *g, const deploy_opts *opts, deploy_report *rep, char *err, size_t errlen)
{
    double target = opts->prune;
    if (!(target >= 0 && target < 1)) {
        snprintf(err, errlen, "prune: the sparsity must be in [0, 1), is %g", target);
        return NANO_E_ARG;
    }
    pruner p = {.g = g, .o = opts, .first_conv = -1, .last_gemm = -1};
    for (int n = 0; n < g->nnodes; n++) {
        int op = g->nodes[n].op;
        if ((op != NANO_OP_CONV && op != NANO_OP_GEMM) || !const_w(g, g->nodes[n].in[1])) continue;
        if (op == NANO_OP_CONV && p.first_conv < 0) p.first_conv = n;
        if (op == NANO_OP_GEMM) p.last_gemm = n;
        p.total += nano_tensor_numel(&g->tensors[g->nodes[n].in[1]]);
    }
    if (target == 0) return NANO_OK;
    nano_node *orig = malloc(((size_t)g->nnodes + 1) * sizeof *orig);
    if (!orig) {
        snprintf(err, errlen, "prune: out of memory");
        return NANO_E_NOMEM;
    }
    memcpy(orig, g->nodes, (size_t)g->nnodes * sizeof *orig);
    p.orig = orig;
    nano_status st = NANO_OK;
    int budget = opts->eval && opts->eval->labels;
    double before = budget ? deploy_accuracy(g, opts->eval, opts->threads, err, errlen) : -1;
    if (budget && before < 0) st = NANO_E_ARG;
    if (st == NANO_OK) st = apply_level(&p, target, err, errlen);
    if (st == NANO_OK && budget) {
        double after = deploy_accuracy(g, opts->eval, opts->threads, err, errlen), lo = 0, hi = target, acc_lo = before;
        if (after < 0) st = NANO_E_ARG;
        else if (before - after <= opts->max_drop) lo = target, acc_lo = after;
        for (int k = 0; st == NANO_OK && lo < target && k < BISECT_STEPS; k++) {
            double mid = 0.5 * (lo + hi), acc;
            if ((st = apply_level(&p, mid, err, errlen)) != NANO_OK) break;
            if ((acc = deploy_accuracy(g, opts->eval, opts->threads, err, errlen)) < 0) st = NANO_E_ARG;
            else if (before - acc <= opts->max_drop) lo = mid, acc_lo = acc;
            else hi = mid;
        }
        if (st == NANO_OK && lo != target) st = apply_level(&p, lo, err, errlen);
        if (rep) rep->acc_before = before, rep->acc_after = acc_lo;
    }
    free(orig);
    if (st != NANO_OK) return st;
    nano_graph_compact(g);
    char why[256];
    if ((st = nano_graph_infer_shapes(g, why, sizeof why)) != NANO_OK)
        snprintf(err, errlen, "prune: the pruned graph does not check: %s", why);
    if (rep) rep->sparsity = p.sparsity;
    return st;
}
