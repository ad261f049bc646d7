/* deploy_onnx_ops — each ONNX operator normalised to nano ops (the importer's second half).
 *
 * One converter per operator family: it reads the node's inputs and attributes (with the
 * opset's defaults and its attribute-versus-input rules), checks the operands' shapes,
 * computes the outputs' shapes and adds the nano node with its fixed attributes.
 *
 * The one design decision: data-movement operators whose inputs are all constants
 * (Reshape/Flatten/Squeeze/Unsqueeze, Concat, Gather, Slice, Transpose) are evaluated
 * here and become constants, as are integer arithmetic, Equal, Where, Cast, Shape,
 * Range, Expand and ConstantOfShape (deploy_onnx_fold.c), because later operators need
 * their values as attributes (a Reshape's shape); float arithmetic on constants is left
 * to deploy_fold. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/deploy_onnx_impl.h"



static int64_t row_stride(const imp_shape *s, int d) {
    int64_t st = 1;
    for (int k = d + 1; k < s->ndim; k++) st *= s->d[k];
    return st;
}

nano_status imp_bad(onnx_imp *im, const Onnx__NodeProto *n, nano_status st, const char *what) {
    return imp_fail(im, st, "node %s (op_type %s): %s", im->node_name, n->op_type, what);
}

/* Normalises axis against rank: 0, or an error naming the node. */
static nano_status norm_axis(onnx_imp *im, const Onnx__NodeProto *n, int64_t *axis, int rank) {
    if (*axis < -rank || *axis >= (rank ? rank : 1))
        return imp_fail(im, NANO_E_FORMAT, "node %s (op_type %s): axis %lld is outside rank %d", im->node_name,
                        n->op_type, (long long)*axis, rank);
    if (*axis < 0) *axis += rank;
    return NANO_OK;
}

nano_status imp_refuse_used(onnx_imp *im, const Onnx__NodeProto *n, int from) {
    for (int i = from; i < (int)n->n_output; i++)
        if (imp_out_used(im, n, i))
            return imp_fail(im, NANO_E_UNSUPPORTED, "node %s (op_type %s): output %d (%s) is used; only output 0 "
                            "is supported at inference", im->node_name, n->op_type, i, n->output[i]);
    return NANO_OK;
}


nano_status imp_nomem(onnx_imp *im) { return imp_fail(im, NANO_E_NOMEM, "node %s: out of memory", im->node_name); }

/* Output 0 as a copy of x with shape s (x constant), else a RESHAPE or IDENTITY node. */
nano_status imp_emit_move(onnx_imp *im, const Onnx__NodeProto *n, int x, imp_shape s, int op) {
    const nano_tensor *c = imp_const_of(im, x);
    s.dtype = c ? c->dtype : imp_fdt(im->g->tensors[x].dtype);
    if (c) {
        void *d = malloc(imp_bytes(&s));
        if (!d) return imp_nomem(im);
        memcpy(d, c->data, imp_bytes(&s));
        return imp_emit_const(im, n, 0, &s, d);
    }
    int32_t in[1] = {x};
    nano_attrs a = {0};
    return imp_emit(im, n, op, 1, in, 1, &s, &a);
}

/* ---- convolution, dense, normalisation ------------------------------------------------ */

