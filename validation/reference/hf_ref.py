#!/usr/bin/env python3
"""hf_ref — transformers' side of validation/cli/test_ckpt_hf.sh (nebula-ckpt convert
--to hf / --from hf), run with build/venv/bin/python (transformers, safetensors, Debian's
torch), offline.

    hf_ref.py init OUT_ROOT
        Random GPT2LMHeadModel (gpt2-tiny's sizes: L=2, NH=4, C=64, V=256, T=64) and
        BertForMaskedLM (L=2, NH=2, C=128, IC=512, V=1000, T=64) saved by save_pretrained
        to OUT_ROOT/gpt2 and OUT_ROOT/bert. The weights are drawn away from the init's
        zero biases and unit gains (matrices x10, biases +-0.1, gains 1 +- 0.2), so a
        converter that swapped two of them could not pass. Beside them, files in the shape
        other writers leave: OUT_ROOT/gpt2-ddp.safetensors (every name "module." +
        GPT2LMHeadModel's, the tied lm_head.weight and the attn.bias / attn.masked_bias
        buffers of old GPT-2 files included), OUT_ROOT/bert-ddp.safetensors (module.bert.*,
        cls.predictions.decoder.weight / .bias, position_ids and a pooler), and the same
        two with the tied copy off by 1e-3 in one value (*-untied.safetensors).
    hf_ref.py logits SPEC...
        SPEC is HFDIR,DUMP[,names][,perturb=NAME=DELTA][,fail]. Loads HFDIR with
        from_pretrained (no missing, unexpected or mismatched keys allowed), runs it in
        float64 on DUMP's batch (validation/reference/test_hf_logits.c wrote it from a
        Nebula checkpoint) and compares the logits: max |d| <= 1e-4 max |ref| (the
        padding columns of GPT-2's vocabulary aside). `names`: the directory is a Nebula
        export, whose model.safetensors must hold exactly the names save_pretrained
        writes for the same config and whose config.json must state the real vocabulary;
        `perturb`: NAME += DELTA after loading, `fail`: that SPEC must fail its logits
        check (the caller's proof that the check can fail). Exit 0 when every SPEC did
        what it should."""
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, AutoConfig,
                          logging as hf_logging)

hf_logging.set_verbosity_error()
CLASSES = {"gpt2": GPT2LMHeadModel, "bert": BertForMaskedLM}


def spread(model, seed):
    """O(1) weights of every kind, so no two tensors look alike."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name or "ln_" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.4 * (torch.rand(p.shape, generator=g) - 0.5))
            elif name.endswith("bias"):
                p.copy_(0.2 * (torch.rand(p.shape, generator=g) - 0.5))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
    return model


def with_names(path, src, rename, extra, untie):
    """src's tensors renamed, the extra ones added; untie: the tied copy off in one value."""
    P = {rename(k): v for k, v in load_file(src).items()}
    for k, v in extra(P).items():
        P[k] = v.clone()
    if untie:
        P[untie] = P[untie].clone()
        P[untie].view(-1)[7] += 1e-3
    save_file(P, path)


def init(root):
    torch.manual_seed(0)
    gcfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=256, bos_token_id=None,
                      eos_token_id=None)
    spread(GPT2LMHeadModel(gcfg), 1).save_pretrained(f"{root}/gpt2")
    bcfg = BertConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=128, intermediate_size=512,
                      vocab_size=1000, max_position_embeddings=64)
    spread(BertForMaskedLM(bcfg), 2).save_pretrained(f"{root}/bert")

    def gpt2_extra(P):
        out = {"module.lm_head.weight": P["module.transformer.wte.weight"]}
        for l in range(2):
            out[f"module.transformer.h.{l}.attn.bias"] = torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64)
            out[f"module.transformer.h.{l}.attn.masked_bias"] = torch.tensor(-1e4)
        return out

    def bert_extra(P):
        return {"module.cls.predictions.decoder.weight": P["module.bert.embeddings.word_embeddings.weight"],
                "module.cls.predictions.decoder.bias": P["module.cls.predictions.bias"],
                "module.bert.embeddings.position_ids": torch.arange(64).view(1, 64),
                "module.bert.pooler.dense.weight": torch.randn(128, 128),
                "module.bert.pooler.dense.bias": torch.zeros(128)}

    for fam, extra, tied in (("gpt2", gpt2_extra, "module.lm_head.weight"),
                             ("bert", bert_extra, "module.cls.predictions.decoder.weight")):
        src = f"{root}/{fam}/model.safetensors"
        with_names(f"{root}/{fam}-ddp.safetensors", src, lambda k: "module." + k, extra, None)
        with_names(f"{root}/{fam}-untied.safetensors", src, lambda k: "module." + k, extra, tied)
    print(f"wrote {root}/gpt2, {root}/bert and their module.-prefixed files")
    return True


