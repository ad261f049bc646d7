/* test_mlp_ref — Nebula's MLP against PyTorch (the llm.c test_gpt2 idea, with PyTorch run
 * in the same test, as test_resnet_ref). For each case the model is built through model.h
 * from [model] keys, as nebula-train builds it; validation/reference/mlp_ref.py builds
 * the nn.Sequential of mlp.h's comment, loads Nebula's initial weights by name with
 * strict=True and runs in float64. Checked there: train-mode logits and mean loss, every
 * parameter gradient by name, a 10-step SGD loss trajectory (momentum 0.9, weight decay
 * 5e-4 on the weights only, warmup + step LR, optim_sgd_step here) and the parameters it
 * ends with.
 *
 * Tolerances are derived, not picked: a value that went through reductions of total
 * length n (inputs D, the hidden widths, the classes, the batch) carries at most
 * ~n fp32 roundings of its terms, so |d| <= 4 eps n (|ref| + max |ref| of its tensor)
 * (kc_rtol_f32's rule; the max term because a sum's error scales with its terms, not
 * with its result). Each SGD step adds at most one such error to the parameters, so
 * the trajectory and the final parameters get `steps` times it.
 *
 * The ReLU branches are Nebula's at every step, as in test_resnet_ref: each step ships
 * which hidden outputs are > 0, the reference multiplies by that mask, and it checks that
 * wherever its own branch would differ the pre-activation is a near-tie. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "ckpt/tool/safetensors.h"
#include "nn/model.h"
#include "nn/optim.h"

enum { STEPS = 10, WARMUP = 2, STEP_SIZE = 4 };

typedef struct ref_case {
    const char *tag;      /* the case's name in file names and lines */
    int image, hidden, layers, classes, B;
} ref_case;

static const config_key schema[] = { MODEL_CONFIG_KEYS };

static float *copy_of(const float *p, size_t n)
{
    float *c = malloc(n * sizeof *c);
    CHECK(c, "test_mlp_ref: out of memory");
    memcpy(c, p, n * sizeof *c);
    return c;
}

static status build(model *m, const ref_case *rc)
{
    config cfg;
    char a[4][64];
    TRY(config_init(&cfg, schema, (int)(sizeof schema / sizeof schema[0])));
    snprintf(a[0], sizeof a[0], "model.image_size=%d", rc->image);
    snprintf(a[1], sizeof a[1], "model.mlp_hidden=%d", rc->hidden);
    snprintf(a[2], sizeof a[2], "model.mlp_layers=%d", rc->layers);
    snprintf(a[3], sizeof a[3], "model.num_classes=%d", rc->classes);
    TRY(config_set(&cfg, "model.name=mlp"));
    for (int i = 0; i < 4; i++) TRY(config_set(&cfg, a[i]));
    model_spec spec;
    TRY(model_spec_from_config(&spec, &cfg));
    return model_init(m, &spec, rc->B, 0, 1234, true);
}

