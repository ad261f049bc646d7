#!/usr/bin/env python3
"""gpt2_autocast_ref — PyTorch's bf16 / fp16 GPT-2 trajectory under autocast, compared with Nebula's.

    gpt2_autocast_ref.py DUMP.safetensors

The dump (validation/gpu/test_models_cuda.c on a GPU, validation/reference/
test_gpt2_bf16.c on the CPU; meta "device") holds GPT-2's initial weights by their
Hugging Face names, the batch (in.*) and Nebula's 10-step AdamW losses with
--precision bf16 (traj.losses). Here the same weights and batch train for the same
steps with torch.autocast(bfloat16) on the same device — fp32 master weights, bf16 matmuls —
through the functional forward of validation/reference/gpt2_ref.py, and each loss
must agree within 1% relative (about 2.5 bf16 ulps; see the C test's header). With
precision fp16 PyTorch runs autocast(float16) with torch.amp.GradScaler at its
defaults, which Nebula's loss scaler copies; both skipped-step counts are printed."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
from gpt2_ref import forward, lr_at  # noqa: E402
from nebula_ref import Checker, load_safetensors  # noqa: E402


def main(path):
    t, meta = load_safetensors(path)
    dev = torch.device(meta.get("device", "cuda"))
    L, NH, V = int(meta["layers"]), int(meta["heads"]), int(meta["vocab_size"])
    tokens = t["in.tokens"].long().to(dev)
    targets = t["in.targets"].long().to(dev)
    P = {k: v.to(dev).requires_grad_(True) for k, v in t.items() if k.split(".")[0] not in ("in", "traj")}
    decay = [p for p in P.values() if p.dim() >= 2]
    no_decay = [p for p in P.values() if p.dim() < 2]
    base, wd, steps = float(meta["lr"]), float(meta["weight_decay"]), int(meta["steps"])
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=base, betas=(0.9, 0.95), eps=1e-8)
    fp16 = meta.get("precision") == "fp16"
    dtype = torch.float16 if fp16 else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda") if fp16 else None  # fp16 is the GPU's only
    losses, skipped = [], 0
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, base, int(meta["warmup"]), steps, base * 0.1)
        opt.zero_grad()
        with torch.autocast(dev.type, dtype=dtype):
            _, loss = forward(P, tokens, targets, L, NH, V)
        if scaler:
            scaler.scale(loss).backward()
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            skipped += scaler.get_scale() < before
        else:
            loss.backward()
            opt.step()
        losses.append(loss.item())
    name = meta.get("precision", "bf16")
    print("# pytorch", torch.__version__, dev.type, name, "losses", " ".join(f"{x:.4f}" for x in losses), f"; {skipped} skipped")
    ck = Checker()
    ck.close(f"{steps}-step {name} AdamW loss trajectory", t["traj.losses"], torch.tensor(losses), atol=0, rtol=1e-2)
    # Skipped steps are reported, not compared: autocast keeps matmul outputs in fp16 while
    # Nebula keeps them in fp32, so the two can overflow at different steps; a skip that
    # only one side takes shows in the trajectory anyway.
    print(f"# skipped steps: nebula {meta.get('skipped', '0')}, pytorch {skipped}")
    ck.done()


if __name__ == "__main__":
    main(sys.argv[1])
