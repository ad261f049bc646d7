/* nebula-bench — throughput and communication benchmarks.
 *
 *   mpirun -np 4 nebula-bench comm --ranks-per-node 2 --algo all
 *
 * main() reads like a script: parse -> runtime -> comm -> benchmark -> free. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "base/cli.h"
#include "dgc/dgc.h"
#include "nn/model.h"
#include "train/train.h"

static const config_key bench_schema[] = {
    RUNTIME_CONFIG_KEYS,
    COMM_CONFIG_KEYS,
    MODEL_CONFIG_KEYS,
    DEVICE_CONFIG_KEYS,
    DGC_CONFIG_KEYS,
    { "bench", "count", CONFIG_TYPE_INT, "67108864", .min = 1024, .max = 1L << 31,
      .help = "dgc: entries of the vector selected from" },
    { "bench", "min_bytes", CONFIG_TYPE_SIZE, "8", .min = 4, .max = 1ull << 31, .help = "smallest message" },
    { "bench", "max_bytes", CONFIG_TYPE_SIZE, "256M", .min = 4, .max = 1ull << 31,
      .help = "largest message (2G at most: the MPI_Allreduce peer takes an int count)" },
    { "bench", "factor", CONFIG_TYPE_INT, "2", .min = 2, .max = 1024, .help = "size multiplier between rows" },
    { "bench", "iters", CONFIG_TYPE_INT, "0", .min = 0, .max = 1000000,
      .help = "timed iterations per round (0: enough for ~0.1 s, at least 3)" },
    { "bench", "warmup", CONFIG_TYPE_INT, "3", .min = 0, .max = 100000, .help = "untimed iterations per size" },
    { "bench", "rounds", CONFIG_TYPE_INT, "7", .min = 1, .max = 1000,
      .help = "interleaved rounds per size; the table shows the median" },
    { "bench", "algo", CONFIG_TYPE_ENUM, "all", .choices = "all|auto|mpi|flat|hier|ring|ompi",
      .help = "rows to run: ompi is the peer (blocking MPI_Allreduce); all = ompi,mpi,flat,hier,ring,auto" },
    { "bench", "dtype", CONFIG_TYPE_ENUM, "float", .choices = "float|double|int32|int64", .help = "element type" },
    { "bench", "format", CONFIG_TYPE_ENUM, "table", .choices = "table|csv|json",
      .help = "stdout format; with csv and json the preamble goes to stderr" },
    { "bench", "out", CONFIG_TYPE_STRING, "", .help = "also write every row to this JSON file" },
    { "bench", "save_tune", CONFIG_TYPE_STRING, "",
      .help = "comm: write the auto tuning table measured here to this file; model: the GEMM table of the model's "
              "shapes (device.gemm_tune reads it)" },
    { "bench", "check", CONFIG_TYPE_BOOL, "true", .help = "check every algorithm bit-exact outside the timed loop" },
    { "bench", "batch", CONFIG_TYPE_INT, "4", .min = 1, .max = 65536, .help = "model: micro-batch B" },
    { "bench", "seq", CONFIG_TYPE_INT, "64", .min = 1, .max = 65536, .help = "model: sequence length T" },
    { "bench", "steps", CONFIG_TYPE_INT, "5", .min = 1, .max = 100000, .help = "model: timed training steps" },
    { "bench", "model_warmup", CONFIG_TYPE_INT, "1", .min = 0, .max = 1000, .help = "model: untimed steps first" },
    { "bench", "threads", CONFIG_TYPE_INT, "0", .min = 0, .max = 4096,
      .help = "model: OpenMP and OpenBLAS threads (0: OMP_NUM_THREADS or all cores)" },
    { "bench", "seed", CONFIG_TYPE_INT, "1", .min = 0, .max = 9e15,
      .help = "model: initialisation and the synthetic batch (the trainer's train.seed)" },
    { "bench", "dry_run", CONFIG_TYPE_BOOL, "false",
      .help = "model: resolve and check the model and batch shape, print them, allocate nothing" },
};

static const cli_option bench_options[] = {
    { "ranks-per-node", "runtime.ranks_per_node", NULL },
    { "timeout", "comm.timeout", NULL },
    { "tune-file", "comm.tune_file", NULL },
    { "min-bytes", "bench.min_bytes", NULL },
    { "max-bytes", "bench.max_bytes", NULL },
    { "factor", "bench.factor", NULL },
    { "iters", "bench.iters", NULL },
    { "warmup", "bench.warmup", NULL },
    { "rounds", "bench.rounds", NULL },
    { "count", "bench.count", NULL },
    { "algo", "bench.algo", NULL },
    { "dtype", "bench.dtype", NULL },
    { "csv", "bench.format", "csv" },
    { "json", "bench.format", "json" },
    { "out", "bench.out", NULL },
    { "save-tune", "bench.save_tune", NULL },
    { "no-check", "bench.check", "false" },
    { "model", "model.name", NULL },
    { "batch", "bench.batch", NULL },
    { "seq", "bench.seq", NULL },
    { "steps", "bench.steps", NULL },
    { "threads", "bench.threads", NULL },
    { "seed", "bench.seed", NULL },
    { "dry-run", "bench.dry_run", "true" },
    { "device", "device.kind", NULL },
    { "precision", "device.precision", NULL },
};

static const char usage[] =
    "usage: nebula-bench comm [options]   allreduce sweep (nccl-tests style), Nebula vs OpenMPI\n"
    "                                     launch with mpirun -np N (--ranks-per-node K: virtual nodes)\n"
    "       nebula-bench model [options]  training-step throughput of one model on synthetic data, timing\n"
    "                                     nebula-train's own step at one rank (data.train = synthetic-fixed):\n"
    "                                     --model NAME (or --config configs/models/NAME.ini) --batch B --seq T\n"
    "                                     --steps N --threads N --seed S; --dry-run: check model and shapes,\n"
    "                                     allocate nothing; --precision bf16: bf16 GEMMs on an AVX512-BF16 or\n"
    "                                     AMX CPU; --save-tune FILE: the fp32 GEMM path per shape of the steps\n"
    "                                     (--set device.gemm_tune=FILE reads it); NEBULA_GEMM=blas|onednn\n"
    "                                     forces the path;\n"
    "                                     --device cuda [--precision bf16|fp16]: GPT-2 or BERT on one GPU, MFU\n"
    "                                     against the bf16 GEMM rate measured in the same process\n"
    "       nebula-bench dgc [options]    DGC-Pro threshold selection on one core: --count N --rounds R,\n"
    "                                     --set dgc.sparsity=S --set dgc.sample_fraction=F\n"
    "       nebula-bench table models [--models gpt2:4:64,...] [--precisions fp32,bf16] [--paths auto,prescott] [--reps R]\n"
    "                                     [--steps N] [--threads N] [--torch2]: Nebula beside PyTorch 1.13 (and\n"
    "                                     2.x), as installed and tuned, per model, shape and precision\n"
    "       nebula-bench table dgc [--models gpt2,...] [--rates 1gbit,100mbit,none] [--steps N] [--reps R] [--csv]\n"
    "                                     dense vs DGC-Pro training on rate-limited links between 4 network\n"
    "                                     namespaces (root; runs tools/bench-dgc.sh, which says how it measures)\n"
    "       nebula-bench table hetero [--quotas 50,50,20,20] [--modes balanced,performance] [--steps N] [--interval K]\n"
    "                                 [--reps R] [--layers L] [--width C] [--global-batch GB] [--csv]\n"
    "                                     uniform data parallelism against the scheduler's modes on ranks capped by\n"
    "                                     cgroup CPU quotas (root; tools/bench-hetero.sh)\n"
    "       nebula-bench table hybrid [--models bert-large,gpt2-medium] [--rates 1gbit,none] [--steps N]\n"
    "                                     [--layouts dp4,dp4z,tp2dp2,pp2dp2,tp2pp2] [--seq-len T] [--global-batch G]\n"
    "                                     [--reps R] [--csv]: the process grids on 2 virtual nodes x 2 ranks: step\n"
    "                                     time, inter-node bytes and memory per layout (root; tools/bench-hybrid.sh)\n"
    "       nebula-bench table privacy [--epsilons inf,8,4,1] [--members N] [--clients K] [--q Q] [--rounds R]\n"
    "                                  [--hidden H] [--seeds S] [--shadows K] [--csv]\n"
    "                                     federated digits without and with DP at each epsilon: accuracy beside the\n"
    "                                     attacks' success: membership (loss, LiRA), attribute, model inversion\n"
    "                                     (tools/bench-privacy.sh)\n"
    "       nebula-bench table fed [--clients K] [--per-round M] [--rounds R] [--hidden H] [--reps N] [--no-torch2]\n"
    "                              [--csv]\n"
    "                                     nebula-fed's round time (FedAvg, and DP-SGD local steps) beside the same\n"
    "                                     round in PyTorch 1.13 and 2.x (tools/bench-fed.sh)\n"
    "       nebula-bench table versioning [--checkpoints N] [--width C] [--layers L] [--reps R] [--csv]\n"
    "                                     nebula-model's store: N checkpoints of a GPT-2 run, a frozen-backbone\n"
    "                                     fine-tune, copies written for other grids; bytes stored beside the raw\n"
    "                                     checkpoints and whole-file storage (DVC, git-lfs), commit and checkout time\n"
    "                                     beside cp (tools/bench-versioning.sh)\n"
    "       nebula-bench table edge [--reps N] [--runs N] [--threads \"1 2\"] [--models resnet18,resnet50,gpt2] [--quick]\n"
    "                               [--work DIR] [--no-venv] [--csv]\n"
    "                                     nebula-deploy edge + nebula-infer beside ONNX Runtime (fp32, int8) and\n"
    "                                     PyTorch 1.13: size, latency, peak RSS, held-out top-1, arm64 under qemu\n"
    "                                     (tools/bench-edge.sh)\n"
    "       nebula-bench provenance [--command TEXT] [--param KEY=VALUE]... [--format json|csv|markdown]\n"
    "                                     the provenance object of a script's run on one line (under mpirun:\n"
    "                                     every rank's host); --command and --param stand for the script's own\n"
    "                                     command line and settings (default: this command, no settings)\n"
    "every --csv and --json output, --out and --save-tune file carries the provenance (docs/benchmarks.md)";

/* The [bench] keys each subcommand reads; a key it does not read, set anyway, is refused
 * rather than ignored (a user who asked for --out or --iters would believe the output
 * honoured it). */
