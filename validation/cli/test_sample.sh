#!/usr/bin/env bash
# test_sample — nebula-train sample against transformers, on checkpoints made in seconds
# from random weights (O(1) ones, so no two wrong models agree by being flat):
#   - GPT-2 (gpt2-tiny, byte tokenizer): greedy generation with the KV cache gives the
#     ids GPT2LMHeadModel's greedy decoding gives on the weights of `nebula-ckpt convert
#     --to safetensors` (validation/reference/sample_ref.py greedy), and so does
#     --no-cache (every position recomputed per token); the logits of the two paths
#     are compared in validation/unit/test_gpt2_generate.c;
#   - determinism: the same seed gives the same text at temperature 1, another seed
#     another text; a prompt near the context stops there and says so;
#   - BERT (bert-tiny's sizes, vocabulary 256): the top-5 fills of two [MASK] tokens and
#     their probabilities are BertForMaskedLM's (sample_ref.py fillmask);
#   - usage and input errors exit 2 with a message that names the problem.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
TRAIN=build/bin/nebula-train
CK=build/bin/nebula-ckpt
VPY=build/venv/bin/python
REF=validation/reference/sample_ref.py
export OMP_NUM_THREADS=1  # tiny models: one thread keeps the test from crowding the cores

if ! $VPY -c "import transformers, safetensors.torch" >/dev/null 2>&1; then
    echo "FAIL - $VPY with transformers and safetensors is missing: run make deps (tools/deps.sh creates build/venv)"
    exit 1
fi

# --- GPT-2: greedy ids against transformers ------------------------------------------------
$VPY validation/reference/ckpt_torch_ref.py init-gpt2 $tmp/init.safetensors 2 4 64 256 64 >/dev/null
$CK convert $tmp/init.safetensors --from safetensors --model gpt2-tiny --out $tmp/gpt/ckpt >$tmp/convert.log 2>&1
check "a gpt2-tiny checkpoint from random weights (nebula-ckpt convert --from safetensors)" \
    test -f $tmp/gpt/ckpt/step_00000000/COMMITTED
