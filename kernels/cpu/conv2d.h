/* conv2d — 2-D convolution (cross-correlation, as torch.nn.Conv2d): groups = 1,
 * dilation 1, zero padding, rectangular kernels, one stride for both axes.
 *
 *   out[n][oc][oh][ow] = bias[oc] + sum_{c,kh,kw} weight[oc][c][kh][kw]
 *                        * inp[n][c][oh*stride - pad + kh][ow*stride - pad + kw]
 *
 * (out-of-range input positions read as 0; OH = (H + 2*pad - KH) / stride + 1, and
 * likewise OW.)
 *
 * The one design decision: the fast path is a *plan* over oneDNN's direct
 * convolution (jit:avx2 or jit:avx512_core on blocked layouts, as the ISA level
 * allows), built once per layer and shape. Its input and output live in the layouts
 * the caller names (dnn.h; a CNN keeps them blocked from the first convolution's
 * output on), while the weights stay in the caller's (OC, C, KH, KW) layout —
 * torch's, the flat parameter buffer's. Each
 * forward reorders the weights into the plan's own blocked copy (they change every
 * step; the copy is small next to the activations), backward-data reuses that copy,
 * and backward-weights reorders its blocked result back, ADDED into the caller's
 * gradient by a reorder with a sum post-op. The choice was measured against
 * im2col + OpenBLAS SGEMM (ResNet-18 CIFAR, batch 64, 2 threads): 95-145 GFLOP/s
 * against 30-46.
 *
 * oneDNN picks the algorithm per pass (dnnl_convolution_auto): where it has a Winograd
 * kernel that pays (F(4x4, 3x3), jit_wino_4x3, avx512_core only: the 3x3 stride-1
 * convolutions of a ResNet at CIFAR batch sizes) it runs that, else its direct kernel.
 * Measured on the 2-core AVX-512 machine, ResNet-18 CIFAR B=64: 47 img/s direct, 73 with
 * Winograd. Winograd sums in a transformed basis, so it rounds differently (and a
 * little worse) than a direct sum: the tests bound its error separately.
 *
 * One exception, also measured: on the 8-block (AVX2), maps of at most
 * CONV2D_GEMM_MAX_PIXELS output pixels per image (ResNet's last stage on CIFAR: 4x4) make
 * oneDNN's direct kernels fall to 45-85 GFLOP/s while one OpenBLAS SGEMM over the whole
 * batch runs at 130+. There the plan uses its GEMM engine: im2col of the blocked input
 * into a (pixels x C*KH*KW) matrix in the blocked channel order, the weights permuted to
 * match, and one SGEMM per pass (forward, backward-weights, backward-data). On the
 * 16-block (AVX-512) oneDNN's kernels win there too (ResNet-18 CIFAR B=64: 87-94 img/s
 * without the engine, 68-73 with it), so the engine is off (conv2d_gemm_max_pixels).
 *
 * bf16 plans (conv2d_plan_init_bf16, --precision bf16 on an AVX512-BF16 or AMX CPU):
 * the activations stay bf16 from layer to layer, as under PyTorch's CPU autocast (a
 * convolution's output is bf16 and what follows takes it as it is): the input, the
 * output, dout and dinp are bf16 arrays (uint16_t), the weights are rounded to bf16 by
 * the forward's reorder, oneDNN's bf16 kernels sum in fp32, and dweight and dbias stay
 * fp32. A network's first convolution reads fp32 images (f32_input): the plan rounds
 * them into its own bf16 copy, which backward-weights reuses.
 *
 * Gradient contract: dinp is WRITTEN (a CNN sums branch gradients itself);
 * dweight and dbias are ADDED (gradient accumulation over micro-batches). */
#ifndef NEBULA_KERNELS_CONV2D_H
#define NEBULA_KERNELS_CONV2D_H

#include <stdbool.h>
#include <stddef.h>

#include "dnn.h"

typedef struct conv2d_shape {
    int N, C, H, W;          /* input */
    int OC, KH, KW;          /* filters */
    int stride, pad;         /* both axes */
    int OH, OW;              /* output: must equal (H + 2*pad - KH)/stride + 1, likewise W */
} conv2d_shape;

/* Largest output map (OH*OW) that takes the GEMM engine on the 8-block. */
#define CONV2D_GEMM_MAX_PIXELS 16
/* The same at the active ISA level: CONV2D_GEMM_MAX_PIXELS below AVX-512, 0 from it on. */
int conv2d_gemm_max_pixels(void);

