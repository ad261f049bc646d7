#!/usr/bin/env bash
# Checkpoint I/O faults (SQLite-style chaos: fault, where, invariant), gpt2-tiny on the
# licence texts, 2 ranks, checkpoints every 10 steps, 30 steps:
#   - the CHAOS build (make chaos: build/chaos/bin/nebula-train) fails the save of step
#     20 at each fault point of NEBULA_CHAOS_FAULT — ckpt.write, ckpt.fsync, ckpt.rename,
#     ckpt.marker — with EIO and with ENOSPC, synchronous writer (every point) and
#     asynchronous (every point; the failure is returned by the next save, step 30's).
#     Invariants: exit 1 within the deadline with no rank left running; the chaos line,
#     an error naming the step-20 path and the errno text, and a HINT naming the last
#     commit (step 10); nothing of step 20 left (no step_20, no .step_*.tmp debris); a
#     relaunch without the fault resumes at step 10 and ends bit-identical to an
#     uninterrupted run (nebula-ckpt diff);
#   - the normal build ignores NEBULA_CHAOS_FAULT (no fault code in it: runs to the end);
#   - a malformed NEBULA_CHAOS_FAULT exits 2 naming the valid values;
#   - a real full disk (root only): a 2 MiB tmpfs as the run directory holds one
#     checkpoint (1.4 MiB) but not two (the older one is pruned only after the newer
#     commits), so the save of step 20 hits ENOSPC: exit 1, the ENOSPC HINT, step 10
#     committed and verified, no debris; sync and async.
. "$(dirname "$0")/lib.sh"
chaos_build_data

# run BIN RUN_DIR [--set ...]: one 30-step run under a 120 s deadline, output in
# RUN_DIR.log; returns its exit code (124: the deadline passed, a hang)
run() {
    local bin=$1 dir=$2
    shift 2
    timeout 120 $MPIRUN -np 2 $bin --config configs/train/gpt2-tiny-licenses.ini --run-dir "$dir" \
        --set data.train="$data/train.bin" --set data.val= --set optim.schedule=constant \
        --set optim.warmup_steps=0 --set train.log_interval=10 --set train.eval_interval=0 \
        --set ckpt.every_steps=10 --set train.global_batch=8 --steps 30 "$@" >"$dir.log" 2>&1 </dev/null
}

has() { grep -qE -- "$2" "$1"; }                          # has LOG REGEX
only_step10() { [ "$(ls -A "$1/ckpt" | tr '\n' ' ')" = "step_00000010 " ]; }
no_rank_left() { ! pgrep -f -- "--run-dir $1( |$)" >/dev/null; }
s30=ckpt/step_00000030

run $TRAIN $tmp/straight
check "uninterrupted 30-step run" test -e $tmp/straight/$s30/COMMITTED

# fault MODE POINT ERRNO: the save of step 20 fails there; then the relaunch
fault() {
    local mode=$1 point=$2 err=$3 d=$tmp/$1-$2-$3 text rc
    text=$([ $err = ENOSPC ] && echo "No space left on device" || echo "Input/output error")
    NEBULA_CHAOS_FAULT=$point:$err@20 run $CHAOS $d --set ckpt.async=$([ $mode = async ] && echo true || echo false)
    rc=$?
    local name="$mode $point:$err@20"
    check "$name: exit 1 (got $rc), no rank left running" eval "[ $rc -eq 1 ] && no_rank_left $d"
    check "$name: the chaos line, an error naming the path and '$text', the HINT" eval \
        "has $d.log 'chaos: injected $err at $point \\(step 20[,)]' &&
         has $d.log 'error: .*$d/ckpt/\\.?step_00000020[^ ]*:? .*$text' &&
         has $d.log 'HINT: .*the last committed checkpoint is step 10 at $d/ckpt/step_00000010' &&
         { [ $err != ENOSPC ] || has $d.log 'HINT: free space there or keep fewer checkpoints'; }"
    check "$name: step 20 not committed, no debris left" only_step10 $d
    run $TRAIN $d --resume auto
    rc=$?
    check "$name: the relaunch resumes at step 10 and ends bit-identical to the uninterrupted run" eval \
        "[ $rc -eq 0 ] && has $d.log 'resumed from .*step_00000010 at step 10' &&
         $CKPT diff $tmp/straight/$s30 $d/$s30 >$d.diff 2>&1"
}
for point in ckpt.write ckpt.fsync ckpt.rename ckpt.marker; do
    for err in EIO ENOSPC; do fault sync $point $err; done
done
fault async ckpt.write EIO
fault async ckpt.write ENOSPC
fault async ckpt.fsync ENOSPC
fault async ckpt.rename EIO
fault async ckpt.rename ENOSPC
fault async ckpt.marker ENOSPC

# The normal build has no fault code: the variable changes nothing.
NEBULA_CHAOS_FAULT=ckpt.write:EIO run $TRAIN $tmp/plain
rc=$?
check "the normal build ignores NEBULA_CHAOS_FAULT (exit $rc, step 30 committed, no chaos line)" eval \
    "[ $rc -eq 0 ] && test -e $tmp/plain/$s30/COMMITTED && ! has $tmp/plain.log 'chaos:'"
check "... and carries no fault code" eval "! grep -q NEBULA_CHAOS_FAULT $TRAIN"
NEBULA_CHAOS_FAULT=ckpt.bogus:EIO run $CHAOS $tmp/bad
rc=$?
check "a malformed NEBULA_CHAOS_FAULT exits 2 (got $rc) naming the valid points" eval \
    "[ $rc -eq 2 ] && has $tmp/bad.log 'NEBULA_CHAOS_FAULT: cannot use .ckpt.bogus:EIO.*ckpt.marker'"

# --- a real full disk -------------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then
    echo "skip - full disk: mounting a tmpfs needs root"
else
    mnt=$tmp/full
    trap 'umount "$mnt" 2>/dev/null; rm -rf "$tmp"' EXIT
    for async in false true; do
        mkdir -p $mnt
        if ! mount -t tmpfs -o size=2m tmpfs $mnt; then
            echo "skip - full disk: cannot mount a tmpfs"
            break
        fi
        run $TRAIN $mnt --set ckpt.async=$async
        rc=$?
        cp $mnt.log $tmp/full-$async.log
        check "full disk (async=$async): exit 1 (got $rc), no rank left running" \
            eval "[ $rc -eq 1 ] && no_rank_left $mnt"
        check "full disk (async=$async): ENOSPC named, with the HINT and the last commit" eval \
            "has $mnt.log 'checkpoint of step 20 failed: No space left on device: $mnt/ckpt has' &&
             has $mnt.log 'HINT: free space there or keep fewer checkpoints .* step 10 at $mnt/ckpt/step_00000010'"
        check "full disk (async=$async): step 10 committed and verified, no debris" eval \
            "only_step10 $mnt && $CKPT verify $mnt/ckpt/step_00000010 >/dev/null"
        umount $mnt
    done
fi
finish
