/* bench_model — training-step throughput of a model on this process's cores:
 * per step forward / backward / optimizer time, tokens/s, model FLOPs and their
 * ratio to a GEMM rate measured in the same process (the honest ceiling on a CPU),
 * and peak RSS. Single process; the peer is tools/peers/bench_model_torch.py. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"
#include "bert.h"
#include "gpt2.h"
#include "optim.h"
#include "resnet.h"
#include "rng.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Best of 3 square SGEMMs of size n: the rate the model's GEMMs could reach. */
static double sgemm_gflops(int n)
{
    float *a = malloc((size_t)n * n * sizeof(float)), *b = malloc((size_t)n * n * sizeof(float));
    float *c = calloc((size_t)n * n, sizeof(float));
    CHECK(a && b && c, "out of memory for the SGEMM probe");
    for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        double t0 = omp_get_wtime();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = omp_get_wtime() - t0;
        if (r > 0 && t < best) best = t;  /* the first call warms up OpenBLAS's threads */
    }
    free(a); free(b); free(c);
    return 2.0 * n * n * (double)n / best / 1e9;
}

/* One model of any family behind the few calls the step loop needs. */
typedef struct bench_net {
    const char *unit;          /* "tok", "seq" or "img": what throughput counts */
    double units;              /* units per step */
    double flops_step;         /* model FLOPs per step */
    param_table *pt;           /* the model's table */
    param_buffers *pb;         /* and buffers */
    size_t act_bytes;          /* activations and their gradients */
    const float *loss;         /* the model's mean_loss */
    bool sgd;                  /* SGD with momentum (ResNet) instead of AdamW */
    gpt2 g;                    /* the model, by family */
    bert b;
    resnet r;
    int family;                /* 0 gpt2, 1 bert, 2 resnet */
    int32_t *ids, *targets, *mask;  /* synthetic batch */
    float *images;
} bench_net;

static status net_init(bench_net *n, const char *name, int B, int T)
{
    memset(n, 0, sizeof *n);
    rng r;
    rng_init(&r, 1, 0, RNG_PURPOSE_DATA, 0);
    if (!strncmp(name, "gpt2", 4)) {
        gpt2_config c;
        TRY(gpt2_config_named(&c, name));
        TRY(gpt2_init(&n->g, &c, B, T, 1, true));
        n->family = 0, n->unit = "tok", n->units = (double)B * T, n->pt = &n->g.pt, n->pb = &n->g.pb;
        n->flops_step = gpt2_flops_per_token(&n->g) * B * T, n->loss = &n->g.mean_loss;
        n->act_bytes = (n->g.act_floats + n->g.grad_floats) * sizeof(float);
    } else if (!strncmp(name, "bert", 4)) {
        bert_config c;
        TRY(bert_config_named(&c, name));
        TRY(bert_init(&n->b, &c, B, T, 1, true));
        n->family = 1, n->unit = "seq", n->units = B, n->pt = &n->b.pt, n->pb = &n->b.pb;
        n->flops_step = bert_flops_per_token(&n->b) * B * T, n->loss = &n->b.mean_loss;
        n->act_bytes = (n->b.act_floats + n->b.grad_floats) * sizeof(float);
    } else if (!strncmp(name, "resnet", 6)) {
        resnet_config c;
        TRY(resnet_config_named(&c, name));
        int hw = c.stem == RESNET_STEM_CIFAR ? 32 : 224;
        TRY(resnet_init(&n->r, &c, B, hw, hw, 1, true));
        n->family = 2, n->unit = "img", n->units = B, n->pt = &n->r.pt, n->pb = &n->r.pb, n->sgd = true;
        n->flops_step = resnet_flops_per_image(&n->r) * B, n->loss = &n->r.mean_loss;
        n->act_bytes = (n->r.act_floats + n->r.grad_floats) * sizeof(float);
        n->images = malloc((size_t)B * 3 * hw * hw * sizeof(float));
        n->targets = malloc((size_t)B * sizeof(int32_t));
        CHECK(n->images && n->targets, "out of memory for the synthetic batch");
        for (size_t i = 0; i < (size_t)B * 3 * hw * hw; i++) n->images[i] = rng_uniform(&r) - 0.5f;
        for (int i = 0; i < B; i++) n->targets[i] = (int32_t)rng_below(&r, (uint32_t)c.num_classes);
        return STATUS_OK;
    } else {
        log_error0("unknown model '%s'; families: gpt2*, bert*, resnet* (--help lists the names)", name);
        return STATUS_INPUT;
    }
    int V = n->family == 0 ? n->g.cfg.vocab_size : n->b.cfg.vocab_size;
    size_t bt = (size_t)B * T;
    n->ids = malloc(bt * sizeof *n->ids), n->targets = malloc(bt * sizeof *n->targets), n->mask = malloc(bt * sizeof *n->mask);
    CHECK(n->ids && n->targets && n->mask, "out of memory for the synthetic batch");
    for (size_t i = 0; i < bt; i++) {
        int32_t lo = n->family == 1 && V > 104 ? 104 : 0;  /* clear of BERT's special ids 0..103 */
        n->ids[i] = lo + (int32_t)rng_below(&r, (uint32_t)(V - lo));
        n->mask[i] = 1;
        /* GPT-2: next-token targets everywhere; BERT: 15% of positions are MLM targets. */
        n->targets[i] = n->family == 0 ? (int32_t)rng_below(&r, (uint32_t)V)
                                       : (rng_uniform(&r) < 0.15f ? n->ids[i] : -1);
    }
    return STATUS_OK;
}

