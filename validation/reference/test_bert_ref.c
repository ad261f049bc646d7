/* test_bert_ref — Nebula's BERT (masked LM) against PyTorch, as test_gpt2_ref does for
 * GPT-2: a bert-tiny-shaped model with a 1000-token vocabulary (V shrunk so the test
 * runs in seconds; every special id < 104 stays valid) on B=2, T=16 with sentence-pair
 * token types, padding at the tail of sequence 1 and MLM targets from bert_mask_tokens.
 * validation/reference/bert_ref.py compares the logits (a forward without targets, the MLM
 * head at every position) at non-padded positions, the loss,
 * every gradient by name within |d| <= 1e-4 + 1e-3*|ref| (fp32) and a 10-step AdamW
 * loss trajectory within 1e-3 relative. With targets the head runs at the targeted
 * positions only: its rows must match the full logits' rows (1e-5 relative).
 *
 * Before that, in C: config errors (unknown name, heads not dividing channels, T > 512,
 * a bad id) give STATUS_INPUT; the HF init (moments, zero biases, unit LayerNorm, [PAD]
 * row, decay flags); and bert_mask_tokens — invariants position by position,
 * determinism in (seed, rank, step), and its proportions against binomial bounds of
 * 6 standard deviations (a correct sampler fails one with probability ~2e-9). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/bert.h"
#include "nn/optim.h"
#include "base/rng.h"
#include "ckpt/tool/safetensors.h"

enum { B = 2, T = 16, V = 1000, STEPS = 10, WARMUP = 3, PAD_FROM = 11 };

static int failures;

static void check(bool ok, const char *what)
{
    printf("%s - %s\n", ok ? "ok" : "FAIL", what);
    failures += !ok;
}

/* |k - n p| <= 6 sqrt(n p (1 - p)): k successes of n Bernoulli(p) trials. */
static bool binomial_ok(long k, long n, double p, const char *what)
{
    double sd = sqrt((double)n * p * (1 - p)), dev = fabs((double)k - (double)n * p);
    printf("# %s: %ld of %ld = %.5f, expected %.5f, %.2f sd off\n", what, k, n, (double)k / (double)n, p,
           sd > 0 ? dev / sd : 0.0);
    return dev <= 6 * sd;
}

static void test_config_errors(void)
{
    bert_config cfg;
    bert m;
    check(bert_config_named(&cfg, "bert-huge") == STATUS_INPUT, "unknown model name is STATUS_INPUT");
    check(bert_config_named(&cfg, "bert-base") == STATUS_OK && cfg.num_layers == 12 && cfg.channels == 768 &&
              cfg.num_heads == 12 && cfg.intermediate == 3072 && cfg.vocab_size == 30522,
          "bert-base is L=12 C=768 NH=12 IC=3072 V=30522");
    check(bert_config_named(&cfg, "bert-large") == STATUS_OK && cfg.num_layers == 24 && cfg.channels == 1024 &&
              cfg.num_heads == 16 && cfg.intermediate == 4096,
          "bert-large is L=24 C=1024 NH=16 IC=4096");
    bert_config_named(&cfg, "bert-tiny");
    cfg.num_heads = 3;
    check(bert_init(&m, &cfg, 1, 8, 1, false) == STATUS_INPUT, "heads not dividing channels is STATUS_INPUT");
    bert_config_named(&cfg, "bert-tiny");
    cfg.vocab_size = V;
    check(bert_init(&m, &cfg, 1, 513, 1, false) == STATUS_INPUT, "T = 513 > 512 positions is STATUS_INPUT");
    if (bert_init(&m, &cfg, 1, 4, 1, false) != STATUS_OK) { check(false, "bert_init 1x4"); return; }
    int32_t ids[4] = { 101, 5, V, 102 };
    check(bert_forward(&m, ids, NULL, NULL, NULL) == STATUS_INPUT, "input id = V is STATUS_INPUT");
    int32_t ok_ids[4] = { 101, 5, 6, 102 }, types[4] = { 0, 0, 2, 0 };
    check(bert_forward(&m, ok_ids, types, NULL, NULL) == STATUS_INPUT, "token type 2 is STATUS_INPUT");
    bert_free(&m);
}

