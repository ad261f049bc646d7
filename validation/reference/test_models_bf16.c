/* test_models_bf16 — --precision bf16 on the CPU.
 *
 * 1. GPT-2 124M against PyTorch's CPU autocast (the golden-test method of the GPU's bf16 test, validation/gpu/
 * test_models_cuda.c): the same initial weights and batch train 10 AdamW steps in
 * Nebula (matmul operands rounded to bf16, fp32 accumulation, fp32 master weights and
 * optimizer) and in torch.autocast("cpu", torch.bfloat16) through
 * validation/reference/gpt2_autocast_ref.py; each loss must agree within 1% relative,
 * about 2.5 bf16 ulps (2^-8 = 0.39%): both round the same fp32 operands to bf16, but
 * autocast also keeps the matmul outputs in bf16 and the two sum in different orders.
 *
 * The trajectory alone cannot tell bf16 from fp32 (they differ by less than 1%), so the
 * first forward is also run in fp32: the two losses must differ (bf16 rounding moves
 * GPT-2's initial loss by ~1e-5 relative), and by less than 1%.
 *
 * 2. Every family in bf16 against the same model in fp32 from the same weights and batch
 *    (families_bf16_vs_fp32 below: ResNet-18 CIFAR B=4, ResNet-50 at 64x64 B=2, GPT-2 124M,
 *    BERT-tiny): the loss within 1%, the gradient within bounds, and the first weight's
 *    gradient not bit-identical (the products did run in bf16). For ResNet-18:
 *    A freshly initialised ResNet's gradient is itself sensitive to bf16: PyTorch's own
 *    CPU autocast moves torchvision's resnet18 (CIFAR stem) gradient by 0.26-0.28 in
 *    relative L2 norm at B = 4, 16 and 32, and single convolution weights by up to 0.37
 *    (measured); Nebula's bf16, activations bf16 between layers as under autocast,
 *    moves them by 0.30 and 0.36. The bounds, 0.5 for the
 *    whole gradient and 0.6 for any convolution's weight, pass that and fail a wrong
 *    kernel (an O(1) error: relative L2 >= 1).
 *
 * --skip-pytorch (make check; the whole test is in the long tier) leaves out part 1's
 * comparison with PyTorch (half the time): the first loss against fp32's, the 10 bf16
 * steps lowering the loss, and part 2 remain. Below isa level avx512_bf16 bf16 is
 * refused on the CPU: SKIP (77). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/device.h"
#include "nn/gpt2.h"
#include "nn/model.h"
#include "nn/bert.h"
#include "nn/resnet.h"
#include "nn/optim.h"
#include "base/rng.h"
#include "cpu/isa.h"
#include "ckpt/tool/safetensors.h"
#include "../check.h"
#include "../gpt2_golden.h"

enum { B = 4, T = 64 };

/* The first forward's loss in fp32 from the same initialisation. */
static float fp32_loss(const gpt2_config *cfg, const int32_t *tokens, const int32_t *targets)
{
    gpt2 *m = calloc(1, sizeof *m);
    if (!m || gpt2_init(m, cfg, B, T, 1234, false) != STATUS_OK || gpt2_forward(m, tokens, targets) != STATUS_OK)
        return NAN;
    float loss = m->mean_loss;
    gpt2_free(m);
    free(m);
    return loss;
}

/* Part 2 for one model: bf16 against fp32 from the same weights and batch, one training
 * forward and backward each; the loss within 1%, the whole gradient within `all` and each
 * weight matrix or filter bank within `worst` (relative L2), and the first weight's gradient
 * not bit-identical. Returns the number of failed checks. */
