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
  bench_edge_peer.py table markdown|csv              the tables from bench-edge.sh's EDGE_* and results

`models` writes OUT/<name>/: model.onnx (fp32, opset 17, batch 1, eval mode), model.pt (for
PyTorch), input.npy, calib.npy, info.json, and for resnet18 eval.npy and labels.npy:
  resnet18  torchvision resnet18(num_classes=10), 3x3 stem, no max-pool, 1x3x32x32, trained
            on sklearn's digits (8x8 upsampled to 32x32, the channel repeated 3 times; 1200
            training images, 2 epochs of SGD + one-cycle, batch 64; 597 held out; 200 of the
            training images calibrate)
  resnet50  torchvision resnet50(), random init, 1x3x224x224; 8 random calibration inputs
  gpt2      a GPT-2-style decoder, 4 layers x 128 (4 heads), vocab 512, T=64, random init;
            16 random token sequences calibrate
--quick: resnet18 untrained at 16x16 (16 calibration, 64 held-out images), resnet50 with one
block per stage at 32x32 (4 calibration inputs), gpt2 2 x 64, T=16: the plumbing only.

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
    hw = 16 if quick else 32
    x = F.interpolate(x, size=(hw, hw), mode="bilinear", align_corners=False)
    x = ((x - 0.3) / 0.35).repeat(1, 3, 1, 1)
    y = torch.tensor(d.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(SEED))
    return x, y, perm[:1200], perm[1200:]


def train_resnet18(quick):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    x, y, tr, te = digits32(quick)
    epochs, bs = (0 if quick else 2), 64
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    steps = max(1, epochs * math.ceil(len(tr) / bs))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=steps)
    t0 = time.time()
    for _ in range(epochs):
        m.train()
        order = tr[torch.randperm(len(tr))]
        for i in range(0, len(order), bs):
            b = order[i:i + bs]
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
    ncal, nev = (16, 64) if quick else (200, len(te))
    return m, x[te[:1]], x[tr[:ncal]], x[te[:nev]], y[te[:nev]], info


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
            hw = 32 if a.quick else 224
            m = torchvision.models.resnet50()
            if a.quick:  # one bottleneck per stage: a third of the weights
                m = torchvision.models.resnet.ResNet(torchvision.models.resnet.Bottleneck, [1, 1, 1, 1])
                info["blocks"] = "1,1,1,1"
            x = torch.randn(1, 3, hw, hw, generator=g)
            calib = torch.randn(4 if a.quick else 8, 3, hw, hw, generator=g)
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


# ---------------------------------------------------------------- the tables (bench-edge.sh's results)

PREC = {"none": "fp32", "int8": "int8", "fp16": "fp16", "auto": "auto"}
TITLE = {"resnet18": "ResNet-18 CIFAR (digits, 1x3x32x32)", "resnet50": "ResNet-50 (random, 1x3x224x224)",
         "gpt2": "GPT-2 tiny (random)"}


