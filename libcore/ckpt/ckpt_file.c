/* ckpt_file — the HDF5 file of a checkpoint: the plan (one dataset per tensor and per
 * blob), CRC-32 checksums, selections, attributes, creation with every attribute and the
 * write of each rank's slices (the read is ckpt_read.c).
 *
 * The one design decision: tensors are hashed and moved as slices of their flat buffer.
 * Rank r of P owns the floats [lo, hi) = ckpt_flat_slice(total, r, P) of every buffer;
 * the part of a tensor inside that slice is a flat element range, which ckpt_select_flat
 * turns into at most 2*ndim-1 hyperslab blocks of the tensor's N-d dataspace. The
 * slices' CRC-32s are combined in rank order by a non-commutative MPI reduction
 * (crc32_combine), so every rank reads and hashes only its bytes, and on load one
 * MPI_Allgatherv per buffer replicates what the ranks read. Datasets are contiguous,
 * allocated at creation and never filled, so their raw bytes sit at one file offset
 * and nothing is written twice: a slice of a tensor is one byte range of the file,
 * which each rank pwrite()s itself (ckpt_file_write_slices), as the asynchronous
 * writer's thread writes every dataset. No collective HDF5 or MPI-IO call takes part
 * in a save: one rank's I/O error can then not leave the others inside a library
 * collective that has no deadline; it is agreed through comm/ctl.h like any status. */
#include "ckpt_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/cli.h"

#define CRC_PIECE_BYTES (1u << 20)  /* OpenMP hashes pieces of at least 1 MiB ... */
#define CRC_MAX_PIECES  256         /* ... at most this many per buffer */
#define CRC_SUB_BYTES   (256u << 10) /* copy then hash 256 KiB at a time, while in cache */

/* ---- plan ---------------------------------------------------------------------- */

static void name_check(const char *name, size_t max, bool slash_ok)
{
    CHECK(name && name[0] && strlen(name) < max, "a checkpoint group, tensor or blob name is empty or too long");
    CHECK(slash_ok || !strchr(name, '/'), "tensor and blob names may not contain '/'");
}

void ckpt_plan_build(ckpt_plan *p, const ckpt_content *c, int world_size)
{
    CHECK(c->ngroups >= 0 && c->ngroups <= CKPT_MAX_GROUPS, "ckpt_content.ngroups out of range");
    CHECK(c->nblobs >= 0 && c->nblobs <= CKPT_MAX_BLOBS, "ckpt_content.nblobs out of range");
    memset(p, 0, sizeof *p);
    for (int g = 0; g < c->ngroups; g++) p->ntensors += c->groups[g].table->count;
    p->ndsets = p->ntensors + c->nblobs;
    p->world_size = world_size;
    p->dsets = calloc((size_t)p->ndsets + 1, sizeof *p->dsets);
    p->row_crcs = calloc((size_t)c->nblobs * (size_t)world_size + 1, sizeof *p->row_crcs);
    p->pieces = calloc((size_t)p->ntensors + 1, sizeof *p->pieces);
    p->offsets = calloc((size_t)p->ndsets + 1, sizeof *p->offsets);
    CHECK(p->dsets && p->row_crcs && p->pieces && p->offsets, "out of memory building a checkpoint plan");
    ckpt_dset *d = p->dsets;
    for (int g = 0; g < c->ngroups; g++) {
        const char *gn = c->groups[g].group;
        name_check(gn, CKPT_GROUP_MAX, true);
        CHECK(gn[0] != '/' && gn[strlen(gn) - 1] != '/' && strcmp(gn, "rank") != 0,
              "group names are relative paths such as \"optim/m\"; \"rank\" holds the blobs");
        for (int h = 0; h < g; h++) CHECK(strcmp(gn, c->groups[h].group) != 0, "duplicate checkpoint group");
        const param_table *t = c->groups[g].table;
        CHECK(t->total % PARAM_ALIGN_FLOATS == 0, "a flat buffer's total is a multiple of PARAM_ALIGN_FLOATS");
        if (c->shards[g]) ckpt_shards_check(c->shards[g], t);
        for (int i = 0; i < t->count; i++, d++) {
            const param_entry *e = &t->entries[i];
            name_check(e->name, PARAM_NAME_MAX, false);
            snprintf(d->path, sizeof d->path, "/%s/%s", gn, e->name);
            d->group = g;
            d->index = i;
            d->ndim = e->ndim;
            for (int k = 0; k < e->ndim; k++) d->dims[k] = e->shape[k];
            d->bytes = e->count * sizeof(float);
        }
    }
    for (int b = 0; b < c->nblobs; b++, d++) {
        const ckpt_blob *bl = &c->blobs[b];
        name_check(bl->name, CKPT_GROUP_MAX, false);
        CHECK(bl->bytes >= 1 && bl->bytes <= (size_t)INT32_MAX, "a blob has 1 .. INT_MAX bytes");
        for (int h = 0; h < b; h++) CHECK(strcmp(bl->name, c->blobs[h].name) != 0, "duplicate checkpoint blob");
        snprintf(d->path, sizeof d->path, "/rank/%s", bl->name);
        d->group = -1;
        d->index = b;
        d->ndim = 2;
        d->dims[0] = (hsize_t)world_size;
        d->dims[1] = bl->bytes;
        d->bytes = bl->bytes * (size_t)world_size;
        d->row_crcs = p->row_crcs + (size_t)b * (size_t)world_size;
    }
}

