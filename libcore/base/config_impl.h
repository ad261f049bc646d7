/* config_impl — what config.c and config_compat.c share inside the module. */
#ifndef NEBULA_CONFIG_IMPL_H
#define NEBULA_CONFIG_IMPL_H

#include "config.h"

/* Results of config_compat_lookup besides a schema index. */
enum {
    CONFIG_COMPAT_UNKNOWN = -1, /* not in the history either: report an unknown key */
    CONFIG_COMPAT_REFUSED = -2, /* a removed key, reported with its reason */
    CONFIG_COMPAT_SKIPPED = -3, /* a removed key while migrating: ignored */
};

/* config_compat.c's part of loading, reached through the config (config_set_compat sets
 * it) so that a program without a history links config.c alone. */
typedef struct config_compat_ops {
    /* The schema index `section`.`name` now reads, after a rename (deprecation printed
     * once per key, naming `where`: FILE:LINE or --set ...), or one of the results above. */
    int (*lookup)(config *cfg, const char *section, const char *name, const char *where);
    /* Parses a config_version value; false (reported at `where`) when it is no version
     * this app knows. */
    bool (*version)(const config *cfg, const char *value, const char *where, int *version);
    /* After a file of schema version `version` loaded: the keys whose default changed
     * after it and that the file did not set (set_at[k] == 0) get the default it was
     * written against. */
    void (*defaults)(config *cfg, int version, const int *set_at, const char *name);
} config_compat_ops;
/* Index of `section`.`name` in the schema, or -1 (config.c). */
int config_key_index(const config *cfg, const char *section, const char *name);
/* Sets key k from text as config_set would, origin `origin`; false when the text does not parse. */
bool config_assign_text(config *cfg, int k, const char *text, const char *origin);

#endif
