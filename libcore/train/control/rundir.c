/* rundir — the run directory's own files (rank 0): the lock that makes a directory one
 * run's, the resolved config.ini, and the one way the trainer opens a file there.
 *
 * Lock. Rank 0 holds flock(LOCK_EX | LOCK_NB) on RUN_DIR/lock from set-up to train_free.
 * The file holds one line naming the holder:
 *     host=H pid=P start=UNIX_SECONDS since=YYYY-MM-DDTHH:MM:SSZ job=SLURM_JOB_ID|-
 * A second run finds the flock taken and exits 2 naming that holder. The kernel drops a
 * flock when its holder dies (kill -9 and node-local crashes included), so a lock file
 * whose flock is free is stale by definition: it is taken over with a log line. A clean
 * end empties the file but keeps it: unlinking a lock file lets two runs lock two inodes
 * of the same name. Where flock is not honoured (Lustre mounted `noflock` returns ENOSYS;
 * `localflock` or some FUSE file systems lock per host or not at all), the holder line
 * is the fallback: a live nebula process of that pid on this host refuses the run (a
 * holder on another host cannot be checked from here: documented in docs/training.md).
 *
 * Files. Every file the trainer creates in the run directory is opened without following
 * a symbolic link (train_rundir_open_file: O_NOFOLLOW, and refused unless regular) or
 * replaced atomically by rename (config.ini), so a link planted there is an error naming
 * the file, never a write through it to the link's target.
 *
 * nebula-bench model sets up the trainer in a fresh mkdtemp directory: its lock is always
 * free, and the directory is removed with everything in it at the end.
 *
 * Fault points (CHAOS build, module "rundir", rank 0, in the order a run reaches them) and
 * what a failure there does:
 *   rundir.open    opening RUN_DIR/lock          -> exit 1 (STATUS_IO) before training
 *   rundir.lock    flock                         -> the holder-line fallback; the run goes on
 *   rundir.read    reading the previous holder   -> holder unknown; the run goes on
 *   rundir.write   writing this run's holder     -> a warning; the run goes on (locked)
 *   rundir.config  writing config.ini            -> a warning; the run goes on
 *   rundir.release emptying the holder at the end -> a warning; exit code unchanged */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"
#include "rules.h"

#define HOLDER_MAX 512

status train_rundir_open_file(const train_run *r, const char *name, int flags, fault_plan *f, const char *point,
                              int *out)
{
    char path[4200], why[256];
    snprintf(path, sizeof path, "%s/%s", r->run_dir, name);
    *out = -1;
    (void)point;  /* the normal build has no fault points */
    int inj = f ? FAULT_ERRNO(f, point, r->step) : 0;
    if (inj) {
        log_error("cannot open %s: %s", path, strerror(inj));
        return STATUS_IO;
    }
    if (path_create_regular(path, flags & ~O_CREAT, 0644, out, why, sizeof why) == 0) return STATUS_OK;
    if (errno != EINVAL) {
        log_error("%s %s", path, why);
        return STATUS_IO;
    }
    /* a link, FIFO, device or directory planted under the name: the user's to remove */
    log_error("%s %s (a run as root would overwrite a link's target)\nHINT: remove it (rm %s) or use another "
              "--run-dir", path, why, path);
    return STATUS_INPUT;
}

/* Run-directory files written by other parts of the trainer (elastic.c's heartbeat and
 * relaunch) or read by supervisors: refused up front when a link or a non-regular file
 * stands under the name, so a planted link is an error at start-up, not a write through
 * it later. */
