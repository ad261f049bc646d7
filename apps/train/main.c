/* nebula-train — data-parallel training of the GPT-2, BERT and ResNet families.
 *
 *   mpirun -np 4 nebula-train --config configs/train/gpt2-tiny-licenses.ini [--set k=v ...]
 *   nebula-train prepare OUT_DIR FILE...   byte-level token files train.bin and val.bin
 *
 * main() reads like a script: parse -> runtime -> comm -> setup (data, model,
 * buckets, checkpoints) -> resume -> loop -> free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/path.h"
#include "dgc/dgc.h"
#include "train.h"

static const char usage[] =
    "usage: mpirun -np N nebula-train --config FILE [--set section.key=value ...] [options]\n"
    "       nebula-train prepare OUT_DIR FILE... [--val-fraction F]\n"
    "         byte-level token files OUT_DIR/train.bin and OUT_DIR/val.bin (the last F of each\n"
    "         file, default 0.1) from text files, for data.train and data.val";

static const cli_option train_options[] = {
    { "ranks-per-node", "runtime.ranks_per_node", NULL },
    { "model", "model.name", NULL },
    { "micro-batch", "train.micro_batch", NULL },
    { "accum", "train.accum", NULL },
    { "global-batch", "train.global_batch", NULL },
    { "seq-len", "train.seq_len", NULL },
    { "steps", "train.steps", NULL },
    { "seed", "train.seed", NULL },
    { "run-dir", "train.run_dir", NULL },
    { "lr", "optim.lr", NULL },
    { "data", "data.train", NULL },
    { "val", "data.val", NULL },
    { "resume", "ckpt.resume", NULL },
    { "ckpt-every", "ckpt.every_steps", NULL },
    { "async-ckpt", "ckpt.async", "true" },
    { "zero", "train.zero", NULL },
    { "device", "device.kind", NULL },
    { "precision", "device.precision", NULL },
};

/* nebula-train prepare OUT_DIR FILE... [--val-fraction F]: no MPI. */
static int prepare_main(int argc, char **argv)
{
    double frac = 0.1;
    const char **files = calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    const char *out = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--val-fraction")) {
            char *end = NULL;
            frac = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || *end || frac < 0 || frac >= 1) {
                log_error0("--val-fraction needs a number in [0, 1), got '%s'", i + 1 < argc ? argv[i + 1] : "");
                free(files);
                return 2;
            }
            i++;
        } else if (!out) {
            out = argv[i];
        } else {
            files[nfiles++] = argv[i];
        }
    }
    if (!out || nfiles == 0) {
        log_error0("prepare needs an output directory and at least one text file\n%s", usage);
        free(files);
        return 2;
    }
    char train[4200], val[4200];
    if (path_mkdirs(out, "output directory") != STATUS_OK) {
        free(files);
        return 1;
    }
    snprintf(train, sizeof train, "%s/train.bin", out);
    snprintf(val, sizeof val, "%s/val.bin", out);
    status st = data_prepare_text(files, nfiles, train, val, frac);
    free(files);
    if (st == STATUS_OK) printf("wrote %s and %s\n", train, val);
    return status_exit_code(st);
}

int main(int argc, char **argv)
{
    runtime_preinit(argv[0]);
    /* first: a stop request that arrives during start-up (a job script forwards Slurm's
     * pre-timeout signal whenever it comes) must not kill the process */
    train_install_signals();
    if (argc >= 2 && !strcmp(argv[1], "prepare")) return prepare_main(argc, argv);

    static config_key schema[256];
    const config_key base[] = { RUNTIME_CONFIG_KEYS, COMM_CONFIG_KEYS, MODEL_CONFIG_KEYS, DGC_CONFIG_KEYS,
                                DEVICE_CONFIG_KEYS };
    int n = 0;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) schema[n++] = base[i];
    for (int i = 0; i < train_schema_nkeys; i++) schema[n++] = train_schema_keys[i];
    config cfg;
    config_init(&cfg, schema, n);
    cli_action action;
    status st = cli_parse(&cfg, train_options, (int)(sizeof train_options / sizeof train_options[0]), argc, argv, 1,
                          usage, &action);
    if (st != STATUS_OK) return status_exit_code(st);
    if (action == CLI_ACTION_EXIT) return 0;

    runtime_options ro;
    runtime_options_from_config(&cfg, &ro);
    runtime rt;
    st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    if (rt.rank == 0) {
        printf("nebula-train %s\n", cli_version());
        config_print(&cfg, stdout);
    }
    runtime_print_placement(&rt, stdout);

    /* GPT-2 runs on a GPU in nebula-bench model --device cuda; the training loop's
     * buckets, DGC-Pro, ZeRO and checkpoints still read host memory. */
    device dev;
    st = device_open_from_config(&dev, &cfg, rt.gpu);
    if (st == STATUS_OK && dev.kind != DEVICE_KIND_CPU) {
        log_error0("--device cuda: nebula-train's loop (buckets, DGC-Pro, ZeRO, checkpoints) runs on host memory "
                   "so far; GPT-2 on a GPU runs in nebula-bench model --device cuda\nHINT: use --device cpu");
        st = STATUS_INPUT;
    }
    if (st != STATUS_OK) runtime_exit(&rt, st);

    comm_options co;
    comm_options_from_config(&cfg, &co);
    comm *c = NULL;
    st = comm_init(&c, &rt, &co);
    if (st != STATUS_OK) runtime_exit(&rt, st);

    train_run *run = malloc(sizeof *run);
    CHECK(run, "out of memory for the run");
    st = train_setup(run, &cfg, &rt, c);
    if (st == STATUS_OK && rt.rank == 0) {
        model_spec_print(&run->spec, stdout);
        printf("batch: global %d = micro-batch %d x accumulation %d x %d ranks%s; %d threads per rank\n",
               run->tb.global_batch, run->tb.micro_batch, run->tb.accum, rt.size, run->T ? "" : " (images)",
               run->threads);
        char line[512];
        data_describe(run->train_data, line, sizeof line);
        printf("data.train: %s\n", line);
        if (run->val_data) {
            data_describe(run->val_data, line, sizeof line);
            printf("data.val: %s\n", line);
        }
        if (run->use_zero)
            zero_print_memory(&run->zero, model_params(&run->m), model_activation_bytes(&run->m), 0, stdout);
        else
            param_print_memory(model_params(&run->m), model_activation_bytes(&run->m), 0, NULL, stdout);
        bucket_print(&run->bm, stdout);
        fflush(stdout);
    }
    if (st == STATUS_OK) st = train_resume(run);
    if (st == STATUS_OK) st = train_loop(run);
    if (runtime_must_abort(st)) runtime_exit(&rt, st);
    train_free(run);
    free(run);
    comm_free(c);
    runtime_exit(&rt, st);
}
