/* deploy_opt — the graph passes that change no numbers the model means: constant
 * folding, batch norm folded into the conv/GEMM before it, identities and Reshape chains
 * removed, Gemm/MatMul with a constant right operand turned into a packed-weight GEMM
 * (deploy_fold); activations, biases, the erf GELU and the decomposed layer norm fused
 * into one node each (deploy_fuse).
 *
 * The one design decision: a rewrite never moves a node. A pattern's result takes the
 * place of its LAST node (every input of the pattern — its source tensor and constants —
 * exists before its first node, so the order stays topological), the pattern's other
 * nodes are marked dead (op NANO_OP_NONE) and swept out before nano_graph_compact drops
 * the tensors nobody names any more. New constants are always new tensors (never the old
 * buffer written in place), because an initializer may be borrowed from a mapping or
 * shared by another node. */
#include "deploy/deploy.h"
#include "nano/nano_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEAD NANO_OP_NONE

/* ---- graph queries ------------------------------------------------------------- */

static int is_output(const nano_graph *g, int t)
{
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == t) return 1;
    return 0;
}

/* The live nodes reading t (each node once), up to max of them in r; returns the count. */
static int readers(const nano_graph *g, int t, int *r, int max)
{
    int k = 0;
    for (int n = 0; n < g->nnodes; n++) {
        if (g->nodes[n].op == DEAD) continue;
        for (int i = 0; i < g->nodes[n].nin; i++)
            if (g->nodes[n].in[i] == t) {
                if (k < max) r[k] = n;
                k++;
                break;
            }
    }
    return k;
}

/* The one node reading t when t is no graph output and feeds nothing else, else -1. */
static int sole_reader(const nano_graph *g, int t)
{
    int r[1];
    return t >= 0 && !is_output(g, t) && readers(g, t, r, 1) == 1 ? r[0] : -1;
}

static int writer(const nano_graph *g, int t)
{
    for (int n = 0; n < g->nnodes; n++)
        for (int o = 0; g->nodes[n].op != DEAD && o < g->nodes[n].nout; o++)
            if (g->nodes[n].out[o] == t) return n;
    return -1;
}

static int is_const(const nano_graph *g, int t)
{
    return t >= 0 && g->tensors[t].kind == NANO_T_CONST && g->tensors[t].data;
}

static const float *const_f32(const nano_graph *g, int t)
{
    return is_const(g, t) && g->tensors[t].dtype == NANO_DT_F32 ? g->tensors[t].data : NULL;
}

/* t is a one-element f32 constant within a relative 1e-5 of want. */
static int is_scalar(const nano_graph *g, int t, double want)
{
    const float *v = const_f32(g, t);
    return v && nano_tensor_numel(&g->tensors[t]) == 1 && fabs(v[0] - want) <= 1e-5 * fabs(want) + 1e-7;
}

/* The other operand of a two-input node that reads t, or -2 when it does not read t. */
static int other(const nano_node *nd, int t)
{
    if (nd->nin != 2) return -2;
    return nd->in[0] == t ? nd->in[1] : nd->in[1] == t ? nd->in[0] : -2;
}

static nano_shape shape_of(const nano_tensor *t)
{
    nano_shape s = {.ndim = t->ndim};
    for (int d = 0; d < t->ndim; d++) s.d[d] = t->shape[d];
    return s;
}

static int op_is(const nano_graph *g, int n, int op)
{
    return n >= 0 && g->nodes[n].op == op;
}

/* A new f32 constant named after node n ("<node>:<what>", made unique), data taken over;
 * -1 (data freed) when out of memory. */
static int add_const(nano_graph *g, int n, const char *what, int dtype, int ndim, const int64_t *shape, void *data)
{
    char name[256];
    snprintf(name, sizeof name, "%s:%s", nano_node_name(g, n), what);
    size_t len = strlen(name);
    for (int k = 2; nano_graph_find(g, name) >= 0 && len + 12 < sizeof name; k++)
        snprintf(name + len, sizeof name - len, "#%d", k);
    int t = nano_graph_add_tensor(g, name, dtype, NANO_T_CONST, ndim, shape, data, 1);
    if (t < 0) free(data);
    return t;
}

/* Removes the dead nodes, keeping the order of the others. */
static void sweep(nano_graph *g)
{
    int k = 0;
    for (int n = 0; n < g->nnodes; n++)
        if (g->nodes[n].op != DEAD) g->nodes[k++] = g->nodes[n];
    g->nnodes = k;
}

