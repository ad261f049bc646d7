#!/usr/bin/env python3
"""bench_edge_peer.py — the Python side of `nebula-bench table edge` (tools/bench-edge.sh):
the benchmark's models, ONNX Runtime's INT8 quantisation, and one timed run of ONNX
Runtime or PyTorch per process.

  bench_edge_peer.py models OUT [--quick]            PyTorch 1.13 (/usr/bin/python3)
  bench_edge_peer.py quantize IN.onnx OUT.onnx (--calib X.npy | --dynamic)   onnx venv
  bench_edge_peer.py ort MODEL.onnx --input X.npy --threads N --runs R --warmup W
  bench_edge_peer.py ort MODEL.onnx --eval X.npy --labels Y.npy
  bench_edge_peer.py torch MODEL.pt --input X.npy --threads N --runs R --warmup W
  bench_edge_peer.py torch MODEL.pt --eval X.npy --labels Y.npy
  bench_edge_peer.py rss                             bare interpreter's peak RSS

`models` writes OUT/<name>/: model.onnx (fp32, opset 17, batch 1, eval mode), model.pt (for
PyTorch), input.npy, calib.npy, info.json, and for resnet18 eval.npy and labels.npy:
  resnet18  torchvision resnet18(num_classes=10), 3x3 stem, no max-pool, 1x3x32x32, trained
            on sklearn's digits (8x8 upsampled to 32x32, the channel repeated 3 times; 1200
            training images, 597 held out; 200 of the training images calibrate)
  resnet50  torchvision resnet50(), random init, 1x3x224x224; 8 random calibration inputs
  gpt2      a GPT-2-style decoder, 4 layers x 128 (4 heads), vocab 512, T=64, random init;
            16 random token sequences calibrate
--quick: resnet18 trained for 1 epoch on 256 images, resnet50 at 64x64, gpt2 2 x 64, T=16.

`ort` and `torch` print one JSON line: latency_ms_median over --runs timed runs,
rss_baseline_mib (ru_maxrss after the imports, before the model is loaded) and
peak_rss_mib (ru_maxrss after the runs) — or top1 with --eval. ONNX Runtime runs its CPU
provider with intra_op_num_threads = --threads and sequential execution; PyTorch runs
eager, eval(), no_grad, torch.set_num_threads(--threads).

The one design decision: each timing runs in a fresh process that loads one model, so the
peak RSS is that model's (ru_maxrss never goes down) and comparable with nebula-infer's.
"""
import argparse
import json
import math
import os
import resource
import sys
import time

SEED = 1234


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


# ---------------------------------------------------------------- models (PyTorch 1.13)

def gpt2_class():
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, C, NH, T):
            super().__init__()
            self.C, self.NH, self.T = C, NH, T
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))
            self.register_buffer("mask", torch.triu(torch.full((T, T), -1e4), diagonal=1).view(1, 1, T, T))

        def attn(self, x):  # every size a Python constant: no Shape arithmetic in the graph
            C, NH, T = self.C, self.NH, self.T
            hd = C // NH
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.reshape(1, T, NH, hd).transpose(1, 2)
            k = k.reshape(1, T, NH, hd).transpose(1, 2)
            v = v.reshape(1, T, NH, hd).transpose(1, 2)
            att = torch.softmax((q @ k.transpose(2, 3)) * (1.0 / math.sqrt(hd)) + self.mask, dim=-1)
            return self.proj((att @ v).transpose(1, 2).reshape(1, T, C))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT2(nn.Module):
        def __init__(self, V, C, NH, T, L):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block(C, NH, T) for _ in range(L)])
            self.ln_f = nn.LayerNorm(C)
            self.register_buffer("pos", torch.arange(T).view(1, T))

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(self.pos)
            for b in self.blocks:
                x = b(x)
            return self.ln_f(x) @ self.wte.weight.t()  # tied lm head

    return GPT2


def digits32(quick):
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
    x = ((x - 0.3) / 0.35).repeat(1, 3, 1, 1)
    y = torch.tensor(d.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(SEED))
    return x, y, perm[:256 if quick else 1200], perm[1200:]


def train_resnet18(quick):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    x, y, tr, te = digits32(quick)
    epochs = 1 if quick else 3
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    steps = epochs * math.ceil(len(tr) / 32)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=steps)
    t0 = time.time()
    for _ in range(epochs):
        m.train()
        order = tr[torch.randperm(len(tr))]
        for i in range(0, len(order), 32):
            b = order[i:i + 32]
            opt.zero_grad()
            F.cross_entropy(m(x[b]), y[b]).backward()
            opt.step()
            sched.step()
    m.eval()
    with torch.no_grad():
        top1 = sum((m(x[te[i:i + 100]]).argmax(1) == y[te[i:i + 100]]).sum().item()
                   for i in range(0, len(te), 100)) / len(te)
    info = {"train_s": round(time.time() - t0, 1), "epochs": epochs, "train_images": len(tr),
            "pytorch_top1": top1}
    return m, x[te[:1]], x[tr[:200]], x[te], y[te], info


