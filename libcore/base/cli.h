/* cli — the command line every executable shares: long options only, each one a
 * shorthand for a config key, plus --config FILE, repeatable --set section.key=value,
 * --help and --version (docs/design.md#cli).
 *
 * Precedence: schema defaults < --config files (in order) < flags and --set (in
 * order), so the command line always wins over files wherever it appears. */
#ifndef NEBULA_CLI_H
#define NEBULA_CLI_H

#include "config.h"

typedef struct cli_option {
    const char *flag;   /* without the leading "--", e.g. "min-bytes" */
    const char *key;    /* config key it sets, e.g. "bench.min_bytes" */
    const char *value;  /* NULL: the flag takes an argument; else the value it sets (switch) */
} cli_option;

typedef enum cli_action {
    CLI_ACTION_RUN = 0, /* parsed; run the program */
    CLI_ACTION_EXIT,    /* --help, --version or --print-config was printed; exit 0 */
} cli_action;

/* Parses argv[first..argc) into cfg. Unknown flags, missing arguments and bad
 * values print one message naming the flag (with a did-you-mean) and give
 * STATUS_USAGE or STATUS_INPUT. `usage` is printed first by --help. */
status cli_parse(config *cfg, const cli_option *opts, int nopts, int argc, char **argv, int first,
                 const char *usage, cli_action *action);

/* "nebula-bench 0.1.0 (git-1a2b3c4)" */
void cli_print_version(const char *prog);
/* "0.1.0 (git-1a2b3c4)" */
const char *cli_version(void);
/* The commit the build was made from (git rev-parse HEAD, 40 hex digits), or "unknown"
 * when the tree was not a git checkout. */
const char *cli_git_revision(void);

#endif
