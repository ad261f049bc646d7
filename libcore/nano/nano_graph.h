/* nano_graph — the edge engine's graph: tensors, nodes and their attributes.
 *
 * One representation from import to run: the ONNX importer (libcore/deploy) builds it,
 * the optimiser's passes rewrite it, the .neb writer stores it and the runtime executes
 * it. Shapes are static: every tensor's shape is known once the graph's input shapes are
 * (nano_graph_infer_shapes), which is what lets the memory plan place every activation
 * in one arena before the first run (nano_graph_plan).
 *
 * The one design decision: attributes are one plain struct per node (nano_attrs) instead
 * of ONNX's name/value lists. Every operator's fields are normalised at import — Slice
 * becomes a begin and a step per dimension, Reshape/Flatten/Squeeze/Unsqueeze become
 * NANO_OP_RESHAPE with the output shape, padding is explicit — so the runtime, the
 * passes and the file format read fixed fields, and a .neb node is a fixed-size record.
 *
 * Quantised operators keep fp32 at their edges: NANO_OP_CONV and NANO_OP_GEMM with an
 * int8 weight (dtype NANO_DT_I8) read a fourth input, the per-output-channel weight scales
 * (f32, [M]), and quantise their fp32 input with the calibrated scale and zero point in
 * attrs.q_scale/q_zero (uint8, asymmetric), accumulate in int32 and write fp32. */
#ifndef NEBULA_NANO_GRAPH_H
#define NEBULA_NANO_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#define NANO_MAX_DIMS 6 /* dimensions of a tensor */
#define NANO_MAX_IN 8   /* inputs of a node (Concat of more is refused at import) */
#define NANO_MAX_OUT 4  /* outputs of a node (Split into q, k, v is 3) */
#define NANO_MAX_NUMEL ((int64_t)INT32_MAX) /* elements of one tensor: the kernels index with int */
#define NANO_MAX_TENSORS 65536              /* tensors (and nodes) of a graph: the plan check is pairwise */

/* Status of every nano and deploy call that can fail on its input. */
typedef enum nano_status {
    NANO_OK = 0,
    NANO_E_IO = 1,          /* a file could not be read or written */
    NANO_E_FORMAT = 2,      /* a damaged, hostile or inconsistent file or graph */
    NANO_E_UNSUPPORTED = 3, /* an operator, attribute or dtype outside the supported set */
    NANO_E_NOMEM = 4,       /* an allocation failed */
    NANO_E_ARG = 5,         /* a wrong argument from the caller (shape, index, option) */
} nano_status;

typedef enum nano_dtype {
    NANO_DT_F32 = 1,
    NANO_DT_F16 = 2, /* IEEE half: weight storage only, widened to f32 when loaded */
    NANO_DT_I8 = 3,  /* symmetric int8 weights (scale per output channel) */
    NANO_DT_U8 = 4,  /* bool masks (Where's condition) */
    NANO_DT_I32 = 5,
    NANO_DT_I64 = 6, /* indices (Gather) and token ids */
} nano_dtype;

typedef enum nano_kind {
    NANO_T_ACT = 0,    /* an intermediate activation: placed in the arena by the plan */
    NANO_T_CONST = 1,  /* an initializer: its bytes are in data */
    NANO_T_INPUT = 2,  /* a graph input: placed in the arena, filled by the caller */
    NANO_T_OUTPUT = 3, /* a graph output: placed in the arena, read by the caller */
} nano_kind;

/* Fused activation of CONV, GEMM, MATMUL and the binary ops. */
typedef enum nano_act {
    NANO_ACT_NONE = 0,
    NANO_ACT_RELU = 1,
    NANO_ACT_CLIP = 2, /* min(max(x, act_min), act_max): ReLU6 is CLIP 0..6 */
    NANO_ACT_GELU = 3, /* the exact GELU, x·Φ(x) (erf), as torch.nn.GELU() */
    NANO_ACT_GELU_TANH = 4,
    NANO_ACT_SIGMOID = 5,
    NANO_ACT_TANH = 6,
} nano_act;

