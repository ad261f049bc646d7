/* safetensors — see safetensors.h. The header is built and parsed with jansson;
 * data offsets are relative to the end of the header. The writer stores tensors
 * back to back in the order given and pads the header with spaces to a multiple
 * of 8 bytes (the reference implementation's alignment).
 *
 * The reader's one rule: nothing derived from the file is used as a size, an
 * offset or an index before it has been checked against the file's real size, in
 * 64-bit arithmetic with explicit overflow checks. */
#include "safetensors.h"
#include "base/path.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor bytes are copied between memory and file as they are. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

static size_t tensor_count(const st_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static char *st_header(const st_tensor *tensors, int n, const char *metadata_json, size_t *len)
{
    json_t *root = json_object();
    size_t off = 0;
    if (metadata_json && metadata_json[0]) {
        json_error_t err;
        json_t *meta = json_loads(metadata_json, 0, &err);
        CHECK(meta && json_is_object(meta), "safetensors metadata must be a JSON object of strings");
        json_object_set_new(root, "__metadata__", meta);
    }
    for (int i = 0; i < n; i++) {
        json_t *t = json_object(), *shape = json_array(), *offs = json_array();
        size_t bytes = tensor_count(&tensors[i]) * sizeof(float);
        for (int d = 0; d < tensors[i].ndim; d++) json_array_append_new(shape, json_integer(tensors[i].shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + bytes)));
        json_object_set_new(t, "dtype", json_string("F32"));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "data_offsets", offs);
        json_object_set_new(root, tensors[i].name, t);
        off += bytes;
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    CHECK(text, "out of memory building a safetensors header");
    size_t raw = strlen(text), padded = (raw + 7) / 8 * 8;
    char *h = realloc(text, padded + 1);
    CHECK(h, "out of memory building a safetensors header");
    memset(h + raw, ' ', padded - raw);
    h[padded] = '\0';
    *len = padded;
    return h;
}

typedef struct st_writer {
    const char *header;       /* padded JSON header */
    size_t header_len;        /* its bytes */
    const st_tensor *tensors; /* [n] data in file order */
    int n;                    /* tensors */
} st_writer;

static int st_fill(void *ctx, int fd)
{
    const st_writer *w = ctx;
    uint8_t len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)w->header_len >> (8 * b));  /* little-endian */
    if (path_write_all(fd, len8, 8) || path_write_all(fd, w->header, w->header_len)) return -1;
    for (int i = 0; i < w->n; i++)
        if (path_write_all(fd, w->tensors[i].data, tensor_count(&w->tensors[i]) * sizeof(float))) return -1;
    return 0;
}

status st_write(const char *path, const st_tensor *tensors, int n, const char *metadata_json)
{
    st_writer w = { .tensors = tensors, .n = n };
    char *header = st_header(tensors, n, metadata_json, &w.header_len);
    w.header = header;
    status st = path_write_atomic(path, "safetensors file", st_fill, &w);
    free(header);
    return st;
}

int st_add_table(st_tensor *t, int nt, st_name *names, const param_table *pt, const char *prefix, const float *base)
{
    for (int i = 0; i < pt->count; i++, nt++) {
        const param_entry *e = &pt->entries[i];
        snprintf(names[nt], sizeof names[nt], "%s%s", prefix, e->name);
        t[nt] = (st_tensor){ .name = names[nt], .ndim = e->ndim, .data = base + e->offset };
        for (int d = 0; d < e->ndim; d++) t[nt].shape[d] = (int64_t)e->shape[d];
    }
    return nt;
}

/* ---- reading ---- */

static const char *const st_dtype_names[ST_DTYPE_COUNT] = {
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64",
};
static const unsigned char st_dtype_sizes[ST_DTYPE_COUNT] = { 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8 };
#define ST_DTYPE_LIST "BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64"

const char *st_dtype_name(st_dtype dt)
{
    CHECK((unsigned)dt < ST_DTYPE_COUNT, "st_dtype_name got a value outside st_dtype");
    return st_dtype_names[dt];
}

size_t st_dtype_size(st_dtype dt)
{
    CHECK((unsigned)dt < ST_DTYPE_COUNT, "st_dtype_size got a value outside st_dtype");
    return st_dtype_sizes[dt];
}

typedef unsigned long long ull;  /* for printf of uint64_t without PRIu64 noise */

