/* ckpt_tool — the pieces of nebula-ckpt: one function per subcommand, the model a
 * checkpoint's stored config describes (for its parameter tables), and the output.
 *
 * The one design decision: nebula-ckpt reads and writes checkpoints only through
 * libcore/ckpt (the catalog, ckpt_load's reader and the saver) and other formats only
 * through libcore/safetensors and libcore/llmc, so what it reports and writes is what
 * nebula-train would load; this folder holds the command line and the presentation.
 * Every status a subcommand ends with was agreed by all ranks. */
#ifndef NEBULA_CKPT_TOOL_H
#define NEBULA_CKPT_TOOL_H

#include <stdbool.h>

#include "ckpt/tool/offline.h"
#include "base/config.h"
#include "nn/model.h"
#include "base/runtime.h"
#include "train/train.h"

/* What a subcommand gets: its positional paths and the parsed options. */
typedef struct tool_args {
    const runtime *rt;
    const config *cfg;          /* the [ckpt] options and, for convert, the [model] keys */
    const char *paths[2];       /* PATH, or A and B for diff */
} tool_args;

/* Each returns the exit code: 0 ok, 1 damaged or different (diff), 2 usage or input. */
int tool_info(const tool_args *a);
int tool_verify(const tool_args *a);
int tool_diff(const tool_args *a);
int tool_reshard(const tool_args *a);
int tool_upgrade(const tool_args *a);
int tool_convert(const tool_args *a);

/* A model built only for its tables (one micro-batch of one token, no gradients;
 * its parameter buffer receives what a conversion reads), and the [model] section it
 * was built from. */
typedef struct tool_model {
    model m;
    char ini[4096];             /* its [model] section, as config_dump writes it */
} tool_model;

/* A config of the [model] keys alone, at their defaults. */
void tool_model_config(config *mc);
/* From the [model] keys of cfg (which may hold other sections). file_bytes: the size of
 * the file the sizes come from (origin), which must be able to hold the model, checked
 * before anything is allocated (0: no such file). STATUS_INPUT, logged. */
status tool_model_from_config(tool_model *tm, const config *cfg, const char *origin, uint64_t file_bytes);
/* From INI text with a [model] section (a checkpoint's stored config, a converted
 * file's metadata), named `origin` in messages; want: the model it must describe, or
 * NULL. STATUS_INPUT, logged. */
status tool_model_from_ini(tool_model *tm, const char *ini, const char *origin, const char *want, uint64_t file_bytes);
void tool_model_free(tool_model *tm);

/* A group of the checkpoint format (train.h's TRAIN_CKPT_*, the trainer's schema) with
 * the model's table for it (train_ckpt_group_table). With data, the group's
 * memory: the model's own for params and buffers, zeros allocated here for the
 * moments (tool_content_free). STATUS_INPUT, logged naming origin, for a group the
 * model does not keep. */
status tool_add_group(ckpt_content *c, model *m, const char *name, bool data, const char *origin);
/* Every group cat holds (the moments only when asked), as tool_add_group makes it. */
status tool_content(ckpt_content *c, const ckpt_catalog *cat, model *m, bool data, bool moments);
void tool_content_free(ckpt_content *c, model *m);
/* A flat buffer of t's layout, zero (padding included); NULL when out of memory. */
float *tool_zeros(const param_table *t);

/* Rank 0's info as text or one JSON document. */
void tool_print_info(const ckpt_catalog *cat, bool json);

#endif
