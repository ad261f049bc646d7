/* model_mlp — the MLP family behind model.h's table (model_impl.h): its [model] keys
 * (hidden width and layers, classes, image size), its batch of (B, 3, H, W) images with
 * labels as ResNet's, and the calls into mlp.h. No state; micro-batches of any size.
 * Throughput counts images. */
#include <stdlib.h>

#include "model_impl.h"

#define MODEL_MLP_IMAGE_SIZE 8  /* the preset's input: the UCI digits at 8x8 */

static const char *const model_mlp_keys[] = {
    "model.mlp_hidden", "model.mlp_layers", "model.num_classes", "model.image_size", NULL,
};

static status model_mlp_resolve(model_spec *s, const config *cfg)
{
    mlp_config *c = &s->mlp;
    TRY(mlp_config_named(c, s->name));
    c->hidden = model_pick(cfg, "model.mlp_hidden", c->hidden);
    int64_t layers = config_int(cfg, "model.mlp_layers");  /* -1: the preset's; 0 is a model (no hidden layer) */
    if (layers >= 0) c->layers = (int)layers;
    c->num_classes = model_pick(cfg, "model.num_classes", c->num_classes);
    s->image_size = model_pick(cfg, "model.image_size", MODEL_MLP_IMAGE_SIZE);
    return mlp_config_check(c);
}

static status model_mlp_check_batch(const model_spec *s, int B, int T, const char *batch_key, const char *seq_key)
{
    (void)s, (void)B, (void)T, (void)batch_key, (void)seq_key;  /* any B >= 1: no batch statistics */
    return STATUS_OK;
}

static void model_mlp_print(const model_spec *s, FILE *f)
{
    const mlp_config *c = &s->mlp;
    fprintf(f, "%s (MLP): image_size %d (%d inputs), mlp_hidden %d, mlp_layers %d%s, num_classes %d\n", s->name,
            s->image_size, 3 * s->image_size * s->image_size, c->hidden, c->layers,
            c->layers ? "" : " (logistic regression)", c->num_classes);
}

static status model_mlp_init(model *m, uint64_t seed, bool train, const device *dev)
{
    m->base = &m->mlp.base;
    int size = m->spec.image_size;
    return mlp_init_on(&m->mlp, &m->spec.mlp, m->B, size, size, seed, train, dev);
}

static void model_mlp_free(model *m) { mlp_free(&m->mlp); }

static bool model_mlp_batch_alloc(model_batch *b, const model *m)
{
    size_t B = (size_t)m->B, hw = (size_t)m->spec.image_size * (size_t)m->spec.image_size;
    b->images = malloc(B * 3 * hw * sizeof *b->images);
    b->targets = malloc(B * sizeof *b->targets);
    return b->images && b->targets;
}

/* Every pixel uniform in [-0.5, 0.5), then every label uniform (ResNet's order). */
static void model_mlp_batch_synthetic(model_batch *b, const model *m, rng *r)
{
    size_t n = (size_t)m->B * 3 * (size_t)m->spec.image_size * (size_t)m->spec.image_size;
    for (size_t i = 0; i < n; i++) b->images[i] = rng_uniform(r) - 0.5f;
    for (int i = 0; i < m->B; i++) b->targets[i] = (int32_t)rng_below(r, (uint32_t)m->spec.mlp.num_classes);
}

static status model_mlp_forward(model *m, const model_batch *b, bool training)
{
    return mlp_forward(&m->mlp, b->images, b->targets, training);
}

static void model_mlp_backward(model *m, const model_batch *b) { mlp_backward(&m->mlp, b->images); }

static void model_mlp_set_batch(model *m, int B) { mlp_set_batch(&m->mlp, B); }

static double model_mlp_flops(const model *m) { return mlp_flops_per_image(&m->mlp) * m->B; }

static size_t model_mlp_activation_bytes(const model *m)
{
    return (m->mlp.act_floats + m->mlp.grad_floats) * sizeof(float);
}

static void model_mlp_outputs(const model_spec *s, int *vocab, int *padded_vocab, int *classes)
{
    *vocab = *padded_vocab = 0, *classes = s->mlp.num_classes;
}

static const float *model_mlp_class_logits(const model *m) { return mlp_logits(&m->mlp); }

const model_family_ops model_family_mlp = {
    .name = "multilayer perceptron",
    .prefix = "mlp",
    .unit = "img",
    .sequences = false,
    .unit_per_token = false,
    .keys = model_mlp_keys,
    .keys_text = "model.mlp_hidden, model.mlp_layers, model.num_classes, model.image_size",
    .spec_resolve = model_mlp_resolve,
    .spec_check_batch = model_mlp_check_batch,
    .spec_print = model_mlp_print,
    .init = model_mlp_init,
    .free = model_mlp_free,
    .batch_alloc = model_mlp_batch_alloc,
    .batch_synthetic = model_mlp_batch_synthetic,
    .forward = model_mlp_forward,
    .backward = model_mlp_backward,
    .set_batch = model_mlp_set_batch,
    .flops_per_step = model_mlp_flops,
    .activation_bytes = model_mlp_activation_bytes,
    .spec_outputs = model_mlp_outputs,
    .class_logits = model_mlp_class_logits,
    /* no state besides the parameters: state_table and state stay NULL */
};