typedef struct st_parser {
    st_file *f;         /* being filled */
    uint64_t data_len;  /* bytes of the data section */
    char *pool;         /* next free byte of f->strings */
    char *pool_end;     /* one past its last byte */
} st_parser;

/* A copy of s in f->strings. The pool has as many bytes as the header text, which
 * is always enough: every interned string comes from its own quoted token in the
 * header, and decoding a JSON string never lengthens it (an escape of 2, 6 or 12
 * bytes yields at most 1, 3 or 4), so its bytes plus the NUL fit in the token. */
static const char *st_intern(st_parser *p, const char *s)
{
    size_t n = strlen(s) + 1;
    CHECK(n <= (size_t)(p->pool_end - p->pool), "safetensors strings outgrew the header they came from");
    char *out = memcpy(p->pool, s, n);
    p->pool += n;
    return out;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return json_integer_value(v) < 0 ? "a negative integer" : "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown JSON value";
}

/* "[2, 3]" for messages. */
static const char *st_shape_str(char *buf, size_t len, const st_info *t)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < t->ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

static status st_parse_metadata(st_parser *p, json_t *meta)
{
    st_file *f = p->f;
    if (!json_is_object(meta)) {
        log_error("%s: __metadata__ is %s; it must be an object of string values", f->path, json_kind(meta));
        return STATUS_INPUT;
    }
    f->meta = calloc(json_object_size(meta) + 1, sizeof *f->meta);
    if (!f->meta) {
        log_error("%s: out of memory for %zu metadata entries", f->path, json_object_size(meta));
        return STATUS_NOMEM;
    }
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v) {
        if (!json_is_string(v)) {
            log_error("%s: __metadata__ key '%s' holds %s; metadata values must be strings", f->path, key,
                      json_kind(v));
            return STATUS_INPUT;
        }
        f->meta[f->meta_count].key = st_intern(p, key);
        f->meta[f->meta_count].value = st_intern(p, json_string_value(v));
        f->meta_count++;
    }
    return STATUS_OK;
}

static status st_parse_dtype(st_parser *p, const char *name, json_t *dtype, st_info *t)
{
    if (json_is_string(dtype))
        for (int i = 0; i < ST_DTYPE_COUNT; i++)
            if (!strcmp(json_string_value(dtype), st_dtype_names[i])) {
                t->dtype = (st_dtype)i;
                return STATUS_OK;
            }
    log_error("%s: tensor '%s': dtype is %s%s%s%s; it must be one of " ST_DTYPE_LIST, p->f->path, name,
              dtype ? json_kind(dtype) : "missing", json_is_string(dtype) ? " '" : "",
              json_is_string(dtype) ? json_string_value(dtype) : "", json_is_string(dtype) ? "'" : "");
    return STATUS_INPUT;
}

/* Dimensions are non-negative and the product of the non-zero ones fits int64, so
 * no product of any of them overflows in a caller either. */
static status st_parse_shape(st_parser *p, const char *name, json_t *shape, st_info *t)
{
    if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_DIMS) {
        log_error("%s: tensor '%s': shape is %s%s; it must be an array of at most %d non-negative integers",
                  p->f->path, name, shape ? json_kind(shape) : "missing",
                  json_is_array(shape) ? " of more dimensions than that" : "", ST_MAX_DIMS);
        return STATUS_INPUT;
    }
    uint64_t span = 1;
    bool empty = false;
    t->ndim = (int)json_array_size(shape);
    for (int d = 0; d < t->ndim; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            log_error("%s: tensor '%s': shape[%d] is %s; dimensions are non-negative integers", p->f->path, name, d,
                      json_kind(v));
            return STATUS_INPUT;
        }
        t->shape[d] = json_integer_value(v);
        empty |= t->shape[d] == 0;
        if (t->shape[d] && (__builtin_mul_overflow(span, (uint64_t)t->shape[d], &span) || span > INT64_MAX)) {
            log_error("%s: tensor '%s': the dimensions multiply past 2^63 at shape[%d]; no tensor is that large",
                      p->f->path, name, d);
            return STATUS_INPUT;
        }
    }
    t->numel = empty ? 0 : span;
    return STATUS_OK;
}