/* The algorithm of a plan's oneDNN primitives. */
typedef enum conv2d_alg {
    CONV2D_ALG_AUTO = 0,  /* oneDNN chooses per pass: Winograd where it has one that pays, else direct */
    CONV2D_ALG_DIRECT,
    CONV2D_ALG_WINOGRAD,  /* every pass Winograd (tests); not every shape and ISA has one */
} conv2d_alg;

typedef struct conv2d_plan {
    conv2d_shape s;
    dnn_layout in, out;              /* activation layouts */
    bool bias;                       /* the convolution has a bias */
    bool dinp;                       /* backward computes the input gradient */
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    dnnl_primitive_t w_to_fwd;       /* user weights -> fwd's blocked copy */
    dnnl_primitive_t w_to_bwd;       /* user weights -> bwd_data's copy; NULL when fwd's copy serves */
    dnnl_primitive_t dw_to_user;     /* blocked dweight -> user gradient, summed */
    dnnl_memory_t src, dst, w_user, w, w_bwd, dw, bias_m, dbias_m;
    bool bf16;                       /* bf16 activations and weights (conv2d_plan_init_bf16) */
    bool f32_input;                  /* bf16 plan whose input is fp32, rounded into src16buf */
    void *src16buf;                  /* f32_input: the last forward's input, rounded */
    void *wbuf, *wbuf_bwd;           /* blocked weights (fwd, bwd_data), f32 or bf16 */
    float *dwbuf;                    /* blocked dweight */
    float *dbias_tmp;                /* (OC) */
    const float *weight;             /* the last forward's user weights (backward-data reorders them) */
    bool gemm;                       /* the GEMM engine instead of oneDNN's primitives */
    float *cols;                     /* GEMM engine: (N*OH*OW, K) im2col of the input, or dcols */
    bool cols_hold_input;            /* cols is the im2col of the last forward's input */
    float *pm;                       /* GEMM engine: (N*OH*OW, OC) output or dout, pixel-major */
    float *wperm, *dwperm;           /* GEMM engine: (OC, K) weights and dweight in the blocked order */
    size_t bytes;                    /* memory the plan owns */
} conv2d_plan;

/* Builds the primitives for shape `s` (asserted consistent), input layout `in`,
 * output layout `out`, with a bias or not, and the input gradient or not (a
 * network's first convolution needs none); CONV2D_ALG_AUTO. */
void conv2d_plan_init(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias, bool dinp);
/* The same with oneDNN's algorithm named, never the GEMM engine; false (the plan left
 * empty) when oneDNN has no such kernel for this shape at this ISA level. */
bool conv2d_plan_init_alg(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias, bool dinp,
                          conv2d_alg alg);
/* The same in bf16 (see above), oneDNN's choice of algorithm, never the GEMM engine;
 * f32_input: the input is fp32 NCHW (then no dinp). False (the plan left empty) when oneDNN
 * has no bf16 kernel for it here. */
bool conv2d_plan_init_bf16(conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias,
                           bool dinp, bool f32_input);
void conv2d_plan_free(conv2d_plan *p);

/* out = conv(inp, weight) + bias. weight (OC, C, KH, KW); bias (OC) or NULL
 * (only when the plan has none). The activations are float, or bf16 in a bf16 plan. */
void conv2d_plan_forward(conv2d_plan *p, void *out, const void *inp, const float *weight, const float *bias);

/* Gradients of the last forward's inputs (the same inp and weight): dinp WRITTEN
 * (NULL: skipped; must be NULL when the plan has no input gradient), dweight and
 * dbias ADDED (NULL: skipped). */
void conv2d_plan_backward(conv2d_plan *p, void *dinp, float *dweight, float *dbias, const void *dout,
                          const void *inp);

/* The specification: direct loops in double over NCHW tensors and the formula
 * above. Backward ADDS into each non-NULL gradient (dinp too). */
void conv2d_forward_ref(double *out, const double *inp, const double *weight, const double *bias,
                        int N, int C, int H, int W, int OC, int KH, int KW, int stride, int pad, int OH, int OW);
void conv2d_backward_ref(double *dinp, double *dweight, double *dbias, const double *dout, const double *inp,
                         const double *weight, int N, int C, int H, int W, int OC, int KH, int KW, int stride,
                         int pad, int OH, int OW);

#endif