void ckpt_plan_free(ckpt_plan *p)
{
    free(p->dsets);
    free(p->row_crcs);
    free(p->pieces);
    free(p->offsets);
    memset(p, 0, sizeof *p);
}

/* ---- checksums and slices ------------------------------------------------------ */

uint32_t ckpt_crc_bytes(uint32_t crc, const void *p, size_t n)
{
    return crc32_gzip_refl(crc, (const unsigned char *)p, (uint64_t)n);  /* zlib's CRC-32, ~3x faster */
}

static uint32_t crc_join(uint32_t a, uint32_t b, size_t len_b)
{
    return (uint32_t)crc32_combine(a, b, (z_off_t)len_b);
}

/* First byte of piece i of n (i == n: the end). */
static size_t piece_start(size_t bytes, int n, int i)
{
    return i == n ? bytes : bytes / (size_t)n * (size_t)i;
}

uint32_t ckpt_crc_copy(void *dst, const void *src, size_t bytes)
{
    int n = (int)(bytes / CRC_PIECE_BYTES);
    if (n > CRC_MAX_PIECES) n = CRC_MAX_PIECES;
    if (n < 2) n = 1;
    uint32_t part[CRC_MAX_PIECES];
#pragma omp parallel for schedule(static) if (n > 1)
    for (int i = 0; i < n; i++) {
        size_t a = piece_start(bytes, n, i), b = piece_start(bytes, n, i + 1);
        uint32_t crc = 0;
        for (size_t s = a; s < b; s += CRC_SUB_BYTES) {
            size_t len = b - s < CRC_SUB_BYTES ? b - s : CRC_SUB_BYTES;
            if (dst) memcpy((char *)dst + s, (const char *)src + s, len);
            crc = ckpt_crc_bytes(crc, (const char *)(dst ? dst : src) + s, len);
        }
        part[i] = crc;
    }
    uint32_t crc = part[0];
    for (int i = 1; i < n; i++) crc = crc_join(crc, part[i], piece_start(bytes, n, i + 1) - piece_start(bytes, n, i));
    return crc;
}

void ckpt_flat_slice(size_t total, int rank, int size, size_t *lo, size_t *hi)
{
    /* In whole cache lines (PARAM_ALIGN_FLOATS), so one MPI block type covers a slice. */
    size_t blocks = total / PARAM_ALIGN_FLOATS, q = blocks / (size_t)size, r = blocks % (size_t)size;
    size_t a = q * (size_t)rank + ((size_t)rank < r ? (size_t)rank : r);
    size_t b = a + q + ((size_t)rank < r ? 1 : 0);
    *lo = a * PARAM_ALIGN_FLOATS;
    *hi = b * PARAM_ALIGN_FLOATS;
}

/* The elements [*a, *b) of tensor e inside this rank's slice; *a == *b when none. */
void ckpt_tensor_piece(const param_table *t, const param_entry *e, MPI_Comm comm, size_t *a, size_t *b)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    size_t lo, hi;
    ckpt_flat_slice(t->total, rank, size, &lo, &hi);
    size_t s = lo > e->offset ? lo : e->offset, t_end = e->offset + e->count, z = hi < t_end ? hi : t_end;
    *a = s < z ? s - e->offset : 0;
    *b = s < z ? z - e->offset : 0;
}

