#!/usr/bin/python3
"""optim_ref — the PyTorch side of validation/unit/test_optim.c.

Usage: optim_ref.py DIR

DIR holds what the C test wrote:
  config.json   {"entries": [{"name", "shape", "decay"}], "steps": S,
                 "runs": [{"name", "optim": "adamw"|"sgd", "lr": [S floats], hyper-parameters}],
                 "clip": {"max_norm": [S floats]}}
  params0.f32   initial parameters, the entries packed back to back (no padding), float32
  grads.f32     S gradients, each packed like params0
It writes, float32, packed the same way:
  out_<run>.f32    final parameters of each run (torch.optim.AdamW / SGD, foreach=False,
                   one param group with weight_decay for entries with "decay", one with 0)
  clip_grads.f32   each step's gradients after torch.nn.utils.clip_grad_norm_
  clip_norms.f32   each step's total norm as returned by clip_grad_norm_

Exits 1 (with a message on stderr) when torch or numpy is missing: the C test
must then FAIL, never skip.
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: optim_ref.py DIR\n")
        return 2
    try:
        import numpy as np
        import torch
    except ImportError as e:
        sys.stderr.write(f"optim_ref: {e}; install python3-torch and python3-numpy (tools/deps.sh)\n")
        return 1
    torch.set_num_threads(1)
    d = sys.argv[1]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    entries, steps = cfg["entries"], cfg["steps"]
    sizes = [int(np.prod(e["shape"])) for e in entries]
    n = sum(sizes)

    def unpack(flat):
        out, o = [], 0
        for e, k in zip(entries, sizes):
            out.append(torch.from_numpy(flat[o:o + k].copy()).reshape(e["shape"]))
            o += k
        return out

    def pack(tensors):
        return np.concatenate([t.detach().reshape(-1).numpy() for t in tensors]).astype(np.float32)

    p0 = np.fromfile(os.path.join(d, "params0.f32"), dtype=np.float32)
    grads = np.fromfile(os.path.join(d, "grads.f32"), dtype=np.float32).reshape(steps, n)
    assert p0.size == n, f"params0.f32 has {p0.size} floats, expected {n}"

    for run in cfg["runs"]:
        params = [torch.nn.Parameter(t) for t in unpack(p0)]
        decay = [p for p, e in zip(params, entries) if e["decay"]]
        no_decay = [p for p, e in zip(params, entries) if not e["decay"]]
        wd = run["weight_decay"]
        groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
        groups = [g for g in groups if g["params"]]
        if run["optim"] == "adamw":
            opt = torch.optim.AdamW(groups, lr=run["lr"][0], betas=(run["beta1"], run["beta2"]),
                                    eps=run["eps"], foreach=False)
        elif run["optim"] == "sgd":
            opt = torch.optim.SGD(groups, lr=run["lr"][0], momentum=run["momentum"], dampening=0,
                                  nesterov=run["nesterov"], foreach=False)
        else:
            raise ValueError(f"unknown optimizer {run['optim']}")
        for s in range(steps):
            for p, g in zip(params, unpack(grads[s])):
                p.grad = g
            for group in opt.param_groups:
                group["lr"] = run["lr"][s]
            opt.step()
        pack(params).tofile(os.path.join(d, f"out_{run['name']}.f32"))

    clipped, norms = [], []
    for s in range(steps):
        params = [torch.nn.Parameter(torch.zeros(e["shape"])) for e in entries]
        for p, g in zip(params, unpack(grads[s])):
            p.grad = g
        norm = torch.nn.utils.clip_grad_norm_(params, cfg["clip"]["max_norm"][s])
        norms.append(float(norm))
        clipped.append(pack([p.grad for p in params]))
    np.concatenate(clipped).tofile(os.path.join(d, "clip_grads.f32"))
    np.array(norms, dtype=np.float32).tofile(os.path.join(d, "clip_norms.f32"))
    print(f"optim_ref: torch {torch.__version__}, {len(cfg['runs'])} runs x {steps} steps, {n} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
