/* watchdog — see watchdog.h. */
#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct watchdog {
    pthread_t thread;
    pthread_mutex_t lock;      /* guards everything below that the main thread changes */
    pthread_cond_t wake;       /* signalled by watchdog_stop */
    bool stop;
    bool done;                 /* MPI_Finalize returned (watchdog_finish): the line says "done" */
    char failed[64];           /* watchdog_failed: what this rank failed in ("" : none): the line says "failed" */
    int rank, size;
    double tick_s;             /* the thread's period: beacon rewrite and deadline check */
    double stale_s;            /* a beacon older than this is a rank whose thread does not run */
    int fd;                    /* the beacon file, -1 without one */
    int depth;                 /* nesting of watchdog_enter; 0: not in a guarded call */
    char what[96];             /* depth > 0: the guarded call; else the last one left */
    double since_wall;         /* CLOCK_REALTIME s: entered (depth > 0) or left the call */
    double since_mono;         /* CLOCK_MONOTONIC s of the same moment */
    double deadline_mono;      /* CLOCK_MONOTONIC s; 0: no deadline */
    double timeout_s;          /* the guarded call's deadline as given, for the message */
    double job_timeout_s;      /* comm.timeout, as given to watchdog_start */
    unsigned long long seq;    /* guarded calls entered so far (outermost only) */
};

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This rank's beacon line, WATCHDOG_BEACON_BYTES long, newline-terminated. */
static void beacon_line(watchdog *wd, char *line)
{
    pthread_mutex_lock(&wd->lock);
    int n = snprintf(line, WATCHDOG_BEACON_BYTES, "rank=%d pid=%ld time=%.3f seq=%llu state=%s since=%.3f op=%s",
                     wd->rank, (long)getpid(), clock_s(CLOCK_REALTIME), wd->seq,
                     wd->done ? "done" : wd->failed[0] ? "failed" : wd->depth ? "in" : "out",
                     wd->since_wall, wd->failed[0] ? wd->failed : wd->what[0] ? wd->what : "-");
    pthread_mutex_unlock(&wd->lock);
    if (n < 0 || n > WATCHDOG_BEACON_BYTES - 1) n = WATCHDOG_BEACON_BYTES - 1;
    memset(line + n, ' ', (size_t)(WATCHDOG_BEACON_BYTES - 1 - n));
    line[WATCHDOG_BEACON_BYTES - 1] = '\n';
}

static void beacon_write(watchdog *wd)
{
    if (wd->fd < 0) return;
    char line[WATCHDOG_BEACON_BYTES];
    beacon_line(wd, line);
    /* a failed write only leaves an older line: this rank may then be named stale */
    if (pwrite(wd->fd, line, sizeof line, (off_t)wd->rank * WATCHDOG_BEACON_BYTES) < 0) return;
}

typedef struct beacon {
    int rank;
    double time, since;
    char state[8];
    char op[WATCHDOG_BEACON_BYTES];
} beacon;

static bool beacon_parse(const char *line, int rank, beacon *b)
{
    char text[WATCHDOG_BEACON_BYTES + 1];
    memcpy(text, line, WATCHDOG_BEACON_BYTES);
    text[WATCHDOG_BEACON_BYTES] = '\0';
    long pid;
    unsigned long long seq;
    int at = -1;
    if (sscanf(text, "rank=%d pid=%ld time=%lf seq=%llu state=%7s since=%lf op=%n", &b->rank, &pid, &b->time, &seq,
               b->state, &b->since, &at) < 6 || at < 0 || b->rank != rank)
        return false;
    snprintf(b->op, sizeof b->op, "%s", text + at);
    size_t n = strlen(b->op);
    while (n > 0 && (b->op[n - 1] == ' ' || b->op[n - 1] == '\n')) b->op[--n] = '\0';
    return true;
}

/* Appends "a-b" ranges of the ranks marked in mark to out. */
static void rank_ranges(char *out, size_t len, const char *mark, int n)
{
    size_t used = strlen(out);
    bool first = true;
    for (int r = 0; r < n && used + 24 < len; r++) {
        if (!mark[r]) continue;
        int e = r;
        while (e + 1 < n && mark[e + 1]) e++;
        used += (size_t)snprintf(out + used, len - used, e > r ? "%s%d-%d" : "%s%d", first ? "" : ",", r, e);
        first = false;
        r = e;
    }
}