static void crc_combine_op(void *in, void *inout, int *n, MPI_Datatype *type)
{
    (void)type;
    const ckpt_crc_piece *a = in;
    ckpt_crc_piece *b = inout;
    for (int i = 0; i < *n; i++) {
        b[i].crc = crc_join((uint32_t)a[i].crc, (uint32_t)b[i].crc, b[i].len);
        b[i].len += a[i].len;
    }
}

status ckpt_crc_allreduce(comm_ctl ctl, ckpt_crc_piece *p, int n)
{
    if (n == 0) return STATUS_OK;
    MPI_Datatype type;
    MPI_Op op;
    MPI_CHECK(MPI_Type_contiguous(2, MPI_UINT64_T, &type));
    MPI_CHECK(MPI_Type_commit(&type));
    MPI_CHECK(MPI_Op_create(crc_combine_op, 0 /* not commutative: rank order */, &op));
    TRY(comm_ctl_allreduce(ctl, MPI_IN_PLACE, p, n, type, op));  /* on failure the op stays: MPI may still use it */
    MPI_CHECK(MPI_Op_free(&op));
    MPI_CHECK(MPI_Type_free(&type));
    return STATUS_OK;
}

uint32_t ckpt_crc_rows(const uint32_t *rows, int n, size_t row_bytes)
{
    uint32_t crc = rows[0];
    for (int r = 1; r < n; r++) crc = crc_join(crc, rows[r], row_bytes);
    return crc;
}

status ckpt_checksums_parallel(comm_ctl ctl, ckpt_plan *p, const ckpt_content *c)
{
    MPI_Comm comm = ctl.comm;
    ckpt_crc_piece *pc = p->pieces;
    for (int k = 0; k < p->ntensors; k++) {
        const ckpt_tensors *g = &c->groups[p->dsets[k].group];
        const param_entry *e = &g->table->entries[p->dsets[k].index];
        if (c->shards[p->dsets[k].group]) {  /* after the reduction */
            pc[k].len = 0, pc[k].crc = 0;
            continue;
        }
        size_t a, b;
        ckpt_tensor_piece(g->table, e, comm, &a, &b);
        pc[k].len = (b - a) * sizeof(float);
        pc[k].crc = pc[k].len ? ckpt_crc_copy(NULL, g->data + e->offset + a, pc[k].len) : 0;
    }
    TRY(ckpt_crc_allreduce(ctl, pc, p->ntensors));
    for (int k = 0; k < p->ntensors; k++) p->dsets[k].crc = (uint32_t)pc[k].crc;
    for (int g = 0; g < c->ngroups; g++) {
        const ckpt_shards *s = c->shards[g];
        if (!s) continue;
        uint32_t *crc = malloc(((size_t)c->groups[g].table->count + 1) * sizeof *crc);
        CHECK(crc, "out of memory for the checksums of a sharded group");
        TRY(ckpt_shard_group_crcs(ctl, s, c->groups[g].table, c->groups[g].data, crc));  /* crc leaks on a timeout */
        for (int k = 0; k < p->ntensors; k++)
            if (p->dsets[k].group == g) p->dsets[k].crc = crc[p->dsets[k].index];
        free(crc);
    }
    for (int k = p->ntensors; k < p->ndsets; k++) {
        ckpt_dset *d = &p->dsets[k];
        const ckpt_blob *bl = &c->blobs[d->index];
        if (p->same_rows) {  /* every rank holds the one row: the same result everywhere, no communication */
            uint32_t crc = ckpt_crc_bytes(0, bl->data, bl->bytes);
            for (int r = 0; r < p->world_size; r++) d->row_crcs[r] = crc;
        } else {
            uint32_t mine = ckpt_crc_bytes(0, bl->data, bl->bytes);
            TRY(comm_ctl_allgather(ctl, &mine, 1, MPI_UINT32_T, d->row_crcs, 1, MPI_UINT32_T));
        }
        d->crc = ckpt_crc_rows(d->row_crcs, p->world_size, bl->bytes);
    }
    return STATUS_OK;
}

/* ---- selections ---------------------------------------------------------------- */

/* Adds the row-major elements [a, b) of the sub-array whose leading d coordinates are
 * start[0..d): one block for the run of whole rows, recursion for the partial rows at
 * either end. */
