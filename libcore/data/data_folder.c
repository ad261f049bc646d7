/* data_folder — a folder of class sub-folders of PNG / JPEG files into one HDF5 image
 * set (data.h, data_prepare_images; nebula-train prepare --images).
 *
 * The steps, every rank alike: rank 0 scans the folder (sorted as torchvision's
 * ImageFolder sorts it) and broadcasts the list, so a folder that changes meanwhile
 * cannot give ranks different lists; each rank reads the first bytes of its share of
 * the files (PNG, JPEG or other) and the kinds are gathered; then the image set is
 * fixed (N images), the file is created collectively under a temporary name with its
 * datasets allocated, and rank r decodes images [r N / P, (r + 1) N / P) and writes
 * its rows with independent HDF5 writes, so no rank waits for another until the one
 * agreement at the end (corrupt count, I/O failures, pixel sums). The pixel sums are
 * integers, so the mean and std attributes — and the whole file — are the same bytes
 * at any number of ranks. With skip_corrupt, an image found corrupt leaves a hole,
 * and the set is written again without it (a second pass over the survivors; corrupt
 * files are rare, so this costs nothing in the usual case and keeps one write path).
 * The file is renamed over OUT only after a clean pass, fsync'd with its directory
 * (docs/design.md#durable-writes). */
#include "data.h"
#include "data_folder_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/path.h"
#include "base/runtime.h"
#include "comm/ctl.h"

#define SCAN_MAX_DEPTH 32        /* sub-folders of a class: deeper is taken for a link loop */
#define WRITE_BATCH    16        /* images per H5Dwrite */

typedef struct vec {
    char **s;                    /* strings, malloc'd */
    size_t n, cap;
} vec;

static int vec_push(vec *v, char *s)
{
    if (!s) return -1;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        char **p = realloc(v->s, cap * sizeof *p);
        if (!p) {
            free(s);
            return -1;
        }
        v->s = p;
        v->cap = cap;
    }
    v->s[v->n++] = s;
    return 0;
}

static void vec_free(vec *v)
{
    for (size_t i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s);
    *v = (vec){ 0 };
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* torchvision sorts a class's files as sorted(os.walk(...)) then sorted(names): by the
 * directory's path, then by name. Entries are "DIRPATH\0NAME": strcmp compares the
 * directories, then the names. */
static int cmp_entry(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    int c = strcmp(x, y);
    return c ? c : strcmp(x + strlen(x) + 1, y + strlen(y) + 1);
}

static char *entry_new(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *e = malloc(a + b + 2);
    if (e) {
        memcpy(e, dir, a + 1);
        memcpy(e + a + 1, name, b + 1);
    }
    return e;
}

/* Every regular file under dir (hidden names skipped) into files; *other counts the rest. */
static status scan_class(const char *dir, int depth, vec *files, uint64_t *other)
{
    if (depth > SCAN_MAX_DEPTH) {
        log_error("%s: more than %d folders deep: a symbolic link loop? Remove the link", dir, SCAN_MAX_DEPTH);
        return STATUS_INPUT;
    }
    DIR *d = opendir(dir);
    if (!d) {
        log_error("cannot read the folder %s: %s", dir, log_errno_str());
        return STATUS_INPUT;
    }
    status st = STATUS_OK;
    vec subs = { 0 };
    struct dirent *e;
    char p[4096];
    while (st == STATUS_OK && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        struct stat sb;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p || stat(p, &sb) != 0) {
            (*other)++;                                      /* a dangling link or an unusable name */
        } else if (S_ISDIR(sb.st_mode)) {
            if (vec_push(&subs, strdup(p))) st = STATUS_NOMEM;
        } else if (S_ISREG(sb.st_mode)) {
            if (vec_push(files, entry_new(dir, e->d_name))) st = STATUS_NOMEM;
        } else {
            (*other)++;
        }
    }
    closedir(d);
    for (size_t i = 0; i < subs.n && st == STATUS_OK; i++) st = scan_class(subs.s[i], depth + 1, files, other);
    vec_free(&subs);
    return st;
}

/* The folder as every rank sees it: one blob, parsed in place. */
typedef struct folder {
    char *blob;                  /* u64 K, u64 n, u64 other, int32 labels (n), K names, n paths ('\0' after each) */
    size_t bytes;
    uint64_t K, n, other;
    const char **classes;        /* (K) */
    const char **paths;          /* (n) */
    const int32_t *labels;       /* (n) */
} folder;

