/* config — see config.h. libinih splits lines into section/key/value; everything that
 * knows about types, ranges and messages is here.
 *
 * Debian's libinih is built without line numbers in the handler, so lines are fed to it
 * through our own reader (ini_parse_stream), which counts them: the handler always runs
 * on the line the reader handed over last. A file is read whole first (never blocking:
 * path_open_regular) and must be text, so that the reader's lines are the file's. A load
 * works on a scratch copy of the config: a file with any error leaves the values as they were. */
#include "config.h"
#include "config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "path.h"

/* Longest INI line we accept: a maximal name and value plus " = ", indentation and
 * "\r\n\0". */
#define CONFIG_LINE_MAX (CONFIG_NAME_MAX + CONFIG_STR_MAX + 64)

static const char *const config_type_name[] = { "int", "float", "bool", "string", "enum", "size" };

/* ---- small helpers ---------------------------------------------------------------- */

/* snprintf-style appender: keeps counting past the end so callers learn the size needed. */
typedef struct config_buf {
    char *p;    /* destination, may be NULL when cap is 0 */
    size_t cap; /* bytes available at p, including the NUL */
    size_t len; /* bytes the full text needs, without the NUL */
} config_buf;

__attribute__((format(printf, 2, 3)))
static void config_buf_printf(config_buf *b, const char *fmt, ...)
{
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

static bool config_is_numeric(config_type t)
{
    return t == CONFIG_TYPE_INT || t == CONFIG_TYPE_FLOAT || t == CONFIG_TYPE_SIZE;
}

/* Index of the key named `section`.`name`, or -1. */
static int config_find_pair(const config_key *schema, int nkeys, const char *section, const char *name)
{
    for (int k = 0; k < nkeys; k++)
        if (!strcmp(schema[k].section, section) && !strcmp(schema[k].name, name)) return k;
    return -1;
}

/* Index of "section.key", or -1. Compared without splitting: section names may hold dots. */
static int config_find(const config *cfg, const char *key)
{
    for (int k = 0; k < cfg->nkeys; k++) {
        const config_key *s = &cfg->schema[k];
        size_t n = strlen(s->section);
        if (!strncmp(key, s->section, n) && key[n] == '.' && !strcmp(key + n + 1, s->name)) return k;
    }
    return -1;
}

static bool config_section_known(const config *cfg, const char *section)
{
    for (int k = 0; k < cfg->nkeys; k++)
        if (!strcmp(cfg->schema[k].section, section)) return true;
    return false;
}

/* True for the first schema entry of its section: sections are emitted in that order. */
static bool config_first_of_section(const config_key *schema, int k)
{
    for (int j = 0; j < k; j++)
        if (!strcmp(schema[j].section, schema[k].section)) return false;
    return true;
}

/* Optimal-string-alignment distance, case-insensitive, so that swapped letters and
 * wrong case count as one typo. Long strings are not worth suggesting for. */
static int config_distance(const char *a, const char *b)
{
    enum { N = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= N || m >= N) return INT_MAX;
    int d[N][N];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/* Close enough to be a typo rather than a different word. */
static bool config_is_typo(int dist, size_t len)
{
    return dist <= 2 || (size_t)dist * 3 <= len;
}

/* ---- unknown keys ----------------------------------------------------------------- */

/* Nearest schema key to what was written; a key of the same name in another section
 * is the likeliest mistake of all. -1 if nothing is close. */
static int config_nearest_key(const config *cfg, const char *full, const char *name)
{
    int best = -1, best_d = INT_MAX;
    for (int k = 0; k < cfg->nkeys; k++) {
        char cand[2 * CONFIG_NAME_MAX + 2];
        snprintf(cand, sizeof cand, "%s.%s", cfg->schema[k].section, cfg->schema[k].name);
        int d = !strcmp(name, cfg->schema[k].name) ? 1 : config_distance(full, cand);
        if (d < best_d) { best_d = d; best = k; }
    }
    return best >= 0 && config_is_typo(best_d, strlen(full)) ? best : -1;
}

static void config_report_unknown(const config *cfg, const char *where, const char *section,
                                  const char *name)
{
    char full[600], hint[160] = "", list[1024] = "";
    snprintf(full, sizeof full, "%s%s%s", section, section[0] ? "." : "", name);
    int k = config_nearest_key(cfg, full, name);
    if (k >= 0)
        snprintf(hint, sizeof hint, " did you mean '%s.%s'?", cfg->schema[k].section, cfg->schema[k].name);

    config_buf b = { list, sizeof list, 0 };
    bool known = config_section_known(cfg, section);
    config_buf_printf(&b, known ? "keys in [%s]:" : "valid sections:", section);
    const char *sep = " ";
    for (int j = 0; j < cfg->nkeys; j++) {
        if (known && !strcmp(cfg->schema[j].section, section))
            config_buf_printf(&b, "%s%s", sep, cfg->schema[j].name);
        else if (!known && config_first_of_section(cfg->schema, j))
            config_buf_printf(&b, "%s[%s]", sep, cfg->schema[j].section);
        else
            continue;
        sep = ", ";
    }
    log_error0("%s: unknown key '%s'%s;%s %s", where, full, section[0] ? "" : " (outside any [section])",
               hint, list);
}

/* ---- values ----------------------------------------------------------------------- */

/* 268435456 -> "256M": the largest suffix that divides exactly, so the text reads back
 * to the same number. */
static void config_format_size(uint64_t u, char *buf, size_t len)
{
    static const char unit[] = "TGMK";
    for (int i = 0; i < 4 && u; i++) {
        int shift = 40 - 10 * i;
        if (u % (UINT64_C(1) << shift) == 0) {
            snprintf(buf, len, "%llu%c", (unsigned long long)(u >> shift), unit[i]);
            return;
        }
    }
    snprintf(buf, len, "%llu", (unsigned long long)u);
}

static bool config_parse_size(const char *s, uint64_t *out)
{
    static const struct { const char *suffix; int shift; } units[] = {
        { "", 0 }, { "K", 10 }, { "KiB", 10 }, { "M", 20 }, { "MiB", 20 },
        { "G", 30 }, { "GiB", 30 }, { "T", 40 }, { "TiB", 40 },
    };
    if (!isdigit((unsigned char)s[0])) return false; /* strtoull would accept "-1" */
    char *end;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno == ERANGE) return false;
    while (*end == ' ') end++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix)) continue;
        if (end > s && end[-1] == ' ' && !units[i].suffix[0]) return false; /* trailing blank */
        if (n > (UINT64_MAX >> units[i].shift)) return false;
        *out = (uint64_t)n << units[i].shift;
        return true;
    }
    return false;
}

