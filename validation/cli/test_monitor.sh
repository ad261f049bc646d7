#!/usr/bin/env bash
# test_monitor — the alert rules and their actions (docs/monitor.md), on GPT-2 tiny at 2 ranks:
#   - explosion: optim.lr = 1000 makes the gradient norm explode at step 2; the rule's
#     rollback returns to the initial state (no checkpoint yet), lower_lr divides the rate,
#     and the run finishes with a finite loss; the redone step 1 has the loss of the first
#     (the same state, the same fixed batch);
#   - the divergence guard (on by default), through the CHAOS build's NaN loss: three NaN
#     steps in a row (5-7, train.max_skipped_steps = 2) roll back once to the checkpoint of
#     step 4 (none is committed while steps are skipped: not step 6), and every step from
#     there has the loss of a straight run, bit for bit (the rollback restores exactly the
#     committed state); a second stretch of NaN steps ends the run as diverged (exit 1, the
#     one rollback taken); with monitor.nonfinite_action = stop it exits 5 and saves nothing
#     of the suspect state; a control file's world=1 present from the start, inside NaN
#     steps 1-3, is postponed (said once) and acted on at step 4 with its commit (relaunch
#     file step=4, exit 4); SIGUSR2 inside a streak exits 3 with a stop line naming the last
#     commit (step 2), which jobscripts/lib.sh reads as outcome 3 past mpirun's exit 1;
#   - a loss spike (CHAOS: a reported loss x 10), a throughput drop (CHAOS: 3 steps 0.5 s
#     longer) and memory growth (CHAOS: 64 MiB leaked) fire at their steps and nowhere else;
#   - stagnation: at optim.lr = 0 the held-out loss never improves: the rule fires after
#     monitor.stagnation_patience evaluations and its stop action checkpoints and exits 5;
#   - bad action lists and a stagnation rule without held-out data exit 2 naming the key;
#   - every metrics.jsonl line parses strictly (finish), the NaN step's record included.
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
chaos_build_data
export OMPI_MCA_rmaps_base_oversubscribe=1

# run NAME TRAIN [ARG...]: 2 ranks of GPT-2 tiny on one fixed synthetic batch; exit code in $rc
run() {
    local name=$1 bin=$2
    shift 2
    $MPIRUN -np 2 $bin --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/$name" \
        --set data.train=synthetic-fixed --set data.val= --set optim.warmup_steps=0 --set optim.schedule=constant \
        --set train.log_interval=1 --set train.threads=1 --set runtime.bind=none "$@" >"$tmp/$name.log" 2>&1 </dev/null
    rc=$?
}
# losses RUN_DIR: "step loss" of the train records, redone or not: redone|first
losses() {
    $PY - "$1/metrics.jsonl" "$2" <<'PY'
import json, sys
want = sys.argv[2] == "redone"
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["kind"] == "train" and bool(r.get("redone")) == want: print(r["step"], r["loss"])
PY
}
kinds() { $PY -c 'import json,sys; print(" ".join(json.loads(l)["kind"] for l in open(sys.argv[1])))' "$1/metrics.jsonl"; }
has_kinds() { kinds "$1" | grep -q "$2"; }

# --- explosion -> rollback to the initial state -> lower_lr -> a finite end ---------------
run explode "$TRAIN" --lr 1000 --steps 10 --set monitor.explosion_action=rollback,lower_lr \
    --set monitor.lr_factor=0.0001 --set monitor.max_rollbacks=3 --set ckpt.every_steps=4
check "explosion: exit 0 (got $rc)" test $rc -eq 0
check "explosion: the alert names the rule and its actions" \
    grep -q "^alert step=2 rule=explosion: gradient norm .* above monitor.explosion = 100000; actions: lower_lr, rollback" \
    "$tmp/explode.log"
check "... rolled back to the initial state" grep -q "^rollback: step 2 -> the initial state from train.seed (step 0)" \
    "$tmp/explode.log"
