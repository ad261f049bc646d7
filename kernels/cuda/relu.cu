// cuda/relu — relu.h's contract on the GPU (see cnn.h): out = max(x, 0) with NaN
// and -0 passed through, backward dinp += (y <= 0 ? 0 : dout). The one design
// decision: the same select expressions as kernels/cpu/relu.c, element for element
// (including adding +0 where the gradient is masked), so results are bit-identical
// to the CPU and in-place forward (out == inp) is safe: each thread reads its
// element before writing it and touches no other.
#include "cnn.h"

#include "device.h"

#include <cuda_runtime.h>

namespace {

__global__ void relu_forward_kernel(float *out, const float *inp, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float x = inp[i];
        out[i] = x < 0.0f ? 0.0f : x;
    }
}

__global__ void relu_backward_kernel(float *dinp, const float *y, const float *dout, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dinp[i] += y[i] <= 0.0f ? 0.0f : dout[i];
}

unsigned relu_blocks(size_t n)
{
    size_t b = (n + 255) / 256;
    return (unsigned)(b > 65535u * 8u ? 65535u * 8u : b);
}

}  // namespace

extern "C" void cuda_relu_forward(float *out, const float *inp, size_t n)
{
    if (n == 0) return;
    relu_forward_kernel<<<relu_blocks(n), 256, 0, (cudaStream_t)cuda_stream_current()>>>(out, inp, n);
    CUDA_LAUNCH_CHECK("relu_forward_kernel");
}

extern "C" void cuda_relu_backward(float *dinp, const float *out_or_inp, const float *dout, size_t n)
{
    if (n == 0) return;
    relu_backward_kernel<<<relu_blocks(n), 256, 0, (cudaStream_t)cuda_stream_current()>>>(dinp, out_or_inp, dout, n);
    CUDA_LAUNCH_CHECK("relu_backward_kernel");
}
