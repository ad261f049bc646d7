/* ckpt_reshard — a checkpoint for another data-parallel size: the offline rewrite of
 * nebula-ckpt reshard, which applies ahead of time the rule ckpt_load applies when a
 * run resumes at another world size (ckpt_reshard_row, with the reader in ckpt_read.c).
 *
 * The one design decision: there is one rule, ckpt_reshard_row, and the offline
 * rewrite gives new rank r exactly the blob row a load at the new size would give
 * rank r (rank 0's), then records resharded_from so that the load of the rewritten
 * file still reports info.resharded. A caller therefore sees the same thing whether
 * it resumes the original at N ranks or the rewritten file: replicated tensors
 * unchanged (parameters and optimizer moments are replicated in data parallelism, so
 * they need no resharding), rank 0's per-rank state, and the flag that tells it to
 * re-derive what depends on the layout (nebula-train: the loader position is a
 * global (epoch, cursor) and stays valid; DGC-Pro's residuals belong to the old
 * layout's slices and restart from zero; no RNG state is stored — every stream is
 * counter-based on (seed, rank, purpose, step)). The tensors go through ckpt_load's
 * reader and out through the synchronous saver, both in parallel over the ranks the
 * tool runs on, and the result is committed like any save. */
#include "tool_impl.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/path.h"

status ckpt_out_root(const ckpt_catalog *cat, const char *out_root, char *root)
{
    if (out_root && out_root[0]) {
        if (strlen(out_root) + 64 >= CKPT_PATH_MAX) {
            log_error0("--out %s: the path is too long", out_root);
            return STATUS_INPUT;
        }
        snprintf(root, CKPT_PATH_MAX, "%s", out_root);
        return STATUS_OK;
    }
    char want[32];
    snprintf(want, sizeof want, "step_%08" PRId64, cat->h.step);
    const char *slash = strrchr(cat->dir, '/'), *base = slash ? slash + 1 : cat->dir;
    if (strcmp(base, want) != 0) {
        log_error0("%s is not named %s: rewriting it in place would write a checkpoint beside it, not replace it",
                   cat->dir, want);
        log_error0("HINT: give --out DIR to write DIR/%s", want);
        return STATUS_INPUT;
    }
    snprintf(root, CKPT_PATH_MAX, "%.*s", slash ? (int)(slash - cat->dir) : 1, slash ? cat->dir : ".");
    if (!root[0]) snprintf(root, CKPT_PATH_MAX, "/");
    return STATUS_OK;
}

