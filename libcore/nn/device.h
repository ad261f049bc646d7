/* device — where a model's numbers live and which kernels run on them: the CPU
 * (kernels/cpu, host memory) or one CUDA GPU (kernels/cuda, device memory), with
 * `--device cpu|cuda` and `--precision fp32|bf16` choosing.
 *
 * The one design decision: the device is a table, not a branch. `nn_ops` lists every
 * kernel a model's forward and backward call, with the CPU kernels' signatures; the
 * CUDA kernels have exactly those signatures on device pointers (kernels/cuda/device.h),
 * so a model's flat list of layer calls is written once and runs on either device.
 * bf16 and fp16 are further tables whose matmuls round their operands to 16 bits for
 * the tensor cores (AMX or AVX512-BF16 on the CPU, bf16 only) and accumulate in fp32
 * (PyTorch autocast's rule); everything else
 * stays fp32, and the master weights and optimizer state are always fp32. fp16 adds
 * dynamic loss scaling (device_optim_adamw_step_scaled).
 *
 * Memory calls go through the device too, so a model allocates its buffers once at
 * init on the device it was built for; copies are explicit (the host keeps a mirror
 * of the parameters for initialisation and checkpoints). */
#ifndef NEBULA_DEVICE_H
#define NEBULA_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/conv2d.h"
#include "cpu/matmul.h"
#include "base/log.h"
#include "optim.h"
#include "param.h"
#include "precision.h"

typedef enum device_kind {
    DEVICE_KIND_CPU = 0,
    DEVICE_KIND_CUDA,
} device_kind;

/* The CNN kernels a ResNet calls, with the contracts of kernels/cpu (conv2d.h,
 * batchnorm.h, pool.h, relu.h, residual.h). Convolution and batch-norm plans are
 * opaque: oneDNN on the CPU, whose activations between convolutions are blocked
 * nChw8c (to_nchw / from_nchw convert at the edges), cuDNN and Nebula's kernels on a
 * GPU, where activations are NCHW throughout (the conversions are copies). */
typedef struct cnn_ops {
    /* bytes per activation value: 4, or 2 where activations and their gradients are
     * bf16 (CPU --precision bf16: the float pointers below then address bf16 arrays,
     * act16.h; the NCHW side of to_nchw/from_nchw and the pooling kernels stay fp32) */
    size_t act_bytes;
    /* input layout NCHW when nchw_input (conv1 reads the images), else the activations'
     * layout; no bias; dinp: the plan computes the input gradient. *bytes: its memory. */
    void *(*conv_plan_new)(const conv2d_shape *s, bool nchw_input, bool dinp, size_t *bytes);
    void (*conv_plan_free)(void *plan);
    void (*conv_forward)(void *plan, float *out, const float *inp, const float *weight, const float *bias);
    void (*conv_backward)(void *plan, float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp);
    void *(*bn_plan_new)(int N, int C, int H, int W, float eps, bool relu, size_t *bytes);
    void (*bn_plan_free)(void *plan);
    void (*bn_forward)(void *plan, float *out, const float *inp, const float *weight, const float *bias,
                       float *running_mean, float *running_var, float momentum, bool training);
    void (*bn_backward)(void *plan, float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *bias);
    void (*to_nchw)(float *dst, const float *src, int N, int C, int HW);   /* from the activations' layout */
    void (*from_nchw)(float *dst, const float *src, int N, int C, int HW); /* to the activations' layout */
    void (*maxpool2d_forward)(float *out, int32_t *argmax, const float *inp, int N, int C, int H, int W, int K,
                              int stride, int pad, int OH, int OW);
    void (*maxpool2d_backward)(float *dinp, const float *dout, const int32_t *argmax, int N, int C, int H, int W,
                               int K, int stride, int pad, int OH, int OW);
    void (*avgpool_global_forward)(float *out, const float *inp, int N, int C, int HW);
    void (*avgpool_global_backward)(float *dinp, const float *dout, int N, int C, int HW);
    void (*add_relu)(float *out, const float *identity, size_t n); /* out = relu(out + identity) */
    void (*relu_backward)(float *dinp, const float *out_or_inp, const float *dout, size_t n);
    void (*residual_backward)(float *da, float *db, const float *dout, size_t N);
    void (*add_scalar)(float *x, float v); /* *x += v (num_batches_tracked) */
} cnn_ops;