def saved_names(cfg, cls):
    """The names save_pretrained writes for a model of this config."""
    with tempfile.TemporaryDirectory() as d:
        cls(cfg).save_pretrained(d)
        with safe_open(f"{d}/model.safetensors", "pt") as f:
            return set(f.keys())


def check_export(hfdir, fam, cfg, vocab):
    with safe_open(f"{hfdir}/model.safetensors", "pt") as f:
        names = set(f.keys())
    want = saved_names(cfg, CLASSES[fam])
    arch = {"gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM"}[fam]
    ok = names == want and cfg.vocab_size == vocab and cfg.architectures == [arch] and cfg.model_type == fam
    print(f"{'ok' if ok else 'FAIL'} - {hfdir}: {len(names)} tensors, exactly save_pretrained's names for "
          f"{arch} (missing {sorted(want - names)}, extra {sorted(names - want)}); config.json: model_type "
          f"{cfg.model_type}, architectures {cfg.architectures}, vocab_size {cfg.vocab_size} (Nebula's {vocab})")
    return ok


def logits_one(spec):
    parts = spec.split(",")
    hfdir, dump, opts = parts[0], parts[1], parts[2:]
    expect_fail = "fail" in opts
    with safe_open(dump, "pt") as f:
        meta = f.metadata()
    d = load_file(dump)
    fam, V = meta["family"], int(meta["vocab_size"])
    cfg = AutoConfig.from_pretrained(hfdir)
    ok = check_export(hfdir, fam, cfg, V) if "names" in opts else True
    model, info = CLASSES[fam].from_pretrained(hfdir, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        print(f"FAIL - {hfdir}: from_pretrained reports {bad}")
        ok = False
    model = model.double().eval()
    for o in opts:
        if o.startswith("perturb="):
            name, delta = o[len("perturb="):].split("=")
            with torch.no_grad():
                dict(model.named_parameters())[name].add_(float(delta))
            print(f"# {name} perturbed by {delta}: the logits check below must fail")
    tokens = d["in.tokens"].long()
    with torch.no_grad():
        if fam == "bert":
            ref = model(input_ids=tokens, attention_mask=d["in.mask"].long()).logits
        else:
            ref = model(input_ids=tokens).logits
    got = d["out.logits"].double()[..., :V]
    rel = ((got - ref).abs().max() / ref.abs().max()).item()
    close = rel <= 1e-4 and bool(torch.isfinite(got).all())
    what = (f"{meta['model']} logits (B, T) = {tuple(tokens.shape)}: Nebula's against {type(model).__name__} "
            f"from {hfdir}, max |d| / max |ref| = {rel:.2e} (max |ref| {ref.abs().max().item():.3g}), bound 1e-4")
    if expect_fail:
        print(f"{'ok' if not close else 'FAIL'} - {what}: fails, as it must")
        return ok and not close
    print(f"{'ok' if close else 'FAIL'} - {what}")
    return ok and close


def logits(*specs):
    results = []
    for s in specs:
        try:
            results.append(logits_one(s))
        except Exception as e:  # one broken SPEC (a missing dump) must not hide the others' lines
            print(f"FAIL - {s}: {type(e).__name__}: {e}")
            results.append(False)
    return all(results)


if __name__ == "__main__":
    fn = {"init": init, "logits": logits}[sys.argv[1]]
    sys.exit(0 if fn(*sys.argv[2:]) else 1)
