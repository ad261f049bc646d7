/* control — see control.h. Hand-written rather than libinih: a file of three keys
 * does not need sections or continuations, and a parser that sees every byte can
 * refuse what libinih would silently cut (a NUL ends its line, a long line is split). */
#include "control.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s[0..*n) without surrounding blanks (space, tab, CR). */
static const char *control_trim(const char *s, size_t *n)
{
    while (*n && (*s == ' ' || *s == '\t' || *s == '\r')) { s++; (*n)--; }
    while (*n && (s[*n - 1] == ' ' || s[*n - 1] == '\t' || s[*n - 1] == '\r')) (*n)--;
    return s;
}

/* One key = value (both trimmed, value without its comment); 0 or -1 with why. */
static int control_pair(train_control_request *req, const char *key, size_t kn, const char *v, size_t vn,
                        char *why, size_t why_len)
{
    bool is_world = kn == 5 && !memcmp(key, "world", 5);
    bool is_batch = kn == 12 && !memcmp(key, "global_batch", 12);
    bool is_tp = kn == 2 && !memcmp(key, "tp", 2), is_pp = kn == 2 && !memcmp(key, "pp", 2);
    if (is_world || is_batch || is_tp || is_pp) {
        long max = is_batch ? TRAIN_CONTROL_MAX_BATCH : is_world ? TRAIN_CONTROL_MAX_WORLD : TRAIN_CONTROL_MAX_GRID;
        long x = 0;
        bool ok = vn > 0 && vn <= 10;
        for (size_t i = 0; ok && i < vn; i++) {
            ok = isdigit((unsigned char)v[i]);
            x = x * 10 + (v[i] - '0');
        }
        if (!ok || x < 1 || x > max) {
            snprintf(why, why_len, "%.*s = '%.*s': expected an integer in [1, %ld]", (int)kn, key,
                     (int)(vn < 32 ? vn : 32), v, max);
            return -1;
        }
        long *slot = is_world ? &req->world : is_batch ? &req->global_batch : is_tp ? &req->tp : &req->pp;
        if (*slot) {
            snprintf(why, why_len, "%.*s is given twice", (int)kn, key);
            return -1;
        }
        *slot = x;
        return 0;
    }
    if (kn == 7 && !memcmp(key, "lr_rule", 7)) {
        static const char *const rules[] = { "linear", "sqrt", "none" };
        for (int i = 0; i < 3; i++) {
            if (vn != strlen(rules[i]) || memcmp(v, rules[i], vn)) continue;
            if (req->rule[0]) {
                snprintf(why, why_len, "lr_rule is given twice");
                return -1;
            }
            snprintf(req->rule, sizeof req->rule, "%s", rules[i]);
            return 0;
        }
        snprintf(why, why_len, "lr_rule = '%.*s': valid values are linear, sqrt, none", (int)(vn < 32 ? vn : 32), v);
        return -1;
    }
    snprintf(why, why_len, "unknown key '%.*s' (valid keys: %s)", (int)(kn < 48 ? kn : 48), key, TRAIN_CONTROL_KEYS);
    return -1;
}

typedef int control_pair_fn(void *req, const char *key, size_t kn, const char *v, size_t vn, char *why,
                            size_t why_len);

static int control_pair_elastic(void *req, const char *key, size_t kn, const char *v, size_t vn, char *why,
                                size_t why_len)
{
    return control_pair(req, key, kn, v, vn, why, why_len);
}

/* A decimal integer in [lo, hi] into *x; false otherwise. */
static bool control_integer(const char *v, size_t vn, long lo, long hi, long *x)
{
    bool ok = vn > 0 && vn <= 12;
    *x = 0;
    for (size_t i = 0; ok && i < vn; i++) {
        ok = isdigit((unsigned char)v[i]);
        *x = *x * 10 + (v[i] - '0');
    }
    return ok && *x >= lo && *x <= hi;
}

