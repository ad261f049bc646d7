// library_stubs — the cuBLAS and cuDNN kernels (kernels/cuda/matmul.cu, conv2d.cu) for
// test programs linked against the CPU emulator, which cannot run those libraries.
// The exact-fp32 matmul is the CPU kernel (kernels/cpu/matmul.h) and the convolution
// plan a oneDNN plan on NCHW (kernels/cpu/conv2d.h): emulated device memory is host
// memory, so the models' GPU path (test_models_cuda) runs end to end with every other
// kernel emulated — it tests the callers, not cuBLAS or cuDNN. Every other
// entry point stops the program with a message: a test that calls one on the
// emulator must skip it first (check.h's gpu_emulated, as test_cuda_cnn does).
// The signatures come from the real headers, so a change there fails to compile here.
#include <cstdio>
#include <cstdlib>

extern "C" {
// C linkage (the CPU headers have no extern "C" guard); first, so their guards hold
#include "cpu/conv2d.h"
#include "cpu/matmul.h"
}
#include <map>
#include "cuda/cnn.h"
#include "cuda/matmul.h"

[[noreturn]] static void not_emulated(const char *what)
{
    fprintf(stderr, "cuda_emu: %s uses cuBLAS/cuDNN, which the CPU emulator cannot run; "
                    "skip it when gpu_emulated (validation/check.h)\n", what);
    fflush(stdout);
    abort();
}

extern "C" {
#define MATMUL_STUBS(sfx)                                                                                     \
    void cuda_matmul_forward##sfx(float *, const float *, const float *, const float *, int, int, int,          \
                                  matmul_layout)                                                               \
    {                                                                                                         \
        not_emulated("cuda_matmul_forward" #sfx);                                                             \
    }                                                                                                         \
    void cuda_matmul_backward##sfx(float *, float *, float *, const float *, const float *, const float *, int, \
                                   int, int, matmul_layout)                                                    \
    {                                                                                                         \
        not_emulated("cuda_matmul_backward" #sfx);                                                            \
    }
void cuda_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int BT, int C, int OC,
                         matmul_layout layout)
{
    matmul_forward(out, inp, weight, bias, BT, C, OC, layout);
}
void cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int BT, int C, int OC, matmul_layout layout)
{
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, BT, C, OC, layout);
}
MATMUL_STUBS(_tf32)
MATMUL_STUBS(_bf16)
MATMUL_STUBS(_f16)
// The CPU plan behind each emulated cuDNN plan, by the plan's address.
static std::map<const cuda_conv2d_plan *, conv2d_plan *> cpu_plans;

void cuda_conv2d_plan_init(cuda_conv2d_plan *p, const conv2d_shape *s, dnn_layout in, dnn_layout out, bool bias,
                           bool dinp)
{
    if (in != DNN_NCHW || out != DNN_NCHW) not_emulated("cuda_conv2d_plan_init with a blocked layout");
    conv2d_plan *c = new conv2d_plan;
    conv2d_plan_init(c, s, DNN_NCHW, DNN_NCHW, bias, dinp);
    cpu_plans[p] = c;
    p->ws_bytes = c->bytes;
}
void cuda_conv2d_plan_free(cuda_conv2d_plan *p)
{
    auto it = cpu_plans.find(p);
    if (it == cpu_plans.end()) return;
    conv2d_plan_free(it->second);
    delete it->second;
    cpu_plans.erase(it);
}
void cuda_conv2d_plan_forward(cuda_conv2d_plan *p, float *out, const float *inp, const float *weight,
                              const float *bias)
{
    conv2d_plan_forward(cpu_plans.at(p), out, inp, weight, bias);
}
void cuda_conv2d_plan_backward(cuda_conv2d_plan *p, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp)
{
    conv2d_plan_backward(cpu_plans.at(p), dinp, dweight, dbias, dout, inp);
}
}
