/* deploy_data — the calibration and evaluation sets of nebula-deploy, read from .npy
 * files: the samples (f32 images or features, i64/i32 token ids) along dim 0 and an
 * optional 1-D integer label array of the same length.
 *
 * The one design decision: only what numpy.save writes for a plain C-ordered
 * little-endian array is accepted — format versions 1 to 3, descr '<f4', '<i8' or '<i4'
 * only, fortran_order False — and the data must be exactly the size the
 * header declares. Anything else (big-endian, Fortran order, object arrays, a truncated
 * or padded file) is refused with the file named and the reason, never converted. */
#include "deploy/deploy.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct npy {
    int dtype; /* nano_dtype */
    int ndim;
    int64_t shape[NANO_MAX_DIMS];
    void *data; /* malloc'd, row-major */
} npy;

#define NPY_FAIL(code, ...) do { snprintf(err, errlen, __VA_ARGS__); st = code; goto done; } while (0)

/* The text after 'key': in the header dict, or NULL. */
static const char *dict_value(const char *hdr, const char *key)
{
    char k[32];
    snprintf(k, sizeof k, "'%s'", key);
    const char *p = strstr(hdr, k);
    if (!p) return NULL;
    p += strlen(k);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    for (p++; *p == ' '; p++) {}
    return p;
}

/* Parses the header dict: descr, fortran_order, shape. */
static nano_status parse_header(const char *path, const char *hdr, npy *a, char *err, size_t errlen)
{
    nano_status st = NANO_OK;
    const char *d = dict_value(hdr, "descr"), *f = dict_value(hdr, "fortran_order"), *s = dict_value(hdr, "shape");
    if (!d || !f || !s) NPY_FAIL(NANO_E_FORMAT, "%s: the .npy header lacks descr, fortran_order or shape", path);
    char descr[16] = "";
    if (*d == '\'') {
        size_t n = strcspn(d + 1, "'");
        if (n >= sizeof descr) n = sizeof descr - 1;
        memcpy(descr, d + 1, n);
        descr[n] = 0;
    } else {
        NPY_FAIL(NANO_E_UNSUPPORTED, "%s: a structured dtype (descr %.20s...) is not supported", path, d);
    }
    if (!strcmp(descr, "<f4")) a->dtype = NANO_DT_F32;
    else if (!strcmp(descr, "<i8")) a->dtype = NANO_DT_I64;
    else if (!strcmp(descr, "<i4")) a->dtype = NANO_DT_I32;
    else if (descr[0] == '>')
        NPY_FAIL(NANO_E_UNSUPPORTED, "%s: big-endian data ('%s') is not supported; save it little-endian", path, descr);
    else if (strchr(descr, 'O'))
        NPY_FAIL(NANO_E_UNSUPPORTED, "%s: an object array ('%s') is not supported", path, descr);
    else
        NPY_FAIL(NANO_E_UNSUPPORTED, "%s: dtype '%s' is not supported (float32 '<f4', int64 '<i8' or int32 '<i4')", path, descr);
    if (!strncmp(f, "True", 4))
        NPY_FAIL(NANO_E_UNSUPPORTED, "%s: Fortran-ordered data is not supported; save np.ascontiguousarray(x)", path);
    if (strncmp(f, "False", 5)) NPY_FAIL(NANO_E_FORMAT, "%s: fortran_order is neither True nor False", path);
    if (*s != '(') NPY_FAIL(NANO_E_FORMAT, "%s: the shape is not a tuple", path);
    a->ndim = 0;
    for (s++;;) {
        while (*s == ' ' || *s == ',') s++;
        if (*s == ')') break;
        if (!isdigit((unsigned char)*s)) NPY_FAIL(NANO_E_FORMAT, "%s: the shape has a non-numeric dimension", path);
        if (a->ndim == NANO_MAX_DIMS) NPY_FAIL(NANO_E_UNSUPPORTED, "%s: more than %d dimensions", path, NANO_MAX_DIMS);
        char *end;
        long long v = strtoll(s, &end, 10);
        if (v < 0 || v > ((int64_t)1 << 40)) NPY_FAIL(NANO_E_FORMAT, "%s: dimension %d is %lld", path, a->ndim, v);
        a->shape[a->ndim++] = v;
        s = end;
    }
done:
    return st;
}