/* The kernels a transformer's forward and backward call (GPT-2, BERT); see the
 * kernels/cpu headers for each contract. `zero` clears n floats. `cnn` is the
 * device's CNN table. */
typedef struct nn_ops {
    const cnn_ops *cnn;
    const char *name;  /* "cpu fp32", "cpu bf16", "cuda fp32", "cuda bf16" */
    void (*zero)(float *x, size_t n);
    void (*copy)(float *dst, const float *src, size_t n); /* within the device */
    void (*embedding_forward)(float *out, const int32_t *ids, const float *table, int N, int C, int accumulate);
    void (*embedding_backward)(float *dtable, const float *dout, const int32_t *ids, int N, int C);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int BT, int C, float eps);
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, const float *mean, const float *rstd, int BT, int C);
    void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias, int BT, int C,
                           int OC, matmul_layout layout);
    void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int BT, int C, int OC, matmul_layout layout);
    void (*attention_forward)(float *out, float *lse, const float *q, const float *k, const float *v, int ld,
                              const float *key_mask, int B, int T, int C, int NH, int causal);
    void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                               const float *v, int ld, const float *out, const float *lse, const float *key_mask,
                               int B, int T, int C, int NH, int causal);
    void (*residual_forward)(float *out, const float *a, const float *b, size_t N);
    void (*gelu_tanh_forward)(float *out, const float *inp, size_t N);
    void (*gelu_tanh_backward)(float *dinp, const float *inp, const float *dout, size_t N);
    void (*gelu_erf_forward)(float *out, const float *inp, size_t N);
    void (*gelu_erf_backward)(float *dinp, const float *inp, const float *dout, size_t N);
    void (*xent_forward)(float *losses, float *lse, const float *logits, const int32_t *targets, int BT, int V,
                         int Vp);
    void (*xent_backward)(float *dlogits, const float *logits, const float *lse, const int32_t *targets,
                          const float *dlosses, int BT, int V, int Vp);
} nn_ops;

extern const nn_ops nn_ops_cpu;

typedef struct device {
    device_kind kind;           /* cpu or cuda */
    precision_kind precision; /* fp32, bf16, fp16 (cuda only) */
    int ordinal;                /* the GPU this rank uses (runtime's host-local rank modulo the GPUs); -1 on cpu */
    const nn_ops *ops;          /* the kernels for kind and precision */
    char describe[256];         /* "cpu", "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB), bf16" */
    char gemm[256];             /* CPU: the fp32 GEMM path and why (gemm_describe); "" on a GPU */
} device;

/* [device] keys (--device, --precision on the command line). */
#define DEVICE_CONFIG_KEYS                                                                          \
    { "device", "kind", CONFIG_TYPE_ENUM, "cpu", .choices = "cpu|cuda",                             \
      .help = "where the model runs: cpu, or cuda (one GPU per rank, host-local rank modulo the GPUs)" }, \
    { "device", "precision", CONFIG_TYPE_ENUM, "fp32", .choices = PRECISION_CHOICES "|auto",       \
      .help = "bf16 or fp16 GEMM operands, fp32 accumulation and master weights; fp16 (cuda only) with loss " \
              "scaling; bf16 on the CPU needs AVX512-BF16 or AMX; auto: per rank, bf16 on a GPU with bf16 " \
              "tensor cores (sm_80 on), fp16 on sm_70-75, fp32 on older GPUs and on CPUs" },                \
    { "device", "gemm_tune", CONFIG_TYPE_STRING, "",                                                \
      .help = "CPU: a table of fp32 GEMM paths per shape (nebula-bench model --save-tune) made on this CPU; " \
              "empty: the rule of kernels/cpu/gemm.h" }

struct config;
/* device_open with the [device] keys of cfg; precision auto is resolved per rank on the
 * device it opens (device_auto_precision). */
