/* safetensors — see safetensors.h. The header is built with jansson; data offsets
 * are relative to the end of the header, tensors stored back to back in the order
 * given. The header is padded with spaces to a multiple of 8 bytes (the reference
 * implementation's alignment). */
#include "safetensors.h"
#include "path.h"

#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

status st_write(const char *path, const st_tensor *tensors, int n, const char *metadata_json)
{
    size_t hlen;
    char *header = st_header(tensors, n, metadata_json, &hlen);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    status st = STATUS_OK;
    if (fd < 0) {
        log_error("cannot create %s: %s", tmp, log_errno_str());
        free(header);
        return STATUS_IO;
    }
    uint8_t len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (uint8_t)((uint64_t)hlen >> (8 * b));  /* little-endian */
    int rc = path_write_all(fd, len8, 8) || path_write_all(fd, header, hlen);
    for (int i = 0; i < n && !rc; i++) rc = path_write_all(fd, tensors[i].data, tensor_count(&tensors[i]) * sizeof(float));
    if (!rc) rc = fsync(fd);
    if (close(fd) != 0) rc = -1;
    if (!rc) rc = rename(tmp, path);
    if (rc) {
        log_error("cannot write %s: %s", path, log_errno_str());
        unlink(tmp);
        st = STATUS_IO;
    } else {  /* make the rename itself durable */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) { fsync(dfd); close(dfd); }
    }
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