/* Kernel, strides, dilations, pads (explicit or auto_pad) of a 2-D window over X. */
static nano_status window(onnx_imp *im, const Onnx__NodeProto *n, const imp_shape *x, const int64_t *kern,
                          nano_attrs *a, int64_t *oh, int64_t *ow, int ceil_mode) {
    int64_t v[4];
    char buf[32];
    a->kernel[0] = (int32_t)kern[0];
    a->kernel[1] = (int32_t)kern[1];
    a->stride[0] = a->stride[1] = a->dilation[0] = a->dilation[1] = 1;
    int k = imp_attr_ints(n, "strides", v, 2);
    if (k >= 0 && k != 2) return imp_bad(im, n, NANO_E_FORMAT, "strides must have 2 values");
    if (k == 2) { a->stride[0] = (int32_t)v[0]; a->stride[1] = (int32_t)v[1]; }
    k = imp_attr_ints(n, "dilations", v, 2);
    if (k >= 0 && k != 2) return imp_bad(im, n, NANO_E_FORMAT, "dilations must have 2 values");
    if (k == 2) { a->dilation[0] = (int32_t)v[0]; a->dilation[1] = (int32_t)v[1]; }
    for (int d = 0; d < 2; d++)
        if (a->stride[d] < 1 || a->dilation[d] < 1 || a->kernel[d] < 1 || kern[d] > 1 << 20)
            return imp_bad(im, n, NANO_E_FORMAT, "kernel, strides and dilations must be positive");
    const char *ap = imp_attr_s(n, "auto_pad", "NOTSET", buf, sizeof buf);
    k = imp_attr_ints(n, "pads", v, 4);
    if (!strcmp(ap, "NOTSET")) {
        if (k >= 0 && k != 4) return imp_bad(im, n, NANO_E_FORMAT, "pads must have 4 values (top, left, bottom, right)");
        for (int d = 0; d < 4; d++) {
            a->pad[d] = k == 4 ? (int32_t)v[d] : 0;
            if (k == 4 && (v[d] < 0 || v[d] > 1 << 20)) return imp_bad(im, n, NANO_E_FORMAT, "pads must be non-negative");
        }
    } else if (!strcmp(ap, "VALID")) {
        memset(a->pad, 0, sizeof a->pad);
    } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
        for (int d = 0; d < 2; d++) {
            int64_t in = x->d[2 + d], out = (in + a->stride[d] - 1) / a->stride[d];
            int64_t total = (out - 1) * a->stride[d] + (kern[d] - 1) * a->dilation[d] + 1 - in;
            if (total < 0) total = 0;
            int64_t small = total / 2, big = total - small;
            a->pad[d] = (int32_t)(ap[5] == 'U' ? small : big);
            a->pad[d + 2] = (int32_t)(ap[5] == 'U' ? big : small);
        }
    } else {
        return imp_bad(im, n, NANO_E_FORMAT, "auto_pad must be NOTSET, VALID, SAME_UPPER or SAME_LOWER");
    }
    int64_t o[2];
    for (int d = 0; d < 2; d++) {
        int64_t span = x->d[2 + d] + a->pad[d] + a->pad[d + 2] - ((kern[d] - 1) * a->dilation[d] + 1);
        if (span < 0) return imp_bad(im, n, NANO_E_FORMAT, "the window is larger than the padded input");
        o[d] = ceil_mode ? (span + a->stride[d] - 1) / a->stride[d] + 1 : span / a->stride[d] + 1;
        if (ceil_mode && (o[d] - 1) * a->stride[d] >= x->d[2 + d] + a->pad[d]) o[d]--; /* last window in padding */
    }
    *oh = o[0];
    *ow = o[1];
    return NANO_OK;
}

static nano_status op_conv(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(x, 0, "X");
    NEED(w, 1, "W");
    IN(b, 2);
    imp_shape xs = imp_shape_of(im, x), ws = imp_shape_of(im, w);
    if (xs.ndim != 4 || ws.ndim != 4) return imp_bad(im, n, NANO_E_UNSUPPORTED, "only 2-D convolution (4-D X and W) is supported");
    nano_attrs a = {0};
    int64_t kern[2] = {ws.d[2], ws.d[3]}, v[2];
    int k = imp_attr_ints(n, "kernel_shape", v, 2);
    if (k >= 0 && (k != 2 || v[0] != kern[0] || v[1] != kern[1]))
        return imp_bad(im, n, NANO_E_FORMAT, "kernel_shape does not match W's shape");
    int64_t group = imp_attr_i(n, "group", 1);
    if (group < 1 || ws.d[0] % group || xs.d[1] != ws.d[1] * group)
        return imp_bad(im, n, NANO_E_FORMAT, "X's channels must be W's dim 1 times group, and W's dim 0 a multiple of group");
    if (b >= 0) {
        imp_shape bs = imp_shape_of(im, b);
        if (bs.ndim != 1 || bs.d[0] != ws.d[0]) return imp_bad(im, n, NANO_E_FORMAT, "B must be 1-D with W's dim 0 values");
    }
    a.group = (int32_t)group;
    imp_shape o = {.dtype = NANO_DT_F32, .ndim = 4, .d = {xs.d[0], ws.d[0]}};
    nano_status st = window(im, n, &xs, kern, &a, &o.d[2], &o.d[3], 0);
    if (st) return st;
    int32_t in[3] = {x, w, b};
    return imp_emit(im, n, NANO_OP_CONV, 3, in, 1, &o, &a);
}

static nano_status op_pool(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    NEED(x, 0, "X");
    imp_shape xs = imp_shape_of(im, x);
    if (xs.ndim != 4) return imp_bad(im, n, NANO_E_UNSUPPORTED, "only 2-D pooling (4-D X) is supported");
    imp_shape o = {.dtype = NANO_DT_F32, .ndim = 4, .d = {xs.d[0], xs.d[1], 1, 1}};
    nano_attrs a = {0};
    if (op == NANO_OP_GLOBALAVGPOOL) {
        int32_t in[1] = {x};
        return imp_emit(im, n, op, 1, in, 1, &o, &a);
    }
    nano_status st = imp_refuse_used(im, n, 1);
    if (st) return st;
    int64_t kern[2];
    if (imp_attr_ints(n, "kernel_shape", kern, 2) != 2) return imp_bad(im, n, NANO_E_FORMAT, "kernel_shape must have 2 values");
    a.ceil_mode = (int32_t)imp_attr_i(n, "ceil_mode", 0);
    if ((st = window(im, n, &xs, kern, &a, &o.d[2], &o.d[3], a.ceil_mode))) return st;
    if (op == NANO_OP_AVGPOOL) {
        a.count_include_pad = (int32_t)imp_attr_i(n, "count_include_pad", 0);
        if (a.dilation[0] != 1 || a.dilation[1] != 1) return imp_bad(im, n, NANO_E_UNSUPPORTED, "dilated average pooling");
    } else if (imp_attr_i(n, "storage_order", 0) != 0) {
        return imp_bad(im, n, NANO_E_UNSUPPORTED, "storage_order 1");
    }
    int32_t in[1] = {x};
    return imp_emit(im, n, op, 1, in, 1, &o, &a);
}

