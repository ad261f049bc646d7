/* ckpt_diff — two checkpoints compared dataset by dataset (nebula-ckpt diff): for
 * float32 tensors of one shape the largest absolute difference, the relative L2 norm
 * of the difference and the cosine similarity, and whether the bytes are identical;
 * for blobs the rows that differ.
 *
 * The one design decision: identity is decided on the bits (a tensor whose values
 * compare equal but whose bits differ, -0 against +0 or two NaNs of other payloads,
 * is not identical), and the statistics are sums of double products over each rank's
 * slice, combined by one reduction per dataset, so a tensor of any size is compared
 * in bounded memory and in parallel. */
#include "tool_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIFF_PIECE ((uint64_t)1 << 20)  /* elements a rank reads at a time from each file */

/* Sums of one slice: reduced with MPI_SUM, max_abs with MPI_MAX. */
typedef struct diff_sums {
    double dd, aa, bb, ab;   /* sum (a-b)^2, a^2, b^2, a*b */
    double differ;           /* elements or rows whose bits differ */
} diff_sums;

typedef struct diff_files {
    hid_t a, b;              /* both files, MPI-IO driver */
    float *fa, *fb;          /* (DIFF_PIECE) read buffers */
    MPI_Comm comm;
    int rank, size;
} diff_files;

static bool same_shape(const ckpt_dataset *a, const ckpt_dataset *b)
{
    if (a->ndim != b->ndim || strcmp(a->dtype, b->dtype) != 0) return false;
    for (int k = 0; k < a->ndim; k++)
        if (a->dims[k] != b->dims[k]) return false;
    return true;
}

static uint64_t elements(const ckpt_dataset *d)
{
    uint64_t n = 1;
    for (int k = 0; k < d->ndim; k++) n *= d->dims[k];
    return n;
}

/* Reads the elements [a, b) of dataset d of `file` as mtype into buf. */
static int read_range(hid_t file, const ckpt_dataset *d, hid_t mtype, uint64_t a, uint64_t b, void *buf)
{
    hid_t ds = H5Dopen2(file, d->path, H5P_DEFAULT);
    if (ds < 0) return -1;
    int rc = ckpt_read_flat(ds, d, mtype, a, b, buf);
    H5Dclose(ds);
    return rc;
}

/* A float32 tensor: this rank's share of the sums and the largest |a - b|. */
static int diff_floats(const diff_files *df, const ckpt_dataset *da, const ckpt_dataset *db, diff_sums *s,
                       double *max_abs)
{
    uint64_t n = elements(da), lo = n * (uint64_t)df->rank / (uint64_t)df->size;
    uint64_t hi = n * (uint64_t)(df->rank + 1) / (uint64_t)df->size;
    for (uint64_t p = lo; p < hi; p += DIFF_PIECE) {
        uint64_t e = hi - p < DIFF_PIECE ? hi : p + DIFF_PIECE;
        if (read_range(df->a, da, H5T_NATIVE_FLOAT, p, e, df->fa) != 0 ||
            read_range(df->b, db, H5T_NATIVE_FLOAT, p, e, df->fb) != 0)
            return -1;
        for (uint64_t i = 0; i < e - p; i++) {
            double a = df->fa[i], b = df->fb[i], d = fabs(a - b);
            s->dd += (a - b) * (a - b), s->aa += a * a, s->bb += b * b, s->ab += a * b;
            s->differ += memcmp(&df->fa[i], &df->fb[i], sizeof(float)) != 0;
            if (!(d <= *max_abs)) *max_abs = d;  /* a NaN difference is the largest */
        }
    }
    return 0;
}

/* Anything else (blobs, other types): the bytes as stored, in whole rows per rank;
 * blobs count the rows that differ, the others the elements (rows of one). */
static int diff_bytes(const diff_files *df, const ckpt_dataset *da, const ckpt_dataset *db, diff_sums *s)
{
    uint64_t n = elements(da), esize = n ? da->bytes / n : 1, rowlen = da->blob ? da->dims[1] : 1;
    uint64_t rows = n / rowlen, step = DIFF_PIECE * sizeof(float) / esize;
    uint64_t lo = rows * (uint64_t)df->rank / (uint64_t)df->size * rowlen;
    uint64_t hi = rows * (uint64_t)(df->rank + 1) / (uint64_t)df->size * rowlen, last = UINT64_MAX;
    hid_t ds = H5Dopen2(df->a, da->path, H5P_DEFAULT), t = ds >= 0 ? H5Dget_type(ds) : -1;
    int rc = t < 0 ? -1 : 0;
    for (uint64_t p = lo; p < hi && rc == 0; p += step) {
        uint64_t e = hi - p < step ? hi : p + step;
        rc = read_range(df->a, da, t, p, e, df->fa);
        if (rc == 0) rc = read_range(df->b, db, t, p, e, df->fb);
        if (rc != 0 || !memcmp(df->fa, df->fb, (e - p) * esize)) continue;
        const char *x = (const char *)df->fa, *y = (const char *)df->fb;
        for (uint64_t i = p; i < e; i++)
            if (i / rowlen != last && memcmp(x + (i - p) * esize, y + (i - p) * esize, esize)) {
                last = i / rowlen;
                s->differ++;
            }
    }
    if (t >= 0) H5Tclose(t);
    if (ds >= 0) H5Dclose(ds);
    return rc;
}

