"""sample_ref — the transformers side of validation/cli/test_sample.sh (nebula-train sample).

    sample_ref.py greedy WEIGHTS.safetensors SAMPLE.json NH
        GPT2LMHeadModel (sizes from the tensors' shapes, lm_head tied to wte) with the
        weights of the safetensors file nebula-ckpt convert --to safetensors writes
        (Hugging Face's names without the "transformer." prefix), greedy decoding of as
        many tokens as Nebula generated from the same prompt ids, a full forward per
        token (no cache on this side): the ids must be the same. The smallest gap between
        the best and the second-best logit on the way is printed, so a failure can be
        told from a near-tie (any gap above ~1e-4 is decided the same way by both).
    sample_ref.py init-bert OUT.safetensors V [SEED]
        BertForMaskedLM (bert-tiny's sizes: L 2, C 128, NH 2, IC 512, 512 positions,
        vocabulary V) with O(1) weights (the reason is test_gpt2_ref's: GPT-2's init
        std 0.02 leaves every softmax nearly flat, and two wrong models would agree),
        written under Nebula's BERT names: BertForMaskedLM's without "bert.", the tied
        decoder left out.
    sample_ref.py fillmask WEIGHTS.safetensors SAMPLE.json
        That BertForMaskedLM on the ids Nebula filled (token types 0, no padding): the
        top-k ids of every [MASK] must be Nebula's, and their probabilities within
        |d| <= 1e-6 + 1e-4 p (float32 logits within 1e-4 of each other, the reference
        tests' tolerance, move a probability by at most that share of itself).
    sample_ref.py bench HFDIR SAMPLE.json
        The peer of the sampling figure (docs/training.md#sampling): GPT2LMHeadModel
        .from_pretrained(HFDIR) (`nebula-ckpt convert --to hf` of the same checkpoint)
        decodes greedily from Nebula's prompt ids with its KV cache (past_key_values),
        as many tokens as Nebula generated, three times; one JSON line with the median
        prefill and per-token milliseconds beside Nebula's (from SAMPLE.json, a --greedy
        --json run), and whether the ids agree.
Exit 0 when everything agrees, 1 otherwise; one line per check."""
import json
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

logging.set_verbosity_error()  # its notices about generate() are not the test's output


def gpt2_from(weights):
    sd = load_file(weights)
    V, C = sd["wte.weight"].shape
    T = sd["wpe.weight"].shape[0]
    L = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("h."))
    NH = int(sys.argv[4])  # heads: not in any shape
    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=NH, activation_function="gelu_new",
                     resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    m = GPT2LMHeadModel(cfg)
    missing, unexpected = m.load_state_dict({"transformer." + k: v for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias")) and k != "lm_head.weight"]
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}"
    m.tie_weights()
    return m.eval()


def greedy(weights, sample):
    s = json.load(open(sample))
    m = gpt2_from(weights)
    ids = list(s["prompt_ids"])
    want = s["ids"]
    got, gap = [], float("inf")
    with torch.no_grad():
        for _ in range(len(want)):
            logits = m(torch.tensor([ids])).logits[0, -1].double()
            top2 = torch.topk(logits, 2).values
            gap = min(gap, (top2[0] - top2[1]).item())
            nxt = int(torch.argmax(logits))
            got.append(nxt)
            ids.append(nxt)
    ok = got == want
    print(f"{'ok' if ok else 'FAIL'} - greedy: {len(want)} tokens of GPT2LMHeadModel equal nebula-train sample's "
          f"(smallest top-1 / top-2 logit gap on the way {gap:.3g})")
    if not ok:
        first = next(i for i in range(len(want)) if i >= len(got) or got[i] != want[i])
        print(f"    first difference at token {first}: transformers {got[first:first + 8]}, nebula {want[first:first + 8]}")
    return 0 if ok else 1


def init_bert(out, V, seed=1234):
    torch.manual_seed(int(seed))
    cfg = BertConfig(vocab_size=int(V), hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=512, max_position_embeddings=512, type_vocab_size=2, pad_token_id=0)
    m = BertForMaskedLM(cfg)
    sd = {}
    for k, v in m.state_dict().items():
        if k.startswith("cls.predictions.decoder.") or "position_ids" in k or "token_type_ids" in k:
            continue
        if "LayerNorm.weight" in k:
            v = 1.0 + 0.4 * (torch.rand_like(v) - 0.5)
        elif k.endswith("bias"):
            v = 0.2 * (torch.rand_like(v) - 0.5)
        elif v.dim() == 2:
            v = torch.randn_like(v) / (v.shape[1] ** 0.5 if "embeddings" not in k else 1.0)
        sd[k[len("bert."):] if k.startswith("bert.") else k] = v.contiguous()
    save_file(sd, out)
    print(f"wrote {out}: BertForMaskedLM (L 2, C 128, V {V}), {len(sd)} tensors")
    return 0


def bert_from(weights):
    sd = load_file(weights)
    V, C = sd["embeddings.word_embeddings.weight"].shape
    cfg = BertConfig(vocab_size=V, hidden_size=C, num_hidden_layers=2, num_attention_heads=2, intermediate_size=4 * C,
                     max_position_embeddings=sd["embeddings.position_embeddings.weight"].shape[0], type_vocab_size=2,
                     hidden_dropout_prob=0, attention_probs_dropout_prob=0)
    m = BertForMaskedLM(cfg)
    full = {("bert." + k if not k.startswith("cls.") else k): v for k, v in sd.items()}
    missing, unexpected = m.load_state_dict(full, strict=False)
    missing = [k for k in missing if not k.startswith("cls.predictions.decoder.")]
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}"
    m.tie_weights()
    return m.eval()


