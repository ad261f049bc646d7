#!/usr/bin/env python3
"""A trained classifier for the edge engine's accuracy checks: a small ResNet on the
handwritten digits that python3-sklearn ships (1797 images, 8x8, upsampled to 16x16).

  make_digits.py OUT_DIR [--width W] [--epochs E] [--seed S]

Writes OUT_DIR/digits.onnx (opset 17, batch 1, eval mode: batch norms with running
statistics), OUT_DIR/calib.npy (200 training images), OUT_DIR/eval.npy and
OUT_DIR/labels.npy (the 597 held-out images and their classes), and prints the
PyTorch top-1 on the held-out set, which nebula-deploy's fp32 .neb must reproduce.
Deterministic for a seed (one thread)."""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class Net(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        self.layers = nn.Sequential(Block(w, w, 1), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * w, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False)
    x = (x - 0.3) / 0.35
    y = torch.tensor(d.target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(a.seed))
    tr, te = perm[:1200], perm[1200:]
    net = Net(a.width)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    for _ in range(a.epochs):
        net.train()
        for i in range(0, len(tr), 32):
            b = tr[i:i + 32]
            opt.zero_grad()
            F.cross_entropy(net(x[b]), y[b]).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        acc = (net(x[te]).argmax(1) == y[te]).float().mean().item()
    os.makedirs(a.out, exist_ok=True)
    torch.onnx.export(net, x[:1], os.path.join(a.out, "digits.onnx"), opset_version=17,
                      input_names=["pixels"], output_names=["logits"], do_constant_folding=True)
    np.save(os.path.join(a.out, "calib.npy"), x[tr[:200]].numpy())
    np.save(os.path.join(a.out, "eval.npy"), x[te].numpy())
    np.save(os.path.join(a.out, "labels.npy"), y[te].numpy().astype(np.int64))
    print(f"pytorch_top1 {acc:.6f}")


if __name__ == "__main__":
    main()