static const struct {
    const char *sub;
    const char *keys;  /* space-separated, with spaces at both ends */
} bench_uses[] = {
    { "comm", " min_bytes max_bytes factor iters warmup rounds algo dtype format out save_tune check " },
    { "model", " batch seq steps model_warmup threads seed dry_run format save_tune " },
    { "dgc", " count rounds format " },
};

static status refuse_unused(const config *cfg, const char *sub)
{
    const char *keys = NULL;
    for (size_t i = 0; i < sizeof bench_uses / sizeof bench_uses[0]; i++)
        if (!strcmp(bench_uses[i].sub, sub)) keys = bench_uses[i].keys;
    CHECK(keys, "every subcommand has its list of [bench] keys");
    for (int k = 0; k < cfg->nkeys; k++) {
        const config_key *key = &cfg->schema[k];
        char word[64];
        snprintf(word, sizeof word, " %s ", key->name);
        if (strcmp(key->section, "bench") != 0 || !strcmp(cfg->values[k].origin, "default") || strstr(keys, word))
            continue;
        log_error0("bench.%s (set by %s) is not used by `nebula-bench %s`, which reads only these [bench] keys: "
                   "%.*s", key->name, cfg->values[k].origin, sub, (int)strlen(keys) - 2, keys + 1);
        return STATUS_USAGE;
    }
    return STATUS_OK;
}

