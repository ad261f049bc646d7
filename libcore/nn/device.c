/* device — see device.h. The CUDA half lives in device_cuda.c (its kernel tables
 * name the kernels of kernels/cuda), compiled only when nvcc was present. */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "cpu/isa.h"
#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "gemm_tune.h"
#include "cpu/act16.h"
#include "cpu/batchnorm.h"
#include "cpu/pool.h"
#include "cpu/relu.h"
#include "cpu/embed.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/residual.h"
#include "cpu/xent.h"
#ifdef NEBULA_CUDA
#include "cuda/device.h"
#include "device_impl.h"
/* The check-macro family's CUDA member (docs/design.md#errors): a failed runtime call is a bug or a
 * dead device, never expected trouble, so it dies with the call and CUDA's reason. */
#define CUDA_CHECK(call) \
    do { int cuda_rc_ = (call); \
         if (cuda_rc_ != 0) die_at(__FILE__, __LINE__, #call, cuda_error_name(cuda_rc_), \
             "a CUDA call failed; rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel"); } while (0)
#endif

static void cpu_zero(float *x, size_t n) { memset(x, 0, n * sizeof *x); }
static void cpu_copy(float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof *dst); }

/* oneDNN plans behind the opaque pointers of cnn_ops; activations blocked (dnn.h). */
static void *cpu_conv_plan_new(const conv2d_shape *s, bool nchw_input, bool dinp, size_t *bytes)
{
    conv2d_plan *p = malloc(sizeof *p);
    CHECK(p, "out of memory for a convolution plan");
    conv2d_plan_init(p, s, nchw_input ? DNN_NCHW : DNN_BLOCKED, DNN_BLOCKED, false, dinp);
    *bytes = p->bytes;
    return p;
}
/* bf16 activations (conv2d.h; PyTorch CPU autocast's rule for a CNN): conv1 rounds the
 * fp32 images itself. A shape oneDNN has no bf16 kernel for here is refused: the
 * network's tensors between layers are bf16, so an fp32 plan could not take them. */
static void *cpu_conv_plan_new_bf16(const conv2d_shape *s, bool nchw_input, bool dinp, size_t *bytes)
{
    conv2d_plan *p = malloc(sizeof *p);
    CHECK(p, "out of memory for a convolution plan");
    CHECK(conv2d_plan_init_bf16(p, s, nchw_input ? DNN_NCHW : DNN_BLOCKED, DNN_BLOCKED, false, dinp, nchw_input),
          "oneDNN has no bf16 convolution for this shape on this CPU");
    *bytes = p->bytes;
    return p;
}
static void cpu_conv_plan_free(void *p) { if (p) { conv2d_plan_free(p); free(p); } }
static void cpu_conv_forward(void *p, float *out, const float *inp, const float *w, const float *b)
{
    conv2d_plan_forward(p, out, inp, w, b);
}
static void cpu_conv_backward(void *p, float *dinp, float *dw, float *db, const float *dout, const float *inp)
{
    conv2d_plan_backward(p, dinp, dw, db, dout, inp);
}
static void *cpu_bn_plan_new(int N, int C, int H, int W, float eps, bool relu, size_t *bytes)
{
    batchnorm_plan *p = malloc(sizeof *p);
    CHECK(p, "out of memory for a batch-norm plan");
    batchnorm_plan_init(p, N, C, H, W, DNN_BLOCKED, eps, relu);
    *bytes = p->bytes;
    return p;
}
static void *cpu_bn_plan_new_bf16(int N, int C, int H, int W, float eps, bool relu, size_t *bytes)
{
    batchnorm_plan *p = malloc(sizeof *p);
    CHECK(p, "out of memory for a batch-norm plan");
    batchnorm_plan_init_bf16(p, N, C, H, W, DNN_BLOCKED, eps, relu);
    *bytes = p->bytes;
    return p;
}
static void cpu_bn_plan_free(void *p) { if (p) { batchnorm_plan_free(p); free(p); } }
static void cpu_bn_forward(void *p, float *out, const float *inp, const float *w, const float *b, float *rm, float *rv,
                           float momentum, bool training)
{
    batchnorm_plan_forward(p, out, inp, w, b, rm, rv, momentum, training);
}
static void cpu_bn_backward(void *p, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *b)
{
    batchnorm_plan_backward(p, dinp, dw, db, dout, inp, w, b);
}
static void cpu_add_scalar(float *x, float v) { *x += v; }
/* The bf16 table's element-wise passes (act16.h) behind the float pointers of cnn_ops. */
static void cpu16_to_nchw(float *dst, const float *src, int N, int C, int HW)
{
    act16_to_nchw(dst, (const uint16_t *)src, N, C, HW);
}
static void cpu16_from_nchw(float *dst, const float *src, int N, int C, int HW)
{
    act16_from_nchw((uint16_t *)dst, src, N, C, HW);
}
static void cpu16_add_relu(float *out, const float *identity, size_t n)
{
    act16_add_relu((uint16_t *)out, (const uint16_t *)identity, n);
}
static void cpu16_relu_backward(float *dinp, const float *out, const float *dout, size_t n)
{
    act16_relu_backward((uint16_t *)dinp, (const uint16_t *)out, (const uint16_t *)dout, n);
}
static void cpu16_residual_backward(float *da, float *db, const float *dout, size_t n)
{
    CHECK(!db, "bf16 residual_backward takes one branch");
    act16_add((uint16_t *)da, (const uint16_t *)dout, n);
}

