#!/usr/bin/env bash
# Untrusted paths and files (docs/training.md, "Elastic control and heartbeat", "Data"):
# nothing a user or another process puts where nebula-train reads or writes may block
# it, be written through, or be half-read:
#   - a FIFO, a directory or binary bytes as RUN_DIR/control: control.rejected naming
#     what it is, the run goes on and exits 0 (a FIFO used to block rank 0 in open()
#     and the other ranks in the control broadcast);
#   - a spent control file whose control.applied name is taken by a directory: still
#     moved out of the way (it used to stay and be applied again at every step);
#   - a FIFO or /dev/zero as --config, data.train or comm.tune_file: exit 2 at once,
#     naming the file;
#   - a NUL byte in a config line: exit 2 naming FILE:LINE (libinih dropped the rest);
#   - RUN_DIR/heartbeat a symbolic link: a clear error, the link's target untouched;
#     links where RUN_DIR/relaunch and its old temporary go: replaced, never followed;
#   - prepare on an empty input: exit 2 naming it, no output files.
# Every run is bounded by `timeout`: a hang fails the test instead of stalling it.
. "$(dirname "$0")/lib.sh"

NT=build/bin/nebula-train
mkfifo "$tmp/fifo"
# A reader blocked in open() on one of the FIFOs (the failure this test catches) is
# released by a writer that comes and goes: opened read-write, never blocking.
unblock() {
    local f
    for f in "$tmp"/fifo "$tmp"/*/control*; do
        if [ -p "$f" ]; then exec 3<>"$f"; exec 3>&-; fi
    done
}
trap 'unblock; rm -rf "$tmp"' EXIT

# run RUN_DIR [ARG...]: 2 ranks of gpt2-tiny on synthetic tokens, 3 steps; output in RUN_DIR.log
run() {
    local dir=$1
    shift
    timeout -k 5 60 $MPIRUN -np 2 $NT --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train=synthetic --set data.val= --set train.steps=3 --set optim.warmup_steps=0 --set train.log_interval=1 \
        --set train.eval_interval=0 --set train.global_batch=8 --set ckpt.every_steps=0 "$@" >"$dir.log" 2>&1 </dev/null
}

# control_case NAME RUN_DIR TEXT: the run exits 0, its log has TEXT, control.rejected is there
control_case() {
    local name=$1 dir=$2 text=$3
    run "$dir"
    local rc=$?
    if [ $rc -eq 0 ] && grep -qF -- "$text" "$dir.log" && grep -qF "control.rejected" "$dir.log" &&
        [ -e "$dir/control.rejected" ] && [ ! -e "$dir/control" ]; then
        echo "ok - $name"
    else
        echo "FAIL - $name: exit $rc"; tail -5 "$dir.log" | sed 's/^/    /'; fails=$((fails + 1))
    fi
}

mkdir -p "$tmp/r-fifo" && mkfifo "$tmp/r-fifo/control"
control_case "a FIFO as RUN_DIR/control is rejected, the run ends normally" "$tmp/r-fifo" "FIFO"
unblock
mkdir -p "$tmp/r-dir/control"
control_case "a directory as RUN_DIR/control is rejected" "$tmp/r-dir" "directory"
mkdir -p "$tmp/r-bin" && printf '\000\001\002garbage\377' >"$tmp/r-bin/control"
control_case "binary bytes as RUN_DIR/control are rejected, not read as an empty file" "$tmp/r-bin" "0x00"
mkdir -p "$tmp/r-long" && { printf 'world=2'; printf '%300s' ''; printf 'x\n'; } >"$tmp/r-long/control"
control_case "a control line too long to read whole is rejected, not cut" "$tmp/r-long" "longer than"

mkdir -p "$tmp/r-busy/control.applied/keep" && printf 'lr_rule=none\n' >"$tmp/r-busy/control"
run "$tmp/r-busy"
rc=$?
check "a spent control file is moved out of the way when control.applied is a directory (exit $rc)" \
    test $rc -eq 0 -a ! -e "$tmp/r-busy/control" -a -e "$tmp/r-busy/control.applied/keep"
[ $rc -eq 0 ] || tail -5 "$tmp/r-busy.log"

for bad in "$tmp/fifo" /dev/zero; do
    expect "--config $bad: exit 2 at once" 2 "not a regular file" -- timeout -k 5 20 $NT --config "$bad"
    expect "data.train = $bad: exit 2 at once" 2 "not a regular file" -- timeout -k 5 30 $MPIRUN -np 1 $NT \
        --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/r-data" --set data.train="$bad" \
        --set data.val= --set train.steps=1 --set optim.warmup_steps=0
    expect "comm.tune_file = $bad: exit 2 at once" 2 "not a regular file" -- timeout -k 5 30 $MPIRUN -np 1 $NT \
        --config configs/train/gpt2-tiny-licenses.ini --run-dir "$tmp/r-data" --set comm.tune_file="$bad" \
        --set data.train=synthetic --set data.val= --set train.steps=1 --set optim.warmup_steps=0
    unblock
done

printf '[train]\nsteps = 3\000 ignored\n' >"$tmp/nul.ini"
expect "a NUL byte in a config line: exit 2 naming FILE:LINE" 2 "$tmp/nul.ini:2: a NUL byte" -- \
    timeout -k 5 20 $NT --config "$tmp/nul.ini"

mkdir -p "$tmp/r-link" && ln -s "$tmp/target" "$tmp/r-link/heartbeat"
run "$tmp/r-link"
rc=$?
check "a symbolic link as RUN_DIR/heartbeat: an error naming it, exit 2 before training" \
    test $rc -eq 2 -a -n "$(grep -E "heartbeat is a symbolic link" "$tmp/r-link.log")"
check "... and the link's target is never created" test ! -e "$tmp/target"

# relaunch: a link where the old writer put its temporary (the atomic writer replaces it,
# never writes through it), then one at the final name (refused before training)
mkdir -p "$tmp/r-relaunch" && ln -s "$tmp/target2" "$tmp/r-relaunch/relaunch.tmp" &&
    printf 'world=1\n' >"$tmp/r-relaunch/control"
run "$tmp/r-relaunch"
rc=$?
check "a link at RUN_DIR/relaunch.tmp: exit 4, a regular relaunch file (exit $rc)" \
    test $rc -eq 4 -a -f "$tmp/r-relaunch/relaunch" -a ! -L "$tmp/r-relaunch/relaunch"
mkdir -p "$tmp/r-relaunch2" && ln -s "$tmp/target3" "$tmp/r-relaunch2/relaunch"
run "$tmp/r-relaunch2"
rc=$?
check "a link at RUN_DIR/relaunch: exit 2 naming it (exit $rc)" \
    test $rc -eq 2 -a -n "$(grep -E "relaunch is a symbolic link" "$tmp/r-relaunch2.log")"
check "... and no link's target is written" test ! -e "$tmp/target2" -a ! -e "$tmp/target3"

# A stop requested during start-up (after the config table, while the 124M model is set
# up) ends the run before its first step: exit 3, no step run, nothing written as a step.
S=$tmp/r-stop
mkdir -p $S
timeout -k 5 60 stdbuf -oL $NT --model gpt2 --run-dir $S --set train.micro_batch=1 \
    --set data.train=synthetic --set train.steps=5 --set ckpt.every_steps=0 >$S.log 2>&1 </dev/null &
pid=$!
for _ in $(seq 200); do grep -q "nebula-train 0" $S.log 2>/dev/null && break; sleep 0.05; done
pkill -USR2 -f -- "^$NT .*--run-dir $S( |$)"  # the trainer itself (timeout would die of it)
wait $pid
rc=$?
check "SIGUSR2 during start-up: exit 3 (got $rc) before the first step, no step run" \
    test $rc -eq 3 -a -n "$(grep -F "stopping before step 1 of 5 on request" $S.log)" -a -z "$(grep -E "^step=" $S.log)"

: >"$tmp/empty.txt"
expect "prepare on an empty input: exit 2 naming it" 2 "the input $tmp/empty.txt is empty" -- \
    timeout -k 5 20 $NT prepare "$tmp/prep" "$tmp/empty.txt"
check "... and writes no token file" test ! -e "$tmp/prep/train.bin"
finish
