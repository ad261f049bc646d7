/* model — one interface over the four model families (GPT-2, BERT, ResNet, MLP) for the
 * executables: the [model] config section (a preset chosen by name, optionally with
 * its architecture fields overridden), checks of the architecture and of the batch
 * shape whose errors name the config key, and init / forward / backward / free of
 * whichever family the name selects.
 *
 * The one design decision: resolving and checking a configuration (model_spec_*) is
 * separate from building the model (model_init) and allocates nothing, so any
 * configuration — gpt2-xl included — can be validated on a laptop before a job is
 * submitted (nebula-bench model --dry-run), and bad input never gets as far as an
 * allocation. configs/models/NAME.ini spells out every preset.
 *
 * Keys (0, or "preset" for model.stem, means "the preset's value"):
 *   model.name         one of MODEL_NAMES
 *   model.n_layer      transformer blocks                          GPT-2, BERT
 *   model.n_head       attention heads; must divide n_embd         GPT-2, BERT
 *   model.n_embd       width C (BERT's FFN is 4 C, as in every named BERT)
 *   model.max_seq_len  positions: the longest sequence T (BERT: at most 512)
 *   model.vocab_size   real tokens V (GPT-2 pads the embedding rows to a multiple
 *                      of 128, as its presets do; BERT needs V >= 104 for its
 *                      special ids [PAD] 0 .. [MASK] 103)
 *   model.stem         imagenet | cifar                            ResNet
 *   model.num_classes  rows of fc.weight (the MLP: of its last weight)  ResNet, MLP
 *   model.image_size   input height = width (0: 224 for the imagenet stem, 32 for cifar,
 *                      8 for the MLP)                              ResNet, MLP
 *   model.width        ResNet: conv1's channels, a multiple of 16 (torchvision's 64); layerK has width << (K-1)
 *   model.mlp_hidden   width of the MLP's hidden layers            MLP
 *   model.mlp_layers   the MLP's hidden layers, 0 allowed (logistic regression); -1, not
 *                      0, means "the preset's value" here           MLP
 * A key set for a family it does not apply to is an error, not silently ignored. */
#ifndef NEBULA_MODEL_H
#define NEBULA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bert.h"
#include "base/config.h"
#include "gpt2.h"
#include "base/log.h"
#include "mlp.h"
#include "param.h"
#include "resnet.h"

/* Every preset: the GPT-2 sizes of Hugging Face (gpt2-tiny is a byte-level model for
 * tests), Google's BERT checkpoints, torchvision's ResNets with the ImageNet stem and
 * 1000 classes or ("-cifar") the CIFAR stem and 10 classes, and the MLP classifier of
 * 8x8 images (mlp.h). */
#define MODEL_NAMES                                                                                  \
    "gpt2-tiny|gpt2|gpt2-medium|gpt2-large|gpt2-xl|bert-tiny|bert-base|bert-large|"                 \
    "resnet18|resnet34|resnet50|resnet101|resnet152|"                                               \
    "resnet18-cifar|resnet34-cifar|resnet50-cifar|resnet101-cifar|resnet152-cifar|mlp"

/* The [model] section of every executable that builds a model. */
#define MODEL_CONFIG_KEYS                                                                            \
    { "model", "name", CONFIG_TYPE_ENUM, "gpt2", .choices = MODEL_NAMES,                            \
      .help = "model preset (configs/models/NAME.ini spells out each one)" },                       \
    { "model", "n_layer", CONFIG_TYPE_INT, "0", .min = 0, .max = 1024,                              \
      .help = "GPT-2/BERT: transformer blocks (0: the preset's)" },                                 \
    { "model", "n_head", CONFIG_TYPE_INT, "0", .min = 0, .max = 4096,                               \
      .help = "GPT-2/BERT: attention heads, must divide n_embd (0: the preset's)" },                \
    { "model", "n_embd", CONFIG_TYPE_INT, "0", .min = 0, .max = 65536,                              \
      .help = "GPT-2/BERT: width C (0: the preset's)" },                                            \
    { "model", "max_seq_len", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 20,                       \
      .help = "GPT-2/BERT: context, the longest sequence (BERT: at most 512; 0: the preset's)" },   \
    { "model", "vocab_size", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 24,                        \
      .help = "GPT-2/BERT: vocabulary size V (BERT: at least 104; 0: the preset's)" },             \
    { "model", "stem", CONFIG_TYPE_ENUM, "preset", .choices = "preset|imagenet|cifar",             \
      .help = "ResNet: input stem (preset: the one the name implies)" },                            \
    { "model", "num_classes", CONFIG_TYPE_INT, "0", .min = 0, .max = 1 << 20,                       \
      .help = "ResNet, MLP: output classes (0: the preset's)" },                                    \
    { "model", "image_size", CONFIG_TYPE_INT, "0", .min = 0, .max = 16384,                          \
      .help = "ResNet, MLP: input height = width (0: 224 for the imagenet stem, 32 for cifar, 8 for the mlp)" }, \
    { "model", "width", CONFIG_TYPE_INT, "0", .min = 0, .max = 4096,                                \
      .help = "ResNet: conv1's channels, a multiple of 16; layerK's width << (K-1) (0: the preset's 64)" }, \
    { "model", "mlp_hidden", CONFIG_TYPE_INT, "0", .min = 0, .max = MLP_MAX_HIDDEN,                 \
      .help = "MLP: width of the hidden layers (0: the preset's 64)" },                             \
    { "model", "mlp_layers", CONFIG_TYPE_INT, "-1", .min = -1, .max = MLP_MAX_LAYERS,               \
      .help = "MLP: hidden layers, 0 allowed (logistic regression) (-1: the preset's 1)" }

