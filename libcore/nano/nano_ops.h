/* nano_ops — the edge runtime's light operators: element-wise with broadcasting,
 * activations, pooling, normalisation, softmax and the data movers.
 *
 * Plain C loops that the compiler vectorises (the runtime is built without
 * -ffp-contract, so results do not depend on the ISA), parallel over the outer dimension
 * with OpenMP when nthreads > 1. Shapes are the graph's static shapes; every function
 * writes its whole output and reads nothing past its inputs. */
#ifndef NEBULA_NANO_OPS_H
#define NEBULA_NANO_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "nano_graph.h"

/* A tensor's shape as the ops see it. */
typedef struct nano_shape {
    int ndim;
    int64_t d[NANO_MAX_DIMS];
} nano_shape;

/* y = f(x) element-wise, n elements; f is a nano_act (RELU, CLIP with lo/hi, GELU,
 * GELU_TANH, SIGMOID, TANH) — also the epilogue of ops that fuse one. */
void nano_act_apply(int act, float lo, float hi, const float *x, float *y, size_t n, int nthreads);
/* The same f in place over an m×n block of rows ld apart, on the calling thread: the
 * epilogue of the GEMM and convolution tiles (whose scalar reference is nk_act1). */
void nano_act_rows(int act, float lo, float hi, float *c, size_t ld, int m, int n);
/* y = erf(x), y = sqrt(x) */
void nano_erf(const float *x, float *y, size_t n, int nthreads);
void nano_sqrt(const float *x, float *y, size_t n, int nthreads);

/* y = a OP b with numpy broadcasting to ys (the output's shape), then act. op is
 * NANO_OP_ADD, SUB, MUL, DIV or POW. */
void nano_binary(int op, const float *a, const nano_shape *as, const float *b, const nano_shape *bs,
                 float *y, const nano_shape *ys, int act, float lo, float hi, int nthreads);
/* y = cond ? x : z with broadcasting. */
void nano_where(const uint8_t *c, const nano_shape *cs, const float *x, const nano_shape *xs,
                const float *z, const nano_shape *zs, float *y, const nano_shape *ys, int nthreads);

/* Inference batch norm over dim 1 of x (N, C, ...). */
void nano_batchnorm(const float *x, const nano_shape *xs, const float *scale, const float *bias,
                    const float *mean, const float *var, float eps, float *y, int nthreads);
/* Layer norm over the dims from axis on: y = (x - mean) / sqrt(var + eps) · scale + bias
 * (bias may be NULL); var is the biased variance, as ONNX and PyTorch. */
void nano_layernorm(const float *x, const nano_shape *xs, int axis, const float *scale, const float *bias,
                    float eps, float *y, int nthreads);
/* Softmax along axis (max-subtracted). */
void nano_softmax(const float *x, const nano_shape *xs, int axis, float *y, int nthreads);
/* Mean over the dims in axes_mask; ys is the output shape (keepdims or not). */
void nano_reducemean(const float *x, const nano_shape *xs, int axes_mask, float *y, int nthreads);

/* Pools over x (N, C, H, W) into y (N, C, OH, OW); a holds kernel, stride, pad,
 * dilation, count_include_pad. Max pool pads with -inf; average pool divides by the
 * window inside the input unless count_include_pad. */
void nano_maxpool(const float *x, const nano_shape *xs, const nano_attrs *a, float *y, const nano_shape *ys,
                  int nthreads);
void nano_avgpool(const float *x, const nano_shape *xs, const nano_attrs *a, float *y, const nano_shape *ys,
                  int nthreads);
void nano_globalavgpool(const float *x, const nano_shape *xs, float *y, int nthreads);

/* Data movers, on elements of esize bytes (they serve every dtype). */
void nano_transpose(const void *x, const nano_shape *xs, const int32_t *perm, void *y, size_t esize,
                    int nthreads);
void nano_slice(const void *x, const nano_shape *xs, const int64_t *begin, const int64_t *step, void *y,
                const nano_shape *ys, size_t esize);
/* Concatenates n inputs along axis into y. */
void nano_concat(const void *const *xs, const nano_shape *shapes, int n, int axis, void *y, size_t esize);
/* Splits x along axis into n outputs of the shapes given. */
void nano_split(const void *x, const nano_shape *xs, int axis, void *const *ys, const nano_shape *shapes,
                int n, size_t esize);
/* y = data.take(indices, axis): indices are int64 (idx64) or int32, negative ones count
 * from the end; an index out of range returns -1 (nothing written past y), else 0. */
int nano_gather(const void *data, const nano_shape *ds, int axis, const void *idx, int idx64,
                const nano_shape *is, void *y, size_t esize);
/* Casts n elements between f32, i32, i64 and u8. */
void nano_cast(const void *x, int from, void *y, int to, size_t n);

#endif
