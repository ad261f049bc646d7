/* test_models_cuda — GPT-2 and BERT on the GPU (docs/testing.md#golden-tests):
 *
 *  1. gpt2-tiny in fp32 on the GPU against the same model on the CPU (no Python):
 *     the GPU model is built by the same gpt2.c through the device's kernel table,
 *     from the same host-initialised weights, so logits, loss, every gradient by
 *     name and a 10-step AdamW trajectory must agree within fp32 tolerances
 *     (|d| <= 1e-4 + 1e-3*|ref|, those of the CPU-vs-PyTorch test: two fp32
 *     implementations that sum in different orders, O(1) activations).
 *  2. GPT-2 124M in bf16 (--precision bf16's table: GEMM operands rounded to bf16,
 *     fp32 accumulation, fp32 master weights) for 10 AdamW steps, against PyTorch's
 *     own bf16 autocast on the same GPU from the same initial weights and batch
 *     (validation/reference/gpt2_autocast_ref.py, which writes GPT-2 with validation/reference/
 *     gpt2_ref.py's forward). Tolerance on each loss: 1% relative, about 2.5 bf16
 *     ulps (2^-8 = 0.39%): both sides round the same fp32 operands to bf16, but
 *     PyTorch also runs attention in bf16 and the two sum in different orders.
 *  3. The same in fp16 with dynamic loss scaling, against autocast fp16 with
 *     torch.amp.GradScaler (same defaults: 2^16, x2 / x0.5, 2000): fp16 keeps 3 more
 *     mantissa bits than bf16, so the same 1% holds with margin (skipped steps are
 *     printed by both, not compared: autocast keeps GEMM outputs in fp16, Nebula in
 *     fp32, so they may overflow at different steps).
 *
 *  4. bert-tiny in fp32 on the GPU against the CPU, as part 1, with a padded sequence
 *     (attention mask) and ignored MLM positions; then resnet18-cifar (32x32) and
 *     resnet18 with the ImageNet stem and its maxpool (64x64), BN in training mode,
 *     gradients compared in relative L2 norm (see model_gpu_vs_cpu).
 *
 * Without a GPU it prints SKIP and exits 77 (skipped). --skip-pytorch skips parts 2 and 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_GPU  /* the CUDA checks */
#include "../check.h"

#include "nn/gpt2.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "base/rng.h"
#include "ckpt/tool/safetensors.h"
#include "../gpt2_golden.h"

enum { STEPS = GOLDEN_STEPS, WARMUP = GOLDEN_WARMUP };

static float *download(const device *d, const float *dev, size_t n)
{
    float *h = malloc(n * sizeof *h);
    device_download(d, h, dev, n * sizeof *h);
    return h;
}

/* max |got-ref| / (atol + rtol |ref|) over n values; <= 1 passes */
static double worst_ratio(const float *got, const float *ref, size_t n, double atol, double rtol)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)got[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
        if (!(r <= w)) w = r;  /* NaN propagates as a failure */
    }
    return w;
}

static void report_rel(const char *what, double rel, double limit)
{
    bool ok = rel <= limit;
    printf("%s  %s (relative L2 error %.3g, limit %.0e)\n", ok ? "ok   " : "FAIL ", what, rel, limit);
    ok ? gpu_passed++ : gpu_failed++;
}

static void report(const char *what, double ratio)
{
    bool ok = ratio <= 1.0;
    printf("%s  %s (worst |d|/(atol+rtol|ref|) = %.3g)\n", ok ? "ok   " : "FAIL ", what, ratio);
    ok ? gpu_passed++ : gpu_failed++;
}

