/* test_repo — nebula-model's store (model/repo.h) below the command line.
 *
 * Checks: ids are XXH3-128 in canonical byte order (the known digest of "abc"); an object
 * put and got back is the same bytes, stored once (a second put adds nothing); a chunk
 * close to its base is stored as a delta, smaller than alone, and decodes to itself; a
 * chunk unlike its base is stored whole; a delta whose base is gone, a flipped byte, a
 * truncated file, another kind than asked and a header that lies about the size are each
 * refused as damage with a reason; the header parser refuses bad magic, kinds,
 * encodings, non-zero padding, a delta of a manifest and sizes past the bound; the
 * manifest parser accepts a valid manifest (its dump parses back to the same dump) and
 * refuses each lie (an item's bytes against its shape, chunk counts, chunk_bytes that is
 * not whole elements, items out of order, overlapping or past the file, a bad id); ref
 * names follow git's rules; refs move by compare-and-swap (a stale old value is refused,
 * a ref that must not exist is refused when it does) and HEAD~N walks first parents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/repo.h"
#include "../check.h"

static void test_ids(test_ctx *t)
{
    repo_id id = repo_hash("abc", 3), back;
    char hex[33];
    repo_id_hex(&id, hex);
    check(t, !strcmp(hex, "06b05ab6733a618578af5f94892f3950"), "XXH3-128(\"abc\") = %s (xxh128sum's)", hex);
    check(t, repo_id_parse(hex, &back) && repo_id_eq(&back, &id), "an id parses back from its hex");
    check(t, !repo_id_parse("06b05ab6733a618578af5f94892f395", &back) && !repo_id_parse("06b05ab6733a618578af5f94892f395g", &back),
          "31 digits and a non-hex digit are refused");
}

/* The object file of id, read whole. */
static unsigned char *slurp(const repo *r, const repo_id *id, size_t *n)
{
    char objdir[REPO_PATH_MAX], p[REPO_PATH_MAX];
    repo_objdir(r->dir, objdir, sizeof objdir);
    repo_object_path(objdir, id, p, sizeof p);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    unsigned char *b = malloc(1 << 22);
    *n = fread(b, 1, 1 << 22, f);
    fclose(f);
    return b;
}

