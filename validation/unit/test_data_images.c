/* test_data_images — unit test of libcore/data on image sets: HDF5 files made by
 * h5py (validation/unit/data_images.py) and CIFAR-10 binary files written here.
 * Checks labels and normalisation bit for bit, that every random crop / flip is a
 * valid shifted and mirrored copy of its source (pixel equality against the
 * source), C = 1 replication, the file's mean / std attributes, augmentation as a
 * function of (seed, epoch, sample) whatever the world size, synthetic images, and
 * every corruption case with its message.
 *
 * Source pixel (n, c, y, x) = (31 n + 17 y + 5 x + 80 c) mod 256 in every file, so
 * the expected output is computed here without reading the files. Runs without
 * mpirun; ranks are separate loaders in one process. */
#include "data/data.h"  /* before check.h: expect_open_error */
#include "../check.h"

#include <stdint.h>

#define SEED 99

static data_config image_cfg(const char *path, int H, int W, int b, int rank, int size)
{
    return (data_config){ .path = path, .images = true, .H = H, .W = W, .num_classes = 10,
                          .mean = { 0.1f, 0.2f, 0.3f }, .std = { 0.5f, 0.25f, 2.0f }, .micro_batch = b,
                          .accum = 1, .dp_rank = rank, .dp_size = size, .seed = SEED, .shuffle = true };
}

static data_loader *open_ok(test_ctx *t, const data_config *cfg)
{
    data_loader *d = NULL;
    status st = data_open(&d, cfg);
    if (st != STATUS_OK) {
        check(t, false, "%s: data_open -> %s; cannot continue", cfg->path, status_str(st));
        exit(1);
    }
    return d;
}

static uint8_t src_pixel(uint64_t n, int c, int y, int x)
{
    return (uint8_t)((31 * n + 17 * (uint64_t)y + 5 * (uint64_t)x + 80 * (uint64_t)c) % 256);
}

/* The normalisation of data.h in float: (v/255 - mean) / std. */
static float norm(const float mean[3], const float std[3], int c, int v)
{
    return ((float)v / 255.0f - mean[c]) / std[c];
}

/* out (3, H, W) == source n (C channels; C = 1 replicated) cropped at (oy, ox) from
 * the image zero-padded by p, mirrored when f — exactly. */
static bool is_transform(const float *out, uint64_t n, int C, int H, int W, int p, int oy, int ox, int f,
                         const float mean[3], const float std[3])
{
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                int sy = y + oy - p, sx = (f ? W - 1 - x : x) + ox - p;
                int v = sy >= 0 && sy < H && sx >= 0 && sx < W ? src_pixel(n, C == 1 ? 0 : c, sy, sx) : 0;
                if (out[((size_t)c * H + (size_t)y) * (size_t)W + (size_t)x] != norm(mean, std, c, v)) return false;
            }
    return true;
}

/* Index oy * (2p+1) * 2 + ox * 2 + f of the transform out is, or -1. */
static int find_transform(const float *out, uint64_t n, int C, int H, int W, int p, const float mean[3],
                          const float std[3])
{
    for (int oy = 0; oy <= 2 * p; oy++)
        for (int ox = 0; ox <= 2 * p; ox++)
            for (int f = 0; f < 2; f++)
                if (is_transform(out, n, C, H, W, p, oy, ox, f, mean, std)) return (oy * (2 * p + 1) + ox) * 2 + f;
    return -1;
}

/* Runs `steps` steps of d and checks every image: labels, and the exact
 * (augmented) source pixels; counts the transforms seen. */
static bool run_images(data_loader *d, const data_config *cfg, int C, int steps, const float mean[3],
                       const float std[3], int (*label_of)(uint64_t), int *seen)
{
    const int b = cfg->micro_batch, H = cfg->H, W = cfg->W;
    float *img = malloc(sizeof(float) * (size_t)b * 3 * (size_t)(H * W));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)b);
    uint64_t *s = malloc(sizeof(uint64_t) * (size_t)b);
    bool ok = true;
    for (int step = 0; step < steps; step++, data_advance(d)) {
        ok &= data_next_images(d, 0, img, lab) == STATUS_OK;
        data_batch_samples(d, 0, s);
        for (int i = 0; i < b; i++) {
            const float *out = img + (size_t)i * 3 * (size_t)(H * W);
            int k = cfg->pad_crop || cfg->flip ? find_transform(out, s[i], C, H, W, cfg->pad_crop, mean, std)
                                               : (is_transform(out, s[i], C, H, W, 0, 0, 0, 0, mean, std) ? 0 : -1);
            ok &= k >= 0 && lab[i] == label_of(s[i]);
            if (k >= 0 && seen) seen[k]++;
        }
    }
    free(img);
    free(lab);
    free(s);
    return ok;
}

