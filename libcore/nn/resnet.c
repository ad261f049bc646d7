/* resnet — see resnet.h. Init walks torchvision's module order once, appending each
 * tensor to its table and recording its offset and shapes in a resnet_unit; forward
 * and backward are then flat lists of layer calls over those units, in the order of
 * torchvision's BasicBlock/Bottleneck.forward. Every buffer is sized in resnet_init. */
#include "resnet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/dnn.h"
#include "cpu/matmul.h"
#include "cpu/pool.h"
#include "cpu/relu.h"
#include "cpu/residual.h"
#include "cpu/xent.h"
#include "base/rng.h"

#define RESNET_BN_EPS      1e-5f  /* nn.BatchNorm2d defaults */
#define RESNET_BN_MOMENTUM 0.1f

typedef struct resnet_named {
    const char *name;
    resnet_block_kind block;
    int layers[4];
} resnet_named;

/* torchvision.models.resnet: _resnet(BasicBlock | Bottleneck, layers). */
static const resnet_named resnet_archs[] = {
    { "resnet18", RESNET_BLOCK_KIND_BASIC, { 2, 2, 2, 2 } },
    { "resnet34", RESNET_BLOCK_KIND_BASIC, { 3, 4, 6, 3 } },
    { "resnet50", RESNET_BLOCK_KIND_BOTTLENECK, { 3, 4, 6, 3 } },
    { "resnet101", RESNET_BLOCK_KIND_BOTTLENECK, { 3, 4, 23, 3 } },
    { "resnet152", RESNET_BLOCK_KIND_BOTTLENECK, { 3, 8, 36, 3 } },
};

status resnet_config_named(resnet_config *cfg, const char *name)
{
    static const char cifar[] = "-cifar";
    size_t len = strlen(name), cl = sizeof cifar - 1;
    bool is_cifar = len > cl && !strcmp(name + len - cl, cifar);
    size_t base = is_cifar ? len - cl : len;
    for (size_t i = 0; i < sizeof resnet_archs / sizeof resnet_archs[0]; i++) {
        const resnet_named *a = &resnet_archs[i];
        if (strlen(a->name) != base || strncmp(name, a->name, base) != 0) continue;
        cfg->block = a->block;
        memcpy(cfg->layers, a->layers, sizeof cfg->layers);
        cfg->stem = is_cifar ? RESNET_STEM_CIFAR : RESNET_STEM_IMAGENET;
        cfg->num_classes = is_cifar ? 10 : 1000;
        cfg->width = 64;
        return STATUS_OK;
    }
    log_error0("unknown model '%s'; ResNet models: resnet18, resnet34, resnet50, resnet101, resnet152, each "
               "optionally with -cifar for the CIFAR stem (e.g. resnet18-cifar)", name);
    return STATUS_INPUT;
}