static bool config_parse_int(const char *s, int64_t *out)
{
    if (!s[0] || isspace((unsigned char)s[0])) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || *end) return false;
    *out = v;
    return true;
}

/* Writes the shortest %g text that reads back to exactly v, so dumps round-trip. */
static bool config_parse_float(const char *s, double *out, char *text, size_t len)
{
    if (!s[0] || isspace((unsigned char)s[0])) return false;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return false;
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(text, len, "%.*g", prec, v);
        if (strtod(text, NULL) == v) break;
    }
    *out = v;
    return true;
}

static bool config_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = { "true", "1", "yes", "on" };
    static const char *const no[] = { "false", "0", "no", "off" };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (!strcasecmp(s, yes[i])) { *out = true; return true; }
        if (!strcasecmp(s, no[i])) { *out = false; return true; }
    }
    return false;
}

/* Matches any case; the stored text is the schema's spelling. */
static bool config_parse_enum(const char *choices, const char *s, char *text, size_t len)
{
    size_t n = strlen(s);
    for (const char *c = choices; *c;) {
        size_t clen = strcspn(c, "|");
        if (clen == n && !strncasecmp(c, s, n)) {
            snprintf(text, len, "%.*s", (int)clen, c);
            return true;
        }
        c += clen + (c[clen] == '|');
    }
    return false;
}

/* Refuses what an INI file cannot carry back: control characters, and a ';' at the start
 * or after a blank, which libinih reads as an inline comment. Leading and trailing
 * blanks only get here from a schema default, since libinih and config_set strip them. */
