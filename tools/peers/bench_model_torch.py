#!/usr/bin/env python3
"""bench_model_torch — the PyTorch peer of `nebula-bench model`: the same GPT-2
configuration, batch, sequence length, thread count and optimizer (AdamW 0.9/0.95,
weight decay 0.1 on matrices), timed the same way (median training step after
warm-up), on the CPU in fp32 or (--precision bf16) under torch.autocast("cpu",
torch.bfloat16) with fp32 master weights — or, for GPT-2 with --device cuda, on one GPU in PyTorch
eager's own best form: F.scaled_dot_product_attention (FlashAttention kernels),
torch.autocast bf16 with fp32 master weights (--precision bf16), AdamW's default
multi-tensor path; the bf16 GEMM rate of an 8192^3 product is measured in the same
process for the MFU column.

    bench_model_torch.py --model gpt2 --batch 4 --seq 64 --steps 5 --threads 2
    bench_model_torch.py --model gpt2 --batch 16 --seq 1024 --steps 10 --device cuda --precision bf16
    bench_model_torch.py --model gpt2-tiny --batch 4 --seq 64 --steps 100 --threads 1 --trace FILE.json

Run it as installed, and with OMP_WAIT_POLICY=PASSIVE in the environment (PyTorch's
OpenMP threads otherwise spin between ops and steal the cores from OpenBLAS)."""
import argparse
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {  # name: (n_positions, vocab, padded vocab, layers, heads, channels) as Nebula's gpt2.c
    "gpt2-tiny": (64, 256, 256, 2, 4, 64),
    "gpt2": (1024, 50257, 50304, 12, 12, 768),
    "gpt2-medium": (1024, 50257, 50304, 24, 16, 1024),
}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if x.is_cuda:  # PyTorch eager's fused attention on a GPU
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, npos, V, Vp, L, NH, C):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(npos, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.V = V

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits[..., : self.V].reshape(-1, self.V), targets.reshape(-1))


BERT = {"bert-tiny": (2, 2, 128, 512), "bert-base": (12, 12, 768, 3072), "bert-large": (24, 16, 1024, 4096)}