#define CNN_OPS_CPU_COMMON \
    .conv_plan_free = cpu_conv_plan_free, \
    .conv_forward = cpu_conv_forward, \
    .conv_backward = cpu_conv_backward, \
    .bn_plan_free = cpu_bn_plan_free, \
    .bn_forward = cpu_bn_forward, \
    .bn_backward = cpu_bn_backward, \
    .maxpool2d_forward = maxpool2d_forward, \
    .maxpool2d_backward = maxpool2d_backward, \
    .avgpool_global_forward = avgpool_global_forward, \
    .avgpool_global_backward = avgpool_global_backward, \
    .add_scalar = cpu_add_scalar

static const cnn_ops cnn_ops_cpu = {
    .act_bytes = sizeof(float),
    .conv_plan_new = cpu_conv_plan_new,
    .bn_plan_new = cpu_bn_plan_new,
    .to_nchw = dnn_blocked_to_nchw,
    .from_nchw = dnn_nchw_to_blocked,
    .add_relu = add_relu_forward,
    .relu_backward = relu_backward,
    .residual_backward = residual_backward,
    CNN_OPS_CPU_COMMON,
};

static const cnn_ops cnn_ops_cpu_bf16 = {
    .act_bytes = sizeof(uint16_t),
    .conv_plan_new = cpu_conv_plan_new_bf16,
    .bn_plan_new = cpu_bn_plan_new_bf16,
    .to_nchw = cpu16_to_nchw,
    .from_nchw = cpu16_from_nchw,
    .add_relu = cpu16_add_relu,
    .relu_backward = cpu16_relu_backward,
    .residual_backward = cpu16_residual_backward,
    CNN_OPS_CPU_COMMON,
};

#define NN_OPS_CPU_COMMON                           \
    .zero = cpu_zero,                               \
    .copy = cpu_copy,                               \
    .embedding_forward = embedding_forward,         \
    .embedding_backward = embedding_backward,       \
    .layernorm_forward = layernorm_forward,         \
    .layernorm_backward = layernorm_backward,       \
    .attention_forward = attention_forward,         \
    .attention_backward = attention_backward,       \
    .residual_forward = residual_forward,           \
    .gelu_tanh_forward = gelu_tanh_forward,         \
    .gelu_tanh_backward = gelu_tanh_backward,       \
    .gelu_erf_forward = gelu_erf_forward,           \
    .gelu_erf_backward = gelu_erf_backward,         \
    .xent_forward = xent_forward,                   \
    .xent_backward = xent_backward

const nn_ops nn_ops_cpu = {
    .name = "cpu fp32",
    .cnn = &cnn_ops_cpu,
    NN_OPS_CPU_COMMON,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
};