static bool config_string_ok(const char *s)
{
    size_t n = strlen(s);
    if (n > CONFIG_STR_MAX) return false;
    if (n && (isspace((unsigned char)s[0]) || isspace((unsigned char)s[n - 1]))) return false;
    for (size_t i = 0; i < n; i++) {
        if (iscntrl((unsigned char)s[i])) return false;
        if (s[i] == ';' && (i == 0 || isspace((unsigned char)s[i - 1]))) return false;
    }
    return true;
}

static bool config_in_range(const config_key *k, double v)
{
    if (k->min == 0 && k->max == 0) return true;
    return v >= k->min && v <= k->max;
}

/* Parses and range-checks text for key k into out (typed value and canonical text). */
static bool config_parse_value(const config_key *k, const char *s, config_value *out)
{
    switch (k->type) {
    case CONFIG_TYPE_INT:
        if (!config_parse_int(s, &out->i) || !config_in_range(k, (double)out->i)) return false;
        snprintf(out->text, sizeof out->text, "%lld", (long long)out->i);
        return true;
    case CONFIG_TYPE_FLOAT:
        return config_parse_float(s, &out->f, out->text, sizeof out->text) && config_in_range(k, out->f);
    case CONFIG_TYPE_BOOL:
        if (!config_parse_bool(s, &out->b)) return false;
        snprintf(out->text, sizeof out->text, "%s", out->b ? "true" : "false");
        return true;
    case CONFIG_TYPE_STRING:
        if (!config_string_ok(s)) return false;
        snprintf(out->text, sizeof out->text, "%s", s);
        return true;
    case CONFIG_TYPE_ENUM:
        return config_parse_enum(k->choices, s, out->text, sizeof out->text);
    case CONFIG_TYPE_SIZE:
        if (!config_parse_size(s, &out->u) || !config_in_range(k, (double)out->u)) return false;
        config_format_size(out->u, out->text, sizeof out->text);
        return true;
    }
    return false;
}

static void config_format_bound(const config_key *k, double v, char *buf, size_t len)
{
    if (k->type == CONFIG_TYPE_SIZE && v >= 0 && v < 0x1p64) config_format_size((uint64_t)v, buf, len);
    else if (k->type == CONFIG_TYPE_INT) snprintf(buf, len, "%.0f", v);
    else snprintf(buf, len, "%g", v);
}

/* " in [lo, hi]", " >= lo", " <= hi" or "" */
static void config_range_text(const config_key *k, config_buf *b)
{
    char lo[48], hi[48];
    if (!config_is_numeric(k->type) || (k->min == 0 && k->max == 0)) return;
    config_format_bound(k, k->min, lo, sizeof lo);
    config_format_bound(k, k->max, hi, sizeof hi);
    if (isfinite(k->min) && isfinite(k->max)) config_buf_printf(b, " in [%s, %s]", lo, hi);
    else if (isfinite(k->min)) config_buf_printf(b, " >= %s", lo);
    else if (isfinite(k->max)) config_buf_printf(b, " <= %s", hi);
}

/* What a valid value looks like, for the "expected ..." half of a message. */
static void config_expected(const config_key *k, char *buf, size_t len)
{
    config_buf b = { buf, len, 0 };
    switch (k->type) {
    case CONFIG_TYPE_INT: config_buf_printf(&b, "an integer"); break;
    case CONFIG_TYPE_FLOAT: config_buf_printf(&b, "a finite number"); break;
    case CONFIG_TYPE_SIZE: config_buf_printf(&b, "a byte count"); break;
    case CONFIG_TYPE_BOOL: config_buf_printf(&b, "true/false, yes/no, on/off or 1/0"); return;
    case CONFIG_TYPE_ENUM: config_buf_printf(&b, "one of %s", k->choices); return;
    case CONFIG_TYPE_STRING:
        config_buf_printf(&b, "at most %d characters without control characters, and no ';' "
                          "first or after a blank (INI would read a comment)", CONFIG_STR_MAX);
        return;
    }
    config_range_text(k, &b);
    if (k->type == CONFIG_TYPE_SIZE) config_buf_printf(&b, ", e.g. 4096, 64K, 256M or 2GiB (K/M/G/T = 1024^n)");
}