/* The beacons' verdict on the other ranks marked in `ranks` (NULL: all), appended to
 * out; returns how many ranks made no progress (-1: no beacon file), *failed how many
 * of them reported an error (NULL: not wanted). */
static int describe(watchdog *wd, const char *ranks, char *out, size_t len, int *failed)
{
    if (failed) *failed = 0;
    if (wd->fd < 0) return -1;
    size_t bytes = (size_t)wd->size * WATCHDOG_BEACON_BYTES, used = strlen(out);
    char *all = malloc(bytes), *waiting = calloc((size_t)wd->size, 1);
    if (!all || !waiting) {
        free(all);
        free(waiting);
        return -1;
    }
    ssize_t got = pread(wd->fd, all, bytes, 0);
    double now = clock_s(CLOCK_REALTIME);
    int named = 0;
    waiting[wd->rank] = 1;
    for (int r = 0; r < wd->size; r++) {
        if (r == wd->rank || (ranks && !ranks[r])) continue;
        beacon b;
        char why[256];
        bool have = got >= (ssize_t)((size_t)(r + 1) * WATCHDOG_BEACON_BYTES) &&
                    beacon_parse(all + (size_t)r * WATCHDOG_BEACON_BYTES, r, &b);
        bool in = have && !strcmp(b.state, "in");
        if (have && !strcmp(b.state, "done")) {  /* finished: its line ages, it is not late */
            waiting[r] = 1;
            continue;
        }
        if (!have)
            snprintf(why, sizeof why, "no beacon: never started, or the file is not shared with its node");
        else if (!strcmp(b.state, "failed")) {
            if (failed) (*failed)++;
            if (now - b.time > wd->stale_s)
                snprintf(why, sizeof why, "failed: %s; waiting for a rank that failed, which then showed no sign "
                         "of life for %.1f s", b.op, now - b.time);
            else
                snprintf(why, sizeof why, "failed: %s; waiting for a rank that failed", b.op);
        } else if (now - b.time > wd->stale_s)
            snprintf(why, sizeof why, "no sign of life for %.1f s: stopped, hung or dead; last %s %s", now - b.time,
                     in ? "inside" : "after", b.op);
        else if (!in)
            snprintf(why, sizeof why, "running outside any guarded call for %.1f s, after %s: still computing, or "
                     "blocked where nothing guards it", now - b.since, b.op);
        else {
            waiting[r] = 1;
            continue;
        }
        if (used + 64 < len)
            used += (size_t)snprintf(out + used, len - used, "%srank %d (%s)", named ? ", " : "no progress from ",
                                     r, why);
        named++;
    }
    if (used + 32 < len) {
        snprintf(out + used, len - used, "%swaiting in a guarded call: ", named ? "; " : "");
        rank_ranges(out, len, waiting, wd->size);
    }
    free(all);
    free(waiting);
    return named;
}

static void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

/* describe, again each tick while it names nobody, for up to stale_s: a rank stopped
 * just before the deadline still has a fresh line until then. */
static int describe_settled(watchdog *wd, const char *ranks, char *out, size_t len, int *failed)
{
    size_t at = strlen(out);
    int named = describe(wd, ranks, out, len, failed);
    for (double t0 = clock_s(CLOCK_MONOTONIC); named == 0 && clock_s(CLOCK_MONOTONIC) - t0 < wd->stale_s;) {
        sleep_s(wd->tick_s);
        beacon_write(wd);  /* this rank is alive while it looks (fire() runs on the watch thread) */
        out[at] = '\0';
        named = describe(wd, ranks, out, len, failed);
    }
    return named;
}

void watchdog_describe_ranks(watchdog *wd, const char *ranks, char *out, size_t len)
{
    if (wd && len > 0) describe_settled(wd, ranks, out, len, NULL);
}

void watchdog_failed(watchdog *wd, const char *what)
{
    if (!wd) return;
    pthread_mutex_lock(&wd->lock);
    snprintf(wd->failed, sizeof wd->failed, "%s", what ? what : "");
    for (char *c = wd->failed; *c; c++)
        if (*c == '\n') *c = ' ';  /* one line */
    pthread_mutex_unlock(&wd->lock);
    beacon_write(wd);  /* at once: the others may be about to look */
}

/* The deadline passed: one message, then the whole job ends — unless the call returns
 * while the beacons are read (late, but it made progress: the job goes on). */
