#!/usr/bin/env bash
# test_tokenizers — the tokenizers (libcore/data/tokenizer.h) against the `tokenizers`
# library and `transformers`, and nebula-train prepare with them (docs/data.md):
#   - reference: validation/reference/tokenizer_ref.py check: byte-level BPE (the library's
#     vocabulary as tokenizer.json and as vocab.json + merges.txt, GPT2TokenizerFast; a
#     vocabulary Nebula trains, read by the library) and WordPiece (BertTokenizerFast,
#     uncased and cased; tokenizer.json): the same ids for every line of a held-out corpus
#     with Unicode, white space runs and special tokens; BPE lines decode back to themselves;
#   - prepare --tokenizer bpe at 1, 2 and 3 ranks: the same bytes; prepare with the
#     tokenizer it wrote (--tokenizer DIR) gives the same files again; WordPiece at 1 and 2
#     ranks alike;
#   - the token files hold what the library encodes: the held-out file equals <|endoftext|>
#     + the library's ids of each input's held-out part;
#   - end to end: gpt2-tiny trained on the BPE tokens (vocabulary 1024) reaches a lower
#     held-out loss per byte than the byte-level model with the same steps, batch and
#     context; sampling from that run with its tokenizer equals transformers' greedy decoding
#     of its `convert --to hf` export, tokenizer loaded by AutoTokenizer;
#   - a tokenizer that adds a prefix space per call (encoded part by part: the same bytes
#     at 1 and 3 ranks, the library's ids), text over the 8 MiB chunk without a line end,
#     CJK and CRLF lines; a stale tokenizer.json or val.bin in OUT_DIR is replaced;
#   - hostile input: invalid UTF-8 in the corpus (file and byte offset), a malformed
#     vocab.json (line and column), merges.txt with an unknown token (its line), bad
#     options: exit 2, nothing written.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
TRAIN=build/bin/nebula-train
TT=build/test/unit/test_tokenizer
VPY=build/venv/bin/python
REF=validation/reference/tokenizer_ref.py
L=/usr/share/common-licenses
if ! $VPY -c "import tokenizers, transformers" >/dev/null 2>&1; then
    echo "FAIL - $VPY with tokenizers and transformers is missing: run make deps (tools/deps.sh creates build/venv)"
    exit 1
fi

check "encodings equal the tokenizers library's and transformers' (reference check)" $VPY $REF check $TT $TRAIN "$tmp"

