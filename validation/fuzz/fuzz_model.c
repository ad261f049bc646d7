/* fuzz_model — libFuzzer harness of the model repository's readers (libcore/model): the
 * first byte (mod 3) picks the reader, the rest is its input:
 *   0 a manifest's JSON to repo_manifest_parse
 *   1 a commit's JSON to repo_commit_parse
 *   2 an object file to repo_object_head_parse, then (a size up to FUZZ_OBJ_CAP) to
 *     repo_object_decode into a buffer of exactly its size with a guard after it, a delta
 *     against a base of the same size; a decoded manifest or commit goes on to its parser,
 *     as repo_manifest_load and repo_commit_load do.
 * A refusal must be STATUS_CORRUPT with a reason and leave nothing allocated. An accepted
 * manifest must keep the promises of repo.h: items in ascending paths, each with bytes
 * inside the file and not overlapping another, its shape's product (without wrapping)
 * times its element size its bytes, as many chunks as bytes / chunk_bytes rounded up; an
 * accepted commit its id and parents; and both dump to JSON that parses back to the same
 * dump. An accepted header says what its 40 bytes say; a decoded object is its frame's
 * content (byte planes put back, XOR the base for a delta) and nothing is written past
 * it (libzstd is not instrumented: the guard sees what ASan does not). Built by `make
 * fuzz` with libFuzzer, ASan and UBSan, and by `make` as a replay program (replay.c). */
#include "fuzz_input.h"
#include "model/repo_impl.h"

#include <string.h>

#include <zstd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Objects of more bytes are only parsed, not decoded: 4 KiB of zstd can say gigabytes. */
#define FUZZ_OBJ_CAP ((uint64_t)1 << 22)
#define FUZZ_GUARD 64

static uint64_t dtype_bytes(const char *t)
{
    static const struct { const char *name; uint64_t size; } types[] = {
        { "float32", 4 }, { "float16", 2 }, { "bfloat16", 2 }, { "float64", 8 }, { "uint8", 1 }, { "int8", 1 },
        { "int32", 4 },   { "uint32", 4 },  { "int64", 8 },    { "uint64", 8 }, { "int16", 2 }, { "uint16", 2 },
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(types[i].name, t)) return types[i].size;
    return 0;
}

static bool zeroed(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return false;
    return true;
}

