/* model_resnet — the ResNet family behind model.h's table (model_impl.h): its [model]
 * keys (stem, classes, image size), its batch of (B, 3, H, W) images with labels, the
 * calls into resnet.h, and the batch-norm running statistics as the model's state.
 * Throughput counts images. */
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"

static const char *const model_resnet_keys[] = { "model.stem", "model.num_classes", "model.image_size", "model.width", NULL };

/* ResNet's downsampling from input to layer4: 7x7/2 conv and 3x3/2 max-pool, then
 * stride 2 in layer2..4 (imagenet); 3x3/1 conv, no pool, then the same (cifar). */
static int model_resnet_stride(resnet_stem stem)
{
    return stem == RESNET_STEM_IMAGENET ? 32 : 8;
}

static status model_resnet_resolve(model_spec *s, const config *cfg)
{
    resnet_config *r = &s->resnet;
    TRY(resnet_config_named(r, s->name));
    const char *stem = config_str(cfg, "model.stem");
    if (strcmp(stem, "preset") != 0)
        CHECK(resnet_stem_parse(stem, &r->stem), "MODEL_CONFIG_KEYS lists a stem that resnet does not know");
    r->num_classes = model_pick(cfg, "model.num_classes", r->num_classes);
    r->width = model_pick(cfg, "model.width", r->width);
    TRY(resnet_config_check(r));
    int stride = model_resnet_stride(r->stem);
    s->image_size = model_pick(cfg, "model.image_size", r->stem == RESNET_STEM_IMAGENET ? 224 : 32);
    if (s->image_size < stride) {
        log_error0("model.image_size = %d is smaller than %d, the total stride of the %s stem and the four stages "
                   "(224 is the imagenet stem's size, 32 the cifar stem's)", s->image_size, stride,
                   resnet_stem_name(r->stem));
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static status model_resnet_check_batch(const model_spec *s, int B, int T, const char *batch_key, const char *seq_key)
{
    (void)T;
    (void)seq_key;
    /* Every stride-2 step maps n pixels to ceil(n / 2), so layer4 sees ceil(size / stride)^2. */
    int stride = model_resnet_stride(s->resnet.stem);
    long long side = (s->image_size + stride - 1) / stride, values = (long long)B * side * side;
    if (values < 2) {
        log_error0("%s = %d with model.image_size = %d leaves layer4's batch norm %lld value per channel in a "
                   "training step; it needs at least 2 (raise %s or model.image_size)", batch_key, B,
                   s->image_size, values, batch_key);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static void model_resnet_print(const model_spec *s, FILE *f)
{
    const resnet_config *r = &s->resnet;
    fprintf(f, "%s (ResNet, %s blocks %d-%d-%d-%d): stem %s, num_classes %d, image_size %d, width %d\n", s->name,
            r->block == RESNET_BLOCK_KIND_BOTTLENECK ? "Bottleneck" : "Basic", r->layers[0], r->layers[1],
            r->layers[2], r->layers[3], resnet_stem_name(r->stem), r->num_classes, s->image_size, r->width);
}

static status model_resnet_init(model *m, uint64_t seed, bool train, const device *dev)
{
    m->base = &m->resnet.base;
    int size = m->spec.image_size;
    return resnet_init_on(&m->resnet, &m->spec.resnet, m->B, size, size, seed, train, dev);
}

static void model_resnet_free(model *m) { resnet_free(&m->resnet); }

static bool model_resnet_batch_alloc(model_batch *b, const model *m)
{
    size_t B = (size_t)m->B, hw = (size_t)m->spec.image_size * (size_t)m->spec.image_size;
    b->images = malloc(B * 3 * hw * sizeof *b->images);
    b->targets = malloc(B * sizeof *b->targets);
    return b->images && b->targets;
}

/* Every pixel uniform in [-0.5, 0.5), then every label uniform. */
static void model_resnet_batch_synthetic(model_batch *b, const model *m, rng *r)
{
    size_t n = (size_t)m->B * 3 * (size_t)m->spec.image_size * (size_t)m->spec.image_size;
    for (size_t i = 0; i < n; i++) b->images[i] = rng_uniform(r) - 0.5f;
    for (int i = 0; i < m->B; i++) b->targets[i] = (int32_t)rng_below(r, (uint32_t)m->spec.resnet.num_classes);
}

static status model_resnet_forward(model *m, const model_batch *b, bool training)
{
    return resnet_forward(&m->resnet, b->images, b->targets, training);
}

static void model_resnet_backward(model *m, const model_batch *b)
{
    (void)b;  /* resnet_backward reads the images and labels its forward copied */
    resnet_backward(&m->resnet);
}

static double model_resnet_flops(const model *m) { return resnet_flops_per_image(&m->resnet) * m->B; }

/* Activations and their gradients, and the plans' memory (blocked weights, masks). */
static size_t model_resnet_activation_bytes(const model *m)
{
    return (m->resnet.act_floats + m->resnet.grad_floats) * sizeof(float) + m->resnet.plan_bytes;
}

static const param_table *model_resnet_state_table(const model *m) { return &m->resnet.bt; }

static float *model_resnet_state(model *m) { return m->resnet.stats; }

static float *model_resnet_state_saved(model *m) { return m->resnet.stats_saved; }

static void model_resnet_outputs(const model_spec *s, int *vocab, int *padded_vocab, int *classes)
{
    *vocab = *padded_vocab = 0, *classes = s->resnet.num_classes;
}

static const float *model_resnet_class_logits(const model *m)
{
    return m->resnet.acts.logits;
}

const model_family_ops model_family_resnet = {
    .name = "ResNet",
    .prefix = "resnet",
    .unit = "img",
    .sequences = false,
    .unit_per_token = false,
    .keys = model_resnet_keys,
    .keys_text = "model.stem, model.num_classes, model.image_size, model.width",
    .spec_resolve = model_resnet_resolve,
    .spec_check_batch = model_resnet_check_batch,
    .spec_print = model_resnet_print,
    .init = model_resnet_init,
    .free = model_resnet_free,
    .batch_alloc = model_resnet_batch_alloc,
    .batch_synthetic = model_resnet_batch_synthetic,
    .forward = model_resnet_forward,
    .backward = model_resnet_backward,
    .flops_per_step = model_resnet_flops,
    .activation_bytes = model_resnet_activation_bytes,
    .spec_outputs = model_resnet_outputs,
    .class_logits = model_resnet_class_logits,
    .state_table = model_resnet_state_table,
    .state = model_resnet_state,
    .state_saved = model_resnet_state_saved,
};
