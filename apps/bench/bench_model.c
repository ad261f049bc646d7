/* bench_model — training-step throughput of a model on this process's cores:
 * per step forward / backward / optimizer time, tokens/s, model FLOPs and their
 * ratio to a GEMM rate measured in the same process (the honest ceiling on a CPU),
 * and peak RSS. Single process; the peer is tools/peers/bench_model_torch.py.
 *
 * The one design decision: on the CPU the step timed is the trainer's own
 * (train_step, what nebula-train runs), set up by train_setup at one rank from the
 * bench keys — data.train = synthetic-fixed (one synthetic batch, seeded by
 * bench.seed, as every step's micro-batch, as in Horovod's and PyTorch's synthetic
 * benchmarks), the optimizer below, no checkpoints, a temporary run directory
 * removed after. The model is any libcore/nn preset ([model] keys, --model NAME or
 * --config configs/models/NAME.ini). --device cuda steps through train_step_batch
 * until the trainer runs on a GPU. */
#include "cpu/blas.h"
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cpu/isa.h"
#include "bench.h"
#include "cpu/dnn.h"
#include "cpu/gemm.h"
#include "cpu/peak.h"
#include "base/path.h"
#include "nn/device.h"
#include "nn/gemm_tune.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "train/train.h"
#ifdef NEBULA_CUDA
#include "cuda/probe.h"
#endif

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The GEMM rate of an n^3 product in this process, on the path the model's layers take
 * (gemm_default: the BLAS or oneDNN, gemm.h; a tuning table's shapes are the model's own), or (bf16) the bf16 matmul of --precision bf16
 * with its operand rounding. Never the BLAS on its own: a BLAS that runs kernels below
 * the CPU would make a crippled model look efficient. Best of 3 after a warm-up. */
static double gemm_gflops(int n, bool bf16)
{
    float *a = malloc((size_t)n * n * sizeof(float)), *b = malloc((size_t)n * n * sizeof(float));
    float *c = calloc((size_t)n * n, sizeof(float));
    CHECK(a && b && c, "out of memory for the GEMM probe");
    for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        double t0 = omp_get_wtime();
        if (bf16) matmul_forward_bf16(c, a, b, NULL, n, n, n, MATMUL_LAYOUT_IN_OUT);
        else gemm_f32_on(gemm_default(), false, false, n, n, n, a, n, b, n, false, c, n);  /* not a model shape */
        double t = omp_get_wtime() - t0;
        if (r > 0 && t < best) best = t;  /* the first call warms up the threads */
    }
    free(a); free(b); free(c);
    if (bf16) matmul_bf16_release();  /* the probe's weight copy and workspace: not the model's */
    return 2.0 * n * n * (double)n / best / 1e9;
}

/* 100 x / of, 0 when the denominator is unknown (no peak measured here). */
static double pct(double x, double of) { return of > 0 ? 100 * x / of : 0; }

/* One JSON object on one line of stdout (--json: a row per line, each parseable alone). */
static void emit_json(json_t *o)
{
    char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    CHECK(text, "out of memory formatting a JSON row");
    puts(text);
    free(text);
    json_decref(o);
}

void bench_provenance_row(const char *kind, const json_t *prov)
{
    emit_json(json_pack("{s:s, s:o}", kind, "provenance", "provenance", json_deep_copy(prov)));
}

/* --dry-run: the configuration resolved and checked; nothing allocated, so it is
 * cheap for any model (gpt2-xl included). --json: the same as one object, the text
 * on stderr. */
static void print_dry_run(const model_spec *spec, int B, int T, bool json, const json_t *prov)
{
    FILE *f = json ? stderr : stdout;
    fprintf(f, "# nebula-bench model --dry-run: the configuration is valid; nothing was allocated\nmodel: ");
    model_spec_print(spec, f);
    bool images = model_spec_images(spec);
    if (images) fprintf(f, "batch: B=%d %dx%d\n", B, spec->image_size, spec->image_size);
    else fprintf(f, "batch: B=%d T=%d\n", B, T);
    if (json) bench_provenance_row("row", prov);
    if (json)
        emit_json(json_pack("{s:s, s:s, s:b, s:i, s:i}", "row", "dry_run", "model", spec->name, "valid", 1, "batch", B,
                            images ? "image_size" : "seq", images ? spec->image_size : T));
}

