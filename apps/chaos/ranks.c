/* ranks — finding the ranks of a launch on every node, signalling and sampling them.
 *
 * The one decision to know: the launcher (mpirun, srun, the namespace cluster) does not
 * start nebula-train directly but `nebula-chaos rank DIR -- nebula-train ...`, which
 * writes DIR/rank.N ("host= node= pid=") and then exec()s nebula-train: same process, same
 * pid, so the entry names the rank itself on whichever node the launcher put it. DIR is
 * RUN_DIR.ranks, emptied before each launch. A rank on the supervisor's node is signalled
 * with kill(2) and sampled through /proc; one on another node through the launcher's own
 * way in: a step of the same Slurm job (`srun --overlap --jobid=J -w NODE kill -s SIG PID`,
 * `nebula-chaos probe PID...`), or ssh outside Slurm. Without entries (a launch
 * started by something else) ranks are found in this host's /proc by `--run-dir`. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chaos.h"
#include "base/log.h"

/* This supervisor's node: the Slurm node name when there is one (several slurmd can share
 * a host), else the host name. */
static void self_node(char *host, size_t hcap, char *node, size_t ncap)
{
    if (gethostname(host, hcap) != 0) snprintf(host, hcap, "?");
    host[hcap - 1] = '\0';
    const char *s = getenv("SLURMD_NODENAME");
    snprintf(node, ncap, "%s", s && *s ? s : host);
}

void chaos_registry_dir(const char *run_dir, char *out, size_t cap)
{
    snprintf(out, cap, "%s.ranks", run_dir);
}

int chaos_rank_main(int argc, char **argv)
{
    /* nebula-chaos rank DIR -- PROGRAM ARGS... */
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "nebula-chaos rank DIR -- PROGRAM ARGS...: internal, started by the launcher\n");
        return 2;
    }
    const char *vars[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "PMI_RANK" };
    int rank = -1;
    for (int i = 0; i < 4 && rank < 0; i++)
        if (getenv(vars[i])) rank = atoi(getenv(vars[i]));
    if (rank >= 0) {
        char host[64], node[64], path[CHAOS_PATH_MAX + 64], tmp[CHAOS_PATH_MAX + 96];
        self_node(host, sizeof host, node, sizeof node);
        snprintf(path, sizeof path, "%s/rank.%d", argv[2], rank);
        snprintf(tmp, sizeof tmp, "%s/.rank.%d.%d", argv[2], rank, (int)getpid());
        FILE *f = fopen(tmp, "w");
        /* a rank the supervisor cannot find is a rank it cannot hit: say so, run anyway */
        if (!f || fprintf(f, "host=%s node=%s pid=%d\n", host, node, (int)getpid()) < 0 || fclose(f) != 0 ||
            rename(tmp, path) != 0)
            fprintf(stderr, "nebula-chaos rank: cannot register rank %d in %s: %s\n", rank, argv[2], strerror(errno));
    }
    execv(argv[4], argv + 4);
    fprintf(stderr, "nebula-chaos rank: cannot run %s: %s\n", argv[4], strerror(errno));
    return 127;
}

