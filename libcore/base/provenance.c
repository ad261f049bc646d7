/* provenance — see provenance.h. */
#include "provenance.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

void provenance_set(json_t *p, const char *key, const char *value)
{
    json_object_set_new(p, key, json_string(value && value[0] ? value : "unknown"));
}

/* MPI's own description, which may run over several lines (Open MPI's does not, MPICH's
 * does): one line, "; " between its lines. */
static void mpi_library(char *out, size_t cap)
{
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    out[0] = '\0';
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS || len <= 0) return;
    text[len < (int)sizeof text ? len : (int)sizeof text - 1] = '\0';
    size_t o = 0;
    for (char *line = strtok(text, "\n"); line && o + 1 < cap; line = strtok(NULL, "\n")) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r')) line[--n] = '\0';
        if (!n) continue;
        o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? "; " : "", line);
    }
}

/* argv as a shell would need it typed: words of safe characters as they are, the others
 * in single quotes (a quote inside as '\''). */
static json_t *command_line(int argc, char *const *argv)
{
    size_t cap = 1, o = 0;
    for (int i = 0; i < argc; i++) cap += 4 * strlen(argv[i]) + 3;
    char *s = malloc(cap);
    CHECK(s, "out of memory for the command line");
    s[0] = '\0';
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool plain = a[0] != '\0' && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                               "-_./=:,+%@") == strlen(a);
        if (i) s[o++] = ' ';
        if (plain) {
            memcpy(s + o, a, strlen(a));
            o += strlen(a);
            continue;
        }
        s[o++] = '\'';
        for (; *a; a++) {
            if (*a == '\'') { memcpy(s + o, "'\\''", 4); o += 4; }
            else s[o++] = *a;
        }
        s[o++] = '\'';
    }
    s[o] = '\0';
    json_t *j = json_string(s);
    free(s);
    return j ? j : json_string("unknown");  /* not UTF-8: jansson refuses it */
}

static json_t *config_object(const config *cfg)
{
    json_t *o = json_object();
    for (int k = 0; cfg && k < cfg->nkeys; k++) {
        char key[2 * CONFIG_NAME_MAX + 2];
        snprintf(key, sizeof key, "%s.%s", cfg->schema[k].section, cfg->schema[k].name);
        json_t *v = json_string(cfg->values[k].text);
        json_object_set_new(o, key, v ? v : json_string("unknown"));
    }
    return o;
}

json_t *provenance_new(const config *cfg, int argc, char *const *argv, int ranks)
{
    json_t *p = json_object();
    CHECK(p, "out of memory for the provenance");
    provenance_set(p, "nebula_version", cli_version());
    provenance_set(p, "git_revision", cli_git_revision());
    char text[MPI_MAX_LIBRARY_VERSION_STRING + 64];
    time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
    provenance_set(p, "date", text);
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    json_object_set_new(p, "hosts", json_pack("[{s:s, s:i}]", "host", host[0] ? host : "unknown", "ranks", ranks));
    json_object_set_new(p, "ranks", json_integer(ranks));
    mpi_library(text, sizeof text);
    provenance_set(p, "mpi_library", text);
    static const char *const later[] = { "blas", "onednn", "cpu_model", "cpu_isa", "cpu_isa_detail" };
    for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) provenance_set(p, later[i], NULL);
    json_object_set_new(p, "command", command_line(argc, argv));
    json_object_set_new(p, "config", config_object(cfg));
    return p;
}

void provenance_set_hosts(json_t *p, const char *first, int n, size_t stride)
{
    json_t *hosts = json_array();
    for (int r = 0; r < n; r++) {
        const char *name = first + (size_t)r * stride;
        if (!name[0]) name = "unknown";
        size_t i;
        json_t *h, *found = NULL;
        json_array_foreach(hosts, i, h)
            if (!strcmp(json_string_value(json_object_get(h, "host")), name)) found = h;
        if (found) json_object_set_new(found, "ranks", json_integer(json_integer_value(json_object_get(found, "ranks")) + 1));
        else json_array_append_new(hosts, json_pack("{s:s, s:i}", "host", name, "ranks", 1));
    }
    json_object_set_new(p, "hosts", hosts);
    json_object_set_new(p, "ranks", json_integer(n));
}

static status write_line(FILE *f, const json_t *p, const char *before, const char *after, bool md)
{
    char *text = json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER);
    CHECK(text, "out of memory formatting the provenance");
    int rc = fputs(before, f);
    for (const char *c = text; rc >= 0 && *c; c++)
        rc = md && !strncmp(c, "-->", 3) ? (c += 2, fputs("--\\u003e", f)) : fputc(*c, f);
    if (rc >= 0) rc = fputs(after, f);
    free(text);
    if (rc < 0) {
        log_error("cannot write the provenance line: %s", log_errno_str());
        return STATUS_IO;
    }
    return STATUS_OK;
}

status provenance_write_csv_line(FILE *f, const json_t *p)
{
    return write_line(f, p, "# provenance: ", "\n", false);
}

status provenance_write_md_line(FILE *f, const json_t *p)
{
    return write_line(f, p, "<!-- provenance: ", " -->\n", true);
}
