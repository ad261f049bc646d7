#!/usr/bin/env bash
# nebula-bench model runs a training step of each family (tiny shapes) and reports
# a finite loss and a throughput line; CSV has one row per step.
. "$(dirname "$0")/lib.sh"
for m in gpt2-tiny bert-tiny resnet18-cifar; do
    expect "$m: two training steps and a median line" 0 "# median:" -- \
        $BENCH model --model "$m" --batch 2 --seq 16 --steps 2 --threads 2
done
rows=$($BENCH model --model gpt2-tiny --batch 2 --seq 16 --steps 3 --csv | grep -c '^[0-9]')
if [ "$rows" = 3 ]; then echo "ok - csv has one row per step"; else echo "FAIL - csv rows: $rows"; fails=$((fails + 1)); fi
finish
