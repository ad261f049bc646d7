#!/usr/bin/env python3
"""fed_ref - checks of nebula-fed's server checkpoints with h5py and numpy (Debian's).

  fed_ref.py avg BASE CLIENTS_JSON ALL K_0 K_1 ...
      ALL (the global model after one round of every client) equals BASE (the model the
      round started from) plus the sample-weighted mean of the clients' updates K_i - BASE
      (K_i: the checkpoint of the same round with client i alone), over every parameter
      and buffer; the weights are CLIENTS_JSON's "samples". Tolerance: float32 rounding of
      the updates and of the sum, |err| <= 4 eps32 (|BASE| + max_i |K_i - BASE|) + 1e-30.
  fed_ref.py close A B ATOL
      every parameter and buffer of A within ATOL of B (secure aggregation's fixed point).
  fed_ref.py differ A B
      some parameter of A differs from B (the check above can fail).
  fed_ref.py subset IN.h5 OUT.h5 N [random]
      the first N images and labels of an HDF5 image set (a small training set to overfit);
      random: the labels replaced by seeded random ones, which a model can only memorise.
Prints one line, exits 0 when the check holds."""
import json
import sys

import h5py
import numpy as np


def tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        for group in ("params", "buffers"):
            if group in f:
                for name, ds in f[group].items():
                    out[f"{group}/{name}"] = np.array(ds, dtype=np.float64)
    return out


def avg(base, clients_json, whole, *parts):
    w = np.array(json.load(open(clients_json))["samples"], dtype=np.float64)
    if len(w) != len(parts):
        print(f"{clients_json} has {len(w)} clients, {len(parts)} checkpoints given")
        return False
    b, a, ks = tensors(base), tensors(whole), [tensors(p) for p in parts]
    worst, name_at = 0.0, ""
    for name, x0 in b.items():
        ups = [k[name] - x0 for k in ks]
        ref = x0 + sum(wi * u for wi, u in zip(w, ups)) / w.sum()
        scale = np.abs(x0) + np.max(np.abs(np.stack(ups)), axis=0)
        tol = 4 * np.finfo(np.float32).eps * scale + 1e-30
        r = float(np.max(np.abs(a[name] - ref) / tol))
        if r > worst:
            worst, name_at = r, name
    ok = worst <= 1
    print(f"    {'within' if ok else 'beyond'}: worst error {worst:.3g} of the tolerance ({name_at}), {len(b)} tensors, "
          f"weights {w.astype(int).tolist()}")
    return ok


def close(a, b, atol):
    x, y = tensors(a), tensors(b)
    worst = max(float(np.max(np.abs(x[n] - y[n]))) for n in x)
    ok = worst <= float(atol) and x.keys() == y.keys()
    print(f"    {'within' if ok else 'beyond'}: largest difference {worst:.3g} (limit {atol})")
    return ok


def differ(a, b):
    x, y = tensors(a), tensors(b)
    worst = max(float(np.max(np.abs(x[n] - y[n]))) for n in x)
    print(f"largest difference {worst:.3g}")
    return worst > 0


def subset(src, dst, n, labels="true"):
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        g["images"] = f["images"][: int(n)]
        y = np.array(f["labels"][: int(n)])
        if labels == "random":
            y = np.random.RandomState(0).randint(0, 10, size=len(y)).astype(y.dtype)
        g["labels"] = y
    return True


if __name__ == "__main__":
    fn = {"avg": avg, "close": close, "differ": differ, "subset": subset}[sys.argv[1]]
    sys.exit(0 if fn(*sys.argv[2:]) else 1)
