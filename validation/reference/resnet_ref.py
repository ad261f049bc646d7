#!/usr/bin/env python3
"""resnet_ref — a torchvision ResNet from Nebula's weights, compared with Nebula's results.

    resnet_ref.py DUMP.safetensors

The dump (written by validation/reference/test_resnet_ref.c) holds, by torchvision
state_dict name, the initial parameters AND batch-norm buffers (running_mean,
running_var, num_batches_tracked); the batch (in.images, in.labels); Nebula's
train-mode logits and mean loss (out.*), every parameter gradient (grad.NAME), the
buffers after that one training forward (after.NAME), the eval-mode logits on the same
batch with those buffers (out.eval_logits), and a 10-step SGD loss trajectory
(traj.losses) with the buffers it ends with (final.NAME); hyper-parameters are in the
metadata. The model is torchvision.models.<arch>(num_classes=...) itself; the CIFAR
stem replaces conv1 by a 3x3/1 pad-1 conv and maxpool by nn.Identity."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

from nebula_ref import Checker, load_safetensors

DUMP_PREFIXES = ("in", "out", "grad", "after", "final", "traj")


def build(meta, state):
    model = getattr(torchvision.models, meta["arch"])(num_classes=int(meta["num_classes"]))
    if meta["stem"] == "cifar":
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    model.load_state_dict(state, strict=True)  # float num_batches_tracked converts to int64 on copy
    return model


def close_all(ck, what, triples, atol=1e-4, rtol=1e-3):
    """One line for many named tensors (a ResNet has ~160 gradients): each failure
    in full through ck.close, then the count and the worst ratio."""
    worst, where = 0.0, ""
    for k, got, ref in triples:
        got, ref = got.detach().double(), ref.detach().double()
        r = ((got - ref).abs() / (atol + rtol * ref.abs())).max().item() if got.shape == ref.shape else float("inf")
        if not r <= 1.0:
            ck.close(f"{what}: {k}", got, ref, atol=atol, rtol=rtol)
        elif r >= worst:
            worst, where = r, k
    print(f"ok - {what}: {len(triples)} tensors within |d| <= {atol:g} + {rtol:g}|ref| "
          f"(worst passing ratio {worst:.3g} at {where})")


def lr_at(step, base, warmup, step_size, gamma):
    """Nebula's lr_at for the step schedule: linear warmup (step+1)/warmup, then gamma^floor."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * gamma ** ((step - warmup) // step_size)


def main(path):
    t, meta = load_safetensors(path)
    name = meta["model"]
    state = {k: v for k, v in t.items() if k.split(".")[0] not in DUMP_PREFIXES}
    images, labels = t["in.images"], t["in.labels"].long()
    ck = Checker()

    model = build(meta, state)
    model.train()
    logits = model(images)
    loss = F.cross_entropy(logits, labels)
    ck.close(f"{name}: train-mode logits", t["out.logits"], logits)
    ck.close(f"{name}: mean loss", t["out.loss"], loss.reshape(1), atol=1e-5, rtol=1e-5)
    loss.backward()
    params = dict(model.named_parameters())
    close_all(ck, f"{name}: parameter gradients by name", [(k, t["grad." + k], p.grad) for k, p in params.items()])
    buffers = [(k, b) for k, b in model.named_buffers() if not k.endswith("num_batches_tracked")]
    close_all(ck, f"{name}: BN running_mean/running_var after one training forward",
              [(k, t["after." + k], b) for k, b in buffers], atol=1e-5, rtol=1e-4)
    nbt = [(t["after." + k].item(), b.item()) for k, b in model.named_buffers() if k.endswith("num_batches_tracked")]
    ok = all(a == b for a, b in nbt)
    print(f"{'ok' if ok else 'FAIL'} - {name}: num_batches_tracked of all {len(nbt)} BNs ({nbt[0][1]})")
    ck.failures += 0 if ok else 1

    model.eval()
    with torch.no_grad():
        ck.close(f"{name}: eval-mode logits (running statistics)", t["out.eval_logits"], model(images))

    # 10 SGD steps from the same initial weights and buffers, same batch, same schedule.
    model = build(meta, state)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    base, wd, mom = float(meta["lr"]), float(meta["weight_decay"]), float(meta["momentum"])
    opt = torch.optim.SGD([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=base, momentum=mom, foreach=False)
    steps = int(meta["steps"])
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, base, int(meta["warmup"]), int(meta["step_size"]), float(meta["gamma"]))
        opt.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ck.close(f"{name}: {steps}-step SGD loss trajectory", t["traj.losses"], torch.tensor(losses), atol=0, rtol=1e-3)
    close_all(ck, f"{name}: BN buffers after the trajectory",
              [(k, t["final." + k], b) for k, b in model.named_buffers()], atol=1e-4, rtol=1e-2)
    ck.done()


if __name__ == "__main__":
    main(sys.argv[1])
