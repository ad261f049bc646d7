#!/usr/bin/env bash
# test_ckpt_hf — `nebula-ckpt convert --to hf` and `--from hf` against transformers
# itself (build/venv's, offline): GPT2LMHeadModel and BertForMaskedLM load what Nebula
# writes, Nebula loads what save_pretrained writes, and the logits of one batch agree
# within 1e-4 relative both ways (validation/reference/hf_ref.py; Nebula's logits from
# the checkpoint, validation/reference/test_hf_logits.c).
#   (a) gpt2-tiny trained 3 steps --to hf: from_pretrained loads it with nothing missing or
#       unexpected, its names are exactly save_pretrained's, config.json states the real
#       vocabulary; the same logits; a perturbed bias must fail that comparison;
#   (b) the same for bert-tiny (vocabulary 1000) with BertForMaskedLM's MLM head; a run
#       with a BPE tokenizer exports its files, which AutoTokenizer loads;
#   (c) random GPT2LMHeadModel and BertForMaskedLM saved by save_pretrained, --from hf:
#       the same logits; the GPT-2 checkpoint resumes in nebula-train;
#   (d) files with "module." before transformers' names, the tied copies (lm_head.weight,
#       cls.predictions.decoder.*) and buffers Nebula has no use for (old GPT-2 files'
#       attn.bias, position_ids, a pooler) import, the extras listed as skipped; a tied copy
#       that differs from its twin is refused naming both;
#   (e) a malformed config.json, a wrong key, a pickle-only directory, a missing tensor,
#       a ResNet --to hf and an --out that is not an earlier export exit 2 with the file
#       and the fix named.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
CK=build/bin/nebula-ckpt
TRAIN=build/bin/nebula-train
LOGITS=build/test/reference/test_hf_logits
VPY=build/venv/bin/python
REF=validation/reference/hf_ref.py
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if ! $VPY -c "import transformers, safetensors.torch" >/dev/null 2>&1; then
    echo "FAIL - $VPY with transformers and safetensors is missing: run make deps (tools/deps.sh creates build/venv)"
    exit 1
fi
licenses_data

# dump NAME CKPT OUT: Nebula's logits of CKPT's batch into OUT
dump() {
    if $LOGITS "$2" "$3" 2 32 >$tmp/logits.log 2>&1; then
        echo "ok - $1: Nebula's logits of the checkpoint"
    else
        echo "FAIL - $1: no logits from $2"; sed 's/^/    /' $tmp/logits.log; fails=$((fails + 1))
    fi
}

# --- Nebula -> transformers (a, b) -----------------------------------------------------------
tiny=(--config configs/train/gpt2-tiny-licenses.ini --set data.train="$data/train.bin" --set data.val=
      --set train.global_batch=4 --set train.seq_len=32 --set optim.warmup_steps=0 --set train.threads=1
      --steps 3 --ckpt-every 3)
$MPIRUN -np 1 $TRAIN "${tiny[@]}" --run-dir $tmp/gpt >$tmp/gpt.log 2>&1 </dev/null
$MPIRUN -np 1 $TRAIN "${tiny[@]}" --run-dir $tmp/bert --set model.name=bert-tiny --set model.vocab_size=1000 \
    >$tmp/bert.log 2>&1 </dev/null
G=$tmp/gpt/ckpt/step_00000003
B=$tmp/bert/ckpt/step_00000003
check "nebula-train wrote gpt2-tiny's and bert-tiny's step 3" test -f $G/COMMITTED -a -f $B/COMMITTED
expect "convert --to hf (gpt2-tiny)" 0 "(transformers GPT2LMHeadModel: model.safetensors, config.json; a byte" -- \
    $CK convert $G --to hf --out $tmp/hf-gpt
expect "convert --to hf (bert-tiny)" 0 "(transformers BertForMaskedLM: model.safetensors, config.json" -- \
    $CK convert $B --to hf --out $tmp/hf-bert
check "the directories hold model.safetensors and config.json, no temporary left beside them" \
    test -f $tmp/hf-gpt/model.safetensors -a -f $tmp/hf-bert/config.json -a -z "$(ls -d $tmp/hf-*.tmp.* 2>/dev/null)"