static nano_status op_gemm(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(A, 0, "A");
    NEED(B, 1, "B");
    IN(C, 2);
    imp_shape as = imp_shape_of(im, A), bs = imp_shape_of(im, B);
    if (as.ndim != 2 || bs.ndim != 2) return imp_bad(im, n, NANO_E_FORMAT, "A and B must be 2-D");
    nano_attrs a = {0};
    a.trans_a = imp_attr_i(n, "transA", 0) != 0;
    a.trans_b = imp_attr_i(n, "transB", 0) != 0;
    a.alpha = imp_attr_f(n, "alpha", 1.0f);
    a.beta = imp_attr_f(n, "beta", 1.0f);
    int64_t M = as.d[a.trans_a], K = as.d[!a.trans_a], K2 = bs.d[a.trans_b], N = bs.d[!a.trans_b];
    if (K != K2) return imp_bad(im, n, NANO_E_FORMAT, "A's and B's inner dimensions differ");
    imp_shape o = {.dtype = NANO_DT_F32, .ndim = 2, .d = {M, N}}, chk;
    if (C >= 0) {
        imp_shape cs = imp_shape_of(im, C);
        if (imp_broadcast(&o, &cs, &chk) || chk.d[0] != M || chk.d[1] != N)
            return imp_bad(im, n, NANO_E_FORMAT, "C does not broadcast to (M, N)");
    }
    int32_t in[3] = {A, B, C};
    return imp_emit(im, n, NANO_OP_GEMM, 3, in, 1, &o, &a);
}

static nano_status op_matmul(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(A, 0, "A");
    NEED(B, 1, "B");
    imp_shape as = imp_shape_of(im, A), bs = imp_shape_of(im, B), o;
    if (as.ndim < 2 || bs.ndim < 2) return imp_bad(im, n, NANO_E_UNSUPPORTED, "1-D MatMul operands");
    if (as.d[as.ndim - 1] != bs.d[bs.ndim - 2]) return imp_bad(im, n, NANO_E_FORMAT, "A's last and B's second-last dimensions differ");
    imp_shape ab = as, bb = bs;
    ab.ndim -= 2;
    bb.ndim -= 2;
    if (imp_broadcast(&ab, &bb, &o)) return imp_bad(im, n, NANO_E_FORMAT, "the batch dimensions do not broadcast");
    o.d[o.ndim++] = as.d[as.ndim - 2];
    o.d[o.ndim++] = bs.d[bs.ndim - 1];
    o.dtype = NANO_DT_F32;
    nano_attrs a = {0};
    int32_t in[2] = {A, B};
    return imp_emit(im, n, NANO_OP_MATMUL, 2, in, 1, &o, &a);
}

static nano_status op_batchnorm(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    int32_t in[5];
    for (int i = 0; i < 5; i++) {
        NEED(t, i, "X, scale, B, mean, var");
        in[i] = t;
    }
    imp_shape xs = imp_shape_of(im, in[0]);
    if (xs.ndim < 2) return imp_bad(im, n, NANO_E_FORMAT, "X must have a channel dimension");
    for (int i = 1; i < 5; i++) {
        imp_shape s = imp_shape_of(im, in[i]);
        if (s.ndim != 1 || s.d[0] != xs.d[1]) return imp_bad(im, n, NANO_E_FORMAT, "scale, B, mean and var must be 1-D of C values");
    }
    if (imp_attr_i(n, "training_mode", 0)) return imp_bad(im, n, NANO_E_UNSUPPORTED, "training_mode 1");
    nano_status st = imp_refuse_used(im, n, 1);
    if (st) return st;
    nano_attrs a = {0};
    a.eps = imp_attr_f(n, "epsilon", 1e-5f);
    xs.dtype = NANO_DT_F32;
    return imp_emit(im, n, NANO_OP_BATCHNORM, 5, in, 1, &xs, &a);
}

static nano_status op_layernorm(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(x, 0, "X");
    NEED(s, 1, "Scale");
    IN(b, 2);
    imp_shape xs = imp_shape_of(im, x);
    int64_t axis = imp_attr_i(n, "axis", -1);
    nano_status st = norm_axis(im, n, &axis, xs.ndim);
    if (st || (st = imp_refuse_used(im, n, 1))) return st;
    int64_t inner = 1;
    for (int d = (int)axis; d < xs.ndim; d++) inner *= xs.d[d];
    for (int i = 0; i < 2; i++) {
        int t = i ? b : s;
        if (t < 0) continue;
        imp_shape ps = imp_shape_of(im, t);
        if (imp_numel(&ps) != inner) return imp_bad(im, n, NANO_E_FORMAT, "Scale and B must have the normalised dimensions' size");
    }
    nano_attrs a = {0};
    a.axis = (int32_t)axis;
    a.eps = imp_attr_f(n, "epsilon", 1e-5f);
    xs.dtype = NANO_DT_F32;
    int32_t in[3] = {x, s, b};
    return imp_emit(im, n, NANO_OP_LAYERNORM, 3, in, 1, &xs, &a);
}

