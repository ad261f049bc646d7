/* deploy_onnx — the ONNX importer: a .onnx file becomes a nano_graph.
 *
 * The file is parsed with protobuf-c against our subset of onnx.proto; initializers
 * become constants, graph inputs get their static shapes (from the file or the caller's
 * input_shapes), and every node is normalised to nano ops by deploy_onnx_ops.c.
 *
 * The one design decision: the importer knows every tensor's shape as it goes (each node's
 * outputs are computed when it is added), so attributes that depend on shapes are resolved
 * on the spot and shape-only subgraphs (Shape, Reshape/Concat/Gather of constants) become
 * constants at import; nano_graph_infer_shapes checks the finished graph once more. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deploy/deploy_onnx_impl.h"

/* Larger protobuf messages do not exist (2 GiB is the format's limit); models beyond it
 * keep their weights in external data, which is refused. */
#define ONNX_MAX_FILE ((int64_t)2 << 30)
#define ONNX_MAX_NUMEL ((int64_t)1 << 40)

nano_status imp_fail(onnx_imp *im, nano_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(im->err, im->errlen, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- attributes ------------------------------------------------------------------- */

const Onnx__AttributeProto *imp_attr(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
    return NULL;
}

int64_t imp_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def) {
    const Onnx__AttributeProto *a = imp_attr(n, name);
    return a && a->has_i ? a->i : def;
}

float imp_attr_f(const Onnx__NodeProto *n, const char *name, float def) {
    const Onnx__AttributeProto *a = imp_attr(n, name);
    return a && a->has_f ? a->f : def;
}

const char *imp_attr_s(const Onnx__NodeProto *n, const char *name, const char *def, char *buf, size_t len) {
    const Onnx__AttributeProto *a = imp_attr(n, name);
    if (!a || !a->has_s) return def;
    size_t k = a->s.len < len - 1 ? a->s.len : len - 1;
    memcpy(buf, a->s.data, k);
    buf[k] = 0;
    return buf;
}

int imp_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max) {
    const Onnx__AttributeProto *a = imp_attr(n, name);
    if (!a) return -1;
    int k = (int)(a->n_ints < (size_t)max ? a->n_ints : (size_t)max);
    for (int i = 0; i < k; i++) out[i] = a->ints[i];
    return a->n_ints > (size_t)max ? max + 1 : k;
}

/* ---- tensors ---------------------------------------------------------------------- */

int64_t imp_numel(const imp_shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->d[d];
    return n;
}

size_t imp_bytes(const imp_shape *s) {
    return (size_t)imp_numel(s) * nano_dtype_size(s->dtype);
}

int imp_broadcast(const imp_shape *a, const imp_shape *b, imp_shape *out) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    out->ndim = nd;
    for (int i = 0; i < nd; i++) {
        int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
        int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
        if (da != db && da != 1 && db != 1) return -1;
        out->d[i] = da == 1 ? db : da;
    }
    return 0;
}

void imp_copy_view(void *dst, const void *src, size_t es, int ndim, const int64_t *shape, int64_t off,
                   const int64_t *st) {
    int64_t idx[NANO_MAX_DIMS] = {0}, total = 1;
    for (int d = 0; d < ndim; d++) total *= shape[d];
    char *o = dst;
    const char *s = src;
    for (int64_t k = 0; k < total; k++) {
        memcpy(o + (size_t)k * es, s + (size_t)off * es, es);
        for (int d = ndim - 1; d >= 0; d--) { /* next index, row-major */
            off += st[d];
            if (++idx[d] < shape[d]) break;
            off -= st[d] * shape[d];
            idx[d] = 0;
        }
    }
}

imp_shape imp_shape_of(const onnx_imp *im, int t) {
    imp_shape s = {0};
    const nano_tensor *x = &im->g->tensors[t];
    s.dtype = x->dtype;
    s.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) s.d[d] = x->shape[d];
    return s;
}

const nano_tensor *imp_const_of(const onnx_imp *im, int t) {
    return t >= 0 && im->g->tensors[t].kind == NANO_T_CONST ? &im->g->tensors[t] : NULL;
}