def cmd_models(a):
    import numpy as np
    import torch
    import torchvision
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    names = a.names.split(",")
    for name in names:
        torch.manual_seed(SEED)
        g = torch.Generator().manual_seed(SEED)
        ev = lab = None
        info = {}
        if name == "resnet18":
            m, x, calib, ev, lab, info = train_resnet18(a.quick)
        elif name == "resnet50":
            hw = 64 if a.quick else 224
            m = torchvision.models.resnet50()
            x = torch.randn(1, 3, hw, hw, generator=g)
            calib = torch.randn(8, 3, hw, hw, generator=g)
        elif name == "gpt2":
            V, C, NH, T, L = (512, 64, 2, 16, 2) if a.quick else (512, 128, 4, 64, 4)
            m = gpt2_class()(V, C, NH, T, L)
            x = torch.randint(0, V, (1, T), generator=g)
            calib = torch.randint(0, V, (16, T), generator=g)
            info = {"vocab": V, "n_embd": C, "n_head": NH, "seq": T, "n_layer": L}
        else:
            sys.exit(f"bench_edge_peer.py models: unknown model '{name}' (resnet18, resnet50, gpt2)")
        m.eval()
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        with torch.no_grad():
            torch.onnx.export(m, (x,), os.path.join(d, "model.onnx"), opset_version=17, do_constant_folding=True,
                              input_names=["input"], output_names=["output"],
                              training=torch.onnx.TrainingMode.EVAL)
        # the ResNets whole (torchvision's classes unpickle without a second copy of the weights);
        # the GPT-2, whose class is local, as its sizes and state dict (under 4 MB)
        torch.save({"gpt2": info, "state": m.state_dict()} if name == "gpt2" else m, os.path.join(d, "model.pt"))
        np.save(os.path.join(d, "input.npy"), x.numpy())
        np.save(os.path.join(d, "calib.npy"), calib.numpy())
        if ev is not None:
            np.save(os.path.join(d, "eval.npy"), ev.numpy())
            np.save(os.path.join(d, "labels.npy"), lab.numpy().astype(np.int64))
        info["input_shape"] = list(x.shape)
        with open(os.path.join(d, "info.json"), "w") as f:
            json.dump(info, f)
        print(name, json.dumps(info), flush=True)


# ---------------------------------------------------------------- ONNX Runtime quantisation

def cmd_quantize(a):
    import numpy as np
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)
    if a.dynamic:
        quantize_dynamic(a.model, a.out, weight_type=QuantType.QInt8, per_channel=True)
        return

    class Reader(CalibrationDataReader):
        def __init__(self, path, name):
            self.it = iter([{name: s[None]} for s in np.load(path)])

        def get_next(self):
            return next(self.it, None)

    import onnxruntime as ort
    name = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"]).get_inputs()[0].name
    quantize_static(a.model, a.out, Reader(a.calib, name), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)


# ---------------------------------------------------------------- one timed run per process

def top1(run, xs, ys):
    import numpy as np
    return sum(int(int(np.argmax(run(x[None]))) == int(y)) for x, y in zip(xs, ys)) / len(ys)


def timed(run, x, runs, warmup):
    for _ in range(warmup):
        run(x)
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(x)
        t.append((time.perf_counter() - t0) * 1e3)
    t.sort()
    return t[len(t) // 2] if len(t) % 2 else (t[len(t) // 2 - 1] + t[len(t) // 2]) / 2


def cmd_ort(a):
    import onnxruntime as ort
    base = rss_mib()
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name

    def run(x):
        return sess.run(None, {name: x})[0]

    report(a, run, base, {"onnxruntime": ort.__version__})


def cmd_torch(a):
    import torch
    import torchvision  # noqa: F401  (the pickled ResNets' classes)
    torch.set_num_threads(a.threads)
    base = rss_mib()
    m = torch.load(a.model)
    if isinstance(m, dict):
        c = m["gpt2"]
        sd = m["state"]
        m = gpt2_class()(c["vocab"], c["n_embd"], c["n_head"], c["seq"], c["n_layer"])
        m.load_state_dict(sd)
        del sd
    m.eval()
    torch.set_grad_enabled(False)

    def run(x):
        return m(torch.from_numpy(x)).numpy()

    report(a, run, base, {"torch": torch.__version__})


def report(a, run, base, versions):
    import numpy as np
    if a.eval:
        out = {"top1": top1(run, np.load(a.eval), np.load(a.labels)), "samples": len(np.load(a.labels))}
    else:
        ms = timed(run, np.load(a.input), a.runs, a.warmup)
        out = {"latency_ms_median": round(ms, 4), "runs": a.runs, "threads": a.threads,
               "rss_baseline_mib": round(base, 2), "peak_rss_mib": round(rss_mib(), 2)}
    print(json.dumps(dict(out, **versions)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("models")
    p.add_argument("out")
    p.add_argument("--names", default="resnet18,resnet50,gpt2")
    p.add_argument("--quick", action="store_true")
    p = sub.add_parser("quantize")
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--calib")
    p.add_argument("--dynamic", action="store_true")
    for cmd in ("ort", "torch"):
        p = sub.add_parser(cmd)
        p.add_argument("model")
        p.add_argument("--input")
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--runs", type=int, default=20)
        p.add_argument("--warmup", type=int, default=3)
        p.add_argument("--eval")
        p.add_argument("--labels")
    sub.add_parser("rss")
    a = ap.parse_args()
    if a.cmd == "rss":
        print(json.dumps({"peak_rss_mib": round(rss_mib(), 2)}))
    elif a.cmd == "quantize" and not (a.dynamic or a.calib):
        ap.error("quantize needs --calib X.npy or --dynamic")
    elif a.cmd in ("ort", "torch") and not (a.input or (a.eval and a.labels)):
        ap.error(f"{a.cmd} needs --input, or --eval and --labels")
    else:
        {"models": cmd_models, "quantize": cmd_quantize, "ort": cmd_ort, "torch": cmd_torch}[a.cmd](a)


if __name__ == "__main__":
    main()