/* Reads one .npy file into a. */
static nano_status npy_read(const char *path, npy *a, char *err, size_t errlen)
{
    nano_status st = NANO_OK;
    memset(a, 0, sizeof *a);
    char *hdr = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot open", path);
        return NANO_E_IO;
    }
    unsigned char pre[12];
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6))
        NPY_FAIL(NANO_E_FORMAT, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    int major = pre[6];
    size_t hlen, pre_len = 10;
    if (major == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, fp) != 2) NPY_FAIL(NANO_E_FORMAT, "%s: truncated header", path);
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        pre_len = 12;
    } else {
        NPY_FAIL(NANO_E_UNSUPPORTED, "%s: .npy format version %d is not supported (1 to 3)", path, major);
    }
    if (hlen > (1u << 20)) NPY_FAIL(NANO_E_FORMAT, "%s: a header of %zu bytes", path, hlen);
    if (!(hdr = malloc(hlen + 1))) NPY_FAIL(NANO_E_NOMEM, "%s: out of memory", path);
    if (fread(hdr, 1, hlen, fp) != hlen) NPY_FAIL(NANO_E_FORMAT, "%s: truncated header", path);
    hdr[hlen] = 0;
    if ((st = parse_header(path, hdr, a, err, errlen)) != NANO_OK) goto done;
    int64_t n = 1;
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] && n > (((int64_t)1 << 40) / a->shape[d])) NPY_FAIL(NANO_E_FORMAT, "%s: the array is too large", path);
        n *= a->shape[d];
    }
    size_t esize = nano_dtype_size(a->dtype), bytes = (size_t)n * esize;
    if (fseek(fp, 0, SEEK_END) != 0) NPY_FAIL(NANO_E_IO, "%s: cannot seek", path);
    long size = ftell(fp);
    if (size < 0 || (size_t)size != pre_len + hlen + bytes)
        NPY_FAIL(NANO_E_FORMAT, "%s: %ld bytes, but the header declares %zu (%lld elements of %zu bytes after a %zu-byte header)%s",
                 path, size, pre_len + hlen + bytes, (long long)n, esize, pre_len + hlen,
                 size >= 0 && (size_t)size < pre_len + hlen + bytes ? ": truncated" : ": trailing bytes");
    if (fseek(fp, (long)(pre_len + hlen), SEEK_SET) != 0) NPY_FAIL(NANO_E_IO, "%s: cannot seek", path);
    if (!(a->data = malloc(bytes ? bytes : 1))) NPY_FAIL(NANO_E_NOMEM, "%s: out of memory for %zu bytes", path, bytes);
    if (fread(a->data, 1, bytes, fp) != bytes) NPY_FAIL(NANO_E_IO, "%s: read error", path);
done:
    free(hdr);
    fclose(fp);
    if (st != NANO_OK) {
        free(a->data);
        a->data = NULL;
    }
    return st;
}

nano_status deploy_data_read(deploy_data *d, const char *x_npy, const char *labels_npy, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    npy x, y;
    nano_status st = npy_read(x_npy, &x, err, errlen);
    if (st != NANO_OK) return st;
    if (x.ndim < 1 || x.shape[0] < 1) {
        free(x.data);
        snprintf(err, errlen, "%s: no samples (dim 0 holds them, shape has %d dimensions)", x_npy, x.ndim);
        return NANO_E_FORMAT;
    }
    d->dtype = x.dtype;
    d->ndim = x.ndim;
    memcpy(d->shape, x.shape, sizeof d->shape);
    d->x = x.data;
    if (!labels_npy) return NANO_OK;
    if ((st = npy_read(labels_npy, &y, err, errlen)) != NANO_OK) {
        deploy_data_free(d);
        return st;
    }
    if (y.ndim != 1 || y.shape[0] != d->shape[0] || y.dtype == NANO_DT_F32) {
        snprintf(err, errlen, "%s: labels must be a 1-D integer array of %lld entries (one per sample of %s), not %s of %d dimensions",
                 labels_npy, (long long)d->shape[0], x_npy, nano_dtype_name(y.dtype), y.ndim);
        free(y.data);
        deploy_data_free(d);
        return NANO_E_FORMAT;
    }
    if (y.dtype == NANO_DT_I64) {
        d->labels = y.data;
        return NANO_OK;
    }
    d->labels = malloc((size_t)y.shape[0] * sizeof *d->labels);
    if (!d->labels) {
        free(y.data);
        deploy_data_free(d);
        snprintf(err, errlen, "%s: out of memory", labels_npy);
        return NANO_E_NOMEM;
    }
    for (int64_t i = 0; i < y.shape[0]; i++) d->labels[i] = ((const int32_t *)y.data)[i];
    free(y.data);
    return NANO_OK;
}

void deploy_data_free(deploy_data *d)
{
    if (!d) return;
    free(d->x);
    free(d->labels);
    memset(d, 0, sizeof *d);
}
