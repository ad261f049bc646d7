/* deploy_data — the calibration and evaluation sets of nebula-deploy, read from .npy
 * files: the samples (f32 images or features, i64/i32 token ids) along dim 0 and an
 * optional 1-D integer label array of the same length.
 *
 * The files are read by libnebula-nano's reader (nano_npy_read: numpy's own C-ordered
 * little-endian arrays, float64 narrowed to float32, exactly the size the header says);
 * this file checks they are a sample set: samples along dim 0, labels one integer each. */
#include "deploy/deploy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nano/nano.h"

nano_status deploy_data_read(deploy_data *d, const char *x_npy, const char *labels_npy, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    nano_npy x, y;
    nano_status st = nano_npy_read(x_npy, &x, err, errlen);
    if (st != NANO_OK) return st;
    if (x.ndim < 1 || x.shape[0] < 1) {
        free(x.data);
        snprintf(err, errlen, "%s: no samples (dim 0 holds them, shape has %d dimensions)", x_npy, x.ndim);
        return NANO_E_FORMAT;
    }
    if (x.dtype != NANO_DT_F32 && x.dtype != NANO_DT_I64 && x.dtype != NANO_DT_I32) {
        free(x.data);
        snprintf(err, errlen, "%s: samples must be floats or integer token ids, not %s", x_npy, nano_dtype_name(x.dtype));
        return NANO_E_UNSUPPORTED;
    }
    d->dtype = x.dtype;
    d->ndim = x.ndim;
    memcpy(d->shape, x.shape, sizeof d->shape);
    d->x = x.data;
    if (!labels_npy) return NANO_OK;
    if ((st = nano_npy_read(labels_npy, &y, err, errlen)) != NANO_OK) {
        deploy_data_free(d);
        return st;
    }
    if (y.ndim != 1 || y.shape[0] != d->shape[0] || (y.dtype != NANO_DT_I64 && y.dtype != NANO_DT_I32)) {
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
