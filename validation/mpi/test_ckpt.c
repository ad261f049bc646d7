/* test_ckpt — checkpoints at 1-4 ranks on a small synthetic parameter table (2-D, 1-D,
 * 4-D and scalar tensors, one of 2.4 MB so checksums run on several threads and rank
 * slices cut tensors mid-row) with four groups and two per-rank blobs.
 *
 * The suite proves: sync and async round trips are bit-identical and each rank gets its
 * own blob row; an async file equals the sync one dataset by dataset; ckpt_fence waits
 * for the background copy while blobs and copy_in_save groups are staged in ckpt_save;
 * a second async save waits for the first and the first holds what was staged; keep_last prunes;
 * uncommitted debris (a .tmp directory, a step directory without COMMITTED, made by
 * stopping the commit where a crash would) is skipped by `auto` and refused by path; a
 * flipped byte in a tensor or a blob row and a truncated file make `auto` fall back with
 * a warning naming the dataset, and an explicit path fail with STATUS_CORRUPT; another
 * model and another parameter table are refused with STATUS_INPUT naming both models
 * and listing the tensors; a save of a committed step replaces it.
 *
 * Usage: test_ckpt [--ranks-per-node N]        the suite, in a fresh directory
 *        test_ckpt write DIR [--async] [--kill] a checkpoint of step 100 (seed 7) in DIR;
 *                                              --kill: then die during an async save
 *        test_ckpt read DIR WRITER_RANKS       resume it; resharded when the sizes differ
 * validation/cli/ckpt_h5py.py knows the same table and values. */
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_impl.h"
#include "base/rng.h"
#include "base/runtime.h"
#define CHECK_MPI  /* check() agreed by every rank */
#include "../check.h"

enum { LOADER_BYTES = 40, WHY = 8192 };


typedef struct fixture {
    param_table params;           /* the model's tensors */
    param_table buffers;          /* BN running statistics */
    param_buffers pb, bb;         /* params + m + v; buffers */
    rng_state rng;                /* blob "rng" */
    uint8_t loader[LOADER_BYTES]; /* blob "loader" */
    ckpt_content c;               /* points into the above: never copy a fixture */
} fixture;

/* variant: h.0.ln_1.weight dropped, lm_head.weight added, conv1 has 16 filters. */
static void fixture_init(fixture *f, const char *model, bool variant, int ranks_per_node)
{
    memset(f, 0, sizeof *f);
    param_table_init(&f->params);
    param_add(&f->params, "wte.weight", -1, true, 2, 37, 24, 0, 0);
    if (!variant) param_add(&f->params, "h.0.ln_1.weight", 0, false, 1, 24, 0, 0, 0);
    param_add(&f->params, "h.0.attn.c_attn.weight", 0, true, 2, 24, 72, 0, 0);
    param_add(&f->params, "conv1.weight", 0, true, 4, variant ? 16 : 8, 3, 3, 3);
    param_add(&f->params, "logit_scale", -1, false, 0, 0, 0, 0, 0);
    param_add(&f->params, "big.weight", 1, true, 2, 600, 1000, 0, 0);
    if (variant) param_add(&f->params, "lm_head.weight", -1, true, 2, 37, 24, 0, 0);
    param_table_init(&f->buffers);
    param_add(&f->buffers, "bn1.running_mean", 0, false, 1, 8, 0, 0, 0);
    param_add(&f->buffers, "bn1.running_var", 0, false, 1, 8, 0, 0, 0);
    param_add(&f->buffers, "bn1.num_batches_tracked", 0, false, 0, 0, 0, 0, 0);
    CHECK(param_buffers_init(&f->pb, &f->params, true) == STATUS_OK, "test buffers");
    CHECK(param_buffers_init(&f->bb, &f->buffers, false) == STATUS_OK, "test buffers");
    ckpt_content *c = &f->c;
    c->model = model;
    c->table_hash = param_table_hash(&f->params);
    c->config_text = "[model]\nname = tiny-test\n";
    c->ranks_per_node = ranks_per_node;
    c->ngroups = 4;
    c->groups[0] = (ckpt_tensors){ "params", &f->params, f->pb.params, false };
    c->groups[1] = (ckpt_tensors){ "optim/m", &f->params, f->pb.m, false };
    c->groups[2] = (ckpt_tensors){ "optim/v", &f->params, f->pb.v, false };
    c->groups[3] = (ckpt_tensors){ "buffers", &f->buffers, f->bb.params, true };  /* staged in ckpt_save */
    c->nblobs = 2;
    c->blobs[0] = (ckpt_blob){ "rng", &f->rng, sizeof f->rng, false, false };
    c->blobs[1] = (ckpt_blob){ "loader", f->loader, sizeof f->loader, false, false };
}

