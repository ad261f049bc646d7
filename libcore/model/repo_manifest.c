/* repo_manifest — a checkpoint cut into objects and put together again: the scan (its
 * catalog: every dataset's byte range in state.h5), the put (tensor chunks, the skeleton
 * between them, the manifest), the manifest's JSON, and the materialisation of a commit
 * as a committed checkpoint directory.
 *
 * The one design decision: chunks are cut at fixed element counts from each tensor's own
 * start (REPO_CHUNK_BYTES of its elements), never at file offsets, so a tensor's chunks are
 * the same whatever else the file holds or where HDF5 put it — the grid, world size and
 * attribute changes of another save move tensors around the file, not their content. */
#include "repo_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <omp.h>
#include <xxhash.h>
#include <isa-l/crc.h>

#include "base/path.h"
#include "ckpt/tool/offline.h"

/* ---- the scan --------------------------------------------------------------------- */

/* path as a checkpoint directory: itself, the directory of a state.h5, or the newest
 * committed checkpoint of a run directory (RUN/ckpt). */
static status scan_dir(const char *path, char *dir, size_t len)
{
    struct stat sb;
    char p[REPO_PATH_MAX + 32];
    if (stat(path, &sb) != 0) {
        log_error("%s: %s", path, log_errno_str());
        return STATUS_INPUT;
    }
    if (S_ISREG(sb.st_mode)) {
        snprintf(dir, len, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, len, ".");
        return STATUS_OK;
    }
    snprintf(p, sizeof p, "%s/state.h5", path);
    if (stat(p, &sb) == 0) {
        snprintf(dir, len, "%s", path);
        return STATUS_OK;
    }
    snprintf(p, sizeof p, "%s/ckpt", path);
    int64_t step;
    if (ckpt_last_committed(p, dir, len, &step)) return STATUS_OK;
    log_error("%s is neither a checkpoint directory (with state.h5) nor a run directory with a committed checkpoint "
              "under ckpt/", path);
    return STATUS_INPUT;
}

static repo_item **file_order(const repo_manifest *m, int *n);

/* Datasets that share bytes of the file (a crafted state.h5): the skeleton between them
 * would be sized from a sum larger than the file. */
static status scan_check_overlap(const repo_scan *s)
{
    int n;
    repo_item **o = file_order(&s->m, &n);
    status st = STATUS_OK;
    for (int k = 1; k < n && st == STATUS_OK; k++)
        if (o[k - 1]->offset + o[k - 1]->bytes > o[k]->offset) {
            log_error("%s/state.h5: datasets %s and %s share bytes of the file: not a checkpoint nebula-train writes",
                      s->dir, o[k - 1]->path, o[k]->path);
            st = STATUS_CORRUPT;
        }
    free(o);
    return st;
}

status repo_scan_open(repo_scan *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    TRY(scan_dir(path, s->dir, sizeof s->dir));
    ckpt_catalog cat;
    TRY(ckpt_catalog_open(&cat, s->dir));
    status st = STATUS_OK;
    if (cat.commit != CKPT_COMMIT_YES) {
        log_error("%s is not a committed checkpoint (no valid COMMITTED marker): only what a loader would trust is "
                  "committed", cat.dir);
        st = STATUS_INPUT;
    }
    char why[256];
    struct stat sb;
    if (st == STATUS_OK && path_open_regular(cat.file, &s->fd, &sb, 0, why, sizeof why) != 0) {
        log_error("%s %s", cat.file, why);
        st = STATUS_INPUT;
    }
    repo_manifest *m = &s->m;
    m->file_bytes = st == STATUS_OK ? (uint64_t)sb.st_size : 0;
    m->h = cat.h;
    m->config = strdup(cat.config ? cat.config : "");
    m->items = calloc((size_t)cat.n + 1, sizeof *m->items);
    CHECK(m->config && m->items, "out of memory scanning a checkpoint");
    for (int k = 0; k < cat.n && st == STATUS_OK; k++) {
        const ckpt_dataset *d = &cat.items[k];
        repo_item *it = &m->items[m->n++];
        snprintf(it->path, sizeof it->path, "%s", d->path);
        snprintf(it->dtype, sizeof it->dtype, "%s", d->dtype);
        it->blob = d->blob;
        it->ndim = d->ndim;
        memcpy(it->dims, d->dims, sizeof it->dims);
        it->bytes = d->bytes;
        it->offset = d->bytes ? d->offset : 0;
        it->has_crc = d->has_checksum;
        it->crc = d->checksum;
        uint64_t elems = 1;
        bool wraps = false;
        for (int i = 0; i < d->ndim; i++) {
            wraps |= d->dims[i] && elems > UINT64_MAX / d->dims[i];
            elems *= d->dims[i];
        }
        if (wraps) {
            log_error("%s: dataset %s has a shape whose product overflows", cat.dir, d->path);
            st = STATUS_CORRUPT;
            break;
        }
        uint64_t esize = elems ? d->bytes / elems : 1;
        if (esize == 0) esize = 1;
        it->chunk_bytes = d->blob && d->ndim == 2 && d->dims[1] > 0 && d->dims[1] <= REPO_CHUNK_BYTES
                              ? d->dims[1]
                              : REPO_CHUNK_BYTES / esize * esize;
        if (d->bytes && (d->offset == UINT64_MAX || d->offset > m->file_bytes || d->bytes > m->file_bytes - d->offset)) {
            log_error("%s: dataset %s is not stored as one contiguous range of the file (a checkpoint of another "
                      "writer); HINT: nebula-ckpt upgrade or convert --dtype fp32 rewrites it as nebula-train does",
                      cat.dir, d->path);
            st = STATUS_INPUT;
        }
    }
    ckpt_catalog_free(&cat);
    if (st == STATUS_OK) st = scan_check_overlap(s);
    if (st != STATUS_OK) repo_scan_close(s);
    return st;
}

