/* param — the parameter table and the flat buffers (see param.h).
 *
 * Layout: offset(i) = align16(offset(i-1) + count(i-1)), total = align16(end of
 * the last tensor). Buffers are zero-filled in parallel, each thread a
 * contiguous run of whole cache lines. */
#include "param.h"

#include <fnmatch.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

static size_t align_up(size_t n)
{
    return (n + PARAM_ALIGN_FLOATS - 1) / PARAM_ALIGN_FLOATS * PARAM_ALIGN_FLOATS;
}

void param_table_init(param_table *pt)
{
    pt->entries = NULL;
    pt->count = 0;
    pt->capacity = 0;
    pt->total = 0;
    pt->tp_size = 1;
    pt->tp_rank = 0;
}

void param_table_set_tp(param_table *pt, int tp_size, int tp_rank)
{
    CHECK(pt->count == 0 && tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size,
          "param_table_set_tp: before any param_add, with 0 <= tp_rank < tp_size");
    pt->tp_size = tp_size;
    pt->tp_rank = tp_rank;
}

int param_add_split(param_table *pt, const char *name, int layer, bool decay, int ndim, size_t d0, size_t d1,
                    int dim, int parts)
{
    size_t d[2] = { d0, d1 };
    CHECK(dim >= 0 && dim < ndim && ndim <= 2 && parts >= 1, "param_add_split: a 1-D or 2-D tensor, dim < ndim");
    size_t split = (size_t)pt->tp_size * (size_t)parts;
    if (d[dim] % split != 0)
        die(name, "a tensor-parallel dimension does not divide", "the model's checks (model_spec_check_grid) "
            "should have refused this tp size");
    d[dim] /= (size_t)pt->tp_size;
    int i = param_add(pt, name, layer, decay, ndim, d[0], d[1], 0, 0);
    pt->entries[i].tp_dim = dim;
    pt->entries[i].tp_parts = parts;
    return i;
}

void param_entry_full_shape(const param_table *pt, const param_entry *e, size_t shape[PARAM_MAX_DIMS])
{
    for (int k = 0; k < PARAM_MAX_DIMS; k++) shape[k] = e->shape[k];
    if (e->tp_dim >= 0) shape[e->tp_dim] *= (size_t)pt->tp_size;
}

void param_table_full(const param_table *pt, param_table *full)
{
    param_table_init(full);
    for (int i = 0; i < pt->count; i++) {
        const param_entry *e = &pt->entries[i];
        size_t d[PARAM_MAX_DIMS];
        param_entry_full_shape(pt, e, d);
        int k = param_add(full, e->name, e->layer, e->decay, e->ndim, d[0], d[1], d[2], d[3]);
        full->entries[k].tp_parts = e->tp_parts;
    }
}

size_t param_entry_full_count(const param_table *pt, const param_entry *e)
{
    return e->tp_dim >= 0 ? e->count * (size_t)pt->tp_size : e->count;
}

void param_tp_copy(const param_table *pt, const param_entry *e, float *shard, float *full, bool to_full)
{
    if (e->tp_dim < 0) {
        if (to_full) memcpy(full, shard, e->count * sizeof *full);
        else memcpy(shard, full, e->count * sizeof *full);
        return;
    }
    /* view both as (outer, dim, inner): a run of `blk` shard rows of `inner` floats per
     * part sits at part * (tp * blk) + rank * blk in the full tensor */
    size_t outer = 1, inner = 1;
    for (int k = 0; k < e->tp_dim; k++) outer *= e->shape[k];
    for (int k = e->tp_dim + 1; k < e->ndim; k++) inner *= e->shape[k];
    size_t local = e->shape[e->tp_dim], blk = local / (size_t)e->tp_parts, tp = (size_t)pt->tp_size;
    for (size_t o = 0; o < outer; o++)
        for (int part = 0; part < e->tp_parts; part++) {
            float *s = shard + (o * local + (size_t)part * blk) * inner;
            float *f = full + (o * local * tp + ((size_t)part * tp + (size_t)pt->tp_rank) * blk) * inner;
            if (to_full) memcpy(f, s, blk * inner * sizeof *f);
            else memcpy(s, f, blk * inner * sizeof *f);
        }
}

bool param_decay_default(int ndim)
{
    return ndim >= 2;
}

int param_freeze(param_table *pt, const char *patterns, char *why, size_t len)
{
    char list[4096], *save = NULL;
    int n = 0;
    snprintf(list, sizeof list, "%s", patterns);
    for (char *p = strtok_r(list, ", ", &save); p; p = strtok_r(NULL, ", ", &save)) {
        int hit = 0;
        for (int i = 0; i < pt->count; i++)
            if (fnmatch(p, pt->entries[i].name, 0) == 0) {
                n += !pt->entries[i].frozen;
                pt->entries[i].frozen = true;
                hit++;
            }
        if (!hit) {
            snprintf(why, len, "'%s' matches no tensor (names as nebula-ckpt info lists them: %s, %s, ...)", p,
                     pt->entries[0].name, pt->count > 1 ? pt->entries[1].name : "");
            return -1;
        }
    }
    return n;
}

