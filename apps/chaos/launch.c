/* launch — starting nebula-train under a launcher, watching it, finding its ranks and
 * stopping all of it.
 *
 * Every launch runs in a session of its own (setsid), so one signal to the session
 * reaches the launcher and every rank it forked, and a terminal's Ctrl-C reaches only the
 * supervisor, which forwards it (chaos_interrupted). Every rank starts through the
 * registering shim of ranks.c, so the supervisor finds it on whichever node it runs;
 * leftovers on this node are also found by their `--run-dir RUN_DIR`, unique to the run. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chaos.h"
#include "base/log.h"
#include "base/path.h"

double chaos_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads a whole small file (up to cap - 1 bytes) into buf; its length, -1 on error. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n < cap - 1) {
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

/* Splits s at blanks into argv (in place); returns the count. No quoting: scenario
 * files name options and paths without blanks. */
static int split_words(char *s, const char **argv, int max)
{
    int n = 0;
    for (char *t = strtok(s, " \t\n"); t && n < max; t = strtok(NULL, " \t\n")) argv[n++] = t;
    return n;
}

int chaos_start(chaos_ctx *x, const char *run_dir, int world, const char *log, long steps, const char *const *env,
                chaos_launch *l)
{
    const config *cfg = x->cfg;
    static char words[4096], steps_s[32], np_s[16], rpn_s[64], ck_s[64];
    const char *argv[256];
    int n = 0;
    const char *launcher = config_str(cfg, "scenario.launcher");
    if (!strcmp(launcher, "auto")) launcher = getenv("SLURM_JOB_ID") ? "srun" : "mpirun";
    snprintf(np_s, sizeof np_s, "%d", world);
    if (!strcmp(launcher, "srun")) {
        argv[n++] = "srun"; argv[n++] = "--mpi=pmix"; argv[n++] = "--kill-on-bad-exit=1";
        argv[n++] = "-n"; argv[n++] = np_s;
    } else if (!strcmp(launcher, "netns")) {
        argv[n++] = "tools/netns-cluster"; argv[n++] = "mpirun"; argv[n++] = np_s;
    } else {
        argv[n++] = "mpirun"; argv[n++] = "--oversubscribe"; argv[n++] = "-np"; argv[n++] = np_s;
    }
    /* the registering shim (ranks.c) runs first on every node and exec()s the trainer */
    static char self[CHAOS_PATH_MAX], reg[CHAOS_PATH_MAX + 16];
    chaos_self_path(self, sizeof self);
    chaos_registry_dir(run_dir, reg, sizeof reg);
    argv[n++] = self;
    argv[n++] = "rank"; argv[n++] = reg; argv[n++] = "--";
    argv[n++] = x->train_bin;
    argv[n++] = "--config"; argv[n++] = config_str(cfg, "scenario.train_config");
    argv[n++] = "--run-dir"; argv[n++] = run_dir;
    snprintf(steps_s, sizeof steps_s, "%ld", steps);
    argv[n++] = "--steps"; argv[n++] = steps_s;
    long rpn = config_int(cfg, "scenario.ranks_per_node");
    snprintf(rpn_s, sizeof rpn_s, "runtime.ranks_per_node=%ld", rpn < world ? rpn : world);
    argv[n++] = "--set"; argv[n++] = rpn_s;
    snprintf(ck_s, sizeof ck_s, "ckpt.every_steps=%ld", (long)config_int(cfg, "scenario.ckpt_every"));
    argv[n++] = "--set"; argv[n++] = ck_s;
    if (!strcmp(launcher, "netns")) { argv[n++] = "--set"; argv[n++] = "runtime.bind=none"; }
    snprintf(words, sizeof words, "%s", config_str(cfg, "scenario.train_args"));
    n += split_words(words, argv + n, 200);
    argv[n] = NULL;

    /* last launch's entries would name dead (or recycled) pids */
    DIR *d = opendir(reg);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[2 * CHAOS_PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", reg, e->d_name);
        if (e->d_name[0] != '.' || strncmp(e->d_name, ".rank.", 6) == 0) unlink(p);
    }
    if (d) closedir(d);
    else if (mkdir(reg, 0755) != 0) log_warn("cannot create %s: %s (ranks found through /proc)", reg, log_errno_str());
    memset(l, 0, sizeof *l);
    l->world = world;
    l->resumed_step = -1;
    l->last_step = -1;
    snprintf(l->log, sizeof l->log, "%s", log);
    FILE *f = fopen(log, "a");
    if (!f) {
        log_error("cannot open the launch log %s: %s", log, log_errno_str());
        return -1;
    }
    fprintf(f, "+");
    for (int i = 0; i < n; i++) fprintf(f, " %s", argv[i]);
    fprintf(f, "\n");
    fclose(f);
    pid_t pid = fork();
    if (pid < 0) {
        log_error("fork failed: %s", log_errno_str());
        return -1;
    }
    if (pid == 0) {
        setsid();
        int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644), nul = open("/dev/null", O_RDONLY);
        if (fd < 0 || nul < 0) _exit(127);
        dup2(nul, 0); dup2(fd, 1); dup2(fd, 2);
        for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
        execvp(argv[0], (char *const *)argv);
        dprintf(2, "nebula-chaos: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    l->pid = pid;
    l->t_start = chaos_now();
    return 0;
}

bool chaos_poll(chaos_launch *l)
{
    if (l->pid <= 0) return true;
    int ws;
    pid_t r = waitpid(l->pid, &ws, WNOHANG);
    if (r == 0) return false;
    l->exit_code = r < 0 ? 255 : WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    l->t_end = chaos_now();
    l->pid = 0;
    return true;
}

void chaos_stop(chaos_launch *l, const char *run_dir, int sig, double grace)
{
    if (l->pid > 0) {
        kill(-l->pid, sig);
        double t = chaos_now();
        while (!chaos_poll(l) && chaos_now() - t < grace) usleep(50000);
        if (l->pid > 0) {
            kill(-l->pid, SIGKILL);
            while (!chaos_poll(l)) usleep(20000);
        }
    }
    /* ranks outside the session (srun's, the namespace cluster's) */
    pid_t pids[1024];
    for (int round = 0; round < 100; round++) {
        if (chaos_rank_pids(run_dir, pids, 1024) == 0) return;
        for (int i = 0; i < 1024; i++)
            if (pids[i]) kill(pids[i], SIGKILL);
        usleep(50000);
    }
    log_warn("ranks of %s still alive 5 s after SIGKILL", run_dir);
}

bool chaos_rank_died(chaos_launch *l, const char *run_dir)
{
    double now = chaos_now();
    if (l->pid <= 0 || now - l->t_ranks < 0.2) return false;
    l->t_ranks = now;
    static chaos_rank ranks[4096];
    int n = chaos_ranks(run_dir, ranks, 4096);
    if (n >= l->world) l->all_seen = true;
    if (n >= l->world) l->t_short = 0;
    if (!l->all_seen || n >= l->world) return false;
    /* Ranks that finish leave MPI_Finalize together and the launcher follows within a
     * second; a rank missing for 2 s while the launcher still runs is a death. (A rank
     * stopped by SIGSTOP is alive: the heartbeat catches that one.) */
    if (!l->t_short) l->t_short = now;
    if (now - l->t_short < 2.0) return false;
    l->rank_lost = true;
    return true;
}

long chaos_heartbeat(const char *run_dir, int *world)
{
    char path[CHAOS_PATH_MAX + 16], buf[512];
    snprintf(path, sizeof path, "%s/heartbeat", run_dir);
    if (read_small(path, buf, sizeof buf) <= 0) return -1;
    const char *s = strstr(buf, "step="), *w = strstr(buf, "world=");
    if (!s) return -1;
    if (world && w) *world = atoi(w + 6);
    return strtol(s + 5, NULL, 10);
}

long chaos_log_step(const char *log, const char *marker, const char *before, const char *fresh)
{
    FILE *f = fopen(log, "r");
    if (!f) return -1;
    char line[8192];
    long step = -1;
    size_t skip = strlen(before);
    while (step < 0 && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, marker);
        const char *q = p ? strstr(p, before) : NULL;
        if (q) step = strtol(q + skip, NULL, 10);
        else if (fresh && strstr(line, fresh)) step = 0;
    }
    fclose(f);
    return step;
}