void repo_scan_close(repo_scan *s)
{
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    repo_manifest_free(&s->m);
}

/* ---- the put ---------------------------------------------------------------------- */

static int by_offset(const void *a, const void *b)
{
    const repo_item *x = *(repo_item *const *)a, *y = *(repo_item *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The items with bytes, in file order. */
static repo_item **file_order(const repo_manifest *m, int *n)
{
    repo_item **o = calloc((size_t)m->n + 1, sizeof *o);
    CHECK(o, "out of memory ordering a manifest");
    *n = 0;
    for (int k = 0; k < m->n; k++)
        if (m->items[k].bytes) o[(*n)++] = &m->items[k];
    qsort(o, (size_t)*n, sizeof *o, by_offset);
    return o;
}

static const repo_item *find_item(const repo_manifest *m, const char *path)
{
    for (int k = 0; m && k < m->n; k++)
        if (!strcmp(m->items[k].path, path)) return &m->items[k];
    return NULL;
}

static status read_at(int fd, void *p, uint64_t n, uint64_t off, const char *dir)
{
    if (path_read_all_at(fd, p, n, off) == 0) return STATUS_OK;
    log_error("cannot read %s/state.h5 at offset %" PRIu64 ": %s", dir, off, errno ? log_errno_str() : "it ends early");
    return STATUS_IO;
}

/* Chunk c of item it, stored from p (n bytes); a delta against the parent's chunk pi->chunks[c]
 * when that compresses smaller. Thread-safe: the chunks of a batch go in parallel. */
static status put_chunk(repo *r, const char *objdir, repo_item *it, const repo_item *pi, int c, const uint8_t *p,
                        uint64_t n, repo_put_stats *st, uint8_t *touched)
{
    char why[512];
    void *base = NULL;
    size_t bn = 0;
    uint64_t esize = 1, elems = 1;
    for (int i = 0; i < it->ndim; i++) elems *= it->dims[i];
    if (!it->blob && elems) esize = it->bytes / elems;
    repo_id want = repo_hash(p, n);
    if (pi && !repo_object_has(objdir, &want) && !repo_id_eq(&pi->chunks[c], &want) &&
        repo_object_get(objdir, &pi->chunks[c], REPO_KIND_CHUNK, &base, &bn, why, sizeof why) == STATUS_OK && bn != n)
        free(base), base = NULL;
    bool added;
    uint64_t stored;
    status rc = repo_object_put_chunk(r, (int)esize, p, n, base ? &pi->chunks[c] : NULL, base, &it->chunks[c], &added,
                                      &stored);
    free(base);
    repo_object_head h;
    bool delta = added && repo_object_head_read(objdir, &it->chunks[c], &h) && h.delta;
#pragma omp critical(repo_put_stats)
    {
        st->chunks++;
        touched[it->chunks[c].b[0]] = 1;  /* present ones too: their names may be another writer's, not yet synced */
        if (added) {
            st->chunks_new++, st->new_raw += n, st->stored += stored, st->deltas += delta;
            if (!it->blob) st->new_tensor += n;
        }
    }
    return rc;
}

/* One item's chunks, in batches: read in file order (the CRC-32 and the file's hash are
 * sequential), then hashed, compressed and written in parallel. */
static status put_item(repo *r, repo_scan *s, repo_item *it, const repo_manifest *parent, uint8_t *buf,
                       XXH3_state_t *fh, repo_put_stats *st, uint8_t *touched)
{
    const repo_item *pi = find_item(parent, it->path);
    char objdir[REPO_PATH_MAX];
    repo_objdir(r->dir, objdir, sizeof objdir);
    if (pi && (pi->chunk_bytes != it->chunk_bytes || pi->bytes != it->bytes)) pi = NULL;
    it->nchunks = (int)((it->bytes + it->chunk_bytes - 1) / it->chunk_bytes);
    it->chunks = calloc((size_t)it->nchunks + 1, sizeof *it->chunks);
    CHECK(it->chunks, "out of memory for a manifest");
    uint32_t crc = 0;
    int per = (int)(REPO_PUT_BATCH / it->chunk_bytes);
    for (int c0 = 0; c0 < it->nchunks; c0 += per) {
        int c1 = c0 + per < it->nchunks ? c0 + per : it->nchunks;
        uint64_t off = (uint64_t)c0 * it->chunk_bytes, end = (uint64_t)c1 * it->chunk_bytes;
        if (end > it->bytes) end = it->bytes;
        TRY(read_at(s->fd, buf, end - off, it->offset + off, s->dir));
        crc = crc32_gzip_refl(crc, buf, end - off);  /* zlib's CRC-32 (the checkpoint's), ISA-L's speed */
        XXH3_128bits_update(fh, buf, end - off);
        status rc = STATUS_OK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(r->threads > 0 ? r->threads : omp_get_max_threads()) \
    if (c1 - c0 > 1)
        for (int c = c0; c < c1; c++) {
            uint64_t o = (uint64_t)c * it->chunk_bytes, n = it->bytes - o < it->chunk_bytes ? it->bytes - o : it->chunk_bytes;
            status one = put_chunk(r, objdir, it, pi, c, buf + (o - off), n, st, touched);
            if (one != STATUS_OK) {
#pragma omp critical(repo_put_status)
                rc = rc == STATUS_OK ? one : rc;
            }
        }
        TRY(rc);
    }
    if (it->has_crc && crc != it->crc) {
        log_error("%s/state.h5: dataset %s fails its CRC-32 (%08x stored, %08x read): the checkpoint is damaged and "
                  "is not committed; HINT: nebula-ckpt verify %s", s->dir, it->path, it->crc, crc, s->dir);
        return STATUS_CORRUPT;
    }
    st->tensors++;
    return STATUS_OK;
}

status repo_put(repo *r, repo_scan *s, const repo_manifest *parent, repo_id *manifest, repo_put_stats *st)
{
    memset(st, 0, sizeof *st);
    repo_manifest *m = &s->m;
    st->raw_bytes = m->file_bytes;
    int n;
    repo_item **order = file_order(m, &n);
    uint8_t *buf = malloc(REPO_PUT_BATCH), touched[256] = { 0 };  /* objects/xx directories written into */
    uint64_t skel_n = m->file_bytes;
    for (int k = 0; k < n; k++) skel_n -= order[k]->bytes;
    uint8_t *skel = malloc(skel_n + 1);
    XXH3_state_t *fh = XXH3_createState();
    CHECK(buf && skel && fh, "out of memory committing a checkpoint");
    XXH3_128bits_reset(fh);
    status rc = STATUS_OK;
    uint64_t pos = 0, sp = 0;
    for (int k = 0; k <= n && rc == STATUS_OK; k++) {
        uint64_t end = k < n ? order[k]->offset : m->file_bytes;
        if (end < pos) {
            log_error("%s/state.h5: datasets overlap at offset %" PRIu64 " (%s)", s->dir, end, order[k]->path);
            rc = STATUS_CORRUPT;
            break;
        }
        rc = read_at(s->fd, skel + sp, end - pos, pos, s->dir);
        if (rc != STATUS_OK) break;
        XXH3_128bits_update(fh, skel + sp, end - pos);
        sp += end - pos;
        if (k < n) rc = put_item(r, s, order[k], parent, buf, fh, st, touched);
        if (k < n) pos = order[k]->offset + order[k]->bytes;
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(fh));
    memcpy(m->file_hash.b, c.digest, 16);
    bool added;
    uint64_t stored;
    if (rc == STATUS_OK) rc = repo_object_put(r, REPO_KIND_SKELETON, skel, sp, NULL, NULL, &m->skeleton, &added, &stored);
    if (rc == STATUS_OK) touched[m->skeleton.b[0]] = 1;
    if (rc == STATUS_OK && added) st->new_raw += sp, st->stored += stored;
    /* a checkpoint that had no chunks to cut still needs its item arrays */
    for (int k = 0; k < m->n && rc == STATUS_OK; k++)
        if (!m->items[k].chunks) m->items[k].chunks = calloc(1, sizeof(repo_id));
    if (rc == STATUS_OK) {
        char objdir[REPO_PATH_MAX];
        repo_objdir(r->dir, objdir, sizeof objdir);
        repo_objects_sync(objdir, touched);  /* the new chunks' and skeleton's names, before the manifest names them */
        char *text = repo_manifest_dump(m);
        rc = repo_object_put(r, REPO_KIND_MANIFEST, text, strlen(text), NULL, NULL, manifest, &added, &stored);
        if (rc == STATUS_OK && added) st->stored += stored;
        free(text);
    }
    XXH3_freeState(fh);
    free(skel);
    free(buf);
    free(order);
    return rc;
}

/* ---- JSON ------------------------------------------------------------------------- */

static json_t *id_json(const repo_id *id)
{
    char hex[33];
    repo_id_hex(id, hex);
    return json_string(hex);
}

/* uint64 values as decimal strings: JSON numbers are doubles to most readers */
static json_t *u64_json(uint64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRIu64, v);
    return json_string(s);
}

char *repo_manifest_dump(const repo_manifest *m)
{
    json_t *items = json_array();
    for (int k = 0; k < m->n; k++) {
        const repo_item *it = &m->items[k];
        json_t *shape = json_array(), *chunks = json_array();
        for (int i = 0; i < it->ndim; i++) json_array_append_new(shape, u64_json(it->dims[i]));
        for (int c = 0; c < it->nchunks; c++) json_array_append_new(chunks, id_json(&it->chunks[c]));
        json_t *o = json_pack("{s:s, s:b, s:s, s:o, s:o, s:o, s:o, s:o}", "path", it->path, "blob", it->blob, "dtype",
                              it->dtype, "shape", shape, "offset", u64_json(it->offset), "bytes", u64_json(it->bytes),
                              "chunk_bytes", u64_json(it->chunk_bytes), "chunks", chunks);
        if (it->has_crc) json_object_set_new(o, "crc32", json_integer(it->crc));
        json_array_append_new(items, o);
    }
    const ckpt_header *h = &m->h;
    json_t *head = json_pack("{s:i, s:I, s:s, s:o, s:i, s:i, s:i, s:s, s:{s:i, s:i, s:i, s:i}, s:b}", "format_version",
                             h->version, "step", (json_int_t)h->step, "model", h->model, "table_hash",
                             u64_json(h->table_hash), "world_size", h->world_size, "ranks_per_node", h->ranks_per_node,
                             "resharded_from", h->resharded_from, "nebula_version", h->nebula_version, "layout", "dp",
                             h->layout.dp, "tp", h->layout.tp, "pp", h->layout.pp, "zero_stage", h->layout.zero_stage,
                             "layout_recorded", h->layout_recorded);
    json_t *j = json_pack("{s:s, s:i, s:o, s:o, s:o, s:o, s:s, s:o}", "format", "nebula-model-manifest", "version", 1,
                          "file_bytes", u64_json(m->file_bytes), "file_hash", id_json(&m->file_hash), "skeleton",
                          id_json(&m->skeleton), "header", head, "config", m->config ? m->config : "", "items", items);
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    CHECK(text, "out of memory writing a manifest");
    return text;
}

void repo_manifest_free(repo_manifest *m)
{
    for (int k = 0; k < m->n; k++) free(m->items[k].chunks);
    free(m->items);
    free(m->config);
    memset(m, 0, sizeof *m);
}

#define BAD(...) do { snprintf(why, len, __VA_ARGS__); goto fail; } while (0)

static bool get_u64s(json_t *v, uint64_t *out)
{
    const char *s = json_string_value(v);
    if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 20) return false;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    *out = x;
    return errno == 0;
}

