/* check — everything a scenario or soak asks for is checked before anything runs: the
 * file is text, every value means something, the builds it needs exist. A run that
 * would discover a bad value after a 5-minute reference run (or 72 hours into a soak),
 * or quietly replace it by a default, is worse than one that refuses at once.
 *
 * Messages name where the value came from (FILE:LINE, --set or the default), the key,
 * the value and what would be right; exit code 2. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chaos.h"
#include "base/fault.h"
#include "base/log.h"

#define TEXT_MAX (1 << 20)  /* bytes: a scenario or soak file is a screen of INI */

const char *chaos_signame(int sig)
{
    static const struct { int sig; const char *name; } names[] = {
        { SIGTERM, "SIGTERM" }, { SIGINT, "SIGINT" }, { SIGHUP, "SIGHUP" }, { SIGKILL, "SIGKILL" },
        { SIGSTOP, "SIGSTOP" }, { SIGUSR1, "SIGUSR1" }, { SIGUSR2, "SIGUSR2" }, { SIGCONT, "SIGCONT" },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig) return names[i].name;
    return "another signal";
}

int chaos_preempt_signal(const char *w)
{
    return !strcmp(w, "USR1") ? SIGUSR1 : !strcmp(w, "USR2") ? SIGUSR2 : !strcmp(w, "TERM") ? SIGTERM : 0;
}

status chaos_check_text(const char *path)
{
    /* O_NONBLOCK: a FIFO must not block the open; it is refused below as not regular */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        log_error("%s: %s", path, log_errno_str());
        return STATUS_INPUT;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > TEXT_MAX) {
        log_error("%s: not a regular file of at most %d bytes (an INI text file is expected)", path, TEXT_MAX);
        close(fd);
        return STATUS_INPUT;
    }
    char *buf = malloc(TEXT_MAX);
    CHECK(buf, "out of memory");
    ssize_t n = read(fd, buf, TEXT_MAX);
    close(fd);
    status st = STATUS_OK;
    if (n < 0) {
        log_error("%s: %s", path, log_errno_str());
        st = STATUS_INPUT;
    }
    long line = 1;
    for (ssize_t i = 0; st == STATUS_OK && i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n') line++;
        else if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
            log_error("%s:%ld: byte 0x%02x at offset %zd: not a text file (scenario and soak files are INI "
                      "text; a NUL or control byte would silently end the line)", path, line, c, i);
            st = STATUS_INPUT;
        }
    }
    free(buf);
    return st;
}

status chaos_need_chaos_build(void)
{
    if (access(CHAOS_TRAIN_BIN, X_OK) == 0) return STATUS_OK;
    log_error("%s: %s: io-error and disk-full faults need the build with compiled-in fault points\n"
              "HINT: make chaos (part of make) builds it", CHAOS_TRAIN_BIN, log_errno_str());
    return STATUS_INPUT;
}

