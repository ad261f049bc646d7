#!/usr/bin/env bash
# test_reload — hot reload through `nebula-train control` (docs/monitor.md "Hot reload"), on
# GPT-2 tiny at 2 ranks on one fixed synthetic batch. Requests are written before the run
# starts with --at-step, so each takes effect at a known step end:
#   - optim.lr and optim.weight_decay changed live at step 4 end bit-identical (every loss,
#     every dataset of the final checkpoint but the history blob) to a run resumed from the
#     step-4 checkpoint with those values on the command line;
#   - a resume from the live run's step-4 checkpoint replays the history (same losses);
#   - a change whose launch lost its checkpoint afterwards is applied again at its step;
#   - refused requests (a key that cannot change live, a batch that does not split, a bad
#     line, DGC-Pro that was never set up) are answered with the reason and change nothing:
#     the run's losses are those of a run without them;
#   - --undo restores the values the newest change replaced;
#   - live keys take effect: train.global_batch (accumulation 2), train.steps, a [monitor]
#     rule (an explosion threshold below the gradient norm fires), dgc.sparsity and dgc.mode;
#   - the command refuses bad input with exit 2 before writing anything, --wait prints the
#     answer of a live run, and times out (exit 1) when no run reads the request;
#   - every metrics.jsonl line parses strictly (finish).
set -u
cd "$(dirname "$0")/../.."
. validation/cli/lib.sh
export OMPI_MCA_rmaps_base_oversubscribe=1
TRAIN=build/bin/nebula-train
CK=build/bin/nebula-ckpt

# run NAME [ARG...]: 2 ranks, constant rate, a loss line every step, checkpoints every 4
run() {
    local name=$1
    shift
    $MPIRUN -np 2 $TRAIN --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/$name" \
        --set data.train=synthetic-fixed --set data.val= --set optim.warmup_steps=0 --set optim.schedule=constant \
        --set train.log_interval=1 --set train.threads=1 --set runtime.bind=none --set ckpt.every_steps=4 "$@" \
        >>"$tmp/$name.log" 2>&1 </dev/null
    rc=$?
    return $rc
}
# run_dir NAME: $tmp/NAME made a run directory before its run starts: the lock file every run
# creates, empty as a run that ended cleanly leaves it (control refuses a directory without a run)
run_dir() { mkdir -p "$tmp/$1" && : >>"$tmp/$1/lock"; }
ask() {  # ask NAME ARG...: a request for run NAME, before it starts
    run_dir "$1"
    local name=$1
    shift
    $TRAIN control "$tmp/$name" "$@" >/dev/null || echo "FAIL - control $name $*"
}
# field RUN_DIR KEY: KEY of every train record (%.6g), on one line
field() {
    $PY - "$1/metrics.jsonl" "$2" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
print(" ".join(f"{x[sys.argv[2]]:.6g}" for x in r if x["kind"] == "train" and sys.argv[2] in x))
PY
}
# only_history_differs DIFF_OUTPUT: every dataset but /rank/reload is "same"
only_history_differs() {
    local other
    other=$(grep -E '^ */' <<<"$1" | grep -v ' same ' | grep -v '^ */rank/reload ')
    [ -z "$other" ] && grep -q '^ */rank/reload ' <<<"$1" || { echo "$other" | head -3 | sed 's/^/    /'; return 1; }
}

# --- live at step 4 == resumed from step 4 with the values set ------------------------
ask live --set optim.lr=1e-3 --set optim.weight_decay=0 --at-step 4
run live --steps 8
check "live: exit 0 (got $rc)" test $rc -eq 0
check "... the change is logged with the old and new values at step 4" \
    grep -q "^reload v1 at step 4: optim.lr 0.003 -> 0.001, optim.weight_decay 0.1 -> 0" "$tmp/live.log"
check "... answered: reload/v000001.applied names the step" grep -q "^applied_step = 4" "$tmp/live/reload/v000001.applied"
check "... and the request is gone" test ! -e "$tmp/live/reload/v000001.req"
check "... recorded as a reload event with its changes" $PY -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["kind"] == "reload"]
assert len(r) == 1 and r[0]["step"] == 4 and r[0]["applied"] and r[0]["version"] == 1, r
assert r[0]["changes"] == [{"key": "optim.lr", "old": "0.003", "new": "0.001"},
                           {"key": "optim.weight_decay", "old": "0.1", "new": "0"}], r[0]["changes"]' "$tmp/live/metrics.jsonl"
