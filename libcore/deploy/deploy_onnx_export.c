/* deploy_onnx_export — a nano_graph written back as an ONNX model (opset 17, ir_version 8).
 *
 * Each nano node becomes its standard ONNX operator; what nano fuses is unfused again
 * (a convolution's ReLU/Clip/GELU becomes a node of its own), GELU is written as the erf
 * decomposition opset 17 needs (Div, Erf, Add, Mul, Mul, as torch exports it) and the
 * normalised attributes become the constant inputs ONNX wants (Reshape's shape, Slice's
 * starts/ends/axes/steps, Split's sizes, Clip's bounds). Constants are raw_data.
 *
 * The one design decision: the output is canonical — names of the extra tensors derive
 * from the node's, initializers are sorted by name, every attribute is written — so
 * exporting a re-imported export gives the same bytes (validation/deploy/test_onnx.c). */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deploy/deploy_onnx_impl.h"

#define EX_MAX_ATTRS 8

typedef struct onnx_ex {
    const nano_graph *g;
    void **mem;                 /* every allocation, freed together */
    size_t nmem, capmem;
    Onnx__NodeProto **nodes;
    size_t nnodes, capnodes;
    Onnx__TensorProto **inits;
    size_t ninits, capinits;
    int nomem;
} onnx_ex;

static void *ex_alloc(onnx_ex *e, size_t n) {
    if (e->nmem == e->capmem) {
        size_t c = e->capmem ? e->capmem * 2 : 256;
        void **m = realloc(e->mem, c * sizeof *m);
        if (!m) { e->nomem = 1; return NULL; }
        e->mem = m;
        e->capmem = c;
    }
    void *p = calloc(1, n ? n : 1);
    if (!p) { e->nomem = 1; return NULL; }
    e->mem[e->nmem++] = p;
    return p;
}

static char *ex_str(onnx_ex *e, const char *a, const char *b) {
    size_t la = strlen(a), lb = b ? strlen(b) : 0;
    char *s = ex_alloc(e, la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    if (b) memcpy(s + la, b, lb);
    s[la + lb] = 0;
    return s;
}

static int ex_push(onnx_ex *e, void ***arr, size_t *n, size_t *cap, void *item) {
    if (!item) return -1;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        void **a = ex_alloc(e, c * sizeof *a);
        if (!a) return -1;
        if (*n) memcpy(a, *arr, *n * sizeof *a);
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = item;
    return 0;
}

/* The ONNX name of tensor t (made up when the graph has none). */
static const char *ex_tname(onnx_ex *e, int t) {
    if (t < 0) return "";
    const char *s = nano_tensor_name(e->g, t);
    if (s[0]) return s;
    char buf[32];
    snprintf(buf, sizeof buf, "tensor_%d", t);
    const char *r = ex_str(e, buf, NULL);
    return r ? r : "";
}

/* Adds a node; inputs named "" are absent (trailing ones dropped). */
static Onnx__NodeProto *ex_node(onnx_ex *e, const char *op, const char *name, int nin, const char *const *in,
                                int nout, const char *const *out) {
    Onnx__NodeProto *n = ex_alloc(e, sizeof *n);
    if (!n) return NULL;
    onnx__node_proto__init(n);
    while (nin > 0 && !in[nin - 1][0]) nin--;
    n->op_type = ex_str(e, op, NULL);
    n->name = ex_str(e, name, NULL);
    n->input = ex_alloc(e, (size_t)(nin + 1) * sizeof *n->input);
    n->output = ex_alloc(e, (size_t)nout * sizeof *n->output);
    n->attribute = ex_alloc(e, EX_MAX_ATTRS * sizeof *n->attribute);
    if (!n->input || !n->output || !n->attribute) return NULL;
    for (int i = 0; i < nin; i++) n->input[i] = ex_str(e, in[i], NULL);
    for (int i = 0; i < nout; i++) n->output[i] = ex_str(e, out[i], NULL);
    n->n_input = (size_t)nin;
    n->n_output = (size_t)nout;
    if (ex_push(e, (void ***)&e->nodes, &e->nnodes, &e->capnodes, n)) return NULL;
    return e->nomem ? NULL : n;
}

static Onnx__AttributeProto *ex_attr(onnx_ex *e, Onnx__NodeProto *n, const char *name, int type) {
    if (!n || n->n_attribute == EX_MAX_ATTRS) { e->nomem = 1; return NULL; }
    Onnx__AttributeProto *a = ex_alloc(e, sizeof *a);
    if (!a) return NULL;
    onnx__attribute_proto__init(a);
    a->name = ex_str(e, name, NULL);
    a->has_type = 1;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static void ex_attr_i(onnx_ex *e, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) { a->has_i = 1; a->i = v; }
}

static void ex_attr_f(onnx_ex *e, Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) { a->has_f = 1; a->f = v; }
}

