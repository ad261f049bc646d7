/* gpt2_golden — the GPT-2 golden test against PyTorch's autocast, shared by the CPU
 * bf16 test (validation/reference/test_models_bf16.c) and the GPU one
 * (validation/gpu/test_models_cuda.c): GOLDEN_STEPS AdamW steps of a model on one
 * batch at a cosine schedule, then the initial weights, the batch and the losses
 * written to safetensors for validation/reference/gpt2_autocast_ref.py, which trains
 * the same steps under torch.autocast and checks each loss within 1% relative.
 *
 * Needs nn/gpt2.h, nn/optim.h, base/rng.h and ckpt/tool/safetensors.h. */
#ifndef NEBULA_GPT2_GOLDEN_H
#define NEBULA_GPT2_GOLDEN_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { GOLDEN_STEPS = 10, GOLDEN_WARMUP = 3 };

/* n random tokens and targets below V from seed. */
static inline void golden_batch(int32_t *tokens, int32_t *targets, int n, int V, uint64_t seed)
{
    rng r;
    rng_init(&r, seed, 0, RNG_PURPOSE_TEST, 0);
    for (int i = 0; i < n; i++) {
        tokens[i] = (int32_t)rng_below(&r, (uint32_t)V);
        targets[i] = (int32_t)rng_below(&r, (uint32_t)V);
    }
}

/* GOLDEN_STEPS steps of m on (tokens, targets), AdamW at base rate lr (cosine, 3 warm-up
 * steps, floor lr / 10, weight decay 0.1) through the device's optimizer; traj gets each
 * step's loss. Returns 0, or 1 when a forward failed. */
static inline int golden_train(gpt2 *m, device_optim *opt, const int32_t *tokens, const int32_t *targets, double lr,
                               float *traj)
{
    lr_schedule sched = { .kind = LR_SCHEDULE_COSINE, .base_lr = lr, .warmup_steps = GOLDEN_WARMUP,
                          .total_steps = GOLDEN_STEPS, .min_lr = lr * 0.1 };
    adamw_hparams hp = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 };
    param_buffers *w = device_is_gpu(m->dev) ? &m->w : &m->pb;  /* where the kernels read and write */
    for (int s = 0; s < GOLDEN_STEPS; s++) {
        m->ops->zero(w->grads, m->pt.total);
        if (gpt2_forward(m, tokens, targets) != STATUS_OK) return 1;
        m->loss_scale = device_optim_loss_scale(opt);
        gpt2_backward(m, tokens);
        traj[s] = m->mean_loss;
        bool skipped;
        device_optim_adamw_step_scaled(opt, w, &hp, lr_at(&sched, s), &skipped);
    }
    return 0;
}

/* Writes init (the weights before training, host memory), the B x T batch and traj to a
 * temporary safetensors file with the model's shape, lr and `meta_extra` (more JSON
 * members, e.g. "\"precision\":\"bf16\""), and runs gpt2_autocast_ref.py on it with
 * $NEBULA_PYTHON, else `python` (the caller's: Debian's PyTorch for the CPU, the PATH's
 * for a GPU machine's). Returns its exit status (0: agreed). */
static inline int golden_vs_autocast(const gpt2 *m, const float *init, const int32_t *tokens, const int32_t *targets,
                                     int B, int T, const float *traj, double lr, const char *meta_extra,
                                     const char *python)
{
    int n = m->pt.count, nt = n + 3, rc = 1;
    st_tensor *t = calloc((size_t)nt, sizeof *t);
    st_name *names = calloc((size_t)nt, sizeof *names);
    float *ftok = malloc((size_t)B * T * sizeof *ftok), *ftgt = malloc((size_t)B * T * sizeof *ftgt);
    if (!t || !names || !ftok || !ftgt) goto out;
    for (int i = 0; i < B * T; i++) ftok[i] = (float)tokens[i], ftgt[i] = (float)targets[i];
    st_add_table(t, 0, names, &m->pt, "", init);
    t[n] = (st_tensor){ "in.tokens", 2, { B, T }, ftok };
    t[n + 1] = (st_tensor){ "in.targets", 2, { B, T }, ftgt };
    t[n + 2] = (st_tensor){ "traj.losses", 1, { GOLDEN_STEPS }, (float *)traj };
    char meta[512];
    snprintf(meta, sizeof meta,
             "{\"layers\":\"%d\",\"heads\":\"%d\",\"vocab_size\":\"%d\",\"lr\":\"%g\",\"weight_decay\":\"0.1\","
             "\"steps\":\"%d\",\"warmup\":\"%d\",%s}",
             m->cfg.num_layers, m->cfg.num_heads, m->cfg.vocab_size, lr, GOLDEN_STEPS, GOLDEN_WARMUP, meta_extra);
    const char *tmp = getenv("TMPDIR");
    char dir[256], path[300], cmd[600];
    snprintf(dir, sizeof dir, "%s/nebula-gpt2-golden-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) goto out;
    snprintf(path, sizeof path, "%s/dump.safetensors", dir);
    if (st_write(path, t, nt, meta) == STATUS_OK) {
        fflush(stdout);
        const char *py = getenv("NEBULA_PYTHON");
        snprintf(cmd, sizeof cmd, "%s validation/reference/gpt2_autocast_ref.py %s", py && *py ? py : python,
                 path);
        rc = system(cmd);
        unlink(path);
    }
    rmdir(dir);
out:
    free(t), free(names), free(ftok), free(ftgt);
    return rc;
}

#endif
