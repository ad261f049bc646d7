#!/usr/bin/env python3
"""bert_ref — BertForMaskedLM in PyTorch from Nebula's weights, compared with Nebula's results.

    bert_ref.py DUMP.safetensors

The dump (written by validation/reference/test_bert_ref.c) holds the parameters by their
Hugging Face names (BertForMaskedLM's, without the "bert." prefix of the encoder), the
batch (in.input_ids, in.token_type_ids, in.attention_mask, in.targets; -1 = not
predicted), Nebula's logits and mean loss (out.*), every parameter gradient (grad.NAME)
and a 10-step AdamW loss trajectory (traj.losses) with its hyper-parameters in the
metadata. The model is written out functionally from HF modeling_bert (the
transformers package is not needed), dropout off:
  BertEmbeddings       LayerNorm(word[ids] + position[0..T) + token_type[types]),
                       word_embeddings with padding_idx = pad_token_id
  BertSelfAttention    softmax(q k^T / sqrt(HS) + (1 - mask) * finfo.min) v, per head
  BertSelfOutput       LayerNorm(dense(attn) + x)
  BertIntermediate     gelu(dense(x)), exact erf GELU
  BertOutput           LayerNorm(dense(h) + x)
  BertLMPredictionHead LayerNorm(gelu(dense(x))) @ word_embeddings^T + cls.predictions.bias
LayerNorm eps 1e-12 everywhere; nn.Linear weights are (out, in)."""
import math
import sys

import torch
import torch.nn.functional as F

from nebula_ref import Checker, load_safetensors

EPS = 1e-12


def forward(P, ids, types, mask, targets, L, NH, pad, head_at_targets=False):
    B, T = ids.shape
    C = P["embeddings.word_embeddings.weight"].shape[1]
    HS = C // NH
    lin = lambda x, n: F.linear(x, P[n + ".weight"], P[n + ".bias"])
    # x.float(): CPU autocast (torch 1.13) leaves layer_norm to its input's type and then
    # refuses a bf16 input with fp32 weights; CUDA autocast runs it in fp32, as here
    ln = lambda x, n: F.layer_norm(x.float(), (C,), P[n + ".weight"], P[n + ".bias"], EPS)
    x = (F.embedding(ids, P["embeddings.word_embeddings.weight"], padding_idx=pad)
         + P["embeddings.position_embeddings.weight"][:T]
         + P["embeddings.token_type_embeddings.weight"][types])
    x = ln(x, "embeddings.LayerNorm")
    # get_extended_attention_mask: (B, 1, 1, T), 0 keep, finfo.min masked.
    ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    for l in range(L):
        pre = f"encoder.layer.{l}."
        heads = lambda t: t.view(B, T, NH, HS).transpose(1, 2)
        q, k, v = (heads(lin(x, pre + "attention.self." + n)) for n in ("query", "key", "value"))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(HS) + ext).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = ln(lin(y, pre + "attention.output.dense") + x, pre + "attention.output.LayerNorm")
        h = F.gelu(lin(x, pre + "intermediate.dense"))
        x = ln(lin(h, pre + "output.dense") + x, pre + "output.LayerNorm")
    if head_at_targets:  # the MLM head at the targeted positions only (NVIDIA's recipe; Nebula's default)
        x, targets = x[targets >= 0], targets[targets >= 0]
    h = F.gelu(lin(x, "cls.predictions.transform.dense"))
    h = ln(h, "cls.predictions.transform.LayerNorm")
    logits = h @ P["embeddings.word_embeddings.weight"].T + P["cls.predictions.bias"]
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1)
    return logits, loss


def lr_at(step, base, warmup, total, min_lr):
    """Nebula's lr_at for LR_SCHEDULE_LINEAR: warmup (step+1)/warmup, then a line to min_lr at total."""
    if step < warmup:
        return base * (step + 1) / warmup
    if step >= total:
        return min_lr
    return min_lr + (1.0 - (step - warmup) / (total - warmup)) * (base - min_lr)


def main(path):
    t, meta = load_safetensors(path)
    L, NH, pad = int(meta["layers"]), int(meta["heads"]), int(meta["pad_token_id"])
    ids, types = t["in.input_ids"].long(), t["in.token_type_ids"].long()
    mask, targets = t["in.attention_mask"].long(), t["in.targets"].long()
    P = {k: v.clone().requires_grad_(True) for k, v in t.items() if not k.split(".")[0] in ("in", "out", "grad", "traj")}
    ck = Checker()
    logits, loss = forward(P, ids, types, mask, targets, L, NH, pad)
    keep = mask.bool()
    ck.close(f"logits at the {int(keep.sum())} non-padded positions", t["out.logits"][keep], logits[keep])
    ck.close("mean MLM loss", t["out.loss"], loss.reshape(1), atol=1e-5, rtol=1e-5)
    loss.backward()
    for name, p in P.items():
        ck.close(f"grad {name}", t["grad." + name], p.grad)

    # 10 AdamW steps from the same initial weights, same batch, same schedule; the
    # decay groups by HF run_mlm's rule (no decay on "bias" and "LayerNorm.weight").
    P = {k: v.detach().clone().requires_grad_(True) for k, v in P.items()}
    no_decay = lambda n: n.endswith("bias") or n.endswith("LayerNorm.weight")
    base, wd = float(meta["lr"]), float(meta["weight_decay"])
    opt = torch.optim.AdamW([{"params": [p for n, p in P.items() if not no_decay(n)], "weight_decay": wd},
                             {"params": [p for n, p in P.items() if no_decay(n)], "weight_decay": 0.0}],
                            lr=base, betas=(float(meta["beta1"]), float(meta["beta2"])), eps=float(meta["eps"]))
    steps = int(meta["steps"])
    losses = []
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, base, int(meta["warmup"]), steps, 0.0)
        opt.zero_grad()
        _, loss = forward(P, ids, types, mask, targets, L, NH, pad)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ck.close(f"{steps}-step AdamW loss trajectory", t["traj.losses"], torch.tensor(losses), atol=0, rtol=1e-3)
    ck.done()


if __name__ == "__main__":
    main(sys.argv[1])
