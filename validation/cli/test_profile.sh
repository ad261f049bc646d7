#!/usr/bin/env bash
# test_profile — profiler mode (docs/profile.md). One argument picks the part:
#   tiny  (default) GPT-2 tiny at 2 ranks with --profile: RUN_DIR/profile.json parses, holds
#         every phase and every layer (wte+wpe, h.0, h.1, ln_f+head) forward and backward with
#         one sample per profiled step, and the phases and layers sum to within 5% of the
#         trainer's own step time; the table is printed; an unknown event is n/a, not a
#         failure; profile.mode = auto prints the one-screen profile on the first run of a
#         shape only (the record of seen shapes, profile.shapes) and again for a new
#         micro-batch; profile.mode = off writes nothing; bad profile keys exit 2 naming them.
#   papi  an event this machine counts (the perf_event component's software event
#         perf::TASK-CLOCK) gives a positive count in the forward and backward layers, and a
#         made-up event is "n/a: ..." beside it; SKIP (77) when nothing can be counted here.
#   gpt2  GPT-2 124M at 2 ranks, 3 profiled steps: every one of its 14 layers each way, and
#         the sum within 5% of the step time.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_MCA_rmaps_base_oversubscribe=1
TRAIN=build/bin/nebula-train
part=${1:-tiny}

# check_json FILE NLAYER_BLOCKS STEPS: the profile's structure and the 5% sum
check_json() {
    $PY - "$@" <<'PY'
import json, sys
path, blocks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
j = json.load(open(path), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
names = {t["name"]: t for t in j["timers"]}
layers = ["wte+wpe"] + [f"h.{l}" for l in range(blocks)] + ["ln_f+head"]
want = ["zero_grads", "data", "comm_wait", "loss+clip", "optimizer"] + \
       [f"{d} {l}" for d in ("forward", "backward") for l in layers]
missing = [n for n in want if n not in names]
assert not missing, f"missing timers {missing}"
bad = [n for n in want if names[n]["count"] != steps]
assert not bad, f"timers without {steps} samples: {bad}"
assert j["steps"] == steps and j["step_ms"]["count"] == steps, (j["steps"], steps)
for n in want:
    t = names[n]
    assert 0 <= t["min_ms"] <= t["median_ms"] <= t["max_ms"], (n, t)
    assert len(t["ranks"]) == j["ranks"], n
parts = sum(t["total_ms"] for t in j["timers"] if t["kind"] != "detail")
step = j["trainer_step_ms"]["total_ms"]
layer_sum = sum(t["total_ms"] for t in j["timers"] if t["kind"] in ("forward", "backward"))
print(f"    phases + layers {parts:.1f} ms, step {step:.1f} ms ({100 * parts / step:.2f}%); "
      f"layers alone {100 * layer_sum / step:.1f}% of the step")
assert abs(parts - step) <= 0.05 * step, "phases and layers do not sum to the step within 5%"
PY
}

case $part in
tiny)
    run=$tmp/on
    expect "--profile: the table at the end" 0 "= phases and layers" -- \
        $MPIRUN -np 2 $TRAIN --model gpt2-tiny --micro-batch 8 --accum 2 --seq-len 64 --steps 12 --run-dir $run \
        --profile --set profile.events=perf::TASK-CLOCK,NEBULA_NO_SUCH_EVENT --set ckpt.every_steps=6
    check "profile.json: every phase and layer, 11 samples each, the sum within 5% of the step" check_json $run/profile.json 2 11
    check "profile.json: the made-up event is n/a, the run did not fail" $PY -c "
import json; e = {x['name']: x for x in json.load(open('$run/profile.json'))['events']}
assert not e['NEBULA_NO_SUCH_EVENT']['counted'] and e['NEBULA_NO_SUCH_EVENT']['status'].startswith('n/a: '), e"
    check "profile.json: the checkpoints' stall is sampled" $PY -c "
import json; t = {x['name']: x for x in json.load(open('$run/profile.json'))['timers']}
assert t['checkpoint stall']['count'] == 2 and t['checkpoint stall']['share_pct'] is None, t['checkpoint stall']"
    shapes=$tmp/shapes
    expect "auto: the first run of a shape prints the one-screen profile" 0 "profile: first run of model=gpt2-tiny" -- \
        $MPIRUN -np 2 $TRAIN --model gpt2-tiny --micro-batch 4 --seq-len 64 --steps 8 --run-dir $tmp/a1 \
        --set profile.shapes=$shapes
    check "auto: profile.json of the first run holds profile.steps = 5 steps, the shape recorded" \
        bash -c "check_json() { :; }; grep -qx 'model=gpt2-tiny n_layer=2 n_head=4 n_embd=64 vocab=256 micro_batch=4 seq_len=64 ranks=2 precision=fp32' $shapes && $PY -c \"