expect "prepare --tokenizer bpe, 1 rank" 0 "vocabulary 1024" -- $TRAIN prepare "$tmp/b1" $L/* --tokenizer bpe --vocab-size 1024
expect "... 2 ranks" 0 "on 2 ranks" -- $MPIRUN -np 2 $TRAIN prepare "$tmp/b2" $L/* --tokenizer bpe --vocab-size 1024
expect "... 3 ranks" 0 "on 3 ranks" -- $MPIRUN -np 3 $TRAIN prepare "$tmp/b3" $L/* --tokenizer bpe --vocab-size 1024
same() { cmp -s "$1/train.bin" "$2/train.bin" && cmp -s "$1/val.bin" "$2/val.bin" && cmp -s "$1/merges.txt" "$2/merges.txt"; }
check "1, 2 and 3 ranks write the same bytes" eval 'same $tmp/b1 $tmp/b2 && same $tmp/b1 $tmp/b3'
expect "prepare with the tokenizer it wrote (--tokenizer DIR), 2 ranks" 0 "bpe tokenizer, vocabulary 1024" -- \
    $MPIRUN -np 2 $TRAIN prepare "$tmp/b4" $L/* --tokenizer "$tmp/b1"
check "... the same token files" eval 'cmp -s $tmp/b1/train.bin $tmp/b4/train.bin && cmp -s $tmp/b1/val.bin $tmp/b4/val.bin'
check "the held-out file is <|endoftext|> + the library's ids of each input's held-out part" $VPY - "$tmp/b1" $L/* <<'PY'
import os, sys
import numpy as np
from tokenizers import ByteLevelBPETokenizer
out, files = sys.argv[1], sys.argv[2:]
tok = ByteLevelBPETokenizer(os.path.join(out, "vocab.json"), os.path.join(out, "merges.txt"))
eot = tok.token_to_id("<|endoftext|>")
want = []
for f in files:
    data = open(f, "rb").read()
    cut = data.find(b"\n", int(len(data) * 0.9))
    cut = len(data) if cut < 0 else cut + 1
    if cut < len(data):
        want += [eot] + tok.encode(data[cut:].decode()).ids
raw = np.fromfile(os.path.join(out, "val.bin"), dtype=np.int32, count=256)
got = np.fromfile(os.path.join(out, "val.bin"), dtype=np.uint16, offset=1024)
assert raw[0] == 20240520 and raw[1] == 1 and raw[2] == len(got), raw[:3]
assert got.tolist() == want, (len(got), len(want))
PY
OPT=$tmp/bpe-options/tokenizer.json   # a prefix space, lstrip / rstrip / single_word specials (the check above)
expect "prepare with a tokenizer that adds a prefix space per call, 1 rank" 0 "bpe tokenizer" -- \
    $TRAIN prepare "$tmp/o1" $L/* --tokenizer "$OPT"
expect "... 3 ranks" 0 "on 3 ranks" -- $MPIRUN -np 3 $TRAIN prepare "$tmp/o3" $L/* --tokenizer "$OPT"
check "... the same bytes (each part encoded whole), tokenizer.json copied as it was" \
    eval 'cmp -s $tmp/o1/train.bin $tmp/o3/train.bin && cmp -s $tmp/o1/val.bin $tmp/o3/val.bin && cmp -s $OPT $tmp/o1/tokenizer.json'
check "... its held-out file is the library's encoding of each part" $VPY - "$tmp/o1" "$OPT" $L/* <<'PY'
import os, sys
import numpy as np
from tokenizers import Tokenizer
out, tj, files = sys.argv[1], sys.argv[2], sys.argv[3:]
tok = Tokenizer.from_file(tj)
eot = tok.token_to_id("<|endoftext|>")
want = []
for f in files:
    data = open(f, "rb").read()
    cut = data.find(b"\n", int(len(data) * 0.9))
    cut = len(data) if cut < 0 else cut + 1
    if cut < len(data):
        want += [eot] + tok.encode(data[cut:].decode()).ids
got = np.fromfile(os.path.join(out, "val.bin"), dtype=np.uint16, offset=1024).tolist()
assert got == want, (len(got), len(want))
PY
# text over 8 MiB (the encoding chunk): one line without a line end, CJK lines, CRLF lines
$PY -c "
import sys
open(sys.argv[1] + '/oneline.txt', 'w').write('word, ' * 1500000)
open(sys.argv[1] + '/cjk.txt', 'w', encoding='utf-8').write('中文的一行文字\n' * 450000)
open(sys.argv[1] + '/crlf.txt', 'wb').write(b'hello world, again\r\n' * 460000)" "$tmp"
expect "9 MB without a line end, CJK lines, CRLF lines: 1 rank" 0 "bpe tokenizer" -- \
    $TRAIN prepare "$tmp/big1" "$tmp/oneline.txt" "$tmp/cjk.txt" "$tmp/crlf.txt" --tokenizer "$tmp/b1"
expect "... 3 ranks" 0 "on 3 ranks" -- \
    $MPIRUN -np 3 $TRAIN prepare "$tmp/big3" "$tmp/oneline.txt" "$tmp/cjk.txt" "$tmp/crlf.txt" --tokenizer "$tmp/b1"
check "... the same bytes" eval 'cmp -s $tmp/big1/train.bin $tmp/big3/train.bin && cmp -s $tmp/big1/val.bin $tmp/big3/val.bin'
mkdir -p "$tmp/stale" && cp "$OPT" "$tmp/stale/tokenizer.json" && cp "$tmp/b1/val.bin" "$tmp/stale/val.bin"
expect "prepare --tokenizer bpe over a directory with another tokenizer.json: the new one is used" 0 "vocabulary 1024" -- \
    $TRAIN prepare "$tmp/stale" $L/* --tokenizer bpe --vocab-size 1024 --val-fraction 0
check "... the stale tokenizer.json and val.bin removed, vocab.json + merges.txt in their place" \
    eval '[ ! -e $tmp/stale/tokenizer.json ] && [ ! -e $tmp/stale/val.bin ] && [ -s $tmp/stale/merges.txt ] && [ -s $tmp/stale/vocab.json ]'
WP=$tmp/wp-uncased/vocab.txt
expect "prepare --tokenizer vocab.txt (WordPiece), 1 rank" 0 "wordpiece tokenizer" -- $TRAIN prepare "$tmp/w1" $L/* --tokenizer "$WP"
expect "... 2 ranks" 0 "wordpiece tokenizer" -- $MPIRUN -np 2 $TRAIN prepare "$tmp/w2" $L/* --tokenizer "$WP"
check "... the same bytes, vocab.txt beside them" eval 'cmp -s $tmp/w1/train.bin $tmp/w2/train.bin && cmp -s $tmp/w1/vocab.txt $WP'

# BERT on WordPiece tokens of a vocabulary the library trained ([PAD] .. [MASK] at 0 .. 4): the
# loader masks with the tokenizer's ids; fill-mask encodes [MASK] with them too
bert_run() {  # DIR DATA
    $MPIRUN -np 2 $TRAIN --model bert-tiny --set model.vocab_size=3000 --run-dir "$1" --data "$2/train.bin" \
        --seq-len 64 --global-batch 16 --steps 10 --set train.log_interval=10 --set ckpt.every_steps=10 "${@:3}" \
        >"$1.log" 2>&1 </dev/null
}
bert_run "$tmp/bert-wp" "$tmp/w1"
check "bert-tiny trains on WordPiece tokens with the tokenizer's special ids" grep -q "^step=10 loss=" "$tmp/bert-wp.log"
expect "... and fills [MASK] with the same tokenizer" 0 "[MASK] 1 of 1" -- \
    $TRAIN sample "$tmp/bert-wp" --mask --prompt "the [MASK] of the program" --top-k 3
mkdir -p "$tmp/nomask" && grep -v '^\[MASK\]$' "$WP" >"$tmp/nomask/vocab.txt" && cp "$tmp/w1/train.bin" "$tmp/nomask/"
bert_run "$tmp/bert-nomask" "$tmp/nomask"
check "... a WordPiece vocabulary without [MASK]: exit 2 naming it" eval \
    'grep -q "gives \[MASK\] no id" $tmp/bert-nomask.log'

# end to end: the same steps, batch and context on BPE tokens and on bytes
$TRAIN prepare "$tmp/bytes" $L/* >/dev/null || echo "FAIL - byte-level prepare"
run_lm() {  # DIR DATA VOCAB
    $MPIRUN -np 2 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$1" --set data.train="$2/train.bin" \
        --set data.val="$2/val.bin" --set model.vocab_size="$3" --steps 150 --set train.eval_interval=150 \
        --set train.log_interval=50 --set ckpt.every_steps=150 >"$1.log" 2>&1 </dev/null
}
run_lm "$tmp/lm-bytes" "$tmp/bytes" 256 || { echo "FAIL - byte-level run"; tail -3 "$tmp/lm-bytes.log"; }
run_lm "$tmp/lm-bpe" "$tmp/b1" 1024 || { echo "FAIL - BPE run"; tail -3 "$tmp/lm-bpe.log"; }
check "BPE: a lower held-out loss per byte than bytes at the same steps, batch and context" $VPY - "$tmp" <<'PY'
import json, os, sys
import numpy as np
from tokenizers import ByteLevelBPETokenizer
tmp = sys.argv[1]
def val_loss(run):
    ev = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if '"eval"' in l]
    return [e for e in ev if e.get("kind") == "eval"][-1]["loss"]
tok = ByteLevelBPETokenizer(f"{tmp}/b1/vocab.json", f"{tmp}/b1/merges.txt")
ids = np.fromfile(f"{tmp}/b1/val.bin", dtype=np.uint16, offset=1024).tolist()
nbytes = len(tok.decode(ids, skip_special_tokens=True).encode())
per_byte_bpe = val_loss(f"{tmp}/lm-bpe") * len(ids) / nbytes
per_byte_bytes = val_loss(f"{tmp}/lm-bytes")
print(f"    held-out loss per byte: BPE {per_byte_bpe:.4f} nats ({len(ids)} tokens, {nbytes} bytes), bytes {per_byte_bytes:.4f}")
sys.exit(0 if per_byte_bpe < per_byte_bytes else 1)
PY

# the BPE run's tokenizer travels: sample encodes the prompt with it, --to hf exports it, and
# transformers' AutoTokenizer + GPT2LMHeadModel.from_pretrained on that directory give the
# same prompt ids and the same greedy continuation
CK=build/bin/nebula-ckpt
PROMPT="you can redistribute it and/or modify it under the terms of the GNU"
expect "sample from the BPE run (its tokenizer found beside data.train), top-k 1, a seed" 0 '"stop"' -- \
    $TRAIN sample "$tmp/lm-bpe" --prompt "$PROMPT" --tokens 16 --top-k 1 --seed 7 --ignore-eos --json
$TRAIN sample "$tmp/lm-bpe" --prompt "$PROMPT" --tokens 16 --top-k 1 --seed 7 --ignore-eos --json >"$tmp/sample.json" 2>/dev/null
expect "convert --to hf of the BPE run writes vocab.json and merges.txt" 0 "" -- \
    $CK convert "$(ls -d "$tmp"/lm-bpe/ckpt/step_* | tail -1)" --to hf --out "$tmp/hf-bpe"
check "transformers loads the export offline: same prompt ids, same greedy tokens, same text" \
    env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $VPY - "$tmp/hf-bpe" "$tmp/sample.json" <<'PY'
import json, sys
import torch
from transformers import AutoTokenizer, GPT2LMHeadModel
d, s = sys.argv[1], json.load(open(sys.argv[2]))
tok = AutoTokenizer.from_pretrained(d)
model = GPT2LMHeadModel.from_pretrained(d).eval()
prompt = tok.encode(s["prompt"])
assert prompt == s["prompt_ids"], (prompt, s["prompt_ids"])
ids = list(prompt)
with torch.no_grad():  # greedy by hand: generate() pulls in torch.distributed, which Debian's 1.13 breaks on 3.11
    for _ in range(len(s["ids"])):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
want = ids[len(prompt):]
assert want == s["ids"], (want, s["ids"])
assert tok.decode(want) == s["text"], (tok.decode(want), s["text"])
assert len(set(want)) >= 3, f"a continuation of {len(set(want))} distinct tokens is too weak a check: {want}"
print(f"    {len(want)} tokens: {s['text']!r}")
PY

# hostile input
printf 'good line\nbad \xff byte\n' >"$tmp/latin1.txt"
expect "invalid UTF-8 in the corpus: exit 2 naming the file and the offset" 2 "latin1.txt: the bytes from offset 0" -- \
    $TRAIN prepare "$tmp/bad1" "$tmp/latin1.txt" --tokenizer "$tmp/b1"
expect "... and the offset inside it" 2 "invalid UTF-8 at byte 14" -- $TRAIN prepare "$tmp/bad1" "$tmp/latin1.txt" --tokenizer "$tmp/b1"
check "... nothing written" test ! -e "$tmp/bad1/train.bin"
mkdir -p "$tmp/badv" && cp "$tmp/b1/merges.txt" "$tmp/badv/" && printf '{"a": 0,\n "b": }\n' >"$tmp/badv/vocab.json"
expect "malformed vocab.json: exit 2 with line and column" 2 "vocab.json:2:" -- $TRAIN prepare "$tmp/bad2" $L/BSD --tokenizer "$tmp/badv"
mkdir -p "$tmp/badm" && cp "$tmp/b1/vocab.json" "$tmp/badm/" && printf '#version: 0.2\nt h\nzz\xc4\xa0 q\n' >"$tmp/badm/merges.txt"
expect "merges.txt with an unknown token: exit 2 naming its line" 2 "merges.txt:3: merge" -- \
    $TRAIN prepare "$tmp/bad3" $L/BSD --tokenizer "$tmp/badm"
expect "--tokenizer bpe without --vocab-size: exit 2" 2 "--vocab-size N" -- $TRAIN prepare "$tmp/bad4" $L/BSD --tokenizer bpe
expect "--vocab-size below 257: exit 2" 2 "[257, 16777216]" -- $TRAIN prepare "$tmp/bad4" $L/BSD --tokenizer bpe --vocab-size 100
expect "a tokenizer path that does not exist: exit 2" 2 "cannot open tokenizer" -- $TRAIN prepare "$tmp/bad4" $L/BSD --tokenizer "$tmp/none"
check "... nothing written for any of them" eval '! ls $tmp/bad2/*.bin $tmp/bad3/*.bin $tmp/bad4/*.bin 2>/dev/null | grep -q .'
finish