/* Rank 0: the scan, serialised. */
static status scan_folder(const char *root, folder *f)
{
    vec classes = { 0 }, all = { 0 };
    int32_t *labels = NULL;
    status st = STATUS_OK;
    DIR *d = opendir(root);
    if (!d) {
        log_error("--images %s: cannot open the folder: %s", root, log_errno_str());
        return STATUS_INPUT;
    }
    struct dirent *e;
    char p[4096];
    while (st == STATUS_OK && (e = readdir(d))) {
        struct stat sb;
        if (e->d_name[0] == '.') continue;
        if (snprintf(p, sizeof p, "%s/%s", root, e->d_name) < (int)sizeof p && stat(p, &sb) == 0 &&
            S_ISDIR(sb.st_mode)) {
            if (vec_push(&classes, strdup(e->d_name))) st = STATUS_NOMEM;
        } else {
            f->other++;                                      /* a README beside the classes */
        }
    }
    closedir(d);
    if (st == STATUS_OK && classes.n == 0) {
        log_error("--images %s: no class folders: the layout is %s/CLASS/IMAGE (torchvision's ImageFolder), one "
                  "sub-folder per class", root, root);
        st = STATUS_INPUT;
    }
    if (st == STATUS_OK) qsort(classes.s, classes.n, sizeof *classes.s, cmp_str);
    size_t names = 0;
    for (size_t k = 0; k < classes.n && st == STATUS_OK; k++) {
        size_t first = all.n;
        snprintf(p, sizeof p, "%s/%s", root, classes.s[k]);
        st = scan_class(p, 0, &all, &f->other);
        if (st != STATUS_OK) break;
        qsort(all.s + first, all.n - first, sizeof *all.s, cmp_entry);
        int32_t *l = realloc(labels, (all.n ? all.n : 1) * sizeof *l);
        if (!l) {
            st = STATUS_NOMEM;
            break;
        }
        labels = l;
        for (size_t i = first; i < all.n; i++) labels[i] = (int32_t)k;
        names += strlen(classes.s[k]) + 1;
    }
    size_t paths = 0;
    for (size_t i = 0; i < all.n; i++) paths += strlen(all.s[i]) + strlen(all.s[i] + strlen(all.s[i]) + 1) + 2;
    f->bytes = 24 + all.n * 4 + names + paths;
    f->blob = st == STATUS_OK ? malloc(f->bytes) : NULL;
    if (st == STATUS_OK && !f->blob) st = STATUS_NOMEM;
    if (st == STATUS_OK) {
        uint64_t hdr[3] = { classes.n, all.n, f->other };
        char *w = f->blob;
        memcpy(w, hdr, 24);
        if (all.n) memcpy(w + 24, labels, all.n * 4);
        w += 24 + all.n * 4;
        for (size_t k = 0; k < classes.n; k++) w += sprintf(w, "%s", classes.s[k]) + 1;
        for (size_t i = 0; i < all.n; i++) w += sprintf(w, "%s/%s", all.s[i], all.s[i] + strlen(all.s[i]) + 1) + 1;
    }
    if (st == STATUS_NOMEM) log_error("--images %s: out of memory for the list of files", root);
    vec_free(&classes);
    vec_free(&all);
    free(labels);
    return st;
}

static status parse_folder(folder *f)
{
    uint64_t hdr[3];
    memcpy(hdr, f->blob, 24);
    f->K = hdr[0];
    f->n = hdr[1];
    f->other = hdr[2];
    f->classes = malloc((f->K ? f->K : 1) * sizeof *f->classes);
    f->paths = malloc((f->n ? f->n : 1) * sizeof *f->paths);
    if (!f->classes || !f->paths) return STATUS_NOMEM;
    f->labels = (const int32_t *)(void *)(f->blob + 24);
    const char *r = f->blob + 24 + f->n * 4;
    for (uint64_t k = 0; k < f->K; k++, r += strlen(r) + 1) f->classes[k] = r;
    for (uint64_t i = 0; i < f->n; i++, r += strlen(r) + 1) f->paths[i] = r;
    return STATUS_OK;
}

static void folder_free(folder *f)
{
    free(f->blob);
    free(f->classes);
    free(f->paths);
}

