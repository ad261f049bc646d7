/* config_migrate — `migrate-config`: a config file rewritten to the current schema
 * version, with a report of every key converted, defaulted or impossible.
 *
 * The one decision to know: the migration edits the user's lines, it does not dump the
 * resolved config. Comments, order and blank lines stay; a renamed key is renamed in
 * place (or moved to the end of its new section, a comment left where it stood), a
 * removed key is commented out with the reason, and the version line is written. The
 * result is loaded beside the original and the two resolved configs must dump to the
 * same text, or nothing is written. */
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_impl.h"
#include "path.h"

#define MIGRATE_FILE_MAX ((uint64_t)1 << 20) /* as config_load_file */

typedef struct migrate_line {
    char *text;    /* the output line, without its '\n'; NULL: dropped */
    char *section; /* the section it belongs to (after moves), "" before any */
    bool content;  /* a section header or key line (not blank, not a comment) */
} migrate_line;

typedef struct migrate {
    const config *cfg;     /* schema and history */
    const char *in;        /* input path, for the report */
    migrate_line *lines;   /* output lines, in order */
    int n, cap;            /* lines used and allocated */
    char **tail;           /* "section\tline" to append at the end of a section */
    int ntail;             /* entries in tail */
    int version;           /* the input's config_version */
    int version_line;      /* output line of the version key, -1 if none */
    int converted, defaulted, impossible;
    FILE *report;
} migrate;

static char *migrate_strdup_printf(const char *fmt, const char *a, const char *b, const char *c)
{
    size_t n = strlen(fmt) + strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    CHECK(s, "out of memory migrating a config");
    snprintf(s, n, fmt, a, b, c);
    return s;
}

static void migrate_push(migrate *m, char *text, const char *section, bool content)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->lines = realloc(m->lines, (size_t)m->cap * sizeof *m->lines);
        CHECK(m->lines, "out of memory migrating a config");
    }
    m->lines[m->n++] = (migrate_line){ text, migrate_strdup_printf("%s", section, "", ""), content };
}

/* The history's entry whose old key is section.name, or NULL. */
static const config_alias *migrate_alias(const migrate *m, const char *section, const char *name)
{
    const config_compat *c = m->cfg->compat;
    size_t n = strlen(section);
    for (int a = 0; a < c->naliases; a++) {
        const char *old = c->aliases[a].old_key;
        if (c->aliases[a].kind != CONFIG_ALIAS_DEFAULT && old && !strncmp(old, section, n) && old[n] == '.' &&
            !strcmp(old + n + 1, name))
            return &c->aliases[a];
    }
    return NULL;
}

/* One key line of the input (key = name, the rest of the line after the name in rest). */
static void migrate_key(migrate *m, const char *line, int lineno, const char *indent, const char *section,
                        const char *name, const char *rest)
{
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%d", m->in, lineno);
    if (!strcmp(section, CONFIG_VERSION_SECTION) && !strcmp(name, CONFIG_VERSION_KEY)) {
        m->version_line = m->n;
        const char *val = rest + strspn(rest, " \t=:");
        m->version = atoi(val);  /* the loader checks it */
        char v[16];
        snprintf(v, sizeof v, "%d", m->cfg->compat->version);
        migrate_push(m, migrate_strdup_printf("%s%s = %s", indent, name, v), section, true);
        return;
    }
    const config_alias *al = migrate_alias(m, section, name);
    if (!al) {
        migrate_push(m, migrate_strdup_printf("%s", line, "", ""), section, true);
        return;
    }
    if (al->kind == CONFIG_ALIAS_REMOVED) {
        char why[64];
        snprintf(why, sizeof why, "%d", al->since);
        migrate_push(m, migrate_strdup_printf("; removed in config_version %s: %s", why, al->reason, ""), section, false);
        migrate_push(m, migrate_strdup_printf("; %s", line, "", ""), section, false);
        fprintf(m->report, "  impossible  %-32s (%s): removed in config_version %d: %s\n", al->old_key, where,
                al->since, al->reason);
        m->impossible++;
        return;
    }
    const char *dot = strrchr(al->new_key, '.');
    char new_section[CONFIG_NAME_MAX + 1];
    snprintf(new_section, sizeof new_section, "%.*s", (int)(dot - al->new_key), al->new_key);
    if (!strcmp(new_section, section)) {
        migrate_push(m, migrate_strdup_printf("%s%s%s", indent, dot + 1, rest), section, true);
        fprintf(m->report, "  converted   %-32s -> %s (%s)\n", al->old_key, al->new_key, where);
    } else {  /* another section: the line goes to the end of it, a note stays here */
        migrate_push(m, migrate_strdup_printf("; %s moved to [%s] as %s", al->old_key, new_section, dot + 1), section, false);
        m->tail = realloc(m->tail, (size_t)(m->ntail + 1) * sizeof *m->tail);
        CHECK(m->tail, "out of memory migrating a config");
        m->tail[m->ntail++] = migrate_strdup_printf("%s\t%s%s", new_section, dot + 1, rest);
        fprintf(m->report, "  converted   %-32s -> %s (%s, moved to [%s])\n", al->old_key, al->new_key, where,
                new_section);
    }
    m->converted++;
}

