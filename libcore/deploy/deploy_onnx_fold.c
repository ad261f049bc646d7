/* deploy_onnx_fold — the importer's operators whose values can be known at import.
 *
 * Arithmetic, Equal and Where (evaluated when every operand is a constant and the values
 * are integers, masks or selections), Identity/Dropout/Cast, and the operators that only
 * make constants: Constant, Shape, ConstantOfShape, Range, Expand.
 *
 * The one design decision: integer and mask computations on constants are done here, at
 * import, because they feed attributes (shapes, axes, masks) that nano ops take as fixed
 * fields; float arithmetic on constants stays a node and is folded by deploy_fold. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/deploy_onnx_impl.h"

double imp_val_d(const void *p, int dt, int64_t i) {
    switch (dt) {
    case NANO_DT_F32: return ((const float *)p)[i];
    case NANO_DT_I64: return (double)((const int64_t *)p)[i];
    case NANO_DT_I32: return ((const int32_t *)p)[i];
    case NANO_DT_I8: return ((const int8_t *)p)[i];
    case NANO_DT_U8: return ((const uint8_t *)p)[i];
    default: { /* F16 */
        uint16_t h = ((const uint16_t *)p)[i];
        int e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
        return h & 0x8000 ? -v : v;
    }
    }
}

#define FOLD_MAX_NUMEL ((int64_t)1 << 24)

/* v as an integer, NaN as 0 and out-of-range values saturated (the cast alone is undefined). */
static int64_t to_i64(double v) {
    if (!(v == v)) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

int imp_fold_size_ok(const imp_shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (s->d[d] < 1 || s->d[d] > FOLD_MAX_NUMEL / n) return 0;
        n *= s->d[d];
    }
    return 1;
}

int64_t imp_val_i(const void *p, int dt, int64_t i) {
    if (dt == NANO_DT_I64) return ((const int64_t *)p)[i];
    return to_i64(imp_val_d(p, dt, i));
}

void imp_set_val(void *p, int dt, int64_t i, double d, int64_t iv) {
    switch (dt) {
    case NANO_DT_F32: ((float *)p)[i] = (float)d; break;
    case NANO_DT_I64: ((int64_t *)p)[i] = iv; break;
    case NANO_DT_I32: ((int32_t *)p)[i] = (int32_t)iv; break;
    default: ((uint8_t *)p)[i] = (uint8_t)(iv != 0); break; /* U8: bool */
    }
}

/* The constant c broadcast to shape out (malloc'd), or NULL. */
void *imp_broadcast_to(const nano_tensor *c, const imp_shape *out) {
    size_t es = nano_dtype_size(c->dtype);
    void *dst = malloc((size_t)imp_numel(out) * es);
    if (!dst) return NULL;
    int64_t st[NANO_MAX_DIMS];
    for (int d = 0; d < out->ndim; d++) {
        int k = c->ndim - out->ndim + d;
        int64_t s = 1;
        for (int j = k + 1; j < c->ndim; j++) s *= c->shape[j];
        st[d] = k < 0 || c->shape[k] == 1 ? 0 : s;
    }
    imp_copy_view(dst, c->data, es, out->ndim, out->d, 0, st);
    return dst;
}

