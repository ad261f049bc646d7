/* ckpt_read — loading one checkpoint file: header checks (magic, version — every one up
 * to this build's is read as it is — step, model, version 2's grid),
 * the layout check that lists missing, unexpected and reshaped tensors, the collective
 * read of each rank's slices (16-bit tensors of export copies read as stored, hashed, then
 * widened), checksum verification and replication. Every check ends
 * in ckpt_agree, so all ranks take the same branch and no collective is left waiting.
 * The header reader and the layout check are also nebula-ckpt's (ckpt_inspect.c), and
 * the blob row a rank takes is ckpt_reshard_row, which the offline reshard applies too. */
#include "ckpt_impl.h"
#include "base/path.h"

#include <unistd.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names for a message: the first CKPT_LIST_MAX, then how many more. */
typedef struct name_list {
    char text[768];
    int n;
} name_list;

__attribute__((format(printf, 2, 3))) static void list_add(name_list *l, const char *fmt, ...)
{
    if (l->n++ >= CKPT_LIST_MAX) return;
    size_t used = strlen(l->text);
    if (used) used += (size_t)snprintf(l->text + used, sizeof l->text - used, ", ");
    if (used >= sizeof l->text) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->text + used, sizeof l->text - used, fmt, ap);
    va_end(ap);
}

static void list_append(char *why, const char *label, const name_list *l)
{
    if (!l->n) return;
    size_t used = strlen(why);
    snprintf(why + used, CKPT_WHY_MAX - used, "; %s: %s", label, l->text);
    used = strlen(why);
    if (l->n > CKPT_LIST_MAX) snprintf(why + used, CKPT_WHY_MAX - used, " and %d more", l->n - CKPT_LIST_MAX);
}

static void shape_str(char *out, size_t len, int ndim, const hsize_t *dims)
{
    int n = snprintf(out, len, "(");
    for (int k = 0; k < ndim && n < (int)len; k++)
        n += snprintf(out + n, len - (size_t)n, k ? ", %llu" : "%llu", (unsigned long long)dims[k]);
    if (n < (int)len) snprintf(out + n, len - (size_t)n, ")");
}