/* Operators. Inputs are in ONNX's order; an optional input that is absent is -1. */
typedef enum nano_op {
    NANO_OP_NONE = 0,
    NANO_OP_CONV = 1,      /* X (N,C,H,W), W (M,C/group,kh,kw), B? (M), [int8: Wscale (M)] -> (N,M,OH,OW) */
    NANO_OP_GEMM = 2,      /* A (M,K) (trans_a), B (K,N) (trans_b), C? broadcast -> (M,N); alpha, beta */
    NANO_OP_MATMUL = 3,    /* A (...,M,K), B (...,K,N), numpy broadcast of the batch dims -> (...,M,N) */
    NANO_OP_BATCHNORM = 4, /* X (N,C,...), scale, bias, mean, var (C); eps */
    NANO_OP_RELU = 5,
    NANO_OP_CLIP = 6, /* act_min, act_max */
    NANO_OP_GELU = 7, /* act says GELU or GELU_TANH */
    NANO_OP_ERF = 8,
    NANO_OP_TANH = 9,
    NANO_OP_SIGMOID = 10,
    NANO_OP_ADD = 11, /* binary ops: numpy broadcasting; act fused after */
    NANO_OP_SUB = 12,
    NANO_OP_MUL = 13,
    NANO_OP_DIV = 14,
    NANO_OP_POW = 15,
    NANO_OP_SQRT = 16,
    NANO_OP_MAXPOOL = 17, /* kernel, stride, pad, dilation, ceil_mode (output shape stored) */
    NANO_OP_AVGPOOL = 18, /* kernel, stride, pad, count_include_pad */
    NANO_OP_GLOBALAVGPOOL = 19,
    NANO_OP_RESHAPE = 20,   /* Reshape, Flatten, Squeeze, Unsqueeze: the output shape is the result */
    NANO_OP_TRANSPOSE = 21, /* perm[ndim] */
    NANO_OP_CONCAT = 22,    /* axis (non-negative) */
    NANO_OP_SLICE = 23,     /* begin[d], step[d] per input dimension; the output shape gives the count */
    NANO_OP_GATHER = 24,    /* data, indices (I64 or I32); axis */
    NANO_OP_SPLIT = 25,     /* axis; the outputs' shapes give the sizes */
    NANO_OP_SOFTMAX = 26,   /* axis */
    NANO_OP_LAYERNORM = 27, /* X, scale, bias?; axis (first normalised dim, non-negative), eps */
    NANO_OP_REDUCEMEAN = 28, /* axes_mask (bit d: dimension d reduced), keepdims */
    NANO_OP_WHERE = 29,      /* cond (U8), x, y: broadcasting */
    NANO_OP_IDENTITY = 30,   /* Identity, Dropout (inference), Cast to the same type */
    NANO_OP_CAST = 31,       /* to: dtype in attrs.to */
    NANO_OP_COUNT
} nano_op;

/* A node's attributes: every field any operator uses, zero when unused. Fixed size and
 * layout: it is a .neb record as it stands (little-endian). */
typedef struct nano_attrs {
    int32_t act;            /* nano_act fused after the operator */
    float act_min, act_max; /* CLIP bounds (NANO_OP_CLIP and NANO_ACT_CLIP) */
    int32_t kernel[2];      /* CONV/pools: kh, kw */
    int32_t stride[2];      /* sh, sw */
    int32_t pad[4];         /* top, left, bottom, right */
    int32_t dilation[2];    /* dh, dw */
    int32_t group;          /* CONV groups (1: dense, C: depthwise) */
    int32_t ceil_mode;      /* MAXPOOL/AVGPOOL */
    int32_t count_include_pad; /* AVGPOOL */
    int32_t trans_a, trans_b;  /* GEMM */
    float alpha, beta;         /* GEMM: alpha·A·B + beta·C */
    int32_t axis;              /* CONCAT, GATHER, SPLIT, SOFTMAX, LAYERNORM (non-negative) */
    float eps;                 /* BATCHNORM, LAYERNORM */
    int32_t perm[NANO_MAX_DIMS];  /* TRANSPOSE */
    int64_t begin[NANO_MAX_DIMS]; /* SLICE: first index per input dimension */
    int64_t step[NANO_MAX_DIMS];  /* SLICE: step per input dimension (non-zero) */
    int32_t axes_mask;            /* REDUCEMEAN */
    int32_t keepdims;             /* REDUCEMEAN */
    int32_t to;                   /* CAST: target nano_dtype */
    float q_scale;                /* int8 CONV/GEMM: the input's quantisation scale (uint8) */
    int32_t q_zero;               /* int8 CONV/GEMM: the input's zero point, 0..255 */
    int32_t reserved[3];          /* zero; keeps the record a multiple of 8 bytes */
} nano_attrs;

