/* data — training and held-out data for the three families: token streams (GPT-2,
 * BERT) and labelled images (ResNet), read by every rank from the same files, each
 * rank taking its own disjoint part of every global batch.
 *
 * Formats (detected from the file's first bytes; the error names the file and what
 * was found when none matches):
 *   Nebula tokens  32-byte header: "NEBTOK01" magic, u32 version 1, u32 vocab_size,
 *                  u64 token count, u32 bytes per token (1, 2 or 4), u32 reserved (0);
 *                  then the tokens (little endian) from byte 32. Byte-level files
 *                  (vocabulary 256, 1 byte per token: data_prepare_text) are the text
 *                  itself after the header.
 *   llm.c tokens   256 x int32 header: [0] = 20240520 magic, [1] = 1 version,
 *                  [2] = token count, then uint16 tokens (karpathy/llm.c dev/data,
 *                  nanoGPT's prepare.py writes the same tokens without the header:
 *                  not accepted, the header is what makes truncation detectable).
 *   HDF5 images    /images uint8 (N, H, W, C) with C = 3 (or 1: replicated to 3),
 *                  /labels integer (N); optional attributes mean, std of /images
 *                  (C or 3 floats each, per channel). Recognised by the HDF5
 *                  signature at byte 0 (no user block).
 *   CIFAR-10 bin   records of 1 label byte + 3072 bytes (3 x 32 x 32, CHW); no magic:
 *                  an image file that is not HDF5 is read as CIFAR-10 (the five
 *                  training batches concatenate into one file with cat).
 *   synthetic      path "synthetic": 2^20 samples (or one global batch if larger) of
 *                  random tokens / pixels and labels, a pure function of (seed,
 *                  sample); shuffled, augmented and normalised like a file.
 *
 * The one design decision: the order of samples is a pure function of (seed, epoch,
 * global sample index) — a Philox-keyed permutation per epoch — and so is every
 * random augmentation of a sample (crop offset, flip) and BERT's masking (masked
 * per sample: bert_mask_tokens with B = 1, rank = the sample index from
 * data_batch_samples, step = epoch). Global
 * batch g of an epoch is samples [g*GB, (g+1)*GB) of the permutation (GB = global
 * batch); data-parallel rank r, micro-step a (of A accumulation steps) takes the
 * micro-batch at offset (r*A + a)*b inside it. Hence the loader's whole position is
 * (epoch, global cursor), the same on every rank; a run resumed at another world
 * size (same GB) reads exactly the samples the uninterrupted run would have, and
 * N ranks x b read, step by step, the same samples as 1 rank x N*b.
 *
 * Token samples are windows of T+1 tokens starting at multiples of T (input = the
 * first T, GPT-2 target = the last T); a partial window at the end is dropped.
 * Image samples are whole images; the last incomplete global batch of an epoch is
 * dropped (drop_last), so every step has exactly GB samples. */
#ifndef NEBULA_DATA_H
#define NEBULA_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "base/log.h"

typedef enum data_format {
    DATA_FORMAT_NEBULA_TOKENS = 0,
    DATA_FORMAT_LLMC_TOKENS,
    DATA_FORMAT_HDF5_IMAGES,
    DATA_FORMAT_CIFAR10,
    DATA_FORMAT_SYNTHETIC,     /* no file: random tokens / images, for throughput runs */
} data_format;

#define DATA_NEBULA_MAGIC        "NEBTOK01"   /* 8 bytes, no terminator in the file */
#define DATA_NEBULA_VERSION      1u
#define DATA_NEBULA_HEADER_BYTES 32u
#define DATA_LLMC_MAGIC          20240520
#define DATA_LLMC_VERSION        1
#define DATA_LLMC_HEADER_BYTES   1024u        /* 256 x int32 */
#define DATA_CIFAR10_RECORD      3073u        /* 1 label byte + 3 x 32 x 32 pixels */
#define DATA_SYNTHETIC_SAMPLES   (UINT64_C(1) << 20)