int imp_const_ints(onnx_imp *im, int t, const char *what, int64_t *out, int max) {
    const nano_tensor *c = imp_const_of(im, t);
    if (!c || (c->dtype != NANO_DT_I64 && c->dtype != NANO_DT_I32) || c->ndim > 1) {
        imp_fail(im, NANO_E_UNSUPPORTED, "node %s: %s must be a constant 1-D integer tensor%s", im->node_name,
                 what, c ? "" : " (it is computed at run time)");
        return -1;
    }
    int64_t n = nano_tensor_numel(c);
    if (n > max) {
        imp_fail(im, NANO_E_UNSUPPORTED, "node %s: %s has %lld values (at most %d)", im->node_name, what,
                 (long long)n, max);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = c->dtype == NANO_DT_I64 ? ((const int64_t *)c->data)[i] : ((const int32_t *)c->data)[i];
    return (int)n;
}

int imp_const_scalar(onnx_imp *im, int t, const char *what, double *out) {
    const nano_tensor *c = imp_const_of(im, t);
    if (!c || nano_tensor_numel(c) != 1) {
        imp_fail(im, NANO_E_UNSUPPORTED, "node %s: %s must be a constant scalar", im->node_name, what);
        return -1;
    }
    switch (c->dtype) {
    case NANO_DT_F32: *out = *(const float *)c->data; break;
    case NANO_DT_I64: *out = (double)*(const int64_t *)c->data; break;
    case NANO_DT_I32: *out = *(const int32_t *)c->data; break;
    case NANO_DT_U8: *out = *(const uint8_t *)c->data; break;
    case NANO_DT_I8: *out = *(const int8_t *)c->data; break;
    default: imp_fail(im, NANO_E_UNSUPPORTED, "node %s: %s has dtype %s", im->node_name, what,
                      nano_dtype_name(c->dtype));
        return -1;
    }
    return 0;
}

/* FLOAT16 stays F16 (its bits copied), DOUBLE is narrowed to f32, BOOL/UINT8 become U8. */
nano_status imp_tensor(onnx_imp *im, const Onnx__TensorProto *tp, const char *what, imp_shape *s, void **data) {
    *data = NULL;
    memset(s, 0, sizeof *s);
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return imp_fail(im, NANO_E_UNSUPPORTED,
                        "%s keeps its data in an external file; external data is not supported "
                        "(export the model with the weights inside the .onnx file)", what);
    if (tp->n_dims > NANO_MAX_DIMS)
        return imp_fail(im, NANO_E_UNSUPPORTED, "%s has %zu dimensions (at most %d)", what, tp->n_dims,
                        NANO_MAX_DIMS);
    s->ndim = (int)tp->n_dims;
    int64_t numel = 1;
    for (int d = 0; d < s->ndim; d++) {
        int64_t v = tp->dims[d];
        if (v < 0) return imp_fail(im, NANO_E_FORMAT, "%s: dimension %d is %lld (negative)", what, d, (long long)v);
        if (v == 0) return imp_fail(im, NANO_E_UNSUPPORTED, "%s: dimension %d is 0 (empty tensors are not supported)", what, d);
        if (v > ONNX_MAX_NUMEL / numel)
            return imp_fail(im, NANO_E_FORMAT, "%s: its dimensions overflow (more than 2^40 elements)", what);
        s->d[d] = v;
        numel *= v;
    }
    int dt = tp->has_data_type ? tp->data_type : 0;
    size_t src_es;
    switch (dt) {
    case ONNX_FLOAT: s->dtype = NANO_DT_F32; src_es = 4; break;
    case ONNX_FLOAT16: s->dtype = NANO_DT_F16; src_es = 2; break;
    case ONNX_INT64: s->dtype = NANO_DT_I64; src_es = 8; break;
    case ONNX_INT32: s->dtype = NANO_DT_I32; src_es = 4; break;
    case ONNX_BOOL: case ONNX_UINT8: s->dtype = NANO_DT_U8; src_es = 1; break;
    case ONNX_INT8: s->dtype = NANO_DT_I8; src_es = 1; break;
    case ONNX_DOUBLE: s->dtype = NANO_DT_F32; src_es = 8; break;
    default:
        return imp_fail(im, NANO_E_UNSUPPORTED, "%s has ONNX data_type %d (supported: FLOAT, FLOAT16, DOUBLE, "
                        "INT64, INT32, INT8, UINT8, BOOL)", what, dt);
    }
    size_t es = nano_dtype_size(s->dtype), n = (size_t)numel, have;
    /* the stored values are counted before anything is allocated: the dims alone may say 2^40 */
    if (tp->has_raw_data && tp->raw_data.len != n * src_es)
        return imp_fail(im, NANO_E_FORMAT, "%s: raw_data has %zu bytes, its dims and type need %zu", what,
                        tp->raw_data.len, n * src_es);
    switch (dt) {
    case ONNX_FLOAT: have = tp->n_float_data; break;
    case ONNX_INT64: have = tp->n_int64_data; break;
    case ONNX_DOUBLE: have = tp->n_double_data; break;
    default: have = tp->n_int32_data; break;
    }
    if (!tp->has_raw_data && have != n)
        return imp_fail(im, NANO_E_FORMAT, "%s: %zu values stored, its dims need %zu", what, have, n);
    char *out = malloc(n * es);
    if (!out) return imp_fail(im, NANO_E_NOMEM, "%s: out of memory for %zu bytes", what, n * es);
    if (tp->has_raw_data) {
        if (dt == ONNX_DOUBLE) {
            for (size_t i = 0; i < n; i++) {
                double v;
                memcpy(&v, tp->raw_data.data + i * 8, 8);
                ((float *)out)[i] = (float)v;
            }
        } else {
            memcpy(out, tp->raw_data.data, n * es);
        }
        *data = out;
        return NANO_OK;
    }
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case ONNX_FLOAT: ((float *)out)[i] = tp->float_data[i]; break;
        case ONNX_INT64: ((int64_t *)out)[i] = tp->int64_data[i]; break;
        case ONNX_DOUBLE: ((float *)out)[i] = (float)tp->double_data[i]; break;
        case ONNX_INT32: ((int32_t *)out)[i] = tp->int32_data[i]; break;
        case ONNX_FLOAT16: ((uint16_t *)out)[i] = (uint16_t)tp->int32_data[i]; break;
        case ONNX_INT8: ((int8_t *)out)[i] = (int8_t)tp->int32_data[i]; break;
        default: ((uint8_t *)out)[i] = (uint8_t)tp->int32_data[i]; break; /* BOOL, UINT8 */
        }
    }
    *data = out;
    return NANO_OK;
}