check "... the records: alert, lower_lr, rollback, in that order" has_kinds "$tmp/explode" "alert lower_lr rollback"
first=$(losses "$tmp/explode" first | awk '$1 == 1 {print $2}') redo=$(losses "$tmp/explode" redone | awk '$1 == 1 {print $2}')
check "... the redone step 1 has the first step 1's loss ($first = $redo)" test -n "$first" -a "$first" = "$redo"
check "... lower_lr: every step after the rollback ran at 1000 x 0.0001 = 0.1" $PY -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
i = [k for k, x in enumerate(r) if x["kind"] == "rollback"][0]
lrs = [x["lr"] for x in r[i:] if x["kind"] == "train"]
sys.exit(not (len(lrs) == 10 and all(abs(v - 0.1) <= 1e-12 for v in lrs)))' "$tmp/explode/metrics.jsonl"
check "... the run ends at step 10 with a finite loss" grep -qE "^summary: steps=10 .*final_loss=[0-9.]+ " "$tmp/explode.log"

# --- the divergence guard: NaN steps 5-7 -> rollback to the committed step 4 --------------
# (step 6's checkpoint is withheld: the streak had begun.) The reference: a straight run
# (one fixed batch: the data the rollback skips is the same batch).
run ref "$TRAIN" --steps 10 --set ckpt.every_steps=2
NEBULA_CHAOS_NAN=5,6,7 run guard "$CHAOS" --steps 10 --set ckpt.every_steps=2 --set train.max_skipped_steps=2
check "guard: exit 0 (got $rc)" test $rc -eq 0
check "guard: three NaN steps, the third past train.max_skipped_steps" \
    grep -q "^alert step=7 rule=nonfinite: 3 step(s) in a row skipped .*; actions: rollback" "$tmp/guard.log"
check "... step 6's checkpoint withheld inside the streak" \
    grep -q "step 6: no checkpoint written: 2 step(s) in a row were skipped" "$tmp/guard.log"
check "... rolled back to the committed step 4" grep -q "^rollback: step 7 -> $tmp/guard/ckpt/step_00000004 (step 4)" \
    "$tmp/guard.log"
check "... steps 5-10 after the rollback have the losses of the straight run, bit for bit" \
    diff <(losses "$tmp/ref" first | awk '$1 >= 5') <(losses "$tmp/guard" redone; losses "$tmp/guard" first | awk '$1 > 7')
check "... the NaN steps' records: loss null, named in nonfinite" $PY -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
nan = [x for x in r if x["kind"] == "train" and x["loss"] is None]
sys.exit(not (len(nan) == 3 and all("loss" in x["nonfinite"] for x in nan)))' "$tmp/guard/metrics.jsonl"

NEBULA_CHAOS_NAN=3,4,5,8,9,10 run twice "$CHAOS" --steps 12 --set ckpt.every_steps=2 --set train.max_skipped_steps=2
check "guard: a second stretch of NaN steps after the one rollback: exit 1 (got $rc)" test $rc -eq 1
check "... diverged, saying the rollback was taken" \
    grep -q "the run diverged: an alert asked for a rollback, but the run took 1 already (monitor.max_rollbacks = 1)" \
    "$tmp/twice.log"
check "... one rollback record, one diverged record" \
    test "$(kinds "$tmp/twice" | tr ' ' '\n' | grep -cxE 'rollback|diverged')" -eq 2

NEBULA_CHAOS_NAN=5,6,7 run stop "$CHAOS" --steps 10 --set ckpt.every_steps=2 --set train.max_skipped_steps=2 \
    --set monitor.nonfinite_action=stop
check "guard with stop: exit 5 (got $rc)" test $rc -eq 5
check "... the suspect state is not saved, the last commit stays the newest" \
    grep -q "^stopping at step 7 of 10: a monitor rule's stop action .*not saved, the last committed checkpoint stays the newest; exit code 5" \
    "$tmp/stop.log"
check "... whose step is 4 (none is committed inside the streak)" test -e "$tmp/stop/ckpt/step_00000004/COMMITTED" -a \
    ! -e "$tmp/stop/ckpt/step_00000006" -a ! -e "$tmp/stop/ckpt/step_00000007"