static int reload_pair(void *arg, const char *key, size_t kn, const char *v, size_t vn, char *why, size_t why_len)
{
    train_reload_request *req = arg;
    long x;
    if (kn == 7 && !memcmp(key, "version", 7)) {
        if (req->version) {
            snprintf(why, why_len, "version is given twice");
            return -1;
        }
        if (!control_integer(v, vn, 1, TRAIN_RELOAD_MAX_VERSION, &x)) {
            snprintf(why, why_len, "version = '%.*s': expected an integer in [1, %d]", (int)(vn < 32 ? vn : 32), v,
                     TRAIN_RELOAD_MAX_VERSION);
            return -1;
        }
        req->version = x;
        return 0;
    }
    bool at = kn == 7 && !memcmp(key, "at_step", 7), applied = kn == 12 && !memcmp(key, "applied_step", 12);
    if (at || applied) {
        long *slot = at ? &req->at_step : &req->applied_step;
        if (*slot >= 0 || !control_integer(v, vn, 0, 999999999999L, &x)) {
            snprintf(why, why_len, "%.*s = '%.*s': given twice or not a step number", (int)kn, key,
                     (int)(vn < 32 ? vn : 32), v);
            return -1;
        }
        *slot = x;
        return 0;
    }
    if (kn == 4 && !memcmp(key, "undo", 4)) {
        if (req->undo || vn != 4 || memcmp(v, "true", 4)) {
            snprintf(why, why_len, "undo = '%.*s': given twice, or not 'true'", (int)(vn < 32 ? vn : 32), v);
            return -1;
        }
        req->undo = 1;
        return 0;
    }
    const char *dot = memchr(key, '.', kn);
    if (!dot || dot == key || dot == key + kn - 1 || memchr(dot + 1, '.', kn - (size_t)(dot + 1 - key))) {
        snprintf(why, why_len, "unknown key '%.*s' (valid: version, undo, at_step, or a config key SECTION.KEY)",
                 (int)(kn < 48 ? kn : 48), key);
        return -1;
    }
    for (size_t i = 0; i < kn; i++)
        if (!(isalnum((unsigned char)key[i]) || key[i] == '_' || key[i] == '.')) {
            snprintf(why, why_len, "'%.*s' is not a config key (letters, digits, '_' and one '.')",
                     (int)(kn < 48 ? kn : 48), key);
            return -1;
        }
    if (kn > TRAIN_RELOAD_MAX_KEY || vn > TRAIN_RELOAD_MAX_VALUE) {
        snprintf(why, why_len, "'%.*s': key longer than %d or value longer than %d characters", (int)(kn < 48 ? kn : 48),
                 key, TRAIN_RELOAD_MAX_KEY, TRAIN_RELOAD_MAX_VALUE);
        return -1;
    }
    for (int i = 0; i < req->nsets; i++)
        if (strlen(req->key[i]) == kn && !memcmp(req->key[i], key, kn)) {
            snprintf(why, why_len, "%.*s is given twice", (int)kn, key);
            return -1;
        }
    if (req->nsets == TRAIN_RELOAD_MAX_SETS) {
        snprintf(why, why_len, "more than %d keys in one request", TRAIN_RELOAD_MAX_SETS);
        return -1;
    }
    memcpy(req->key[req->nsets], key, kn);
    req->key[req->nsets][kn] = '\0';
    memcpy(req->value[req->nsets], v, vn);
    req->value[req->nsets][vn] = '\0';
    req->nsets++;
    return 0;
}

/* One line without its '\n'; 0 or -1 with why. */
static int control_line(void *req, control_pair_fn *pair, const char *keys, const char *s, size_t n, char *why,
                        size_t why_len)
{
    if (n > TRAIN_CONTROL_MAX_LINE) {
        snprintf(why, why_len, "line longer than %d characters", TRAIN_CONTROL_MAX_LINE);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t' && c != '\r') || c >= 0x7f) {
            snprintf(why, why_len, "byte 0x%02x at column %zu: a control file is ASCII text (binary file?)", c, i + 1);
            return -1;
        }
    }
    s = control_trim(s, &n);
    if (n == 0 || s[0] == '#' || s[0] == ';') return 0;
    if (s[0] == '[') {
        snprintf(why, why_len, "'%.*s': the file has no sections (valid keys: %s)", (int)(n < 48 ? n : 48), s, keys);
        return -1;
    }
    const char *eq = memchr(s, '=', n);
    if (!eq) {
        snprintf(why, why_len, "expected key=value (valid keys: %s)", keys);
        return -1;
    }
    size_t kn = (size_t)(eq - s), vn = n - kn - 1;
    const char *key = control_trim(s, &kn), *v = eq + 1;
    for (size_t i = 0; i < vn; i++)
        if (v[i] == '#' || v[i] == ';') vn = i;
    v = control_trim(v, &vn);
    return pair(req, key, kn, v, vn, why, why_len);
}

/* Every line of text through control_line; 0, or -1 with *line the line at fault. */
static int control_lines(void *req, control_pair_fn *pair, const char *keys, const char *text, size_t len, int *line,
                         char *why, size_t why_len)
{
    *line = 0;
    if (len > TRAIN_CONTROL_MAX_BYTES) {
        snprintf(why, why_len, "longer than %d bytes: not a control or reload file", TRAIN_CONTROL_MAX_BYTES);
        return -1;
    }
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        (*line)++;
        if (control_line(req, pair, keys, text + at, n, why, why_len) != 0) return -1;
        at += n + 1;
    }
    *line = 0;
    return 0;
}

int train_control_parse(const char *text, size_t len, train_control_request *req, int *line, char *why,
                        size_t why_len)
{
    memset(req, 0, sizeof *req);
    if (control_lines(req, control_pair_elastic, TRAIN_CONTROL_KEYS, text, len, line, why, why_len) == 0) return 0;
    memset(req, 0, sizeof *req);
    return -1;
}

int train_reload_parse(const char *text, size_t len, train_reload_request *req, int *line, char *why,
                       size_t why_len)
{
    memset(req, 0, sizeof *req);
    req->at_step = req->applied_step = -1;
    int rc = control_lines(req, reload_pair, "version, undo, at_step, SECTION.KEY", text, len, line, why, why_len);
    if (rc == 0 && !req->version) {
        snprintf(why, why_len, "no version line: a request says which version it is (version = N)");
        rc = -1;
    } else if (rc == 0 && req->undo == (req->nsets > 0)) {
        snprintf(why, why_len, req->undo ? "undo = true and config keys in one request: undo is a request of its own"
                                         : "nothing to change: give at least one SECTION.KEY = value, or undo = true");
        rc = -1;
    }
    if (rc == 0) return 0;
    memset(req, 0, sizeof *req);
    req->at_step = req->applied_step = -1;
    return -1;
}