static void ex_attr_ints(onnx_ex *e, Onnx__NodeProto *n, const char *name, const int32_t *v, int k) {
    Onnx__AttributeProto *a = ex_attr(e, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (!a || !(a->ints = ex_alloc(e, (size_t)k * sizeof *a->ints))) return;
    for (int i = 0; i < k; i++) a->ints[i] = v[i];
    a->n_ints = (size_t)k;
}

/* Adds an initializer; data is borrowed (it must live until the model is packed). */
static int ex_init(onnx_ex *e, const char *name, int onnx_type, int ndim, const int64_t *shape, const void *data,
                   size_t bytes) {
    Onnx__TensorProto *t = ex_alloc(e, sizeof *t);
    if (!t) return -1;
    onnx__tensor_proto__init(t);
    t->name = ex_str(e, name, NULL);
    t->has_data_type = 1;
    t->data_type = onnx_type;
    t->n_dims = (size_t)ndim;
    t->dims = ex_alloc(e, (size_t)ndim * sizeof *t->dims);
    for (int d = 0; t->dims && d < ndim; d++) t->dims[d] = shape[d];
    t->has_raw_data = 1;
    t->raw_data.len = bytes;
    t->raw_data.data = (uint8_t *)data;
    return ex_push(e, (void ***)&e->inits, &e->ninits, &e->capinits, t);
}

/* Generated initializers (1-D int64; a float scalar): their names, base + suffix. */
static const char *ex_const_i64(onnx_ex *e, const char *base, const char *suffix, const int64_t *v, int k) {
    const char *name = ex_str(e, base, suffix);
    int64_t *d = ex_alloc(e, (size_t)k * sizeof *d), shape[1] = {k};
    if (!name || !d) return "";
    memcpy(d, v, (size_t)k * sizeof *d);
    return ex_init(e, name, ONNX_INT64, 1, shape, d, (size_t)k * 8) ? "" : name;
}

static const char *ex_const_f(onnx_ex *e, const char *base, const char *suffix, float v) {
    const char *name = ex_str(e, base, suffix);
    float *d = ex_alloc(e, sizeof *d);
    if (!name || !d) return "";
    *d = v;
    return ex_init(e, name, ONNX_FLOAT, 0, NULL, d, 4) ? "" : name;
}

/* The activation act from x to y; base names the extra nodes and tensors (a standalone
 * Clip node keeps base itself, so a re-imported export names it the same). */
static void ex_act(onnx_ex *e, int act, float lo, float hi, const char *base, const char *x, const char *y,
                   int standalone) {
    const char *in[3] = {x, "", ""}, *out[1] = {y};
    switch (act) {
    case NANO_ACT_RELU: ex_node(e, "Relu", ex_str(e, base, "::relu"), 1, in, 1, out); return;
    case NANO_ACT_SIGMOID: ex_node(e, "Sigmoid", ex_str(e, base, "::sigmoid"), 1, in, 1, out); return;
    case NANO_ACT_TANH: ex_node(e, "Tanh", ex_str(e, base, "::tanh"), 1, in, 1, out); return;
    case NANO_ACT_CLIP:
        if (lo > -INFINITY) in[1] = ex_const_f(e, base, "::min", lo);
        if (hi < INFINITY) in[2] = ex_const_f(e, base, "::max", hi);
        ex_node(e, "Clip", standalone ? base : ex_str(e, base, "::clip"), 3, in, 1, out);
        return;
    case NANO_ACT_GELU: { /* x · 0.5 · (1 + erf(x / √2)) */
        const char *t[4] = {ex_str(e, base, "::gelu_div"), ex_str(e, base, "::gelu_erf"),
                            ex_str(e, base, "::gelu_add"), ex_str(e, base, "::gelu_mul")};
        const char *a[2];
        a[0] = x, a[1] = ex_const_f(e, base, "::gelu_sqrt2", (float)M_SQRT2);
        ex_node(e, "Div", t[0], 2, a, 1, &t[0]);
        ex_node(e, "Erf", t[1], 1, &t[0], 1, &t[1]);
        a[0] = t[1], a[1] = ex_const_f(e, base, "::gelu_one", 1.0f);
        ex_node(e, "Add", t[2], 2, a, 1, &t[2]);
        a[0] = x, a[1] = t[2];
        ex_node(e, "Mul", t[3], 2, a, 1, &t[3]);
        a[0] = t[3], a[1] = ex_const_f(e, base, "::gelu_half", 0.5f);
        ex_node(e, "Mul", ex_str(e, base, "::gelu"), 2, a, 1, out);
        return;
    }
    case NANO_ACT_GELU_TANH: { /* 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 x³))) */
        static const char *const sfx[8] = {"::gt_sq", "::gt_cube", "::gt_cubek", "::gt_inner", "::gt_scaled",
                                           "::gt_tanh", "::gt_one", "::gt_xmul"};
        const char *t[8], *a[2];
        for (int i = 0; i < 8; i++) t[i] = ex_str(e, base, sfx[i]);
        a[0] = x, a[1] = x;
        ex_node(e, "Mul", t[0], 2, a, 1, &t[0]);
        a[0] = t[0];
        ex_node(e, "Mul", t[1], 2, a, 1, &t[1]);
        a[0] = t[1], a[1] = ex_const_f(e, base, "::gt_k", 0.044715f);
        ex_node(e, "Mul", t[2], 2, a, 1, &t[2]);
        a[0] = x, a[1] = t[2];
        ex_node(e, "Add", t[3], 2, a, 1, &t[3]);
        a[0] = t[3], a[1] = ex_const_f(e, base, "::gt_c", 0.7978845608f);
        ex_node(e, "Mul", t[4], 2, a, 1, &t[4]);
        ex_node(e, "Tanh", t[5], 1, &t[4], 1, &t[5]);
        a[0] = t[5], a[1] = ex_const_f(e, base, "::gt_onec", 1.0f);
        ex_node(e, "Add", t[6], 2, a, 1, &t[6]);
        a[0] = x, a[1] = t[6];
        ex_node(e, "Mul", t[7], 2, a, 1, &t[7]);
        a[0] = t[7], a[1] = ex_const_f(e, base, "::gt_half", 0.5f);
        ex_node(e, "Mul", ex_str(e, base, "::gelu"), 2, a, 1, out);
        return;
    }
    default: return;
    }
}

static int onnx_type_of(int dtype) {
    switch (dtype) {
    case NANO_DT_F32: return ONNX_FLOAT;
    case NANO_DT_I64: return ONNX_INT64;
    case NANO_DT_I32: return ONNX_INT32;
    case NANO_DT_U8: return ONNX_BOOL;
    default: return 0;
    }
}

static const char *const OP_TYPE[NANO_OP_COUNT] = {
    [NANO_OP_CONV] = "Conv", [NANO_OP_GEMM] = "Gemm", [NANO_OP_MATMUL] = "MatMul",
    [NANO_OP_BATCHNORM] = "BatchNormalization", [NANO_OP_RELU] = "Relu", [NANO_OP_CLIP] = "Clip",
    [NANO_OP_ERF] = "Erf", [NANO_OP_TANH] = "Tanh", [NANO_OP_SIGMOID] = "Sigmoid", [NANO_OP_ADD] = "Add",
    [NANO_OP_SUB] = "Sub", [NANO_OP_MUL] = "Mul", [NANO_OP_DIV] = "Div", [NANO_OP_POW] = "Pow",
    [NANO_OP_SQRT] = "Sqrt", [NANO_OP_MAXPOOL] = "MaxPool", [NANO_OP_AVGPOOL] = "AveragePool",
    [NANO_OP_GLOBALAVGPOOL] = "GlobalAveragePool", [NANO_OP_RESHAPE] = "Reshape",
    [NANO_OP_TRANSPOSE] = "Transpose", [NANO_OP_CONCAT] = "Concat", [NANO_OP_SLICE] = "Slice",
    [NANO_OP_GATHER] = "Gather", [NANO_OP_SPLIT] = "Split", [NANO_OP_SOFTMAX] = "Softmax",
    [NANO_OP_LAYERNORM] = "LayerNormalization", [NANO_OP_REDUCEMEAN] = "ReduceMean", [NANO_OP_WHERE] = "Where",
    [NANO_OP_IDENTITY] = "Identity", [NANO_OP_CAST] = "Cast",
};

/* Node k of the graph as ONNX nodes. */
static nano_status ex_one(onnx_ex *e, int k, char *err, size_t errlen) {
    const nano_graph *g = e->g;
    const nano_node *nd = &g->nodes[k];
    const nano_attrs *a = &nd->a;
    char made[32];
    const char *name = nano_node_name(g, k);
    if (!name[0]) { snprintf(made, sizeof made, "node_%d", k); name = made; }
    const char *in[NANO_MAX_IN + 2], *out[NANO_MAX_OUT];
    int nin = nd->nin;
    if (nd->op <= NANO_OP_NONE || nd->op >= NANO_OP_COUNT || (!OP_TYPE[nd->op] && nd->op != NANO_OP_GELU)) {
        snprintf(err, errlen, "node %s: op %d has no ONNX form", name, nd->op);
        return NANO_E_UNSUPPORTED;
    }
    for (int i = 0; i < nin; i++) {
        in[i] = ex_tname(e, nd->in[i]);
        if (nd->in[i] >= 0 && g->tensors[nd->in[i]].dtype == NANO_DT_I8) {
            snprintf(err, errlen, "node %s (%s) is quantised (int8); ONNX export is for fp32 graphs", name,
                     nano_op_name(nd->op));
            return NANO_E_UNSUPPORTED;
        }
    }
    for (int o = 0; o < nd->nout; o++) out[o] = ex_tname(e, nd->out[o]);
    int fused = a->act != NANO_ACT_NONE && nd->op != NANO_OP_GELU && nd->op != NANO_OP_CLIP;
    if ((nd->op == NANO_OP_CONV || nd->op == NANO_OP_GEMM) && nin > 3) {
        snprintf(err, errlen, "node %s (%s) is quantised (int8 with weight scales); ONNX export is for fp32 graphs",
                 name, nano_op_name(nd->op));
        return NANO_E_UNSUPPORTED;
    }
    const char *y = out[0];
    if (fused) out[0] = ex_str(e, y, "::pre");
    const nano_tensor *x0 = nin > 0 && nd->in[0] >= 0 ? &g->tensors[nd->in[0]] : NULL;
    Onnx__NodeProto *n = NULL;
    switch (nd->op) {
    case NANO_OP_GELU:
        ex_act(e, a->act == NANO_ACT_GELU_TANH ? NANO_ACT_GELU_TANH : NANO_ACT_GELU, 0, 0, name, in[0], y, 1);
        return NANO_OK;
    case NANO_OP_CLIP:
        ex_act(e, NANO_ACT_CLIP, a->act_min, a->act_max, name, in[0], y, 1);
        return NANO_OK;
    case NANO_OP_RESHAPE: {
        const nano_tensor *t = &g->tensors[nd->out[0]];
        in[1] = ex_const_i64(e, name, "::shape", t->shape, t->ndim);
        n = ex_node(e, "Reshape", name, 2, in, 1, out);
        break;
    }
    case NANO_OP_SLICE: {
        const nano_tensor *t = &g->tensors[nd->out[0]];
        int64_t ends[NANO_MAX_DIMS], axes[NANO_MAX_DIMS];
        for (int d = 0; x0 && d < x0->ndim; d++) {
            ends[d] = a->begin[d] + t->shape[d] * a->step[d];
            if (ends[d] < 0) ends[d] = INT64_MIN; /* a negative step down past index 0 */
            axes[d] = d;
        }
        int r = x0 ? x0->ndim : 0;
        in[1] = ex_const_i64(e, name, "::starts", a->begin, r);
        in[2] = ex_const_i64(e, name, "::ends", ends, r);
        in[3] = ex_const_i64(e, name, "::axes", axes, r);
        in[4] = ex_const_i64(e, name, "::steps", a->step, r);
        n = ex_node(e, "Slice", name, 5, in, 1, out);
        break;
    }
    case NANO_OP_SPLIT: {
        int64_t sizes[NANO_MAX_OUT];
        for (int o = 0; o < nd->nout; o++) sizes[o] = g->tensors[nd->out[o]].shape[a->axis];
        in[1] = ex_const_i64(e, name, "::split", sizes, nd->nout);
        n = ex_node(e, "Split", name, 2, in, nd->nout, out);
        ex_attr_i(e, n, "axis", a->axis);
        break;
    }
    default:
        n = ex_node(e, OP_TYPE[nd->op], name, nin, in, nd->nout, out);
        break;
    }
    switch (nd->op) {
    case NANO_OP_CONV: case NANO_OP_MAXPOOL: case NANO_OP_AVGPOOL:
        ex_attr_ints(e, n, "kernel_shape", a->kernel, 2);
        ex_attr_ints(e, n, "strides", a->stride, 2);
        ex_attr_ints(e, n, "pads", a->pad, 4);
        if (nd->op != NANO_OP_AVGPOOL) ex_attr_ints(e, n, "dilations", a->dilation, 2);
        if (nd->op == NANO_OP_CONV) ex_attr_i(e, n, "group", a->group);
        if (nd->op != NANO_OP_CONV) ex_attr_i(e, n, "ceil_mode", a->ceil_mode);
        if (nd->op == NANO_OP_AVGPOOL) ex_attr_i(e, n, "count_include_pad", a->count_include_pad);
        break;
    case NANO_OP_GEMM:
        ex_attr_f(e, n, "alpha", a->alpha);
        ex_attr_f(e, n, "beta", a->beta);
        ex_attr_i(e, n, "transA", a->trans_a);
        ex_attr_i(e, n, "transB", a->trans_b);
        break;
    case NANO_OP_BATCHNORM: ex_attr_f(e, n, "epsilon", a->eps); break;
    case NANO_OP_LAYERNORM:
        ex_attr_i(e, n, "axis", a->axis);
        ex_attr_f(e, n, "epsilon", a->eps);
        break;
    case NANO_OP_TRANSPOSE: ex_attr_ints(e, n, "perm", a->perm, x0 ? x0->ndim : 0); break;
    case NANO_OP_CONCAT: case NANO_OP_GATHER: case NANO_OP_SOFTMAX: ex_attr_i(e, n, "axis", a->axis); break;
    case NANO_OP_REDUCEMEAN: {
        int32_t axes[NANO_MAX_DIMS];
        int c = 0;
        for (int d = 0; x0 && d < x0->ndim; d++)
            if (a->axes_mask >> d & 1) axes[c++] = d;
        ex_attr_ints(e, n, "axes", axes, c);
        ex_attr_i(e, n, "keepdims", a->keepdims);
        break;
    }
    case NANO_OP_CAST: {
        int to = onnx_type_of(a->to);
        if (!to) { snprintf(err, errlen, "node %s: Cast to %s", name, nano_dtype_name(a->to)); return NANO_E_UNSUPPORTED; }
        ex_attr_i(e, n, "to", to);
        break;
    }
    default: break;
    }
    if (fused) ex_act(e, a->act, a->act_min, a->act_max, name, out[0], y, 0);
    return NANO_OK;
}

static Onnx__ValueInfoProto *ex_value_info(onnx_ex *e, int t) {
    const nano_tensor *x = &e->g->tensors[t];
    Onnx__ValueInfoProto *v = ex_alloc(e, sizeof *v);
    Onnx__TypeProto *tp = ex_alloc(e, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = ex_alloc(e, sizeof *tt);
    Onnx__TensorShapeProto *sp = ex_alloc(e, sizeof *sp);
    Onnx__TensorShapeProto__Dimension **dims = ex_alloc(e, (size_t)(x->ndim + 1) * sizeof *dims);
    if (!v || !tp || !tt || !sp || !dims) return NULL;
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sp);
    for (int d = 0; d < x->ndim; d++) {
        if (!(dims[d] = ex_alloc(e, sizeof *dims[d]))) return NULL;
        onnx__tensor_shape_proto__dimension__init(dims[d]);
        dims[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dims[d]->dim_value = x->shape[d];
    }
    sp->dim = dims;
    sp->n_dim = (size_t)x->ndim;
    tt->has_elem_type = 1;
    tt->elem_type = onnx_type_of(x->dtype);
    tt->shape = sp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->name = (char *)ex_tname(e, t);
    v->type = tp;
    return v;
}

static int cmp_init(const void *a, const void *b) {
    return strcmp((*(Onnx__TensorProto *const *)a)->name, (*(Onnx__TensorProto *const *)b)->name);
}

/* Temporary file in the same directory, written, flushed, fsync'd and renamed over path. */
static nano_status write_durable(const char *path, const uint8_t *buf, size_t len, char *err, size_t errlen) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    if (!tmp) { snprintf(err, errlen, "%s: out of memory", path); return NANO_E_NOMEM; }
    snprintf(tmp, pl + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create a temporary file next to it: %s", path, strerror(errno));
        free(tmp);
        return NANO_E_IO;
    }
    FILE *f = fdopen(fd, "wb");
    int ok = f && fchmod(fd, 0644) == 0 && fwrite(buf, 1, len, f) == len && fflush(f) == 0 && fsync(fd) == 0;
    int saved = errno;
    if (f) ok = (fclose(f) == 0) && ok;
    else close(fd);
    if (ok && rename(tmp, path) != 0) { ok = 0; saved = errno; }
    if (!ok) {
        unlink(tmp);
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(saved));
        free(tmp);
        return NANO_E_IO;
    }
    free(tmp);
    char *dir = strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
    if (dir) { /* the rename itself reaches the disk with the directory */
        if (slash) *(slash == dir ? slash + 1 : slash) = 0;
        int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) { (void)fsync(dfd); close(dfd); }
        free(dir);
    }
    return NANO_OK;
}

