/* log — rank-aware logging, the status codes of expected trouble, and die().
 *
 * Two error tiers (docs/design.md#errors): bugs and impossible states go through die(),
 * which prints `host:rank file:line: what failed: why` plus a hint and calls
 * MPI_Abort; expected trouble (bad input, timeouts, I/O) is a `status` passed
 * up to the app, which prints one message and exits with status_exit_code().
 * The place that detects the trouble logs the clear message; callers above it
 * only pass the status on (TRY logs each level at debug verbosity). */
#ifndef NEBULA_LOG_H
#define NEBULA_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>

typedef enum status {
    STATUS_OK = 0,      /* success */
    STATUS_USAGE,       /* bad flag or command line (exit 2) */
    STATUS_INPUT,       /* bad config key/value, missing or malformed input file (exit 2) */
    STATUS_IO,          /* I/O failure on a file that was valid (exit 1) */
    STATUS_TIMEOUT,     /* a collective or peer missed its deadline (exit 1) */
    STATUS_PEER,        /* a peer failed or the launch is inconsistent (exit 1) */
    STATUS_CORRUPT,     /* data failed a checksum or format check (exit 1) */
    STATUS_NOMEM,       /* an allocation at init failed (exit 1) */
    STATUS_STOPPED,     /* stopped before the end on request (a signal), state saved: relaunch (exit 3) */
    STATUS_RELAUNCH,    /* stopped for a relaunch at another world size (elastic), state saved (exit 4) */
    STATUS_DEVICE,      /* a GPU kernel, copy or library call failed (exit 1) */
    STATUS_DIVERGED,    /* training diverged: too many steps in a row with a non-finite loss or
                           gradient norm, or an update that made a parameter non-finite (exit 1) */
    STATUS_HALTED,      /* stopped by a monitor rule's `stop` action, state saved; a person decides what
                           next, so job scripts do not requeue (exit 5) */
    STATUS_REGRID,      /* stopped to form another process grid at the same world size, state saved:
                           nebula-train sets the run up again in the same processes (exit 1 if it escapes) */
} status;

typedef enum log_level {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN,
    LOG_LEVEL_INFO,
    LOG_LEVEL_DEBUG,
} log_level;

/* Called by runtime_init once the rank is known; before that, messages carry no rank. */
void log_set_identity(const char *prog, const char *host, int rank, int size);
/* NEBULA_LOG=error|warn|info|debug sets the verbosity (default info). */
void log_set_level(log_level level);
log_level log_get_level(void);

/* Prints `prog[host:rank] level: message` to stderr (errors, warnings) or stdout. */
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, but only on rank 0 (or before MPI is up): for messages every rank would repeat. */
void log_msg0(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_error0(...) log_msg0(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn0(...)  log_msg0(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info0(...)  log_msg0(LOG_LEVEL_INFO, __VA_ARGS__)

/* While buf is set (NULL: off), the first error message logged by this thread is also
 * copied into buf[len] (without the prefix): the reason a check that logs gives, for a
 * caller that must pass it on (a refused hot-reload request names it in its reply file). */
void log_capture(char *buf, size_t len);
/* The same, and while buf is set this thread's error messages are held back, not
 * printed: for a collective caller that prints one rank's reason once for all ranks
 * (the data files at start-up). */
void log_capture_held(char *buf, size_t len);
const char *status_str(status st);
/* 0 ok, 2 usage/input errors, 3 stopped on request with the state saved (relaunch to
 * resume), 4 relaunch requested at another world size (RUN_DIR/relaunch says which),
 * 1 everything else (docs/design.md#cli). */
int status_exit_code(status st);

/* The bug tier: never returns. `what` is the failing statement, `why` the reason. */
_Noreturn void die_at(const char *file, int line, const char *what, const char *why,
                      const char *hint);
#define die(what, why, hint) die_at(__FILE__, __LINE__, (what), (why), (hint))

/* Check-macro family: every failure funnels into die_at(). */
#define CHECK(cond, hint) \
    do { if (!(cond)) die_at(__FILE__, __LINE__, #cond, "condition is false", (hint)); } while (0)
#define SYS_CHECK(call, hint) \
    do { if ((call) != 0) die_at(__FILE__, __LINE__, #call, log_errno_str(), (hint)); } while (0)
#define MPI_CHECK(call) \
    do { int mpi_rc_ = (call); \
         if (mpi_rc_ != MPI_SUCCESS) die_at(__FILE__, __LINE__, #call, log_mpi_error_str(mpi_rc_), \
             "an MPI call failed; rerun with OMPI_MCA_mpi_show_mca_params=all for details"); } while (0)

/* HDF5 calls return a negative herr_t or hid_t on failure; for calls that cannot fail
 * on valid arguments (dataspaces, property lists, types). File I/O returns a status. */
#define H5_CHECK(call) \
    do { if ((call) < 0) die_at(__FILE__, __LINE__, #call, "HDF5 call failed", \
             "rerun with NEBULA_LOG=debug to see the HDF5 error stack"); } while (0)

/* Pass an error status up, logging the level at debug verbosity. */
#define TRY(expr) \
    do { status try_st_ = (expr); \
         if (try_st_ != STATUS_OK) { \
             log_debug("%s:%d: %s -> %s", __FILE__, __LINE__, #expr, status_str(try_st_)); \
             return try_st_; } } while (0)

const char *log_errno_str(void);
const char *log_mpi_error_str(int rc);

#endif