/* ---- element-wise ---------------------------------------------------------------------- */

static nano_status op_unary(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    NEED(x, 0, "X");
    imp_shape xs = imp_shape_of(im, x);
    if (imp_fdt(xs.dtype) != NANO_DT_F32) return imp_bad(im, n, NANO_E_UNSUPPORTED, "only float inputs are supported");
    xs.dtype = NANO_DT_F32;
    nano_attrs a = {0};
    if (op == NANO_OP_GELU) {
        char buf[16];
        const char *ap = imp_attr_s(n, "approximate", "none", buf, sizeof buf);
        if (!strcmp(ap, "none")) a.act = NANO_ACT_GELU;
        else if (!strcmp(ap, "tanh")) a.act = NANO_ACT_GELU_TANH;
        else return imp_bad(im, n, NANO_E_FORMAT, "approximate must be 'none' or 'tanh'");
    }
    if (op == NANO_OP_CLIP) {
        a.act_min = -INFINITY;
        a.act_max = INFINITY;
        const Onnx__AttributeProto *mn = imp_attr(n, "min"), *mx = imp_attr(n, "max");
        if (mn || mx) { /* opset < 11 */
            a.act_min = imp_attr_f(n, "min", -INFINITY);
            a.act_max = imp_attr_f(n, "max", INFINITY);
        }
        for (int i = 1; i < 3; i++) {
            IN(t, i);
            double v;
            if (t >= 0 && imp_const_scalar(im, t, i == 1 ? "min" : "max", &v)) return NANO_E_UNSUPPORTED;
            if (t >= 0) *(i == 1 ? &a.act_min : &a.act_max) = (float)v;
        }
    }
    int32_t in[1] = {x};
    return imp_emit(im, n, op, 1, in, 1, &xs, &a);
}


/* ---- shape and data movement --------------------------------------------------------- */

static nano_status op_reshape(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    NEED(x, 0, "data");
    imp_shape xs = imp_shape_of(im, x), o = {0};
    int64_t v[NANO_MAX_DIMS + 1], numel = imp_numel(&xs);
    const char *kind = n->op_type;
    if (!strcmp(kind, "Flatten")) {
        int64_t axis = imp_attr_i(n, "axis", 1), outer = 1;
        if (axis < 0) axis += xs.ndim;
        if (axis < 0 || axis > xs.ndim) return imp_bad(im, n, NANO_E_FORMAT, "axis is outside the input's rank");
        for (int d = 0; d < axis; d++) outer *= xs.d[d];
        o.ndim = 2;
        o.d[0] = outer;
        o.d[1] = numel / outer;
    } else if (!strcmp(kind, "Reshape")) {
        NEED(sh, 1, "shape");
        int k = imp_const_ints(im, sh, "the shape (input 1)", v, NANO_MAX_DIMS);
        if (k < 0) return NANO_E_UNSUPPORTED;
        int allowzero = (int)imp_attr_i(n, "allowzero", 0), infer = -1;
        int64_t known = 1;
        o.ndim = k;
        for (int d = 0; d < k; d++) {
            o.d[d] = v[d] == 0 && !allowzero ? (d < xs.ndim ? xs.d[d] : -2) : v[d];
            if (o.d[d] == -1 && infer < 0) infer = d;
            else if (o.d[d] < 1) return imp_bad(im, n, NANO_E_FORMAT, "the shape has an invalid value (two -1, a 0 past the "
                                            "input's rank, or a negative)");
            else if (o.d[d] > numel / known) /* more elements than the input: no product to overflow */
                return imp_bad(im, n, NANO_E_FORMAT, "the new shape has a different number of elements");
            else known *= o.d[d];
        }
        if (infer >= 0) o.d[infer] = numel % known ? 0 : numel / known;
    } else { /* Squeeze, Unsqueeze: axes from the attribute (opset < 13) or input 1 */
        int un = kind[0] == 'U', k;
        IN(ax, 1);
        if (im->opset >= 13 && ax >= 0) {
            if ((k = imp_const_ints(im, ax, "axes (input 1)", v, NANO_MAX_DIMS + 1)) < 0) return NANO_E_UNSUPPORTED;
        } else {
            k = imp_attr_ints(n, "axes", v, NANO_MAX_DIMS + 1);
        }
        if (k > NANO_MAX_DIMS) return imp_bad(im, n, NANO_E_FORMAT, "more axes than dimensions");
        int rank = un ? xs.ndim + k : xs.ndim, mark[NANO_MAX_DIMS + 1] = {0};
        if (un && (k < 1 || rank > NANO_MAX_DIMS)) return imp_bad(im, n, NANO_E_FORMAT, "Unsqueeze needs axes, at most 6 dimensions in all");
        for (int i = 0; i < k; i++) {
            nano_status st = norm_axis(im, n, &v[i], rank);
            if (st) return st;
            if (mark[v[i]]) return imp_bad(im, n, NANO_E_FORMAT, "axes repeat");
            mark[v[i]] = 1;
        }
        for (int d = 0, j = 0; d < rank; d++) {
            if (un) o.d[o.ndim++] = mark[d] ? 1 : xs.d[j++];
            else if (k < 0 ? xs.d[d] != 1 : !mark[d]) o.d[o.ndim++] = xs.d[d];
            else if (xs.d[d] != 1) return imp_bad(im, n, NANO_E_FORMAT, "Squeeze of a dimension that is not 1");
        }
    }
    if (imp_numel(&o) != numel) return imp_bad(im, n, NANO_E_FORMAT, "the new shape has a different number of elements");
    return imp_emit_move(im, n, x, o, op);
}

