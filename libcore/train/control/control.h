/* control — the parsers of the two files a person or a supervisor hands a live run: the
 * elastic control file (RUN_DIR/control; elastic.c reads it, docs/training.md "Elastic
 * control and heartbeat") and a hot-reload request (RUN_DIR/reload/vNNNNNN.req; reload.c,
 * docs/monitor.md "Hot reload"), pure functions of the bytes so that they are tested and
 * fuzzed without a run (validation/fuzz/fuzz_control.c).
 *
 * Format: text, at most TRAIN_CONTROL_MAX_BYTES, lines of `key = value` without
 * sections; blank lines and lines starting with '#' or ';' are comments, and so is
 * the rest of a value from a '#' or ';'. Keys, each at most once:
 *   world        = integer in [1, TRAIN_CONTROL_MAX_WORLD]
 *   global_batch = integer in [1, TRAIN_CONTROL_MAX_BATCH]
 *   lr_rule      = linear | sqrt | none
 *   tp, pp       = integer in [1, TRAIN_CONTROL_MAX_GRID]: a new process grid (parallel.tp,
 *                  parallel.pp; dp is what the world leaves), formed in place
 * Whether the values fit the run (a batch that splits into micro-batches, a grid the
 * model and the world take) is the caller's to check. */
#ifndef NEBULA_TRAIN_CONTROL_H
#define NEBULA_TRAIN_CONTROL_H

#include <stddef.h>

#define TRAIN_CONTROL_KEYS      "world, global_batch, lr_rule, tp, pp"
#define TRAIN_CONTROL_MAX_BYTES 8192
#define TRAIN_CONTROL_MAX_LINE  256         /* characters in a line, without its '\n' */
#define TRAIN_CONTROL_MAX_WORLD (1L << 20)
#define TRAIN_CONTROL_MAX_BATCH (1L << 30)
#define TRAIN_CONTROL_MAX_GRID  4096        /* parallel.tp and parallel.pp's own maximum */

/* What the file asked for: 0 / "" = not given. */
typedef struct train_control_request {
    long world, global_batch, tp, pp;
    char rule[8];
} train_control_request;

/* Parses len bytes (need not be NUL-terminated). 0 with *req filled; or -1 with *req
 * zeroed, *line = the 1-based line at fault (0: the file as a whole) and `why` the
 * reason, naming the key and the valid keys or values. */
int train_control_parse(const char *text, size_t len, train_control_request *req, int *line, char *why,
                        size_t why_len);

/* A hot-reload request, same lines and comments as the control file. Keys:
 *   version      = integer in [1, TRAIN_RELOAD_MAX_VERSION]   (required)
 *   undo         = true        (restore the values the newest change not yet undone replaced)
 *   at_step      = integer     (apply at the end of this step, not at the next one)
 *   applied_step = integer     (written by the trainer into vN.applied: the step it took effect after)
 *   SECTION.KEY  = value       (a config assignment; at most TRAIN_RELOAD_MAX_SETS, each key once)
 * Either undo or at least one assignment, not both. Which keys may change live and
 * whether the values are valid is the caller's to check (the config schema, reload.c). */
#define TRAIN_RELOAD_MAX_SETS    32
#define TRAIN_RELOAD_MAX_KEY     99           /* characters of SECTION.KEY */
#define TRAIN_RELOAD_MAX_VALUE   255          /* characters of a value */
#define TRAIN_RELOAD_MAX_VERSION 999999       /* the file names have six digits */

typedef struct train_reload_request {
    long version;              /* 1 .. TRAIN_RELOAD_MAX_VERSION */
    int undo;                  /* 1: undo the newest change */
    long at_step;              /* -1: not given */
    long applied_step;         /* -1: not given */
    int nsets;
    char key[TRAIN_RELOAD_MAX_SETS][TRAIN_RELOAD_MAX_KEY + 1];
    char value[TRAIN_RELOAD_MAX_SETS][TRAIN_RELOAD_MAX_VALUE + 1];
} train_reload_request;

/* As train_control_parse, for a reload request (*req zeroed on refusal, at_step and
 * applied_step -1). */
int train_reload_parse(const char *text, size_t len, train_reload_request *req, int *line, char *why,
                       size_t why_len);

#endif
