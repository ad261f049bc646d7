/* nebula-train — data-parallel training of the GPT-2, BERT and ResNet families.
 *
 *   mpirun -np 4 nebula-train --config configs/train/gpt2-tiny-licenses.ini [--set k=v ...]
 *   nebula-train prepare OUT_DIR FILE...   token files train.bin and val.bin (prepare.c)
 *
 * main() reads like a script over libcore/train: parse -> runtime -> comm -> setup
 * (data, model, buckets, checkpoints) -> resume -> loop -> free. The process's
 * signal handlers live here; the trainer reads the requests they leave. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/path.h"
#include "train/control/control.h"
#include "train/train.h"
#include "train_app.h"

const char train_usage[] =
    "usage: mpirun -np N nebula-train --config FILE [--set section.key=value ...] [options]\n"
    "       [mpirun -np N] nebula-train prepare OUT_DIR FILE... [--val-fraction F] [--tokenizer bytes|bpe|PATH]\n"
    "           [--vocab-size V] [--timeout SECONDS]\n"
    "         token files OUT_DIR/train.bin and OUT_DIR/val.bin (the last F of each file from a line end,\n"
    "         default 0.1) from UTF-8 text files, for data.train and data.val; --tokenizer: bytes (default,\n"
    "         vocabulary 256, one process), bpe (a byte-level BPE of V tokens trained on the training parts),\n"
    "         or a tokenizer's directory or file (tokenizer.json, vocab.json + merges.txt, vocab.txt); its\n"
    "         files are written into OUT_DIR, where sample and convert --to hf find them; under mpirun the\n"
    "         ranks encode equal shares\n"
    "       nebula-train prepare --images DIR --out FILE.h5 [--size S] [--crop H] [--skip-corrupt]\n"
    "         [--timeout SECONDS]   (under mpirun: the ranks share the files)\n"
    "         an HDF5 image set for data.train / data.val from DIR/CLASS/IMAGE (PNG, JPEG; classes sorted\n"
    "         give labels 0..K-1): shorter side resized to S (default 256/224 of H; 0: no resize) with\n"
    "         PIL's bilinear antialiasing, centre crop H x H (default 224), as torchvision's\n"
    "         Resize(S) + CenterCrop(H); corrupt images are an error (exit 2) unless --skip-corrupt\n"
    "       nebula-train sample RUN_DIR|CKPT_DIR --prompt TEXT [--tokens N] [--temperature T | --greedy] [--top-k K]\n"
    "           [--top-p P] [--seed S] [--mask] [--no-cache] [--ignore-eos] [--json] [--tokenizer PATH]\n"
    "         text from a GPT-2 checkpoint (the newest committed one of a run directory), one token at a time\n"
    "         with a KV cache (defaults: 64 tokens, temperature 1, top-k 50, top-p 1, seed 1234; --greedy:\n"
    "         argmax); --mask: the top-k (default 5) fills of each [MASK] in the prompt by a BERT checkpoint\n"
    "       nebula-train migrate-config OLD.ini (-o NEW.ini | --in-place)\n"
    "         rewrites a config to the current config_version and reports each key converted, defaulted or\n"
    "         impossible (exit 0: automatic, 1: a person must look, 2: bad input or an output it cannot write)\n"
    "       nebula-train control RUN_DIR --set section.key=value ... | --undo | --list [--at-step N] [--wait SECONDS]\n"
    "         hot reload: asks the live run in RUN_DIR to change config keys at its next step end\n"
    "         (--at-step: at the end of step N; --undo: restore what the newest change replaced;\n"
    "         --wait: print the run's answer; --list: every request and its answer)";

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
    { "profile", "profile.mode", "on" },
    { "trace", "trace.enable", "true" },
    { "zero", "zero.stage", NULL },
    { "device", "device.kind", NULL },
    { "precision", "device.precision", NULL },
};

/* What the handlers ask the trainer for: SIGUSR1 a checkpoint, SIGTERM / SIGUSR2 a
 * checkpoint and a stop (exit 3). SIGUSR2 exists because launchers forward it
 * untouched (mpirun and srun both do), while both turn a SIGTERM they receive into
 * killing the ranks. */
static train_signals signals;

static void on_signal(int sig)
{
    if (sig == SIGUSR1) signals.checkpoint = 1;
    else signals.stop = 1;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
}