check "... config.ini holds the live values" grep -q "^lr = 0.001" "$tmp/live/config.ini"
run resumed --steps 4
run resumed --steps 8 --set optim.lr=1e-3 --set optim.weight_decay=0
check "resumed from step 4 with --set: exit 0 (got $rc)" test $rc -eq 0
check "... every loss of steps 5-8 equals the live run's, bit for bit" same_losses "$tmp/live" "$tmp/resumed" 5 exact
check "... and so does every dataset of the step-8 checkpoint but the reload history" only_history_differs \
    "$($CK diff "$tmp/live/ckpt/step_00000008" "$tmp/resumed/ckpt/step_00000008" 2>&1)"

# --- a resume replays the history; a lost launch's change is applied again -------------
mkdir -p "$tmp/replay"
cp -r "$tmp/live/ckpt" "$tmp/replay/"
rm -rf "$tmp/replay/ckpt/step_00000008"
run replay --steps 8
check "replay: the step-4 checkpoint's history continues" \
    grep -q "^reload: the checkpoint's history (up to v1) continues: optim.lr = 0.001, optim.weight_decay = 0" \
    "$tmp/replay.log"
check "... steps 5-8 as the live run's, bit for bit" same_losses "$tmp/live" "$tmp/replay" 5 exact
ask lost --set optim.lr=1e-3 --at-step 6
run lost --steps 8
rm -rf "$tmp/lost/ckpt/step_00000008"  # the state after the change is lost
run lost --steps 8
check "lost launch: the change is applied again at step 6" \
    grep -q "^reload v1 at step 6 (applied again: the launch that applied it first lost its state since)" "$tmp/lost.log"
check "... the redone steps 7-8 have the first launch's losses" $PY -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["kind"] == "train"]
first = {x["step"]: x["loss"] for x in r if not x.get("redone")}
redo = {x["step"]: x["loss"] for x in r if x.get("redone")}
assert sorted(redo) == [5, 6, 7, 8] and all(redo[s] == first[s] for s in redo), (first, redo)' "$tmp/lost/metrics.jsonl"

# --- refused requests change nothing and say why ---------------------------------------
ask refused --set train.global_batch=34 --at-step 1
ask refused --set dgc.mode=on --at-step 2
printf 'version = 3\nat_step = 3\nmodel.n_layer = 9\n' >"$tmp/refused/reload/v000003.req"  # by hand: never checked
printf 'version = 4\nat_step = 3\noptim.lr 1e-3\n' >"$tmp/refused/reload/v000004.req"
run refused --steps 6
run plain --steps 6
check "refused: exit 0 (got $rc)" test $rc -eq 0
check "... a batch that does not split is refused naming the keys" grep -q "reload v1 refused at step 1: .*train.global_batch" \
    "$tmp/refused.log"
check "... DGC-Pro that was not set up" grep -q "reload v2 refused at step 2: dgc.mode = on: DGC-Pro was not set up" \
    "$tmp/refused.log"
check "... a key that cannot change live, with the reason" \
    grep -q "^# nebula-train: refused at step 3 (launch 1): model.n_layer cannot change while the run lives: the model's shape" \
    "$tmp/refused/reload/v000003.rejected"
check "... a line that is no assignment, naming it" grep -q "refused at step 3 (launch 1): line 3: expected key=value" \
    "$tmp/refused/reload/v000004.rejected"
check "... four refusals recorded with their reasons" $PY -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["kind"] == "reload"]
assert [x["version"] for x in r] == [1, 2, 3, 4] and not any(x["applied"] for x in r) and all(x["reason"] for x in r), r' \
    "$tmp/refused/metrics.jsonl"
check "... and the losses are those of a run without requests, bit for bit" same_losses "$tmp/plain" "$tmp/refused" 1 exact

