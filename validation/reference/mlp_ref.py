#!/usr/bin/env python3
"""mlp_ref — PyTorch's nn.Sequential MLP from Nebula's weights, compared with Nebula's results.

    mlp_ref.py DUMP.safetensors...

The dump (written by validation/reference/test_mlp_ref.c) holds, by state_dict name, the
initial parameters; the batch (in.images, in.labels); Nebula's train-mode logits and mean
loss (out.*), every parameter gradient (grad.NAME) and the parameters after a 10-step SGD
trajectory (final.NAME) with its losses (traj.losses, step 0 being the step above); and
for every step the branch each hidden ReLU took (branch.relu.S: (layers, B, hidden), 1
where Nebula's output is > 0). Sizes and hyper-parameters are in the metadata.

The model is the module of libcore/nn/mlp.h's comment, loaded with strict=True (every
name, no extra) and run in float64, so the reference is exact to Nebula's fp32 and the
comparison measures Nebula's rounding alone. The tolerance is derived from the reductions
a value went through (n = inputs + hidden x layers + classes + batch terms):
|d| <= 4 eps32 n (|ref| + max|ref| of the tensor), and `steps` times that for the
trajectory and the final parameters (each SGD step adds at most one gradient's error)."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from nebula_ref import Checker, load_safetensors

DUMP_PREFIXES = ("in", "out", "grad", "final", "traj", "branch")
EPS32 = torch.finfo(torch.float32).eps


class MLP(nn.Module):
    def __init__(self, D, hidden, layers, classes):
        super().__init__()
        mods = []
        for i in range(layers):
            mods += [nn.Linear(D if i == 0 else hidden, hidden), nn.ReLU()]
        mods.append(nn.Linear(hidden if layers else D, classes))
        self.layers = nn.Sequential(*mods)

    def forward(self, x):
        return self.layers(x.flatten(1))


class Branches(nn.Module):
    """Nebula's ReLU branches in place of a ReLU module: the pre-activation times Nebula's
    mask. Wherever the reference's own branch (x > 0) differs, x must be a near-tie: within
    `tie` x rms of 0 (1e-3 at step 0, same weights; 5e-2 later, when the weights have
    drifted by the trajectory's tolerance). A bug's wrong branch sits at |x| ~ rms."""

    def __init__(self, t, layer):
        super().__init__()
        self.t, self.layer, self.flips, self.worst, self.step = t, layer, 0, [], 0

    def forward(self, x):
        mask = self.t[f"branch.relu.{self.step}"][self.layer].to(x.dtype)
        xd = x.detach()
        differ = (mask > 0) != (xd > 0)
        n = int(differ.sum())
        self.flips += n
        self.worst.append((xd[differ].abs().max() / xd.pow(2).mean().sqrt()).item() if n else 0.0)
        return x * mask


def check(path, ck):
    t, meta = load_safetensors(path)
    name = meta["case"]
    D, H, L, K, B = (int(meta[k]) for k in ("inputs", "hidden", "layers", "classes", "batch"))
    steps = int(meta["steps"])
    tol = 4 * EPS32 * (D + H * L + K + B)

    def close(what, got, ref, scale=1.0):
        atol = scale * tol * ref.detach().abs().max().item()
        ck.close(what, got, ref, atol=atol, rtol=scale * tol)

    state = {k: v.double() for k, v in t.items() if k.split(".")[0] not in DUMP_PREFIXES}
    model = MLP(D, H, L, K).double()
    model.load_state_dict(state, strict=True)
    print(f"ok - {name}: Nebula's {len(state)} tensors load strictly into nn.Sequential "
          f"({', '.join(f'{k} {tuple(v.shape)}' for k, v in state.items())})")
    replays = [Branches(t, l) for l in range(L)]
    for l in range(L):
        model.layers[2 * l + 1] = replays[l]
    images, labels = t["in.images"].double(), t["in.labels"].long()

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    base, wd, mom = float(meta["lr"]), float(meta["weight_decay"]), float(meta["momentum"])
    opt = torch.optim.SGD([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=base, momentum=mom, foreach=False)
    warmup, step_size, gamma = int(meta["warmup"]), int(meta["step_size"]), float(meta["gamma"])
    losses = []
    for step in range(steps):
        lr = base * (step + 1) / warmup if step < warmup else base * gamma ** ((step - warmup) // step_size)
        for group in opt.param_groups:
            group["lr"] = lr
        for r in replays:
            r.step = step
        opt.zero_grad()
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        if step == 0:
            close(f"{name}: train-mode logits", t["out.logits"], logits)
            close(f"{name}: mean loss", t["out.loss"], loss.reshape(1))
            for k, p in model.named_parameters():
                close(f"{name}: gradient of {k}", t["grad." + k], p.grad)
        opt.step()
        losses.append(loss.item())
    flips = sum(r.flips for r in replays)
    first = max((r.worst[0] for r in replays), default=0.0)
    later = max((w for r in replays for w in r.worst[1:]), default=0.0)
    ok = first <= 1e-3 and later <= 5e-2
    print(f"{'ok' if ok else 'FAIL'} - {name}: Nebula's ReLU branches over {steps} steps: {flips} differ from the "
          f"reference's own, each a near-tie (worst |x|/rms at step 0 {first:.2g} <= 0.001, later {later:.2g} <= 0.05)")
    ck.failures += 0 if ok else 1
    close(f"{name}: {steps}-step SGD loss trajectory", t["traj.losses"], torch.tensor(losses), scale=steps)
    for k, p in model.named_parameters():
        close(f"{name}: {k} after the trajectory", t["final." + k], p, scale=steps)
    print(f"# {name} losses: " + " ".join(f"{v:.5f}" for v in losses))


def main(paths):
    ck = Checker()
    for path in paths:
        check(path, ck)
    ck.done()


if __name__ == "__main__":
    main(sys.argv[1:])
