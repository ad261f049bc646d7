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
#include "gpt2.h"
#include "optim.h"
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
    gpt2_config gc;
    TRY(gpt2_config_named(&gc, name));
    gpt2 m;
    TRY(gpt2_init(&m, &gc, B, T, 1, true));
    int32_t *tokens = malloc((size_t)B * T * sizeof *tokens), *targets = malloc((size_t)B * T * sizeof *targets);
    rng r;
    rng_init(&r, 1, 0, RNG_PURPOSE_DATA, 0);
    for (int i = 0; i < B * T; i++) {
        tokens[i] = (int32_t)rng_below(&r, (uint32_t)gc.vocab_size);
        targets[i] = (int32_t)rng_below(&r, (uint32_t)gc.vocab_size);
    }
    adamw_hparams hp = { .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1 };
    double gflops = sgemm_gflops(2048);
    bool csv = !strcmp(config_str(cfg, "bench.format"), "csv");
    printf("# nebula-bench model: %s (%.1fM parameters), B=%d T=%d, %d threads, fp32\n", name,
           (double)m.pt.total / 1e6, B, T, omp_get_max_threads());
    printf("# sgemm 2048^3 in this process: %.1f GFLOP/s; model FLOPs = 6 x parameters per token\n", gflops);
    param_print_memory(&m.pt, m.act_floats * sizeof(float) + m.grad_floats * sizeof(float), 0, stdout);
    printf(csv ? "step,fwd_ms,bwd_ms,opt_ms,total_ms,tok_per_s,gflops,pct_sgemm,loss\n"
               : "# %4s %9s %9s %9s %10s %10s %9s %8s %9s\n", "step", "fwd_ms", "bwd_ms", "opt_ms", "total_ms",
           "tok/s", "GFLOP/s", "%sgemm", "loss");
    double *tf = calloc((size_t)steps, sizeof(double)), *tb = calloc((size_t)steps, sizeof(double));
    double *to = calloc((size_t)steps, sizeof(double)), *tt = calloc((size_t)steps, sizeof(double));
    double flops_step = gpt2_flops_per_token(&m) * B * T;
    status st = STATUS_OK;
    for (int s = -warm; s < steps && st == STATUS_OK; s++) {
        double t0 = omp_get_wtime();
        param_zero_grads(&m.pb, &m.pt);
        st = gpt2_forward(&m, tokens, targets);
        double t1 = omp_get_wtime();
        gpt2_backward(&m, tokens);
        double t2 = omp_get_wtime();
        optim_adamw_step(&m.pt, &m.pb, &hp, 3e-4, s + warm + 1);
        double t3 = omp_get_wtime();
        if (s < 0) continue;
        tf[s] = (t1 - t0) * 1e3; tb[s] = (t2 - t1) * 1e3; to[s] = (t3 - t2) * 1e3; tt[s] = (t3 - t0) * 1e3;
        double tps = B * T / (t3 - t0), gf = flops_step / (t3 - t0) / 1e9;
        printf(csv ? "%d,%.2f,%.2f,%.2f,%.2f,%.1f,%.2f,%.1f,%.4f\n" : "  %4d %9.2f %9.2f %9.2f %10.2f %10.1f %9.2f %7.1f%% %9.4f\n",
               s, tf[s], tb[s], to[s], tt[s], tps, gf, 100 * gf / gflops, m.mean_loss);
    }
    if (st == STATUS_OK && steps > 0) {
        double mt = median(tt, steps), tps = B * T / (mt / 1e3), gf = flops_step / (mt / 1e3) / 1e9;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("# median: fwd %.2f ms, bwd %.2f ms, opt %.2f ms, step %.2f ms, %.1f tok/s, %.2f GFLOP/s = %.1f%% of "
               "sgemm, peak RSS %.0f MiB\n", median(tf, steps), median(tb, steps), median(to, steps), mt, tps, gf,
               100 * gf / gflops, ru.ru_maxrss / 1024.0);
    }
    free(tf); free(tb); free(to); free(tt); free(tokens); free(targets);
    gpt2_free(&m);
    return st;
}