/* Part 1: the same gpt2.c on the CPU and on the GPU, fp32. */
static int tiny_gpu_vs_cpu(void)
{
    enum { B = 4, T = 64 };
    gpt2_config cfg;
    if (gpt2_config_named(&cfg, "gpt2-tiny") != STATUS_OK) return 1;
    cfg.padded_vocab_size = 264;  /* the padded-vocabulary path */
    device dev;
    if (device_open(&dev, DEVICE_KIND_CUDA, PRECISION_FP32, 0) != STATUS_OK) return 1;
    gpt2 *cpu = calloc(1, sizeof *cpu), *gpu = calloc(1, sizeof *gpu);
    if (gpt2_init(cpu, &cfg, B, T, 1234, true) != STATUS_OK ||
        gpt2_init_on(gpu, &cfg, B, T, 1234, true, &dev) != STATUS_OK)
        return 1;
    /* O(1) activations as in validation/reference/test_gpt2_ref.c: weights x10,
     * random biases and norm gains; the padded rows stay zero. */
    rng r;
    rng_init(&r, 7, 0, RNG_PURPOSE_TEST, 1);
    for (int i = 0; i < cpu->pt.count; i++) {
        const param_entry *e = &cpu->pt.entries[i];
        float *w = cpu->pb.params + e->offset;
        bool bias = strstr(e->name, ".bias") != NULL, norm = strstr(e->name, "ln_") != NULL;
        for (size_t k = 0; k < e->count; k++) {
            if (bias) w[k] = 0.2f * (rng_uniform(&r) - 0.5f);
            else if (norm) w[k] = 1.0f + 0.4f * (rng_uniform(&r) - 0.5f);
            else w[k] *= 10.0f;
        }
    }
    memset(cpu->pb.params + (size_t)cfg.vocab_size * cfg.channels, 0,
           (size_t)(cfg.padded_vocab_size - cfg.vocab_size) * cfg.channels * sizeof(float));
    size_t total = cpu->pt.total;
    device_upload(&dev, gpu->w.params, cpu->pb.params, total * sizeof(float));

    int32_t tokens[B * T], targets[B * T];
    golden_batch(tokens, targets, B * T, cfg.vocab_size, 99);
    targets[3] = targets[T + 5] = -1;  /* ignored positions */

    param_zero_grads(&cpu->pb, &cpu->pt);
    gpu->ops->zero(gpu->w.grads, total);
    if (gpt2_forward(cpu, tokens, targets) != STATUS_OK || gpt2_forward(gpu, tokens, targets) != STATUS_OK) return 1;
    gpt2_backward(cpu, tokens);
    gpt2_backward(gpu, tokens);
    if (device_sync(&dev) != STATUS_OK) return 1;
    size_t nlogits = (size_t)B * T * cfg.padded_vocab_size;
    float *logits = download(&dev, gpu->acts.logits, nlogits), *grads = download(&dev, gpu->w.grads, total);
    report("gpt2-tiny fp32 logits, GPU vs CPU", worst_ratio(logits, cpu->acts.logits, nlogits, 1e-4, 1e-3));
    report("gpt2-tiny fp32 mean loss, GPU vs CPU", worst_ratio(&gpu->mean_loss, &cpu->mean_loss, 1, 1e-5, 1e-5));
    for (int i = 0; i < cpu->pt.count; i++) {
        const param_entry *e = &cpu->pt.entries[i];
        char what[160];
        snprintf(what, sizeof what, "gpt2-tiny fp32 grad %s, GPU vs CPU", e->name);
        report(what, worst_ratio(grads + e->offset, cpu->pb.grads + e->offset, e->count, 1e-4, 1e-3));
    }

    /* 10 AdamW steps on both, same schedule; the device step is optim.c's per element. */
    device cpudev;
    device_open(&cpudev, DEVICE_KIND_CPU, PRECISION_FP32, -1);
    device_optim ocpu, ogpu;
    if (device_optim_init(&ocpu, &cpudev, &cpu->pt) != STATUS_OK || device_optim_init(&ogpu, &dev, &gpu->pt) != STATUS_OK)
        return 1;
    const double lr = 1e-3;
    lr_schedule sched = { .kind = LR_SCHEDULE_COSINE, .base_lr = lr, .warmup_steps = WARMUP, .total_steps = STEPS,
                          .min_lr = lr * 0.1 };
    adamw_hparams hp = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 };
    float tc[STEPS], tg[STEPS];
    for (int s = 0; s < STEPS; s++) {
        param_zero_grads(&cpu->pb, &cpu->pt);
        gpu->ops->zero(gpu->w.grads, total);
        if (gpt2_forward(cpu, tokens, targets) != STATUS_OK || gpt2_forward(gpu, tokens, targets) != STATUS_OK)
            return 1;
        gpt2_backward(cpu, tokens);
        gpt2_backward(gpu, tokens);
        tc[s] = cpu->mean_loss;
        tg[s] = gpu->mean_loss;
        device_optim_adamw_step(&ocpu, &cpu->pb, &hp, lr_at(&sched, s), s + 1);
        device_optim_adamw_step(&ogpu, &gpu->w, &hp, lr_at(&sched, s), s + 1);
    }
    if (device_sync(&dev) != STATUS_OK) return 1;
    report("gpt2-tiny fp32 10-step AdamW loss trajectory, GPU vs CPU", worst_ratio(tg, tc, STEPS, 0, 1e-3));
    /* The key third of each c_attn.bias has a gradient that is 0 in exact arithmetic (a
     * constant added to every key leaves the softmax unchanged); AdamW turns each side's
     * rounding noise there (~1e-8) into updates of ~lr of either sign, so those entries
     * are compared by nothing but the loss. Everything else must agree. */
    float *params = download(&dev, gpu->w.params, total);
    for (int l = 0; l < cfg.num_layers; l++) {
        char n[64];
        snprintf(n, sizeof n, "h.%d.attn.c_attn.bias", l);
        const param_entry *e = &cpu->pt.entries[param_find(&cpu->pt, n)];
        memcpy(params + e->offset + cfg.channels, cpu->pb.params + e->offset + cfg.channels,
               (size_t)cfg.channels * sizeof(float));
    }
    report("gpt2-tiny fp32 parameters after 10 steps (key biases aside), GPU vs CPU",
           worst_ratio(params, cpu->pb.params, total, 1e-4, 1e-3));
    free(params);
    free(logits);
    free(grads);
    device_optim_free(&ocpu);
    device_optim_free(&ogpu);
    gpt2_free(cpu);
    gpt2_free(gpu);
    free(cpu);
    free(gpu);
    device_close(&dev);
    return 0;
}

