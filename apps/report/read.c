/* read — loading a run directory: metrics.jsonl (every line one JSON object; a torn last
 * line is left out, as the trainer itself cuts it at its next start, docs/metrics.md),
 * config.ini, trace.json, a nebula-chaos soak's samples.csv and report.json, and bench
 * table outputs (CSV with `#` comment lines, JSON with a "rows" array).
 *
 * Anything that is there must be well formed: a malformed line is exit 2 naming the file
 * and line, because a report drawn from half a file would look complete. Anything that is
 * missing is only a figure without data. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/path.h"
#include "report.h"

#define TEXT_MAX (1 << 30) /* the largest file read whole (a 72-hour run's metrics are far below) */

/* The whole of a regular file, NUL-terminated, into *out (free it); *len its size. Opened
 * through path_open_regular: a FIFO or device put in a run directory is refused, never
 * waited on. */
static status read_text(const char *path, char **out, size_t *len)
{
    int fd;
    struct stat st;
    char why[256];
    if (path_open_regular(path, &fd, &st, TEXT_MAX, why, sizeof why) != 0) {
        log_error("%s %s", path, why);
        return STATUS_INPUT;
    }
    char *p = malloc((size_t)st.st_size + 1);
    CHECK(p, "out of memory reading a run file");
    int rc = path_read_all_at(fd, p, (size_t)st.st_size, 0);
    close(fd);
    if (rc != 0) {
        free(p);
        log_error("%s: read failed (%s)", path, errno ? strerror(errno) : "it shrank while being read");
        return STATUS_INPUT;
    }
    p[st.st_size] = '\0';
    *out = p;
    if (len) *len = (size_t)st.st_size;
    return STATUS_OK;
}

/* A JSON document read whole by read_text; NULL (err set, or logged) when it is not one. */
static json_t *load_json(const char *path, json_error_t *err)
{
    char *text;
    size_t len;
    memset(err, 0, sizeof *err);
    if (read_text(path, &text, &len) != STATUS_OK) return NULL;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, err);
    free(text);
    return j;
}

/* Whether path is a regular file; one that is, is read: noted as an input, which --out
 * must not replace. */
static bool is_input(report_run *run, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    for (int i = 0; i < run->ninputs; i++)
        if (!strcmp(run->inputs[i], path)) return true;
    run->inputs = realloc(run->inputs, sizeof(char *) * (size_t)(run->ninputs + 1));
    CHECK(run->inputs, "out of memory");
    run->inputs[run->ninputs] = strdup(path);
    CHECK(run->inputs[run->ninputs], "out of memory");
    run->ninputs++;
    return true;
}

/* metrics.jsonl: one object with a string "kind" per line. */
static status read_metrics(report_run *run, const char *path)
{
    char *text;
    size_t len;
    TRY(read_text(path, &text, &len));
    run->recs = json_array();
    int line = 0;
    status st = STATUS_OK;
    for (char *s = text; *s && st == STATUS_OK; line++) {
        char *nl = strchr(s, '\n');
        bool last = !nl;
        if (nl) *nl = '\0';
        json_error_t err;
        json_t *j = s[0] ? json_loads(s, JSON_REJECT_DUPLICATES, &err) : NULL;
        if (!s[0] && !last) {
            log_error("%s:%d: an empty line; every line of metrics.jsonl is one JSON record", path, line + 1);
            st = STATUS_INPUT;
        } else if (!j && last) {
            /* the trainer writes every record with one write(2) ending in a newline: a
             * last line without one that does not parse was cut by a crash */
            log_warn("%s:%d: a torn last line (%zu bytes, no newline) is left out", path, line + 1, strlen(s));
            run->torn_tail = true;
        } else if (!j) {
            log_error("%s:%d: not JSON: %s (column %d)", path, line + 1, err.text, err.column);
            st = STATUS_INPUT;
        } else if (!json_is_object(j) || !json_is_string(json_object_get(j, "kind"))) {
            log_error("%s:%d: a record is a JSON object with a string \"kind\"", path, line + 1);
            json_decref(j);
            st = STATUS_INPUT;
        } else {
            json_array_append_new(run->recs, j);
        }
        s = nl ? nl + 1 : s + strlen(s);
    }
    free(text);
    return st;
}