typedef enum model_family {
    MODEL_FAMILY_GPT2 = 0,  /* causal LM, tok/s */
    MODEL_FAMILY_BERT,      /* masked LM, seq/s */
    MODEL_FAMILY_RESNET,    /* image classifier with batch norm, img/s */
    MODEL_FAMILY_MLP,       /* image classifier without normalisation or state (mlp.h), img/s */
} model_family;

/* A resolved architecture: the preset with the overrides applied. Nothing allocated. */
typedef struct model_spec {
    char name[32];          /* model.name, the preset */
    model_family family;    /* selects which config below is live */
    gpt2_config gpt2;       /* GPT-2 sizes (family GPT2) */
    bert_config bert;       /* BERT sizes (family BERT) */
    resnet_config resnet;   /* ResNet architecture (family RESNET) */
    mlp_config mlp;         /* MLP sizes (family MLP) */
    int image_size;         /* ResNet and MLP input H = W */
} model_spec;

/* Resolves the [model] keys of cfg (whose schema must hold MODEL_CONFIG_KEYS) and checks
 * the architecture on its own: heads divide the width, BERT's 512 positions and special
 * ids, the image covers the ResNet's total stride, no key set for another family.
 * STATUS_INPUT with a message that names the key, its value and the rule. */
status model_spec_from_config(model_spec *s, const config *cfg);

/* Whether the family's batch is (B, 3, H, W) images with (B) labels and T = 0 (ResNet,
 * MLP), rather than (B, T) token ids. */
bool model_spec_images(const model_spec *s);
/* The family's name for messages: "GPT-2", "BERT", "ResNet", "multilayer perceptron". */
const char *model_family_name(const model_spec *s);

/* The [model] section of a stored run config (a checkpoint's `config` attribute: every
 * section of nebula-train's schema, INI text) into *mc, initialised here with
 * MODEL_CONFIG_KEYS alone; the other sections are skipped. STATUS_INPUT, logged,
 * when the text is not INI or a [model] key does not fit the schema. */
status model_config_from_ini(config *mc, const char *ini);

/* Checks a training batch shape against the architecture: B >= 1; for GPT-2 and BERT
 * 1 <= T <= max_seq_len; for ResNet (T unused) enough values per channel for the last
 * batch norm (B * final map >= 2); nothing more for the MLP. `batch_key` and `seq_key` are the caller's config
 * keys for B and T (e.g. "bench.batch", "bench.seq"), named in the messages. */
status model_spec_check_batch(const model_spec *s, int B, int T, const char *batch_key, const char *seq_key);

/* One line: the name, family and every architecture field, e.g.
 * "gpt2 (GPT-2): n_layer 12, n_head 12, n_embd 768, max_seq_len 1024, vocab_size 50257 (padded to 50304)". */
void model_spec_print(const model_spec *s, FILE *f);

/* One batch in the layout of the model's family. */
typedef struct model_batch {
    int32_t *ids;           /* (B, T) token ids: GPT-2, BERT; NULL for ResNet and the MLP */
    int32_t *targets;       /* (B, T) next-token (GPT-2) or MLM (BERT) targets, -1 ignored; (B) labels: ResNet, MLP */
    int32_t *mask;          /* (B, T) BERT attention mask, 1 keep / 0 pad; NULL otherwise */
    float *images;          /* (B, 3, H, W) ResNet, MLP; NULL otherwise */
} model_batch;

