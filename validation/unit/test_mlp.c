/* test_mlp — the MLP family (libcore/nn/mlp.h) through model.h, against a specification
 * in double written here from the kernels' own references (matmul_forward_ref,
 * relu_forward_ref, xent_forward_ref and their backwards, kernels/cpu):
 *   (a) shapes: the parameter table is nn.Sequential's state_dict (names, (out, in)
 *       weights, layer indices, decay on weights only), logits (B, classes), no state,
 *       images in and T = 0, SGD-style classifier facts (img/s, classes);
 *   (b) initialisation: every value inside nn.Linear's bound 1/sqrt(in), the variance of
 *       U(-b, b), a function of the seed;
 *   (c) forward: the logits and the mean loss against the double specification;
 *   (d) backward: every gradient of model_backward against central differences of the
 *       double specification's loss (the whole model, every parameter), and the
 *       specification's own backward against the same differences; with an ignored
 *       label (-1), with 0, 1 and 2 hidden layers;
 *   (e) backward ADDS; a micro-batch of 3 in a model built for 6 is bit for bit a model
 *       built for 3; a label out of range is refused;
 *   (f) [model] keys: the preset, every override, mlp_layers = 0, keys of other
 *       families refused both ways.
 * Float tolerances come from the longest chain of reductions the value passed through
 * (kc_rtol_f32 of the summed reduction lengths), applied to the tensor's largest value:
 * rounding errors of a sum scale with the magnitude of its terms, not of its result. */
#include "../check.h"

#include "cpu/matmul.h"
#include "cpu/relu.h"
#include "cpu/xent.h"
#include "nn/model.h"

static const config_key schema[] = { MODEL_CONFIG_KEYS };

__attribute__((format(printf, 1, 2)))
static const char *fmt(const char *f, ...)
{
    static char bufs[4][256];  /* rotating: a result may be an argument of the next call */
    static int next;
    char *buf = bufs[next++ % 4];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof bufs[0], f, ap);
    va_end(ap);
    return buf;
}

/* The spec of `name` with the assignments (NULL-terminated "model.key=value" list). */
static status spec_of(model_spec *s, const char *name, const char *const *sets)
{
    config cfg;
    char a[128];
    CHECK(config_init(&cfg, schema, (int)(sizeof schema / sizeof schema[0])) == STATUS_OK, "model schema");
    snprintf(a, sizeof a, "model.name=%s", name);
    CHECK(config_set(&cfg, a) == STATUS_OK, "model.name");
    for (; sets && *sets; sets++) CHECK(config_set(&cfg, *sets) == STATUS_OK, "an assignment of the test");
    return model_spec_from_config(s, &cfg);
}

/* ---- the specification in double ---- */

typedef struct spec_mlp {
    int B, D, K, nl;          /* batch, inputs, classes, linear layers */
    int in[8], out[8];        /* features of linear layer i */
    size_t w[8], b[8];        /* offsets of layers.{2i}.weight and .bias */
    double *P;                /* (total) the parameters in double */
    const double *x;          /* (B, D) images */
    const int32_t *labels;    /* (B) */
    double *act[8];           /* (B, out[i]) layer outputs after the ReLU (logits last) */
    double *losses, *lse;     /* (B) */
} spec_mlp;

static double spec_forward(void *ctx)
{
    spec_mlp *s = ctx;
    const double *x = s->x;
    for (int i = 0; i < s->nl; i++) {
        matmul_forward_ref(s->act[i], x, s->P + s->w[i], s->P + s->b[i], s->B, s->in[i], s->out[i],
                           MATMUL_LAYOUT_OUT_IN);
        if (i < s->nl - 1) relu_forward_ref(s->act[i], s->act[i], (size_t)s->B * s->out[i]);
        x = s->act[i];
    }
    xent_forward_ref(s->losses, s->lse, x, s->labels, s->B, s->K, s->K);
    double sum = 0;
    int n = 0;
    for (int i = 0; i < s->B; i++)
        if (s->labels[i] >= 0) sum += s->losses[i], n++;
    return sum / n;
}