static bool get_id(json_t *v, repo_id *id)
{
    const char *s = json_string_value(v);
    return s && strlen(s) == 32 && repo_id_parse(s, id);
}

static bool get_str(json_t *v, char *out, size_t len)
{
    const char *s = json_string_value(v);
    if (!s || strlen(s) >= len) return false;
    snprintf(out, len, "%s", s);
    return true;
}

static bool dtype_size(const char *t, uint64_t *sz)
{
    static const struct { const char *name; uint64_t size; } types[] = {
        { "float32", 4 }, { "float16", 2 }, { "bfloat16", 2 }, { "float64", 8 }, { "uint8", 1 }, { "int8", 1 },
        { "int32", 4 },   { "uint32", 4 },  { "int64", 8 },    { "uint64", 8 }, { "int16", 2 }, { "uint16", 2 },
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(types[i].name, t)) return *sz = types[i].size, true;
    return false;
}

static bool parse_item(json_t *o, repo_item *it, char *why, size_t len)
{
    json_t *shape = json_object_get(o, "shape"), *chunks = json_object_get(o, "chunks"), *crc;
    uint64_t esize, elems = 1;
    if (!json_is_object(o) || !get_str(json_object_get(o, "path"), it->path, sizeof it->path) || it->path[0] != '/' ||
        !json_is_boolean(json_object_get(o, "blob")) || !get_str(json_object_get(o, "dtype"), it->dtype, sizeof it->dtype) ||
        !dtype_size(it->dtype, &esize) || !json_is_array(shape) || json_array_size(shape) > PARAM_MAX_DIMS ||
        !get_u64s(json_object_get(o, "offset"), &it->offset) || !get_u64s(json_object_get(o, "bytes"), &it->bytes) ||
        !get_u64s(json_object_get(o, "chunk_bytes"), &it->chunk_bytes) || !json_is_array(chunks))
        return snprintf(why, len, "an item lacks a field or holds a bad one (path, blob, dtype, shape, offset, bytes, "
                                  "chunk_bytes, chunks)"), false;
    it->blob = json_is_true(json_object_get(o, "blob"));
    it->ndim = (int)json_array_size(shape);
    for (int i = 0; i < it->ndim; i++) {
        if (!get_u64s(json_array_get(shape, (size_t)i), &it->dims[i]) || it->dims[i] > ((uint64_t)1 << 40))
            return snprintf(why, len, "%s: a bad shape", it->path), false;
        if (it->dims[i] && elems > ((uint64_t)1 << 40) / it->dims[i])  /* before the product can wrap */
            return snprintf(why, len, "%s: a shape too large", it->path), false;
        elems *= it->dims[i];
    }
    if (elems * esize != it->bytes)
        return snprintf(why, len, "%s: %" PRIu64 " bytes, but its shape and %s make %" PRIu64, it->path, it->bytes,
                        it->dtype, elems * esize), false;
    if (it->bytes && (it->chunk_bytes == 0 || it->chunk_bytes > REPO_CHUNK_BYTES || it->chunk_bytes % esize))
        return snprintf(why, len, "%s: chunk_bytes %" PRIu64 " is not a whole number of elements up to %" PRIu64,
                        it->path, it->chunk_bytes, REPO_CHUNK_BYTES), false;
    uint64_t want = it->bytes ? (it->bytes + it->chunk_bytes - 1) / it->chunk_bytes : 0;
    if (json_array_size(chunks) != want)
        return snprintf(why, len, "%s: %zu chunks listed for %" PRIu64 " bytes in chunks of %" PRIu64 " (%" PRIu64
                        " expected)", it->path, json_array_size(chunks), it->bytes, it->chunk_bytes, want), false;
    it->nchunks = (int)want;
    it->chunks = calloc(want + 1, sizeof *it->chunks);
    CHECK(it->chunks, "out of memory reading a manifest");
    for (uint64_t c = 0; c < want; c++)
        if (!get_id(json_array_get(chunks, c), &it->chunks[c]))
            return snprintf(why, len, "%s: chunk %" PRIu64 " is not an object id", it->path, c), false;
    crc = json_object_get(o, "crc32");
    it->has_crc = crc != NULL;
    if (crc && (!json_is_integer(crc) || json_integer_value(crc) < 0 || json_integer_value(crc) > 0xffffffffLL))
        return snprintf(why, len, "%s: crc32 is not a 32-bit unsigned number", it->path), false;
    it->crc = crc ? (uint32_t)json_integer_value(crc) : 0;
    return true;
}