/* Binary arithmetic, Equal and Where; integer or all-constant operands are evaluated. */
nano_status imp_op_binary(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    int where = op == NANO_OP_WHERE, equal = op == NANO_OP_NONE;
    int32_t in[3];
    imp_shape s[3], o;
    int nin = where ? 3 : 2, allc = 1;
    for (int i = 0; i < nin; i++) {
        NEED(t, i, where ? "condition, X, Y" : "A, B");
        in[i] = t;
        s[i] = imp_shape_of(im, t);
        allc &= imp_const_of(im, t) != NULL;
    }
    if (imp_broadcast(&s[0], &s[1], &o) || (where && imp_broadcast(&o, &s[2], &o)))
        return imp_bad(im, n, NANO_E_FORMAT, "the operands' shapes do not broadcast");
    const imp_shape *x = &s[where], *y = &s[where + 1];
    if (op != NANO_OP_POW && imp_fdt(x->dtype) != imp_fdt(y->dtype)) return imp_bad(im, n, NANO_E_FORMAT, "the operands' dtypes differ");
    if (where && s[0].dtype != NANO_DT_U8) return imp_bad(im, n, NANO_E_FORMAT, "the condition must be bool");
    o.dtype = equal ? NANO_DT_U8 : imp_fdt(x->dtype);
    int intg = imp_fdt(x->dtype) != NANO_DT_F32;
    /* constant operands: the result is made here, or (float arithmetic) by deploy_fold */
    if (allc && !imp_fold_size_ok(&o))
        return imp_bad(im, n, NANO_E_UNSUPPORTED, "a constant result of more than 2^24 elements");
    if (allc && (intg || where || equal)) {
        void *v[3] = {0};
        void *d = malloc(imp_bytes(&o));
        int ok = d != NULL;
        for (int i = 0; i < nin; i++) ok &= (v[i] = imp_broadcast_to(imp_const_of(im, in[i]), &o)) != NULL;
        for (int64_t k = 0; ok && k < imp_numel(&o); k++) {
            int xi = where, yi = where + 1, xd = s[xi].dtype, yd = s[yi].dtype;
            double a = imp_val_d(v[xi], xd, k), b = imp_val_d(v[yi], yd, k), r = 0;
            int64_t ia = imp_val_i(v[xi], xd, k), ib = imp_val_i(v[yi], yd, k), ir = 0;
            switch (op) {
            /* integers wrap as two's complement (signed overflow is undefined in C) */
            case NANO_OP_ADD: r = a + b; ir = (int64_t)((uint64_t)ia + (uint64_t)ib); break;
            case NANO_OP_SUB: r = a - b; ir = (int64_t)((uint64_t)ia - (uint64_t)ib); break;
            case NANO_OP_MUL: r = a * b; ir = (int64_t)((uint64_t)ia * (uint64_t)ib); break;
            case NANO_OP_DIV: r = a / b; ir = ib == -1 ? (int64_t)(0 - (uint64_t)ia) : ib ? ia / ib : 0; break;
            case NANO_OP_POW: r = pow(a, b); ir = to_i64(r); break;
            case NANO_OP_WHERE: {
                int c = imp_val_i(v[0], NANO_DT_U8, k) != 0;
                r = c ? a : b;
                ir = c ? ia : ib;
                break;
            }
            default: ir = intg ? ia == ib : a == b; r = (double)ir; break; /* Equal */
            }
            if (op == NANO_OP_DIV && intg && !ib) ok = -1;
            imp_set_val(d, o.dtype, k, r, ir);
        }
        for (int i = 0; i < nin; i++) free(v[i]);
        if (ok == -1) { free(d); return imp_bad(im, n, NANO_E_FORMAT, "integer division by zero"); }
        if (!ok) { free(d); return imp_nomem(im); }
        return imp_emit_const(im, n, 0, &o, d);
    }
    if (equal) return imp_bad(im, n, NANO_E_UNSUPPORTED, "Equal is supported on constants only (it is evaluated at import)");
    if (intg && !where) return imp_bad(im, n, NANO_E_UNSUPPORTED, "integer arithmetic on values computed at run time");
    nano_attrs a = {0};
    return imp_emit(im, n, op, nin, in, 1, &o, &a);
}

