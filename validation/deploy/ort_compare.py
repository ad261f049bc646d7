#!/usr/bin/env python3
"""Compare a nebula-infer output with ONNX Runtime's on the same ONNX file and input.

  ort_compare.py MODEL.onnx OUTPUT.npy [--input NAME=FILE.npy ...] [--rtol R] [--ref REF.npy]

Runs ONNX Runtime's CPU provider (one thread, every graph optimisation) and checks
max|nebula - ort| <= rtol * max|ort| (rtol 1e-4 by default: the issue's bound, relative to
the output's scale, because single elements near zero have no meaningful relative error).
With --ref it checks the same bound against a stored reference (PyTorch's output) too.
Prints one line per check; exits 1 when one fails, 77 when onnxruntime is missing."""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("output")
    ap.add_argument("--input", action="append", default=[])
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--ref")
    a = ap.parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        print("SKIP: onnxruntime is not installed (make deps-test puts it in build/venv)")
        sys.exit(77)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for spec in a.input:
        name, path = spec.split("=", 1)
        feeds[name] = np.load(path)
    ort_out = sess.run(None, feeds)[0]
    got = np.load(a.output)
    ok = True
    refs = [("onnxruntime", ort_out)] + ([("reference", np.load(a.ref))] if a.ref else [])
    for name, ref in refs:
        if got.shape != ref.shape:
            print(f"FAIL {a.model}: shape {got.shape} vs {name} {ref.shape}")
            ok = False
            continue
        scale = float(np.max(np.abs(ref))) or 1.0
        diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
        good = diff <= a.rtol * scale
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {a.model} vs {name}: max|diff| {diff:.3g} = {diff / scale:.3g} of max|{name}| "
              f"{scale:.3g} (bound {a.rtol:g})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