static int bf16_vs_fp32(const model_spec *spec, int RB, int RT, double all_bound, double worst_bound,
                        double eval_bound)
{
    device d16, d32;
    if (device_open(&d16, DEVICE_KIND_CPU, PRECISION_BF16, -1) != STATUS_OK ||
        device_open(&d32, DEVICE_KIND_CPU, PRECISION_FP32, -1) != STATUS_OK)
        return 1;
    model *m16 = calloc(1, sizeof *m16), *m32 = calloc(1, sizeof *m32);
    if (model_init_on(m16, spec, RB, RT, 1234, true, &d16) != STATUS_OK ||
        model_init_on(m32, spec, RB, RT, 1234, true, &d32) != STATUS_OK)
        return 1;
    model_batch b;
    if (model_batch_init(&b, m32) != STATUS_OK) return 1;
    model_batch_synthetic(&b, m32, 5);
    const param_table *pt = model_params(m32);
    param_buffers *p16 = model_buffers(m16), *p32 = model_buffers(m32);
    if (model_forward(m16, &b, true) != STATUS_OK || model_forward(m32, &b, true) != STATUS_OK) return 1;
    model_backward(m16);
    model_backward(m32);
    int fails = 0;
    const char *n = spec->name;
    double lrel = fabs((double)model_loss(m16) - model_loss(m32)) / fabs((double)model_loss(m32));
    bool ok = lrel < 1e-2;
    printf("%s  %s bf16 loss %.6f vs fp32 %.6f: %.2e relative (< 1e-2)\n", ok ? "ok  " : "FAIL", n, model_loss(m16),
           model_loss(m32), lrel);
    fails += !ok;
    double worst = 0, all = kc_rel_l2(p16->grads, p32->grads, pt->total);
    const char *wname = "";
    for (int i = 0; i < pt->count; i++) {
        const param_entry *e = &pt->entries[i];
        double r = kc_rel_l2(p16->grads + e->offset, p32->grads + e->offset, e->count);
        if (e->ndim >= 2 && !(r <= worst)) worst = r, wname = e->name;
    }
    if (all_bound > 0) {
        ok = all < all_bound && worst < worst_bound;
        printf("%s  %s bf16 gradient vs fp32: relative L2 %.3f (< %.2g), worst weight %.3f (%s; < %.2g)\n",
               ok ? "ok  " : "FAIL", n, all, all_bound, worst, wname, worst_bound);
        fails += !ok;
    } else {
        printf("#     %s bf16 gradient vs fp32: relative L2 %.3f, worst weight %.3f (%s): not bounded, see above\n", n,
               all, worst, wname);
    }
    const param_entry *c1 = &pt->entries[0];
    ok = memcmp(p16->grads + c1->offset, p32->grads + c1->offset, c1->count * sizeof(float)) != 0;
    printf("%s  %s %s gradient differs from fp32's: the products ran in bf16\n", ok ? "ok  " : "FAIL", n, c1->name);
    fails += !ok;
    if (eval_bound > 0) {  /* a CNN's eval forward: batch norm on the running statistics */
        int nc16 = 0, nc32 = 0;
        if (model_forward(m16, &b, false) != STATUS_OK || model_forward(m32, &b, false) != STATUS_OK) return fails + 1;
        const float *l16 = model_class_logits(m16, &nc16), *l32 = model_class_logits(m32, &nc32);
        double r = l16 && l32 && nc16 == nc32 ? kc_rel_l2(l16, l32, (size_t)RB * nc32) : INFINITY;
        ok = r < eval_bound && r > 0;
        printf("%s  %s bf16 eval logits vs fp32: relative L2 %.3f (< %.2g, > 0)\n", ok ? "ok  " : "FAIL", n, r,
               eval_bound);
        fails += !ok;
    }
    model_batch_free(&b);
    model_free(m16);
    model_free(m32);
    free(m16);
    free(m32);
    device_close(&d16);
    device_close(&d32);
    return fails;
}

/* Part 2 over the three families. ResNet-18: the bounds of the header, and its eval
 * logits (batch norm on the running statistics one step from their start) within 0.1.
 * ResNet-50 (imagenet stem, maxpool, bottleneck blocks, 64x64 images, B=2): its gradient at
 * initialisation is chaotic, and PyTorch's own autocast moves torchvision's resnet50
 * gradient by 1.38 and 1.32 relative L2 at B=2 and 8 (measured; Nebula 1.5-1.6, with fp32 or
 * bf16 activations alike), so only its loss and its eval logits are bounded: autocast moves
 * those logits by 0.06 in the same setup (one training forward, then eval), Nebula by
 * 0.14-0.18; the bound is 0.3, a wrong kernel gives O(1). The transformers:
 * a bf16 product with both operands rounded (8 significant bits, rms relative rounding
 * ~2^-8/sqrt(3) each) is off by ~0.3% rms, and the errors of the ~6 GEMMs a gradient
 * passes per block add in quadrature: sqrt(6 L) x 0.3% for L blocks (GPT-2 124M, 12
 * blocks: 2.5%; BERT-tiny, 2: 1%). The bounds are four times that, ten for single weights
 * (fewer terms, larger spread); a wrong kernel gives O(1). */
