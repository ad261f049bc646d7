#!/usr/bin/env bash
# nebula-bench model runs a training step of each family (tiny shapes) and reports
# a finite loss and a throughput line; CSV has one row per step. It times the
# trainer's own step: nebula-train on data.train = synthetic-fixed with the same
# model, batch, seed and optimizer prints the same per-step losses (to the 4 decimals
# nebula-bench prints) as nebula-bench model, for each family. nebula-bench dgc
# prints its five rows and selects about k entries.
. "$(dirname "$0")/lib.sh"
for m in gpt2-tiny bert-tiny resnet18-cifar; do
    expect "$m: two training steps and a median line" 0 "# median:" -- \
        $BENCH model --model "$m" --batch 2 --seq 16 --steps 2 --threads 2
done
rows=$($BENCH model --model gpt2-tiny --batch 2 --seq 16 --steps 3 --csv | grep -c '^[0-9]')
if [ "$rows" = 3 ]; then echo "ok - csv has one row per step"; else echo "FAIL - csv rows: $rows"; fails=$((fails + 1)); fi
# same_step MODEL B T LR DECAY: 4 steps of nebula-bench (no warm-up) and of nebula-train
# (constant rate, no clipping), losses compared as nebula-bench prints them
same_step() {
    local m=$1 b=$2 t=$3 lr=$4 wd=$5 bench train
    bench=$($BENCH model --model "$m" --batch "$b" --seq "$t" --steps 4 --threads 2 --seed 7 --csv \
                --set bench.model_warmup=0 | awk -F, '/^[0-9]/ { print $NF }' | tr '\n' ' ')
    train=$(build/bin/nebula-train --model "$m" --set train.micro_batch="$b" --seq-len "$t" --steps 4 --seed 7 \
                --data synthetic-fixed --set train.threads=2 --set runtime.bind=none --set optim.schedule=constant \
                --set optim.warmup_steps=0 --lr "$lr" --set optim.weight_decay="$wd" --set train.max_grad_norm=0 \
                --set train.log_interval=1 --run-dir "$tmp/same-$m" 2>&1 |
                sed -n 's/^step=[0-9]* loss=\([0-9.]*\).*/\1/p' | xargs -n1 printf '%.4f ' 2>/dev/null)
    if [ -n "$bench" ] && [ "$(wc -w <<<"$bench")" = 4 ] && [ "$bench" = "$train" ]; then
        echo "ok - $m: nebula-bench model and nebula-train (synthetic-fixed) run the same step: losses $bench"
    else
        echo "FAIL - $m: nebula-bench losses '$bench' vs nebula-train '$train'"; fails=$((fails + 1))
    fi
}
same_step gpt2-tiny 4 32 3e-4 0.1
same_step bert-tiny 2 16 3e-4 0.1
same_step resnet18-cifar 2 16 0.01 1e-4
expect "data.val = synthetic-fixed is refused" 2 "data.val = synthetic-fixed" -- \
    build/bin/nebula-train --model gpt2-tiny --set train.micro_batch=2 --steps 1 --val synthetic-fixed \
    --run-dir "$tmp/val-fixed"
out=$($BENCH dgc --count 1048576 --rounds 3)
sel=$(sed -n 's/.*(k = \([0-9]*\), last selection \([0-9]*\)).*/\1 \2/p' <<<"$out")
read -r k got <<<"$sel"
if [ "$(grep -c 'G_entries/s\|^  [a-z]' <<<"$out")" = 6 ] && [ "${got:-0}" -ge $((k / 3)) ] && [ "$got" -le $((3 * k)) ]; then
    echo "ok - bench dgc: five timed rows, about k selected ($got for k = $k)"
else
    echo "FAIL - bench dgc: '$sel'"; echo "$out"; fails=$((fails + 1))
fi
finish