/* The whole file in memory (images are read once, whole, by the decoders). */
static int read_file(const char *path, uint8_t **buf, size_t *n, char *why, size_t len)
{
    int fd;
    struct stat sb;
    if (path_open_regular(path, &fd, &sb, IMG_MAX_FILE, why, len) != 0) return -1;
    *n = (size_t)sb.st_size;
    *buf = malloc(*n ? *n : 1);
    int rc = *buf && path_read_all_at(fd, *buf, *n, 0) == 0 ? 0 : -1;
    if (rc) snprintf(why, len, "cannot be read: %s", *buf ? (errno ? strerror(errno) : "it shrank") : "out of memory");
    close(fd);
    return rc;
}

static img_kind classify(const char *path)
{
    uint8_t head[8];
    char why[256];
    int fd;
    struct stat sb;
    if (path_open_regular(path, &fd, &sb, 0, why, sizeof why) != 0) {
        log_error("%s %s", path, why);
        return IMG_KIND_UNREADABLE;
    }
    ssize_t got = pread(fd, head, sizeof head, 0);
    close(fd);
    if (got < 0) {
        log_error("%s cannot be read: %s", path, log_errno_str());
        return IMG_KIND_UNREADABLE;
    }
    return img_sniff(head, (size_t)got);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One write of a set: n images (paths, labels) into the file tmp. */
typedef struct pass {
    const struct runtime *rt;
    const data_images_options *opt;
    comm_ctl ctl;
    const folder *f;             /* class names */
    const char *tmp;             /* the temporary file */
    const char **paths;          /* (n) */
    const int32_t *labels;       /* (n) */
    uint64_t n;
    uint8_t *bad;                /* (n): 1 for a corrupt image (this rank's range, then everyone's) */
    uint64_t agree[8];           /* corrupt, I/O failures, sum of pixels (3), of their squares (3) */
    double t0;                   /* start, for the progress line */
} pass;

static void range_of(uint64_t n, int r, int P, uint64_t *lo, uint64_t *hi)
{
    *lo = n * (uint64_t)r / (uint64_t)P;
    *hi = n * (uint64_t)(r + 1) / (uint64_t)P;
}

/* Decodes and writes this rank's rows; returns when done or (without skip_corrupt) at
 * the first corrupt image. */
static void pass_rows(pass *ps, hid_t ds)
{
    const int H = ps->opt->crop, rank = ps->rt->rank, P = ps->rt->size;
    const size_t row = (size_t)H * H * 3;
    uint64_t lo, hi;
    range_of(ps->n, rank, P, &lo, &hi);
    uint8_t *buf = malloc(WRITE_BATCH * row);
    if (!buf) {
        log_error("out of memory for %d images of %d x %d", WRITE_BATCH, H, H);
        ps->agree[1]++;
        return;
    }
    double last = 0;
    for (uint64_t b0 = lo; b0 < hi && !ps->agree[1]; b0 += WRITE_BATCH) {
        uint64_t k = hi - b0 < WRITE_BATCH ? hi - b0 : WRITE_BATCH;
        memset(buf, 0, k * row);
        for (uint64_t i = 0; i < k; i++) {
            const char *path = ps->paths[b0 + i];
            uint8_t *file = NULL, *px = NULL;
            size_t bytes = 0;
            int W = 0, Hh = 0;
            char why[512];
            int rc = read_file(path, &file, &bytes, why, sizeof why);
            if (rc == 0) rc = img_decode(file, bytes, &px, &W, &Hh, why, sizeof why);
            free(file);
            if (rc == 0 && img_resize_crop(px, W, Hh, ps->opt->size, H, buf + i * row) != 0) {
                snprintf(why, sizeof why, "%d x %d pixels cannot be resized to a shorter side of %d (an aspect ratio "
                         "beyond 2^24 / %d, or out of memory)", W, Hh, ps->opt->size, ps->opt->size);
                rc = -1;
            }
            free(px);
            if (rc != 0) {
                ps->bad[b0 + i] = 1;
                ps->agree[0]++;
                if (ps->opt->skip_corrupt) {
                    log_warn("skipping %s: %s", path, why);
                    continue;
                }
                log_error("%s: %s (fix or remove the file; --skip-corrupt leaves such files out)", path, why);
                free(buf);
                return;
            }
            for (size_t j = 0; j < row; j++) {
                unsigned v = buf[i * row + j];
                ps->agree[2 + j % 3] += v;
                ps->agree[5 + j % 3] += v * v;
            }
        }
        hsize_t start[4] = { b0, 0, 0, 0 }, count[4] = { k, (hsize_t)H, (hsize_t)H, 3 };
        hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(4, count, NULL);
        herr_t w = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        if (w >= 0) w = H5Dwrite(ds, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, buf);
        H5Sclose(ms);
        H5Sclose(fs);
        if (w < 0) {
            log_error("writing images %" PRIu64 "..%" PRIu64 " into %s failed (see HDF5's message above)", b0,
                      b0 + k - 1, ps->tmp);
            ps->agree[1]++;
        }
        double t = now_s();
        if (ps->opt->progress && rank == 0 && (t - last > 0.5 || b0 + k == hi)) {
            /* rank 0 sees its own rows; the ranges are equal, so P times its count estimates all */
            uint64_t done = (b0 + k - lo) * (uint64_t)P, all = ps->n;
            fprintf(stderr, "\rprepare: %" PRIu64 "/%" PRIu64 " files, %.1f images/s   ", done < all ? done : all,
                    all, (double)done / (t - ps->t0));
            last = t;
        }
    }
    if (ps->opt->progress && rank == 0) fputc('\n', stderr);
    free(buf);
}

static hid_t dataset(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims)
{
    hid_t s = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
    H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));  /* parallel HDF5 needs the space before writes */
    H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    H5_CHECK(H5Pset_obj_track_times(dcpl, 0));             /* no timestamps: the same set, the same bytes */
    hid_t ds = H5Dcreate2(f, name, type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(s);
    return ds;
}