struct model_family_ops;     /* model_impl.h: what each family implements */

/* A model of any family, sized for one batch shape. Only the family object that
 * spec.family selects is live; `base` points at its shared part (model_base.h: the
 * table, buffers, device, layer hook, loss scale and loss), so a model is never
 * copied by value. */
typedef struct model {
    model_spec spec;        /* what was built */
    int B, T;               /* batch shape (images: T = 0; H = W = spec.image_size) */
    const struct model_family_ops *ops; /* the family's functions (set by model_init_on) */
    model_base *base;       /* &gpt2.base, &bert.base, &resnet.base or &mlp.base: whichever is live */
    gpt2 gpt2;              /* the family object, by spec.family */
    bert bert;
    resnet resnet;
    mlp mlp;
    const model_batch *last; /* batch of the last forward, read by model_backward */
    nn_tp tp;               /* the tensor-parallel group it was built for (size 1: none); the family keeps its own copy */
    nn_stage stage;         /* the pipeline stage it was built as (end 0: the whole model) */
} model;

/* Builds the family's model for (B, T) — images: (B, 3, image_size, image_size) — with
 * its initial weights from `seed`; grads and optimizer moments when `train`. Call
 * model_spec_check_batch first for messages that name the caller's keys. */
status model_init(model *m, const model_spec *s, int B, int T, uint64_t seed, bool train);
/* The same on a device (device.h; NULL: the CPU): every family but the MLP runs on a GPU
 * (the MLP on a GPU is STATUS_INPUT). */
status model_init_on(model *m, const model_spec *s, int B, int T, uint64_t seed, bool train, const device *dev);
/* The same as one tensor-parallel shard and pipeline stage (tp.h; NULL or size 1, NULL:
 * the whole model). The transformers only (gpt2_init_parallel, bert_init_parallel);
 * ResNet or the MLP with tp > 1 or a stage is STATUS_INPUT. The weights are the whole model's from
 * the same seed, sliced: at every grid the model is the same function. */
status model_init_parallel(model *m, const model_spec *s, int B, int T, uint64_t seed, bool train, const device *dev,
                           const nn_tp *tp, const nn_stage *stage);
/* A pipeline stage (model_init_parallel's `stage`; GPT-2 and BERT): selects activation
 * set k for the next forward or backward, whose batch b was (model_backward reads it). */
void model_set_slot(model *m, int k, const model_batch *b);
/* (B, T, C) of the current set: the stage's input, its output, and the gradient at its
 * boundary (written with the output's gradient before model_backward, holding the
 * input's after it). gpt2.h's gpt2_stage_in, _out, _grad; bert.h's. */
float *model_stage_in(model *m);
float *model_stage_out(model *m);
float *model_stage_grad(model *m);
/* Floats of one stage boundary: B x T x C. */
size_t model_stage_floats(const model *m);
/* Whether a process grid of tp x pp fits the architecture: tp divides the heads (and
 * the padded vocabulary), pp is at most the blocks; the family supports it (tp and pp:
 * GPT-2 and BERT).
 * STATUS_INPUT naming parallel.tp / parallel.pp, the model's value and the rule. */
status model_spec_check_grid(const model_spec *s, int tp, int pp);
/* The first failure of the tensor-parallel reductions since the last call (a timeout,
 * a lost peer), which clears it; read after model_forward and model_backward. */
status model_tp_status(model *m);
/* The whole model's table as tp rank `tp_rank` of `tp_size` sees it (full shapes, split
 * dims): the checkpoint layout of a shard or stage (GPT-2, BERT). */
status model_table_whole(const model_spec *s, int tp_size, int tp_rank, param_table *out);
/* Counted training FLOPs per token of block l as a pipeline stage's share (6 per
 * parameter, attention's 12 T C; the last block carries the head, the embedding lookups
 * are free): the weights of parallel.pp's balance. */
double model_block_cost(const model_spec *s, int T, int l);
/* The tensor both ends of a pipeline hold (the embedding tied to the output head):
 * "wte.weight" (GPT-2), "embeddings.word_embeddings.weight" (BERT); NULL for the image models. */
const char *model_tied_name(const model_spec *s);
void model_free(model *m);

