#!/usr/bin/python3
"""make_models.py — the ONNX models validation/deploy/test_onnx.c imports.

Writes four small models exported by torch.onnx (opset 17, static shapes, constant
folding on) into OUTDIR/<name>/: model.onnx, input.npy (a fixed random input) and
ref.npy (PyTorch's output for it). Models: a CIFAR-style resnet18, a MobileNet-v2 at
width 0.35, a GPT-2-style tiny decoder, a BERT-style tiny encoder and a small
network of the remaining supported operators (ops).

The one design decision: the transformers are written in plain torch with every size a
Python constant (no x.size() in forward), so the traced graph has no Shape arithmetic
and the causal mask is an additive constant: what is exported is only the operators the
importer supports, and a change in torch's exporter shows up as a refused op, not as a
silently different graph.

Usage: /usr/bin/python3 validation/deploy/make_models.py OUTDIR
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision

SEED = 1234
VOCAB, EMBD, HEADS, T, LAYERS = 64, 32, 2, 16, 2


class Attention(nn.Module):
    def __init__(self, causal):
        super().__init__()
        self.qkv = nn.Linear(EMBD, 3 * EMBD)
        self.proj = nn.Linear(EMBD, EMBD)
        hd = EMBD // HEADS
        self.scale = 1.0 / math.sqrt(hd)
        mask = torch.zeros(1, 1, T, T)
        if causal:
            mask = torch.triu(torch.full((T, T), -1e4), diagonal=1).view(1, 1, T, T)
        self.register_buffer("mask", mask)
        self.causal = causal

    def forward(self, x):
        hd = EMBD // HEADS
        q, k, v = self.qkv(x).split(EMBD, dim=2)
        q = q.reshape(1, T, HEADS, hd).transpose(1, 2)
        k = k.reshape(1, T, HEADS, hd).transpose(1, 2)
        v = v.reshape(1, T, HEADS, hd).transpose(1, 2)
        att = (q @ k.transpose(2, 3)) * self.scale
        if self.causal:
            att = att + self.mask
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(1, T, EMBD)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, causal, pre_ln):
        super().__init__()
        self.ln1 = nn.LayerNorm(EMBD)
        self.ln2 = nn.LayerNorm(EMBD)
        self.attn = Attention(causal)
        self.mlp = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD))
        self.pre_ln = pre_ln

    def forward(self, x):
        if self.pre_ln:  # GPT-2
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))  # BERT: post-LN
        return self.ln2(x + self.mlp(x))


class TinyGPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.wpe = nn.Embedding(T, EMBD)
        self.blocks = nn.ModuleList([Block(True, True) for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(EMBD)
        self.register_buffer("pos", torch.arange(T).view(1, T))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(self.pos)
        for b in self.blocks:
            x = b(x)
        x = self.ln_f(x)
        return x @ self.wte.weight.t()  # tied lm head


class TinyBERT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, EMBD)
        self.pos = nn.Embedding(T, EMBD)
        self.typ = nn.Embedding(2, EMBD)
        self.ln = nn.LayerNorm(EMBD)
        self.blocks = nn.ModuleList([Block(False, False) for _ in range(LAYERS)])
        self.pool = nn.Linear(EMBD, EMBD)
        self.register_buffer("pos_ids", torch.arange(T).view(1, T))
        self.register_buffer("type_ids", torch.zeros(1, T, dtype=torch.long))

    def forward(self, idx):
        x = self.tok(idx) + self.pos(self.pos_ids) + self.typ(self.type_ids)
        x = self.ln(x)
        for b in self.blocks:
            x = b(x)
        return torch.tanh(self.pool(x[:, 0]))  # the pooler: first token


class OpsNet(nn.Module):
    """The operators the four networks do not reach: a standalone BatchNormalization,
    MaxPool with ceil_mode, AveragePool without the padding counted, Slice with steps,
    Where on a constant mask, Concat, ReduceMean, Pow, Sqrt, Sub, Div, Flatten through
    view(x.size(0), -1), Unsqueeze/Transpose/Squeeze, the tanh GELU and Softmax."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(3)
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.register_buffer("mask", (torch.arange(8) % 2 == 0).view(1, 8, 1, 1))

    def forward(self, x):  # (1, 3, 16, 16)
        y = torch.sigmoid(self.conv(self.bn(x)))                    # (1, 8, 8, 8)
        y = nn.functional.max_pool2d(y, 3, 2, ceil_mode=True)        # (1, 8, 4, 4)
        a = nn.functional.avg_pool2d(y, 2, 1, padding=1, count_include_pad=False)[:, :, 1:, 1:]
        b = torch.where(self.mask, y, a)
        c = torch.cat([b, y * 2.0 - a], dim=1)                        # (1, 16, 4, 4)
        d = c.mean(dim=(2, 3), keepdim=True)
        e = torch.sqrt(c.pow(2) + 1.0) / d
        f = e.view(e.size(0), -1)                                     # (1, 256)
        g = f.unsqueeze(1).transpose(1, 2).squeeze(2)
        h = nn.functional.gelu(g[:, 10:200:3], approximate="tanh")    # (1, 64)
        return torch.softmax(h, dim=1)


def ops():
    return OpsNet(), torch.randn(1, 3, 16, 16)


def resnet18():
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m, torch.randn(1, 3, 32, 32)


def mobilenet_v2():
    m = torchvision.models.mobilenet_v2(width_mult=0.35, num_classes=10)
    return m, torch.randn(1, 3, 32, 32)


def gpt2():
    return TinyGPT2(), torch.randint(0, VOCAB, (1, T), dtype=torch.long)


def bert():
    return TinyBERT(), torch.randint(0, VOCAB, (1, T), dtype=torch.long)


def randomise_bn(m):
    """Non-trivial running statistics, so folded batch norms are not identities."""
    g = torch.Generator().manual_seed(SEED)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            n = mod.num_features
            mod.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            mod.weight.data.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            mod.bias.data.copy_(torch.randn(n, generator=g) * 0.1)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUTDIR")
    out = sys.argv[1]
    for name, make in (("resnet18", resnet18), ("mobilenet_v2", mobilenet_v2),
                       ("gpt2", gpt2), ("bert", bert), ("ops", ops)):
        torch.manual_seed(SEED)
        model, x = make()
        randomise_bn(model)
        model.eval()
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with torch.no_grad():
            ref = model(x)
            torch.onnx.export(model, (x,), os.path.join(d, "model.onnx"), opset_version=17,
                              do_constant_folding=True, input_names=["input"],
                              output_names=["output"], training=torch.onnx.TrainingMode.EVAL)
        np.save(os.path.join(d, "input.npy"), x.numpy())
        np.save(os.path.join(d, "ref.npy"), ref.numpy())
        print("%s: input %s output %s" % (name, tuple(x.shape), tuple(ref.shape)))


if __name__ == "__main__":
    main()