static void fixture_free(fixture *f)
{
    param_buffers_free(&f->pb);
    param_buffers_free(&f->bb);
    param_table_free(&f->params);
    param_table_free(&f->buffers);
}

/* Exact in float32 (multiples of 1/4 below 2^14); ckpt_h5py.py computes the same. */
static float value(int seed, int g, int t, size_t i)
{
    long v = ((long)i * 7 + (long)t * 1009 + (long)g * 100003 + (long)seed * 13) % 65521;
    return (float)v * 0.25f - 4096.0f;
}

/* The content of rank `rank` for `seed`: tensors are the same on every rank. */
static void fill(fixture *f, int seed, int rank)
{
    for (int g = 0; g < f->c.ngroups; g++) {
        const param_table *t = f->c.groups[g].table;
        for (int k = 0; k < t->count; k++)
            for (size_t i = 0; i < t->entries[k].count; i++)
                f->c.groups[g].data[t->entries[k].offset + i] = value(seed, g, k, i);
    }
    rng r;
    rng_init(&r, 1234 + (uint64_t)seed, (uint32_t)rank, RNG_PURPOSE_DATA, (uint64_t)seed);
    for (int k = 0; k < rank + 3; k++) rng_u32(&r);
    f->rng = rng_save(&r);
    for (int j = 0; j < LOADER_BYTES; j++) f->loader[j] = (uint8_t)(rank * 31 + j * 7 + seed);
}

static void zero(fixture *f)
{
    for (int g = 0; g < f->c.ngroups; g++) memset(f->c.groups[g].data, 0, f->c.groups[g].table->total * sizeof(float));
    memset(&f->rng, 0, sizeof f->rng);
    memset(f->loader, 0, sizeof f->loader);
}

/* got holds what `seed` gives for tensors, and rank `blob_rank`'s blobs. */
static bool same(const fixture *got, int seed, int blob_rank, char *why)
{
    fixture *ref = malloc(sizeof *ref);
    fixture_init(ref, got->c.model, false, 0);
    fill(ref, seed, blob_rank);
    bool ok = true;
    for (int g = 0; g < got->c.ngroups && ok; g++) {
        const param_table *t = got->c.groups[g].table;
        for (int k = 0; k < t->count && ok; k++) {
            size_t off = t->entries[k].offset;
            if (memcmp(got->c.groups[g].data + off, ref->c.groups[g].data + off, t->entries[k].count * sizeof(float))) {
                snprintf(why, WHY, "%s/%s differs", got->c.groups[g].group, t->entries[k].name);
                ok = false;
            }
        }
    }
    if (ok && memcmp(&got->rng, &ref->rng, sizeof ref->rng)) snprintf(why, WHY, "blob rng is not rank %d's", blob_rank), ok = false;
    if (ok && memcmp(got->loader, ref->loader, LOADER_BYTES)) snprintf(why, WHY, "blob loader is not rank %d's", blob_rank), ok = false;
    fixture_free(ref);
    free(ref);
    return ok;
}

static status save(const runtime *rt, const char *dir, fixture *f, int64_t step, int seed, bool async, int keep,
                   ckpt_fault fault)
{
    ckpt_writer *w;
    fill(f, seed, rt->rank);
    f->c.step = step;
    TRY(ckpt_writer_init(&w, rt->world, dir, keep, async, &f->c));
    w->fault = fault;
    status st = ckpt_save(w, &f->c);
    status st2 = ckpt_wait(w);
    ckpt_writer_free(w);
    return st != STATUS_OK ? st : st2;
}

static void step_path(char *out, const char *dir, int64_t step)
{
    ckpt_dir_step_path(out, CKPT_PATH_MAX, dir, step);
}