typedef struct nano_tensor {
    uint32_t name;               /* offset of the name in the graph's string pool */
    int32_t dtype;               /* nano_dtype */
    int32_t kind;                /* nano_kind */
    int32_t ndim;                /* 0..NANO_MAX_DIMS (0: a scalar) */
    int64_t shape[NANO_MAX_DIMS];
    int64_t arena_off;           /* ACT/INPUT/OUTPUT: byte offset in the arena (nano_graph_plan); -1 before */
    void *data;                  /* CONST: the bytes (dtype, row-major); NULL otherwise */
    int owned;                   /* data was malloc'd for this graph (freed with it) */
} nano_tensor;

typedef struct nano_node {
    int32_t op;                 /* nano_op */
    uint32_t name;              /* offset in the string pool */
    int32_t nin, nout;
    int32_t in[NANO_MAX_IN];    /* tensor indices, -1 for an absent optional input */
    int32_t out[NANO_MAX_OUT];  /* tensor indices */
    nano_attrs a;
} nano_node;

typedef struct nano_graph {
    nano_tensor *tensors; /* [ntensors] */
    int ntensors, tensors_cap;
    nano_node *nodes;     /* [nnodes], in execution order (topological) */
    int nnodes, nodes_cap;
    int32_t *inputs;      /* [ninputs] tensor indices of the graph's inputs */
    int ninputs;
    int32_t *outputs;     /* [noutputs] */
    int noutputs;
    char *strings;        /* the string pool: NUL-terminated names, offset 0 is "" */
    size_t strings_len, strings_cap;
    int64_t arena_bytes;  /* the memory plan's arena size (nano_graph_plan); 0 before */
    char *meta;           /* JSON text: source, optimisations, accuracy (malloc'd or NULL) */
} nano_graph;

/* The names of ops and dtypes as printed ("Conv", "f32", ...). */
const char *nano_op_name(int op);
const char *nano_dtype_name(int dtype);
size_t nano_dtype_size(int dtype);
int64_t nano_tensor_numel(const nano_tensor *t);
size_t nano_tensor_bytes(const nano_tensor *t);

void nano_graph_init(nano_graph *g);
void nano_graph_free(nano_graph *g);

/* The name of tensor/node i (a pointer into the pool, valid until the pool grows). */
const char *nano_tensor_name(const nano_graph *g, int t);
const char *nano_node_name(const nano_graph *g, int n);

/* Adds a tensor and returns its index, or -1 when out of memory. shape may be NULL
 * for ndim 0; data (CONST only) is taken over (owned) when own is 1, borrowed when 0.
 * A tensor of kind INPUT or OUTPUT is appended to the graph's inputs or outputs. */
int nano_graph_add_tensor(nano_graph *g, const char *name, int dtype, int kind, int ndim,
                          const int64_t *shape, void *data, int own);
/* Adds a node (inputs may be -1) and returns its index, or -1 when out of memory. */
int nano_graph_add_node(nano_graph *g, int op, const char *name, int nin, const int32_t *in,
                        int nout, const int32_t *out, const nano_attrs *a);
/* The index of the tensor with this name, or -1. */
int nano_graph_find(const nano_graph *g, const char *name);
/* Replaces a constant's data (taken over when own is 1) with a new dtype and shape. */
void nano_graph_set_data(nano_graph *g, int t, int dtype, int ndim, const int64_t *shape,
                         void *data, int own);

/* Removes nodes whose outputs nobody reads (and that are not graph outputs) and tensors
 * no node or graph input/output names; renumbers. Passes call it after rewriting. */
void nano_graph_compact(nano_graph *g);

/* Infers every non-constant tensor's shape and dtype from the inputs', checking each
 * node's operands; NANO_E_FORMAT or NANO_E_UNSUPPORTED with the node named in err. */
nano_status nano_graph_infer_shapes(nano_graph *g, char *err, size_t errlen);

/* The memory plan: every activation's lifetime (from the node that writes it to the last
 * that reads it) and its arena offset, 64-byte aligned, reusing the space of dead ones
 * (greedy by size, best fit); sets arena_off and arena_bytes. Inputs and outputs get
 * their own space for the whole run. */
nano_status nano_graph_plan(nano_graph *g, char *err, size_t errlen);
/* Checks a stored plan: every tensor inside the arena and no two whose lifetimes overlap
 * sharing bytes (the loader's check of a .neb file). */
nano_status nano_graph_check_plan(const nano_graph *g, char *err, size_t errlen);

/* Checks the graph's structure: indices in range, nodes in topological order, every
 * tensor written once, ops known, constants with data of their size. */
nano_status nano_graph_validate(const nano_graph *g, char *err, size_t errlen);

#endif