static void select_flat_rec(hid_t space, int ndim, const hsize_t *dims, int d, hsize_t *start, hsize_t a,
                            hsize_t b, bool *first)
{
    if (a >= b) return;
    hsize_t inner = 1, count[PARAM_MAX_DIMS];
    for (int k = d + 1; k < ndim; k++) inner *= dims[k];
    hsize_t i0 = a / inner, r0 = a % inner, i1 = b / inner, r1 = b % inner;
    if (i0 == i1) {
        start[d] = i0;
        select_flat_rec(space, ndim, dims, d + 1, start, r0, r1, first);
        return;
    }
    if (r0) {
        start[d] = i0;
        select_flat_rec(space, ndim, dims, d + 1, start, r0, inner, first);
        i0++;
    }
    if (i1 > i0) {
        for (int k = 0; k < ndim; k++) count[k] = k < d ? 1 : k == d ? i1 - i0 : dims[k];
        start[d] = i0;
        for (int k = d + 1; k < ndim; k++) start[k] = 0;
        H5_CHECK(H5Sselect_hyperslab(space, *first ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, count, NULL));
        *first = false;
    }
    if (r1) {
        start[d] = i1;
        select_flat_rec(space, ndim, dims, d + 1, start, 0, r1, first);
    }
}

void ckpt_select_flat(hid_t space, int ndim, const hsize_t *dims, size_t a, size_t b)
{
    if (a >= b) {
        H5_CHECK(H5Sselect_none(space));
    } else if (ndim == 0) {
        H5_CHECK(H5Sselect_all(space));
    } else {
        hsize_t start[PARAM_MAX_DIMS] = { 0 };
        bool first = true;
        select_flat_rec(space, ndim, dims, 0, start, a, b, &first);
    }
}

void ckpt_shard_span(const ckpt_shards *s, const param_entry *e, int *first, int *end)
{
    int lo = 0, hi = s->n;  /* first range at or after the tensor's offset */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (s->offset[mid] < e->offset) lo = mid + 1;
        else hi = mid;
    }
    *first = lo;
    while (hi < s->n && s->offset[hi] < e->offset + e->count) hi++;
    *end = hi;
}

void ckpt_shards_check(const ckpt_shards *s, const param_table *t)
{
    int used = 0;
    for (int i = 0; i < t->count; i++) {
        const param_entry *e = &t->entries[i];
        int a, b;
        ckpt_shard_span(s, e, &a, &b);
        size_t at = e->offset;
        for (int k = a; k < b; k++) {
            CHECK(s->offset[k] == at, "ckpt_shards: the ranges must tile each tensor in ascending order");
            at += s->count[k];
        }
        CHECK(at == e->offset + e->count && b > a, "ckpt_shards: the ranges must tile each tensor exactly");
        used += b - a;
    }
    CHECK(used == s->n, "ckpt_shards: a range lies outside every tensor");
}

size_t ckpt_select_shards(hid_t space, const param_entry *e, const ckpt_shards *s, int first, int end,
                          size_t *packed)
{
    hsize_t dims[PARAM_MAX_DIMS], start[PARAM_MAX_DIMS] = { 0 };
    for (int d = 0; d < e->ndim; d++) dims[d] = e->shape[d];
    size_t n = 0;
    bool sel = true;  /* the next block replaces the selection (H5S_SELECT_SET) */
    *packed = 0;
    for (int k = first; k < end; k++) {
        if (!s->mine[k]) continue;
        if (!n) *packed = s->packed[k];
        CHECK(s->packed[k] == *packed + n, "ckpt_shards: held ranges are packed in offset order");
        size_t a = s->offset[k] - e->offset;
        if (e->ndim == 0) H5_CHECK(H5Sselect_all(space));
        else select_flat_rec(space, e->ndim, dims, 0, start, a, a + s->count[k], &sel);
        n += s->count[k];
    }
    if (!n) H5_CHECK(H5Sselect_none(space));
    return n;
}

