/* test_gpt2_ref — Nebula's GPT-2 against PyTorch (the llm.c test_gpt2 idea, with
 * PyTorch run in the same test): gpt2-tiny on a fixed batch, then logits, loss,
 * every gradient by name and a 10-step AdamW loss trajectory are compared by
 * validation/reference/gpt2_ref.py within |d| <= 1e-4 + 1e-3*|ref| (fp32).
 * The dump is a safetensors file, so the script needs nothing but torch and numpy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/gpt2.h"
#include "nn/optim.h"
#include "base/rng.h"
#include "ckpt/tool/safetensors.h"

enum { B = 2, T = 16, STEPS = 10, WARMUP = 3 };

int main(void)
{
    gpt2_config cfg;
    if (gpt2_config_named(&cfg, "gpt2-tiny") != STATUS_OK) return 1;
    cfg.padded_vocab_size = 264;  /* exercise the padded-vocabulary path */
    gpt2 m;
    if (gpt2_init(&m, &cfg, B, T, 1234, true) != STATUS_OK) return 1;

    int32_t tokens[B * T], targets[B * T];
    float ftok[B * T], ftgt[B * T];
    rng r;
    rng_init(&r, 99, 0, RNG_PURPOSE_TEST, 0);
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int32_t)rng_below(&r, (uint32_t)cfg.vocab_size);
        targets[i] = (int32_t)rng_below(&r, (uint32_t)cfg.vocab_size);
    }
    targets[3] = targets[T + 5] = -1;  /* ignored positions */
    for (int i = 0; i < B * T; i++) { ftok[i] = (float)tokens[i]; ftgt[i] = (float)targets[i]; }

    /* GPT-2's init (std 0.02) keeps activations so small that different maths (erf
     * vs tanh GELU, a missing bias) would still pass the tolerance; the check uses
     * O(1) activations instead: weights x10, random biases and norm gains. */
    rng_init(&r, 7, 0, RNG_PURPOSE_TEST, 1);
    for (int i = 0; i < m.pt.count; i++) {
        const param_entry *e = &m.pt.entries[i];
        float *w = m.pb.params + e->offset;
        bool bias = strstr(e->name, ".bias") != NULL, norm = strstr(e->name, "ln_") != NULL;
        for (size_t k = 0; k < e->count; k++) {
            if (bias) w[k] = 0.2f * (rng_uniform(&r) - 0.5f);
            else if (norm) w[k] = 1.0f + 0.4f * (rng_uniform(&r) - 0.5f);
            else w[k] *= 10.0f;
        }
    }
    memset(m.pb.params + (size_t)cfg.vocab_size * cfg.channels, 0,
           (size_t)(cfg.padded_vocab_size - cfg.vocab_size) * cfg.channels * sizeof(float));

    /* Keep the initial weights: the trajectory below starts from them too. */
    float *init = malloc(m.pt.total * sizeof(float));
    memcpy(init, m.pb.params, m.pt.total * sizeof(float));
    param_zero_grads(&m.pb, &m.pt);
    if (gpt2_forward(&m, tokens, targets) != STATUS_OK) return 1;
    gpt2_backward(&m, tokens);
    float loss = m.mean_loss;
    float *logits = malloc((size_t)B * T * cfg.padded_vocab_size * sizeof(float));
    memcpy(logits, m.acts.logits, (size_t)B * T * cfg.padded_vocab_size * sizeof(float));
    float *grads = malloc(m.pt.total * sizeof(float));
    memcpy(grads, m.pb.grads, m.pt.total * sizeof(float));

    /* The 10-step trajectory: AdamW (0.9, 0.95), warmup + cosine to 10% of the peak. */
    const double lr = 1e-3, wd = 0.1;
    lr_schedule sched = { .kind = LR_SCHEDULE_COSINE, .base_lr = lr, .warmup_steps = WARMUP,
                          .total_steps = STEPS, .min_lr = lr * 0.1 };
    adamw_hparams hp = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = wd };
    float traj[STEPS];
    for (int s = 0; s < STEPS; s++) {
        param_zero_grads(&m.pb, &m.pt);
        if (gpt2_forward(&m, tokens, targets) != STATUS_OK) return 1;
        gpt2_backward(&m, tokens);
        traj[s] = m.mean_loss;
        optim_adamw_step(&m.pt, &m.pb, &hp, lr_at(&sched, s), s + 1);
    }

    int n = m.pt.count, nt = 2 * n + 5;
    st_tensor *t = calloc((size_t)nt, sizeof *t);
    st_name *names = calloc((size_t)nt, sizeof *names);
    st_add_table(t, st_add_table(t, 0, names, &m.pt, "", init), names, &m.pt, "grad.", grads); /* params, then grad.* */
    t[2 * n] = (st_tensor){ "in.tokens", 2, { B, T }, ftok };
    t[2 * n + 1] = (st_tensor){ "in.targets", 2, { B, T }, ftgt };
    t[2 * n + 2] = (st_tensor){ "out.logits", 3, { B, T, cfg.padded_vocab_size }, logits };
    t[2 * n + 3] = (st_tensor){ "out.loss", 1, { 1 }, &loss };
    t[2 * n + 4] = (st_tensor){ "traj.losses", 1, { STEPS }, traj };
    char meta[512];
    snprintf(meta, sizeof meta,
             "{\"layers\":\"%d\",\"heads\":\"%d\",\"vocab_size\":\"%d\",\"lr\":\"%g\",\"weight_decay\":\"%g\","
             "\"steps\":\"%d\",\"warmup\":\"%d\"}",
             cfg.num_layers, cfg.num_heads, cfg.vocab_size, lr, wd, STEPS, WARMUP);
    char dir[256], path[320], cmd[1024];
    const char *tmpd = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/nebula-gpt2-XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/dump.safetensors", dir);
    if (st_write(path, t, nt, meta) != STATUS_OK) return 1;
    printf("# gpt2-tiny (%zu parameters), B=%d T=%d, loss %.6f; comparing with PyTorch\n", m.pt.total, B, T, loss);
    fflush(stdout);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 validation/reference/gpt2_ref.py %s", path);
    int rc = system(cmd);
    unlink(path);
    rmdir(dir);
    free(t); free(names); free(init); free(logits); free(grads);
    gpt2_free(&m);
    return rc == 0 ? 0 : 1;
}
