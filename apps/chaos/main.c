/* nebula-chaos — fault scenarios and soak runs against nebula-train, with invariants.
 *
 *   nebula-chaos run chaos/kill-30pct.ini [--out DIR] [--set fault.seed=7]
 *   nebula-chaos run kill-30pct            (a name: chaos/NAME.ini)
 *   nebula-chaos soak --duration 72h --fault-every 2h --sample-every 60s [--config FILE]
 *   nebula-chaos list
 *
 * Run from the Nebula tree: it starts build/bin/nebula-train (and build/chaos/bin/ for
 * compiled-in I/O faults) under mpirun, srun (inside an allocation) or the namespace
 * cluster of tools/netns-cluster. main() reads like a script: command -> scenario
 * file -> options -> output directory -> run. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chaos.h"
#include "base/cli.h"
#include "base/log.h"
#include "base/path.h"
#include "base/runtime.h"
#include "comm/comm_provenance.h"

static const config_key schema[] = {
    { "scenario", "name", CONFIG_TYPE_STRING, "unnamed", .help = "the scenario's name (the report's title)" },
    { "scenario", "description", CONFIG_TYPE_STRING, "", .help = "one sentence: the fault and what must hold" },
    { "scenario", "ranks", CONFIG_TYPE_INT, "4", .min = 1, .max = 4096, .help = "ranks of the first launch" },
    { "scenario", "ranks_per_node", CONFIG_TYPE_INT, "2", .min = 1, .max = 4096,
      .help = "virtual nodes of this many ranks (runtime.ranks_per_node; nodes of the namespace cluster)" },
    { "scenario", "steps", CONFIG_TYPE_INT, "40", .min = 2, .max = 1e9, .help = "the target step" },
    { "scenario", "ckpt_every", CONFIG_TYPE_INT, "10", .min = 1, .max = 1e9,
      .help = "checkpoint interval in steps (the bound on steps lost per fault)" },
    { "scenario", "max_lost_intervals", CONFIG_TYPE_INT, "1", .min = 1, .max = 1000,
      .help = "steps lost per fault may be at most this many checkpoint intervals" },
    { "scenario", "train_config", CONFIG_TYPE_STRING, "configs/train/gpt2-tiny-licenses.ini",
      .help = "nebula-train's config file" },
    { "scenario", "train_args", CONFIG_TYPE_STRING, "",
      .help = "more nebula-train arguments, separated by blanks (no quoting)" },
    { "scenario", "launcher", CONFIG_TYPE_ENUM, "auto", .choices = "auto|mpirun|srun|netns",
      .help = "auto: srun inside a Slurm allocation, else mpirun; netns: tools/netns-cluster (root)" },
    { "scenario", "deadline", CONFIG_TYPE_FLOAT, "300", .min = 1, .max = 1e9,
      .help = "seconds for the whole scenario, reference run included; then everything is stopped" },
    { "scenario", "heartbeat_timeout", CONFIG_TYPE_FLOAT, "30", .min = 0.5, .max = 1e9,
      .help = "seconds without a new step before a launch counts as hung and is killed" },
    { "scenario", "max_launches", CONFIG_TYPE_INT, "12", .min = 1, .max = CHAOS_MAX_LAUNCHES,
      .help = "relaunches give up after this many launches" },
    { "fault", "kind", CONFIG_TYPE_ENUM, "none",
      .choices = "none|kill|freeze|preempt|packet-loss|ckpt-corrupt|disk-full|io-error", .help = "what is injected" },
    { "fault", "at", CONFIG_TYPE_STRING, "random:1", .help = "steps to strike at: '12,31' or 'random:K'" },
    { "fault", "seed", CONFIG_TYPE_INT, "1", .min = 0, .max = 1e15, .help = "random steps and ranks" },
    { "fault", "ranks", CONFIG_TYPE_STRING, "30%", .help = "kill, freeze: ranks to SIGKILL / SIGSTOP, '30%' of the world or a count" },
    { "fault", "relaunch", CONFIG_TYPE_ENUM, "same", .choices = "same|remaining",
      .help = "kill: relaunch with the same world size, or only with the ranks that remain" },
    { "fault", "signals", CONFIG_TYPE_STRING, "TERM",
      .help = "preempt: USR1, USR2 or TERM sent to every rank, one per fault step in order or one for all" },
    { "fault", "loss_pct", CONFIG_TYPE_FLOAT, "50", .min = 0, .max = 100, .help = "packet-loss: percent dropped" },
    { "fault", "loss_seconds", CONFIG_TYPE_FLOAT, "15", .min = 0, .max = 1e9, .help = "packet-loss: how long" },
    { "fault", "corrupt_bytes", CONFIG_TYPE_INT, "64", .min = 1, .max = 1e9,
      .help = "ckpt-corrupt: bytes flipped in the newest committed checkpoint" },
    { "fault", "disk_size", CONFIG_TYPE_SIZE, "4M", .min = 65536, .max = INFINITY,
      .help = "disk-full: the tmpfs the run directory lives on" },
    { "fault", "io", CONFIG_TYPE_STRING, "ckpt.fsync:EIO",
      .help = "io-error: POINT:ERRNO for the CHAOS build's NEBULA_CHAOS_FAULT" },
    { "soak", "duration", CONFIG_TYPE_STRING, "72h", .help = "how long the soak trains (s, m, h, d)" },
    { "soak", "fault_every", CONFIG_TYPE_STRING, "2h", .help = "period of the faults" },
    { "soak", "sample_every", CONFIG_TYPE_STRING, "60s", .help = "period of the samples" },
    { "soak", "faults", CONFIG_TYPE_STRING, "kill,stop,preempt,ckpt-corrupt,disk-full,io-error",
      .help = "fault kinds, each once per round in a seeded random order: kill, stop, preempt, ckpt-corrupt, "
              "disk-full, io-error, packet-loss (netns launcher)" },
    { "soak", "start_timeout", CONFIG_TYPE_FLOAT, "120", .min = 1, .max = 1e9,
      .help = "seconds a launch may take to its first step (a Slurm step waits for the last one's end, KillWait)" },
    { "soak", "max_rss_mb_per_h", CONFIG_TYPE_FLOAT, "64", .min = 0, .max = 1e9,
      .help = "resident memory of the ranks may grow at most this fast within a launch (least squares)" },
    { "soak", "max_fds_per_h", CONFIG_TYPE_FLOAT, "4", .min = 0, .max = 1e9,
      .help = "open descriptors of the ranks may grow at most this fast within a launch (least squares)" },
    { "soak", "max_disk_mb_per_h", CONFIG_TYPE_FLOAT, "256", .min = 0, .max = 1e9,
      .help = "the run directory may grow at most this fast over the soak (least squares; metrics.jsonl grows)" },
    { "soak", "max_throughput_drop", CONFIG_TYPE_FLOAT, "0.2", .min = 0, .max = 1,
      .help = "median steps/s of the last third may be at most this fraction below the first third's" },
};

static const cli_option options[] = {
    { "ranks", "scenario.ranks", NULL },
    { "steps", "scenario.steps", NULL },
    { "deadline", "scenario.deadline", NULL },
    { "launcher", "scenario.launcher", NULL },
    { "duration", "soak.duration", NULL },
    { "fault-every", "soak.fault_every", NULL },
    { "sample-every", "soak.sample_every", NULL },
};

static const char usage[] =
    "usage: nebula-chaos run SCENARIO [--out DIR] [--set KEY=VALUE ...]\n"
    "                                 a fault scenario: the fault-free reference, the faulted run with its\n"
    "                                 relaunches, the invariants (Markdown and JSON report in DIR)\n"
    "       nebula-chaos soak [--duration 72h] [--fault-every 2h] [--sample-every 60s] [--config FILE]\n"
    "                                 a long training with every fault kind at seeded random times: goodput,\n"
    "                                 time to recover per fault, leak slopes, checkpoint integrity\n"
    "       nebula-chaos list         the scenarios under chaos/\n"
    "SCENARIO is a file (chaos/kill-30pct.ini) or a name under chaos/. DIR defaults to runs/chaos/NAME; its\n"
    "run/ and reference/ are replaced. Finds nebula-train in $NEBULA_BIN, beside nebula-chaos, or build/bin. Exit: 0 every\n"
    "invariant holds, 1 one does not, 2 usage or input error, 128+N stopped by signal N (SIGTERM, SIGINT,\n"
    "SIGHUP: forwarded to the launch, which is killed 10 s later; the report says interrupted).";

volatile sig_atomic_t chaos_interrupted;

static void on_signal(int sig)
{
    chaos_interrupted = sig;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* OUT/run and OUT/reference from an earlier run would be resumed from: they go. */