/* ---- node inputs and outputs ------------------------------------------------------ */

int imp_in(onnx_imp *im, const Onnx__NodeProto *n, int i) {
    if (i >= (int)n->n_input || !n->input[i][0]) return -1;
    int t = nano_graph_find(im->g, n->input[i]);
    if (t < 0) {
        imp_fail(im, NANO_E_FORMAT, "node %s (op_type %s) reads '%s', which no graph input, initializer or "
                 "earlier node provides (the nodes must be in topological order)", im->node_name,
                 n->op_type, n->input[i]);
        return -2;
    }
    return t;
}

int imp_out_used(const onnx_imp *im, const Onnx__NodeProto *n, int i) {
    if (i >= (int)n->n_output || !n->output[i][0]) return 0;
    const char *name = n->output[i];
    const Onnx__GraphProto *gp = im->gp;
    for (size_t k = 0; k < gp->n_output; k++)
        if (!strcmp(gp->output[k]->name, name)) return 1;
    for (size_t k = 0; k < gp->n_node; k++)
        for (size_t j = 0; j < gp->node[k]->n_input; j++)
            if (!strcmp(gp->node[k]->input[j], name)) return 1;
    return 0;
}

/* The graph output index of name, or -1. */
static int graph_output_index(const onnx_imp *im, const char *name) {
    for (size_t k = 0; k < im->gp->n_output; k++)
        if (!strcmp(im->gp->output[k]->name, name)) return (int)k;
    return -1;
}

/* The tensor for node output i, created or (a graph output) completed with shape s. */
static int out_tensor(onnx_imp *im, const Onnx__NodeProto *n, int i, const imp_shape *s) {
    char made[200];
    const char *name = i < (int)n->n_output ? n->output[i] : "";
    if (!name[0]) { /* an unused optional output still needs a tensor of its own */
        snprintf(made, sizeof made, "%s::out%d", im->node_name, i);
        name = made;
    }
    int t = nano_graph_find(im->g, name);
    int k = graph_output_index(im, name);
    if (t >= 0 && (k < 0 || im->out_written[k])) {
        imp_fail(im, NANO_E_FORMAT, "node %s (op_type %s) writes '%s', which is already a graph input, an "
                 "initializer or another node's output", im->node_name, n->op_type, name);
        return -1;
    }
    if (t < 0) {
        t = nano_graph_add_tensor(im->g, name, s->dtype, NANO_T_ACT, s->ndim, s->d, NULL, 0);
        if (t < 0) imp_fail(im, NANO_E_NOMEM, "out of memory adding tensor %s", name);
        return t;
    }
    nano_tensor *x = &im->g->tensors[t];
    x->dtype = s->dtype;
    x->ndim = s->ndim;
    for (int d = 0; d < NANO_MAX_DIMS; d++) x->shape[d] = d < s->ndim ? s->d[d] : 0;
    im->out_written[k] = 1;
    return t;
}