static status st_parse_offsets(st_parser *p, const char *name, json_t *offs, st_info *t)
{
    st_file *f = p->f;
    json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
        json_integer_value(b) < 0 || json_integer_value(e) < 0) {
        log_error("%s: tensor '%s': data_offsets is %s%s; it must be [begin, end], two non-negative byte offsets "
                  "into the data section", f->path, name, offs ? json_kind(offs) : "missing",
                  json_is_array(offs) ? " of other values" : "");
        return STATUS_INPUT;
    }
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (begin > end) {
        log_error("%s: tensor '%s': data_offsets [%llu, %llu] end before they begin; begin <= end", f->path, name,
                  (ull)begin, (ull)end);
        return STATUS_INPUT;
    }
    if (end > p->data_len) {
        log_error("%s: tensor '%s': data_offsets [%llu, %llu] end beyond the data section, which holds %llu bytes "
                  "(file of %llu bytes, data from byte %llu): truncated file or lying header",
                  f->path, name, (ull)begin, (ull)end, (ull)p->data_len, (ull)f->size, (ull)f->data_start);
        return STATUS_INPUT;
    }
    size_t esize = st_dtype_sizes[t->dtype];
    uint64_t need;
    bool huge = __builtin_mul_overflow(t->numel, (uint64_t)esize, &need);
    if (huge || end - begin != need) {
        char shape[256], needs[32];
        if (huge) snprintf(needs, sizeof needs, "more than 2^64");
        else snprintf(needs, sizeof needs, "%llu", (ull)need);
        log_error("%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but dtype %s with shape %s needs %s "
                  "(%llu elements x %zu bytes)", f->path, name, (ull)begin, (ull)end, (ull)(end - begin),
                  st_dtype_names[t->dtype], st_shape_str(shape, sizeof shape, t), needs, (ull)t->numel, esize);
        return STATUS_INPUT;
    }
    t->offset = f->data_start + begin;
    t->bytes = need;
    return STATUS_OK;
}

static status st_parse_tensor(st_parser *p, const char *name, json_t *info, st_info *t)
{
    st_file *f = p->f;
    if (!name[0]) {
        log_error("%s: a tensor has an empty name; names are non-empty strings", f->path);
        return STATUS_INPUT;
    }
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c < 0x20 || *c == 0x7f) {
            log_error("%s: the tensor name beginning '%.*s' holds control character 0x%02x at byte %d; names "
                      "are printable", f->path, (int)((const char *)c - name), name, *c, (int)((const char *)c - name));
            return STATUS_INPUT;
        }
    if (!json_is_object(info)) {
        log_error("%s: tensor '%s' is described by %s; it must be an object {\"dtype\", \"shape\", \"data_offsets\"}",
                  f->path, name, json_kind(info));
        return STATUS_INPUT;
    }
    t->name = st_intern(p, name);
    TRY(st_parse_dtype(p, name, json_object_get(info, "dtype"), t));
    TRY(st_parse_shape(p, name, json_object_get(info, "shape"), t));
    return st_parse_offsets(p, name, json_object_get(info, "data_offsets"), t);
}

static int st_cmp_offset(const void *a, const void *b)
{
    const st_info *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp((*(const st_info *const *)a)->name, (*(const st_info *const *)b)->name);
}

/* The spec's last rule: sorted by offset, the tensors tile the data section
 * exactly — no byte in two tensors, no byte in none. */
static status st_check_tiling(const st_parser *p)
{
    const st_file *f = p->f;
    uint64_t end = 0;
    const st_info *last = NULL;
    for (int i = 0; i < f->count; i++) {
        const st_info *t = &f->tensors[i];
        uint64_t begin = t->offset - f->data_start;
        if (begin < end) {
            log_error("%s: tensor '%s' (data bytes [%llu, %llu)) overlaps tensor '%s' ([%llu, %llu)); tensors must "
                      "not share bytes", f->path, t->name, (ull)begin, (ull)(begin + t->bytes), last->name,
                      (ull)(last->offset - f->data_start), (ull)end);
            return STATUS_INPUT;
        }
        if (begin > end) {
            log_error("%s: data bytes [%llu, %llu) belong to no tensor (the next, '%s', begins at %llu); the spec "
                      "requires tensors to cover the data section back to back", f->path, (ull)end, (ull)begin,
                      t->name, (ull)begin);
            return STATUS_INPUT;
        }
        end = begin + t->bytes;
        last = t;
    }
    if (end != p->data_len) {
        log_error("%s: the last %llu bytes of the data section ([%llu, %llu)) belong to no tensor; the spec requires "
                  "tensors to cover it exactly (trailing garbage, or a header that lost a tensor)", f->path,
                  (ull)(p->data_len - end), (ull)end, (ull)p->data_len);
        return STATUS_INPUT;
    }
    return STATUS_OK;
}

