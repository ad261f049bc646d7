/* neb_format — the .neb file: a versioned header, a section table, checksummed sections.
 *
 *   header (64 B)   magic "NEBNANO\0", version, header size, file size, section count,
 *                   flags (bit 0: little-endian), table offset, CRC-32 of the header
 *   section table   per section: kind, CRC-32, offset, bytes, count (32 B each)
 *   STRINGS         the name pool (NUL-terminated, starts with "")
 *   TENSORS         one 88-byte record per tensor: name, dtype, kind (its high 16 bits:
 *                   the encoding), shape, arena offset, data offset and size in WEIGHTS
 *   NODES           the nano_node records as they are (fixed size, little-endian)
 *   IO              input and output tensor indices
 *   PLAN            the arena size (each tensor's offset is in its record)
 *   META            JSON text: source, passes, accuracy
 *   WEIGHTS         constant data, every tensor 64-byte aligned in the file, so the
 *                   loader maps the file and points the constants into it; a constant
 *                   that is mostly zeros (a pruned weight) is stored sparse: a bitmap of
 *                   its non-zero elements, then those elements (decoded at load)
 *
 * The one design decision: nothing read is trusted. The loader checks the header and
 * every section's CRC-32 before parsing, every index and size while parsing, then the
 * graph's structure, re-infers every shape and compares it with the stored one, and
 * checks that the stored memory plan never gives two live tensors the same bytes. */
#include "nano.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NEB_MAGIC "NEBNANO"
#define NEB_ALIGN 64
#define NEB_HEADER 64
#define NEB_MAX_BYTES ((uint64_t)1 << 40)

enum { SEC_STRINGS = 1, SEC_TENSORS, SEC_NODES, SEC_IO, SEC_PLAN, SEC_META, SEC_WEIGHTS, SEC_COUNT };

/* How a constant's bytes are stored (the high 16 bits of its record's kind). */
enum { ENC_RAW = 0, ENC_SPARSE = 1 };
#define ENC_SHIFT 16
#define SPARSE_MIN_NUMEL 1024 /* smaller constants are stored raw */

typedef struct neb_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t file_bytes;
    uint32_t nsections;
    uint32_t flags;
    uint64_t table_off;
    uint32_t crc;
    uint8_t pad[20];
} neb_header;

typedef struct neb_section {
    uint32_t kind;
    uint32_t crc;
    uint64_t off;
    uint64_t bytes;
    uint64_t count;
} neb_section;

typedef struct neb_tensor {
    uint32_t name;
    int32_t dtype;
    int32_t kind;
    int32_t ndim;
    int64_t shape[NANO_MAX_DIMS];
    int64_t arena_off;
    uint64_t data_off; /* inside WEIGHTS */
    uint64_t data_bytes;
} neb_tensor;

_Static_assert(sizeof(neb_header) == NEB_HEADER, "the .neb header is 64 bytes");
_Static_assert(sizeof(neb_section) == 32, "a section entry is 32 bytes");
_Static_assert(sizeof(neb_tensor) == 88, "a tensor record is 88 bytes");
_Static_assert(sizeof(nano_attrs) % 8 == 0, "attributes are a multiple of 8 bytes");

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32), slicing by 8. */
typedef struct crc_table {
    uint32_t t[8][256];
} crc_table;

static void crc_init(crc_table *c) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t r = i;
        for (int k = 0; k < 8; k++) r = r & 1 ? (r >> 1) ^ 0xEDB88320u : r >> 1;
        c->t[0][i] = r;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++) c->t[s][i] = (c->t[s - 1][i] >> 8) ^ c->t[0][c->t[s - 1][i] & 0xff];
}