/* Identity, Dropout and Cast. */
nano_status imp_op_identity(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    NEED(x, 0, "input");
    imp_shape xs = imp_shape_of(im, x);
    nano_status st = imp_refuse_used(im, n, 1);
    if (st) return st;
    if (op != NANO_OP_CAST) return imp_emit_move(im, n, x, xs, NANO_OP_IDENTITY);
    int64_t to = imp_attr_i(n, "to", 0);
    int dt = to == ONNX_FLOAT ? NANO_DT_F32 : to == ONNX_INT64 ? NANO_DT_I64 : to == ONNX_INT32 ? NANO_DT_I32
           : to == ONNX_BOOL ? NANO_DT_U8 : 0;
    if (!dt) return imp_bad(im, n, NANO_E_UNSUPPORTED, "Cast to other than FLOAT, INT64, INT32 or BOOL");
    const nano_tensor *c = imp_const_of(im, x);
    if (c) {
        xs.dtype = dt;
        void *d = malloc(imp_bytes(&xs));
        if (!d) return imp_nomem(im);
        for (int64_t k = 0; k < imp_numel(&xs); k++)
            imp_set_val(d, dt, k, imp_val_d(c->data, c->dtype, k), dt == NANO_DT_U8 ? imp_val_d(c->data, c->dtype, k) != 0
                                                                                : imp_val_i(c->data, c->dtype, k));
        return imp_emit_const(im, n, 0, &xs, d);
    }
    if (imp_fdt(xs.dtype) == dt) return imp_emit_move(im, n, x, xs, NANO_OP_IDENTITY);
    nano_attrs a = {0};
    a.to = dt;
    xs.dtype = dt;
    int32_t in[1] = {x};
    return imp_emit(im, n, NANO_OP_CAST, 1, in, 1, &xs, &a);
}