static void fire(watchdog *wd)
{
    pthread_mutex_lock(&wd->lock);
    char what[sizeof wd->what];
    memcpy(what, wd->what, sizeof what);
    double since = wd->since_mono, timeout = wd->timeout_s;
    unsigned long long seq = wd->seq;
    pthread_mutex_unlock(&wd->lock);
    char who[1024] = "";
    int failed = 0, named = describe_settled(wd, NULL, who, sizeof who, &failed);
    pthread_mutex_lock(&wd->lock);
    bool returned = wd->depth == 0 || wd->seq != seq;
    pthread_mutex_unlock(&wd->lock);
    if (returned) return;
    log_error("watchdog: %s made no progress for %.1f s (deadline %.0f s from comm.timeout): %s; ending the job "
              "(exit code %d)", what, clock_s(CLOCK_MONOTONIC) - since, timeout,
              named >= 0 ? who : "no beacon file, so the ranks that made no progress cannot be named",
              status_exit_code(STATUS_TIMEOUT));
    if (failed)
        log_error("HINT: a rank failed (its error is above, or in its node's log) and could not tell the others; a "
                  "longer comm.timeout would not help");
    else
        log_error("HINT: look at the named ranks' last messages and their nodes; raise comm.timeout if the call is "
                  "legitimately that slow");
    fflush(stdout);
    fflush(stderr);
    signal(SIGALRM, SIG_DFL);
    alarm(5);  /* should the abort itself block */
    MPI_Abort(MPI_COMM_WORLD, status_exit_code(STATUS_TIMEOUT));
    _exit(status_exit_code(STATUS_TIMEOUT));
}

static void *watch(void *arg)
{
    watchdog *wd = arg;
    double last = clock_s(CLOCK_MONOTONIC);
    pthread_mutex_lock(&wd->lock);
    while (!wd->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = ts.tv_nsec + (long)(wd->tick_s * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&wd->wake, &wd->lock, &ts);
        if (wd->stop) break;
        /* A tick far later than due: this process itself was stopped (SIGSTOP, a frozen
         * VM). The time it did not run is not time it waited for others: a continued rank
         * must not blame the peers it kept waiting. */
        double now = clock_s(CLOCK_MONOTONIC);
        if (now - last > wd->tick_s + 1 && wd->deadline_mono > 0) wd->deadline_mono += now - last - wd->tick_s;
        last = now;
        bool late = wd->depth > 0 && wd->deadline_mono > 0 && now > wd->deadline_mono;
        pthread_mutex_unlock(&wd->lock);
        beacon_write(wd);
        if (late) fire(wd);
        pthread_mutex_lock(&wd->lock);
    }
    pthread_mutex_unlock(&wd->lock);
    return NULL;
}

status watchdog_start(watchdog **out, int rank, int size, double timeout_s)
{
    *out = NULL;
    if (timeout_s <= 0) return STATUS_OK;
    watchdog *wd = calloc(1, sizeof *wd);
    if (!wd) return STATUS_NOMEM;
    wd->rank = rank;
    wd->size = size;
    wd->fd = -1;
    wd->job_timeout_s = timeout_s;
    wd->tick_s = timeout_s / 5 < 0.1 ? 0.1 : timeout_s / 5 > 1 ? 1 : timeout_s / 5;
    wd->stale_s = 3 * wd->tick_s + 1;  /* three missed rewrites, and a second of clock skew between nodes */
    wd->since_wall = clock_s(CLOCK_REALTIME);
    wd->since_mono = clock_s(CLOCK_MONOTONIC);
    snprintf(wd->what, sizeof wd->what, "start-up");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&wd->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&wd->lock, NULL);
    /* Signals stay with the main thread: its handlers' requests are read there. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&wd->thread, NULL, watch, wd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        log_error("cannot start the watchdog thread: %s", strerror(rc));
        pthread_cond_destroy(&wd->wake);
        pthread_mutex_destroy(&wd->lock);
        free(wd);
        return STATUS_NOMEM;
    }
    *out = wd;
    return STATUS_OK;
}

status watchdog_beacons(watchdog *wd, const char *path)
{
    if (!wd) return STATUS_OK;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        log_error("cannot open the watchdog's beacon file %s: %s; a stuck job still ends, without naming ranks",
                  path, log_errno_str());
        return STATUS_IO;
    }
    pthread_mutex_lock(&wd->lock);
    int old = wd->fd;
    wd->fd = fd;
    pthread_mutex_unlock(&wd->lock);
    if (old >= 0) close(old);
    beacon_write(wd);
    return STATUS_OK;
}

void watchdog_enter(watchdog *wd, const char *what, double timeout_s)
{
    if (!wd) return;
    double now = clock_s(CLOCK_MONOTONIC), deadline = timeout_s > 0 ? now + timeout_s : 0;
    pthread_mutex_lock(&wd->lock);
    if (wd->depth++ == 0) {
        snprintf(wd->what, sizeof wd->what, "%s", what);
        wd->since_wall = clock_s(CLOCK_REALTIME);
        wd->since_mono = now;
        wd->deadline_mono = deadline;
        wd->timeout_s = timeout_s;
        wd->seq++;
    } else if (deadline > wd->deadline_mono && wd->deadline_mono > 0) {
        wd->deadline_mono = deadline;  /* the inner call may wait longer than the outer allowed */
        wd->timeout_s = deadline - wd->since_mono;
    }
    pthread_mutex_unlock(&wd->lock);
}