def cmd_table(a):
    import statistics
    env = os.environ
    w, models = env["EDGE_W"], env["EDGE_MODELS"].split(",")
    threads, reps, runs = env["EDGE_THREADS"].split(), env["EDGE_REPS"], env["EDGE_RUNS"]
    meas, fails = {}, {}
    for line in open(os.path.join(w, "results.jsonl")):
        r = json.loads(line)
        if "fail" in r:
            fails[r["tag"]] = r["fail"].strip().splitlines()[-1] if r["fail"].strip() else "no output"
        else:
            meas.setdefault(r["tag"], []).append(r["m"])

    def med(tag, key):
        v = [r[key] for r in meas.get(tag, []) if key in r]
        return statistics.median(v) if v else None

    def size(path):
        return os.path.getsize(path) / 2**20 if os.path.exists(path) else None

    def fail_of(path):
        return open(path).read().strip() if os.path.exists(path) else None

    def f(v, nd=2, unit=""):
        return "-" if v is None else f"{v:.{nd}f}{unit}"

    def ratio(num, den):
        return "-" if num is None or den is None else f"{num / den:.2f}x"

    def cell_fail(tag, v, nd=2):
        return f"FAIL: {fails[tag]}" if tag in fails else f(v, nd)

    def info(m):
        p = os.path.join(w, m, "info.json")
        return json.load(open(p)) if os.path.exists(p) else {}

    def title(m):
        i = info(m)
        if m == "gpt2" and "n_layer" in i:
            return f"GPT-2 tiny ({i['n_layer']} x {i['n_embd']}, T={i['seq']}, vocab {i['vocab']}, random)"
        if "input_shape" in i and m != "gpt2":
            shape = "x".join(map(str, i["input_shape"]))
            kind = ("digits, " + ("untrained, " if not i.get("epochs") else f"{i['epochs']} epochs, ")) \
                if m == "resnet18" else "random, " + (f"blocks {i['blocks']}, " if "blocks" in i else "")
            return f"{TITLE[m].split(' (')[0]} ({kind}{shape})"
        return TITLE[m]

    def how(m, q):
        nc = len(np.load(os.path.join(w, m, "calib.npy"), mmap_mode="r"))
        if q == "none":
            return "x86-64: .neb fp32 vs ORT fp32 (same ONNX) vs PyTorch eager"
        if q == "int8":
            ort_q = "ORT quantize_dynamic per-channel" if m == "gpt2" else f"ORT quantize_static QDQ per-channel (same {nc})"
            return f"x86-64: .neb int8, {nc} calib samples, vs {ort_q}"
        if q == "fp16":
            return "x86-64: .neb fp16 weights (Nebula only)"
        return "x86-64: .neb auto: int8 per layer where faster" + (" and ≤ 1% top-1 drop" if m == "resnet18" else "") + \
            " (Nebula only)"

    import numpy as np
    rows_a, rows_b, rows_c = [], [], []
    for m in models:
        onnx_mib = size(os.path.join(w, m, "model.onnx"))
        for q in ("none", "int8", "fp16", "auto"):
            neb = size(os.path.join(w, f"{m}-{q}.neb"))
            dfail = fail_of(os.path.join(w, f"{m}-{q}.fail"))
            ort_path = os.path.join(w, f"{m}-ort-int8.onnx") if q == "int8" else None
            if q == "none":
                ort_size = "(the fp32 ONNX)"
            elif q == "int8":
                ofail = fail_of(os.path.join(w, f"{m}-ort-int8.fail"))
                ort_size = f"FAIL: {ofail}" if ofail else (f"{size(ort_path):.2f} ({size(ort_path) / onnx_mib:.2f}x)"
                                                           if size(ort_path) else "-")
            else:
                ort_size = "-"
            ev = os.path.exists(os.path.join(w, m, "eval.npy"))
            t_neb = cell_fail(f"top1 nebula {m} {q}", med(f"top1 nebula {m} {q}", "top1"), 4) if ev else "n/a (random)"
            t_ort = "-"
            if ev and q in ("none", "int8"):
                t_ort = cell_fail(f"top1 ort {m} {q}", med(f"top1 ort {m} {q}", "top1"), 4)
            t_pt = f"{info(m)['pytorch_top1']:.4f}" if ev and q == "none" and "pytorch_top1" in info(m) else \
                ("n/a (random)" if not ev and q == "none" else "-")
            rows_a.append([title(m), PREC[q], f"FAIL: {dfail}" if dfail else f(neb), f(onnx_mib),
                           "-" if dfail else ratio(neb, onnx_mib), ort_size, t_neb, t_ort, t_pt, how(m, q)])
            for t in threads:
                tn, to, tp = (f"nebula {m} {q} {t}", f"ort {m} {q} {t}", f"torch {m} {q} {t}")
                ln, lo, lp = med(tn, "latency_ms_median"), med(to, "latency_ms_median"), med(tp, "latency_ms_median")
                rn, ro, rp = med(tn, "peak_rss_mib"), med(to, "peak_rss_mib"), med(tp, "peak_rss_mib")
                bo, bp = med(to, "rss_baseline_mib"), med(tp, "rss_baseline_mib")
                if dfail:
                    ln_c = rn_c = "FAIL: not deployed"
                else:
                    ln_c, rn_c = cell_fail(tn, ln, 3), cell_fail(tn, rn, 1)
                lo_c = cell_fail(to, lo, 3) if q in ("none", "int8") else "-"
                lp_c = cell_fail(tp, lp, 3) if q == "none" else "-"
                ro_c = "-" if ro is None else f"{ro:.1f} ({bo:.1f})"
                rp_c = "-" if rp is None else f"{rp:.1f} ({bp:.1f})"
                if to in fails:
                    ro_c = "FAIL"
                if tp in fails:
                    rp_c = "FAIL"
                rows_b.append([title(m), PREC[q], t, ln_c, lo_c, lp_c, ratio(lo, ln), ratio(lp, ln), rn_c, ro_c, rp_c,
                               f"{how(m, q)}; median of {reps} processes x {runs} runs"])
            if env.get("EDGE_WHY_A64"):
                rows_c.append([title(m), PREC[q], "-", "-", "-", f"not run: {env['EDGE_WHY_A64']}",
                               "qemu: correctness only"])
            elif dfail:
                rows_c.append([title(m), PREC[q], "-", "-", "-", "FAIL: not deployed", "qemu: correctness only"])
            else:
                tag = f"a64 {m} {q}"
                r = (meas.get(tag) or [None])[0]
                if r is None:
                    rows_c.append([title(m), PREC[q], "-", "-", "-", f"FAIL: {fails.get(tag, 'no result')}",
                                   "qemu: correctness only"])
                else:
                    good = r["rel_diff"] <= 1e-4 and r["argmax_same"]
                    rows_c.append([title(m), PREC[q], r["isa"], f"{r['rel_diff']:.2g}",
                                   "yes" if r["argmax_same"] else "no", "ok" if good else "FAIL (> 1e-4 or argmax differs)",
                                   "qemu: correctness only (same .neb, same input as x86-64)"])
    head_a = ["model", "precision", ".neb MiB", "fp32 ONNX MiB", ".neb / ONNX", "ORT model MiB (/ ONNX)",
              "top-1 nebula-infer", "top-1 ORT", "top-1 PyTorch", "how measured"]
    head_b = ["model", "precision", "threads", "nebula-infer ms", "ORT ms", f"PyTorch {env['EDGE_TORCH']} ms",
              "ORT / nebula", "PyTorch / nebula", "peak RSS nebula MiB", "peak RSS ORT MiB (after imports)",
              "peak RSS PyTorch MiB (after imports)", "how measured"]
    head_c = ["model", "precision", "isa", "max|arm64 - x86-64| / max|x86-64|", "same argmax", "result", "how measured"]
    bare = json.loads(env["EDGE_BARE_RSS"])["peak_rss_mib"]
    notes = [
        f"CPU: {env['EDGE_CPU']} ({os.cpu_count()} CPUs); nebula-infer isa {env['EDGE_ISA']} (its own kernels, no BLAS); "
        f"ONNX Runtime {env['EDGE_ORT']} (CPU provider, MLAS); PyTorch {env['EDGE_TORCH']} (Debian; oneDNN); "
        f"threads {' '.join(threads)}; {env['EDGE_DATE']}",
        f"Latency: the median over {reps} fresh processes of each one's median of {runs} timed runs (3 warm-up "
        "runs first), batch 1; engines interleaved rep by rep. Ratios above 1x: Nebula faster.",
        "Peak RSS: ru_maxrss of the measuring process after its runs; for ORT and PyTorch in brackets the same "
        f"process's ru_maxrss after its imports, before the model loads (a bare python3 is {bare:.1f} MiB).",
    ]
    if env.get("EDGE_WHY_Q"):
        notes.append(f"ort-int8: unavailable ({env['EDGE_WHY_Q']}); ORT fp32 from {env.get('EDGE_PYO') or 'nowhere'}")
    else:
        notes.append(f"ort-int8: onnxruntime {env['EDGE_ORT']} quantize_static (QDQ, per-channel, int8 weights and "
                     "activations, MinMax calibration) or quantize_dynamic (GPT-2), from a venv with onnx")
    if env.get("EDGE_QUICK") == "1":
        notes.append("--quick: small untrained models; the figures check the plumbing and mean nothing")
    if a.format == "csv":
        import csv
        out = csv.writer(sys.stdout)
        for name, head, rows in (("size_accuracy", head_a, rows_a), ("latency_memory", head_b, rows_b),
                                 ("arm64_qemu", head_c, rows_c)):
            out.writerow(["table"] + head)
            for r in rows:
                out.writerow([name] + r)
        for n in notes:
            print("# " + n)
        return

    def md(head, rows):
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" if i < 2 or h.startswith("how") or h in ("result", "isa") else "---:"
                             for i, h in enumerate(head)) + "|")
        for r in rows:
            print("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
        print()

    for n in notes:
        print(f"{n}  ")
    print()
    md(head_a, rows_a)
    md(head_b, rows_b)
    md(head_c, rows_c)


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
    p = sub.add_parser("table")
    p.add_argument("format", choices=("markdown", "csv"))
    a = ap.parse_args()
    if a.cmd == "rss":
        print(json.dumps({"peak_rss_mib": round(rss_mib(), 2)}))
    elif a.cmd == "quantize" and not (a.dynamic or a.calib):
        ap.error("quantize needs --calib X.npy or --dynamic")
    elif a.cmd in ("ort", "torch") and not (a.input or (a.eval and a.labels)):
        ap.error(f"{a.cmd} needs --input, or --eval and --labels")
    else:
        {"models": cmd_models, "quantize": cmd_quantize, "ort": cmd_ort, "torch": cmd_torch, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    main()