/* bf16 on the CPU: PyTorch CPU autocast's rule — matmul and convolution operands
 * rounded to bf16, fp32 accumulation, through oneDNN's AMX / AVX512-BF16 kernels; a
 * transformer's other kernels in fp32, a CNN's activations bf16 from conv1's output to
 * the head (batch norm, ReLU and residual sums on bf16, as autocast leaves them). (On
 * a GPU only the matmuls take bf16.) */
static const nn_ops nn_ops_cpu_bf16 = {
    .name = "cpu bf16",
    .cnn = &cnn_ops_cpu_bf16,
    NN_OPS_CPU_COMMON,
    .matmul_forward = matmul_forward_bf16,
    .matmul_backward = matmul_backward_bf16,
};

bool device_kind_parse(const char *s, device_kind *out)
{
    if (!strcmp(s, "cpu")) { *out = DEVICE_KIND_CPU; return true; }
    if (!strcmp(s, "cuda")) { *out = DEVICE_KIND_CUDA; return true; }
    return false;
}

int device_gpu_count(void)
{
#ifdef NEBULA_CUDA
    return cuda_device_count();
#else
    return 0;
#endif
}

const char *device_kind_name(device_kind k) { return k == DEVICE_KIND_CUDA ? "cuda" : "cpu"; }

status device_open(device *d, device_kind kind, precision_kind precision, int ordinal)
{
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->precision = precision;
    d->ordinal = -1;
    if (kind == DEVICE_KIND_CPU) {
        char why[400], isa[200];
        if (!isa_env_check(why, sizeof why) || !gemm_env_check(why, sizeof why)) {
            log_error0("%s", why);
            return STATUS_INPUT;
        }
        if (precision == PRECISION_FP16) {
            log_error0("precision fp16 needs --device cuda: the CPU has no fp16 GEMM kernels here (loss-scaled fp16 "
                       "is the GPU's)\nHINT: use --precision bf16 (AVX512-BF16 or AMX CPUs) or fp32");
            return STATUS_INPUT;
        }
        if (precision == PRECISION_BF16 && isa_active() < ISA_AVX512_BF16) {
            /* below avx512_bf16 oneDNN emulates bf16 products, slower than fp32 sgemm */
            log_error0("precision bf16 on the CPU needs AVX512-BF16 or AMX; the kernels run at isa level %s (%s)\n"
                       "HINT: use --precision fp32 on this CPU%s", isa_name(isa_active()),
                       isa_active() < isa_machine() ? "capped by NEBULA_CPU_ISA" : "the machine's best",
                       isa_active() < isa_machine() ? ", or raise NEBULA_CPU_ISA to avx512_bf16 or auto" : "");
            return STATUS_INPUT;
        }
        d->ops = precision == PRECISION_BF16 ? &nn_ops_cpu_bf16 : &nn_ops_cpu;
        isa_describe(isa, sizeof isa);
        snprintf(d->describe, sizeof d->describe, "cpu %s, %s", isa, precision_kind_name(precision));
        gemm_describe(d->gemm, sizeof d->gemm);
        return STATUS_OK;
    }
#ifndef NEBULA_CUDA
    (void)ordinal;
    log_error0("--device cuda: this build has no CUDA kernels (nvcc was not found when it was built)\n"
               "HINT: install the CUDA toolkit and rebuild (make clean && make USE_CUDA=1), or use --device cpu");
    return STATUS_INPUT;
#else
    int n = cuda_device_count();
    if (n == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        log_error0("--device cuda: no CUDA device is visible to this process%s%s%s\n"
                   "HINT: run on a GPU node (sbatch --gpus-per-node=N), check nvidia-smi, or use --device cpu",
                   vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "");
        return STATUS_INPUT;
    }
    d->ordinal = ordinal < 0 ? 0 : ordinal % n;
    cuda_device_info info;
    int e = cuda_device_select(d->ordinal, &info);
    if (e) {
        log_error("--device cuda: cannot use GPU %d: %s", d->ordinal, cuda_error_name(e));
        return STATUS_DEVICE;
    }
    d->ops = device_cuda_ops(precision);
    snprintf(d->describe, sizeof d->describe, "cuda:%d %.100s (sm_%d%d, %d SMs, %.1f GiB), %s", d->ordinal, info.name,
             info.sm_major, info.sm_minor, info.multiprocessors, info.memory_bytes / 1073741824.0,
             precision_kind_name(precision));
    return STATUS_OK;
#endif
}

