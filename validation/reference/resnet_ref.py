#!/usr/bin/env python3
"""resnet_ref — a torchvision ResNet from Nebula's weights, compared with Nebula's results.

    resnet_ref.py DUMP.safetensors...

The dump (written by validation/reference/test_resnet_ref.c) holds, by torchvision
state_dict name, the initial parameters AND batch-norm buffers (running_mean,
running_var, num_batches_tracked); the batch (in.images, in.labels); Nebula's
train-mode logits and mean loss (out.*), every parameter gradient (grad.NAME) and the
buffers after that first training step (after.NAME); the eval-mode logits with those
buffers (out.eval_logits); a 10-step SGD loss trajectory (traj.losses, step 0 being
the step above) with the buffers it ends with (final.NAME); and, for every step, the
branch each ReLU element took (branch.relu.S: 1 bit per element in torchvision's
call order, `mask_bits` bits per float) and the max-pool winners (branch.pool.S).
Hyper-parameters are in the metadata.

The model is torchvision.models.<arch>(num_classes=...) itself (the CIFAR stem
replaces conv1 by a 3x3/1 pad-1 conv and maxpool by nn.Identity), loaded with
strict=True and run in float64: the reference is then exact to Nebula's fp32 and
|got - ref| <= 1e-4 + 1e-3|ref| measures Nebula's rounding alone, not PyTorch's too.
At every training step the reference takes Nebula's branch at each ReLU and max-pool
(see Branches)."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

from nebula_ref import Checker, load_safetensors

DUMP_PREFIXES = ("in", "out", "grad", "after", "final", "traj", "branch")


class Branches:
    """Nebula's ReLU branches and max-pool winners, replayed step by step in call order.

    A ReLU's derivative jumps at 0 and a max-pool's at a tie. fp32 rounding moves a
    pre-activation by ~1e-6..1e-4 of its scale in a deep ResNet, so among millions of
    ReLU inputs a few land on the other side of 0 in any two codes (PyTorch fp32
    against fp64 too), and one such flip moves resnet50's early gradients by ~1e-2 and
    its 10-step loss by percents. The reference therefore takes Nebula's branch at
    every ReLU and max-pool, and checks separately that wherever its own branch would
    differ, the input is a near-tie: a pre-activation within a tie bound x rms of 0,
    or a runner-up within it of the max. The bound is 1e-3 at step 0 (same weights:
    rounding only) and 5e-2 later, when the weights themselves have drifted by the
    trajectory's tolerance (measured: resnet50's worst grows from 2e-6 to 7e-3 over 10
    steps). A branch taken wrongly by a bug sits at |x| ~ rms: a FAIL either way."""

    def __init__(self, t, meta, tie0=1e-3, tie=5e-2):
        self.t, self.tie0, self.tie = t, tie0, tie
        self.nbits, self.wbits = int(meta["relu_bits"]), int(meta["mask_bits"])
        self.flips, self.worst, self.bad_count, self.per_step = 0, 0.0, [], []

    def start(self, step):
        words = self.t[f"branch.relu.{step}"].to(torch.int64)
        bits = (words.unsqueeze(1) >> torch.arange(self.wbits)) & 1
        self.bits, self.at, self.step = bits.flatten()[: self.nbits].bool(), 0, step
        self.argmax = self.t.get(f"branch.pool.{step}")
        self.per_step.append(0.0)

    def finish(self):
        if self.at != self.nbits:
            self.bad_count.append((self.step, self.at))

    def note(self, disagree, gap, scale):
        n = int(disagree.sum())
        if n:
            self.flips += n
            w = (gap[disagree].abs().max() / scale).item()
            self.worst = max(self.worst, w)
            self.per_step[-1] = max(self.per_step[-1], w)

    def relu(self, x):
        xd = x.detach()
        if self.at + x.numel() <= self.nbits:
            mask = self.bits[self.at : self.at + x.numel()].view_as(x)
        else:  # Nebula has fewer ReLU elements than torchvision: shapes differ (finish() reports it)
            mask = xd > 0
        self.at += x.numel()
        self.note(mask != (xd > 0), xd, xd.pow(2).mean().sqrt())
        return x * mask.to(x.dtype)

    def maxpool(self, x):
        idx = self.argmax.long()
        out = x.flatten(2).gather(2, idx.flatten(2)).view(idx.shape)
        ref, ref_idx = F.max_pool2d(x.detach(), 3, 2, 1, return_indices=True)
        self.note(ref_idx != idx, ref - out.detach(), x.detach().pow(2).mean().sqrt())
        return out

    def report(self, name, steps):
        ok = not self.bad_count and self.per_step[0] <= self.tie0 and self.worst <= self.tie
        what = f"; torchvision's ReLUs take {self.bad_count[0][1]} elements at step {self.bad_count[0][0]}, " \
            f"Nebula's {self.nbits}: activation shapes differ" if self.bad_count else ""
        print(f"{'ok' if ok else 'FAIL'} - {name}: Nebula's ReLU/max-pool branches over {steps} steps: "
              f"{self.flips} differ from the reference's own, each must be a near-tie "
              f"(worst |x|/rms at step 0 {self.per_step[0]:.2g} <= {self.tie0:g}, later {self.worst:.2g} <= "
              f"{self.tie:g}; by step "
              f"{' '.join(f'{w:.1g}' for w in self.per_step)}){what}")
        return ok


class Replay(nn.Module):
    def __init__(self, branches, kind):
        super().__init__()
        self.branches, self.kind = branches, kind

    def forward(self, x):
        return self.branches.relu(x) if self.kind == "relu" else self.branches.maxpool(x)


def replay_branches(model, branches):
    """Swaps every ReLU (and the max-pool) of a torchvision ResNet for Nebula's branches."""
    model.relu = Replay(branches, "relu")
    if not isinstance(model.maxpool, nn.Identity):
        model.maxpool = Replay(branches, "maxpool")
    for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
        for block in layer:
            block.relu = Replay(branches, "relu")


