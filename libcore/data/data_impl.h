/* data_impl — the loader's insides, shared by data.c (format detection, sample
 * order, token streams, state), data_image.c (HDF5 and CIFAR-10 image sets,
 * augmentation, normalisation) and data_prepare.c (text to tokens).
 * Never included from apps/. */
#ifndef NEBULA_DATA_IMPL_H
#define NEBULA_DATA_IMPL_H

#include <hdf5.h>

#include "data.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "token and CIFAR files are read in place as little-endian integers");
_Static_assert(sizeof(data_state) == 16, "data_state is stored as raw bytes in checkpoints");

#define DATA_PERM_ROUNDS 6     /* Feistel rounds of the sample permutation (4 suffice: Luby-Rackoff) */

struct data_loader {
    data_config cfg;           /* the caller's config; cfg.path points at path */
    char *path;                /* copy of the file name */
    data_format format;        /* what the file turned out to be */
    uint64_t samples;          /* samples per epoch: token windows or images */
    uint64_t global_batch;     /* GB = b * A * dp_size */
    data_state state;          /* the position, the same on every rank */
    uint64_t share_first;      /* this rank's samples of every global batch: [share_first, + share_count) */
    uint64_t share_count;      /* (default: dp_rank * A * b and A * b; data_set_share) */
    int perm_half_bits;        /* the permutation's Feistel domain is [0, 4^perm_half_bits) */

    /* Token streams (and CIFAR-10 records): the file open for pread. Not mapped: a file
     * shrunk under a running job (truncated, rewritten in place) must give an error
     * naming it, never a SIGBUS at some step (data_read_at). */
    int fd;                    /* -1 when no file is open */
    uint64_t file_bytes;       /* its size when it was opened */
    uint8_t *window;           /* (window_bytes) one token window or CIFAR-10 record, read per sample */
    size_t window_bytes;
    uint64_t tokens_at;        /* file offset of the first token */
    uint64_t ntokens;          /* tokens in the file */
    int token_bytes;           /* 1, 2 or 4 */
    uint32_t file_vocab;       /* Nebula: the header's vocabulary; llm.c: largest id + 1 */
    uint32_t version;          /* the file's format version */

    /* Image sets. */
    int C;                     /* channels in the file: 1 (replicated) or 3 */
    int32_t *labels;           /* (samples) every label, checked at open; NULL for synthetic */
    float lut[3][256];         /* (3, 256) (v/255 - mean[c]) / std[c] for every byte v */
    float mean[3], std[3];     /* the normalisation in effect (file attributes or cfg) */
    bool stats_from_file;      /* mean / std came from the file's attributes */
    uint8_t *pixels;           /* (H, W, C) one HDF5 or synthetic image, read or made per sample */
    hid_t h5_file;             /* H5I_INVALID_HID when not open */
    hid_t h5_images;           /* /images */
    hid_t h5_fspace;           /* /images' dataspace, re-selected per sample */
    hid_t h5_mspace;           /* (1, H, W, C) memory space of one image */
};

/* The image side of data_open (data_image.c): validates and opens an HDF5 image set,
 * a CIFAR-10 file or the synthetic set; fills samples, C, labels, lut, pixels. */
status data_open_images(data_loader *d);
void data_close_images(data_loader *d);
/* Image i (b = one sample) of the current step: (3, H, W) augmented and normalised. */
status data_image_emit(data_loader *d, uint64_t sample, float *out, int32_t *label);

/* File helpers shared by the token and image readers (data.c). data_open_file opens
 * d->path (a regular file only) into d->fd and d->file_bytes and allocates d->window of
 * `window` bytes; logs its error. data_read_at reads n bytes at offset `at` into buf:
 * STATUS_IO, logged naming the file, `what` was read and what happened (the file is
 * shorter than when it was opened, or the read's errno), when fewer arrive. */
status data_open_file(data_loader *d, size_t window);
void data_close_file(data_loader *d);
status data_read_at(const data_loader *d, void *buf, size_t n, uint64_t at, const char *what);
/* Logs "PATH: message" and returns st: every data error names the file first. */
status data_fail(const data_loader *d, status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