static bool parse_header(json_t *h, ckpt_header *out)
{
    json_t *lay = json_object_get(h, "layout");
    memset(out, 0, sizeof *out);
    if (!json_is_object(h) || !json_is_object(lay) || !get_str(json_object_get(h, "model"), out->model, sizeof out->model) ||
        !get_str(json_object_get(h, "nebula_version"), out->nebula_version, sizeof out->nebula_version) ||
        !get_u64s(json_object_get(h, "table_hash"), &out->table_hash) || !json_is_integer(json_object_get(h, "step")))
        return false;
    out->version = (int32_t)json_integer_value(json_object_get(h, "format_version"));
    out->step = json_integer_value(json_object_get(h, "step"));
    out->world_size = (int32_t)json_integer_value(json_object_get(h, "world_size"));
    out->ranks_per_node = (int32_t)json_integer_value(json_object_get(h, "ranks_per_node"));
    out->resharded_from = (int32_t)json_integer_value(json_object_get(h, "resharded_from"));
    out->layout.dp = (int32_t)json_integer_value(json_object_get(lay, "dp"));
    out->layout.tp = (int32_t)json_integer_value(json_object_get(lay, "tp"));
    out->layout.pp = (int32_t)json_integer_value(json_object_get(lay, "pp"));
    out->layout.zero_stage = (int32_t)json_integer_value(json_object_get(lay, "zero_stage"));
    out->layout_recorded = json_is_true(json_object_get(h, "layout_recorded"));
    return out->step >= 0 && out->world_size >= 1;
}