# --- a relaunch and a stop inside a NaN streak: no commit claimed, none lost -------------
# A control file's new world asked for while steps are skipped (1-3) waits, unretired, for
# the first step end that commits (4): the relaunch file names that committed step.
mkdir -p "$tmp/relaunch" && printf 'world=1\n' >"$tmp/relaunch/control"
NEBULA_CHAOS_NAN=1,2,3 run relaunch "$CHAOS" --steps 10 --set ckpt.every_steps=100 --set train.max_skipped_steps=5
check "relaunch asked for in a NaN streak: exit 4 (got $rc)" test $rc -eq 4
check "... postponed, said once" test "$(grep -c '^elastic: a new world size requested at step 1: postponed, no checkpoint is committed while non-finite steps are skipped' "$tmp/relaunch.log")" -eq 1 -a \
    "$(grep -c 'postponed' "$tmp/relaunch.log")" -eq 1
check "... acted on at step 4, the streak's end, with its checkpoint" \
    grep -q "^elastic: world size 1 requested at step 4: checkpoint committed; relaunch with 1 ranks (exit 4)" "$tmp/relaunch.log"
check "... the relaunch file names step 4" test "$(tr '\n' ' ' <"$tmp/relaunch/relaunch" 2>&1)" = "world=1 step=4 "
check "... step 4 committed, nothing of the streak; the control file retired then" test -e \
    "$tmp/relaunch/ckpt/step_00000004/COMMITTED" -a "$(ls "$tmp/relaunch/ckpt" | grep -c '^step_')" = 1 -a \
    ! -e "$tmp/relaunch/control" -a -e "$tmp/relaunch/control.applied"

# SIGUSR2 inside a streak (steps 3 on, each 0.5 s long): no checkpoint, the stop line names
# the last commit (step 2), and a job script behind mpirun (exit 1) reads it as outcome 3.
(NEBULA_CHAOS_NAN=$(seq -s, 3 30) NEBULA_CHAOS_SLOW=$(seq -s, 3 30) run sigstop "$CHAOS" --steps 40 \
    --set ckpt.every_steps=2 --set train.max_skipped_steps=100; exit $rc) &
bg=$!
for _ in $(seq 300); do  # until step 3 is done (the streak has begun), 30 s at most
    s=$(sed -n 's/^step=\([0-9]*\) .*/\1/p' "$tmp/sigstop/heartbeat" 2>/dev/null)
    [ -n "$s" ] && [ "$s" -ge 3 ] && break
    sleep 0.1
done
kill -USR2 "$(sed -n 's/.* pid=\([0-9]*\) .*/\1/p' "$tmp/sigstop/heartbeat")"  # rank 0 asks, all agree
wait $bg
rc=$?
check "stop in a NaN streak: exit 3 (got $rc)" test $rc -eq 3
check "... the stop line names the last commit, step 2, and claims none" \
    grep -qE "^stopping at step ([3-9]|[12][0-9]) of 40 on request \(SIGTERM or SIGUSR2\): no checkpoint written .*; the last committed checkpoint is step 2 at $tmp/sigstop/ckpt/step_0*2, a relaunch resumes from it; exit code 3$" \
    "$tmp/sigstop.log"
check "... nothing of the streak committed" test -e "$tmp/sigstop/ckpt/step_00000002/COMMITTED" -a \
    "$(ls "$tmp/sigstop/ckpt" | grep -c '^step_')" = 1
check "... jobscripts/lib.sh reads it as outcome 3 past a launcher's exit 1 (requeued)" \
    test "$(bash -c '. jobscripts/lib.sh && nebula_ranks_outcome 1 "$1"' - "$tmp/sigstop.log" 2>/dev/null)" = 3
rm -r "$tmp/sigstop/ckpt/step_00000002"
check "... and not without that commit" \
    test "$(bash -c '. jobscripts/lib.sh && nebula_ranks_outcome 1 "$1"' - "$tmp/sigstop.log" 2>/dev/null)" = 1

# --- stagnation on lr 0 -> stop, with a checkpoint ------------------------------------------
$MPIRUN -np 2 "$TRAIN" --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/stag" --data "$data/train.bin" \
    --val "$data/val.bin" --lr 0 --set optim.min_lr=0 --set optim.warmup_steps=0 --steps 30 --set train.eval_interval=2 --set train.eval_batches=1 \
    --set train.threads=1 --set runtime.bind=none --set ckpt.every_steps=100 --set monitor.stagnation_patience=3 \
    --set monitor.stagnation_action=log,stop >"$tmp/stag.log" 2>&1 </dev/null
