#!/usr/bin/python3
"""ckpt_h5py — a Nebula checkpoint read with h5py alone, as a PyTorch user would.

Checks the file `test_ckpt write DIR` makes (step 100, seed 7; the table and the value
formula are those of validation/mpi/test_ckpt.c): the root attributes; every
/<group>/<name> has torch's shape, float32 and the values written; every dataset's
"checksum" attribute is zlib.crc32 of its bytes; each row of /rank/<blob> is that rank's
(row_checksums included). With a second file, both hold the same datasets and the same
attributes on every object (the asynchronous writer against the synchronous one).

Usage: ckpt_h5py.py STATE.H5 [OTHER_STATE.H5]
"""
import sys
import zlib

import h5py
import numpy as np

PARAMS = [("wte.weight", (37, 24)), ("h.0.ln_1.weight", (24,)), ("h.0.attn.c_attn.weight", (24, 72)),
          ("conv1.weight", (8, 3, 3, 3)), ("logit_scale", ()), ("big.weight", (600, 1000))]
BUFFERS = [("bn1.running_mean", (8,)), ("bn1.running_var", (8,)), ("bn1.num_batches_tracked", ())]
GROUPS = [("params", PARAMS), ("optim/m", PARAMS), ("optim/v", PARAMS), ("buffers", BUFFERS)]
SEED, STEP, LOADER_BYTES = 7, 100, 40
RNG_STATE = np.dtype([("seed", "<u8"), ("step", "<u8"), ("pos", "<u8"), ("rank", "<u4"), ("purpose", "<u4")])

failures = 0


def check(ok, what, why=""):
    global failures
    print(("ok - " if ok else "FAIL - ") + what + ("" if ok or not why else ": " + why))
    failures += not ok


def value(g, t, n):
    """test_ckpt.c's value(): exact in float32."""
    i = np.arange(n, dtype=np.int64)
    v = (i * 7 + t * 1009 + g * 100003 + SEED * 13) % 65521
    return v.astype(np.float32) * np.float32(0.25) - np.float32(4096.0)


def crc(a):
    return zlib.crc32(np.ascontiguousarray(a).tobytes()) & 0xFFFFFFFF


def check_file(path):
    with h5py.File(path, "r") as f:
        a = f.attrs
        ws = int(a["world_size"])
        ok = (a["magic"] == "NEBULA-CKPT" and int(a["format_version"]) == 2 and int(a["step"]) == STEP
              and a["model"] == "tiny-test" and "[model]" in a["config"] and a["checksum_algorithm"] == "crc32"
              and a["nebula_version"] != "" and int(a["ranks_per_node"]) >= 1
              and int(a["parallel_dp"]) * int(a["parallel_tp"]) * int(a["parallel_pp"]) == ws
              and int(a["zero_stage"]) in (0, 1))
        check(ok, "root attributes", repr(dict(a)))
        bad = []
        for g, (group, table) in enumerate(GROUPS):
            if "table_hash" not in f[group].attrs:
                bad.append(group + " has no table_hash")
            for t, (name, shape) in enumerate(table):
                ds = f[f"/{group}/{name}"]
                data = ds[()]
                want = value(g, t, int(np.prod(shape))).reshape(shape)
                if ds.shape != shape or ds.dtype != np.float32 or ds.attrs["dtype"] != "float32":
                    bad.append(f"{ds.name}: {ds.shape} {ds.dtype}")
                elif not np.array_equal(np.asarray(data), want):
                    bad.append(f"{ds.name}: values")
                elif int(ds.attrs["checksum"]) != crc(data):
                    bad.append(f"{ds.name}: checksum")
        check(not bad, "h5py reads every tensor with torch's shape, its values and crc32 checksum", ", ".join(bad))
        loader, rng = f["/rank/loader"], f["/rank/rng"]
        rows = loader[()]
        want = np.array([[(r * 31 + j * 7 + SEED) & 0xFF for j in range(LOADER_BYTES)] for r in range(ws)], np.uint8)
        states = rng[()].view(RNG_STATE).reshape(ws)
        ok = (loader.shape == (ws, LOADER_BYTES) and np.array_equal(rows, want)
              and int(loader.attrs["checksum"]) == crc(rows)
              and [int(c) for c in loader.attrs["row_checksums"]] == [crc(rows[r]) for r in range(ws)]
              and all(int(s["rank"]) == r and int(s["pos"]) == r + 3 and int(s["seed"]) == 1234 + SEED
                      and int(s["step"]) == SEED for r, s in enumerate(states)))
        check(ok, f"per-rank rows of /rank/loader and /rank/rng belong to ranks 0..{ws - 1}")


def objects(f):
    names = ["/"]
    f.visit(lambda n: names.append("/" + n))
    return names


def attrs_equal(x, y):
    if sorted(x.keys()) != sorted(y.keys()):
        return False
    return all(np.array_equal(np.asarray(x[k]), np.asarray(y[k])) for k in x.keys())


def compare(p, q):
    with h5py.File(p, "r") as f, h5py.File(q, "r") as g:
        bad = []
        if objects(f) != objects(g):
            bad.append("different objects")
        for name in objects(f):
            if name not in g:
                continue
            if not attrs_equal(f[name].attrs, g[name].attrs):
                bad.append(name + " attributes")
            if isinstance(f[name], h5py.Dataset) and not np.array_equal(f[name][()], g[name][()]):
                bad.append(name + " data")
        check(not bad, "async file equals the sync file: objects, data and attributes", ", ".join(bad[:5]))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    check_file(sys.argv[1])
    if len(sys.argv) == 3:
        check_file(sys.argv[2])
        compare(sys.argv[1], sys.argv[2])
    sys.exit(1 if failures else 0)