static nano_status oom(char *err, size_t errlen, const char *where)
{
    snprintf(err, errlen, "%s: out of memory", where);
    return NANO_E_NOMEM;
}

/* ---- constant folding ---------------------------------------------------------- */

/* Runs node n, whose inputs are all constants, once and makes its output a constant.
 * *done is 0 when the op is not one folded here (left to the runtime). */
static nano_status fold_const_node(nano_graph *g, int n, int *done, char *err, size_t errlen)
{
    const nano_node nd = g->nodes[n];
    *done = 0;
    if (nd.nout != 1 || nd.nin < 1 || is_output(g, nd.out[0])) return NANO_OK;
    for (int i = 0; i < nd.nin; i++)
        if (nd.in[i] < 0 || !is_const(g, nd.in[i])) return NANO_OK;
    const nano_tensor *y = &g->tensors[nd.out[0]], *x = &g->tensors[nd.in[0]];
    nano_shape ys = shape_of(y), xs = shape_of(x);
    size_t esize = nano_dtype_size(y->dtype), ny = (size_t)nano_tensor_numel(y);
    int f32 = x->dtype == NANO_DT_F32 && y->dtype == NANO_DT_F32;
    void *out = malloc(ny * esize + 1);
    if (!out) return oom(err, errlen, nano_node_name(g, n));
    int ok = 1;
    switch (nd.op) {
    case NANO_OP_RESHAPE: case NANO_OP_IDENTITY:
        memcpy(out, x->data, ny * esize);
        break;
    case NANO_OP_TRANSPOSE:
        nano_transpose(x->data, &xs, nd.a.perm, out, esize, 1);
        break;
    case NANO_OP_CAST:
        nano_cast(x->data, x->dtype, out, y->dtype, ny);
        break;
    case NANO_OP_SLICE:
        nano_slice(x->data, &xs, nd.a.begin, nd.a.step, out, &ys, esize);
        break;
    case NANO_OP_CONCAT: {
        const void *src[NANO_MAX_IN];
        nano_shape ss[NANO_MAX_IN];
        for (int i = 0; i < nd.nin; i++) {
            src[i] = g->tensors[nd.in[i]].data;
            ss[i] = shape_of(&g->tensors[nd.in[i]]);
        }
        nano_concat(src, ss, nd.nin, nd.a.axis, out, esize);
        break;
    }
    case NANO_OP_GATHER: {
        const nano_tensor *ix = &g->tensors[nd.in[1]];
        nano_shape is = shape_of(ix);
        if (nano_gather(x->data, &xs, nd.a.axis, ix->data, ix->dtype == NANO_DT_I64, &is, out, esize) != 0) {
            free(out);
            snprintf(err, errlen, "node %s (Gather): a constant index is out of range", nano_node_name(g, n));
            return NANO_E_FORMAT;
        }
        break;
    }
    case NANO_OP_ADD: case NANO_OP_SUB: case NANO_OP_MUL: case NANO_OP_DIV: case NANO_OP_POW: {
        const nano_tensor *b = &g->tensors[nd.in[1]];
        nano_shape bs = shape_of(b);
        ok = f32 && b->dtype == NANO_DT_F32;
        if (ok) nano_binary(nd.op, x->data, &xs, b->data, &bs, out, &ys, nd.a.act, nd.a.act_min, nd.a.act_max, 1);
        break;
    }
    case NANO_OP_SQRT: case NANO_OP_ERF:
        if ((ok = f32)) (nd.op == NANO_OP_SQRT ? nano_sqrt : nano_erf)(x->data, out, ny, 1);
        break;
    case NANO_OP_RELU: case NANO_OP_CLIP: case NANO_OP_GELU: case NANO_OP_SIGMOID: case NANO_OP_TANH: {
        int act = nd.op == NANO_OP_RELU ? NANO_ACT_RELU : nd.op == NANO_OP_CLIP ? NANO_ACT_CLIP
                : nd.op == NANO_OP_SIGMOID ? NANO_ACT_SIGMOID : nd.op == NANO_OP_TANH ? NANO_ACT_TANH
                : nd.a.act ? nd.a.act : NANO_ACT_GELU;
        if ((ok = f32)) nano_act_apply(act, nd.a.act_min, nd.a.act_max, x->data, out, ny, 1);
        break;
    }
    default:
        ok = 0;
    }
    if (!ok) {
        free(out);
        return NANO_OK;
    }
    nano_graph_set_data(g, nd.out[0], y->dtype, ys.ndim, ys.d, out, 1);
    g->nodes[n].op = DEAD;
    *done = 1;
    return NANO_OK;
}