static status rundir_check_names(const train_run *r)
{
    static const char *const names[] = { "heartbeat", "relaunch", "metrics.jsonl", "config.ini" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", r->run_dir, names[i]);
        if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) continue;
        log_error("%s is %s, not a regular file: the trainer writes its own %s there and never through a link "
                  "(a run as root would overwrite the target)\nHINT: remove it (rm %s) or use another --run-dir",
                  path, path_kind(st.st_mode), names[i], path);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

/* The holder line's fields; false when the line is empty or not one. */
typedef struct rundir_holder {
    char host[256], since[32], job[64];
    long pid;
} rundir_holder;

static bool holder_parse(const char *line, rundir_holder *h)
{
    memset(h, 0, sizeof *h);
    return sscanf(line, "host=%255s pid=%ld start=%*d since=%31s job=%63s", h->host, &h->pid, h->since, h->job) == 4 &&
           h->pid > 0;
}

/* Whether pid on this host is a live nebula process (not a recycled pid of another
 * program, nor a zombie whose files, flock included, are already closed): kill(pid, 0),
 * then /proc's command name and state where there is a /proc. */
static bool holder_alive(const rundir_holder *h)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (strcmp(host, h->host) != 0 || h->pid == (long)getpid()) return false;
    if (kill((pid_t)h->pid, 0) != 0 && errno != EPERM) return false;
    char path[64], stat[512] = "";
    snprintf(path, sizeof path, "/proc/%ld/stat", h->pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;  /* no /proc: trust kill */
    bool got = fgets(stat, sizeof stat, f) != NULL;
    fclose(f);
    /* "PID (COMM) STATE ...": COMM may hold spaces and parentheses, STATE follows the last ')' */
    const char *open = strchr(stat, '('), *close = strrchr(stat, ')');
    if (!got || !open || !close || close < open) return true;
    bool nebula = !strncmp(open + 1, "nebula", 6);
    char state = close[1] == ' ' ? close[2] : '?';
    return nebula && state != 'Z' && state != 'X';
}

/* h: the holder, NULL when its line is not there (yet, or unreadable). */
static status rundir_refuse(const train_run *r, const rundir_holder *h, const char *how)
{
    static const char hint[] = "HINT: two runs on one directory would interleave their checkpoints and metrics: "
                               "wait for that run to end or stop it";
    if (!h) {
        log_error("run directory %s is in use by another run (%s; its holder line is not written yet or cannot "
                  "be read)\n%s, or give this run another --run-dir", r->run_dir, how, hint);
        return STATUS_INPUT;
    }
    char stop[400];
    if (strcmp(h->job, "-") != 0) snprintf(stop, sizeof stop, "scancel --signal=USR2 %s", h->job);
    else snprintf(stop, sizeof stop, "kill -USR2 %ld on %s", h->pid, h->host);
    log_error("run directory %s is in use by another run: host %s pid %ld since %s (job %s); %s\n%s (%s: it "
              "checkpoints and exits 3), or give this run another --run-dir", r->run_dir, h->host, h->pid, h->since,
              h->job, how, hint, stop);
    return STATUS_INPUT;
}

/* This run's holder line, written over the previous one. */
static void rundir_write_holder(train_run *r)
{
    char host[256] = "", since[32], line[HOLDER_MAX];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const char *job = getenv("SLURM_JOB_ID");
    int n = snprintf(line, sizeof line, "host=%s pid=%ld start=%lld since=%s job=%s\n", host[0] ? host : "?",
                     (long)getpid(), (long long)now, since, job && job[0] ? job : "-");
    int inj = FAULT_ERRNO(&r->rundir_fault, "rundir.write", r->step);
    errno = inj;
    if (inj || ftruncate(r->lock_fd, 0) != 0 || pwrite(r->lock_fd, line, (size_t)n, 0) != n)
        log_warn("cannot write the holder line to %s/lock: %s; the run holds the lock, but a second run will not "
                 "be told who holds it", r->run_dir, strerror(errno ? errno : EIO));
}

/* --run-dir is the run's own output (docs/design.md#outputs): checked before anything is
 * created, it is neither a committed checkpoint nor inside one, nor inside another run's
 * ckpt/, reload/ or tb/, where its lock, metrics.jsonl and config.ini would mix with files
 * that belong to that run. */
static status rundir_check_place(const train_run *r)
{
    char what[2 * PATH_MAX + 128];
    bool self;
    if (!path_in_run_state(r->run_dir, what, sizeof what, &self)) return STATUS_OK;
    log_error("run directory %s %s %s: the run would write its lock, metrics.jsonl and config.ini there\n"
              "HINT: give another --run-dir (docs/design.md#outputs)", r->run_dir, self ? "is" : "lies inside", what);
    return STATUS_INPUT;
}

status train_rundir_lock(train_run *r)
{
    TRY(rundir_check_place(r));
    TRY(path_mkdirs(r->run_dir, "run directory"));
    int fd;
    TRY(train_rundir_open_file(r, "lock", O_RDWR | O_CREAT, &r->rundir_fault, "rundir.open", &fd));
    int inj = FAULT_ERRNO(&r->rundir_fault, "rundir.lock", r->step);
    int rc = inj ? -1 : flock(fd, LOCK_EX | LOCK_NB);
    int err = inj ? inj : errno;
    /* read after the attempt: a holder writes its line right after it takes the lock */
    char line[HOLDER_MAX] = "";
    inj = FAULT_ERRNO(&r->rundir_fault, "rundir.read", r->step);
    ssize_t got = inj ? -1 : pread(fd, line, sizeof line - 1, 0);
    if (got < 0) log_warn("cannot read %s/lock: %s; its previous holder is unknown", r->run_dir, strerror(inj ? inj : errno));
    line[got > 0 ? got : 0] = '\0';
    rundir_holder h;
    bool named = holder_parse(line, &h);
    if (rc != 0 && err == EWOULDBLOCK) {
        close(fd);
        return rundir_refuse(r, named ? &h : NULL, "its lock file is locked");
    }
    if (rc != 0) {
        log_warn("flock on %s/lock failed (%s): this file system does not lock; falling back to the holder line, "
                 "which sees a run on this host only", r->run_dir, strerror(err));
    }
    if (named && holder_alive(&h)) {  /* flock not honoured, or failed: the holder line decides */
        close(fd);
        return rundir_refuse(r, &h, "its process is alive although the lock file is not locked (this file system "
                             "does not honour flock)");
    }
    if (named)
        printf("run directory %s: taking over a stale lock of host %s pid %ld since %s (job %s): that run ended "
               "without releasing it (killed or crashed); its lock is free\n", r->run_dir, h.host, h.pid, h.since,
               h.job);
    r->lock_fd = fd;
    rundir_write_holder(r);
    return rundir_check_names(r);
}

void train_rundir_unlock(train_run *r)
{
    if (r->lock_fd < 0) return;
    int inj = FAULT_ERRNO(&r->rundir_fault, "rundir.release", r->step);
    errno = inj;
    if (inj || ftruncate(r->lock_fd, 0) != 0)  /* empty: released cleanly, not stale */
        log_warn("cannot empty %s/lock: %s; the next run will call it stale and take it over", r->run_dir,
                 strerror(errno ? errno : EIO));
    close(r->lock_fd);  /* drops the flock */
    r->lock_fd = -1;
}

typedef struct config_fill {
    train_run *r;
} config_fill;

static int rundir_config_fill(void *ctx, int fd)
{
    train_run *r = ((config_fill *)ctx)->r;
    int inj = FAULT_ERRNO(&r->rundir_fault, "rundir.config", r->step);
    if (inj) {
        errno = inj;
        return -1;
    }
    static const char head[] = "; the resolved config of the last run started in this directory: every key with "
                               "its value\n; (nebula-train --config config.ini runs it again)\n";
    if (path_write_all(fd, head, sizeof head - 1) != 0) return -1;
    return path_write_all(fd, r->config_text, strlen(r->config_text));
}

void train_rundir_write_config(train_run *r)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.ini", r->run_dir);
    config_fill ctx = { r };
    /* informational (every checkpoint stores the config too): a failure is a warning */
    if (path_write_atomic(path, "resolved config", rundir_config_fill, &ctx) != STATUS_OK)
        log_warn("%s was not written; the run goes on (its checkpoints store the config)", path);
}