static void attr_write(hid_t obj, const char *name, hid_t mtype, hid_t ftype, hsize_t n, const void *v)
{
    hid_t s = H5Screate_simple(1, &n, NULL);
    hid_t a = H5Acreate2(obj, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT);
    H5_CHECK(a);
    H5_CHECK(H5Awrite(a, mtype, v));
    H5Aclose(a);
    H5Sclose(s);
}

/* Rank 0's rows of the small datasets: labels and class names. */
static herr_t write_index(const pass *ps, hid_t lab, hid_t cls, hid_t stype, size_t width)
{
    if (ps->rt->rank != 0) return 0;
    herr_t w = H5Dwrite(lab, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ps->labels);
    char *names = calloc(ps->f->K, width);
    if (!names) return -1;
    for (uint64_t k = 0; k < ps->f->K; k++) memcpy(names + k * width, ps->f->classes[k], strlen(ps->f->classes[k]));
    if (w >= 0) w = H5Dwrite(cls, stype, H5S_ALL, H5S_ALL, H5P_DEFAULT, names);
    free(names);
    return w;
}

/* One collective pass: create tmp, write every rank's rows, agree. STATUS_OK with
 * ps->agree[0] corrupt images (their flags gathered into ps->bad on every rank). */
static status pass_run(pass *ps)
{
    const data_images_options *o = ps->opt;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5_CHECK(H5Pset_fapl_mpio(fapl, ps->rt->world, MPI_INFO_NULL));
    hid_t f;
    watchdog_enter(ps->rt->wd, "prepare --images: creating the HDF5 file", o->timeout_s);
    H5E_BEGIN_TRY { f = H5Fcreate(ps->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl); } H5E_END_TRY;
    watchdog_leave(ps->rt->wd);
    H5Pclose(fapl);
    if (f < 0) {
        log_error0("cannot create %s (the output's temporary name): is its folder there and writable?", ps->tmp);
        return STATUS_IO;
    }
    size_t width = 1;
    for (uint64_t k = 0; k < ps->f->K; k++)
        if (strlen(ps->f->classes[k]) + 1 > width) width = strlen(ps->f->classes[k]) + 1;
    hid_t stype = H5Tcopy(H5T_C_S1);
    H5_CHECK(H5Tset_size(stype, width));
    H5_CHECK(H5Tset_strpad(stype, H5T_STR_NULLTERM));
    hsize_t dims[4] = { ps->n, (hsize_t)o->crop, (hsize_t)o->crop, 3 }, K = ps->f->K;
    hid_t img = dataset(f, "images", H5T_STD_U8LE, 4, dims);
    hid_t lab = dataset(f, "labels", H5T_STD_I32LE, 1, dims);
    hid_t cls = dataset(f, "classes", stype, 1, &K);
    H5_CHECK(img);
    H5_CHECK(lab);
    H5_CHECK(cls);
    memset(ps->agree, 0, sizeof ps->agree);
    if (write_index(ps, lab, cls, stype, width) < 0) {
        log_error("writing the labels into %s failed (see HDF5's message above)", ps->tmp);
        ps->agree[1]++;
    }
    pass_rows(ps, img);
    status st = comm_ctl_allreduce(ps->ctl, MPI_IN_PLACE, ps->agree, 8, MPI_UINT64_T, MPI_SUM);
    if (st == STATUS_OK && ps->agree[0] == 0 && ps->agree[1] == 0) {
        double cnt = (double)ps->n * o->crop * o->crop;
        float mean[3], std[3];
        for (int c = 0; c < 3; c++) {
            double m = (double)ps->agree[2 + c] / cnt, q = (double)ps->agree[5 + c] / cnt;
            mean[c] = (float)(m / 255.0);
            std[c] = (float)(sqrt(fmax(q - m * m, 0.0)) / 255.0);
        }
        int sc[2] = { o->size, o->crop };
        attr_write(img, "mean", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 3, mean);
        attr_write(img, "std", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 3, std);
        attr_write(img, "size", H5T_NATIVE_INT, H5T_STD_I32LE, 1, &sc[0]);
        attr_write(img, "crop", H5T_NATIVE_INT, H5T_STD_I32LE, 1, &sc[1]);
    }
    H5Dclose(img);
    H5Dclose(lab);
    H5Dclose(cls);
    H5Tclose(stype);
    watchdog_enter(ps->rt->wd, "prepare --images: closing the HDF5 file", o->timeout_s);
    herr_t closed = H5Fclose(f);
    watchdog_leave(ps->rt->wd);
    if (st != STATUS_OK) return st;
    if (closed < 0 || ps->agree[1]) return STATUS_IO;
    if (ps->agree[0] && o->skip_corrupt) {                    /* everyone's flags, for the next pass */
        uint64_t lo, hi;
        range_of(ps->n, ps->rt->rank, ps->rt->size, &lo, &hi);
        for (int r = 0; r < ps->rt->size; r++) {
            range_of(ps->n, r, ps->rt->size, &lo, &hi);
            TRY(comm_ctl_bcast_bytes(ps->ctl, ps->bad + lo, hi - lo, r));
        }
    }
    return STATUS_OK;
}

