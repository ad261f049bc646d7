/* test_resnet_ref — Nebula's ResNets against torchvision (the llm.c test_gpt2 idea,
 * with PyTorch run in the same test). Two cases: resnet18 with the CIFAR stem
 * (BasicBlock, identity and strided-downsample shortcuts) and resnet50 with the
 * ImageNet stem (Bottleneck, 7x7/2 conv, maxpool, stride-1 downsample in layer1).
 * For each, validation/reference/resnet_ref.py builds the torchvision model, loads
 * Nebula's weights AND BN buffers by name (strict), and compares within
 * |d| <= 1e-4 + 1e-3*|ref| (fp32): train-mode logits and loss, every parameter
 * gradient by name, the BN running statistics after that forward, eval-mode logits,
 * and a 10-step SGD loss trajectory (momentum 0.9, weight decay 5e-4 on conv/fc
 * weights only, warmup + step LR) within 1e-3 relative.
 *
 * BN weights, biases and running statistics start away from 1/0 (and
 * num_batches_tracked from 3) so that a missing affine term or a wrong
 * running-statistics update cannot hide behind the default init. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "optim.h"
#include "resnet.h"
#include "rng.h"
#include "safetensors.h"

enum { STEPS = 10, WARMUP = 2, STEP_SIZE = 4 };

typedef struct ref_case {
    const char *model;   /* resnet_config_named name */
    const char *arch;    /* torchvision.models constructor */
    int N, H, W, classes;
} ref_case;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *copy_of(const float *p, size_t n)
{
    float *c = malloc(n * sizeof *c);
    CHECK(c, "test_resnet_ref: out of memory");
    memcpy(c, p, n * sizeof *c);
    return c;
}

/* Adds one safetensors entry per table tensor, named prefix + name, data from base. */
static int add_table(st_tensor *t, int nt, char (*names)[128], const param_table *pt, const char *prefix,
                     const float *base)
{
    for (int i = 0; i < pt->count; i++) {
        const param_entry *e = &pt->entries[i];
        snprintf(names[nt], sizeof names[nt], "%s%s", prefix, e->name);
        t[nt] = (st_tensor){ .name = names[nt], .ndim = e->ndim, .data = base + e->offset };
        for (int d = 0; d < e->ndim; d++) t[nt].shape[d] = (int64_t)e->shape[d];
        nt++;
    }
    return nt;
}

