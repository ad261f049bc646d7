/* nano_shape — static shape and dtype inference, which is also the graph's type check.
 *
 * Every node's output shape follows from its inputs' shapes and its attributes; for the
 * ops whose result shape is itself the attribute (RESHAPE, SLICE, SPLIT) the output
 * tensor carries it and the check is that it is consistent (same element count, slices
 * inside the input, split sizes adding up). The loader runs this over every .neb file,
 * so a file whose stored shapes disagree with its operators is refused before a kernel
 * reads a byte. */
#include "nano_graph.h"

#include <stdio.h>
#include <string.h>

typedef struct shp {
    int ndim;
    int64_t d[NANO_MAX_DIMS];
} shp;

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); return NANO_E_FORMAT; } while (0)

static shp shape_of(const nano_tensor *t) {
    shp s = {.ndim = t->ndim};
    for (int i = 0; i < t->ndim; i++) s.d[i] = t->shape[i];
    return s;
}

static int64_t numel(const shp *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->d[i];
    return n;
}

/* numpy broadcasting of a and b into o; -1 when incompatible. */
static int broadcast(const shp *a, const shp *b, shp *o) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    o->ndim = n;
    for (int i = 0; i < n; i++) {
        int ia = a->ndim - n + i, ib = b->ndim - n + i;
        int64_t x = ia >= 0 ? a->d[ia] : 1, y = ib >= 0 ? b->d[ib] : 1;
        if (x != y && x != 1 && y != 1) return -1;
        o->d[i] = x == 1 ? y : x;
    }
    return 0;
}

static void fmt_shape(const shp *s, char *buf, size_t len) {
    size_t k = 0;
    buf[0] = 0;
    k += (size_t)snprintf(buf + k, len - k, "(");
    for (int i = 0; i < s->ndim && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? "," : "", (long long)s->d[i]);
    if (k < len) snprintf(buf + k, len - k, ")");
}

/* The pooled/convolved length of one spatial dimension; <1 when the window does not fit. */
static int64_t window_out(int64_t in, int k, int s, int d, int p0, int p1, int ceil_mode) {
    if (k < 1 || s < 1 || d < 1 || p0 < 0 || p1 < 0) return 0;
    int64_t span = (int64_t)d * (k - 1) + 1, room = in + p0 + p1 - span;
    if (room < 0) return 0;
    int64_t o = (ceil_mode ? (room + s - 1) / s : room / s) + 1;
    /* ONNX/PyTorch: the last window must start inside the input or the left padding */
    if (ceil_mode && (o - 1) * s >= in + p0) o--;
    return o;
}

/* Sets the output's shape and dtype, or checks them against what it carries. */
static nano_status put(nano_graph *g, int node, int t, const shp *s, int dtype, char *err, size_t errlen) {
    nano_tensor *x = &g->tensors[t];
    if (x->kind == NANO_T_OUTPUT && x->ndim > 0) {
        shp have = shape_of(x);
        if (have.ndim != s->ndim || memcmp(have.d, s->d, sizeof(int64_t) * (size_t)s->ndim)) {
            char a[96], b[96];
            fmt_shape(&have, a, sizeof a);
            fmt_shape(s, b, sizeof b);
            BAD("node %s (%s): output %s is declared %s but computes %s", nano_node_name(g, node),
                nano_op_name(g->nodes[node].op), nano_tensor_name(g, t), a, b);
        }
    }
    x->ndim = s->ndim;
    for (int i = 0; i < NANO_MAX_DIMS; i++) x->shape[i] = i < s->ndim ? s->d[i] : 0;
    x->dtype = dtype;
    return NANO_OK;
}

#define NEED(cond, fmt, ...) do { if (!(cond)) BAD("node %s (%s): " fmt, nm, op, __VA_ARGS__); } while (0)

