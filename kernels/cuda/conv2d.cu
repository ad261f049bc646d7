// cuda/conv2d — conv2d.h's plan on the GPU (see cnn.h): cuDNN's legacy convolution
// API on NCHW float tensors.
//
// The one design decision: exact fp32 and deterministic, chosen once at plan init.
// The convolution descriptor is set to CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH lets
// cuDNN use TF32 tensor cores for float convolutions on Ampere and later, which
// would make the GPU disagree with the CPU by ~1e-3. The algorithms come from
// cudnnGetConvolution*Algorithm_v7 (best first), taking the first that succeeds,
// reports FMA (or default) math, is not FFT or Winograd (their rounding differs
// from a direct sum; the CPU is a direct convolution) and, for the two backward
// passes, reports CUDNN_DETERMINISTIC; if none qualifies the plan falls back to
// IMPLICIT_GEMM / BWD_DATA_ALGO_1 / BWD_FILTER_ALGO_1 (all deterministic). The
// workspace sizes are queried at init; each call takes the largest from
// cuda_workspace. dbias is a small deterministic kernel (a fixed-order reduction
// per channel) instead of cudnnConvolutionBackwardBias, whose determinism is not
// documented.
//
// Gradient contract (conv2d.h): dinp WRITTEN (beta = 0), dweight and dbias ADDED
// (beta = 1).
#include "cnn.h"

#include "device.h"

#include <cstring>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace {

thread_local cudnnHandle_t dnn_handle = nullptr;

// Largest workspace an algorithm may ask for at init (bytes).
constexpr size_t CONV_WS_MAX = (size_t)1 << 30;

cudnnHandle_t handle()
{
    if (!dnn_handle) {
        cudnnStatus_t st = cudnnCreate(&dnn_handle);
        if (st != CUDNN_STATUS_SUCCESS) {
            dnn_handle = nullptr;
            cuda_error_record((int)st, "cudnnCreate", __FILE__, __LINE__);
            return nullptr;
        }
    }
    cudnnStatus_t st = cudnnSetStream(dnn_handle, (cudaStream_t)cuda_stream_current());
    if (st != CUDNN_STATUS_SUCCESS) {
        cuda_error_record((int)st, "cudnnSetStream", __FILE__, __LINE__);
        return nullptr;
    }
    return dnn_handle;
}