/* nebula-train migrate-config OLD.ini (-o NEW.ini | --in-place): no MPI. */
static int migrate_main(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    bool in_place = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--in-place")) in_place = true;
        else if (argv[i][0] != '-' && !in) in = argv[i];
        else {
            log_error0("migrate-config: unexpected argument '%s'\n%s", argv[i], train_usage);
            return 2;
        }
    }
    if (!in || (!out && !in_place) || (out && in_place)) {
        log_error0("migrate-config needs a config file and one of -o NEW.ini or --in-place\n%s", train_usage);
        return 2;
    }
    static config_key schema[256];
    static config cfg;
    config_init(&cfg, schema, train_config_schema(schema, 256));
    config_set_compat(&cfg, &train_config_compat);
    return config_migrate(&cfg, in, out ? out : in, in_place, stdout);
}

/* nebula-train control RUN_DIR ...: no MPI. The request is checked against the schema
 * here (a bad key or value exits 2 before anything is written) and again by the run,
 * which knows what fits it (a batch that splits, DGC-Pro set up). */
static int control_main(int argc, char **argv)
{
    static config_key schema[256];
    config cfg;
    config_init(&cfg, schema, train_config_schema(schema, 256));
    config_set_compat(&cfg, &train_config_compat);
    train_reload_request req;
    memset(&req, 0, sizeof req);
    req.at_step = req.applied_step = -1;
    const char *run_dir = NULL;
    double wait = 0;
    bool list = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) {
            printf("%s\nlive keys: %s\n", train_usage, train_reload_live_list());
            return 0;
        } else if (!strcmp(a, "--set") && i + 1 < argc) {
            const char *kv = argv[++i], *eq = strchr(kv, '=');
            char key[TRAIN_RELOAD_MAX_KEY + 1];
            snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - kv) : (int)strlen(kv), kv);
            if (config_set(&cfg, kv) != STATUS_OK) return 2;  /* the schema's message names the key and values */
            const char *canon = config_canonical_key(&cfg, key);  /* a renamed key: its new name */
            if (canon != key) snprintf(key, sizeof key, "%s", canon);
            const char *no = train_reload_refusal(key);
            if (no) {
                log_error0("--set %s: %s cannot change while the run lives: %s\nlive keys: %s", kv, key, no,
                           train_reload_live_list());
                return 2;
            }
            if (req.nsets == TRAIN_RELOAD_MAX_SETS || strlen(eq + 1) > TRAIN_RELOAD_MAX_VALUE) {
                log_error0("--set %s: at most %d keys per request, values of at most %d characters", kv,
                           TRAIN_RELOAD_MAX_SETS, TRAIN_RELOAD_MAX_VALUE);
                return 2;
            }
            snprintf(req.key[req.nsets], sizeof req.key[0], "%s", key);
            snprintf(req.value[req.nsets++], sizeof req.value[0], "%s", eq + 1);
        } else if (!strcmp(a, "--undo")) {
            req.undo = 1;
        } else if (!strcmp(a, "--at-step") && i + 1 < argc) {
            char *end;
            req.at_step = strtol(argv[++i], &end, 10);
            if (*end || req.at_step < 0) {
                log_error0("--at-step needs a step number >= 0, got '%s'", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--list")) {
            list = true;
        } else if (!strcmp(a, "--wait") && i + 1 < argc) {
            char *end;
            wait = strtod(argv[++i], &end);
            if (*end || !(wait >= 0 && wait <= 86400)) {
                log_error0("--wait needs seconds in [0, 86400], got '%s'", argv[i]);
                return 2;
            }
        } else if (a[0] != '-' && !run_dir) {
            run_dir = a;
        } else {
            log_error0("control: unexpected argument '%s'%s\n%s", a,
                       !strcmp(a, "--set") || !strcmp(a, "--wait") || !strcmp(a, "--at-step") ? " (it needs a value)" : "", train_usage);
            return 2;
        }
    }
    if (!run_dir || (list ? req.undo || req.nsets : req.undo == (req.nsets > 0))) {
        log_error0("control needs a run directory and one of: --set section.key=value (repeatable), --undo, --list\n%s",
                   train_usage);
        return 2;
    }
    if (list) return train_reload_list(run_dir, stdout) >= 0 ? 0 : 2;
    long version;
    status st = train_reload_request_write(run_dir, &req, &version);
    if (st != STATUS_OK) return status_exit_code(st);
    printf("request v%ld written to %s/reload/v%06ld.req; the run applies it at its next step end\n", version, run_dir,
           version);
    fflush(stdout);
    if (wait <= 0) return 0;
    char answer[16384];
    struct timespec nap = { 0, 100 * 1000 * 1000 };
    for (double waited = 0; waited < wait; waited += 0.1) {
        int got = train_reload_outcome(run_dir, version, answer, sizeof answer);
        if (got) {
            fputs(answer, stdout);
            return got == 1 ? 0 : 2;
        }
        nanosleep(&nap, NULL);
    }
    log_error0("no answer to v%ld within %g s: a live run reads requests at its step ends (see %s/heartbeat); the "
               "request stays and is read when the run gets to it", version, wait, run_dir);
    return 1;
}

