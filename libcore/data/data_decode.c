/* data_decode — one PNG or JPEG file into 8-bit RGB, resized and centre-cropped the way
 * torchvision's ImageFolder + Resize(S) + CenterCrop(H) prepares it from a PIL image.
 *
 * The one design decision: the resample is PIL's own algorithm (Pillow's Resample.c,
 * ImagingResample with the BILINEAR filter), not "a" bilinear resize: separable, the
 * horizontal pass first into an 8-bit intermediate image, then the vertical pass; each
 * output pixel's weights are the triangle filter widened by the scale factor when
 * shrinking (antialiasing; support 1 when enlarging), normalised to sum 1 in double,
 * then rounded to 22-bit fixed point (PRECISION_BITS = 32 - 8 - 2), and the sums are
 * rounded half up and clipped to 0..255. The same arithmetic in the same order gives
 * the same bytes as torchvision on PIL images, which is what validation checks (the
 * bound it allows is derived there). Only the output window the centre crop keeps is
 * computed: every output pixel depends on its own weights alone, so this changes no byte.
 *
 * Colour follows PIL's convert("RGB"): grey is replicated, a palette is looked up,
 * alpha (an alpha channel or a tRNS chunk) is dropped, not composited over a
 * background; 16-bit PNG samples keep their high byte (PIL's RGB;16B unpacking).
 * Where PIL differs — a 16-bit grey PNG is clipped to 255 by PIL's I;16 -> RGB
 * conversion — the high byte is kept, since clipping loses the image.
 * Errors never leave the process: libpng reports through png_error (our error
 * function longjmps back), libjpeg through error_exit (the same), and libjpeg's
 * premature-end warning, the one a truncated file gives, is an error here as it is
 * in PIL ("image file is truncated"); its other warnings (extraneous bytes before a
 * marker, common in real photo sets) are not, as PIL decodes those images. */
#include "data_folder_impl.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>  /* JWRN_JPEG_EOF */

img_kind img_sniff(const uint8_t *head, size_t n)
{
    static const uint8_t png_sig[8] = { 0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a };
    if (n >= 8 && !memcmp(head, png_sig, 8)) return IMG_KIND_PNG;
    if (n >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff) return IMG_KIND_JPEG;
    return IMG_KIND_OTHER;
}

static int too_large(unsigned long w, unsigned long h, char *why, size_t len)
{
    if (w == 0 || h == 0) {
        snprintf(why, len, "image of %lu x %lu pixels: empty", w, h);
        return 1;
    }
    if ((unsigned long long)w * h > IMG_MAX_PIXELS) {
        snprintf(why, len, "image of %lu x %lu pixels: more than %llu (PIL's decompression-bomb limit)", w, h,
                 IMG_MAX_PIXELS);
        return 1;
    }
    return 0;
}

/* ---- PNG ---- */

typedef struct png_ctx {
    jmp_buf jb;                  /* where png_error lands */
    char msg[256];               /* libpng's message */
    const uint8_t *p;            /* the file in memory */
    size_t n, off;               /* its size, the read position */
} png_ctx;

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    longjmp(c->jb, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;  /* ancillary-chunk trouble (a bad iCCP profile) does not change the pixels PIL shows */
    (void)msg;
}

static void png_read_mem(png_structp png, png_bytep out, size_t len)
{
    png_ctx *c = png_get_io_ptr(png);
    if (len > c->n - c->off) {
        snprintf(c->msg, sizeof c->msg, "the file ends at byte %zu, in the middle of a chunk (truncated)", c->n);
        longjmp(c->jb, 1);
    }
    memcpy(out, c->p + c->off, len);
    c->off += len;
}

