#!/usr/bin/env bash
# nebula-train's elastic control file and heartbeat (docs/training.md, "Elastic control and
# heartbeat"), with gpt2-tiny on the licence texts at a constant learning rate. The
# control file is written before launch, so rank 0 takes it at the end of step 1:
#   - heartbeat: present after a run, its step is the final step, every field parses;
#   - global_batch=16 at 2 ranks x 4: accumulation 2 from step 2, metrics lr exactly
#     2 x the base (linear rule), 3e-3 x sqrt(4) with lr_rule=sqrt and 32;
#     control.applied left behind;
#   - that change, stopped at step 6 and resumed to 12: losses, parameters and moments
#     bit-identical to the uninterrupted run (the batch and factor come from the
#     checkpoint, not from the spent control file);
#   - world=1 at 2 ranks: exit 4, RUN_DIR/relaunch = world=1 step=1, a committed
#     checkpoint at step 1; relaunched at 1 rank it resumes there with global batch 8
#     and continues the 2-rank trajectory within 1e-5;
#   - a typo (wrld=3) and a global batch that does not split (12 at 2 x 4): error
#     naming the key / numbers, control.rejected, the run goes on and exits 0.
. "$(dirname "$0")/lib.sh"
licenses_data

# run RUN_DIR NP [ARG...]: licenses_run (lib.sh) at global batch 8, 4 per rank
run() {
    local dir=$1 np=$2
    shift 2
    licenses_run "$dir" "$np" --set train.global_batch=8 --set train.micro_batch=4 "$@"
}

# control RUN_DIR TEXT: the control file, written atomically as a supervisor should
control() {
    mkdir -p "$1" && printf "$2" >"$1/control.tmp" && mv "$1/control.tmp" "$1/control"
}

# metric RUN_DIR KEY: "step value" per train record of metrics.jsonl, repr() exact
metric() {
    $PY -c "
import json, sys
for l in open('$1/metrics.jsonl'):
    j = json.loads(l)
    if j['kind'] == 'train': print(j['step'], repr(j['$2']))"
}

# lr_is RUN_DIR STEP_FROM STEP_TO VALUE: the metrics' lr equals VALUE exactly over the steps
lr_is() {
    $PY - "$1/metrics.jsonl" "$2" "$3" "$4" <<'PY'
import json, sys
lr = {j["step"]: j["lr"] for j in map(json.loads, open(sys.argv[1])) if j["kind"] == "train"}
a, b, want = int(sys.argv[2]), int(sys.argv[3]), eval(sys.argv[4])
bad = [(s, lr.get(s)) for s in range(a, b + 1) if lr.get(s) != want]
if bad: print(f"    lr differs from {want!r} at {bad[:3]}")
sys.exit(1 if bad else 0)
PY
}

# heartbeat_is RUN_DIR STEP WORLD GB: one line, every field parses, and these values
heartbeat_is() {
    $PY - "$1/heartbeat" "$2" "$3" "$4" <<'PY'
import os, sys, time
text = open(sys.argv[1]).read()
lines = text.splitlines()
f = dict(kv.split("=", 1) for kv in lines[0].split())
ok = (len(lines) == 1 and text.endswith("\n") and set(f) == {"step", "steps", "time", "pid", "world", "global_batch"}
      and int(f["step"]) == int(sys.argv[2]) and int(f["steps"]) >= int(f["step"]) and int(f["pid"]) > 0
      and int(f["world"]) == int(sys.argv[3]) and int(f["global_batch"]) == int(sys.argv[4])
      and abs(float(f["time"]) - time.time()) < 600 and len(f["time"].split(".")[1]) == 3)
if not ok: print(f"    heartbeat: {text!r}")
sys.exit(0 if ok else 1)
PY
}

identical() {  # identical FILE1 FILE2: parameters and AdamW moments bit for bit
    local g
    for g in /params /optim/m /optim/v; do h5diff -q "$1" "$2" $g $g || return 1; done
}

# --- heartbeat and a global batch change ------------------------------------------------
ck="--set ckpt.every_steps=6"
control $tmp/full 'global_batch=16   # twice the config\n'
run $tmp/full 2 --steps 12 $ck
check "a run with a control file exits 0" [ $? -eq 0 ]
check "heartbeat: one line, fields parse, step 12 = the final step, world 2, global batch 16" \
    heartbeat_is $tmp/full 12 2 16
check "the change is logged at step 1 with accumulation 2 and lr x 2" \
    grep -qF "elastic: global batch 8 -> 16 at step 1 (accumulation 2, lr x 2, rule linear)" $tmp/full.log
