/* nano_graph — building, naming, compacting and validating the edge engine's graph.
 *
 * Tensors and nodes live in growable arrays and refer to each other by index; names live
 * in one string pool so a graph serialises as a handful of flat sections. The one design
 * decision: indices, not pointers, everywhere — a pass that removes nodes renumbers once
 * (nano_graph_compact) and the .neb file is the arrays as they stand. */
#include "nano_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const OP_NAMES[NANO_OP_COUNT] = {
    [NANO_OP_NONE] = "None", [NANO_OP_CONV] = "Conv", [NANO_OP_GEMM] = "Gemm",
    [NANO_OP_MATMUL] = "MatMul", [NANO_OP_BATCHNORM] = "BatchNormalization", [NANO_OP_RELU] = "Relu",
    [NANO_OP_CLIP] = "Clip", [NANO_OP_GELU] = "Gelu", [NANO_OP_ERF] = "Erf", [NANO_OP_TANH] = "Tanh",
    [NANO_OP_SIGMOID] = "Sigmoid", [NANO_OP_ADD] = "Add", [NANO_OP_SUB] = "Sub", [NANO_OP_MUL] = "Mul",
    [NANO_OP_DIV] = "Div", [NANO_OP_POW] = "Pow", [NANO_OP_SQRT] = "Sqrt", [NANO_OP_MAXPOOL] = "MaxPool",
    [NANO_OP_AVGPOOL] = "AveragePool", [NANO_OP_GLOBALAVGPOOL] = "GlobalAveragePool",
    [NANO_OP_RESHAPE] = "Reshape", [NANO_OP_TRANSPOSE] = "Transpose", [NANO_OP_CONCAT] = "Concat",
    [NANO_OP_SLICE] = "Slice", [NANO_OP_GATHER] = "Gather", [NANO_OP_SPLIT] = "Split",
    [NANO_OP_SOFTMAX] = "Softmax", [NANO_OP_LAYERNORM] = "LayerNormalization",
    [NANO_OP_REDUCEMEAN] = "ReduceMean", [NANO_OP_WHERE] = "Where", [NANO_OP_IDENTITY] = "Identity",
    [NANO_OP_CAST] = "Cast",
};

const char *nano_op_name(int op) {
    return op > 0 && op < NANO_OP_COUNT && OP_NAMES[op] ? OP_NAMES[op] : "?";
}

const char *nano_dtype_name(int dtype) {
    switch (dtype) {
    case NANO_DT_F32: return "f32";
    case NANO_DT_F16: return "f16";
    case NANO_DT_I8: return "i8";
    case NANO_DT_U8: return "u8";
    case NANO_DT_I32: return "i32";
    case NANO_DT_I64: return "i64";
    default: return "?";
    }
}

size_t nano_dtype_size(int dtype) {
    switch (dtype) {
    case NANO_DT_F32: case NANO_DT_I32: return 4;
    case NANO_DT_F16: return 2;
    case NANO_DT_I8: case NANO_DT_U8: return 1;
    case NANO_DT_I64: return 8;
    default: return 0;
    }
}

int64_t nano_tensor_numel(const nano_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

size_t nano_tensor_bytes(const nano_tensor *t) {
    return (size_t)nano_tensor_numel(t) * nano_dtype_size(t->dtype);
}

void nano_graph_init(nano_graph *g) {
    memset(g, 0, sizeof *g);
}

void nano_graph_free(nano_graph *g) {
    for (int i = 0; i < g->ntensors; i++)
        if (g->tensors[i].owned) free(g->tensors[i].data);
    free(g->tensors);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->strings);
    free(g->meta);
    memset(g, 0, sizeof *g);
}

const char *nano_tensor_name(const nano_graph *g, int t) {
    if (t < 0 || t >= g->ntensors || !g->strings) return "";
    return g->strings + g->tensors[t].name;
}

const char *nano_node_name(const nano_graph *g, int n) {
    if (n < 0 || n >= g->nnodes || !g->strings) return "";
    return g->strings + g->nodes[n].name;
}