static int decode_png(const uint8_t *buf, size_t n, uint8_t **out, int *W, int *H, char *why, size_t len)
{
    png_ctx c = { .p = buf, .n = n };
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile px = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        snprintf(why, len, "libpng: out of memory");
        return -1;
    }
    if (setjmp(c.jb)) {
        png_destroy_read_struct(&png, &info, NULL);
        free(px);
        free(rows);
        snprintf(why, len, "libpng: %s", c.msg);
        return -1;
    }
    png_set_read_fn(png, &c, png_read_mem);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, ctype;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, NULL, NULL, NULL);
    if (too_large(w, h, c.msg, sizeof c.msg)) longjmp(c.jb, 1);
    png_set_strip_16(png);                                   /* the high byte, as PIL's RGB;16B */
    png_set_packing(png);                                    /* 1, 2, 4-bit samples one per byte */
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    png_set_strip_alpha(png);                                /* PIL's convert("RGB") drops alpha */
    png_set_gray_to_rgb(png);
    (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_rowbytes(png, info) != (size_t)w * 3) {
        snprintf(c.msg, sizeof c.msg, "colour type %d, depth %d did not become 8-bit RGB", ctype, depth);
        longjmp(c.jb, 1);
    }
    px = malloc((size_t)w * h * 3);
    rows = malloc(h * sizeof *rows);
    if (!px || !rows) {
        snprintf(c.msg, sizeof c.msg, "out of memory for %u x %u pixels", (unsigned)w, (unsigned)h);
        longjmp(c.jb, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = px + (size_t)y * w * 3;
    png_read_image(png, rows);
    png_read_end(png, NULL);                                 /* a file cut after its pixels lacks IEND */
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    *out = px;
    *W = (int)w;
    *H = (int)h;
    return 0;
}

/* ---- JPEG ---- */

typedef struct jpeg_ctx {
    struct jpeg_error_mgr pub;   /* first: libjpeg sees only this */
    jmp_buf jb;                  /* where error_exit lands, instead of exit() */
    char msg[JMSG_LENGTH_MAX];   /* libjpeg's message */
} jpeg_ctx;

static void jpeg_on_error(j_common_ptr ci)
{
    jpeg_ctx *c = (jpeg_ctx *)ci->err;
    ci->err->format_message(ci, c->msg);
    longjmp(c->jb, 1);
}

static void jpeg_on_message(j_common_ptr ci, int level)
{
    if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(ci);  /* truncated: see the top */
}

/* PIL reads CMYK JPEGs as Adobe's inverted CMYK ("CMYK;I") and converts with
 * cmyk2rgb: R = nk - nk * C / 255 (nk = 255 - K, MULDIV255 rounding). */
static uint8_t muldiv255(int a, int b)
{
    int t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

static int decode_jpeg(const uint8_t *buf, size_t n, uint8_t **out, int *W, int *H, char *why, size_t len)
{
    struct jpeg_decompress_struct ci;
    jpeg_ctx c;
    uint8_t *volatile px = NULL;
    uint8_t *volatile row = NULL;
    ci.err = jpeg_std_error(&c.pub);
    c.pub.error_exit = jpeg_on_error;
    c.pub.emit_message = jpeg_on_message;
    c.msg[0] = 0;
    if (setjmp(c.jb)) {
        jpeg_destroy_decompress(&ci);
        free(px);
        free(row);
        snprintf(why, len, "libjpeg: %s", c.msg);
        return -1;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    if (too_large(ci.image_width, ci.image_height, c.msg, sizeof c.msg)) longjmp(c.jb, 1);
    bool cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
    ci.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;          /* libjpeg-turbo expands grey to RGB itself */
    jpeg_start_decompress(&ci);
    size_t w = ci.output_width, h = ci.output_height, comps = (size_t)ci.output_components;
    px = malloc(w * h * 3);
    row = malloc(w * comps);
    if (!px || !row) {
        snprintf(c.msg, sizeof c.msg, "out of memory for %zu x %zu pixels", w, h);
        longjmp(c.jb, 1);
    }
    while (ci.output_scanline < h) {
        size_t y = ci.output_scanline;
        JSAMPROW r = cmyk ? row : px + y * w * 3;
        if (jpeg_read_scanlines(&ci, &r, 1) != 1) continue;
        if (!cmyk) continue;
        for (size_t x = 0; x < w; x++) {
            const uint8_t *s = row + 4 * x;                  /* Adobe's inverted values: 255 - C ... */
            int nk = s[3];                                   /* 255 - K */
            for (int k = 0; k < 3; k++) px[(y * w + x) * 3 + k] = (uint8_t)(nk - muldiv255(255 - s[k], nk));
        }
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    free(row);
    *out = px;
    *W = (int)w;
    *H = (int)h;
    return 0;
}

int img_decode(const uint8_t *buf, size_t n, uint8_t **px, int *W, int *H, char *why, size_t len)
{
    switch (img_sniff(buf, n)) {
    case IMG_KIND_PNG: return decode_png(buf, n, px, W, H, why, len);
    case IMG_KIND_JPEG: return decode_jpeg(buf, n, px, W, H, why, len);
    default: snprintf(why, len, "neither PNG nor JPEG"); return -1;
    }
}

/* ---- resize and centre crop ---- */

#define PRECISION_BITS (32 - 8 - 2)

/* PIL's precompute_coeffs + normalize_coeffs_8bpc for the outputs [o0, o0 + n) of a
 * resize from in_size to out_size: bounds (n, 2) = first input, count; k (n, ksize). */
static int coeffs(int in_size, int out_size, int o0, int n, int *bounds, int32_t **kk)
{
    double scale = (double)in_size / out_size;
    double fs = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * fs;                               /* the bilinear filter's support is 1 */
    int ksize = (int)ceil(support) * 2 + 1;
    double *pre = malloc((size_t)ksize * sizeof *pre);
    int32_t *k = malloc((size_t)n * ksize * sizeof *k);
    if (!pre || !k) {
        free(pre);
        free(k);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        double center = 0.0 + (o0 + i + 0.5) * scale, ww = 0.0, ss = 1.0 / fs;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double t = fabs((x + xmin - center + 0.5) * ss);
            pre[x] = t < 1.0 ? 1.0 - t : 0.0;
            ww += pre[x];
        }
        for (int x = 0; x < ksize; x++) {
            double v = x < xmax && ww != 0.0 ? pre[x] / ww : 0.0;
            k[i * ksize + x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        bounds[2 * i] = xmin;
        bounds[2 * i + 1] = xmax;
    }
    free(pre);
    *kk = k;
    return ksize;
}

static uint8_t clip8(int32_t v)
{
    if (v >= (1 << PRECISION_BITS << 8)) return 255;
    if (v <= 0) return 0;
    return (uint8_t)(v >> PRECISION_BITS);
}

/* Python's round() of d / 2 for an integer d >= 0: halves go to the even neighbour
 * (torchvision's centre crop offset is int(round((size - crop) / 2.0))). */
static int half_even(int d)
{
    int q = d / 2;
    return d % 2 && q % 2 ? q + 1 : q;
}

/* One dimension of the crop: size n of the resized image, crop c. The resized window
 * [*src, *src + *cnt) lands at [*dst, *dst + *cnt) of the output; a side shorter than
 * the crop is zero-padded as torchvision's center_crop pads ((c - n) / 2 before). */
static void crop_dim(int n, int c, int *src, int *dst, int *cnt)
{
    *src = n >= c ? half_even(n - c) : 0;
    *dst = n >= c ? 0 : (c - n) / 2;
    *cnt = n >= c ? c : n;
}

int img_resize_crop(const uint8_t *src, int w, int h, int S, int crop, uint8_t *dst)
{
    int nw = w, nh = h;
    if (S > 0) {                                             /* torchvision's _compute_resized_output_size */
        int sh = w <= h ? w : h, lg = w <= h ? h : w;
        double nld = (double)S * lg / sh;
        if (nld > 1 << 24) return -1;  /* an aspect ratio no resize can serve (int overflow): refused */
        int nl = (int)nld;
        nw = w <= h ? S : nl;
        nh = w <= h ? nl : S;
    }
    int x0, dx, cw, y0, dy, ch;
    crop_dim(nw, crop, &x0, &dx, &cw);
    crop_dim(nh, crop, &y0, &dy, &ch);
    if (cw < crop || ch < crop) memset(dst, 0, (size_t)crop * crop * 3);
    int *bx = malloc(2 * (size_t)cw * sizeof *bx), *by = malloc(2 * (size_t)ch * sizeof *by);
    int32_t *kx = NULL, *ky = NULL;
    uint8_t *tmp = NULL;
    int rc = -1;
    if (!bx || !by) goto free_all;
    bool horiz = nw != w, vert = nh != h;
    int kxs = horiz ? coeffs(w, nw, x0, cw, bx, &kx) : 0;
    int kys = vert ? coeffs(h, nh, y0, ch, by, &ky) : 0;
    if (kxs < 0 || kys < 0) goto free_all;
    /* input rows the vertical pass reads: [r0, r1) */
    int r0 = vert ? by[0] : y0, r1 = vert ? by[2 * (ch - 1)] + by[2 * (ch - 1) + 1] : y0 + ch;
    for (int i = 0; i < ch && vert; i++) {
        if (by[2 * i] < r0) r0 = by[2 * i];
        if (by[2 * i] + by[2 * i + 1] > r1) r1 = by[2 * i] + by[2 * i + 1];
    }
    tmp = malloc((size_t)(r1 - r0) * cw * 3);                /* (r1 - r0, cw, 3): the horizontal pass */
    if (!tmp) goto free_all;
    for (int y = r0; y < r1; y++) {
        const uint8_t *in = src + (size_t)y * w * 3;
        uint8_t *o = tmp + (size_t)(y - r0) * cw * 3;
        if (!horiz) {
            memcpy(o, in + (size_t)x0 * 3, (size_t)cw * 3);
            continue;
        }
        for (int i = 0; i < cw; i++) {
            const int32_t *k = kx + (size_t)i * kxs;
            const uint8_t *p = in + (size_t)bx[2 * i] * 3;
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int x = 0; x < bx[2 * i + 1]; x++) {
                s0 += p[3 * x] * k[x];
                s1 += p[3 * x + 1] * k[x];
                s2 += p[3 * x + 2] * k[x];
            }
            o[3 * i] = clip8(s0);
            o[3 * i + 1] = clip8(s1);
            o[3 * i + 2] = clip8(s2);
        }
    }
    for (int j = 0; j < ch; j++) {
        uint8_t *o = dst + ((size_t)(dy + j) * crop + dx) * 3;
        if (!vert) {
            memcpy(o, tmp + (size_t)j * cw * 3, (size_t)cw * 3);
            continue;
        }
        const int32_t *k = ky + (size_t)j * kys;
        const uint8_t *base = tmp + (size_t)(by[2 * j] - r0) * cw * 3;
        for (int i = 0; i < cw * 3; i++) {
            int32_t s = 1 << (PRECISION_BITS - 1);
            for (int y = 0; y < by[2 * j + 1]; y++) s += base[(size_t)y * cw * 3 + i] * k[y];
            o[i] = clip8(s);
        }
    }
    rc = 0;
free_all:
    free(bx);
    free(by);
    free(kx);
    free(ky);
    free(tmp);
    return rc;
}