check "step 1 ran at the config's lr 3e-3" lr_is $tmp/full 1 1 3e-3
check "steps 2-12 run at exactly 3e-3 x 2 (linear rule)" lr_is $tmp/full 2 12 "3e-3 * 2.0"
check "the stdout metrics line shows the effective lr" grep -q "^step=2 .* lr=6.0000e-03" $tmp/full.log
check "control.applied replaces control" eval '[ -e $tmp/full/control.applied ] && [ ! -e $tmp/full/control ]'
control $tmp/sqrt 'global_batch=32\nlr_rule=sqrt\n'
run $tmp/sqrt 2 --steps 3 --set elastic.lr_rule=linear
check "lr_rule=sqrt in the file wins over elastic.lr_rule: 8 -> 32 gives lr x 2, accumulation 4" \
    grep -qF "elastic: global batch 8 -> 32 at step 1 (accumulation 4, lr x 2, rule sqrt)" $tmp/sqrt.log
check "... and metrics lr exactly 3e-3 x sqrt(4)" lr_is $tmp/sqrt 2 3 "3e-3 * 2.0"

# --- the changed batch survives a stop and resume -----------------------------------------
control $tmp/part 'global_batch=16\n'
run $tmp/part 2 --steps 6 $ck
run $tmp/part 2 --steps 12 $ck
check "the resumed run takes batch 16 and lr x 2 from the checkpoint" \
    grep -qF "elastic: the checkpoint's global batch 16 (config: 8) and lr x 2 continue (accumulation 2)" $tmp/part.log
check "... its steps 7-12 run at lr 3e-3 x 2" lr_is $tmp/part 7 12 "3e-3 * 2.0"
check "... with losses bit-identical to the uninterrupted run" same_losses $tmp/full $tmp/part 1 exact
s12=ckpt/step_00000012/state.h5
check "... and parameters and moments at step 12 bit-identical" identical $tmp/full/$s12 $tmp/part/$s12

# --- world size change: relaunch ----------------------------------------------------------
run $tmp/two 2 --steps 8 --set ckpt.every_steps=4
control $tmp/rl 'world=1\n'
run $tmp/rl 2 --steps 8 --set ckpt.every_steps=4
check "world=1 at 2 ranks exits 4" [ $? -eq 4 ]
check "... saying so" grep -qF "elastic: world size 1 requested at step 1: checkpoint committed; relaunch with 1 ranks (exit 4)" \
    $tmp/rl.log
check "... RUN_DIR/relaunch holds world=1 and step=1" [ "$(cat $tmp/rl/relaunch 2>/dev/null)" = "$(printf 'world=1\nstep=1')" ]
check "... the checkpoint of step 1 is committed" [ -e $tmp/rl/ckpt/step_00000001/COMMITTED ]
check "... control.applied replaces control" eval '[ -e $tmp/rl/control.applied ] && [ ! -e $tmp/rl/control ]'
check "... metrics.jsonl records the relaunch (step 1, world 1) after the checkpoint of step 1" \
    $PY -c 'import json, sys
k = [(r["kind"], r["step"], r.get("world")) for r in map(json.loads, open(sys.argv[1]))]
sys.exit(not (("relaunch", 1, 1) in k and k.index(("checkpoint", 1, None)) < k.index(("relaunch", 1, 1))))' \
    $tmp/rl/metrics.jsonl
run $tmp/rl 1 --steps 8 --set ckpt.every_steps=4
check "relaunched at 1 rank: exit 0" [ $? -eq 0 ]
check "... resumed at step 1" grep -q "resumed from .*step_00000001 at step 1" $tmp/rl.log
check "... with global batch 8 = 4 x accumulation 2 x 1 rank (heartbeat: step 8, world 1)" heartbeat_is $tmp/rl 8 1 8
check "... continuing the 2-rank trajectory within 1e-5" same_losses $tmp/two $tmp/rl 2

# --- bad control files: rejected, training goes on ------------------------------------------
control $tmp/typo '# a supervisor typo\nwrld=3\n'
run $tmp/typo 2 --steps 4
check "a typo in the control file: the run still exits 0" [ $? -eq 0 ]
check "... the error names the file, line 2, the key and the valid keys" \
    grep -qF "typo/control:2: unknown key 'wrld' (valid keys: world, global_batch, lr_rule, tp, pp)" $tmp/typo.log
check "... control.rejected replaces control" eval '[ -e $tmp/typo/control.rejected ] && [ ! -e $tmp/typo/control ]'
check "... and the run reached its last step unchanged" heartbeat_is $tmp/typo 4 2 8
control $tmp/odd 'global_batch=12\n'
run $tmp/odd 2 --steps 4
check "a global batch that does not split: the run still exits 0" [ $? -eq 0 ]
check "... the error names the batch and what it must divide by" \
    grep -qF "global_batch 12 is not train.micro_batch x accumulation x data-parallel ranks = 4 x A x 2 for a whole A >= 1 (valid: multiples of 8)" \
    $tmp/odd.log
check "... control.rejected, batch and lr unchanged" \
    eval '[ -e $tmp/odd/control.rejected ] && heartbeat_is $tmp/odd 4 2 8 && lr_is $tmp/odd 1 4 3e-3'
control $tmp/val 'lr_rule=cubic\n'
run $tmp/val 2 --steps 2
check "a bad lr_rule names the valid values" grep -qF "lr_rule = 'cubic': valid values are linear, sqrt, none" $tmp/val.log
finish
