/* ckpt_upgrade — format versions and the migration of older checkpoints (nebula-ckpt
 * upgrade). ckpt_load reads every version up to the current one directly; upgrading
 * brings an older file's recorded fields up to date (nebula-ckpt info, h5py readers).
 *
 * The one design decision: a format change is one function, registered in `upgrades`
 * under the version it migrates from, that edits an HDF5 file of that version in
 * place until it is the next version (data, attributes, and the checksums of what it
 * rewrites). ckpt_upgrade chains them from the file's version to CKPT_FORMAT_VERSION,
 * so a checkpoint of any released version reaches the current one, and each function
 * is written once, against the two formats it knows. The driver works on a copy: the
 * original is verified first, the copy is verified after the last step, and it is
 * committed through the commit protocol of a save, so a failure leaves the original
 * and debris that loaders skip.
 *
 * Changing the format: bump CKPT_FORMAT_VERSION, register
 *     [OLD] = { upgrade_vOLD, "what changed, in one line" },
 * below, and keep a checkpoint of the old version under validation/fixtures/ckpt/vOLD/
 * (validation/cli/test_ckpt_tool.sh upgrades every fixture there and checks that the
 * result verifies, reports the current version and resumes). */
#include "tool_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/path.h"

/* Lines describing what an upgrade changed, for the user. */
typedef struct ckpt_changes {
    char *text;   /* NUL-terminated */
    size_t len;   /* bytes of text */
} ckpt_changes;

/* One version step: turns the open file of version `from` into version from + 1.
 * `cat` is the original as catalogued (header, stored config); lines go to `out`;
 * STATUS_* and why on failure. */
typedef status (*ckpt_upgrade_fn)(hid_t file, const ckpt_catalog *cat, ckpt_changes *out, char *why);

typedef struct ckpt_upgrade_step {
    ckpt_upgrade_fn run;     /* the migration */
    const char *summary;     /* what the version changed, one line */
} ckpt_upgrade_step;

static status upgrade_v1(hid_t file, const ckpt_catalog *cat, ckpt_changes *out, char *why);

/* upgrades[v] migrates version v to v + 1. Version 0 was never released, so
 * upgrades[0] stays empty. */
static const ckpt_upgrade_step upgrades[CKPT_FORMAT_VERSION] = {
    [1] = { upgrade_v1, "the process grid (parallel_dp/tp/pp, zero_stage) and a dtype attribute on every dataset" },
};

__attribute__((format(printf, 2, 3))) static void changes_add(ckpt_changes *c, const char *fmt, ...)
{
    size_t used = strlen(c->text);
    if (used + 1 >= c->len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->text + used, c->len - used, fmt, ap);
    va_end(ap);
    used = strlen(c->text);
    if (used + 1 < c->len) strcat(c->text, "\n");
}

/* ---- version 1 -> 2 ------------------------------------------------------------------ */

/* The integer section.key of a config_dump text ("[section]" lines, "key = value"
 * lines), or def when it has none. */
static long config_text_int(const char *text, const char *section, const char *key, long def)
{
    char sect[64] = "";
    size_t klen = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        size_t len = strcspn(line, "\n");
        if (line[0] == '[') {
            snprintf(sect, sizeof sect, "%.*s", (int)(len > 2 ? len - 2 : 0), line + 1);
        } else if (!strcmp(sect, section) && !strncmp(line, key, klen) && !strncmp(line + klen, " =", 2)) {
            char *end;
            long v = strtol(line + klen + 2, &end, 10);
            return end != line + klen + 2 ? v : def;
        }
    }
    return def;
}

static int attr_int32(hid_t obj, const char *name, int32_t v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = s < 0 ? -1 : H5Acreate2(obj, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, H5T_NATIVE_INT32, &v) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    return rc;
}

static int attr_str(hid_t obj, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
    H5_CHECK(t);
    H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
    hid_t a = s < 0 ? -1 : H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, t, &v) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    H5Tclose(t);
    return rc;
}

/* Version 2 records the process grid a version 1 file implies: tp and pp from the
 * stored config's [parallel] section, dp the rest of the world size, the ZeRO stage
 * from train.zero; and every dataset's dtype ("float32" tensors, "uint8" blobs: all
 * version 1 wrote). The data is unchanged, so every checksum stays valid. */
static status upgrade_v1(hid_t file, const ckpt_catalog *cat, ckpt_changes *out, char *why)
{
    const char *cfg = cat->config ? cat->config : "";
    int32_t ws = cat->h.world_size, tp = (int32_t)config_text_int(cfg, "parallel", "tp", 1);
    int32_t pp = (int32_t)config_text_int(cfg, "parallel", "pp", 1);
    int32_t zero = (int32_t)config_text_int(cfg, "train", "zero", 0);
    if (tp < 1 || pp < 1 || ws % (tp * pp) != 0 || cat->h.resharded_from) {
        changes_add(out, "  the stored config's grid (tp %d x pp %d) does not divide the %d ranks of the file "
                    "(resharded offline): recorded as data parallel", tp, pp, ws);
        tp = pp = 1;
    }
    if (zero < 0 || zero > 3) zero = 0;
    int32_t dp = ws / (tp * pp);
    if (attr_int32(file, "parallel_dp", dp) || attr_int32(file, "parallel_tp", tp) ||
        attr_int32(file, "parallel_pp", pp) || attr_int32(file, "zero_stage", zero)) {
        snprintf(why, CKPT_WHY_MAX, "cannot write the layout attributes");
        return STATUS_IO;
    }
    changes_add(out, "  process grid dp %d x tp %d x pp %d, ZeRO stage %d (from world_size and the stored config)",
                dp, tp, pp, zero);
    int tensors = 0;
    for (int k = 0; k < cat->n; k++) {
        const ckpt_dataset *d = &cat->items[k];
        hid_t ds = H5Dopen2(file, d->path, H5P_DEFAULT);
        int rc = ds < 0 ? -1 : attr_str(ds, "dtype", d->blob ? "uint8" : "float32");
        if (ds >= 0) H5Dclose(ds);
        if (rc) {
            snprintf(why, CKPT_WHY_MAX, "cannot write the dtype attribute of %s", d->path);
            return STATUS_IO;
        }
        tensors += !d->blob;
    }
    changes_add(out, "  dtype attribute: float32 on %d tensors, uint8 on %d blobs; data and checksums unchanged", tensors,
                cat->n - tensors);
    return STATUS_OK;
}