status resnet_config_check(const resnet_config *c)
{
    if (c->block != RESNET_BLOCK_KIND_BASIC && c->block != RESNET_BLOCK_KIND_BOTTLENECK) {
        log_error0("model.block = %d is neither BasicBlock (%d) nor Bottleneck (%d)", (int)c->block,
                   RESNET_BLOCK_KIND_BASIC, RESNET_BLOCK_KIND_BOTTLENECK);
        return STATUS_INPUT;
    }
    if (c->stem != RESNET_STEM_IMAGENET && c->stem != RESNET_STEM_CIFAR) {
        log_error0("model.stem = %d is not a stem; valid: imagenet, cifar", (int)c->stem);
        return STATUS_INPUT;
    }
    for (int k = 0; k < 4; k++)
        if (c->layers[k] < 1) {
            log_error0("model.layers[%d] = %d: every stage needs at least one block", k, c->layers[k]);
            return STATUS_INPUT;
        }
    if (c->num_classes < 1) {
        log_error0("model.num_classes = %d must be positive", c->num_classes);
        return STATUS_INPUT;
    }
    if (c->width < 16 || c->width > 4096 || c->width % 16) {
        log_error0("model.width = %d must be a multiple of 16 in [16, 4096] (the activations' channel block; "
                   "64: torchvision's ResNets)", c->width);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

const char *resnet_stem_name(resnet_stem s)
{
    return s == RESNET_STEM_CIFAR ? "cifar" : "imagenet";
}

bool resnet_stem_parse(const char *s, resnet_stem *out)
{
    if (!strcmp(s, "imagenet")) { *out = RESNET_STEM_IMAGENET; return true; }
    if (!strcmp(s, "cifar")) { *out = RESNET_STEM_CIFAR; return true; }
    return false;
}

static int resnet_expansion(const resnet_config *c)
{
    return c->block == RESNET_BLOCK_KIND_BOTTLENECK ? 4 : 1;
}

/* Appends "<prefix>.<suffix>" to a table; returns its offset. */
static size_t resnet_add(param_table *t, const char *prefix, const char *suffix, int layer, bool decay, int ndim,
                         int d0, int d1, int d2, int d3)
{
    char n[PARAM_NAME_MAX];
    snprintf(n, sizeof n, "%s.%s", prefix, suffix);
    int i = param_add(t, n, layer, decay, ndim, (size_t)d0, (size_t)d1, (size_t)d2, (size_t)d3);
    return t->entries[i].offset;
}

/* Appends conv `cname` (OC, C, K, K) and BN `bname` (weight, bias; running stats in
 * bt) to the tables and fills the unit's shapes and offsets. */
static void resnet_add_unit(resnet *m, resnet_unit *u, const char *cname, const char *bname, int layer, int C,
                            int H, int W, int OC, int K, int stride, int pad, bool relu)
{
    *u = (resnet_unit){ .C = C, .H = H, .W = W, .OC = OC, .K = K, .stride = stride, .pad = pad, .relu = relu };
    u->OH = (H + 2 * pad - K) / stride + 1;
    u->OW = (W + 2 * pad - K) / stride + 1;
    u->w = resnet_add(&m->pt, cname, "weight", layer, true, 4, OC, C, K, K);
    u->bn_w = resnet_add(&m->pt, bname, "weight", layer, false, 1, OC, 0, 0, 0);
    u->bn_b = resnet_add(&m->pt, bname, "bias", layer, false, 1, OC, 0, 0, 0);
    u->rmean = resnet_add(&m->bt, bname, "running_mean", layer, false, 1, OC, 0, 0, 0);
    u->rvar = resnet_add(&m->bt, bname, "running_var", layer, false, 1, OC, 0, 0, 0);
    u->nbt = resnet_add(&m->bt, bname, "num_batches_tracked", layer, false, 0, 0, 0, 0, 0);
}

/* Both tables in torchvision's module order; param layer = backward unit (stem 0, block i of
 * all layers i + 1, fc nblocks + 1). Block shapes follow torchvision's _make_layer: stride 2 on
 * the first block of layer2..4, a downsample branch when the stride or the channel count changes. */
static void resnet_build(resnet *m)
{
    const resnet_config *c = &m->cfg;
    resnet_acts *a = &m->acts;
    int exp = resnet_expansion(c);
    param_table_init(&m->pt);
    param_table_init(&m->bt);
    if (c->stem == RESNET_STEM_IMAGENET)
        resnet_add_unit(m, &a->stem, "conv1", "bn1", 0, 3, m->H, m->W, m->cfg.width, 7, 2, 3, true);
    else
        resnet_add_unit(m, &a->stem, "conv1", "bn1", 0, 3, m->H, m->W, m->cfg.width, 3, 1, 1, true);
    int C = m->cfg.width, H = a->stem.OH, W = a->stem.OW;
    if (c->stem == RESNET_STEM_IMAGENET) {
        a->PH = (H + 2 - 3) / 2 + 1;
        a->PW = (W + 2 - 3) / 2 + 1;
        H = a->PH;
        W = a->PW;
    }
    char cn[PARAM_NAME_MAX], bn[PARAM_NAME_MAX];
    int bi = 0;
    for (int k = 0; k < 4; k++) {
        int planes = c->width << k;
        for (int j = 0; j < c->layers[k]; j++, bi++) {
            resnet_block *b = &a->blocks[bi];
            int stride = (k > 0 && j == 0) ? 2 : 1, OC = planes * exp;
#define UNIT(i, Cin, Hin, Win, Cout, K, s, pad, relu)                              \
    snprintf(cn, sizeof cn, "layer%d.%d.conv%d", k + 1, j, i + 1);               \
    snprintf(bn, sizeof bn, "layer%d.%d.bn%d", k + 1, j, i + 1);                 \
    resnet_add_unit(m, &b->unit[i], cn, bn, bi + 1, Cin, Hin, Win, Cout, K, s, pad, relu)
            if (c->block == RESNET_BLOCK_KIND_BASIC) {
                b->nunits = 2;
                UNIT(0, C, H, W, planes, 3, stride, 1, true);
                UNIT(1, planes, b->unit[0].OH, b->unit[0].OW, planes, 3, 1, 1, false);
            } else {  /* v1.5: the stride is on the 3x3 conv2 */
                b->nunits = 3;
                UNIT(0, C, H, W, planes, 1, 1, 0, true);
                UNIT(1, planes, H, W, planes, 3, stride, 1, true);
                UNIT(2, planes, b->unit[1].OH, b->unit[1].OW, OC, 1, 1, 0, false);
            }
#undef UNIT
            b->has_down = stride != 1 || C != OC;
            if (b->has_down) {
                snprintf(cn, sizeof cn, "layer%d.%d.downsample.0", k + 1, j);
                snprintf(bn, sizeof bn, "layer%d.%d.downsample.1", k + 1, j);
                resnet_add_unit(m, &b->down, cn, bn, bi + 1, C, H, W, OC, 1, stride, 0, false);
            }
            C = OC;
            H = b->unit[b->nunits - 1].OH;
            W = b->unit[b->nunits - 1].OW;
        }
    }
    a->feat_C = C;
    a->feat_HW = H * W;
    m->fc_w = resnet_add(&m->pt, "fc", "weight", bi + 1, true, 2, c->num_classes, C, 0, 0);
    m->fc_b = resnet_add(&m->pt, "fc", "bias", bi + 1, false, 1, c->num_classes, 0, 0, 0);
}

/* The units are ResNet's named views: resnet_add_unit fills each unit's offsets as it
 * adds the unit's tensors. Checked once here: every trainable tensor is the weight, BN
 * weight or BN bias of exactly one unit or one of fc.weight and fc.bias, and every
 * statistic belongs to exactly one unit. STATUS_NOMEM when the lists cannot be allocated. */
static status resnet_check_views(const resnet *m)
{
    const resnet_acts *a = &m->acts;
    size_t units = 1 + 4 * (size_t)a->nblocks, np = 0, ns = 0;  /* the stem, then at most 3 + down per block */
    size_t *po = malloc((3 * units + 2) * sizeof *po), *so = malloc(3 * units * sizeof *so);
    if (!po || !so) {
        free(po);
        free(so);
        return STATUS_NOMEM;
    }
#define UNIT(u)                        \
    do {                               \
        po[np++] = (u)->w;             \
        po[np++] = (u)->bn_w;          \
        po[np++] = (u)->bn_b;          \
        so[ns++] = (u)->rmean;         \
        so[ns++] = (u)->rvar;          \
        so[ns++] = (u)->nbt;           \
    } while (0)
    UNIT(&a->stem);
    for (int i = 0; i < a->nblocks; i++) {
        const resnet_block *b = &a->blocks[i];
        for (int j = 0; j < b->nunits; j++) UNIT(&b->unit[j]);
        if (b->has_down) UNIT(&b->down);
    }
#undef UNIT
    po[np++] = m->fc_w;
    po[np++] = m->fc_b;
    param_views_check(&m->pt, po, np, "resnet");
    param_views_check(&m->bt, so, ns, "resnet batch-norm statistics");
    free(po);
    free(so);
    return STATUS_OK;
}

/* torchvision's ResNet.__init__ init: kaiming_normal_(fan_out, relu) for every conv,
 * BN weight 1 bias 0; fc keeps nn.Linear.reset_parameters (kaiming_uniform_ with
 * a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias). */
static void resnet_init_weights(resnet *m, uint64_t seed)
{
    double fc_bound = 1.0 / sqrt((double)m->acts.feat_C);
    for (int i = 0; i < m->pt.count; i++) {
        const param_entry *e = &m->pt.entries[i];
        float *w = m->pb.params + e->offset;
        rng r;  /* one stream per tensor (step = its table index): no tensor shifts another's draws */
        rng_init(&r, seed, 0, RNG_PURPOSE_INIT, (uint64_t)i);
        if (!strncmp(e->name, "fc.", 3)) {
            for (size_t k = 0; k < e->count; k++) w[k] = (float)(fc_bound * (2.0 * rng_uniform_double(&r) - 1.0));
        } else if (e->ndim == 4) {  /* both Box-Muller branches: half the draws */
            double std = sqrt(2.0 / (double)(e->shape[0] * e->shape[2] * e->shape[3]));
            for (size_t k = 0; k < e->count; k += 2) {
                float z0, z1;
                rng_normal2(&r, &z0, &z1);
                w[k] = (float)(std * z0);
                if (k + 1 < e->count) w[k + 1] = (float)(std * z1);
            }
        } else {
            float v = strstr(e->name, ".weight") ? 1.0f : 0.0f;
            for (size_t k = 0; k < e->count; k++) w[k] = v;
        }
    }
    for (int i = 0; i < m->bt.count; i++) {
        const param_entry *e = &m->bt.entries[i];
        float v = strstr(e->name, "running_var") ? 1.0f : 0.0f;
        for (size_t k = 0; k < e->count; k++) m->stats[e->offset + k] = v;
    }
}

static size_t zmax(size_t a, size_t b)
{
    return a > b ? a : b;
}

static float *carve(float *base, size_t *used, size_t count)
{
    float *p = base ? base + *used : NULL;
    *used += (count + 15) / 16 * 16;  /* 64-byte alignment of every view */
    return p;
}

/* Floats of arena an activation tensor of `count` values takes (cnn_ops.act_bytes:
 * bf16 activations take half). */
static size_t act_floats(const resnet *m, size_t count)
{
    return (count * m->ops->cnn->act_bytes + sizeof(float) - 1) / sizeof(float);
}

static float *carve_act(const resnet *m, float *base, size_t *used, size_t count)
{
    return carve(base, used, act_floats(m, count));
}

static size_t unit_out_size(const resnet *m, const resnet_unit *u)
{
    return (size_t)m->N * (size_t)u->OC * (size_t)u->OH * (size_t)u->OW;
}

static void resnet_layout_unit(resnet *m, resnet_unit *u, float *base, size_t *used, bool own_out)
{
    u->conv = carve_act(m, base, used, unit_out_size(m, u));
    if (own_out) u->out = carve_act(m, base, used, unit_out_size(m, u));
}

/* NCHW scratch: the head's input, or (imagenet) the stem output plus the maxpool output. */
static size_t resnet_nchw_floats(const resnet *m)
{
    const resnet_acts *a = &m->acts;
    size_t n = (size_t)m->N * (size_t)a->feat_C * (size_t)a->feat_HW;
    if (m->cfg.stem == RESNET_STEM_IMAGENET)
        n = zmax(n, unit_out_size(m, &a->stem) + (size_t)m->N * m->cfg.width * (size_t)a->PH * (size_t)a->PW + 16);
    return n;
}

static void resnet_layout_acts(void *owner, float *base, size_t *used)
{
    resnet *m = owner;
    resnet_acts *a = &m->acts;
    size_t N = (size_t)m->N;
    a->images = carve(base, used, N * 3 * (size_t)m->H * (size_t)m->W);
    resnet_layout_unit(m, &a->stem, base, used, true);
    const float *x = a->stem.out;
    if (m->cfg.stem == RESNET_STEM_IMAGENET) {
        a->pool = carve_act(m, base, used, N * m->cfg.width * (size_t)a->PH * (size_t)a->PW);
        x = a->pool;
    }
    for (int i = 0; i < a->nblocks; i++) {
        resnet_block *b = &a->blocks[i];
        resnet_unit *last = &b->unit[b->nunits - 1];
        b->inp = x;
        for (int k = 0; k < b->nunits - 1; k++) resnet_layout_unit(m, &b->unit[k], base, used, true);
        resnet_layout_unit(m, last, base, used, false);
        b->out = last->out = carve_act(m, base, used, unit_out_size(m, last));
        if (b->has_down) resnet_layout_unit(m, &b->down, base, used, true);
        x = b->out;
    }
    a->nchw = carve(base, used, resnet_nchw_floats(m));
    a->pooled = carve(base, used, N * (size_t)a->feat_C);
    a->logits = carve(base, used, N * (size_t)m->cfg.num_classes);
    a->losses = carve(base, used, N);
    a->xent_lse = carve(base, used, N);
}

/* Largest per-image activation (C*H*W) of any unit output or block input. */
static size_t resnet_max_chw(const resnet *m)
{
    const resnet_acts *a = &m->acts;
    size_t mx = (size_t)a->stem.OC * (size_t)a->stem.OH * (size_t)a->stem.OW;
    for (int i = 0; i < a->nblocks; i++) {
        const resnet_block *b = &a->blocks[i];
        for (int k = 0; k < b->nunits; k++) {
            const resnet_unit *u = &b->unit[k];
            mx = zmax(mx, (size_t)u->C * (size_t)u->H * (size_t)u->W);
            mx = zmax(mx, (size_t)u->OC * (size_t)u->OH * (size_t)u->OW);
        }
    }
    return mx;
}

static void resnet_layout_grads(void *owner, float *base, size_t *used)
{
    resnet *m = owner;
    size_t big = (size_t)m->N * resnet_max_chw(m), N = (size_t)m->N;
    resnet_grad_scratch *g = &m->gs;
    g->dblock = carve_act(m, base, used, big);
    g->dsum = carve_act(m, base, used, big);
    g->dmain = carve_act(m, base, used, big);
    g->dbn = carve_act(m, base, used, big);
    g->dpooled = carve(base, used, N * (size_t)m->acts.feat_C);
    g->dlogits = carve(base, used, N * (size_t)m->cfg.num_classes);
    g->dlosses = carve(base, used, N);
}

static float *alloc_floats(size_t n, const char *what)
{
    float *p = NULL;
    if (posix_memalign((void **)&p, PARAM_ALIGN_BYTES, n * sizeof(float)) != 0) {
        log_error("cannot allocate %.1f MiB for %s", (double)n * 4 / (1 << 20), what);
        return NULL;
    }
    return p;
}

/* conv1 reads the NCHW images and takes no input gradient; every other convolution
 * is nChw8c to nChw8c. */
static void resnet_plan_unit(resnet *m, resnet_unit *u, bool first)
{
    conv2d_shape s = { m->N, u->C, u->H, u->W, u->OC, u->K, u->K, u->stride, u->pad, u->OH, u->OW };
    size_t cb = 0, bb = 0;
    u->cp = m->ops->cnn->conv_plan_new(&s, first, !first, &cb);
    u->bp = m->ops->cnn->bn_plan_new(m->N, u->OC, u->OH, u->OW, RESNET_BN_EPS, u->relu, &bb);
    m->plan_bytes += cb + bb;
}

static void resnet_plan(resnet *m)
{
    resnet_acts *a = &m->acts;
    resnet_plan_unit(m, &a->stem, true);
    for (int i = 0; i < a->nblocks; i++) {
        resnet_block *b = &a->blocks[i];
        for (int k = 0; k < b->nunits; k++) resnet_plan_unit(m, &b->unit[k], false);
        if (b->has_down) resnet_plan_unit(m, &b->down, false);
    }
}

static bool resnet_on_gpu(const resnet *m) { return device_is_gpu(m->dev); }
/* The buffers the kernels read and write: host on the CPU, device copies on a GPU. */
static float *resnet_params(const resnet *m) { return resnet_on_gpu(m) ? m->w.params : m->pb.params; }
static float *resnet_grads(const resnet *m) { return resnet_on_gpu(m) ? m->w.grads : m->pb.grads; }
static float *resnet_stats(const resnet *m) { return resnet_on_gpu(m) ? m->dstats : m->stats; }

/* The GPU's copies: params, grads, moments, the statistics, the labels; host staging. */
static status resnet_init_device(resnet *m, bool train)
{
    const device *d = m->dev;
    TRY(device_buffers_init(d, &m->w, &m->pb, train));
    if (!(m->dstats = device_alloc(d, m->bt.total * sizeof(float), "batch-norm running statistics")) ||
        !(m->dev_labels = device_alloc(d, (size_t)m->N * sizeof(int32_t), "labels")) ||
        !(m->stage = malloc(2 * (size_t)m->N * sizeof(float))))
        return STATUS_NOMEM;
    device_upload(d, m->dstats, m->stats, m->bt.total * sizeof(float));
    return STATUS_OK;
}

status resnet_init(resnet *m, const resnet_config *cfg, int N, int H, int W, uint64_t seed, bool train)
{
    return resnet_init_on(m, cfg, N, H, W, seed, train, NULL);
}

status resnet_init_on(resnet *m, const resnet_config *cfg, int N, int H, int W, uint64_t seed, bool train,
                      const device *dev)
{
    memset(m, 0, sizeof *m);
    m->dev = dev;
    m->ops = dev ? dev->ops : &nn_ops_cpu;
    TRY(resnet_config_check(cfg));
    int total_stride = cfg->stem == RESNET_STEM_IMAGENET ? 32 : 8;
    if (N < 1) {
        log_error0("batch size %d must be at least 1", N);
        return STATUS_INPUT;
    }
    if (H < total_stride || W < total_stride) {
        log_error0("image size %dx%d (HxW) is too small for the %s stem: height and width must be at least %d, the "
                   "network's total stride (224x224 is the imagenet stem's size, 32x32 the cifar stem's)",
                   H, W, resnet_stem_name(cfg->stem), total_stride);
        return STATUS_INPUT;
    }
    m->cfg = *cfg;
    m->N = N;
    m->H = H;
    m->W = W;
    m->acts.nblocks = cfg->layers[0] + cfg->layers[1] + cfg->layers[2] + cfg->layers[3];
    if (!(m->acts.blocks = calloc((size_t)m->acts.nblocks, sizeof *m->acts.blocks))) return STATUS_NOMEM;
    resnet_build(m);
    TRY(resnet_check_views(m));
    TRY(param_buffers_init(&m->pb, &m->pt, train && !resnet_on_gpu(m)));
    if (!(m->stats = alloc_floats(m->bt.total, "batch-norm running statistics")) ||
        !(m->stats_saved = alloc_floats(m->bt.total, "batch-norm running statistics (copy)")))
        return STATUS_NOMEM;
    memset(m->stats, 0, m->bt.total * sizeof(float));
    memset(m->stats_saved, 0, m->bt.total * sizeof(float));
    resnet_init_weights(m, seed);
    TRY(device_arena(dev, resnet_layout_acts, m, &m->act_memory, &m->act_floats, "activations"));
    if (m->cfg.stem == RESNET_STEM_IMAGENET) {
        size_t bytes = (size_t)N * m->cfg.width * (size_t)m->acts.PH * (size_t)m->acts.PW * sizeof(int32_t);
        m->acts.pool_argmax = device_alloc(dev, bytes, "maxpool argmax");
        if (!m->acts.pool_argmax) return STATUS_NOMEM;
    }
    if (train) TRY(device_arena(dev, resnet_layout_grads, m, &m->grad_memory, &m->grad_floats, "activation gradients"));
    resnet_plan(m);
    if (!(m->labels = malloc((size_t)N * sizeof *m->labels))) return STATUS_NOMEM;
    if (resnet_on_gpu(m)) TRY(resnet_init_device(m, train));
    m->mean_loss = -1;
    m->loss_scale = 1.0f;
    return STATUS_OK;
}

static void resnet_free_unit(const resnet *m, resnet_unit *u)
{
    if (u->cp) m->ops->cnn->conv_plan_free(u->cp);
    if (u->bp) m->ops->cnn->bn_plan_free(u->bp);
}

void resnet_free(resnet *m)
{
    resnet_acts *a = &m->acts;
    if (a->blocks) {
        resnet_free_unit(m, &a->stem);
        for (int i = 0; i < a->nblocks; i++) {
            resnet_block *b = &a->blocks[i];
            for (int k = 0; k < b->nunits; k++) resnet_free_unit(m, &b->unit[k]);
            if (b->has_down) resnet_free_unit(m, &b->down);
        }
    }
    device_free(m->dev, m->act_memory);
    device_free(m->dev, m->grad_memory);
    device_free(m->dev, a->pool_argmax);
    device_free(m->dev, m->dstats);
    device_free(m->dev, m->dev_labels);
    device_buffers_free(m->dev, &m->w);
    free(m->stage);
    free(m->stats);
    free(m->stats_saved);
    free(m->labels);
    free(a->blocks);
    param_buffers_free(&m->pb);
    param_table_free(&m->pt);
    param_table_free(&m->bt);
    memset(m, 0, sizeof *m);
}

/* out = [relu](bn(conv(inp))); in training the running statistics move toward the batch's. */
static void unit_forward(resnet *m, resnet_unit *u, const float *inp, bool training)
{
    const cnn_ops *c = m->ops->cnn;
    const float *p = resnet_params(m);
    float *s = resnet_stats(m);
    c->conv_forward(u->cp, u->conv, inp, p + u->w, NULL);
    c->bn_forward(u->bp, u->out, u->conv, p + u->bn_w, p + u->bn_b, s + u->rmean, s + u->rvar, RESNET_BN_MOMENTUM,
                  training);
    if (training) c->add_scalar(s + u->nbt, 1.0f);
}

status resnet_forward(resnet *m, const float *images, const int32_t *labels, bool training)
{
    resnet_acts *a = &m->acts;
    int N = m->N, V = m->cfg.num_classes;
    m->can_backward = false;
    m->mean_loss = -1;
    for (int i = 0; labels && i < N; i++)
        if (labels[i] < -1 || labels[i] >= V) {
            log_error("image %d of the batch: label %d outside 0..%d (or -1 to ignore)", i, labels[i], V - 1);
            return STATUS_INPUT;
        }
    if (training && N * a->feat_HW < 2) {
        log_error("a training batch of %d image(s) leaves layer4's batch norm %d value(s) per channel; it needs at "
                  "least 2 (use a larger batch or larger images)", N, N * a->feat_HW);
        return STATUS_INPUT;
    }
    const nn_ops *k = m->ops;
    const cnn_ops *c = k->cnn;
    bool gpu = resnet_on_gpu(m);
    size_t nimg = (size_t)N * 3 * (size_t)m->H * (size_t)m->W;
    device_upload(m->dev, a->images, images, nimg * sizeof *images);
    unit_forward(m, &a->stem, a->images, training);                       /* conv1, bn1, relu */
    if (m->cfg.stem == RESNET_STEM_IMAGENET) {                            /* maxpool, in NCHW */
        const resnet_unit *st = &a->stem;
        float *x = a->nchw, *y = a->nchw + (unit_out_size(m, st) + 15) / 16 * 16;
        c->to_nchw(x, st->out, N, m->cfg.width, st->OH * st->OW);
        c->maxpool2d_forward(y, a->pool_argmax, x, N, m->cfg.width, st->OH, st->OW, 3, 2, 1, a->PH, a->PW);
        c->from_nchw(a->pool, y, N, m->cfg.width, a->PH * a->PW);
    }
    param_layer_time(&m->timer, 0, false);                                /* conv1, bn1 */
    for (int i = 0; i < a->nblocks; i++) {
        resnet_block *b = &a->blocks[i];
        size_t n = unit_out_size(m, &b->unit[b->nunits - 1]);
        for (int k = 0; k < b->nunits; k++)                                /* convK, bnK, relu but the last */
            unit_forward(m, &b->unit[k], k ? b->unit[k - 1].out : b->inp, training);
        const float *identity = b->inp;
        if (b->has_down) {                                                 /* downsample(x) */
            unit_forward(m, &b->down, b->inp, training);
            identity = b->down.out;
        }
        c->add_relu(b->out, identity, n);                                  /* relu(out + identity) */
        param_layer_time(&m->timer, i + 1, false);                         /* layerK.J */
    }
    const resnet_block *last = &a->blocks[a->nblocks - 1];
    c->to_nchw(a->nchw, last->out, N, a->feat_C, a->feat_HW);
    c->avgpool_global_forward(a->pooled, a->nchw, N, a->feat_C, a->feat_HW); /* avgpool, flatten */
    const float *p = resnet_params(m);
    k->matmul_forward(a->logits, a->pooled, p + m->fc_w, p + m->fc_b, N, a->feat_C, V, MATMUL_LAYOUT_OUT_IN); /* fc */
    if (!labels) return STATUS_OK;
    memcpy(m->labels, labels, (size_t)N * sizeof *labels);
    const int32_t *tgt = labels;
    const float *losses = a->losses;
    if (gpu) {
        device_upload(m->dev, m->dev_labels, labels, (size_t)N * sizeof *labels);
        tgt = m->dev_labels;
    }
    k->xent_forward(a->losses, a->xent_lse, a->logits, tgt, N, V, V);
    if (gpu) {
        device_download(m->dev, m->stage, a->losses, (size_t)N * sizeof(float));
        losses = m->stage;
    }
    double sum = 0;
    int counted = 0;
    for (int i = 0; i < N; i++)
        if (labels[i] >= 0) { sum += losses[i]; counted++; }
    m->mean_loss = counted ? (float)(sum / counted) : 0.0f;
    m->can_backward = training;
    return STATUS_OK;
}

/* dout is the gradient of u->out (after its ReLU when it has one). WRITES the input
 * gradient into dinp (skipped when NULL); dinp may be dout itself (dout is consumed
 * into gs.dbn before dinp is written). Adds the parameter gradients. */
static void unit_backward(resnet *m, resnet_unit *u, const float *inp, float *dinp, const float *dout)
{
    const cnn_ops *c = m->ops->cnn;
    const float *p = resnet_params(m);
    float *g = resnet_grads(m);
    c->bn_backward(u->bp, m->gs.dbn, g + u->bn_w, g + u->bn_b, dout, u->conv, p + u->bn_w, p + u->bn_b);
    c->conv_backward(u->cp, dinp, g + u->w, NULL, m->gs.dbn, inp);
}

/* gs.dblock holds d(b->out) on entry and d(b->inp) on return. */
static void block_backward(resnet *m, resnet_block *b)
{
    resnet_grad_scratch *s = &m->gs;
    resnet_unit *first = &b->unit[0], *last = &b->unit[b->nunits - 1];
    size_t n_out = unit_out_size(m, last);
    size_t n_in = (size_t)m->N * (size_t)first->C * (size_t)first->H * (size_t)first->W;
    const nn_ops *k = m->ops;
    k->zero(s->dsum, act_floats(m, n_out));
    k->cnn->relu_backward(s->dsum, b->out, s->dblock, n_out);              /* through relu(out) */
    if (b->has_down) unit_backward(m, &b->down, b->inp, s->dblock, s->dsum); /* dblock = d(b->inp) via downsample */
    else k->copy(s->dblock, s->dsum, act_floats(m, n_in));                 /* identity branch */
    const float *dout = s->dsum;
    for (int k = b->nunits - 1; k > 0; k--) {                              /* main branch, last unit first */
        unit_backward(m, &b->unit[k], b->unit[k - 1].out, s->dmain, dout);
        dout = s->dmain;
    }
    unit_backward(m, first, b->inp, s->dmain, dout);
    k->cnn->residual_backward(s->dblock, NULL, s->dmain, n_in);            /* both branches meet at b->inp */
}

void resnet_backward(resnet *m)
{
    CHECK(m->grad_memory && m->can_backward, "resnet_backward needs train=true and a training forward with labels");
    resnet_acts *a = &m->acts;
    resnet_grad_scratch *s = &m->gs;
    int N = m->N, V = m->cfg.num_classes;
    const nn_ops *k = m->ops;
    const cnn_ops *c = k->cnn;
    bool gpu = resnet_on_gpu(m);
    const float *p = resnet_params(m);
    float *g = resnet_grads(m), *dlosses = gpu ? m->stage + N : s->dlosses;
    int counted = 0;
    for (int i = 0; i < N; i++) counted += m->labels[i] >= 0;
    /* loss_scale 1: exactly 1/counted; a power of two (fp16's scaler) scales exactly */
    for (int i = 0; i < N; i++) dlosses[i] = counted ? m->loss_scale / (float)counted : 0.0f;
    if (gpu) device_upload(m->dev, s->dlosses, dlosses, (size_t)N * sizeof(float));
    k->zero(s->dlogits, (size_t)N * (size_t)V);
    k->xent_backward(s->dlogits, a->logits, a->xent_lse, gpu ? m->dev_labels : m->labels, s->dlosses, N, V, V);
    k->zero(s->dpooled, (size_t)N * (size_t)a->feat_C);
    k->matmul_backward(s->dpooled, g + m->fc_w, g + m->fc_b, s->dlogits, a->pooled, p + m->fc_w, N, a->feat_C, V,
                       MATMUL_LAYOUT_OUT_IN);
    size_t nfeat = (size_t)N * (size_t)a->feat_C * (size_t)a->feat_HW;
    k->zero(a->nchw, nfeat);
    c->avgpool_global_backward(a->nchw, s->dpooled, N, a->feat_C, a->feat_HW);
    c->from_nchw(s->dblock, a->nchw, N, a->feat_C, a->feat_HW);
    param_layer_done(&m->hook, a->nblocks + 1);                            /* fc */
    param_layer_time(&m->timer, a->nblocks + 1, true);
    for (int i = a->nblocks - 1; i >= 0; i--) {
        block_backward(m, &a->blocks[i]);
        param_layer_done(&m->hook, i + 1);                                 /* layerK.J */
        param_layer_time(&m->timer, i + 1, true);
    }
    const float *dstem = s->dblock;                                        /* d(layer1's input) */
    if (m->cfg.stem == RESNET_STEM_IMAGENET) {                             /* maxpool backward, in NCHW */
        const resnet_unit *st = &a->stem;
        size_t n_stem = unit_out_size(m, st);
        float *dx = a->nchw, *dy = a->nchw + (n_stem + 15) / 16 * 16;
        c->to_nchw(dy, s->dblock, N, m->cfg.width, a->PH * a->PW);
        k->zero(dx, n_stem);
        c->maxpool2d_backward(dx, dy, a->pool_argmax, N, m->cfg.width, st->OH, st->OW, 3, 2, 1, a->PH, a->PW);
        c->from_nchw(s->dmain, dx, N, m->cfg.width, st->OH * st->OW);
        dstem = s->dmain;
    }
    unit_backward(m, &a->stem, a->images, NULL, dstem);
    param_layer_done(&m->hook, 0);                                         /* conv1, bn1 */
    param_layer_time(&m->timer, 0, true);
}

static double unit_flops(const resnet_unit *u)
{
    return 2.0 * u->OC * u->OH * u->OW * (double)u->C * u->K * u->K;
}

double resnet_flops_per_image(const resnet *m)
{
    const resnet_acts *a = &m->acts;
    double f = unit_flops(&a->stem) + 2.0 * a->feat_C * m->cfg.num_classes;
    for (int i = 0; i < a->nblocks; i++) {
        const resnet_block *b = &a->blocks[i];
        for (int k = 0; k < b->nunits; k++) f += unit_flops(&b->unit[k]);
        if (b->has_down) f += unit_flops(&b->down);
    }
    return 3.0 * f;
}