void watchdog_leave(watchdog *wd)
{
    if (!wd) return;
    pthread_mutex_lock(&wd->lock);
    CHECK(wd->depth > 0, "watchdog_leave without watchdog_enter");
    if (--wd->depth == 0) {
        wd->since_wall = clock_s(CLOCK_REALTIME);
        wd->since_mono = clock_s(CLOCK_MONOTONIC);
        wd->deadline_mono = 0;
    }
    pthread_mutex_unlock(&wd->lock);
}

/* Ranks whose line does not say "done" yet (into late, world size entries), how many,
 * and how many of those show no sign of life. */
static int not_done(watchdog *wd, char *late, int *stale)
{
    size_t bytes = (size_t)wd->size * WATCHDOG_BEACON_BYTES;
    char *all = malloc(bytes);
    ssize_t got = all ? pread(wd->fd, all, bytes, 0) : -1;
    double now = clock_s(CLOCK_REALTIME);
    int n = 0;
    *stale = 0;
    for (int r = 0; r < wd->size; r++) {
        beacon b;
        bool have = got >= (ssize_t)((size_t)(r + 1) * WATCHDOG_BEACON_BYTES) &&
                    beacon_parse(all + (size_t)r * WATCHDOG_BEACON_BYTES, r, &b);
        late[r] = r != wd->rank && !(have && !strcmp(b.state, "done"));
        n += late[r];
        *stale += late[r] && (!have || now - b.time > wd->stale_s);
    }
    free(all);
    return n;
}

void watchdog_finish(watchdog *wd)
{
    if (!wd || wd->fd < 0) return;
    pthread_mutex_lock(&wd->lock);
    wd->done = true;
    pthread_mutex_unlock(&wd->lock);
    beacon_write(wd);
    char *late = calloc((size_t)wd->size, 1);
    if (!late) return;
    double t0 = clock_s(CLOCK_MONOTONIC), step = wd->tick_s / 10;
    int n = 0, stale = 0;
    /* until every rank is done, or the deadline passes with some of them lifeless; a
     * rank alive but slow is its own watchdog's to end (given up on at twice the deadline) */
    for (;;) {
        n = not_done(wd, late, &stale);
        double waited = clock_s(CLOCK_MONOTONIC) - t0;
        if (n == 0 || (waited > wd->job_timeout_s && stale > 0) || waited > 2 * wd->job_timeout_s) break;
        sleep_s(step);
    }
    if (n > 0 && stale > 0) {
        char list[512] = "";
        rank_ranges(list, sizeof list, late, wd->size);
        log_error("watchdog: rank%s %s did not finish MPI_Finalize within %.0f s after this rank did, and show no "
                  "sign of life (stopped, hung or dead); exit code %d, so that the launcher ends %s",
                  strchr(list, ',') || strchr(list, '-') ? "s" : "", list, wd->job_timeout_s,
                  status_exit_code(STATUS_TIMEOUT), n > 1 ? "them" : "it");
        fflush(stdout);
        fflush(stderr);
        _exit(status_exit_code(STATUS_TIMEOUT));  /* MPI is finalized: no MPI_Abort */
    }
    free(late);
}

void watchdog_stop(watchdog *wd)
{
    if (!wd) return;
    pthread_mutex_lock(&wd->lock);
    wd->stop = true;
    pthread_cond_signal(&wd->wake);
    pthread_mutex_unlock(&wd->lock);
    pthread_join(wd->thread, NULL);
    beacon_write(wd);  /* the last state: out of every call */
    if (wd->fd >= 0) close(wd->fd);
    pthread_cond_destroy(&wd->wake);
    pthread_mutex_destroy(&wd->lock);
    free(wd);
}