status ckpt_shard_group_crcs(comm_ctl ctl, const ckpt_shards *s, const param_table *t, const float *data,
                             uint32_t *out)
{
    uint32_t *crc = malloc(((size_t)s->n + 1) * sizeof *crc);
    CHECK(crc, "out of memory for the checksums of a sharded group");
#pragma omp parallel for schedule(dynamic, 4)
    for (int i = 0; i < s->n; i++)
        crc[i] = s->mine[i] ? ckpt_crc_bytes(0, data + s->packed[i], s->count[i] * sizeof(float)) : 0;
    /* every range has exactly one holder, the others contribute 0 */
    if (s->n) TRY(comm_ctl_allreduce(ctl, MPI_IN_PLACE, crc, s->n, MPI_UINT32_T, MPI_BOR));  /* crc leaks on a timeout */
    for (int i = 0; i < t->count; i++) {
        int a, b;
        ckpt_shard_span(s, &t->entries[i], &a, &b);
        out[i] = crc[a];
        for (int k = a + 1; k < b; k++) out[i] = crc_join(out[i], crc[k], s->count[k] * sizeof(float));
    }
    free(crc);
    return STATUS_OK;
}

void ckpt_select_row(hid_t space, hsize_t row, hsize_t bytes)
{
    hsize_t start[2] = { row, 0 }, count[2] = { 1, bytes };
    H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL));
}

/* A 1-D memory space of n elements (n == 0: one element, nothing selected). */
hid_t ckpt_mem_space(size_t n)
{
    hsize_t len = n ? n : 1;
    hid_t s = H5Screate_simple(1, &len, NULL);
    H5_CHECK(s);
    if (!n) H5_CHECK(H5Sselect_none(s));
    return s;
}

/* ---- attributes ---------------------------------------------------------------- */

ckpt_h5_quiet ckpt_h5_quiet_begin(void)
{
    ckpt_h5_quiet q = { NULL, NULL, false };
    if (log_get_level() < LOG_LEVEL_DEBUG && H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data) >= 0)
        q.set = H5Eset_auto2(H5E_DEFAULT, NULL, NULL) >= 0;
    return q;
}

void ckpt_h5_quiet_end(ckpt_h5_quiet q)
{
    if (q.set) H5Eset_auto2(H5E_DEFAULT, q.fn, q.data);
}


static int attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *v)
{
    hid_t s = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    H5_CHECK(s);
    hid_t a = H5Acreate2(obj, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mtype, v) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(s);
    return rc;
}

static hid_t str_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5_CHECK(t);
    H5_CHECK(H5Tset_size(t, H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(t, H5T_CSET_UTF8));
    return t;
}

static int attr_write_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = str_type();
    int rc = attr_write(obj, name, t, t, 0, &value);
    H5Tclose(t);
    return rc;
}

/* Reads n values (a scalar when n == 0) of mtype; -1 when missing or of another size. */
int ckpt_attr_read(hid_t obj, const char *name, hid_t mtype, hsize_t n, void *v)
{
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t s = H5Aget_space(a);
    hssize_t got = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
    int rc = got == (hssize_t)(n ? n : 1) && H5Aread(a, mtype, v) >= 0 ? 0 : -1;
    if (s >= 0) H5Sclose(s);
    H5Aclose(a);
    return rc;
}

int ckpt_attr_read_str(hid_t obj, const char *name, char *out, size_t len)
{
    hid_t t = str_type();
    char *v = NULL;
    int rc = ckpt_attr_read(obj, name, t, 0, &v);
    H5Tclose(t);
    if (rc == 0) snprintf(out, len, "%s", v ? v : "");
    if (v) H5free_memory(v);
    return rc;
}

/* ---- create and write ---------------------------------------------------------- */

hid_t ckpt_file_access(MPI_Comm comm)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5_CHECK(fapl);
    /* HDF5 1.8 object headers: readable by every HDF5 and h5py in use, and large
     * attributes (row_checksums of many ranks) go to dense storage. */
    H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18));
    /* Datasets of a page or more start on a page boundary: the background writer of
     * an async save writes them with O_DIRECT, and file systems with larger blocks
     * (Lustre stripes, GPFS blocks) see fewer read-modify-writes. */
    H5_CHECK(H5Pset_alignment(fapl, CKPT_ALIGN, CKPT_ALIGN));
    if (comm != MPI_COMM_NULL) H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
    return fapl;
}