static nano_status op_transpose(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(x, 0, "data");
    imp_shape xs = imp_shape_of(im, x), o = xs;
    int64_t p[NANO_MAX_DIMS + 1];
    int k = imp_attr_ints(n, "perm", p, NANO_MAX_DIMS + 1), seen[NANO_MAX_DIMS] = {0};
    if (k < 0) for (k = 0; k < xs.ndim; k++) p[k] = xs.ndim - 1 - k;
    if (k != xs.ndim) return imp_bad(im, n, NANO_E_FORMAT, "perm must have one value per input dimension");
    nano_attrs a = {0};
    int64_t st[NANO_MAX_DIMS];
    for (int d = 0; d < k; d++) {
        if (p[d] < 0 || p[d] >= k || seen[p[d]]++) return imp_bad(im, n, NANO_E_FORMAT, "perm is not a permutation");
        a.perm[d] = (int32_t)p[d];
        o.d[d] = xs.d[p[d]];
        st[d] = row_stride(&xs, (int)p[d]);
    }
    const nano_tensor *c = imp_const_of(im, x);
    if (c) {
        void *d = malloc(imp_bytes(&o));
        if (!d) return imp_nomem(im);
        imp_copy_view(d, c->data, nano_dtype_size(c->dtype), o.ndim, o.d, 0, st);
        return imp_emit_const(im, n, 0, &o, d);
    }
    o.dtype = imp_fdt(o.dtype);
    int32_t in[1] = {x};
    return imp_emit(im, n, NANO_OP_TRANSPOSE, 1, in, 1, &o, &a);
}

static nano_status op_concat(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    int nin = (int)n->n_input, allc = 1;
    if (nin < 1 || nin > NANO_MAX_IN) return imp_bad(im, n, NANO_E_UNSUPPORTED, "Concat of 1 to 8 inputs only");
    int32_t in[NANO_MAX_IN];
    imp_shape o = {0}, s;
    int64_t axis = imp_attr_i(n, "axis", 0);
    for (int i = 0; i < nin; i++) {
        NEED(t, i, "inputs");
        in[i] = t;
        s = imp_shape_of(im, t);
        allc &= imp_const_of(im, t) != NULL;
        if (i == 0) {
            o = s;
            if (s.ndim < 1) return imp_bad(im, n, NANO_E_FORMAT, "Concat of scalars");
            nano_status st = norm_axis(im, n, &axis, s.ndim);
            if (st) return st;
            continue;
        }
        int same = s.ndim == o.ndim && imp_fdt(s.dtype) == imp_fdt(o.dtype);
        for (int d = 0; same && d < s.ndim; d++) same = d == axis || s.d[d] == o.d[d];
        if (!same) return imp_bad(im, n, NANO_E_FORMAT, "the inputs differ in rank, dtype or a dimension other than axis");
        o.d[axis] += s.d[axis];
    }
    if (allc) {
        size_t off = 0;
        char *d = malloc(imp_bytes(&o));
        if (!d) return imp_nomem(im);
        int64_t outer = 1;
        for (int k = 0; k < axis; k++) outer *= o.d[k];
        for (int64_t r = 0; r < outer; r++)
            for (int i = 0; i < nin; i++) {
                const nano_tensor *c = imp_const_of(im, in[i]);
                size_t chunk = nano_tensor_bytes(c) / (size_t)outer;
                memcpy(d + off, (const char *)c->data + (size_t)r * chunk, chunk);
                off += chunk;
            }
        return imp_emit_const(im, n, 0, &o, d);
    }
    o.dtype = imp_fdt(o.dtype);
    nano_attrs a = {0};
    a.axis = (int32_t)axis;
    return imp_emit(im, n, NANO_OP_CONCAT, nin, in, 1, &o, &a);
}

