/* cuda/cnn — the CNN kernels on the GPU: the CUDA variants of kernels/cpu/conv2d.h,
 * batchnorm.h, pool.h and relu.h, with the same arguments and contracts on device
 * pointers (conv2d.cu, batchnorm.cu, pool.cu, relu.cu).
 *
 * The one design decision: the plans mirror the CPU plans call for call (init once
 * per layer and shape, then forward/backward), but hold cuDNN descriptors and
 * device buffers instead of oneDNN primitives, and support the NCHW layout only:
 * cuDNN has no float nChw8c or nChw16c, so a plan asked for DNN_BLOCKED records an error
 * (cuda_error_take reports it) and every later call on it records one again and
 * does nothing. Plans allocate device memory at init only, never in a step.
 *
 * Gradient contracts are the CPU ones: conv2d and batchnorm WRITE dinp and ADD
 * into dweight and dbias; pooling and relu backward ADD into dinp. Every kernel here
 * is deterministic (fixed reduction orders, no atomics; cuDNN backward algorithms
 * restricted to deterministic ones). */
#ifndef NEBULA_KERNELS_CUDA_CNN_H
#define NEBULA_KERNELS_CUDA_CNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/conv2d.h" /* conv2d_shape, dnn_layout */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- conv2d (conv2d.cu): cuDNN's legacy convolution API, exact fp32 ---------- */

typedef struct cuda_conv2d_plan {
    conv2d_shape s;
    dnn_layout in, out;        /* activation layouts (DNN_NCHW only) */
    bool bias;                 /* the convolution has a bias */
    bool dinp;                 /* backward computes the input gradient */
    bool ok;                   /* descriptors and algorithms are ready */
    void *x_desc, *y_desc, *b_desc; /* cudnnTensorDescriptor_t: input, output, bias (1, OC, 1, 1) */
    void *w_desc;              /* cudnnFilterDescriptor_t (OC, C, KH, KW) */
    void *conv_desc;           /* cudnnConvolutionDescriptor_t, FMA math (no TF32) */
    int algo_fwd, algo_bwd_data, algo_bwd_filter; /* cuDNN algorithm enums chosen at init */
    size_t ws_bytes;           /* the largest of the three algorithms' workspaces */
    const float *weight;       /* the last forward's weight (backward-data reads it) */
} cuda_conv2d_plan;

void cuda_conv2d_plan_init(cuda_conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias,
                           bool dinp);
void cuda_conv2d_plan_free(cuda_conv2d_plan *p);
/* out (N, OC, OH, OW) = conv(inp (N, C, H, W), weight (OC, C, KH, KW)) + bias (OC) or NULL. */
void cuda_conv2d_plan_forward(cuda_conv2d_plan *p, float *out, const float *inp, const float *weight,
                              const float *bias);
/* dinp WRITTEN (NULL: skipped), dweight and dbias ADDED (NULL: skipped); same inp as the last forward. */
void cuda_conv2d_plan_backward(cuda_conv2d_plan *p, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp);

/* ---- batchnorm (batchnorm.cu): own deterministic kernels --------------------- */

typedef struct cuda_batchnorm_plan {
    int N, C, H, W;
    dnn_layout layout;         /* of input and output (DNN_NCHW only) */
    bool relu;                 /* a ReLU fused after the normalisation */
    float eps;
    bool ok;                   /* buffers are ready */
    int splits;                /* blocks per channel in the reductions */
    float *mean, *var;         /* device (C): the last training forward's batch mean and biased variance */
    double *partial;           /* device (C, splits, 2): reduction partials */
    double *sums;              /* device (C, 2): backward's sum(g) and sum(g * xhat) */
    size_t bytes;              /* device memory the plan owns */
} cuda_batchnorm_plan;

void cuda_batchnorm_plan_init(cuda_batchnorm_plan *p, int N, int C, int H, int W, dnn_layout layout, float eps,
                              bool relu);
void cuda_batchnorm_plan_free(cuda_batchnorm_plan *p);
void cuda_batchnorm_plan_forward(cuda_batchnorm_plan *p, float *out, const float *inp, const float *weight,
                                 const float *bias, float *running_mean, float *running_var, float momentum,
                                 bool training);
void cuda_batchnorm_plan_backward(cuda_batchnorm_plan *p, float *dinp, float *dweight, float *dbias,
                                  const float *dout, const float *inp, const float *weight, const float *bias);

/* ---- pooling (pool.cu) ------------------------------------------------------- */

void cuda_maxpool2d_forward(float *out, int32_t *argmax, const float *inp, int N, int C, int H, int W, int K,
                            int stride, int pad, int OH, int OW);
/* ADDS; a gather over input pixels in output order: bit-identical to the CPU kernel. */
void cuda_maxpool2d_backward(float *dinp, const float *dout, const int32_t *argmax, int N, int C, int H, int W,
                             int K, int stride, int pad, int OH, int OW);
void cuda_avgpool_global_forward(float *out, const float *inp, int N, int C, int HW);
void cuda_avgpool_global_backward(float *dinp, const float *dout, int N, int C, int HW);

/* ---- relu (relu.cu) ------------------------------------------------------------ */

void cuda_relu_forward(float *out, const float *inp, size_t n);
void cuda_relu_backward(float *dinp, const float *out_or_inp, const float *dout, size_t n);

#ifdef __cplusplus
}
#endif

#endif