/* ---- batch norm into the conv/GEMM before it ----------------------------------- */

/* BN node b after a CONV (W (M, ...)) or a GEMM with trans_b (W (N, K)) whose output
 * only BN reads: W'[m,:] = W[m,:]·s[m], b'[m] = (beta_gemm·b[m] − mean[m])·s[m] + β[m]
 * with s = γ/√(var+ε), in double. */
static nano_status fold_bn(nano_graph *g, int b, int *done, char *err, size_t errlen)
{
    *done = 0;
    const nano_node bn = g->nodes[b];
    int p = writer(g, bn.in[0]);
    if (p < 0 || sole_reader(g, bn.in[0]) != b) return NANO_OK;
    const nano_node pn = g->nodes[p];
    if ((pn.op != NANO_OP_CONV && pn.op != NANO_OP_GEMM) || pn.a.act != NANO_ACT_NONE) return NANO_OK;
    if (pn.op == NANO_OP_GEMM && (!pn.a.trans_b || pn.a.trans_a || g->tensors[pn.out[0]].ndim != 2)) return NANO_OK;
    const float *w = const_f32(g, pn.in[1]), *prm[4];
    for (int i = 0; i < 4; i++)
        if (!(prm[i] = const_f32(g, bn.in[1 + i]))) return NANO_OK;
    if (!w) return NANO_OK;
    const nano_tensor *wt = &g->tensors[pn.in[1]];
    int64_t M = wt->shape[0], per = nano_tensor_numel(wt) / M;
    int bias_t = pn.nin >= 3 ? pn.in[2] : -1;
    const float *bias = bias_t >= 0 ? const_f32(g, bias_t) : NULL;
    int64_t nb = bias ? nano_tensor_numel(&g->tensors[bias_t]) : 0;
    if (bias_t >= 0 && (!bias || (nb != M && nb != 1))) return NANO_OK;
    if (nano_tensor_numel(&g->tensors[bn.in[1]]) != M) return NANO_OK;
    double cscale = pn.op == NANO_OP_GEMM ? pn.a.beta : 1.0;
    float *w2 = malloc((size_t)(M * per) * sizeof *w2), *b2 = malloc((size_t)M * sizeof *b2);
    if (!w2 || !b2) {
        free(w2), free(b2);
        return oom(err, errlen, nano_node_name(g, b));
    }
    for (int64_t m = 0; m < M; m++) {
        double s = prm[0][m] / sqrt((double)prm[3][m] + bn.a.eps);
        for (int64_t k = 0; k < per; k++) w2[m * per + k] = (float)(w[m * per + k] * s);
        double bm = bias ? cscale * bias[nb == 1 ? 0 : m] : 0.0;
        b2[m] = (float)((bm - prm[2][m]) * s + prm[1][m]);
    }
    int64_t wshape[NANO_MAX_DIMS], mshape[1] = {M};
    memcpy(wshape, wt->shape, sizeof wshape);
    int wndim = wt->ndim;
    int tw = add_const(g, p, "w_bn", NANO_DT_F32, wndim, wshape, w2);
    int tb = add_const(g, p, "b_bn", NANO_DT_F32, 1, mshape, b2);
    if (tw < 0 || tb < 0) return oom(err, errlen, nano_node_name(g, b));
    nano_node *q = &g->nodes[p];
    q->in[1] = tw;
    q->in[2] = tb;
    if (q->nin < 3) q->nin = 3;
    if (q->op == NANO_OP_GEMM) q->a.beta = 1.0f;
    q->out[0] = bn.out[0];
    g->nodes[b].op = DEAD;
    *done = 1;
    return NANO_OK;
}

/* ---- constant right operands: GEMM with W (N, K) -------------------------------- */

