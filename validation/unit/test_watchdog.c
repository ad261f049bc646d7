/* test_watchdog — the watchdog's beacons (base/watchdog.h) in one process: its own line
 * is written and tracks watchdog_enter/leave, and the verdict on other ranks' lines
 * (written here by hand, as their threads would) names a stale rank as stopped, a
 * fresh one outside any guarded call as computing, and counts a fresh one inside as
 * waiting, and a line that says "failed" as a rank that failed (watchdog_failed), stale or
 * not; a mask limits the verdict to a communicator's members. Whether a stuck job
 * really ends is validation/cli/test_bounded.sh's part. */
#include "base/watchdog.h"
#include "../check.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank r's line as its watchdog thread would write it, `age` seconds old. */
static void fake_line(const char *path, int r, double age, const char *state, const char *op)
{
    char line[WATCHDOG_BEACON_BYTES];
    int n = snprintf(line, sizeof line, "rank=%d pid=1 time=%.3f seq=3 state=%s since=%.3f op=%s", r, now_s() - age,
                     state, now_s() - age - 1, op);
    if (n < 0 || n > (int)sizeof line - 1) n = (int)sizeof line - 1;  /* cut as the watchdog's own lines are */
    memset(line + n, ' ', sizeof line - 1 - (size_t)n);
    line[sizeof line - 1] = '\n';
    int fd = open(path, O_WRONLY);
    if (fd < 0 || pwrite(fd, line, sizeof line, (off_t)r * WATCHDOG_BEACON_BYTES) != (ssize_t)sizeof line) exit(1);
    close(fd);
}

static bool own_line_has(const char *path, const char *text)
{
    char line[WATCHDOG_BEACON_BYTES + 1] = "";
    int fd = open(path, O_RDONLY);
    ssize_t got = fd >= 0 ? pread(fd, line, WATCHDOG_BEACON_BYTES, 0) : -1;
    if (fd >= 0) close(fd);
    return got == WATCHDOG_BEACON_BYTES && strstr(line, text) != NULL;
}

int main(void)
{
    int fails = 0;
    watchdog *wd = (watchdog *)1;
    check_line(&fails, watchdog_start(&wd, 0, 4, 0) == STATUS_OK && wd == NULL,
               "comm.timeout = 0: no watchdog, and every call on NULL is a no-op");
    watchdog_enter(wd, "nothing", 1);
    watchdog_leave(wd);
    watchdog_stop(wd);

    char dir[256], path[300];
    const char *tmpd = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/test_watchdog.XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/beacons", dir);
    /* a deadline of 0.5 s: ticks of 0.1 s, lines stale after 1.3 s */
    check_line(&fails, watchdog_start(&wd, 0, 4, 0.5) == STATUS_OK && wd, "watchdog of rank 0 of 4 started");
    check_line(&fails, watchdog_beacons(wd, path) == STATUS_OK && own_line_has(path, "rank=0 ") &&
                           own_line_has(path, "state=out"), "its line is written at once, outside any call");
    watchdog_enter(wd, "test: a guarded call", 0);  /* no deadline: the test must not end here */
    struct timespec tick = { 0, 300 * 1000000L };
    nanosleep(&tick, NULL);
    check_line(&fails, own_line_has(path, "state=in") && own_line_has(path, "op=test: a guarded call"),
               "a tick later, the line shows the guarded call");

    fake_line(path, 1, 10, "in", "checkpoint save of step 4");
    fake_line(path, 2, 0, "out", "allreduce on world");
    fake_line(path, 3, 0, "in", "allreduce on world");
    char who[1024] = "";
    watchdog_describe_ranks(wd, NULL, who, sizeof who);
    printf("    %s\n", who);
    check_line(&fails,
               strstr(who, "rank 1 (no sign of life for 10.") && strstr(who, "inside checkpoint save of step 4"),
               "a line 10 s old: named, stopped, hung or dead, with its last call");
    check_line(&fails, strstr(who, "rank 2 (running outside any guarded call") != NULL,
               "a fresh line outside any call: named, still computing");
    check_line(&fails, !strstr(who, "rank 3") && strstr(who, "waiting in a guarded call: 0,3"),
               "a fresh line inside a call: waiting, like this rank");

    fake_line(path, 2, 0, "failed", "cannot write /params/x: Input/output error");
    who[0] = '\0';
    watchdog_describe_ranks(wd, NULL, who, sizeof who);
    printf("    %s\n", who);
    check_line(&fails, strstr(who, "rank 2 (failed: cannot write /params/x: Input/output error; waiting for a rank "
                                   "that failed)") && !strstr(who, "rank 2 (no sign"),
               "a fresh line that says failed: named as a rank that failed, with its error, not as stopped");
    fake_line(path, 2, 10, "failed", "cannot write");
    who[0] = '\0';
    watchdog_describe_ranks(wd, NULL, who, sizeof who);
    check_line(&fails, strstr(who, "rank 2 (failed: cannot write; waiting for a rank that failed, which then showed "
                                   "no sign of life for 10.") != NULL,
               "a failed rank's line 10 s old: still named as failed, and how long it has been silent");
    watchdog_failed(wd, "cannot sync state.h5: Input/output error");
    check_line(&fails, own_line_has(path, "state=failed") && own_line_has(path, "op=cannot sync state.h5"),
               "watchdog_failed: this rank's line says failed and what, at once");
    watchdog_failed(wd, NULL);
    check_line(&fails, own_line_has(path, "state=in"), "watchdog_failed(NULL): back to the guarded call it is in");
    fake_line(path, 2, 0, "out", "allreduce on world");

    char members[4] = { 1, 1, 0, 1 };
    who[0] = '\0';
    watchdog_describe_ranks(wd, members, who, sizeof who);
    check_line(&fails, strstr(who, "rank 1 (") && !strstr(who, "rank 2"),
               "limited to a communicator's members: rank 2 is not judged");

    /* lines of nodes whose clocks are 1 s ahead: still fresh after looking again */
    fake_line(path, 1, -1, "in", "x");
    fake_line(path, 2, -1, "in", "x");
    fake_line(path, 3, -1, "in", "x");
    double t0 = now_s();
    who[0] = '\0';
    watchdog_describe_ranks(wd, NULL, who, sizeof who);
    double waited = now_s() - t0;
    printf("    %s\n", who);
    check_line(&fails, !strstr(who, "no progress") && strstr(who, "waiting in a guarded call: 0-3") && waited >= 1,
               "every line fresh and inside a call: nobody named, after looking again for %.1f s", waited);
    watchdog_leave(wd);
    watchdog_stop(wd);
    check_line(&fails, own_line_has(path, "state=out"), "stopped: the last line is outside any call");
    unlink(path);
    rmdir(dir);
    return fails ? 1 : 0;
}