/* The gradient of the mean loss into G (total, zeroed here), after spec_forward. */
static void spec_backward(spec_mlp *s, double *G, size_t total)
{
    int widest = s->K;
    for (int i = 0; i < s->nl; i++) widest = s->in[i] > widest ? s->in[i] : widest;
    size_t big = (size_t)s->B * (size_t)widest;
    double *dl = calloc((size_t)s->B, sizeof *dl), *dout = calloc(big, sizeof *dout), *dx = calloc(big, sizeof *dx);
    memset(G, 0, total * sizeof *G);
    int n = 0;
    for (int i = 0; i < s->B; i++) n += s->labels[i] >= 0;
    for (int i = 0; i < s->B; i++) dl[i] = 1.0 / n;
    xent_backward_ref(dout, s->act[s->nl - 1], s->lse, s->labels, dl, s->B, s->K, s->K);
    for (int i = s->nl - 1; i >= 0; i--) {
        const double *inp = i ? s->act[i - 1] : s->x;
        memset(dx, 0, big * sizeof *dx);
        matmul_backward_ref(dx, G + s->w[i], G + s->b[i], dout, inp, s->P + s->w[i], s->B, s->in[i], s->out[i],
                            MATMUL_LAYOUT_OUT_IN);
        if (!i) break;
        memset(dout, 0, big * sizeof *dout);
        relu_backward_ref(dout, inp, dx, (size_t)s->B * s->in[i]);
    }
    free(dl), free(dout), free(dx);
}

/* ---- (a) - (e) on one shape ---- */

typedef struct shape {
    int image, hidden, layers, classes, B;
    bool ignore_one;          /* label 1 is -1 */
} shape;