static bool exists(const char *dir, const char *name)
{
    char p[CKPT_PATH_MAX + 64];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

/* stderr of this rank into a buffer, to check what a failure said. */
typedef struct capture {
    int saved;          /* the real stderr */
    char path[256];      /* where it went meanwhile */
    char text[16384];   /* what was written */
} capture;

static void capture_begin(capture *cp)
{
    fflush(stderr);
    const char *tmpd = getenv("TMPDIR");
    snprintf(cp->path, sizeof cp->path, "%s/nebula-ckpt-err-XXXXXX", tmpd && tmpd[0] ? tmpd : "/tmp");
    int fd = mkstemp(cp->path);
    CHECK(fd >= 0, "mkstemp");
    cp->saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

static const char *capture_end(capture *cp)
{
    fflush(stderr);
    dup2(cp->saved, 2);
    close(cp->saved);
    FILE *f = fopen(cp->path, "r");
    size_t n = f ? fread(cp->text, 1, sizeof cp->text - 1, f) : 0;
    if (f) fclose(f);
    cp->text[n] = '\0';
    unlink(cp->path);
    fputs(cp->text, stderr);  /* still in the log */
    return cp->text;
}

/* Loads `which` capturing rank 0's stderr; true when the status is `expect` and rank 0's
 * messages contain every one of the NULL-terminated texts. */
static bool load_says(const runtime *rt, const char *dir, const char *which, fixture *f, ckpt_info *info,
                      status expect, char *why, ...)
{
    capture *cp = malloc(sizeof *cp);
    capture_begin(cp);
    status st = ckpt_load(rt->world, dir, which, &f->c, info);
    const char *text = capture_end(cp);
    bool ok = st == expect;
    if (!ok) snprintf(why, WHY, "status %s, expected %s", status_str(st), status_str(expect));
    va_list ap;
    va_start(ap, why);
    for (const char *s; ok && rt->rank == 0 && (s = va_arg(ap, const char *));)
        if (!strstr(text, s)) snprintf(why, WHY, "the messages lack \"%s\"", s), ok = false;
    va_end(ap);
    free(cp);
    return ok;
}

/* Rank 0 XORs one byte at `index` of dataset `dset`'s raw data. */
static void flip_byte(const runtime *rt, const char *step_dir, const char *dset, size_t index)
{
    if (rt->rank == 0) {
        char h5[CKPT_PATH_MAX + 16];
        snprintf(h5, sizeof h5, "%s/%s", step_dir, CKPT_FILE);
        hid_t file = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(file, dset, H5P_DEFAULT);
        haddr_t off = H5Dget_offset(d);
        H5Dclose(d);
        H5Fclose(file);
        int fd = open(h5, O_RDWR);
        uint8_t b = 0;
        CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)(off + index)) == 1, "read the byte to flip");
        b ^= 0x40;
        CHECK(pwrite(fd, &b, 1, (off_t)(off + index)) == 1 && close(fd) == 0, "flip a byte");
    }
    MPI_Barrier(rt->world);
}

/* Every flat range [a, b) of small 1-D to 4-D shapes selects exactly those elements, in
 * disjoint blocks; parallel CRC-32 pieces combine to zlib's CRC of the whole. */