nano_status deploy_onnx_write(const nano_graph *g, const char *path, char *err, size_t errlen) {
    onnx_ex e = {.g = g};
    nano_status st = NANO_OK;
    uint8_t *buf = NULL;
    for (int t = 0; t < g->ntensors && !st; t++) {
        const nano_tensor *x = &g->tensors[t];
        if (!onnx_type_of(x->dtype)) {
            snprintf(err, errlen, "tensor %s is %s; ONNX export is for fp32 graphs (export before quantising)",
                     nano_tensor_name(g, t), nano_dtype_name(x->dtype));
            st = NANO_E_UNSUPPORTED;
        } else if (x->kind == NANO_T_CONST) {
            if (!x->data) { snprintf(err, errlen, "constant %s has no data", nano_tensor_name(g, t)); st = NANO_E_FORMAT; }
            else if (ex_init(&e, ex_tname(&e, t), onnx_type_of(x->dtype), x->ndim, x->shape, x->data,
                             nano_tensor_bytes(x))) st = NANO_E_NOMEM;
        }
    }
    for (int k = 0; k < g->nnodes && !st; k++) st = ex_one(&e, k, err, errlen);
    Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    Onnx__OperatorSetIdProto ops = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsp = &ops;
    if (!st) {
        gp.name = "nebula";
        gp.input = ex_alloc(&e, (size_t)(g->ninputs + 1) * sizeof *gp.input);
        gp.output = ex_alloc(&e, (size_t)(g->noutputs + 1) * sizeof *gp.output);
        for (int i = 0; gp.input && i < g->ninputs; i++) gp.input[gp.n_input++] = ex_value_info(&e, g->inputs[i]);
        for (int i = 0; gp.output && i < g->noutputs; i++) gp.output[gp.n_output++] = ex_value_info(&e, g->outputs[i]);
        if (e.ninits) qsort(e.inits, e.ninits, sizeof *e.inits, cmp_init);
        gp.node = e.nodes;
        gp.n_node = e.nnodes;
        gp.initializer = e.inits;
        gp.n_initializer = e.ninits;
        ops.domain = "";
        ops.has_version = 1;
        ops.version = 17;
        m.has_ir_version = 1;
        m.ir_version = 8;
        m.producer_name = "nebula";
        m.opset_import = &opsp;
        m.n_opset_import = 1;
        m.graph = &gp;
        if (e.nomem) { snprintf(err, errlen, "%s: out of memory building the model", path); st = NANO_E_NOMEM; }
    }
    if (!st) {
        size_t len = onnx__model_proto__get_packed_size(&m);
        if (!(buf = malloc(len ? len : 1))) { snprintf(err, errlen, "%s: out of memory", path); st = NANO_E_NOMEM; }
        else if (onnx__model_proto__pack(&m, buf) != len) { snprintf(err, errlen, "%s: packing failed", path); st = NANO_E_FORMAT; }
        else st = write_durable(path, buf, len, err, errlen);
    }
    free(buf);
    for (size_t i = 0; i < e.nmem; i++) free(e.mem[i]);
    free(e.mem);
    return st;
}