/* Runs Nebula on one case and writes its dump to `path`; 0 on success. */
static int run_case(const ref_case *rc, const char *path)
{
    model m;
    if (build(&m, rc) != STATUS_OK) return 1;
    const mlp *net = &m.mlp;
    param_table *pt = model_params(&m);
    param_buffers *pb = model_buffers(&m);
    int B = rc->B, K = rc->classes, H = rc->hidden, L = rc->layers, D = 3 * rc->image * rc->image;
    model_batch b;
    if (model_batch_init(&b, &m) != STATUS_OK) return 1;
    rng r;
    rng_init(&r, 99, 0, RNG_PURPOSE_TEST, 0);
    for (size_t i = 0; i < (size_t)B * D; i++) b.images[i] = rng_normal(&r);
    float flabels[64];
    for (int i = 0; i < B; i++) flabels[i] = (float)(b.targets[i] = (int32_t)rng_below(&r, (uint32_t)K));
    float *init = copy_of(pb->params, pt->total);

    const double lr = 0.05, momentum = 0.9, wd = 5e-4, gamma = 0.5;
    lr_schedule sched = { .kind = LR_SCHEDULE_STEP, .base_lr = lr, .warmup_steps = WARMUP, .step_size = STEP_SIZE,
                          .gamma = gamma };
    sgd_hparams hp = { .momentum = momentum, .weight_decay = wd };
    size_t nmask = (size_t)B * H * (size_t)L;
    float traj[STEPS], loss = 0, *logits = NULL, *grads = NULL, *masks = malloc((STEPS * nmask + 1) * sizeof *masks);
    for (int s = 0; s < STEPS; s++) {
        param_zero_grads(pb, pt);
        if (model_forward(&m, &b, true) != STATUS_OK) return 1;
        model_backward(&m);
        traj[s] = model_loss(&m);
        for (int l = 0; l < L; l++)  /* the branch each hidden output took: 1 where it is > 0 */
            for (size_t j = 0; j < (size_t)B * H; j++)
                masks[s * nmask + (size_t)l * B * H + j] = net->layer[l].out_act[j] > 0;
        if (s == 0) {
            int V;
            loss = model_loss(&m);
            logits = copy_of(model_class_logits(&m, &V), (size_t)B * K);
            grads = copy_of(pb->grads, pt->total);
        }
        optim_sgd_step(pt, pb, &hp, lr_at(&sched, s), s + 1);
    }

    int nt_max = 3 * pt->count + STEPS + 5, nt = 0;
    st_tensor *t = calloc((size_t)nt_max, sizeof *t);
    st_name *names = calloc((size_t)nt_max, sizeof *names);
    nt = st_add_table(t, nt, names, pt, "", init);
    nt = st_add_table(t, nt, names, pt, "grad.", grads);
    nt = st_add_table(t, nt, names, pt, "final.", pb->params);
    for (int s = 0; s < STEPS && L; s++) {
        snprintf(names[nt], sizeof names[nt], "branch.relu.%d", s);
        t[nt] = (st_tensor){ names[nt], 3, { L, B, H }, masks + s * nmask };
        nt++;
    }
    t[nt++] = (st_tensor){ "in.images", 4, { B, 3, rc->image, rc->image }, b.images };
    t[nt++] = (st_tensor){ "in.labels", 1, { B }, flabels };
    t[nt++] = (st_tensor){ "out.logits", 2, { B, K }, logits };
    t[nt++] = (st_tensor){ "out.loss", 1, { 1 }, &loss };
    t[nt++] = (st_tensor){ "traj.losses", 1, { STEPS }, traj };
    char meta[512];
    snprintf(meta, sizeof meta,
             "{\"case\":\"%s\",\"inputs\":\"%d\",\"hidden\":\"%d\",\"layers\":\"%d\",\"classes\":\"%d\","
             "\"batch\":\"%d\",\"lr\":\"%g\",\"momentum\":\"%g\",\"weight_decay\":\"%g\",\"steps\":\"%d\","
             "\"warmup\":\"%d\",\"step_size\":\"%d\",\"gamma\":\"%g\"}",
             rc->tag, D, H, L, K, B, lr, momentum, wd, STEPS, WARMUP, STEP_SIZE, gamma);
    status st = st_write(path, t, nt, meta);
    printf("# %s: %zu parameters, B=%d, %d inputs: loss %.6f -> %.6f in %d SGD steps\n", rc->tag, param_numel(pt), B,
           D, loss, traj[STEPS - 1], STEPS);
    free(t), free(names), free(init), free(logits), free(grads), free(masks);
    model_batch_free(&b);
    model_free(&m);
    return st == STATUS_OK ? 0 : 1;
}

/* Usage: test_mlp_ref [CASE] — all cases, or the one named. */
int main(int argc, char **argv)
{
    static const ref_case cases[] = {
        { "mlp-2x64", 8, 64, 2, 10, 16 },   /* the preset's sizes with a second hidden layer */
        { "mlp-logistic", 8, 64, 0, 10, 16 }, /* mlp_layers = 0 */
    };
    enum { NCASES = sizeof cases / sizeof cases[0] };
    char dir[256], paths[NCASES][320], cmd[4096];
    const char *tmpd = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/nebula-mlp-XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
    if (!mkdtemp(dir)) { perror("test_mlp_ref: mkdtemp"); return 1; }
    int failed = 0, ran = 0, len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 validation/reference/mlp_ref.py");
    for (int i = 0; i < NCASES; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].tag) != 0) continue;
        snprintf(paths[ran], sizeof paths[ran], "%s/%s.safetensors", dir, cases[i].tag);
        failed += run_case(&cases[i], paths[ran]);
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %s", paths[ran]);
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "test_mlp_ref: no case named '%s'; cases: mlp-2x64, mlp-logistic\n", argv[1]);
        rmdir(dir);
        return 2;
    }
    printf("# comparing with PyTorch in float64\n");
    fflush(stdout);
    int rc_py = system(cmd);
    bool keep = getenv("NEBULA_KEEP_DUMP") != NULL;  /* to rerun mlp_ref.py by hand */
    for (int i = 0; i < ran; i++) {
        if (keep) printf("# kept %s\n", paths[i]);
        else unlink(paths[i]);
    }
    if (!keep) rmdir(dir);
    if (rc_py != 0) failed++;
    printf("%s - test_mlp_ref: Nebula's MLP %s PyTorch\n", failed ? "FAIL" : "ok",
           failed ? "disagrees with (see above)" : "agrees with");
    return failed ? 1 : 0;
}