def bert_setup(name, B, T, dev="cpu"):
    """BERT MLM as validation/reference/bert_ref.py writes it (HF modeling_bert maths),
    with HF's init; 15% of positions are MLM targets, as Nebula's benchmark."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "validation", "reference"))
    import bert_ref
    L, NH, C, I = BERT[name]
    V = 30522
    shapes = {"embeddings.word_embeddings.weight": (V, C), "embeddings.position_embeddings.weight": (512, C),
              "embeddings.token_type_embeddings.weight": (2, C), "embeddings.LayerNorm.weight": (C,),
              "embeddings.LayerNorm.bias": (C,), "cls.predictions.transform.dense.weight": (C, C),
              "cls.predictions.transform.dense.bias": (C,), "cls.predictions.transform.LayerNorm.weight": (C,),
              "cls.predictions.transform.LayerNorm.bias": (C,), "cls.predictions.bias": (V,)}
    for l in range(L):
        pre = f"encoder.layer.{l}."
        for n, (o, i) in {"attention.self.query": (C, C), "attention.self.key": (C, C), "attention.self.value": (C, C),
                          "attention.output.dense": (C, C), "intermediate.dense": (I, C), "output.dense": (C, I)}.items():
            shapes[pre + n + ".weight"], shapes[pre + n + ".bias"] = (o, i), (o,)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[pre + n + ".weight"], shapes[pre + n + ".bias"] = (C,), (C,)
    P = {n: (torch.ones(s) if n.endswith("LayerNorm.weight") else torch.zeros(s) if len(s) == 1
             else torch.randn(s) * 0.02).to(dev).requires_grad_(True) for n, s in shapes.items()}
    ids = torch.randint(104, V, (B, T)).to(dev)
    types = torch.zeros(B, T, dtype=torch.long).to(dev)
    mask = torch.ones(B, T).to(dev)
    targets = torch.where(torch.rand(B, T).to(dev) < 0.15, ids, torch.full_like(ids, -1))
    # the MLM head at the masked positions only, as nebula-train runs it (same loss and gradients)
    loss_fn = lambda: bert_ref.forward(P, ids, types, mask, targets, L, NH, 0, head_at_targets=True)[1]
    return list(P.values()), loss_fn, B, "seq"


def resnet_setup(name, B, dev="cpu"):
    import torchvision
    base = name.replace("-cifar", "")
    m = getattr(torchvision.models, base)(num_classes=10 if name.endswith("-cifar") else 1000)
    hw = 224
    if name.endswith("-cifar"):  # Nebula's CIFAR stem: 3x3/1 conv, no max-pool
        m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
        hw = 32
    m.to(dev).train()
    x = (torch.rand(B, 3, hw, hw) - 0.5).to(dev)
    y = torch.randint(0, m.fc.out_features, (B,)).to(dev)
    return list(m.parameters()), lambda: F.cross_entropy(m(x), y), B, "img"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--trace", default="",
                    help="FILE: the CPU steps under torch.profiler (Chrome trace written to FILE after the timed "
                         "steps): the peer of nebula-train --trace for tools/bench-trace.sh")
    ap.add_argument("--flops-per-image", type=float, default=0.0,
                    help="ResNets on cuda: the training FLOPs per image for MFU (nebula-bench prints them)")
    a = ap.parse_args()
    if a.device == "cuda":
        return main_cuda(a)
    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    if a.model.startswith("bert"):
        params, loss_fn, units, unit = bert_setup(a.model, a.batch, a.seq)
    elif a.model.startswith("resnet"):
        params, loss_fn, units, unit = resnet_setup(a.model, a.batch)
    else:
        npos, V, Vp, L, NH, C = CONFIGS[a.model]
        m = GPT2(npos, V, Vp, L, NH, C)
        params = list(m.parameters())
        idx = torch.randint(0, V, (a.batch, a.seq))
        tgt = torch.randint(0, V, (a.batch, a.seq))
        loss_fn, units, unit = (lambda: m(idx, tgt)), a.batch * a.seq, "tok"
    nparams = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    if a.model.startswith("resnet"):  # as nebula-bench model: SGD momentum for ResNets
        opt = torch.optim.SGD([{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}],
                              lr=0.01, momentum=0.9, foreach=False)
    else:
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    bf16 = a.precision == "bf16"
    times = []
    prof = None
    if a.trace:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.__enter__()
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn()
        loss.backward()
        opt.step()
        t = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(t)
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(a.trace)
    med = statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"# pytorch {torch.__version__} {a.model} ({nparams / 1e6:.1f}M parameters), B={a.batch} T={a.seq}, "
          f"{a.threads} threads, {a.precision}: median step {med * 1e3:.2f} ms, {units / med:.2f} {unit}/s, "
          f"peak RSS {rss:.0f} MiB")


def main_cuda(a):
    """One GPU, each family as nebula-bench model --device cuda runs it (AdamW for all);
    times with CUDA synchronisation around each step."""
    dev = torch.device("cuda")
    torch.manual_seed(1)
    if a.model.startswith("bert"):
        params, loss_fn, units, unit = bert_setup(a.model, a.batch, a.seq, dev)
    elif a.model.startswith("resnet"):
        params, loss_fn, units, unit = resnet_setup(a.model, a.batch, dev)
    else:
        npos, V, Vp, L, NH, C = CONFIGS[a.model]
        m = GPT2(npos, V, Vp, L, NH, C).to(dev)
        params = list(m.parameters())
        idx = torch.randint(0, V, (a.batch, a.seq), device=dev)
        tgt = torch.randint(0, V, (a.batch, a.seq), device=dev)
        loss_fn, units, unit = (lambda: m(idx, tgt)), a.batch * a.seq, "tok"
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    bf16 = a.precision == "bf16"
    times = []
    for s in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    n = 8192  # the dense bf16 rate in this process: best of 5 products after 3 warm-ups
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    rates = []
    for r in range(8):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x @ y
        torch.cuda.synchronize()
        if r >= 3:
            rates.append(2 * n ** 3 / (time.perf_counter() - t0))
    peak = max(rates)
    nparams = sum(p.numel() for p in params)
    if unit == "img":  # as nebula-bench: 3 x the forward's multiply-adds x 2, from the model's own count
        flops = a.flops_per_image * a.batch
    else:  # as gpt2/bert_flops_per_token: 6 per parameter per token
        flops = 6.0 * nparams * a.batch * a.seq
    print(f"# pytorch {torch.__version__} {a.model} ({nparams / 1e6:.1f}M parameters), B={a.batch} T={a.seq}, "
          f"{torch.cuda.get_device_name()}, {a.precision}: median step {med * 1e3:.2f} ms, "
          f"{units / med:.2f} {unit}/s, bf16 GEMM {peak / 1e12:.1f} TFLOP/s, "
          f"MFU {100 * flops / med / peak:.1f}%, peak GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