static int label_set3(uint64_t n) { return (int)(3 * n % 10); }
static int label_mod10(uint64_t n) { return (int)(n % 10); }
static int label_cifar(uint64_t n) { return (int)((7 * n + 1) % 10); }

static void test_hdf5(test_ctx *t)
{
    char path[256];
    data_config cfg = image_cfg(scratch_path(t, "set3.h5", path, sizeof path), 6, 8, 5, 0, 1);
    data_loader *d = open_ok(t, &cfg);
    check(t, data_get_format(d) == DATA_FORMAT_HDF5_IMAGES && data_samples(d) == 37 && data_steps_per_epoch(d) == 7,
          "set3.h5: HDF5, 37 images, 7 steps of 5 per epoch (drop_last)");
    check(t, run_images(d, &cfg, 3, 20, cfg.mean, cfg.std, label_set3, NULL),
          "set3.h5: 20 steps: labels and (x/255 - mean)/std of every pixel exact, NCHW");
    data_free(d);

    cfg.pad_crop = 2;
    cfg.flip = true;
    d = open_ok(t, &cfg);
    int seen[50] = { 0 }, distinct = 0, flips = 0;
    check(t, run_images(d, &cfg, 3, 40, cfg.mean, cfg.std, label_set3, seen),
          "set3.h5, pad 2 + flip: every image is its source shifted in [-2, 2]^2 (zero fill) and maybe mirrored");
    for (int k = 0; k < 50; k++) {
        distinct += seen[k] > 0;
        flips += k % 2 ? seen[k] : 0;
    }
    check(t, distinct >= 40 && flips > 60 && flips < 140, "200 draws: %d of 50 (offset, flip) cases, %d flipped",
          distinct, flips);
    data_free(d);

    /* The same step at 1 rank x 4 and 2 ranks x 2: the same augmented images. */
    data_config c1 = cfg, c2a = cfg, c2b = cfg;
    c1.micro_batch = 4;
    c2a.micro_batch = c2b.micro_batch = 2;
    c2a.dp_size = c2b.dp_size = 2;
    c2b.dp_rank = 1;
    data_loader *l1 = open_ok(t, &c1), *l2a = open_ok(t, &c2a), *l2b = open_ok(t, &c2b);
    const size_t per = 3 * 6 * 8;
    float a[4 * 3 * 48], b[4 * 3 * 48];
    int32_t la[4], lb[4];
    bool same = true;
    for (int step = 0; step < 30; step++) {
        same &= data_next_images(l1, 0, a, la) == STATUS_OK;
        same &= data_next_images(l2a, 0, b, lb) == STATUS_OK && data_next_images(l2b, 0, b + 2 * per, lb + 2) == STATUS_OK;
        same &= !memcmp(a, b, sizeof a) && !memcmp(la, lb, sizeof la);
        data_advance(l1);
        data_advance(l2a);
        data_advance(l2b);
    }
    check(t, same, "augmented images and labels of 1 rank x 4 equal those of 2 ranks x 2 (30 steps)");
    data_free(l1);
    data_free(l2a);
    data_free(l2b);

    /* One sample in two epochs: augmentation is keyed by the epoch too. */
    d = open_ok(t, &cfg);
    int differs = 0, both = 0;
    uint64_t s0[5];
    float img[5 * 3 * 48];
    int found[2][37];
    for (int n = 0; n < 37; n++) found[0][n] = found[1][n] = -2;  /* -2: not drawn (dropped tail) */
    for (int e = 0; e < 2; e++) {
        data_state st = { (uint64_t)e, 0 };
        data_set_state(d, &st);
        for (int step = 0; step < 7; step++, data_advance(d)) {
            data_next_images(d, 0, img, NULL);
            data_batch_samples(d, 0, s0);
            for (int i = 0; i < 5; i++)
                found[e][s0[i]] = find_transform(img + (size_t)i * per, s0[i], 3, 6, 8, 2, cfg.mean, cfg.std);
        }
    }
    bool valid = true;
    for (int n = 0; n < 37; n++) {
        if (found[0][n] == -2 || found[1][n] == -2) continue;
        both++;
        differs += found[0][n] != found[1][n];
        valid &= found[0][n] >= 0 && found[1][n] >= 0;
    }
    check(t, valid && both >= 33 && differs > both / 2, "epochs 0 and 1 draw other crops / flips for %d of the %d "
          "images read in both", differs, both);
    data_free(d);
}