/* Reads a whole small file (up to cap - 1 bytes); its length, -1 on error. */
static ssize_t slurp(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    for (ssize_t k; n < cap - 1 && (k = read(fd, buf + n, cap - 1 - n)) > 0;) n += (size_t)k;
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

/* pid is a live nebula-train of run_dir on this host (not a recycled pid). */
static bool is_ours(pid_t pid, const char *run_dir, int *rank)
{
    static char buf[1 << 16];
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    ssize_t len = slurp(path, buf, sizeof buf);
    if (len <= 0) return false;
    const char *base = strrchr(buf, '/');
    if (strcmp(base ? base + 1 : buf, "nebula-train") != 0) return false;
    bool ours = false;
    for (ssize_t i = 0; i < len; i += (ssize_t)strlen(buf + i) + 1)
        if (!strcmp(buf + i, "--run-dir") && i + (ssize_t)strlen(buf + i) + 1 < len &&
            !strcmp(buf + i + strlen(buf + i) + 1, run_dir))
            ours = true;
    if (!ours || !rank) return ours;
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    len = slurp(path, buf, sizeof buf);
    *rank = -1;
    for (ssize_t i = 0; i < len; i += (ssize_t)strlen(buf + i) + 1) {
        if (!strncmp(buf + i, "OMPI_COMM_WORLD_RANK=", 21)) *rank = atoi(buf + i + 21);
        else if (*rank < 0 && !strncmp(buf + i, "PMIX_RANK=", 10)) *rank = atoi(buf + i + 10);
    }
    return true;
}

int chaos_ranks(const char *run_dir, chaos_rank *r, int max)
{
    memset(r, 0, (size_t)max * sizeof *r);
    char dir[CHAOS_PATH_MAX + 16], host[64], node[64];
    chaos_registry_dir(run_dir, dir, sizeof dir);
    self_node(host, sizeof host, node, sizeof node);
    int found = 0, entries = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int k;
        char path[2 * CHAOS_PATH_MAX], buf[512];
        if (sscanf(e->d_name, "rank.%d", &k) != 1 || k < 0 || k >= max) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        chaos_rank c = { .rank = k };
        int pid = 0;
        if (slurp(path, buf, sizeof buf) <= 0 || sscanf(buf, "host=%63s node=%63s pid=%d", c.host, c.node, &pid) != 3)
            continue;
        entries++;
        c.pid = (pid_t)pid;
        c.local = !strcmp(c.host, host) && !strcmp(c.node, node);
        /* a local entry whose process is gone (or is another process now) is a dead rank */
        if (c.local && !is_ours(c.pid, run_dir, NULL)) continue;
        r[k] = c;
        found++;
    }
    if (d) closedir(d);
    if (entries > 0) return found;
    /* no registry: this host's /proc */
    d = opendir("/proc");
    while (d && (e = readdir(d))) {
        int k;
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        pid_t pid = (pid_t)atoi(e->d_name);
        if (!is_ours(pid, run_dir, &k) || k < 0 || k >= max || r[k].pid) continue;
        r[k] = (chaos_rank){ .rank = k, .pid = pid, .local = true };
        snprintf(r[k].host, sizeof r[k].host, "%s", host);
        snprintf(r[k].node, sizeof r[k].node, "%s", node);
        found++;
    }
    if (d) closedir(d);
    return found;
}

int chaos_rank_pids(const char *run_dir, pid_t *pids, int max)
{
    static chaos_rank r[4096];
    int n = chaos_ranks(run_dir, r, max < 4096 ? max : 4096), local = 0;
    for (int i = 0; i < max; i++) {
        pids[i] = i < 4096 && r[i].local ? r[i].pid : 0;
        local += pids[i] != 0;
    }
    (void)n;
    return local;
}

/* Runs argv with its stdout into buf (cap bytes, NUL-terminated), stderr to log; exit
 * code, or -1 when it ran past `limit` seconds (then it is killed). A step of the job can
 * wait for a terminating step's resources (KillWait, 30 s) or a node that went away: the
 * supervisor must not wait with it, or it stops watching the heartbeat. */
static int capture(const char *const *argv, char *buf, size_t cap, const char *log, double limit)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);  /* its own group: a timeout kills srun and whatever it started */
        int fd = log ? open(log, O_WRONLY | O_APPEND | O_CREAT, 0644) : -1, nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(p[1], 1);
        dup2(fd >= 0 ? fd : nul, 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    size_t n = 0;
    double t0 = chaos_now();
    int ws = 0, rc = -2;
    while (rc == -2) {
        ssize_t k = read(p[0], buf + n, cap - 1 - n);
        if (k > 0 && (n += (size_t)k) == cap - 1) n = 0;  /* never more than a few lines: keep the tail */
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid) rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
        else if (chaos_now() - t0 > limit) {
            kill(-pid, SIGTERM);
            usleep(200000);
            kill(-pid, SIGKILL);
            while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
            rc = -1;
        } else if (k <= 0) usleep(10000);
    }
    for (ssize_t k; n < cap - 1 && (k = read(p[0], buf + n, cap - 1 - n)) > 0;) n += (size_t)k;
    buf[n] = '\0';
    close(p[0]);
    return rc;
}

