/* repo_object — the object store: content-addressed files of zstd frames, optionally
 * deltas (XOR against a base chunk), each checked against its XXH3-128 id on every read.
 *
 * The one design decision: an id names the content, never its encoding, so a chunk
 * stored whole in one repository and as a delta in another has one id, deduplication and
 * transfer compare ids only, and a reader verifies what it decoded, not what it read. */
#include "repo_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#include <zstd.h>

#include "base/path.h"

void repo_id_hex(const repo_id *id, char hex[33])
{
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", id->b[i]);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

bool repo_id_parse(const char *hex, repo_id *id)
{
    for (int i = 0; i < 16; i++) {
        int a = hexval(hex[2 * i]), b = a < 0 ? -1 : hexval(hex[2 * i + 1]);
        if (a < 0 || b < 0) return false;
        id->b[i] = (uint8_t)(a << 4 | b);
    }
    return hex[32] == '\0';
}

bool repo_id_eq(const repo_id *a, const repo_id *b)
{
    return memcmp(a->b, b->b, 16) == 0;
}

repo_id repo_hash(const void *p, size_t n)
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(p, n));
    repo_id id;
    memcpy(id.b, c.digest, 16);
    return id;
}

void repo_objdir(const char *dir, char *out, size_t len)
{
    if (snprintf(out, len, "%s/objects", dir) >= (int)len) log_warn("path too long: %s/objects", dir);
}

void repo_object_path(const char *objdir, const repo_id *id, char *path, size_t len)
{
    char hex[33];
    repo_id_hex(id, hex);
    if (snprintf(path, len, "%s/%.2s/%s", objdir, hex, hex + 2) >= (int)len) log_warn("path too long under %s", objdir);
}