static status st_parse_header(st_file *f, const char *text, size_t len)
{
    if (len == 0) {
        log_error("%s: the header length is 0; a safetensors header is a JSON object, at least \"{}\"", f->path);
        return STATUS_INPUT;
    }
    if (text[0] != '{') {
        log_error("%s: the header begins with byte 0x%02x; a safetensors header is a JSON object beginning with '{'",
                  f->path, (unsigned char)text[0]);
        return STATUS_INPUT;
    }
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        log_error("%s: the header is not valid JSON: %s (header byte %d); it must be a UTF-8 JSON object with "
                  "unique tensor names, padded with spaces only", f->path, err.text, err.position);
        return STATUS_INPUT;
    }
    json_t *meta = json_object_get(root, "__metadata__");
    size_t ntensors = json_object_size(root) - (meta != NULL);
    st_parser p = { .f = f, .data_len = f->size - f->data_start };
    status st = STATUS_NOMEM;
    f->strings = malloc(len);
    f->tensors = calloc(ntensors + 1, sizeof *f->tensors);
    f->by_name = calloc(ntensors + 1, sizeof *f->by_name);
    if (!f->strings || !f->tensors || !f->by_name) {
        log_error("%s: out of memory for the tables of %zu tensors", f->path, ntensors);
        goto free_root;
    }
    p.pool = f->strings;
    p.pool_end = f->strings + len;
    if (meta && (st = st_parse_metadata(&p, meta)) != STATUS_OK) goto free_root;
    const char *name;
    json_t *info;
    json_object_foreach(root, name, info) {
        if (info == meta) continue;
        if ((st = st_parse_tensor(&p, name, info, &f->tensors[f->count])) != STATUS_OK) goto free_root;
        f->count++;
    }
    qsort(f->tensors, (size_t)f->count, sizeof *f->tensors, st_cmp_offset);
    if ((st = st_check_tiling(&p)) != STATUS_OK) goto free_root;
    for (int i = 0; i < f->count; i++) f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, (size_t)f->count, sizeof *f->by_name, st_cmp_name);
free_root:
    json_decref(root);
    return st;
}

status st_open(st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path) {
        log_error("out of memory opening %s", path);
        return STATUS_NOMEM;
    }
    status st = STATUS_INPUT;
    char *text = NULL;
    struct stat sb;
    uint8_t len8[8];
    char kind[160];
    f->fd = -1;
    if (path_open_regular(path, &f->fd, &sb, 0, kind, sizeof kind) != 0) {  /* a FIFO would block open(2) */
        log_error("the safetensors file %s %s", path, kind);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        log_error("%s is not a regular file; a safetensors file was expected", path);
        goto fail;
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size < 8) {
        log_error("%s: %llu bytes, too short for a safetensors file (it begins with an 8-byte little-endian header "
                  "length)", path, (ull)f->size);
        goto fail;
    }
    if (path_read_all_at(f->fd, len8, 8, 0) != 0) goto read_failed;
    uint64_t hlen = 0;
    for (int b = 0; b < 8; b++) hlen |= (uint64_t)len8[b] << (8 * b);
    if (hlen > ST_HEADER_MAX || hlen > f->size - 8) {
        log_error("%s: header length %llu is beyond %s (%llu bytes); truncated file, or not a safetensors file",
                  path, (ull)hlen, hlen > ST_HEADER_MAX ? "the reader's limit" : "the rest of the file",
                  (ull)(hlen > ST_HEADER_MAX ? ST_HEADER_MAX : f->size - 8));
        goto fail;
    }
    f->data_start = 8 + hlen;
    text = malloc(hlen + 1);
    if (!text) {
        log_error("%s: out of memory for a header of %llu bytes", path, (ull)hlen);
        st = STATUS_NOMEM;
        goto fail;
    }
    if (path_read_all_at(f->fd, text, hlen, 8) != 0) goto read_failed;
    st = st_parse_header(f, text, hlen);
    if (st != STATUS_OK) goto fail;
    free(text);
    return STATUS_OK;
read_failed:
    log_error("cannot read the header of %s: %s", path, errno ? log_errno_str() : "the file shrank while opening");
    st = STATUS_IO;
fail:
    free(text);
    st_close(f);
    return st;
}