int ckpt_magic_read(hid_t f)
{
    htri_t has = H5Aexists(f, "magic");
    if (has <= 0) return has < 0 ? -1 : 0;  /* an error listing the attributes is damage, not absence */
    hid_t a = H5Aopen(f, "magic", H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t t = H5Aget_type(a);
    bool text = t >= 0 && H5Tget_class(t) == H5T_STRING;
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    if (t < 0) return -1;
    char magic[32];
    if (!text) return 0;
    if (ckpt_attr_read_str(f, "magic", magic, sizeof magic) != 0) return -1;
    return strcmp(magic, CKPT_MAGIC) == 0;
}

/* Version 2's process grid (its product is the world size), or version 1's implied
 * one; the name of a bad attribute, NULL when it is fine. */
static const char *read_layout(hid_t f, ckpt_header *h)
{
    ckpt_layout *l = &h->layout;
    *l = (ckpt_layout){ h->world_size, 1, 1, 0 };
    h->layout_recorded = h->version >= 2;
    if (!h->layout_recorded) return NULL;
    if (ckpt_attr_read(f, "parallel_dp", H5T_NATIVE_INT32, 0, &l->dp) != 0 || l->dp < 1) return "parallel_dp";
    if (ckpt_attr_read(f, "parallel_tp", H5T_NATIVE_INT32, 0, &l->tp) != 0 || l->tp < 1) return "parallel_tp";
    if (ckpt_attr_read(f, "parallel_pp", H5T_NATIVE_INT32, 0, &l->pp) != 0 || l->pp < 1) return "parallel_pp";
    if ((int64_t)l->dp * l->tp * l->pp != h->world_size) return "parallel_dp (dp x tp x pp is not world_size)";
    if (ckpt_attr_read(f, "zero_stage", H5T_NATIVE_INT32, 0, &l->zero_stage) != 0 || l->zero_stage < 0 ||
        l->zero_stage > 3)
        return "zero_stage";
    return NULL;
}

status ckpt_header_read(hid_t f, ckpt_header *h, char *why)
{
    memset(h, 0, sizeof *h);
    int magic = ckpt_magic_read(f);
    if (magic < 0) {
        snprintf(why, CKPT_WHY_MAX, "a damaged or unreadable checkpoint: HDF5 could not read its metadata (the root "
                 "group's attributes)");
        return STATUS_CORRUPT;
    }
    if (magic == 0) {
        snprintf(why, CKPT_WHY_MAX, "not a Nebula checkpoint (attribute magic is not \"%s\")", CKPT_MAGIC);
        return STATUS_CORRUPT;
    }
    const char *bad = NULL;
    if (ckpt_attr_read(f, "format_version", H5T_NATIVE_INT32, 0, &h->version) != 0) bad = "format_version";
    else if (h->version > CKPT_FORMAT_VERSION) {
        snprintf(why, CKPT_WHY_MAX, "written by a newer Nebula (format v%d > supported v%d); HINT: upgrade Nebula to "
                 "read it", h->version, CKPT_FORMAT_VERSION);
        return STATUS_INPUT;
    } else if (h->version < 1) bad = "format_version";
    else if (ckpt_attr_read(f, "step", H5T_NATIVE_INT64, 0, &h->step) != 0) bad = "step";
    else if (ckpt_attr_read_str(f, "model", h->model, sizeof h->model) != 0) bad = "model";
    else if (ckpt_attr_read(f, "table_hash", H5T_NATIVE_UINT64, 0, &h->table_hash) != 0) bad = "table_hash";
    else if (ckpt_attr_read(f, "world_size", H5T_NATIVE_INT32, 0, &h->world_size) != 0 || h->world_size < 1)
        bad = "world_size";
    else if (ckpt_attr_read(f, "ranks_per_node", H5T_NATIVE_INT32, 0, &h->ranks_per_node) != 0) bad = "ranks_per_node";
    else if (H5Aexists(f, "resharded_from") > 0 &&
             (ckpt_attr_read(f, "resharded_from", H5T_NATIVE_INT32, 0, &h->resharded_from) != 0 ||
              h->resharded_from < 1))
        bad = "resharded_from";
    if (!bad) bad = read_layout(f, h);
    if (bad) {
        snprintf(why, CKPT_WHY_MAX, "attribute %s is missing or malformed", bad);
        return STATUS_CORRUPT;
    }
    if (ckpt_attr_read_str(f, "nebula_version", h->nebula_version, sizeof h->nebula_version) != 0)
        h->nebula_version[0] = '\0';  /* informative only */
    return STATUS_OK;
}

/* The header, and whether this load may take the file: its marker's step, this
 * build's format version, the run's model. */
static status read_header(hid_t f, const char *path, int64_t marker_step, const ckpt_content *c, ckpt_header *h,
                          char *why)
{
    (void)path;
    TRY(ckpt_header_read(f, h, why));  /* every version up to this build's is read as it is */
    if (h->step != marker_step) {
        snprintf(why, CKPT_WHY_MAX, "the file holds step %" PRId64 ", its %s marker says %" PRId64, h->step,
                 CKPT_MARKER, marker_step);
        return STATUS_CORRUPT;
    }
    if (strcmp(h->model, c->model) != 0) {
        snprintf(why, CKPT_WHY_MAX, "it is a checkpoint of model '%s', and this run's model is '%s'", h->model,
                 c->model);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

/* H5Lexists of every component, so a missing "optim" reads as 0, not an error: 1 the
 * path exists, 0 it does not, -1 HDF5 could not read a group's links (damaged metadata). */
static int path_exists(hid_t f, const char *path)
{
    char p[CKPT_DSET_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char end = *s;
            *s = '\0';
            htri_t has = H5Lexists(f, p, H5P_DEFAULT);
            if (has <= 0) return has < 0 ? -1 : 0;
            if (!end) return 1;
            *s = '/';
        }
    }
}

typedef struct link_names {
    char (*name)[PARAM_NAME_MAX];  /* [n] */
    int n, cap;
} link_names;

static herr_t collect_link(hid_t g, const char *name, const H5L_info_t *info, void *op)
{
    (void)g;
    (void)info;
    link_names *l = op;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->name = realloc(l->name, (size_t)l->cap * sizeof *l->name);
        CHECK(l->name, "out of memory listing a checkpoint group");
    }
    snprintf(l->name[l->n++], PARAM_NAME_MAX, "%s", name);
    return 0;
}

/* Opens one dataset and checks its type (float32, or uint8 for blobs) and shape;
 * returns it open or -1 after adding to `shape`, or to `damaged` when HDF5 cannot open
 * a dataset whose link exists. */
static hid_t open_checked(hid_t loc, const char *name, const char *shown, bool blob, int ndim, const hsize_t *dims,
                          name_list *shape, name_list *damaged)
{
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
    if (ds < 0) {
        list_add(damaged, "/%s (its link exists, HDF5 cannot open it)", shown);
        return -1;
    }
    hid_t t = ds >= 0 ? H5Dget_type(ds) : -1, s = ds >= 0 ? H5Dget_space(ds) : -1;
    hsize_t got[PARAM_MAX_DIMS] = { 0 };
    int got_ndim = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    bool typed = t >= 0 && (blob ? H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1 : ckpt_dtype_of(t) >= 0);
    bool ok = typed && got_ndim == ndim && ndim <= PARAM_MAX_DIMS;
    if (ok && ndim > 0) {
        H5Sget_simple_extent_dims(s, got, NULL);
        for (int k = 0; k < ndim; k++) ok = ok && got[k] == dims[k];
    }
    if (!ok) {
        char a[96], b[96];
        shape_str(a, sizeof a, got_ndim > 0 && got_ndim <= PARAM_MAX_DIMS ? got_ndim : 0, got);
        shape_str(b, sizeof b, ndim, dims);
        list_add(shape, "%s is %s%s in the file, %s here", shown, a,
                 t >= 0 && !typed ? " (another type)" : "", b);
    }
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    if (!ok && ds >= 0) H5Dclose(ds);
    return ok ? ds : -1;
}

/* An optional blob is read only when it exists with exactly these dimensions; one whose
 * link exists but cannot be read counts as damage, not as absent. */
static bool blob_matches(hid_t f, const char *path, const hsize_t *dims, name_list *damaged)
{
    int has = path_exists(f, path);
    hid_t ds = has > 0 ? H5Dopen2(f, path, H5P_DEFAULT) : -1;
    if (has < 0 || (has > 0 && ds < 0)) list_add(damaged, "/%s (HDF5 cannot read it)", path);
    if (ds < 0) return false;
    hid_t sp = H5Dget_space(ds);
    hsize_t got[2] = { 0, 0 };
    bool ok = sp >= 0 && H5Sget_simple_extent_ndims(sp) == 2 && H5Sget_simple_extent_dims(sp, got, NULL) == 2 &&
              got[0] == dims[0] && got[1] == dims[1];
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(ds);
    return ok;
}

/* What ckpt_check_layout found. A checkpoint that does not fit this run (another table)
 * is told from a damaged one by what the file itself records: HDF5 errors reading its
 * groups and links are damage; so are missing, unexpected or reshaped tensors in a group
 * whose table_hash attribute is this run's, and a root table_hash that no group shares
 * while every group records this run's. */
typedef struct layout_found {
    name_list missing, unexpected, shape;  /* tensors and groups of the file against c */
    name_list damaged;                     /* what HDF5 could not read */
    bool group_hash_differs;               /* a group's table_hash is another table's */
    bool claimed_differs;                  /* tensors differ inside a group that records this run's table_hash */
} layout_found;

static int layout_problems(const layout_found *l)
{
    return l->missing.n + l->unexpected.n + l->shape.n;
}

/* One group of c against the file: ids[0, t->count) its tensors opened. */
static void check_group(hid_t f, const ckpt_tensors *gt, hid_t *ids, layout_found *l)
{
    const param_table *t = gt->table;
    int has = path_exists(f, gt->group);
    if (has <= 0) {
        if (has < 0) list_add(&l->damaged, "group /%s (HDF5 cannot read its parent's links)", gt->group);
        else list_add(&l->missing, "group %s", gt->group);
        return;
    }
    hid_t grp = H5Gopen2(f, gt->group, H5P_DEFAULT);
    if (grp < 0) {
        list_add(&l->damaged, "group /%s (HDF5 cannot open it)", gt->group);
        return;
    }
    uint64_t gh;
    bool claims = false;
    if (ckpt_attr_read(grp, "table_hash", H5T_NATIVE_UINT64, 0, &gh) != 0)
        list_add(&l->damaged, "the table_hash attribute of group /%s", gt->group);
    else if (gh != param_table_hash(t))
        l->group_hash_differs = true;
    else
        claims = true;
    int before = layout_problems(l);
    for (int i = 0; i < t->count; i++) {
        const param_entry *e = &t->entries[i];
        char shown[CKPT_DSET_MAX];
        hsize_t dims[PARAM_MAX_DIMS];
        for (int d = 0; d < e->ndim; d++) dims[d] = e->shape[d];
        snprintf(shown, sizeof shown, "%s/%s", gt->group, e->name);
        htri_t link = H5Lexists(grp, e->name, H5P_DEFAULT);
        if (link < 0) list_add(&l->damaged, "/%s (HDF5 cannot look up its link)", shown);
        else if (link == 0) list_add(&l->missing, "%s", shown);
        else ids[i] = open_checked(grp, e->name, shown, false, e->ndim, dims, &l->shape, &l->damaged);
    }
    link_names names = { .n = 0 };
    if (H5Literate(grp, H5_INDEX_NAME, H5_ITER_INC, NULL, collect_link, &names) < 0)
        list_add(&l->damaged, "group /%s (HDF5 cannot list its links)", gt->group);
    else
        for (int i = 0; i < names.n; i++)
            if (param_find(t, names.name[i]) < 0) list_add(&l->unexpected, "%s/%s", gt->group, names.name[i]);
    free(names.name);
    H5Gclose(grp);
    if (claims && layout_problems(l) > before) l->claimed_differs = true;
}

static void append_lists(char *why, const layout_found *l)
{
    list_append(why, "missing", &l->missing);
    list_append(why, "unexpected", &l->unexpected);
    list_append(why, "different shape or type", &l->shape);
}

status ckpt_check_layout(hid_t f, const ckpt_header *h, const ckpt_content *c, hid_t *ids, char *why)
{
    layout_found l;
    memset(&l, 0, sizeof l);
    int k = 0;
    for (int g = 0; g < c->ngroups; k += c->groups[g].table->count, g++) check_group(f, &c->groups[g], ids + k, &l);
    for (int b = 0; b < c->nblobs; b++, k++) {
        char path[CKPT_DSET_MAX];
        hsize_t dims[2] = { (hsize_t)h->world_size, c->blobs[b].bytes };
        snprintf(path, sizeof path, "rank/%s", c->blobs[b].name);
        if (c->blobs[b].optional && !blob_matches(f, path, dims, &l.damaged)) continue;  /* left to the caller */
        int has = path_exists(f, path);
        if (has < 0) list_add(&l.damaged, "/%s (HDF5 cannot read its links)", path);
        else if (has == 0) list_add(&l.missing, "blob %s", path);
        else ids[k] = open_checked(f, path, path, true, 2, dims, &l.shape, &l.damaged);
    }
    bool root_differs = h->table_hash != c->table_hash;
    if (!root_differs && !l.group_hash_differs && !layout_problems(&l) && !l.damaged.n) return STATUS_OK;
    if (l.damaged.n || l.claimed_differs || (!root_differs && l.group_hash_differs)) {
        snprintf(why, CKPT_WHY_MAX, "damaged HDF5 metadata (the file records %s parameter table, table_hash "
                 "%016" PRIx64 ")", root_differs ? "another" : "this run's", h->table_hash);
        list_append(why, "HDF5 cannot read", &l.damaged);
        append_lists(why, &l);
        if (!l.damaged.n && !layout_problems(&l)) {
            size_t used = strlen(why);
            snprintf(why + used, CKPT_WHY_MAX - used, "; a group's table_hash attribute is another table's");
        }
        return STATUS_CORRUPT;
    }
    if (root_differs && !l.group_hash_differs && !layout_problems(&l)) {
        snprintf(why, CKPT_WHY_MAX, "damaged HDF5 metadata: the root attribute table_hash is %016" PRIx64 ", and every "
                 "group records this run's (%016" PRIx64 ") with every tensor in place", h->table_hash, c->table_hash);
        return STATUS_CORRUPT;
    }
    if (root_differs || l.group_hash_differs)
        snprintf(why, CKPT_WHY_MAX, "it does not match this run's parameter table (table_hash %016" PRIx64
                 " in the file, %016" PRIx64 " here)", h->table_hash, c->table_hash);
    else
        snprintf(why, CKPT_WHY_MAX, "it does not hold what this run loads");
    append_lists(why, &l);
    if (!layout_problems(&l)) {
        size_t used = strlen(why);
        snprintf(why + used, CKPT_WHY_MAX - used, "; names and shapes agree, the layout (offsets, padding) differs");
    }
    return STATUS_INPUT;
}

/* A sharded group: each rank reads the ranges it holds (one collective read per
 * tensor, a union of hyperslabs) into its packed buffer. The CRC-32s of the ranges are
 * kept in crc (this rank's; ckpt_file_read combines them) and pc is left empty. */
static status read_shards(const hid_t *ids, hid_t dxpl, ckpt_content *c, int g, ckpt_crc_piece *pc,
                          uint32_t *file_crc, char *failed)
{
    const param_table *t = c->groups[g].table;
    const ckpt_shards *s = c->shards[g];
    ckpt_shards_check(s, t);
    for (int i = 0; i < t->count; i++) {
        const param_entry *e = &t->entries[i];
        int first, end;
        size_t packed;
        ckpt_shard_span(s, e, &first, &end);
        hid_t fs = H5Dget_space(ids[i]);
        H5_CHECK(fs);
        size_t n = ckpt_select_shards(fs, e, s, first, end, &packed);
        hid_t ms = ckpt_mem_space(n);
        if ((H5Dread(ids[i], H5T_NATIVE_FLOAT, ms, fs, dxpl, c->groups[g].data + packed) < 0 ||
             ckpt_attr_read(ids[i], "checksum", H5T_NATIVE_UINT32, 0, &file_crc[i]) != 0) && !failed[0])
            snprintf(failed, CKPT_DSET_MAX, "/%s/%s", c->groups[g].group, e->name);
        pc[i].len = 0, pc[i].crc = 0;
        H5Sclose(ms);
        H5Sclose(fs);
    }
    return STATUS_OK;
}

/* The sharded groups' tensors' CRC-32s, whole, as rank 0's piece (the others' are
 * empty), so that verify's reduction yields them unchanged. */
static status shard_pieces(comm_ctl ctl, const ckpt_content *c, ckpt_crc_piece *pc)
{
    int rank, k = 0;
    MPI_Comm_rank(ctl.comm, &rank);
    for (int g = 0; g < c->ngroups; g++) {
        const param_table *t = c->groups[g].table;
        const ckpt_shards *s = c->shards[g];
        if (!s) {
            k += t->count;
            continue;
        }
        uint32_t *crc = malloc(((size_t)t->count + 1) * sizeof *crc);
        CHECK(crc, "out of memory for the checksums of a sharded group");
        TRY(ckpt_shard_group_crcs(ctl, s, t, c->groups[g].data, crc));  /* crc leaks on a timeout */
        for (int i = 0; i < t->count; i++, k++) {
            pc[k].crc = rank == 0 ? crc[i] : 0;
            pc[k].len = rank == 0 ? t->entries[i].count * sizeof(float) : 0;
        }
        free(crc);
    }
    return STATUS_OK;
}

/* The stored type of an open tensor dataset (open_checked let only ckpt_dtypes through). */
static ckpt_dtype stored_dtype(hid_t ds)
{
    hid_t t = H5Dget_type(ds);
    H5_CHECK(t);
    int dt = ckpt_dtype_of(t);
    H5Tclose(t);
    return dt < 0 ? CKPT_DTYPE_F32 : (ckpt_dtype)dt;
}

/* Elements [a, b) of a tensor selected in fs into dst (float32). A 16-bit tensor is read
 * as stored and widened here; *stored is then the stored bytes' length, and the CRC-32
 * returned is theirs (the file's checksum covers the data as stored). -1: HDF5 failed. */
static int read_piece(hid_t ds, hid_t fs, hid_t dxpl, size_t n, float *dst, uint64_t *stored, uint32_t *crc)
{
    hid_t ms = ckpt_mem_space(n);
    ckpt_dtype dt = stored_dtype(ds);
    int rc = 0;
    if (dt == CKPT_DTYPE_F32) {
        rc = H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, dxpl, dst) < 0 ? -1 : 0;
        *stored = n * sizeof(float);
        *crc = *stored ? ckpt_crc_copy(NULL, dst, *stored) : 0;
    } else {
        uint16_t *raw = malloc((n + 1) * sizeof *raw);
        CHECK(raw, "out of memory reading a 16-bit tensor");
        hid_t ft = H5Dget_type(ds);  /* the file's own type as the memory type: the bits as stored */
        H5_CHECK(ft);
        rc = H5Dread(ds, ft, ms, fs, dxpl, raw) < 0 ? -1 : 0;
        H5Tclose(ft);
        *stored = n * sizeof *raw;
        *crc = *stored ? ckpt_crc_bytes(0, raw, *stored) : 0;
        ckpt_dtype_widen(dt, dst, raw, n);
        free(raw);
    }
    H5Sclose(ms);
    return rc;
}