static void test_internals(const runtime *rt)
{
    static const hsize_t shapes[][PARAM_MAX_DIMS] = { { 7 }, { 3, 5 }, { 2, 3, 4 }, { 2, 3, 2, 3 }, { 1, 4, 1, 3 } };
    static const int ndims[] = { 1, 2, 3, 4, 4 };
    char why[WHY] = "";
    bool ok = true;
    for (int s = 0; s < 5 && ok; s++) {
        hsize_t n = 1, blocks[64 * 2 * PARAM_MAX_DIMS];
        for (int k = 0; k < ndims[s]; k++) n *= shapes[s][k];
        hid_t space = H5Screate_simple(ndims[s], shapes[s], NULL);
        for (hsize_t a = 0; a <= n && ok; a++)
            for (hsize_t b = a; b <= n && ok; b++) {
                ckpt_select_flat(space, ndims[s], shapes[s], a, b);
                bool seen[256] = { false };
                hssize_t nb = a < b ? H5Sget_select_hyper_nblocks(space) : 0;
                hsize_t covered = 0;
                if (nb > 0) H5Sget_select_hyper_blocklist(space, 0, (hsize_t)nb, blocks);
                for (hssize_t i = 0; i < nb && ok; i++) {
                    const hsize_t *lo = blocks + 2 * ndims[s] * i, *hi = lo + ndims[s];
                    hsize_t idx[PARAM_MAX_DIMS];
                    memcpy(idx, lo, sizeof(hsize_t) * (size_t)ndims[s]);
                    for (;;) {  /* every element of the block [lo, hi] */
                        hsize_t flat = 0;
                        for (int k = 0; k < ndims[s]; k++) flat = flat * shapes[s][k] + idx[k];
                        ok = ok && flat >= a && flat < b && !seen[flat];
                        seen[flat] = true;
                        covered++;
                        int k = ndims[s] - 1;
                        while (k >= 0 && idx[k] == hi[k]) idx[k] = lo[k], k--;
                        if (k < 0) break;
                        idx[k]++;
                    }
                }
                ok = ok && covered == b - a && H5Sget_select_npoints(space) == (hssize_t)(b - a);
                if (!ok) snprintf(why, WHY, "shape %d, range [%llu, %llu)", s, (unsigned long long)a, (unsigned long long)b);
            }
        H5Sclose(space);
    }
    check(rt, ok, "select_flat: every flat range of 1-D..4-D shapes, exactly and disjointly", why);
    static const size_t sizes[] = { 0, 1, 3u << 20, (7u << 20) + 3, (300u << 20) / 64 + 5 };
    ok = true;
    for (int i = 0; i < 5 && ok; i++) {
        uint8_t *src = malloc(sizes[i] + 1), *dst = malloc(sizes[i] + 1);
        for (size_t j = 0; j < sizes[i]; j++) src[j] = (uint8_t)(j * 131 + (j >> 11));
        uint32_t want = ckpt_crc_bytes(0, src, sizes[i]);
        ok = ckpt_crc_copy(dst, src, sizes[i]) == want && !memcmp(dst, src, sizes[i]) &&
             ckpt_crc_copy(NULL, src, sizes[i]) == want;
        if (!ok) snprintf(why, WHY, "%zu bytes", sizes[i]);
        free(src);
        free(dst);
    }
    check(rt, ok, "parallel CRC-32 (copy and hash in pieces) equals zlib's crc32", why);
}

static void test_roundtrip(const runtime *rt, const char *base, fixture *f)
{
    char dir[CKPT_PATH_MAX], why[WHY] = "";
    ckpt_info info;
    for (int async = 0; async < 2; async++) {
        snprintf(dir, sizeof dir, "%s/roundtrip-%s", base, async ? "async" : "sync");
        status st = save(rt, dir, f, 10 + async, 3 + async, async, 2, CKPT_FAULT_NONE);
        zero(f);
        if (st == STATUS_OK) st = ckpt_load(rt->world, dir, "auto", &f->c, &info);
        bool ok = st == STATUS_OK && info.step == 10 + async && !info.resharded && info.skipped == 0 &&
                  info.world_size == rt->size;
        if (!ok) snprintf(why, WHY, "status %s, step %lld", status_str(st), (long long)info.step);
        check(rt, ok && same(f, 3 + async, rt->rank, why),
              async ? "async round trip: bit-identical, own blob row" : "sync round trip: bit-identical, own blob row",
              why);
    }
}

/* Both files hold the same datasets, bytes and checksums (rank 0 compares). */
static bool files_equal(const char *a, const char *b, const ckpt_content *c, int size, char *why)
{
    ckpt_plan p;
    ckpt_plan_build(&p, c, size);
    hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT), fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
    bool ok = fa >= 0 && fb >= 0;
    int64_t sa = -1, sb = -2;
    ok = ok && !ckpt_attr_read(fa, "step", H5T_NATIVE_INT64, 0, &sa) && !ckpt_attr_read(fb, "step", H5T_NATIVE_INT64, 0, &sb) && sa == sb;
    for (int k = 0; k < p.ndsets && ok; k++) {
        hid_t da = H5Dopen2(fa, p.dsets[k].path, H5P_DEFAULT), db = H5Dopen2(fb, p.dsets[k].path, H5P_DEFAULT);
        char *x = malloc(p.dsets[k].bytes), *y = malloc(p.dsets[k].bytes);
        hid_t t = p.dsets[k].group < 0 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
        uint32_t ca = 0, cb = 1;
        ok = H5Dread(da, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0 && H5Dread(db, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) >= 0 &&
             !memcmp(x, y, p.dsets[k].bytes) && !ckpt_attr_read(da, "checksum", H5T_NATIVE_UINT32, 0, &ca) &&
             !ckpt_attr_read(db, "checksum", H5T_NATIVE_UINT32, 0, &cb) && ca == cb;
        if (!ok) snprintf(why, WHY, "%s differs", p.dsets[k].path);
        free(x);
        free(y);
        H5Dclose(da);
        H5Dclose(db);
    }
    if (fa >= 0) H5Fclose(fa);
    if (fb >= 0) H5Fclose(fb);
    ckpt_plan_free(&p);
    return ok;
}