/* --device cuda: one GPU. train_step_batch, the GPU twin of the trainer's step that the
 * CPU path times (the same zeroing, forward + backward and AdamW helpers, one process,
 * no data loader or reduction) through the device's kernel table; each phase ends with a
 * device synchronisation so that the host clock times the GPU's work. MFU is model FLOPs per
 * second over the bf16 GEMM rate measured in this process (kernels/cuda/probe.h). */
static status bench_model_device(const config *cfg, const model_spec *spec, int B, int T)
{
    device dev;
    TRY(device_open_from_config(&dev, cfg, 0));
    int steps = (int)config_int(cfg, "bench.steps"), warm = (int)config_int(cfg, "bench.model_warmup");
    model *m = calloc(1, sizeof *m);
    CHECK(m, "out of memory");
    train_optim opt = { 0 };
    model_batch batch = { 0 };
    status st = model_init_on(m, spec, B, T, 1, true, &dev);
    if (st != STATUS_OK) { free(m); device_close(&dev); return st; }
    if ((st = train_optim_init_default(&opt, m, &dev)) == STATUS_OK) st = model_batch_init(&batch, m);
    if (st == STATUS_OK) model_batch_synthetic(&batch, m, 1);
    double peak = -1;
#ifdef NEBULA_CUDA
    if (st == STATUS_OK) peak = cuda_gemm_bf16_flops(8192);
#endif
    const param_table *pt = model_params(m);
    double units = model_units_per_step(m), flops_step = model_flops_per_step(m);
    const char *unit = model_unit(m);
    if (st == STATUS_OK) {
        printf("# nebula-bench model --device cuda: %s (%.1fM parameters), B=%d T=%d, %s, AdamW\n", spec->name,
               (double)pt->total / 1e6, B, T, dev.describe);
        printf("# bf16 GEMM 8192^3 in this process: %.1f TFLOP/s; model FLOPs per step %.1f G\n", peak / 1e12,
               flops_step / 1e9);
        printf("# %4s %9s %9s %9s %10s %8s/s %8s %9s\n", "step", "fwd_ms", "bwd_ms", "opt_ms", "total_ms", unit, "MFU",
               "loss");
    }
    double *tt = calloc((size_t)steps, sizeof(double));
    for (int s = -warm; s < steps && st == STATUS_OK; s++) {
        train_step_stats ss;
        if ((st = train_step_batch(m, &opt, &batch, 3e-4, s + warm + 1, &ss)) != STATUS_OK) break;
        if (s < 0) continue;
        tt[s] = ss.step_ms;
        printf("  %4d %9.2f %9.2f %9.2f %10.2f %10.0f %7.1f%% %9.4f\n", s, ss.fwd_ms, ss.bwd_ms, ss.opt_ms, tt[s],
               units / (tt[s] / 1e3), 100 * flops_step / (tt[s] / 1e3) / peak, ss.loss);
    }
    if (st == STATUS_OK && steps > 0) {
        double mt = bench_median(tt, steps) / 1e3;
        printf("# median: step %.2f ms, %.2f %s/s, MFU %.1f%% of the bf16 GEMM rate", mt * 1e3, units / mt, unit,
               100 * flops_step / mt / peak);
        if (dev.precision == PRECISION_FP16)
            printf("; loss scale %g, %ld of %d steps skipped", opt.dopt.scaler.scale, opt.dopt.scaler.skipped,
                   warm + steps);
        printf("\n");
    }
    free(tt);
    model_batch_free(&batch);
    train_optim_free(&opt);
    model_free(m);
    free(m);
    device_close(&dev);
    return st;
}

/* The trainer of the benchmark: its config (schema, values) and run. */
typedef struct bench_trainer {
    config_key schema[256];    /* train_config_schema's keys; cfg refers to them */
    config cfg;
    train_run run;
    char dir[256];             /* the temporary run directory ("" before it exists) */
} bench_trainer;