status repo_manifest_parse(const char *text, size_t n, repo_manifest *m, char *why, size_t len)
{
    memset(m, 0, sizeof *m);
    json_error_t e;
    json_t *j = json_loadb(text, n, JSON_REJECT_DUPLICATES, &e), *items;
    if (!j) BAD("not JSON (line %d: %s)", e.line, e.text);
    if (!json_is_object(j) || strcmp(json_string_value(json_object_get(j, "format")) ?: "", "nebula-model-manifest") ||
        json_integer_value(json_object_get(j, "version")) != 1)
        BAD("not a version 1 nebula-model manifest");
    items = json_object_get(j, "items");
    const char *cfg = json_string_value(json_object_get(j, "config"));
    if (!get_u64s(json_object_get(j, "file_bytes"), &m->file_bytes) || !get_id(json_object_get(j, "file_hash"), &m->file_hash) ||
        !get_id(json_object_get(j, "skeleton"), &m->skeleton) || !cfg || !json_is_array(items) ||
        !parse_header(json_object_get(j, "header"), &m->h))
        BAD("a manifest field is missing or bad (file_bytes, file_hash, skeleton, config, header, items)");
    if (json_array_size(items) > 1000000) BAD("too many items");
    m->config = strdup(cfg);
    m->items = calloc(json_array_size(items) + 1, sizeof *m->items);
    CHECK(m->config && m->items, "out of memory reading a manifest");
    uint64_t total = 0;
    for (size_t k = 0; k < json_array_size(items); k++) {
        repo_item *it = &m->items[m->n++];
        if (!parse_item(json_array_get(items, k), it, why, len)) goto fail;
        if (k > 0 && strcmp(m->items[k - 1].path, it->path) >= 0) BAD("items are not in ascending path order at %s", it->path);
        if (it->offset > m->file_bytes || it->bytes > m->file_bytes - it->offset)
            BAD("%s lies outside the file (offset %" PRIu64 ", %" PRIu64 " bytes, file %" PRIu64 ")", it->path,
                it->offset, it->bytes, m->file_bytes);
        total += it->bytes;
    }
    int no;
    repo_item **order = file_order(m, &no);
    bool overlap = false;
    for (int k = 1; k < no; k++) overlap |= order[k - 1]->offset + order[k - 1]->bytes > order[k]->offset;
    free(order);
    if (overlap || total > m->file_bytes) BAD("items overlap in the file");
    json_decref(j);
    return STATUS_OK;
fail:
    json_decref(j);
    repo_manifest_free(m);
    return STATUS_CORRUPT;
}