nano_status imp_emit(onnx_imp *im, const Onnx__NodeProto *n, int op, int nin, const int32_t *in, int nout,
                     const imp_shape *outs, const nano_attrs *a) {
    int32_t out[NANO_MAX_OUT];
    if (nout > NANO_MAX_OUT)
        return imp_fail(im, NANO_E_UNSUPPORTED, "node %s (op_type %s) has %d outputs (at most %d)", im->node_name,
                        n->op_type, nout, NANO_MAX_OUT);
    for (int d = 0; d < nout; d++) {
        int64_t numel = 1;
        for (int k = 0; k < outs[d].ndim; k++) {
            if (outs[d].d[k] < 1 || outs[d].d[k] > ONNX_MAX_NUMEL / numel)
                return imp_fail(im, NANO_E_UNSUPPORTED, "node %s (op_type %s): output %d would have dimension %d "
                                "of %lld (empty or oversized tensors are not supported)", im->node_name,
                                n->op_type, d, k, (long long)outs[d].d[k]);
            numel *= outs[d].d[k];
        }
    }
    for (int i = 0; i < nout; i++)
        if ((out[i] = out_tensor(im, n, i, &outs[i])) < 0) return NANO_E_FORMAT;
    if (nano_graph_add_node(im->g, op, im->node_name, nin, in, nout, out, a) < 0)
        return imp_fail(im, NANO_E_NOMEM, "out of memory adding node %s", im->node_name);
    return NANO_OK;
}

nano_status imp_emit_const(onnx_imp *im, const Onnx__NodeProto *n, int i, const imp_shape *s, void *data) {
    const char *name = i < (int)n->n_output ? n->output[i] : "";
    if (!name[0]) { free(data); return NANO_OK; }
    if (graph_output_index(im, name) >= 0) { /* a constant graph output: copied out by an identity */
        char cname[200];
        snprintf(cname, sizeof cname, "%s::const", name);
        int c = nano_graph_add_tensor(im->g, cname, s->dtype, NANO_T_CONST, s->ndim, s->d, data, 1);
        if (c < 0) { free(data); return imp_fail(im, NANO_E_NOMEM, "out of memory adding %s", cname); }
        int32_t in[1] = {c};
        nano_attrs a = {0};
        return imp_emit(im, n, NANO_OP_IDENTITY, 1, in, 1, s, &a);
    }
    if (nano_graph_find(im->g, name) >= 0) {
        free(data);
        return imp_fail(im, NANO_E_FORMAT, "node %s (op_type %s) writes '%s', which already exists",
                        im->node_name, n->op_type, name);
    }
    if (nano_graph_add_tensor(im->g, name, s->dtype, NANO_T_CONST, s->ndim, s->d, data, 1) < 0) {
        free(data);
        return imp_fail(im, NANO_E_NOMEM, "out of memory adding %s", name);
    }
    return NANO_OK;
}

/* ---- graph inputs, outputs, the file ---------------------------------------------- */

/* Finds name's override in "a:1x3x4,b:1x128"; 1 and the shape when found, 0 when not,
 * -1 (err set) when the text is malformed. */