static void test_channels(test_ctx *t)
{
    char path[256];
    data_config cfg = image_cfg(scratch_path(t, "set1.h5", path, sizeof path), 6, 8, 4, 0, 1);
    cfg.pad_crop = 1;
    cfg.flip = true;
    data_loader *d = open_ok(t, &cfg);
    const float m1[3] = { 0.5f, 0.5f, 0.5f }, s1[3] = { 0.25f, 0.25f, 0.25f };
    check(t, run_images(d, &cfg, 1, 10, m1, s1, label_mod10, NULL),
          "set1.h5 (C = 1): the gray image in all 3 channels, normalised by the file's 1-value mean/std");
    char line[512];
    data_describe(d, line, sizeof line);
    check(t, strstr(line, "replicated to 3") && strstr(line, "(file)"), "describe: %s", line);
    data_free(d);

    cfg = image_cfg(scratch_path(t, "attrs.h5", path, sizeof path), 6, 8, 4, 0, 1);
    d = open_ok(t, &cfg);
    const float m3[3] = { 0.4914f, 0.4822f, 0.4465f }, s3[3] = { 0.2470f, 0.2435f, 0.2616f };
    check(t, run_images(d, &cfg, 3, 8, m3, s3, label_mod10, NULL),
          "attrs.h5: per-channel mean/std attributes win over the config; (N, 1) uint8 labels");
    data_free(d);
}

/* N CIFAR-10 records: label (7n + 1) mod 10, then CHW pixels. */
static void write_cifar(const char *path, int N, long cut, int bad_at, uint8_t bad)
{
    size_t n = (size_t)N * DATA_CIFAR10_RECORD;
    uint8_t *buf = malloc(n);
    for (int i = 0; i < N; i++) {
        uint8_t *r = buf + (size_t)i * DATA_CIFAR10_RECORD;
        r[0] = i == bad_at ? bad : (uint8_t)label_cifar((uint64_t)i);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++) r[1 + c * 1024 + y * 32 + x] = src_pixel((uint64_t)i, c, y, x);
    }
    write_bytes(path, buf, (size_t)((long)n - cut));
    free(buf);
}

static void test_cifar(test_ctx *t)
{
    char path[256];
    write_cifar(scratch_path(t, "cifar.bin", path, sizeof path), 25, 0, -1, 0);
    data_config cfg = image_cfg(path, 32, 32, 3, 0, 1);
    data_loader *d = open_ok(t, &cfg);
    check(t, data_get_format(d) == DATA_FORMAT_CIFAR10 && data_samples(d) == 25, "cifar.bin: CIFAR-10, 25 images");
    check(t, run_images(d, &cfg, 3, 12, cfg.mean, cfg.std, label_cifar, NULL),
          "cifar.bin: labels and normalised CHW pixels exact");
    data_free(d);
    cfg.pad_crop = 4;
    cfg.flip = true;
    d = open_ok(t, &cfg);
    check(t, run_images(d, &cfg, 3, 12, cfg.mean, cfg.std, label_cifar, NULL),
          "cifar.bin, pad 4 + flip (the CIFAR recipe): valid shifted / mirrored copies");
    data_free(d);
}

static void test_synthetic(test_ctx *t)
{
    data_config cfg = image_cfg("synthetic", 16, 16, 3, 0, 1);
    cfg.pad_crop = 2;
    cfg.flip = true;
    data_loader *d = open_ok(t, &cfg), *e = open_ok(t, &cfg);
    cfg.seed = SEED + 1;
    data_loader *f = open_ok(t, &cfg);
    float a[3 * 768], b[3 * 768], c[3 * 768];
    int32_t la[3], lb[3], lc[3];
    bool same = true, range = true, differ = false;
    for (int s = 0; s < 4; s++) {
        same &= data_next_images(d, 0, a, la) == STATUS_OK && data_next_images(e, 0, b, lb) == STATUS_OK;
        data_next_images(f, 0, c, lc);
        same &= !memcmp(a, b, sizeof a) && !memcmp(la, lb, sizeof la);
        differ |= memcmp(a, c, sizeof a) != 0;
        for (int i = 0; i < 3; i++) range &= la[i] >= 0 && la[i] < 10;
        for (int i = 0; i < 3 * 768; i++) range &= a[i] >= norm(cfg.mean, cfg.std, i / 256 % 3, 0) &&
                                                   a[i] <= norm(cfg.mean, cfg.std, i / 256 % 3, 255);
        data_advance(d);
        data_advance(e);
        data_advance(f);
    }
    check(t, data_samples(d) == DATA_SYNTHETIC_SAMPLES && same && differ,
          "synthetic images: 2^20 samples, a function of the seed");
    check(t, range, "synthetic images: labels in [0, 10), values inside the normalised byte range");
    data_free(d);
    data_free(e);
    data_free(f);
}