static uint32_t crc_update(const crc_table *c, uint32_t crc, const void *buf, size_t n) {
    const uint8_t *p = buf;
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        lo ^= crc;
        crc = c->t[7][lo & 0xff] ^ c->t[6][(lo >> 8) & 0xff] ^ c->t[5][(lo >> 16) & 0xff] ^ c->t[4][lo >> 24] ^
              c->t[3][p[4]] ^ c->t[2][p[5]] ^ c->t[1][p[6]] ^ c->t[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ c->t[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

static int host_little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* ---- sparse constants -------------------------------------------------------------- */

/* The sparse form of x when it is at most 3/4 of the raw size: bitmap (bit i of byte
 * i/8: element i is non-zero), then the non-zero elements in order. NULL otherwise. */
static uint8_t *sparse_encode(const nano_tensor *x, uint64_t *bytes) {
    size_t n = (size_t)nano_tensor_numel(x), es = nano_dtype_size(x->dtype), nnz = 0;
    if (n < SPARSE_MIN_NUMEL) return NULL;
    static const uint8_t zero[8];
    const uint8_t *src = x->data;
    for (size_t i = 0; i < n; i++) nnz += memcmp(src + i * es, zero, es) != 0;
    size_t map = (n + 7) / 8, total = map + nnz * es;
    if (total * 4 > n * es * 3) return NULL;
    uint8_t *out = calloc(total + 1, 1);
    if (!out) return NULL;
    uint8_t *vals = out + map;
    for (size_t i = 0; i < n; i++)
        if (memcmp(src + i * es, zero, es)) {
            out[i / 8] |= (uint8_t)(1u << (i % 8));
            memcpy(vals, src + i * es, es);
            vals += es;
        }
    *bytes = total;
    return out;
}

/* Decodes a sparse constant of n elements of es bytes from stored bytes; NULL when the
 * bitmap and the size disagree (or bits past n are set). */
static void *sparse_decode(const uint8_t *in, uint64_t stored, size_t n, size_t es) {
    size_t map = (n + 7) / 8, nnz = 0;
    if (stored < map) return NULL;
    for (size_t b = 0; b < map; b++) nnz += (size_t)__builtin_popcount(in[b]);
    if (n % 8 && in[map - 1] >> (n % 8)) return NULL;
    if (stored != map + nnz * es) return NULL;
    uint8_t *out = calloc(n * es + 1, 1);
    if (!out) return NULL;
    const uint8_t *vals = in + map;
    for (size_t i = 0; i < n; i++)
        if (in[i / 8] >> (i % 8) & 1) {
            memcpy(out + i * es, vals, es);
            vals += es;
        }
    return out;
}

/* ---- writing --------------------------------------------------------------------- */

typedef struct wbuf {
    FILE *f;
    uint64_t pos;
    int failed;
} wbuf;

static void wput(wbuf *w, const void *p, size_t n) {
    if (!w->failed && n && fwrite(p, 1, n, w->f) != n) w->failed = 1;
    w->pos += n;
}

static void wpad(wbuf *w, uint64_t to) {
    static const uint8_t zero[NEB_ALIGN];
    while (w->pos < to) {
        size_t k = to - w->pos < sizeof zero ? (size_t)(to - w->pos) : sizeof zero;
        wput(w, zero, k);
    }
}

static uint64_t align_up(uint64_t x) {
    return (x + NEB_ALIGN - 1) / NEB_ALIGN * NEB_ALIGN;
}

nano_status neb_write(const nano_graph *g, const char *path, char *err, size_t errlen) {
    if (!host_little_endian()) {
        snprintf(err, errlen, ".neb files are little-endian; this host is not");
        return NANO_E_UNSUPPORTED;
    }
    nano_status st = nano_graph_check_plan(g, err, errlen);
    if (st != NANO_OK) return st;
    crc_table *ct = malloc(sizeof *ct);
    neb_tensor *tr = calloc((size_t)g->ntensors + 1, sizeof *tr);
    uint8_t **enc = calloc((size_t)g->ntensors + 1, sizeof *enc); /* sparse forms, or NULL */
    int32_t *io = malloc(((size_t)g->ninputs + g->noutputs + 2) * sizeof *io);
    if (!ct || !tr || !io || !enc) {
        free(ct);
        free(tr);
        free(io);
        free(enc);
        snprintf(err, errlen, "out of memory writing %s", path);
        return NANO_E_NOMEM;
    }
    crc_init(ct);
    /* weights layout */
    uint64_t woff = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const nano_tensor *x = &g->tensors[t];
        tr[t] = (neb_tensor){x->name, x->dtype, x->kind, x->ndim, {0}, x->arena_off, 0, 0};
        for (int d = 0; d < NANO_MAX_DIMS; d++) tr[t].shape[d] = d < x->ndim ? x->shape[d] : 0;
        if (x->kind == NANO_T_CONST) {
            woff = align_up(woff);
            tr[t].data_off = woff;
            tr[t].data_bytes = nano_tensor_bytes(x);
            if ((enc[t] = sparse_encode(x, &tr[t].data_bytes))) tr[t].kind |= ENC_SPARSE << ENC_SHIFT;
            woff += tr[t].data_bytes;
        }
    }
    uint64_t wbytes = align_up(woff);
    io[0] = g->ninputs;
    io[1] = g->noutputs;
    memcpy(io + 2, g->inputs, (size_t)g->ninputs * sizeof *io);
    memcpy(io + 2 + g->ninputs, g->outputs, (size_t)g->noutputs * sizeof *io);
    const char *meta = g->meta ? g->meta : "{}";
    int64_t plan = g->arena_bytes;
    struct {
        const void *p;
        uint64_t bytes, count;
    } src[SEC_COUNT] = {
        [SEC_STRINGS] = {g->strings, g->strings_len, g->strings_len},
        [SEC_TENSORS] = {tr, (uint64_t)g->ntensors * sizeof *tr, (uint64_t)g->ntensors},
        [SEC_NODES] = {g->nodes, (uint64_t)g->nnodes * sizeof(nano_node), (uint64_t)g->nnodes},
        [SEC_IO] = {io, ((uint64_t)g->ninputs + g->noutputs + 2) * sizeof *io, (uint64_t)(g->ninputs + g->noutputs)},
        [SEC_PLAN] = {&plan, sizeof plan, 1},
        [SEC_META] = {meta, strlen(meta) + 1, strlen(meta) + 1},
    };
    neb_section sec[SEC_COUNT - 1];
    uint64_t pos = align_up(NEB_HEADER + sizeof sec);
    for (int k = SEC_STRINGS; k < SEC_COUNT; k++) {
        neb_section *s = &sec[k - 1];
        s->kind = (uint32_t)k;
        s->off = pos;
        if (k == SEC_WEIGHTS) {
            s->bytes = wbytes;
            s->count = 0;
            uint32_t c = 0;
            uint64_t at = 0;
            static const uint8_t zero[NEB_ALIGN];
            for (int t = 0; t < g->ntensors; t++) {
                if (g->tensors[t].kind != NANO_T_CONST) continue;
                c = crc_update(ct, c, zero, (size_t)(tr[t].data_off - at));
                c = crc_update(ct, c, enc[t] ? enc[t] : g->tensors[t].data, (size_t)tr[t].data_bytes);
                at = tr[t].data_off + tr[t].data_bytes;
                s->count++;
            }
            c = crc_update(ct, c, zero, (size_t)(wbytes - at));
            s->crc = c;
        } else {
            s->bytes = src[k].bytes;
            s->count = src[k].count;
            s->crc = crc_update(ct, 0, src[k].p, (size_t)src[k].bytes);
        }
        pos = align_up(pos + s->bytes);
    }
    neb_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, NEB_MAGIC, 8);
    h.version = NEB_VERSION;
    h.header_bytes = NEB_HEADER;
    h.file_bytes = pos;
    h.nsections = SEC_COUNT - 1;
    h.flags = 1;
    h.table_off = NEB_HEADER;
    h.crc = crc_update(ct, 0, &h, sizeof h);

    char tmp[4096];
    int len = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof tmp) {
        snprintf(err, errlen, "path too long: %s", path);
        st = NANO_E_ARG;
        goto release;
    }
    /* a fresh name (O_EXCL, never through a link) beside the target, renamed once whole */
    int tfd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    wbuf w = {tfd >= 0 ? fdopen(tfd, "wb") : NULL, 0, 0};
    if (!w.f) {
        if (tfd >= 0) close(tfd);
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        st = NANO_E_IO;
        goto release;
    }
    wput(&w, &h, sizeof h);
    wput(&w, sec, sizeof sec);
    for (int k = SEC_STRINGS; k < SEC_COUNT; k++) {
        wpad(&w, sec[k - 1].off);
        if (k != SEC_WEIGHTS) {
            wput(&w, src[k].p, (size_t)src[k].bytes);
            continue;
        }
        for (int t = 0; t < g->ntensors; t++) {
            if (g->tensors[t].kind != NANO_T_CONST) continue;
            wpad(&w, sec[k - 1].off + tr[t].data_off);
            wput(&w, enc[t] ? enc[t] : g->tensors[t].data, (size_t)tr[t].data_bytes);
        }
    }
    wpad(&w, h.file_bytes);
    if (fflush(w.f) || fsync(fileno(w.f))) w.failed = 1;
    if (fclose(w.f)) w.failed = 1;
    if (w.failed || rename(tmp, path)) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        st = NANO_E_IO;
        goto release;
    }
    /* the rename itself made durable */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    int dfd = open(slash ? (dir[0] ? dir : "/") : ".", O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
release:
    for (int t = 0; t < g->ntensors; t++) free(enc[t]);
    free(enc);
    free(ct);
    free(tr);
    free(io);
    return st;
}

