/* config — typed INI configuration: a schema per app, defaults, files, --set overrides.
 *
 * Each app declares a static const table of config_key; config_init resolves the
 * defaults, config_load_file and config_set overwrite them in the order the app calls
 * them (file first, then --set, so the command line wins), and every value remembers
 * where it came from. Files are parsed by libinih; this module only checks keys and
 * values against the schema.
 *
 * The one decision to know: every value is kept as canonical text next to its typed
 * form, and config_dump writes that text, so a dumped config (stored in checkpoints)
 * loads back to bit-identical values. Values that INI cannot carry (control characters,
 * a ';' that would start an inline comment) are refused when set, not when dumped.
 *
 *   static const config_key schema[] = {
 *       { "train", "lr",    CONFIG_TYPE_FLOAT, "3e-4", .min = 0, .max = 1, .help = "peak learning rate" },
 *       { "train", "optim", CONFIG_TYPE_ENUM,  "adamw", .choices = "sgd|adamw", .help = "optimizer" },
 *       { "data",  "shard", CONFIG_TYPE_SIZE,  "256M", .min = 1, .max = INFINITY, .help = "bytes per shard" },
 *   };
 *   config cfg;
 *   config_init(&cfg, schema, (int)(sizeof schema / sizeof schema[0]));
 *   TRY(config_load_file(&cfg, path));
 *   TRY(config_set(&cfg, "train.lr=1e-3"));
 *   double lr = config_float(&cfg, "train.lr");
 */
#ifndef NEBULA_CONFIG_H
#define NEBULA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"

#define CONFIG_MAX_KEYS   128  /* keys per schema */
#define CONFIG_STR_MAX    1024 /* characters in a value (STRING values, paths) */
#define CONFIG_ORIGIN_MAX 256  /* characters in an origin; long paths keep their tail */
#define CONFIG_NAME_MAX   49   /* characters in a section or key name: libinih truncates at 50 */

typedef enum config_type {
    CONFIG_TYPE_INT,    /* int64_t, decimal */
    CONFIG_TYPE_FLOAT,  /* double, finite */
    CONFIG_TYPE_BOOL,   /* true/false, 1/0, yes/no, on/off (any case) */
    CONFIG_TYPE_STRING, /* up to CONFIG_STR_MAX characters */
    CONFIG_TYPE_ENUM,   /* one of `choices` */
    CONFIG_TYPE_SIZE,   /* uint64_t bytes; suffix K/M/G/T or KiB/MiB/GiB/TiB = powers of 1024 */
} config_type;

/* One schema entry. Range: min == max == 0 means unbounded; use -INFINITY or INFINITY
 * for a one-sided range. Both bounds are inclusive. */
typedef struct config_key {
    const char *section; /* INI section, e.g. "train" */
    const char *name;    /* key within the section, e.g. "lr"; no '.' */
    config_type type;    /* how the text is parsed and checked */
    const char *def;     /* default, written as it would be in a file */
    double min;          /* lower bound for INT, FLOAT, SIZE */
    double max;          /* upper bound for INT, FLOAT, SIZE */
    const char *choices; /* ENUM only: "a|b|c" */
    const char *help;    /* one line for --help */
} config_key;

typedef struct config_value {
    union {
        int64_t i;                       /* INT */
        double f;                        /* FLOAT */
        bool b;                          /* BOOL */
        uint64_t u;                      /* SIZE */
    };
    char text[CONFIG_STR_MAX + 1];       /* canonical text: what config_dump writes; the STRING/ENUM value */
    char origin[CONFIG_ORIGIN_MAX];      /* "default", "FILE:LINE" or "--set" */
} config_value;

/* ---- schema versions (config_compat.c, docs/compat.md) ------------------------------
 * A file may say which schema version it was written for: `[nebula] config_version = N`
 * (CONFIG_VERSION_SECTION, CONFIG_VERSION_KEY); a file without it is version 1. An app
 * hands config_set_compat its history: the keys later versions renamed (still read, with
 * a deprecation warning), removed (refused with the reason) or whose default changed
 * (a file of an older version keeps the default it was written against). */
#define CONFIG_VERSION_SECTION "nebula"
#define CONFIG_VERSION_KEY     "config_version"
#define CONFIG_MAX_ALIASES     32 /* entries in an app's compat table */