/* A new constant holding the transpose of the 2-D f32 constant t ((K, N) -> (N, K)). */
static int transposed(nano_graph *g, int n, int t)
{
    const nano_tensor *x = &g->tensors[t];
    int64_t K = x->shape[0], N = x->shape[1], shp[2] = {N, K};
    float *w = malloc((size_t)(N * K) * sizeof *w);
    if (!w) return -1;
    const float *src = x->data;
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) w[j * K + k] = src[k * N + j];
    return add_const(g, n, "w_t", NANO_DT_F32, 2, shp, w);
}

/* GEMM with trans_b = 0 and a constant B, or MATMUL with a constant 2-D B (A of any
 * rank: its leading dimensions are the GEMM's M): B transposed once, trans_b = 1. */
static nano_status pack_weight(nano_graph *g, int n, int *done, char *err, size_t errlen)
{
    const nano_node nd = g->nodes[n];
    *done = 0;
    if (nd.nin < 2 || !const_f32(g, nd.in[1]) || g->tensors[nd.in[1]].ndim != 2) return NANO_OK;
    if (nd.op == NANO_OP_GEMM ? nd.a.trans_b : nd.op != NANO_OP_MATMUL) return NANO_OK;
    if (nd.op == NANO_OP_MATMUL && g->tensors[nd.in[0]].ndim < 2) return NANO_OK;
    int t = transposed(g, n, nd.in[1]);
    if (t < 0) return oom(err, errlen, nano_node_name(g, n));
    nano_node *q = &g->nodes[n];
    q->in[1] = t;
    q->a.trans_b = 1;
    if (q->op == NANO_OP_MATMUL) {
        q->op = NANO_OP_GEMM;
        q->nin = 3;
        q->in[2] = -1;
        q->a.trans_a = 0;
        q->a.alpha = 1.0f;
        q->a.beta = 1.0f;
    }
    *done = 1;
    return NANO_OK;
}

/* ---- identities and reshape chains ---------------------------------------------- */

static void rewire(nano_graph *g, int from, int to)
{
    for (int n = 0; n < g->nnodes; n++)
        for (int i = 0; g->nodes[n].op != DEAD && i < g->nodes[n].nin; i++)
            if (g->nodes[n].in[i] == from) g->nodes[n].in[i] = to;
}

/* IDENTITY (and a RESHAPE to the shape it had) x -> y: readers of y read x. When y is a
 * graph output, x's writer writes y instead (only if x feeds nothing else and is no graph
 * input); otherwise the node stays so the output keeps its name. */
static int drop_identity(nano_graph *g, int n)
{
    const nano_node nd = g->nodes[n];
    int x = nd.in[0], y = nd.out[0];
    if (nd.op == NANO_OP_RESHAPE) {
        const nano_tensor *a = &g->tensors[x], *b = &g->tensors[y];
        if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim)) return 0;
    }
    if (!is_output(g, y)) {
        rewire(g, y, x);
        g->nodes[n].op = DEAD;
        return 1;
    }
    int p = writer(g, x);
    if (p < 0 || sole_reader(g, x) != n || g->tensors[x].kind != NANO_T_ACT) return 0;
    for (int o = 0; o < g->nodes[p].nout; o++)
        if (g->nodes[p].out[o] == x) g->nodes[p].out[o] = y;
    g->nodes[n].op = DEAD;
    return 1;
}

/* RESHAPE r2 reading the output of RESHAPE r1 that nothing else reads: r2 reads r1's input. */
static int merge_reshape(nano_graph *g, int r2)
{
    int y = g->nodes[r2].in[0], r1 = writer(g, y);
    if (!op_is(g, r1, NANO_OP_RESHAPE) || sole_reader(g, y) != r2) return 0;
    g->nodes[r2].in[0] = g->nodes[r1].in[0];
    g->nodes[r1].op = DEAD;
    return 1;
}

/* Sweeps, compacts and infers the shapes again (a pass's last step). */
static nano_status settle(nano_graph *g, const char *pass, char *err, size_t errlen)
{
    sweep(g);
    nano_graph_compact(g);
    char why[256];
    nano_status st = nano_graph_infer_shapes(g, why, sizeof why);
    if (st != NANO_OK) snprintf(err, errlen, "%s: the rewritten graph does not check: %s", pass, why);
    return st;
}