import json; j = json.load(open('$tmp/a1/profile.json')); assert j['first_run'] and j['steps'] == 5 and j['advice'], j['steps']\""
    $MPIRUN -np 2 $TRAIN --model gpt2-tiny --micro-batch 4 --seq-len 64 --steps 8 --run-dir $tmp/a2 \
        --set profile.shapes=$shapes >$tmp/a2.out 2>&1
    check "auto: a shape already seen is not profiled again" bash -c "! grep -q '^profile:' $tmp/a2.out && [ ! -e $tmp/a2/profile.json ]"
    expect "auto: a new micro-batch is a new shape" 0 "profile: first run of model=gpt2-tiny" -- \
        $MPIRUN -np 2 $TRAIN --model gpt2-tiny --micro-batch 6 --seq-len 60 --steps 8 --run-dir $tmp/a3 \
        --set profile.shapes=$shapes
    check "auto: the advice names the micro-batch x seq_len that is not a multiple of 8" \
        grep -q "seq_len 60 is not a multiple of 8" <(cat $tmp/a3/profile.json)
    expect "off: no profile" 0 "summary:" -- $MPIRUN -np 2 $TRAIN --model gpt2-tiny --micro-batch 4 --seq-len 64 \
        --steps 3 --run-dir $tmp/off --set profile.mode=off
    check "off: no profile.json, no shapes record" bash -c "[ ! -e $tmp/off/profile.json ] && [ ! -e $tmp/off/profile-shapes ]"
    expect "a bad profile.mode exits 2 naming the key and the values" 2 "auto|on|off" -- \
        $TRAIN --model gpt2-tiny --micro-batch 2 --steps 1 --run-dir $tmp/bad --set profile.mode=sometimes
    expect "more than 8 events exit 2" 2 "error: profile.events = 'a,b,c,d,e,f,g,h,i': more than 8 events" -- \
        $TRAIN --model gpt2-tiny --micro-batch 2 --steps 1 --run-dir $tmp/bad --set profile.events=a,b,c,d,e,f,g,h,i
    expect "an empty event name exits 2" 2 "event 2 is empty" -- $TRAIN --model gpt2-tiny --micro-batch 2 --steps 1 \
        --run-dir $tmp/bad --profile --set profile.events=perf::TASK-CLOCK,,PAPI_TOT_CYC
    ;;
papi)
    run=$tmp/papi
    expect "--profile with a counter that exists and one that does not" 0 "counter NEBULA_NO_SUCH_EVENT: n/a: " -- \
        $MPIRUN -np 2 $TRAIN --model gpt2-tiny --micro-batch 8 --seq-len 64 --steps 6 --run-dir $run \
        --profile --set profile.events=perf::TASK-CLOCK,NEBULA_NO_SUCH_EVENT
    counted=$($PY -c "
import json; e = {x['name']: x for x in json.load(open('$run/profile.json'))['events']}
print('yes' if e['perf::TASK-CLOCK']['counted'] else e['perf::TASK-CLOCK']['status'])")
    if [ "$counted" != yes ]; then
        echo "SKIP: nothing can be counted here: perf::TASK-CLOCK is $counted"
        exit 77
    fi
    check "perf::TASK-CLOCK counts in every layer (ns > 0), the made-up event is null beside it" $PY -c "
import json; j = json.load(open('$run/profile.json'))
for t in j['timers']:
    c = t['counters_per_step']
    assert c['NEBULA_NO_SUCH_EVENT'] is None, t
    if t['kind'] in ('forward', 'backward'): assert c['perf::TASK-CLOCK'] > 0, t
print('    task-clock of the forward h.0 per step:', [t for t in j['timers'] if t['name'] == 'forward h.0'][0]['counters_per_step'])"
    ;;
gpt2)
    run=$tmp/gpt2
    expect "GPT-2 124M --profile, 2 ranks" 0 "= phases and layers" -- \
        $MPIRUN -np 2 $TRAIN --model gpt2 --micro-batch 1 --seq-len 64 --steps 4 --run-dir $run --profile \
        --set data.train=synthetic-fixed --set profile.events=none
    check "GPT-2 124M profile.json: 14 layers each way, the sum within 5% of the step" check_json $run/profile.json 12 3
    ;;
*) echo "usage: $0 [tiny|papi|gpt2]"; exit 2 ;;
esac
finish
