#!/usr/bin/env bash
# test_compat — the behaviour switch compat.dgc_unscaled_lr (docs/compat.md) on the real
# trainer: DGC-Pro with momentum SGD on 2 ranks as 2 nodes, gpt2-tiny, 6 steps.
#   Before 2b0c7fc the exchange accumulated v += u and sent the sums as they came; since,
#   it folds the rate in (v += s u, the sums divided by s, s = this step's rate over the
#   peak), so a delayed update lands at the rate of the steps that made it. The switch
#   restores s = 1. At a constant rate s is 1 anyway: the switch must change nothing, bit
#   for bit. Under a warm-up (s = 1/4, 2/4, ...) it must change the trajectory once a
#   residual has been carried (from the loss of step 3 on), and the default must be
#   today's (the same as the key set to false).
# compat.sched_floor_first's numbers (balanced shares 25/15 against 30/10) are checked in
# validation/unit/test_config_compat.c: measured speeds are not reproducible in a run.
. "$(dirname "$0")/lib.sh"
licenses_data
dgc=(--ranks-per-node 1 --steps 6 --set train.global_batch=8 --set optim.name=sgd --set optim.lr=0.3
     --set dgc.mode=on --set dgc.min_numel=1024)
run() { local name=$1; shift; licenses_run $tmp/$name 2 "${dgc[@]}" "$@" || echo "FAIL - run $name: see $tmp/$name.log"; }
run const
run const-compat --set compat.dgc_unscaled_lr=true
run warm --set optim.warmup_steps=4
run warm-false --set optim.warmup_steps=4 --set compat.dgc_unscaled_lr=false
run warm-compat --set optim.warmup_steps=4 --set compat.dgc_unscaled_lr=true
check "the runs used DGC-Pro" grep -q dgc_ $tmp/warm/metrics.jsonl
check "constant rate: the switch changes nothing (bit for bit)" same_losses $tmp/const $tmp/const-compat 1 exact
check "warm-up: the default is today's behaviour (= compat.dgc_unscaled_lr = false, bit for bit)" \
    same_losses $tmp/warm $tmp/warm-false 1 exact
# warm-up over 4 steps at lr 0.3: s = 1/4, 2/4, 3/4, 1. Powers of two fold exactly, and the
# first exchange has no residual, so the step-1 update (loss at step 2) is the same bits
# either way; from the second exchange on the residual carries s-weighted sums in one run
# and plain sums in the other, so every later loss differs
check "warm-up: steps 1-2 the same with the switch, steps 3-6 all different" $PY -c "
import json, sys
a, b = ({j['step']: j['loss'] for j in map(json.loads, open(f'$tmp/{n}/metrics.jsonl')) if j['kind'] == 'train'}
        for n in ('warm', 'warm-compat'))
print('    default', [round(a[s], 6) for s in sorted(a)]); print('    compat ', [round(b[s], 6) for s in sorted(b)])
sys.exit(0 if sorted(a) == sorted(b) == list(range(1, 7)) and all(a[s] == b[s] for s in (1, 2))
         and all(a[s] != b[s] for s in range(3, 7)) else 1)"
finish
