/* bench_provenance — `nebula-bench provenance`: the provenance object (base/provenance.h)
 * for the scripts that write tables (tools/bench-*.sh, jobscripts/bench.sbatch), so that
 * their CSV and Markdown carry the same fields, gathered by the same code, as
 * nebula-bench's own outputs. Launched on a script's ranks (mpirun, srun, the namespace
 * cluster) it names every rank's host; alone, this host.
 *
 *   nebula-bench provenance --command "$(printf '%q ' "$0" "$@")" --param models=gpt2 --format csv
 *
 * --command replaces the command line (a script's own, not this one's); each --param
 * KEY=VALUE is one entry of "config" (the script's resolved settings; none: {}). */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char provenance_usage[] =
    "usage: nebula-bench provenance [--command TEXT] [--param KEY=VALUE]... [--format json|csv|markdown]\n"
    "  prints the provenance of a run on one line: json (the object), csv (# provenance: {...}) or\n"
    "  markdown (<!-- provenance: {...} -->); launched on N ranks it names every rank's host";

/* "--flag value" or "--flag=value" at argv[*i]: the value, or NULL (and a message) when none. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag)
{
    size_t n = strlen(flag);
    const char *a = argv[*i];
    if (a[n] == '=') return a + n + 1;
    if (*i + 1 < argc) return argv[++*i];
    log_error0("provenance: option '%s' needs a value", flag);
    return NULL;
}

static bool is_flag(const char *arg, const char *flag)
{
    size_t n = strlen(flag);
    return !strncmp(arg, flag, n) && (arg[n] == '\0' || arg[n] == '=');
}

/* Parses argv[2..argc); STATUS_OK, or STATUS_USAGE with one message (--help: printed, *help set). */
static status parse(int argc, char **argv, const char **command, json_t *params, const char **format, bool *help)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help")) {
            puts(provenance_usage);
            *help = true;
            return STATUS_OK;
        } else if (is_flag(a, "--command")) {
            if (!(*command = flag_value(argc, argv, &i, "--command"))) return STATUS_USAGE;
        } else if (is_flag(a, "--format")) {
            if (!(*format = flag_value(argc, argv, &i, "--format"))) return STATUS_USAGE;
            if (strcmp(*format, "json") && strcmp(*format, "csv") && strcmp(*format, "markdown")) {
                log_error0("provenance: --format '%s': expected json, csv or markdown", *format);
                return STATUS_USAGE;
            }
        } else if (is_flag(a, "--param")) {
            if (!(v = flag_value(argc, argv, &i, "--param"))) return STATUS_USAGE;
            const char *eq = strchr(v, '=');
            char key[128];
            json_t *value = eq ? json_string(eq + 1) : NULL;
            if (!eq || eq == v || (size_t)(eq - v) >= sizeof key || !value) {
                log_error0("provenance: --param '%s': expected KEY=VALUE (a key of 1 to 127 bytes, UTF-8 text)", v);
                json_decref(value);
                return STATUS_USAGE;
            }
            snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
            json_object_set_new(params, key, value);
        } else {
            log_error0("provenance: unknown argument '%s'; expected --command, --param, --format or --help", a);
            return STATUS_USAGE;
        }
    }
    return STATUS_OK;
}

int bench_provenance_main(int argc, char **argv)
{
    const char *command = NULL, *format = "json";
    bool help = false;
    json_t *params = json_object();
    status st = parse(argc, argv, &command, params, &format, &help);
    if (st != STATUS_OK || help) {
        json_decref(params);
        return status_exit_code(st);
    }
    json_t *prov = comm_provenance_local(NULL, argc, argv);
    if (command) provenance_set(prov, "command", command);
    json_object_set_new(prov, "config", params);
    /* a deadline on the host gather and MPI_Finalize (a launch that lost a rank must not hang
     * a script); no binding: it computes nothing */
    runtime_options ro = { .bind = RUNTIME_BIND_NONE, .timeout_s = 60 };
    runtime rt;
    st = runtime_init(&rt, &argc, &argv, &ro);
    if (st == STATUS_OK) st = comm_provenance_hosts(prov, &rt, ro.timeout_s);
    if (st == STATUS_OK && rt.rank == 0) {
        if (!strcmp(format, "csv")) st = provenance_write_csv_line(stdout, prov);
        else if (!strcmp(format, "markdown")) st = provenance_write_md_line(stdout, prov);
        else {
            char *text = json_dumps(prov, JSON_COMPACT);
            CHECK(text, "out of memory formatting the provenance");
            puts(text);
            free(text);
        }
    }
    json_decref(prov);
    runtime_exit(&rt, st);
}