/* ZeRO shards hash float32 pieces across ranks: a 16-bit tensor is not read into them. */
static status check_shard_dtypes(const hid_t *ids, const ckpt_content *c, char *why)
{
    for (int g = 0, k = 0; g < c->ngroups; k += c->groups[g].table->count, g++)
        for (int i = 0; c->shards[g] && i < c->groups[g].table->count; i++)
            if (ids[k + i] >= 0 && stored_dtype(ids[k + i]) != CKPT_DTYPE_F32) {
                snprintf(why, CKPT_WHY_MAX, "/%s/%s is stored as %s, and this run holds that group in ZeRO shards, "
                         "which load float32 only; HINT: `nebula-ckpt convert PATH --dtype fp32 --out DIR` widens "
                         "the copy (exactly), or resume without zero.stage", c->groups[g].group,
                         c->groups[g].table->entries[i].name, ckpt_dtype_name(stored_dtype(ids[k + i])));
                return STATUS_INPUT;
            }
    return STATUS_OK;
}

/* Collective reads of this rank's slices (and blob row) with their CRC-32 pieces and
 * the recorded checksums; blob rows are verified here against row_checksums. */
static status read_data(MPI_Comm comm, const hid_t *ids, const ckpt_header *h, ckpt_content *c, ckpt_crc_piece *pc,
                        uint32_t *file_crc, char *why)
{
    TRY(check_shard_dtypes(ids, c, why));  /* the same verdict on every rank: the same file */
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    hsize_t row = ckpt_reshard_row(h->world_size, size, rank);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5_CHECK(dxpl);
    H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    status st = STATUS_OK;
    char failed[CKPT_DSET_MAX] = "";
    int k = 0;
    for (int g = 0; g < c->ngroups; g++) {
        const param_table *t = c->groups[g].table;
        if (c->shards[g]) {
            st = read_shards(ids + k, dxpl, c, g, pc + k, file_crc + k, failed);
            k += t->count;
            continue;
        }
        for (int i = 0; i < t->count; i++, k++) {
            const param_entry *e = &t->entries[i];
            hsize_t dims[PARAM_MAX_DIMS];
            size_t a, b;
            for (int d = 0; d < e->ndim; d++) dims[d] = e->shape[d];
            ckpt_tensor_piece(t, e, comm, &a, &b);
            hid_t fs = H5Dget_space(ids[k]);
            H5_CHECK(fs);
            ckpt_select_flat(fs, e->ndim, dims, a, b);
            float *dst = c->groups[g].data + e->offset + a;
            uint64_t stored;
            uint32_t crc;
            if ((read_piece(ids[k], fs, dxpl, b - a, dst, &stored, &crc) != 0 ||
                 ckpt_attr_read(ids[k], "checksum", H5T_NATIVE_UINT32, 0, &file_crc[k]) != 0) && !failed[0])
                snprintf(failed, sizeof failed, "/%s/%s", c->groups[g].group, e->name);
            pc[k].len = stored;
            pc[k].crc = crc;
            H5Sclose(fs);
        }
    }
    uint32_t *rows = calloc((size_t)h->world_size, sizeof *rows);
    CHECK(rows, "out of memory reading checkpoint row checksums");
    for (int b = 0; b < c->nblobs; b++, k++) {
        ckpt_blob *bl = &c->blobs[b];
        bl->loaded = ids[k] >= 0;
        if (!bl->loaded) continue;  /* an optional blob the file does not hold as this run needs it */
        hid_t fs = H5Dget_space(ids[k]), ms = ckpt_mem_space(bl->bytes);
        H5_CHECK(fs);
        ckpt_select_row(fs, row, bl->bytes);
        uint32_t whole = 0;
        if (H5Dread(ids[k], H5T_NATIVE_UINT8, ms, fs, dxpl, bl->data) < 0 ||
            ckpt_attr_read(ids[k], "checksum", H5T_NATIVE_UINT32, 0, &whole) != 0 ||
            ckpt_attr_read(ids[k], "row_checksums", H5T_NATIVE_UINT32, (hsize_t)h->world_size, rows) != 0) {
            if (!failed[0]) snprintf(failed, sizeof failed, "/rank/%s", bl->name);
        } else if (st == STATUS_OK && ckpt_crc_rows(rows, h->world_size, bl->bytes) != whole) {
            snprintf(why, CKPT_WHY_MAX, "checksum mismatch in dataset /rank/%s: its row_checksums do not combine "
                     "to its checksum", bl->name);
            st = STATUS_CORRUPT;
        } else if (st == STATUS_OK && ckpt_crc_bytes(0, bl->data, bl->bytes) != rows[row]) {
            snprintf(why, CKPT_WHY_MAX, "checksum mismatch in dataset /rank/%s (row %llu)", bl->name,
                     (unsigned long long)row);
            st = STATUS_CORRUPT;
        }
        H5Sclose(ms);
        H5Sclose(fs);
    }
    free(rows);
    H5Pclose(dxpl);
    if (failed[0]) {
        snprintf(why, CKPT_WHY_MAX, "cannot read dataset %s or its checksum (HDF5)", failed);
        return STATUS_IO;
    }
    return st;
}