/* What the model needs; filled by the caller from the resolved model and batch. */
typedef struct data_config {
    const char *path;          /* the file; "synthetic" for DATA_FORMAT_SYNTHETIC (copied by data_open) */
    bool images;               /* ResNet (images) or transformer (tokens) */
    int vocab_size;            /* tokens: the model's V; a file with a larger vocabulary is refused */
    int T;                     /* tokens: sequence length */
    int H, W;                  /* images: the model's input size (crop/resize never changes it) */
    int num_classes;           /* images: labels must lie in [0, num_classes) */
    int pad_crop;              /* images: random crop from the image zero-padded by this many pixels (0: none) */
    bool flip;                 /* images: random horizontal flip */
    float mean[3], std[3];     /* images: per-channel normalisation of x/255 (the file's attributes win when present) */
    int micro_batch;           /* b: samples per micro-batch */
    int accum;                 /* A: micro-batches per step */
    int dp_rank, dp_size;      /* this rank's part of the global batch, GB = b * A * dp_size */
    uint64_t seed;             /* shuffling and augmentation */
    bool shuffle;              /* false for held-out data: the file's order */
} data_config;

/* The loader's position: the same on every rank. Fixed layout, no padding: written
 * as-is into checkpoints. */
typedef struct data_state {
    uint64_t epoch;            /* current epoch, from 0 */
    uint64_t cursor;           /* first global sample index of the next step within the epoch */
} data_state;

typedef struct data_loader data_loader;  /* opaque */

/* Opens and validates the file (magic, version, sizes against the file length — a
 * truncated file is an error naming the expected and actual byte counts —, vocabulary
 * against the model's (every token is checked: one pass over a token file), every
 * label against num_classes, image size). STATUS_INPUT with a message naming the
 * file and the problem. Allocates everything it will need; the loader starts at
 * epoch 0, cursor 0. A config no caller can produce (b < 1, dp_rank >= dp_size, ...)
 * is a bug and dies. */
status data_open(data_loader **out, const data_config *cfg);
void data_free(data_loader *d);

/* Samples per epoch, and steps (global batches) per epoch. */
uint64_t data_samples(const data_loader *d);
uint64_t data_steps_per_epoch(const data_loader *d);
data_format data_get_format(const data_loader *d);
/* One line for the run's config table, e.g. "train.bin: Nebula tokens v1, 2 bytes per
 * token, vocab 50257, 9000000 tokens = 8789 samples of T+1 = 1025, 17 steps per epoch". */
void data_describe(const data_loader *d, char *buf, size_t len);
/* The file's sample (token window or image index) at position pos (< data_samples)
 * of the order of `epoch`: what a step reads, for tests and logs. */
uint64_t data_sample_index(const data_loader *d, uint64_t epoch, uint64_t pos);
/* The file's samples of micro-batch a of the current step for this rank, in the
 * order data_next_* returns them. */
void data_batch_samples(const data_loader *d, int a, uint64_t *samples /* (b) */);

/* Heterogeneous ranks (train/sched.c): this rank's part of every global batch becomes
 * the `count` samples from position `first` (first + count <= GB; the ranks' shares
 * disjoint and covering it, which the caller guarantees); micro-batch a holds samples
 * [first + a b, min(first + count, first + (a + 1) b)). Until it is called the share is
 * the uniform one: first = dp_rank A b, count = A b. The loader's state is unchanged. */
void data_set_share(data_loader *d, uint64_t first, uint64_t count);
/* Micro-batches of this rank's share per step (ceil(count / b); A by default, 0 for an
 * empty share) and the samples of micro-batch a (b, but the last may hold fewer). */
int data_micro_batches(const data_loader *d);
int data_micro_batch_size(const data_loader *d, int a);

/* Micro-batch a (0 <= a < data_micro_batches) of the current step for this rank. Pure: calling
 * it again returns the same micro-batch until data_advance.
 * tokens: inputs (b, T) and next-token targets (b, T); targets may be NULL (BERT).
 * images: images (b, 3, H, W) normalised and augmented, labels (b); labels may be NULL.
 * STATUS_IO when reading an HDF5 image fails. */