static nano_status infer_conv(nano_graph *g, int n, const shp *in, const int *dt, shp *po, int *podt, char *err,
                           size_t errlen) {
    const nano_node *nd = &g->nodes[n];
    const nano_attrs *a = &nd->a;
    const char *nm = nano_node_name(g, n), *op = nano_op_name(nd->op);
    shp o = *po;
    int odt = *podt;
    NEED(nd->nin >= 2 && nd->in[1] >= 0, "%s", "no weight");
    NEED(in[0].ndim == 4 && in[1].ndim == 4, "input and weight must be 4-D, are %d-D and %d-D", in[0].ndim, in[1].ndim);
    NEED(dt[0] == NANO_DT_F32, "input must be f32, is %s", nano_dtype_name(dt[0]));
    int grp = a->group;
    NEED(grp >= 1 && in[0].d[1] % grp == 0 && in[1].d[0] % grp == 0 && in[1].d[1] * grp == in[0].d[1],
         "weight %lld×%lld for %lld input channels in %d groups", (long long)in[1].d[0], (long long)in[1].d[1],
         (long long)in[0].d[1], grp);
    NEED(a->kernel[0] == in[1].d[2] && a->kernel[1] == in[1].d[3], "kernel %dx%d but weight %lldx%lld",
         a->kernel[0], a->kernel[1], (long long)in[1].d[2], (long long)in[1].d[3]);
    NEED(dt[1] == NANO_DT_F32 || dt[1] == NANO_DT_F16 || dt[1] == NANO_DT_I8, "weight dtype %s", nano_dtype_name(dt[1]));
    if (nd->nin >= 3 && nd->in[2] >= 0)
        NEED(numel(&in[2]) == in[1].d[0] && dt[2] == NANO_DT_F32, "%s", "bias must be f32 of one value per output channel");
    if (dt[1] == NANO_DT_I8)
        NEED(nd->nin >= 4 && nd->in[3] >= 0 && numel(&in[3]) == in[1].d[0] && dt[3] == NANO_DT_F32 &&
             a->q_scale > 0 && a->q_zero >= 0 && a->q_zero <= 255,
             "%s", "int8 weight without per-channel scales or input quantisation");
    o.ndim = 4;
    o.d[0] = in[0].d[0];
    o.d[1] = in[1].d[0];
    o.d[2] = window_out(in[0].d[2], a->kernel[0], a->stride[0], a->dilation[0], a->pad[0], a->pad[2], 0);
    o.d[3] = window_out(in[0].d[3], a->kernel[1], a->stride[1], a->dilation[1], a->pad[1], a->pad[3], 0);
    NEED(o.d[2] >= 1 && o.d[3] >= 1, "%s", "the kernel does not fit the padded input (or a stride/dilation < 1)");
    *po = o;
    *podt = odt;
    return NANO_OK;
}

static nano_status infer_gemm(nano_graph *g, int n, const shp *in, const int *dt, shp *po, int *podt, char *err,
                           size_t errlen) {
    const nano_node *nd = &g->nodes[n];
    const nano_attrs *a = &nd->a;
    const char *nm = nano_node_name(g, n), *op = nano_op_name(nd->op);
    shp o = *po;
    int odt = *podt;
    NEED(nd->nin >= 2 && nd->in[1] >= 0, "%s", "no B");
    NEED(in[1].ndim == 2 && in[0].ndim >= 2, "%s", "B must be 2-D and A at least 2-D");
    NEED(dt[0] == NANO_DT_F32, "A must be f32, is %s", nano_dtype_name(dt[0]));
    NEED(dt[1] == NANO_DT_F32 || dt[1] == NANO_DT_F16 || dt[1] == NANO_DT_I8, "B dtype %s", nano_dtype_name(dt[1]));
    NEED(!a->trans_a || in[0].ndim == 2, "%s", "trans_a needs a 2-D A");
    int64_t K = a->trans_a ? in[0].d[0] : in[0].d[in[0].ndim - 1];
    int64_t Kb = a->trans_b ? in[1].d[1] : in[1].d[0], N = a->trans_b ? in[1].d[0] : in[1].d[1];
    NEED(K == Kb, "inner dimensions %lld and %lld", (long long)K, (long long)Kb);
    if (a->trans_a) { o.ndim = 2; o.d[0] = in[0].d[1]; }
    o.d[o.ndim - 1] = N;
    if (nd->nin >= 3 && nd->in[2] >= 0) {
        shp c;
        NEED(broadcast(&o, &in[2], &c) == 0 && c.ndim == o.ndim && !memcmp(c.d, o.d, sizeof(int64_t) * (size_t)o.ndim),
             "%s", "C does not broadcast to the output");
        NEED(dt[2] == NANO_DT_F32 || dt[2] == NANO_DT_F16, "C must be float, is %s", nano_dtype_name(dt[2]));
    }
    if (dt[1] == NANO_DT_I8)
        NEED(a->trans_b && nd->nin >= 4 && nd->in[3] >= 0 && numel(&in[3]) == N && dt[3] == NANO_DT_F32 && a->q_scale > 0 &&
             a->q_zero >= 0 && a->q_zero <= 255, "%s", "int8 weight without trans_b, per-row scales or input quantisation");
    odt = NANO_DT_F32;
    *po = o;
    *podt = odt;
    return NANO_OK;
}