static void test_shape(kc *k, const shape *sh)
{
    char tag[96], hid[48], lay[48], cls[48], img[48];
    snprintf(tag, sizeof tag, "mlp %dx%d hidden %d layers %d classes %d B=%d%s", sh->image, sh->image, sh->hidden,
             sh->layers, sh->classes, sh->B, sh->ignore_one ? " (one label -1)" : "");
    snprintf(hid, sizeof hid, "model.mlp_hidden=%d", sh->hidden);
    snprintf(lay, sizeof lay, "model.mlp_layers=%d", sh->layers);
    snprintf(cls, sizeof cls, "model.num_classes=%d", sh->classes);
    snprintf(img, sizeof img, "model.image_size=%d", sh->image);
    const char *sets[] = { hid, lay, cls, img, NULL };
    model_spec spec;
    CHECK(spec_of(&spec, "mlp", sets) == STATUS_OK, "the test's spec resolves");
    model m;
    CHECK(model_init(&m, &spec, sh->B, 0, 5, true) == STATUS_OK, "model_init");
    const param_table *pt = model_params(&m);
    int nl = sh->layers + 1, D = 3 * sh->image * sh->image, B = sh->B, K = sh->classes;

    /* (a) nn.Sequential's state_dict: layers.{2i}.weight (out, in), layers.{2i}.bias (out) */
    spec_mlp s = { .B = B, .D = D, .K = K, .nl = nl };
    bool names = pt->count == 2 * nl;
    for (int i = 0; i < nl && names; i++) {
        char n[64];
        s.in[i] = i ? sh->hidden : D;
        s.out[i] = i == nl - 1 ? K : sh->hidden;
        snprintf(n, sizeof n, "layers.%d.weight", 2 * i);
        int w = param_find(pt, n);
        snprintf(n, sizeof n, "layers.%d.bias", 2 * i);
        int b = param_find(pt, n);
        names = w == 2 * i && b == 2 * i + 1 && pt->entries[w].ndim == 2 &&
                pt->entries[w].shape[0] == (size_t)s.out[i] && pt->entries[w].shape[1] == (size_t)s.in[i] &&
                pt->entries[b].ndim == 1 && pt->entries[b].shape[0] == (size_t)s.out[i] &&
                pt->entries[w].layer == i && pt->entries[b].layer == i && pt->entries[w].decay &&
                !pt->entries[b].decay;
        if (names) s.w[i] = pt->entries[w].offset, s.b[i] = pt->entries[b].offset;
    }
    kc_report(k, names, fmt("%s: table = nn.Sequential's state_dict (layers.{2i}.weight (out, in), .bias; "
                            "layer i; decay on weights)", tag), pt->count);
    if (!names) { model_free(&m); return; }
    kc_report(k, model_spec_images(&spec) && m.T == 0 && model_num_classes(&spec) == K &&
                 model_vocab_size(&spec) == 0 && !model_state_table(&m) && !model_state(&m) &&
                 !strcmp(model_unit(&m), "img") && model_units_per_step(&m) == B,
              fmt("%s: images in (T = 0), %d classes, no state, throughput in img", tag, K), 0);

    /* (b) nn.Linear's bound, per tensor */
    double worst = 0;
    for (int e = 0; e < pt->count; e++) {
        double bound = 1.0 / sqrt((double)s.in[pt->entries[e].layer]);
        for (size_t j = 0; j < pt->entries[e].count; j++)
            { double r = fabs(m.base->pb.params[pt->entries[e].offset + j]) / bound; worst = r > worst ? r : worst; }
    }
    kc_report(k, worst <= 1 && worst > 0.5, fmt("%s: every initial value within 1/sqrt(in)", tag), worst);

    /* the batch: images in [-1, 1), labels uniform */
    model_batch b;
    CHECK(model_batch_init(&b, &m) == STATUS_OK, "batch");
    kc_uniform(k, b.images, (size_t)B * D, -1, 1);
    for (int i = 0; i < B; i++) b.targets[i] = (int32_t)rng_below(&k->r, (uint32_t)K);
    if (sh->ignore_one) b.targets[1] = -1;

    /* (c) forward */
    size_t total = pt->total;
    double *x = kc_dfrom(b.images, (size_t)B * D);
    s.P = kc_dfrom(m.base->pb.params, total);
    s.x = x, s.labels = b.targets;
    for (int i = 0; i < nl; i++) s.act[i] = kc_dzero((size_t)B * s.out[i]);
    s.losses = kc_dzero((size_t)B), s.lse = kc_dzero((size_t)B);
    double loss_ref = spec_forward(&s);
    size_t chain = (size_t)D + (size_t)sh->hidden * sh->layers + (size_t)K + (size_t)B;
    double tol = kc_rtol_f32(chain);
    CHECK(model_forward(&m, &b, true) == STATUS_OK, "forward");
    int V = 0;
    const float *logits = model_class_logits(&m, &V);
    kc_report(k, logits && V == K, fmt("%s: model_class_logits gives (B, %d)", tag, K), V);
    const double *lref = s.act[nl - 1];
    kc_close(k, logits, lref, (size_t)B * K, tol * kc_dmaxabs(lref, (size_t)B * K), tol,
             fmt("%s: logits vs the double specification", tag));
    kc_report(k, fabs(model_loss(&m) - loss_ref) <= tol * (1 + fabs(loss_ref)),
              fmt("%s: mean loss %.6f vs %.6f", tag, model_loss(&m), loss_ref), fabs(model_loss(&m) - loss_ref));

    /* (d) backward against central differences of the whole model's loss, per tensor */
    param_zero_grads(&m.base->pb, pt);
    model_backward(&m);
    double *num = kc_dzero(total), *G = kc_dzero(total);
    kc_numeric_grad(s.P, total, spec_forward, &s, num);
    spec_forward(&s);
    spec_backward(&s, G, total);
    for (int e = 0; e < pt->count; e++) {
        const param_entry *pe = &pt->entries[e];
        const double *ne = num + pe->offset;
        kc_close_d(k, G + pe->offset, ne, pe->count, 1e-7, 1e-6,
                   fmt("%s: specification's d%s vs central differences", tag, pe->name));
        kc_close(k, m.base->pb.grads + pe->offset, ne, pe->count, tol * kc_dmaxabs(ne, pe->count), tol,
                 fmt("%s: model_backward's d%s vs central differences", tag, pe->name));
    }

    /* (e) backward adds: a second backward of the same forward doubles every gradient exactly */
    float *once = malloc(total * sizeof *once);
    memcpy(once, m.base->pb.grads, total * sizeof *once);
    model_backward(&m);
    bool twice = true;
    for (size_t j = 0; j < total; j++) twice &= m.base->pb.grads[j] == 2 * once[j];
    kc_report(k, twice, fmt("%s: backward ADDS (a second one doubles every gradient bit for bit)", tag), 0);

    free(once), free(num), free(G), free(x), free(s.P), free(s.losses), free(s.lse);
    for (int i = 0; i < nl; i++) free(s.act[i]);
    model_batch_free(&b);
    model_free(&m);
}