status data_next_tokens(data_loader *d, int a, int32_t *inputs, int32_t *targets);
status data_next_images(data_loader *d, int a, float *images, int32_t *labels);
/* Moves to the next step (next global batch; a new epoch and permutation at the end). */
void data_advance(data_loader *d);

data_state data_get_state(const data_loader *d);
/* STATUS_CORRUPT when the state is impossible for this file (cursor past the end,
 * epoch >= 2^48). A cursor that leaves less than one global batch in the epoch (the
 * global batch changed since the state was saved) starts the next epoch, as
 * data_advance would have. */
status data_set_state(data_loader *d, const data_state *st);

/* nebula-train prepare: byte-level tokenisation (vocabulary 256, one token per byte)
 * of text files into a Nebula token file, the last `val_fraction` of every file's
 * bytes into a second file (held-out data). Tokens are stored 1 byte each, so a
 * file's payload is the inputs' bytes concatenated. File i gives
 * floor(size_i * val_fraction) bytes to val_out and the rest to train_out;
 * val_fraction lies in [0, 1); val_out may be NULL when it is 0 (no held-out file). Writes
 * atomically (temporary name, fsync, rename): an existing output is replaced only
 * when both are complete. STATUS_INPUT for an unreadable input or a bad fraction,
 * STATUS_IO for a failed write. */
status data_prepare_text(const char *const *inputs, int ninputs, const char *train_out, const char *val_out,
                         double val_fraction);

/* nebula-train prepare --images: a folder of PNG / JPEG files in class sub-folders
 * (torchvision's ImageFolder: a class per sub-folder, classes sorted by name give the
 * labels 0..K-1, files sorted by path within a class, sub-folders of a class included,
 * names starting with '.' ignored) into one HDF5 image set as described at the top:
 * /images uint8 (N, crop, crop, 3) resized and centre-cropped as torchvision's
 * Resize(size) + CenterCrop(crop) (data_decode.c: PIL's bilinear resample), /labels
 * int32 (N), /classes fixed-length strings (K) naming label k, and the attributes mean
 * and std (3 floats, of x/255 over every stored pixel), size and crop of /images. A
 * file's kind comes from its first bytes; files that are neither PNG nor JPEG are
 * skipped and counted. Collective over rt->world: rank r decodes the r-th contiguous
 * range of the images and writes its rows of the one file (parallel HDF5); one rank
 * without mpirun works alike and writes the same bytes. Written to OUT.tmp.PID and
 * renamed only when complete (docs/design.md#durable-writes). STATUS_INPUT (every rank)
 * for no class folder, an empty class, an output that is an input or a corrupt or
 * truncated image (each named with libpng's or libjpeg's reason) unless skip_corrupt,
 * which leaves them out and counts them; STATUS_IO for a failed write. */
struct runtime;

typedef struct data_images_options {
    const char *dir;           /* the folder of class sub-folders */
    const char *out;           /* the HDF5 file to write */
    int size;                  /* S: the shorter side resized to S; 0: no resize (crop only) */
    int crop;                  /* H: the centre crop, H x H (>= 1; <= size when size > 0) */
    bool skip_corrupt;         /* leave corrupt images out (counted) instead of failing */
    bool progress;             /* rank 0 rewrites a progress line on stderr */
    double timeout_s;          /* deadline of each agreement between the ranks (0: none) */
} data_images_options;

typedef struct data_images_result {
    uint64_t images;           /* images written */
    uint64_t classes;          /* class folders (labels) */
    uint64_t other;            /* files skipped: neither PNG nor JPEG, or beside the class folders */
    uint64_t corrupt;          /* corrupt images skipped (skip_corrupt) */
    double seconds;            /* wall time from the scan to the rename */
} data_images_result;

status data_prepare_images(const struct runtime *rt, const data_images_options *opt, data_images_result *res);

#endif