/* Every rank has the CRC-32 of every tensor after one reduction; the first mismatch is
 * named. The same verdict on every rank. */
static status verify(comm_ctl ctl, const ckpt_content *c, ckpt_crc_piece *pc, const uint32_t *file_crc, int n,
                     char *why)
{
    TRY(ckpt_crc_allreduce(ctl, pc, n));
    int bad = 0, k = 0;
    for (int g = 0; g < c->ngroups; g++)
        for (int i = 0; i < c->groups[g].table->count; i++, k++) {
            if ((uint32_t)pc[k].crc == file_crc[k]) continue;
            if (!bad++)
                snprintf(why, CKPT_WHY_MAX, "checksum mismatch in dataset /%s/%s (the file records %08x, its data "
                         "hashes to %08x)", c->groups[g].group, c->groups[g].table->entries[i].name, file_crc[k],
                         (uint32_t)pc[k].crc);
        }
    if (bad > 1) {
        size_t used = strlen(why);
        snprintf(why + used, CKPT_WHY_MAX - used, " and in %d more datasets", bad - 1);
    }
    return bad ? STATUS_CORRUPT : STATUS_OK;
}

/* c->check over what this rank read: its slice of every tensor (or the ranges it holds of
 * a sharded group) and its row of every blob loaded. The first refusal, in why. */