bool repo_object_has(const char *objdir, const repo_id *id)
{
    char path[REPO_PATH_MAX];
    struct stat sb;
    repo_object_path(objdir, id, path, sizeof path);
    return lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= REPO_OBJ_HEAD;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

bool repo_object_head_parse(const void *p, size_t n, repo_object_head *h)
{
    const uint8_t *b = p;
    if (n < REPO_OBJ_HEAD || memcmp(b, REPO_OBJ_MAGIC, 8) != 0) return false;
    if (b[8] < REPO_KIND_CHUNK || b[8] > REPO_KIND_COMMIT || b[9] > 1) return false;
    if (b[10] != 0 && b[10] != 2 && b[10] != 4 && b[10] != 8) return false;
    for (int i = 11; i < 16; i++)
        if (b[i]) return false;
    h->kind = (repo_kind)b[8];
    h->delta = b[9];
    h->shuffle = b[10];
    h->size = get_u64(b + 16);
    memcpy(h->base.b, b + 24, 16);
    if (h->size > REPO_OBJ_MAX) return false;
    if ((h->delta || h->shuffle) && h->kind != REPO_KIND_CHUNK) return false;  /* only chunks are transformed */
    if (h->shuffle && h->size % h->shuffle) return false;
    return true;
}

void repo_shuffle(void *dst, const void *src, size_t n, int elem)
{
    const uint8_t *s = src;
    uint8_t *d = dst;
    size_t count = n / (size_t)elem;
    for (int b = 0; b < elem; b++)
        for (size_t i = 0; i < count; i++) d[(size_t)b * count + i] = s[i * (size_t)elem + (size_t)b];
}

void repo_unshuffle(void *dst, const void *src, size_t n, int elem)
{
    const uint8_t *s = src;
    uint8_t *d = dst;
    size_t count = n / (size_t)elem;
    for (int b = 0; b < elem; b++)
        for (size_t i = 0; i < count; i++) d[i * (size_t)elem + (size_t)b] = s[(size_t)b * count + i];
}

bool repo_object_decode(const void *p, size_t n, const repo_object_head *h, const void *base, void *out, char *why,
                        size_t len)
{
    const uint8_t *frame = (const uint8_t *)p + REPO_OBJ_HEAD;
    size_t fn = n - REPO_OBJ_HEAD;
    unsigned long long content = ZSTD_getFrameContentSize(frame, fn);
    if (content == ZSTD_CONTENTSIZE_ERROR || content != h->size) {
        snprintf(why, len, "its zstd frame %s", content == ZSTD_CONTENTSIZE_ERROR ? "is damaged"
                                                                                   : "holds another size than its header");
        return false;
    }
    uint8_t *planes = h->shuffle ? malloc(h->size + 1) : NULL;
    CHECK(!h->shuffle || planes, "out of memory decoding an object");
    size_t got = ZSTD_decompress(planes ? planes : out, h->size, frame, fn);
    if (ZSTD_isError(got) || got != h->size) {
        snprintf(why, len, "its zstd frame does not decode (%s)", ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
        free(planes);
        return false;
    }
    if (planes) repo_unshuffle(out, planes, h->size, h->shuffle);
    free(planes);
    if (h->delta) {
        uint8_t *o = out;
        const uint8_t *b = base;
        for (uint64_t i = 0; i < h->size; i++) o[i] ^= b[i];
    }
    return true;
}

static status object_get_depth(const char *objdir, const repo_id *id, repo_kind want, void **data, size_t *n,
                               char *why, size_t len, int depth)
{
    char path[REPO_PATH_MAX], hex[33], sub[256];
    repo_id_hex(id, hex);
    repo_object_path(objdir, id, path, sizeof path);
    char *raw = NULL;
    size_t rn = 0;
    status st = repo_read_file(path, REPO_OBJ_MAX + 4096, &raw, &rn, sub, sizeof sub);
    if (st != STATUS_OK) {
        snprintf(why, len, "object %s %s", hex, sub);
        return st;
    }
    repo_object_head h;
    void *base = NULL, *out = NULL;
    if (!repo_object_head_parse(raw, rn, &h)) {
        snprintf(why, len, "object %s has no valid header (%s)", hex, path);
        st = STATUS_CORRUPT;
        goto free_raw;
    }
    if (want && h.kind != want) {
        snprintf(why, len, "object %s is of kind %d, not %d", hex, (int)h.kind, (int)want);
        st = STATUS_CORRUPT;
        goto free_raw;
    }
    if (ZSTD_getFrameContentSize(raw + REPO_OBJ_HEAD, rn - REPO_OBJ_HEAD) != h.size) {  /* before any allocation */
        snprintf(why, len, "object %s: its zstd frame holds another size than its header (%s)", hex, path);
        st = STATUS_CORRUPT;
        goto free_raw;
    }
    if (h.delta) {
        size_t bn = 0;
        if (depth >= REPO_DELTA_DEPTH) {
            snprintf(why, len, "object %s is a delta deeper than %d", hex, REPO_DELTA_DEPTH);
            st = STATUS_CORRUPT;
            goto free_raw;
        }
        st = object_get_depth(objdir, &h.base, REPO_KIND_CHUNK, &base, &bn, why, len, depth + 1);
        if (st == STATUS_INPUT) st = STATUS_CORRUPT;  /* a delta whose base is missing is damage */
        if (st != STATUS_OK) goto free_raw;
        if (bn != h.size) {
            snprintf(why, len, "object %s is a delta of %llu bytes against a base of %zu", hex,
                     (unsigned long long)h.size, bn);
            st = STATUS_CORRUPT;
            goto free_base;
        }
    }
    out = malloc(h.size + 1);
    CHECK(out, "out of memory reading an object");
    if (!repo_object_decode(raw, rn, &h, base, out, sub, sizeof sub)) {
        snprintf(why, len, "object %s: %s", hex, sub);
        st = STATUS_CORRUPT;
        goto free_out;
    }
    repo_id got = repo_hash(out, h.size);
    if (!repo_id_eq(&got, id)) {
        char ghex[33];
        repo_id_hex(&got, ghex);
        snprintf(why, len, "object %s decodes to content of hash %s (damaged: %s)", hex, ghex, path);
        st = STATUS_CORRUPT;
        goto free_out;
    }
    ((char *)out)[h.size] = '\0';
    *data = out;
    *n = h.size;
    out = NULL;
free_out:
    free(out);
free_base:
    free(base);
free_raw:
    free(raw);
    return st;
}

status repo_object_get(const char *objdir, const repo_id *id, repo_kind want, void **data, size_t *n, char *why,
                       size_t len)
{
    return object_get_depth(objdir, id, want, data, n, why, len, 0);
}

bool repo_object_head_read(const char *objdir, const repo_id *id, repo_object_head *h)
{
    char path[REPO_PATH_MAX], why[256];
    uint8_t head[REPO_OBJ_HEAD];
    struct stat sb;
    int fd;
    repo_object_path(objdir, id, path, sizeof path);
    if (path_open_own(path, &fd, &sb, REPO_OBJ_MAX + 4096, why, sizeof why) != 0) return false;
    bool ok = path_read_all_at(fd, head, sizeof head, 0) == 0 && repo_object_head_parse(head, sizeof head, h);
    close(fd);
    return ok;
}

/* How many deltas lie under the object id (0: stored whole; REPO_DELTA_DEPTH when it
 * cannot be read, so nothing builds on it). */
static int delta_depth(const char *objdir, const repo_id *id)
{
    repo_id cur = *id;
    for (int d = 0; d < REPO_DELTA_DEPTH; d++) {
        repo_object_head h;
        if (!repo_object_head_read(objdir, &cur, &h)) return REPO_DELTA_DEPTH;
        if (!h.delta) return d;
        cur = h.base;
    }
    return REPO_DELTA_DEPTH;
}

/* zstd of p[0..n) (byte planes of elem-byte elements when elem > 1) into a new buffer after
 * a header of kind/encoding; *out_n its bytes. */
static uint8_t *encode(repo_kind kind, int delta, int elem, const repo_id *base, const void *p, size_t n,
                       size_t *out_n)
{
    uint8_t *planes = NULL;
    if (elem > 1) {
        planes = malloc(n + 1);
        CHECK(planes, "out of memory encoding an object");
        repo_shuffle(planes, p, n, elem);
        p = planes;
    }
    size_t cap = ZSTD_compressBound(n);
    uint8_t *o = malloc(REPO_OBJ_HEAD + cap);
    CHECK(o, "out of memory compressing an object");
    memset(o, 0, REPO_OBJ_HEAD);
    memcpy(o, REPO_OBJ_MAGIC, 8);
    o[8] = (uint8_t)kind;
    o[9] = (uint8_t)delta;
    o[10] = (uint8_t)(elem > 1 ? elem : 0);
    put_u64(o + 16, n);
    if (delta) memcpy(o + 24, base->b, 16);
    size_t z = ZSTD_compress(o + REPO_OBJ_HEAD, cap, p, n, REPO_ZSTD_LEVEL);
    CHECK(!ZSTD_isError(z), "zstd cannot compress into its own bound");
    free(planes);
    *out_n = REPO_OBJ_HEAD + z;
    return o;
}

static status object_put(repo *r, repo_kind kind, int elem, const void *data, size_t n, const repo_id *base_id,
                         const void *base, repo_id *id, bool *added, uint64_t *stored);

status repo_object_put(repo *r, repo_kind kind, const void *data, size_t n, const repo_id *base_id, const void *base,
                       repo_id *id, bool *added, uint64_t *stored)
{
    return object_put(r, kind, 0, data, n, base_id, base, id, added, stored);
}

status repo_object_put_chunk(repo *r, int elem, const void *data, size_t n, const repo_id *base_id, const void *base,
                             repo_id *id, bool *added, uint64_t *stored)
{
    if (elem != 2 && elem != 4 && elem != 8) elem = 0;
    if (elem && n % (size_t)elem) elem = 0;
    return object_put(r, REPO_KIND_CHUNK, elem, data, n, base_id, base, id, added, stored);
}

static status object_put(repo *r, repo_kind kind, int elem, const void *data, size_t n, const repo_id *base_id,
                         const void *base, repo_id *id, bool *added, uint64_t *stored)
{
    char objdir[REPO_PATH_MAX], path[REPO_PATH_MAX];
    repo_objdir(r->dir, objdir, sizeof objdir);
    *id = repo_hash(data, n);
    *added = false;
    *stored = 0;
    repo_object_path(objdir, id, path, sizeof path);
    /* present: its mtime refreshed, so a gc running meanwhile counts it as young (its grace)
     * even when nothing reached it before this commit names it */
    if (repo_object_has(objdir, id) && utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW) == 0) return STATUS_OK;
    size_t on = 0;
    uint8_t *o = encode(kind, 0, elem, NULL, data, n, &on);
    if (base && base_id && kind == REPO_KIND_CHUNK && delta_depth(objdir, base_id) < REPO_DELTA_DEPTH - 1) {
        uint8_t *x = malloc(n + 1);
        CHECK(x, "out of memory for a delta");
        const uint8_t *a = data, *b = base;
        for (size_t i = 0; i < n; i++) x[i] = a[i] ^ b[i];
        size_t dn = 0;
        uint8_t *d = encode(kind, 1, elem, base_id, x, n, &dn);
        free(x);
        if (dn < on) free(o), o = d, on = dn;
        else free(d);
    }
    status st = repo_mkparent(path);
    if (st == STATUS_OK)  /* chunk and skeleton names: repo_objects_sync before a manifest names them */
        st = repo_write_file_sync(path, o, on, &r->chaos, "model.object", kind >= REPO_KIND_MANIFEST);
    free(o);
    if (st != STATUS_OK) return st;
    *added = true;
    *stored = on;
    return STATUS_OK;
}

/* sync_name: fsync the directory after the rename (manifests, commits, and a delta's base,
 * which lands in a directory the caller's repo_objects_sync does not know of). */
static status object_copy(const char *from, const char *to, const repo_id *id, fault_plan *chaos, uint64_t *copied,
                          uint64_t *bytes, bool sync_name, int depth)
{
    if (repo_object_has(to, id)) return STATUS_OK;
    char src[REPO_PATH_MAX], dst[REPO_PATH_MAX], why[512] = "";
    repo_object_path(from, id, src, sizeof src);
    repo_object_path(to, id, dst, sizeof dst);
    char *raw = NULL;
    size_t rn = 0;
    status st = repo_read_file(src, REPO_OBJ_MAX + 4096, &raw, &rn, why, sizeof why);
    repo_object_head h;
    if (st == STATUS_OK && !repo_object_head_parse(raw, rn, &h)) {
        if (snprintf(why, sizeof why, "it has no valid header (%s)", src) >= (int)sizeof why) why[sizeof why - 1] = 0;
        st = STATUS_CORRUPT;
    }
    if (st == STATUS_OK && h.delta && depth >= REPO_DELTA_DEPTH) {  /* a cycle of bases, or a chain too deep */
        snprintf(why, sizeof why, "its delta chain is deeper than %d", REPO_DELTA_DEPTH);
        st = STATUS_CORRUPT;
    }
    if (st == STATUS_OK && h.delta && (st = object_copy(from, to, &h.base, chaos, copied, bytes, true, depth + 1)))
        snprintf(why, sizeof why, "its delta base could not be copied");
    if (st == STATUS_OK) {  /* checked before it enters the other store */
        void *content = NULL;
        size_t cn = 0;
        st = repo_object_get(from, id, 0, &content, &cn, why, sizeof why);
        free(content);
    }
    if (st == STATUS_OK) st = repo_mkparent(dst);
    if (st == STATUS_OK)
        st = repo_write_file_sync(dst, raw, rn, chaos, "model.object", sync_name || h.kind >= REPO_KIND_MANIFEST);
    if (st == STATUS_OK) {
        (*copied)++;
        *bytes += rn;
    } else {
        char hex[33];
        repo_id_hex(id, hex);
        log_error("cannot copy object %s from %s to %s: %s", hex, from, to, st == STATUS_IO ? "a write failed" : why);
        if (st == STATUS_INPUT) st = STATUS_CORRUPT;
    }
    free(raw);
    return st;
}

status repo_object_copy(const char *from, const char *to, const repo_id *id, fault_plan *chaos, uint64_t *copied,
                        uint64_t *bytes)
{
    return object_copy(from, to, id, chaos, copied, bytes, false, 0);
}
