/* ckpt_inspect — a checkpoint seen from outside the run that wrote it (nebula-ckpt):
 * the catalog (header, commit state, every dataset with its type, shape, offset and
 * recorded checksum), the verification of every checksum, and the layout check
 * against a model's tables.
 *
 * The one design decision: the file is hostile until shown otherwise. Everything is
 * checked before it is used — the HDF5 signature and the size HDF5 recorded before
 * the library opens the file, links and types before a dataset is read, a dataset's
 * extent against the file's size before its bytes are — so damage is a message that
 * names the dataset and the file offset, never a crash or a read past the end. The
 * header reader and the layout check are ckpt_read.c's, the same code ckpt_load runs. */
#include "tool_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/path.h"

#define CONFIG_TEXT_MAX ((size_t)1 << 20)  /* bytes of the stored config read (nebula-train's is 64 KiB) */
#define VERIFY_PIECE    ((size_t)16 << 20) /* bytes a rank reads at a time: memory stays bounded */

/* ---- locating the file ----------------------------------------------------------- */

/* For a directory that is not a checkpoint: the newest committed one inside it, or
 * inside its ckpt/ (the directory given was a run's). */
static void hint_checkpoint(const char *dir)
{
    char sub[CKPT_PATH_MAX];
    const char *roots[2] = { dir, sub };
    ckpt_path_join(sub, dir, "ckpt");
    for (int r = 0; r < 2; r++) {
        ckpt_entry *e;
        int n, i = 0;
        if (ckpt_dir_list(roots[r], &e, &n) != STATUS_OK) continue;
        while (i < n && e[i].kind != CKPT_ENTRY_COMMITTED) i++;
        if (i < n) {
            char step[CKPT_PATH_MAX];
            ckpt_dir_entry_path(step, sizeof step, roots[r], &e[i]);
            log_error0("HINT: name one checkpoint, e.g. the newest committed one here: %s", step);
        }
        free(e);
        if (i < n) return;
    }
}

/* dir/state.h5, or a file and the directory that holds it. */
static status locate(ckpt_catalog *cat, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        log_error0("%s: %s", path, log_errno_str());
        return STATUS_INPUT;
    }
    if (strlen(path) + sizeof "/" CKPT_FILE >= sizeof cat->dir) {
        log_error0("%s: the path is longer than %zu bytes", path, sizeof cat->dir - sizeof "/" CKPT_FILE);
        return STATUS_INPUT;
    }
    snprintf(cat->dir, sizeof cat->dir, "%s", path);
    size_t n = strlen(cat->dir);
    while (n > 1 && cat->dir[n - 1] == '/') cat->dir[--n] = '\0';
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(cat->file, sizeof cat->file, "%s", path);
        char *slash = strrchr(cat->dir, '/');
        if (slash) *(slash == cat->dir ? slash + 1 : slash) = '\0';
        else snprintf(cat->dir, sizeof cat->dir, ".");
        return STATUS_OK;
    }
    ckpt_path_join(cat->file, cat->dir, CKPT_FILE);
    if (stat(cat->file, &sb) == 0) return STATUS_OK;
    log_error0("%s holds no %s: it is not a checkpoint directory", cat->dir, CKPT_FILE);
    hint_checkpoint(cat->dir);
    return STATUS_INPUT;
}

static void read_commit(ckpt_catalog *cat)
{
    char why[CKPT_WHY_MAX];
    status st = ckpt_dir_marker(cat->dir, false, &cat->marker_step, why);
    if (st != STATUS_OK) cat->marker_step = -1;
    cat->commit = st == STATUS_INPUT ? CKPT_COMMIT_NO : st != STATUS_OK ? CKPT_COMMIT_DAMAGED : CKPT_COMMIT_YES;
}

/* The HDF5 signature, and for superblock versions 2 and 3 (what HDF5 1.8 and later
 * write; Nebula asks for them) the end-of-file address recorded at write time, which
 * tells a truncated file from a damaged one. */