/* A CSV field starting at *s (RFC 4180 quotes, "" inside them), cut in place; *s moves
 * past its comma and *more says whether there was one. */
static char *csv_field(char **s, bool *more)
{
    char *p = *s, *out = p, *w = p;
    if (*p == '"') {
        for (p++; *p; p++) {
            if (*p == '"' && p[1] == '"') *w++ = '"', p++;
            else if (*p == '"') { p++; break; }
            else *w++ = *p;
        }
        while (*p && *p != ',') p++;
    } else {
        while (*p && *p != ',') *w++ = *p++;
    }
    *more = *p == ',';
    *s = *more ? p + 1 : p;
    *w = '\0';
    return out;
}

/* Splits a line into at most cap fields; returns the count. */
static int csv_split(char *line, char **f, int cap)
{
    size_t n = strlen(line);
    if (n && line[n - 1] == '\r') line[n - 1] = '\0';
    int k = 0;
    char *s = line;
    bool more = true;
    while (more && k < cap) f[k++] = csv_field(&s, &more);
    return k;
}

static char *str_dup(const char *s)
{
    char *d = strdup(s ? s : "");
    CHECK(d, "out of memory");
    return d;
}

/* A bench CSV: `#` lines are comments (the provenance line among them), then a header
 * and rows. */
static status read_csv_table(report_table *t, const char *path)
{
    char *text;
    TRY(read_text(path, &text, NULL));
    int line = 0, cap = 0;
    size_t clen = 0;
    for (char *s = text; *s; line++) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = '\0';
        char *f[256];
        if (s[0] == '#') {
            size_t n = strlen(s + 1);
            t->comments = realloc(t->comments, clen + n + 2);
            CHECK(t->comments, "out of memory");
            memcpy(t->comments + clen, s + 1, n);
            clen += n;
            t->comments[clen++] = '\n';
            t->comments[clen] = '\0';
        } else if (s[0] && s[0] != '\r') {
            int n = csv_split(s, f, 256);
            if (!t->cols) {
                t->ncols = n;
                t->cols = calloc((size_t)n, sizeof(char *));
                CHECK(t->cols, "out of memory");
                for (int i = 0; i < n; i++) t->cols[i] = str_dup(f[i]);
            } else if (n > t->ncols) {
                log_error("%s:%d: %d fields, but the header has %d", path, line + 1, n, t->ncols);
                free(text);
                return STATUS_INPUT;
            } else {
                if (t->nrows == cap) {
                    cap = cap ? 2 * cap : 64;
                    t->cells = realloc(t->cells, sizeof(char *) * (size_t)cap * t->ncols);
                    CHECK(t->cells, "out of memory");
                }
                for (int i = 0; i < t->ncols; i++) t->cells[(size_t)t->nrows * t->ncols + i] = str_dup(i < n ? f[i] : "");
                t->nrows++;
            }
        }
        s = nl ? nl + 1 : s + strlen(s);
    }
    free(text);
    return STATUS_OK;
}

/* A bench JSON: an object whose "rows" is an array of objects (nebula-bench comm --out),
 * such an array itself, or JSON Lines of objects. Columns: the keys of the rows, in first-seen order; the
 * document's other scalar keys go to the comments. Not a table: *is_table false. */
/* JSON Lines (nebula-bench model --json: one object per line) as an array of them; NULL
 * when a line is not an object. */
static json_t *json_lines(const char *path)
{
    char *text;
    if (read_text(path, &text, NULL) != STATUS_OK) return NULL;
    json_t *rows = json_array();
    for (char *s = strtok(text, "\n"); s && rows; s = strtok(NULL, "\n")) {
        json_t *j = s[strspn(s, " \t\r")] ? json_loads(s, 0, NULL) : NULL;
        if (j && json_is_object(j)) json_array_append_new(rows, j);
        else if (s[strspn(s, " \t\r")]) json_decref(j), json_decref(rows), rows = NULL;
    }
    free(text);
    return rows;
}

