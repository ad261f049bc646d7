#!/usr/bin/env python3
"""ckpt_torch_ref — safetensors files of nebula-ckpt against the PyTorch reference
models, through the official `safetensors` package (run with the virtual environment
`make deps` creates, build/venv/bin/python, in which Debian's torch is visible).
validation/cli/test_ckpt_torch.sh drives it.

    ckpt_torch_ref.py logits WEIGHTS.safetensors DUMP.safetensors [--perturb NAME=DELTA | --transpose NAME]
        Loads WEIGHTS with safetensors.torch.load_file into the reference model and runs
        it on the batch of DUMP, which validation/reference/test_ckpt_logits.c wrote from
        a Nebula checkpoint of the same weights: GPT-2 into gpt2_ref.py's (every tensor
        by its Hugging Face name; none missing, none left over but attention-mask
        buffers), ResNet strictly into torchvision's (resnet_ref.build, float64, eval
        mode). Nebula's logits and loss must equal PyTorch's within the tolerance of
        the reference-vs-PyTorch tests (nebula_ref.Checker: |d| <= 1e-4 + 1e-3*|ref|
        for logits, 1e-5 relative for the loss). --perturb adds DELTA to one tensor
        after loading and --transpose swaps its first two dimensions (the
        Conv1D-versus-Linear slip a converter can make without changing a square
        tensor's shape), so the caller can see the check fail.
    ckpt_torch_ref.py init-gpt2 OUT.safetensors L NH C V T [SEED]
        Writes the PyTorch GPT-2's own random initialisation with
        safetensors.torch.save_file under Hugging Face's names, attention-mask buffers
        (h.N.attn.bias, as Hugging Face's GPT-2 files hold them) included. The
        initialisation is GPT-2's (normal 0.02, residual projections 0.02/sqrt(2L)),
        made O(1) the way test_gpt2_ref.c makes Nebula's: matrices x10, biases uniform
        in +-0.1, norm gains 1 +- 0.2. With zero biases and unit gains every bias and
        gain would look alike, and a converter that swapped two of them would pass.
    ckpt_torch_ref.py init-resnet OUT.safetensors ARCH STEM NUM_CLASSES [SEED]
        The same for torchvision's ResNet: its state_dict as torchvision keeps it
        (num_batches_tracked as int64), every batch-norm gain, bias and running
        statistic drawn away from 1 and 0 so none can hide."""
import math
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from gpt2_ref import forward
from nebula_ref import Checker

MASK_SUFFIX = ".attn.bias"   # Hugging Face's causal-mask buffer: not a parameter


def gpt2_names(L):
    names = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"]
    for l in range(L):
        names += [f"h.{l}.{n}" for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                         "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                         "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")]
    return names


def init_gpt2(out, L, NH, C, V, T, seed=1234):
    L, NH, C, V, T = int(L), int(NH), int(C), int(V), int(T)
    g = torch.Generator().manual_seed(int(seed))
    P = {}
    for name in gpt2_names(L):
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            P[name] = 1.0 + 0.4 * (torch.rand(C, generator=g) - 0.5)
            continue
        if name.endswith(".bias"):
            n = 3 * C if "c_attn" in name else 4 * C if "c_fc" in name else C
            P[name] = 0.2 * (torch.rand(n, generator=g) - 0.5)
            continue
        shape = {"wte.weight": (V, C), "wpe.weight": (T, C)}.get(name)
        if shape is None:
            kind = name.split(".", 2)[2]
            shape = {"attn.c_attn.weight": (C, 3 * C), "attn.c_proj.weight": (C, C),
                     "mlp.c_fc.weight": (C, 4 * C), "mlp.c_proj.weight": (4 * C, C)}[kind]
        std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
        P[name] = 10.0 * std * torch.randn(*shape, generator=g)
    for l in range(L):
        P[f"h.{l}{MASK_SUFFIX}"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    save_file(P, out)
    print(f"wrote {out}: PyTorch's GPT-2 (L={L}, NH={NH}, C={C}, V={V}, T={T}), {len(P)} tensors")
    return True


def resnet_model(arch, stem, num_classes):
    import torchvision
    model = getattr(torchvision.models, arch)(num_classes=int(num_classes))
    if stem == "cifar":
        model.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = torch.nn.Identity()
    return model


def init_resnet(out, arch, stem, num_classes, seed=1234):
    torch.manual_seed(int(seed))
    model = resnet_model(arch, stem, num_classes)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.8, 1.2)
                m.bias.uniform_(-0.1, 0.1)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.num_batches_tracked.fill_(7)
        model.fc.bias.uniform_(-0.1, 0.1)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, out)
    print(f"wrote {out}: torchvision {arch} ({stem} stem, {num_classes} classes), {len(state)} tensors")
    return True


