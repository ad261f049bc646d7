/* data_image — labelled image sets for data.h: HDF5 (/images uint8 (N, H, W, C),
 * /labels (N)), CIFAR-10 binary records and synthetic images; random crop, flip
 * and per-channel normalisation into (3, H, W) float32.
 *
 * Decision: an HDF5 image is read per sample (a hyperslab of one image into a
 * buffer sized at open), not the whole set at open: memory stays one image per
 * rank whatever the set's size, and each rank reads only its own samples. Labels
 * are small and read whole at open, so every label is checked before step 1.
 *
 * Augmentation follows torchvision's RandomCrop(H, padding=p) then
 * RandomHorizontalFlip: the image is padded with zero bytes (which normalise to
 * -mean/std, as torchvision pads before Normalize), a window at offset (oy, ox) in
 * [0, 2p]^2 is cut out, then mirrored. The draws come from stream (seed, sample,
 * RNG_PURPOSE_AUGMENT, epoch) in the order oy, ox (when p > 0), flip (when on):
 * a pure function of (seed, epoch, sample), whichever rank reads it. */
#include "data_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

/* "uint8", "int64", "float32", "string" ... of an HDF5 type, for errors. */
static void h5_type_name(hid_t type, char *buf, size_t len)
{
    H5T_class_t cls = H5Tget_class(type);
    size_t bits = 8 * H5Tget_size(type);
    if (cls == H5T_INTEGER)
        snprintf(buf, len, "%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
    else if (cls == H5T_FLOAT)
        snprintf(buf, len, "float%zu", bits);
    else if (cls == H5T_STRING)
        snprintf(buf, len, "string");
    else
        snprintf(buf, len, "HDF5 type class %d", (int)cls);
}

/* Opens dataset /name; a missing one is an input error that says what the set needs. */
static status h5_open_dataset(data_loader *d, const char *name, hid_t *out)
{
    htri_t exists;
    char path[64];
    snprintf(path, sizeof path, "/%s", name);
    H5E_BEGIN_TRY { exists = H5Lexists(d->h5_file, path, H5P_DEFAULT); } H5E_END_TRY;
    if (exists <= 0)
        return data_fail(d, STATUS_INPUT, "no dataset %s: an HDF5 image set needs /images uint8 (N, H, W, C) "
                         "and /labels integer (N)", path);
    H5E_BEGIN_TRY { *out = H5Dopen2(d->h5_file, path, H5P_DEFAULT); } H5E_END_TRY;
    if (*out < 0) return data_fail(d, STATUS_INPUT, "%s exists but is not a readable dataset", path);
    return STATUS_OK;
}

/* Shape of a dataset: rank into *ndim, its dims into dims[0 .. 4). A rank above 4 is
 * refused here, naming the dataset, its rank and `expect` (the ranks it may have):
 * dims has room for 4, and no set of this reader has more. */
static status h5_shape(data_loader *d, hid_t dset, const char *name, const char *expect, int *ndim, hsize_t dims[4])
{
    hid_t space = H5Dget_space(dset);
    int n = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    if (n >= 0 && n <= 4 && H5Sget_simple_extent_dims(space, dims, NULL) < 0) n = -1;
    if (space >= 0) H5Sclose(space);
    if (n < 0) return data_fail(d, STATUS_INPUT, "cannot read the shape of /%s", name);
    if (n > 4) return data_fail(d, STATUS_INPUT, "/%s has %d dimensions; expected %s", name, n, expect);
    *ndim = n;
    return STATUS_OK;
}

/* Optional attribute `name` of /images: C or 3 values (1 value with C = 1 applies to all). */
static status h5_stat_attr(data_loader *d, const char *name, float out[3], bool *found)
{
    htri_t exists;
    H5E_BEGIN_TRY { exists = H5Aexists(d->h5_images, name); } H5E_END_TRY;
    *found = exists > 0;
    if (!*found) return STATUS_OK;
    status st = STATUS_OK;
    float v[3];
    hid_t attr = H5Aopen(d->h5_images, name, H5P_DEFAULT);
    hid_t space = attr < 0 ? -1 : H5Aget_space(attr);
    hssize_t n = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
    if (n != d->C && n != 3)
        st = data_fail(d, STATUS_INPUT, "attribute %s of /images has %lld values; expected %d (one per channel)",
                       name, (long long)n, d->C);
    else if (H5Aread(attr, H5T_NATIVE_FLOAT, v) < 0)
        st = data_fail(d, STATUS_INPUT, "cannot read attribute %s of /images as floats", name);
    else
        for (int c = 0; c < 3; c++) out[c] = v[n == 1 ? 0 : c];
    if (space >= 0) H5Sclose(space);
    if (attr >= 0) H5Aclose(attr);
    return st;
}

/* Stores label `lab` of image i in d->labels after checking it against num_classes. */
static status check_label(data_loader *d, int64_t lab, uint64_t i, const char *what)
{
    if (lab < 0 || lab >= d->cfg.num_classes)
        return data_fail(d, STATUS_INPUT, "label %" PRId64 " of image %" PRIu64 " (%s) is outside the valid range "
                         "[0, %d) of num_classes %d", lab, i, what, d->cfg.num_classes, d->cfg.num_classes);
    d->labels[i] = (int32_t)lab;
    return STATUS_OK;
}

static status h5_read_image(data_loader *d, uint64_t i)
{
    hsize_t start[4] = { i, 0, 0, 0 };
    hsize_t count[4] = { 1, (hsize_t)d->cfg.H, (hsize_t)d->cfg.W, (hsize_t)d->C };
    herr_t rc;
    H5E_BEGIN_TRY {
        rc = H5Sselect_hyperslab(d->h5_fspace, H5S_SELECT_SET, start, NULL, count, NULL);
        if (rc >= 0) rc = H5Dread(d->h5_images, H5T_NATIVE_UINT8, d->h5_mspace, d->h5_fspace, H5P_DEFAULT, d->pixels);
    } H5E_END_TRY;
    if (rc < 0) return data_fail(d, STATUS_IO, "reading image %" PRIu64 " of /images failed", i);
    return STATUS_OK;
}

static status h5_open(data_loader *d)
{
    H5E_BEGIN_TRY { d->h5_file = H5Fopen(d->path, H5F_ACC_RDONLY, H5P_DEFAULT); } H5E_END_TRY;
    if (d->h5_file < 0)
        return data_fail(d, STATUS_INPUT, "has the HDF5 signature but HDF5 cannot open it (truncated or corrupt?); "
                         "on a file system without file locks, set HDF5_USE_FILE_LOCKING=FALSE");
    TRY(h5_open_dataset(d, "images", &d->h5_images));
    hid_t type = H5Dget_type(d->h5_images);
    char tname[64];
    h5_type_name(type, tname, sizeof tname);
    H5Tclose(type);
    if (strcmp(tname, "uint8"))
        return data_fail(d, STATUS_INPUT, "/images is %s; expected uint8 pixels", tname);
    int nd;
    hsize_t dims[4] = { 0 };
    TRY(h5_shape(d, d->h5_images, "images", "4: (N, H, W, C) with C = 1 or 3", &nd, dims));
    if (nd != 4 || (dims[3] != 1 && dims[3] != 3))
        return data_fail(d, STATUS_INPUT, "/images has %d dimensions (last %llu); expected (N, H, W, C) with C = 1 "
                         "or 3", nd, nd > 0 ? (unsigned long long)dims[nd - 1] : 0ull);
    if (dims[1] != (hsize_t)d->cfg.H || dims[2] != (hsize_t)d->cfg.W)
        return data_fail(d, STATUS_INPUT, "/images are %llux%llu but the model takes %dx%d (images are not resized)",
                         (unsigned long long)dims[1], (unsigned long long)dims[2], d->cfg.H, d->cfg.W);
    const uint64_t N = dims[0];
    if (N > UINT32_MAX) return data_fail(d, STATUS_INPUT, "%" PRIu64 " images: at most 2^32 - 1 are supported", N);
    d->C = (int)dims[3];
    d->samples = N;

    hid_t lset;
    TRY(h5_open_dataset(d, "labels", &lset));
    status st = STATUS_OK;
    type = H5Dget_type(lset);
    h5_type_name(type, tname, sizeof tname);
    bool integer = H5Tget_class(type) == H5T_INTEGER;
    H5Tclose(type);
    hsize_t ldims[4] = { 0 };
    st = h5_shape(d, lset, "labels", "1: (N), or 2: (N, 1)", &nd, ldims);
    int64_t *lab = NULL;
    if (st != STATUS_OK) {
    } else if (!integer) {
        st = data_fail(d, STATUS_INPUT, "/labels is %s; expected integers", tname);
    } else if (!(nd == 1 || (nd == 2 && ldims[1] == 1))) {
        st = data_fail(d, STATUS_INPUT, "/labels has %d dimensions; expected (N)", nd);
    } else if (ldims[0] != N) {
        st = data_fail(d, STATUS_INPUT, "/labels has %llu entries but /images has %" PRIu64 " images",
                       (unsigned long long)ldims[0], N);
    } else if (!(lab = malloc((N ? N : 1) * sizeof *lab)) || !(d->labels = malloc((N ? N : 1) * sizeof *d->labels))) {
        log_error("out of memory for %" PRIu64 " labels of %s", N, d->path);
        st = STATUS_NOMEM;
    } else if (H5Dread(lset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab) < 0) {
        st = data_fail(d, STATUS_INPUT, "cannot read /labels (truncated or corrupt file?)");
    } else {
        for (uint64_t i = 0; i < N && st == STATUS_OK; i++) st = check_label(d, lab[i], i, "/labels");
    }
    free(lab);
    H5Dclose(lset);
    if (st != STATUS_OK) return st;

    bool fm, fs;
    float mean[3], std[3];
    TRY(h5_stat_attr(d, "mean", mean, &fm));
    TRY(h5_stat_attr(d, "std", std, &fs));
    for (int c = 0; c < 3; c++) {
        if (fm) d->mean[c] = mean[c];
        if (fs) d->std[c] = std[c];
    }
    d->stats_from_file = fm || fs;

    hsize_t one[4] = { 1, dims[1], dims[2], dims[3] };
    d->h5_fspace = H5Dget_space(d->h5_images);
    d->h5_mspace = H5Screate_simple(4, one, NULL);
    d->pixels = malloc((size_t)d->cfg.H * (size_t)d->cfg.W * (size_t)d->C);
    if (d->h5_fspace < 0 || d->h5_mspace < 0 || !d->pixels) {
        log_error("out of memory opening %s", d->path);
        return STATUS_NOMEM;
    }
    /* The last image must be readable: a truncated file fails here, not at some step. */
    if (N > 0 && h5_read_image(d, N - 1) != STATUS_OK)
        return data_fail(d, STATUS_INPUT, "cannot read image %" PRIu64 " of /images (truncated file?)", N - 1);
    return STATUS_OK;
}

#define CIFAR_LABEL_RECORDS 1024  /* records read at a time for the labels at open (3 MiB) */

static status cifar_open(data_loader *d)
{
    const size_t rec = DATA_CIFAR10_RECORD;
    TRY(data_open_file(d, rec * CIFAR_LABEL_RECORDS));  /* later one record per sample */
    const uint64_t bytes = d->file_bytes;
    if (bytes == 0 || bytes % rec != 0)
        return data_fail(d, STATUS_INPUT, "not an HDF5 file, and %" PRIu64 " bytes are not a whole number of "
                         "CIFAR-10 records of %zu bytes (1 label + 3x32x32 pixels): %" PRIu64 " records and %" PRIu64
                         " bytes left over (truncated?)", bytes, rec, bytes / rec, bytes % rec);
    if (d->cfg.H != 32 || d->cfg.W != 32)
        return data_fail(d, STATUS_INPUT, "CIFAR-10 images are 32x32 but the model takes %dx%d (images are not "
                         "resized)", d->cfg.H, d->cfg.W);
    const uint64_t N = bytes / rec;
    if (N > UINT32_MAX) return data_fail(d, STATUS_INPUT, "%" PRIu64 " images: at most 2^32 - 1 are supported", N);
    d->C = 3;
    d->samples = N;
    d->labels = malloc(N * sizeof *d->labels);
    if (!d->labels) {
        log_error("out of memory for %" PRIu64 " labels of %s", N, d->path);
        return STATUS_NOMEM;
    }
    for (uint64_t first = 0; first < N; first += CIFAR_LABEL_RECORDS) {
        uint64_t n = N - first < CIFAR_LABEL_RECORDS ? N - first : CIFAR_LABEL_RECORDS;
        TRY(data_read_at(d, d->window, n * rec, first * rec, "the records"));
        for (uint64_t i = 0; i < n; i++) TRY(check_label(d, d->window[i * rec], first + i, "its record's first byte"));
    }
    return STATUS_OK;
}

status data_open_images(data_loader *d)
{
    for (int c = 0; c < 3; c++) {
        d->mean[c] = d->cfg.mean[c];
        d->std[c] = d->cfg.std[c];
    }
    if (d->format == DATA_FORMAT_HDF5_IMAGES) {
        TRY(h5_open(d));
    } else if (d->format == DATA_FORMAT_CIFAR10) {
        TRY(cifar_open(d));
    } else {
        d->C = 3;
        d->samples = DATA_SYNTHETIC_SAMPLES > d->global_batch ? DATA_SYNTHETIC_SAMPLES : d->global_batch;
        d->pixels = malloc((size_t)d->cfg.H * (size_t)d->cfg.W * 3);
        if (!d->pixels) {
            log_error("out of memory for a %dx%d synthetic image", d->cfg.H, d->cfg.W);
            return STATUS_NOMEM;
        }
    }
    for (int c = 0; c < 3; c++) {
        if (!(d->std[c] > 0) || !isfinite(d->std[c]) || !isfinite(d->mean[c]))
            return data_fail(d, STATUS_INPUT, "normalisation of channel %d: mean %g, std %g (from the %s); std must "
                             "be finite and > 0", c, d->mean[c], d->std[c],
                             d->stats_from_file ? "file's attributes or the config" : "config");
        for (int v = 0; v < 256; v++) d->lut[c][v] = ((float)v / 255.0f - d->mean[c]) / d->std[c];
        if (!isfinite(d->lut[c][0]) || !isfinite(d->lut[c][255]))  /* the extremes: (v/255 - mean)/std is monotone */
            return data_fail(d, STATUS_INPUT, "normalisation of channel %d: mean %g, std %g (from the %s) overflow "
                             "float32 for pixel values 0..255", c, d->mean[c], d->std[c],
                             d->stats_from_file ? "file's attributes or the config" : "config");
    }
    return STATUS_OK;
}

void data_close_images(data_loader *d)
{
    if (d->h5_mspace >= 0) H5Sclose(d->h5_mspace);
    if (d->h5_fspace >= 0) H5Sclose(d->h5_fspace);
    if (d->h5_images >= 0) H5Dclose(d->h5_images);
    if (d->h5_file >= 0) H5Fclose(d->h5_file);
    d->h5_file = d->h5_images = d->h5_fspace = d->h5_mspace = H5I_INVALID_HID;
    free(d->labels);
    free(d->pixels);
    d->labels = NULL;
    d->pixels = NULL;
}

/* Synthetic image of sample s into d->pixels (H, W, 3) and its label: stream
 * (seed, s, RNG_PURPOSE_SYNTHETIC, 1), the label first, then 4 pixels per output. */
static int32_t synthetic_image(data_loader *d, uint64_t s)
{
    rng r;
    rng_init(&r, d->cfg.seed, (uint32_t)s, RNG_PURPOSE_SYNTHETIC, 1);
    int32_t label = (int32_t)rng_below(&r, (uint32_t)d->cfg.num_classes);
    size_t n = (size_t)d->cfg.H * (size_t)d->cfg.W * 3;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t u = rng_u32(&r);
        for (size_t k = 0; k < 4 && i + k < n; k++) d->pixels[i + k] = (uint8_t)(u >> (8 * k));
    }
    return label;
}

