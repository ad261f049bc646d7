/* mlp — a multilayer perceptron image classifier on the CPU: the (N, 3, H, W) images
 * flattened to D = 3 H W features, `layers` hidden Linear + ReLU layers of width
 * `hidden`, a Linear layer to the class logits, softmax cross-entropy. Parameters sit
 * in one flat buffer under the names PyTorch gives this module:
 *
 *     class MLP(nn.Module):
 *         def __init__(self, D, hidden, layers, classes):
 *             super().__init__()
 *             mods = []
 *             for i in range(layers):
 *                 mods += [nn.Linear(D if i == 0 else hidden, hidden), nn.ReLU()]
 *             mods.append(nn.Linear(hidden if layers else D, classes))
 *             self.layers = nn.Sequential(*mods)
 *         def forward(self, x):
 *             return self.layers(x.flatten(1))
 *
 * so linear layer i is "layers.{2i}.weight" (out, in) and "layers.{2i}.bias" (out), and
 * a checkpoint converted to safetensors loads into it with strict=True.
 *
 * The one design decision: the family has no normalisation layer and no state. It is
 * the model for federated learning with differential privacy, where batch norm is
 * unusable (its running statistics are per-client data that DP noise does not cover,
 * and per-sample clipping cannot separate samples that one batch statistic couples;
 * Opacus refuses BatchNorm for the same reason). So every sample's gradient is a
 * function of that sample alone, micro-batches of any size are the same model
 * (mlp_set_batch), and model_state_table is NULL. */
#ifndef NEBULA_MLP_H
#define NEBULA_MLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "device.h"
#include "model_base.h"
#include "param.h"

#define MLP_MAX_LAYERS 64   /* hidden layers at most (model.mlp_layers) */
#define MLP_MAX_HIDDEN 65536 /* widest hidden layer (model.mlp_hidden) */

typedef struct mlp_config {
    int hidden;            /* width of every hidden layer */
    int layers;            /* hidden layers; 0: one Linear from the pixels to the logits (logistic regression) */
    int num_classes;       /* rows of the last weight */
} mlp_config;

/* "mlp": hidden 64, one hidden layer, 10 classes (the UCI digits at 8x8). STATUS_INPUT
 * naming the valid names when `name` is unknown. */
status mlp_config_named(mlp_config *cfg, const char *name);
/* 1 <= hidden <= MLP_MAX_HIDDEN, 0 <= layers <= MLP_MAX_LAYERS, num_classes >= 1.
 * STATUS_INPUT; the message names the field by its [model] key. */
status mlp_config_check(const mlp_config *cfg);

typedef struct mlp_layer {
    int in, out;           /* features in and out */
    size_t w, b;           /* offsets of layers.{2i}.weight (out, in) and layers.{2i}.bias (out) */
    float *out_act;        /* (N, out) output, after the in-place ReLU for a hidden layer; the logits for the last */
} mlp_layer;

typedef struct mlp_grad_scratch {
    float *dact;           /* (N, widest) gradient of a layer's output (after its ReLU) */
    float *dpre;           /* (N, widest) gradient of a hidden layer's pre-activation */
    float *dlogits;        /* (N, num_classes) */
    float *dlosses;        /* (N) */
} mlp_grad_scratch;

typedef struct mlp {
    MODEL_BASE_GROUP;      /* pt, pb, dev, ops (matmul, xent, zero), w, hook, timer, loss_scale, mean_loss */
    mlp_config cfg;        /* architecture */
    int N;                 /* samples the buffers are sized for */
    int B;                 /* samples of the next forward, 1 <= B <= N (mlp_set_batch) */
    int D;                 /* input features 3 H W */
    int nlayers;           /* linear layers: cfg.layers + 1 */
    mlp_layer *layer;      /* [nlayers] in forward order; layer i has param layer index i */
    float *act_memory;     /* one allocation behind the activations */
    size_t act_floats;     /* its size */
    float *losses;         /* (N) per-image cross-entropy */
    float *xent_lse;       /* (N) saved log-sum-exp */
    float *grad_memory;    /* one allocation behind gs */
    size_t grad_floats;    /* its size */
    mlp_grad_scratch gs;   /* views into grad_memory */
    int32_t *labels;       /* (N) copy of the last forward's labels */
    bool can_backward;     /* the last forward was in training mode with labels */
} mlp;

/* Builds the table (layer i: weight, bias), allocates params (+ grads and moments when
 * `train`), activations and scratch for (N, 3, H, W) images, and initialises as
 * torch.nn.Linear.reset_parameters does: weight kaiming_uniform_(a = sqrt(5)), which is
 * U(-1/sqrt(in), 1/sqrt(in)), and bias U(-1/sqrt(in), 1/sqrt(in)), one counter-RNG
 * stream (seed, RNG_PURPOSE_INIT, tensor index) per tensor. Weights carry the decay
 * flag, biases do not. dev NULL or the CPU (fp32, or bf16 GEMMs through its table); a
 * GPU is STATUS_INPUT. STATUS_INPUT also when N < 1, H or W < 1, or the config fails
 * mlp_config_check. */
status mlp_init_on(mlp *m, const mlp_config *cfg, int N, int H, int W, uint64_t seed, bool train,
                   const device *dev);
void mlp_free(mlp *m);

/* The next forwards take B samples, 1 <= B <= N: the same values as a model built for B. */
void mlp_set_batch(mlp *m, int B);

/* images (B, 3, H, W); labels (B) in [0, num_classes) or -1 (ignored), or NULL (no
 * loss: mean_loss = -1). Logits land in the last layer's out_act. `training` only
 * permits mlp_backward (the model computes the same either way). STATUS_INPUT when a
 * label is out of range, naming the image. */
status mlp_forward(mlp *m, const float *images, const int32_t *labels, bool training);
/* Gradient of loss_scale x the mean loss of the last forward (training, with labels),
 * ADDED into the grad buffer; `images` are the forward's, unchanged. Reports each
 * linear layer to the layer hook as its gradients become final (last layer first). */
void mlp_backward(mlp *m, const float *images);

/* The logits of the last forward, (B, num_classes). */
const float *mlp_logits(const mlp *m);

/* Model FLOPs of one training step per image: 3 x the forward's multiply-adds x 2. */
double mlp_flops_per_image(const mlp *m);

#endif
