/* fuzz_images — libFuzzer harness of the image-set reader (libcore/data/data_image.c):
 * any bytes as a data file to data_open for a ResNet of 4x4 images (an HDF5 set, by its
 * signature) or 32x32 ones (anything else is read as CIFAR-10 records). A refusal is
 * STATUS_INPUT; an accepted set must keep data.h's promises: at least one global batch
 * of samples, and every micro-batch of the first epoch read with each label inside
 * [0, num_classes) and every normalised value finite (HDF5's own reads may
 * fail later on a damaged chunk: STATUS_IO). Built by `make fuzz` with libFuzzer, ASan
 * and UBSan, and by `make` as a replay program (replay.c). */
#include "fuzz_input.h"
#include "data/data.h"

#include <math.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MICRO 2
#define MAX_STEPS 8  /* a bound on the reading, for sets of many tiny images */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[4096];
    int fd = fuzz_input_file(data, size, path, sizeof path);
    bool h5 = size >= 8 && !memcmp(data, "\211HDF\r\n\032\n", 8);
    int side = h5 ? 4 : 32;
    data_config cfg = { .path = path, .images = true, .H = side, .W = side, .num_classes = 10,
                        .pad_crop = 1, .flip = true, .mean = { 0.5f, 0.5f, 0.5f }, .std = { 0.25f, 0.25f, 0.25f },
                        .micro_batch = MICRO, .accum = 1, .dp_rank = 0, .dp_size = 1, .seed = 7, .shuffle = true };
    data_loader *d = NULL;
    status st = data_open(&d, &cfg);
    fuzz_require(st == STATUS_OK || st == STATUS_INPUT, "data_open of a readable file is OK or STATUS_INPUT");
    fuzz_require((st == STATUS_OK) == (d != NULL), "a loader exactly when accepted");
    if (d) {
        fuzz_require(data_samples(d) >= MICRO && data_steps_per_epoch(d) >= 1, "at least one global batch");
        /* the file's mean / std attributes set the normalisation: any value, finite */
        static float images[MICRO * 3 * 32 * 32];
        int32_t labels[MICRO];
        uint64_t steps = data_steps_per_epoch(d) < MAX_STEPS ? data_steps_per_epoch(d) : MAX_STEPS;
        for (uint64_t s = 0; s < steps; s++) {
            st = data_next_images(d, 0, images, labels);
            fuzz_require(st == STATUS_OK || (h5 && st == STATUS_IO), "an accepted set's images read (HDF5: or STATUS_IO)");
            if (st != STATUS_OK) break;
            for (int i = 0; i < MICRO; i++) fuzz_require(labels[i] >= 0 && labels[i] < 10, "labels in [0, num_classes)");
            for (size_t k = 0; k < (size_t)MICRO * 3 * (size_t)side * (size_t)side; k++)
                fuzz_require(isfinite(images[k]), "every normalised value is finite");
            data_advance(d);
        }
        data_free(d);
    }
    close(fd);
    unlink(path);
    return 0;
}