status device_open_from_config(device *d, const struct config *cfg, int ordinal);
/* What device.precision = auto picks for a device: a GPU's tensor cores take bf16 from
 * compute capability 8.0 (Ampere) on and fp16 on 7.x (Volta, Turing: no bf16), older GPUs
 * and CPUs fp32 (a CPU rank beside GPUs keeps the reference precision, as PyTorch's
 * autocast leaves CPU ops fp32 by default). */
precision_kind device_auto_precision(device_kind kind, int sm_major);

/* CUDA devices visible to this process (runtime_options.gpus); 0 without CUDA, driver or GPU. */
int device_gpu_count(void);

bool device_kind_parse(const char *s, device_kind *out);
const char *device_kind_name(device_kind k);

/* Opens the device: always succeeds for cpu fp32. For cuda: STATUS_INPUT with a hint
 * when this build has no CUDA (nvcc was absent at build time) or when no GPU is
 * visible (CUDA_VISIBLE_DEVICES, driver); selects GPU `ordinal` otherwise. On the CPU,
 * fp16 is refused, and bf16 below isa level avx512_bf16 (STATUS_INPUT, with the reason). */
status device_open(device *d, device_kind kind, precision_kind precision, int ordinal);
void device_close(device *d);

/* Buffers of the device: allocated zeroed; NULL after a logged STATUS_NOMEM-worthy failure.
 * These four take d = NULL as the CPU (a model built without a device). */
void *device_alloc(const device *d, size_t bytes, const char *what);
void device_free(const device *d, void *p);
/* Copies; on the cpu they are memcpy. */
void device_upload(const device *d, void *dst, const void *src, size_t bytes);
void device_download(const device *d, void *dst, const void *src, size_t bytes);
/* True for a GPU; NULL (a model built without a device) is the CPU. */
static inline bool device_is_gpu(const device *d) { return d && d->kind != DEVICE_KIND_CPU; }
/* param_arena_alloc on the device: sizes with a NULL base, allocates, carves; freed
 * with device_free. */
status device_arena(const device *d, param_layout_fn layout, void *owner, float **memory, size_t *floats,
                    const char *what);
/* A model's buffers on a GPU: w gets params (uploaded from host->params), zeroed grads
 * and, when `train`, zeroed moments, all in the table's layout. */
status device_buffers_init(const device *d, param_buffers *w, const param_buffers *host, bool train);
void device_buffers_free(const device *d, param_buffers *w);

/* Waits for the device's queued work; STATUS_DEVICE with the kernel's error message if any failed. */
status device_sync(const device *d);

/* The AdamW step on the device's buffers (w: params, grads, m, v of the table's
 * layout). On the CPU it is optim_adamw_step; on a GPU the kernels/cuda step, which
 * is bit-identical to it per element. init uploads the per-tensor decay plan once. */
typedef struct device_optim {
    const device *dev;       /* where the buffers live */
    const param_table *pt;   /* their layout */
    void *plan;              /* cuda_optim_plan on a GPU, NULL on the CPU */
    int *found_inf;          /* fp16: one device int, the unscale kernel's flag */
    loss_scaler scaler;      /* fp16: the dynamic loss scale (scale 1 and unused otherwise) */
    long updates;            /* steps applied (AdamW's t counts these, not skipped ones) */
} device_optim;

status device_optim_init(device_optim *o, const device *d, const param_table *pt);
void device_optim_adamw_step(device_optim *o, param_buffers *w, const adamw_hparams *hp, double lr, long t);
/* The loss scale the backward must multiply the loss by: scaler.scale with fp16, 1 otherwise. */
float device_optim_loss_scale(const device_optim *o);
/* One mixed-precision step (GradScaler's order): with fp16, unscale the gradients by
 * 1/scale and check them for inf/NaN, update the scale, and skip the step (*skipped,
 * parameters untouched) when any was not finite; otherwise, and always without fp16,
 * AdamW with t = the number of applied steps. */
void device_optim_adamw_step_scaled(device_optim *o, param_buffers *w, const adamw_hparams *hp, double lr,
                                    bool *skipped);
void device_optim_free(device_optim *o);

#endif
