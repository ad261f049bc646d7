/* ckpt_export — nebula-ckpt convert PATH --dtype bf16|fp16|fp32: a copy of a committed
 * checkpoint whose tensors are stored in another element type (format version 2's
 * per-dataset dtype), for export: half the bytes for parameters shipped to inference.
 * Training saves stay float32, so resume is exact; a 16-bit copy loads (widened) with a
 * warning that the run continues from rounded values.
 *
 * The one design decision: the copy is a new file built from the catalog, not the old
 * file edited in place — HDF5 does not give back the space of a replaced dataset, so an
 * edited copy would be no smaller. Root and group attributes are copied as they are,
 * blobs with H5Ocopy, tensors rounded (ckpt_dtype_narrow, to nearest even) with their
 * checksum recomputed over the new bytes. Rank 0 writes; the result is verified and
 * committed as an upgrade's is. */
#include "tool_impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/path.h"

/* H5Aiterate callback: copies one attribute of the object it iterates onto *op. */
static herr_t copy_attr(hid_t src, const char *name, const H5A_info_t *info, void *op)
{
    (void)info;
    hid_t dst = *(hid_t *)op;
    hid_t a = H5Aopen(src, name, H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1, s = a >= 0 ? H5Aget_space(a) : -1;
    hssize_t n = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
    size_t bytes = t >= 0 && n >= 0 ? H5Tget_size(t) * (size_t)(n ? n : 1) : 0;
    void *buf = bytes ? calloc(1, bytes) : NULL;
    herr_t rc = -1;
    if (buf && H5Aread(a, t, buf) >= 0) {
        hid_t b = H5Acreate2(dst, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
        rc = b >= 0 && H5Awrite(b, t, buf) >= 0 ? 0 : -1;
        if (b >= 0) H5Aclose(b);
        if (H5Tdetect_class(t, H5T_VLEN) > 0 || H5Tis_variable_str(t) > 0) H5Dvlen_reclaim(t, s, H5P_DEFAULT, buf);
    }
    free(buf);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return rc;
}

static int copy_attrs(hid_t src, hid_t dst)
{
    hsize_t idx = 0;
    return H5Aiterate2(src, H5_INDEX_NAME, H5_ITER_INC, &idx, copy_attr, &dst) < 0 ? -1 : 0;
}

/* The group of dataset path (its parent), created with its attributes on first use;
 * its own parent first. */
static int ensure_group(hid_t in, hid_t out, const char *path)
{
    char g[CKPT_ITEM_PATH];
    snprintf(g, sizeof g, "%s", path);
    *strrchr(g, '/') = '\0';
    if (!g[0] || H5Lexists(out, g, H5P_DEFAULT) > 0) return 0;
    if (ensure_group(in, out, g) != 0) return -1;
    hid_t src = H5Gopen2(in, g, H5P_DEFAULT), dst = H5Gcreate2(out, g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = src < 0 || dst < 0 || copy_attrs(src, dst) ? -1 : 0;
    if (src >= 0) H5Gclose(src);
    if (dst >= 0) H5Gclose(dst);
    return rc;
}

/* One tensor: read as float32 (a 16-bit source widened), stored as dt. */
static int export_tensor(hid_t in, hid_t out, const ckpt_dataset *d, ckpt_dtype dt)
{
    uint64_t n = d->bytes / (uint64_t)(strcmp(d->dtype, "float32") ? 2 : 4);
    float *v = malloc((size_t)n * sizeof *v + sizeof *v);
    uint16_t *h = malloc((size_t)n * sizeof *h + sizeof *h);
    CHECK(v && h, "out of memory converting a tensor");
    hid_t src = H5Dopen2(in, d->path, H5P_DEFAULT);
    bool wide = !strcmp(d->dtype, "float32");  /* else 16 bits, read as stored and widened */
    int rc = src < 0 ? -1 : ckpt_read_flat(src, d, wide ? H5T_NATIVE_FLOAT : -1, 0, n, wide ? (void *)v : (void *)h);
    if (!rc && !wide) ckpt_dtype_widen(strcmp(d->dtype, "bfloat16") ? CKPT_DTYPE_F16 : CKPT_DTYPE_BF16, v, h, n);
    hid_t sp = src >= 0 ? H5Dget_space(src) : -1, ft = ckpt_dtype_h5(dt);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5_CHECK(dcpl);
    H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
    hid_t ds = rc || sp < 0 ? -1 : H5Dcreate2(out, d->path, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const void *bytes = v;
    if (dt != CKPT_DTYPE_F32) ckpt_dtype_narrow(dt, h, v, n), bytes = h;
    uint32_t crc = ckpt_crc_bytes(0, bytes, n * ckpt_dtype_size(dt));
    rc = ds < 0 || H5Dwrite(ds, dt == CKPT_DTYPE_F32 ? H5T_NATIVE_FLOAT : ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes) < 0;
    if (!rc) {
        hid_t s = H5Screate(H5S_SCALAR), st = H5Tcopy(H5T_C_S1);
        const char *name = ckpt_dtype_name(dt);
        H5Tset_size(st, H5T_VARIABLE), H5Tset_cset(st, H5T_CSET_UTF8);
        hid_t a = H5Acreate2(ds, "checksum", H5T_STD_U32LE, s, H5P_DEFAULT, H5P_DEFAULT);
        hid_t b = H5Acreate2(ds, "dtype", st, s, H5P_DEFAULT, H5P_DEFAULT);
        rc = a < 0 || b < 0 || H5Awrite(a, H5T_NATIVE_UINT32, &crc) < 0 || H5Awrite(b, st, &name) < 0;
        if (a >= 0) H5Aclose(a);
        if (b >= 0) H5Aclose(b);
        H5Sclose(s), H5Tclose(st);
    }
    if (ds >= 0) H5Dclose(ds);
    if (sp >= 0) H5Sclose(sp);
    if (src >= 0) H5Dclose(src);
    H5Pclose(dcpl), H5Tclose(ft);
    free(v), free(h);
    return rc ? -1 : 0;
}

/* Rank 0: the new file at path, every dataset of cat in dt (tensors) or as it is (blobs). */
static status export_file(const ckpt_catalog *cat, const char *path, ckpt_dtype dt)
{
    hid_t fapl = ckpt_file_access(MPI_COMM_NULL);
    hid_t in = H5Fopen(cat->file, H5F_ACC_RDONLY, fapl), out = in < 0 ? -1 : H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    const char *failed = out < 0 ? path : NULL;
    hid_t ocpypl = H5Pcreate(H5P_OBJECT_COPY), lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5_CHECK(ocpypl);
    H5_CHECK(lcpl);
    H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
    if (!failed && copy_attrs(in, out) != 0) failed = "the root attributes";
    for (int k = 0; k < cat->n && !failed; k++) {
        const ckpt_dataset *d = &cat->items[k];
        if (ensure_group(in, out, d->path) != 0) failed = d->path;
        else if (d->blob ? H5Ocopy(in, d->path, out, d->path, ocpypl, lcpl) < 0 : export_tensor(in, out, d, dt) != 0)
            failed = d->path;
    }
    H5Pclose(ocpypl), H5Pclose(lcpl);
    if (out >= 0 && H5Fclose(out) < 0 && !failed) failed = path;
    if (in >= 0) H5Fclose(in);
    if (!failed) return STATUS_OK;
    log_error("cannot write %s of the %s copy %s (HDF5)", failed, ckpt_dtype_name(dt), path);
    return STATUS_IO;
}

status ckpt_export(MPI_Comm comm, const ckpt_catalog *cat, const char *dtype, const char *out_root)
{
    int rank, nbad;
    MPI_Comm_rank(comm, &rank);
    ckpt_dtype dt;
    CHECK(ckpt_dtype_parse(dtype, &dt), "ckpt_export: an unknown dtype (the caller's schema lists them)");
    if (cat->commit != CKPT_COMMIT_YES) {
        log_error0("%s is not a committed checkpoint: nebula-ckpt converts only what a loader would trust", cat->dir);
        return STATUS_INPUT;
    }
    char root[CKPT_PATH_MAX];
    TRY(ckpt_out_root(cat, out_root, root));
    ckpt_damage first;
    TRY(ckpt_verify(comm, cat, NULL, &nbad, &first));
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    status st = STATUS_OK;
    if (rank == 0) {
        char tmp[CKPT_PATH_MAX];
        st = path_mkdirs(root, "output checkpoint directory");
        if (st == STATUS_OK) st = ckpt_dir_prepare_tmp(root, cat->h.step);
        ckpt_dir_tmp_path(tmp, sizeof tmp, root, cat->h.step);
        strcat(tmp, "/" CKPT_FILE);
        if (st == STATUS_OK) st = export_file(cat, tmp, dt);
        if (st == STATUS_OK) st = ckpt_dir_fsync(tmp);
        ckpt_catalog copy;
        if (st == STATUS_OK && (st = ckpt_catalog_open(&copy, tmp)) == STATUS_OK) {
            st = ckpt_verify(MPI_COMM_SELF, &copy, NULL, &nbad, &first);
            ckpt_catalog_free(&copy);
        }
        if (st == STATUS_OK) st = ckpt_dir_commit(root, cat->h.step, INT_MAX, CKPT_FAULT_NONE);
        else ckpt_dir_discard(root, cat->h.step);
    }
    ckpt_h5_quiet_end(q);
    return ckpt_agree(ckpt_ctl(comm, 0), st, NULL, 0);  /* offline: no deadline */
}