/* The HF init on the fresh model: N(0, 0.02) matrices (sample std of n normals has sd
 * ~ 0.02 / sqrt(2n)), zero biases, LayerNorm 1 / 0, zero [PAD] row; decay flags. */
static void test_init(const bert *m)
{
    bool zeros = true, ones = true, flags = true, pad = true, moments = true;
    for (int i = 0; i < m->pt.count; i++) {
        const param_entry *e = &m->pt.entries[i];
        const float *w = m->pb.params + e->offset;
        bool ln_w = strstr(e->name, "LayerNorm.weight") != NULL, bias = strstr(e->name, "bias") != NULL;
        flags &= e->decay == !(ln_w || bias);
        for (size_t k = 0; k < e->count; k++) {
            if (ln_w) ones &= w[k] == 1.0f;
            else if (bias) zeros &= w[k] == 0.0f;
        }
        if (e->ndim == 2 && !strstr(e->name, "word_embeddings")) {
            double s = 0, s2 = 0, n = (double)e->count;
            for (size_t k = 0; k < e->count; k++) s += w[k], s2 += (double)w[k] * w[k];
            double mean = s / n, sd = sqrt(s2 / n - mean * mean);
            moments &= fabs(mean) <= 6 * 0.02 / sqrt(n) && fabs(sd - 0.02) <= 6 * 0.02 / sqrt(2 * n);
        }
    }
    const float *we = m->pb.params + m->pt.entries[param_find(&m->pt, "embeddings.word_embeddings.weight")].offset;
    for (int c = 0; c < m->cfg.channels; c++) pad &= we[(size_t)m->cfg.pad_token_id * m->cfg.channels + c] == 0.0f;
    check(moments, "init: Linear and Embedding weights have mean 0, std 0.02 (6-sd bounds)");
    check(zeros && ones, "init: biases 0, LayerNorm weight 1 and bias 0");
    check(pad, "init: [PAD] row of word_embeddings is zero (padding_idx)");
    check(flags, "decay flags: none on biases and LayerNorm weights, all others decay");
}