/* Allocates a batch for m's shape (mask filled with 1). */
status model_batch_init(model_batch *b, const model *m);
/* Fills a batch with synthetic data from the counter RNG (seed, 0, RNG_PURPOSE_DATA, 0):
 * uniform token ids (BERT: clear of the special ids when V > 104), GPT-2 targets
 * uniform, BERT targets = the input id at 15% of positions; images (ResNet, MLP) uniform
 * in [-0.5, 0.5) and uniform labels. */
void model_batch_synthetic(model_batch *b, const model *m, uint64_t seed);
void model_batch_free(model_batch *b);

/* Forward with the loss. `training` matters for ResNet (batch statistics; the running
 * ones move) and is required for model_backward. The batch must stay unchanged until
 * model_backward. STATUS_INPUT when an id, target or label is out of range. */
status model_forward(model *m, const model_batch *b, bool training);
/* Gradient of the mean loss of the last forward, ADDED into the grad buffer. */
void model_backward(model *m);
/* Mean loss of the last forward. */
float model_loss(const model *m);
/* The buffers the kernels use: model_buffers on the CPU, the device copies on a GPU. */
param_buffers *model_device_buffers(model *m);
/* model_backward differentiates scale * loss from now on (fp16 loss scaling; default 1). */
void model_set_loss_scale(model *m, float scale);
/* The next micro-batches have B samples, 1 <= B <= the B the model was built for (a
 * heterogeneous rank's share, train/sched.c); bit for bit the run of a model built for B.
 * GPT-2, BERT and the MLP on the CPU; STATUS_USAGE (logged) otherwise (ResNet: batch
 * norm's statistics depend on the micro-batch). model_batch buffers keep
 * their size: a batch of B fills their first B samples. */
status model_set_micro_batch(model *m, int B);

/* Trainable tensors and their flat buffers (params, grads, moments). */
param_table *model_params(model *m);
param_buffers *model_buffers(model *m);
/* Non-trainable state saved with the model (ResNet's batch-norm running statistics,
 * torchvision buffer names) and its values; NULL for GPT-2, BERT and the MLP. */
const param_table *model_state_table(const model *m);
float *model_state(model *m);
/* Scratch of the state's size, allocated with the model (NULL without state): where the
 * trainer keeps the state as it was before a step, to put it back when the step is
 * skipped (a forward in training moves ResNet's statistics before the step is decided). */
float *model_state_saved(model *m);

/* Model FLOPs of one training step on the whole batch (each family's own count). */
double model_flops_per_step(const model *m);
/* Bytes of activations and activation gradients. */
size_t model_activation_bytes(const model *m);
/* What throughput counts ("tok", "seq" or "img") and how many of them one batch holds. */
const char *model_unit(const model *m);
double model_units_per_step(const model *m);


/* ---- The trainer's view of a model ------------------------------------------------
 * What libcore/train and the checkpoint tools need from a family without naming its
 * struct fields: the layer hook, the classifier's logits, the vocabulary. */

/* Installs the hook the backward calls as each layer's gradients become final
 * (param_layer_hook; {NULL, NULL} removes it). */
void model_set_layer_hook(model *m, param_layer_hook h);
/* Installs the profiler's layer timer (param_layer_timer; {NULL, NULL} removes it). */
void model_set_layer_timer(model *m, param_layer_timer t);
/* The classifiers (ResNet, MLP): the logits of the last forward, (B, *num_classes); NULL
 * for the language models. */
const float *model_class_logits(const model *m, int *num_classes);
/* GPT-2 and BERT: the attention's layers and heads (false for a family without attention). */
bool model_attention_shape(const model_spec *s, int *L, int *NH);
/* Per (layer, head), (L, NH) each: the mean over the last forward's queries of the
 * attention distribution's entropy (nats) and of its largest weight (attn_stats.c).
 * false, nothing written, without attention, before a forward, or on a GPU. */
bool model_attention_stats(const model *m, double *entropy, double *maxw);
/* GPT-2 and BERT: the real vocabulary V (token ids in [0, V)); 0 for the classifiers. */
int model_vocab_size(const model_spec *s);
/* GPT-2: the embedding's rows, V padded to a multiple of 128; model_vocab_size otherwise. */
int model_padded_vocab_size(const model_spec *s);
/* The classifiers (ResNet, MLP): the classes (labels in [0, num_classes)); 0 for the
 * language models. */
int model_num_classes(const model_spec *s);
/* GPT-2's sizes (llm.c's file header), NULL for the other families. */
const gpt2_config *model_gpt2_config(const model_spec *s);

#endif