# --- undo -------------------------------------------------------------------------------
ask undo --set optim.lr=1e-3 --at-step 2
ask undo --set optim.lr=5e-4 --set train.max_grad_norm=0.5 --at-step 3
ask undo --undo --at-step 4
ask undo --undo --at-step 5
run undo --steps 6
check "undo: v3 undoes v2 (lr and clip back)" grep -q "^reload v3 at step 4 (undoes v2): train.max_grad_norm 0.5 -> 1, optim.lr 0.0005 -> 0.001" \
    "$tmp/undo.log"
check "... v4 undoes v1" grep -q "^reload v4 at step 5 (undoes v1): optim.lr 0.001 -> 0.003" "$tmp/undo.log"
check "... the rate of every step follows: 3e-3 3e-3 1e-3 5e-4 1e-3 3e-3" \
    test "$(field "$tmp/undo" lr)" = "0.003 0.003 0.001 0.0005 0.001 0.003"
ask undo --undo
run undo --steps 7
check "... a third undo has nothing left to undo" grep -q "reload v5 refused at step 7: nothing to undo" "$tmp/undo.log"
expect "--list shows every request and its answer" 0 "applied at step 5 (launch 1): optim.lr 0.001 -> 0.003" -- \
    $TRAIN control "$tmp/undo" --list

# --- live keys take effect --------------------------------------------------------------
ask keys --set train.global_batch=64 --at-step 2
ask keys --set train.steps=7 --set monitor.explosion=0.01 --at-step 3
run keys --steps 5
check "keys: the batch doubles from step 3 at the same micro-batch (accumulation 2)" \
    grep -q "^reload v1 at step 2: train.micro_batch 0 -> 16, train.global_batch 32 -> 64" "$tmp/keys.log"
check "... the heartbeat says so" grep -q "global_batch=64" "$tmp/keys/heartbeat"
check "... train.steps 5 -> 7: the run goes to step 7" grep -q "^step=7 " "$tmp/keys.log"
check "... the reloaded explosion threshold fires from step 4" grep -q "^alert step=4 rule=explosion" "$tmp/keys.log"
ask dgc --set dgc.sparsity=0.9 --at-step 2
ask dgc --set dgc.mode=off --at-step 3
run dgc --steps 4 --ranks-per-node 1 --set dgc.mode=on --set dgc.min_numel=1024 --set dgc.sparsity=0.99
check "dgc: density 0.01, 0.01, then 0.1 after the reload of dgc.sparsity ($(field "$tmp/dgc" dgc_density))" \
    test "$(field "$tmp/dgc" dgc_density)" = "0.01 0.01 0.1"
check "... dgc.mode = off: step 4 is dense" grep -q "^reload v2 at step 3: dgc.mode on -> off" "$tmp/dgc.log"

# --- the command's own checks; --wait -------------------------------------------------
run_dir cli
expect "control: a key that cannot change live exits 2 with the reason" 2 \
    "train.micro_batch cannot change while the run lives: the activations are allocated" -- \
    $TRAIN control "$tmp/cli" --set train.micro_batch=8
expect "... an unknown key exits 2 with a suggestion" 2 "did you mean 'optim.lr'" -- $TRAIN control "$tmp/cli" --set optim.lrr=1
expect "... a value out of range exits 2" 2 "optim.lr: '-1' is not a valid float" -- $TRAIN control "$tmp/cli" --set optim.lr=-1
expect "... --undo with --set exits 2" 2 "one of: --set" -- $TRAIN control "$tmp/cli" --undo --set optim.lr=1
expect "... a run directory that does not exist exits 2" 2 "is not a run directory" -- \
    $TRAIN control "$tmp/nowhere" --set optim.lr=1e-3
check "... and none of them wrote a request" test ! -e "$tmp/cli/reload"
expect "--wait without a live run: no answer, exit 1" 1 "no answer to v1 within 0.3 s" -- \
    $TRAIN control "$tmp/cli" --set optim.lr=1e-3 --wait 0.3
run_dir wait
run wait --steps 100000 &
pid=$!
expect "--wait on a live run prints its answer" 0 "# nebula-train: applied at step" -- \
    $TRAIN control "$tmp/wait" --set train.log_interval=1000 --wait 60
pkill -USR2 -f -- "--run-dir $tmp/wait "
wait $pid
rc=$?
check "... the run stops on SIGUSR2 (exit 3, got $rc)" test $rc -eq 3
finish
