/* resnet — the ResNet family on the CPU (He, Zhang, Ren, Sun, "Deep Residual Learning
 * for Image Recognition", CVPR 2016), laid out exactly as torchvision.models.resnet
 * (v1.5: a Bottleneck strides on its 3x3 conv2, not on conv1): parameters in one flat
 * buffer with torchvision's names and shapes, activations and the oneDNN
 * convolution and batch-norm plans built once for (N, 3, H, W), a forward with
 * fused cross-entropy, and a backward that fills the flat gradient buffer.
 * Activations stay in oneDNN's blocked nChw8c layout from conv1's output to the
 * head (kernels/cpu/dnn.h says why); only the images (NCHW in), the maxpool and
 * the global average pool see NCHW.
 *
 * The one design decision: batch norm's running statistics (running_mean,
 * running_var, num_batches_tracked) are state, not parameters. They live in a second
 * table `bt` over a small buffer of their own with no gradient and no optimizer
 * moments, so the optimizer, buckets and DGC only ever see trainable tensors, while a
 * checkpoint or safetensors file still carries the statistics by their torchvision
 * names (params + buffers = torchvision's state_dict, key for key).
 * num_batches_tracked is stored as a float scalar (torch: int64); it is exact up to
 * 2^24 training steps and converts on load_state_dict.
 *
 * Configurations by name: resnet18, resnet34 (BasicBlock), resnet50, resnet101,
 * resnet152 (Bottleneck). A "-cifar" suffix (e.g. "resnet18-cifar") selects the CIFAR
 * stem and 10 classes; without it the ImageNet stem and 1000 classes. The stem and
 * num_classes are ordinary fields of resnet_config, so a caller may also name the
 * architecture and set them explicitly.
 *   imagenet stem: conv1 7x7/2 pad 3, bn1, ReLU, maxpool 3x3/2 pad 1 (224x224 inputs)
 *   cifar stem:    conv1 3x3/1 pad 1, bn1, ReLU, no maxpool (32x32 inputs); in
 *                  torchvision: model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False),
 *                  model.maxpool = nn.Identity(). */
#ifndef NEBULA_RESNET_H
#define NEBULA_RESNET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu/batchnorm.h"
#include "cpu/conv2d.h"
#include "base/log.h"
#include "device.h"
#include "model_base.h"
#include "param.h"

typedef enum resnet_block_kind {
    RESNET_BLOCK_KIND_BASIC = 0,   /* two 3x3 convs, expansion 1 (resnet18/34) */
    RESNET_BLOCK_KIND_BOTTLENECK,  /* 1x1, 3x3 (strided), 1x1 convs, expansion 4 (resnet50/101/152) */
} resnet_block_kind;

typedef enum resnet_stem {
    RESNET_STEM_IMAGENET = 0,  /* 7x7/2 conv, BN, ReLU, 3x3/2 maxpool: total stride 32 */
    RESNET_STEM_CIFAR,         /* 3x3/1 conv, BN, ReLU, no maxpool: total stride 8 */
} resnet_stem;

typedef struct resnet_config {
    resnet_block_kind block;  /* BasicBlock or Bottleneck */
    int layers[4];            /* blocks in layer1..layer4 */
    resnet_stem stem;         /* input stem */
    int num_classes;          /* rows of fc.weight */
    int width;                /* conv1's output channels, layerK's planes width << (K - 1): 64 in every
                                 torchvision ResNet; smaller for tests and federated clients */
} resnet_config;

/* "resnet18" .. "resnet152", optionally with "-cifar" (see the top of the file).
 * STATUS_INPUT with the list of valid names when `name` is unknown. */
status resnet_config_named(resnet_config *cfg, const char *name);
/* Positive block counts and classes, known block kind and stem. STATUS_INPUT names the field. */
status resnet_config_check(const resnet_config *cfg);
/* "imagenet", "cifar"; parse returns false on anything else. */
const char *resnet_stem_name(resnet_stem s);
bool resnet_stem_parse(const char *s, resnet_stem *out);

/* One convolution (no bias) followed by batch norm and, when `relu`, an in-place ReLU:
 * the unit every ResNet layer is made of (conv1/bn1, layerK.B.convI/bnI,
 * layerK.B.downsample.0/1). Activation tensors here and below (conv, out, pool, the
 * gradient scratch's four big ones) hold cnn_ops.act_bytes per value: float, or bf16
 * under the CPU's bf16 table (device.h). */
typedef struct resnet_unit {
    int C, H, W;           /* input channels, height, width */
    int OC, OH, OW;        /* output channels, height, width */
    int K, stride, pad;    /* square kernel, stride, zero padding */
    bool relu;             /* ReLU after the BN (in place on out) */
    size_t w;              /* offset of the conv weight (OC, C, K, K) in the flat buffers */
    size_t bn_w, bn_b;     /* offsets of the BN weight and bias (OC) */
    size_t rmean, rvar;    /* offsets of running_mean, running_var (OC) in the statistics buffer */
    size_t nbt;            /* offset of num_batches_tracked (scalar) in the statistics buffer */
    float *conv;           /* (N, OC, OH, OW) convolution output = BN input, nChw8c */
    float *out;            /* (N, OC, OH, OW) BN output, after the ReLU when relu, nChw8c */
    void *cp;              /* the convolution plan (cnn_ops; CPU: input NCHW for conv1, nChw8c elsewhere) */
    void *bp;              /* the BN plan, with the ReLU fused when relu; keeps the batch statistics */
} resnet_unit;