/* A model built for 6 samples running micro-batches of 3 is the model built for 3. */
static void test_micro_batch(kc *k)
{
    const char *sets[] = { "model.image_size=3", "model.mlp_hidden=9", "model.mlp_layers=2", NULL };
    model_spec spec;
    CHECK(spec_of(&spec, "mlp", sets) == STATUS_OK, "spec");
    model big, small;
    model_batch bb, sb;
    CHECK(model_init(&big, &spec, 6, 0, 3, true) == STATUS_OK && model_init(&small, &spec, 3, 0, 3, true) == STATUS_OK,
          "models");
    CHECK(model_batch_init(&bb, &big) == STATUS_OK && model_batch_init(&sb, &small) == STATUS_OK, "batches");
    model_batch_synthetic(&bb, &big, 11);
    memcpy(sb.images, bb.images, 3 * 27 * sizeof *sb.images);
    memcpy(sb.targets, bb.targets, 3 * sizeof *sb.targets);
    const param_table *pt = model_params(&big);
    bool ok = model_set_micro_batch(&big, 3) == STATUS_OK;
    for (int step = 0; step < 2 && ok; step++) {  /* the second time after a full-size forward */
        param_zero_grads(&big.base->pb, pt);
        param_zero_grads(&small.base->pb, pt);
        ok = model_forward(&big, &bb, true) == STATUS_OK && model_forward(&small, &sb, true) == STATUS_OK;
        model_backward(&big);
        model_backward(&small);
        ok = ok && model_loss(&big) == model_loss(&small) &&
             !memcmp(big.base->pb.grads, small.base->pb.grads, pt->total * sizeof(float));
        ok = ok && model_set_micro_batch(&big, 6) == STATUS_OK && model_forward(&big, &bb, true) == STATUS_OK &&
             model_set_micro_batch(&big, 3) == STATUS_OK;
    }
    kc_report(k, ok, "mlp built for 6, run at 3 (model_set_micro_batch): loss and gradients bit for bit those of "
                     "the model built for 3", 0);

    /* a label out of range is refused, naming the image */
    bb.targets[4] = 10;
    CHECK(model_set_micro_batch(&big, 6) == STATUS_OK, "back to 6");
    kc_report(k, model_forward(&big, &bb, true) == STATUS_INPUT, "a label of 10 with 10 classes: STATUS_INPUT", 0);
    model_batch_free(&bb), model_batch_free(&sb);
    model_free(&big), model_free(&small);
}

/* The variance of U(-b, b) is b^2 / 3; seeds give other weights, the same seed the same. */
static void test_init(kc *k)
{
    model_spec spec;
    CHECK(spec_of(&spec, "mlp", NULL) == STATUS_OK, "preset");
    model a, b, c;
    CHECK(model_init(&a, &spec, 2, 0, 1, false) == STATUS_OK && model_init(&b, &spec, 2, 0, 1, false) == STATUS_OK &&
          model_init(&c, &spec, 2, 0, 2, false) == STATUS_OK, "models");
    const param_entry *w = &model_params(&a)->entries[0];  /* layers.0.weight (64, 192) */
    const float *p = a.base->pb.params + w->offset;
    double var = 0, mean = 0, bound2 = 1.0 / 192;
    for (size_t j = 0; j < w->count; j++) mean += p[j], var += (double)p[j] * p[j];
    mean /= (double)w->count, var /= (double)w->count;
    /* 12288 draws: the variance estimate's standard error is ~0.6% of b^2/3 */
    kc_report(k, fabs(var / (bound2 / 3) - 1) < 0.03 && fabs(mean) < 0.01 / sqrt(192),
              "layers.0.weight: mean ~ 0 and variance (1/sqrt(192))^2 / 3 of nn.Linear's U(-b, b)",
              var / (bound2 / 3));
    size_t n = model_params(&a)->total * sizeof(float);
    kc_report(k, !memcmp(a.base->pb.params, b.base->pb.params, n) && memcmp(a.base->pb.params, c.base->pb.params, n),
              "initial weights: a function of the seed", 0);
    model_free(&a), model_free(&b), model_free(&c);
}

