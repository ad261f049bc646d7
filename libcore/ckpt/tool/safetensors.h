/* safetensors — write and read the Hugging Face safetensors format: an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype, shape
 * and byte range, then the raw little-endian data.
 * Spec: https://github.com/huggingface/safetensors (format section).
 *
 * Written atomically (temporary name, fsync, rename, fsync of the directory), so a
 * reader never sees half a file; the writer stores F32.
 *
 * The reader treats every file as hostile: st_open validates the whole header
 * against the file's size before any tensor byte is touched (header length, JSON,
 * dtypes, shapes, offsets that tile the data section exactly), and the data is
 * then read with pread over those validated ranges only. Anything wrong is
 * STATUS_INPUT with one message naming the file, the tensor, what is wrong and
 * what would be right. */
#ifndef NEBULA_SAFETENSORS_H
#define NEBULA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "nn/param.h"

typedef struct st_tensor {
    const char *name;      /* e.g. "h.0.attn.c_attn.weight" */
    int ndim;              /* 0..4 */
    int64_t shape[4];      /* dimensions */
    const float *data;     /* prod(shape) floats */
} st_tensor;

typedef char st_name[128];  /* storage for a generated tensor name */

/* Appends one entry per table tensor at t[nt..], named prefix + name (kept in
 * names[nt..]), data from the flat buffer `base`; returns the new count. */
int st_add_table(st_tensor *t, int nt, st_name *names, const param_table *pt, const char *prefix, const float *base);

/* `metadata` is a flat JSON object of string values ("{}" or NULL for none). */
status st_write(const char *path, const st_tensor *tensors, int n, const char *metadata_json);

/* ---- reading ---- */

#define ST_MAX_DIMS    8          /* most dimensions the reader accepts */
#define ST_HEADER_MAX  100000000  /* most header bytes: the reference implementation's limit */

/* The spec's dtypes; st_dtype_size gives the bytes of one element. */
typedef enum st_dtype {
    ST_DTYPE_BOOL = 0,
    ST_DTYPE_U8,
    ST_DTYPE_I8,
    ST_DTYPE_F8_E5M2,
    ST_DTYPE_F8_E4M3,
    ST_DTYPE_I16,
    ST_DTYPE_U16,
    ST_DTYPE_F16,
    ST_DTYPE_BF16,
    ST_DTYPE_I32,
    ST_DTYPE_U32,
    ST_DTYPE_F32,
    ST_DTYPE_F64,
    ST_DTYPE_I64,
    ST_DTYPE_U64,
    ST_DTYPE_COUNT,
} st_dtype;

const char *st_dtype_name(st_dtype dt);  /* the spec's spelling, e.g. "BF16" */
size_t st_dtype_size(st_dtype dt);

typedef struct st_info {
    const char *name;             /* non-empty, printable, unique in the file */
    st_dtype dtype;               /* element type */
    int ndim;                     /* 0..ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS];   /* dimensions, >= 0; every partial product fits int64 */
    uint64_t numel;               /* product of shape (1 when ndim == 0) */
    uint64_t offset;              /* first byte in the file (not in the data section) */
    uint64_t bytes;               /* numel * st_dtype_size(dtype) */
} st_info;

typedef struct st_meta {
    const char *key;    /* a __metadata__ key */
    const char *value;  /* its string value */
} st_meta;

typedef struct st_file {
    char *path;               /* as given to st_open, for messages */
    int fd;                   /* open read-only until st_close */
    uint64_t size;            /* file bytes at st_open */
    uint64_t data_start;      /* 8 + header length: where the data section begins */
    st_info *tensors;         /* [count] in data order (ascending offset) */
    int count;                /* tensors in the file */
    const st_info **by_name;  /* [count] pointers into tensors, sorted by name (for st_find) */
    st_meta *meta;            /* [meta_count] the __metadata__ pairs */
    int meta_count;           /* pairs in __metadata__ */
    char *strings;            /* one allocation behind every name, key and value above */
} st_file;

/* Opens and validates `path`. STATUS_INPUT (logged) for a missing, unreadable or
 * malformed file, STATUS_NOMEM when the tables cannot be allocated; on any failure
 * nothing stays open or allocated. */
status st_open(st_file *f, const char *path);
void st_close(st_file *f);

/* The tensor called `name`, or NULL. Binary search: O(log count). */
const st_info *st_find(const st_file *f, const char *name);
/* The __metadata__ value of `key`, or NULL. */
const char *st_meta_get(const st_file *f, const char *key);

/* Copies tensor t (one of f's) into dst as float32: F32 as stored, F16 and BF16
 * widened exactly, I64 and I32 (counters such as torchvision's num_batches_tracked)
 * converted when |v| <= 2^24, where float32 holds them exactly. STATUS_INPUT when
 * count is not t->numel (the caller expected another shape), the dtype is not one of
 * these, or an integer is too large; STATUS_IO when the file
 * cannot be read (it shrank since st_open, or the device failed). */
status st_read_f32(const st_file *f, const st_info *t, float *dst, size_t count);

#endif