/* Parts 2 and 3: GPT-2 124M bf16 / fp16 on the GPU vs PyTorch autocast on the GPU. */
static int gpt2_half_vs_pytorch(precision_kind prec)
{
    enum { B = 4, T = 256 };
    gpt2_config cfg;
    if (gpt2_config_named(&cfg, "gpt2") != STATUS_OK) return 1;
    device dev;
    if (device_open(&dev, DEVICE_KIND_CUDA, prec, 0) != STATUS_OK) return 1;
    gpt2 *m = calloc(1, sizeof *m);
    device_optim opt;
    if (gpt2_init_on(m, &cfg, B, T, 1234, true, &dev) != STATUS_OK || device_optim_init(&opt, &dev, &m->pt) != STATUS_OK)
        return 1;
    int32_t *tokens = malloc(B * T * sizeof *tokens), *targets = malloc(B * T * sizeof *targets);
    golden_batch(tokens, targets, B * T, cfg.vocab_size, 5);
    const double lr = 6e-4;
    float traj[GOLDEN_STEPS];
    if (golden_train(m, &opt, tokens, targets, lr, traj)) return 1;
    if (device_sync(&dev) != STATUS_OK) return 1;
    printf("# gpt2 124M %s on %s: losses", precision_kind_name(prec), dev.describe);
    for (int s = 0; s < GOLDEN_STEPS; s++) printf(" %.4f", traj[s]);
    printf("; %ld steps skipped\n", opt.scaler.skipped);

    /* m->pb.params is still the host initialisation (the GPU trained its own copy). */
    char meta[128], what[128];
    snprintf(meta, sizeof meta, "\"precision\":\"%s\",\"skipped\":\"%ld\"", precision_kind_name(prec),
             opt.scaler.skipped);
    int rc = golden_vs_autocast(m, m->pb.params, tokens, targets, B, T, traj, lr, meta, "python3");
    snprintf(what, sizeof what, "gpt2 124M %s 10-step trajectory vs PyTorch autocast (gpt2_autocast_ref.py)",
             precision_kind_name(prec));
    report(what, rc == 0 ? 0.0 : 2.0);
    free(tokens); free(targets);
    device_optim_free(&opt);
    gpt2_free(m);
    free(m);
    device_close(&dev);
    return 0;
}

