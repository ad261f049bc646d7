/* info — what a checkpoint holds, as text for people or one JSON document for
 * scripts (the same facts in both): where it is and whether loaders trust it, the
 * header, the state of the run it carries (optimizer moments, buffers, loader
 * position, DGC-Pro, RNG), every tensor and blob, and the stored config. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_tool.h"
#include "data/data.h"

static const char *commit_str(ckpt_commit c)
{
    return c == CKPT_COMMIT_YES ? "committed" : c == CKPT_COMMIT_NO ? "uncommitted" : "damaged";
}

static bool has_group(const ckpt_catalog *cat, const char *prefix)
{
    for (int k = 0; k < cat->n; k++)
        if (!strncmp(cat->items[k].path, prefix, strlen(prefix))) return true;
    return false;
}

/* nebula-train's optimizers: AdamW keeps m and v, SGD with momentum m alone. */
static const char *optimizer(const ckpt_catalog *cat)
{
    bool m = has_group(cat, "/" TRAIN_CKPT_OPTIM_M "/"), v = has_group(cat, "/" TRAIN_CKPT_OPTIM_V "/");
    return m && v ? "adamw" : m ? "sgd" : "none";
}

/* The loader position (nebula-train's data_state, the same in every row): false
 * when the blob is absent, of another size, or unreadable. */
static bool loader_state(const ckpt_catalog *cat, data_state *s)
{
    const ckpt_dataset *d = ckpt_catalog_find(cat, "/rank/" TRAIN_CKPT_LOADER);
    return d && d->dims[1] == sizeof *s && ckpt_catalog_read_row(cat, d, 0, s) == STATUS_OK;
}

static void shape_str(const ckpt_dataset *d, char *out, size_t len)
{
    int n = snprintf(out, len, "(");
    for (int k = 0; k < d->ndim && n < (int)len; k++)
        n += snprintf(out + n, len - (size_t)n, k ? ", %" PRIu64 : "%" PRIu64, d->dims[k]);
    if (n < (int)len) snprintf(out + n, len - (size_t)n, ")");
}

static void print_text(const ckpt_catalog *cat)
{
    const ckpt_header *h = &cat->h;
    printf("checkpoint  %s (%s, %" PRIu64 " bytes)\n", cat->dir, cat->file, cat->file_bytes);
    printf("commit      %s", commit_str(cat->commit));
    if (cat->marker_step >= 0) printf(" (COMMITTED says step %" PRId64 ")", cat->marker_step);
    printf("%s\n", cat->commit == CKPT_COMMIT_YES ? "" : ": loaders do not trust it");
    printf("format      NEBULA-CKPT version %d (this build writes %d), written by nebula %s\n", h->version,
           CKPT_FORMAT_VERSION, h->nebula_version[0] ? h->nebula_version : "(unknown)");
    printf("step        %" PRId64 "\n", h->step);
    printf("model       %s (table_hash %016" PRIx64 ")\n", h->model, h->table_hash);
    printf("world       %d ranks, %d per node", h->world_size, h->ranks_per_node);
    if (h->resharded_from) printf(" (resharded offline from %d ranks: every blob row is rank 0's)", h->resharded_from);
    printf("\nparallel    dp %d x tp %d x pp %d, ZeRO stage %d%s\n", h->layout.dp, h->layout.tp, h->layout.pp,
           h->layout.zero_stage, h->layout_recorded ? "" : " (not recorded before format version 2: data parallel "
           "implied)");
    printf("optimizer   %s\n", !strcmp(optimizer(cat), "adamw") ? "AdamW moments (optim/m, optim/v)"
                                 : !strcmp(optimizer(cat), "sgd") ? "SGD momentum (optim/m)" : "no optimizer state");
    printf("buffers     %s\n", has_group(cat, "/" TRAIN_CKPT_BUFFERS "/") ? "batch-norm running statistics (buffers)" : "none");
    data_state ls;
    if (loader_state(cat, &ls))
        printf("loader      epoch %" PRIu64 ", next global sample %" PRIu64 " (the same on every rank)\n", ls.epoch,
               ls.cursor);
    else
        printf("loader      %s\n", ckpt_catalog_find(cat, "/rank/" TRAIN_CKPT_LOADER) ? "present, not nebula-train's 16-byte "
               "position" : "none");
    const ckpt_dataset *dgc = ckpt_catalog_find(cat, "/rank/" TRAIN_CKPT_DGC);
    if (dgc) printf("dgc         DGC-Pro state: %" PRIu64 " rows of %" PRIu64 " bytes (velocities, residuals and "
                    "decisions of each rank's slice)\n", dgc->dims[0], dgc->dims[1]);
    else printf("dgc         none (trained without DGC-Pro)\n");
    printf("rng         %s\n", ckpt_catalog_find(cat, "/rank/rng") ? "per-rank RNG states (/rank/rng)"
                               : "not stored: every stream is counter-based on (seed, rank, purpose, step)");
    printf("\n%-56s %-8s %-16s %12s %10s %8s\n", "dataset", "dtype", "shape", "bytes", "offset", "checksum");
    uint64_t total = 0;
    for (int k = 0; k < cat->n; k++) {
        const ckpt_dataset *d = &cat->items[k];
        char shape[96], crc[16] = "-", off[24] = "-";
        shape_str(d, shape, sizeof shape);
        if (d->has_checksum) snprintf(crc, sizeof crc, "%08x", d->checksum);
        if (d->offset != UINT64_MAX) snprintf(off, sizeof off, "%" PRIu64, d->offset);
        printf("%-56s %-8s %-16s %12" PRIu64 " %10s %8s\n", d->path, d->dtype, shape, d->bytes, off, crc);
        total += d->bytes;
    }
    printf("%d datasets, %" PRIu64 " bytes of data\n\nconfig (as the run resolved it):\n", cat->n, total);
    for (const char *l = cat->config; *l;) {
        const char *nl = strchr(l, '\n');
        int len = nl ? (int)(nl - l) : (int)strlen(l);
        printf("  %.*s\n", len, l);
        l += len + (nl != NULL);
    }
}

