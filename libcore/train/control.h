/* control — the parser of the elastic control file (RUN_DIR/control; elastic.c reads
 * it, docs/training.md "Elastic control and heartbeat"), a pure function of the bytes so
 * that it is tested and fuzzed without a run (validation/fuzz/fuzz_control.c).
 *
 * Format: text, at most TRAIN_CONTROL_MAX_BYTES, lines of `key = value` without
 * sections; blank lines and lines starting with '#' or ';' are comments, and so is
 * the rest of a value from a '#' or ';'. Keys, each at most once:
 *   world        = integer in [1, TRAIN_CONTROL_MAX_WORLD]
 *   global_batch = integer in [1, TRAIN_CONTROL_MAX_BATCH]
 *   lr_rule      = linear | sqrt | none
 * Whether the values fit the run (a batch that splits into micro-batches) is the
 * caller's to check. */
#ifndef NEBULA_TRAIN_CONTROL_H
#define NEBULA_TRAIN_CONTROL_H

#include <stddef.h>

#define TRAIN_CONTROL_KEYS      "world, global_batch, lr_rule"
#define TRAIN_CONTROL_MAX_BYTES 8192
#define TRAIN_CONTROL_MAX_LINE  256         /* characters in a line, without its '\n' */
#define TRAIN_CONTROL_MAX_WORLD (1L << 20)
#define TRAIN_CONTROL_MAX_BATCH (1L << 30)

/* What the file asked for: 0 / "" = not given. */
typedef struct train_control_request {
    long world, global_batch;
    char rule[8];
} train_control_request;

/* Parses len bytes (need not be NUL-terminated). 0 with *req filled; or -1 with *req
 * zeroed, *line = the 1-based line at fault (0: the file as a whole) and `why` the
 * reason, naming the key and the valid keys or values. */
int train_control_parse(const char *text, size_t len, train_control_request *req, int *line, char *why,
                        size_t why_len);

#endif