static nano_status op_slice(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(x, 0, "data");
    imp_shape xs = imp_shape_of(im, x), o = xs;
    int64_t sv[4][NANO_MAX_DIMS];
    int cnt[4] = {-1, -1, -1, -1};
    static const char *const what[4] = {"starts (input 1)", "ends (input 2)", "axes (input 3)", "steps (input 4)"};
    for (int i = 0; i < 4; i++) {
        IN(t, i + 1);
        if (t >= 0 && (cnt[i] = imp_const_ints(im, t, what[i], sv[i], NANO_MAX_DIMS)) < 0) return NANO_E_UNSUPPORTED;
    }
    if (cnt[0] < 0 || cnt[1] != cnt[0] || (cnt[2] >= 0 && cnt[2] != cnt[0]) || (cnt[3] >= 0 && cnt[3] != cnt[0]))
        return imp_bad(im, n, NANO_E_FORMAT, "starts, ends, axes and steps must have the same length");
    nano_attrs a = {0};
    int seen[NANO_MAX_DIMS] = {0};
    for (int d = 0; d < xs.ndim; d++) a.step[d] = 1;
    for (int i = 0; i < cnt[0]; i++) {
        int64_t ax = cnt[2] >= 0 ? sv[2][i] : i, step = cnt[3] >= 0 ? sv[3][i] : 1;
        nano_status st = norm_axis(im, n, &ax, xs.ndim);
        if (st) return st;
        if (seen[ax]++ || step == 0) return imp_bad(im, n, NANO_E_FORMAT, "axes repeat or a step is 0");
        int64_t dim = xs.d[ax], b = sv[0][i], e = sv[1][i], c;
        if (step > dim) step = dim; /* one element either way; no overflow below */
        if (step < -dim) step = -dim;
        if (b < 0) b += dim;
        if (e < 0) e += dim;
        if (step > 0) {
            b = b < 0 ? 0 : b > dim ? dim : b;
            e = e < 0 ? 0 : e > dim ? dim : e;
            c = e > b ? (e - b + step - 1) / step : 0;
        } else {
            b = b < 0 ? 0 : b > dim - 1 ? dim - 1 : b;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
            c = b > e ? (b - e - step - 1) / -step : 0;
        }
        if (c == 0) return imp_bad(im, n, NANO_E_UNSUPPORTED, "the slice is empty");
        a.begin[ax] = b;
        a.step[ax] = step;
        o.d[ax] = c;
    }
    const nano_tensor *c = imp_const_of(im, x);
    if (c) {
        int64_t st[NANO_MAX_DIMS], off = 0;
        for (int d = 0; d < xs.ndim; d++) {
            int64_t rs = row_stride(&xs, d);
            st[d] = a.step[d] * rs;
            off += a.begin[d] * rs;
        }
        void *d = malloc(imp_bytes(&o));
        if (!d) return imp_nomem(im);
        imp_copy_view(d, c->data, nano_dtype_size(c->dtype), o.ndim, o.d, off, st);
        return imp_emit_const(im, n, 0, &o, d);
    }
    o.dtype = imp_fdt(o.dtype);
    int32_t in[1] = {x};
    return imp_emit(im, n, NANO_OP_SLICE, 1, in, 1, &o, &a);
}

static nano_status op_gather(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(x, 0, "data");
    NEED(ix, 1, "indices");
    imp_shape xs = imp_shape_of(im, x), is = imp_shape_of(im, ix), o = {0};
    int64_t axis = imp_attr_i(n, "axis", 0);
    nano_status st = norm_axis(im, n, &axis, xs.ndim);
    if (st) return st;
    if (is.dtype != NANO_DT_I64 && is.dtype != NANO_DT_I32) return imp_bad(im, n, NANO_E_FORMAT, "indices must be int64 or int32");
    if (xs.ndim - 1 + is.ndim > NANO_MAX_DIMS) return imp_bad(im, n, NANO_E_UNSUPPORTED, "the output has more than 6 dimensions");
    for (int d = 0; d < axis; d++) o.d[o.ndim++] = xs.d[d];
    for (int d = 0; d < is.ndim; d++) o.d[o.ndim++] = is.d[d];
    for (int d = (int)axis + 1; d < xs.ndim; d++) o.d[o.ndim++] = xs.d[d];
    const nano_tensor *ci = imp_const_of(im, ix), *cx = imp_const_of(im, x);
    int64_t nidx = imp_numel(&is), dim = xs.d[axis];
    if (ci) { /* constant indices: checked, and negative ones made positive */
        int fix = 0;
        for (int64_t k = 0; k < nidx; k++) {
            int64_t v = imp_val_i(ci->data, ci->dtype, k);
            if (v < -dim || v >= dim) return imp_bad(im, n, NANO_E_FORMAT, "an index is out of range");
            fix |= v < 0;
        }
        if (fix || cx) {
            int64_t *iv = malloc((size_t)nidx * sizeof *iv);
            if (!iv) return imp_nomem(im);
            for (int64_t k = 0; k < nidx; k++) {
                int64_t v = imp_val_i(ci->data, ci->dtype, k);
                iv[k] = v < 0 ? v + dim : v;
            }
            if (cx && !imp_fold_size_ok(&o)) {
                free(iv);
                return imp_bad(im, n, NANO_E_UNSUPPORTED, "a constant result of more than 2^24 elements");
            }
            if (cx) {
                size_t es = nano_dtype_size(cx->dtype), inner = es;
                int64_t outer = 1;
                for (int d = 0; d < axis; d++) outer *= xs.d[d];
                for (int d = (int)axis + 1; d < xs.ndim; d++) inner *= (size_t)xs.d[d];
                o.dtype = cx->dtype;
                char *dst = malloc(imp_bytes(&o));
                if (!dst) { free(iv); return imp_nomem(im); }
                for (int64_t r = 0; r < outer; r++)
                    for (int64_t k = 0; k < nidx; k++)
                        memcpy(dst + ((size_t)(r * nidx + k)) * inner,
                               (const char *)cx->data + ((size_t)(r * dim + iv[k])) * inner, inner);
                free(iv);
                return imp_emit_const(im, n, 0, &o, dst);
            }
            char nm[200];
            snprintf(nm, sizeof nm, "%s::indices", im->node_name);
            if ((ix = nano_graph_add_tensor(im->g, nm, NANO_DT_I64, NANO_T_CONST, is.ndim, is.d, iv, 1)) < 0) {
                free(iv);
                return imp_nomem(im);
            }
        }
    }
    o.dtype = imp_fdt(xs.dtype);
    nano_attrs a = {0};
    a.axis = (int32_t)axis;
    int32_t in[2] = {x, ix};
    return imp_emit(im, n, NANO_OP_GATHER, 2, in, 1, &o, &a);
}

