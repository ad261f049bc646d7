/* deploy_onnx_impl — what the ONNX importer's two files share (deploy_onnx.c reads the
 * file, the initializers and the graph's inputs and outputs; deploy_onnx_ops.c turns each
 * node into nano ops). Private to libcore/deploy.
 *
 * The one design decision: the importer propagates shapes itself, node by node, as it
 * builds the graph (imp_emit takes the outputs' shapes), because normalising Flatten,
 * Reshape, Squeeze, Slice, auto_pad and Shape needs the input's shape at that point;
 * nano_graph_infer_shapes then checks the finished graph independently. */
#ifndef NEBULA_DEPLOY_ONNX_IMPL_H
#define NEBULA_DEPLOY_ONNX_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "deploy/deploy.h"
#include "deploy/onnx.pb-c.h"

/* ONNX element types (TensorProto.DataType) that the importer and exporter use. */
enum {
    ONNX_FLOAT = 1, ONNX_UINT8 = 2, ONNX_INT8 = 3, ONNX_INT32 = 6, ONNX_INT64 = 7,
    ONNX_BOOL = 9, ONNX_FLOAT16 = 10, ONNX_DOUBLE = 11,
};

/* A dtype and a static shape. */
typedef struct imp_shape {
    int dtype, ndim;
    int64_t d[NANO_MAX_DIMS];
} imp_shape;

/* The importer's state for one file. */
typedef struct onnx_imp {
    nano_graph *g;
    const Onnx__GraphProto *gp;
    int64_t opset;          /* of the default domain */
    char *err;
    size_t errlen;
    char node_name[160];    /* the current node's name (made up when the file has none) */
    int *out_written;       /* [gp->n_output]: a node has written graph output i */
} onnx_imp;

/* Sets err (prefixed by nothing; callers name the node) and returns st. */
nano_status imp_fail(onnx_imp *im, nano_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Attributes of a node: the attribute or NULL, and typed reads with defaults. */
const Onnx__AttributeProto *imp_attr(const Onnx__NodeProto *n, const char *name);
int64_t imp_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def);
float imp_attr_f(const Onnx__NodeProto *n, const char *name, float def);
/* Copies the string attribute into buf (def when absent). */
const char *imp_attr_s(const Onnx__NodeProto *n, const char *name, const char *def, char *buf, size_t len);
/* The ints attribute: its count (at most max read), or -1 when absent. */
int imp_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max);

/* Node input i as a tensor index: -1 when absent ("" or past the end); -2 (err set)
 * when it names a value nothing has written yet. */
int imp_in(onnx_imp *im, const Onnx__NodeProto *n, int i);
/* 1 when node output i is read by a later node or is a graph output. */
int imp_out_used(const onnx_imp *im, const Onnx__NodeProto *n, int i);
/* The dtype and shape of tensor t. */
imp_shape imp_shape_of(const onnx_imp *im, int t);
/* The tensor if it is a constant, else NULL. */
const nano_tensor *imp_const_of(const onnx_imp *im, int t);
/* Reads a constant integer (I64 or I32) tensor of at most max elements into out;
 * returns the count or -1 (err set naming what). */
int imp_const_ints(onnx_imp *im, int t, const char *what, int64_t *out, int max);
/* Reads a constant scalar (one element, any numeric dtype) as a double: 0 or -1. */
int imp_const_scalar(onnx_imp *im, int t, const char *what, double *out);

/* Adds the node: output tensors for n's outputs with the given shapes, then the nano
 * node with inputs in[0..nin) and attributes a. */
nano_status imp_emit(onnx_imp *im, const Onnx__NodeProto *n, int op, int nin, const int32_t *in,
                     int nout, const imp_shape *outs, const nano_attrs *a);
/* Makes node output i a constant with this shape and data (taken over). */
nano_status imp_emit_const(onnx_imp *im, const Onnx__NodeProto *n, int i, const imp_shape *s, void *data);
/* Converts a TensorProto (initializer or Constant's value) to nano dtype, shape and data
 * (malloc'd, *data); what names it in errors. */
nano_status imp_tensor(onnx_imp *im, const Onnx__TensorProto *tp, const char *what, imp_shape *s, void **data);

/* Elements and bytes of a shape (numel 1 for a scalar). */
int64_t imp_numel(const imp_shape *s);
size_t imp_bytes(const imp_shape *s);
/* numpy broadcasting of a and b into out: 0, or -1 when incompatible. */
int imp_broadcast(const imp_shape *a, const imp_shape *b, imp_shape *out);
/* Copies an ndim view of src (element size es, element strides st, possibly 0 or
 * negative, from element offset off) into dst, row-major in shape. */
void imp_copy_view(void *dst, const void *src, size_t es, int ndim, const int64_t *shape, int64_t off,
                   const int64_t *st);

/* Node input i as var (-1 when absent); IN returns from the converter when it names
 * an unknown value, NEED also when it is absent. */
#define IN(var, i) int var = imp_in(im, n, (i)); if (var == -2) return NANO_E_FORMAT
#define NEED(var, i, what) IN(var, i); if (var < 0) return imp_fail(im, NANO_E_FORMAT, \
    "node %s (op_type %s) has no input %d (%s)", im->node_name, n->op_type, (i), (what))

/* F16 constants are widened to f32 when loaded: the dtype a computation sees. */
static inline int imp_fdt(int dt) { return dt == NANO_DT_F16 ? NANO_DT_F32 : dt; }

/* Shared by the converters (deploy_onnx_ops.c): an error naming the node; out of
 * memory; refusing node outputs from index `from` on that a later node reads; output 0
 * as a reshaped copy of x (a constant) or a RESHAPE/IDENTITY node (op). */
nano_status imp_bad(onnx_imp *im, const Onnx__NodeProto *n, nano_status st, const char *what);
nano_status imp_nomem(onnx_imp *im);
nano_status imp_refuse_used(onnx_imp *im, const Onnx__NodeProto *n, int from);
nano_status imp_emit_move(onnx_imp *im, const Onnx__NodeProto *n, int x, imp_shape s, int op);

/* Values of constants (deploy_onnx_fold.c): element i as a double or an integer; set
 * element i (integers from iv, U8 as a bool); c broadcast to a shape (malloc'd). */
double imp_val_d(const void *p, int dt, int64_t i);
int64_t imp_val_i(const void *p, int dt, int64_t i);
void imp_set_val(void *p, int dt, int64_t i, double d, int64_t iv);
void *imp_broadcast_to(const nano_tensor *c, const imp_shape *out);
/* 1 when a constant of shape s may be made at import or by deploy_fold: every dimension
 * >= 1 and at most 2^24 elements (a hostile shape must not become a huge allocation). */
int imp_fold_size_ok(const imp_shape *s);
/* Converters in deploy_onnx_fold.c: Add..Pow, Equal (op NONE), Where; Identity, Dropout,
 * Cast; Constant, Shape, ConstantOfShape, Range, Expand. */
nano_status imp_op_binary(onnx_imp *im, const Onnx__NodeProto *n, int op);
nano_status imp_op_identity(onnx_imp *im, const Onnx__NodeProto *n, int op);
nano_status imp_op_const(onnx_imp *im, const Onnx__NodeProto *n, int op);

/* Converts node n (deploy_onnx_ops.c). */
nano_status imp_node(onnx_imp *im, const Onnx__NodeProto *n);
/* The supported op_types, comma-separated, for the refusal message. */
extern const char imp_supported_ops[];

#endif
