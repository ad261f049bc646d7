/* data_folder_impl — what data_folder.c (the ImageFolder scan and the parallel HDF5
 * write) and data_decode.c (PNG/JPEG decoding, the resize and centre crop) share. */
#ifndef NEBULA_DATA_FOLDER_IMPL_H
#define NEBULA_DATA_FOLDER_IMPL_H

#include <stddef.h>
#include <stdint.h>

/* A file's kind, from its first bytes (never its name). */
typedef enum img_kind {
    IMG_KIND_OTHER = 0,          /* neither: skipped and counted */
    IMG_KIND_PNG,                /* 89 50 4E 47 0D 0A 1A 0A */
    IMG_KIND_JPEG,               /* FF D8 FF */
    IMG_KIND_UNREADABLE,         /* could not be opened or read: an error, like a corrupt image */
} img_kind;

#define IMG_MAX_PIXELS 178956970ull  /* PIL's DecompressionBombError threshold (2 x 89478485) */
#define IMG_MAX_FILE   (1ull << 30)  /* bytes: larger files are refused as images */

img_kind img_sniff(const uint8_t *head, size_t n);

/* Decodes the PNG or JPEG in buf[0, n) into 8-bit RGB (*px, (H, W, 3), malloc'd; the
 * caller frees). 0, or -1 with `why` saying what libpng / libjpeg reported. */
int img_decode(const uint8_t *buf, size_t n, uint8_t **px, int *W, int *H, char *why, size_t len);

/* torchvision's Resize(S) (shorter side to S, bilinear with PIL's antialiasing; S = 0:
 * no resize) then CenterCrop(crop) of src (h, w, 3) into dst (crop, crop, 3).
 * 0, or -1 when out of memory. */
int img_resize_crop(const uint8_t *src, int w, int h, int S, int crop, uint8_t *dst);

#endif