/* "section.key=value" on the trainer's config; a key of the trainer's schema, so a
 * refusal is a bug. */
static void bench_set(bench_trainer *bt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bench_set(bench_trainer *bt, const char *fmt, ...)
{
    char line[CONFIG_STR_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    CHECK(config_set(&bt->cfg, line) == STATUS_OK, "the trainer's schema holds every key nebula-bench sets");
}

/* The trainer's config: every runtime, comm, model, device and dgc key given to
 * nebula-bench, then one rank's run of warm + steps steps on one synthetic batch,
 * B x T, with the benchmark's optimizer — AdamW (beta 0.9/0.95, eps 1e-8, decay 0.1)
 * at 3e-4, or for the image classifiers (ResNet, MLP) SGD (momentum 0.9, decay 1e-4) at
 * 0.01 — at a constant rate, without clipping, checkpoints, evaluation or DGC-Pro. */
static void bench_train_config(bench_trainer *bt, const config *cfg, bool images)
{
    config_init(&bt->cfg, bt->schema, train_config_schema(bt->schema, 256));
    for (int k = 0; k < cfg->nkeys; k++) {
        const config_key *key = &cfg->schema[k];
        if (!strcmp(key->section, "bench") || !strcmp(cfg->values[k].origin, "default")) continue;
        bench_set(bt, "%s.%s=%s", key->section, key->name, cfg->values[k].text);
    }
    int threads = (int)config_int(cfg, "bench.threads");
    bench_set(bt, "train.micro_batch=%d", (int)config_int(cfg, "bench.batch"));
    bench_set(bt, "train.accum=1");
    bench_set(bt, "train.seq_len=%d", (int)config_int(cfg, "bench.seq"));
    bench_set(bt, "train.steps=%d", (int)(config_int(cfg, "bench.model_warmup") + config_int(cfg, "bench.steps")));
    bench_set(bt, "train.seed=%lld", (long long)config_int(cfg, "bench.seed"));
    bench_set(bt, "train.threads=%d", threads > 0 ? threads : omp_get_max_threads());  /* 0: OMP_NUM_THREADS or all cores */
    bench_set(bt, "train.max_grad_norm=0");
    bench_set(bt, "train.run_dir=%s", bt->dir);
    bench_set(bt, "zero.stage=0");
    bench_set(bt, "data.train=" TRAIN_DATA_SYNTHETIC_FIXED);
    bench_set(bt, "data.val=");
    bench_set(bt, "optim.name=auto");
    bench_set(bt, "optim.schedule=constant");
    bench_set(bt, "optim.warmup_steps=0");
    bench_set(bt, "optim.lr=%s", images ? "0.01" : "3e-4");
    bench_set(bt, "optim.weight_decay=%s", images ? "1e-4" : "0.1");
    bench_set(bt, "optim.beta1=0.9");
    bench_set(bt, "optim.beta2=0.95");
    bench_set(bt, "optim.eps=1e-8");
    bench_set(bt, "optim.momentum=0.9");
    bench_set(bt, "optim.nesterov=false");
    bench_set(bt, "ckpt.every_steps=0");
    bench_set(bt, "ckpt.every_minutes=0");
    bench_set(bt, "ckpt.resume=none");
    bench_set(bt, "dgc.mode=off");
    bench_set(bt, "profile.mode=off");  /* the benchmark times the step without the profiler's hooks */
}

/* Removes the temporary run directory and the files the trainer left in it. */
static void bench_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) != 0) log_warn("cannot remove %s", path);
        }
        closedir(d);
    }
    if (rmdir(dir) != 0) log_warn("cannot remove the temporary run directory %s", dir);
}

/* --save-tune FILE: every fp32 GEMM shape the steps ran, timed on both paths, the faster
 * of each written to FILE (nn/gemm_tune.h) and listed. */
