#!/usr/bin/env bash
# I/O faults of one rank or one file under a running job (gpt2-tiny on the licence texts):
#   - one rank's write error: libc's writes to state.h5 of step 6 fail with EIO on rank 1
#     of 2 alone (validation/cli/eio_preload.c, LD_PRELOAD: under whatever library makes
#     them). The ranks agree on the save's outcome, so the job ends at once, inside a
#     30 s bound although comm.timeout is 300 s (waiting for the failed rank would end
#     it only at the watchdog's deadline): exit 1, the error names rank 1, the file and
#     the errno text; no .step_*.tmp left; step 3 committed, verified, and a relaunch
#     resumes from it. The healthy rank 0 stops writing its slices early, once rank 1's
#     failure is known, not after its whole share: the preload holds rank 0's first
#     slice write until rank 1 has told the others (NEBULA_TEST_HOLD_RANK), and rank 0
#     logs that it stopped after K of its N datasets, K < N;
#   - a data file that shrinks under a running job (truncate -s 4096 once step 5 is
#     committed): train.bin at 1 and 2 ranks, val.bin at 2 ranks. Exit 1 (not a bare
#     SIGBUS, 135), an error naming the file and what happened; the newest committed
#     checkpoint verifies;
#   - a data file every rank refuses at start-up: its reason printed once, exit 2.
. "$(dirname "$0")/lib.sh"
licenses_data
TRAIN=build/bin/nebula-train
CKPT=build/bin/nebula-ckpt

# run RUN_DIR NP BOUND [ARG...]: gpt2-tiny, checkpoints every 3 steps, under `timeout
# BOUND`; output in RUN_DIR.log; returns the exit code (124: past the bound)
run() {
    local dir=$1 np=$2 bound=$3
    shift 3
    timeout "$bound" $MPIRUN -np "$np" "$@" $TRAIN --config configs/train/gpt2-tiny-licenses.ini \
        --run-dir "$dir" --set data.val= --set optim.schedule=constant --set optim.warmup_steps=0 \
        --set train.log_interval=1 --set train.eval_interval=0 --set ckpt.every_steps=3 --set train.global_batch=8 \
        --set comm.timeout=300 $RUN_ARGS >>"$dir.log" 2>&1 </dev/null
}
no_tmp() { ! compgen -G "$1/ckpt/.step_*" >/dev/null; }
newest() { ls -d "$1"/ckpt/step_* 2>/dev/null | while read -r s; do [ -e "$s/COMMITTED" ] && echo "$s"; done | tail -1; }
verifies() { local s; s=$(newest "$1"); [ -n "$s" ] && $CKPT verify "$s" >>"$1.log" 2>&1; }

# --- one rank's write error -------------------------------------------------------------
so=$tmp/eio_preload.so
if ${CC:-cc} -shared -fPIC -O2 -o $so validation/cli/eio_preload.c -ldl; then
    d=$tmp/eio
    RUN_ARGS="--set data.train=$data/train.bin --steps 9" run $d 2 30 -x LD_PRELOAD=$so -x NEBULA_TEST_EIO_RANK=1 \
        -x NEBULA_TEST_EIO_PATH=.step_00000006.tmp/state.h5 -x NEBULA_TEST_HOLD_RANK=0 \
        -x NEBULA_TEST_EIO_SIGNAL=$tmp/eio.signal
    rc=$?
    check "rank 1's EIO writing step 6: exit 1 at once (not 124: the 30 s bound, against comm.timeout = 300 s), got $rc" \
        [ $rc -eq 1 ]
    check "the error names rank 1, the file and the errno" \
        grep -qE "not saved: rank 1: cannot write dataset /[^ ]+ of [^ ]*/\.step_00000006\.tmp/state\.h5: Input/output error" $d.log
    check "no .step_*.tmp left" no_tmp $d
    # "nebula-train[host:0] ...: checkpoint of step 6: stopped writing PATH after K of N datasets: ..."
    early() {
        local kn
        kn=$(sed -nE 's/.*:0\] [a-z]+: checkpoint of step 6: stopped writing [^ ]*\/\.step_00000006\.tmp\/state\.h5 after ([0-9]+) of ([0-9]+) datasets: another rank failed$/\1 \2/p' $d.log)
        echo "    rank 0: stopped after (K N) = (${kn:-none})"
        [ -n "$kn" ] && [ "${kn% *}" -lt "${kn#* }" ]
    }
    check "the healthy rank 0 stopped writing early, after fewer than all of its datasets" early
    step3() { [ "$(basename "$(newest $d)")" = step_00000003 ] && verifies $d; }
    check "step 3 is the newest committed checkpoint and verifies" step3
    RUN_ARGS="--set data.train=$data/train.bin --steps 9 --resume auto" run $d 2 60
    rc=$?
    check "a relaunch resumes from step 3 and ends (exit $rc)" \
        bash -c "[ $rc -eq 0 ] && grep -qE 'resumed from .*step_0*3 at step 3( |$)' $d.log"