void param_zero_frozen(const param_table *pt, float *grads)
{
    for (int i = 0; i < pt->count; i++)
        if (pt->entries[i].frozen) memset(grads + pt->entries[i].offset, 0, pt->entries[i].count * sizeof *grads);
}

int param_find(const param_table *pt, const char *name)
{
    for (int i = 0; i < pt->count; i++)
        if (strcmp(pt->entries[i].name, name) == 0) return i;
    return -1;
}

void param_views_check(const param_table *pt, const size_t *offsets, size_t n, const char *family)
{
    for (int i = 0; i < pt->count; i++) {
        size_t hits = 0;
        for (size_t k = 0; k < n; k++) hits += offsets[k] == pt->entries[i].offset;
        if (hits != 1)
            die(pt->entries[i].name, hits ? "two view fields name one tensor" : "a tensor has no view field",
                "every param_add of the family fills exactly one field of its views struct");
    }
    if (n != (size_t)pt->count) die(family, "a view field names no tensor", "fill every field of the views struct");
}

int param_add(param_table *pt, const char *name, int layer, bool decay, int ndim, size_t d0, size_t d1,
              size_t d2, size_t d3)
{
    CHECK(name != NULL && name[0] != '\0', "every parameter needs a (Hugging Face / torchvision) name");
    if (strlen(name) >= PARAM_NAME_MAX)
        die(name, "parameter name too long", "names are at most 95 characters (PARAM_NAME_MAX - 1)");
    if (param_find(pt, name) >= 0)
        die(name, "duplicate parameter name", "each tensor is added once; check the model's param_add calls");
    CHECK(ndim >= 0 && ndim <= PARAM_MAX_DIMS, "ndim is 0 (scalar) to PARAM_MAX_DIMS");

    const size_t dims[PARAM_MAX_DIMS] = { d0, d1, d2, d3 };
    param_entry e = { .ndim = ndim, .layer = layer, .decay = decay, .count = 1, .tp_dim = -1, .tp_parts = 1 };
    snprintf(e.name, sizeof e.name, "%s", name);
    for (int k = 0; k < PARAM_MAX_DIMS; k++) {
        e.shape[k] = k < ndim ? dims[k] : 1;
        if (k >= ndim) continue;
        if (dims[k] == 0) die(name, "a dimension is zero", "empty tensors do not belong in the table");
        if (e.count > SIZE_MAX / 4 / dims[k]) die(name, "tensor size overflows", "check the shape");
        e.count *= dims[k];
    }
    e.offset = pt->total;
    if (e.offset > SIZE_MAX / 4 - e.count - PARAM_ALIGN_FLOATS)
        die(name, "flat buffer size overflows", "check the model's shapes");

    if (pt->count == pt->capacity) {
        int cap = pt->capacity ? 2 * pt->capacity : 64;
        param_entry *grown = realloc(pt->entries, (size_t)cap * sizeof *grown);
        if (!grown) die("realloc(param table)", log_errno_str(), "the host is out of memory at init");
        pt->entries = grown;
        pt->capacity = cap;
    }
    pt->entries[pt->count] = e;
    pt->total = align_up(e.offset + e.count);
    return pt->count++;
}

size_t param_numel(const param_table *pt)
{
    size_t n = 0;
    for (int i = 0; i < pt->count; i++) n += pt->entries[i].count;
    return n;
}

void param_table_slices(const param_table *pt, size_t *offsets, size_t *counts)
{
    for (int i = 0; i < pt->count; i++) {
        offsets[i] = pt->entries[i].offset;
        counts[i] = pt->entries[i].count;
    }
}

#define FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define FNV_PRIME  UINT64_C(0x100000001b3)

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

/* 8 bytes, little-endian whatever the host order. */
static uint64_t fnv_u64(uint64_t h, uint64_t x)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(x >> (8 * i));
    return fnv_bytes(h, b, sizeof b);
}

uint64_t param_table_hash(const param_table *pt)
{
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < pt->count; i++) {
        const param_entry *e = &pt->entries[i];
        h = fnv_bytes(h, e->name, strlen(e->name) + 1);
        h = fnv_u64(h, (uint64_t)e->ndim);
        for (int k = 0; k < e->ndim; k++) h = fnv_u64(h, e->shape[k]);
        h = fnv_u64(h, e->offset);
        h = fnv_u64(h, e->count);
    }
    return fnv_u64(h, pt->total);
}