static int override_shape(onnx_imp *im, const char *spec, const char *name, imp_shape *s) {
    if (!spec) return 0;
    size_t nl = strlen(name);
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *colon = NULL;
        for (const char *q = p; q < end; q++)
            if (*q == ':') colon = q;
        if (!colon) {
            imp_fail(im, NANO_E_ARG, "input_shapes: '%.*s' is not NAME:DxDx... (e.g. input:1x3x224x224)",
                     (int)(end - p), p);
            return -1;
        }
        if ((size_t)(colon - p) == nl && !strncmp(p, name, nl)) {
            s->ndim = 0;
            for (const char *q = colon + 1; q < end;) {
                char *e;
                errno = 0;
                long long v = strtoll(q, &e, 10);
                if (e == q || errno || v < 1 || v > ((int64_t)1 << 31) || s->ndim == NANO_MAX_DIMS ||
                    (e < end && *e != 'x')) {
                    imp_fail(im, NANO_E_ARG, "input_shapes: the shape of %s ('%.*s') must be positive "
                             "dimensions joined by x, at most %d", name, (int)(end - colon - 1), colon + 1,
                             NANO_MAX_DIMS);
                    return -1;
                }
                s->d[s->ndim++] = v;
                q = e < end ? e + 1 : e;
            }
            return 1;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

static int is_initializer(const Onnx__GraphProto *gp, const char *name) {
    for (size_t i = 0; i < gp->n_initializer; i++)
        if (gp->initializer[i]->name && !strcmp(gp->initializer[i]->name, name)) return 1;
    return 0;
}

static nano_status elem_dtype(onnx_imp *im, const Onnx__ValueInfoProto *v, const char *role, int *dtype) {
    const Onnx__TypeProto *tp = v->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return imp_fail(im, NANO_E_UNSUPPORTED, "graph %s %s is not a tensor", role, v->name);
    switch (tp->tensor_type->elem_type) {
    case ONNX_FLOAT: *dtype = NANO_DT_F32; return NANO_OK;
    case ONNX_INT64: *dtype = NANO_DT_I64; return NANO_OK;
    case ONNX_INT32: *dtype = NANO_DT_I32; return NANO_OK;
    case ONNX_BOOL: case ONNX_UINT8: *dtype = NANO_DT_U8; return NANO_OK;
    default:
        return imp_fail(im, NANO_E_UNSUPPORTED, "graph %s %s has ONNX elem_type %d (supported: FLOAT, INT64, "
                        "INT32, BOOL, UINT8)", role, v->name, tp->tensor_type->elem_type);
    }
}

static nano_status add_input(onnx_imp *im, const Onnx__ValueInfoProto *v, const char *spec) {
    int dtype = 0;
    nano_status st = elem_dtype(im, v, "input", &dtype);
    if (st) return st;
    imp_shape s = {.dtype = dtype};
    const Onnx__TensorShapeProto *sp = v->type->tensor_type->shape;
    int o = override_shape(im, spec, v->name, &s);
    if (o < 0) return NANO_E_ARG;
    if (o == 1) {
        if (sp && (int)sp->n_dim != s.ndim)
            return imp_fail(im, NANO_E_ARG, "input_shapes gives %s %d dimensions; the model's input has %zu",
                            v->name, s.ndim, sp->n_dim);
    } else {
        if (!sp)
            return imp_fail(im, NANO_E_ARG, "graph input %s has no shape in the file; give it with input_shapes "
                            "(e.g. %s:1x3x224x224)", v->name, v->name);
        if (sp->n_dim > NANO_MAX_DIMS)
            return imp_fail(im, NANO_E_UNSUPPORTED, "graph input %s has %zu dimensions (at most %d)", v->name,
                            sp->n_dim, NANO_MAX_DIMS);
        s.ndim = (int)sp->n_dim;
        for (int d = 0; d < s.ndim; d++) {
            const Onnx__TensorShapeProto__Dimension *dm = sp->dim[d];
            if (dm->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE || dm->dim_value < 1)
                return imp_fail(im, NANO_E_ARG, "graph input %s: dimension %d is %s%s%s; give the input's shape "
                                "with input_shapes (e.g. %s:1x...)", v->name, d,
                                dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                                    ? "symbolic ('" : "not fixed",
                                dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                                    ? dm->dim_param : "",
                                dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? "')" : "",
                                v->name);
            s.d[d] = dm->dim_value;
        }
    }
    int64_t numel = 1; /* the converters multiply the dimensions: they must not overflow */
    for (int d = 0; d < s.ndim; d++) {
        if (s.d[d] > ONNX_MAX_NUMEL / numel)
            return imp_fail(im, NANO_E_UNSUPPORTED, "graph input %s has more than 2^40 elements", v->name);
        numel *= s.d[d];
    }
    if (nano_graph_add_tensor(im->g, v->name, dtype, NANO_T_INPUT, s.ndim, s.d, NULL, 0) < 0)
        return imp_fail(im, NANO_E_NOMEM, "out of memory adding input %s", v->name);
    return NANO_OK;
}

/* Every name in input_shapes must be a graph input: a typo would otherwise go unnoticed. */
static nano_status check_override_names(onnx_imp *im, const char *spec) {
    if (!spec) return NANO_OK;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *colon = NULL;
        for (const char *q = p; q < end; q++)
            if (*q == ':') colon = q;
        int found = 0;
        for (size_t i = 0; colon && i < im->gp->n_input && !found; i++) {
            const char *nm = im->gp->input[i]->name;
            found = strlen(nm) == (size_t)(colon - p) && !strncmp(nm, p, (size_t)(colon - p)) &&
                    !is_initializer(im->gp, nm);
        }
        if (!found)
            return imp_fail(im, NANO_E_ARG, "input_shapes names '%.*s', which is not a graph input of the model",
                            colon ? (int)(colon - p) : (int)(end - p), p);
        p = *end ? end + 1 : end;
    }
    return NANO_OK;
}

static nano_status read_file(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen) {
    /* O_NONBLOCK: a FIFO named as the model is refused below instead of blocking the open */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return NANO_E_IO;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
        fclose(f);
        snprintf(err, errlen, "%s: not a regular file", path);
        return NANO_E_IO;
    }
    if (sb.st_size == 0 || sb.st_size >= ONNX_MAX_FILE) {
        fclose(f);
        snprintf(err, errlen, "%s: %lld bytes; an ONNX model is 1 byte to 2 GiB (larger ones keep their weights "
                 "as external data, which is not supported)", path, (long long)sb.st_size);
        return sb.st_size == 0 ? NANO_E_FORMAT : NANO_E_UNSUPPORTED;
    }
    *len = (size_t)sb.st_size;
    *buf = malloc(*len);
    if (!*buf) { fclose(f); snprintf(err, errlen, "%s: out of memory for %zu bytes", path, *len); return NANO_E_NOMEM; }
    size_t got = fread(*buf, 1, *len, f);
    fclose(f);
    if (got != *len) {
        free(*buf);
        snprintf(err, errlen, "%s: read %zu of %zu bytes", path, got, *len);
        return NANO_E_IO;
    }
    return NANO_OK;
}