/* Constant, Shape, ConstantOfShape, Range, Expand: values known at import. */
nano_status imp_op_const(onnx_imp *im, const Onnx__NodeProto *n, int op) {
    (void)op;
    const char *k = n->op_type;
    imp_shape s = {0};
    void *d = NULL;
    int64_t v[NANO_MAX_DIMS + 1];
    if (!strcmp(k, "Constant")) {
        const Onnx__AttributeProto *at = n->n_attribute == 1 ? n->attribute[0] : NULL;
        const char *an = at && at->name ? at->name : "";
        if (!strcmp(an, "value") && at->t) {
            nano_status st = imp_tensor(im, at->t, im->node_name, &s, &d);
            if (st) return st;
            return imp_emit_const(im, n, 0, &s, d);
        }
        int f = !strcmp(an, "value_float") || !strcmp(an, "value_floats");
        int many = !strcmp(an, "value_floats") || !strcmp(an, "value_ints");
        if (!f && strcmp(an, "value_int") && strcmp(an, "value_ints"))
            return imp_bad(im, n, NANO_E_UNSUPPORTED, "Constant needs exactly one of value, value_float(s), value_int(s)");
        s.dtype = f ? NANO_DT_F32 : NANO_DT_I64;
        s.ndim = many;
        s.d[0] = many ? (int64_t)(f ? at->n_floats : at->n_ints) : 1;
        if (s.d[0] < 1) return imp_bad(im, n, NANO_E_UNSUPPORTED, "an empty constant");
        if (!(d = malloc(imp_bytes(&s)))) return imp_nomem(im);
        for (int64_t i = 0; i < s.d[0]; i++)
            imp_set_val(d, s.dtype, i, many ? (f ? at->floats[i] : 0) : at->f, many ? (f ? 0 : at->ints[i]) : at->i);
        return imp_emit_const(im, n, 0, &s, d);
    }
    NEED(x, 0, "input");
    imp_shape xs = imp_shape_of(im, x);
    if (!strcmp(k, "Shape")) {
        int64_t start = imp_attr_i(n, "start", 0), end = imp_attr_i(n, "end", xs.ndim);
        if (start < 0) start += xs.ndim;
        if (end < 0) end += xs.ndim;
        start = start < 0 ? 0 : start > xs.ndim ? xs.ndim : start;
        end = end < start ? start : end > xs.ndim ? xs.ndim : end;
        s = (imp_shape){.dtype = NANO_DT_I64, .ndim = 1, .d = {end - start}};
        if (end == start) return imp_bad(im, n, NANO_E_UNSUPPORTED, "the shape of a scalar (empty)");
        if (!(d = malloc(imp_bytes(&s)))) return imp_nomem(im);
        memcpy(d, xs.d + start, imp_bytes(&s));
        return imp_emit_const(im, n, 0, &s, d);
    }
    if (!strcmp(k, "Range")) {
        double a[3];
        for (int i = 0; i < 3; i++) {
            NEED(t, i, "start, limit, delta");
            if (imp_const_scalar(im, t, i == 0 ? "start" : i == 1 ? "limit" : "delta", &a[i])) return NANO_E_UNSUPPORTED;
        }
        double cnt = a[2] != 0 ? ceil((a[1] - a[0]) / a[2]) : 0;
        if (!(cnt >= 1 && cnt <= (1 << 24))) return imp_bad(im, n, NANO_E_UNSUPPORTED, "an empty or huge range");
        s = (imp_shape){.dtype = imp_fdt(xs.dtype), .ndim = 1, .d = {(int64_t)cnt}};
        if (!(d = malloc(imp_bytes(&s)))) return imp_nomem(im);
        for (int64_t i = 0; i < s.d[0]; i++)
            imp_set_val(d, s.dtype, i, a[0] + (double)i * a[2], to_i64(a[0] + (double)i * a[2]));
        return imp_emit_const(im, n, 0, &s, d);
    }
    NEED(sh, 1 - !strcmp(k, "ConstantOfShape"), "shape");
    int cnt = imp_const_ints(im, sh, "the shape", v, NANO_MAX_DIMS);
    if (cnt < 0) return NANO_E_UNSUPPORTED;
    imp_shape want = {.ndim = cnt};
    for (int i = 0; i < cnt; i++) want.d[i] = v[i];
    if (!strcmp(k, "ConstantOfShape")) {
        const Onnx__AttributeProto *at = imp_attr(n, "value");
        imp_shape vs = {.dtype = NANO_DT_F32};
        void *val = NULL;
        if (at && at->t) {
            nano_status st = imp_tensor(im, at->t, im->node_name, &vs, &val);
            if (st) return st;
        }
        want.dtype = vs.dtype;
        size_t es = nano_dtype_size(want.dtype);
        if (!imp_fold_size_ok(&want)) { free(val); return imp_bad(im, n, NANO_E_UNSUPPORTED, "an empty or huge shape"); }
        if (imp_numel(&vs) != 1 || !(d = calloc((size_t)imp_numel(&want), es))) {
            free(val);
            return imp_numel(&vs) != 1 ? imp_bad(im, n, NANO_E_FORMAT, "value must have one element") : imp_nomem(im);
        }
        for (int64_t i = 0; val && i < imp_numel(&want); i++) memcpy((char *)d + (size_t)i * es, val, es);
        free(val);
        return imp_emit_const(im, n, 0, &want, d);
    }
    /* Expand */
    imp_shape o;
    if (imp_broadcast(&xs, &want, &o)) return imp_bad(im, n, NANO_E_FORMAT, "the shape does not broadcast with the input");
    const nano_tensor *c = imp_const_of(im, x);
    if (!imp_fold_size_ok(&want) || (c && !imp_fold_size_ok(&o))) /* both are allocated here */
        return imp_bad(im, n, NANO_E_UNSUPPORTED, "Expand to an empty shape or a constant of more than 2^24 elements");
    o.dtype = c ? c->dtype : xs.dtype;
    if (c) {
        if (!(d = imp_broadcast_to(c, &o))) return imp_nomem(im);
        return imp_emit_const(im, n, 0, &o, d);
    }
    if (xs.dtype != NANO_DT_F32) return imp_bad(im, n, NANO_E_UNSUPPORTED, "Expand of a non-float value computed at run time");
    /* x + zeros(shape) broadcasts exactly as Expand does */
    want.dtype = NANO_DT_F32;
    char nm[200];
    snprintf(nm, sizeof nm, "%s::zeros", im->node_name);
    if (!(d = calloc((size_t)imp_numel(&want), 4))) return imp_nomem(im);
    int z = nano_graph_add_tensor(im->g, nm, NANO_DT_F32, NANO_T_CONST, want.ndim, want.d, d, 1);
    if (z < 0) { free(d); return imp_nomem(im); }
    nano_attrs a = {0};
    int32_t in[2] = {x, z};
    return imp_emit(im, n, NANO_OP_ADD, 2, in, 1, &o, &a);
}