/* The logits of the last forward (device memory on a GPU). */
static const float *model_logits(const model *m, size_t *n)
{
    if (m->spec.family == MODEL_FAMILY_BERT) {
        *n = (size_t)m->bert.head_rows * m->spec.bert.vocab_size;  /* the targeted positions' rows */
        return m->bert.acts.logits;
    }
    *n = (size_t)m->B * m->spec.resnet.num_classes;
    return m->resnet.acts.logits;
}

/* Parts 4-6: a model through the model interface, on the CPU and on the GPU from the
 * same weights and batch: logits, every gradient, 10 AdamW steps. `pad`: sequence 1's
 * last 7 positions are padding (BERT). ResNets train their BN in batch mode on both.
 *
 * relu_net (ResNets): a ReLU's derivative jumps at 0 and a max-pool's at a tie, and two
 * fp32 codes put a few of a ResNet's many pre-activations on opposite sides of them;
 * one such flip moves early gradients by ~1e-2 and the 10-step loss by percents
 * (measured for the CPU against PyTorch, validation/reference/resnet_ref.py, which
 * replays Nebula's branches to compare elementwise). Here each gradient tensor must
 * instead be within 5e-2 in relative L2 norm and each loss within 5%: flips stay well
 * inside, while a wrong kernel (a missed accumulation, a wrong BN term) is O(1). */
static int model_gpu_vs_cpu(const model_spec *spec, int B, int T, bool pad, float wscale, bool relu_net)
{
    device dev, cpudev;
    if (device_open(&dev, DEVICE_KIND_CUDA, PRECISION_FP32, 0) != STATUS_OK) return 1;
    device_open(&cpudev, DEVICE_KIND_CPU, PRECISION_FP32, -1);
    model *cpu = calloc(1, sizeof *cpu), *gpu = calloc(1, sizeof *gpu);
    if (model_init(cpu, spec, B, T, 1234, true) != STATUS_OK || model_init_on(gpu, spec, B, T, 1234, true, &dev) != STATUS_OK)
        return 1;
    /* Larger than init activations: weights x wscale, random biases and norm gains. */
    const param_table *pt = model_params(cpu);
    param_buffers *pc = model_buffers(cpu), *pg = model_device_buffers(gpu);
    rng r;
    rng_init(&r, 11, 0, RNG_PURPOSE_TEST, 2);
    for (int i = 0; i < pt->count; i++) {
        const param_entry *e = &pt->entries[i];
        float *w = pc->params + e->offset;
        bool gain = strstr(e->name, "LayerNorm.weight") != NULL || (e->ndim == 1 && strstr(e->name, "bn") != NULL &&
                                                                    strstr(e->name, ".weight") != NULL);
        for (size_t k = 0; k < e->count; k++) {
            if (gain) w[k] = 1.0f + 0.4f * (rng_uniform(&r) - 0.5f);
            else if (e->ndim < 2) w[k] = 0.2f * (rng_uniform(&r) - 0.5f);
            else w[k] *= wscale;
        }
    }
    device_upload(&dev, pg->params, pc->params, pt->total * sizeof(float));
    model_batch b;
    if (model_batch_init(&b, cpu) != STATUS_OK) return 1;
    model_batch_synthetic(&b, cpu, 5);
    if (pad)
        for (int t = T - 7; t < T; t++) { b.mask[T + t] = 0; b.targets[T + t] = -1; }
    device_optim ocpu, ogpu;
    if (device_optim_init(&ocpu, &cpudev, pt) != STATUS_OK || device_optim_init(&ogpu, &dev, pt) != STATUS_OK)
        return 1;
    adamw_hparams hp = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 };
    float tc[STEPS], tg[STEPS];
    char what[192];
    for (int s = 0; s < STEPS; s++) {
        param_zero_grads(pc, pt);
        dev.ops->zero(pg->grads, pt->total);
        if (model_forward(cpu, &b, true) != STATUS_OK || model_forward(gpu, &b, true) != STATUS_OK) return 1;
        model_backward(cpu);
        model_backward(gpu);
        tc[s] = model_loss(cpu);
        tg[s] = model_loss(gpu);
        if (s == 0) {
            if (device_sync(&dev) != STATUS_OK) return 1;
            size_t nl;
            const float *lc = model_logits(cpu, &nl), *lg = model_logits(gpu, &nl);
            float *logits = download(&dev, lg, nl), *grads = download(&dev, pg->grads, pt->total);
            snprintf(what, sizeof what, "%s fp32 logits, GPU vs CPU", spec->name);
            report(what, worst_ratio(logits, lc, nl, 1e-4, 1e-3));
            for (int i = 0; i < pt->count; i++) {
                const param_entry *e = &pt->entries[i];
                snprintf(what, sizeof what, "%s fp32 grad %s, GPU vs CPU", spec->name, e->name);
                if (relu_net) report_rel(what, kc_rel_l2(grads + e->offset, pc->grads + e->offset, e->count), 5e-2);
                else report(what, worst_ratio(grads + e->offset, pc->grads + e->offset, e->count, 1e-4, 1e-3));
            }
            free(logits);
            free(grads);
        }
        device_optim_adamw_step(&ocpu, pc, &hp, 1e-3, s + 1);
        device_optim_adamw_step(&ogpu, pg, &hp, 1e-3, s + 1);
    }
    if (device_sync(&dev) != STATUS_OK) return 1;
    snprintf(what, sizeof what, "%s fp32 10-step AdamW loss trajectory, GPU vs CPU", spec->name);
    report(what, worst_ratio(tg, tc, STEPS, 0, relu_net ? 5e-2 : 1e-3));
    model_batch_free(&b);
    device_optim_free(&ocpu);
    device_optim_free(&ogpu);
    model_free(cpu);
    model_free(gpu);
    free(cpu);
    free(gpu);
    device_close(&dev);
    return 0;
}