static status check_signature(const ckpt_catalog *cat)
{
    static const unsigned char sig[8] = { 0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n' };
    unsigned char sb[36];
    int fd;
    struct stat st;
    char kind[160];
    if (path_open_regular(cat->file, &fd, &st, 0, kind, sizeof kind) != 0) {
        log_error0("%s %s", cat->file, kind);
        return STATUS_INPUT;
    }
    int rc = path_read_all_at(fd, sb, sizeof sb, 0);
    close(fd);
    if (rc != 0 || memcmp(sb, sig, sizeof sig) != 0) {
        log_error0("%s is not an HDF5 file (%s): a Nebula checkpoint is an HDF5 file with attribute magic = \"%s\"",
                   cat->file, rc != 0 ? "shorter than an HDF5 superblock" : "no HDF5 signature at its start",
                   CKPT_MAGIC);
        return STATUS_INPUT;
    }
    uint64_t eof = 0;
    if ((sb[8] == 2 || sb[8] == 3) && sb[9] == 8) {
        for (int i = 7; i >= 0; i--) eof = eof << 8 | sb[28 + i];  /* little-endian, after base and extension */
        if (eof > cat->file_bytes) {
            log_error0("%s is truncated: it has %" PRIu64 " bytes, and HDF5 recorded %" PRIu64 " when it was written",
                       cat->file, cat->file_bytes, eof);
            return STATUS_CORRUPT;
        }
    }
    return STATUS_OK;
}

/* ---- the datasets -------------------------------------------------------------- */

typedef struct walk {
    ckpt_catalog *cat;
    int cap;
    status st;               /* the first problem found */
    int32_t world_size;      /* rows every blob must have */
} walk;

__attribute__((format(printf, 2, 3))) static status walk_fail(walk *w, const char *fmt, ...)
{
    char msg[CKPT_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_error0("%s: %s", w->cat->file, msg);
    w->st = STATUS_CORRUPT;
    return w->st;
}

/* "float32", "uint8", ...; false for anything that is not a plain number. */
static bool dtype_name(hid_t t, char *out, size_t len)
{
    H5T_class_t cls = H5Tget_class(t);
    size_t size = H5Tget_size(t);
    if (cls == H5T_FLOAT && size == 2) {  /* IEEE half or bfloat16 (format version 2 exports) */
        int dt = ckpt_dtype_of(t);
        if (dt < 0) return false;
        snprintf(out, len, "%s", ckpt_dtype_name((ckpt_dtype)dt));
        return true;
    }
    if (cls == H5T_FLOAT && (size == 4 || size == 8)) {
        snprintf(out, len, "float%zu", 8 * size);
        return true;
    }
    if (cls == H5T_INTEGER && (size == 1 || size == 2 || size == 4 || size == 8)) {
        snprintf(out, len, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", 8 * size);
        return true;
    }
    return false;
}

/* Type, shape, size, offset and checksum of one dataset; the rules of the format
 * (numbers only, at most PARAM_MAX_DIMS dimensions, blobs uint8 with a row per rank). */
static status describe(walk *w, hid_t ds, ckpt_dataset *d)
{
    hid_t t = H5Dget_type(ds), s = H5Dget_space(ds);
    bool typed = t >= 0 && dtype_name(t, d->dtype, sizeof d->dtype);
    size_t esize = t >= 0 ? H5Tget_size(t) : 0;
    int ndim = s >= 0 && H5Sget_simple_extent_type(s) != H5S_NULL ? H5Sget_simple_extent_ndims(s) : -1;
    hsize_t dims[H5S_MAX_RANK];
    if (ndim > 0) H5Sget_simple_extent_dims(s, dims, NULL);
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    if (!typed) return walk_fail(w, "dataset %s is not of a number type (tensors are float32, blobs uint8)", d->path);
    if (ndim < 0 || ndim > PARAM_MAX_DIMS)
        return walk_fail(w, "dataset %s has %s (a tensor has 0 to %d dimensions)", d->path,
                         ndim < 0 ? "no dataspace" : "too many dimensions", PARAM_MAX_DIMS);
    d->ndim = ndim;
    d->bytes = esize;
    for (int k = 0; k < ndim; k++) {
        d->dims[k] = dims[k];
        if (__builtin_mul_overflow(d->bytes, (uint64_t)dims[k], &d->bytes))
            return walk_fail(w, "dataset %s has a size that overflows 64 bits", d->path);
    }
    if (d->blob && (ndim != 2 || strcmp(d->dtype, "uint8") != 0 || d->dims[0] != (uint64_t)w->world_size ||
                    d->dims[1] == 0)) {
        return walk_fail(w, "blob %s is not a (world_size, bytes) uint8 dataset: a blob has world_size = %d rows "
                         "of at least one byte", d->path, (int)w->world_size);
    }
    haddr_t off = H5Dget_offset(ds);
    d->offset = off == HADDR_UNDEF ? UINT64_MAX : (uint64_t)off;
    d->has_checksum = ckpt_attr_read(ds, "checksum", H5T_NATIVE_UINT32, 0, &d->checksum) == 0;
    char label[16];  /* version 2: the "dtype" attribute names the stored type */
    if (w->cat->h.version >= 2 && (ckpt_attr_read_str(ds, "dtype", label, sizeof label) != 0 || strcmp(label, d->dtype)))
        return walk_fail(w, "dataset %s: its dtype attribute is missing or does not name its type (%s)", d->path,
                         d->dtype);
    return STATUS_OK;
}

static herr_t visit_link(hid_t f, const char *name, const H5L_info_t *info, void *op)
{
    walk *w = op;
    char path[CKPT_ITEM_PATH];
    if (snprintf(path, sizeof path, "/%s", name) >= (int)sizeof path) {
        walk_fail(w, "the object name /%.40s... is longer than any name a checkpoint holds", name);
        return -1;
    }
    if (info->type != H5L_TYPE_HARD) {  /* a soft or external link could lead anywhere, another file included */
        walk_fail(w, "%s is a soft or external link; a checkpoint holds only groups and datasets", path);
        return -1;
    }
    hid_t obj = H5Oopen(f, name, H5P_DEFAULT);
    if (obj < 0) {
        walk_fail(w, "cannot open the object %s (damaged)", path);
        return -1;
    }
    if (H5Iget_type(obj) != H5I_DATASET) {
        H5Oclose(obj);
        return 0;
    }
    ckpt_catalog *cat = w->cat;
    if (cat->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        cat->items = realloc(cat->items, (size_t)w->cap * sizeof *cat->items);
        CHECK(cat->items, "out of memory listing a checkpoint");
    }
    ckpt_dataset *d = &cat->items[cat->n];
    memset(d, 0, sizeof *d);
    snprintf(d->path, sizeof d->path, "%s", path);
    d->blob = !strncmp(path, "/rank/", 6);
    status st = describe(w, obj, d);
    H5Oclose(obj);
    if (st != STATUS_OK) return -1;
    cat->n++;
    return 0;
}

static int item_cmp(const void *a, const void *b)
{
    return strcmp(((const ckpt_dataset *)a)->path, ((const ckpt_dataset *)b)->path);
}

/* The stored config (empty when absent: loaders never needed it). */
static void read_config(ckpt_catalog *cat, hid_t f)
{
    cat->config = malloc(CONFIG_TEXT_MAX);
    CHECK(cat->config, "out of memory reading a checkpoint's config");
    if (ckpt_attr_read_str(f, "config", cat->config, CONFIG_TEXT_MAX) != 0) cat->config[0] = '\0';
    char *shrunk = realloc(cat->config, strlen(cat->config) + 1);
    if (shrunk) cat->config = shrunk;
}

static status read_file(ckpt_catalog *cat)
{
    hid_t fapl = ckpt_file_access(MPI_COMM_NULL);
    hid_t f = H5Fopen(cat->file, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        log_error0("%s: HDF5 cannot open it: the file is damaged", cat->file);
        return STATUS_CORRUPT;
    }
    char why[CKPT_WHY_MAX];
    status st = STATUS_OK;
    int magic = ckpt_magic_read(f);
    if (magic < 0) {
        log_error0("%s: a damaged or unreadable checkpoint: HDF5 could not read its metadata (the root group's "
                   "attributes)", cat->file);
        st = STATUS_CORRUPT;
    } else if (magic == 0) {
        log_error0("%s is an HDF5 file but not a Nebula checkpoint (its attribute magic is not \"%s\")", cat->file,
                   CKPT_MAGIC);
        st = STATUS_INPUT;
    } else if ((st = ckpt_header_read(f, &cat->h, why)) != STATUS_OK) {
        log_error0("%s: %s", cat->file, why);
    } else {
        read_config(cat, f);
        walk w = { cat, 0, STATUS_OK, cat->h.world_size };
        if (H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, visit_link, &w) < 0 && w.st == STATUS_OK)
            walk_fail(&w, "cannot list its objects (damaged)");
        st = w.st;
        if (cat->n > 1) qsort(cat->items, (size_t)cat->n, sizeof *cat->items, item_cmp);
    }
    H5Fclose(f);
    return st;
}

status ckpt_catalog_open(ckpt_catalog *cat, const char *path)
{
    memset(cat, 0, sizeof *cat);
    cat->marker_step = -1;
    TRY(locate(cat, path));
    struct stat sb;
    if (stat(cat->file, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        log_error0("%s is not a regular file", cat->file);
        return STATUS_INPUT;
    }
    cat->file_bytes = (uint64_t)sb.st_size;
    read_commit(cat);
    TRY(check_signature(cat));
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    status st = read_file(cat);
    ckpt_h5_quiet_end(q);
    if (st == STATUS_OK && cat->commit == CKPT_COMMIT_YES && cat->marker_step != cat->h.step)
        cat->commit = CKPT_COMMIT_DAMAGED;
    if (st != STATUS_OK) ckpt_catalog_free(cat);
    return st;
}

void ckpt_catalog_free(ckpt_catalog *cat)
{
    free(cat->items);
    free(cat->config);
    cat->items = NULL;
    cat->config = NULL;
    cat->n = 0;
}

const ckpt_dataset *ckpt_catalog_find(const ckpt_catalog *cat, const char *path)
{
    ckpt_dataset key;
    snprintf(key.path, sizeof key.path, "%s", path);
    return bsearch(&key, cat->items, (size_t)cat->n, sizeof *cat->items, item_cmp);
}

/* ---- loading ------------------------------------------------------------------- */

status ckpt_catalog_load(MPI_Comm comm, const ckpt_catalog *cat, ckpt_content *c)
{
    if (cat->commit != CKPT_COMMIT_YES) {
        log_error0("%s is not a committed checkpoint (%s): nebula-ckpt reads only what a loader would trust",
                   cat->dir, cat->commit == CKPT_COMMIT_NO ? "no COMMITTED marker" : "its COMMITTED marker is damaged");
        return STATUS_INPUT;
    }
    char why[CKPT_WHY_MAX] = "";
    ckpt_info info;
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    status st = ckpt_file_read(comm, cat->file, false, cat->marker_step, c, &info, why);
    ckpt_h5_quiet_end(q);
    if (st != STATUS_OK) log_error0("cannot load %s: %s", cat->dir, why);
    return st;
}

/* ---- blob rows ------------------------------------------------------------------ */

status ckpt_blob_row_read(hid_t f, const ckpt_dataset *d, hsize_t row, void *dst, char *why)
{
    hid_t ds = H5Dopen2(f, d->path, H5P_DEFAULT);
    uint32_t *crcs = malloc((size_t)d->dims[0] * sizeof *crcs);  /* fails, not dies, for a hostile row count */
    status st = STATUS_OK;
    if (ds < 0 || !crcs || ckpt_attr_read(ds, "row_checksums", H5T_NATIVE_UINT32, d->dims[0], crcs) != 0) {
        snprintf(why, CKPT_WHY_MAX, "cannot read blob %s or its row_checksums", d->path);
        st = STATUS_CORRUPT;
    } else {
        hid_t fs = H5Dget_space(ds), ms = ckpt_mem_space(d->dims[1]);
        H5_CHECK(fs);
        ckpt_select_row(fs, row, d->dims[1]);
        if (H5Dread(ds, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, dst) < 0) {
            snprintf(why, CKPT_WHY_MAX, "cannot read row %llu of blob %s", (unsigned long long)row, d->path);
            st = STATUS_CORRUPT;
        } else if (ckpt_crc_bytes(0, dst, d->dims[1]) != crcs[row]) {
            snprintf(why, CKPT_WHY_MAX, "checksum mismatch in blob %s row %llu", d->path, (unsigned long long)row);
            st = STATUS_CORRUPT;
        }
        H5Sclose(ms);
        H5Sclose(fs);
    }
    if (ds >= 0) H5Dclose(ds);
    free(crcs);
    return st;
}

status ckpt_catalog_read_row(const ckpt_catalog *cat, const ckpt_dataset *d, int row, void *dst)
{
    CHECK(d->blob && row >= 0 && (uint64_t)row < d->dims[0], "ckpt_catalog_read_row: a row of a blob of cat");
    char why[CKPT_WHY_MAX] = "";
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    hid_t fapl = ckpt_file_access(MPI_COMM_NULL);
    hid_t f = H5Fopen(cat->file, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    status st = f < 0 ? STATUS_CORRUPT : ckpt_blob_row_read(f, d, (hsize_t)row, dst, why);
    if (f >= 0) H5Fclose(f);
    ckpt_h5_quiet_end(q);
    if (st != STATUS_OK) log_error0("%s: %s", cat->file, f < 0 ? "HDF5 cannot open it" : why);
    return st;
}

/* ---- verification ---------------------------------------------------------------- */

/* What one dataset's check found, reduced over the ranks. */
typedef struct verdict {
    int unreadable;          /* a read failed on some rank */
    int bad_row;             /* blobs: the first row whose bytes fail, world_size when none */
    int rows_missing;        /* blobs: row_checksums absent or malformed */
    double nonfinite;        /* float32 tensors: NaN and Inf values (summed over the ranks' shares) */
    int refused;             /* the value check refused a piece (this rank's, then reduced) */
    char why[512];           /* its reason (this rank's, then the first refusing rank's) */
} verdict;

/* The share [*a, *b) of n items that rank owns. */
static void share(uint64_t n, int rank, int size, uint64_t *a, uint64_t *b)
{
    *a = n * (uint64_t)rank / (uint64_t)size;
    *b = n * (uint64_t)(rank + 1) / (uint64_t)size;
}

int ckpt_read_flat(hid_t ds, const ckpt_dataset *d, hid_t mtype, uint64_t a, uint64_t b, void *buf)
{
    hsize_t dims[PARAM_MAX_DIMS];
    for (int k = 0; k < d->ndim; k++) dims[k] = d->dims[k];
    hid_t t = mtype >= 0 ? mtype : H5Dget_type(ds), fs = H5Dget_space(ds), ms = ckpt_mem_space(b - a);
    H5_CHECK(t);
    H5_CHECK(fs);
    ckpt_select_flat(fs, d->ndim, dims, a, b);
    int rc = H5Dread(ds, t, ms, fs, H5P_DEFAULT, buf) < 0 ? -1 : 0;
    H5Sclose(ms);
    H5Sclose(fs);
    if (mtype < 0) H5Tclose(t);
    return rc;
}

/* NaN and Inf among n float32 values as stored (little-endian IEEE, the only float
 * type a checkpoint holds): all exponent bits set. */
static uint64_t count_nonfinite(const unsigned char *p, uint64_t n)
{
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++, p += 4) bad += (p[3] & 0x7f) == 0x7f && (p[2] & 0x80);
    return bad;
}

/* The CRC-32 piece of this rank's share of the dataset's bytes, VERIFY_PIECE at a time;
 * a float32 tensor's non-finite values are counted into v->nonfinite on the way, and
 * each piece goes through the value check (NULL: none). */
static int hash_share(hid_t ds, const ckpt_dataset *d, MPI_Comm comm, void *buf, ckpt_crc_piece *pc, verdict *v,
                      ckpt_value_check check)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    uint64_t n = 1;
    for (int k = 0; k < d->ndim; k++) n *= d->dims[k];
    uint64_t esize = n ? d->bytes / n : 1, a, b, step = VERIFY_PIECE / esize;
    share(n, rank, size, &a, &b);
    pc->crc = 0;
    pc->len = (b - a) * esize;
    for (uint64_t s = a; s < b; s += step) {
        uint64_t e = b - s < step ? b : s + step;
        if (ckpt_read_flat(ds, d, -1, s, e, buf) != 0) return -1;
        pc->crc = ckpt_crc_bytes((uint32_t)pc->crc, buf, (e - s) * esize);
        if (d->blob || esize != 4 || strcmp(d->dtype, "float32") != 0) continue;
        v->nonfinite += (double)count_nonfinite(buf, e - s);
        if (check && !v->refused && check(d->path, buf, (e - s) * esize, v->why, sizeof v->why) != STATUS_OK)
            v->refused = 1;
    }
    return 0;
}

/* This rank's rows of a blob against its row_checksums: the first that fails, or W; a
 * row that is intact and read in one piece goes through the value check (NULL: none). */
static void check_rows(hid_t ds, const ckpt_dataset *d, MPI_Comm comm, void *buf, verdict *v, ckpt_value_check check)
{
    int rank, size, W = (int)d->dims[0];
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    v->bad_row = W;
    uint32_t *rows = malloc((size_t)W * sizeof *rows);  /* W rows lie inside the file: a sane size */
    if (!rows || ckpt_attr_read(ds, "row_checksums", H5T_NATIVE_UINT32, (hsize_t)W, rows) != 0) {
        v->rows_missing = 1;
        free(rows);
        return;
    }
    uint64_t a, b, R = d->dims[1];
    share((uint64_t)W, rank, size, &a, &b);
    for (uint64_t r = a; r < b && v->bad_row == W && !v->unreadable; r++) {
        uint32_t crc = 0;
        for (uint64_t at = r * R; at < (r + 1) * R && !v->unreadable; at += VERIFY_PIECE) {  /* rows may be large */
            uint64_t end = (r + 1) * R - at < VERIFY_PIECE ? (r + 1) * R : at + VERIFY_PIECE;
            if (ckpt_read_flat(ds, d, -1, at, end, buf) != 0) v->unreadable = 1;
            else crc = ckpt_crc_bytes(crc, buf, end - at);
        }
        if (!v->unreadable && crc != rows[r]) v->bad_row = (int)r;
        else if (!v->unreadable && check && !v->refused && R <= VERIFY_PIECE &&
                 check(d->path, buf, R, v->why, sizeof v->why) != STATUS_OK)
            v->refused = 1;
    }
    free(rows);
}

/* Datasets whose bytes would lie past the end of the file are not read (HDF5 would
 * fail on some ranks and not others), nor are datasets stored otherwise than Nebula
 * stores them (contiguous, allocated at creation): one declared huge but never
 * written would be read as fill values. */
static bool past_end(const ckpt_catalog *cat, const ckpt_dataset *d)
{
    return d->offset != UINT64_MAX && (d->offset > cat->file_bytes || d->bytes > cat->file_bytes - d->offset);
}

static bool readable(const ckpt_catalog *cat, const ckpt_dataset *d)
{
    return d->offset != UINT64_MAX && !past_end(cat, d);
}

/* Every rank hashes its share of every dataset and checks its rows of every blob. */
static status verify_read(MPI_Comm comm, const ckpt_catalog *cat, ckpt_crc_piece *pc, verdict *v,
                          ckpt_value_check check)
{
    hid_t fapl = ckpt_file_access(comm);
    hid_t f = H5Fopen(cat->file, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    status st = ckpt_agree(ckpt_ctl(comm, 0), f < 0 ? STATUS_IO : STATUS_OK, NULL, 0);  /* offline: no deadline */
    if (st != STATUS_OK) {
        log_error0("cannot open %s with the MPI-IO driver", cat->file);
        if (f >= 0) H5Fclose(f);
        return st;
    }
    void *buf = malloc(VERIFY_PIECE);
    CHECK(buf, "out of memory verifying a checkpoint");
    for (int k = 0; k < cat->n; k++) {
        const ckpt_dataset *d = &cat->items[k];
        v[k].bad_row = d->blob ? (int)d->dims[0] : 0;
        if (!readable(cat, d)) continue;
        hid_t ds = H5Dopen2(f, d->path, H5P_DEFAULT);
        if (ds < 0 || hash_share(ds, d, comm, buf, &pc[k], &v[k], check) != 0) v[k].unreadable = 1;
        if (ds >= 0 && d->blob) check_rows(ds, d, comm, buf, &v[k], check);
        if (ds >= 0) H5Dclose(ds);
    }
    free(buf);
    H5Fclose(f);
    return STATUS_OK;
}

static status reduce_verdicts(comm_ctl ctl, verdict *v, int n)
{
    for (int k = 0; k < n; k++) {
        int mx[2] = { v[k].unreadable, v[k].rows_missing }, mn = v[k].bad_row;
        TRY(comm_ctl_allreduce(ctl, MPI_IN_PLACE, mx, 2, MPI_INT, MPI_MAX));
        TRY(comm_ctl_allreduce(ctl, MPI_IN_PLACE, &mn, 1, MPI_INT, MPI_MIN));
        TRY(comm_ctl_allreduce(ctl, MPI_IN_PLACE, &v[k].nonfinite, 1, MPI_DOUBLE, MPI_SUM));
        v[k].unreadable = mx[0], v[k].rows_missing = mx[1], v[k].bad_row = mn;
        int refused;  /* then the first refusing rank's reason */
        TRY(comm_ctl_allreduce(ctl, &v[k].refused, &refused, 1, MPI_INT, MPI_MAX));
        status a = refused ? ckpt_agree(ctl, v[k].refused ? STATUS_CORRUPT : STATUS_OK, v[k].why, sizeof v[k].why)
                           : STATUS_OK;
        if (a != STATUS_OK && a != STATUS_CORRUPT) return a;
        v[k].refused = refused;
    }
    return STATUS_OK;
}

/* Rank 0: the verdicts as messages, and the first problem in file order. */
static int report(const ckpt_catalog *cat, const ckpt_crc_piece *pc, const verdict *v, ckpt_damage *first)
{
    int bad = 0;
    uint64_t first_off = UINT64_MAX;
    for (int k = 0; k < cat->n; k++) {
        const ckpt_dataset *d = &cat->items[k];
        char where[96], problem[CKPT_WHY_MAX] = "";
        uint64_t off = d->offset, len = d->bytes;
        int row = -1;
        if (d->offset == UINT64_MAX) {
            snprintf(problem, sizeof problem, "is not stored as Nebula stores every dataset (contiguous, allocated "
                     "when written): not verified");
        } else if (past_end(cat, d)) {
            snprintf(problem, sizeof problem, "extends past the end of the file (truncated: its bytes end at %" PRIu64
                     ", the file has %" PRIu64 ")", d->offset + d->bytes, cat->file_bytes);
        } else if (v[k].unreadable) {
            snprintf(problem, sizeof problem, "cannot be read (HDF5 read failed: damaged)");
        } else if (!d->has_checksum) {
            snprintf(problem, sizeof problem, "has no checksum attribute: it cannot be verified");
        } else if (d->blob && v[k].rows_missing) {
            snprintf(problem, sizeof problem, "has no row_checksums attribute of %" PRIu64 " values", d->dims[0]);
        } else if (d->blob && v[k].bad_row < (int)d->dims[0]) {
            row = v[k].bad_row;
            len = d->dims[1];
            off = d->offset == UINT64_MAX ? off : d->offset + (uint64_t)row * len;
            snprintf(problem, sizeof problem, "checksum mismatch in row %d (rank %d's bytes)", row, row);
        } else if ((uint32_t)pc[k].crc != d->checksum) {
            snprintf(problem, sizeof problem, d->blob ? "checksum mismatch: its row_checksums do not combine to its "
                     "checksum %08x" : "checksum mismatch: the file records %08x, the data hashes to %08x",
                     d->checksum, (uint32_t)pc[k].crc);
        } else if (v[k].nonfinite > 0) {  /* intact bytes of a run that diverged: nothing should resume from it */
            uint64_t n = d->bytes / 4;
            snprintf(problem, sizeof problem, "holds %.0f NaN or Inf value(s) of %" PRIu64 ": written by a run that "
                     "had diverged", v[k].nonfinite, n);
        } else if (v[k].refused) {  /* the reason names the dataset first, as loads print it */
            size_t at = strncmp(v[k].why, d->path, strlen(d->path)) ? 0 : strlen(d->path);
            at += strspn(v[k].why + at, ": ");
            snprintf(problem, sizeof problem, "%s (no run writes this; its checksum cannot vouch for it)",
                     v[k].why + at);
        }
        if (!problem[0]) continue;
        if (off == UINT64_MAX) snprintf(where, sizeof where, "not stored contiguously, %" PRIu64 " bytes", len);
        else snprintf(where, sizeof where, "file offset %" PRIu64 " (0x%" PRIx64 "), %" PRIu64 " bytes", off, off, len);
        log_error0("%s %s: %s [%s]", d->blob ? "blob" : "tensor", d->path, problem, where);
        bad++;
        if (first_off == UINT64_MAX || (off != UINT64_MAX && off < first_off)) {
            snprintf(first->path, sizeof first->path, "%s", d->path);
            first->row = row, first->offset = off, first->bytes = len;
            first_off = off;
        }
    }
    return bad;
}

status ckpt_verify(MPI_Comm comm, const ckpt_catalog *cat, ckpt_value_check check, int *nbad, ckpt_damage *first)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    memset(first, 0, sizeof *first);
    *nbad = 0;
    ckpt_crc_piece *pc = calloc((size_t)cat->n + 1, sizeof *pc);
    verdict *v = calloc((size_t)cat->n + 1, sizeof *v);
    CHECK(pc && v, "out of memory verifying a checkpoint");
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    status st = verify_read(comm, cat, pc, v, check);
    ckpt_h5_quiet_end(q);
    comm_ctl ctl = ckpt_ctl(comm, 0);  /* offline: no deadline */
    if (st == STATUS_OK) st = ckpt_crc_allreduce(ctl, pc, cat->n);
    if (st == STATUS_OK) st = reduce_verdicts(ctl, v, cat->n);
    if (st == STATUS_OK) {
        if (rank == 0) *nbad = report(cat, pc, v, first);
        st = comm_ctl_bcast(ctl, nbad, 1, MPI_INT, 0);
        if (st == STATUS_OK) st = comm_ctl_bcast(ctl, first, (int)sizeof *first, MPI_BYTE, 0);
        if (st == STATUS_OK) st = *nbad ? STATUS_CORRUPT : STATUS_OK;
    }
    free(pc);
    free(v);
    return st;
}

/* ---- the layout against a model ---------------------------------------------------- */

status ckpt_check_tables(const ckpt_catalog *cat, const ckpt_content *c)
{
    if (strcmp(cat->h.model, c->model) != 0) {
        log_error0("%s is a checkpoint of model '%s', the tables checked are '%s''s", cat->file, cat->h.model,
                   c->model);
        return STATUS_INPUT;
    }
    int n = c->nblobs;
    for (int g = 0; g < c->ngroups; g++) n += c->groups[g].table->count;
    hid_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
    CHECK(ids, "out of memory checking a checkpoint's tables");
    for (int k = 0; k < n; k++) ids[k] = -1;
    char why[CKPT_WHY_MAX] = "";
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    hid_t fapl = ckpt_file_access(MPI_COMM_NULL);
    hid_t f = H5Fopen(cat->file, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    status st = f < 0 ? STATUS_IO : ckpt_check_layout(f, &cat->h, c, ids, why);
    for (int k = 0; k < n; k++)
        if (ids[k] >= 0) H5Dclose(ids[k]);
    if (f >= 0) H5Fclose(f);
    ckpt_h5_quiet_end(q);
    free(ids);
    if (st != STATUS_OK)
        log_error0("%s against the tables of %s built from its stored config: %s", cat->file, c->model,
                   f < 0 ? "HDF5 cannot open it" : why);
    return st;
}
