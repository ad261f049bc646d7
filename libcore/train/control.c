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
    if (is_world || is_batch) {
        long max = is_world ? TRAIN_CONTROL_MAX_WORLD : TRAIN_CONTROL_MAX_BATCH;
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
        long *slot = is_world ? &req->world : &req->global_batch;
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

/* One line without its '\n'; 0 or -1 with why. */
static int control_line(train_control_request *req, const char *s, size_t n, char *why, size_t why_len)
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
        snprintf(why, why_len, "'%.*s': the control file has no sections (valid keys: %s)", (int)n, s,
                 TRAIN_CONTROL_KEYS);
        return -1;
    }
    const char *eq = memchr(s, '=', n);
    if (!eq) {
        snprintf(why, why_len, "expected key=value (valid keys: %s)", TRAIN_CONTROL_KEYS);
        return -1;
    }
    size_t kn = (size_t)(eq - s), vn = n - kn - 1;
    const char *key = control_trim(s, &kn), *v = eq + 1;
    for (size_t i = 0; i < vn; i++)
        if (v[i] == '#' || v[i] == ';') vn = i;
    v = control_trim(v, &vn);
    return control_pair(req, key, kn, v, vn, why, why_len);
}

int train_control_parse(const char *text, size_t len, train_control_request *req, int *line, char *why,
                        size_t why_len)
{
    memset(req, 0, sizeof *req);
    *line = 0;
    if (len > TRAIN_CONTROL_MAX_BYTES) {
        snprintf(why, why_len, "longer than %d bytes: not a control file", TRAIN_CONTROL_MAX_BYTES);
        return -1;
    }
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        (*line)++;
        if (control_line(req, text + at, n, why, why_len) != 0) {
            memset(req, 0, sizeof *req);
            return -1;
        }
        at += n + 1;
    }
    *line = 0;
    return 0;
}