int main(int argc, char **argv)
{
    gpu_test_start("test_models_cuda");
    if (tiny_gpu_vs_cpu() != 0) {
        printf("FAIL  gpt2-tiny GPU vs CPU could not run (see the error above)\n");
        gpu_failed++;
    }
    bool torch = !(argc > 1 && !strcmp(argv[1], "--skip-pytorch"));
    for (int p = 0; torch && p < 2; p++)
        if (gpt2_half_vs_pytorch(p == 0 ? PRECISION_BF16 : PRECISION_FP16) != 0) {
            printf("FAIL  gpt2 124M %s could not run (see the error above)\n", p == 0 ? "bf16" : "fp16");
            gpu_failed++;
        }
    /* bert-tiny with padding; ResNet-18 with the CIFAR stem and with the ImageNet stem
     * (maxpool), small images so that the emulator gets through them too. */
    struct { const char *name; model_family fam; int B, T, image; bool pad; float wscale; } cases[] = {
        { "bert-tiny", MODEL_FAMILY_BERT, 4, 32, 0, true, 3.0f },
        { "resnet18-cifar", MODEL_FAMILY_RESNET, 2, 0, 32, false, 1.0f },
        { "resnet18", MODEL_FAMILY_RESNET, 2, 0, 64, false, 1.0f },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_spec spec = { .family = cases[i].fam, .image_size = cases[i].image };
        snprintf(spec.name, sizeof spec.name, "%s", cases[i].name);
        status st = cases[i].fam == MODEL_FAMILY_BERT ? bert_config_named(&spec.bert, cases[i].name)
                                                      : resnet_config_named(&spec.resnet, cases[i].name);
        if (st != STATUS_OK ||
            model_gpu_vs_cpu(&spec, cases[i].B, cases[i].T, cases[i].pad, cases[i].wscale,
                             cases[i].fam == MODEL_FAMILY_RESNET) != 0) {
            printf("FAIL  %s GPU vs CPU could not run (see the error above)\n", cases[i].name);
            gpu_failed++;
        }
    }
    return gpu_test_end("test_models_cuda");
}