static int write_root_attrs(hid_t f, const ckpt_plan *p, const ckpt_content *c, int ranks_per_node)
{
    int32_t version = CKPT_FORMAT_VERSION, ws = p->world_size, rpn = ranks_per_node;
    int rc = 0;
    rc |= attr_write_str(f, "magic", CKPT_MAGIC);
    rc |= attr_write(f, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &version);
    rc |= attr_write(f, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &c->step);
    rc |= attr_write_str(f, "model", c->model);
    rc |= attr_write(f, "table_hash", H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, &c->table_hash);
    rc |= attr_write_str(f, "config", c->config_text ? c->config_text : "");
    rc |= attr_write(f, "world_size", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &ws);
    rc |= attr_write(f, "ranks_per_node", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &rpn);
    rc |= attr_write_str(f, "nebula_version", cli_version());
    rc |= attr_write_str(f, "checksum_algorithm", "crc32");
    /* version 2: the process grid; a content without one is data parallel over all ranks */
    ckpt_layout l = c->layout.dp > 0 ? c->layout : (ckpt_layout){ ws, 1, 1, c->layout.zero_stage };
    CHECK(l.tp >= 1 && l.pp >= 1 && (int64_t)l.dp * l.tp * l.pp == ws,
          "a checkpoint layout whose dp x tp x pp is not the world size");
    rc |= attr_write(f, "parallel_dp", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &l.dp);
    rc |= attr_write(f, "parallel_tp", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &l.tp);
    rc |= attr_write(f, "parallel_pp", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &l.pp);
    rc |= attr_write(f, "zero_stage", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &l.zero_stage);
    if (c->resharded_from > 0)  /* only in offline reshards: its absence means the writer's own rows */
        rc |= attr_write(f, "resharded_from", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &c->resharded_from);
    return rc;
}

static int create_groups(hid_t f, const ckpt_content *c)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5_CHECK(lcpl);
    H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
    int rc = 0;
    for (int g = 0; g < c->ngroups && !rc; g++) {
        uint64_t hash = param_table_hash(c->groups[g].table);
        hid_t grp = H5Gcreate2(f, c->groups[g].group, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        rc = grp < 0 ? -1 : attr_write(grp, "table_hash", H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, &hash);
        if (grp >= 0) H5Gclose(grp);
    }
    if (c->nblobs > 0 && !rc) {
        hid_t grp = H5Gcreate2(f, "rank", lcpl, H5P_DEFAULT, H5P_DEFAULT);
        rc = grp < 0 ? -1 : 0;
        if (grp >= 0) H5Gclose(grp);
    }
    H5Pclose(lcpl);
    return rc;
}

/* Records each dataset's file offset in the plan (dsets[].offset and offsets[]) and
 * closes the file. */
static status offsets_close(hid_t f, ckpt_plan *p, char *why)
{
    for (int k = 0; k < p->ndsets; k++) {
        hid_t ds = H5Dopen2(f, p->dsets[k].path, H5P_DEFAULT);
        H5_CHECK(ds);
        p->dsets[k].offset = H5Dget_offset(ds);
        CHECK(p->dsets[k].offset != HADDR_UNDEF, "contiguous datasets allocated early have an offset");
        p->offsets[k] = (uint64_t)p->dsets[k].offset;
        H5Dclose(ds);
    }
    if (H5Fclose(f) >= 0) return STATUS_OK;
    snprintf(why, CKPT_WHY_MAX, "cannot write the metadata of the checkpoint file (HDF5)");
    return STATUS_IO;
}

status ckpt_file_create(const char *path, ckpt_plan *p, const ckpt_content *c, int ranks_per_node, char *why)
{
    hid_t fapl = ckpt_file_access(MPI_COMM_NULL);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        snprintf(why, CKPT_WHY_MAX, "cannot create %s (HDF5)", path);
        return STATUS_IO;
    }
    const char *failed = "the root attributes";
    if (write_root_attrs(f, p, c, ranks_per_node) != 0) goto close_file;
    failed = "the groups";
    if (create_groups(f, c) != 0) goto close_file;
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5_CHECK(dcpl);
    H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS));
    H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    for (int k = 0; k < p->ndsets; k++) {
        const ckpt_dset *d = &p->dsets[k];
        bool blob = d->group < 0;
        hid_t s = d->ndim ? H5Screate_simple(d->ndim, d->dims, NULL) : H5Screate(H5S_SCALAR);
        H5_CHECK(s);
        hid_t ds = H5Dcreate2(f, d->path, blob ? H5T_STD_U8LE : H5T_IEEE_F32LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        int rc = ds < 0 ? -1 : attr_write(ds, "checksum", H5T_STD_U32LE, H5T_NATIVE_UINT32, 0, &d->crc);
        if (!rc) rc = attr_write_str(ds, "dtype", blob ? "uint8" : "float32");  /* version 2 */
        if (blob && !rc)
            rc = attr_write(ds, "row_checksums", H5T_STD_U32LE, H5T_NATIVE_UINT32, d->dims[0], d->row_crcs);
        if (ds >= 0) H5Dclose(ds);
        H5Sclose(s);
        if (rc) {
            failed = d->path;
            H5Pclose(dcpl);
            goto close_file;
        }
    }
    H5Pclose(dcpl);
    return offsets_close(f, p, why);
close_file:
    snprintf(why, CKPT_WHY_MAX, "cannot create %s in %s (HDF5)", failed, path);
    H5Fclose(f);
    return STATUS_IO;
}