static void spill(const repo *r, const repo_id *id, const unsigned char *b, size_t n)
{
    char objdir[REPO_PATH_MAX], p[REPO_PATH_MAX];
    repo_objdir(r->dir, objdir, sizeof objdir);
    repo_object_path(objdir, id, p, sizeof p);
    FILE *f = fopen(p, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void test_objects(test_ctx *t, repo *r)
{
    char objdir[REPO_PATH_MAX], why[512];
    repo_objdir(r->dir, objdir, sizeof objdir);
    enum { N = 65536 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    rng s;
    rng_init(&s, 7, 0, 0, 0);
    for (int i = 0; i < N; i++) a[i] = (float)(rng_uniform(&s) - 0.5), b[i] = a[i] * 1.0001f, c[i] = (float)rng_uniform(&s);
    repo_id ia, ib, ic;
    bool added;
    uint64_t stored_a, stored_b, stored_c, again;
    status st = repo_object_put(r, REPO_KIND_CHUNK, a, sizeof(float) * N, NULL, NULL, &ia, &added, &stored_a);
    check(t, st == STATUS_OK && added && stored_a > 0, "a chunk is stored (%llu bytes for %zu)",
          (unsigned long long)stored_a, sizeof(float) * N);
    st = repo_object_put(r, REPO_KIND_CHUNK, a, sizeof(float) * N, NULL, NULL, &ia, &added, &again);
    check(t, st == STATUS_OK && !added && again == 0, "the same content again adds nothing");
    repo_object_put(r, REPO_KIND_CHUNK, b, sizeof(float) * N, &ia, a, &ib, &added, &stored_b);
    size_t n;
    unsigned char *raw = slurp(r, &ib, &n);
    repo_object_head h;
    check(t, raw && repo_object_head_parse(raw, n, &h) && h.delta && repo_id_eq(&h.base, &ia) && stored_b < stored_a,
          "a chunk close to its base is a delta (%llu bytes, alone %llu)", (unsigned long long)stored_b,
          (unsigned long long)stored_a);
    void *got = NULL;
    size_t gn = 0;
    check(t, repo_object_get(objdir, &ib, REPO_KIND_CHUNK, &got, &gn, why, sizeof why) == STATUS_OK && gn == sizeof(float) * N &&
                 !memcmp(got, b, gn),
          "the delta decodes to its content");
    free(got);
    repo_object_put(r, REPO_KIND_CHUNK, c, sizeof(float) * N, &ia, a, &ic, &added, &stored_c);
    unsigned char *rc = slurp(r, &ic, &n);
    check(t, rc && repo_object_head_parse(rc, n, &h) && !h.delta, "a chunk unlike its base is stored whole");
    free(rc);

    /* damage */
    size_t an;
    unsigned char *ra = slurp(r, &ia, &an);
    ra[an / 2] ^= 0x40;
    spill(r, &ia, ra, an);
    st = repo_object_get(objdir, &ia, 0, &got, &gn, why, sizeof why);
    check(t, st == STATUS_CORRUPT, "a flipped byte: %s", why);
    st = repo_object_get(objdir, &ib, 0, &got, &gn, why, sizeof why);
    check(t, st == STATUS_CORRUPT, "a delta over a damaged base: %s", why);
    ra[an / 2] ^= 0x40;
    spill(r, &ia, ra, an - 100);
    st = repo_object_get(objdir, &ia, 0, &got, &gn, why, sizeof why);
    check(t, st == STATUS_CORRUPT, "a truncated object: %s", why);
    spill(r, &ia, ra, an);
    st = repo_object_get(objdir, &ia, REPO_KIND_MANIFEST, &got, &gn, why, sizeof why);
    check(t, st == STATUS_CORRUPT && strstr(why, "kind"), "another kind than asked: %s", why);
    ra[16] ^= 1;  /* the size field */
    spill(r, &ia, ra, an);
    st = repo_object_get(objdir, &ia, 0, &got, &gn, why, sizeof why);
    check(t, st == STATUS_CORRUPT, "a header that lies about the size: %s", why);
    ra[16] ^= 1;
    spill(r, &ia, ra, an);
    char p[REPO_PATH_MAX];
    repo_object_path(objdir, &ia, p, sizeof p);
    unlink(p);
    st = repo_object_get(objdir, &ib, 0, &got, &gn, why, sizeof why);
    check(t, st == STATUS_CORRUPT && strstr(why, "missing"), "a delta whose base is gone: %s", why);
    spill(r, &ia, ra, an);

    /* the header parser alone */
    unsigned char hd[REPO_OBJ_HEAD];
    memcpy(hd, raw, sizeof hd);
    check(t, repo_object_head_parse(hd, sizeof hd, &h), "a good header parses");
    const struct { int at; unsigned char v; const char *what; } bad[] = {
        { 0, 'X', "bad magic" }, { 8, 0, "kind 0" }, { 8, 9, "kind 9" }, { 9, 2, "encoding 2" },
        { 12, 1, "non-zero padding" }, { 23, 0x40, "a size past the bound" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char x[REPO_OBJ_HEAD];
        memcpy(x, hd, sizeof x);
        x[bad[i].at] = bad[i].v;
        check(t, !repo_object_head_parse(x, sizeof x, &h), "header refused: %s", bad[i].what);
    }
    unsigned char x[REPO_OBJ_HEAD];
    memcpy(x, hd, sizeof x);
    x[8] = REPO_KIND_MANIFEST;
    check(t, !repo_object_head_parse(x, sizeof x, &h), "header refused: a delta manifest");
    check(t, !repo_object_head_parse(hd, sizeof hd - 1, &h), "header refused: 39 bytes");
    free(raw);
    free(ra);
    free(a), free(b), free(c);
}

static const char *good_manifest =
    "{\"config\":\"[model]\\nname = x\\n\",\"file_bytes\":\"4096\",\"file_hash\":\"06b05ab6733a618578af5f94892f3950\","
    "\"format\":\"nebula-model-manifest\",\"header\":{\"format_version\":2,\"layout\":{\"dp\":1,\"pp\":1,\"tp\":1,"
    "\"zero_stage\":0},\"layout_recorded\":true,\"model\":\"gpt2-tiny\",\"nebula_version\":\"0.1.0\",\"ranks_per_node\":1,"
    "\"resharded_from\":0,\"step\":3,\"table_hash\":\"18446744073709551615\",\"world_size\":1},\"items\":["
    "{\"blob\":false,\"bytes\":\"16\",\"chunk_bytes\":\"1048576\",\"chunks\":[\"06b05ab6733a618578af5f94892f3950\"],"
    "\"crc32\":4294967295,\"dtype\":\"float32\",\"offset\":\"2048\",\"path\":\"/params/a\",\"shape\":[\"2\",\"2\"]},"
    "{\"blob\":true,\"bytes\":\"8\",\"chunk_bytes\":\"4\",\"chunks\":[\"06b05ab6733a618578af5f94892f3950\","
    "\"06b05ab6733a618578af5f94892f3950\"],\"dtype\":\"uint8\",\"offset\":\"3000\",\"path\":\"/rank/rng\",\"shape\":[\"2\",\"4\"]}"
    "],\"skeleton\":\"06b05ab6733a618578af5f94892f3950\",\"version\":1}";

/* good_manifest with `from` replaced by `to` (once) parses? */
static status parse_edit(const char *from, const char *to, char *why, size_t len)
{
    char text[4096];
    const char *at = strstr(good_manifest, from);
    if (!at) return STATUS_USAGE;
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good_manifest), good_manifest, to, at + strlen(from));
    repo_manifest m;
    status st = repo_manifest_parse(text, strlen(text), &m, why, len);
    if (st == STATUS_OK) repo_manifest_free(&m);
    return st;
}

static void test_manifest(test_ctx *t)
{
    repo_manifest m, back;
    char why[512];
    status st = repo_manifest_parse(good_manifest, strlen(good_manifest), &m, why, sizeof why);
    check(t, st == STATUS_OK && m.n == 2 && m.items[1].nchunks == 2 && m.h.table_hash == UINT64_MAX && m.h.step == 3,
          "a valid manifest parses (%s)", st == STATUS_OK ? "2 items, a 64-bit table hash" : why);
    if (st != STATUS_OK) return;
    char *d1 = repo_manifest_dump(&m);
    st = repo_manifest_parse(d1, strlen(d1), &back, why, sizeof why);
    char *d2 = st == STATUS_OK ? repo_manifest_dump(&back) : NULL;
    check(t, d2 && !strcmp(d1, d2), "its dump parses back to the same dump");
    free(d1), free(d2);
    repo_manifest_free(&m);
    if (d2) repo_manifest_free(&back);
    const struct { const char *from, *to, *what; } lies[] = {
        { "\"bytes\":\"16\"", "\"bytes\":\"32\"", "an item's bytes against its shape" },
        { "\"shape\":[\"2\",\"4\"]", "\"shape\":[\"2\",\"8\"]", "a blob's shape against its bytes" },
        { "\"chunk_bytes\":\"4\"", "\"chunk_bytes\":\"8\"", "a chunk count against bytes / chunk_bytes" },
        { "\"chunk_bytes\":\"1048576\"", "\"chunk_bytes\":\"6\"", "chunk_bytes not whole float32 elements" },
        { "\"chunk_bytes\":\"1048576\"", "\"chunk_bytes\":\"2097152\"", "chunk_bytes past the chunk size" },
        { "\"path\":\"/rank/rng\"", "\"path\":\"/a/rng\"", "items out of path order" },
        { "\"offset\":\"3000\"", "\"offset\":\"2050\"", "overlapping items" },
        { "\"offset\":\"3000\"", "\"offset\":\"4090\"", "an item past the end of the file" },
        { "\"offset\":\"3000\"", "\"offset\":\"18446744073709551615\"", "an offset that overflows" },
        { "\"skeleton\":\"06b0", "\"skeleton\":\"x6b0", "a bad id" },
        { "\"dtype\":\"uint8\"", "\"dtype\":\"complex\"", "an unknown dtype" },
        { "\"crc32\":4294967295", "\"crc32\":4294967296", "a CRC-32 past 32 bits" },
        { "\"version\":1}", "\"version\":2}", "another version" },
        { "\"file_bytes\":\"4096\"", "\"file_bytes\":\"-1\"", "a negative size" },
        { "\"shape\":[\"2\",\"2\"]", "\"shape\":[\"1099511627777\",\"1099511627777\"]", "a shape whose product overflows" },
    };
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        st = parse_edit(lies[i].from, lies[i].to, why, sizeof why);
        check(t, st == STATUS_CORRUPT, "refused: %s (%s)", lies[i].what, st == STATUS_CORRUPT ? why : "accepted");
    }
}

static void test_refs(test_ctx *t, repo *r)
{
    const char *good[] = { "main", "feature/x", "v1.0", "a_b-c" };
    const char *bad[] = { "", "-x", ".x", "a..b", "a/", "a//b", "x.lock", "HEAD", "a b", "a/.b", "é" };
    bool ok = true;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) ok &= repo_name_ok(good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) ok &= !repo_name_ok(bad[i]);
    check(t, ok, "ref names: 4 valid and 11 invalid as git would have them");

    /* a chain of three commits, HEAD on main */
    repo_id c[3], man = repo_hash("m", 1);
    for (int i = 0; i < 3; i++) {
        repo_commit cm = { .manifest = man, .nparents = i > 0, .message = "m", .time = i };
        if (i) cm.parents[0] = c[i - 1];
        snprintf(cm.author, sizeof cm.author, "t");
        char *text = repo_commit_dump(&cm);
        bool added;
        uint64_t stored;
        repo_object_put(r, REPO_KIND_COMMIT, text, strlen(text), NULL, NULL, &c[i], &added, &stored);
        free(text);
    }
    status st = repo_ref_update(r->dir, "refs/heads/main", NULL, false, &c[2], "t", 1, NULL);
    check(t, st == STATUS_OK, "a new branch is created from nothing");
    st = repo_ref_update(r->dir, "refs/heads/main", NULL, false, &c[1], "t", 1, NULL);
    check(t, st == STATUS_PEER, "creating it again is refused: it exists");
    st = repo_ref_update(r->dir, "refs/heads/main", &c[0], false, &c[1], "t", 1, NULL);
    check(t, st == STATUS_PEER, "a move from a stale value is refused (compare-and-swap)");
    repo_id got;
    check(t, repo_resolve(r, "HEAD~2", &got) == STATUS_OK && repo_id_eq(&got, &c[0]), "HEAD~2 is the first commit");
    check(t, repo_resolve(r, "main~1", &got) == STATUS_OK && repo_id_eq(&got, &c[1]), "main~1 is the second");
    char hex[33];
    repo_id_hex(&c[1], hex);
    hex[10] = '\0';
    check(t, repo_resolve(r, hex, &got) == STATUS_OK && repo_id_eq(&got, &c[1]), "a 10-digit prefix resolves");
    check(t, repo_resolve(r, "HEAD~3", &got) == STATUS_INPUT, "HEAD~3 goes past the first commit: refused");
    char objdir[REPO_PATH_MAX];
    repo_objdir(r->dir, objdir, sizeof objdir);
    check(t, repo_is_ancestor(objdir, &c[0], &c[2]) && !repo_is_ancestor(objdir, &c[2], &c[0]),
          "the first commit is an ancestor of the third, not the other way");
}

int main(void)
{
    test_ctx t = { 0 };
    scratch_dir(&t, "repo");
    char root[128];
    snprintf(root, sizeof root, "%s/r", t.dir);
    repo r;
    check(&t, repo_init(root, false, "main") == STATUS_OK && repo_open(&r, root) == STATUS_OK, "init and open");
    test_ids(&t);
    test_objects(&t, &r);
    test_manifest(&t);
    test_refs(&t, &r);
    scratch_free(&t);
    printf("%s: %d failed\n", t.failures ? "FAIL" : "ok", t.failures);
    return t.failures ? 1 : 0;
}