static status check_values(MPI_Comm comm, const ckpt_content *c, char *why)
{
    char name[CKPT_DSET_MAX];
    for (int g = 0; g < c->ngroups; g++) {
        const param_table *t = c->groups[g].table;
        const ckpt_shards *s = c->shards[g];
        for (int i = 0; i < t->count; i++) {
            const param_entry *e = &t->entries[i];
            snprintf(name, sizeof name, "/%s/%s", c->groups[g].group, e->name);
            if (!s) {
                size_t a, b;
                ckpt_tensor_piece(t, e, comm, &a, &b);
                const float *v = c->groups[g].data + e->offset + a;
                if (b > a) TRY(c->check(name, v, (b - a) * sizeof *v, why, CKPT_WHY_MAX));
                continue;
            }
            int first, end;
            ckpt_shard_span(s, e, &first, &end);
            for (int r = first; r < end; r++)
                if (s->mine[r] && s->count[r])
                    TRY(c->check(name, c->groups[g].data + s->packed[r], s->count[r] * sizeof(float), why,
                                 CKPT_WHY_MAX));
        }
    }
    for (int b = 0; b < c->nblobs; b++) {
        if (!c->blobs[b].loaded) continue;
        snprintf(name, sizeof name, "/rank/%s", c->blobs[b].name);
        TRY(c->check(name, c->blobs[b].data, c->blobs[b].bytes, why, CKPT_WHY_MAX));
    }
    return STATUS_OK;
}