typedef struct resnet_block {
    resnet_unit unit[3];   /* conv1/bn1 .. conv2/bn2 (Basic) or .. conv3/bn3 (Bottleneck) */
    int nunits;            /* 2 or 3 */
    bool has_down;         /* a downsample branch (stride != 1 or channels change) */
    resnet_unit down;      /* downsample.0 (1x1 strided conv) and downsample.1 (BN), no ReLU */
    const float *inp;      /* (N, C, H, W) block input: the stem's output or the previous block's (nChw8c) */
    float *out;            /* (N, OC, OH, OW) relu(last unit + identity); the last unit's out (nChw8c) */
} resnet_block;

typedef struct resnet_acts {
    float *images;         /* (N, 3, H, W) copy of the last forward's input (conv1's backward reads it) */
    resnet_unit stem;      /* conv1, bn1, ReLU */
    float *pool;           /* (N, 64, PH, PW) maxpool output, nChw8c (imagenet stem); NULL for cifar */
    int32_t *pool_argmax;  /* (N, 64, PH, PW) winning index per window; NULL for cifar */
    int PH, PW;            /* maxpool output size */
    resnet_block *blocks;  /* [nblocks] layer1.0, layer1.1, ..., layer4.(n-1) */
    int nblocks;           /* sum of cfg.layers */
    int feat_C, feat_HW;   /* head input: 512*expansion channels on a feat_HW-pixel map */
    float *nchw;           /* NCHW scratch for the kernels that want it: the head's input, and the
                              stem output and maxpool output around the maxpool (imagenet) */
    float *pooled;         /* (N, feat_C) global average pool */
    float *logits;         /* (N, num_classes) */
    float *losses;         /* (N) per-image cross-entropy */
    float *xent_lse;       /* (N) saved log-sum-exp */
} resnet_acts;

typedef struct resnet_grad_scratch {
    float *dblock;         /* (N, maxCHW: largest C*H*W of any activation) d(block output), then d(block input) */
    float *dsum;           /* (N, maxCHW) gradient of the pre-ReLU residual sum */
    float *dmain;          /* (N, maxCHW) gradient flowing down a block's main branch */
    float *dbn;            /* (N, maxCHW) gradient of a convolution output through its BN (and ReLU) */
    float *dpooled;        /* (N, feat_C) */
    float *dlogits;        /* (N, num_classes) */
    float *dlosses;        /* (N) */
} resnet_grad_scratch;

typedef struct resnet {
    MODEL_BASE_GROUP;      /* pt, pb, dev, ops (ops->cnn: convolutions, BN, pooling), w, hook, loss_scale,
                              mean_loss (model_base.h) */
    resnet_config cfg;     /* architecture */
    param_table bt;        /* BN running statistics: torchvision buffer names, no grads */
    float *stats;          /* (bt.total) their values, same layout rules as params (host; on a GPU the
                              initial values: training moves dstats) */
    float *dstats;         /* (bt.total) the statistics on the GPU; NULL on the CPU */
    float *stats_saved;    /* (bt.total) host scratch: the trainer's copy of stats before a step, put
                              back when the step is skipped (model_state_saved) */
    int32_t *dev_labels;   /* (N) the labels on the GPU; NULL on the CPU */
    float *stage;          /* (2N) host staging of losses and dlosses (GPU only) */
    int N, H, W;           /* batch shape the activations are sized for */
    float *act_memory;     /* one allocation behind acts */
    size_t act_floats;     /* its size */
    resnet_acts acts;      /* views into act_memory */
    size_t plan_bytes;     /* memory of the convolution and BN plans (blocked weights, masks) */
    float *grad_memory;    /* one allocation behind gs */
    size_t grad_floats;    /* its size */
    resnet_grad_scratch gs; /* views into grad_memory */
    size_t fc_w, fc_b;     /* offsets of fc.weight (num_classes, feat_C) and fc.bias */
    int32_t *labels;       /* (N) copy of the last forward's labels */
    bool can_backward;     /* the last forward was in training mode with labels */
} resnet;

/* Builds both tables, allocates params (+ grads and moments when `train`), the
 * statistics, the activations and the plans for (N, 3, H, W); initialises like
 * torchvision: convs kaiming_normal_(mode='fan_out', nonlinearity='relu'), BN weight 1
 * bias 0, running mean 0 var 1, fc as nn.Linear (U(+-1/sqrt(fan_in)) for weight and
 * bias), one counter-RNG stream per tensor. Conv and fc weights carry the decay flag;
 * BN parameters and fc.bias do not. STATUS_INPUT when N < 1 or the image is smaller
 * than the network's total stride (32 imagenet, 8 cifar), naming the size. */
status resnet_init(resnet *m, const resnet_config *cfg, int N, int H, int W, uint64_t seed, bool train);
/* The same on a device (NULL: the CPU), as gpt2_init_on. */
status resnet_init_on(resnet *m, const resnet_config *cfg, int N, int H, int W, uint64_t seed, bool train,
                      const device *dev);
void resnet_free(resnet *m);

/* images (N, 3, H, W); labels (N) in [0, num_classes) or -1 (ignored), or NULL (no
 * loss: mean_loss = -1). training: BN normalises with batch statistics and updates the
 * running ones (momentum 0.1, unbiased variance, num_batches_tracked += 1), as
 * model.train(); otherwise it uses the running statistics and changes nothing, as
 * model.eval(). Logits land in m->acts.logits. STATUS_INPUT when a label is out of
 * range (names the image) or a training batch leaves a BN with fewer than 2 values
 * per channel (N * final map < 2). */
status resnet_forward(resnet *m, const float *images, const int32_t *labels, bool training);
/* Gradient of the mean loss of the last forward (training mode, with labels), ADDED
 * into the grad buffer. The images get no gradient. */
void resnet_backward(resnet *m);

/* Model FLOPs of one training step per image: 3 x the forward's convolution and fc
 * multiply-adds x 2 (BN, ReLU, pooling not counted). */
double resnet_flops_per_image(const resnet *m);

#endif