int main(int argc, char **argv)
{
    runtime_preinit(argv[0]);
    /* first: a stop request that arrives during start-up (a job script forwards Slurm's
     * pre-timeout signal whenever it comes) must not kill the process */
    install_signals();
    if (argc >= 2 && !strcmp(argv[1], "prepare")) return prepare_main(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "sample")) return sample_main(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "control")) return control_main(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "migrate-config")) return migrate_main(argc, argv);

    static config_key schema[256];
    config cfg;
    config_init(&cfg, schema, train_config_schema(schema, 256));
    config_set_compat(&cfg, &train_config_compat);
    cli_action action;
    status st = cli_parse(&cfg, train_options, (int)(sizeof train_options / sizeof train_options[0]), argc, argv, 1,
                          train_usage, &action);
    if (st != STATUS_OK) return runtime_exit_early(status_exit_code(st));
    if (action == CLI_ACTION_EXIT) return 0;

    runtime_options ro;
    runtime_options_from_config(&cfg, &ro);
    ro.gpus = device_gpu_count();
    ro.timeout_s = config_float(&cfg, "comm.timeout");  /* the watchdog's deadline (base/watchdog.h) */
    runtime rt;
    st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    if (rt.rank == 0) {
        printf("nebula-train %s\n", cli_version());
        config_print(&cfg, stdout);
    }
    runtime_print_placement(&rt, stdout);

    comm_options co;
    comm_options_from_config(&cfg, &co);
    comm *c = NULL;
    st = comm_init(&c, &rt, &co);
    if (st != STATUS_OK) runtime_exit(&rt, st);

    train_run *run = malloc(sizeof *run);
    CHECK(run, "out of memory for the run");
    st = train_setup(run, &cfg, &rt, c, &signals);
    if (st == STATUS_OK) train_print(run, stdout);
    if (st == STATUS_OK) st = train_resume(run);
    if (st == STATUS_OK) st = train_loop(run);
    while (st == STATUS_REGRID) {
        /* a control file's new grid at the same world size: the checkpoint just committed
         * is resumed by the run set up again on it, in the same processes */
        grid_shape g = run->regrid;
        char kv[4][48];
        snprintf(kv[0], sizeof kv[0], "parallel.tp=%d", g.tp);
        snprintf(kv[1], sizeof kv[1], "parallel.pp=%d", g.pp);
        snprintf(kv[2], sizeof kv[2], "parallel.dp=%d", g.dp);
        snprintf(kv[3], sizeof kv[3], "ckpt.resume=auto");  /* the run directory's newest: that checkpoint */
        watchdog_enter(rt.wd, "re-forming the process grid", rt.timeout_s);
        train_free(run);
        watchdog_leave(rt.wd);
        for (int i = 0; i < 4; i++) CHECK(config_set(&cfg, kv[i]) == STATUS_OK, "the grid's keys are in the schema");
        st = train_setup(run, &cfg, &rt, c, &signals);
        if (st == STATUS_OK) st = train_resume(run);
        if (st == STATUS_OK) st = train_loop(run);
    }
    if (runtime_must_abort(st)) runtime_exit(&rt, st);
    /* collective frees (the checkpoint writer's and comm's communicators and window) */
    watchdog_enter(rt.wd, "shutdown: freeing the run and its communicators", rt.timeout_s);
    train_free(run);
    free(run);
    comm_free(c);
    watchdog_leave(rt.wd);
    runtime_exit(&rt, st);
}