static void test_corrupt(test_ctx *t)
{
    char p[256];
    data_config cfg = image_cfg(p, 6, 8, 2, 0, 1);
    struct { const char *file, *name, *text1, *text2; } cases[] = {
        { "noimages.h5", "missing /images", "no dataset /images", "needs /images uint8 (N, H, W, C)" },
        { "nolabels.h5", "missing /labels", "no dataset /labels", "/labels integer (N)" },
        { "nmismatch.h5", "N mismatch", "/labels has 36 entries but /images has 37 images", NULL },
        { "badlabel.h5", "label out of range", "label 10 of image 7 (/labels)", "valid range [0, 10)" },
        { "neglabel.h5", "negative label", "label -1 of image 3", "[0, 10)" },
        { "floatimages.h5", "float pixels", "/images is float32; expected uint8", NULL },
        { "rank3.h5", "(N, H, W) images", "/images has 3 dimensions", "expected (N, H, W, C)" },
        { "c2.h5", "2 channels", "/images has 4 dimensions (last 2)", "C = 1 or 3" },
        { "rank5.h5", "5-D images", "/images has 5 dimensions; expected 4: (N, H, W, C)", NULL },
        { "rank6.h5", "6-D images", "/images has 6 dimensions; expected 4: (N, H, W, C)", NULL },
        { "labels5.h5", "5-D labels", "/labels has 5 dimensions; expected 1: (N), or 2: (N, 1)", NULL },
        { "floatlabels.h5", "float labels", "/labels is float64; expected integers", NULL },
        { "badattr.h5", "2-value mean attribute", "attribute mean of /images has 2 values; expected 3", NULL },
        { "zerostd.h5", "zero std attribute", "channel 1", "std must be finite and > 0" },
        { "imagesgroup.h5", "/images is a group", "/images exists but is not a readable dataset", NULL },
        { "truncated.h5", "truncated HDF5 file", "truncated", NULL },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        scratch_path(t, cases[k].file, p, sizeof p);
        expect_open_error(t, &cfg, STATUS_INPUT, cases[k].name, cases[k].text1, cases[k].text2, NULL);
    }
    scratch_path(t, "set3.h5", p, sizeof p);
    data_config big = image_cfg(p, 32, 32, 2, 0, 1);
    expect_open_error(t, &big, STATUS_INPUT, "H x W differs from the model's", "/images are 6x8 but the model takes 32x32",
                      "not resized", NULL);
    data_config many = image_cfg(p, 6, 8, 10, 1, 4);
    expect_open_error(t, &many, STATUS_INPUT, "too few images", "37 images, fewer than one global batch of 40",
                      "micro-batch 10 x accumulation 1 x 4 ranks", NULL);
    data_config nostd = cfg;
    nostd.std[1] = 0;
    expect_open_error(t, &nostd, STATUS_INPUT, "config std 0", "normalisation of channel 1", "std 0", NULL);
    data_config tok = { .path = p, .vocab_size = 256, .T = 8, .micro_batch = 1, .accum = 1, .dp_size = 1 };
    expect_open_error(t, &tok, STATUS_INPUT, "HDF5 file for a token model", "is an HDF5 file",
                      "the model takes tokens", NULL);

    data_config cc = image_cfg(scratch_path(t, "cbad.bin", p, sizeof p), 32, 32, 1, 0, 1);
    write_cifar(p, 3, 5, -1, 0);
    expect_open_error(t, &cc, STATUS_INPUT, "truncated CIFAR-10 file", "9214 bytes are not a whole number of CIFAR-10 "
                      "records of 3073 bytes", "2 records and 3068 bytes left over", NULL);
    write_cifar(p, 6, 0, 4, 12);
    expect_open_error(t, &cc, STATUS_INPUT, "CIFAR-10 label out of range", "label 12 of image 4",
                      "valid range [0, 10)", NULL);
    write_cifar(p, 6, 0, -1, 0);
    cc.H = cc.W = 28;
    expect_open_error(t, &cc, STATUS_INPUT, "CIFAR-10 at 28x28", "CIFAR-10 images are 32x32 but the model takes 28x28",
                      NULL);
}

int main(void)
{
    test_ctx t = { 0 };
    scratch_dir(&t, "data-images");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 validation/unit/data_images.py %s", t.dir);
    int rc = system(cmd);
    if (!check(&t, rc == 0, "h5py wrote the test sets (exit %d; python3-h5py and python3-numpy are needed)", rc)) {
        scratch_free(&t);
        return 1;
    }
    test_hdf5(&t);
    test_channels(&t);
    test_cifar(&t);
    test_synthetic(&t);
    test_corrupt(&t);
    scratch_free(&t);
    printf("%s: %d failure(s)\n", t.failures ? "FAILED" : "passed", t.failures);
    return t.failures ? 1 : 0;
}