void param_table_free(param_table *pt)
{
    free(pt->entries);
    param_table_init(pt);
}

/* Zero-fills x[0, n) with the static OpenMP split (first touch). */
static void zero_parallel(float *x, size_t n)
{
#pragma omp parallel
    {
        size_t nth = (size_t)omp_get_num_threads(), tid = (size_t)omp_get_thread_num();
        size_t lo = align_up(n / nth * tid), hi = tid + 1 == nth ? n : align_up(n / nth * (tid + 1));
        if (lo > n) lo = n;
        if (hi > n) hi = n;
        if (hi > lo) memset(x + lo, 0, (hi - lo) * sizeof *x);
    }
}

static status alloc_buffer(float **out, size_t total, const char *what)
{
    size_t bytes = total * sizeof(float);  /* a multiple of 64: total is a multiple of 16 */
    *out = aligned_alloc(PARAM_ALIGN_BYTES, bytes);
    if (!*out) {
        log_error("param_buffers_init: cannot allocate %zu bytes (%.1f MiB) for the %s buffer: %s", bytes,
                  bytes / MIB, what, log_errno_str());
        return STATUS_NOMEM;
    }
    zero_parallel(*out, total);
    return STATUS_OK;
}

status param_buffers_init(param_buffers *pb, const param_table *pt, bool with_moments)
{
    *pb = (param_buffers){ .total = pt->total };
    CHECK(pt->count > 0 && pt->total > 0, "add the model's tensors (param_add) before allocating buffers");
    status st = alloc_buffer(&pb->params, pt->total, "parameter");
    if (st == STATUS_OK) st = alloc_buffer(&pb->grads, pt->total, "gradient");
    if (st == STATUS_OK && with_moments) st = alloc_buffer(&pb->m, pt->total, "optimizer first-moment");
    if (st == STATUS_OK && with_moments) st = alloc_buffer(&pb->v, pt->total, "optimizer second-moment");
    if (st != STATUS_OK) param_buffers_free(pb);
    return st;
}

void param_zero_grads(param_buffers *pb, const param_table *pt)
{
    CHECK(pb->grads && pb->total == pt->total, "the buffers must come from param_buffers_init with this table");
    zero_parallel(pb->grads, pb->total);
}

void param_buffers_free(param_buffers *pb)
{
    free(pb->params);
    free(pb->grads);
    free(pb->m);
    free(pb->v);
    *pb = (param_buffers){ 0 };
}

void param_print_memory(const param_table *pt, size_t activation_bytes, size_t comm_bytes,
                        const param_optim_memory *optim, FILE *f)
{
    double buf = (double)pt->total * sizeof(float);
    size_t numel = param_numel(pt);
    double pad = pt->total ? 100.0 * (double)(pt->total - numel) / (double)pt->total : 0.0;
    double opt = optim ? optim->bytes : 2.0 * buf;
    double total = 2.0 * buf + opt + (double)activation_bytes + (double)comm_bytes;
    char label[64];
    snprintf(label, sizeof label, "optimizer (%s)", optim ? optim->what : "m, v");
    fprintf(f, "memory per rank                MiB\n");
    fprintf(f, "  params            %12.1f   (%zu floats in %d tensors, %.2f%% alignment padding)\n",
            buf / MIB, numel, pt->count, pad);
    fprintf(f, "  grads             %12.1f\n", buf / MIB);
    if (optim && optim->note) fprintf(f, "  %-18s%12.1f   (%s)\n", label, opt / MIB, optim->note);
    else fprintf(f, "  %-18s%12.1f\n", label, opt / MIB);
    fprintf(f, "  activations       %12.1f\n", activation_bytes / MIB);
    fprintf(f, "  comm buffers      %12.1f\n", comm_bytes / MIB);
    fprintf(f, "  total             %12.1f\n", total / MIB);
}

float *param_carve(float *base, size_t *used, size_t count)
{
    float *p = base ? base + *used : NULL;
    *used += (count + 15) / 16 * 16;  /* every view starts on a 64-byte boundary */
    return p;
}

status param_arena_alloc(param_layout_fn layout, void *owner, float **memory, size_t *floats, const char *what)
{
    size_t used = 0;
    layout(owner, NULL, &used);
    *floats = used;
    *memory = NULL;
    if (posix_memalign((void **)memory, 64, (used ? used : 1) * sizeof(float)) != 0) {
        *memory = NULL;
        log_error("cannot allocate %.1f MiB for %s", (double)used * 4 / (1 << 20), what);
        return STATUS_NOMEM;
    }
    used = 0;
    layout(owner, *memory, &used);
    return STATUS_OK;
}