nano_status deploy_fold(nano_graph *g, char *err, size_t errlen)
{
    nano_status st = nano_graph_infer_shapes(g, err, errlen);
    for (int changed = 1; st == NANO_OK && changed;) {
        changed = 0;
        for (int n = 0; st == NANO_OK && n < g->nnodes; n++) {
            int done = 0, op = g->nodes[n].op;
            if (op == DEAD) continue;
            st = fold_const_node(g, n, &done, err, errlen);
            if (st != NANO_OK || done) { changed |= done; continue; }
            if (op == NANO_OP_IDENTITY || op == NANO_OP_RESHAPE) done = drop_identity(g, n);
            if (!done && op == NANO_OP_RESHAPE) done = merge_reshape(g, n);
            if (!done && op == NANO_OP_BATCHNORM) st = fold_bn(g, n, &done, err, errlen);
            if (!done && (op == NANO_OP_GEMM || op == NANO_OP_MATMUL)) st = pack_weight(g, n, &done, err, errlen);
            changed |= done;
        }
    }
    return st == NANO_OK ? settle(g, "fold", err, errlen) : st;
}

/* ---- fusion --------------------------------------------------------------------- */

/* The activation a standalone node r applies (NANO_ACT_NONE when it is no activation). */
static int act_of(const nano_node *r)
{
    switch (r->op) {
    case NANO_OP_RELU: return NANO_ACT_RELU;
    case NANO_OP_CLIP: return NANO_ACT_CLIP;
    case NANO_OP_GELU: return r->a.act ? r->a.act : NANO_ACT_GELU;
    case NANO_OP_SIGMOID: return NANO_ACT_SIGMOID;
    case NANO_OP_TANH: return NANO_ACT_TANH;
    default: return NANO_ACT_NONE;
    }
}

/* CONV/GEMM/MATMUL/ADD p followed by an activation that is its output's only reader. */
static int fuse_act(nano_graph *g, int p)
{
    nano_node *pn = &g->nodes[p];
    if (pn->a.act != NANO_ACT_NONE || pn->nout != 1) return 0;
    int r = sole_reader(g, pn->out[0]);
    if (r < 0) return 0;
    const nano_node *rn = &g->nodes[r];
    int act = act_of(rn);
    if (act == NANO_ACT_NONE || rn->in[0] != pn->out[0]) return 0;
    pn->a.act = act;
    pn->a.act_min = rn->a.act_min;
    pn->a.act_max = rn->a.act_max;
    pn->out[0] = rn->out[0];
    g->nodes[r].op = DEAD;
    return 1;
}

/* GEMM without C followed by ADD of a constant of N values along the last dimension
 * (shape (N) or (1,..,1,N), no more dimensions than the output): it becomes C. */
static nano_status fuse_bias(nano_graph *g, int p, int *done, char *err, size_t errlen)
{
    *done = 0;
    const nano_node pn = g->nodes[p];
    if (pn.a.act != NANO_ACT_NONE || (pn.nin >= 3 && pn.in[2] >= 0)) return NANO_OK;
    int y = pn.out[0], r = sole_reader(g, y);
    if (!op_is(g, r, NANO_OP_ADD) || g->nodes[r].a.act != NANO_ACT_NONE) return NANO_OK;
    int c = other(&g->nodes[r], y);
    const nano_tensor *yt = &g->tensors[y];
    if (c < 0 || !const_f32(g, c)) return NANO_OK;
    const nano_tensor *ct = &g->tensors[c];
    int64_t N = yt->shape[yt->ndim - 1];
    if (ct->ndim < 1 || ct->ndim > yt->ndim || nano_tensor_numel(ct) != N || ct->shape[ct->ndim - 1] != N) return NANO_OK;
    if (ct->ndim != 1) {
        float *v = malloc((size_t)N * sizeof *v);
        if (!v) return oom(err, errlen, nano_node_name(g, p));
        memcpy(v, ct->data, (size_t)N * sizeof *v);
        int64_t s[1] = {N};
        if ((c = add_const(g, p, "bias", NANO_DT_F32, 1, s, v)) < 0) return oom(err, errlen, nano_node_name(g, p));
    }
    nano_node *q = &g->nodes[p];
    q->in[2] = c;
    if (q->nin < 3) q->nin = 3;
    q->a.beta = 1.0f;
    q->out[0] = g->nodes[r].out[0];
    g->nodes[r].op = DEAD;
    *done = 1;
    return NANO_OK;
}

