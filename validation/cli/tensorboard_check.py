#!/usr/bin/env python3
"""tensorboard_check — RUN_DIR/tb read back with TensorBoard's own reader (the tensorboard
package of build/venv), against RUN_DIR/metrics.jsonl and the run's checkpoints.

  - one event file per launch, named events.out.tfevents.<10-digit seconds>.<host>.<pid>.<n>,
    in name order = launch order; every record's framing checked with TensorBoard's
    masked CRC-32C; the first event of each is file_version "brain.Event:2";
  - scalars: for every train and eval record of launch k, each numeric key but step (and
    the elapsed_s and launch that every record carries) is in file k as the scalar
    "<kind>/<key>" at the record's step with the record's value rounded to float32,
    exactly, and the file holds no other scalar; DGC-Pro's train/dgc_* among them;
    EventAccumulator over the directory sees the same (tag, step, value) triples;
  - histograms: grad/<layer> and weight/<layer> of every layer at each step the grad_hist
    records name; each histogram's counts sum to its num, which is the layer's element
    count from the checkpoint's /params datasets (h5py); bucket limits ascending;
  - the weight histograms of the last step equal, bucket for bucket, TensorFlow's default
    histogram of that step's checkpointed weights computed here with numpy;
  - grad_hist records: edges -10 .. 2 in halves, 24 counts, zero + below + sum(counts) +
    above == count == the checkpoint's count per layer.

Usage: tensorboard_check.py RUN_DIR LAUNCHES (prints one line per check, exit 1 on a failure)
"""
import glob
import json
import os
import re
import socket
import struct
import sys

import h5py
import numpy as np
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

run, launches = sys.argv[1], int(sys.argv[2])
STAMP = {"step", "elapsed_s", "launch"}  # numbers every record carries (docs/metrics.md): not scalars
failures = 0


def check(ok, what):
    global failures
    print(f"{'ok' if ok else 'FAIL'} - {what}")
    failures += not ok
    return ok


def f32(x):
    return float(np.float32(x))


