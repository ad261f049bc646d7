#!/usr/bin/env bash
# nebula-bench model runs a training step of each family (tiny shapes) and reports
# a finite loss and a throughput line; CSV has one row per step. nebula-bench dgc
# prints its five rows and selects about k entries.
. "$(dirname "$0")/lib.sh"
for m in gpt2-tiny bert-tiny resnet18-cifar; do
    expect "$m: two training steps and a median line" 0 "# median:" -- \
        $BENCH model --model "$m" --batch 2 --seq 16 --steps 2 --threads 2
done
rows=$($BENCH model --model gpt2-tiny --batch 2 --seq 16 --steps 3 --csv | grep -c '^[0-9]')
if [ "$rows" = 3 ]; then echo "ok - csv has one row per step"; else echo "FAIL - csv rows: $rows"; fails=$((fails + 1)); fi
out=$($BENCH dgc --count 1048576 --rounds 3)
sel=$(sed -n 's/.*(k = \([0-9]*\), last selection \([0-9]*\)).*/\1 \2/p' <<<"$out")
read -r k got <<<"$sel"
if [ "$(grep -c 'G_entries/s\|^  [a-z]' <<<"$out")" = 6 ] && [ "${got:-0}" -ge $((k / 3)) ] && [ "$got" -le $((3 * k)) ]; then
    echo "ok - bench dgc: five timed rows, about k selected ($got for k = $k)"
else
    echo "FAIL - bench dgc: '$sel'"; echo "$out"; fails=$((fails + 1))
fi
finish