/* bert_mask_tokens on MB sequences of ML tokens over several steps. */
static void test_masking(void)
{
    enum { MB = 32, ML = 512, MSTEPS = 4 };
    const bert_special_tokens sp = BERT_SPECIAL_TOKENS_UNCASED;
    int32_t *ids = malloc(sizeof(int32_t) * MB * ML), *am = malloc(sizeof(int32_t) * MB * ML);
    int32_t *out = malloc(sizeof(int32_t) * MB * ML), *tgt = malloc(sizeof(int32_t) * MB * ML);
    int32_t *out2 = malloc(sizeof(int32_t) * MB * ML), *tgt2 = malloc(sizeof(int32_t) * MB * ML);
    rng r;
    rng_init(&r, 5, 0, RNG_PURPOSE_TEST, 2);
    for (int b = 0; b < MB; b++) {
        int len = ML / 2 + (int)rng_below(&r, ML / 2 + 1);  /* tail padding in most sequences */
        for (int t = 0; t < ML; t++) {
            int n = b * ML + t;
            am[n] = t < len;
            ids[n] = t >= len ? sp.pad : t == 0 ? sp.cls : t == len - 1 || t == len / 2 ? sp.sep
                   : rng_below(&r, 50) == 0 ? sp.unk : 104 + (int32_t)rng_below(&r, V - 104);
        }
    }
    long eligible = 0, selected = 0, as_mask = 0, as_same = 0, as_other = 0;
    double other_sum = 0;
    bool invariants = true, det = true, differs_step = false, differs_rank = false, in_place = true;
    for (int s = 0; s < MSTEPS; s++) {
        int k = bert_mask_tokens(out, tgt, ids, am, MB, ML, V, &sp, 42, 3, (uint64_t)s);
        long sel = 0;
        for (int n = 0; n < MB * ML; n++) {
            bool special = ids[n] == sp.pad || ids[n] == sp.unk || ids[n] == sp.cls || ids[n] == sp.sep;
            bool elig = am[n] && !special;
            eligible += elig;
            if (tgt[n] < 0) { invariants &= tgt[n] == -1 && out[n] == ids[n]; continue; }
            invariants &= elig && tgt[n] == ids[n] && out[n] >= 0 && out[n] < V;
            sel++;
            if (out[n] == sp.mask) as_mask++;
            else if (out[n] == ids[n]) as_same++;
            else as_other++, other_sum += out[n];
        }
        invariants &= sel == k;
        selected += sel;
        bert_mask_tokens(out2, tgt2, ids, am, MB, ML, V, &sp, 42, 3, (uint64_t)s);
        det &= !memcmp(out, out2, sizeof(int32_t) * MB * ML) && !memcmp(tgt, tgt2, sizeof(int32_t) * MB * ML);
        memcpy(out2, ids, sizeof(int32_t) * MB * ML);
        bert_mask_tokens(out2, tgt2, out2, am, MB, ML, V, &sp, 42, 3, (uint64_t)s);
        in_place &= !memcmp(out, out2, sizeof(int32_t) * MB * ML) && !memcmp(tgt, tgt2, sizeof(int32_t) * MB * ML);
        bert_mask_tokens(out2, tgt2, ids, am, MB, ML, V, &sp, 42, 3, (uint64_t)s + 1);
        differs_step |= memcmp(tgt, tgt2, sizeof(int32_t) * MB * ML) != 0;
        bert_mask_tokens(out2, tgt2, ids, am, MB, ML, V, &sp, 42, 4, (uint64_t)s);
        differs_rank |= memcmp(tgt, tgt2, sizeof(int32_t) * MB * ML) != 0;
    }
    check(invariants, "masking: only non-pad, non-special positions selected; targets = originals, -1 elsewhere");
    check(det && in_place, "masking: same (seed, rank, step) gives the same batch, in place too");
    check(differs_step && differs_rank, "masking: another step or another rank gives another selection");
    /* A selected token shows as [MASK] with p = 0.8 + 0.1/V (the random id may be [MASK]),
     * unchanged with 0.1 + 0.1/V (the random id may be the original), another id with 0.1 (1 - 2/V). */
    check(binomial_ok(selected, eligible, 0.15, "selected / eligible"), "masking: 15% of eligible positions selected");
    check(binomial_ok(as_mask, selected, 0.8 + 0.1 / V, "[MASK] / selected"), "masking: 80% replaced by [MASK]");
    check(binomial_ok(as_same, selected, 0.1 + 0.1 / V, "unchanged / selected"), "masking: 10% unchanged");
    check(binomial_ok(as_other, selected, 0.1 * (1 - 2.0 / V), "random / selected"),
          "masking: 10% replaced by a random id");
    /* Random ids are uniform on [0, V) less two values: mean ~ (V-1)/2, sd (V/sqrt(12))/sqrt(n). */
    double mean = other_sum / (double)as_other, sd = V / sqrt(12.0) / sqrt((double)as_other);
    printf("# random ids: mean %.2f, expected %.2f, %.2f sd off\n", mean, (V - 1) / 2.0, fabs(mean - (V - 1) / 2.0) / sd);
    check(fabs(mean - (V - 1) / 2.0) <= 6 * sd, "masking: random replacement ids are uniform on [0, V) (mean)");
    free(ids); free(am); free(out); free(tgt); free(out2); free(tgt2);
}

