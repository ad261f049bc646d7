/* model_base — what every model family (gpt2.h, bert.h, resnet.h) holds in the same
 * form: its parameter table and flat buffers, the device and its kernel table, the
 * device copies of the buffers, the layer hook its backward reports to, the loss
 * scale and the last loss. model.c reads and sets these through one `model_base *`
 * whatever the family, instead of a branch per family.
 *
 * The one design decision: each family struct opens with MODEL_BASE_GROUP, a union
 * of a `model_base base` and an anonymous struct with the same fields (the Linux
 * kernel's struct_group). The family's own code keeps writing `m->pt`, `m->hook`,
 * `m->loss_scale`; a caller that does not know the family takes `&m->base`. Both
 * name the same bytes: the two structs are one common initial sequence of a union
 * (C11 6.5.2.3p6). Within one function use one of the two spellings, not both. */
#ifndef NEBULA_MODEL_BASE_H
#define NEBULA_MODEL_BASE_H

#include "device.h"
#include "param.h"

#define MODEL_BASE_FIELDS                                                                                   \
    param_table pt;        /* trainable tensors: ecosystem names, shapes, offsets */                         \
    param_buffers pb;      /* params, grads, moments in host memory (on a GPU: params only, a mirror) */    \
    const device *dev;     /* where the kernels run (device.h); NULL = the CPU */                           \
    const nn_ops *ops;     /* the device's kernels */                                                       \
    param_buffers w;       /* on a GPU: params, grads, moments in device memory; unused (zero) on the CPU */ \
    param_layer_hook hook; /* backward reports each finished layer here (set by the caller) */              \
    param_layer_timer timer; /* forward and backward mark each layer's end here (the profiler; NULL fn: off) */ \
    float loss_scale;      /* backward differentiates loss_scale * mean loss (fp16 loss scaling; 1 by default) */ \
    float mean_loss;       /* mean loss of the last forward, -1 without targets */

typedef struct model_base {
    MODEL_BASE_FIELDS
} model_base;

/* The first member of every family struct: `base` and the same fields by their own names. */
#define MODEL_BASE_GROUP            \
    union {                         \
        model_base base;            \
        struct {                    \
            MODEL_BASE_FIELDS       \
        };                          \
    }

/* The buffers the kernels read and write: the host buffers on the CPU, the device
 * copies on a GPU. */
static inline param_buffers *model_base_buffers(model_base *b)
{
    return device_is_gpu(b->dev) ? &b->w : &b->pb;
}

#endif
