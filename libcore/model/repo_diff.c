/* repo_diff — two commits' checkpoints compared from the store, with nebula-ckpt diff's
 * rows and conventions (ckpt/tool/offline.h: kinds, max |a-b|, relative L2, cosine, the
 * elements or blob rows that differ).
 *
 * The one design decision: content addressing answers most of it without a read — two
 * tensors whose chunk ids agree are the same bits — and a tensor that changed is summed
 * chunk by chunk in element order, the order nebula-ckpt diff sums one rank's slice in,
 * so one process gives the same statistics from the store as from the two files. */
#include "repo_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool same_shape(const repo_item *a, const repo_item *b)
{
    if (a->ndim != b->ndim || strcmp(a->dtype, b->dtype) != 0 || a->bytes != b->bytes) return false;
    for (int k = 0; k < a->ndim; k++)
        if (a->dims[k] != b->dims[k]) return false;
    return true;
}

static status chunk(const char *objdir, const repo_item *it, int c, void **data, size_t *n)
{
    char why[512];
    if (repo_object_get(objdir, &it->chunks[c], REPO_KIND_CHUNK, data, n, why, sizeof why) == STATUS_OK) return STATUS_OK;
    log_error("%s chunk %d: %s", it->path, c, why);
    return STATUS_CORRUPT;
}

/* Both items' bytes, whole (a changed tensor: read once, compared in order). */
static status read_all(const char *objdir, const repo_item *it, uint8_t *out)
{
    uint64_t off = 0;
    for (int c = 0; c < it->nchunks; c++) {
        void *d;
        size_t n;
        TRY(chunk(objdir, it, c, &d, &n));
        if (off + n > it->bytes) {
            free(d);
            log_error("%s: its chunks hold more than its %llu bytes", it->path, (unsigned long long)it->bytes);
            return STATUS_CORRUPT;
        }
        memcpy(out + off, d, n);
        off += n;
        free(d);
    }
    return off == it->bytes ? STATUS_OK : STATUS_CORRUPT;
}

static status diff_pair(const char *objdir, const repo_item *a, const repo_item *b, ckpt_diff_row *row, uint64_t *changed)
{
    row->max_abs = row->rel_l2 = row->cosine = NAN;
    bool floats = !a->blob && !strcmp(a->dtype, "float32");
    for (int c = 0; c < a->nchunks && c < b->nchunks; c++) *changed += !repo_id_eq(&a->chunks[c], &b->chunks[c]);
    if (a->chunk_bytes != b->chunk_bytes) *changed = (uint64_t)a->nchunks;
    if (*changed == 0) {
        row->kind = CKPT_DIFF_KIND_SAME;
        if (floats) row->max_abs = 0, row->rel_l2 = 0, row->cosine = 1;
        return STATUS_OK;
    }
    uint8_t *x = malloc(a->bytes + 1), *y = malloc(b->bytes + 1);
    CHECK(x && y, "out of memory comparing tensors");
    status st = read_all(objdir, a, x);
    if (st == STATUS_OK) st = read_all(objdir, b, y);
    double dd = 0, aa = 0, bb = 0, ab = 0, max_abs = 0;
    uint64_t differ = 0;
    if (st == STATUS_OK && floats) {
        const float *fa = (const float *)x, *fb = (const float *)y;
        for (uint64_t i = 0; i < a->bytes / 4; i++) {
            double u = fa[i], v = fb[i], d = fabs(u - v);
            dd += (u - v) * (u - v), aa += u * u, bb += v * v, ab += u * v;
            differ += memcmp(&fa[i], &fb[i], sizeof(float)) != 0;
            if (!(d <= max_abs)) max_abs = d;
        }
        row->max_abs = max_abs;
        row->rel_l2 = aa > 0 ? sqrt(dd) / sqrt(aa) : dd > 0 ? INFINITY : 0;
        row->cosine = aa > 0 && bb > 0 ? ab / (sqrt(aa) * sqrt(bb)) : aa == bb ? 1 : 0;
    } else if (st == STATUS_OK) {
        uint64_t elems = 1;
        for (int k = 0; k < a->ndim; k++) elems *= a->dims[k];
        uint64_t esize = elems ? a->bytes / elems : 1, rowlen = a->blob && a->ndim == 2 ? a->dims[1] : esize;
        for (uint64_t off = 0; rowlen && off < a->bytes; off += rowlen) differ += memcmp(x + off, y + off, rowlen) != 0;
    }
    row->differ = differ;
    row->kind = differ ? CKPT_DIFF_KIND_VALUES : CKPT_DIFF_KIND_SAME;
    free(x);
    free(y);
    return st;
}

status repo_diff(const char *objdir, const repo_manifest *a, const repo_manifest *b, ckpt_diff_row *rows,
                 uint64_t *changed, int *nrows)
{
    int i = 0, j = 0, n = 0;
    status st = STATUS_OK;
    while ((i < a->n || j < b->n) && st == STATUS_OK) {
        int c = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->items[i].path, b->items[j].path);
        ckpt_diff_row *row = &rows[n];
        memset(row, 0, sizeof *row);
        changed[n] = 0;
        row->max_abs = row->rel_l2 = row->cosine = NAN;
        snprintf(row->path, sizeof row->path, "%s", c <= 0 ? a->items[i].path : b->items[j].path);
        if (c < 0) row->kind = CKPT_DIFF_KIND_ONLY_A;
        else if (c > 0) row->kind = CKPT_DIFF_KIND_ONLY_B;
        else if (!same_shape(&a->items[i], &b->items[j])) row->kind = CKPT_DIFF_KIND_SHAPE;
        else st = diff_pair(objdir, &a->items[i], &b->items[j], row, &changed[n]);
        n++;
        i += c <= 0;
        j += c >= 0;
    }
    *nrows = n;
    return st;
}