void st_close(st_file *f)
{
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f->tensors);
    free(f->by_name);
    free(f->meta);
    free(f->strings);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

static int st_cmp_key(const void *key, const void *elem)
{
    return strcmp(key, (*(const st_info *const *)elem)->name);
}

const st_info *st_find(const st_file *f, const char *name)
{
    if (f->count == 0) return NULL;
    const st_info *const *hit = bsearch(name, f->by_name, (size_t)f->count, sizeof *f->by_name, st_cmp_key);
    return hit ? *hit : NULL;
}

const char *st_meta_get(const st_file *f, const char *key)
{
    for (int i = 0; i < f->meta_count; i++)
        if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
    return NULL;
}

/* IEEE binary16 to binary32, exactly (every half is a float). */
static float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0) {  /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);  /* inf, or NaN keeping its payload */
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);  /* rebias the exponent */
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

status st_read_f32(const st_file *f, const st_info *t, float *dst, size_t count)
{
    if (count != t->numel) {
        char shape[256];
        log_error("%s: tensor '%s' has %llu elements (shape %s) where %zu were expected", f->path, t->name,
                  (ull)t->numel, st_shape_str(shape, sizeof shape, t), count);
        return STATUS_INPUT;
    }
    if (t->dtype != ST_DTYPE_F32 && t->dtype != ST_DTYPE_F16 && t->dtype != ST_DTYPE_BF16 &&
        t->dtype != ST_DTYPE_I64 && t->dtype != ST_DTYPE_I32) {
        log_error("%s: tensor '%s' is %s; only F32, F16, BF16, I64 and I32 tensors read as float32", f->path,
                  t->name, st_dtype_names[t->dtype]);
        return STATUS_INPUT;
    }
    CHECK(t->offset >= f->data_start && t->offset <= f->size && t->bytes <= f->size - t->offset,
          "st_read_f32 was given a tensor that is not one of this file's");
    int rc = 0;
    if (t->dtype == ST_DTYPE_F32) {
        rc = path_read_all_at(f->fd, dst, t->bytes, t->offset);
    } else if (t->dtype == ST_DTYPE_I64 || t->dtype == ST_DTYPE_I32) {
        /* integer counters (torchvision's num_batches_tracked): exact in float up to 2^24 */
        int64_t buf[2048];
        size_t w = st_dtype_size(t->dtype), per = sizeof buf / sizeof buf[0];
        for (size_t done = 0; done < count && !rc; done += per) {
            size_t n = count - done < per ? count - done : per;
            rc = path_read_all_at(f->fd, buf, n * w, t->offset + done * w);
            for (size_t i = 0; i < n && !rc; i++) {
                int64_t v;
                if (w == 8) {
                    v = buf[i];
                } else {
                    int32_t v32;
                    memcpy(&v32, (const char *)buf + i * 4, 4);
                    v = v32;
                }
                if (v > (1 << 24) || v < -(1 << 24)) {
                    log_error("%s: tensor '%s' holds the integer %lld at element %zu, which float32 cannot hold "
                              "exactly (|v| <= 2^24)", f->path, t->name, (long long)v, done + i);
                    return STATUS_INPUT;
                }
                dst[done + i] = (float)v;
            }
        }
    } else {  /* 16-bit: widen through a small buffer, never a second copy of the tensor */
        uint16_t buf[4096];
        for (size_t done = 0; done < count && !rc; done += sizeof buf / sizeof buf[0]) {
            size_t n = count - done < sizeof buf / sizeof buf[0] ? count - done : sizeof buf / sizeof buf[0];
            rc = path_read_all_at(f->fd, buf, n * 2, t->offset + done * 2);
            for (size_t i = 0; i < n && !rc; i++) {
                if (t->dtype == ST_DTYPE_F16) {
                    dst[done + i] = st_f16_to_f32(buf[i]);
                } else {
                    uint32_t bits = (uint32_t)buf[i] << 16;  /* bfloat16 is the top half of a float */
                    memcpy(&dst[done + i], &bits, sizeof bits);
                }
            }
        }
    }
    if (rc) {
        log_error("%s: cannot read tensor '%s' (file bytes [%llu, %llu)): %s", f->path, t->name, (ull)t->offset,
                  (ull)(t->offset + t->bytes), errno ? log_errno_str() : "the file is shorter than when it was opened");
        return STATUS_IO;
    }
    return STATUS_OK;
}