status repo_manifest_load(const char *objdir, const repo_id *id, repo_manifest *m, char *why, size_t len)
{
    void *text = NULL;
    size_t n = 0;
    memset(m, 0, sizeof *m);
    TRY(repo_object_get(objdir, id, REPO_KIND_MANIFEST, &text, &n, why, len));
    char sub[400];
    status st = repo_manifest_parse(text, n, m, sub, sizeof sub);
    if (st != STATUS_OK) {
        char hex[33];
        repo_id_hex(id, hex);
        snprintf(why, len, "manifest %s: %s", hex, sub);
    }
    free(text);
    return st;
}

/* The content size an object's header declares (UINT64_MAX when it cannot be read). */
static uint64_t object_size(const char *objdir, const repo_id *id)
{
    repo_object_head h;
    return repo_object_head_read(objdir, id, &h) ? h.size : UINT64_MAX;
}

status repo_manifest_check(const char *objdir, const repo_manifest *m, char *why, size_t len)
{
    uint64_t items = 0;
    for (int k = 0; k < m->n; k++) {
        const repo_item *it = &m->items[k];
        items += it->bytes;
        for (int c = 0; c < it->nchunks; c++) {
            uint64_t want = c + 1 < it->nchunks ? it->chunk_bytes : it->bytes - (uint64_t)c * it->chunk_bytes;
            uint64_t got = object_size(objdir, &it->chunks[c]);
            if (got != UINT64_MAX && got != want) {
                snprintf(why, len, "%s chunk %d holds %" PRIu64 " bytes, its manifest says %" PRIu64, it->path, c, got,
                         want);
                return STATUS_CORRUPT;
            }
        }
    }
    uint64_t skel = object_size(objdir, &m->skeleton);
    if (skel != UINT64_MAX && skel + items != m->file_bytes) {
        snprintf(why, len, "the manifest lies about sizes: state.h5 of %" PRIu64 " bytes, but its skeleton (%" PRIu64
                 ") and items (%" PRIu64 ") make %" PRIu64, m->file_bytes, skel, items, skel + items);
        return STATUS_CORRUPT;
    }
    return STATUS_OK;
}

