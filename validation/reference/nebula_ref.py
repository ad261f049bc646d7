"""nebula_ref — shared helpers of the reference-vs-PyTorch checks: read the
safetensors files Nebula writes (numpy only; the format is an 8-byte little-endian
header length, a JSON header, raw data) and compare tensors with the tolerance
|got - ref| <= atol + rtol*|ref|, one line per check."""
import json
import struct
import sys

import numpy as np
import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", f"{name}: dtype {t['dtype']}"
        a, b = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).copy())
    return out, meta


class Checker:
    def __init__(self):
        self.failures = 0

    def close(self, what, got, ref, atol=1e-4, rtol=1e-3):
        got = got.detach().double()
        ref = ref.detach().double()
        if got.shape != ref.shape:
            print(f"FAIL - {what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}")
            self.failures += 1
            return
        lim = atol + rtol * ref.abs()
        ratio = ((got - ref).abs() / lim).max().item() if got.numel() else 0.0
        ok = ratio <= 1.0 and bool(torch.isfinite(got).all())
        print(f"{'ok' if ok else 'FAIL'} - {what} (worst |d|/(atol+rtol|ref|) = {ratio:.3g})")
        self.failures += 0 if ok else 1

    def done(self):
        sys.exit(1 if self.failures else 0)
