/* mlp — see mlp.h. Forward and backward are flat lists of kernel calls: per linear
 * layer a matmul (the device table's: BLAS or oneDNN fp32, or the CPU's bf16 GEMM)
 * and, for a hidden layer, an in-place ReLU whose backward reads the output. The
 * images are the first layer's input as they are: (N, 3, H, W) row-major is
 * x.flatten(1)'s (N, D) already. */
#include "mlp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cpu/relu.h"

status mlp_config_named(mlp_config *cfg, const char *name)
{
    if (strcmp(name, "mlp") != 0) {
        log_error0("unknown model '%s'; MLP models: mlp (size it with model.mlp_hidden, model.mlp_layers, "
                   "model.num_classes and model.image_size)", name);
        return STATUS_INPUT;
    }
    *cfg = (mlp_config){ .hidden = 64, .layers = 1, .num_classes = 10 };
    return STATUS_OK;
}

status mlp_config_check(const mlp_config *c)
{
    if (c->hidden < 1 || c->hidden > MLP_MAX_HIDDEN) {
        log_error0("model.mlp_hidden = %d must be in [1, %d]", c->hidden, MLP_MAX_HIDDEN);
        return STATUS_INPUT;
    }
    if (c->layers < 0 || c->layers > MLP_MAX_LAYERS) {
        log_error0("model.mlp_layers = %d must be in [0, %d] (0: no hidden layer, logistic regression)", c->layers,
                   MLP_MAX_LAYERS);
        return STATUS_INPUT;
    }
    if (c->num_classes < 1) {
        log_error0("model.num_classes = %d must be positive", c->num_classes);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

/* The table in nn.Sequential's order: Linear i is module 2i (a ReLU module between). */
static void mlp_build(mlp *m)
{
    param_table_init(&m->pt);
    char n[PARAM_NAME_MAX];
    for (int i = 0; i < m->nlayers; i++) {
        mlp_layer *l = &m->layer[i];
        l->in = i == 0 ? m->D : m->cfg.hidden;
        l->out = i == m->nlayers - 1 ? m->cfg.num_classes : m->cfg.hidden;
        snprintf(n, sizeof n, "layers.%d.weight", 2 * i);
        int e = param_add(&m->pt, n, i, true, 2, (size_t)l->out, (size_t)l->in, 0, 0);  /* may move entries */
        l->w = m->pt.entries[e].offset;
        snprintf(n, sizeof n, "layers.%d.bias", 2 * i);
        e = param_add(&m->pt, n, i, false, 1, (size_t)l->out, 0, 0, 0);
        l->b = m->pt.entries[e].offset;
    }
}

/* The layers are the named views: every tensor is one layer's weight or bias. */
static status mlp_check_views(const mlp *m)
{
    size_t *off = malloc(2 * (size_t)m->nlayers * sizeof *off);
    if (!off) return STATUS_NOMEM;
    for (int i = 0; i < m->nlayers; i++) off[2 * i] = m->layer[i].w, off[2 * i + 1] = m->layer[i].b;
    param_views_check(&m->pt, off, 2 * (size_t)m->nlayers, "mlp");
    free(off);
    return STATUS_OK;
}

/* torch.nn.Linear.reset_parameters: kaiming_uniform_(a = sqrt(5)) gives the weight the
 * bound gain * sqrt(3 / fan_in) with gain sqrt(2 / (1 + a^2)) = sqrt(1/3), i.e.
 * 1/sqrt(fan_in); the bias takes the same bound. */
static void mlp_init_weights(mlp *m, uint64_t seed)
{
    for (int i = 0; i < m->pt.count; i++) {
        const param_entry *e = &m->pt.entries[i];
        double bound = 1.0 / sqrt((double)m->layer[e->layer].in);
        float *w = m->pb.params + e->offset;
        rng r;  /* one stream per tensor (step = its table index): no tensor shifts another's draws */
        rng_init(&r, seed, 0, RNG_PURPOSE_INIT, (uint64_t)i);
        for (size_t k = 0; k < e->count; k++) w[k] = (float)(bound * (2.0 * rng_uniform_double(&r) - 1.0));
    }
}

static int mlp_widest(const mlp *m)
{
    int w = m->cfg.num_classes;
    for (int i = 0; i < m->nlayers; i++) w = m->layer[i].in > w ? m->layer[i].in : w;
    return w;
}

static void mlp_layout_acts(void *owner, float *base, size_t *used)
{
    mlp *m = owner;
    size_t N = (size_t)m->N;
    for (int i = 0; i < m->nlayers; i++) m->layer[i].out_act = param_carve(base, used, N * (size_t)m->layer[i].out);
    m->losses = param_carve(base, used, N);
    m->xent_lse = param_carve(base, used, N);
}

static void mlp_layout_grads(void *owner, float *base, size_t *used)
{
    mlp *m = owner;
    size_t N = (size_t)m->N, widest = (size_t)mlp_widest(m);
    m->gs.dact = param_carve(base, used, N * widest);
    m->gs.dpre = param_carve(base, used, N * widest);
    m->gs.dlogits = param_carve(base, used, N * (size_t)m->cfg.num_classes);
    m->gs.dlosses = param_carve(base, used, N);
}

status mlp_init_on(mlp *m, const mlp_config *cfg, int N, int H, int W, uint64_t seed, bool train,
                   const device *dev)
{
    memset(m, 0, sizeof *m);
    m->dev = dev;
    m->ops = dev ? dev->ops : &nn_ops_cpu;
    if (device_is_gpu(dev)) {
        log_error0("the mlp runs on the CPU only (its ReLU is not in the device's kernel table); use --device cpu");
        return STATUS_INPUT;
    }
    TRY(mlp_config_check(cfg));
    if (N < 1 || H < 1 || W < 1) {
        log_error0("an mlp needs a batch of at least 1 image of at least 1x1 pixels (got N %d, %dx%d)", N, H, W);
        return STATUS_INPUT;
    }
    m->cfg = *cfg;
    m->N = m->B = N;
    m->D = 3 * H * W;
    m->nlayers = cfg->layers + 1;
    if (!(m->layer = calloc((size_t)m->nlayers, sizeof *m->layer))) return STATUS_NOMEM;
    mlp_build(m);
    TRY(mlp_check_views(m));
    TRY(param_buffers_init(&m->pb, &m->pt, train));
    mlp_init_weights(m, seed);
    TRY(param_arena_alloc(mlp_layout_acts, m, &m->act_memory, &m->act_floats, "mlp activations"));
    if (train) TRY(param_arena_alloc(mlp_layout_grads, m, &m->grad_memory, &m->grad_floats, "mlp activation gradients"));
    if (!(m->labels = malloc((size_t)N * sizeof *m->labels))) return STATUS_NOMEM;
    m->mean_loss = -1;
    m->loss_scale = 1.0f;
    return STATUS_OK;
}

void mlp_free(mlp *m)
{
    free(m->act_memory);
    free(m->grad_memory);
    free(m->labels);
    free(m->layer);
    param_buffers_free(&m->pb);
    param_table_free(&m->pt);
    memset(m, 0, sizeof *m);
}

void mlp_set_batch(mlp *m, int B)
{
    CHECK(B >= 1 && B <= m->N, "mlp_set_batch: 1 <= B <= the batch the model was built for");
    m->B = B;
}

status mlp_forward(mlp *m, const float *images, const int32_t *labels, bool training)
{
    int B = m->B, V = m->cfg.num_classes;
    m->can_backward = false;
    m->mean_loss = -1;
    for (int i = 0; labels && i < B; i++)
        if (labels[i] < -1 || labels[i] >= V) {
            log_error("image %d of the batch: label %d outside 0..%d (or -1 to ignore)", i, labels[i], V - 1);
            return STATUS_INPUT;
        }
    const nn_ops *k = m->ops;
    const float *p = m->pb.params, *x = images;  /* (B, 3, H, W) is flatten(1)'s (B, D) */
    for (int i = 0; i < m->nlayers; i++) {
        mlp_layer *l = &m->layer[i];
        k->matmul_forward(l->out_act, x, p + l->w, p + l->b, B, l->in, l->out, MATMUL_LAYOUT_OUT_IN); /* layers.{2i} */
        if (i < m->nlayers - 1) relu_forward(l->out_act, l->out_act, (size_t)B * (size_t)l->out);     /* layers.{2i+1} */
        param_layer_time(&m->timer, i, false);
        x = l->out_act;
    }
    if (!labels) return STATUS_OK;
    memcpy(m->labels, labels, (size_t)B * sizeof *labels);
    k->xent_forward(m->losses, m->xent_lse, x, m->labels, B, V, V);
    double sum = 0;
    int counted = 0;
    for (int i = 0; i < B; i++)
        if (labels[i] >= 0) { sum += m->losses[i]; counted++; }
    m->mean_loss = counted ? (float)(sum / counted) : 0.0f;
    m->can_backward = training;
    return STATUS_OK;
}

void mlp_backward(mlp *m, const float *images)
{
    CHECK(m->grad_memory && m->can_backward, "mlp_backward needs train=true and a training forward with labels");
    mlp_grad_scratch *s = &m->gs;
    int B = m->B, V = m->cfg.num_classes;
    const nn_ops *k = m->ops;
    const float *p = m->pb.params;
    float *g = m->pb.grads;
    int counted = 0;
    for (int i = 0; i < B; i++) counted += m->labels[i] >= 0;
    /* loss_scale 1: exactly 1/counted; a power of two (fp16's scaler) scales exactly */
    for (int i = 0; i < B; i++) s->dlosses[i] = counted ? m->loss_scale / (float)counted : 0.0f;
    k->zero(s->dlogits, (size_t)B * (size_t)V);
    k->xent_backward(s->dlogits, m->layer[m->nlayers - 1].out_act, m->xent_lse, m->labels, s->dlosses, B, V, V);
    const float *dout = s->dlogits;  /* d(pre-activation) of layer i */
    for (int i = m->nlayers - 1; i >= 0; i--) {
        mlp_layer *l = &m->layer[i];
        const float *inp = i ? m->layer[i - 1].out_act : images;
        float *dinp = i ? s->dact : NULL;  /* the images get no gradient */
        if (dinp) k->zero(dinp, (size_t)B * (size_t)l->in);
        k->matmul_backward(dinp, g + l->w, g + l->b, dout, inp, p + l->w, B, l->in, l->out, MATMUL_LAYOUT_OUT_IN);
        param_layer_done(&m->hook, i);
        param_layer_time(&m->timer, i, true);
        if (!i) break;
        size_t n = (size_t)B * (size_t)l->in;  /* through layer i-1's ReLU, read from its output */
        k->zero(s->dpre, n);
        relu_backward(s->dpre, inp, s->dact, n);
        dout = s->dpre;
    }
}

const float *mlp_logits(const mlp *m)
{
    return m->layer[m->nlayers - 1].out_act;
}

double mlp_flops_per_image(const mlp *m)
{
    double f = 0;
    for (int i = 0; i < m->nlayers; i++) f += 2.0 * m->layer[i].in * m->layer[i].out;
    return 3.0 * f;
}