/* "; did you mean 'adamw'?" for a misspelt choice, or "". */
static void config_suggest_choice(const char *choices, const char *s, char *buf, size_t len)
{
    int best_d = INT_MAX;
    buf[0] = '\0';
    for (const char *c = choices; *c;) {
        size_t clen = strcspn(c, "|");
        char cand[128];
        snprintf(cand, sizeof cand, "%.*s", (int)clen, c);
        int d = config_distance(s, cand);
        if (d < best_d && config_is_typo(d, strlen(s))) {
            best_d = d;
            snprintf(buf, len, "; did you mean '%s'?", cand);
        }
        c += clen + (c[clen] == '|');
    }
}

/* "FILE:LINE", keeping the tail of a path too long to fit: that is the part that names it. */
static void config_set_origin(config_value *v, const char *path, int line)
{
    char tail[16];
    snprintf(tail, sizeof tail, ":%d", line);
    size_t n = strlen(path), keep = sizeof v->origin - 1 - strlen(tail);
    config_buf b = { v->origin, sizeof v->origin, 0 };
    if (n <= keep) config_buf_printf(&b, "%s%s", path, tail);
    else config_buf_printf(&b, "...%s%s", path + n - (keep - 3), tail);
}

/* Validates text for key k and stores it; `where` prefixes the message on failure.
 * path == NULL means the value came from --set. */
static status config_assign(config *cfg, int k, const char *text, const char *where,
                            const char *path, int line)
{
    const config_key *key = &cfg->schema[k];
    config_value v = { .i = 0 };
    if (!config_parse_value(key, text, &v)) {
        char expected[512], hint[160] = "";
        config_expected(key, expected, sizeof expected);
        if (key->type == CONFIG_TYPE_ENUM) config_suggest_choice(key->choices, text, hint, sizeof hint);
        log_error0("%s: %s.%s: '%s' is not a valid %s; expected %s%s", where, key->section, key->name,
                   text, config_type_name[key->type], expected, hint);
        return STATUS_INPUT;
    }
    if (path) config_set_origin(&v, path, line);
    else snprintf(v.origin, sizeof v.origin, "--set");
    cfg->values[k] = v;
    return STATUS_OK;
}

int config_key_index(const config *cfg, const char *section, const char *name)
{
    return config_find_pair(cfg->schema, cfg->nkeys, section, name);
}

bool config_assign_text(config *cfg, int k, const char *text, const char *origin)
{
    config_value v = { .i = 0 };
    if (!config_parse_value(&cfg->schema[k], text, &v)) return false;
    snprintf(v.origin, sizeof v.origin, "%s", origin);
    cfg->values[k] = v;
    return true;
}

/* ---- init --------------------------------------------------------------------------- */

/* Section and key names travel through libinih, which truncates them at 50 characters
 * and splits on these characters. */
static bool config_name_ok(const char *s, bool allow_dot)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > CONFIG_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isspace(c) || iscntrl(c) || strchr("=:;#[]", c) || (c == '.' && !allow_dot)) return false;
    }
    return true;
}

static void config_check_key(const config_key *schema, int k)
{
    const config_key *key = &schema[k];
    char what[160];
    snprintf(what, sizeof what, "schema entry %d (%s.%s)", k, key->section ? key->section : "(null)",
             key->name ? key->name : "(null)");
    const char *hint = "fix the app's config_key table";
    if (!config_name_ok(key->section, true) || !config_name_ok(key->name, false))
        die(what, "section or key name is empty, too long, or holds one of ' =:;#[]' (or '.' in a key)", hint);
    if (config_find_pair(schema, k, key->section, key->name) >= 0) die(what, "key appears twice", hint);
    if ((unsigned)key->type > CONFIG_TYPE_SIZE) die(what, "unknown type", hint);
    if (!key->def) die(what, "no default", hint);
    if (key->type == CONFIG_TYPE_ENUM &&
        (!key->choices || !key->choices[0] || strstr(key->choices, "||") ||
         key->choices[0] == '|' || key->choices[strlen(key->choices) - 1] == '|'))
        die(what, "ENUM needs choices \"a|b|c\" without empty entries", hint);
    if (config_is_numeric(key->type) && !(key->min <= key->max)) die(what, "min > max", hint);
    if (key->type == CONFIG_TYPE_SIZE && key->min < 0) die(what, "a SIZE bound is negative", hint);
}