/* ---- materialise ------------------------------------------------------------------ */

/* One item's bytes from its chunks, in batches: decoded and checked in parallel, then written,
 * hashed and CRC'd in order. */
static status write_item(const char *objdir, const repo_item *it, int fd, uint8_t *buf, int threads,
                         XXH3_state_t *fh, uint32_t *crc)
{
    int per = (int)(REPO_PUT_BATCH / it->chunk_bytes);
    for (int c0 = 0; c0 < it->nchunks; c0 += per) {
        int c1 = c0 + per < it->nchunks ? c0 + per : it->nchunks;
        uint64_t off = (uint64_t)c0 * it->chunk_bytes, end = (uint64_t)c1 * it->chunk_bytes;
        if (end > it->bytes) end = it->bytes;
        status st = STATUS_OK;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads > 0 ? threads : omp_get_max_threads()) \
    if (c1 - c0 > 1)
        for (int c = c0; c < c1; c++) {
            char why[512];
            uint64_t o = (uint64_t)c * it->chunk_bytes, want = it->bytes - o < it->chunk_bytes ? it->bytes - o : it->chunk_bytes;
            void *data = NULL;
            size_t dn = 0;
            status one = repo_object_get(objdir, &it->chunks[c], REPO_KIND_CHUNK, &data, &dn, why, sizeof why);
            if (one != STATUS_OK) {
                log_error("%s chunk %d: %s", it->path, c, why);
                one = STATUS_CORRUPT;
            } else if (dn != want) {
                log_error("%s chunk %d holds %zu bytes, the manifest says %" PRIu64, it->path, c, dn, want);
                one = STATUS_CORRUPT;
            } else {
                memcpy(buf + (o - off), data, dn);
            }
            free(data);
            if (one != STATUS_OK) {
#pragma omp critical(repo_write_status)
                st = st == STATUS_OK ? one : st;
            }
        }
        TRY(st);
        if (path_write_all(fd, buf, end - off) != 0) return STATUS_IO;
        XXH3_128bits_update(fh, buf, end - off);
        *crc = crc32_gzip_refl(*crc, buf, end - off);
    }
    return STATUS_OK;
}