static json_t *dataset_json(const ckpt_dataset *d)
{
    json_t *shape = json_array();
    for (int k = 0; k < d->ndim; k++) json_array_append_new(shape, json_integer((json_int_t)d->dims[k]));
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", d->checksum);
    json_t *offset = d->offset == UINT64_MAX ? json_null() : json_integer((json_int_t)d->offset);
    return json_pack("{s:s, s:s, s:o, s:I, s:o, s:o}", "name", d->path, "dtype", d->dtype, "shape", shape, "bytes",
                     (json_int_t)d->bytes, "offset", offset, "checksum", d->has_checksum ? json_string(crc) : json_null());
}

static json_t *state_json(const ckpt_catalog *cat)
{
    data_state ls;
    const ckpt_dataset *dgc = ckpt_catalog_find(cat, "/rank/" TRAIN_CKPT_DGC);
    return json_pack("{s:s, s:b, s:o, s:o, s:b}", "optimizer", optimizer(cat), TRAIN_CKPT_BUFFERS,
                     has_group(cat, "/" TRAIN_CKPT_BUFFERS "/"), TRAIN_CKPT_LOADER, loader_state(cat, &ls) ?
                         json_pack("{s:I, s:I}", "epoch", (json_int_t)ls.epoch, "cursor", (json_int_t)ls.cursor) :
                         json_null(), TRAIN_CKPT_DGC, dgc ? json_pack("{s:I, s:I}", "rows", (json_int_t)dgc->dims[0],
                                                             "row_bytes", (json_int_t)dgc->dims[1]) : json_null(),
                     "rng", ckpt_catalog_find(cat, "/rank/rng") != NULL);
}

static void print_json(const ckpt_catalog *cat)
{
    const ckpt_header *h = &cat->h;
    char hash[24];
    snprintf(hash, sizeof hash, "%016" PRIx64, h->table_hash);
    json_t *tensors = json_array(), *blobs = json_array();
    for (int k = 0; k < cat->n; k++)
        json_array_append_new(cat->items[k].blob ? blobs : tensors, dataset_json(&cat->items[k]));
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:o, s:s, s:i, s:i, s:s, s:I, s:s, s:s, s:i, s:i, s:o, s:o, s:s, "
                          "s:o, s:o}", "path", cat->dir, "file", cat->file, "file_bytes", (json_int_t)cat->file_bytes,
                          "commit", commit_str(cat->commit), "marker_step",
                          cat->marker_step >= 0 ? json_integer(cat->marker_step) : json_null(), "magic", "NEBULA-CKPT",
                          "format_version", h->version, "current_format_version", CKPT_FORMAT_VERSION,
                          "nebula_version", h->nebula_version, "step", (json_int_t)h->step, "model", h->model,
                          "table_hash", hash, "world_size", h->world_size, "ranks_per_node", h->ranks_per_node,
                          "resharded_from", h->resharded_from ? json_integer(h->resharded_from) : json_null(),
                          "state", state_json(cat), "config", cat->config, "tensors", tensors, "blobs", blobs);
    json_object_set_new(j, "layout", h->layout_recorded ? json_pack("{s:i, s:i, s:i, s:i}", "dp", h->layout.dp, "tp",
                                                                    h->layout.tp, "pp", h->layout.pp, "zero_stage",
                                                                    h->layout.zero_stage) : json_null());
    json_dumpf(j, stdout, JSON_INDENT(1));
    printf("\n");
    json_decref(j);
}

void tool_print_info(const ckpt_catalog *cat, bool json)
{
    if (json) print_json(cat);
    else print_text(cat);
}
