"""Writes the HDF5 image sets of test_data_images with h5py, the way users make them.

    /usr/bin/python3 validation/unit/data_images.py DIR

Pixel (n, y, x, c) = (31 n + 17 y + 5 x + 80 c) mod 256 in every set, so the C test
knows each source image without reading the file itself. Besides the valid sets
(C = 3, C = 1 with one-value attributes, C = 3 with per-channel attributes), one file
per corruption that data_open must refuse with STATUS_INPUT.
"""
import sys

import h5py
import numpy as np

H, W = 6, 8


def pixels(n, h=H, w=W, c=3):
    i, y, x, ch = np.meshgrid(np.arange(n), np.arange(h), np.arange(w), np.arange(c), indexing="ij")
    return ((31 * i + 17 * y + 5 * x + 80 * ch) % 256).astype(np.uint8)


def write(path, images=None, labels=None, attrs=None):
    with h5py.File(path, "w") as f:
        if images is not None:
            d = f.create_dataset("images", data=images)
            for k, v in (attrs or {}).items():
                d.attrs[k] = v
        if labels is not None:
            f.create_dataset("labels", data=labels)


def main(out):
    n = 37
    lab = (3 * np.arange(n)) % 10
    write(f"{out}/set3.h5", pixels(n), lab.astype(np.int64))
    write(f"{out}/set1.h5", pixels(20, c=1), (np.arange(20) % 10).astype(np.int32),
          {"mean": np.array([0.5]), "std": np.array([0.25])})
    write(f"{out}/attrs.h5", pixels(16), (np.arange(16) % 10).astype(np.uint8).reshape(16, 1),
          {"mean": np.array([0.4914, 0.4822, 0.4465]), "std": np.array([0.2470, 0.2435, 0.2616])})
    # Corruptions, one each.
    write(f"{out}/noimages.h5", None, lab)
    write(f"{out}/nolabels.h5", pixels(n), None)
    write(f"{out}/nmismatch.h5", pixels(n), lab[:-1])
    bad = lab.copy()
    bad[7] = 10
    write(f"{out}/badlabel.h5", pixels(n), bad)
    neg = lab.copy()
    neg[3] = -1
    write(f"{out}/neglabel.h5", pixels(n), neg)
    write(f"{out}/floatimages.h5", pixels(n).astype(np.float32), lab)
    write(f"{out}/rank3.h5", pixels(n)[..., 0], lab)
    write(f"{out}/c2.h5", pixels(n, c=2), lab)
    write(f"{out}/rank5.h5", pixels(n)[..., None], lab)
    write(f"{out}/rank6.h5", pixels(n)[..., None, None], lab)
    write(f"{out}/labels5.h5", pixels(n), lab.reshape(n, 1, 1, 1, 1))
    write(f"{out}/floatlabels.h5", pixels(n), lab.astype(np.float64))
    write(f"{out}/badattr.h5", pixels(n), lab, {"mean": np.array([0.5, 0.5])})
    write(f"{out}/zerostd.h5", pixels(n), lab, {"std": np.array([0.2, 0.0, 0.2])})
    with h5py.File(f"{out}/imagesgroup.h5", "w") as f:
        f.create_group("images")
        f.create_dataset("labels", data=lab)
    with open(f"{out}/set3.h5", "rb") as f:
        blob = f.read()
    with open(f"{out}/truncated.h5", "wb") as f:
        f.write(blob[: len(blob) * 3 // 5])


if __name__ == "__main__":
    main(sys.argv[1])
