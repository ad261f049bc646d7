/* nano_npy — NumPy .npy files: the inputs and outputs of nebula-infer and the
 * calibration and evaluation sets of nebula-deploy.
 *
 * Format 1.0/2.0/3.0: magic "\x93NUMPY", version, header length, a Python dict literal
 * with 'descr', 'fortran_order' and 'shape', padded to 64 bytes, then the data in C
 * order. Read: little-endian f4, f8 (narrowed to f32: numpy's default float), i8, i4,
 * u1/b1; big-endian, Fortran-ordered, structured and object arrays are refused with the
 * reason named. The one design decision: the file must be exactly the size its header
 * declares — a truncated file or one with trailing bytes is refused before a byte of
 * data is used. */
#include "nano.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BAD(...) do { snprintf(err, errlen, __VA_ARGS__); st = NANO_E_FORMAT; goto fail; } while (0)

/* The value after 'key': in the header dict, or NULL. */
static const char *dict_value(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

nano_status nano_npy_read(const char *path, nano_npy *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    nano_status st = NANO_OK;
    char *hdr = NULL;
    void *raw = NULL;
    /* O_NONBLOCK: a FIFO is refused below (not a regular file) instead of blocking the open */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return NANO_E_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        fclose(f);
        snprintf(err, errlen, "%s is not a regular file", path);
        return NANO_E_IO;
    }
    unsigned char pre[12];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) BAD("%s: not a .npy file (bad magic)", path);
    uint32_t hlen;
    if (pre[6] == 1) {
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) BAD("%s: truncated header", path);
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    } else {
        BAD("%s: .npy version %d.%d is not supported (1, 2, 3 are)", path, pre[6], pre[7]);
    }
    if (hlen > (1u << 20)) BAD("%s: header of %u bytes", path, hlen);
    hdr = malloc(hlen + 1);
    if (!hdr || fread(hdr, 1, hlen, f) != hlen) BAD("%s: truncated header", path);
    hdr[hlen] = 0;
    const char *d = dict_value(hdr, "descr"), *fo = dict_value(hdr, "fortran_order"), *sh = dict_value(hdr, "shape");
    if (!d || !fo || !sh) BAD("%s: the header lacks descr, fortran_order or shape", path);
    if (!strncmp(fo, "True", 4)) BAD("%s: Fortran-ordered data is not supported; save np.ascontiguousarray(x)", path);
    if (strncmp(fo, "False", 5)) BAD("%s: fortran_order is neither True nor False", path);
    if (*d != '\'') BAD("%s: a structured dtype (descr %.20s...) is not supported", path, d);
    int src;
    size_t esz;
    if (!strncmp(d, "'<f4'", 5)) src = NANO_DT_F32, esz = 4;
    else if (!strncmp(d, "'<f8'", 5)) src = 0, esz = 8;
    else if (!strncmp(d, "'<i8'", 5)) src = NANO_DT_I64, esz = 8;
    else if (!strncmp(d, "'<i4'", 5)) src = NANO_DT_I32, esz = 4;
    else if (!strncmp(d, "'|u1'", 5) || !strncmp(d, "'|b1'", 5)) src = NANO_DT_U8, esz = 1;
    else {
        const char *e = strchr(d + 1, '\'');
        int n = e ? (int)(e - d + 1) : 8;
        if (d[1] == '>') BAD("%s: big-endian data (%.*s) is not supported; save it little-endian", path, n, d);
        if (strchr(d, 'O') && strchr(d, 'O') < d + n) BAD("%s: an object array (%.*s) is not supported", path, n, d);
        BAD("%s: dtype %.*s is not supported (float32, float64, int64, int32, uint8, bool are)", path, n, d);
    }
    if (*sh != '(') BAD("%s: shape is not a tuple", path);
    const char *p = sh + 1;
    int64_t n = 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || out->ndim == NANO_MAX_DIMS) BAD("%s: shape %.40s is not supported", path, sh);
        if (v > 0 && n > ((int64_t)1 << 40) / v) BAD("%s: shape %.40s is too large", path, sh);
        out->shape[out->ndim++] = v;
        n *= v;
        p = end;
    }
    if (*p != ')') BAD("%s: shape is not a closed tuple", path);
    size_t bytes = (size_t)n * esz;
    long start = ftell(f);
    if (start < 0 || fseek(f, 0, SEEK_END)) BAD("%s: cannot seek", path);
    long size = ftell(f);
    if (size < 0 || (size_t)(size - start) != bytes)
        BAD("%s: %ld data bytes, but shape %.40s declares %zu: %s", path, size - start, sh, bytes,
            size - start < (long)bytes ? "truncated" : "trailing bytes");
    if (fseek(f, start, SEEK_SET)) BAD("%s: cannot seek", path);
    raw = malloc(bytes + 1);
    if (!raw) {
        snprintf(err, errlen, "%s: out of memory for %zu bytes", path, bytes);
        st = NANO_E_NOMEM;
        goto fail;
    }
    if (fread(raw, 1, bytes, f) != bytes) BAD("%s: holds less data than shape %.40s needs (truncated)", path, sh);
    if (src == 0) { /* float64: narrowed */
        float *fl = malloc((size_t)n * sizeof *fl + 1);
        if (!fl) {
            st = NANO_E_NOMEM;
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, (char *)raw + i * 8, 8);
            fl[i] = (float)v;
        }
        free(raw);
        raw = fl;
        src = NANO_DT_F32;
    }
    out->dtype = src;
    out->data = raw;
    out->count = n;
    free(hdr);
    fclose(f);
    return NANO_OK;
fail:
    free(hdr);
    free(raw);
    fclose(f);
    memset(out, 0, sizeof *out);
    return st;
}

nano_status nano_npy_write(const char *path, int dtype, int ndim, const int64_t *shape, const void *data, char *err,
                           size_t errlen) {
    const char *descr = dtype == NANO_DT_F32 ? "<f4" : dtype == NANO_DT_I64 ? "<i8" : dtype == NANO_DT_I32 ? "<i4"
                      : dtype == NANO_DT_U8 ? "|u1" : NULL;
    if (!descr) {
        snprintf(err, errlen, "cannot write dtype %s as .npy", nano_dtype_name(dtype));
        return NANO_E_ARG;
    }
    char dict[256];
    int k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        k += snprintf(dict + k, sizeof dict - (size_t)k, "%lld,%s", (long long)shape[i], i + 1 < ndim ? " " : "");
        n *= shape[i];
    }
    k += snprintf(dict + k, sizeof dict - (size_t)k, "), }");
    int total = 10 + k + 1;
    int pad = (64 - total % 64) % 64;
    char hdr[400];
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    int hl = k + pad + 1;
    hdr[8] = (char)(hl & 0xff);
    hdr[9] = (char)(hl >> 8);
    memcpy(hdr + 10, dict, (size_t)k);
    memset(hdr + 10 + k, ' ', (size_t)pad);
    hdr[10 + k + pad] = '\n';
    /* a fresh temporary beside path (O_EXCL, never through a link), renamed once whole */
    char tmp[4096];
    int len = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (len < 0 || (size_t)len >= sizeof tmp) {
        snprintf(err, errlen, "path too long: %s", path);
        return NANO_E_ARG;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        if (fd >= 0) close(fd);
        return NANO_E_IO;
    }
    size_t bytes = (size_t)n * nano_dtype_size(dtype);
    int ok = fwrite(hdr, 1, (size_t)(10 + hl), f) == (size_t)(10 + hl) && fwrite(data, 1, bytes, f) == bytes;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path)) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return NANO_E_IO;
    }
    return NANO_OK;
}
