/* log — see log.h. The identity below is the one piece of file-scope state in
 * libcore: die() and the check macros must be callable from any depth without
 * a context argument, so who-am-I is recorded once by runtime_init. */
#include "log.h"

#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct {
    char prog[64];   /* executable name, e.g. nebula-bench */
    char host[64];   /* short host name */
    int rank;        /* world rank, -1 before MPI is up */
    int size;        /* world size */
    log_level level; /* verbosity */
    int level_set;   /* NEBULA_LOG already read */
} log_id = { "nebula", "", -1, 0, LOG_LEVEL_INFO, 0 };

/* log_capture: the first error of the calling thread while a buffer is set */
static _Thread_local char *log_capture_buf;
static _Thread_local size_t log_capture_len;
static _Thread_local bool log_capture_hold;  /* errors held back while capturing */

void log_capture(char *buf, size_t len)
{
    log_capture_buf = buf && len ? buf : NULL;
    log_capture_len = len;
    log_capture_hold = false;
    if (log_capture_buf) buf[0] = '\0';
}

void log_capture_held(char *buf, size_t len)
{
    log_capture(buf, len);
    log_capture_hold = log_capture_buf != NULL;
}

void log_set_identity(const char *prog, const char *host, int rank, int size)
{
    const char *base = strrchr(prog, '/');
    snprintf(log_id.prog, sizeof log_id.prog, "%s", base ? base + 1 : prog);
    snprintf(log_id.host, sizeof log_id.host, "%s", host);
    log_id.rank = rank;
    log_id.size = size;
}

void log_set_level(log_level level)
{
    log_id.level = level;
    log_id.level_set = 1;
}

log_level log_get_level(void)
{
    if (!log_id.level_set) {
        const char *env = getenv("NEBULA_LOG");
        log_id.level_set = 1;
        if (env) {
            if (!strcmp(env, "error")) log_id.level = LOG_LEVEL_ERROR;
            else if (!strcmp(env, "warn")) log_id.level = LOG_LEVEL_WARN;
            else if (!strcmp(env, "debug")) log_id.level = LOG_LEVEL_DEBUG;
        }
    }
    return log_id.level;
}

static const char *level_name[] = { "error", "warning", "info", "debug" };

static void log_vmsg(log_level level, const char *fmt, va_list ap)
{
    if (level == LOG_LEVEL_ERROR && log_capture_buf && !log_capture_buf[0]) {
        va_list copy;
        va_copy(copy, ap);
        vsnprintf(log_capture_buf, log_capture_len, fmt, copy);
        va_end(copy);
    }
    if (level == LOG_LEVEL_ERROR && log_capture_hold) return;
    if (level > log_get_level()) return;
    FILE *f = level <= LOG_LEVEL_WARN ? stderr : stdout;
    char line[4096];
    int n;
    if (log_id.rank < 0 || log_id.size <= 1)
        n = snprintf(line, sizeof line, "%s: %s: ", log_id.prog, level_name[level]);
    else
        n = snprintf(line, sizeof line, "%s[%s:%d] %s: ", log_id.prog, log_id.host, log_id.rank,
                     level_name[level]);
    if (n < 0 || n >= (int)sizeof line) n = 0;
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* One fputs per message so lines from different ranks do not interleave. */
    size_t len = strlen(line);
    if (len + 1 < sizeof line) { line[len] = '\n'; line[len + 1] = '\0'; }
    fputs(line, f);
    fflush(f);
}

void log_msg(log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}

void log_msg0(log_level level, const char *fmt, ...)
{
    if (log_id.rank > 0) return;
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}

const char *status_str(status st)
{
    switch (st) {
    case STATUS_OK: return "ok";
    case STATUS_USAGE: return "usage error";
    case STATUS_INPUT: return "input error";
    case STATUS_IO: return "I/O error";
    case STATUS_TIMEOUT: return "timeout";
    case STATUS_PEER: return "peer failure";
    case STATUS_CORRUPT: return "corrupt data";
    case STATUS_NOMEM: return "out of memory";
    case STATUS_STOPPED: return "stopped on request";
    case STATUS_RELAUNCH: return "relaunch requested";
    case STATUS_DEVICE: return "device failure";
    case STATUS_DIVERGED: return "training diverged";
    case STATUS_HALTED: return "stopped by a monitor rule";
    case STATUS_REGRID: return "a new process grid requested";
    }
    return "unknown status";
}

int status_exit_code(status st)
{
    if (st == STATUS_OK) return 0;
    if (st == STATUS_USAGE || st == STATUS_INPUT) return 2;
    if (st == STATUS_STOPPED) return 3;
    if (st == STATUS_RELAUNCH) return 4;
    if (st == STATUS_HALTED) return 5;
    return 1;
}

const char *log_errno_str(void)
{
    return strerror(errno);
}

const char *log_mpi_error_str(int rc)
{
    static _Thread_local char buf[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) snprintf(buf, sizeof buf, "MPI error %d", rc);
    return buf;
}

_Noreturn void die_at(const char *file, int line, const char *what, const char *why, const char *hint)
{
    char host[64] = "?";
    if (log_id.host[0]) snprintf(host, sizeof host, "%s", log_id.host);
    else gethostname(host, sizeof host - 1);
    fprintf(stderr, "%s[%s:%d] %s:%d: %s: %s\n", log_id.prog, host, log_id.rank, file, line, what, why);
    if (hint && hint[0]) fprintf(stderr, "HINT: %s\n", hint);
    fflush(stderr);
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
    abort();
}