static nano_status op_split(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(x, 0, "input");
    IN(sp, 1);
    imp_shape xs = imp_shape_of(im, x), o[NANO_MAX_OUT];
    int nout = (int)n->n_output, k;
    int64_t axis = imp_attr_i(n, "axis", 0), v[NANO_MAX_OUT + 1], total = 0;
    nano_status st = norm_axis(im, n, &axis, xs.ndim);
    if (st) return st;
    if (nout < 1 || nout > NANO_MAX_OUT) return imp_bad(im, n, NANO_E_UNSUPPORTED, "Split into 1 to 4 outputs only");
    if (sp >= 0) k = imp_const_ints(im, sp, "split (input 1)", v, NANO_MAX_OUT + 1);
    else k = imp_attr_ints(n, "split", v, NANO_MAX_OUT + 1);
    if (sp >= 0 && k < 0) return NANO_E_UNSUPPORTED;
    if (k < 0) { /* equal parts; opset 18's num_outputs lets the last be smaller */
        int64_t part = (xs.d[axis] + nout - 1) / nout;
        for (int i = 0; i < nout; i++) v[i] = i < nout - 1 ? part : xs.d[axis] - part * (nout - 1);
        k = nout;
    }
    if (k != nout) return imp_bad(im, n, NANO_E_FORMAT, "split must have one value per output");
    for (int i = 0; i < nout; i++) {
        o[i] = xs;
        o[i].dtype = imp_fdt(xs.dtype);
        o[i].d[axis] = v[i];
        total += v[i];
        if (v[i] < 1) return imp_bad(im, n, NANO_E_UNSUPPORTED, "a part is empty (split the axis into equal parts or give split)");
    }
    if (total != xs.d[axis]) return imp_bad(im, n, NANO_E_FORMAT, "the parts do not add up to the axis");
    nano_attrs a = {0};
    a.axis = (int32_t)axis;
    int32_t in[1] = {x};
    return imp_emit(im, n, NANO_OP_SPLIT, 1, in, nout, o, &a);
}

static nano_status op_softmax(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(x, 0, "input");
    imp_shape xs = imp_shape_of(im, x);
    int64_t axis = imp_attr_i(n, "axis", im->opset < 13 ? 1 : -1);
    nano_status st = norm_axis(im, n, &axis, xs.ndim);
    if (st) return st;
    if (im->opset < 13) { /* coerced to 2-D at axis: the same as one axis when nothing follows it */
        int64_t after = 1;
        for (int d = (int)axis + 1; d < xs.ndim; d++) after *= xs.d[d];
        if (after != 1) return imp_bad(im, n, NANO_E_UNSUPPORTED, "opset < 13 Softmax over several dimensions (axis is not the "
                                   "last); re-export with opset 13 or later");
    }
    nano_attrs a = {0};
    a.axis = (int32_t)axis;
    xs.dtype = NANO_DT_F32;
    int32_t in[1] = {x};
    return imp_emit(im, n, NANO_OP_SOFTMAX, 1, in, 1, &xs, &a);
}

