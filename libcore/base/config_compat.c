/* config_compat — schema versions while loading: renamed keys read through their old
 * names (a deprecation warning once per key, rank 0), removed keys refused with the
 * reason, defaults that changed kept for files of older versions, the config_version key
 * (docs/compat.md). migrate-config is config_migrate.c.
 *
 * The one decision to know: the history is the app's data, a table handed to
 * config_set_compat (nebula-train's is libcore/train/core/schema.c), and config.c reaches this
 * file only through the function table that call installs, so a program without a history
 * (the fuzzers, the tools with their own schemas) links config.c alone. One table serves
 * every program that reads the trainer's files: an entry whose new key a schema lacks is
 * another program's and is ignored there. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config_impl.h"

/* ---- aliases ---------------------------------------------------------------------- */

static bool config_key_is(const char *full, const char *section, const char *name)
{
    size_t n = strlen(section);
    return full && !strncmp(full, section, n) && full[n] == '.' && !strcmp(full + n + 1, name);
}

/* Schema index of "section.key", or -1. */
static int config_full_index(const config *cfg, const char *full)
{
    const char *dot = full ? strrchr(full, '.') : NULL;
    if (!dot) return -1;
    char section[CONFIG_NAME_MAX + 1];
    snprintf(section, sizeof section, "%.*s", (int)(dot - full), full);
    return config_key_index(cfg, section, dot + 1);
}

/* Entry a of the history that names section.name as its old key, or -1. */
static int config_alias_find(const config_compat *c, const char *section, const char *name)
{
    for (int a = 0; c && a < c->naliases; a++)
        if (c->aliases[a].kind != CONFIG_ALIAS_DEFAULT && config_key_is(c->aliases[a].old_key, section, name)) return a;
    return -1;
}

static const config_compat_ops config_compat_functions;

/* One history serves every app that reads the trainer's files (nebula-train, nebula-bench):
 * an entry whose new key this schema lacks is not this app's and is left out of lookups. */
void config_set_compat(config *cfg, const config_compat *compat)
{
    CHECK(cfg && compat && compat->naliases <= CONFIG_MAX_ALIASES && compat->version >= 1,
          "a compat table of at most CONFIG_MAX_ALIASES entries and a version >= 1");
    for (int a = 0; a < compat->naliases; a++) {
        const config_alias *al = &compat->aliases[a];
        bool ok = al->since >= 2 && al->since <= compat->version;
        if (al->kind != CONFIG_ALIAS_REMOVED) ok = ok && al->new_key && strchr(al->new_key, '.');
        if (al->kind == CONFIG_ALIAS_DEFAULT) ok = ok && al->old_default;
        else ok = ok && al->old_key && config_full_index(cfg, al->old_key) < 0;
        if (al->kind == CONFIG_ALIAS_REMOVED) ok = ok && al->reason;
        if (!ok) die("config_set_compat", "an old key is still in the schema, a field is missing, or a bad version",
                     "fix the app's config_alias table");
    }
    cfg->compat = compat;
    cfg->compat_ops = &config_compat_functions;
}

const char *config_canonical_key(const config *cfg, const char *key)
{
    const char *dot = key ? strrchr(key, '.') : NULL;
    if (!cfg->compat || !dot) return key;
    char section[CONFIG_NAME_MAX + 1];
    snprintf(section, sizeof section, "%.*s", (int)(dot - key), key);
    int a = config_alias_find(cfg->compat, section, dot + 1);
    return a >= 0 && cfg->compat->aliases[a].kind == CONFIG_ALIAS_RENAMED ? cfg->compat->aliases[a].new_key : key;
}

static int config_compat_lookup(config *cfg, const char *section, const char *name, const char *where)
{
    int a = config_alias_find(cfg->compat, section, name);
    if (a < 0) return CONFIG_COMPAT_UNKNOWN;
    const config_alias *al = &cfg->compat->aliases[a];
    int k = al->kind == CONFIG_ALIAS_RENAMED ? config_full_index(cfg, al->new_key) : 0;
    if (k < 0) return CONFIG_COMPAT_UNKNOWN;  /* another app's key */
    if (al->kind == CONFIG_ALIAS_REMOVED) {
        if (cfg->migrating) return CONFIG_COMPAT_SKIPPED;
        log_error0("%s: %s was removed in config_version %d: %s", where, al->old_key, al->since, al->reason);
        return CONFIG_COMPAT_REFUSED;
    }
    if (!(cfg->warned & (1u << a)) && !cfg->migrating)
        log_warn0("%s: %s is deprecated since config_version %d; it is now %s (nebula-train migrate-config "
                  "rewrites the file)", where, al->old_key, al->since, al->new_key);
    cfg->warned |= 1u << a;
    return k;
}

static bool config_compat_version(const config *cfg, const char *value, const char *where, int *version)
{
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (!value[0] || *end || errno || v < 1 || v > cfg->compat->version) {
        log_error0("%s: %s.%s: '%s' is not a config version this program knows; expected an integer in [1, %d] "
                   "(a newer file needs a newer nebula)", where, CONFIG_VERSION_SECTION, CONFIG_VERSION_KEY, value,
                   cfg->compat->version);
        return false;
    }
    *version = (int)v;
    return true;
}

static void config_compat_defaults(config *cfg, int version, const int *set_at, const char *name)
{
    for (int a = 0; a < cfg->compat->naliases; a++) {
        const config_alias *al = &cfg->compat->aliases[a];
        int k = al->kind == CONFIG_ALIAS_DEFAULT ? config_full_index(cfg, al->new_key) : -1;
        if (k < 0 || version >= al->since || set_at[k]) continue;
        char origin[CONFIG_ORIGIN_MAX];
        snprintf(origin, sizeof origin, "%.200s (config_version %d)", name, version);
        CHECK(config_assign_text(cfg, k, al->old_default, origin), "an old default parses (config_set_compat)");
    }
}

static const config_compat_ops config_compat_functions = {
    config_compat_lookup, config_compat_version, config_compat_defaults,
};
