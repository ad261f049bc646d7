/* cli — see cli.h. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#include "version.h" /* generated in build/: NEBULA_VERSION and NEBULA_GIT_REVISION, rewritten only when it changes */

const char *cli_version(void)
{
    return "0.1.0 (" NEBULA_VERSION ")";
}

const char *cli_git_revision(void)
{
    return NEBULA_GIT_REVISION;
}

void cli_print_version(const char *prog)
{
    const char *base = strrchr(prog, '/');
    printf("%s %s\n", base ? base + 1 : prog, cli_version());
}

static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

static const char *builtin_flags[] = { "config", "set", "help", "version", "print-config" };

static void cli_unknown(const char *flag, const cli_option *opts, int nopts)
{
    const char *best = NULL;
    int best_d = 4;
    for (int i = 0; i < nopts; i++) {
        int d = edit_distance(flag, opts[i].flag);
        if (d < best_d) { best_d = d; best = opts[i].flag; }
    }
    for (size_t i = 0; i < sizeof builtin_flags / sizeof builtin_flags[0]; i++) {
        int d = edit_distance(flag, builtin_flags[i]);
        if (d < best_d) { best_d = d; best = builtin_flags[i]; }
    }
    if (best) log_error0("unknown option '--%s'; did you mean '--%s'? (--help lists every option)", flag, best);
    else log_error0("unknown option '--%s' (--help lists every option)", flag);
}

static void cli_help(const config *cfg, const cli_option *opts, int nopts, const char *usage)
{
    printf("%s\noptions:\n", usage);
    printf("  --config FILE              INI config file (repeatable; later files win)\n");
    printf("  --set SECTION.KEY=VALUE    set any config key (repeatable; wins over files)\n");
    for (int i = 0; i < nopts; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s", opts[i].flag, opts[i].value ? "" : " X");
        if (opts[i].value) printf("  %-26s same as --set %s=%s\n", left, opts[i].key, opts[i].value);
        else printf("  %-26s same as --set %s=X\n", left, opts[i].key);
    }
    printf("  --print-config             print the resolved config (INI, as checkpoints store it) and exit\n"
           "  --help                     this text\n  --version                  print the version\n\n"
           "config keys (type, default, valid values):\n");
    config_help(cfg->schema, cfg->nkeys, stdout);
}

/* "--flag=value" or "--flag value": splits into name and value (may be NULL). */
static status cli_split(char *arg, int argc, char **argv, int *i, bool wants_value, const char **name,
                        const char **value)
{
    char *eq = strchr(arg, '=');
    *name = arg + 2;
    *value = NULL;
    if (eq) { *eq = '\0'; *value = eq + 1; }
    if (wants_value && !*value) {
        if (*i + 1 >= argc) {
            log_error0("option '--%s' needs a value", *name);
            return STATUS_USAGE;
        }
        *value = argv[++*i];
    }
    return STATUS_OK;
}

status cli_parse(config *cfg, const cli_option *opts, int nopts, int argc, char **argv, int first,
                 const char *usage, cli_action *action)
{
    *action = CLI_ACTION_RUN;
    /* Pass 1: --help, --version and config files, so flags can override files wherever they are. */
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) { cli_help(cfg, opts, nopts, usage); *action = CLI_ACTION_EXIT; return STATUS_OK; }
        if (!strcmp(argv[i], "--version")) { cli_print_version(argv[0]); *action = CLI_ACTION_EXIT; return STATUS_OK; }
        if (!strncmp(argv[i], "--config", 8) && (argv[i][8] == '\0' || argv[i][8] == '=')) {
            const char *path = argv[i][8] == '=' ? argv[i] + 9 : (i + 1 < argc ? argv[++i] : NULL);
            if (!path) { log_error0("option '--config' needs a file"); return STATUS_USAGE; }
            TRY(config_load_file(cfg, path));
        }
    }
    bool print_config = false;
    for (int i = first; i < argc; i++) {
        char arg[1200];
        if (strncmp(argv[i], "--", 2) != 0 || argv[i][2] == '\0') {
            log_error0("unexpected argument '%s' (options are long: --name value; --help lists them)", argv[i]);
            return STATUS_USAGE;
        }
        snprintf(arg, sizeof arg, "%s", argv[i]);
        char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        const char *name, *value;
        if (!strncmp(arg + 2, "config", nlen) && nlen == 6) { if (!eq) i++; continue; }
        if (!strcmp(arg + 2, "print-config")) { print_config = true; continue; }
        if (!strncmp(arg + 2, "set", nlen) && nlen == 3) {
            TRY(cli_split(arg, argc, argv, &i, true, &name, &value));
            TRY(config_set(cfg, value));
            continue;
        }
        int k = 0;
        while (k < nopts && !(strlen(opts[k].flag) == nlen && !strncmp(arg + 2, opts[k].flag, nlen))) k++;
        if (k == nopts) {
            if (eq) *eq = '\0';
            cli_unknown(arg + 2, opts, nopts);
            return STATUS_USAGE;
        }
        TRY(cli_split(arg, argc, argv, &i, opts[k].value == NULL, &name, &value));
        if (opts[k].value && value) {
            log_error0("option '--%s' takes no value", name);
            return STATUS_USAGE;
        }
        char assignment[1200];
        snprintf(assignment, sizeof assignment, "%s=%s", opts[k].key, opts[k].value ? opts[k].value : value);
        TRY(config_set(cfg, assignment));
    }
    if (print_config) {  /* a dry run: what a run would resolve, nothing started */
        size_t n = config_dump(cfg, NULL, 0) + 1;
        char *text = malloc(n);
        CHECK(text, "out of memory for the config dump");
        config_dump(cfg, text, n);
        fputs(text, stdout);
        free(text);
        *action = CLI_ACTION_EXIT;
    }
    return STATUS_OK;
}
