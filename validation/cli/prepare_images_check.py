"""prepare_images_check.py — the ImageFolder tree of test_prepare_images.sh and the check of
nebula-train prepare --images against torchvision.

  gen DIR              writes the tree: 3 classes, PNG (RGB, grey, palette, RGBA, 16-bit RGB,
                       1-bit grey) and JPEG (RGB, grey, CMYK, one named .png), sizes that
                       shrink, enlarge and keep the image; a README beside the classes, a
                       text file and a hidden image inside one
  bench DIR N          N JPEGs of 500x375 (ImageNet's typical size, quality 90) in 4 classes,
                       for the throughput table of docs/data.md
  peer DIR S H W      the peer of the throughput table: torchvision's ImageFolder + Resize(S) +
                       CenterCrop(H) into one uint8 array, W DataLoader workers (0: this
                       process); images/s, median of 3 (the output is not written anywhere)
  check OUT DIR S H    compares OUT with ImageFolder(DIR) + Resize(S) + CenterCrop(H)
                       (S = 0: CenterCrop only): classes, labels and every pixel

The tolerance on pixels is 0 and is derived, not chosen: data_decode.c runs Pillow's own
resample (the same double-precision weights in the same order, rounded to the same 22-bit
fixed point, integer sums, the same rounding and clipping, horizontal pass first), and the
JPEGs are decoded by the same libjpeg-turbo (Debian's libjpeg62-turbo, PIL's too) with the
same defaults (ISLOW DCT, fancy upsampling). Nothing in either path is left to floating-point
evaluation order, so a single differing byte is a bug.
"""
import os
import struct
import sys
import zlib

import h5py
import numpy as np
from PIL import Image