/* ---- (f) the [model] keys ---- */

static void test_keys(kc *k)
{
    model_spec s;
    bool ok = spec_of(&s, "mlp", NULL) == STATUS_OK && s.family == MODEL_FAMILY_MLP && s.mlp.hidden == 64 &&
              s.mlp.layers == 1 && s.mlp.num_classes == 10 && s.image_size == 8;
    kc_report(k, ok, "preset mlp: hidden 64, 1 hidden layer, 10 classes, 8x8 images", 0);
    const char *lr[] = { "model.mlp_layers=0", "model.mlp_hidden=0", NULL };
    ok = spec_of(&s, "mlp", lr) == STATUS_OK && s.mlp.layers == 0 && s.mlp.hidden == 64;
    kc_report(k, ok, "model.mlp_layers = 0 is logistic regression; model.mlp_hidden = 0 the preset's", 0);
    const char *all[] = { "model.mlp_layers=3", "model.mlp_hidden=32", "model.num_classes=4", "model.image_size=28",
                          NULL };
    ok = spec_of(&s, "mlp", all) == STATUS_OK && s.mlp.layers == 3 && s.mlp.hidden == 32 && s.mlp.num_classes == 4 &&
         s.image_size == 28;
    kc_report(k, ok, "every mlp key overrides the preset", 0);
    const char *preset_layers[] = { "model.mlp_layers=-1", NULL };
    kc_report(k, spec_of(&s, "gpt2-tiny", preset_layers) == STATUS_OK,
              "model.mlp_layers = -1 (the preset's) on gpt2-tiny: accepted", 0);
    static const struct { const char *name, *set; } bad[] = {
        { "mlp", "model.n_layer=2" }, { "mlp", "model.stem=cifar" }, { "mlp", "model.width=32" },
        { "gpt2-tiny", "model.mlp_layers=0" }, { "resnet18-cifar", "model.mlp_hidden=16" },
        { "bert-tiny", "model.num_classes=3" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *one[] = { bad[i].set, NULL };
        kc_report(k, spec_of(&s, bad[i].name, one) == STATUS_INPUT,
                  fmt("%s with %s: refused (a key of another family)", bad[i].name, bad[i].set), 0);
    }
    model_spec g, r;
    ok = spec_of(&s, "mlp", NULL) == STATUS_OK && spec_of(&g, "gpt2-tiny", NULL) == STATUS_OK &&
         spec_of(&r, "resnet18-cifar", NULL) == STATUS_OK &&
         !model_spec_images(&g) && model_spec_images(&r) && !strcmp(model_family_name(&r), "ResNet") &&
         model_spec_check_grid(&s, 2, 1) == STATUS_INPUT && model_spec_check_grid(&s, 1, 2) == STATUS_INPUT;
    kc_report(k, ok, "model_spec_images: ResNet and MLP yes, GPT-2 no; the MLP refuses tp and pp", 0);
}

int main(void)
{
    kc k;
    kc_init(&k, 2024);
    static const shape shapes[] = {
        { 3, 5, 2, 4, 5, true },    /* D = 27, two hidden layers */
        { 2, 7, 1, 10, 3, false },  /* D = 12, the preset's depth */
        { 2, 5, 0, 3, 4, false },   /* logistic regression */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_shape(&k, &shapes[i]);
    test_micro_batch(&k);
    test_init(&k);
    test_keys(&k);
    printf("%s - test_mlp: %d failure(s)\n", k.failures ? "FAIL" : "ok", k.failures);
    return k.failures ? 1 : 0;
}