/* `table NAME` drives whole runs — training in network namespaces (dgc, hybrid), Nebula beside
 * PyTorch (models): the orchestration is the project's shell tool next to the build
 * (build/bin/../../tools/bench-NAME.sh), run in our place. */
static int table_run(const char *name, int argc, char **argv)
{
    char exe[PATH_MAX], tool[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        log_error0("table %s: cannot find this executable's directory", name);
        return 2;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(tool, sizeof tool, "%s/../../tools/bench-%s.sh", exe, name);
    char *args[argc + 2];
    args[0] = tool;
    for (int i = 0; i < argc; i++) args[i + 1] = argv[i];
    args[argc + 1] = NULL;
    execv(tool, args);
    log_error0("table %s: cannot run %s: %s", name, tool, strerror(errno));
    return 2;
}

int main(int argc, char **argv)
{
    runtime_preinit(argv[0]);
    config cfg;
    config_init(&cfg, bench_schema, (int)(sizeof bench_schema / sizeof bench_schema[0]));
    config_set_compat(&cfg, &train_config_compat);  /* the trainer's files (configs/models) carry its version */
    if (argc < 2 || strncmp(argv[1], "--", 2) == 0) {
        cli_action action;
        status st = cli_parse(&cfg, bench_options, (int)(sizeof bench_options / sizeof bench_options[0]), argc,
                              argv, 1, usage, &action);
        if (st == STATUS_OK && action == CLI_ACTION_EXIT) return 0;
        if (st == STATUS_OK) log_error0("missing subcommand; expected 'comm', 'model', 'dgc', 'table dgc', 'table hybrid', 'table models' or 'provenance' (--help for usage)");
        return runtime_exit_early(2);
    }
    bool model = !strcmp(argv[1], "model"), dgc = !strcmp(argv[1], "dgc");
    if (!strcmp(argv[1], "provenance")) return bench_provenance_main(argc, argv);
    if (!strcmp(argv[1], "table")) {
        static const char *const tables[] = { "dgc", "edge", "fed", "hetero", "hybrid", "models", "privacy", "versioning" };
        bool known = false;
        for (size_t i = 0; argc >= 3 && i < sizeof tables / sizeof tables[0]; i++) known |= !strcmp(argv[2], tables[i]);
        if (!known) {
            log_error0("table: expected 'table dgc', 'table edge', 'table fed', 'table hetero', 'table hybrid', 'table models', "
                       "'table privacy' or 'table versioning', got '%s'", argc < 3 ? "" : argv[2]);
            return runtime_exit_early(2);
        }
        return table_run(argv[2], argc - 3, argv + 3);
    }
    if (strcmp(argv[1], "comm") != 0 && !model && !dgc) {
        log_error0("unknown subcommand '%s'; expected 'comm', 'model', 'dgc', 'table dgc', 'table hybrid', 'table models' "
                   "or 'provenance'", argv[1]);
        return runtime_exit_early(2);
    }
    cli_action action;
    status st = cli_parse(&cfg, bench_options, (int)(sizeof bench_options / sizeof bench_options[0]), argc, argv,
                          2, usage, &action);
    if (st != STATUS_OK) return runtime_exit_early(status_exit_code(st));
    if (action == CLI_ACTION_EXIT) return 0;
    if ((st = refuse_unused(&cfg, argv[1])) != STATUS_OK) return runtime_exit_early(status_exit_code(st));

    /* the command line as typed, before MPI_Init may touch argv; the hosts once MPI is up */
    json_t *prov = comm_provenance_local(&cfg, argc, argv);
    if (dgc) {  /* one process: no MPI needed */
        st = bench_dgc_run(&cfg, prov);
        json_decref(prov);
        return status_exit_code(st);
    }
    runtime_options ro;
    runtime_options_from_config(&cfg, &ro);
    ro.gpus = device_gpu_count();
    /* The watchdog with comm.timeout, as nebula-train runs: comm_allreduce's blocking
     * fast path for small messages is taken only where the watchdog guards it. */
    ro.timeout_s = config_float(&cfg, "comm.timeout");
    /* model: one process on the cores it was given, as a benchmark of its threads
     * needs (binding auto would pin a lone process to one core) */
    if (model && !strcmp(config_origin(&cfg, "runtime.bind"), "default")) ro.bind = RUNTIME_BIND_NONE;
    runtime rt;
    st = runtime_init(&rt, &argc, &argv, &ro);
    if (st == STATUS_OK) st = comm_provenance_hosts(prov, &rt, ro.timeout_s);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    if (model) {  /* the trainer's step at world size 1 (bench_model.c) */
        comm_options co;
        comm_options_from_config(&cfg, &co);
        comm *c = NULL;
        st = comm_init(&c, &rt, &co);
        if (st == STATUS_OK) st = bench_model_run(&cfg, &rt, c, prov);
        if (runtime_must_abort(st)) runtime_exit(&rt, st);
        if (c) comm_free(c);
        runtime_exit(&rt, st);
    }
    /* Machine-readable stdout (csv, json) keeps the human preamble on stderr. */
    FILE *info = strcmp(config_str(&cfg, "bench.format"), "table") ? stderr : stdout;
    if (rt.rank == 0) {
        fprintf(info, "nebula-bench %s\n", cli_version());
        config_print(&cfg, info);
    }
    runtime_print_placement(&rt, info);

    comm_options co;
    comm_options_from_config(&cfg, &co);
    comm *c = NULL;
    st = comm_init(&c, &rt, &co);
    if (st != STATUS_OK) runtime_exit(&rt, st);  /* every rank fails alike: the table is broadcast */
    st = bench_comm_run(&cfg, &rt, c, prov);
    if (runtime_must_abort(st)) runtime_exit(&rt, st);
    comm_free(c);
    runtime_exit(&rt, st);
}