status config_init(config *cfg, const config_key *schema, int nkeys)
{
    CHECK(cfg && schema && nkeys >= 0, "config_init needs a config and a schema");
    CHECK(nkeys <= CONFIG_MAX_KEYS, "raise CONFIG_MAX_KEYS in config.h");
    memset(cfg, 0, sizeof *cfg);
    cfg->schema = schema;
    cfg->nkeys = nkeys;
    for (int k = 0; k < nkeys; k++) {
        config_check_key(schema, k);
        config_value *v = &cfg->values[k];
        if (!config_parse_value(&schema[k], schema[k].def, v)) {
            char what[160], why[CONFIG_STR_MAX + 640], expected[512];
            snprintf(what, sizeof what, "default of %s.%s", schema[k].section, schema[k].name);
            config_expected(&schema[k], expected, sizeof expected);
            snprintf(why, sizeof why, "'%s' is not a valid %s; expected %s", schema[k].def,
                     config_type_name[schema[k].type], expected);
            die(what, why, "fix the app's config_key table");
        }
        snprintf(v->origin, sizeof v->origin, "default");
    }
    return STATUS_OK;
}

/* ---- loading ------------------------------------------------------------------------ */

/* A config file larger than this is not one (the longest schema dumps a few KiB). */
#define CONFIG_FILE_MAX ((uint64_t)1 << 20)

typedef struct config_reader {
    const char *text; /* the rest of the text */
    int line;         /* lines handed to libinih = the line its handler is on */
    bool too_long;    /* line `line` does not fit libinih's buffer; reading stopped there */
} config_reader;

typedef struct config_loader {
    config *cfg;                 /* scratch copy the input is applied to */
    const char *name;            /* path, or its stand-in, for messages and origins */
    config_reader rd;            /* line source */
    int first_error;             /* first line whose error the handler reported, 0 if none */
    int set_at[CONFIG_MAX_KEYS]; /* line that set each key in this input, 0 if not yet */
    int version;                 /* the input's config_version (1 when it names none) */
} config_loader;

/* ini_reader: one line per call (fgets-like). A line longer than the buffer would be
 * split by libinih into two lines with wrong numbers, so it stops the parse instead. */
static char *config_read_line(char *str, int num, void *stream)
{
    config_reader *rd = stream;
    size_t cap = (size_t)num - 1;
    if (!rd->text[0]) return NULL;
    size_t n = strcspn(rd->text, "\n");
    rd->too_long = n > cap;
    memcpy(str, rd->text, n < cap ? n : cap);
    str[n < cap ? n : cap] = '\0';
    rd->text += n + (rd->text[n] == '\n');
    rd->line++;
    return rd->too_long ? NULL : str;
}

/* Length of the UTF-8 sequence at s (at most n bytes), 0 if it is not one. Overlong
 * forms and surrogates pass: the point is to tell text from binary, not to police
 * encoders. */
static size_t config_utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return len;
}

/* A config is text: UTF-8 without control characters other than tab, CR and LF. A
 * NUL would end the line early in libinih (the rest silently lost), other bytes mean
 * a binary or corrupt file; either is refused naming the first one's line. */