/* Rank 0: fsync, rename over the output, fsync the folder. */
static status commit(const char *tmp, const char *out)
{
    int fd = -1;
    struct stat sb;
    char why[256] = "";
    if (path_open_regular(tmp, &fd, &sb, 0, why, sizeof why) != 0 || fsync(fd) != 0) {
        log_error("cannot fsync %s: %s", tmp, why[0] ? why : log_errno_str());
        if (fd >= 0) close(fd);
        return STATUS_IO;
    }
    close(fd);
    if (rename(tmp, out) != 0) {
        log_error("cannot rename %s to %s: %s", tmp, out, log_errno_str());
        return STATUS_IO;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = 0;
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return STATUS_OK;
}

/* The scan on rank 0, broadcast; the kinds gathered; the images kept. */
static status build_set(const struct runtime *rt, const data_images_options *o, comm_ctl ctl, folder *f,
                        uint8_t **kinds)
{
    status st = rt->rank == 0 ? scan_folder(o->dir, f) : STATUS_OK;
    uint64_t bytes = st == STATUS_OK ? f->bytes : 0;
    TRY(comm_ctl_bcast(ctl, &bytes, 1, MPI_UINT64_T, 0));
    if (bytes == 0) return STATUS_INPUT;                     /* rank 0 said why */
    if (rt->rank != 0 && !(f->blob = malloc(bytes))) die("prepare --images", "out of memory", "a smaller folder");
    f->bytes = bytes;
    TRY(comm_ctl_bcast_bytes(ctl, f->blob, bytes, 0));
    TRY(parse_folder(f));
    *kinds = calloc(f->n ? f->n : 1, 1);
    if (!*kinds) return STATUS_NOMEM;
    for (int r = 0; r < rt->size; r++) {
        uint64_t lo, hi;
        range_of(f->n, r, rt->size, &lo, &hi);
        for (uint64_t i = lo; i < hi && r == rt->rank; i++) (*kinds)[i] = (uint8_t)classify(f->paths[i]);
    }
    for (int r = 0; r < rt->size; r++) {
        uint64_t lo, hi;
        range_of(f->n, r, rt->size, &lo, &hi);
        TRY(comm_ctl_bcast_bytes(ctl, *kinds + lo, hi - lo, r));
    }
    return STATUS_OK;
}

status data_prepare_images(const struct runtime *rt, const data_images_options *o, data_images_result *res)
{
    double t0 = now_s();
    comm_ctl ctl = comm_ctl_watched(comm_ctl_named(rt->world, o->timeout_s, "prepare --images"), rt->wd);
    *res = (data_images_result){ 0 };
    folder f = { 0 };
    uint8_t *kinds = NULL;
    const char **paths = NULL;
    int32_t *labels = NULL;
    uint8_t *bad = NULL;
    status st = build_set(rt, o, ctl, &f, &kinds);
    uint64_t n = 0, unreadable = 0;
    if (st == STATUS_OK) {
        paths = malloc((f.n ? f.n : 1) * sizeof *paths);
        labels = malloc((f.n ? f.n : 1) * sizeof *labels);
        bad = calloc(f.n ? f.n : 1, 1);
        uint64_t *per_class = calloc(f.K, sizeof *per_class);
        if (!paths || !labels || !bad || !per_class) die("prepare --images", "out of memory", "a smaller folder");
        for (uint64_t i = 0; i < f.n; i++) {
            if (kinds[i] == IMG_KIND_OTHER) res->other++;
            if (kinds[i] == IMG_KIND_UNREADABLE) unreadable++;
            if (kinds[i] != IMG_KIND_PNG && kinds[i] != IMG_KIND_JPEG) continue;
            per_class[f.labels[i]]++;
            paths[n] = f.paths[i];
            labels[n++] = f.labels[i];
        }
        res->other += f.other;
        res->classes = f.K;
        for (uint64_t k = 0; k < f.K && st == STATUS_OK; k++)
            if (!per_class[k]) {
                log_error0("--images %s: the class folder %s/%s holds no PNG or JPEG file: remove it or add its "
                           "images (a class without images would be a label never seen)", o->dir, o->dir,
                           f.classes[k]);
                st = STATUS_INPUT;
            }
        free(per_class);
        if (st == STATUS_OK && unreadable && !o->skip_corrupt) {
            log_error0("%" PRIu64 " file(s) could not be read (named above): fix them or pass --skip-corrupt",
                       unreadable);
            st = STATUS_INPUT;
        }
    }
    if (st == STATUS_OK) {                                   /* the output rule, before anything is created */
        if (rt->rank == 0) st = path_output_check(o->out, "--out", paths, (int)n);
        int code = (int)st;
        TRY(comm_ctl_bcast(ctl, &code, 1, MPI_INT, 0));
        st = (status)code;
    }
    char tmp[4200];
    uint64_t pid = (uint64_t)getpid();
    snprintf(tmp, sizeof tmp, "%s.tmp.%" PRIu64, o->out, pid);
    if (st == STATUS_OK && rt->rank == 0) unlink(tmp);       /* HDF5 would write through a link planted there */
    if (st == STATUS_OK) st = comm_ctl_bcast(ctl, &pid, 1, MPI_UINT64_T, 0);
    snprintf(tmp, sizeof tmp, "%s.tmp.%" PRIu64, o->out, pid);
    pass ps = { .rt = rt, .opt = o, .ctl = ctl, .f = &f, .tmp = tmp, .paths = paths, .labels = labels, .n = n,
                .bad = bad, .t0 = t0 };
    res->corrupt = unreadable;
    while (st == STATUS_OK) {
        if (ps.n == 0) {
            log_error0("--images %s: no image left to write (every one was corrupt)", o->dir);
            st = STATUS_INPUT;
            break;
        }
        st = pass_run(&ps);
        if (st != STATUS_OK || ps.agree[0] == 0) break;
        if (!o->skip_corrupt) {
            log_error0("%" PRIu64 " corrupt image(s), named above; nothing was written to %s", ps.agree[0], o->out);
            st = STATUS_INPUT;
            break;
        }
        uint64_t m = 0;                                      /* the survivors, in order, written again */
        for (uint64_t i = 0; i < ps.n; i++) {
            if (ps.bad[i]) continue;
            paths[m] = paths[i];
            labels[m++] = labels[i];
        }
        res->corrupt += ps.n - m;
        ps.n = m;
        memset(bad, 0, m ? m : 1);
    }
    if (st == STATUS_OK && rt->rank == 0) st = commit(tmp, o->out);
    if (st != STATUS_OK && rt->rank == 0) unlink(tmp);       /* nothing a later run would trust */
    if (!runtime_must_abort(st)) {
        int code = (int)st;
        if (comm_ctl_bcast(ctl, &code, 1, MPI_INT, 0) == STATUS_OK) st = (status)code;
    }
    res->images = st == STATUS_OK ? ps.n : 0;
    res->seconds = now_s() - t0;
    free(kinds);
    free(paths);
    free(labels);
    free(bad);
    folder_free(&f);
    return st;
}