/* The erf GELU as torch exports it, matched from its Erf node e:
 *   d = x / 1.4142135 (or x · 0.70710678); e = erf(d); a = e + 1;
 *   then y = (x · a) · 0.5, or (a · 0.5) · x, or (x · 0.5) · a
 * (each Add/Mul in either operand order). Every intermediate has one reader and is no
 * graph output. The last node becomes GELU(x). */
static int fuse_gelu(nano_graph *g, int e)
{
    int d = g->nodes[e].in[0], dn = writer(g, d), x = -1;
    if (sole_reader(g, d) != e || dn < 0) return 0;
    const nano_node *dd = &g->nodes[dn];
    if (dd->op == NANO_OP_DIV && is_scalar(g, dd->in[1], 1.4142135623730951)) x = dd->in[0];
    if (dd->op == NANO_OP_MUL) {
        if (is_scalar(g, dd->in[1], 0.7071067811865476)) x = dd->in[0];
        else if (is_scalar(g, dd->in[0], 0.7071067811865476)) x = dd->in[1];
    }
    int an = sole_reader(g, g->nodes[e].out[0]);
    if (x < 0 || !op_is(g, an, NANO_OP_ADD) || !is_scalar(g, other(&g->nodes[an], g->nodes[e].out[0]), 1.0)) return 0;
    int a = g->nodes[an].out[0], m1 = sole_reader(g, a);
    if (!op_is(g, m1, NANO_OP_MUL)) return 0;
    int o = other(&g->nodes[m1], a), last = -1, half = -1;
    if (o == x || is_scalar(g, o, 0.5)) {  /* (x·a)·0.5 or (a·0.5)·x */
        int m = g->nodes[m1].out[0], m2 = sole_reader(g, m);
        if (op_is(g, m2, NANO_OP_MUL) && (o == x ? is_scalar(g, other(&g->nodes[m2], m), 0.5) : other(&g->nodes[m2], m) == x))
            last = m2;
    } else if (o >= 0 && sole_reader(g, o) == m1 && op_is(g, half = writer(g, o), NANO_OP_MUL) &&
               is_scalar(g, other(&g->nodes[half], x), 0.5)) {  /* (x·0.5)·a */
        last = m1;
    }
    if (last < 0) return 0;
    int kill[] = {dn, e, an, m1, half};
    for (size_t k = 0; k < sizeof kill / sizeof *kill; k++)
        if (kill[k] >= 0 && kill[k] != last) g->nodes[kill[k]].op = DEAD;
    nano_node *q = &g->nodes[last];
    memset(&q->a, 0, sizeof q->a);
    q->op = NANO_OP_GELU;
    q->a.act = NANO_ACT_GELU;
    q->nin = 1;
    q->in[0] = x;
    q->in[1] = -1;
    return 1;
}

/* The decomposed layer norm over the trailing dimensions, matched from its first
 * ReduceMean r1:  m = mean(x); d = x − m; v = mean(d ^ 2); n = d / sqrt(v + eps);
 * y = n · γ + β (the affine part optional; Mul/Add in either operand order). */