/* Another rank's part of the save failed (ckpt_peer_watch): this rank stops writing. */
static bool peer_failed(const ckpt_peer_watch *w)
{
    return w && w->failed(w->arg);
}

/* n bytes at file offset `at`, in pieces of 64 MiB with watch asked between them; -1
 * with errno when the file takes fewer (0 bytes written: EIO), 1 when watch said stop. */
static int pwrite_full(int fd, const void *src, size_t n, uint64_t at, const ckpt_peer_watch *watch)
{
    const size_t piece = (size_t)64 << 20;
    const char *p = src;
    for (size_t left = piece; n > 0;) {
        if (left == 0) {
            if (peer_failed(watch)) return 1;
            left = piece;
        }
        ssize_t got = pwrite(fd, p, n < left ? n : left, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = EIO;
            return -1;
        }
        p += got, n -= (size_t)got, at += (uint64_t)got, left -= (size_t)got;
    }
    return 0;
}

/* One piece of this rank's: n bytes of src at file offset `at`; the first one of the
 * save fails with *inject when it is set (CHAOS), instead of the call. */
static int write_piece(int fd, const void *src, size_t n, uint64_t at, int *inject, const ckpt_peer_watch *watch)
{
    if (*inject) {
        errno = *inject;
        *inject = 0;
        return -1;
    }
    return n ? pwrite_full(fd, src, n, at, watch) : 0;
}

/* This rank's part of dataset d: its slice of a tensor (sharded: the ranges of it it
 * holds), or its blob row(s). A tensor's elements [a, b) in row-major order are the
 * bytes [4a, 4b) of its contiguous dataset. */
static int write_dset(int fd, const ckpt_plan *p, const ckpt_dset *d, const ckpt_content *c, int rank, int size,
                      MPI_Comm comm, int *inject, const ckpt_peer_watch *watch)
{
    int rc;
    if (d->group < 0) {  /* a blob: this rank's row, or (same_rows) rows rank, rank + size, ... of the one row */
        const void *row = c->blobs[d->index].data;
        size_t bytes = d->dims[1];
        for (hsize_t r = (hsize_t)rank; r < d->dims[0]; r += (hsize_t)size) {
            if ((rc = write_piece(fd, row, bytes, d->offset + r * bytes, inject, watch)) != 0) return rc;
            if (!p->same_rows) break;
        }
        return 0;
    }
    const ckpt_tensors *g = &c->groups[d->group];
    const param_entry *e = &g->table->entries[d->index];
    const ckpt_shards *s = c->shards[d->group];
    if (s) {
        int first, end;
        ckpt_shard_span(s, e, &first, &end);
        for (int k = first; k < end; k++)
            if (s->mine[k] && (rc = write_piece(fd, g->data + s->packed[k], s->count[k] * sizeof(float),
                                                d->offset + (s->offset[k] - e->offset) * sizeof(float), inject,
                                                watch)) != 0)
                return rc;
        return 0;
    }
    size_t a, b;
    ckpt_tensor_piece(g->table, e, comm, &a, &b);
    return a < b ? write_piece(fd, g->data + e->offset + a, (b - a) * sizeof(float), d->offset + a * sizeof(float),
                               inject, watch)
                 : 0;
}