static nano_status op_reducemean(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    NEED(x, 0, "data");
    IN(ax, 1);
    imp_shape xs = imp_shape_of(im, x), o = {.dtype = NANO_DT_F32};
    int64_t v[NANO_MAX_DIMS + 1];
    int k = -1;
    if (im->opset >= 18 && ax >= 0) {
        if ((k = imp_const_ints(im, ax, "axes (input 1)", v, NANO_MAX_DIMS)) < 0) return NANO_E_UNSUPPORTED;
    } else {
        k = imp_attr_ints(n, "axes", v, NANO_MAX_DIMS);
    }
    if (k > NANO_MAX_DIMS) return imp_bad(im, n, NANO_E_FORMAT, "more axes than dimensions");
    nano_attrs a = {0};
    a.keepdims = imp_attr_i(n, "keepdims", 1) != 0;
    if (k <= 0 && imp_attr_i(n, "noop_with_empty_axes", 0)) return imp_emit_move(im, n, x, xs, NANO_OP_IDENTITY);
    if (k <= 0) a.axes_mask = (1 << xs.ndim) - 1;
    for (int i = 0; i < k; i++) {
        nano_status st = norm_axis(im, n, &v[i], xs.ndim);
        if (st) return st;
        a.axes_mask |= 1 << v[i];
    }
    for (int d = 0; d < xs.ndim; d++)
        if (!(a.axes_mask >> d & 1)) o.d[o.ndim++] = xs.d[d];
        else if (a.keepdims) o.d[o.ndim++] = 1;
    int32_t in[1] = {x};
    return imp_emit(im, n, NANO_OP_REDUCEMEAN, 1, in, 1, &o, &a);
}



typedef nano_status (*imp_fn)(onnx_imp *im, const Onnx__NodeProto *n, int op);

static const struct {
    const char *name;
    imp_fn fn;
    int op;
} OPS[] = {
    {"Conv", op_conv, NANO_OP_CONV}, {"Gemm", op_gemm, NANO_OP_GEMM}, {"MatMul", op_matmul, NANO_OP_MATMUL},
    {"BatchNormalization", op_batchnorm, NANO_OP_BATCHNORM}, {"Relu", op_unary, NANO_OP_RELU},
    {"Clip", op_unary, NANO_OP_CLIP}, {"Gelu", op_unary, NANO_OP_GELU}, {"Erf", op_unary, NANO_OP_ERF},
    {"Tanh", op_unary, NANO_OP_TANH}, {"Sigmoid", op_unary, NANO_OP_SIGMOID}, {"Sqrt", op_unary, NANO_OP_SQRT},
    {"Add", imp_op_binary, NANO_OP_ADD}, {"Sub", imp_op_binary, NANO_OP_SUB}, {"Mul", imp_op_binary, NANO_OP_MUL},
    {"Div", imp_op_binary, NANO_OP_DIV}, {"Pow", imp_op_binary, NANO_OP_POW}, {"Where", imp_op_binary, NANO_OP_WHERE},
    {"Equal", imp_op_binary, NANO_OP_NONE}, {"MaxPool", op_pool, NANO_OP_MAXPOOL},
    {"AveragePool", op_pool, NANO_OP_AVGPOOL}, {"GlobalAveragePool", op_pool, NANO_OP_GLOBALAVGPOOL},
    {"Flatten", op_reshape, NANO_OP_RESHAPE}, {"Reshape", op_reshape, NANO_OP_RESHAPE},
    {"Squeeze", op_reshape, NANO_OP_RESHAPE}, {"Unsqueeze", op_reshape, NANO_OP_RESHAPE},
    {"Transpose", op_transpose, NANO_OP_TRANSPOSE}, {"Concat", op_concat, NANO_OP_CONCAT},
    {"Slice", op_slice, NANO_OP_SLICE}, {"Gather", op_gather, NANO_OP_GATHER}, {"Split", op_split, NANO_OP_SPLIT},
    {"Softmax", op_softmax, NANO_OP_SOFTMAX}, {"LayerNormalization", op_layernorm, NANO_OP_LAYERNORM},
    {"ReduceMean", op_reducemean, NANO_OP_REDUCEMEAN}, {"Identity", imp_op_identity, NANO_OP_IDENTITY},
    {"Dropout", imp_op_identity, NANO_OP_IDENTITY}, {"Cast", imp_op_identity, NANO_OP_CAST},
    {"Constant", imp_op_const, 0}, {"Shape", imp_op_const, 0}, {"ConstantOfShape", imp_op_const, 0}, {"Range", imp_op_const, 0},
    {"Expand", imp_op_const, 0},
};

const char imp_supported_ops[] =
    "Conv, Gemm, MatMul, BatchNormalization, Relu, Clip, Gelu, Erf, Tanh, Sigmoid, Sqrt, Add, Sub, Mul, Div, Pow, "
    "Where, Equal (constant), MaxPool, AveragePool, GlobalAveragePool, Flatten, Reshape, Squeeze, Unsqueeze, "
    "Transpose, Concat, Slice, Gather, Split, Softmax, LayerNormalization, ReduceMean, Identity, Dropout, Cast, "
    "Constant, Shape, ConstantOfShape, Range, Expand";

nano_status imp_node(onnx_imp *im, const Onnx__NodeProto *n) {
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (!strcmp(OPS[i].name, n->op_type)) {
            if (n->n_output < 1) return imp_bad(im, n, NANO_E_FORMAT, "the node has no outputs");
            return OPS[i].fn(im, n, OPS[i].op);
        }
    return imp_fail(im, NANO_E_UNSUPPORTED, "node %s (op_type %s) is not supported; supported: %s", im->node_name,
                    n->op_type, imp_supported_ops);
}