/* Appends s to the pool; returns its offset or UINT32_MAX. Offset 0 is "". */
static uint32_t pool_add(nano_graph *g, const char *s) {
    if (!s || !*s) s = "";
    size_t len = strlen(s) + 1;
    if (!g->strings) {
        g->strings_cap = 4096;
        g->strings = malloc(g->strings_cap);
        if (!g->strings) return UINT32_MAX;
        g->strings[0] = 0;
        g->strings_len = 1;
    }
    if (!*s) return 0;
    if (g->strings_len + len > UINT32_MAX) return UINT32_MAX;
    if (g->strings_len + len > g->strings_cap) {
        size_t cap = g->strings_cap * 2;
        while (cap < g->strings_len + len) cap *= 2;
        char *p = realloc(g->strings, cap);
        if (!p) return UINT32_MAX;
        g->strings = p;
        g->strings_cap = cap;
    }
    memcpy(g->strings + g->strings_len, s, len);
    uint32_t off = (uint32_t)g->strings_len;
    g->strings_len += len;
    return off;
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

int nano_graph_add_tensor(nano_graph *g, const char *name, int dtype, int kind, int ndim,
                          const int64_t *shape, void *data, int own) {
    if (ndim < 0 || ndim > NANO_MAX_DIMS) return -1;
    if (grow((void **)&g->tensors, &g->tensors_cap, g->ntensors + 1, sizeof *g->tensors)) return -1;
    uint32_t off = pool_add(g, name);
    if (off == UINT32_MAX) return -1;
    nano_tensor *t = &g->tensors[g->ntensors];
    memset(t, 0, sizeof *t);
    t->name = off;
    t->dtype = dtype;
    t->kind = kind;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->arena_off = -1;
    t->data = data;
    t->owned = data && own;
    if (kind == NANO_T_INPUT || kind == NANO_T_OUTPUT) {
        int32_t **list = kind == NANO_T_INPUT ? &g->inputs : &g->outputs;
        int *n = kind == NANO_T_INPUT ? &g->ninputs : &g->noutputs;
        int32_t *p = realloc(*list, (size_t)(*n + 1) * sizeof **list);
        if (!p) return -1;
        *list = p;
        p[(*n)++] = g->ntensors;
    }
    return g->ntensors++;
}

int nano_graph_add_node(nano_graph *g, int op, const char *name, int nin, const int32_t *in,
                        int nout, const int32_t *out, const nano_attrs *a) {
    if (nin < 0 || nin > NANO_MAX_IN || nout < 1 || nout > NANO_MAX_OUT) return -1;
    if (grow((void **)&g->nodes, &g->nodes_cap, g->nnodes + 1, sizeof *g->nodes)) return -1;
    uint32_t off = pool_add(g, name);
    if (off == UINT32_MAX) return -1;
    nano_node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->name = off;
    n->nin = nin;
    n->nout = nout;
    for (int i = 0; i < NANO_MAX_IN; i++) n->in[i] = i < nin ? in[i] : -1;
    for (int i = 0; i < NANO_MAX_OUT; i++) n->out[i] = i < nout ? out[i] : -1;
    if (a) n->a = *a;
    return g->nnodes++;
}

int nano_graph_find(const nano_graph *g, const char *name) {
    for (int i = 0; i < g->ntensors; i++)
        if (!strcmp(nano_tensor_name(g, i), name)) return i;
    return -1;
}

void nano_graph_set_data(nano_graph *g, int t, int dtype, int ndim, const int64_t *shape, void *data,
                         int own) {
    nano_tensor *x = &g->tensors[t];
    if (x->owned && x->data != data) free(x->data);
    x->dtype = dtype;
    x->ndim = ndim;
    for (int d = 0; d < NANO_MAX_DIMS; d++) x->shape[d] = d < ndim ? shape[d] : 0;
    x->kind = NANO_T_CONST;
    x->data = data;
    x->owned = data && own;
}

void nano_graph_compact(nano_graph *g) {
    /* Live tensors: graph outputs, then backwards through the nodes that write them. */
    char *live = calloc((size_t)g->ntensors + 1, 1);
    char *keep = calloc((size_t)g->nnodes + 1, 1);
    int32_t *map = malloc(((size_t)g->ntensors + 1) * sizeof *map);
    if (!live || !keep || !map) goto release;
    for (int i = 0; i < g->noutputs; i++) live[g->outputs[i]] = 1;
    for (int i = 0; i < g->ninputs; i++) live[g->inputs[i]] = 1;
    for (int n = g->nnodes - 1; n >= 0; n--) {
        const nano_node *nd = &g->nodes[n];
        int used = 0;
        for (int o = 0; o < nd->nout; o++)
            if (nd->out[o] >= 0 && live[nd->out[o]] && g->tensors[nd->out[o]].kind != NANO_T_INPUT) used = 1;
        if (!used) continue;
        keep[n] = 1;
        for (int o = 0; o < nd->nout; o++)
            if (nd->out[o] >= 0) live[nd->out[o]] = 1;
        for (int i = 0; i < nd->nin; i++)
            if (nd->in[i] >= 0) live[nd->in[i]] = 1;
    }
    int nt = 0;
    for (int t = 0; t < g->ntensors; t++) {
        if (!live[t]) {
            if (g->tensors[t].owned) free(g->tensors[t].data);
            map[t] = -1;
            continue;
        }
        map[t] = nt;
        g->tensors[nt++] = g->tensors[t];
    }
    g->ntensors = nt;
    int nn = 0;
    for (int n = 0; n < g->nnodes; n++) {
        if (!keep[n]) continue;
        nano_node nd = g->nodes[n];
        for (int i = 0; i < nd.nin; i++)
            if (nd.in[i] >= 0) nd.in[i] = map[nd.in[i]];
        for (int o = 0; o < nd.nout; o++)
            if (nd.out[o] >= 0) nd.out[o] = map[nd.out[o]];
        g->nodes[nn++] = nd;
    }
    g->nnodes = nn;
    for (int i = 0; i < g->ninputs; i++) g->inputs[i] = map[g->inputs[i]];
    for (int i = 0; i < g->noutputs; i++) g->outputs[i] = map[g->outputs[i]];
release:
    free(live);
    free(keep);
    free(map);
}

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return NANO_E_FORMAT; } while (0)