def fillmask(weights, sample):
    s = json.load(open(sample))
    m = bert_from(weights)
    ids = torch.tensor([s["ids"]])
    with torch.no_grad():
        prob = torch.softmax(m(input_ids=ids).logits[0].double(), dim=-1)
    fails = 0
    for mk in s["masks"]:
        pos, fills = mk["position"], mk["fills"]
        k = len(fills)
        p, i = torch.topk(prob[pos], k)
        ids_ok = [f["id"] for f in fills] == i.tolist()
        worst = max(abs(f["prob"] - prob[pos, f["id"]].item()) / (1e-6 + 1e-4 * prob[pos, f["id"]].item())
                    for f in fills)
        ok = ids_ok and worst <= 1
        fails += not ok
        print(f"{'ok' if ok else 'FAIL'} - fill-mask at token {pos}: the top {k} ids of BertForMaskedLM "
              f"{i.tolist()} {'=' if ids_ok else '!='} Nebula's {[f['id'] for f in fills]}, probabilities "
              f"within 1e-6 + 1e-4 p (worst ratio {worst:.3g})")
    return 1 if fails or not s["masks"] else 0


def bench(hfdir, sample):
    import time
    s = json.load(open(sample))
    m = GPT2LMHeadModel.from_pretrained(hfdir).eval()
    runs = []
    with torch.no_grad():
        for _ in range(3):
            ids = torch.tensor([s["prompt_ids"]])
            t0 = time.perf_counter()
            out = m(ids, use_cache=True)
            t1 = time.perf_counter()
            past, got = out.past_key_values, [int(out.logits[0, -1].argmax())]
            for _ in range(len(s["ids"]) - 1):
                out = m(torch.tensor([[got[-1]]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                got.append(int(out.logits[0, -1].argmax()))
            t2 = time.perf_counter()
            runs.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3 / max(1, len(got) - 1), got))
    pre = sorted(r[0] for r in runs)[1]
    per = sorted(r[1] for r in runs)[1]
    same = runs[0][2] == s["ids"]
    print(json.dumps({"tokens": len(s["ids"]), "threads": torch.get_num_threads(), "nebula_prefill_ms": round(s["prefill_ms"], 1),
                      "torch_prefill_ms": round(pre, 1), "nebula_ms_per_token": round(s["ms_per_token"], 2),
                      "torch_ms_per_token": round(per, 2), "ratio": round(per / s["ms_per_token"], 2), "same_ids": same}))
    return 0 if same else 1


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "bench":
        sys.exit(bench(sys.argv[2], sys.argv[3]))
    if cmd == "greedy":
        sys.exit(greedy(sys.argv[2], sys.argv[3]))
    if cmd == "init-bert":
        sys.exit(init_bert(*sys.argv[2:]))
    if cmd == "fillmask":
        sys.exit(fillmask(sys.argv[2], sys.argv[3]))
    print(__doc__)
    sys.exit(2)