static nano_status infer_node(nano_graph *g, int n, char *err, size_t errlen) {
    nano_node *nd = &g->nodes[n];
    const nano_attrs *a = &nd->a;
    const char *nm = nano_node_name(g, n), *op = nano_op_name(nd->op);
    shp in[NANO_MAX_IN] = {{0}};
    int dt[NANO_MAX_IN] = {0};
    for (int i = 0; i < nd->nin; i++)
        if (nd->in[i] >= 0) {
            in[i] = shape_of(&g->tensors[nd->in[i]]);
            dt[i] = g->tensors[nd->in[i]].dtype;
            /* half-precision constants are widened at load: every op reads them as f32 */
            if (dt[i] == NANO_DT_F16 && g->tensors[nd->in[i]].kind == NANO_T_CONST) dt[i] = NANO_DT_F32;
        }
    NEED(nd->nin >= 1 && nd->in[0] >= 0, "%s", "its first input is missing");
    shp o = in[0];
    int odt = dt[0];
    nano_status st;
    switch (nd->op) {
    case NANO_OP_CONV: {
        if ((st = infer_conv(g, n, in, dt, &o, &odt, err, errlen)) != NANO_OK) return st;
        break;
    }
    case NANO_OP_GEMM: {
        if ((st = infer_gemm(g, n, in, dt, &o, &odt, err, errlen)) != NANO_OK) return st;
        break;
    }
    case NANO_OP_MATMUL: {
        NEED(nd->nin >= 2 && nd->in[1] >= 0 && in[0].ndim >= 2 && in[1].ndim >= 2, "%s", "needs two operands of 2+ dimensions");
        NEED(dt[0] == NANO_DT_F32 && dt[1] == NANO_DT_F32, "%s", "operands must be f32");
        NEED(in[0].d[in[0].ndim - 1] == in[1].d[in[1].ndim - 2], "inner dimensions %lld and %lld",
             (long long)in[0].d[in[0].ndim - 1], (long long)in[1].d[in[1].ndim - 2]);
        shp ba = in[0], bb = in[1], bo;
        ba.ndim -= 2;
        bb.ndim -= 2;
        NEED(broadcast(&ba, &bb, &bo) == 0, "%s", "batch dimensions do not broadcast");
        NEED(bo.ndim + 2 <= NANO_MAX_DIMS, "%s", "too many dimensions");
        o = bo;
        o.d[o.ndim++] = in[0].d[in[0].ndim - 2];
        o.d[o.ndim++] = in[1].d[in[1].ndim - 1];
        break;
    }
    case NANO_OP_BATCHNORM:
        NEED(nd->nin == 5 && in[0].ndim >= 2, "%s", "needs X (N,C,...) and four per-channel vectors");
        for (int i = 1; i < 5; i++)
            NEED(nd->in[i] >= 0 && numel(&in[i]) == in[0].d[1] && dt[i] == NANO_DT_F32, "operand %d is not one f32 per channel", i);
        break;
    case NANO_OP_RELU: case NANO_OP_CLIP: case NANO_OP_GELU: case NANO_OP_ERF: case NANO_OP_TANH:
    case NANO_OP_SIGMOID: case NANO_OP_SQRT: case NANO_OP_SOFTMAX:
        NEED(dt[0] == NANO_DT_F32, "input must be f32, is %s", nano_dtype_name(dt[0]));
        if (nd->op == NANO_OP_SOFTMAX) NEED(a->axis >= 0 && a->axis < in[0].ndim, "axis %d of a %d-D input", a->axis, in[0].ndim);
        break;
    case NANO_OP_ADD: case NANO_OP_SUB: case NANO_OP_MUL: case NANO_OP_DIV: case NANO_OP_POW:
        NEED(nd->nin == 2 && nd->in[1] >= 0, "%s", "needs two operands");
        NEED(dt[0] == NANO_DT_F32 && dt[1] == NANO_DT_F32, "operands must be f32 (are %s, %s)", nano_dtype_name(dt[0]),
             nano_dtype_name(dt[1]));
        NEED(broadcast(&in[0], &in[1], &o) == 0, "%s", "operands do not broadcast");
        break;
    case NANO_OP_WHERE:
        NEED(nd->nin == 3 && nd->in[1] >= 0 && nd->in[2] >= 0 && dt[0] == NANO_DT_U8 && dt[1] == NANO_DT_F32 &&
             dt[2] == NANO_DT_F32, "%s", "needs a u8 condition and two f32 operands");
        {
            shp t;
            NEED(broadcast(&in[0], &in[1], &t) == 0 && broadcast(&t, &in[2], &o) == 0, "%s", "operands do not broadcast");
        }
        odt = NANO_DT_F32;
        break;
    case NANO_OP_MAXPOOL: case NANO_OP_AVGPOOL:
        NEED(in[0].ndim == 4 && dt[0] == NANO_DT_F32, "%s", "input must be f32 (N,C,H,W)");
        for (int k = 0; k < 2; k++) {
            int dil = a->dilation[k] ? a->dilation[k] : 1;
            o.d[2 + k] = window_out(in[0].d[2 + k], a->kernel[k], a->stride[k], dil, a->pad[k], a->pad[k + 2], a->ceil_mode);
            NEED(o.d[2 + k] >= 1, "%s", "the window does not fit the padded input");
            NEED(a->pad[k] < a->kernel[k] && a->pad[k + 2] < a->kernel[k], "%s", "padding must be smaller than the window");
        }
        break;
    case NANO_OP_GLOBALAVGPOOL:
        NEED(in[0].ndim >= 3 && dt[0] == NANO_DT_F32, "%s", "input must be f32 (N,C,...)");
        for (int i = 2; i < o.ndim; i++) o.d[i] = 1;
        break;
    case NANO_OP_RESHAPE: case NANO_OP_IDENTITY: {
        const nano_tensor *y = &g->tensors[nd->out[0]];
        if (nd->op == NANO_OP_IDENTITY || y->ndim == 0) break;
        shp ys = shape_of(y);
        NEED(numel(&ys) == numel(&in[0]), "%lld elements reshaped to %lld", (long long)numel(&in[0]), (long long)numel(&ys));
        o = ys;
        break;
    }
    case NANO_OP_TRANSPOSE: {
        int seen = 0;
        for (int i = 0; i < in[0].ndim; i++) {
            int p = a->perm[i];
            NEED(p >= 0 && p < in[0].ndim && !(seen & (1 << p)), "%s", "perm is not a permutation of the dimensions");
            seen |= 1 << p;
            o.d[i] = in[0].d[p];
        }
        break;
    }
    case NANO_OP_CONCAT:
        NEED(a->axis >= 0 && a->axis < in[0].ndim, "axis %d of a %d-D input", a->axis, in[0].ndim);
        o.d[a->axis] = 0;
        for (int i = 0; i < nd->nin; i++) {
            NEED(nd->in[i] >= 0 && in[i].ndim == in[0].ndim && dt[i] == dt[0], "operand %d differs in rank or dtype", i);
            for (int k = 0; k < in[0].ndim; k++)
                NEED(k == a->axis || in[i].d[k] == in[0].d[k], "operand %d differs in dimension %d", i, k);
            o.d[a->axis] += in[i].d[a->axis];
        }
        break;
    case NANO_OP_SLICE: {
        shp ys = shape_of(&g->tensors[nd->out[0]]);
        NEED(ys.ndim == in[0].ndim, "%s", "the output's rank differs from the input's");
        for (int k = 0; k < ys.ndim; k++) {
            int64_t b = a->begin[k], s = a->step[k], c = ys.d[k], dim = in[0].d[k];
            /* the c - 1 steps of |s| fit between b and the end it walks to (divided: no overflow) */
            uint64_t as = s > 0 ? (uint64_t)s : -(uint64_t)s, room = s > 0 ? (uint64_t)dim - 1 - (uint64_t)b : (uint64_t)b;
            NEED(s != 0 && b >= 0 && b < dim && (uint64_t)(c - 1) <= room / as,
                 "dimension %d: %lld elements from %lld by %lld leave the input of %lld", k, (long long)c, (long long)b,
                 (long long)s, (long long)in[0].d[k]);
        }
        o = ys;
        break;
    }
    case NANO_OP_GATHER: {
        NEED(nd->nin == 2 && nd->in[1] >= 0 && (dt[1] == NANO_DT_I64 || dt[1] == NANO_DT_I32), "%s", "indices must be i64 or i32");
        NEED(a->axis >= 0 && a->axis < in[0].ndim, "axis %d of a %d-D input", a->axis, in[0].ndim);
        NEED(in[0].ndim - 1 + in[1].ndim <= NANO_MAX_DIMS, "%s", "too many dimensions");
        o.ndim = 0;
        for (int k = 0; k < a->axis; k++) o.d[o.ndim++] = in[0].d[k];
        for (int k = 0; k < in[1].ndim; k++) o.d[o.ndim++] = in[1].d[k];
        for (int k = a->axis + 1; k < in[0].ndim; k++) o.d[o.ndim++] = in[0].d[k];
        break;
    }
    case NANO_OP_SPLIT: {
        NEED(a->axis >= 0 && a->axis < in[0].ndim, "axis %d of a %d-D input", a->axis, in[0].ndim);
        int64_t sum = 0;
        for (int i = 0; i < nd->nout; i++) {
            nano_tensor *y = &g->tensors[nd->out[i]];
            shp ys = shape_of(y);
            NEED(ys.ndim == in[0].ndim, "output %d's rank differs from the input's", i);
            for (int k = 0; k < ys.ndim; k++)
                NEED(k == a->axis || ys.d[k] == in[0].d[k], "output %d differs in dimension %d", i, k);
            sum += ys.d[a->axis];
            y->dtype = dt[0];
        }
        NEED(sum == in[0].d[a->axis], "the outputs add up to %lld of %lld", (long long)sum, (long long)in[0].d[a->axis]);
        return NANO_OK;
    }
    case NANO_OP_LAYERNORM:
        NEED(dt[0] == NANO_DT_F32 && a->axis >= 0 && a->axis < in[0].ndim, "axis %d of a %d-D f32 input", a->axis, in[0].ndim);
        {
            int64_t inner = 1;
            for (int k = a->axis; k < in[0].ndim; k++) inner *= in[0].d[k];
            NEED(nd->nin >= 2 && nd->in[1] >= 0 && numel(&in[1]) == inner && (nd->nin < 3 || nd->in[2] < 0 || numel(&in[2]) == inner),
                 "%s", "scale and bias must have the normalised size");
            NEED((dt[1] == NANO_DT_F32 || dt[1] == NANO_DT_F16) &&
                     (nd->nin < 3 || nd->in[2] < 0 || dt[2] == NANO_DT_F32 || dt[2] == NANO_DT_F16),
                 "%s", "scale and bias must be float");
        }
        break;
    case NANO_OP_REDUCEMEAN: {
        NEED(dt[0] == NANO_DT_F32 && a->axes_mask > 0 && a->axes_mask < (1 << in[0].ndim), "%s", "axes outside the input");
        o.ndim = 0;
        for (int k = 0; k < in[0].ndim; k++) {
            if (!(a->axes_mask & (1 << k))) o.d[o.ndim++] = in[0].d[k];
            else if (a->keepdims) o.d[o.ndim++] = 1;
        }
        break;
    }
    case NANO_OP_CAST:
        NEED(a->to == NANO_DT_F32 || a->to == NANO_DT_I32 || a->to == NANO_DT_I64 || a->to == NANO_DT_U8,
             "cast to %s", nano_dtype_name(a->to));
        NEED(dt[0] == NANO_DT_F32 || dt[0] == NANO_DT_I32 || dt[0] == NANO_DT_I64 || dt[0] == NANO_DT_U8,
             "cast from %s", nano_dtype_name(dt[0]));
        odt = a->to;
        break;
    default:
        snprintf(err, errlen, "node %s: op %d (%s) is not supported", nm, nd->op, op);
        return NANO_E_UNSUPPORTED;
    }
    NEED(nd->nout == 1, "%d outputs (one expected)", nd->nout);
    return put(g, n, nd->out[0], &o, odt, err, errlen);
}

nano_status nano_graph_infer_shapes(nano_graph *g, char *err, size_t errlen) {
    nano_status st = nano_graph_validate(g, err, errlen);
    if (st != NANO_OK) return st;
    for (int n = 0; n < g->nnodes; n++) {
        if ((st = infer_node(g, n, err, errlen)) != NANO_OK) return st;
        for (int o = 0; o < g->nodes[n].nout; o++) {
            const nano_tensor *y = &g->tensors[g->nodes[n].out[o]];
            int64_t e = 1;
            for (int d = 0; d < y->ndim; d++) {
                if (y->shape[d] < 1 || y->shape[d] > NANO_MAX_NUMEL / e)
                    BAD("node %s: output %s has dimension %d of %lld", nano_node_name(g, n), nano_tensor_name(g, g->nodes[n].out[o]),
                        d, (long long)y->shape[d]);
                e *= y->shape[d];
            }
        }
    }
    return NANO_OK;
}