static status fresh_out(const char *out)
{
    char p[2 * CHAOS_PATH_MAX];
    /* the files written under fixed names: the output rule (base/path.h) before anything
     * is created or removed */
    static const char *const files[] = { "report.md", "report.json", "samples.csv", "supervisor.log", "verify.log",
                                         "reference.log", "diff.log" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        TRY(path_output_check(p, "--out", NULL, 0));
    }
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        char parent[CHAOS_PATH_MAX];
        snprintf(parent, sizeof parent, "%s", out);
        for (char *s = strchr(parent + 1, '/'); s; s = strchr(s + 1, '/')) {
            *s = '\0';
            mkdir(parent, 0755);
            *s = '/';
        }
        if (mkdir(out, 0755) != 0 && errno != EEXIST) {
            log_error("cannot create the output directory %s: %s", out, log_errno_str());
            return STATUS_INPUT;
        }
    }
    const char *sub[] = { "run", "reference" };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", out, sub[i]);
        if (nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
            log_error("cannot remove %s: %s (a tmpfs left mounted there? umount it)", p, log_errno_str());
            return STATUS_INPUT;
        }
    }
    DIR *d = opendir(out);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "launch-", 7) || !strcmp(e->d_name, "reference.log") ||
            !strcmp(e->d_name, "supervisor.log") || !strcmp(e->d_name, "verify.log")) {
            snprintf(p, sizeof p, "%s/%s", out, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    return STATUS_OK;
}

static int list_scenarios(void)
{
    struct dirent **e;
    int n = scandir("chaos", &e, NULL, alphasort);
    if (n < 0) {
        log_error("no chaos/ directory here: run from the Nebula tree");
        return 2;
    }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(e[i]->d_name);
        if (len > 4 && !strcmp(e[i]->d_name + len - 4, ".ini")) {
            config cfg;
            config_init(&cfg, schema, (int)(sizeof schema / sizeof schema[0]));
            char path[512];
            snprintf(path, sizeof path, "chaos/%s", e[i]->d_name);
            if (config_load_file(&cfg, path) == STATUS_OK)
                printf("%-24s %s\n", config_str(&cfg, "scenario.name"), config_str(&cfg, "scenario.description"));
        }
        free(e[i]);
    }
    free(e);
    return 0;
}