/* Splits the input into lines and converts each; keys before any section are kept as
 * they are (the loader refuses them, as it did before). */
static void migrate_lines(migrate *m, char *text)
{
    char section[CONFIG_NAME_MAX + 2] = "";
    int lineno = 0;
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!next && !line[0]) break;  /* the text's final newline */
        lineno++;
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '\r' || *p == ';' || *p == '#') {
            migrate_push(m, migrate_strdup_printf("%s", line, "", ""), section, false);
        } else if (*p == '[') {
            size_t n = strcspn(p + 1, "]");
            snprintf(section, sizeof section, "%.*s", (int)(n < sizeof section - 1 ? n : sizeof section - 1), p + 1);
            migrate_push(m, migrate_strdup_printf("%s", line, "", ""), section, true);
        } else {
            size_t n = strcspn(p, "=:");
            while (n && isspace((unsigned char)p[n - 1])) n--;
            char name[CONFIG_NAME_MAX + 2], indent[64];
            snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name - 1 ? n : sizeof name - 1), p);
            snprintf(indent, sizeof indent, "%.*s", (int)(p - line < 63 ? p - line : 63), line);
            migrate_key(m, line, lineno, indent, section, name, p + n);
        }
    }
}

/* After the last header or key line of the last block of `section`, or -1. */
static int migrate_section_end(const migrate *m, const char *section)
{
    int end = -1;
    for (int i = 0; i < m->n; i++)
        if (m->lines[i].text && m->lines[i].content && !strcmp(m->lines[i].section, section)) end = i + 1;
    return end;
}

static void migrate_insert(migrate *m, int at, char *text, const char *section)
{
    migrate_push(m, text, section, true);
    migrate_line l = m->lines[m->n - 1];
    memmove(&m->lines[at + 1], &m->lines[at], (size_t)(m->n - 1 - at) * sizeof *m->lines);
    m->lines[at] = l;
}

/* Whether the output already sets section.name: a kept line or a moved one. */
static bool migrate_sets(const migrate *m, const char *section, const char *name)
{
    size_t n = strlen(name), ns = strlen(section);
    for (int i = 0; i < m->ntail; i++) {
        const char *t = m->tail[i];
        if (!strncmp(t, section, ns) && t[ns] == '\t' && !strncmp(t + ns + 1, name, n) && strchr(" \t=:", t[ns + 1 + n]))
            return true;
    }
    for (int i = 0; i < m->n; i++) {
        const char *p = m->lines[i].text;
        if (!p || !m->lines[i].content || strcmp(m->lines[i].section, section)) continue;
        while (*p == ' ' || *p == '\t') p++;
        if (!strncmp(p, name, n) && p[n] && strchr(" \t=:", p[n])) return true;
    }
    return false;
}

/* Moved keys, defaults that changed after the input's version, and the version line. */
static void migrate_finish(migrate *m, int set_version)
{
    const config_compat *c = m->cfg->compat;
    for (int a = 0; a < c->naliases; a++) {  /* defaulted: the value the old file meant, said outright */
        const config_alias *al = &c->aliases[a];
        if (al->kind != CONFIG_ALIAS_DEFAULT || m->version >= al->since) continue;
        const char *dot = strrchr(al->new_key, '.');
        char section[CONFIG_NAME_MAX + 1];
        snprintf(section, sizeof section, "%.*s", (int)(dot - al->new_key), al->new_key);
        bool set = migrate_sets(m, section, dot + 1);
        if (set) continue;
        m->tail = realloc(m->tail, (size_t)(m->ntail + 1) * sizeof *m->tail);
        CHECK(m->tail, "out of memory migrating a config");
        m->tail[m->ntail++] = migrate_strdup_printf("%s\t%s = %s", section, dot + 1, al->old_default);
        fprintf(m->report, "  defaulted   %-32s = %s (the default changed in config_version %d%s%s; set to keep "
                "the old behaviour)\n", al->new_key, al->old_default, al->since, al->reason ? ": " : "",
                al->reason ? al->reason : "");
        m->defaulted++;
    }
    for (int i = 0; i < m->ntail; i++) {
        char *tab = strchr(m->tail[i], '\t');
        *tab = '\0';
        int at = migrate_section_end(m, m->tail[i]);
        if (at < 0) {  /* a section the file did not have: a new block at the end */
            migrate_push(m, migrate_strdup_printf("", "", "", ""), "", false);
            migrate_push(m, migrate_strdup_printf("[%s]", m->tail[i], "", ""), m->tail[i], true);
            at = m->n;
        }
        migrate_insert(m, at, migrate_strdup_printf("%s", tab + 1, "", ""), m->tail[i]);
    }
    if (set_version && m->version_line < 0) {  /* before the first header or key: after the file's opening comments */
        int at = 0;
        while (at < m->n && !m->lines[at].content) at++;
        char v[48];
        snprintf(v, sizeof v, "%s = %d", CONFIG_VERSION_KEY, c->version);
        migrate_insert(m, at, migrate_strdup_printf("", "", "", ""), "");
        migrate_insert(m, at, migrate_strdup_printf("%s", v, "", ""), CONFIG_VERSION_SECTION);
        migrate_insert(m, at, migrate_strdup_printf("[%s]", CONFIG_VERSION_SECTION, "", ""), CONFIG_VERSION_SECTION);
    }
}