precision_kind device_auto_precision(device_kind kind, int sm_major)
{
    if (kind != DEVICE_KIND_CUDA) return PRECISION_FP32;
    return sm_major >= 8 ? PRECISION_BF16 : sm_major == 7 ? PRECISION_FP16 : PRECISION_FP32;
}

status device_open_from_config(device *d, const struct config *cfg, int ordinal)
{
    device_kind k = DEVICE_KIND_CPU;
    precision_kind p = PRECISION_FP32;
    /* the schema's enum check already refused anything else */
    const char *why = NULL, *want = config_str(cfg, "device.precision");
    bool automatic = !strcmp(want, "auto");
    CHECK(device_kind_parse(config_str(cfg, "device.kind"), &k) && (automatic || precision_kind_parse(want, &p, &why)),
          "DEVICE_CONFIG_KEYS and the parsers disagree");
    if (automatic) p = device_auto_precision(k, 0);
#ifdef NEBULA_CUDA
    if (automatic && k == DEVICE_KIND_CUDA && cuda_device_count() > 0) {  /* the GPU this rank will open */
        cuda_device_info info;
        if (cuda_device_select((ordinal < 0 ? 0 : ordinal) % cuda_device_count(), &info) == 0)
            p = device_auto_precision(k, info.sm_major);
    }
#endif
    status st = device_open(d, k, p, ordinal);
    const char *tune = config_str(cfg, "device.gemm_tune");
    if (st == STATUS_OK && k == DEVICE_KIND_CPU && tune[0]) {
        st = gemm_tune_load(tune);
        if (st == STATUS_OK) gemm_describe(d->gemm, sizeof d->gemm);  /* now with the table */
        else device_close(d);
    }
    return st;
}

void device_close(device *d)
{
#ifdef NEBULA_CUDA
    if (d->kind == DEVICE_KIND_CUDA) cuda_synchronize();
#endif
    if (d->kind == DEVICE_KIND_CPU && d->precision == PRECISION_BF16) matmul_bf16_release();
    if (d->kind == DEVICE_KIND_CPU) {
        gemm_release();
        gemm_set_table(NULL, 0);  /* the next device reads its own device.gemm_tune */
    }
    memset(d, 0, sizeof *d);
}

