#!/usr/bin/env python3
"""gpt2_ref — GPT-2 in PyTorch from Nebula's weights, compared with Nebula's results.

    gpt2_ref.py DUMP.safetensors

The dump (written by validation/reference/test_gpt2_ref.c) holds the parameters by
their Hugging Face names, the batch (in.tokens, in.targets; -1 = ignored), Nebula's
logits and mean loss (out.*), every parameter gradient (grad.NAME) and a 10-step
AdamW loss trajectory (traj.losses) with its hyper-parameters in the metadata. The
model is written out here from the GPT-2 paper / HF modeling_gpt2: pre-norm blocks,
Conv1D weights (in, out), tanh GELU, causal softmax attention, tied LM head. The
vocabulary may be padded: only the first vocab_size logits enter the loss."""
import math
import sys

import torch
import torch.nn.functional as F

from nebula_ref import Checker, load_safetensors


def forward(P, tokens, targets, L, NH, V):
    B, T = tokens.shape
    C = P["wte.weight"].shape[1]
    HS = C // NH
    x = P["wte.weight"][tokens] + P["wpe.weight"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=tokens.device))
    for l in range(L):
        g = lambda n: P[f"h.{l}.{n}"]
        h = F.layer_norm(x, (C,), g("ln_1.weight"), g("ln_1.bias"), 1e-5)
        qkv = h @ g("attn.c_attn.weight") + g("attn.c_attn.bias")
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        h = F.layer_norm(x, (C,), g("ln_2.weight"), g("ln_2.bias"), 1e-5)
        h = F.gelu(h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias"), approximate="tanh")
        x = x + h @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    logits = x @ P["wte.weight"].T
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1)
    return logits, loss


def lr_at(step, base, warmup, total, min_lr):
    """nanoGPT's get_lr: linear warmup over (step+1)/warmup, cosine to min_lr at total."""
    if step < warmup:
        return base * (step + 1) / warmup
    if step >= total:
        return min_lr
    ratio = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (base - min_lr)


def main(path):
    t, meta = load_safetensors(path)
    L, NH, V = int(meta["layers"]), int(meta["heads"]), int(meta["vocab_size"])
    tokens = t["in.tokens"].long()
    targets = t["in.targets"].long()
    P = {k: v.clone().requires_grad_(True) for k, v in t.items() if not k.split(".")[0] in ("in", "out", "grad", "traj")}
    ck = Checker()
    logits, loss = forward(P, tokens, targets, L, NH, V)
    ck.close("logits", t["out.logits"], logits)
    ck.close("mean loss", t["out.loss"], loss.reshape(1), atol=1e-5, rtol=1e-5)
    loss.backward()
    for name, p in P.items():
        ck.close(f"grad {name}", t["grad." + name], p.grad)

    # 10 AdamW steps from the same initial weights, same batch, same schedule.
    P = {k: v.detach().clone().requires_grad_(True) for k, v in P.items()}
    decay = [p for p in P.values() if p.dim() >= 2]
    no_decay = [p for p in P.values() if p.dim() < 2]
    base, wd = float(meta["lr"]), float(meta["weight_decay"])
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=base, betas=(0.9, 0.95), eps=1e-8)
    steps = int(meta["steps"])
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, base, int(meta["warmup"]), steps, base * 0.1)
        opt.zero_grad()
        _, loss = forward(P, tokens, targets, L, NH, V)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ck.close(f"{steps}-step AdamW loss trajectory", t["traj.losses"], torch.tensor(losses), atol=0, rtol=1e-3)
    ck.done()


if __name__ == "__main__":
    main(sys.argv[1])