static status bench_gemm_tune(const char *path, FILE *info, const json_t *prov)
{
    gemm_shape shapes[64];
    gemm_choice choice[64];
    double gflops[128];
    int n = gemm_seen_shapes(shapes, 64);
    if (n == 0) {  /* --precision bf16: its GEMMs are oneDNN's bf16 matmul, there is nothing to choose */
        log_error0("--save-tune: the steps ran no fp32 GEMM (under --precision bf16 they are bf16); make the table "
                   "with --precision fp32");
        return STATUS_USAGE;
    }
    gemm_probe(shapes, n, choice, gflops);
    fprintf(info, "# GEMM table (%d shapes; GFLOP/s blas / onednn -> path):\n", n);
    for (int i = 0; i < n; i++)
        fprintf(info, "#   M=%d N=%d K=%d%s%s: %.1f / %.1f -> %s\n", shapes[i].M, shapes[i].N, shapes[i].K,
                shapes[i].ta ? " A^T" : "", shapes[i].tb ? " B^T" : "", gflops[2 * i], gflops[2 * i + 1],
                gemm_path_name(choice[i].path));
    status st = gemm_tune_save(path, choice, gflops, n, prov);
    if (st == STATUS_OK) fprintf(info, "# wrote %s (read it with --set device.gemm_tune=%s)\n", path, path);
    return st;
}

/* The CPU benchmark proper: the header, the memory table and one row per timed step
 * of train_step. */