static status config_check_text(const char *text, size_t n, const char *name)
{
    int line = 1;
    size_t col = 1;
    for (size_t i = 0; i < n; col++) {
        unsigned char c = (unsigned char)text[i];
        size_t len = config_utf8_len((const unsigned char *)text + i, n - i);
        const char *what = c == 0 ? "a NUL byte" : len == 0 ? "a byte that is not UTF-8"
                         : (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f ? "a control character"
                         : NULL;
        if (what) {
            log_error0("%s:%d: %s (0x%02x) at column %zu: a config file is text (UTF-8 without control "
                       "characters); is this the right file?", name, line, what, c, col);
            return STATUS_INPUT;
        }
        if (c == '\n') { line++; col = 0; }
        i += len;
    }
    return STATUS_OK;
}

/* ini_handler: returns 0 after reporting so libinih records the line as an error but
 * keeps going, and the user sees every bad key of a file in one run. */
static int config_on_pair(void *user, const char *section, const char *name, const char *value)
{
    config_loader *ld = user;
    int line = ld->rd.line;
    char where[PATH_MAX + 16];
    snprintf(where, sizeof where, "%s:%d", ld->name, line);
    if (ld->cfg->compat && !strcmp(section, CONFIG_VERSION_SECTION) && !strcmp(name, CONFIG_VERSION_KEY)) {
        if (ld->cfg->compat_ops->version(ld->cfg, value, where, &ld->version)) return 1;
        if (!ld->first_error) ld->first_error = line;
        return 0;
    }
    int k = config_find_pair(ld->cfg->schema, ld->cfg->nkeys, section, name);
    if (k < 0 && ld->cfg->compat) {
        k = ld->cfg->compat_ops->lookup(ld->cfg, section, name, where);
        if (k == CONFIG_COMPAT_SKIPPED) return 1;
    }
    if (k == CONFIG_COMPAT_UNKNOWN) {
        config_report_unknown(ld->cfg, where, section, name);
    } else if (k < 0) {
        /* refused: the history said why */
    } else if (ld->set_at[k]) {
        /* libinih also sends an indented line as a continuation of the previous key. */
        log_error0("%s: %s.%s is set again (first at line %d); remove the duplicate, "
                   "or the indentation if this line continues the one above", where, section, name,
                   ld->set_at[k]);
    } else if (config_assign(ld->cfg, k, value, where, ld->name, line) == STATUS_OK) {
        ld->set_at[k] = line;
        return 1;
    }
    if (!ld->first_error) ld->first_error = line;
    return 0;
}

/* libinih returns only the first bad line; if the handler reported it, a later syntax
 * error stays unreported until the first one is fixed. */
static status config_parse(config_loader *ld)
{
    /* Debian's libinih sizes its line buffer from this variable (default 200 bytes), too
     * short for a path-sized value. Only ever raised, so concurrent loads agree. */
    if (ini_max_line < CONFIG_LINE_MAX) ini_max_line = CONFIG_LINE_MAX;
    int rc = ini_parse_stream(config_read_line, &ld->rd, config_on_pair, ld);
    if (rc == -2) {
        log_error0("%s: out of memory while parsing", ld->name);
        return STATUS_NOMEM;
    }
    if (rc > 0 && rc != ld->first_error)
        log_error0("%s:%d: syntax error: expected '[section]', 'key = value' or a comment", ld->name, rc);
    if (ld->rd.too_long)
        log_error0("%s:%d: line is longer than %d characters", ld->name, ld->rd.line, CONFIG_LINE_MAX - 3);
    return rc != 0 || ld->rd.too_long || ld->first_error ? STATUS_INPUT : STATUS_OK;
}

static status config_load(config *cfg, const char *name, const char *text, size_t n)
{
    TRY(config_check_text(text, n, name));
    config_loader ld = { .name = name, .rd = { .text = text }, .version = 1 };
    ld.cfg = malloc(sizeof *ld.cfg);
    if (!ld.cfg) {
        log_error0("%s: out of memory for a copy of the config", name);
        return STATUS_NOMEM;
    }
    *ld.cfg = *cfg;
    status st = config_parse(&ld);
    if (st == STATUS_OK && ld.cfg->compat) ld.cfg->compat_ops->defaults(ld.cfg, ld.version, ld.set_at, name);
    if (st == STATUS_OK) *cfg = *ld.cfg;
    free(ld.cfg);
    return st;
}

status config_load_file(config *cfg, const char *path)
{
    CHECK(cfg && path, "config_load_file needs a config and a path");
    /* never blocks: a FIFO or a device as --config is refused, not waited on */
    int fd;
    struct stat sb;
    char why[256];
    if (path_open_regular(path, &fd, &sb, CONFIG_FILE_MAX, why, sizeof why) != 0) {
        log_error0("%s: config file %s", path, why);
        return STATUS_INPUT;
    }
    size_t n = (size_t)sb.st_size;
    char *text = malloc(n + 1);
    if (!text) {
        close(fd);
        log_error0("%s: out of memory for the config file", path);
        return STATUS_NOMEM;
    }
    int rc = path_read_all_at(fd, text, n, 0);
    int err = errno;
    close(fd);
    if (rc != 0) {
        log_error0("%s: cannot read config file: %s", path, err ? strerror(err) : "it shrank while being read");
        free(text);
        return STATUS_INPUT;
    }
    text[n] = '\0';
    status st = config_load(cfg, path, text, n);
    free(text);
    return st;
}

status config_load_string(config *cfg, const char *text, const char *name)
{
    CHECK(cfg && text && name, "config_load_string needs a config, text and a name");
    return config_load(cfg, name, text, strlen(text));
}

/* Copies s[0..n) without surrounding blanks, as libinih does for file values. */
static size_t config_trim(const char *s, size_t n, char *out, size_t cap)
{
    while (n && isspace((unsigned char)*s)) { s++; n--; }
    while (n && isspace((unsigned char)s[n - 1])) n--;
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), s);
    return n;
}