rc=$?
check "stagnation at lr 0: exit 5 (got $rc)" test $rc -eq 5
check "... after 3 evaluations without a better held-out loss (the first sets the best)" \
    grep -q "^alert step=8 rule=stagnation: no held-out loss better than .* in 3 evaluations" "$tmp/stag.log"
check "... the stop checkpoints (not requeued)" \
    grep -q "^stopping at step 8 of 30: a monitor rule's stop action (the alert above): checkpoint committed; exit code 5 (not requeued)" \
    "$tmp/stag.log"
check "... step 8 committed" test -e "$tmp/stag/ckpt/step_00000008/COMMITTED"

# --- checkpoint and disable_dgc on a rule that fires at once; a comm stall --------------
run dgc "$TRAIN" --steps 6 --ranks-per-node 1 --set dgc.mode=on --set monitor.explosion=1e-9 \
    --set monitor.explosion_action=checkpoint,disable_dgc --set monitor.comm_stall=1e-9
check "DGC-Pro run: exit 0 (got $rc)" test $rc -eq 0
check "... the explosion rule fired at step 1 only (monitor.cooldown = 10)" \
    test "$(grep -c '^alert step=[0-9]* rule=explosion' "$tmp/dgc.log")" = 1 -a -n "$(grep '^alert step=1 rule=explosion' "$tmp/dgc.log")"
check "... its checkpoint action saved step 1" test -e "$tmp/dgc/ckpt/step_00000001/COMMITTED"
check "... its disable_dgc action switched DGC-Pro off" grep -q "^monitor: DGC-Pro switched off; the next step is dense" \
    "$tmp/dgc.log"
check "... DGC-Pro's per-layer line only before that" test "$(grep -c '^dgc layers: ' "$tmp/dgc.log")" -eq 1
check "... the comm-stall rule fired after the warm-up steps" grep -q "^alert step=3 rule=comm_stall: a rank waited" \
    "$tmp/dgc.log"

# --- loss spike and throughput drop, through the CHAOS build's hooks -------------------
# (a reported loss x 10 at step 30; steps 24-26 each 0.5 s longer than their ~20 ms)
NEBULA_CHAOS_SPIKE=30 NEBULA_CHAOS_SLOW=24,25,26 NEBULA_CHAOS_LEAK=12 run spike "$CHAOS" --steps 34 \
    --set monitor.window=20 --set monitor.spike_z=6 --set monitor.throughput_drop=0.2 --set monitor.memory_growth=32M
check "spike run: exit 0 (got $rc)" test $rc -eq 0
check "... the spike rule fired at step 30 and nowhere else (a falling loss is no spike)" \
    test "$(grep '^alert step=[0-9]* rule=spike' "$tmp/spike.log" | cut -d' ' -f2)" = step=30
check "... the throughput rule at step 26, the third slow step in a row" \
    test "$(grep '^alert step=[0-9]* rule=throughput' "$tmp/spike.log" | cut -d' ' -f2)" = step=26
check "... the memory rule at step 12, where 64 MiB leaked (monitor.memory_growth = 32M)" \
    test "$(grep '^alert step=[0-9]* rule=memory' "$tmp/spike.log" | cut -d' ' -f2)" = step=12

# --- bad rules --------------------------------------------------------------------------
expect "an unknown action exits 2 naming the key and the actions" 2 \
    "monitor.spike_action = 'log,page': unknown action 'page' (a list of: log, checkpoint, stop, lower_lr, rollback, disable_dgc)" \
    -- "$TRAIN" --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/bad" --set monitor.spike_action=log,page
expect "stagnation without held-out data exits 2" 2 "monitor.stagnation_patience = 3 watches the held-out loss, but data.val is empty" \
    -- "$TRAIN" --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/bad" --set data.val= \
    --set monitor.stagnation_patience=3
check "... and leave no run directory" test ! -e "$tmp/bad"
finish
