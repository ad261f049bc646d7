#!/usr/bin/env python3
"""fed_peer - the peer of nebula-fed's round time: the same federated round written in
PyTorch (as Debian ships it), one process, one thread.

  fed_peer.py TRAIN_H5 --clients K --per-round M --rounds R --local-steps E --batch B
              --hidden H --lr LR [--dpsgd CLIP NOISE]

Round: M clients drawn without replacement; each starts from the global MLP
(D -> H -> 10, ReLU, nn.Linear's initialisation), takes E steps of plain SGD on batches of
B from its IID shard (cross-entropy), and the server averages the updates weighted by
shard size (FedAvg). With --dpsgd, each local step is DP-SGD as nebula-fed's dp.sample_clip
runs it: a Poisson sample of the shard at rate B / shard size, per-example gradients
(vmap over grad: torch.func in PyTorch 2.x, functorch in 1.13; what Opacus's functorch
mode uses), each clipped to CLIP,
summed, Gaussian noise NOISE x CLIP, divided by B. TRAIN_H5 may be an .npz with the same
"images" and "labels" (for a venv without h5py).

Images: the HDF5 set's uint8 pixels / 255, normalised by mean 0.2 and std 0.35 (the
config's), the grey channel repeated three times (nebula-fed's layout, D = 3 H W).
Prints one line per round, "round=N round_s=S", then "median_round_s=S" over the rounds
after the first."""
import argparse
import statistics
import time

import numpy as np
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train")
    for k, t in (("clients", int), ("per-round", int), ("rounds", int), ("local-steps", int), ("batch", int),
                 ("hidden", int), ("lr", float)):
        ap.add_argument("--" + k, type=t, required=True)
    ap.add_argument("--dpsgd", type=float, nargs=2, metavar=("CLIP", "NOISE"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    if a.train.endswith(".npz"):  # the PyPI peer's venv has no h5py: the bench converts the set
        z = np.load(a.train)
        x, y = z["images"].astype(np.float32) / 255.0, z["labels"].astype(np.int64)
    else:
        import h5py
        with h5py.File(a.train, "r") as f:
            x = np.asarray(f["images"], dtype=np.float32) / 255.0
            y = np.asarray(f["labels"], dtype=np.int64)
    x = (x - 0.2) / 0.35
    x = np.repeat(np.transpose(x, (0, 3, 1, 2)), 3, axis=1) if x.shape[-1] == 1 else np.transpose(x, (0, 3, 1, 2))
    X, Y = torch.from_numpy(np.ascontiguousarray(x.reshape(len(x), -1))), torch.from_numpy(y)
    D, n = X.shape[1], len(X)
    model = torch.nn.Sequential(torch.nn.Linear(D, a.hidden), torch.nn.ReLU(), torch.nn.Linear(a.hidden, 10))
    rng = np.random.default_rng(1)
    shards = np.array_split(rng.permutation(n), a.clients)
    loss_fn = torch.nn.functional.cross_entropy
    if a.dpsgd and hasattr(torch, "func"):  # PyTorch 2.x: torch.func
        names = [k for k, _ in model.named_parameters()]

        def loss1(params, xi, yi):
            out = torch.func.functional_call(model, dict(zip(names, params)), (xi.unsqueeze(0),))
            return loss_fn(out, yi.unsqueeze(0))
        per_example = torch.func.vmap(torch.func.grad(loss1), in_dims=(None, 0, 0))
    elif a.dpsgd:  # PyTorch 1.13: functorch
        from functorch import grad, make_functional, vmap
        fmodel, _ = make_functional(model)

        def loss1(params, xi, yi):
            return loss_fn(fmodel(params, xi.unsqueeze(0)), yi.unsqueeze(0))
        per_example = vmap(grad(loss1), in_dims=(None, 0, 0))
    times = []
    for r in range(a.rounds):
        t0 = time.perf_counter()
        glob = [p.detach().clone() for p in model.parameters()]
        acc = [torch.zeros_like(p) for p in glob]
        wsum = 0.0
        for c in rng.choice(a.clients, a.per_round, replace=False):
            shard = torch.from_numpy(shards[c])
            with torch.no_grad():
                for p, g in zip(model.parameters(), glob):
                    p.copy_(g)
            for s in range(a.local_steps):
                if a.dpsgd:
                    q = min(1.0, a.batch / len(shard))
                    idx = shard[torch.rand(len(shard)) < q]
                    params = tuple(p.detach() for p in model.parameters())
                    grads = [torch.zeros_like(p) for p in params]
                    if len(idx):
                        g = per_example(params, X[idx], Y[idx])
                        norms = torch.sqrt(sum((gi.reshape(len(idx), -1) ** 2).sum(1) for gi in g))
                        scale = torch.clamp(a.dpsgd[0] / (norms + 1e-12), max=1.0)
                        grads = [(gi * scale.view(-1, *[1] * (gi.dim() - 1))).sum(0) for gi in g]
                    with torch.no_grad():
                        for p, gs in zip(model.parameters(), grads):
                            p -= a.lr * (gs + a.dpsgd[1] * a.dpsgd[0] * torch.randn_like(gs)) / a.batch
                else:
                    idx = shard[torch.randint(len(shard), (a.batch,))]
                    model.zero_grad()
                    loss_fn(model(X[idx]), Y[idx]).backward()
                    with torch.no_grad():
                        for p in model.parameters():
                            p -= a.lr * p.grad
            with torch.no_grad():
                for ac, p, g in zip(acc, model.parameters(), glob):
                    ac += len(shard) * (p - g)
            wsum += len(shard)
        with torch.no_grad():
            for p, g, ac in zip(model.parameters(), glob, acc):
                p.copy_(g + ac / wsum)
        times.append(time.perf_counter() - t0)
        print(f"round={r + 1} round_s={times[-1]:.4f}")
    print(f"median_round_s={statistics.median(times[1:] if len(times) > 1 else times):.4f}")


if __name__ == "__main__":
    main()