static status read_json_table(report_table *t, const char *path, bool *is_table)
{
    json_error_t err;
    json_t *doc = load_json(path, &err);
    *is_table = false;
    if (!doc) doc = json_lines(path);
    if (!doc) {
        log_error("%s:%d: not JSON: %s", path, err.line, err.text);
        return STATUS_INPUT;
    }
    json_t *rows = json_is_array(doc) ? doc : json_object_get(doc, "rows");
    size_t i;
    json_t *r;
    bool ok = json_is_array(rows) && json_array_size(rows) > 0;
    json_array_foreach(rows, i, r) ok &= json_is_object(r);
    if (ok) {
        *is_table = true;
        const char *k;
        json_t *v;
        t->cols = calloc(256, sizeof(char *));
        CHECK(t->cols, "out of memory");
        json_array_foreach(rows, i, r) json_object_foreach(r, k, v) {
            int c = 0;
            while (c < t->ncols && strcmp(t->cols[c], k)) c++;
            if (c == t->ncols && t->ncols < 256) t->cols[t->ncols++] = str_dup(k);
        }
        t->nrows = (int)json_array_size(rows);
        t->cells = calloc((size_t)t->nrows * t->ncols + 1, sizeof(char *));
        CHECK(t->cells, "out of memory");
        json_array_foreach(rows, i, r) for (int c = 0; c < t->ncols; c++) {
            json_t *x = json_object_get(r, t->cols[c]);
            char buf[64] = "";
            if (json_is_string(x)) t->cells[i * t->ncols + c] = str_dup(json_string_value(x));
            else {
                if (json_is_integer(x)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(x));
                else if (json_is_real(x)) snprintf(buf, sizeof buf, "%.17g", json_real_value(x));
                else if (json_is_boolean(x)) snprintf(buf, sizeof buf, "%s", json_is_true(x) ? "true" : "false");
                t->cells[i * t->ncols + c] = str_dup(buf);
            }
        }
        if (json_is_object(doc)) {
            sbuf c = { 0 };
            json_object_foreach(doc, k, v) {
                if (json_is_string(v)) sb_printf(&c, " %s: %s\n", k, json_string_value(v));
                else if (json_is_number(v)) sb_printf(&c, " %s: %g\n", k, json_number_value(v));
            }
            t->comments = c.p;
        }
    }
    json_decref(doc);
    return STATUS_OK;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* Every bench table output in the directory, by name order. */
static status read_tables(report_run *run)
{
    struct dirent **e;
    int n = scandir(run->dir, &e, NULL, alphasort);
    status st = STATUS_OK;
    /* the run's own JSON files, which are not tables */
    static const char *const skip[] = { "samples.csv", "report.json", "trace.json", "profile.json" };
    for (int i = 0; i < n; i++) {
        const char *name = e[i]->d_name;
        bool csv = ends_with(name, ".csv"), js = ends_with(name, ".json");
        for (size_t k = 0; k < sizeof skip / sizeof skip[0]; k++) csv &= strcmp(name, skip[k]) != 0;
        for (size_t k = 0; k < sizeof skip / sizeof skip[0]; k++) js &= strcmp(name, skip[k]) != 0;
        char path[2 * REPORT_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", run->dir, name);
        if (st == STATUS_OK && (csv || js) && is_input(run, path) && run->ntables == REPORT_MAX_TABLES)
            log_warn("%s: more than %d bench tables in %s; this one is left out", name, REPORT_MAX_TABLES, run->dir);
        else if (st == STATUS_OK && (csv || js) && is_input(run, path)) {
            report_table *t = &run->tables[run->ntables];
            memset(t, 0, sizeof *t);
            snprintf(t->name, sizeof t->name, "%s", name);
            bool keep = true;
            st = csv ? read_csv_table(t, path) : read_json_table(t, path, &keep);
            if (st == STATUS_OK && keep && t->ncols > 0 && t->nrows > 0) run->ntables++;
        }
        free(e[i]);
    }
    free(e);
    return st;
}

/* samples.csv of nebula-chaos soak: t_s,launch,step,rss_mb,fds,disk_mb,steps_per_s. */
static status read_soak(report_run *run, const char *path)
{
    static const char *const want[SOAK_NCOLS] = { "t_s", "launch", "step", "rss_mb", "fds", "disk_mb", "steps_per_s" };
    char *text;
    TRY(read_text(path, &text, NULL));
    int line = 0, cap = 0, col[SOAK_NCOLS], ncols = 0;
    status st = STATUS_OK;
    for (char *s = text; *s && st == STATUS_OK; line++) {
        char *nl = strchr(s, '\n');
        if (nl) *nl = '\0';
        char *f[64];
        if (s[0] && s[0] != '#') {
            int n = csv_split(s, f, 64);
            if (!ncols) {
                ncols = n;
                for (int k = 0; k < SOAK_NCOLS; k++) {
                    col[k] = -1;
                    for (int i = 0; i < n; i++)
                        if (!strcmp(f[i], want[k])) col[k] = i;
                    if (col[k] < 0) {
                        log_error("%s:%d: the header lacks the column %s", path, line + 1, want[k]);
                        st = STATUS_INPUT;
                        break;
                    }
                }
            } else if (n != ncols) {
                /* the soak flushes every sample: only a last line can be cut short */
                if (nl) {
                    log_error("%s:%d: %d fields, but the header has %d", path, line + 1, n, ncols);
                    st = STATUS_INPUT;
                }
            } else {
                if (run->nsoak == cap) {
                    cap = cap ? 2 * cap : 256;
                    run->soak = realloc(run->soak, sizeof(double) * (size_t)cap * SOAK_NCOLS);
                    CHECK(run->soak, "out of memory");
                }
                for (int k = 0; k < SOAK_NCOLS && st == STATUS_OK; k++) {
                    char *end;
                    const char *c = f[col[k]];
                    double v = strtod(c, &end);
                    if (end == c || *end) {
                        log_error("%s:%d: %s is '%s', not a number", path, line + 1, want[k], c);
                        st = STATUS_INPUT;
                    }
                    run->soak[(size_t)run->nsoak * SOAK_NCOLS + k] = isfinite(v) ? v : NAN;
                }
                run->nsoak++;
            }
        }
        s = nl ? nl + 1 : s + strlen(s);
    }
    free(text);
    return st;
}

static status read_json_doc(const char *path, json_t **out)
{
    json_error_t err;
    *out = load_json(path, &err);
    if (!*out || !json_is_object(*out)) {
        if (*out) log_error("%s: not a JSON object", path);
        else log_error("%s:%d: not JSON: %s", path, err.line, err.text);
        json_decref(*out);
        *out = NULL;
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

status report_read_run(report_run *run, const char *dir)
{
    memset(run, 0, sizeof *run);
    snprintf(run->dir, sizeof run->dir, "%s", dir);
    for (size_t n = strlen(run->dir); n > 1 && run->dir[n - 1] == '/'; n--) run->dir[n - 1] = '\0';
    dir = run->dir;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        log_error("run directory %s: %s", dir, stat(dir, &st) != 0 ? log_errno_str() : "not a directory");
        return STATUS_INPUT;
    }
    DIR *d = opendir(dir);
    if (!d) {
        log_error("run directory %s: %s", dir, log_errno_str());
        return STATUS_INPUT;
    }
    closedir(d);
    const char *slash = strrchr(dir, '/');
    snprintf(run->label, sizeof run->label, "%s", slash && slash[1] ? slash + 1 : dir);

    char path[2 * REPORT_PATH_MAX];
    snprintf(path, sizeof path, "%s/samples.csv", dir);
    bool soak = is_input(run, path);
    if (soak) {
        TRY(read_soak(run, path));
        snprintf(path, sizeof path, "%s/report.json", dir);
        if (is_input(run, path)) TRY(read_json_doc(path, &run->soak_report));
    }
    /* a soak's training run is its run/ */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (!is_input(run, path) && soak) snprintf(path, sizeof path, "%s/run/metrics.jsonl", dir);
    if (is_input(run, path)) {
        snprintf(run->metrics_path, sizeof run->metrics_path, "%s", path);
        TRY(read_metrics(run, path));
    }
    snprintf(path, sizeof path, "%s/config.ini", dir);
    if (!is_input(run, path) && soak) snprintf(path, sizeof path, "%s/run/config.ini", dir);
    if (is_input(run, path)) TRY(read_text(path, &run->config_text, NULL));
    snprintf(path, sizeof path, "%s/trace.json", dir);
    if (!is_input(run, path) && soak) snprintf(path, sizeof path, "%s/run/trace.json", dir);
    if (is_input(run, path)) {
        TRY(read_json_doc(path, &run->trace));
        if (!json_is_array(json_object_get(run->trace, "traceEvents"))) {
            log_error("%s: no \"traceEvents\" array (a Chrome trace-event object)", path);
            return STATUS_INPUT;
        }
    }
    TRY(read_tables(run));
    if (!run->recs && !soak && !run->ntables && !run->trace) {
        log_error("run directory %s: no metrics.jsonl, samples.csv, trace.json or bench table (*.csv, *.json) "
                  "to report on", dir);
        return STATUS_INPUT;
    }
    if (!run->recs) run->recs = json_array();
    return STATUS_OK;
}

void report_free_run(report_run *run)
{
    json_decref(run->recs);
    json_decref(run->trace);
    json_decref(run->soak_report);
    free(run->config_text);
    free(run->soak);
    for (int i = 0; i < run->ntables; i++) {
        report_table *t = &run->tables[i];
        for (int c = 0; c < t->ncols; c++) free(t->cols[c]);
        for (size_t k = 0; k < (size_t)t->nrows * t->ncols; k++) free(t->cells[k]);
        free(t->cols), free(t->cells), free(t->comments);
    }
    for (int i = 0; i < run->ninputs; i++) free(run->inputs[i]);
    free(run->inputs);
    memset(run, 0, sizeof *run);
}

typedef struct step_ref {
    long long step;  /* the record's step */
    size_t order;    /* its position in the file */
    json_t *rec;
} step_ref;

static int by_step_then_order(const void *a, const void *b)
{
    const step_ref *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

int report_by_step(const report_run *run, const char *kind, json_t ***out, int *redone)
{
    size_t n = json_array_size(run->recs), i;
    step_ref *refs = malloc(sizeof(step_ref) * (n + 1));
    CHECK(refs, "out of memory");
    size_t m = 0;
    json_t *r;
    json_array_foreach(run->recs, i, r) {
        json_t *s = json_object_get(r, "step");
        if (strcmp(json_string_value(json_object_get(r, "kind")), kind) || !json_is_integer(s)) continue;
        refs[m++] = (step_ref){ json_integer_value(s), i, r };
    }
    qsort(refs, m, sizeof *refs, by_step_then_order);
    json_t **o = malloc(sizeof(json_t *) * (m + 1));
    CHECK(o, "out of memory");
    int k = 0, replaced = 0;
    for (size_t j = 0; j < m; j++) {
        if (j + 1 < m && refs[j + 1].step == refs[j].step) { replaced++; continue; }  /* a later record wins */
        o[k++] = refs[j].rec;
    }
    free(refs);
    *out = o;
    if (redone) *redone = replaced;
    return k;
}

double report_num(const json_t *rec, const char *key)
{
    json_t *v = json_object_get(rec, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

const char *report_str(const json_t *rec, const char *key, const char *def)
{
    const char *s = json_string_value(json_object_get(rec, key));
    return s ? s : def;
}

int report_table_col(const report_table *t, const char *name)
{
    for (int c = 0; c < t->ncols; c++)
        if (!strcmp(t->cols[c], name)) return c;
    return -1;
}

double report_table_num(const report_table *t, int row, int col)
{
    if (col < 0 || col >= t->ncols || row < 0 || row >= t->nrows) return NAN;
    const char *s = t->cells[(size_t)row * t->ncols + col];
    char *end;
    double v = strtod(s, &end);
    while (*end == ' ' || *end == 'x' || *end == '%') end++;  /* "1.23x", "12 %" */
    return end == s || *end ? NAN : v;
}