def build(meta, state):
    """torchvision's model with Nebula's tensors (strict: every name, no extra), in float64."""
    model = getattr(torchvision.models, meta["arch"])(num_classes=int(meta["num_classes"]))
    if meta["stem"] == "cifar":
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    model.load_state_dict(state, strict=True)  # float num_batches_tracked converts to int64 on copy
    return model.double()


def close_all(ck, what, triples, atol=1e-4, rtol=1e-3):
    """One line for many named tensors (a ResNet has ~160 gradients): each failure
    in full through ck.close, then the count and the worst ratio."""
    worst, where, bad = 0.0, "", 0
    for k, got, ref in triples:
        got, ref = got.detach().double(), ref.detach().double()
        r = ((got - ref).abs() / (atol + rtol * ref.abs())).max().item() if got.shape == ref.shape else float("inf")
        if not r <= 1.0:
            ck.close(f"{what}: {k}", got, ref, atol=atol, rtol=rtol)
            bad += 1
        elif r >= worst:
            worst, where = r, k
    print(f"{'FAIL' if bad else 'ok'} - {what}: {len(triples) - bad} of {len(triples)} tensors within "
          f"|d| <= {atol:g} + {rtol:g}|ref| (worst passing ratio {worst:.3g} at {where})")


def lr_at(step, base, warmup, step_size, gamma):
    """Nebula's lr_at for the step schedule: linear warmup (step+1)/warmup, then gamma^floor."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * gamma ** ((step - warmup) // step_size)


def check(path, ck):
    t, meta = load_safetensors(path)
    name = meta["model"]
    state = {k: v for k, v in t.items() if k.split(".")[0] not in DUMP_PREFIXES}
    images, labels = t["in.images"].double(), t["in.labels"].long()

    # Eval mode first, on a plain model with the buffers after Nebula's first step.
    after = {k: (t["after." + k] if "after." + k in t else v) for k, v in state.items()}
    model = build(meta, after).eval()
    with torch.no_grad():
        eval_logits = model(images)

    # The SGD trajectory from the same weights and buffers, with Nebula's branches;
    # step 0 is also the check of logits, loss, every gradient and the BN update.
    model.load_state_dict(state, strict=True)
    model.train()
    branches = Branches(t, meta)
    replay_branches(model, branches)
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
        branches.start(step)
        logits = model(images)
        branches.finish()
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        if step == 0:
            ck.close(f"{name}: train-mode logits", t["out.logits"], logits)
            ck.close(f"{name}: mean loss", t["out.loss"], loss.reshape(1), atol=1e-5, rtol=1e-5)
            close_all(ck, f"{name}: parameter gradients by name",
                      [(k, t["grad." + k], p.grad) for k, p in model.named_parameters()])
            stats = [(k, b) for k, b in model.named_buffers() if not k.endswith("num_batches_tracked")]
            close_all(ck, f"{name}: BN running_mean/running_var after one training forward",
                      [(k, t["after." + k], b) for k, b in stats])
            nbt = [(t["after." + k].item(), b.item()) for k, b in model.named_buffers()
                   if k.endswith("num_batches_tracked")]
            ok = all(a == b for a, b in nbt)
            print(f"{'ok' if ok else 'FAIL'} - {name}: num_batches_tracked of all {len(nbt)} BNs ({nbt[0][1]})")
            ck.failures += 0 if ok else 1
            ck.close(f"{name}: eval-mode logits (running statistics)", t["out.eval_logits"], eval_logits)
        opt.step()
        losses.append(loss.item())
    ck.failures += 0 if branches.report(name, steps) else 1
    ck.close(f"{name}: {steps}-step SGD loss trajectory", t["traj.losses"], torch.tensor(losses), atol=0, rtol=1e-3)
    print(f"# {name} losses: " + " ".join(f"{v:.5f}" for v in losses))
    # After 10 steps the weights themselves differ at the trajectory's tolerance.
    close_all(ck, f"{name}: BN buffers after the trajectory",
              [(k, t["final." + k], b) for k, b in model.named_buffers()], atol=1e-3, rtol=1e-3)


def main(paths):
    ck = Checker()
    for path in paths:
        check(path, ck)
    ck.done()


if __name__ == "__main__":
    main(sys.argv[1:])