/* argv prefix that runs a command on r's node: a step of this Slurm job, or ssh */
static int remote_prefix(const chaos_rank *r, const char **argv, char *jobid, size_t jcap)
{
    int n = 0;
    const char *job = getenv("SLURM_JOB_ID");
    if (job) {
        snprintf(jobid, jcap, "--jobid=%s", job);
        argv[n++] = "srun"; argv[n++] = "--overlap"; argv[n++] = jobid; argv[n++] = "-N1"; argv[n++] = "-n1";
        argv[n++] = "--quiet"; argv[n++] = "-w"; argv[n++] = r->node;
    } else {
        argv[n++] = "ssh"; argv[n++] = "-o"; argv[n++] = "BatchMode=yes"; argv[n++] = r->host;
    }
    return n;
}

bool chaos_signal_rank(const chaos_rank *r, int sig, const char *log)
{
    if (!r->pid) return false;
    if (r->local) return kill(r->pid, sig) == 0;
    const char *argv[24];
    char jobid[64], pid[16], name[16];
    int n = remote_prefix(r, argv, jobid, sizeof jobid);
    snprintf(pid, sizeof pid, "%d", (int)r->pid);
    snprintf(name, sizeof name, "%s", chaos_signame(sig) + 3);  /* kill -s takes TERM, not SIGTERM */
    argv[n++] = "kill"; argv[n++] = "-s"; argv[n++] = name; argv[n++] = pid; argv[n] = NULL;
    char out[256];
    return capture(argv, out, sizeof out, log, 15) == 0;
}

/* nebula-chaos probe PID...: "PID RSS_KB FDS" per live process (run on a rank's node) */
static bool usage_of(pid_t pid, long *rss_kb, int *fds)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    *rss_kb = 0;
    while (fgets(line, sizeof line, f)) sscanf(line, "VmRSS: %ld kB", rss_kb);
    fclose(f);
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    *fds = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') (*fds)++;
    if (d) closedir(d);
    return true;
}

int chaos_probe_main(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        long rss;
        int fds;
        if (usage_of((pid_t)atoi(argv[i]), &rss, &fds)) printf("%s %ld %d\n", argv[i], rss, fds);
    }
    return 0;
}

int chaos_usage(const chaos_rank *r, int max, double *rss_mb, int *fds, const char *log)
{
    int seen = 0;
    *rss_mb = 0;
    *fds = 0;
    bool done[4096] = { false };
    for (int i = 0; i < max && i < 4096; i++) {
        if (!r[i].pid || done[i]) continue;
        if (r[i].local) {
            long kb;
            int n;
            if (usage_of(r[i].pid, &kb, &n)) { *rss_mb += kb / 1024.0; *fds += n; seen++; }
            done[i] = true;
            continue;
        }
        /* every rank of that node in one probe */
        const char *argv[64 + 32];
        char jobid[64], self[CHAOS_PATH_MAX], pids[64][16];
        int n = remote_prefix(&r[i], argv, jobid, sizeof jobid), np = 0;
        chaos_self_path(self, sizeof self);
        argv[n++] = self;
        argv[n++] = "probe";
        for (int j = i; j < max && j < 4096 && np < 64; j++)
            if (r[j].pid && !r[j].local && !done[j] && !strcmp(r[j].node, r[i].node) && !strcmp(r[j].host, r[i].host)) {
                snprintf(pids[np], sizeof pids[np], "%d", (int)r[j].pid);
                argv[n++] = pids[np++];
                done[j] = true;
            }
        argv[n] = NULL;
        char out[8192];
        if (capture(argv, out, sizeof out, log, 10) != 0) continue;
        for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
            int pid, nf;
            long kb;
            if (sscanf(line, "%d %ld %d", &pid, &kb, &nf) == 3) { *rss_mb += kb / 1024.0; *fds += nf; seen++; }
        }
    }
    return seen;
}

int chaos_kill_ranks(const char *run_dir, const char *log)
{
    static chaos_rank r[4096];
    chaos_ranks(run_dir, r, 4096);
    int n = 0;
    for (int i = 0; i < 4096; i++)
        if (r[i].pid) n += chaos_signal_rank(&r[i], SIGKILL, log);
    return n;
}