long chaos_log_resumed(const char *log)
{
    return chaos_log_step(log, "resumed from ", " at step ", "starting from step 0");
}

bool chaos_watch_tick(chaos_launch *l, const char *run_dir, double *t_prev, double *t_hb, double *now, long *step)
{
    *now = chaos_now();
    if (*now - *t_prev > 1.0) *t_hb += *now - *t_prev;
    *t_prev = *now;
    if (chaos_interrupted) {
        chaos_stop(l, run_dir, chaos_interrupted, CHAOS_STOP_GRACE);
        return false;
    }
    if (l->resumed_step < 0) l->resumed_step = chaos_log_resumed(l->log);
    *step = chaos_heartbeat(run_dir, NULL);
    if (*step > l->last_step) {
        l->last_step = *step;
        *t_hb = *now;
    }
    return true;
}

double chaos_log_final_loss(const char *log, long *step)
{
    FILE *f = fopen(log, "r");
    double loss = NAN;
    if (!f) return loss;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        long s;
        double v;
        if (sscanf(line, "eval step=%ld loss=%lf", &s, &v) == 2) {
            loss = v;
            if (step) *step = s;
        }
    }
    fclose(f);
    return loss;
}

static int report_fill(void *ctx, int fd)
{
    const char *text = ctx;
    return path_write_all(fd, text, strlen(text));
}