/* ---- reading --------------------------------------------------------------------- */

#define BAD(...) do { snprintf(err, errlen, "%s: " __VA_ARGS__); st = NANO_E_FORMAT; goto fail; } while (0)

nano_status neb_parse(nano_graph *g, const void *buf, size_t len, const char *path, char *err, size_t errlen) {
    nano_graph_init(g);
    nano_status st = NANO_OK;
    const uint8_t *base = buf;
    crc_table *ct = NULL;
    if (len < NEB_HEADER) {
        snprintf(err, errlen, "%s: %zu bytes, shorter than a .neb header (%d): not a .neb file or truncated", path, len,
                 NEB_HEADER);
        return NANO_E_FORMAT;
    }
    ct = malloc(sizeof *ct);
    if (!ct) {
        snprintf(err, errlen, "out of memory");
        return NANO_E_NOMEM;
    }
    crc_init(ct);
    neb_header h;
    memcpy(&h, base, sizeof h);
    if (memcmp(h.magic, NEB_MAGIC, 8)) BAD("not a .neb file (bad magic)", path);
    if (h.version != NEB_VERSION)
        BAD("format version %u; this runtime reads version %d (HINT: deploy the model again with this nebula-deploy)", path,
            h.version, NEB_VERSION);
    uint32_t hc = h.crc;
    h.crc = 0;
    if (crc_update(ct, 0, &h, sizeof h) != hc) BAD("the header's checksum does not match (damaged file)", path);
    if (!(h.flags & 1) || !host_little_endian()) BAD("little-endian file on a big-endian host, or flags %u", path, h.flags);
    if (h.header_bytes != NEB_HEADER || h.file_bytes != len)
        BAD("the header says %llu bytes, the file has %zu (truncated or appended to)", path,
            (unsigned long long)h.file_bytes, len);
    if (h.nsections != SEC_COUNT - 1 || h.table_off != NEB_HEADER ||
        h.table_off + (uint64_t)h.nsections * sizeof(neb_section) > len)
        BAD("section table of %u entries at %llu does not fit", path, h.nsections, (unsigned long long)h.table_off);
    neb_section sec[SEC_COUNT - 1];
    memcpy(sec, base + h.table_off, sizeof sec);
    for (int k = 0; k < SEC_COUNT - 1; k++) {
        const neb_section *s = &sec[k];
        if (s->kind != (uint32_t)(k + 1)) BAD("section %d has kind %u (expected %d)", path, k, s->kind, k + 1);
        if (s->off % NEB_ALIGN || s->off < NEB_HEADER || s->off > len || s->bytes > len - s->off)
            BAD("section %d (%llu bytes at %llu) lies outside the file", path, k + 1, (unsigned long long)s->bytes,
                (unsigned long long)s->off);
        if (crc_update(ct, 0, base + s->off, (size_t)s->bytes) != s->crc)
            BAD("section %d's checksum does not match (damaged file)", path, k + 1);
    }
    const neb_section *ss = &sec[SEC_STRINGS - 1], *ts = &sec[SEC_TENSORS - 1], *ns = &sec[SEC_NODES - 1],
                      *is = &sec[SEC_IO - 1], *ps = &sec[SEC_PLAN - 1], *ms = &sec[SEC_META - 1],
                      *ws = &sec[SEC_WEIGHTS - 1];
    if (ss->bytes < 1 || ss->bytes > UINT32_MAX || base[ss->off] != 0 || base[ss->off + ss->bytes - 1] != 0)
        BAD("the string pool is not NUL-terminated", path);
    if (ts->count > NANO_MAX_TENSORS || ts->bytes != ts->count * sizeof(neb_tensor)) BAD("tensor table size", path);
    if (ns->count > NANO_MAX_TENSORS || ns->bytes != ns->count * sizeof(nano_node)) BAD("node table size", path);
    if (ps->bytes != sizeof(int64_t)) BAD("plan section size", path);
    if (ms->bytes < 1 || base[ms->off + ms->bytes - 1] != 0) BAD("meta is not NUL-terminated", path);
    g->strings_len = g->strings_cap = (size_t)ss->bytes;
    g->strings = malloc(g->strings_len);
    g->ntensors = g->tensors_cap = (int)ts->count;
    g->tensors = calloc((size_t)g->ntensors + 1, sizeof *g->tensors);
    g->nnodes = g->nodes_cap = (int)ns->count;
    g->nodes = malloc(((size_t)g->nnodes + 1) * sizeof *g->nodes);
    g->meta = strdup((const char *)base + ms->off);
    if (!g->strings || !g->tensors || !g->nodes || !g->meta) {
        snprintf(err, errlen, "out of memory reading %s", path);
        st = NANO_E_NOMEM;
        goto fail;
    }
    memcpy(g->strings, base + ss->off, g->strings_len);
    memcpy(g->nodes, base + ns->off, (size_t)ns->bytes);
    memcpy(&g->arena_bytes, base + ps->off, sizeof g->arena_bytes);
    for (int t = 0; t < g->ntensors; t++) {
        neb_tensor r;
        memcpy(&r, base + ts->off + (uint64_t)t * sizeof r, sizeof r);
        nano_tensor *x = &g->tensors[t];
        if (r.name >= g->strings_len) BAD("tensor %d's name is outside the string pool", path, t);
        if (r.ndim < 0 || r.ndim > NANO_MAX_DIMS || !nano_dtype_size(r.dtype))
            BAD("tensor %d: %d dimensions of dtype %d", path, t, r.ndim, r.dtype);
        int encoding = (int)((uint32_t)r.kind >> ENC_SHIFT);
        r.kind &= (1 << ENC_SHIFT) - 1;
        if (encoding != ENC_RAW && (encoding != ENC_SPARSE || r.kind != NANO_T_CONST))
            BAD("tensor %s: unknown encoding %d", path, nano_tensor_name(g, t), encoding);
        x->name = r.name;
        x->dtype = r.dtype;
        x->kind = r.kind;
        x->ndim = r.ndim;
        x->arena_off = r.arena_off;
        for (int d = 0; d < NANO_MAX_DIMS; d++) x->shape[d] = d < r.ndim ? r.shape[d] : 0;
        int64_t n = 1;
        for (int d = 0; d < r.ndim; d++) {
            if (r.shape[d] < 1 || r.shape[d] > NANO_MAX_NUMEL / n)
                BAD("tensor %s: dimension %d is %lld", path, nano_tensor_name(g, t), d, (long long)r.shape[d]);
            n *= r.shape[d];
        }
        if (r.kind == NANO_T_CONST) {
            if ((encoding == ENC_RAW && r.data_bytes != (uint64_t)n * nano_dtype_size(r.dtype)) || r.data_off % NEB_ALIGN ||
                r.data_off > ws->bytes || r.data_bytes > ws->bytes - r.data_off)
                BAD("constant %s: %llu bytes at %llu do not match its shape or leave the weights", path,
                    nano_tensor_name(g, t), (unsigned long long)r.data_bytes, (unsigned long long)r.data_off);
            x->data = (void *)(base + ws->off + r.data_off);
            if (encoding == ENC_SPARSE) {
                x->data = sparse_decode(x->data, r.data_bytes, (size_t)n, nano_dtype_size(r.dtype));
                if (!x->data) BAD("constant %s: its sparse bitmap and its %llu stored bytes disagree", path,
                                  nano_tensor_name(g, t), (unsigned long long)r.data_bytes);
                x->owned = 1;
            }
        }
    }
    uint64_t nio = is->count;
    if (nio > UINT32_MAX || is->bytes != (nio + 2) * sizeof(int32_t)) BAD("IO section size", path); /* no wrap */
    int32_t cnt[2];
    memcpy(cnt, base + is->off, sizeof cnt);
    if (cnt[0] < 1 || cnt[1] < 1 || (uint64_t)cnt[0] + (uint64_t)cnt[1] != nio)
        BAD("%d inputs and %d outputs", path, cnt[0], cnt[1]);
    g->ninputs = cnt[0];
    g->noutputs = cnt[1];
    g->inputs = malloc((size_t)cnt[0] * sizeof(int32_t));
    g->outputs = malloc((size_t)cnt[1] * sizeof(int32_t));
    if (!g->inputs || !g->outputs) {
        snprintf(err, errlen, "out of memory reading %s", path);
        st = NANO_E_NOMEM;
        goto fail;
    }
    memcpy(g->inputs, base + is->off + 8, (size_t)cnt[0] * sizeof(int32_t));
    memcpy(g->outputs, base + is->off + 8 + (size_t)cnt[0] * 4, (size_t)cnt[1] * sizeof(int32_t));
    /* structure, then every shape re-derived and compared with the stored one */
    char why[512];
    if ((st = nano_graph_validate(g, why, sizeof why)) != NANO_OK) BAD("%s", path, why);
    nano_tensor *stored = malloc(((size_t)g->ntensors + 1) * sizeof *stored);
    if (!stored) {
        st = NANO_E_NOMEM;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    memcpy(stored, g->tensors, (size_t)g->ntensors * sizeof *stored);
    st = nano_graph_infer_shapes(g, why, sizeof why);
    for (int t = 0; st == NANO_OK && t < g->ntensors; t++)
        if (stored[t].ndim != g->tensors[t].ndim || stored[t].dtype != g->tensors[t].dtype ||
            memcmp(stored[t].shape, g->tensors[t].shape, sizeof stored[t].shape)) {
            snprintf(why, sizeof why, "tensor %s: the stored shape or dtype differs from what its operator computes",
                     nano_tensor_name(g, t));
            st = NANO_E_FORMAT;
        }
    free(stored);
    if (st != NANO_OK) {
        snprintf(err, errlen, "%s: %s", path, why);
        goto fail;
    }
    if ((st = nano_graph_check_plan(g, why, sizeof why)) != NANO_OK) BAD("memory plan: %s", path, why);
    free(ct);
    return NANO_OK;
fail:
    free(ct);
    nano_graph_free(g);
    return st == NANO_OK ? NANO_E_FORMAT : st;
}

nano_status neb_read(nano_graph *g, const char *path, void **map, size_t *map_len, char *err, size_t errlen) {
    nano_graph_init(g);
    *map = NULL;
    *map_len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO is refused below, not waited on */
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NANO_E_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        snprintf(err, errlen, "%s is not a regular file", path);
        return NANO_E_IO;
    }
    size_t len = (size_t)sb.st_size;
    if (len < NEB_HEADER) {
        close(fd);
        snprintf(err, errlen, "%s: %zu bytes, shorter than a .neb header (%d): not a .neb file or truncated", path, len,
                 NEB_HEADER);
        return NANO_E_FORMAT;
    }
    void *base = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %s: %s", path, strerror(errno));
        return NANO_E_IO;
    }
    nano_status st = neb_parse(g, base, len, path, err, errlen);
    if (st != NANO_OK) {
        munmap(base, len);
        return st;
    }
    *map = base;
    *map_len = len;
    return NANO_OK;
}

void neb_unmap(void *map, size_t len) {
    if (map) munmap(map, len);
}