else
    echo "FAIL - cannot build validation/cli/eio_preload.c"
    fails=$((fails + 1))
fi

# --- data files that shrink under a running job ------------------------------------------
# shrink NAME NP FILE [ARG...]: a copy of the data, FILE (train.bin or val.bin) cut to 4096
# bytes once step 5 is committed; the verdict goes to $tmp/NAME.out
shrink() {
    local name=$1 np=$2 file=$3 d=$tmp/$1 i rc
    shift 3
    mkdir -p $d.data && cp $data/*.bin $d.data/
    RUN_ARGS="--set data.train=$d.data/train.bin --set ckpt.every_steps=5 --steps 100000 $*" run $d "$np" 60 &
    local job=$!
    for ((i = 0; i < 600; i++)); do
        [ -e $d/ckpt/step_00000005/COMMITTED ] && break
        sleep 0.05
    done
    truncate -s 4096 $d.data/$file
    wait $job
    rc=$?
    {
        [ $rc -eq 1 ] || echo "    exit $rc, expected 1 (135: SIGBUS, 124: no end within 60 s)"
        grep -qE "error: $d.data/$file: the file changed while the run reads it: .* the file has 4096 bytes now" $d.log ||
            echo "    no error naming $file and its new size"
        verifies $d || echo "    the newest committed checkpoint does not verify"
    } >$tmp/$name.why
    if [ -s $tmp/$name.why ]; then
        { echo "FAIL - $name: $file cut to 4096 bytes under a $np-rank run"; cat $tmp/$name.why; grep -E "error" $d.log | head -3 | sed "s/^/    /"; } >$tmp/$name.out
    else
        echo "ok - $name: $file cut to 4096 bytes under a $np-rank run: exit 1 naming it, the last checkpoint verifies" \
            >$tmp/$name.out
    fi
}
shrink train-np1 1 train.bin &
shrink train-np2 2 train.bin &
shrink val-np2 2 val.bin --set data.val=$tmp/val-np2.data/val.bin --set train.eval_interval=1 --set train.eval_batches=60 &
wait
for n in train-np1 train-np2 val-np2; do
    cat $tmp/$n.out
    grep -q "^FAIL" $tmp/$n.out && fails=$((fails + 1))
done

# --- a data file refused at start-up: once, not once per rank ----------------------------
head -c 100 /usr/share/common-licenses/GPL-3 >$tmp/notokens.bin
RUN_ARGS="--set data.train=$tmp/notokens.bin --steps 3" run $tmp/refused 2 60
rc=$?
n=$(grep -c "notokens.bin: not a token file" $tmp/refused.log)
check "a file no rank can read as tokens: exit 2 ($rc), its reason printed once ($n times)" test $rc -eq 2 -a "$n" -eq 1
finish