typedef enum config_alias_kind {
    CONFIG_ALIAS_RENAMED, /* old_key now reads new_key: same value, same meaning */
    CONFIG_ALIAS_REMOVED, /* old_key is refused; `reason` says why and what replaces it */
    CONFIG_ALIAS_DEFAULT, /* new_key's default changed in `since`; older files keep old_default */
} config_alias_kind;

typedef struct config_alias {
    config_alias_kind kind;  /* what happened to the key */
    int since;               /* the first schema version with the change */
    const char *old_key;     /* "section.key" as older versions spelt it (RENAMED, REMOVED) */
    const char *new_key;     /* "section.key" now (RENAMED, DEFAULT) */
    const char *old_default; /* DEFAULT: the value files older than `since` meant */
    const char *reason;      /* REMOVED: why, and what replaces it; others: a note for the report */
} config_alias;

typedef struct config_compat {
    int version;                 /* the current schema version (what dumps and migrations write) */
    const config_alias *aliases; /* the history, oldest first */
    int naliases;                /* at most CONFIG_MAX_ALIASES */
} config_compat;

typedef struct config {
    const config_key *schema;            /* the app's static table, not copied */
    int nkeys;                           /* entries in schema */
    config_value values[CONFIG_MAX_KEYS]; /* values[k] resolves schema[k] */
    const config_compat *compat;         /* renamed/removed keys and versions; NULL: none */
    const struct config_compat_ops *compat_ops; /* config_compat.c's functions (config_impl.h); NULL: none */
    uint32_t warned;                     /* bit a: alias a's deprecation was printed (once per key) */
    bool migrating;                      /* removed keys are skipped, not refused (migrate-config) */
} config;

/* Sets every default; a schema that is malformed or whose defaults do not pass their
 * own checks is a bug and dies. */
status config_init(config *cfg, const config_key *schema, int nkeys);
/* Applies a file on top of the current values. Unknown keys, bad values, syntax errors
 * and keys set twice are each reported as PATH:LINE and give STATUS_INPUT; on any error
 * cfg is left unchanged. The file must be a regular file (a FIFO or a device is refused,
 * never waited on) of at most 1 MiB of text: UTF-8 without NUL bytes or control
 * characters other than tab, CR and LF (the first one is reported as PATH:LINE). */
status config_load_file(config *cfg, const char *path);
/* Same for INI text in memory (a config stored in a checkpoint), with the same text
 * checks; `name` stands in for the path in messages and origins. */
status config_load_string(config *cfg, const char *text, const char *name);
/* One `section.key=value` from --set; origin "--set". */
status config_set(config *cfg, const char *assignment);

/* Schema history for files, --set and stored configs (see config_compat above). Also
 * makes config_dump write the version. */
void config_set_compat(config *cfg, const config_compat *compat);
/* The current name of `key` ("section.key"), following a rename; key itself otherwise. */
const char *config_canonical_key(const config *cfg, const char *key);
/* Rewrites the config file `in` to the current schema version into `out` (atomically,
 * temp + rename) and prints a report to `report`: each key converted, defaulted or
 * impossible. Returns 0 (fully automatic), 1 (something needs a person; `out` is still
 * written, the removed keys commented out), 2 (bad input: nothing written). Refuses
 * out == in (the same file) unless in_place. */
int config_migrate(const config *empty, const char *in, const char *out, bool in_place, FILE *report);

/* Getters take "section.key"; a key missing from the schema or of another type dies. */
int64_t config_int(const config *cfg, const char *key);
double config_float(const config *cfg, const char *key);
bool config_bool(const config *cfg, const char *key);
const char *config_str(const config *cfg, const char *key); /* STRING and ENUM */
uint64_t config_size(const config *cfg, const char *key);
/* A STRING key holding n comma-separated numbers (e.g. data.mean = 0.5,0.5,0.5) into
 * out[n]; STATUS_INPUT, logged with the key and its origin, when it holds anything else. */
status config_floats(const config *cfg, const char *key, float *out, int n);
const char *config_origin(const config *cfg, const char *key);

/* INI text of the resolved values, sections in schema order. Writes at most len bytes
 * including the NUL and returns the length it needed without the NUL (like snprintf). */
size_t config_dump(const config *cfg, char *buf, size_t len);
/* key / value / origin table for rank 0 at start-up. */
void config_print(const config *cfg, FILE *f);
/* Every key with type, default, range or choices and help, for --help. */
void config_help(const config_key *schema, int nkeys, FILE *f);

#endif