/* Each rank read its slice of every buffer: one MPI_Allgatherv per buffer, in blocks
 * of PARAM_ALIGN_FLOATS (slices are whole blocks), gives every rank all of them. */
static status replicate(comm_ctl ctl, ckpt_content *c)
{
    int size;
    MPI_Comm_size(ctl.comm, &size);
    if (size == 1) return STATUS_OK;
    int *counts = malloc((size_t)size * sizeof *counts), *displs = malloc((size_t)size * sizeof *displs);
    CHECK(counts && displs, "out of memory replicating a checkpoint");
    MPI_Datatype line;
    MPI_CHECK(MPI_Type_contiguous(PARAM_ALIGN_FLOATS, MPI_FLOAT, &line));
    MPI_CHECK(MPI_Type_commit(&line));
    status st = STATUS_OK;
    for (int g = 0; g < c->ngroups && st == STATUS_OK; g++) {
        if (c->shards[g]) continue;  /* each rank keeps only what it holds */
        size_t total = c->groups[g].table->total;
        CHECK(total / PARAM_ALIGN_FLOATS <= (size_t)INT32_MAX, "a flat buffer of more than 2^31 cache lines");
        for (int r = 0; r < size; r++) {
            size_t lo, hi;
            ckpt_flat_slice(total, r, size, &lo, &hi);
            counts[r] = (int)((hi - lo) / PARAM_ALIGN_FLOATS);
            displs[r] = (int)(lo / PARAM_ALIGN_FLOATS);
        }
        st = comm_ctl_allgatherv(ctl, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->groups[g].data, counts, displs, line);
    }
    if (st != STATUS_OK) return st;  /* counts, displs and line stay: MPI may still read them */
    MPI_CHECK(MPI_Type_free(&line));
    free(counts);
    free(displs);
    return STATUS_OK;
}

