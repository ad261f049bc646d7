/* deploy — from a trained model to a .neb file for the edge runtime (nebula-deploy).
 *
 * The road: an ONNX file (deploy_onnx_read; torch.onnx.export's or our own) or a Nebula
 * checkpoint (deploy_from_checkpoint) becomes a nano_graph; the passes fold constants
 * and batch norms, fuse operators, prune and quantise it against a calibration set and
 * an accuracy budget; nano_graph_plan lays out its memory and neb_write stores it. The
 * same graph can be written back to ONNX (deploy_onnx_write), which is how Nebula
 * checkpoints reach ONNX Runtime and other tools.
 *
 * The one design decision: every pass rewrites the one nano_graph in place and is checked
 * by running the graph (nano_model_from_graph) — calibration ranges, accuracy before and
 * after, per-layer timing for --quantize auto — so what is measured is what ships. */
#ifndef NEBULA_DEPLOY_H
#define NEBULA_DEPLOY_H

#include <stddef.h>
#include <stdint.h>

#include "nano/nano_graph.h"

/* ---- ONNX (deploy_onnx.c, deploy_onnx_export.c) ---------------------------------- */

/* Reads an ONNX model into g: initializers become constants, nodes are normalised to
 * nano ops (opsets 11..21), shapes inferred. input_shapes overrides symbolic or fixed
 * input dimensions ("input_ids:1x128,pixel:1x3x224x224"; NULL: the file's, where every
 * dimension must then be fixed). An unsupported operator is refused naming the node and
 * its op_type (NANO_E_UNSUPPORTED); a damaged file names what is wrong (NANO_E_FORMAT). */
nano_status deploy_onnx_read(nano_graph *g, const char *path, const char *input_shapes, char *err,
                             size_t errlen);
/* Writes g as an ONNX model (opset 17, ir_version 8): fp32 graphs only (quantised
 * constants are refused); temporary name, fsync, rename. */
nano_status deploy_onnx_write(const nano_graph *g, const char *path, char *err, size_t errlen);

/* ---- Nebula checkpoints (deploy_ckpt.c) ------------------------------------------ */

/* Builds the inference graph of a Nebula checkpoint (gpt2, bert or resnet family; path a
 * run directory, its ckpt/ or one step directory): logits for token ids (B, T) or
 * class scores for images (B, C, H, W). batch and seq (T; 0: the model's context) fix
 * the input shape. */
nano_status deploy_from_checkpoint(nano_graph *g, const char *path, int batch, int seq, char *err,
                                   size_t errlen);

/* ---- data for calibration and accuracy (deploy_data.c) --------------------------- */

/* Samples along dim 0 of a .npy array (f32, or i64/i32 token ids), with optional labels
 * (a 1-D integer .npy of the same length). */
typedef struct deploy_data {
    int dtype;                      /* nano_dtype of x */
    int ndim;                       /* of x, dim 0 the samples */
    int64_t shape[NANO_MAX_DIMS];
    void *x;                        /* the samples, row-major */
    int64_t *labels;                /* [shape[0]] or NULL */
} deploy_data;
nano_status deploy_data_read(deploy_data *d, const char *x_npy, const char *labels_npy, char *err,
                             size_t errlen);
void deploy_data_free(deploy_data *d);

/* ---- passes (deploy_opt.c, deploy_quant.c, deploy_prune.c) ----------------------- */

/* Constant folding (nodes whose inputs are all constants are run once), batch norm
 * folded into the convolution or GEMM before it, identities removed, Gemm/MatMul with a
 * constant right operand turned into a packed-weight GEMM, Reshape chains merged. */
nano_status deploy_fold(nano_graph *g, char *err, size_t errlen);
/* Fusion: conv/GEMM + bias + ReLU/Clip/GELU into one node, the erf-decomposed GELU into
 * GELU, the decomposed layer norm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div,
 * Mul, Add) into LAYERNORM, an Add of a bias into the GEMM before it. */
nano_status deploy_fuse(nano_graph *g, char *err, size_t errlen);

typedef enum deploy_quant {
    DEPLOY_QUANT_NONE = 0,
    DEPLOY_QUANT_FP16 = 1, /* weights stored as IEEE half, computed in fp32 */
    DEPLOY_QUANT_INT8 = 2, /* every conv and GEMM int8 (per-channel weights, calibrated inputs) */
    DEPLOY_QUANT_AUTO = 3, /* per layer: int8 only where it is faster and the budget holds */
} deploy_quant;

typedef struct deploy_opts {
    int quant;               /* deploy_quant */
    double max_drop;         /* accuracy budget: largest top-1 drop allowed (0.01 = 1 point) */
    double prune;            /* magnitude pruning target sparsity of conv/GEMM weights (0: off) */
    int prune_channels;      /* 1: structured pruning of whole output channels instead */
    const deploy_data *calib;/* calibration inputs (activation ranges, pruning order) */
    const deploy_data *eval; /* held-out inputs with labels (the accuracy budget); may be NULL */
    int threads;             /* for the measurement runs */
    int target_arm64;        /* the target is arm64: --quantize auto decides without timing here */
} deploy_opts;

/* What the passes did, for the deploy report and the .neb meta. */
typedef struct deploy_report {
    double acc_before, acc_after;  /* top-1 on eval (-1 when there is none) */
    int layers, layers_int8, layers_fp16;
    double sparsity;               /* of conv/GEMM weights after pruning */
    int64_t weight_bytes_before, weight_bytes_after;
} deploy_report;

/* Quantises g as opts say (FP16, INT8 or AUTO), calibrating on opts->calib and keeping
 * the top-1 drop on opts->eval within opts->max_drop (layers are put back to fp32, most
 * sensitive first, until it holds; NANO_E_ARG when even that cannot meet it). */
nano_status deploy_quantize(nano_graph *g, const deploy_opts *opts, deploy_report *rep, char *err,
                            size_t errlen);
/* Prunes conv/GEMM weights to opts->prune sparsity (or the largest that keeps the
 * budget), magnitude or whole channels. */
nano_status deploy_prune(nano_graph *g, const deploy_opts *opts, deploy_report *rep, char *err,
                         size_t errlen);
/* Top-1 accuracy of g on d (labels needed), or -1 on failure (err says why). */
double deploy_accuracy(const nano_graph *g, const deploy_data *d, int threads, char *err, size_t errlen);

#endif