status config_set(config *cfg, const char *assignment)
{
    CHECK(cfg && assignment, "config_set needs a config and an assignment");
    char where[CONFIG_STR_MAX + 128], key[256], value[CONFIG_STR_MAX + 2];
    snprintf(where, sizeof where, "--set %s", assignment);
    const char *eq = strchr(assignment, '=');
    config_trim(assignment, eq ? (size_t)(eq - assignment) : 0, key, sizeof key);
    char *dot = strrchr(key, '.');
    if (!eq || !dot || dot == key || !dot[1]) {
        log_error0("%s: expected section.key=value", where);
        return STATUS_INPUT;
    }
    *dot = '\0';
    int k = config_find_pair(cfg->schema, cfg->nkeys, key, dot + 1);
    if (k < 0 && cfg->compat) k = cfg->compat_ops->lookup(cfg, key, dot + 1, where);
    if (k == CONFIG_COMPAT_SKIPPED) return STATUS_OK;
    if (k == CONFIG_COMPAT_UNKNOWN) config_report_unknown(cfg, where, key, dot + 1);
    if (k < 0) return STATUS_INPUT;
    if (config_trim(eq + 1, strlen(eq + 1), value, sizeof value) > CONFIG_STR_MAX) {
        log_error0("%s: value is longer than %d characters", where, CONFIG_STR_MAX);
        return STATUS_INPUT;
    }
    return config_assign(cfg, k, value, where, NULL, 0);
}

/* ---- getters ------------------------------------------------------------------------ */

/* `types` is a bit mask of config_type values the getter serves. */
static const config_value *config_get(const config *cfg, const char *key, unsigned types,
                                      const char *getter)
{
    CHECK(cfg && key, "config getters need a config and a key");
    char what[160];
    snprintf(what, sizeof what, "%s(cfg, \"%s\")", getter, key);
    int k = config_find(cfg, key);
    if (k < 0) die(what, "no such key in the schema", "add it to the app's config_key table or fix the name");
    if (!(types & (1u << cfg->schema[k].type))) {
        char why[64];
        snprintf(why, sizeof why, "the key is a %s", config_type_name[cfg->schema[k].type]);
        die(what, why, "use the getter of the key's type");
    }
    return &cfg->values[k];
}

int64_t config_int(const config *cfg, const char *key)
{
    return config_get(cfg, key, 1u << CONFIG_TYPE_INT, "config_int")->i;
}

double config_float(const config *cfg, const char *key)
{
    return config_get(cfg, key, 1u << CONFIG_TYPE_FLOAT, "config_float")->f;
}

bool config_bool(const config *cfg, const char *key)
{
    return config_get(cfg, key, 1u << CONFIG_TYPE_BOOL, "config_bool")->b;
}