/* The statistics from the reduced sums (ckpt.h states the conventions). */
static void diff_finish(ckpt_diff_row *row, const diff_sums *s, double max_abs, bool floats)
{
    row->differ = (uint64_t)s->differ;
    row->kind = s->differ > 0 ? CKPT_DIFF_KIND_VALUES : CKPT_DIFF_KIND_SAME;
    row->max_abs = row->rel_l2 = row->cosine = NAN;
    if (!floats) return;
    row->max_abs = max_abs;
    row->rel_l2 = s->aa > 0 ? sqrt(s->dd) / sqrt(s->aa) : s->dd > 0 ? INFINITY : 0;
    row->cosine = s->aa > 0 && s->bb > 0 ? s->ab / (sqrt(s->aa) * sqrt(s->bb)) : s->aa == s->bb ? 1 : 0;
}

static void diff_pair(const diff_files *df, const ckpt_dataset *da, const ckpt_dataset *db, ckpt_diff_row *row,
                      int *failed)
{
    diff_sums s = { 0, 0, 0, 0, 0 };
    double max_abs = 0;
    bool floats = !da->blob && !strcmp(da->dtype, "float32");
    int rc = floats ? diff_floats(df, da, db, &s, &max_abs) : diff_bytes(df, da, db, &s);
    if (rc != 0) *failed = 1;
    comm_ctl ctl = ckpt_ctl(df->comm, 0);  /* offline: no deadline, so only a broken MPI fails (a bug tier) */
    CHECK(comm_ctl_allreduce(ctl, MPI_IN_PLACE, &s, 5, MPI_DOUBLE, MPI_SUM) == STATUS_OK, "see the MPI error above");
    CHECK(comm_ctl_allreduce(ctl, MPI_IN_PLACE, &max_abs, 1, MPI_DOUBLE, MPI_MAX) == STATUS_OK,
          "see the MPI error above");
    diff_finish(row, &s, max_abs, floats);
}

/* Merges the two sorted catalogs into rows and compares the datasets both hold. */
static int diff_all(const diff_files *df, const ckpt_catalog *a, const ckpt_catalog *b, ckpt_diff_row *rows)
{
    int i = 0, j = 0, n = 0, failed = 0;
    while (i < a->n || j < b->n) {
        int c = i == a->n ? 1 : j == b->n ? -1 : strcmp(a->items[i].path, b->items[j].path);
        ckpt_diff_row *row = &rows[n++];
        memset(row, 0, sizeof *row);
        row->max_abs = row->rel_l2 = row->cosine = NAN;
        snprintf(row->path, sizeof row->path, "%s", c <= 0 ? a->items[i].path : b->items[j].path);
        if (c < 0) row->kind = CKPT_DIFF_KIND_ONLY_A;
        else if (c > 0) row->kind = CKPT_DIFF_KIND_ONLY_B;
        else if (!same_shape(&a->items[i], &b->items[j])) row->kind = CKPT_DIFF_KIND_SHAPE;
        else diff_pair(df, &a->items[i], &b->items[j], row, &failed);
        i += c <= 0;
        j += c >= 0;
    }
    CHECK(comm_ctl_allreduce(ckpt_ctl(df->comm, 0), MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX) == STATUS_OK,
          "see the MPI error above");
    return failed ? -1 : n;
}

static hid_t open_mpio(MPI_Comm comm, const char *path)
{
    hid_t fapl = ckpt_file_access(comm);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

status ckpt_diff(MPI_Comm comm, const ckpt_catalog *a, const ckpt_catalog *b, ckpt_diff_row *rows, int *nrows)
{
    diff_files df = { .comm = comm };
    MPI_Comm_rank(comm, &df.rank);
    MPI_Comm_size(comm, &df.size);
    *nrows = 0;
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    df.a = open_mpio(comm, a->file);
    df.b = open_mpio(comm, b->file);
    df.fa = malloc(DIFF_PIECE * 4);
    df.fb = malloc(DIFF_PIECE * 4);
    CHECK(df.fa && df.fb, "out of memory comparing checkpoints");
    status st = ckpt_agree(ckpt_ctl(comm, 0), df.a < 0 || df.b < 0 ? STATUS_IO : STATUS_OK, NULL, 0);
    int n = st == STATUS_OK ? diff_all(&df, a, b, rows) : -1;
    if (n < 0) {
        log_error0("cannot read %s or %s (HDF5 with the MPI-IO driver)", a->file, b->file);
        st = STATUS_IO;
    } else {
        *nrows = n;
    }
    if (df.a >= 0) H5Fclose(df.a);
    if (df.b >= 0) H5Fclose(df.b);
    ckpt_h5_quiet_end(q);
    free(df.fa);
    free(df.fb);
    return st;
}