static status bench_model_steps(const config *cfg, train_run *r, int B, int T, const json_t *prov)
{
    int steps = (int)config_int(cfg, "bench.steps"), warm = (int)config_int(cfg, "bench.model_warmup");
    model *m = &r->m;
    const model_spec *spec = &r->spec;
    param_table *pt = model_params(m);
    bool sgd = r->opt.use_sgd;  /* SGD with momentum for ResNets, AdamW otherwise */
    const char *unit = model_unit(m);
    double units = model_units_per_step(m), flops_step = model_flops_per_step(m);
    bool bf16 = r->dev.precision == PRECISION_BF16;
    double fp32_gemm = gemm_gflops(2048, false), bf16_gemm = bf16 ? gemm_gflops(2048, true) : 0;
    peak_figures pk;
    peak_measure(&pk);
    /* the run's own precision: its GEMMs' rate and its peak are the denominators */
    double gemm_rate = bf16 ? bf16_gemm : fp32_gemm, peak = bf16 ? pk.bf16_gflops : pk.fp32_gflops;
    const char *format = config_str(cfg, "bench.format");
    bool csv = !strcmp(format, "csv"), json = !strcmp(format, "json");
    FILE *info = csv || json ? stderr : stdout;  /* stdout holds only the rows then */
    char shape[64], per_s[32];
    if (model_spec_images(spec)) snprintf(shape, sizeof shape, "B=%d %dx%d", B, spec->image_size, spec->image_size);
    else snprintf(shape, sizeof shape, "B=%d T=%d", B, T);
    snprintf(per_s, sizeof per_s, "%s_per_s", unit);
    const char *prec = precision_kind_name(r->dev.precision);
    fprintf(info, "# nebula-bench model: %s (%.1fM parameters), %s, %d threads, %s, %s\n# model: ", spec->name,
            (double)pt->total / 1e6, shape, omp_get_max_threads(), prec, sgd ? "SGD momentum" : "AdamW");
    model_spec_print(spec, info);
    char isa[256];
    isa_describe(isa, sizeof isa);
    char blas[256];
    blas_describe(blas, sizeof blas);
    char path[256];
    gemm_describe(path, sizeof path);
    fprintf(info, "# cpu: ISA level %s; activations %s; BLAS %s\n", isa, dnn_layout_name(DNN_BLOCKED), blas);
    fprintf(info, "# fp32 GEMMs: %s\n", path);
    if (pk.fp32_gflops > 0) {
        fprintf(info, "# peak (measured: %d threads x %.2f GHz x FLOP/cycle): fp32 %d/cycle = %.1f GFLOP/s", pk.threads,
                pk.ghz, pk.fp32_per_cycle, pk.fp32_gflops);
        if (pk.bf16_gflops > 0) fprintf(info, ", bf16 %d/cycle = %.1f GFLOP/s", pk.bf16_per_cycle, pk.bf16_gflops);
        fprintf(info, "\n");
    } else {
        fprintf(info, "# peak: not measured on this architecture (kernels/cpu/peak.h)\n");
    }
    fprintf(info, "# GEMM 2048^3 on the model's path in this process: fp32 %.1f GFLOP/s", fp32_gemm);
    if (pk.fp32_gflops > 0) fprintf(info, " (%.0f%% of peak)", 100 * fp32_gemm / pk.fp32_gflops);
    if (bf16) fprintf(info, "; bf16 (oneDNN, operands rounded) %.1f GFLOP/s", bf16_gemm);
    if (bf16 && pk.bf16_gflops > 0) fprintf(info, " (%.0f%% of peak)", 100 * bf16_gemm / pk.bf16_gflops);
    fprintf(info, "; model FLOPs per step %.1f G\n", flops_step / 1e9);
    param_print_memory(pt, model_activation_bytes(m), 0, NULL, info);
    if (csv) {
        (void)provenance_write_csv_line(stdout, prov);  /* stdout failing fails the rows too */
        printf("step,fwd_ms,bwd_ms,opt_ms,total_ms,%s,gflops,pct_peak,pct_gemm,loss\n", per_s);
    } else if (json) bench_provenance_row("row", prov);  /* a row is an object with its names */
    else printf("# %4s %9s %9s %9s %10s %8s/s %9s %7s %7s %9s\n", "step", "fwd_ms", "bwd_ms", "opt_ms", "total_ms", unit,
                "GFLOP/s", "%peak", "%gemm", "loss");
    double *tf = calloc((size_t)steps, sizeof(double)), *tb = calloc((size_t)steps, sizeof(double));
    double *to = calloc((size_t)steps, sizeof(double)), *tt = calloc((size_t)steps, sizeof(double));
    CHECK(tf && tb && to && tt, "out of memory");
    status st = STATUS_OK;
    for (int s = -warm; s < steps; s++) {
        train_step_stats ss;
        if ((st = train_step(r, &ss)) != STATUS_OK) break;
        if (s < 0) continue;
        /* opt also holds the step's comm wait (nothing at one rank) and its data (none) */
        tf[s] = ss.fwd_ms; tb[s] = ss.bwd_ms; tt[s] = ss.step_ms; to[s] = tt[s] - tf[s] - tb[s];
        double ups = units / (tt[s] / 1e3), gf = flops_step / (tt[s] / 1e3) / 1e9;
        if (json) {
            emit_json(json_pack("{s:s, s:s, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "row", "step", "model",
                                spec->name, "step", s, "fwd_ms", tf[s], "bwd_ms", tb[s], "opt_ms", to[s], "total_ms",
                                tt[s], per_s, ups, "gflops", gf, "pct_peak", pct(gf, peak), "pct_gemm",
                                pct(gf, gemm_rate), "loss", ss.loss));
            continue;
        }
        printf(csv ? "%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%.4f\n"
                   : "  %4d %9.2f %9.2f %9.2f %10.2f %10.2f %9.2f %6.1f%% %6.1f%% %9.4f\n",
               s, tf[s], tb[s], to[s], tt[s], ups, gf, pct(gf, peak), pct(gf, gemm_rate), ss.loss);
    }
    if (st == STATUS_OK) {
        double mt = bench_median(tt, steps), ups = units / (mt / 1e3), gf = flops_step / (mt / 1e3) / 1e9;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        if (json)
            emit_json(json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
                                "s:f, s:f, s:f, s:f, s:f, s:f}",
                                "row", "median", "model", spec->name, "precision", prec, "isa", isa_name(isa_active()),
                                "blas_core", blas_core() ? blas_core() : "", "gemm_path", gemm_path_name(gemm_default()),
                                "layout", dnn_layout_name(DNN_BLOCKED), "params", (json_int_t)pt->total, "batch", B, "seq",
                                T, "threads", omp_get_max_threads(), "fwd_ms", bench_median(tf, steps), "bwd_ms",
                                bench_median(tb, steps), "opt_ms", bench_median(to, steps), "total_ms", mt, per_s, ups,
                                "gflops", gf, "pct_peak", pct(gf, peak), "pct_gemm", pct(gf, gemm_rate), "gemm_gflops",
                                fp32_gemm, "bf16_gemm_gflops", bf16_gemm, "peak_fp32_gflops", pk.fp32_gflops,
                                "peak_bf16_gflops", pk.bf16_gflops, "peak_rss_mib", ru.ru_maxrss / 1024.0));
        else fprintf(csv ? stderr : stdout, "# median: fwd %.2f ms, bwd %.2f ms, opt %.2f ms, step %.2f ms, %.2f %s/s, %.2f GFLOP/s = %.1f%% of "
               "the %s peak, %.1f%% of the model's GEMM path, peak RSS %.0f MiB\n", bench_median(tf, steps), bench_median(tb, steps),
               bench_median(to, steps), mt, ups, unit, gf, pct(gf, peak), prec, pct(gf, gemm_rate), ru.ru_maxrss / 1024.0);
    }
    free(tf); free(tb); free(to); free(tt);
    const char *save = config_str(cfg, "bench.save_tune");
    if (st == STATUS_OK && save[0]) st = bench_gemm_tune(save, info, prov);
    return st;
}

