#!/usr/bin/env bash
# Bad [model] input: an unknown name and every inconsistent shape exit 2 with one
# message that names the key, its value and the rule, before anything is allocated.
# Cases on big presets add --dry-run, so a check that went missing could never start
# a heavy run; the tiny ones run the ordinary path.
. "$(dirname "$0")/lib.sh"

expect "unknown name lists every preset" 2 "expected one of gpt2-tiny|gpt2|gpt2-medium|gpt2-large|gpt2-xl|bert-tiny|bert-base|bert-large|resnet18|" -- \
    $BENCH model --model gpt3 --dry-run
expect "unknown name is refused, naming the key" 2 "model.name: 'gpt3' is not a valid enum" -- $BENCH model --model gpt3
expect "unknown name suggests the nearest" 2 "did you mean 'resnet50'?" -- $BENCH model --model resnt50
printf '[model]\nname = bert-bass\n' >"$tmp/name.ini"
expect "unknown name in a file names file:line" 2 "name.ini:2: model.name: 'bert-bass'" -- $BENCH model --config "$tmp/name.ini"
printf '[model]\nname = gpt2\nn_heads = 4\n' >"$tmp/key.ini"
expect "misspelt key suggests the right one" 2 "key.ini:3: unknown key 'model.n_heads'; did you mean 'model.n_head'?" -- \
    $BENCH model --config "$tmp/key.ini"

expect "heads must divide the width (GPT-2)" 2 "model.n_head = 5 does not divide model.n_embd = 768" -- \
    $BENCH model --model gpt2 --set model.n_head=5 --dry-run
printf '[model]\nname = bert-base\nn_embd = 800\n' >"$tmp/bert.ini"
expect "heads must divide the width (BERT, from a file)" 2 "model.n_head = 12 does not divide model.n_embd = 800" -- \
    $BENCH model --config "$tmp/bert.ini" --dry-run
expect "sequence longer than the context" 2 "bench.seq = 65 is longer than model.max_seq_len = 64" -- \
    $BENCH model --model gpt2-tiny --seq 65
expect "sequence longer than the context (gpt2-xl, nothing allocated)" 2 "bench.seq = 2048 is longer than model.max_seq_len = 1024" -- \
    bash -c "ulimit -v 3000000 && $BENCH model --config configs/models/gpt2-xl.ini --seq 2048"
expect "sequence longer than an overridden context" 2 "bench.seq = 64 is longer than model.max_seq_len = 32" -- \
    $BENCH model --model gpt2-tiny --set model.max_seq_len=32 --seq 64
expect "BERT context beyond its 512 positions" 2 "model.max_seq_len = 1024 exceeds BERT's 512 position embeddings" -- \
    $BENCH model --model bert-base --set model.max_seq_len=1024 --dry-run
expect "BERT sequence beyond its context" 2 "bench.seq = 600 is longer than model.max_seq_len = 512" -- \
    $BENCH model --model bert-large --seq 600 --dry-run
expect "BERT vocabulary too small for the special tokens" 2 "model.vocab_size = 50 is too small for BERT" -- \
    $BENCH model --model bert-tiny --set model.vocab_size=50
expect "ResNet image smaller than the total stride" 2 "model.image_size = 16 is smaller than 32, the total stride of the imagenet stem" -- \
    $BENCH model --model resnet152 --set model.image_size=16 --dry-run
expect "ResNet image smaller than the total stride (cifar)" 2 "model.image_size = 4 is smaller than 8" -- \
    $BENCH model --config configs/models/resnet18-cifar.ini --set model.image_size=4
expect "ResNet batch too small for batch norm" 2 "bench.batch = 1 with model.image_size = 32 leaves layer4's batch norm 1 value" -- \
    $BENCH model --model resnet18 --batch 1 --set model.image_size=32 --dry-run
expect "batch < 1" 2 "bench.batch" -- $BENCH model --model gpt2-tiny --batch 0
expect "a transformer key on a ResNet" 2 "model.n_head = 4 (--set) does not apply to resnet18, a ResNet model" -- \
    $BENCH model --model resnet18 --set model.n_head=4 --dry-run
expect "a ResNet key on a transformer" 2 "model.stem = cifar (--set) does not apply to gpt2, a GPT-2 model" -- \
    $BENCH model --model gpt2 --set model.stem=cifar --dry-run
expect "stacked model files of two families name the stray key and its line" 2 \
    "model.n_layer = 12 (configs/models/gpt2.ini:16) does not apply to resnet18-cifar" -- \
    $BENCH model --config configs/models/gpt2.ini --config configs/models/resnet18-cifar.ini --dry-run
expect "bad stem lists the choices" 2 "preset|imagenet|cifar" -- $BENCH model --model resnet18 --set model.stem=mnist --dry-run
finish
