// cuda/pool — pool.h's contracts on the GPU (see cnn.h): max pooling with PyTorch's
// argmax, global average pooling.
//
// The one design decision: max-pool backward is a GATHER, one thread per input
// pixel: it visits the outputs whose windows cover the pixel in increasing output
// index and adds dout[j] where argmax[j] names the pixel. That is exactly the
// order in which kernels/cpu/pool.c's scatter (dx[argmax[j]] += dout[j], j rising)
// adds into the same element, so the result is deterministic and bit-identical to
// the CPU, with no atomics. The forward scan (window rows, then columns, clipped
// to the image, `v > best || isnan(v)` from -inf) is the CPU's too: bit-identical
// values and argmax.
#include "cnn.h"

#include "device.h"

#include <cuda_runtime.h>
#include <math.h>

namespace {

unsigned grid_for(size_t n, unsigned block)
{
    size_t b = (n + block - 1) / block;
    return (unsigned)(b > 65535u * 8u ? 65535u * 8u : b);
}

// One thread per output (n, c, oh, ow).
__global__ void maxpool_forward_kernel(float *out, int32_t *argmax, const float *inp, int planes, int H, int W,
                                       int K, int stride, int pad, int OH, int OW)
{
    size_t total = (size_t)planes * OH * OW;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (size_t)gridDim.x * blockDim.x) {
        int ow = (int)(o % OW), oh = (int)((o / OW) % OH);
        size_t p = o / ((size_t)OH * OW);
        const float *x = inp + p * H * W;
        int ih0 = oh * stride - pad, iw0 = ow * stride - pad;
        int ih1 = min(ih0 + K, H), iw1 = min(iw0 + K, W);
        ih0 = max(ih0, 0), iw0 = max(iw0, 0);
        float best = -INFINITY;
        int32_t at = ih0 * W + iw0;
        for (int ih = ih0; ih < ih1; ih++)
            for (int iw = iw0; iw < iw1; iw++) {
                float v = x[ih * W + iw];
                if (v > best || isnan(v)) {
                    best = v;
                    at = ih * W + iw;
                }
            }
        out[o] = best;
        argmax[o] = at;
    }
}

// One thread per input pixel (n, c, ih, iw). Outputs oh whose window rows
// [oh*stride - pad, oh*stride - pad + K) hold ih: ceil((ih + pad - K + 1)/stride)
// <= oh <= floor((ih + pad)/stride), clipped to [0, OH); likewise ow.
__global__ void maxpool_backward_kernel(float *dinp, const float *dout, const int32_t *argmax, int planes, int H,
                                        int W, int K, int stride, int pad, int OH, int OW)
{
    size_t total = (size_t)planes * H * W;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int iw = (int)(i % W), ih = (int)((i / W) % H);
        size_t p = i / ((size_t)H * W);
        int th = ih + pad - K + 1, tw = iw + pad - K + 1;
        int oh0 = th <= 0 ? 0 : (th + stride - 1) / stride, oh1 = min((ih + pad) / stride, OH - 1);
        int ow0 = tw <= 0 ? 0 : (tw + stride - 1) / stride, ow1 = min((iw + pad) / stride, OW - 1);
        const float *g = dout + p * OH * OW;
        const int32_t *a = argmax + p * OH * OW;
        const int32_t me = ih * W + iw;
        float acc = dinp[i];
        for (int oh = oh0; oh <= oh1; oh++)
            for (int ow = ow0; ow <= ow1; ow++) {
                int j = oh * OW + ow;
                if (a[j] == me) acc += g[j];
            }
        dinp[i] = acc;
    }
}

// One warp per plane: lane l sums elements l, l+32, ... in order, then a fixed
// shuffle tree; deterministic (not the CPU's SIMD order: compared with a tolerance).
__global__ void avgpool_forward_kernel(float *out, const float *inp, int planes, int HW)
{
    int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (warp >= planes) return;
    const float *x = inp + (size_t)warp * HW;
    float s = 0.0f;
    for (int i = lane; i < HW; i += 32) s += x[i];
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[warp] = s / (float)HW;
}

// dinp[p][i] += dout[p] / HW, the CPU's expression (bit-identical).
__global__ void avgpool_backward_kernel(float *dinp, const float *dout, int planes, int HW)
{
    size_t total = (size_t)planes * HW;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] += dout[i / HW] / (float)HW;
}

}  // namespace

extern "C" void cuda_maxpool2d_forward(float *out, int32_t *argmax, const float *inp, int N, int C, int H, int W,
                                       int K, int stride, int pad, int OH, int OW)
{
    size_t total = (size_t)N * C * OH * OW;
    if (total == 0) return;
    maxpool_forward_kernel<<<grid_for(total, 256), 256, 0, (cudaStream_t)cuda_stream_current()>>>(
        out, argmax, inp, N * C, H, W, K, stride, pad, OH, OW);
    CUDA_LAUNCH_CHECK("maxpool_forward_kernel");
}

extern "C" void cuda_maxpool2d_backward(float *dinp, const float *dout, const int32_t *argmax, int N, int C, int H,
                                        int W, int K, int stride, int pad, int OH, int OW)
{
    size_t total = (size_t)N * C * H * W;
    if (total == 0 || OH <= 0 || OW <= 0) return;
    maxpool_backward_kernel<<<grid_for(total, 256), 256, 0, (cudaStream_t)cuda_stream_current()>>>(
        dinp, dout, argmax, N * C, H, W, K, stride, pad, OH, OW);
    CUDA_LAUNCH_CHECK("maxpool_backward_kernel");
}

extern "C" void cuda_avgpool_global_forward(float *out, const float *inp, int N, int C, int HW)
{
    int planes = N * C;
    if (planes <= 0) return;
    unsigned blocks = (unsigned)(((size_t)planes * 32 + 255) / 256);
    avgpool_forward_kernel<<<blocks, 256, 0, (cudaStream_t)cuda_stream_current()>>>(out, inp, planes, HW);
    CUDA_LAUNCH_CHECK("avgpool_forward_kernel");
}

extern "C" void cuda_avgpool_global_backward(float *dinp, const float *dout, int N, int C, int HW)
{
    size_t total = (size_t)N * C * HW;
    if (total == 0) return;
    avgpool_backward_kernel<<<grid_for(total, 256), 256, 0, (cudaStream_t)cuda_stream_current()>>>(dinp, dout, N * C,
                                                                                                  HW);
    CUDA_LAUNCH_CHECK("avgpool_backward_kernel");
}