def mutate(params, opts):
    """The caller's mutation (--perturb NAME=DELTA, --transpose NAME), announced."""
    if not opts:
        return
    assert len(opts) == 2 and opts[0] in ("--perturb", "--transpose"), f"unknown options {opts}"
    if opts[0] == "--perturb":
        name, delta = opts[1].split("=")
        params[name] = params[name] + float(delta)
        print(f"# {name} perturbed by {float(delta):g}: the checks below must fail")
    else:
        params[opts[1]] = params[opts[1]].transpose(0, 1).contiguous()
        print(f"# {opts[1]} transposed: the checks below must fail")


def resnet_logits(weights, d, meta, opts):
    from resnet_ref import build
    P = load_file(weights)
    mutate(P, opts)
    ck = Checker()
    model = build(meta, P).eval()   # strict: every tensor by torchvision's name, none left over
    print(f"ok - {weights}: {len(P)} tensors load strictly into torchvision's {meta['arch']} "
          f"({meta['stem']} stem)")
    with torch.no_grad():
        ref = model(d["in.images"].double())
        loss = F.cross_entropy(ref, d["in.labels"].long())
    report(ck, meta, d, ref, d["out.logits"], loss, tuple(d["in.images"].shape))


def report(ck, meta, d, ref, got, loss, batch):
    diff = (got.double() - ref.double()).abs()
    print(f"# {meta['model']}, batch {batch}: max |d| {diff.max().item():.3g}, "
          f"max |ref| {ref.abs().max().item():.3g}, loss Nebula {d['out.loss'].item():.6f} "
          f"PyTorch {loss.item():.6f}")
    ck.close("logits: Nebula's from the checkpoint, PyTorch's from the safetensors file", got, ref)
    ck.close("mean loss", d["out.loss"], loss.reshape(1), atol=1e-5, rtol=1e-5)
    ck.done()


def logits(weights, dump, *opts):
    d = load_file(dump)
    with safe_open(dump, "pt") as f:
        meta = f.metadata()
    if meta["family"] == "resnet":
        return resnet_logits(weights, d, meta, opts)
    with safe_open(weights, "pt") as f:
        wmeta = f.metadata() or {}
    L, NH, V = int(meta["layers"]), int(meta["heads"]), int(meta["vocab_size"])
    P = load_file(weights)
    ck = Checker()
    masks = [k for k in P if k.endswith(MASK_SUFFIX)]
    params = {k: v for k, v in P.items() if not k.endswith(MASK_SUFFIX)}
    want = set(gpt2_names(L))
    extra, missing = sorted(set(params) - want), sorted(want - set(params))
    ok = not extra and not missing and params["wte.weight"].shape[0] == V and all(
        v.dtype == torch.float32 for v in params.values())
    print(f"{'ok' if ok else 'FAIL'} - {weights}: {len(params)} GPT-2 tensors by Hugging Face name "
          f"(wte {tuple(params['wte.weight'].shape) if 'wte.weight' in params else None}, vocabulary {V}), "
          f"{len(masks)} attention masks, metadata {sorted(wmeta)}; missing {missing}, unexpected {extra}")
    ck.failures += 0 if ok else 1
    if missing:
        ck.done()
    mutate(params, opts)
    tokens, targets = d["in.tokens"].long(), d["in.targets"].long()
    with torch.no_grad():
        ref, loss = forward(params, tokens, targets, L, NH, V)
    got = d["out.logits"][..., :V]   # Nebula's padded vocabulary columns are not GPT-2's
    report(ck, meta, d, ref, got, loss, tuple(tokens.shape))


if __name__ == "__main__":
    fn = {"logits": logits, "init-gpt2": init_gpt2, "init-resnet": init_resnet}[sys.argv[1]]
    sys.exit(0 if fn(*sys.argv[2:]) else 1)