static nano_status import_graph(onnx_imp *im, const Onnx__ModelProto *m, const char *input_shapes) {
    const Onnx__GraphProto *gp = im->gp;
    for (size_t i = 0; i < gp->n_input + gp->n_output; i++) {
        const Onnx__ValueInfoProto *v = i < gp->n_input ? gp->input[i] : gp->output[i - gp->n_input];
        if (!v->name || !v->name[0])
            return imp_fail(im, NANO_E_FORMAT, "graph %s %zu has no name", i < gp->n_input ? "input" : "output",
                            i < gp->n_input ? i : i - gp->n_input);
    }
    nano_status st = check_override_names(im, input_shapes);
    if (st) return st;
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        char what[300];
        snprintf(what, sizeof what, "initializer %s", tp->name ? tp->name : "(unnamed)");
        if (!tp->name || !tp->name[0]) return imp_fail(im, NANO_E_FORMAT, "initializer %zu has no name", i);
        if (nano_graph_find(im->g, tp->name) >= 0)
            return imp_fail(im, NANO_E_FORMAT, "initializer %s appears twice", tp->name);
        imp_shape s;
        void *data;
        if ((st = imp_tensor(im, tp, what, &s, &data))) return st;
        if (nano_graph_add_tensor(im->g, tp->name, s.dtype, NANO_T_CONST, s.ndim, s.d, data, 1) < 0) {
            free(data);
            return imp_fail(im, NANO_E_NOMEM, "out of memory adding %s", what);
        }
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        if (is_initializer(gp, gp->input[i]->name)) continue; /* ir_version < 4 lists them */
        if (nano_graph_find(im->g, gp->input[i]->name) >= 0)
            return imp_fail(im, NANO_E_FORMAT, "graph input %s appears twice", gp->input[i]->name);
        if ((st = add_input(im, gp->input[i], input_shapes))) return st;
    }
    if (im->g->ninputs == 0) return imp_fail(im, NANO_E_FORMAT, "the graph has no inputs (only initializers)");
    if (gp->n_output == 0) return imp_fail(im, NANO_E_FORMAT, "the graph has no outputs");
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *v = gp->output[i];
        int dtype = 0;
        if ((st = elem_dtype(im, v, "output", &dtype))) return st;
        if (nano_graph_find(im->g, v->name) >= 0)
            return imp_fail(im, NANO_E_UNSUPPORTED, "graph output %s is a graph input or initializer itself "
                            "(or listed twice); outputs must be computed by nodes", v->name);
        if (nano_graph_add_tensor(im->g, v->name, dtype, NANO_T_OUTPUT, 0, NULL, NULL, 0) < 0)
            return imp_fail(im, NANO_E_NOMEM, "out of memory adding output %s", v->name);
    }
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = gp->node[i];
        if (n->name && n->name[0]) snprintf(im->node_name, sizeof im->node_name, "%s", n->name);
        else snprintf(im->node_name, sizeof im->node_name, "%s_%zu", n->op_type ? n->op_type : "node", i);
        if (!n->op_type || !n->op_type[0]) return imp_fail(im, NANO_E_FORMAT, "node %s has no op_type", im->node_name);
        if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx"))
            return imp_fail(im, NANO_E_UNSUPPORTED, "node %s (op_type %s) is in domain '%s'; only the default "
                            "ONNX domain is supported", im->node_name, n->op_type, n->domain);
        if ((st = imp_node(im, n))) return st;
    }
    for (size_t i = 0; i < gp->n_output; i++)
        if (!im->out_written[i])
            return imp_fail(im, NANO_E_FORMAT, "graph output %s is not written by any node", gp->output[i]->name);
    nano_graph_compact(im->g);
    char meta[512];
    const char *prod = m->producer_name ? m->producer_name : "";
    const char *ver = m->producer_version ? m->producer_version : "";
    int k = snprintf(meta, sizeof meta, "{\"source\": \"onnx\", \"opset\": %lld, \"producer\": \"",
                     (long long)im->opset);
    for (const char *p = prod; *p && k < 400; p++) /* JSON-safe: quotes, backslashes and controls dropped */
        if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) meta[k++] = *p;
    if (ver[0]) meta[k++] = ' ';
    for (const char *p = ver; *p && k < 480; p++)
        if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) meta[k++] = *p;
    snprintf(meta + k, sizeof meta - (size_t)k, "\"}");
    free(im->g->meta);
    im->g->meta = strdup(meta);
    return nano_graph_infer_shapes(im->g, im->err, im->errlen);
}

