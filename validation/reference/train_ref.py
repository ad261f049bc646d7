#!/usr/bin/env python3
"""train_ref — nebula-train's results against PyTorch.

    train_ref.py h5loss STATE.h5 VAL.bin B NEBULA_LOSS
        Reads the parameters of a Nebula checkpoint with h5py into the PyTorch GPT-2 of
        gpt2_ref.py and computes the loss on the first B windows of the held-out token
        file; it must equal Nebula's evaluation loss on the same windows (1e-5 rel).
    train_ref.py gpt TRAIN.bin VAL.bin STEPS GB T LR WARMUP MIN_LR EVAL_BATCHES NEBULA_LOSS
        Trains gpt2-tiny in PyTorch with Nebula's recipe — AdamW (0.9, 0.95, 1e-8, weight
        decay 0.1 on matrices), clipping at 1, warmup + cosine, the training windows in
        file order — from PyTorch's own initialisation (N(0, 0.02), residual projections
        scaled by 1/sqrt(2L)), and checks that Nebula's held-out loss after the same
        steps is within 2% of PyTorch's.
    train_ref.py digits OUT_DIR
        Writes the UCI handwritten digits python3-sklearn ships as HDF5 image sets
        (train.h5: 1500 images, test.h5: 297; 16x16 grey, upsampled 2x from 8x8)."""
import math
import struct
import sys

import numpy as np
import torch

from gpt2_ref import forward, lr_at

TINY = dict(L=2, NH=4, C=64, V=256, T=64)


def tokens_of(path):
    """Nebula token file (data.h): 'NEBTOK01', u32 version, u32 vocab, u64 count, u32 bytes
    per token, u32 reserved, then the tokens (from byte 32)."""
    raw = open(path, "rb").read()
    magic, version, vocab, count, width = struct.unpack_from("<8sIIQI", raw, 0)
    assert magic == b"NEBTOK01", f"{path}: not a Nebula token file"
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
    return np.frombuffer(raw, dtype=dtype, count=count, offset=len(raw) - count * width).astype(np.int64)


def windows(tok, T, first, n):
    """Samples first..first+n-1: windows of T+1 tokens at multiples of T."""
    x = np.stack([tok[(first + i) * T:(first + i) * T + T + 1] for i in range(n)])
    return torch.from_numpy(x[:, :T]), torch.from_numpy(x[:, 1:])


def h5loss(state, val, B, nebula):
    import h5py
    with h5py.File(state, "r") as f:
        P = {k: torch.from_numpy(np.array(v)) for k, v in f["params"].items()}
    x, y = windows(tokens_of(val), TINY["T"], 0, int(B))
    with torch.no_grad():
        _, loss = forward(P, x, y, TINY["L"], TINY["NH"], TINY["V"])
    rel = abs(loss.item() - float(nebula)) / loss.item()
    print(f"{'ok' if rel <= 1e-5 else 'FAIL'} - PyTorch loss from the checkpoint's /params {loss.item():.6f}, "
          f"Nebula {float(nebula):.6f} (relative difference {rel:.1e})")
    return rel <= 1e-5


def gpt(train, val, steps, GB, T, lr, warmup, min_lr, eval_batches, nebula, tol="0.02"):
    steps, GB, T, warmup, eval_batches = int(steps), int(GB), int(T), int(warmup), int(eval_batches)
    lr, min_lr, nebula, tol = float(lr), float(min_lr), float(nebula), float(tol)
    torch.manual_seed(1234)
    L, C, V = TINY["L"], TINY["C"], TINY["V"]
    def normal(*shape, std=0.02):
        return (torch.randn(*shape) * std).requires_grad_(True)
    P = {"wte.weight": normal(V, C), "wpe.weight": normal(T, C)}
    for l in range(L):
        P |= {f"h.{l}.ln_1.weight": torch.ones(C, requires_grad=True), f"h.{l}.ln_1.bias": torch.zeros(C, requires_grad=True),
              f"h.{l}.attn.c_attn.weight": normal(C, 3 * C), f"h.{l}.attn.c_attn.bias": torch.zeros(3 * C, requires_grad=True),
              f"h.{l}.attn.c_proj.weight": normal(C, C, std=0.02 / math.sqrt(2 * L)),
              f"h.{l}.attn.c_proj.bias": torch.zeros(C, requires_grad=True),
              f"h.{l}.ln_2.weight": torch.ones(C, requires_grad=True), f"h.{l}.ln_2.bias": torch.zeros(C, requires_grad=True),
              f"h.{l}.mlp.c_fc.weight": normal(C, 4 * C), f"h.{l}.mlp.c_fc.bias": torch.zeros(4 * C, requires_grad=True),
              f"h.{l}.mlp.c_proj.weight": normal(4 * C, C, std=0.02 / math.sqrt(2 * L)),
              f"h.{l}.mlp.c_proj.bias": torch.zeros(C, requires_grad=True)}
    P |= {"ln_f.weight": torch.ones(C, requires_grad=True), "ln_f.bias": torch.zeros(C, requires_grad=True)}
    decay = [p for p in P.values() if p.dim() >= 2]
    no_decay = [p for p in P.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    tok = tokens_of(train)
    per_epoch = ((len(tok) - 1) // T) // GB
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, lr, warmup, steps, min_lr)
        x, y = windows(tok, T, (step % per_epoch) * GB, GB)
        opt.zero_grad()
        _, loss = forward(P, x, y, L, TINY["NH"], V)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
    vt = tokens_of(val)
    n = min(eval_batches, ((len(vt) - 1) // T) // GB)
    with torch.no_grad():
        losses = [forward(P, *windows(vt, T, b * GB, GB), L, TINY["NH"], V)[1].item() for b in range(n)]
    ref = sum(losses) / len(losses)
    rel = abs(nebula - ref) / ref
    print(f"{'ok' if rel <= tol else 'FAIL'} - held-out loss after {steps} steps: Nebula {nebula:.4f}, "
          f"PyTorch {ref:.4f} (within {100 * rel:.2f}%, limit {100 * tol:g}%)")
    return rel <= tol


def digits(out, size="16"):
    import h5py
    from sklearn.datasets import load_digits
    import os
    os.makedirs(out, exist_ok=True)
    d = load_digits()
    img = d.images if size == "8" else np.kron(d.images, np.ones((2, 2)))  # 8x8 -> 16x16, values 0..16
    img = np.clip(np.rint(img * 255.0 / 16.0), 0, 255).astype(np.uint8)[..., None]  # (N, 16, 16, 1)
    perm = np.random.RandomState(0).permutation(len(img))
    for name, idx in (("train", perm[:1500]), ("test", perm[1500:])):
        with h5py.File(f"{out}/{name}.h5", "w") as f:
            f["images"] = img[idx]
            f["labels"] = d.target[idx].astype(np.int32)
    print(f"wrote {out}/train.h5 (1500) and {out}/test.h5 ({len(img) - 1500})")
    return True


if __name__ == "__main__":
    fn = {"h5loss": h5loss, "gpt": gpt, "digits": digits}[sys.argv[1]]
    sys.exit(0 if fn(*sys.argv[2:]) else 1)