status data_image_emit(data_loader *d, uint64_t s, float *out, int32_t *label)
{
    const int H = d->cfg.H, W = d->cfg.W, p = d->cfg.pad_crop;
    const uint8_t *px;
    ptrdiff_t cs, ys, xs;  /* source strides of channel, row, column in bytes */
    if (d->format == DATA_FORMAT_HDF5_IMAGES) {
        TRY(h5_read_image(d, s));
        px = d->pixels;
        cs = d->C == 1 ? 0 : 1;  /* C = 1: every output channel reads channel 0 */
        ys = (ptrdiff_t)W * d->C;
        xs = d->C;
        *label = d->labels[s];
    } else if (d->format == DATA_FORMAT_CIFAR10) {
        char what[48];
        snprintf(what, sizeof what, "record %" PRIu64, s);
        TRY(data_read_at(d, d->window, DATA_CIFAR10_RECORD, s * DATA_CIFAR10_RECORD, what));
        px = d->window + 1;  /* CHW after the label byte */
        cs = 32 * 32;
        ys = 32;
        xs = 1;
        *label = d->labels[s];
    } else {
        *label = synthetic_image(d, s);
        px = d->pixels;
        cs = 1;
        ys = (ptrdiff_t)W * 3;
        xs = 3;
    }
    int oy = p, ox = p;
    bool flip = false;
    if (p > 0 || d->cfg.flip) {
        rng r;
        rng_init(&r, d->cfg.seed, (uint32_t)s, RNG_PURPOSE_AUGMENT, d->state.epoch);
        if (p > 0) {
            oy = (int)rng_below(&r, (uint32_t)(2 * p + 1));
            ox = (int)rng_below(&r, (uint32_t)(2 * p + 1));
        }
        if (d->cfg.flip) flip = rng_below(&r, 2) == 1;
    }
    /* out(c, y, x) = padded(c, y + oy, x' + ox), x' = flip ? W-1-x : x; padded = src shifted by p, 0 outside. */
    for (int c = 0; c < 3; c++) {
        const float *lut = d->lut[c];
        const uint8_t *pc = px + c * cs;
        for (int y = 0; y < H; y++) {
            float *row = out + ((size_t)c * H + (size_t)y) * (size_t)W;
            const int sy = y + oy - p;
            if (sy < 0 || sy >= H) {
                for (int x = 0; x < W; x++) row[x] = lut[0];
                continue;
            }
            const uint8_t *src = pc + sy * ys;
            for (int x = 0; x < W; x++) {
                const int sx = (flip ? W - 1 - x : x) + ox - p;
                row[x] = sx >= 0 && sx < W ? lut[src[sx * xs]] : lut[0];
            }
        }
    }
    return STATUS_OK;
}