static nano_status fuse_layernorm(nano_graph *g, int r1, int *done, char *err, size_t errlen)
{
    *done = 0;
    const nano_node n1 = g->nodes[r1];
    int x = n1.in[0];
    const nano_tensor *xt = &g->tensors[x];
    int mask = n1.a.axes_mask, axis = 0;
    while (axis < xt->ndim && !(mask & (1 << axis))) axis++;
    if (!n1.a.keepdims || axis >= xt->ndim || mask != ((1 << xt->ndim) - 1) - ((1 << axis) - 1)) return NANO_OK;
    int64_t inner = 1;
    for (int k = axis; k < xt->ndim; k++) inner *= xt->shape[k];
    int sb = sole_reader(g, n1.out[0]);
    if (!op_is(g, sb, NANO_OP_SUB) || g->nodes[sb].in[0] != x || g->nodes[sb].in[1] != n1.out[0]) return NANO_OK;
    int d = g->nodes[sb].out[0], rd[2];
    if (is_output(g, d) || readers(g, d, rd, 2) != 2) return NANO_OK;
    int pw = op_is(g, rd[0], NANO_OP_POW) ? rd[0] : rd[1], dv = pw == rd[0] ? rd[1] : rd[0];
    if (!op_is(g, pw, NANO_OP_POW) || g->nodes[pw].in[0] != d || !is_scalar(g, g->nodes[pw].in[1], 2.0)) return NANO_OK;
    if (!op_is(g, dv, NANO_OP_DIV) || g->nodes[dv].in[0] != d) return NANO_OK;
    int r2 = sole_reader(g, g->nodes[pw].out[0]);
    if (!op_is(g, r2, NANO_OP_REDUCEMEAN) || g->nodes[r2].a.axes_mask != mask || !g->nodes[r2].a.keepdims) return NANO_OK;
    int ad = sole_reader(g, g->nodes[r2].out[0]);
    if (!op_is(g, ad, NANO_OP_ADD)) return NANO_OK;
    int epst = other(&g->nodes[ad], g->nodes[r2].out[0]);
    const float *eps = const_f32(g, epst);
    if (!eps || nano_tensor_numel(&g->tensors[epst]) != 1) return NANO_OK;
    int sq = sole_reader(g, g->nodes[ad].out[0]);
    if (!op_is(g, sq, NANO_OP_SQRT) || sole_reader(g, g->nodes[sq].out[0]) != dv || g->nodes[dv].in[1] != g->nodes[sq].out[0])
        return NANO_OK;
    int last = dv, ml = sole_reader(g, g->nodes[dv].out[0]), gam = -1, bet = -1;
    if (op_is(g, ml, NANO_OP_MUL)) {
        gam = other(&g->nodes[ml], g->nodes[dv].out[0]);
        if (const_f32(g, gam) && nano_tensor_numel(&g->tensors[gam]) == inner) last = ml;
        else gam = -1;
    }
    int ab = gam >= 0 ? sole_reader(g, g->nodes[ml].out[0]) : -1;
    if (op_is(g, ab, NANO_OP_ADD)) {
        bet = other(&g->nodes[ab], g->nodes[ml].out[0]);
        if (const_f32(g, bet) && nano_tensor_numel(&g->tensors[bet]) == inner) last = ab;
        else bet = -1;
    }
    float e = eps[0];
    if (gam < 0) {  /* no affine part: scale 1 */
        float *one = malloc((size_t)inner * sizeof *one);
        if (!one) return oom(err, errlen, nano_node_name(g, dv));
        for (int64_t i = 0; i < inner; i++) one[i] = 1.0f;
        int64_t s[1] = {inner};
        if ((gam = add_const(g, dv, "ln_scale", NANO_DT_F32, 1, s, one)) < 0) return oom(err, errlen, nano_node_name(g, dv));
    }
    int kill[] = {r1, sb, pw, r2, ad, sq, dv, last == dv ? -1 : ml, last == ab ? ab : -1};
    for (size_t k = 0; k < sizeof kill / sizeof *kill; k++)
        if (kill[k] >= 0 && kill[k] != last) g->nodes[kill[k]].op = DEAD;
    nano_node *q = &g->nodes[last];
    memset(&q->a, 0, sizeof q->a);
    q->op = NANO_OP_LAYERNORM;
    q->a.axis = axis;
    q->a.eps = e;
    q->nin = 3;
    q->in[0] = x;
    q->in[1] = gam;
    q->in[2] = bet;
    *done = 1;
    return NANO_OK;
}

nano_status deploy_fuse(nano_graph *g, char *err, size_t errlen)
{
    nano_status st = nano_graph_infer_shapes(g, err, errlen);
    /* patterns first (they make the GELU nodes the activation fusion then absorbs) */
    for (int n = 0; st == NANO_OK && n < g->nnodes; n++) {
        int done = 0;
        if (g->nodes[n].op == NANO_OP_ERF) fuse_gelu(g, n);
        else if (g->nodes[n].op == NANO_OP_REDUCEMEAN) st = fuse_layernorm(g, n, &done, err, errlen);
        else if (g->nodes[n].op == NANO_OP_MATMUL) st = pack_weight(g, n, &done, err, errlen);
    }
    for (int n = 0; st == NANO_OK && n < g->nnodes; n++) {
        int op = g->nodes[n].op, done = 0;
        if (op == NANO_OP_GEMM) st = fuse_bias(g, n, &done, err, errlen);
        if (st == NANO_OK && (op == NANO_OP_CONV || op == NANO_OP_GEMM || op == NANO_OP_MATMUL || op == NANO_OP_ADD))
            fuse_act(g, n);
    }
    return st == NANO_OK ? settle(g, "fuse", err, errlen) : st;
}