/* "FILE:LINE: key = value: " then the reason; always STATUS_INPUT. */
static status bad(const config *cfg, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static status bad(const config *cfg, const char *key, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const char *o = config_origin(cfg, key);
    log_error("%s%s%s = '%s': %s", !strcmp(o, "default") ? "" : o, !strcmp(o, "default") ? "" : ": ", key,
              config_str(cfg, key), why);
    return STATUS_INPUT;
}

/* The steps fault.at plans: K for random:K, the count of a list; -1 when malformed. */
static int planned_count(const char *at)
{
    if (!strncmp(at, "random:", 7)) {
        char *end;
        long k = strtol(at + 7, &end, 10);
        return end == at + 7 || *end || k < 1 || k > CHAOS_MAX_FAULTS ? -1 : (int)k;
    }
    int n = 0;
    for (const char *p = at; *p;) {
        char *end;
        strtol(p, &end, 10);
        if (end == p) return -1;
        n++;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return n > 0 ? n : -1;
}

static status check_ranks(const config *cfg)
{
    const char *r = config_str(cfg, "fault.ranks");
    long world = (long)config_int(cfg, "scenario.ranks");
    char *end;
    errno = 0;
    double v = strtod(r, &end);
    bool pct = *end == '%' && end[1] == '\0';
    if (end == r || errno || (!pct && *end) || !isfinite(v))
        return bad(cfg, "fault.ranks", "write a share of the world like 30%% or a count of ranks like 1");
    if (pct) {
        long k = lround(v / 100.0 * (double)world);
        if (v <= 0 || v > 100 || k < 1)
            return bad(cfg, "fault.ranks", "a share must be above 0%% and at most 100%%, and hit at least one of the "
                       "%ld ranks (here %ld)", world, k);
    } else if (v != floor(v) || v < 1 || v > (double)world) {
        return bad(cfg, "fault.ranks", "a count of ranks must be a whole number in 1..%ld (scenario.ranks)", world);
    }
    return STATUS_OK;
}

static status check_signals(const config *cfg, int planned)
{
    char list[CONFIG_STR_MAX + 1];
    snprintf(list, sizeof list, "%s", config_str(cfg, "fault.signals"));
    int n = 0;
    for (char *t = strtok(list, ", "); t; t = strtok(NULL, ", "), n++)
        if (!chaos_preempt_signal(t))
            return bad(cfg, "fault.signals", "'%s' is not a signal a preemption sends; valid: USR1, USR2, TERM "
                       "(comma-separated, one per fault step or one for all)", t);
    if (n == 0) return bad(cfg, "fault.signals", "name at least one signal: USR1, USR2 or TERM");
    if (!strcmp(config_str(cfg, "fault.kind"), "preempt") && planned > 0 && n != 1 && n != planned)
        return bad(cfg, "fault.signals", "%d signals for %d fault steps (fault.at): give one per step, or one for all",
                   n, planned);
    return STATUS_OK;
}

/* fault.io: POINT:ERRNO with a checkpoint point (the scenario strikes a save), checked
 * against the fault points' table (base/fault.h) before the reference run. */
static status check_io(const config *cfg)
{
    const char *io = config_str(cfg, "fault.io"), *colon = strchr(io, ':');
    char point[64] = "", points[1024];
    if (colon && colon - io < (ptrdiff_t)sizeof point) snprintf(point, sizeof point, "%.*s", (int)(colon - io), io);
    fault_point_names("ckpt", points, sizeof points);
    if (!colon || strncmp(point, "ckpt.", 5) != 0 || !fault_point_known(point))
        return bad(cfg, "fault.io", "write POINT:ERRNO with a checkpoint fault point, e.g. ckpt.fsync:EIO (the step is "
                   "added from fault.at); POINT one of %s", points);
    if (strcmp(colon + 1, "EIO") && strcmp(colon + 1, "ENOSPC"))
        return bad(cfg, "fault.io", "'%s' is not an errno a fault point injects; valid: EIO, ENOSPC", colon + 1);
    return STATUS_OK;
}

static const char *const soak_kinds[] = { "kill", "stop", "preempt", "ckpt-corrupt", "disk-full", "io-error",
                                          "packet-loss" };

static status check_soak(const config *cfg)
{
    const char *keys[] = { "soak.duration", "soak.fault_every", "soak.sample_every" };
    double v[3];
    for (int i = 0; i < 3; i++) {
        v[i] = chaos_duration(config_str(cfg, keys[i]));
        if (!(v[i] > 0))
            return bad(cfg, keys[i], "write a positive number with s, m, h or d (for example 72h, 2h, 60s)");
    }
    if (v[2] > v[0]) return bad(cfg, "soak.sample_every", "longer than soak.duration: no sample would be taken");
    char list[CONFIG_STR_MAX + 1];
    snprintf(list, sizeof list, "%s", config_str(cfg, "soak.faults"));
    int n = 0;
    for (char *t = strtok(list, ", "); t; t = strtok(NULL, ", "), n++) {
        bool known = false;
        for (size_t k = 0; k < sizeof soak_kinds / sizeof soak_kinds[0]; k++) known |= !strcmp(t, soak_kinds[k]);
        if (!known)
            return bad(cfg, "soak.faults", "'%s' is not a soak fault; valid: kill, stop, preempt, ckpt-corrupt, "
                       "disk-full, io-error, packet-loss (comma-separated)", t);
        if (!strcmp(t, "packet-loss") && strcmp(config_str(cfg, "scenario.launcher"), "netns"))
            return bad(cfg, "soak.faults", "packet-loss needs scenario.launcher = netns (network namespaces, root): "
                       "there is no other network this supervisor may degrade");
        if ((!strcmp(t, "io-error") || !strcmp(t, "disk-full")) && chaos_need_chaos_build() != STATUS_OK)
            return STATUS_INPUT;
    }
    if (n == 0) return bad(cfg, "soak.faults", "name at least one fault kind");
    return STATUS_OK;
}

status chaos_check_values(const config *cfg, bool soak)
{
    const char *kind = config_str(cfg, "fault.kind");
    const char *at = config_str(cfg, "fault.at");
    int planned = planned_count(at);
    if (!soak && planned < 0)
        return bad(cfg, "fault.at", "write steps like 12,31 or random:K with K in 1..%d", CHAOS_MAX_FAULTS);
    TRY(check_ranks(cfg));
    TRY(check_signals(cfg, planned));
    TRY(check_io(cfg));
    const char *tc = config_str(cfg, "scenario.train_config");
    if (access(tc, R_OK) != 0)
        return bad(cfg, "scenario.train_config", "%s (a nebula-train config, relative to the Nebula tree)",
                   log_errno_str());
    if (soak) return check_soak(cfg);
    if (!strcmp(kind, "io-error")) return chaos_need_chaos_build();
    return STATUS_OK;
}

double chaos_duration(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return -1;
    if (!*end || !strcmp(end, "s")) return v;
    if (!strcmp(end, "m")) return v * 60;
    if (!strcmp(end, "h")) return v * 3600;
    if (!strcmp(end, "d")) return v * 86400;
    return -1;
}