status ckpt_file_read(MPI_Comm comm, const char *path, bool own, int64_t marker_step, ckpt_content *c,
                      ckpt_info *info, char *why)
{
    int size, n = 0;
    MPI_Comm_size(comm, &size);
    info->refused = false;
    for (int g = 0; g < c->ngroups; g++) n += c->groups[g].table->count;
    hid_t *ids = malloc((size_t)(n + c->nblobs + 1) * sizeof *ids);
    ckpt_crc_piece *pc = calloc((size_t)n + 1, sizeof *pc);
    uint32_t *file_crc = calloc((size_t)n + 1, sizeof *file_crc);
    CHECK(ids && pc && file_crc, "out of memory loading a checkpoint");
    for (int k = 0; k < n + c->nblobs; k++) ids[k] = -1;
    comm_ctl ctl = comm_ctl_watched(ckpt_ctl(comm, c->timeout_s), c->wd);  /* a timeout names ranks */
    /* HDF5 opens the path itself: a FIFO there would block it (every rank sees the same
     * file, so every rank takes the same branch). A file of the run's own checkpoint
     * directory is probed without following a link (path_open_own): a state.h5 planted
     * as a link is a damaged checkpoint, refused by name before HDF5 opens anything */
    int probe;
    struct stat sb;
    char kind[160];
    status st = STATUS_OK;
    int rc = own ? path_open_own(path, &probe, &sb, 0, kind, sizeof kind)
                 : path_open_regular(path, &probe, &sb, 0, kind, sizeof kind);
    if (rc != 0) {
        snprintf(why, CKPT_WHY_MAX, "%s %s", path, kind);  /* a committed checkpoint without its file: damaged */
        st = STATUS_CORRUPT;
    } else {
        close(probe);
    }
    if ((st = ckpt_agree(ctl, st, why, CKPT_WHY_MAX)) != STATUS_OK) {
        free(ids);
        free(pc);
        free(file_crc);
        return st;
    }
    hid_t fapl = ckpt_file_access(comm);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        snprintf(why, CKPT_WHY_MAX, "cannot open %s: truncated, damaged or not an HDF5 file", path);
        st = STATUS_CORRUPT;
    }
    st = ckpt_agree(ctl, st, why, CKPT_WHY_MAX);
    ckpt_header h;
    if (st == STATUS_OK) st = ckpt_agree(ctl, read_header(f, path, marker_step, c, &h, why), why, CKPT_WHY_MAX);
    if (st == STATUS_OK) st = ckpt_agree(ctl, ckpt_check_layout(f, &h, c, ids, why), why, CKPT_WHY_MAX);
    if (st == STATUS_OK) st = ckpt_agree(ctl, read_data(comm, ids, &h, c, pc, file_crc, why), why, CKPT_WHY_MAX);
    if (st == STATUS_OK) st = shard_pieces(ctl, c, pc);
    if (st == STATUS_OK) st = verify(ctl, c, pc, file_crc, n, why);
    if (st == STATUS_OK && c->check) {
        st = ckpt_agree(ctl, check_values(comm, c, why), why, CKPT_WHY_MAX);
        info->refused = st == STATUS_CORRUPT;
    }
    if (st == STATUS_OK) st = replicate(ctl, c);
    if (st == STATUS_TIMEOUT) return st;  /* closing the file is collective: left to the ending job */
    if (st == STATUS_OK) {
        info->step = h.step;
        info->world_size = h.resharded_from ? h.resharded_from : h.world_size;
        info->ranks_per_node = h.ranks_per_node;
        info->resharded = ckpt_resharded(&h, size);
        info->version = h.version;
        info->layout = h.layout;
        snprintf(info->dtype, sizeof info->dtype, "float32");
        for (int k = 0; k < n; k++)
            if (ids[k] >= 0 && stored_dtype(ids[k]) != CKPT_DTYPE_F32)
                snprintf(info->dtype, sizeof info->dtype, "%s", ckpt_dtype_name(stored_dtype(ids[k])));
    }
    for (int k = 0; k < n + c->nblobs; k++)
        if (ids[k] >= 0) H5Dclose(ids[k]);
    if (f >= 0) H5Fclose(f);
    free(ids);
    free(pc);
    free(file_crc);
    return st;
}

/* ---- the reshard rule (ckpt_impl.h), which nebula-ckpt reshard applies ahead of time */

hsize_t ckpt_reshard_row(int rows, int world, int rank)
{
    return rows == world ? (hsize_t)rank : 0;
}

bool ckpt_resharded(const ckpt_header *h, int world)
{
    return h->world_size != world || h->resharded_from > 0;
}