status ckpt_file_write_slices(const char *path, MPI_Comm comm, const ckpt_plan *p, const ckpt_content *c,
                              int fault_errno, const ckpt_peer_watch *watch, char *why, int *err)
{
    int rank, size, inject = fault_errno, done = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const char *op = "open", *failed = NULL;
    int fd = open(path, O_WRONLY | O_CLOEXEC), rc = fd < 0 ? -1 : 0;
    for (int k = 0; k < p->ndsets && rc == 0; k++) {
        op = "write dataset";
        failed = p->dsets[k].path;
        rc = peer_failed(watch) ? 1 : write_dset(fd, p, &p->dsets[k], c, rank, size, comm, &inject, watch);
        if (rc == 0) done++;
    }
    if (rc == 0 && peer_failed(watch)) rc = 1;  /* no fsync for a save that failed elsewhere */
    if (rc == 0) {  /* this rank's bytes durable before the commit (MPI_File_sync's part) */
        op = "sync", failed = NULL;
        rc = fsync(fd);
    }
    *err = rc < 0 ? errno : 0;
    if (rc < 0 && watch) watch->tell(watch->arg);  /* before close, which may block on a failing device */
    if (fd >= 0 && close(fd) != 0 && rc == 0) {
        op = "close", failed = NULL;
        rc = -1;
        *err = errno;
        if (watch) watch->tell(watch->arg);
    }
    if (rc == 0) return STATUS_OK;
    if (rc > 0) {
        snprintf(why, CKPT_WHY_MAX, "stopped writing %s after %d of %d datasets: another rank failed", path, done,
                 p->ndsets);
        return STATUS_PEER;
    }
    /* "cannot write dataset /params/wte.weight of PATH: ..." or "cannot sync PATH: ..." */
    snprintf(why, CKPT_WHY_MAX, "cannot %s%s%s%s%s: %s", op, failed ? " " : "", failed ? failed : "",
             failed ? " of " : " ", path, strerror(*err));
    return STATUS_IO;
}

status ckpt_file_set_checksums(const char *path, const ckpt_plan *p, fault_plan *chaos, int64_t step, char *why)
{
    int inject = FAULT_ERRNO(chaos, "ckpt.checksums", step);  /* stands for HDF5's own calls below */
    if (inject) {
        errno = inject;
        snprintf(why, CKPT_WHY_MAX, "cannot reopen %s to write its checksums: %s", path, log_errno_str());
        errno = inject;
        return STATUS_IO;
    }
    hid_t fapl = ckpt_file_access(MPI_COMM_NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        snprintf(why, CKPT_WHY_MAX, "cannot reopen %s to write its checksums (HDF5)", path);
        return STATUS_IO;
    }
    const char *failed = NULL;
    /* Replaced, not rewritten in place: HDF5 1.10 cannot modify a record of dense
     * attribute storage reopened from disk. */
    for (int k = 0; k < p->ndsets && !failed; k++) {
        const ckpt_dset *d = &p->dsets[k];
        hid_t ds = H5Dopen2(f, d->path, H5P_DEFAULT);
        int rc = ds < 0 || H5Adelete(ds, "checksum") < 0 ||
                 attr_write(ds, "checksum", H5T_STD_U32LE, H5T_NATIVE_UINT32, 0, &d->crc) != 0;
        if (!rc && d->group < 0)
            rc = H5Adelete(ds, "row_checksums") < 0 ||
                 attr_write(ds, "row_checksums", H5T_STD_U32LE, H5T_NATIVE_UINT32, d->dims[0], d->row_crcs) != 0;
        if (ds >= 0) H5Dclose(ds);
        if (rc) failed = d->path;
    }
    if (H5Fclose(f) < 0 && !failed) failed = "(close)";
    if (failed) {
        snprintf(why, CKPT_WHY_MAX, "cannot write the checksum of %s in %s (HDF5)", failed, path);
        return STATUS_IO;
    }
    inject = FAULT_ERRNO(chaos, "ckpt.fsync", step);
    int fd = open(path, O_WRONLY | O_CLOEXEC), rc = fd < 0 ? -1 : inject ? -1 : fsync(fd);
    if (fd >= 0 && inject) errno = inject;
    if (rc != 0) {
        int err = errno;
        snprintf(why, CKPT_WHY_MAX, "cannot sync %s: %s", path, log_errno_str());
        if (fd >= 0) close(fd);
        errno = err;
        return STATUS_IO;
    }
    close(fd);
    return STATUS_OK;
}