$CK convert $tmp/gpt/ckpt/step_00000000 --to safetensors --out $tmp/gpt.safetensors >/dev/null 2>&1
P="Permission is hereby granted"
$TRAIN sample $tmp/gpt --prompt "$P" --tokens 32 --greedy --json >$tmp/greedy.json 2>$tmp/greedy.err
check "sample RUN_DIR --greedy --json: 32 tokens" grep -q '"stop":"tokens"' $tmp/greedy.json
out=$($VPY $REF greedy $tmp/gpt.safetensors $tmp/greedy.json 4 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
check "greedy generation with the KV cache = GPT2LMHeadModel's greedy decoding" test $rc -eq 0
$TRAIN sample $tmp/gpt/ckpt/step_00000000 --prompt "$P" --tokens 32 --greedy --no-cache --json >$tmp/nocache.json 2>/dev/null
ids() { grep -o '"ids":\[[^]]*\]' "$1"; }
check "--no-cache (the whole sequence per token) gives the same ids, from the checkpoint directory itself" \
    test "$(ids $tmp/greedy.json)" = "$(ids $tmp/nocache.json)" -a -n "$(ids $tmp/greedy.json)"
check "the summary line on stderr: tokens, ms/token, tokens/s" grep -q "32 tokens generated.*ms/token.*tokens/s" $tmp/greedy.err

# --- determinism -----------------------------------------------------------------------------
s1=$($TRAIN sample $tmp/gpt --prompt "$P" --tokens 40 --temperature 1 --top-k 0 --seed 1 2>/dev/null)
s1b=$($TRAIN sample $tmp/gpt --prompt "$P" --tokens 40 --temperature 1 --top-k 0 --seed 1 2>/dev/null)
s2=$($TRAIN sample $tmp/gpt --prompt "$P" --tokens 40 --temperature 1 --top-k 0 --seed 2 2>/dev/null)
check "the same seed gives the same text twice (temperature 1)" test -n "$s1" -a "$s1" = "$s1b"
check "another seed gives another text" test "$s1" != "$s2"
check "the text starts with the prompt" test "${s1#"$P"}" != "$s1"
long=$(printf 'x%.0s' $(seq 60))
expect "a prompt of 60 tokens stops at the context of 64 and says so" 0 "stopped at the model's context of 64" -- \
    $TRAIN sample $tmp/gpt --prompt "$long" --tokens 40 --seed 3
$TRAIN sample $tmp/gpt --prompt "$long" --tokens 40 --json >$tmp/ctx.json 2>/dev/null
check "... after 4 new tokens: prompt and text fill the 64 positions" \
    test "$(ids $tmp/ctx.json | tr -cd , | wc -c)" -eq 3
full=$(printf 'x%.0s' $(seq 64))
expect "a prompt of exactly 64 tokens: one new token from the last position, then the context stop" 0 \
    "stopped at the model's context of 64" -- $TRAIN sample $tmp/gpt --prompt "$full" --tokens 40 --seed 3

# --- BERT fill-mask against transformers ----------------------------------------------------
$VPY $REF init-bert $tmp/bert.safetensors 256 >/dev/null
$CK convert $tmp/bert.safetensors --from safetensors --model bert-tiny --set model.vocab_size=256 \
    --out $tmp/bert/ckpt >$tmp/convert-bert.log 2>&1
$TRAIN sample $tmp/bert --mask --prompt "The [MASK] of the [MASK] is granted" --json >$tmp/mask.json 2>/dev/null
out=$($VPY $REF fillmask $tmp/bert.safetensors $tmp/mask.json 2>&1); rc=$?
echo "$out" | sed 's/^/    /'
check "fill-mask: the top 5 fills of each [MASK] and their probabilities = BertForMaskedLM's" test $rc -eq 0
expect "fill-mask as text: one block per [MASK]" 0 "[MASK] 2 of 2" -- \
    $TRAIN sample $tmp/bert --mask --prompt "The [MASK] of the [MASK] is granted" --top-k 3

# --- usage and input errors: exit 2 ----------------------------------------------------------
mkdir -p $tmp/empty
expect "a directory without a checkpoint" 2 "no committed checkpoint" -- $TRAIN sample $tmp/empty --prompt "$P"
$VPY validation/reference/ckpt_torch_ref.py init-resnet $tmp/rn.safetensors resnet18 cifar 10 >/dev/null
$CK convert $tmp/rn.safetensors --from safetensors --model resnet18-cifar --out $tmp/rn/ckpt >/dev/null 2>&1
expect "a ResNet checkpoint" 2 "ResNet image classifier" -- $TRAIN sample $tmp/rn --prompt "$P"
expect "a BERT checkpoint without --mask" 2 "add --mask" -- $TRAIN sample $tmp/bert --prompt "$P"
expect "a GPT-2 checkpoint with --mask" 2 "drop --mask" -- $TRAIN sample $tmp/gpt --mask --prompt "a [MASK]"
expect "--mask without [MASK] in the prompt" 2 "no [MASK] to fill" -- $TRAIN sample $tmp/bert --mask --prompt "$P"
expect "an empty prompt" 2 "--prompt is empty" -- $TRAIN sample $tmp/gpt --prompt ""
expect "no prompt" 2 "needs a run or checkpoint directory and --prompt" -- $TRAIN sample $tmp/gpt
expect "a prompt longer than the context" 2 "longer than the model's context of 64" -- \
    $TRAIN sample $tmp/gpt --prompt "$long$long"
expect "--top-p 0" 2 "--top-p needs a number in" -- $TRAIN sample $tmp/gpt --prompt "$P" --top-p 0
expect "--top-p 1.5" 2 "--top-p needs a number in" -- $TRAIN sample $tmp/gpt --prompt "$P" --top-p 1.5
expect "--temperature -1" 2 "--temperature needs a number" -- $TRAIN sample $tmp/gpt --prompt "$P" --temperature -1
expect "--tokens 0" 2 "--tokens needs a number" -- $TRAIN sample $tmp/gpt --prompt "$P" --tokens 0
expect "--top-k -1" 2 "--top-k needs a number" -- $TRAIN sample $tmp/gpt --prompt "$P" --top-k -1
expect "an unknown option" 2 "unexpected argument '--topk'" -- $TRAIN sample $tmp/gpt --prompt "$P" --topk 3
[ "$fails" -eq 0 ]