static int run_case(const ref_case *rc)
{
    double t0 = now();
    resnet_config cfg;
    if (resnet_config_named(&cfg, rc->model) != STATUS_OK) return 1;
    cfg.num_classes = rc->classes;
    resnet m;
    if (resnet_init(&m, &cfg, rc->N, rc->H, rc->W, 1234, true) != STATUS_OK) return 1;
    int N = rc->N, V = rc->classes;
    size_t img = (size_t)N * 3 * (size_t)rc->H * (size_t)rc->W;

    rng r;
    rng_init(&r, 99, 0, RNG_PURPOSE_TEST, 0);
    float *images = malloc(img * sizeof *images), flabels[64];
    int32_t labels[64];
    for (size_t i = 0; i < img; i++) images[i] = rng_normal(&r);
    for (int i = 0; i < N; i++) flabels[i] = (float)(labels[i] = (int32_t)rng_below(&r, (uint32_t)V));

    /* BN affine terms and running statistics away from their defaults. */
    rng_init(&r, 7, 0, RNG_PURPOSE_TEST, 1);
    for (int i = 0; i < m.pt.count; i++) {
        const param_entry *e = &m.pt.entries[i];
        if (e->ndim != 1 || !strncmp(e->name, "fc.", 3)) continue;
        bool w = strstr(e->name, ".weight") != NULL;
        for (size_t k = 0; k < e->count; k++)
            m.pb.params[e->offset + k] = w ? 1.0f + 0.4f * (rng_uniform(&r) - 0.5f) : 0.2f * (rng_uniform(&r) - 0.5f);
    }
    for (int i = 0; i < m.bt.count; i++) {
        const param_entry *e = &m.bt.entries[i];
        float *s = m.stats + e->offset;
        for (size_t k = 0; k < e->count; k++) {
            if (strstr(e->name, "running_mean")) s[k] = 0.2f * (rng_uniform(&r) - 0.5f);
            else if (strstr(e->name, "running_var")) s[k] = 0.5f + rng_uniform(&r);
            else s[k] = 3.0f;
        }
    }
    float *init = copy_of(m.pb.params, m.pt.total), *init_stats = copy_of(m.stats, m.bt.total);

    /* One training forward + backward, then the same batch in eval mode. */
    double tf = now();
    param_zero_grads(&m.pb, &m.pt);
    if (resnet_forward(&m, images, labels, true) != STATUS_OK) return 1;
    resnet_backward(&m);
    double t_step = now() - tf;
    float loss = m.mean_loss;
    float *logits = copy_of(m.acts.logits, (size_t)N * V), *grads = copy_of(m.pb.grads, m.pt.total);
    float *stats1 = copy_of(m.stats, m.bt.total);
    if (resnet_forward(&m, images, NULL, false) != STATUS_OK) return 1;
    float *eval_logits = copy_of(m.acts.logits, (size_t)N * V);
    int stats_kept = !memcmp(stats1, m.stats, m.bt.total * sizeof(float));
    printf("%s - %s: eval forward leaves the running statistics untouched\n", stats_kept ? "ok" : "FAIL", rc->model);

    /* The trajectory from the same start: SGD, warmup then x0.5 every STEP_SIZE steps. */
    memcpy(m.pb.params, init, m.pt.total * sizeof(float));
    memcpy(m.stats, init_stats, m.bt.total * sizeof(float));
    const double lr = 0.02, momentum = 0.9, wd = 5e-4, gamma = 0.5;
    lr_schedule sched = { .kind = LR_SCHEDULE_STEP, .base_lr = lr, .warmup_steps = WARMUP, .step_size = STEP_SIZE,
                          .gamma = gamma };
    sgd_hparams hp = { .momentum = momentum, .weight_decay = wd };
    float traj[STEPS];
    for (int s = 0; s < STEPS; s++) {
        param_zero_grads(&m.pb, &m.pt);
        if (resnet_forward(&m, images, labels, true) != STATUS_OK) return 1;
        resnet_backward(&m);
        traj[s] = m.mean_loss;
        optim_sgd_step(&m.pt, &m.pb, &hp, lr_at(&sched, s), s + 1);
    }

    int nt_max = 2 * m.pt.count + 3 * m.bt.count + 6, nt = 0;
    st_tensor *t = calloc((size_t)nt_max, sizeof *t);
    char (*names)[128] = calloc((size_t)nt_max, sizeof *names);
    nt = add_table(t, nt, names, &m.pt, "", init);
    nt = add_table(t, nt, names, &m.bt, "", init_stats);
    nt = add_table(t, nt, names, &m.pt, "grad.", grads);
    nt = add_table(t, nt, names, &m.bt, "after.", stats1);
    nt = add_table(t, nt, names, &m.bt, "final.", m.stats);
    t[nt++] = (st_tensor){ "in.images", 4, { N, 3, rc->H, rc->W }, images };
    t[nt++] = (st_tensor){ "in.labels", 1, { N }, flabels };
    t[nt++] = (st_tensor){ "out.logits", 2, { N, V }, logits };
    t[nt++] = (st_tensor){ "out.loss", 1, { 1 }, &loss };
    t[nt++] = (st_tensor){ "out.eval_logits", 2, { N, V }, eval_logits };
    t[nt++] = (st_tensor){ "traj.losses", 1, { STEPS }, traj };
    char meta[512];
    snprintf(meta, sizeof meta,
             "{\"model\":\"%s\",\"arch\":\"%s\",\"stem\":\"%s\",\"num_classes\":\"%d\",\"lr\":\"%g\","
             "\"momentum\":\"%g\",\"weight_decay\":\"%g\",\"steps\":\"%d\",\"warmup\":\"%d\",\"step_size\":\"%d\","
             "\"gamma\":\"%g\"}",
             rc->model, rc->arch, resnet_stem_name(cfg.stem), V, lr, momentum, wd, STEPS, WARMUP, STEP_SIZE, gamma);
    char dir[] = "/tmp/nebula-resnet-XXXXXX", path[128], cmd[512];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/dump.safetensors", dir);
    if (st_write(path, t, nt, meta) != STATUS_OK) return 1;
    double t_c = now() - t0;
    printf("# %s (%zu parameters, %d BN statistics tensors), N=%d %dx%d: loss %.6f -> %.6f after %d SGD steps; "
           "C side %.1f s (one train step %.2f s, %.2f GFLOP/image); comparing with torchvision\n",
           rc->model, param_numel(&m.pt), m.bt.count, N, rc->H, rc->W, loss, traj[STEPS - 1], STEPS, t_c, t_step,
           resnet_flops_per_image(&m) * 1e-9);
    fflush(stdout);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 validation/reference/resnet_ref.py %s", path);
    double tp = now();
    int rc_py = system(cmd);
    printf("# %s: PyTorch side %.1f s\n", rc->model, now() - tp);
    unlink(path);
    rmdir(dir);
    free(t); free(names); free(init); free(init_stats); free(logits); free(grads); free(stats1);
    free(eval_logits); free(images);
    resnet_free(&m);
    return rc_py == 0 && stats_kept ? 0 : 1;
}

int main(void)
{
    static const ref_case cases[] = {
        { "resnet18-cifar", "resnet18", 4, 32, 32, 10 },
        { "resnet50", "resnet50", 2, 64, 64, 10 },
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) failed += run_case(&cases[i]);
    printf("%s - test_resnet_ref: %d of %zu models disagree with torchvision\n", failed ? "FAIL" : "ok", failed,
           sizeof cases / sizeof cases[0]);
    return failed ? 1 : 0;
}