static int families_bf16_vs_fp32(void)
{
    int fails = 0;
    model_spec r = { .family = MODEL_FAMILY_RESNET, .image_size = 32 };
    snprintf(r.name, sizeof r.name, "resnet18-cifar");
    if (resnet_config_named(&r.resnet, r.name) != STATUS_OK) return 1;
    fails += bf16_vs_fp32(&r, 4, 0, 0.5, 0.6, 0.1);
    /* ResNet-50: the imagenet stem (maxpool between bf16 tensors) and bottleneck blocks */
    model_spec r50 = { .family = MODEL_FAMILY_RESNET, .image_size = 64 };
    snprintf(r50.name, sizeof r50.name, "resnet50");
    if (resnet_config_named(&r50.resnet, r50.name) != STATUS_OK) return 1;
    fails += bf16_vs_fp32(&r50, 2, 0, 0, 0, 0.3);
    model_spec g = { .family = MODEL_FAMILY_GPT2 };
    snprintf(g.name, sizeof g.name, "gpt2");
    if (gpt2_config_named(&g.gpt2, g.name) != STATUS_OK) return 1;
    fails += bf16_vs_fp32(&g, 2, 64, 0.1, 0.25, 0);
    model_spec t = { .family = MODEL_FAMILY_BERT };
    snprintf(t.name, sizeof t.name, "bert-tiny");
    if (bert_config_named(&t.bert, t.name) != STATUS_OK) return 1;
    fails += bf16_vs_fp32(&t, 4, 64, 0.04, 0.1, 0);
    return fails;
}

int main(int argc, char **argv)
{
    bool torch = !(argc > 1 && !strcmp(argv[1], "--skip-pytorch"));
    if (isa_active() < ISA_AVX512_BF16) {
        printf("SKIP: bf16 on the CPU needs isa level avx512_bf16 or amx (this process runs %s)\n",
               isa_name(isa_active()));
        return 77;
    }
    gpt2_config cfg;
    if (gpt2_config_named(&cfg, "gpt2") != STATUS_OK) return 1;
    device dev;
    if (device_open(&dev, DEVICE_KIND_CPU, PRECISION_BF16, -1) != STATUS_OK) return 1;
    gpt2 *m = calloc(1, sizeof *m);
    device_optim opt;
    if (gpt2_init_on(m, &cfg, B, T, 1234, true, &dev) != STATUS_OK || device_optim_init(&opt, &dev, &m->pt) != STATUS_OK)
        return 1;
    /* m->pb.params is trained in place on the CPU: keep the initialisation for PyTorch */
    float *init = malloc(m->pt.total * sizeof *init);
    memcpy(init, m->pb.params, m->pt.total * sizeof *init);
    int32_t *tokens = malloc(B * T * sizeof *tokens), *targets = malloc(B * T * sizeof *targets);
    golden_batch(tokens, targets, B * T, cfg.vocab_size, 5);
    /* 1e-4, not the GPU test's 6e-4: on 256 random tokens 6e-4 overshoots (the loss
     * rises at steps 3-5) and any two bf16 roundings part by percents there — PyTorch's
     * own autocast leaves its fp32 trajectory by 1.5%, Nebula's by 4% (measured); at 1e-4
     * the loss falls every step and the two agree to 0.13 of the bound. */
    const double lr = 1e-4;
    float traj[GOLDEN_STEPS];
    if (golden_train(m, &opt, tokens, targets, lr, traj)) return 1;  /* host buffers */
    printf("# gpt2 124M B=%d T=%d bf16 on %s: losses", B, T, dev.describe);
    for (int s = 0; s < GOLDEN_STEPS; s++) printf(" %.4f", traj[s]);
    printf("\n");

    int fails = 0;
    float l32 = fp32_loss(&cfg, tokens, targets);
    double rel = fabs((double)traj[0] - l32) / fabs((double)l32);
    bool moved = rel > 0 && rel < 1e-2;
    printf("%s  the first loss in bf16 (%.6f) differs from fp32's (%.6f) by %.2e relative: bf16 is in use, "
           "within 1%%\n", moved ? "ok  " : "FAIL", traj[0], l32, rel);
    fails += !moved;
    if (torch) {
        fails += golden_vs_autocast(m, init, tokens, targets, B, T, traj, lr,
                                    "\"precision\":\"bf16\",\"device\":\"cpu\"", "/usr/bin/python3") != 0;
    } else {
        bool falls = isfinite(traj[GOLDEN_STEPS - 1]) && traj[GOLDEN_STEPS - 1] < 0.5f * traj[0];
        printf("%s  %d bf16 steps lower the loss from %.4f to %.4f (below half; PyTorch's autocast comparison "
               "skipped)\n", falls ? "ok  " : "FAIL", GOLDEN_STEPS, traj[0], traj[GOLDEN_STEPS - 1]);
        fails += !falls;
    }
    free(init); free(tokens); free(targets);
    device_optim_free(&opt);
    gpt2_free(m);
    free(m);
    device_close(&dev);
    fails += families_bf16_vs_fp32();
    printf("%s\n", fails ? "FAIL" : "ok - gpt2, bert, resnet18 and resnet50 in bf16 on the CPU");
    return fails ? 1 : 0;
}