static int by_offset(const void *a, const void *b)
{
    const repo_item *x = *(repo_item *const *)a, *y = *(repo_item *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The promises of an accepted manifest. */
static void check_manifest(const repo_manifest *m)
{
    fuzz_require(m->n >= 0 && (m->n == 0 || m->items), "an accepted manifest has its items");
    fuzz_require(m->config != NULL, "an accepted manifest has its config text");
    fuzz_require(m->h.step >= 0 && m->h.world_size >= 1, "an accepted header has a step and a world size");
    repo_item **order = calloc((size_t)m->n + 1, sizeof *order);
    fuzz_require(order != NULL, "memory");
    int no = 0;
    uint64_t total = 0;
    for (int k = 0; k < m->n; k++) {
        const repo_item *it = &m->items[k];
        fuzz_require(memchr(it->path, '\0', sizeof it->path) && it->path[0] == '/', "an item's path is absolute");
        fuzz_require(k == 0 || strcmp(m->items[k - 1].path, it->path) < 0, "items in strictly ascending paths");
        uint64_t esize = dtype_bytes(it->dtype);
        fuzz_require(esize > 0, "an item's dtype is a known one");
        fuzz_require(it->ndim >= 0 && it->ndim <= PARAM_MAX_DIMS, "an item's rank is 0 to PARAM_MAX_DIMS");
        uint64_t elems = 1;
        bool wrapped = false;
        for (int i = 0; i < it->ndim; i++) wrapped |= __builtin_mul_overflow(elems, it->dims[i], &elems);
        wrapped |= __builtin_mul_overflow(elems, esize, &elems);
        fuzz_require(!wrapped, "an item's shape times its element size does not wrap");
        fuzz_require(elems == it->bytes, "an item's bytes are its shape's product times its element size");
        if (it->bytes) {
            fuzz_require(it->offset <= m->file_bytes && it->bytes <= m->file_bytes - it->offset,
                         "an item's offset + bytes <= file_bytes");
            fuzz_require(it->chunk_bytes > 0 && it->chunk_bytes <= REPO_CHUNK_BYTES && it->chunk_bytes % esize == 0,
                         "chunk_bytes is a whole number of elements up to REPO_CHUNK_BYTES");
            fuzz_require((uint64_t)it->nchunks == (it->bytes + it->chunk_bytes - 1) / it->chunk_bytes,
                         "nchunks is bytes / chunk_bytes rounded up");
            order[no++] = &m->items[k];
            total += it->bytes;
        } else {
            fuzz_require(it->nchunks == 0, "an empty item has no chunks");
        }
        fuzz_require(it->chunks != NULL, "an item has its chunk array");
    }
    qsort(order, (size_t)no, sizeof *order, by_offset);
    for (int k = 1; k < no; k++)
        fuzz_require(order[k - 1]->offset + order[k - 1]->bytes <= order[k]->offset,
                     "items do not overlap in the file");
    fuzz_require(total <= m->file_bytes, "the items' bytes fit in the file");
    free(order);

    /* the canonical dump parses back to itself */
    char why[512] = "";
    char *text = repo_manifest_dump(m);
    repo_manifest back;
    status st = repo_manifest_parse(text, strlen(text), &back, why, sizeof why);
    if (st != STATUS_OK) fprintf(stderr, "fuzz: the dump is refused: %s\n%s\n", why, text);
    fuzz_require(st == STATUS_OK, "the dump of an accepted manifest parses");
    char *text2 = repo_manifest_dump(&back);
    fuzz_require(!strcmp(text, text2), "the dump parses back to the same dump");
    fuzz_require(back.n == m->n && back.file_bytes == m->file_bytes && repo_id_eq(&back.file_hash, &m->file_hash) &&
                     repo_id_eq(&back.skeleton, &m->skeleton),
                 "the dump keeps the manifest's fields");
    free(text2);
    free(text);
    repo_manifest_free(&back);
}

static void fuzz_manifest(const char *text, size_t n)
{
    repo_manifest m;
    char why[512] = "";
    status st = repo_manifest_parse(text, n, &m, why, sizeof why);
    if (st != STATUS_OK) {
        fuzz_require(st == STATUS_CORRUPT, "a refused manifest is STATUS_CORRUPT");
        fuzz_require(why[0] != '\0', "a refused manifest says why");
        fuzz_require(!m.items && !m.config && m.n == 0, "a refused manifest leaves nothing allocated");
        return;
    }
    check_manifest(&m);
    repo_manifest_free(&m);
    fuzz_require(!m.items && !m.config && m.n == 0, "repo_manifest_free empties the manifest");
}

static void fuzz_commit(const char *text, size_t n)
{
    repo_commit c;
    char why[512] = "";
    status st = repo_commit_parse(text, n, &c, why, sizeof why);
    if (st != STATUS_OK) {
        fuzz_require(st == STATUS_CORRUPT, "a refused commit is STATUS_CORRUPT");
        fuzz_require(why[0] != '\0', "a refused commit says why");
        fuzz_require(!c.message && !c.lineage, "a refused commit leaves nothing allocated");
        return;
    }
    fuzz_require(c.nparents >= 0 && c.nparents <= 2, "a commit has 0 to 2 parents");
    fuzz_require(c.message != NULL, "an accepted commit has its message");
    fuzz_require(memchr(c.author, '\0', sizeof c.author) != NULL, "the author is a string");
    char hex[33];
    repo_id back_id;
    repo_id_hex(&c.manifest, hex);
    fuzz_require(repo_id_parse(hex, &back_id) && repo_id_eq(&back_id, &c.manifest), "an id's hex parses back");

    char *text1 = repo_commit_dump(&c);
    repo_commit b;
    st = repo_commit_parse(text1, strlen(text1), &b, why, sizeof why);
    if (st != STATUS_OK) fprintf(stderr, "fuzz: the dump is refused: %s\n%s\n", why, text1);
    fuzz_require(st == STATUS_OK, "the dump of an accepted commit parses");
    fuzz_require(repo_id_eq(&b.manifest, &c.manifest) && b.nparents == c.nparents && b.time == c.time &&
                     !strcmp(b.author, c.author) && !strcmp(b.message, c.message),
                 "the dump keeps the commit's fields");
    for (int i = 0; i < c.nparents; i++)
        fuzz_require(repo_id_eq(&b.parents[i], &c.parents[i]), "the dump keeps the parents");
    char *text2 = repo_commit_dump(&b);
    fuzz_require(!strcmp(text1, text2), "the dump parses back to the same dump");
    free(text2);
    free(text1);
    repo_commit_free(&b);
    repo_commit_free(&c);
    fuzz_require(!c.message && !c.lineage, "repo_commit_free empties the commit");
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void fuzz_object(const uint8_t *p, size_t n)
{
    repo_object_head h;
    memset(&h, 0xa5, sizeof h);
    if (n >= REPO_OBJ_HEAD)  /* a header cut short is never one */
        fuzz_require(!repo_object_head_parse(p, REPO_OBJ_HEAD - 1, &h), "39 bytes are not a header");
    if (!repo_object_head_parse(p, n, &h)) return;
    fuzz_require(n >= REPO_OBJ_HEAD && !memcmp(p, REPO_OBJ_MAGIC, 8), "a header has the magic");
    fuzz_require(h.kind >= REPO_KIND_CHUNK && h.kind <= REPO_KIND_COMMIT && h.kind == p[8],
                 "a header's kind is byte 8");
    fuzz_require((h.delta == 0 || h.delta == 1) && h.delta == p[9], "a header's delta is byte 9, 0 or 1");
    fuzz_require((h.shuffle == 0 || h.shuffle == 2 || h.shuffle == 4 || h.shuffle == 8) && h.shuffle == p[10],
                 "a header's shuffle is byte 10, 0, 2, 4 or 8");
    fuzz_require((!h.delta && !h.shuffle) || h.kind == REPO_KIND_CHUNK, "only chunks are deltas or byte planes");
    fuzz_require(!h.shuffle || h.size % (uint64_t)h.shuffle == 0, "byte planes hold whole elements");
    fuzz_require(zeroed(p + 11, 5), "a header's bytes 11-15 are zero");
    fuzz_require(h.size == le64(p + 16) && h.size <= REPO_OBJ_MAX,
                 "a header's size is bytes 16-23, at most REPO_OBJ_MAX");
    fuzz_require(!memcmp(h.base.b, p + 24, 16), "a header's base is bytes 24-39");
    char hex[33];
    repo_id back;
    repo_id_hex(&h.base, hex);
    fuzz_require(repo_id_parse(hex, &back) && repo_id_eq(&back, &h.base), "an id's hex parses back");
    if (h.size > FUZZ_OBJ_CAP) return;

    /* h.size bytes, as repo.h says, and the guard after them */
    size_t sz = (size_t)h.size;
    uint8_t *out = malloc(sz + FUZZ_GUARD), *base = NULL, *plain = malloc(sz + 1);
    fuzz_require(out && plain, "memory");
    memset(out + sz, 0xa5, FUZZ_GUARD);
    if (h.delta) {
        base = malloc(sz);
        fuzz_require(base != NULL, "memory");
        for (size_t i = 0; i < sz; i++) base[i] = (uint8_t)(i * 131 + 7);
    }
    char why[256] = "";
    bool ok = repo_object_decode(p, n, &h, base, out, why, sizeof why);
    for (size_t i = 0; i < FUZZ_GUARD; i++)
        fuzz_require(out[sz + i] == 0xa5, "repo_object_decode writes nothing past the object's size");
    if (!ok) {
        fuzz_require(why[0] != '\0', "a refused object says why");
        goto done;
    }
    /* the content is the frame's (its byte planes put back together), XOR the base for a delta */
    size_t got = ZSTD_decompress(plain, sz + 1, p + REPO_OBJ_HEAD, n - REPO_OBJ_HEAD);
    fuzz_require(!ZSTD_isError(got) && got == sz, "a decoded object's frames hold exactly its size");
    size_t elem = h.shuffle ? (size_t)h.shuffle : 1, count = sz / elem;
    for (size_t i = 0; i < sz; i++) {
        uint8_t want = plain[(i % elem) * count + i / elem] ^ (base ? base[i] : 0);
        fuzz_require(out[i] == want, "a decoded object is its frame's content");
    }
    if (h.kind == REPO_KIND_MANIFEST) fuzz_manifest((const char *)out, sz);
    if (h.kind == REPO_KIND_COMMIT) fuzz_commit((const char *)out, sz);
done:
    free(plain);
    free(base);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: fuzz_manifest((const char *)data + 1, size - 1); break;
    case 1: fuzz_commit((const char *)data + 1, size - 1); break;
    default: fuzz_object(data + 1, size - 1); break;
    }
    return 0;
}