void *device_alloc(const device *d, size_t bytes, const char *what)
{
    void *p = NULL;
#ifdef NEBULA_CUDA
    if (device_is_gpu(d)) {
        int e = cuda_malloc(&p, bytes);
        if (e == 0) e = cuda_memset(p, 0, bytes);
        if (e) {
            log_error("cannot allocate %.1f MiB of GPU memory for %s: %s", bytes / 1048576.0, what,
                      cuda_error_name(e));
            cuda_free(p);
            return NULL;
        }
        return p;
    }
#endif
    (void)d;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) {
        log_error("cannot allocate %.1f MiB for %s", bytes / 1048576.0, what);
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

void device_free(const device *d, void *p)
{
#ifdef NEBULA_CUDA
    if (device_is_gpu(d)) { cuda_free(p); return; }
#endif
    (void)d;
    free(p);
}

void device_upload(const device *d, void *dst, const void *src, size_t bytes)
{
#ifdef NEBULA_CUDA
    if (device_is_gpu(d)) {
        CUDA_CHECK(cuda_memcpy_h2d(dst, src, bytes));
        return;
    }
#endif
    (void)d;
    if (dst != src) memcpy(dst, src, bytes);
}

void device_download(const device *d, void *dst, const void *src, size_t bytes)
{
#ifdef NEBULA_CUDA
    if (device_is_gpu(d)) {
        CUDA_CHECK(cuda_memcpy_d2h(dst, src, bytes));
        return;
    }
#endif
    (void)d;
    if (dst != src) memcpy(dst, src, bytes);
}

status device_arena(const device *d, param_layout_fn layout, void *owner, float **memory, size_t *floats,
                    const char *what)
{
    if (!device_is_gpu(d)) return param_arena_alloc(layout, owner, memory, floats, what);
    size_t used = 0;
    layout(owner, NULL, &used);
    *floats = used;
    if (!(*memory = device_alloc(d, used * sizeof(float), what))) return STATUS_NOMEM;
    used = 0;
    layout(owner, *memory, &used);
    return STATUS_OK;
}

status device_buffers_init(const device *d, param_buffers *w, const param_buffers *host, bool train)
{
    size_t bytes = host->total * sizeof(float);
    *w = (param_buffers){ .total = host->total };
    if (!(w->params = device_alloc(d, bytes, "parameters")) || !(w->grads = device_alloc(d, bytes, "gradients")))
        return STATUS_NOMEM;
    if (train && (!(w->m = device_alloc(d, bytes, "optimizer first moment")) ||
                  !(w->v = device_alloc(d, bytes, "optimizer second moment"))))
        return STATUS_NOMEM;
    device_upload(d, w->params, host->params, bytes);
    return STATUS_OK;
}

void device_buffers_free(const device *d, param_buffers *w)
{
    device_free(d, w->params);
    device_free(d, w->grads);
    device_free(d, w->m);
    device_free(d, w->v);
    *w = (param_buffers){ 0 };
}

status device_sync(const device *d)
{
#ifdef NEBULA_CUDA
    if (d->kind == DEVICE_KIND_CUDA) {
        int e = cuda_synchronize();
        char msg[256];
        int k = cuda_error_take(msg, sizeof msg);
        if (e || k) {
            log_error("GPU kernel failed: %s", k ? msg : cuda_error_name(e));
            return STATUS_DEVICE;
        }
    }
#endif
    (void)d;
    return STATUS_OK;
}

status device_optim_init(device_optim *o, const device *d, const param_table *pt)
{
    *o = (device_optim){ .dev = d, .pt = pt };
    loss_scaler_init(&o->scaler);
    if (d->precision != PRECISION_FP16) o->scaler.scale = 1.0f;
#ifdef NEBULA_CUDA
    if (d->kind == DEVICE_KIND_CUDA) {
        if (d->precision == PRECISION_FP16 && !(o->found_inf = device_alloc(d, sizeof(int), "the inf flag")))
            return STATUS_NOMEM;
        return device_cuda_optim_init(&o->plan, pt);
    }
#endif
    return STATUS_OK;
}

float device_optim_loss_scale(const device_optim *o) { return o->dev->precision == PRECISION_FP16 ? o->scaler.scale : 1.0f; }

void device_optim_adamw_step_scaled(device_optim *o, param_buffers *w, const adamw_hparams *hp, double lr,
                                    bool *skipped)
{
    *skipped = false;
#ifdef NEBULA_CUDA
    if (o->dev->precision == PRECISION_FP16) {
        bool found = device_cuda_unscale(w->grads, o->pt->total, loss_scaler_inv_scale(&o->scaler), o->found_inf);
        if ((*skipped = loss_scaler_update(&o->scaler, found))) return;
    }
#endif
    device_optim_adamw_step(o, w, hp, lr, ++o->updates);
}

void device_optim_adamw_step(device_optim *o, param_buffers *w, const adamw_hparams *hp, double lr, long t)
{
#ifdef NEBULA_CUDA
    if (o->dev->kind == DEVICE_KIND_CUDA) { device_cuda_adamw_step(o->plan, w, hp, lr, t); return; }
#endif
    optim_adamw_step(o->pt, w, hp, lr, t);
}

void device_optim_free(device_optim *o)
{
#ifdef NEBULA_CUDA
    if (o->dev && o->dev->kind == DEVICE_KIND_CUDA) {
        device_cuda_optim_free(o->plan);
        device_free(o->dev, o->found_inf);
    }
#endif
    *o = (device_optim){ 0 };
}