int main(void)
{
    test_config_errors();
    test_masking();

    bert_config cfg;
    if (bert_config_named(&cfg, "bert-tiny") != STATUS_OK) return 1;
    cfg.vocab_size = V;  /* the test's small vocabulary */
    bert m;
    if (bert_init(&m, &cfg, B, T, 1234, true) != STATUS_OK) return 1;
    test_init(&m);

    /* Sentence pairs: [CLS] A [SEP] B [SEP] (types 0..0 1..1), sequence 1 padded from PAD_FROM. */
    const bert_special_tokens sp = BERT_SPECIAL_TOKENS_UNCASED;
    int32_t ids[B * T], types[B * T], am[B * T], inputs[B * T], targets[B * T];
    rng r;
    rng_init(&r, 99, 0, RNG_PURPOSE_TEST, 0);
    for (int b = 0; b < B; b++) {
        int len = b == 0 ? T : PAD_FROM, sep = len / 2;
        for (int t = 0; t < T; t++) {
            int n = b * T + t;
            am[n] = t < len;
            types[n] = t > sep && t < len;
            ids[n] = t >= len ? sp.pad : t == 0 ? sp.cls : t == sep || t == len - 1 ? sp.sep
                   : 104 + (int32_t)rng_below(&r, V - 104);
        }
    }
    /* One [PAD] id that the mask keeps: HF's padding_idx gives its row no gradient from
     * the lookup (tail padding alone never would: masked keys pass no gradient). */
    ids[5] = sp.pad;
    int ntgt = 0;  /* the first step whose draw predicts at least 4 tokens (deterministic) */
    for (uint64_t step = 0; ntgt < 4; step++) ntgt = bert_mask_tokens(inputs, targets, ids, am, B, T, V, &sp, 7, 0, step);

    /* The HF init (std 0.02) keeps attention near uniform and GELU near linear, so a
     * wrong formula (tanh GELU, the mask ignored) could hide inside the tolerance; the
     * check uses O(1) activations instead: weights x10, random biases and LayerNorm
     * gains, and a non-zero [PAD] row. */
    rng_init(&r, 7, 0, RNG_PURPOSE_TEST, 1);
    for (int i = 0; i < m.pt.count; i++) {
        const param_entry *e = &m.pt.entries[i];
        float *w = m.pb.params + e->offset;
        bool bias = strstr(e->name, "bias") != NULL, norm = strstr(e->name, "LayerNorm.weight") != NULL;
        for (size_t k = 0; k < e->count; k++) {
            if (bias) w[k] = 0.2f * (rng_uniform(&r) - 0.5f);
            else if (norm) w[k] = 1.0f + 0.4f * (rng_uniform(&r) - 0.5f);
            else w[k] *= 10.0f;
        }
    }
    float *pad_row = m.pb.params + m.pt.entries[param_find(&m.pt, "embeddings.word_embeddings.weight")].offset;
    for (int c = 0; c < cfg.channels; c++) pad_row[(size_t)sp.pad * cfg.channels + c] = 0.2f * rng_normal(&r);

    float *init = malloc(m.pt.total * sizeof(float));
    memcpy(init, m.pb.params, m.pt.total * sizeof(float));
    param_zero_grads(&m.pb, &m.pt);
    if (bert_forward(&m, inputs, types, am, targets) != STATUS_OK) return 1;
    bert_backward(&m);
    float loss = m.mean_loss;
    size_t nlog = (size_t)B * T * V;
    float *logits = malloc(nlog * sizeof(float)), *grads = malloc(m.pt.total * sizeof(float));
    memcpy(grads, m.pb.grads, m.pt.total * sizeof(float));
    /* With targets the head ran at the targeted positions only; without, at every one:
     * its rows must be those rows of the full logits (the same arithmetic per row). */
    int R = m.head_targeted, nt_expect = 0;
    float *head = malloc((size_t)m.head_rows * V * sizeof(float));
    memcpy(head, m.acts.logits, (size_t)R * V * sizeof(float));
    if (bert_forward(&m, inputs, types, am, NULL) != STATUS_OK) return 1;
    memcpy(logits, m.acts.logits, nlog * sizeof(float));
    double head_worst = 0;
    for (int i = 0; i < B * T; i++) nt_expect += targets[i] >= 0;
    for (int j = 0; j < R; j++)
        for (int v = 0; v < V; v++) {
            double ref = logits[(size_t)m.head_pos[j] * V + v], d = fabs(head[(size_t)j * V + v] - ref);
            double r = d / (1e-6 + 1e-5 * fabs(ref));
            if (!(r <= head_worst)) head_worst = r;
        }
    bool head_ok = R == nt_expect && R > 0 && m.head_rows >= R && head_worst <= 1.0;
    printf("%s  the MLM head at the %d targeted positions (of %d) gives the full logits' rows "
           "(worst |d|/(1e-6+1e-5|ref|) %.3g)\n", head_ok ? "ok  " : "FAIL", R, B * T, head_worst);
    failures += !head_ok;
    free(head);

    /* The 10-step trajectory with BERT's optimizer (Devlin et al. A.2): AdamW (0.9, 0.999),
     * eps 1e-6, weight decay 0.01, linear warmup then linear decay to 0. */
    const double lr = 1e-3, wd = 0.01;
    lr_schedule sched = { .kind = LR_SCHEDULE_LINEAR, .base_lr = lr, .warmup_steps = WARMUP, .total_steps = STEPS,
                          .min_lr = 0 };
    adamw_hparams hp = { .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = wd };
    float traj[STEPS];
    for (int s = 0; s < STEPS; s++) {
        param_zero_grads(&m.pb, &m.pt);
        if (bert_forward(&m, inputs, types, am, targets) != STATUS_OK) return 1;
        bert_backward(&m);
        traj[s] = m.mean_loss;
        optim_adamw_step(&m.pt, &m.pb, &hp, lr_at(&sched, s), s + 1);
    }

    int n = m.pt.count, nt = 2 * n + 7;
    st_tensor *t = calloc((size_t)nt, sizeof *t);
    st_name *names = calloc((size_t)nt, sizeof *names);
    st_add_table(t, st_add_table(t, 0, names, &m.pt, "", init), names, &m.pt, "grad.", grads); /* params, then grad.* */
    float fin[B * T], ftype[B * T], fam[B * T], ftgt[B * T];
    for (int i = 0; i < B * T; i++) fin[i] = inputs[i], ftype[i] = types[i], fam[i] = am[i], ftgt[i] = targets[i];
    t[2 * n] = (st_tensor){ "in.input_ids", 2, { B, T }, fin };
    t[2 * n + 1] = (st_tensor){ "in.token_type_ids", 2, { B, T }, ftype };
    t[2 * n + 2] = (st_tensor){ "in.attention_mask", 2, { B, T }, fam };
    t[2 * n + 3] = (st_tensor){ "in.targets", 2, { B, T }, ftgt };
    t[2 * n + 4] = (st_tensor){ "out.logits", 3, { B, T, V }, logits };
    t[2 * n + 5] = (st_tensor){ "out.loss", 1, { 1 }, &loss };
    t[2 * n + 6] = (st_tensor){ "traj.losses", 1, { STEPS }, traj };
    char meta[512];
    snprintf(meta, sizeof meta,
             "{\"layers\":\"%d\",\"heads\":\"%d\",\"pad_token_id\":\"%d\",\"lr\":\"%g\",\"weight_decay\":\"%g\","
             "\"beta1\":\"%g\",\"beta2\":\"%g\",\"eps\":\"%g\",\"steps\":\"%d\",\"warmup\":\"%d\"}",
             cfg.num_layers, cfg.num_heads, cfg.pad_token_id, lr, wd, hp.beta1, hp.beta2, hp.eps, STEPS, WARMUP);
    char dir[256], path[320], cmd[1024];
    const char *tmpd = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/nebula-bert-XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/dump.safetensors", dir);
    if (st_write(path, t, nt, meta) != STATUS_OK) return 1;
    printf("# bert-tiny, V=%d (%zu parameters), B=%d T=%d, %d MLM targets, loss %.6f; comparing with PyTorch\n", V,
           param_numel(&m.pt), B, T, ntgt, loss);
    fflush(stdout);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 validation/reference/bert_ref.py %s", path);
    int rc = system(cmd);
    unlink(path);
    rmdir(dir);
    free(t); free(names); free(init); free(logits); free(grads);
    bert_free(&m);
    if (rc != 0) failures++;
    printf("%s - test_bert_ref: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