expect "convert --to hf again over the earlier export replaces it" 0 "to $tmp/hf-gpt" -- \
    $CK convert $G --to hf --out $tmp/hf-gpt
dump "gpt2-tiny step 3" $G $tmp/d-gpt.safetensors
dump "bert-tiny step 3" $B $tmp/d-bert.safetensors

# the run's tokenizer goes along: a BPE of 512 tokens trained by prepare, <|endoftext|> its bos/eos
build/bin/nebula-train prepare $tmp/bpe /usr/share/common-licenses/* --tokenizer bpe --vocab-size 512 >/dev/null 2>&1
$MPIRUN -np 1 $TRAIN "${tiny[@]}" --run-dir $tmp/gbpe --set data.train=$tmp/bpe/train.bin --set model.vocab_size=512 \
    --steps 1 --ckpt-every 1 >$tmp/gbpe.log 2>&1 </dev/null
expect "convert --to hf of a run with a BPE tokenizer: its files go along" 0 "config.json, tokenizer files)" -- \
    $CK convert $tmp/gbpe/ckpt/step_00000001 --to hf --out $tmp/hf-bpe
check "... which AutoTokenizer loads, <|endoftext|> = config.json's bos and eos, the model's vocabulary" \
    $VPY -c "
import json, sys; from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1]); c = json.load(open(sys.argv[1] + '/config.json'))
sys.exit(not (len(t) == c['vocab_size'] == 512 and t.eos_token_id == c['eos_token_id'] == c['bos_token_id'] == 511))" \
    $tmp/hf-bpe

# --- transformers -> Nebula (c, d) ----------------------------------------------------------
$VPY $REF init $tmp/rand >/dev/null
expect "convert --from hf: save_pretrained's GPT2LMHeadModel (gpt2-tiny's sizes)" 0 "gpt2-tiny, 1 rank" -- \
    $CK convert $tmp/rand/gpt2 --from hf --out $tmp/from-gpt
expect "convert --from hf: save_pretrained's BertForMaskedLM (tied decoder not in the file)" 0 "bert-tiny, 1 rank" -- \
    $CK convert $tmp/rand/bert --from hf --out $tmp/from-bert
expect "convert --from safetensors: module.transformer.* names, a tied lm_head, old attention buffers" 0 \
    "4 tensors without a counterpart in gpt2-tiny skipped: module.transformer.h.0.attn.bias" -- \
    $CK convert $tmp/rand/gpt2-ddp.safetensors --from safetensors --model gpt2-tiny --out $tmp/from-ddp
mkdir -p $tmp/bert-ddp && cp $tmp/rand/bert/config.json $tmp/bert-ddp/ &&
    cp $tmp/rand/bert-ddp.safetensors $tmp/bert-ddp/model.safetensors
expect "convert --from hf: module.bert.* names, the tied decoder, position_ids and a pooler" 0 \
    "3 tensors without a counterpart in bert-tiny skipped: module.bert.embeddings.position_ids" -- \
    $CK convert $tmp/bert-ddp --from hf --out $tmp/from-bert-ddp
for f in gpt bert ddp bert-ddp; do dump "from-$f" $tmp/from-$f/step_00000000 $tmp/d-from-$f.safetensors; done

out=$($VPY $REF logits \
    $tmp/hf-gpt,$tmp/d-gpt.safetensors,names \
    $tmp/hf-gpt,$tmp/d-gpt.safetensors,perturb=transformer.h.1.ln_2.bias=0.05,fail \
    $tmp/hf-bert,$tmp/d-bert.safetensors,names \
    $tmp/hf-bert,$tmp/d-bert.safetensors,perturb=cls.predictions.transform.LayerNorm.bias=0.05,fail \
    $tmp/rand/gpt2,$tmp/d-from-gpt.safetensors \
    $tmp/rand/bert,$tmp/d-from-bert.safetensors \
    $tmp/rand/gpt2,$tmp/d-from-ddp.safetensors \
    $tmp/rand/bert,$tmp/d-from-bert-ddp.safetensors 2>&1)
rc=$?
sed 's/^/    /' <<<"$out"
n_ok=$(grep -c "^ok - " <<<"$out")
check "transformers: all 10 checks pass (exports load by save_pretrained's names, logits within 1e-4 both ways, perturbed ones fail)" \
    test "$rc" -eq 0 -a "$n_ok" -eq 10

$MPIRUN -np 1 $TRAIN "${tiny[@]}" --run-dir $tmp/resume --resume $tmp/from-gpt/step_00000000 --steps 1 \
    --ckpt-every 0 >$tmp/resume.log 2>&1 </dev/null
check "nebula-train resumes from the --from hf checkpoint and trains a step" grep -q "step=1 " $tmp/resume.log

# --- refused (d, e) ------------------------------------------------------------------------
expect "a tied lm_head.weight that differs from wte.weight: exit 2 naming both" 2 \
    "'module.lm_head.weight' and 'module.transformer.wte.weight' are one tied tensor" -- \
    $CK convert $tmp/rand/gpt2-untied.safetensors --from safetensors --model gpt2-tiny --out $tmp/no1
cp $tmp/rand/bert-untied.safetensors $tmp/bert-ddp/model.safetensors
expect "a tied cls.predictions.decoder.weight that differs: exit 2 naming both" 2 \
    "'module.cls.predictions.decoder.weight' and 'module.bert.embeddings.word_embeddings.weight'" -- \
    $CK convert $tmp/bert-ddp --from hf --out $tmp/no2
mkdir -p $tmp/bad && cp $tmp/rand/gpt2/model.safetensors $tmp/bad/
printf '{\n  "model_type": "gpt2",\n  "n_layer": 2,,\n}\n' >$tmp/bad/config.json
expect "config.json with a syntax error: exit 2 naming the file, line and column" 2 "$tmp/bad/config.json:3:" -- \
    $CK convert $tmp/bad --from hf --out $tmp/no3
sed 's/"n_layer": 2/"n_layer": "2"/' $tmp/rand/gpt2/config.json >$tmp/bad/config.json
expect "config.json with n_layer a string: exit 2 naming the key and what it must be" 2 \
    "$tmp/bad/config.json: \"n_layer\" is a string; expected an integer" -- $CK convert $tmp/bad --from hf --out $tmp/no4
sed 's/"gelu_new"/"relu"/' $tmp/rand/gpt2/config.json >$tmp/bad/config.json
expect "config.json with another activation: exit 2 naming it" 2 "\"activation_function\" is a string \"relu\"" -- \
    $CK convert $tmp/bad --from hf --out $tmp/no5
cp $tmp/rand/gpt2/config.json $tmp/bad/ && sed -i 's/"n_layer": 2/"n_layer": 3/' $tmp/bad/config.json
expect "a block the file lacks: exit 2 naming the missing tensors" 2 "holds no tensor 'h.2.ln_1.weight', 'h.2.ln_1.bias'" -- \
    $CK convert $tmp/bad --from hf --out $tmp/no6
rm $tmp/bad/model.safetensors && : >$tmp/bad/pytorch_model.bin
expect "pytorch_model.bin alone: exit 2 with the hint to re-save with safe_serialization" 2 \
    "safe_serialization=True" -- $CK convert $tmp/bad --from hf --out $tmp/no7
mkdir -p $tmp/notes && echo x >$tmp/notes/readme.txt
expect "--to hf into a directory that is not an earlier export: exit 2, nothing touched" 2 \
    "not an earlier model export" -- $CK convert $G --to hf --out $tmp/notes
check "... and its file is still there" test -f $tmp/notes/readme.txt
$VPY validation/reference/ckpt_torch_ref.py init-resnet $tmp/rn.safetensors resnet18 cifar 10 >/dev/null
$CK convert $tmp/rn.safetensors --from safetensors --model resnet18-cifar --out $tmp/rn-ck >/dev/null 2>&1
expect "--to hf of a ResNet: exit 2 pointing at --to safetensors" 2 "--to safetensors writes it under torchvision's" -- \
    $CK convert $tmp/rn-ck/step_00000000 --to hf --out $tmp/no8
check "no refused conversion left a directory behind" test -z "$(ls -d $tmp/no[0-9]* 2>/dev/null)"
finish