const char *config_str(const config *cfg, const char *key)
{
    return config_get(cfg, key, (1u << CONFIG_TYPE_STRING) | (1u << CONFIG_TYPE_ENUM), "config_str")->text;
}

status config_floats(const config *cfg, const char *key, float *out, int n)
{
    const char *s = config_str(cfg, key), *p = s;
    for (int i = 0; i < n; i++) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || *end != (i == n - 1 ? '\0' : ',')) {
            log_error0("%s = '%s' (%s): expected %d comma-separated numbers", key, s, config_origin(cfg, key), n);
            return STATUS_INPUT;
        }
        out[i] = (float)v, p = end + 1;
    }
    return STATUS_OK;
}

uint64_t config_size(const config *cfg, const char *key)
{
    return config_get(cfg, key, 1u << CONFIG_TYPE_SIZE, "config_size")->u;
}

const char *config_origin(const config *cfg, const char *key)
{
    return config_get(cfg, key, ~0u, "config_origin")->origin;
}

/* ---- output ------------------------------------------------------------------------- */

size_t config_dump(const config *cfg, char *buf, size_t len)
{
    CHECK(cfg && (buf || len == 0), "config_dump needs a config and a buffer");
    config_buf b = { buf, len, 0 };
    if (len) buf[0] = '\0';
    if (cfg->compat) /* the names below are this version's */
        config_buf_printf(&b, "[%s]\n%s = %d\n", CONFIG_VERSION_SECTION, CONFIG_VERSION_KEY, cfg->compat->version);
    for (int k = 0; k < cfg->nkeys; k++) {
        if (!config_first_of_section(cfg->schema, k)) continue;
        config_buf_printf(&b, "%s[%s]\n", b.len ? "\n" : "", cfg->schema[k].section);
        for (int j = k; j < cfg->nkeys; j++) {
            if (strcmp(cfg->schema[j].section, cfg->schema[k].section)) continue;
            const char *text = cfg->values[j].text;
            config_buf_printf(&b, "%s =%s%s\n", cfg->schema[j].name, text[0] ? " " : "", text);
        }
    }
    return b.len;
}

void config_print(const config *cfg, FILE *f)
{
    CHECK(cfg && f, "config_print needs a config and a stream");
    int wkey = 3, wval = 5;
    for (int k = 0; k < cfg->nkeys; k++) {
        int n = (int)(strlen(cfg->schema[k].section) + 1 + strlen(cfg->schema[k].name)), m = (int)strlen(cfg->values[k].text);
        if (n > wkey) wkey = n;
        if (m > wval) wval = m;
    }
    if (wval > 40) wval = 40; /* a long path overflows its row rather than widening every row */
    fprintf(f, "  %-*s  %-*s  %s\n", wkey, "key", wval, "value", "origin");
    for (int k = 0; k < cfg->nkeys; k++) {
        char full[2 * CONFIG_NAME_MAX + 2];
        snprintf(full, sizeof full, "%s.%s", cfg->schema[k].section, cfg->schema[k].name);
        fprintf(f, "  %-*s  %-*s  %s\n", wkey, full, wval, cfg->values[k].text, cfg->values[k].origin);
    }
}

void config_help(const config_key *schema, int nkeys, FILE *f)
{
    CHECK(schema && f && nkeys >= 0, "config_help needs a schema and a stream");
    for (int k = 0; k < nkeys; k++) {
        if (!config_first_of_section(schema, k)) continue;
        fprintf(f, "%s[%s]\n", k ? "\n" : "", schema[k].section);
        for (int j = k; j < nkeys; j++) {
            const config_key *key = &schema[j];
            if (strcmp(key->section, schema[k].section)) continue;
            char type[256];
            config_buf b = { type, sizeof type, 0 };
            config_buf_printf(&b, "%s", config_type_name[key->type]);
            if (key->type == CONFIG_TYPE_ENUM) config_buf_printf(&b, ": %s", key->choices);
            config_range_text(key, &b);
            fprintf(f, "  %s = %s  (%s)\n      %s\n", key->name, key->def, type, key->help ? key->help : "");
        }
    }
}