void chaos_write_report(const char *path, const char *text)
{
    if (!text) log_error("cannot write %s: out of memory", path);
    else (void)path_write_atomic(path, "report", report_fill, (void *)text);  /* logged there */
}

int chaos_run_cmd(const char *const *argv, const char *log)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644), nul = open("/dev/null", O_RDONLY);
        if (fd < 0 || nul < 0) _exit(127);
        dup2(nul, 0); dup2(fd, 1); dup2(fd, 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

uint64_t chaos_mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

long chaos_newest_commit(const char *run_dir)
{
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt", run_dir);
    DIR *d = opendir(path);
    long best = -1;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long s;
        char marker[3 * CHAOS_PATH_MAX];
        if (sscanf(e->d_name, "step_%ld", &s) != 1 || s <= best) continue;
        snprintf(marker, sizeof marker, "%s/%s/COMMITTED", path, e->d_name);
        if (access(marker, F_OK) == 0) best = s;
    }
    closedir(d);
    return best;
}

long chaos_corrupt_newest(const char *run_dir, long bytes)
{
    long best = chaos_newest_commit(run_dir);
    if (best < 0) return -1;
    char path[2 * CHAOS_PATH_MAX];
    snprintf(path, sizeof path, "%s/ckpt/step_%08ld/state.h5", run_dir, best);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    long flipped = 0;
    for (long i = 0; i < bytes; i++) {
        unsigned char c;
        off_t at = sb.st_size / 2 + i;
        if (pread(fd, &c, 1, at) != 1) break;
        c ^= 0xA5;
        if (pwrite(fd, &c, 1, at) != 1) break;
        flipped++;
    }
    bool ok = fsync(fd) == 0 && flipped == bytes;
    close(fd);
    return ok ? best : -1;
}

void chaos_bin_path(const char *name, char *out, size_t cap)
{
    const char *bin = getenv("NEBULA_BIN");
    if (bin && bin[0] && snprintf(out, cap, "%s/%s", bin, name) < (int)cap && access(out, X_OK) == 0) return;
    char self[4096];
    chaos_self_path(self, sizeof self);
    char *slash = strrchr(self, '/');
    if (slash) {
        *slash = '\0';
        if (snprintf(out, cap, "%s/%s", self, name) < (int)cap && access(out, X_OK) == 0) return;
    }
    if (access("build/bin/nebula-train", X_OK) != 0 && getenv("PATH")) { /* not in a build tree: PATH */
        char list[4096];
        snprintf(list, sizeof list, "%s", getenv("PATH"));
        for (char *rest = list, *dir; (dir = strsep(&rest, ":")) != NULL;)
            if (dir[0] && snprintf(out, cap, "%s/%s", dir, name) < (int)cap && access(out, X_OK) == 0) return;
    }
    snprintf(out, cap, "build/bin/%s", name);
}

void chaos_self_path(char *out, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) {
        snprintf(out, cap, "build/bin/nebula-chaos");
        return;
    }
    out[n] = '\0';
    /* rebuilt while a soak runs: the path names the new binary, which takes the same arguments */
    size_t len = strlen(out), tag = strlen(" (deleted)");
    if (len > tag && !strcmp(out + len - tag, " (deleted)")) out[len - tag] = '\0';
}