/* Writes state.h5 at path from the objects: skeleton pieces and chunks by offset. */
static status write_state(const char *objdir, const repo_manifest *m, const char *path, int threads, fault_plan *chaos)
{
    uint8_t *buf = malloc(REPO_PUT_BATCH);
    CHECK(buf, "out of memory for a checkout");
    char why[512];
    void *skel = NULL;
    size_t sn = 0;
    if (repo_object_get(objdir, &m->skeleton, REPO_KIND_SKELETON, &skel, &sn, why, sizeof why) != STATUS_OK) {
        log_error("%s", why);
        free(buf);
        return STATUS_CORRUPT;
    }
    int n, fd = -1;
    repo_item **order = file_order(m, &n);
    uint64_t items = 0;
    for (int k = 0; k < n; k++) items += order[k]->bytes;
    status st = STATUS_OK;
    if (sn + items != m->file_bytes) {
        log_error("the skeleton holds %zu bytes, the manifest's items %" PRIu64 ", the file %" PRIu64 ": the manifest "
                  "lies about sizes", sn, items, m->file_bytes);
        st = STATUS_CORRUPT;
    }
    if (st == STATUS_OK && path_create_regular(path, O_EXCL, 0644, &fd, why, sizeof why) != 0) {
        log_error("cannot create %s: %s", path, why);
        st = STATUS_IO;
    }
    XXH3_state_t *fh = XXH3_createState();
    CHECK(fh, "out of memory");
    XXH3_128bits_reset(fh);
    uint64_t pos = 0, sp = 0;
    for (int k = 0; k <= n && st == STATUS_OK; k++) {
        uint64_t end = k < n ? order[k]->offset : m->file_bytes;
        if (path_write_all(fd, (char *)skel + sp, end - pos) != 0) st = STATUS_IO;
        XXH3_128bits_update(fh, (char *)skel + sp, end - pos);
        sp += end - pos;
        uint32_t crc = 0;
        if (k < n && st == STATUS_OK) st = write_item(objdir, order[k], fd, buf, threads, fh, &crc);
        if (k < n && st == STATUS_OK && order[k]->has_crc && crc != order[k]->crc) {  /* the dataset's own checksum */
            log_error("%s does not match its CRC-32 attribute (%08x, written %08x): the store is damaged", order[k]->path,
                      order[k]->crc, crc);
            st = STATUS_CORRUPT;
        }
        if (k < n) pos = order[k]->offset + order[k]->bytes;
    }
    if (st == STATUS_IO) log_error("cannot write %s: %s", path, log_errno_str());
    int e = FAULT_ERRNO(chaos, "model.checkout", -1);
    if (st == STATUS_OK && (e || fsync(fd) != 0)) {
        log_error("cannot fsync %s: %s", path, e ? strerror(e) : log_errno_str());
        st = STATUS_IO;
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(fh));
    if (st == STATUS_OK && memcmp(c.digest, m->file_hash.b, 16) != 0) {
        log_error("%s does not hash to the manifest's file hash: an object or the manifest is damaged", path);
        st = STATUS_CORRUPT;
    }
    XXH3_freeState(fh);
    if (fd >= 0) close(fd);
    free(order);
    free(skel);
    free(buf);
    return st;
}

static void remove_tree(const char *dir)
{
    char p[REPO_PATH_MAX + 256];
    snprintf(p, sizeof p, "%s/state.h5", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/COMMITTED", dir);
    unlink(p);
    rmdir(dir);
}

status repo_materialize(const char *objdir, const repo_manifest *m, const char *out_root, int threads,
                        fault_plan *chaos, char *path, size_t len)
{
    char fin[REPO_PATH_MAX + 64], tmp[REPO_PATH_MAX + 64], file[REPO_PATH_MAX + 96];
    struct stat sb;
    TRY(path_mkdirs(out_root, "checkpoint directory"));
    snprintf(fin, sizeof fin, "%s/step_%08" PRId64, out_root, m->h.step);
    snprintf(tmp, sizeof tmp, "%s/.step_%08" PRId64 ".tmp", out_root, m->h.step);
    if (lstat(fin, &sb) == 0) {
        log_error("%s exists: a checkout never replaces a checkpoint", fin);
        return STATUS_INPUT;
    }
    remove_tree(tmp);  /* debris of a crashed checkout */
    if (mkdir(tmp, 0755) != 0) {
        log_error("cannot create %s: %s", tmp, log_errno_str());
        return STATUS_IO;
    }
    snprintf(file, sizeof file, "%s/state.h5", tmp);
    status st = write_state(objdir, m, file, threads, chaos);
    if (st == STATUS_OK && rename(tmp, fin) != 0) {
        log_error("cannot rename %s to %s: %s", tmp, fin, log_errno_str());
        st = STATUS_IO;
    }
    if (st != STATUS_OK) {
        remove_tree(tmp);
        return st;
    }
    char marker[REPO_PATH_MAX + 96], text[32];
    snprintf(marker, sizeof marker, "%s/COMMITTED", fin);
    snprintf(text, sizeof text, "%" PRId64 "\n", m->h.step);
    st = repo_write_file(marker, text, strlen(text), chaos, "model.ref");
    if (st != STATUS_OK) {
        remove_tree(fin);
        return st;
    }
    snprintf(path, len, "%s", fin);
    return STATUS_OK;
}