static status reshard_check(const ckpt_catalog *cat, int world_size)
{
    if (world_size == cat->h.world_size) {
        log_error0("%s already holds the state of %d ranks: nothing to reshard", cat->dir, world_size);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

/* The file's row every new rank continues from. At another world size
 * ckpt_reshard_row names one row for all of them (rank 0's), so each blob is held as
 * that one row and the saver writes it world_size times (ckpt_plan.same_rows). */
static hsize_t source_row(const ckpt_catalog *cat, int world_size)
{
    hsize_t row = ckpt_reshard_row(cat->h.world_size, world_size, 0);
    for (int r = 1; r < world_size; r++)
        CHECK(ckpt_reshard_row(cat->h.world_size, world_size, r) == row,
              "at another world size every rank continues from the same blob row");
    return row;
}

/* Rank 0: rows[b] = the source row of blob src[b], checked against its row_checksums. */
static status read_rows(const ckpt_catalog *cat, const ckpt_dataset **src, int nblobs, hsize_t row, uint8_t **rows,
                        char *why)
{
    hid_t fapl = ckpt_file_access(MPI_COMM_NULL);
    hid_t f = H5Fopen(cat->file, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        snprintf(why, CKPT_WHY_MAX, "HDF5 cannot open its " CKPT_FILE);
        return STATUS_IO;
    }
    status st = STATUS_OK;
    for (int b = 0; b < nblobs && st == STATUS_OK; b++) st = ckpt_blob_row_read(f, src[b], row, rows[b], why);
    H5Fclose(f);
    return st;
}

/* c's blobs: every blob of the file (src), each held as one row in rows[]. */
static status plan_blobs(const ckpt_catalog *cat, ckpt_content *c, const ckpt_dataset **src, uint8_t **rows)
{
    const size_t prefix = strlen("/rank/");
    c->nblobs = 0;
    for (int k = 0; k < cat->n; k++) {
        const ckpt_dataset *d = &cat->items[k];
        if (!d->blob) continue;
        if (c->nblobs == CKPT_MAX_BLOBS || strlen(d->path) - prefix >= CKPT_GROUP_MAX || d->dims[1] > INT_MAX) {
            log_error0("%s: blob %s is one too many, its name too long or its rows too large (at most %d blobs, "
                       "names of %d bytes, rows below 2 GiB)", cat->file, d->path, CKPT_MAX_BLOBS, CKPT_GROUP_MAX - 1);
            return STATUS_INPUT;
        }
        if (!(rows[c->nblobs] = malloc((size_t)d->dims[1]))) {
            log_error0("cannot allocate %" PRIu64 " bytes for a row of %s", d->dims[1], d->path);
            return STATUS_NOMEM;
        }
        src[c->nblobs] = d;
        c->blobs[c->nblobs] = (ckpt_blob){ d->path + prefix, rows[c->nblobs], (size_t)d->dims[1], false, false };
        c->nblobs++;
    }
    return STATUS_OK;
}

/* The tensors through ckpt_load's reader, each blob's row by ckpt_reshard_row. */
static status reshard_read(MPI_Comm comm, const ckpt_catalog *cat, ckpt_content *c, int world_size, uint8_t **rows)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    comm_ctl ctl = ckpt_ctl(comm, c->timeout_s);
    char why[CKPT_WHY_MAX] = "";
    ckpt_content tensors = *c;
    tensors.nblobs = 0;
    const ckpt_dataset *src[CKPT_MAX_BLOBS];
    status st = ckpt_catalog_load(comm, cat, &tensors);
    if (st == STATUS_OK) st = ckpt_agree(ctl, plan_blobs(cat, c, src, rows), NULL, 0);
    if (st == STATUS_OK)
        st = ckpt_agree(ctl, rank == 0 ? read_rows(cat, src, c->nblobs, source_row(cat, world_size), rows, why)
                                        : STATUS_OK, why, sizeof why);
    if (st != STATUS_OK) {
        if (why[0]) log_error0("cannot reshard %s: %s", cat->dir, why);
        return st;
    }
    for (int b = 0; b < c->nblobs; b++) TRY(comm_ctl_bcast(ctl, rows[b], (int)c->blobs[b].bytes, MPI_BYTE, 0));
    return STATUS_OK;
}

status ckpt_reshard(MPI_Comm comm, const ckpt_catalog *cat, const ckpt_content *shape, int world_size,
                    int ranks_per_node, const char *out_root)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    char root[CKPT_PATH_MAX];
    TRY(reshard_check(cat, world_size));
    TRY(ckpt_out_root(cat, out_root, root));
    ckpt_content c = *shape;
    c.step = cat->h.step;
    c.config_text = cat->config;
    c.resharded_from = cat->h.resharded_from ? cat->h.resharded_from : cat->h.world_size;
    uint8_t *rows[CKPT_MAX_BLOBS] = { NULL };
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    status st = reshard_read(comm, cat, &c, world_size, rows);
    if (st == STATUS_OK && rank == 0) st = path_mkdirs(root, "output checkpoint directory");
    if (st != STATUS_TIMEOUT) st = ckpt_agree(ckpt_ctl(comm, c.timeout_s), st, NULL, 0);
    if (st == STATUS_OK) {
        ckpt_plan p;
        ckpt_plan_build(&p, &c, world_size);
        p.same_rows = true;
        int rpn = ranks_per_node > 0 ? ranks_per_node : cat->h.ranks_per_node > 0 ? cat->h.ranks_per_node : 1;
        st = ckpt_write_step(comm, root, &p, &c, rpn < world_size ? rpn : world_size, INT_MAX, CKPT_FAULT_NONE);
        ckpt_plan_free(&p);
    }
    ckpt_h5_quiet_end(q);
    for (int b = 0; b < CKPT_MAX_BLOBS; b++) free(rows[b]);
    return st;
}