nano_status nano_graph_validate(const nano_graph *g, char *err, size_t errlen) {
    if (g->ntensors > NANO_MAX_TENSORS || g->nnodes > NANO_MAX_TENSORS)
        FAIL("the graph has %d tensors and %d nodes (at most %d each)", g->ntensors, g->nnodes, NANO_MAX_TENSORS);
    if (g->ntensors < 0 || g->nnodes < 0 || g->ninputs < 1 || g->noutputs < 1)
        FAIL("the graph has %d inputs and %d outputs (at least one each)", g->ninputs, g->noutputs);
    int *writer = malloc(((size_t)g->ntensors + 1) * sizeof *writer);
    if (!writer) { snprintf(err, errlen, "out of memory"); return NANO_E_NOMEM; }
    for (int t = 0; t < g->ntensors; t++) writer[t] = -2;
    nano_status st = NANO_OK;
#define VFAIL(...) do { snprintf(err, errlen, __VA_ARGS__); st = NANO_E_FORMAT; goto done; } while (0)
    for (int t = 0; t < g->ntensors; t++) {
        const nano_tensor *x = &g->tensors[t];
        if ((size_t)x->name >= g->strings_len) VFAIL("tensor %d: its name is outside the string pool", t);
        if (!nano_dtype_size(x->dtype)) VFAIL("tensor %s: unknown dtype %d", nano_tensor_name(g, t), x->dtype);
        if (x->kind < NANO_T_ACT || x->kind > NANO_T_OUTPUT)
            VFAIL("tensor %s: unknown kind %d", nano_tensor_name(g, t), x->kind);
        if (x->ndim < 0 || x->ndim > NANO_MAX_DIMS) VFAIL("tensor %s: %d dimensions", nano_tensor_name(g, t), x->ndim);
        int64_t n = 1;
        for (int d = 0; d < x->ndim; d++) {
            if (x->shape[d] < 1 || x->shape[d] > NANO_MAX_NUMEL / n)
                VFAIL("tensor %s: dimension %d is %lld", nano_tensor_name(g, t), d, (long long)x->shape[d]);
            n *= x->shape[d];
        }
        if (x->kind == NANO_T_CONST) {
            if (!x->data) VFAIL("constant %s has no data", nano_tensor_name(g, t));
            writer[t] = -1;
        } else if (x->kind == NANO_T_INPUT) {
            writer[t] = -1;
        }
    }
    for (int i = 0; i < g->ninputs; i++)
        if (g->inputs[i] < 0 || g->inputs[i] >= g->ntensors || g->tensors[g->inputs[i]].kind != NANO_T_INPUT)
            VFAIL("graph input %d is not an input tensor", i);
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] < 0 || g->outputs[i] >= g->ntensors || g->tensors[g->outputs[i]].kind != NANO_T_OUTPUT)
            VFAIL("graph output %d is not an output tensor", i);
    for (int n = 0; n < g->nnodes; n++) {
        const nano_node *nd = &g->nodes[n];
        const char *nm = nano_node_name(g, n);
        if ((size_t)nd->name >= g->strings_len) VFAIL("node %d: its name is outside the string pool", n);
        if (nd->op <= NANO_OP_NONE || nd->op >= NANO_OP_COUNT) VFAIL("node %s: unknown op %d", nm, nd->op);
        if (nd->nin < 0 || nd->nin > NANO_MAX_IN || nd->nout < 1 || nd->nout > NANO_MAX_OUT)
            VFAIL("node %s: %d inputs, %d outputs", nm, nd->nin, nd->nout);
        for (int i = 0; i < nd->nin; i++) {
            int t = nd->in[i];
            if (t == -1) continue;
            if (t < 0 || t >= g->ntensors) VFAIL("node %s: input %d is tensor %d of %d", nm, i, t, g->ntensors);
            if (writer[t] == -2)
                VFAIL("node %s (%s) reads %s before any node writes it", nm, nano_op_name(nd->op), nano_tensor_name(g, t));
        }
        for (int o = 0; o < nd->nout; o++) {
            int t = nd->out[o];
            if (t < 0 || t >= g->ntensors) VFAIL("node %s: output %d is tensor %d of %d", nm, o, t, g->ntensors);
            if (writer[t] != -2) VFAIL("node %s writes %s, which is already written or constant", nm, nano_tensor_name(g, t));
            if (g->tensors[t].kind != NANO_T_ACT && g->tensors[t].kind != NANO_T_OUTPUT)
                VFAIL("node %s writes %s, an input or constant", nm, nano_tensor_name(g, t));
            writer[t] = n;
        }
    }
    for (int i = 0; i < g->noutputs; i++)
        if (writer[g->outputs[i]] == -2) VFAIL("graph output %s is never written", nano_tensor_name(g, g->outputs[i]));
done:
    free(writer);
    return st;
#undef VFAIL
}