def framing_ok(path):
    """Every record's length and data CRC, with TensorBoard's masked CRC-32C."""
    data, at, n = open(path, "rb").read(), 0, 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[at + 8:at + 12])
        body = data[at + 12:at + 12 + length]
        (dcrc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if hcrc != masked_crc32c(header) or dcrc != masked_crc32c(body) or len(body) != length:
            return False, n
        at += 16 + length
        n += 1
    return True, n


records = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
files = sorted(glob.glob(f"{run}/tb/events.out.tfevents.*"))
pattern = re.compile(r"events\.out\.tfevents\.\d{10}\.%s\.\d+\.\d+$" % re.escape(socket.gethostname()))
check(len(files) == launches and all(pattern.search(os.path.basename(f)) for f in files),
      f"{launches} event files in RUN_DIR/tb, one per launch, named events.out.tfevents.<time>.<host>.<pid>.<n>: "
      f"{[os.path.basename(f) for f in files]}")

# the layers' element counts, from the last checkpoint's parameter datasets
last_ckpt = sorted(glob.glob(f"{run}/ckpt/step_*/state.h5"))[-1]
with h5py.File(last_ckpt, "r") as h5:
    params = {name: np.asarray(h5["params"][name], dtype=np.float32) for name in h5["params"]}
ckpt_step = int(re.search(r"step_(\d+)", last_ckpt).group(1))


def layer_params(layer):
    """The tensors of a layer name: the dotted prefix ('h.0') or first components joined ('wte+wpe')."""
    if "+" in layer:
        parts = layer.split("+")
        return [n for n in params if n.split(".")[0] in parts]
    return [n for n in params if n.startswith(layer + ".")]


def layer_count(layer):
    return sum(params[n].size for n in layer_params(layer))


tf_limits = []  # TensorFlow's default histogram (histogram.cc), as the numpy reference
v = 1e-12
while v < 1e20:
    tf_limits.append(v)
    v *= 1.1
tf_limits = [-x for x in reversed(tf_limits + [sys.float_info.max])] + [0.0] + tf_limits + [sys.float_info.max]


def tf_histogram(values):
    """(bucket_limit, bucket) as TensorFlow's EncodeToProto writes them: empty runs merged."""
    counts = np.bincount(np.minimum(np.searchsorted(tf_limits, values, side="right"), len(tf_limits) - 1),
                         minlength=len(tf_limits))
    out, i = [], 0
    while i < len(counts):
        end, c = tf_limits[i], counts[i]
        i += 1
        if c == 0:
            while i < len(counts) and counts[i] == 0:
                end, c = tf_limits[i], counts[i]
                i += 1
        out.append((end, float(c)))
    return [e for e, _ in out], [c for _, c in out]


all_scalars, hist_steps = set(), set()
for k, path in enumerate(files, 1):
    ok, n = framing_ok(path)
    check(ok and n > 1, f"launch {k}: all {n} records framed right (TensorBoard's masked CRC-32C of length and data)")
    events = [event_pb2.Event.FromString(b) for b in event_file_loader.RawEventFileLoader(path).Load()]
    check(len(events) == n and events[0].file_version == "brain.Event:2",
          f"launch {k}: TensorBoard's reader reads the {n} events, the first file_version brain.Event:2")
    got, histos = [], []
    for e in events[1:]:
        for val in e.summary.value:
            if val.HasField("histo"):
                histos.append((val.tag, e.step, val.histo))
            else:
                got.append((val.tag, e.step, val.simple_value))
    want = [(f"{r['kind']}/{key}", r["step"], f32(x)) for r in records
            if r["kind"] in ("train", "eval") and r["launch"] == k
            for key, x in r.items() if key not in STAMP and isinstance(x, (int, float)) and not isinstance(x, bool)]
    kinds = {t.split("/")[0] for t, _, _ in want}
    check(sorted(got) == sorted(want) and kinds == {"train", "eval"},
          f"launch {k}: {len(got)} scalars = the numbers of its train and eval records, float32, tags and steps "
          f"matched ({len(want)} wanted, {len(set(got) ^ set(want))} differ)")
    all_scalars |= set(got)
    gh = [r for r in records if r["kind"] == "grad_hist" and r["launch"] == k]
    layers = [x["name"] for x in gh[0]["layers"]] if gh else []
    steps = sorted(r["step"] for r in gh)
    hist_steps |= set(steps)
    expect = sorted((f"{w}/{name}", s) for s in steps for w in ("grad", "weight") for name in layers)
    check(steps and sorted((t, s) for t, s, _ in histos) == expect,
          f"launch {k}: grad/ and weight/ histograms of the {len(layers)} layers {layers} at the grad_hist steps {steps}")
    bad = [(t, s) for t, s, h in histos
           if not (sum(h.bucket) == h.num == layer_count(t.split("/", 1)[1]) and
                   list(h.bucket_limit) == sorted(h.bucket_limit) and h.min <= h.max)]
    check(not bad and histos, f"launch {k}: every histogram's counts sum to num = the layer's element count in "
          f"{os.path.relpath(last_ckpt, run)} ({len(bad)} of {len(histos)} wrong: {bad[:3]})")
    for t, s, h in histos:
        if t.startswith("weight/") and s == ckpt_step:
            values = np.concatenate([params[n].ravel() for n in layer_params(t.split("/", 1)[1])]).astype(np.float64)
            lim, cnt = tf_histogram(values)
            check(list(h.bucket_limit) == lim and list(h.bucket) == cnt and h.min == values.min() and
                  h.max == values.max() and abs(h.sum - values.sum()) <= 1e-9 * max(1.0, abs(values).sum()),
                  f"launch {k}: {t} at step {s} = TensorFlow's default histogram of the checkpoint's weights "
                  f"({len(lim)} buckets after merging empty runs)")

acc = EventAccumulator(f"{run}/tb", size_guidance={"scalars": 0, "histograms": 0})
acc.Reload()
seen = {(t, e.step, e.value) for t in acc.Tags()["scalars"] for e in acc.Scalars(t)}
tags = acc.Tags()["scalars"]
need = {"train/loss", "train/tok/s", "eval/ppl"} | ({"train/dgc_density"} if any("dgc_density" in r for r in records) else set())
check(seen == all_scalars and need <= set(tags),
      f"EventAccumulator over RUN_DIR/tb: the same {len(seen)} scalars over both launches ({len(tags)} tags: "
      f"{', '.join(sorted(need))}, ...)")
check(ckpt_step in hist_steps, f"the last checkpoint's step {ckpt_step} is a histogram step (the weight comparison ran)")

gh = [r for r in records if r["kind"] == "grad_hist"]
edges = [-10.0 + 0.5 * i for i in range(25)]
bad = [(r["step"], x["name"]) for r in gh for x in r["layers"]
       if not (len(x["counts"]) == 24 and x["zero"] + x["below"] + x["above"] + sum(x["counts"]) == x["count"] ==
               layer_count(x["name"]) and (x["median_log10"] is None) == (x["zero"] > x["count"] / 2))]
check(gh and all(r["edges_log10"] == edges for r in gh) and not bad and
      all([x["layer"] for x in r["layers"]] == list(range(len(r["layers"]))) for r in gh),
      f"{len(gh)} grad_hist records: edges -10 .. 2 by 0.5, zero + below + sum(counts) + above == count == the "
      f"checkpoint's per layer, median null only past half zero ({len(bad)} wrong: {bad[:3]})")
sys.exit(1 if failures else 0)