/* ---- the driver -------------------------------------------------------------------------- */

/* src to dst (a new file), fsync'd. */
static status copy_file(const char *src, const char *dst)
{
    int in = open(src, O_RDONLY | O_CLOEXEC), out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    char *buf = malloc((size_t)1 << 20);
    CHECK(buf, "out of memory copying a checkpoint");
    ssize_t got = 0;
    int rc = in < 0 || out < 0 ? -1 : 0;
    while (rc == 0 && (got = read(in, buf, (size_t)1 << 20)) != 0) {
        if (got < 0 && errno == EINTR) continue;
        rc = got < 0 ? -1 : path_write_all(out, buf, (size_t)got);
    }
    if (rc == 0) rc = fsync(out);
    int err = errno;
    free(buf);
    if (in >= 0) close(in);
    if (out >= 0 && close(out) != 0 && rc == 0) rc = -1, err = errno;
    if (rc == 0) return STATUS_OK;
    errno = err;
    log_error("cannot copy %s to %s: %s", src, dst, log_errno_str());
    return STATUS_IO;
}

/* Every step from the file's version on, then the new version number. */
static status run_steps(const char *path, const ckpt_catalog *cat, ckpt_changes *out)
{
    const ckpt_header *h = &cat->h;
    char why[CKPT_WHY_MAX] = "";
    hid_t fapl = ckpt_file_access(MPI_COMM_NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        log_error("HDF5 cannot open the copy %s for writing", path);
        return STATUS_IO;
    }
    status st = STATUS_OK;
    for (int v = h->version; v < CKPT_FORMAT_VERSION && st == STATUS_OK; v++) {
        CHECK(upgrades[v].run, "a format version without its registered upgrade step");
        changes_add(out, "format version %d -> %d: %s", v, v + 1, upgrades[v].summary);
        st = upgrades[v].run(f, cat, out, why);
    }
    int32_t version = CKPT_FORMAT_VERSION;
    hid_t a = st == STATUS_OK ? H5Aopen(f, "format_version", H5P_DEFAULT) : -1;
    if (st == STATUS_OK && (a < 0 || H5Awrite(a, H5T_NATIVE_INT32, &version) < 0)) {
        snprintf(why, sizeof why, "cannot write attribute format_version");
        st = STATUS_IO;
    }
    if (a >= 0) H5Aclose(a);
    if (H5Fclose(f) < 0 && st == STATUS_OK) {
        snprintf(why, sizeof why, "cannot close the file");
        st = STATUS_IO;
    }
    if (st != STATUS_OK) log_error("upgrade of %s failed: %s", path, why);
    return st;
}

/* Rank 0: copy into root/.step_N.tmp, migrate, verify the copy, commit. */
static status upgrade_copy(const ckpt_catalog *cat, const char *root, ckpt_changes *out)
{
    char tmp[CKPT_PATH_MAX];
    TRY(path_mkdirs(root, "output checkpoint directory"));
    TRY(ckpt_dir_prepare_tmp(root, cat->h.step));
    ckpt_dir_tmp_path(tmp, sizeof tmp, root, cat->h.step);
    strcat(tmp, "/" CKPT_FILE);
    TRY(copy_file(cat->file, tmp));
    TRY(run_steps(tmp, cat, out));
    TRY(ckpt_dir_fsync(tmp));
    ckpt_catalog copy;
    int nbad;
    ckpt_damage first;
    TRY(ckpt_catalog_open(&copy, tmp));
    status st = ckpt_verify(MPI_COMM_SELF, &copy, NULL, &nbad, &first);
    ckpt_catalog_free(&copy);
    TRY(st);
    return ckpt_dir_commit(root, cat->h.step, INT_MAX, CKPT_FAULT_NONE);
}

status ckpt_upgrade(MPI_Comm comm, const ckpt_catalog *cat, const char *out_root, char *changes, size_t len)
{
    int rank, nbad;
    MPI_Comm_rank(comm, &rank);
    changes[0] = '\0';
    if (cat->h.version == CKPT_FORMAT_VERSION) return STATUS_OK;
    char root[CKPT_PATH_MAX];
    if (cat->commit != CKPT_COMMIT_YES) {
        log_error0("%s is not a committed checkpoint: nebula-ckpt upgrades only what a loader would trust", cat->dir);
        return STATUS_INPUT;
    }
    TRY(ckpt_out_root(cat, out_root, root));
    ckpt_damage first;
    TRY(ckpt_verify(comm, cat, NULL, &nbad, &first));
    ckpt_changes out = { changes, len };
    ckpt_h5_quiet q = ckpt_h5_quiet_begin();
    status st = rank == 0 ? upgrade_copy(cat, root, &out) : STATUS_OK;
    ckpt_h5_quiet_end(q);
    comm_ctl ctl = ckpt_ctl(comm, 0);  /* offline: no deadline */
    st = ckpt_agree(ctl, st, NULL, 0);
    TRY(comm_ctl_bcast(ctl, changes, (int)len, MPI_CHAR, 0));
    return st;
}