static status net_forward(bench_net *n)
{
    if (n->family == 0) return gpt2_forward(&n->g, n->ids, n->targets);
    if (n->family == 1) return bert_forward(&n->b, n->ids, NULL, n->mask, n->targets);
    return resnet_forward(&n->r, n->images, n->targets, true);
}

static void net_backward(bench_net *n)
{
    if (n->family == 0) gpt2_backward(&n->g, n->ids);
    else if (n->family == 1) bert_backward(&n->b);
    else resnet_backward(&n->r);
}

static void net_free(bench_net *n)
{
    if (n->family == 0) gpt2_free(&n->g);
    else if (n->family == 1) bert_free(&n->b);
    else resnet_free(&n->r);
    free(n->ids); free(n->targets); free(n->mask); free(n->images);
}

status bench_model_run(const config *cfg)
{
    const char *name = config_str(cfg, "bench.model");
    int B = (int)config_int(cfg, "bench.batch"), T = (int)config_int(cfg, "bench.seq");
    int steps = (int)config_int(cfg, "bench.steps"), warm = (int)config_int(cfg, "bench.model_warmup");
    int threads = (int)config_int(cfg, "bench.threads");
    if (threads > 0) {
        omp_set_num_threads(threads);
        openblas_set_num_threads(threads);
    }
    bench_net *n = malloc(sizeof *n);
    CHECK(n, "out of memory");
    status st = net_init(n, name, B, T);
    if (st != STATUS_OK) { free(n); return st; }
    adamw_hparams hp = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 };
    sgd_hparams sp = { .momentum = 0.9, .weight_decay = 1e-4 };
    double gflops = sgemm_gflops(2048);
    bool csv = !strcmp(config_str(cfg, "bench.format"), "csv");
    char shape[64];
    if (n->family == 2) snprintf(shape, sizeof shape, "B=%d %dx%d", B, n->r.H, n->r.W);
    else snprintf(shape, sizeof shape, "B=%d T=%d", B, T);
    printf("# nebula-bench model: %s (%.1fM parameters), %s, %d threads, fp32, %s\n", name,
           (double)n->pt->total / 1e6, shape, omp_get_max_threads(), n->sgd ? "SGD momentum" : "AdamW");
    printf("# sgemm 2048^3 in this process: %.1f GFLOP/s; model FLOPs per step %.1f G\n", gflops, n->flops_step / 1e9);
    param_print_memory(n->pt, n->act_bytes, 0, stdout);
    if (csv) printf("step,fwd_ms,bwd_ms,opt_ms,total_ms,%s_per_s,gflops,pct_sgemm,loss\n", n->unit);
    else printf("# %4s %9s %9s %9s %10s %8s/s %9s %8s %9s\n", "step", "fwd_ms", "bwd_ms", "opt_ms", "total_ms", n->unit,
                "GFLOP/s", "%sgemm", "loss");
    double *tf = calloc((size_t)steps, sizeof(double)), *tb = calloc((size_t)steps, sizeof(double));
    double *to = calloc((size_t)steps, sizeof(double)), *tt = calloc((size_t)steps, sizeof(double));
    for (int s = -warm; s < steps && st == STATUS_OK; s++) {
        double t0 = omp_get_wtime();
        param_zero_grads(n->pb, n->pt);
        st = net_forward(n);
        if (st != STATUS_OK) break;
        double t1 = omp_get_wtime();
        net_backward(n);
        double t2 = omp_get_wtime();
        if (n->sgd) optim_sgd_step(n->pt, n->pb, &sp, 0.01, s + warm + 1);
        else optim_adamw_step(n->pt, n->pb, &hp, 3e-4, s + warm + 1);
        double t3 = omp_get_wtime();
        if (s < 0) continue;
        tf[s] = (t1 - t0) * 1e3; tb[s] = (t2 - t1) * 1e3; to[s] = (t3 - t2) * 1e3; tt[s] = (t3 - t0) * 1e3;
        double ups = n->units / (t3 - t0), gf = n->flops_step / (t3 - t0) / 1e9;
        printf(csv ? "%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.1f,%.4f\n" : "  %4d %9.2f %9.2f %9.2f %10.2f %10.2f %9.2f %7.1f%% %9.4f\n",
               s, tf[s], tb[s], to[s], tt[s], ups, gf, 100 * gf / gflops, *n->loss);
    }
    if (st == STATUS_OK && steps > 0) {
        double mt = median(tt, steps), ups = n->units / (mt / 1e3), gf = n->flops_step / (mt / 1e3) / 1e9;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("# median: fwd %.2f ms, bwd %.2f ms, opt %.2f ms, step %.2f ms, %.2f %s/s, %.2f GFLOP/s = %.1f%% of "
               "sgemm, peak RSS %.0f MiB\n", median(tf, steps), median(tb, steps), median(to, steps), mt, ups, n->unit,
               gf, 100 * gf / gflops, ru.ru_maxrss / 1024.0);
    }
    free(tf); free(tb); free(to); free(tt);
    net_free(n);
    free(n);
    return st;
}