#define DNN_TRY(call)                                                          \
    do {                                                                       \
        cudnnStatus_t st_ = (call);                                            \
        if (st_ != CUDNN_STATUS_SUCCESS) {                                     \
            cuda_error_record((int)st_, #call, __FILE__, __LINE__);            \
            return false;                                                      \
        }                                                                      \
    } while (0)

// Pass 0 takes only results cuDNN reports as FMA math, pass 1 also default math
// (run under our FMA descriptor, so still without TF32).
bool math_ok(cudnnMathType_t m, int pass) { return m == CUDNN_FMA_MATH || (pass == 1 && m == CUDNN_DEFAULT_MATH); }

// dbias[oc] += sum over n and pixels of dout[n][oc][:]. One block per channel:
// thread t sums (n, i) pairs t, t+256, ... of the channel in order, then a fixed
// shared-memory tree. Deterministic.
__global__ void conv_dbias_kernel(float *dbias, const float *dout, int N, int OC, int P)
{
    __shared__ float sh[256];
    const int oc = blockIdx.x;
    const size_t M = (size_t)N * P;
    float acc = 0.0f;
    for (size_t m = threadIdx.x; m < M; m += blockDim.x) {
        size_t n = m / P, i = m % P;
        acc += dout[(n * OC + oc) * P + i];
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) dbias[oc] += sh[0];
}

bool plan_build(cuda_conv2d_plan *p)
{
    const conv2d_shape *s = &p->s;
    cudnnHandle_t h = handle();
    if (!h) return false;
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t c;
    DNN_TRY(cudnnCreateTensorDescriptor(&x));
    p->x_desc = x;
    DNN_TRY(cudnnCreateTensorDescriptor(&y));
    p->y_desc = y;
    DNN_TRY(cudnnCreateTensorDescriptor(&b));
    p->b_desc = b;
    DNN_TRY(cudnnCreateFilterDescriptor(&w));
    p->w_desc = w;
    DNN_TRY(cudnnCreateConvolutionDescriptor(&c));
    p->conv_desc = c;
    DNN_TRY(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->N, s->C, s->H, s->W));
    DNN_TRY(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->N, s->OC, s->OH, s->OW));
    DNN_TRY(cudnnSetTensor4dDescriptor(b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, s->OC, 1, 1));
    DNN_TRY(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s->OC, s->C, s->KH, s->KW));
    // torch.nn.Conv2d is a cross-correlation; dilation 1, groups 1.
    DNN_TRY(cudnnSetConvolution2dDescriptor(c, s->pad, s->pad, s->stride, s->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
    DNN_TRY(cudnnSetConvolutionMathType(c, CUDNN_FMA_MATH));
    int on, oc, oh, ow;
    DNN_TRY(cudnnGetConvolution2dForwardOutputDim(c, x, w, &on, &oc, &oh, &ow));
    if (on != s->N || oc != s->OC || oh != s->OH || ow != s->OW) {
        cuda_error_record((int)CUDNN_STATUS_BAD_PARAM, "cuda_conv2d_plan_init: OH/OW disagree with cuDNN's", __FILE__,
                          __LINE__);
        return false;
    }

    // Forward: any algorithm is deterministic; not FFT/Winograd (rounding unlike a direct sum).
    {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int n = 0;
        p->algo_fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
        DNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, c, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r));
        bool chosen = false;
        for (int pass = 0; pass < 2 && !chosen; pass++)
        for (int i = 0; i < n && !chosen; i++) {
            cudnnConvolutionFwdAlgo_t a = r[i].algo;
            if (r[i].status != CUDNN_STATUS_SUCCESS || !math_ok(r[i].mathType, pass) || r[i].memory > CONV_WS_MAX) continue;
            if (a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
                a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED)
                continue;
            p->algo_fwd = a;
            chosen = true;
        }
    }
    {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int n = 0;
        p->algo_bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
        DNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, y, c, x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r));
        bool chosen = false;
        for (int pass = 0; pass < 2 && !chosen; pass++)
        for (int i = 0; i < n && !chosen; i++) {
            cudnnConvolutionBwdDataAlgo_t a = r[i].algo;
            if (r[i].status != CUDNN_STATUS_SUCCESS || !math_ok(r[i].mathType, pass) || r[i].memory > CONV_WS_MAX ||
                r[i].determinism != CUDNN_DETERMINISTIC || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0)
                continue;
            if (a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
                a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED)
                continue;
            p->algo_bwd_data = a;
            chosen = true;
        }
    }
    {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int n = 0;
        p->algo_bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
        DNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, y, c, w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
                                                              r));
        bool chosen = false;
        for (int pass = 0; pass < 2 && !chosen; pass++)
        for (int i = 0; i < n && !chosen; i++) {
            cudnnConvolutionBwdFilterAlgo_t a = r[i].algo;
            if (r[i].status != CUDNN_STATUS_SUCCESS || !math_ok(r[i].mathType, pass) || r[i].memory > CONV_WS_MAX ||
                r[i].determinism != CUDNN_DETERMINISTIC || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
                a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3)
                continue;
            if (a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
                a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED)
                continue;
            p->algo_bwd_filter = a;
            chosen = true;
        }
    }
    // Workspace sizes for the chosen algorithms under FMA math (this also rejects a
    // combination cuDNN cannot run).
    size_t f = 0, d = 0, g = 0;
    DNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(h, x, w, c, y, (cudnnConvolutionFwdAlgo_t)p->algo_fwd, &f));
    if (p->dinp)
        DNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, c, x, (cudnnConvolutionBwdDataAlgo_t)p->algo_bwd_data,
                                                             &d));
    DNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, c, w,
                                                           (cudnnConvolutionBwdFilterAlgo_t)p->algo_bwd_filter, &g));
    p->ws_bytes = f > d ? f : d;
    if (g > p->ws_bytes) p->ws_bytes = g;
    return true;
}

}  // namespace

extern "C" void cuda_conv2d_plan_init(cuda_conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out,
                                      bool bias, bool dinp)
{
    memset(p, 0, sizeof *p);
    p->s = *s, p->in = in, p->out = out, p->bias = bias, p->dinp = dinp;
    if (in != DNN_NCHW || out != DNN_NCHW) {
        cuda_error_record((int)CUDNN_STATUS_NOT_SUPPORTED,
                          "cuda_conv2d_plan_init: only DNN_NCHW (cuDNN has no float nChw8c layout)", __FILE__, __LINE__);
        return;
    }
    if (s->stride < 1 || s->pad < 0 || s->KH < 1 || s->KW < 1 || s->N < 1 || s->C < 1 || s->OC < 1 ||
        s->OH != (s->H + 2 * s->pad - s->KH) / s->stride + 1 || s->OW != (s->W + 2 * s->pad - s->KW) / s->stride + 1) {
        cuda_error_record((int)CUDNN_STATUS_BAD_PARAM, "cuda_conv2d_plan_init: inconsistent conv2d_shape", __FILE__,
                          __LINE__);
        return;
    }
    p->ok = plan_build(p);
}