static void test_async(const runtime *rt, const char *base, fixture *f)
{
    char a[CKPT_PATH_MAX], b[CKPT_PATH_MAX], fa[CKPT_PATH_MAX + 64], fb[CKPT_PATH_MAX + 64], why[WHY] = "";
    snprintf(a, sizeof a, "%s/equal-sync", base);
    snprintf(b, sizeof b, "%s/equal-async", base);
    status st = save(rt, a, f, 5, 11, false, 2, CKPT_FAULT_NONE);
    if (st == STATUS_OK) st = save(rt, b, f, 5, 11, true, 2, CKPT_FAULT_NONE);
    snprintf(fa, sizeof fa, "%s/step_00000005/%s", a, CKPT_FILE);
    snprintf(fb, sizeof fb, "%s/step_00000005/%s", b, CKPT_FILE);
    bool ok = st == STATUS_OK && (rt->rank != 0 || files_equal(fa, fb, &f->c, rt->size, why));
    check(rt, ok, "async file equals the sync file: every dataset and checksum", why);

    /* The first save's thread sleeps before copying: ckpt_fence must wait for the copy
     * (without it the refill below would land in the checkpoint of step 30), and the
     * second save must wait for the whole first one. */
    snprintf(a, sizeof a, "%s/wait", base);
    ckpt_writer *w;
    fill(f, 21, rt->rank);
    f->c.step = 30;
    st = ckpt_writer_init(&w, rt->world, a, 3, true, &f->c);
    if (st != STATUS_OK) {
        check(rt, false, "async writer init", status_str(st));
        return;
    }
    w->delay_ms = 1500;  /* far longer than refilling the buffers, even on a loaded machine */
    st = ckpt_save(w, &f->c);
    /* Blobs and the copy_in_save group may change at once, the rest after the fence. */
    memset(f->c.groups[3].data, 0, f->c.groups[3].table->total * sizeof(float));
    memset(&f->rng, 0, sizeof f->rng);
    memset(f->loader, 0, sizeof f->loader);
    ckpt_fence(w);
    fill(f, 22, rt->rank);
    f->c.step = 40;
    if (st == STATUS_OK) st = ckpt_save(w, &f->c);
    char p30[CKPT_PATH_MAX];
    step_path(p30, a, 30);
    ok = st == STATUS_OK && (rt->rank != 0 || (w->waited == 1 && exists(p30, CKPT_MARKER)));
    snprintf(why, WHY, "status %s, waited %d", status_str(st), w->waited);
    check(rt, ok, "a second async save waits for the first (committed when it returns)", why);
    st = ckpt_wait(w);
    ckpt_writer_free(w);
    ckpt_info info;
    zero(f);
    if (st == STATUS_OK) st = ckpt_load(rt->world, a, p30, &f->c, &info);
    check(rt, st == STATUS_OK && same(f, 21, rt->rank, why), "the first async save holds what was staged", why);
    zero(f);
    st = ckpt_load(rt->world, a, "auto", &f->c, &info);
    check(rt, st == STATUS_OK && info.step == 40 && same(f, 22, rt->rank, why), "the second async save", why);
}

