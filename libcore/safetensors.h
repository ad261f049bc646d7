/* safetensors — write (and read back) the Hugging Face safetensors format: an
 * 8-byte little-endian header length, a JSON header naming each tensor's dtype,
 * shape and byte range, then the raw little-endian data.
 * Spec: https://github.com/huggingface/safetensors (format section).
 *
 * Written atomically (temporary name, fsync, rename, fsync of the directory), so a
 * reader never sees half a file. F32 only for now; other dtypes are table entries. */
#ifndef NEBULA_SAFETENSORS_H
#define NEBULA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "param.h"

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

#endif