int main(int argc, char **argv)
{
    runtime_preinit(argv[0]);
    config cfg;
    config_init(&cfg, schema, (int)(sizeof schema / sizeof schema[0]));
    const char *cmd = argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "list")) return list_scenarios();
    /* internal: what the launcher starts on every node (launch.c) */
    if (!strcmp(cmd, "rank")) return chaos_rank_main(argc, argv);
    if (!strcmp(cmd, "probe")) return chaos_probe_main(argc, argv);
    bool run = !strcmp(cmd, "run"), soak = !strcmp(cmd, "soak");
    if (!run && !soak && cmd[0] && cmd[0] != '-') {
        log_error("unknown command '%s': expected run, soak or list (--help)", cmd);
        return 2;
    }
    int first = 2;
    char scenario[1024] = "";
    if (run) {
        if (argc < 3 || !strncmp(argv[2], "--", 2)) {
            log_error("run needs a SCENARIO: a file, or a name under chaos/ (nebula-chaos list)");
            return 2;
        }
        if (strchr(argv[2], '/') || strstr(argv[2], ".ini")) snprintf(scenario, sizeof scenario, "%s", argv[2]);
        else snprintf(scenario, sizeof scenario, "chaos/%s.ini", argv[2]);
        if (access(scenario, R_OK) != 0) {
            log_error("scenario %s: %s (nebula-chaos list shows the shipped ones)", scenario, log_errno_str());
            return 2;
        }
        if (chaos_check_text(scenario) != STATUS_OK || config_load_file(&cfg, scenario) != STATUS_OK) return 2;
        bool any = false;  /* a file that sets nothing is a mistake (or not a scenario), not the defaults */
        for (int k = 0; k < cfg.nkeys; k++)
            any |= strncmp(cfg.values[k].origin, "default", 8) != 0;
        if (!any) {
            log_error("%s sets no key: a scenario has a [scenario] and a [fault] section (nebula-chaos --help)",
                      scenario);
            return 2;
        }
        first = 3;
    }
    /* --out is the one option that is not a config key */
    const char *out_opt = NULL;
    char *args[512];
    int nargs = 0;
    for (int i = 0; i < argc && nargs < 511; i++) {
        if (i >= first && !strcmp(argv[i], "--out") && i + 1 < argc) { out_opt = argv[++i]; continue; }
        /* config files pass the same text check as a scenario before cli_parse loads them */
        if (i >= first && !strcmp(argv[i], "--config") && i + 1 < argc && chaos_check_text(argv[i + 1]) != STATUS_OK)
            return 2;
        if (i >= first && !strncmp(argv[i], "--config=", 9) && chaos_check_text(argv[i] + 9) != STATUS_OK) return 2;
        args[nargs++] = argv[i];
    }
    args[nargs] = NULL;
    cli_action action;
    status st = cli_parse(&cfg, options, (int)(sizeof options / sizeof options[0]), nargs, args,
                          run || soak ? first : 1, usage, &action);
    if (st != STATUS_OK) return status_exit_code(st);
    if (action == CLI_ACTION_EXIT) return 0;
    if (!run && !soak) {
        log_error("missing command: expected run, soak or list (--help)");
        return 2;
    }
    char train_bin[4096];
    chaos_bin_path("nebula-train", train_bin, sizeof train_bin);
    if (access(train_bin, X_OK) != 0) {
        log_error("%s is missing: run from the Nebula tree after make, or set NEBULA_BIN", train_bin);
        return 2;
    }
    if (chaos_check_values(&cfg, soak) != STATUS_OK) return 2;
    /* A supervisor that dies of a signal leaves its launches running (each has a session
     * of its own, so Ctrl-C or scancel does not reach them): it stops them instead. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    int sigs[] = { SIGTERM, SIGINT, SIGHUP };
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, NULL);
    char out[CHAOS_PATH_MAX];
    if (out_opt) snprintf(out, sizeof out, "%s", out_opt);
    else snprintf(out, sizeof out, "runs/chaos/%s", soak ? "soak" : config_str(&cfg, "scenario.name"));
    if (fresh_out(out) != STATUS_OK) return 2;
    int rc;
    if (soak) {
        json_t *prov = comm_provenance_local(&cfg, argc, argv);
        rc = chaos_soak(&cfg, out, prov);
        json_decref(prov);
    } else {
        rc = chaos_run_scenario(&cfg, out);
    }
    return chaos_interrupted ? 128 + chaos_interrupted : rc;
}