status bench_model_run(const config *cfg, const runtime *rt, comm *c, const json_t *prov)
{
    model_spec spec;
    TRY(model_spec_from_config(&spec, cfg));
    int B = (int)config_int(cfg, "bench.batch"), T = (int)config_int(cfg, "bench.seq");
    TRY(model_spec_check_batch(&spec, B, T, "bench.batch", "bench.seq"));
    bool table = !strcmp(config_str(cfg, "bench.format"), "table");
    const char *save = config_str(cfg, "bench.save_tune");
    if (save[0]) {  /* refused where it would be ignored; the output rule before anything runs (base/path.h) */
        if (config_bool(cfg, "bench.dry_run") || strcmp(config_str(cfg, "device.kind"), "cpu") != 0) {
            log_error0("--save-tune: the GEMM table is measured by a CPU run's steps, not with --dry-run or --device %s",
                       config_str(cfg, "device.kind"));
            return STATUS_USAGE;
        }
        const char *tune_in = config_str(cfg, "device.gemm_tune");
        TRY(path_output_check(save, "--save-tune", &tune_in, tune_in[0] ? 1 : 0));
    }
    if (config_bool(cfg, "bench.dry_run")) {
        print_dry_run(&spec, B, T, !strcmp(config_str(cfg, "bench.format"), "json"), prov);
        return STATUS_OK;
    }
    if (strcmp(config_str(cfg, "device.kind"), "cpu") != 0) {
        if (!table) {  /* refused rather than ignored: a script would parse the table as its rows */
            log_error0("nebula-bench model --device %s: --%s is not available on the GPU path; it prints its table",
                       config_str(cfg, "device.kind"), config_str(cfg, "bench.format"));
            return STATUS_USAGE;
        }
        return bench_model_device(cfg, &spec, B, T);
    }
    if (rt->size != 1) {
        log_error0("nebula-bench model is one process (%d were launched); data-parallel throughput is nebula-train's "
                   "with data.train = %s (jobscripts/bench.sbatch)", rt->size, TRAIN_DATA_SYNTHETIC_FIXED);
        return STATUS_USAGE;
    }
    bench_trainer *bt = calloc(1, sizeof *bt);
    CHECK(bt, "out of memory");
    const char *tmp = getenv("TMPDIR");
    snprintf(bt->dir, sizeof bt->dir, "%s/nebula-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(bt->dir)) {
        log_error("cannot create a temporary run directory %s: %s", bt->dir, strerror(errno));
        free(bt);
        return STATUS_IO;
    }
    bench_train_config(bt, cfg, model_spec_images(&spec));
    status st = train_setup(&bt->run, &bt->cfg, rt, c, NULL);
    if (st == STATUS_OK) st = bench_model_steps(cfg, &bt->run, B, T, prov);
    train_free(&bt->run);
    bench_remove_dir(bt->dir);
    free(bt);
    return st;
}