def png16_rgb(path, a):
    """A 16-bit RGB PNG (PIL writes none): a (H, W, 3) uint16, filter 0 rows."""
    h, w, _ = a.shape
    raw = b"".join(b"\x00" + a[y].astype(">u2").tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def smooth(rng, h, w, c):
    """Gradients plus noise: edges for the resample, noise against lucky matches."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256, (x * y) % 256], -1)[..., :c]
    return np.clip(base + rng.integers(-40, 41, (h, w, c)), 0, 255).astype(np.uint8)


def gen(root):
    rng = np.random.default_rng(7)
    for d in ("cat", "dog", "zebra/sub"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    j = lambda *p: os.path.join(root, *p)
    Image.fromarray(smooth(rng, 30, 40, 3)).save(j("cat", "a_rgb.png"))
    Image.fromarray(smooth(rng, 64, 50, 1)[..., 0]).save(j("cat", "b_grey.png"))
    Image.fromarray(smooth(rng, 47, 33, 3)).convert("P", palette=Image.ADAPTIVE).save(j("cat", "c_palette.png"))
    Image.fromarray(smooth(rng, 48, 64, 4)).save(j("cat", "d_rgba.png"))
    png16_rgb(j("cat", "e_rgb16.png"), rng.integers(0, 65536, (41, 52, 3)).astype(np.uint16))
    Image.fromarray(smooth(rng, 32, 32, 3)).save(j("cat", "f_exact.png"))         # no resize at S = 0 or 32
    Image.fromarray(rng.integers(0, 2, (37, 29), dtype=np.uint8) * 255).convert("1").save(j("cat", "g_1bit.png"))
    Image.fromarray(smooth(rng, 60, 80, 3)).save(j("dog", "a_photo.jpg"), quality=90)
    Image.fromarray(smooth(rng, 55, 37, 1)[..., 0]).save(j("dog", "b_grey.jpg"), quality=85)
    Image.fromarray(smooth(rng, 200, 300, 3)).save(j("dog", "c_big.jpg"), quality=80)  # strong antialiasing
    Image.fromarray(smooth(rng, 45, 45, 4)).convert("CMYK").save(j("dog", "d_cmyk.jpg"), quality=90)
    Image.fromarray(smooth(rng, 20, 25, 3)).save(j("zebra", "a_small.jpg"), quality=95)  # enlarged
    Image.fromarray(smooth(rng, 32, 32, 3)).save(j("zebra", "b_exact.jpg"), quality=95)
    Image.fromarray(smooth(rng, 70, 31, 3)).save(j("zebra", "c_jpeg_named.png"), "JPEG")  # kind from the bytes
    Image.fromarray(smooth(rng, 33, 34, 3)).save(j("zebra", "sub", "a_nested.png"))
    Image.fromarray(smooth(rng, 33, 34, 3)).save(j("zebra", ".hidden.png"))
    with open(j("README.md"), "w") as f:
        f.write("not a class\n")
    with open(j("dog", "notes.txt"), "w") as f:
        f.write("not an image\n")


def reference(root, S, H):
    import torchvision
    from torchvision import transforms as T
    tf = T.Compose(([T.Resize(S)] if S else []) + [T.CenterCrop(H)])
    ok = lambda p: not os.path.basename(p).startswith(".") and p.lower().endswith((".png", ".jpg"))
    ds = torchvision.datasets.ImageFolder(root, transform=tf, is_valid_file=ok)
    imgs = np.stack([np.asarray(ds[i][0]) for i in range(len(ds))])
    return ds.classes, np.array(ds.targets), imgs, [p for p, _ in ds.samples]


def check(out, root, S, H):
    classes, labels, imgs, paths = reference(root, int(S), int(H))
    bad = 0

    def report(name, good, detail=""):
        nonlocal bad
        print(("ok - " if good else "FAIL - ") + name + (f": {detail}" if detail and not good else ""))
        bad += not good

    with h5py.File(out, "r") as f:
        got_classes = [c.decode() for c in f["classes"][()]]
        report("class names in sorted order", got_classes == classes, f"{got_classes} vs {classes}")
        report("labels exact", np.array_equal(f["labels"][()], labels), f"{f['labels'][()]} vs {labels}")
        g = f["images"][()]
        report(f"images shape {imgs.shape}", g.shape == imgs.shape, str(g.shape))
        if g.shape == imgs.shape:
            diff = np.abs(g.astype(int) - imgs.astype(int)).reshape(len(g), -1).max(1)
            worst = ", ".join(f"{os.path.relpath(paths[i], root)} {diff[i]}" for i in np.nonzero(diff)[0][:5])
            report(f"pixels of {len(g)} images equal torchvision's (tolerance 0, derived in the header)",
                   diff.max() == 0, worst)
            m = imgs.reshape(-1, 3).astype(np.float64) / 255
            report("mean/std attributes of the stored pixels",
                   np.allclose(f["images"].attrs["mean"], m.mean(0), atol=1e-6)
                   and np.allclose(f["images"].attrs["std"], m.std(0), atol=1e-6))
    return bad


def bench(root, n):
    rng = np.random.default_rng(1)
    tiles = [smooth(rng, 375, 500, 3) for _ in range(8)]
    for i in range(int(n)):
        d = os.path.join(root, f"class{i % 4}")
        os.makedirs(d, exist_ok=True)
        Image.fromarray(np.roll(tiles[i % 8], i, axis=1)).save(os.path.join(d, f"{i:06d}.jpg"), quality=90)


def peer(root, S, H, workers):
    import time
    import torch
    import torchvision
    from torchvision import transforms as T
    tf = T.Compose([T.Resize(S), T.CenterCrop(H), T.PILToTensor()])
    ds = torchvision.datasets.ImageFolder(root, transform=tf)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        dl = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers)
        out = torch.cat([x for x, _ in dl])
        times.append(time.perf_counter() - t0)
    t = sorted(times)[1]
    print(f'{{"images": {len(out)}, "workers": {workers}, "seconds": {t:.3f}, "images_per_s": {len(out) / t:.1f}}}')


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif sys.argv[1] == "bench":
        bench(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "peer":
        peer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(1 if check(*sys.argv[2:6]) else 0)