static char *migrate_join(const migrate *m)
{
    size_t len = 1;
    for (int i = 0; i < m->n; i++) len += strlen(m->lines[i].text) + 1;
    char *s = malloc(len), *p = s;
    CHECK(s, "out of memory migrating a config");
    for (int i = 0; i < m->n; i++) p += sprintf(p, "%s\n", m->lines[i].text);
    *p = '\0';
    return s;
}

/* The file's text, read as config_load_file reads it (a regular file of at most 1 MiB). */
static char *migrate_read(const char *path)
{
    int fd;
    struct stat sb;
    char why[256];
    if (path_open_regular(path, &fd, &sb, MIGRATE_FILE_MAX, why, sizeof why) != 0) {
        log_error0("%s: config file %s", path, why);
        return NULL;
    }
    char *text = malloc((size_t)sb.st_size + 1);
    if (text && path_read_all_at(fd, text, (size_t)sb.st_size, 0) != 0) {
        log_error0("%s: cannot read config file", path);
        free(text);
        text = NULL;
    }
    close(fd);
    if (text) text[sb.st_size] = '\0';
    return text;
}

/* Both resolved configs, dumped: the input through its aliases, the output as written. */
static int migrate_check(const config *empty, const char *in, const char *out_text, const char *out)
{
    config *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    size_t cap = 1 << 20;
    char *da = malloc(cap), *db = malloc(cap);
    CHECK(a && b && da && db, "out of memory migrating a config");
    *a = *empty, *b = *empty;
    a->migrating = true;
    int rc = 2;
    if (config_load_file(a, in) != STATUS_OK) goto free_all;  /* the loader named the line */
    rc = 1;
    if (config_load_string(b, out_text, out) != STATUS_OK) goto free_all;
    config_dump(a, da, cap);
    config_dump(b, db, cap);
    if (strcmp(da, db)) {
        log_error0("%s: the migrated text would resolve to another config than %s; nothing written (a bug: please "
                   "report it with the file)", out, in);
        goto free_all;
    }
    rc = 0;
free_all:
    free(a), free(b), free(da), free(db);
    return rc;
}

static int migrate_fill(void *ctx, int fd)
{
    const char *text = ctx;
    return path_write_all(fd, text, strlen(text));
}

int config_migrate(const config *empty, const char *in, const char *out, bool in_place, FILE *report)
{
    CHECK(empty && empty->compat && in && out && report, "config_migrate needs a config with a history and paths");
    /* the output rule (base/path.h): -o is never the input (that takes --in-place), a
     * device, a run directory's own file or inside a checkpoint */
    struct stat si, so;
    if (!in_place && stat(in, &si) == 0 && stat(out, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
        log_error0("migrate-config: %s is the input file; write elsewhere with -o NEW.ini, or pass --in-place to "
                   "replace it", out);
        return 2;
    }
    if (path_output_check(out, in_place ? "--in-place" : "-o", &in, in_place ? 0 : 1) != STATUS_OK) return 2;
    char *text = migrate_read(in);
    if (!text) return 2;
    char *lines = NULL;  /* the per-key report, printed once the migration is written */
    size_t nlines = 0;
    migrate m = { .cfg = empty, .in = in, .version = 1, .version_line = -1, .report = open_memstream(&lines, &nlines) };
    CHECK(m.report, "out of memory migrating a config");
    migrate_lines(&m, text);
    migrate_finish(&m, 1);
    fclose(m.report);
    char *out_text = migrate_join(&m);
    int rc = migrate_check(empty, in, out_text, out);
    /* an output that cannot be written is a bad -o (exit 2): 1 says a person must read the file */
    if (rc == 0 && path_write_atomic(out, "migrated config", migrate_fill, out_text) != STATUS_OK) rc = 2;
    if (rc == 0) {
        fprintf(report, "migrate-config: %s -> %s (config_version %d)\n%s", in, out, empty->compat->version, lines);
        fprintf(report, "summary: %d converted, %d defaulted, %d impossible; the file was config_version %d; %s written, "
                "its resolved config equal to the old file's%s\n", m.converted, m.defaulted, m.impossible, m.version, out,
                m.impossible ? " less the removed keys (commented out there: a person decides what replaces them)" : "");
        rc = m.impossible ? 1 : 0;
    }
    for (int i = 0; i < m.n; i++) free(m.lines[i].text), free(m.lines[i].section);
    for (int i = 0; i < m.ntail; i++) free(m.tail[i]);
    free(m.lines), free(m.tail), free(out_text), free(text), free(lines);
    return rc;
}