nano_status deploy_onnx_read(nano_graph *g, const char *path, const char *input_shapes, char *err, size_t errlen) {
    nano_graph_init(g);
    uint8_t *buf = NULL;
    size_t len = 0;
    nano_status st = read_file(path, &buf, &len, err, errlen);
    if (st) return st;
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    if (!m) {
        snprintf(err, errlen, "%s: not an ONNX model (the protobuf does not parse: truncated or damaged)", path);
        return NANO_E_FORMAT;
    }
    onnx_imp im = {.g = g, .err = err, .errlen = errlen};
    int64_t opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const char *d = m->opset_import[i]->domain;
        if (!d || !d[0] || !strcmp(d, "ai.onnx")) opset = m->opset_import[i]->version;
    }
    char pre[300];
    snprintf(pre, sizeof pre, "%s: ", path);
    if (!m->graph) {
        st = imp_fail(&im, NANO_E_FORMAT, "the model has no graph");
    } else if (opset < 0) {
        st = imp_fail(&im, NANO_E_FORMAT, "the model imports no opset of the default ONNX domain");
    } else if (opset < 11 || opset > 21) {
        st = imp_fail(&im, NANO_E_UNSUPPORTED, "opset %lld of the default domain; supported: 11 to 21 "
                      "(re-export with e.g. opset_version=17)", (long long)opset);
    } else {
        im.gp = m->graph;
        im.opset = opset;
        im.out_written = calloc(m->graph->n_output + 1, sizeof *im.out_written);
        st = im.out_written ? import_graph(&im, m, input_shapes) : imp_fail(&im, NANO_E_NOMEM, "out of memory");
        free(im.out_written);
    }
    onnx__model_proto__free_unpacked(m, NULL);
    if (st) {
        /* Prefix the file name; the message itself names the node or tensor. */
        size_t pl = strlen(pre), el = strlen(err);
        if (errlen > pl + 1) {
            if (el > errlen - pl - 1) el = errlen - pl - 1;
            memmove(err + pl, err, el);
            memcpy(err, pre, pl);
            err[pl + el] = 0;
        }
        nano_graph_free(g);
    }
    return st;
}