extern "C" void cuda_conv2d_plan_free(cuda_conv2d_plan *p)
{
    if (p->x_desc) cudnnDestroyTensorDescriptor((cudnnTensorDescriptor_t)p->x_desc);
    if (p->y_desc) cudnnDestroyTensorDescriptor((cudnnTensorDescriptor_t)p->y_desc);
    if (p->b_desc) cudnnDestroyTensorDescriptor((cudnnTensorDescriptor_t)p->b_desc);
    if (p->w_desc) cudnnDestroyFilterDescriptor((cudnnFilterDescriptor_t)p->w_desc);
    if (p->conv_desc) cudnnDestroyConvolutionDescriptor((cudnnConvolutionDescriptor_t)p->conv_desc);
    memset(p, 0, sizeof *p);
}

#define DNN_CALL(call)                                                         \
    do {                                                                       \
        cudnnStatus_t st_ = (call);                                            \
        if (st_ != CUDNN_STATUS_SUCCESS) {                                     \
            cuda_error_record((int)st_, #call, __FILE__, __LINE__);            \
            return;                                                            \
        }                                                                      \
    } while (0)

extern "C" void cuda_conv2d_plan_forward(cuda_conv2d_plan *p, float *out, const float *inp, const float *weight,
                                         const float *bias)
{
    if (!p->ok) {
        cuda_error_record((int)CUDNN_STATUS_NOT_INITIALIZED, "cuda_conv2d_plan_forward on a plan that failed init",
                          __FILE__, __LINE__);
        return;
    }
    cudnnHandle_t h = handle();
    if (!h) return;
    void *ws = p->ws_bytes ? cuda_workspace(p->ws_bytes) : nullptr;
    if (p->ws_bytes && !ws) return;
    p->weight = weight;
    const float one = 1.0f, zero = 0.0f;
    DNN_CALL(cudnnConvolutionForward(h, &one, (cudnnTensorDescriptor_t)p->x_desc, inp, (cudnnFilterDescriptor_t)p->w_desc,
                                     weight, (cudnnConvolutionDescriptor_t)p->conv_desc,
                                     (cudnnConvolutionFwdAlgo_t)p->algo_fwd, ws, p->ws_bytes, &zero,
                                     (cudnnTensorDescriptor_t)p->y_desc, out));
    if (bias)  // out += bias broadcast over (N, OH, OW)
        DNN_CALL(cudnnAddTensor(h, &one, (cudnnTensorDescriptor_t)p->b_desc, bias, &one,
                                (cudnnTensorDescriptor_t)p->y_desc, out));
}

extern "C" void cuda_conv2d_plan_backward(cuda_conv2d_plan *p, float *dinp, float *dweight, float *dbias,
                                          const float *dout, const float *inp)
{
    if (!p->ok || (dinp && !p->dinp) || (dinp && !p->weight)) {
        cuda_error_record((int)CUDNN_STATUS_NOT_INITIALIZED,
                          "cuda_conv2d_plan_backward: plan failed init, has no input gradient, or saw no forward",
                          __FILE__, __LINE__);
        return;
    }
    cudnnHandle_t h = handle();
    if (!h) return;
    void *ws = p->ws_bytes ? cuda_workspace(p->ws_bytes) : nullptr;
    if (p->ws_bytes && !ws) return;
    const conv2d_shape *s = &p->s;
    const float one = 1.0f, zero = 0.0f;
    if (dbias) {
        conv_dbias_kernel<<<(unsigned)s->OC, 256, 0, (cudaStream_t)cuda_stream_current()>>>(dbias, dout, s->N, s->OC,
                                                                                           s->OH * s->OW);
        CUDA_LAUNCH_CHECK("conv_dbias_kernel");
    }
    if (dweight)  // dweight += x (*) dout   (beta = 1: ADDED)
        DNN_CALL(cudnnConvolutionBackwardFilter(h, &one, (cudnnTensorDescriptor_t)p->x_desc, inp,
                                                (cudnnTensorDescriptor_t)p->y_desc, dout,
                                                (cudnnConvolutionDescriptor_t)p->conv_desc,
                                                (cudnnConvolutionBwdFilterAlgo_t)p->algo_bwd_filter, ws, p->ws_bytes,
                                                &one, (cudnnFilterDescriptor_t)p->w_desc, dweight));
    if (dinp)  // dinp = W^T (*) dout   (beta = 0: WRITTEN, conv2d.h's contract)
        DNN_CALL(cudnnConvolutionBackwardData(h, &one, (cudnnFilterDescriptor_t)p->w_desc, p->weight,
                                              (cudnnTensorDescriptor_t)p->y_desc, dout,
                                              (cudnnConvolutionDescriptor_t)p->conv_desc,
                                              (cudnnConvolutionBwdDataAlgo_t)p->algo_bwd_data, ws, p->ws_bytes, &zero,
                                              (cudnnTensorDescriptor_t)p->x_desc, dinp));
}