static void test_keep_and_debris(const runtime *rt, const char *base, fixture *f)
{
    char dir[CKPT_PATH_MAX], why[WHY] = "";
    snprintf(dir, sizeof dir, "%s/keep", base);
    ckpt_writer *w;
    status st = ckpt_writer_init(&w, rt->world, dir, 2, true, &f->c);
    for (int s = 1; s <= 4 && st == STATUS_OK; s++) {
        ckpt_fence(w);
        fill(f, s, rt->rank);
        f->c.step = s;
        st = ckpt_save(w, &f->c);
    }
    if (st == STATUS_OK) st = ckpt_wait(w);
    ckpt_writer_free(w);
    bool ok = st == STATUS_OK && !exists(dir, "step_00000001") && !exists(dir, "step_00000002") &&
              exists(dir, "step_00000003/COMMITTED") && exists(dir, "step_00000004/COMMITTED");
    check(rt, ok, "keep_last 2 keeps steps 3 and 4 only", status_str(st));

    /* Debris newer than the last commit: a crash between rename and marker (step 5),
     * a complete .tmp never renamed (step 6), an empty .tmp (step 7). */
    status s5 = save(rt, dir, f, 5, 5, false, 2, CKPT_FAULT_BEFORE_MARKER);
    status s6 = save(rt, dir, f, 6, 6, true, 2, CKPT_FAULT_BEFORE_RENAME);
    if (rt->rank == 0) {
        char p[CKPT_PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/.step_00000007.tmp", dir);
        mkdir(p, 0755);
    }
    MPI_Barrier(rt->world);
    ok = s5 == STATUS_IO && s6 == STATUS_IO && exists(dir, "step_00000005/state.h5") &&
         !exists(dir, "step_00000005/COMMITTED") && exists(dir, ".step_00000006.tmp/state.h5");
    check(rt, ok, "a stopped commit leaves debris and reports STATUS_IO", "");
    ckpt_info info;
    zero(f);
    ok = load_says(rt, dir, "auto", f, &info, STATUS_OK, why, "step_00000005: not committed",
                   ".step_00000006.tmp: an unfinished save", NULL) &&
         info.step == 4 && info.skipped == 3 && same(f, 4, rt->rank, why);
    check(rt, ok, "auto skips uncommitted debris with warnings and loads step 4", why);
    /* A failed background write is returned by the next save, which writes nothing;
     * the save after it works again. */
    char sdir[CKPT_PATH_MAX];
    snprintf(sdir, sizeof sdir, "%s/surface", base);
    status s1 = STATUS_IO, s2 = STATUS_OK, s3 = STATUS_IO;
    if (ckpt_writer_init(&w, rt->world, sdir, 3, true, &f->c) == STATUS_OK) {
        w->fault = CKPT_FAULT_BEFORE_RENAME;
        f->c.step = 1;
        s1 = ckpt_save(w, &f->c);
        w->fault = CKPT_FAULT_NONE;
        f->c.step = 2;
        s2 = ckpt_save(w, &f->c);
        f->c.step = 3;
        s3 = ckpt_save(w, &f->c);
        if (s3 == STATUS_OK) s3 = ckpt_wait(w);
        ckpt_writer_free(w);
    }
    ok = s1 == STATUS_OK && s2 == STATUS_IO && s3 == STATUS_OK && !exists(sdir, ".step_00000002.tmp") &&
         !exists(sdir, "step_00000002") && exists(sdir, "step_00000003/COMMITTED");
    snprintf(why, WHY, "saves returned %s, %s, %s", status_str(s1), status_str(s2), status_str(s3));
    check(rt, ok, "a failed background write is returned by the next save, which writes nothing", why);

    char p5[CKPT_PATH_MAX];
    step_path(p5, dir, 5);
    ok = load_says(rt, dir, p5, f, &info, STATUS_INPUT, why, "not a committed checkpoint", "HINT:", NULL);
    check(rt, ok, "an explicit uncommitted path is refused (STATUS_INPUT, HINT)", why);
    st = save(rt, dir, f, 8, 8, false, 2, CKPT_FAULT_NONE);
    ok = st == STATUS_OK && !exists(dir, "step_00000005") && !exists(dir, ".step_00000006.tmp") &&
         !exists(dir, ".step_00000007.tmp") && !exists(dir, "step_00000003") && exists(dir, "step_00000004/COMMITTED");
    check(rt, ok, "the next commit removes older debris and prunes to keep_last", status_str(st));
}

static void test_corrupt(const runtime *rt, const char *base, fixture *f)
{
    char dir[CKPT_PATH_MAX], p[CKPT_PATH_MAX], why[WHY] = "";
    ckpt_info info;
    snprintf(dir, sizeof dir, "%s/corrupt", base);
    status st = save(rt, dir, f, 50, 5, false, 9, CKPT_FAULT_NONE);
    if (st == STATUS_OK) st = save(rt, dir, f, 60, 6, false, 9, CKPT_FAULT_NONE);
    check(rt, st == STATUS_OK, "two checkpoints saved", status_str(st));
    step_path(p, dir, 60);
    flip_byte(rt, p, "/params/big.weight", 1001);
    zero(f);
    bool ok = load_says(rt, dir, "auto", f, &info, STATUS_OK, why, "checksum mismatch in dataset /params/big.weight",
                        "falling back", NULL) &&
              info.step == 50 && info.skipped == 1 && same(f, 5, rt->rank, why);
    check(rt, ok, "a flipped tensor byte: auto falls back to step 50, warning names the dataset", why);
    ok = load_says(rt, dir, p, f, &info, STATUS_CORRUPT, why, "checksum mismatch in dataset /params/big.weight", NULL);
    check(rt, ok, "a flipped tensor byte: the explicit path gives STATUS_CORRUPT naming the dataset", why);

    st = save(rt, dir, f, 70, 7, true, 9, CKPT_FAULT_NONE);
    step_path(p, dir, 70);
    flip_byte(rt, p, "/rank/loader", (size_t)(rt->size - 1) * LOADER_BYTES + 3);
    ok = st == STATUS_OK && load_says(rt, dir, p, f, &info, STATUS_CORRUPT, why, "/rank/loader", NULL);
    check(rt, ok, "a flipped byte in the last rank's blob row: STATUS_CORRUPT naming /rank/loader", why);

    st = save(rt, dir, f, 80, 8, false, 9, CKPT_FAULT_NONE);
    step_path(p, dir, 80);
    if (rt->rank == 0) {
        char h5[CKPT_PATH_MAX + 16];
        struct stat sb;
        snprintf(h5, sizeof h5, "%s/%s", p, CKPT_FILE);
        CHECK(stat(h5, &sb) == 0 && truncate(h5, sb.st_size / 2) == 0, "truncate a checkpoint");
    }
    MPI_Barrier(rt->world);
    zero(f);
    ok = st == STATUS_OK &&
         load_says(rt, dir, "auto", f, &info, STATUS_OK, why, "step_00000080: cannot open", "truncated", NULL) &&
         info.step == 50 && info.skipped == 3 && same(f, 5, rt->rank, why);
    check(rt, ok, "a truncated newest file: auto falls back past every bad one to step 50", why);
    ok = load_says(rt, dir, p, f, &info, STATUS_CORRUPT, why, "truncated", NULL);
    check(rt, ok, "a truncated file: the explicit path gives STATUS_CORRUPT", why);

    /* Another model stops `auto` at once: older checkpoints are of that model too. */
    f->c.model = "other-model";
    ok = load_says(rt, dir, "auto", f, &info, STATUS_INPUT, why, "'tiny-test'", "'other-model'", NULL);
    f->c.model = "tiny-test";
    check(rt, ok, "another model: STATUS_INPUT naming both models", why);

    fixture *v = malloc(sizeof *v);
    fixture_init(v, "tiny-test", true, 0);
    step_path(p, dir, 50);
    ok = load_says(rt, dir, p, v, &info, STATUS_INPUT, why, "table_hash", "missing: params/lm_head.weight",
                   "unexpected: params/h.0.ln_1.weight", "params/conv1.weight is (8, 3, 3, 3) in the file, (16, 3, 3, 3) here",
                   NULL);
    check(rt, ok, "another parameter table: STATUS_INPUT listing missing, unexpected and reshaped tensors", why);
    fixture_free(v);
    free(v);

    st = save(rt, dir, f, 50, 9, false, 9, CKPT_FAULT_NONE);
    zero(f);
    if (st == STATUS_OK) st = ckpt_load(rt->world, dir, p, &f->c, &info);
    check(rt, st == STATUS_OK && same(f, 9, rt->rank, why), "saving a committed step again replaces it", why);
}

static void test_none_and_empty(const runtime *rt, const char *base, fixture *f)
{
    char dir[CKPT_PATH_MAX];
    ckpt_info info;
    fill(f, 1, rt->rank);
    status st = ckpt_load(rt->world, base, "none", &f->c, &info);
    check(rt, st == STATUS_OK && info.step == -1 && f->pb.params[0] == value(1, 0, 0, 0), "`none` loads nothing", "");
    snprintf(dir, sizeof dir, "%s/does-not-exist", base);
    st = ckpt_load(rt->world, dir, "auto", &f->c, &info);
    check(rt, st == STATUS_OK && info.step == -1 && f->pb.params[0] == value(1, 0, 0, 0),
          "`auto` without checkpoints is a fresh start (step -1)", "");
}

static int run_suite(const runtime *rt)
{
    char base[256] = "";
    mpi_test_tmpdir(rt, "ckpt", base, sizeof base);
    if (rt->rank == 0) printf("# %d ranks, %d per node; checkpoints under %s\n", rt->size, rt->max_local_size, base);
    fixture *f = malloc(sizeof *f);
    fixture_init(f, "tiny-test", false, rt->max_local_size);
    test_internals(rt);
    test_roundtrip(rt, base, f);
    test_async(rt, base, f);
    test_keep_and_debris(rt, base, f);
    test_corrupt(rt, base, f);
    test_none_and_empty(rt, base, f);
    fixture_free(f);
    free(f);
    MPI_Barrier(rt->world);
    if (!failures) mpi_test_rmtree(rt, base);
    return failures;
}

/* For validation/cli/test_ckpt_files.sh: step 100, seed 7. With kill, then an async save
 * of step 200 whose thread sleeps, and every rank killed (SIGKILL) before it writes. */
static int run_write(const runtime *rt, const char *dir, bool async, bool kill_async)
{
    fixture *f = malloc(sizeof *f);
    fixture_init(f, "tiny-test", false, rt->max_local_size);
    status st = save(rt, dir, f, 100, 7, async, 2, CKPT_FAULT_NONE);
    check(rt, st == STATUS_OK, async ? "write (async)" : "write (sync)", status_str(st));
    ckpt_writer *w;
    if (kill_async && st == STATUS_OK && ckpt_writer_init(&w, rt->world, dir, 2, true, &f->c) == STATUS_OK) {
        fill(f, 8, rt->rank);
        f->c.step = 200;
        w->delay_ms = 60000;
        st = ckpt_save(w, &f->c);
        check(rt, st == STATUS_OK, "async save of step 200 staged; killing every rank", status_str(st));
        MPI_Barrier(rt->world);
        raise(SIGKILL);
    }
    fixture_free(f);
    free(f);
    return failures;
}

static int run_read(const runtime *rt, const char *dir, int writer_ranks)
{
    char why[WHY] = "";
    fixture *f = malloc(sizeof *f);
    fixture_init(f, "tiny-test", false, 0);
    ckpt_info info;
    status st = ckpt_load(rt->world, dir, "auto", &f->c, &info);
    bool resharded = writer_ranks != rt->size;
    bool ok = st == STATUS_OK && info.step == 100 && info.world_size == writer_ranks && info.resharded == resharded;
    if (!ok) snprintf(why, WHY, "status %s, step %lld, world_size %d", status_str(st), (long long)info.step, info.world_size);
    check(rt, ok, resharded ? "resharded: step 100 of a different world size" : "same world size: not resharded", why);
    ok = ok && same(f, 7, resharded ? 0 : rt->rank, why);
    check(rt, ok, resharded ? "resharded: tensors bit-identical, blobs are rank 0's" : "tensors bit-identical, own blob row", why);
    fixture_free(f);
    free(f);
    return failures;
}

int main(int argc, char **argv)
{
    runtime_options ro = { .ranks_per_node = 0, .bind = RUNTIME_BIND_NONE };
    const char *mode = "suite", *dir = NULL;
    bool async = false, kill_async = false;
    int writer_ranks = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks-per-node") && i + 1 < argc) ro.ranks_per_node = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--async")) async = true;
        else if (!strcmp(argv[i], "--kill")) kill_async = true;
        else if (!strcmp(argv[i], "write") && i + 1 < argc) mode = "write", dir = argv[++i];
        else if (!strcmp(argv[i], "read") && i + 2 < argc) mode = "read", dir = argv[++i], writer_ranks = atoi(argv[++i]);
    }
    runtime rt;
    status st = runtime_init(&rt, &argc, &argv, &ro);
    if (st != STATUS_OK) runtime_exit(&rt, st);
    int f = !strcmp(mode, "write") ? run_write(&rt, dir, async, kill_async)
          : !strcmp(mode, "read")  ? run_read(&rt, dir, writer_ranks)
                                   : run_suite(&rt);
    runtime_free(&rt);
    return f ? 1 : 0;
}
