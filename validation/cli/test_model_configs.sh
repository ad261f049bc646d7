#!/usr/bin/env bash
# configs/models: one file per preset, each loads and resolves to exactly its preset
# (the keys written out in it are the preset's own values), and a tiny one runs from
# its file. Big models are only resolved and checked (--dry-run), never allocated:
# the dry run of gpt2-xl passes under a 3 GB address-space limit that its 6 GB of
# parameters alone would break.
. "$(dirname "$0")/lib.sh"

names=$($BENCH --help | sed -n 's/^  name = [^ ]*  (enum: \(.*\))$/\1/p' | tr '|' '\n' | sort)
files=$(ls configs/models/*.ini | sed 's|.*/||; s|\.ini$||' | sort)
if [ -n "$names" ] && [ "$names" = "$files" ]; then
    echo "ok - one configs/models file per model.name choice ($(wc -l <<<"$names") presets)"
else
    echo "FAIL - model.name choices and configs/models differ:"; diff <(echo "$names") <(echo "$files") | sed 's/^/    /'
    fails=$((fails + 1))
fi

for f in configs/models/*.ini; do
    n=$(basename "$f" .ini)
    key=$(sed -n 's/^name *= *\([^ ;]*\).*/\1/p' "$f")
    if [ "$key" != "$n" ]; then echo "FAIL - $f: name = '$key', expected '$n'"; fails=$((fails + 1)); continue; fi
    from_file=$($BENCH model --config "$f" --dry-run 2>&1); rc=$?
    by_name=$($BENCH model --model "$n" --dry-run 2>&1)
    if [ $rc -ne 0 ]; then
        echo "FAIL - $f: --dry-run exit $rc"; echo "$from_file" | sed 's/^/    /'; fails=$((fails + 1))
    elif [ "$from_file" != "$by_name" ] || ! grep -q "^model: $n (" <<<"$from_file"; then
        echo "FAIL - $f resolves to another model than --model $n:"
        diff <(echo "$from_file") <(echo "$by_name") | sed 's/^/    /'; fails=$((fails + 1))
    else
        echo "ok - $f loads and resolves to the preset $n"
    fi
done

expect "gpt2-xl --dry-run allocates nothing (3 GB address-space limit)" 0 "model: gpt2-xl (GPT-2): n_layer 48" -- \
    bash -c "ulimit -v 3000000 && $BENCH model --config configs/models/gpt2-xl.ini --seq 1024 --dry-run"
expect "the same limit stops a real gpt2-xl run (so the limit is effective)" 1 "cannot allocate" -- \
    bash -c "ulimit -v 3000000 && $BENCH model --config configs/models/gpt2-xl.ini --steps 1"
expect "--set wins over the file" 0 "n_layer 1, n_head 2, n_embd 64" -- \
    $BENCH model --config configs/models/gpt2-tiny.ini --set model.n_layer=1 --set model.n_head=2 --dry-run
expect "a later file wins over an earlier one" 0 "model: gpt2-tiny (GPT-2): n_layer 2, n_head 4, n_embd 64, max_seq_len 64" -- \
    $BENCH model --config configs/models/gpt2.ini --config configs/models/gpt2-tiny.ini --dry-run
expect "resnet overrides: stem, classes, image size" 0 "stem imagenet, num_classes 7, image_size 64" -- \
    $BENCH model --model resnet18-cifar --set model.stem=imagenet --set model.num_classes=7 --set model.image_size=64 --dry-run
expect "gpt2 vocab override pads to a multiple of 128" 0 "vocab_size 1000 (padded to 1024)" -- \
    $BENCH model --model gpt2-tiny --set model.vocab_size=1000 --dry-run
expect "bert n_embd override sets the FFN to 4x" 0 "n_embd 256 (FFN 1024)" -- \
    $BENCH model --model bert-tiny --set model.n_embd=256 --dry-run
for m in gpt2-tiny bert-tiny resnet18-cifar; do
    expect "$m trains from configs/models/$m.ini" 0 "# median:" -- \
        $BENCH model --config "configs/models/$m.ini" --batch 2 --seq 16 --steps 1 --threads 2
done
expect "an override changes the built model" 0 "# model: gpt2-tiny (GPT-2): n_layer 1," -- \
    $BENCH model --config configs/models/gpt2-tiny.ini --set model.n_layer=1 --batch 2 --seq 16 --steps 1 --threads 2
finish
