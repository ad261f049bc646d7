/* reload_history — the hot-reload history as a checkpoint holds it (the blob "reload",
 * JSON text; its layout is described in reload.c): the one parser of it, which the resume
 * (train_reload_resume) applies to the run's config and the load's value check
 * (train_reload_check_blob) tries on a scratch config, so a history the resume would refuse
 * makes the load refuse the checkpoint by name, and `auto` falls back past it. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "rules.h"

int train_reload_ini_add(char *ini, size_t cap, const char *key, const char *value)
{
    const char *dot = strchr(key, '.');
    size_t n = strlen(ini);
    int w = snprintf(ini + n, cap - n, "[%.*s]\n%s = %s\n", (int)(dot - key), key, dot + 1, value);
    return w < 0 || (size_t)w >= cap - n ? -1 : 0;
}

/* A key or value of the history that the INI lines below cannot carry as one assignment. */
static bool reload_text_ok(const char *t, size_t most)
{
    return t && strlen(t) <= most && !strpbrk(t, "\n\r");
}

int train_reload_history_parse(const char *text, long *seen, char *ini, size_t cap, char *why, size_t len)
{
    json_error_t err;
    json_t *h = json_loads(text, 0, &err), *base = json_object_get(h, "base"), *entries = json_object_get(h, "entries");
    if (!json_is_object(h) || !json_is_integer(json_object_get(h, "seen")) || !json_is_object(base) ||
        !json_is_array(entries)) {
        snprintf(why, len, "not readable (%s)", h ? "unexpected layout: an object with seen, base and entries" : err.text);
        json_decref(h);
        return -1;
    }
    *seen = (long)json_integer_value(json_object_get(h, "seen"));
    ini[0] = '\0';
    const char *key;
    json_t *val, *e, *ch;
    size_t i, j;
    int bad = 0;
    json_object_foreach(base, key, val) {
        const char *v = json_string_value(val);
        if (!strchr(key, '.') || !reload_text_ok(key, TRAIN_RELOAD_MAX_KEY) || !reload_text_ok(v, TRAIN_RELOAD_MAX_VALUE))
            bad = 1;
        else bad |= train_reload_ini_add(ini, cap, key, v);
    }
    json_array_foreach(entries, i, e) json_array_foreach(json_object_get(e, "changes"), j, ch) {
        const char *k = json_string_value(json_object_get(ch, "key")), *v = json_string_value(json_object_get(ch, "new"));
        if (!k || !strchr(k, '.') || !reload_text_ok(k, TRAIN_RELOAD_MAX_KEY) || !reload_text_ok(v, TRAIN_RELOAD_MAX_VALUE))
            bad = 1;
        else bad |= train_reload_ini_add(ini, cap, k, v);
    }
    json_decref(h);
    if (bad) {
        snprintf(why, len, "holds a change that is not a config assignment (a string \"section.key\" and a string value "
                 "of one line)");
        return -1;
    }
    return 0;
}

int train_reload_history_apply(config *cfg, const char *ini, bool hold, char *why, size_t len)
{
    for (const char *p = ini; *p;) {
        const char *eol = strchr(p, '\n'), *next = strchr(eol + 1, '\n') + 1;  /* "[s]\nk = v\n" */
        char one[TRAIN_RELOAD_MAX_KEY + TRAIN_RELOAD_MAX_VALUE + 16], said[512];
        snprintf(one, sizeof one, "%.*s", (int)(next - p), p);
        if (hold) log_capture_held(said, sizeof said);
        else log_capture(said, sizeof said);
        status st = config_load_string(cfg, one, "reload history (checkpoint)");
        log_capture(NULL, 0);
        if (st != STATUS_OK) {
            char *nl = strchr(said, '\n');  /* the message's first line; a HINT may follow */
            if (nl) *nl = '\0';
            snprintf(why, len, "%.*s.%.*s%s%s", (int)(eol - p - 2), p + 1, (int)(next - eol - 2), eol + 1,
                     said[0] ? ": " : "", said);
            return -1;
        }
        p = next;
    }
    return 0;
}

status train_reload_check_blob(const char *dataset, const void *data, size_t bytes, char *why, size_t len)
{
    const char *text = data;
    if (bytes == 0 || !text[0]) return STATUS_OK;  /* no history */
    if (!memchr(text, '\0', bytes)) {
        snprintf(why, len, "%s: the reload history is not NUL-terminated within its %zu bytes", dataset, bytes);
        return STATUS_CORRUPT;
    }
    char what[768] = "";
    size_t cap = TRAIN_CONTROL_MAX_BYTES * 4;
    char *ini = malloc(cap);
    config *scratch = malloc(sizeof *scratch);
    config_key *keys = malloc(CONFIG_MAX_KEYS * sizeof *keys);
    CHECK(ini && scratch && keys, "out of memory checking a reload history");
    long seen;
    int rc = train_reload_history_parse(text, &seen, ini, cap, what, sizeof what);
    if (rc == 0 && ini[0]) {
        int n = train_config_schema(keys, CONFIG_MAX_KEYS);
        CHECK(config_init(scratch, keys, n) == STATUS_OK, "the trainer's schema initialises");
        config_set_compat(scratch, &train_config_compat);
        char said[640] = "";
        rc = train_reload_history_apply(scratch, ini, true, said, sizeof said);
        if (rc != 0) snprintf(what, sizeof what, "holds an assignment the config schema refuses, %s", said);
    }
    free(ini), free(scratch), free(keys);
    if (rc == 0) return STATUS_OK;
    snprintf(why, len, "%s: the reload history %s", dataset, what);
    return STATUS_CORRUPT;
}

void train_ckpt_checks_register(void)
{
    train_ckpt_blob_check_add(TRAIN_CKPT_RELOAD, train_reload_check_blob);
}
